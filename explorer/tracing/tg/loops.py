"""Loop splitting: where tinygrad's "split ranges" pass (pm_split_ranges, codegen/simplify.py), 0.12's "cut store ranges" (cut_store_range,
the codegen notes' loop peeling on constant comparisons) or the explorer's peel:N cut a loop."""
from __future__ import annotations
import collections
import typing
from collections.abc import Sequence
from typing import Any
from tinygrad.uop.ops import Ops, UOp
from explorer.tracing.tg.custom_rewrites import REWRITE_PASS
from explorer.tracing.tg.recording import LiveLog, Pass
from explorer.tracing.tg.rewrite_blob import RewriteBlob
from explorer.tracing.tg.rewritelog import rule_file, rule_source

if typing.TYPE_CHECKING:  # types only: pydantic (the schema's validation) stays out of the worker processes
  from explorer.schema import LoopRange, LoopSplit

RangeFact = tuple[Any, Any, str]  # a loop's axis, size and kind, hashable (loops are counted)

def _range_fact(u: UOp) -> RangeFact:
  n = u.src[0].src[0] if u.src and u.src[0].op is Ops.CAST and u.src[0].src[0].op is Ops.CONST else u.src[0] if u.src else None
  size = None if n is None else n.arg if n.op is Ops.CONST else str(n)
  kind = str(u.arg[-1]).split(".")[-1] if isinstance(u.arg, tuple) else ""
  return (u.arg[0] if isinstance(u.arg, tuple) else u.arg, size, kind)

def _loop_range(f: RangeFact) -> LoopRange: return {"axis": f[0], "size": f[1], "kind": f[2]}

LOOP_CUTTING = ("split ranges", "cut store ranges")  # tinygrad's passes that cut loops (the second: 0.12's, on the CPU)

def _splits_loops(pass_name: str) -> bool:
  """tinygrad's loop cutting passes, and the explorer's peel:N rewrite (explorer.tracing.pipeline.rewrites)."""
  return pass_name in LOOP_CUTTING or pass_name.startswith(REWRITE_PASS.format("peel:"))

def loop_splits(log: LiveLog | RewriteBlob, passes: Sequence[Pass]) -> list[LoopSplit]:
  """Each match of a "split ranges" pass among a kernel's passes: the loop(s) it cut (axis, trip count, kind), the loops they became,
  the rule (its file:line and source, read from tinygrad now). tinygrad records the pass's rewrite of the kernel; the cut ranges are
  what the graph lost and the new ranges what it gained. log: where the passes' groups point (this process's, or a stored blob)."""
  out: list[LoopSplit] = []
  for p in passes:
    if not _splits_loops(p.name) or not p.matches: continue
    for before, after, loc, _ in log.rewrite(p.group, p.step).matches:
      fb, fa = (collections.Counter(_range_fact(u) for u in log.sink(n).toposort() if u.op is Ops.RANGE) for n in (before, after))
      if fb == fa: continue  # a match of the pass that cut nothing (it also flattens ranges)
      # the loops it cut and the ones they became; a loop nested in a peeled one is copied, not cut, and is left out of both
      out.append({"pass": p.name, "step": p.step, "ranges": [_loop_range(f) for f in sorted((fb - fa).elements(), key=str)],
                  "into": [_loop_range(f) for f in sorted((fa - fb).elements(), key=str) if f not in fb],  # (two loops alike: both)
                  "rule": f"{rule_file(loc[0])}:{loc[1]}", "rule_source": rule_source(loc, log.sources)})
  return out
