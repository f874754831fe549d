"""The jobs a queue worker runs (explorer.queue.protocol.JOBS names them; nothing else runs). Each validates its JSON payload, runs
the same function the server runs locally (the trace, study or measurement spawns its own tinygrad worker process with the usual
limits), reports progress into the RQ job's meta while it runs, and returns JSON: bytes as base64."""
from __future__ import annotations
import dataclasses, os, socket, threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator
from rq import get_current_job
from explorer.queue.protocol import b64
from explorer.settings import Settings
from explorer.spec import ConvSpec, SpecError, Variant

Report = Callable[[str, str, str], None]

DEVICES: list[str] = []  # this worker's devices, best first (explorer.queue.worker sets them): a job that names none runs on the first

def ran_on() -> dict[str, Any]:
  """Which worker ran a job: recorded in every trace and result it returns."""
  job = get_current_job()
  return {"worker": job.worker_name if job is not None else None, "host": socket.gethostname(), "pid": os.getpid()}

@contextmanager
def running() -> Iterator[Report]:
  """The job's progress reporter: each report lands in the RQ job's meta, where the server reads it. A failure's first line lands
  there too (the traceback stays in the worker's log and RQ's failed job)."""
  job = get_current_job()
  if job is None: raise RuntimeError("explorer.queue.jobs run inside an RQ worker")
  lock = threading.Lock()  # run_trace's progress comes from the thread reading its worker's pipe
  def report(stage: str, status: str, detail: str) -> None:
    with lock:
      job.meta.setdefault("progress", []).append([stage, status, detail])
      job.save_meta()
  try: yield report
  except Exception as e:
    with lock:
      job.meta["error"] = (str(e).strip().splitlines() or [type(e).__name__])[0]
      job.save_meta()
    raise

def _validated(spec: dict[str, Any], variant: dict[str, Any]) -> tuple[ConvSpec, Variant]:
  settings = Settings.load()
  s, v = ConvSpec.from_dict(spec), Variant.from_dict(variant)
  s.validate(memory_budget=int(settings.memory_budget_mb) << 20)
  v.validate(max_repeats=int(settings.max_repeats), max_beam=int(settings.max_beam))
  return s, v

def _limits() -> Any:
  from explorer.tracing.workers import Limits
  return Limits.from_settings(Settings.load())

def trace(spec: dict[str, Any], variant: dict[str, Any], timeout_s: float) -> dict[str, Any]:
  """One trace, as the server's JobManager runs it: the trace JSON and its rewrite blobs."""
  from explorer.tracing.run import run_trace
  with running() as report:
    s, v = _validated(spec, variant)
    if v.device is None and DEVICES: v = dataclasses.replace(v, device=DEVICES[0])
    result = run_trace(s, v, progress=report, timeout_s=timeout_s, limits=_limits())
    result.trace.setdefault("env", {})["ran_on"] = ran_on()
    return {"trace": result.trace, "rewrites": b64(result.rewrites), "target_rewrites": {t: b64(b) for t, b in result.target_rewrites.items()}}

def study(kind: str, cases: list[list[Any]], params: dict[str, Any]) -> dict[str, Any]:
  """A whole study (explorer.analysis.study.run_studies) on this worker's device; each variant's trace comes back to be stored."""
  from explorer.analysis.study import DEFAULT_PRESETS, run_studies
  from explorer.store import trace_key
  if kind not in DEFAULT_PRESETS: raise SpecError(f"unknown study {kind!r}")
  with running() as report:
    specs = [(str(name), ConvSpec.from_dict(spec).validate(memory_budget=int(Settings.load().memory_budget_mb) << 20)) for name, spec in cases]
    kept: list[dict[str, Any]] = []
    def keep(spec: ConvSpec, variant: Variant, result: Any) -> str:
      result.trace.setdefault("env", {})["ran_on"] = ran_on()
      kept.append({"spec": spec.to_dict(), "variant": variant.to_dict(), "trace": result.trace, "rewrites": b64(result.rewrites),
                   "target_rewrites": {t: b64(b) for t, b in result.target_rewrites.items()}})
      return trace_key(spec, variant)
    known = {"repeats", "warmup", "tile", "targets", "device", "ci_width", "budget_s", "timeout_s"}
    if unknown := set(params) - known: raise SpecError(f"unknown study parameters: {', '.join(sorted(unknown))}")
    if max(params.get("repeats", 0), params.get("warmup", 0)) > (most := int(Settings.load().max_repeats)):
      raise SpecError(f"repeats and warmup: at most {most} on this worker")
    params = {**params, "targets": tuple(params.get("targets", ("cuda",))), "device": params.get("device") or (DEVICES[0] if DEVICES else None)}
    result = run_studies(kind, specs, progress=report, keep=keep, **params)
    return {"result": {**result, "ran_on": ran_on()}, "traces": kept}

def measure(kind: str, a: dict[str, Any], b: dict[str, Any], repeats: int, warmup: int, timeout_s: float) -> dict[str, Any]:
  """A diff's measurement (interleaved re-timing, or the outputs compared) of two traces' variants, rebuilt from their specs."""
  from explorer.analysis.diff import compare_outputs, remeasure_interleaved
  with running() as report:
    for side in (a, b):
      if side.get("spec") is not None: _validated(side["spec"], side["variant"])
    if kind == "timing": result = remeasure_interleaved(a, b, repeats, warmup, timeout_s, report)
    elif kind == "numerics": result = compare_outputs(a, b, timeout_s, report)
    else: raise SpecError(f"unknown measurement {kind!r}")
    return {**result, "ran_on": ran_on()}
