"""The server's jobs run on queue workers (settings.queue): the same calls as the local ones (run_trace, run_studies, a diff's
measurement) with the same progress and results, through explorer.queue.client. Results come back whole and are checked before the
server keeps anything (explorer.queue.protocol: signed where the queue has a secret, the trace against its schema, rewrite blobs as
data, and the computation the one that was asked for), so a stored trace is never half-written and never a worker's invention."""
from __future__ import annotations
import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any
from explorer.queue.protocol import QueueUnavailable, ResultRefused, plain_json, trace_result
from explorer.schema import TraceRecord, study_problem
from explorer.spec import ConvSpec, SpecError, Variant
from explorer.stages import Progress
from explorer.tracing.pipeline.run import TraceResult
from explorer.web.services.lifecycle import Busy

if TYPE_CHECKING:
  from explorer.queue.client import QueueClient


class QueueDown(Busy):
  """The job queue's broker does not answer: nothing can be handed to its workers now (503, try again shortly)."""

async def queue_answers(client: QueueClient | None) -> None:
  """Before work is accepted for the queue: QueueDown unless its broker answers (no queue: nothing to ask)."""
  if client is None: return
  try: await asyncio.to_thread(client.ping)
  except QueueUnavailable as e: raise QueueDown(str(e)) from None

def _same_computation(trace: TraceRecord, spec: ConvSpec, variant: Variant) -> None:
  """The trace is of the asked spec and variant (the worker may fill in its device and a fallback's note), else ResultRefused."""
  try: asked = variant.resolve(spec)
  except SpecError: asked = variant
  got = Variant.from_dict(trace["variant"])
  def comparable(v: Variant) -> dict[str, Any]: return {k: x for k, x in v.to_dict().items() if k not in ("device", "notes")}
  if trace["spec"] != spec.to_dict() or comparable(got) != comparable(asked) or (variant.device is not None and got.device != variant.device):
    raise ResultRefused(f"the worker answered with a trace of {trace['label'][:200]!r}, not of the {spec.label()} | {variant.label()} asked for: "
                        "refused, nothing kept")

def _trace_result(client: QueueClient, out: Any, spec: ConvSpec | None = None, variant: Variant | None = None) -> TraceResult:
  trace, blob, blobs = trace_result(out, client.max_result_bytes)
  if spec is not None and variant is not None: _same_computation(trace, spec, variant)
  return TraceResult(trace, blob, target_rewrites=blobs)

def run_trace(client: QueueClient, trace_id: str, spec: ConvSpec, variant: Variant, progress: Progress, timeout_s: float) -> TraceResult:
  """The trace on a worker that offers its device (any worker when it names none)."""
  out = client.run("trace", {"spec": spec.to_dict(), "variant": variant.to_dict(), "timeout_s": timeout_s}, variant.device,
                   f"trace-{trace_id}", progress, timeout_s)
  return _trace_result(client, out, spec, variant)

def resume_trace(client: QueueClient, trace_id: str, progress: Progress, spec: ConvSpec | None = None,
                 variant: Variant | None = None) -> TraceResult:
  """A trace this server had enqueued before it restarted (spec and variant: its stored request, which the result must match)."""
  return _trace_result(client, client.resume(f"trace-{trace_id}", progress), spec, variant)

def run_study(client: QueueClient, study_id: str, kind: str, cases: Sequence[tuple[str, ConvSpec]], progress: Progress,
              keep: Callable[..., str], params: dict[str, Any]) -> dict[str, Any]:
  """explorer.analysis.study.run_studies on a worker with the study's device; each variant's trace comes back and is kept here."""
  timeout_s = float(params.get("timeout_s", 1800)) * (3 * len(cases) + 1)  # each case: its variants' traces and its timing
  args = {"kind": kind, "cases": [[name, spec.to_dict()] for name, spec in cases], "params": {**params, "targets": list(params.get("targets", ()))}}
  return _study_result(client, client.run("study", args, params.get("device"), f"study-{study_id}", progress, timeout_s), keep, kind,
                       [spec for _, spec in cases])

def resume_study(client: QueueClient, study_id: str, progress: Progress, keep: Callable[..., str], kind: str | None = None,
                 specs: Sequence[ConvSpec] | None = None) -> dict[str, Any]:
  """A study this server had enqueued before it restarted."""
  return _study_result(client, client.resume(f"study-{study_id}", progress), keep, kind, specs)

STUDY_TRACE_KEYS = {"spec", "variant", "trace", "rewrites", "target_rewrites"}

def _study_result(client: QueueClient, out: Any, keep: Callable[..., str], kind: str | None, specs: Sequence[ConvSpec] | None) -> dict[str, Any]:
  """Every variant's trace checked (as a trace job's result, and of one of the study's cases) before any is kept; then the table."""
  if not isinstance(out, dict) or set(out) != {"result", "traces"} or not isinstance(out["traces"], list):
    raise ResultRefused("the worker's result is not a study's result (result, traces): refused, nothing kept")
  result: dict[str, Any] = plain_json(out["result"], "the worker's study result")
  if (problem := study_problem(result)) is not None or (kind is not None and result.get("study") != kind):
    raise ResultRefused(f"the worker's study result is not a {kind or 'study'} study's table ({problem or 'another kind'}): refused, nothing kept")
  checked = []
  for t in out["traces"]:
    if not isinstance(t, dict) or set(t) != STUDY_TRACE_KEYS:
      raise ResultRefused("a trace of the worker's study result is malformed: refused, nothing kept")
    res = _trace_result(client, {k: t[k] for k in ("trace", "rewrites", "target_rewrites")})
    try: spec, variant = ConvSpec.from_dict(res.trace["spec"] or {}), Variant.from_dict(res.trace["variant"])
    except (SpecError, TypeError) as e: raise ResultRefused(f"a trace of the worker's study result: {e}") from None
    if specs is not None and spec not in specs: raise ResultRefused(f"the worker's study traced {spec.label()}, which is not one of its cases")
    checked.append((spec, variant, res))
  for spec, variant, res in checked: keep(spec, variant, res)
  return result

def _slim(trace: TraceRecord) -> dict[str, Any]:
  """What a measurement rebuilds a trace's variant from (explorer.analysis.diff: spec, variant, device)."""
  return {"spec": trace["spec"], "variant": trace["variant"], "env": {"device": trace["env"]["device"]}}

def measure(client: QueueClient, job_id: str, kind: str, a: TraceRecord, b: TraceRecord, repeats: int, warmup: int, timeout_s: float,
            progress: Progress) -> dict[str, Any]:
  """A diff's measurement on a worker with A's device (comparable traces ran on one device)."""
  args = {"kind": kind, "a": _slim(a), "b": _slim(b), "repeats": repeats, "warmup": warmup, "timeout_s": timeout_s}
  out = plain_json(client.run("measure", args, a["env"]["device"], job_id, progress, timeout_s), "the worker's measurement")
  if not isinstance(out, dict) or not isinstance(out.get("compared"), bool) or not isinstance(out.get("ran_on"), dict):
    raise ResultRefused("the worker's result is not a measurement (compared, ran_on, ...): refused, nothing kept")
  return out
