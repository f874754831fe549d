"""Scheduling by hand: one traced kernel through tinygrad's codegen with opts a user picked (tinygrad's Opt(op, axis, arg), applied by
its own apply_opts as a KernelInfo's opts_to_apply), for any target. The result is a target record like a trace's own (name, opts,
dims, linear UOps, Estimates, passes, source, line map, pressure, compile facts), the opts tinygrad would let BEAM try next, the
kernel's axes as apply_opt numbers them (before the opts and after them), and, on the trace's own device, the kernel's time measured
interleaved with its original opts. Run in a worker (it imports tinygrad)."""
from __future__ import annotations
import os
from typing import TYPE_CHECKING, Any
from explorer.stages import Progress

if TYPE_CHECKING:
  from explorer.schema import TraceRecord  # types only: pydantic stays out of trace workers

class Unschedulable(ValueError):
  """This kernel cannot be scheduled again here (no AST recorded, no record on the target to start from, a user's rewrite file)."""

WARMUP, REPEATS = 3, 30  # the interleaved timing: warm-up runs, then timed pairs (original, hand-scheduled; every other pair reversed)

def opts_args(trace: TraceRecord, n: int, target: str, start: str, opts: tuple[str, ...], on_device: bool = True) -> dict[str, Any]:
  """What opts_in_worker needs for kernel n of this trace (but the rewrite blob); on the trace's own target, with on_device (this
  process can open the trace's device), it is timed too. Unschedulable says why it cannot be."""
  from explorer.schema import host_target, target_records
  from explorer.spec import Variant, opt_label
  from explorer.targets import TARGETS
  if target not in TARGETS: raise Unschedulable(f"unknown target {target!r}; known: {', '.join(TARGETS)}")
  kernel = next((k for k in trace.get("kernels") or [] if k.get("index") == n), None)
  if kernel is None or kernel.get("ast_sink") is None: raise Unschedulable(f"kernel {n} has no AST recorded to schedule again")
  variant = trace.get("variant") or {}
  if variant.get("rewrite_file"): raise Unschedulable("this trace ran a user's rewrite file, which a hand schedule does not run")
  from explorer.tinygrads import TINYGRAD
  from explorer.tracing import versions
  if (older := versions.recorded(trace)) is not None:
    raise Unschedulable(f"hand schedules on a trace of tinygrad {older} are not built yet: trace it on tinygrad {TINYGRAD} to schedule it")
  rec: dict[str, Any] = dict(target_records(kernel).get(target) or {})
  if "opts" not in rec and start == "current": raise Unschedulable(f"kernel {n} has no {target} record to start from: compute that target first")
  own = target == host_target(kernel) and on_device
  device = str((trace.get("env") or {}).get("device") or "") or None
  # the original's compile facts, where the trace has none yet (an enrichment computes them on first view): the panel puts its
  # registers beside the hand schedule's
  original = {"source": rec["source"], "local_size": rec.get("local_size")} if rec.get("source") and not rec.get("compile") else None
  return {"sink": kernel["ast_sink"], "target": target, "arch": rec.get("arch") or Variant.from_dict(variant).arch(target),
          "device": device if own else None, "current": [opt_label(o) for o in rec.get("opts") or []], "opts": list(opts),
          "start": start, "time": own and device is not None, "rewrites": list(variant.get("rewrites") or []), "original_record": original}

def schedule(trace: TraceRecord, blob: bytes, n: int, target: str, opts: tuple[str, ...], start: str = "current", time: bool = True,
             progress: Progress | None = None, timeout_s: float | None = None) -> dict[str, Any]:
  """Kernel n of a trace (its rewrite blob beside it) scheduled by hand, in a worker: explorer.web.http.models.HandSchedule's fields.
  Raises Unschedulable, or WorkerFailed (OptRefused: tinygrad's reason in its message) when an opt does not apply."""
  from explorer.tracing.workers.process import call_in_worker
  args = opts_args(trace, n, target, start, opts)
  args["time"] = args["time"] and time
  got, _ = call_in_worker("explorer.tracing.enrichments.handopts:opts_in_worker", {**args, "blob": blob}, progress, timeout_s,
                          exclusive=args["device"] if args["time"] else None)
  return dict(got)

def opts_in_worker(progress: Progress, blob: bytes, sink: int, target: str, arch: str, device: str | None, current: list[str],
                   opts: list[str], start: str = "current", time: bool = False, rewrites: list[str] | None = None,
                   original_record: dict[str, Any] | None = None) -> dict[str, Any]:
  """The kernel (its AST rebuilt from the trace's rewrite blob) with opts = the start's opts (the kernel's current ones on this target,
  none, or the heuristic's) then `opts`, on `target`. device: the trace's device when target is its own (then it can run), else None.
  Raises OptRefused (tinygrad's reason) for an opt that does not apply."""
  from explorer.tracing.pipeline.renders import BEAM_NOTE, make_target_record, pass_record, tracking_passes
  os.environ.update(tracking_passes(os.environ))  # the passes are recorded, as a trace's renders record them
  from explorer.tracing import tg
  from explorer.tracing.compilers import toolchain
  ast, _ = tg.without_beam(tg.RewriteBlob(blob).sink(sink))
  renderer = tg.host_renderer(device) if device is not None else tg.render_target(target, arch)
  original = [tg.parse_opt(o) for o in current]
  base = original if start == "current" else [] if start == "none" else tg.heuristic_opts(ast, renderer)
  chosen = [*base, *(tg.parse_opt(o) for o in opts)]
  tg.check_opts(ast, renderer, chosen)  # OptRefused before any codegen
  progress("codegen", "start", f"{len(chosen)} opts on {target}")
  mark = tg.tracking_mark()
  with tg.disable_gc(): prg = tg.codegen_deviceless(tg.with_opts(ast, chosen), renderer)  # as Tensor.realize runs codegen: collector off
  ps = [p for _, group in tg.passes_since(mark, mark) for p in group]
  rec = make_target_record(tg.program_facts(prg, tg.renderer_device(renderer)), [pass_record(p) for p in ps], arch, [])
  rec.update(tg.program_analysis(prg, renderer, tg.LiveLog(mark), ps))
  rec["notes"] = [n for n in rec["notes"] if n != BEAM_NOTE] + [f"scheduled by hand: {', '.join(map(tg.opt_text, chosen)) or 'no opts'}"]
  if rewrites: rec["notes"].append(f"the trace's custom rewrites ({', '.join(rewrites)}) are not applied here, nor to the original it is timed with")
  if target == "ptx": rec["compiled_source"] = tg.fill_ptx(rec["source"], arch)
  progress("compile", "start", f"compile facts on {target}")
  facts: Any = toolchain.compile_target(target, rec["source"], arch, toolchain.block_threads(rec["local_size"]), rec.get("compiled_source"))
  rec["compile"] = facts
  original_compile = None if original_record is None else toolchain.compile_target(  # the original's facts, compiled the same way
    target, (src := original_record["source"]), arch, toolchain.block_threads(original_record["local_size"]),
    tg.fill_ptx(src, arch) if target == "ptx" else None)
  out: dict[str, Any] = {"target": target, "start": start, "opts": [tg.opt_text(o) for o in chosen], "record": rec,
                         "next": [tg.opt_text(o) for o in tg.legal_opts(ast, renderer, chosen)], "timing": None,
                         "axes": tg.kernel_axes(ast, renderer), "axes_after": tg.kernel_axes(ast, renderer, chosen),
                         "original_compile": original_compile}
  if time and device is not None:
    progress("timing", "start", f"the original and this schedule on {device}, interleaved: {WARMUP} warm-up + {REPEATS} pairs")
    out["timing"] = _interleaved(ast, renderer, device, original, chosen)
    out["check"] = _same_outputs(ast, renderer, device, original, chosen)
  return out

def _same_outputs(ast: Any, renderer: Any, device: str, original: list[Any], chosen: list[Any]) -> dict[str, Any] | None:
  """The original and the hand schedule run once over the same seeded inputs: does the schedule compute what the kernel computes?"""
  import numpy as np
  from explorer.tracing import tg
  got = tg.kernel_outputs([tg.with_opts(ast, original), tg.with_opts(ast, chosen)], renderer, device)
  if got is None: return None
  a, b = (np.concatenate([x.astype(np.float64).ravel() for x in side]) if side else np.zeros(0) for side in got)
  diff = float(np.max(np.abs(a - b))) if a.size else 0.0
  return {"values": int(a.size), "max_abs_diff": diff, "same": bool(np.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True))}

def _interleaved(ast: Any, renderer: Any, device: str, original: list[Any], chosen: list[Any]) -> dict[str, Any]:
  """Original (A) and hand-scheduled (B) timed in pairs on the device by its clock (tg.clock_for), every other pair in reverse order:
  each side's timing record and B/A's median and interval. The original here is measured in this run, beside the new schedule, not
  taken from the trace (whose time was measured alone, at another moment)."""
  from explorer import stats
  from explorer.clocks import timed
  from explorer.tracing import tg
  a, b = tg.kernel_runnables([tg.with_opts(ast, original), tg.with_opts(ast, chosen)], renderer, device)
  clock = tg.clock_for(device)
  try:
    for _ in range(WARMUP): clock.kernel(a), clock.kernel(b)
    ta, tb = [], []
    for i in range(REPEATS):
      if i % 2: tb.append(clock.kernel(b)); ta.append(clock.kernel(a))
      else: ta.append(clock.kernel(a)); tb.append(clock.kernel(b))
  finally: clock.close()
  a_s, b_s = timed(ta, clock.method, clock.l2), timed(tb, clock.method, clock.l2)
  return {"device": device, "repeats": REPEATS, "method": clock.method, "notice": clock.notice, "a_median_s": a_s["median"],
          "b_median_s": b_s["median"], "a_s": a_s, "b_s": b_s, **stats.median_ratio(ta, tb), "a_samples": ta, "b_samples": tb}
