"""tinygrad's viewer (tinygrad.viz.serve), the part the seam replays a rewrite log with: VizData, _reconstruct, get_full_rewrite,
uop_to_json and pystr, as 0.13 and 0.14 have them. 0.12's viewer kept one log in module globals (a cached, recursive _reconstruct over
it, a get_full_rewrite of no data yielding no "_sink"): here the same over a VizData of the log given. Imported where a graph is first
replayed (the viewer's import costs about a quarter of a second)."""
from __future__ import annotations
import difflib
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from tinygrad.uop.ops import Ops, RewriteTrace, TrackedGraphRewrite, UOp
from explorer.tracing.tg.compat import at_least

if TYPE_CHECKING or at_least(0, 13):
  from tinygrad.viz.serve import (
    VizData as VizData,
    _reconstruct as _reconstruct,
    get_full_rewrite as get_full_rewrite,
    pystr as pystr,
    uop_to_json as uop_to_json,
  )
  if not at_least(0, 14):  # 0.13's replay draws a progress bar on stderr, which a worker shares with its server's log
    import tinygrad.viz.serve as serve
    setattr(serve, "tqdm", lambda iterable, **_: iterable)  # noqa: B010 - mypy reads 0.14's serve, which has none
else:
  import tinygrad.viz.serve as serve
  from tinygrad.helpers import printable
  pystr = serve.pystr

  @dataclass
  class VizData:
    trace: RewriteTrace
    all_uops: dict[int, UOp] = field(default_factory=dict)

  def _reconstruct(data: VizData, num: int, depth: int | None = None) -> UOp:
    """The UOp recorded as num, its sources `depth` deep (None: whole, kept in data.all_uops); without recursion, so that a deep graph
    does not reach Python's limit."""
    if depth is not None:
      op, dtype, src, arg, *rest = data.trace.uop_fields[num]
      return UOp(op, dtype, () if depth <= 0 else tuple(_reconstruct(data, s, depth - 1) for s in src), arg, *rest)
    stack = [num]
    while stack:
      if (n := stack[-1]) in data.all_uops:
        stack.pop()
        continue
      op, dtype, src, arg, *rest = data.trace.uop_fields[n]
      if missing := [s for s in src if s not in data.all_uops]:
        stack.extend(missing)
        continue
      if op is Ops["KERNEL"]: arg = type(arg)(_reconstruct(data, arg.ast), arg.metadata)  # 0.12 records a KERNEL's AST by its number
      data.all_uops[n] = UOp(op, dtype, tuple(data.all_uops[s] for s in src), arg, *rest)
      stack.pop()
    return data.all_uops[num]

  def uop_to_json(data: VizData, x: UOp) -> dict[int, dict]: return serve.uop_to_json(x)

  def get_full_rewrite(data: VizData, ctx: TrackedGraphRewrite, depth: int | None = None) -> Iterator[dict[str, Any]]:
    """0.12's get_full_rewrite over data (no progress bar), each step with the graph it reached ("_sink", as 0.14 yields)."""
    sink = _reconstruct(data, ctx.sink, depth)
    yield {"graph": uop_to_json(data, sink), "uop": pystr(sink), "change": None, "diff": None, "upat": None, "_sink": sink}
    replaces: dict[UOp, UOp] = {}
    for before, after, loc, seconds in ctx.matches:
      replaces[u0 := _reconstruct(data, before, depth)] = u1 = _reconstruct(data, after, depth)
      try: new = sink.substitute(replaces)
      except RuntimeError: new = UOp(Ops.REWRITE_ERROR, arg=traceback.format_exc())
      graph = uop_to_json(data, new)
      yield {"graph": graph, "uop": pystr(new), "change": [id(x) for x in u1.toposort() if id(x) in graph],
             "diff": list(difflib.unified_diff(pystr(u0).splitlines(), pystr(u1).splitlines())),
             "upat": (loc, f"# {seconds * 1e6:.2f} us\n" + printable(loc)), "_sink": new}
      if not ctx.bottom_up: sink = new

def replayed_output(data: VizData, group: int, step: int, name: str) -> UOp:
  """The graph pass `name` (rewrite group and step) ended with: its start with every match applied, replayed by the viewer."""
  last = None
  for last in get_full_rewrite(data, data.trace.rewrites[group][step]): pass  # noqa: B007 - the last step is the output
  assert last is not None, f"pass {name} replayed no graph"
  return last["_sink"]
