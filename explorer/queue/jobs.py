"""The jobs a queue worker runs (explorer.queue.protocol.JOBS names them; nothing else runs). Each validates its JSON payload, runs
the same function the server runs locally (the trace, study or measurement spawns its own tinygrad worker process with the usual
limits), reports progress into the RQ job's meta while it runs, and returns JSON: bytes as base64."""
from __future__ import annotations
import dataclasses
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from rq import get_current_job
from explorer.queue.protocol import b64, seal
from explorer.settings import Settings
from explorer.spec import COMPUTE_DEVICES, TILES, ConvSpec, SpecError, Variant, checked_device, resolve_request
from explorer.stages import Progress
from explorer.text import one_line
from explorer.tinygrads import tinygrad_problem

DEVICES: list[str] = []  # this worker's devices, best first (explorer.queue.worker sets them): a job that names none runs on the first

def worker_name() -> str | None:
  """The name of the worker running this job: every trace and result a job returns records it (explorer.tracing.pipeline.run.ran_here)."""
  job = get_current_job()
  return job.worker_name if job is not None else None

@contextmanager
def running() -> Iterator[Progress]:
  """The job's progress reporter: each report lands in the RQ job's meta, where the server reads it. A failure's first line lands
  there too (the traceback stays in the worker's log and RQ's failed job)."""
  job = get_current_job()
  if job is None: raise RuntimeError("explorer.queue.jobs run inside an RQ worker")
  lock = threading.Lock()  # run_trace's progress comes from the thread reading its worker's pipe
  def report(stage: str, status: str, detail: str) -> None:
    with lock:
      job.meta.setdefault("progress", []).append([stage, status, detail])
      job.save_meta()  # type: ignore[no-untyped-call]  # (RQ's Job is untyped)
  try: yield report
  except Exception as e:
    with lock:
      job.meta["error"] = one_line(e)
      job.save_meta()  # type: ignore[no-untyped-call]  # (RQ's Job is untyped)
    raise

# a study's bounds beside Variant's, as the server's StudyRequest declares them (a test checks they agree); repeats and warmup are
# capped by max_repeats too, and ci_width is above 0 (or null: exactly `repeats`)
STUDY_BOUNDS: dict[str, tuple[float, float]] = {"repeats": (3, 1000), "warmup": (0, 100), "budget_s": (1, 3600), "ci_width": (0, 1)}
STUDY_PARAMS = ("repeats", "warmup", "tile", "targets", "device", "ci_width", "budget_s", "timeout_s")
STUDY_OPTIONAL = ("tinygrad",)  # an older tinygrad the study runs on (made on this worker's host on first use); absent: the worker's own
MAX_CASES = 16  # 8 presets and 8 shapes (StudyRequest)

def _within(name: str, value: Any, least: float, most: float, above: bool = False) -> float:
  """value, a number in [least, most] ((least, most] with above), else SpecError naming the bounds."""
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not (least < value if above else least <= value) or not value <= most:
    raise SpecError(f"{name} must be a number in {'(' if above else '['}{least:g}, {most:g}] on this worker, got {value!r}")
  return float(value)

def _timeout(value: Any, extra_s: float = 0.0) -> float:
  """A job's timeout_s: at most this worker's trace_timeout_s (plus a study's budget_s), as the server's own limit is."""
  return _within("timeout_s", value, 0, float(Settings.load().trace_timeout_s) + extra_s, above=True)

def _offered() -> list[str]: return [d.split(":")[0] for d in DEVICES] or list(COMPUTE_DEVICES)

def _device(device: Any) -> str | None:
  """A job's device: None, or one this worker offers (CUDA:1 for CUDA), in its normal form."""
  return None if device is None else checked_device(device, _offered(), "device", "worker")

def _validated(spec: dict[str, Any], variant: dict[str, Any]) -> tuple[ConvSpec, Variant]:
  """Spec and variant as the server validates a request: this worker's limits and devices, and no user code."""
  settings = Settings.load()
  if not isinstance(spec, dict) or not isinstance(variant, dict): raise SpecError("spec and variant must be JSON objects")
  s, v = ConvSpec.from_dict(spec), Variant.from_dict(variant)
  if v.rewrite_file is not None: raise SpecError("variant.rewrite_file runs user code, which a worker never does (it is the CLI's alone)")
  s, v, _ = resolve_request(s, v, settings, _offered(), "device", "worker")
  return s, v

def _study_params(params: Any) -> dict[str, Any]:
  """A study's parameters, bounded as the server bounds them: repeats, warmup, tile and targets through Variant's validation, then
  STUDY_BOUNDS, the timeout and the device."""
  if not isinstance(params, dict) or not set(STUDY_PARAMS) <= set(params) <= {*STUDY_PARAMS, *STUDY_OPTIONAL}:
    raise SpecError(f"study parameters: {', '.join(STUDY_PARAMS)} and optionally {', '.join(STUDY_OPTIONAL)}, "
                    f"got {sorted(params) if isinstance(params, dict) else params!r}")
  if "tinygrad" in params and (problem := tinygrad_problem(params["tinygrad"])) is not None: raise SpecError(problem)
  if not isinstance(params["targets"], list): raise SpecError(f"targets must be a list of target names, got {params['targets']!r}")
  most, b = int(Settings.load().max_repeats), STUDY_BOUNDS
  Variant(algo="winograd", wino_impl="explorer", tile=params["tile"] or TILES[0], targets=tuple(params["targets"]), warmup=params["warmup"],
          repeats=params["repeats"]).validate(max_repeats=most)
  _within("repeats", params["repeats"], b["repeats"][0], min(b["repeats"][1], most))
  _within("warmup", params["warmup"], b["warmup"][0], min(b["warmup"][1], most))
  if params["ci_width"] is not None: _within("ci_width", params["ci_width"], *b["ci_width"], above=True)
  _timeout(params["timeout_s"], _within("budget_s", params["budget_s"], *b["budget_s"]))
  return {**params, "targets": tuple(params["targets"]), "device": _device(params["device"]) or (DEVICES[0] if DEVICES else None)}

def _limits() -> Any:
  from explorer.tracing.workers.process import Limits
  return Limits.from_settings(Settings.load())

def trace(spec: dict[str, Any], variant: dict[str, Any], timeout_s: float) -> dict[str, Any]:
  """One trace, as the server's JobManager runs it: the trace JSON and its rewrite blobs."""
  from explorer.tracing.pipeline.run import record_ran_on, run_trace
  with running() as report:
    s, v = _validated(spec, variant)
    if v.device is None and DEVICES: v = dataclasses.replace(v, device=DEVICES[0])
    result = run_trace(s, v, progress=report, timeout_s=_timeout(timeout_s), limits=_limits())
    record_ran_on(result.trace, worker_name())
    return seal({"trace": result.trace, "rewrites": b64(result.rewrites), "target_rewrites": {t: b64(b) for t, b in result.target_rewrites.items()}},
                Settings.load().queue_secret)

def study(kind: str, cases: list[list[Any]], params: dict[str, Any]) -> dict[str, Any]:
  """A whole study (explorer.analysis.study.run_studies) on this worker's device; each variant's trace comes back to be stored."""
  from explorer.analysis.study import DEFAULT_PRESETS, run_studies
  from explorer.store import trace_key
  from explorer.tracing.pipeline.run import ran_here, record_ran_on
  with running() as report:
    if kind not in DEFAULT_PRESETS: raise SpecError(f"unknown study {kind!r}")
    if not isinstance(cases, list) or not 1 <= len(cases) <= MAX_CASES: raise SpecError(f"a study has 1 to {MAX_CASES} cases")
    specs = [(str(name), ConvSpec.from_dict(spec).validate(memory_budget=int(Settings.load().memory_budget_mb) << 20)) for name, spec in cases]
    params = _study_params(params)
    kept: list[dict[str, Any]] = []
    def keep(spec: ConvSpec, variant: Variant, result: Any) -> str:
      record_ran_on(result.trace, worker_name())
      kept.append({"spec": spec.to_dict(), "variant": variant.to_dict(), "trace": result.trace, "rewrites": b64(result.rewrites),
                   "target_rewrites": {t: b64(b) for t, b in result.target_rewrites.items()}})
      return trace_key(spec, variant)
    result = run_studies(kind, specs, progress=report, keep=keep, **params)
    return seal({"result": {**result, "ran_on": ran_here(worker_name())}, "traces": kept}, Settings.load().queue_secret)

def measure(kind: str, a: dict[str, Any], b: dict[str, Any], repeats: int, warmup: int, timeout_s: float) -> dict[str, Any]:
  """A diff's measurement (interleaved re-timing, or the outputs compared) of two traces' variants, rebuilt from their specs."""
  from explorer.analysis.diff import compare_outputs, remeasure_interleaved
  from explorer.tracing.pipeline.run import ran_here
  with running() as report:
    if kind not in ("timing", "numerics"): raise SpecError(f"unknown measurement {kind!r}")
    Variant(warmup=warmup, repeats=repeats).validate(max_repeats=int(Settings.load().max_repeats))
    timeout_s = _timeout(timeout_s)
    for side in (a, b):
      if not isinstance(side, dict) or not isinstance(side.get("env"), dict): raise SpecError("a and b must be traces (spec, variant, env)")
      _device(side["env"].get("device"))
      if side.get("spec") is not None: _validated(side["spec"], side["variant"])
    result = remeasure_interleaved(a, b, repeats, warmup, timeout_s, report) if kind == "timing" else compare_outputs(a, b, timeout_s, report)
    return seal({**result, "ran_on": ran_here(worker_name())}, Settings.load().queue_secret)
