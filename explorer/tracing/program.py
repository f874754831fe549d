"""Any tinygrad program, traced: every Tensor.realize with something to compute inside `Capturing` goes through the same pipeline as a
convolution (tensor graph, schedule, kernel graph, codegen with the other targets rendered beside it, run, timing if asked) and
becomes a trace of the same schema. What is convolution-only stays out: kernels get data-flow roles ("reduce", "elementwise"),
and outputs are checked only against a reference the user passes.

Used by the Python API (explorer.api.capture, in the user's own process) and by `kernel-explorer trace --script` (in a worker)."""
from __future__ import annotations
import inspect
from typing import Any, Callable, Sequence
import numpy as np
from explorer.tracing import adapter as tg  # first: sets tinygrad's tracking environment before tinygrad is imported
from explorer.tracing.reference import error_stats
from explorer.tracing.trace import Program, Progress, _quiet, new_trace, pipeline, record
from explorer.spec import Variant

NOT_TRACKING = ("tinygrad was imported before the explorer with rewrite tracking off, so its passes' matches cannot be recorded "
                "(tinygrad chooses its tracking at import). Restart the interpreter (the notebook's kernel) and import the explorer "
                "first (from explorer.api import capture), or set TRACK_MATCH_STATS=2 in the environment before starting it.")

class CaptureUnavailable(RuntimeError):
  """This process cannot record rewrites (tinygrad was imported without tracking): the message says what to do."""

def kernel_role(s: dict, buffers: list[dict], call: Any) -> str:
  """What a program's kernel does, from what it is: a reduction or elementwise work, and whether it writes an output."""
  kind = "reduce" if tg.has_reduce(call.ast) else "elementwise"
  return kind + ("+out" if any(buffers[i]["role"] == "output" for i in s["writes"]) else "")

def reference_check(reference: Sequence[np.ndarray], rel_tolerance: float) -> Callable[[dict, list[np.ndarray]], None]:
  """The outputs against the user's reference arrays, in order: the largest error over all of them, judged against rel_tolerance."""
  def check(trace: dict, got: list[np.ndarray]) -> None:
    if len(got) != len(reference): raise ValueError(f"the program realized {len(got)} tensor(s) but {len(reference)} reference array(s) were given")
    stats = [error_stats(g.astype(np.float64), np.asarray(r, dtype=np.float64)) for g, r in zip(got, reference)]
    worst = max(stats, key=lambda e: e["max_rel"])
    trace["error"] = {**worst, "tolerance": rel_tolerance, "tolerance_for": "the user's reference", "within": worst["max_rel"] <= rel_tolerance}
  return check

def trace_outputs(outs: list[Any], name: str, variant: Variant, progress: Progress = _quiet, source: str | None = None,
                  reference: Sequence[np.ndarray] | None = None, rel_tolerance: float = 1e-5,
                  origin: dict[str, Any] | None = None, analysis: bool = False) -> tuple[dict, bytes, dict[str, bytes]]:
  """Trace the realize of `outs` (tensors whose graphs are built, not yet realized). origin: how the program ran, for its reproducer
  ({"kind": "script", "fn": NAME or None} or {"kind": "capture", "line": the with statement's line in `source`})."""
  if not tg.tracking_possible(): raise CaptureUnavailable(NOT_TRACKING)
  devices = {tg.tensor_device(o) for o in outs}
  if len(devices) != 1: raise ValueError(f"the realized tensors live on {len(devices)} devices ({', '.join(sorted(devices))}): trace one at a time")
  device = devices.pop()
  info = {"name": name, "source": source, "origin": origin, "outputs": [{"shape": list(o.shape), "dtype": str(o.dtype)} for o in outs]}
  trace = new_trace(None, variant, device, info)
  roles = lambda: {tg.buffer_key(tg.tensor_buffer(o)): "output" for o in outs}
  check = reference_check(reference, rel_tolerance) if reference is not None else None
  def stages(rec, base, pool, blobs) -> None:  # the graph exists already: the user's code built it
    with tg.opt_context(variant.opt): pipeline(rec, Program(outs, roles, kernel_role, check), variant, device, base, pool, blobs)
  return record(trace, variant, device, progress, stages, analysis)

class Capturing:
  """Record every realize inside the block: `results` gets one (trace, blob, target blobs) per realize that computed something."""
  def __init__(self, name: str, variant: Variant, progress: Progress = _quiet, source: str | None = None,
               reference: Sequence[np.ndarray] | None = None, rel_tolerance: float = 1e-5, origin: dict[str, Any] | None = None,
               analysis: bool = False):
    self.name, self.variant, self.progress, self.source, self.origin, self.analysis = name, variant, progress, source, origin, analysis
    self.reference, self.rel_tolerance = reference, rel_tolerance
    self.results: list[tuple[dict, bytes, dict[str, bytes]]] = []
    self._hook: Any = None

  def _on_realize(self, outs: list[Any]) -> None:
    n = len(self.results)
    name = self.name if n == 0 else f"{self.name} (realize {n + 1})"
    self.results.append(trace_outputs(outs, name, self.variant, self.progress, self.source, self.reference, self.rel_tolerance, self.origin,
                                      self.analysis))
    trace = self.results[-1][0]
    if "run" not in trace["stage_seconds"]:  # scheduled (the tensors now name their buffers) but never run: say so, never read zeros
      f = (trace["failures"] or [{"stage": "?", "error": "unknown"}])[0]
      raise RuntimeError(f"tracing {name} failed at stage {f['stage']} ({f['error']}), before the program ran: its tensors hold no values")

  def __enter__(self) -> Capturing:
    if not tg.tracking_possible(): raise CaptureUnavailable(NOT_TRACKING)
    self._hook = tg.on_realize(self._on_realize)
    self._hook.__enter__()
    return self

  def __exit__(self, *exc: Any) -> None: self._hook.__exit__(*exc)

def script_in_worker(progress: Progress, path: str, fn: str | None, variant: dict,
                     analysis: bool = False) -> list[tuple[dict, bytes, dict[str, bytes]]]:
  """`kernel-explorer trace --script PATH [--fn NAME]`: run the script (as __main__ without --fn; else run it as a module and call
  NAME()) with every realize recorded. It runs in a namespace of its own, sys.modules untouched: the render processes this worker
  spawns must not import the script again (multiprocessing's spawn imports the __main__ module it finds there)."""
  source = open(path).read()
  code = compile(source, path, "exec")
  namespace: dict[str, Any] = {"__name__": "__main__" if fn is None else "explorer_script", "__file__": path, "__builtins__": __builtins__}
  with Capturing(fn or path.rsplit("/", 1)[-1], Variant.from_dict(variant), progress, source, origin={"kind": "script", "fn": fn},
                 analysis=analysis) as cap:
    exec(code, namespace)  # noqa: S102 - the user's own script, from the command line only (the server never runs user code)
    if fn is not None:
      if not callable(target := namespace.get(fn)): raise ValueError(f"{path} defines no function {fn!r}")
      if inspect.signature(target).parameters: raise ValueError(f"{fn}() must take no arguments (it is called as {fn}())")
      target()
  if not cap.results: raise ValueError(f"{path} realized nothing: call .realize() (or .numpy()) on the tensors to trace")
  return cap.results
