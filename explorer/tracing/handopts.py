"""Scheduling by hand: one traced kernel through tinygrad's codegen with opts a user picked (tinygrad's Opt(op, axis, arg), applied by
its own apply_opts as a KernelInfo's opts_to_apply), for any target. The result is a target record like a trace's own (name, opts,
dims, linear UOps, Estimates, passes, source, line map, pressure, compile facts), the opts tinygrad would let BEAM try next, and, on
the trace's own device, the kernel's time measured interleaved with its original opts. Run in a worker (it imports tinygrad)."""
from __future__ import annotations
import os
from typing import Any
from explorer.tracing.workers import Progress

WARMUP, REPEATS = 3, 30  # the interleaved timing: warm-up runs, then timed pairs (original, hand-scheduled; every other pair reversed)

def opts_in_worker(progress: Progress, blob: bytes, sink: int, target: str, arch: str, device: str | None, current: list[str],
                   opts: list[str], start: str = "current", time: bool = False) -> dict[str, Any]:
  """The kernel (its AST rebuilt from the trace's rewrite blob) with opts = the start's opts (the kernel's current ones on this target,
  none, or the heuristic's) then `opts`, on `target`. device: the trace's device when target is its own (then it can run), else None.
  Raises OptRefused (tinygrad's reason) for an opt that does not apply."""
  if "VIZ" not in os.environ: os.environ["TRACK_MATCH_STATS"] = "2"  # the passes are recorded, as a trace records them
  from explorer.tracing import adapter as tg, compilers
  from explorer.tracing.renders import BEAM_NOTE, pass_record, target_record
  ast, _ = tg.without_beam(tg.RewriteBlob(blob).sink(sink))
  renderer = tg.host_renderer(device) if device is not None else tg.render_target(target, arch)
  original = [tg.parse_opt(o) for o in current]
  base = original if start == "current" else [] if start == "none" else tg.heuristic_opts(ast, renderer)
  chosen = [*base, *(tg.parse_opt(o) for o in opts)]
  tg.check_opts(ast, renderer, chosen)  # OptRefused before any codegen
  progress("codegen", "start", f"{len(chosen)} opts on {target}")
  mark = tg.tracking_mark()
  prg = tg.codegen_deviceless(tg.with_opts(ast, chosen), renderer)
  passes = [pass_record(p) for _, ps in tg.passes_since(mark, mark) for p in ps]
  rec = target_record(tg.program_facts(prg), passes, arch, [], tg.loop_splits(mark), tg.line_map(prg, renderer))
  rec["notes"] = [n for n in rec["notes"] if n != BEAM_NOTE] + [f"scheduled by hand: {', '.join(map(tg.opt_text, chosen)) or 'no opts'}"]
  rec["spec"] = tg.spec_check([tg.program_sink(prg)], "program")
  if target == "ptx": rec["compiled_source"] = tg.fill_ptx(rec["source"], arch)
  progress("compile", "start", f"compile facts on {target}")
  facts: Any = compilers.compile_target(target, rec["source"], arch, compilers.block_threads(rec["local_size"]), rec.get("compiled_source"))
  rec["compile"] = facts
  out: dict[str, Any] = {"target": target, "start": start, "opts": [tg.opt_text(o) for o in chosen], "record": rec,
                         "next": [tg.opt_text(o) for o in tg.legal_opts(ast, renderer, chosen)], "timing": None}
  if time and device is not None:
    progress("timing", "start", f"the original and this schedule on {device}, interleaved: {WARMUP} warm-up + {REPEATS} pairs")
    out["timing"] = _interleaved(ast, renderer, device, original, chosen)
  return out

def _interleaved(ast: Any, renderer: Any, device: str, original: list, chosen: list) -> dict[str, Any]:
  """Original (A) and hand-scheduled (B) timed in pairs on the device, every other pair in reverse order: B/A's median and interval."""
  import statistics
  from explorer import stats
  from explorer.tracing import adapter as tg
  a, b = tg.kernel_timers([tg.with_opts(ast, original), tg.with_opts(ast, chosen)], renderer, device)
  for _ in range(WARMUP): next(a), next(b)
  ta, tb = [], []
  for i in range(REPEATS):
    if i % 2: tb.append(next(b)); ta.append(next(a))
    else: ta.append(next(a)); tb.append(next(b))
  return {"device": device, "repeats": REPEATS, "a_median_s": statistics.median(ta), "b_median_s": statistics.median(tb),
          **stats.median_ratio(ta, tb), "a_samples": ta, "b_samples": tb}
