"""The server's jobs run on queue workers (settings.queue): the same calls as the local ones (run_trace, run_studies, a diff's
measurement) with the same progress and results, through explorer.queue.client. Results come back whole and the server stores them,
so a stored trace is never half-written."""
from __future__ import annotations
from typing import TYPE_CHECKING, Any, Callable, Sequence
from explorer.queue.protocol import unb64
from explorer.spec import ConvSpec, Variant
from explorer.tracing.run import TraceResult
if TYPE_CHECKING: from explorer.queue.client import QueueClient

Progress = Callable[[str, str, str], None]

def _trace_result(out: dict[str, Any]) -> TraceResult:
  return TraceResult(out["trace"], unb64(out["rewrites"]), target_rewrites={t: unb64(b) for t, b in out["target_rewrites"].items()})

def run_trace(client: QueueClient, trace_id: str, spec: ConvSpec, variant: Variant, progress: Progress, timeout_s: float) -> TraceResult:
  """The trace on a worker that offers its device (any worker when it names none)."""
  out = client.run("trace", {"spec": spec.to_dict(), "variant": variant.to_dict(), "timeout_s": timeout_s}, variant.device,
                   f"trace-{trace_id}", progress, timeout_s)
  return _trace_result(out)

def resume_trace(client: QueueClient, trace_id: str, progress: Progress) -> TraceResult:
  """A trace this server had enqueued before it restarted."""
  return _trace_result(client.resume(f"trace-{trace_id}", progress))

def run_study(client: QueueClient, study_id: str, kind: str, cases: Sequence[tuple[str, ConvSpec]], progress: Progress,
              keep: Callable[..., str], params: dict[str, Any]) -> dict:
  """explorer.analysis.study.run_studies on a worker with the study's device; each variant's trace comes back and is kept here."""
  timeout_s = float(params.get("timeout_s", 1800)) * (3 * len(cases) + 1)  # each case: its variants' traces and its timing
  args = {"kind": kind, "cases": [[name, spec.to_dict()] for name, spec in cases], "params": {**params, "targets": list(params.get("targets", ()))}}
  return _study_result(client.run("study", args, params.get("device"), f"study-{study_id}", progress, timeout_s), keep)

def resume_study(client: QueueClient, study_id: str, progress: Progress, keep: Callable[..., str]) -> dict:
  """A study this server had enqueued before it restarted."""
  return _study_result(client.resume(f"study-{study_id}", progress), keep)

def _study_result(out: dict[str, Any], keep: Callable[..., str]) -> dict:
  for t in out["traces"]: keep(ConvSpec.from_dict(t["spec"]), Variant.from_dict(t["variant"]), _trace_result(t))
  result: dict = out["result"]
  return result

def _slim(trace: dict[str, Any]) -> dict[str, Any]:
  """What a measurement rebuilds a trace's variant from (explorer.analysis.diff: spec, variant, device)."""
  return {"spec": trace.get("spec"), "variant": trace.get("variant"), "env": {"device": (trace.get("env") or {}).get("device")}}

def measure(client: QueueClient, job_id: str, kind: str, a: dict, b: dict, repeats: int, warmup: int, timeout_s: float,
            progress: Progress) -> dict:
  """A diff's measurement on a worker with A's device (comparable traces ran on one device)."""
  args = {"kind": kind, "a": _slim(a), "b": _slim(b), "repeats": repeats, "warmup": warmup, "timeout_s": timeout_s}
  out: dict = client.run("measure", args, (a.get("env") or {}).get("device"), job_id, progress, timeout_s)
  return out
