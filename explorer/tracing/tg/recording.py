"""Rewrite tracking: tinygrad's record of every named graph_rewrite in this process, its passes, and the log read in place."""
from __future__ import annotations
import contextlib
import linecache
import pathlib
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any
from tinygrad.helpers import Context, ansistrip
from tinygrad.uop import ops as uop_ops
from tinygrad.uop.ops import RewriteTrace, TrackedGraphRewrite, UOp
from explorer.tracing.tg.rewritelog import encode_rewrite_log, rebuild, stored_location

def tracking_enabled() -> bool: return uop_ops.TRACK_MATCH_STATS.value >= 2

@contextlib.contextmanager
def tracking() -> Iterator[None]:
  """Every named graph_rewrite recorded with its matches while inside (TRACK_MATCH_STATS=2, read at each rewrite): a process whose
  environment asked for less (TRACK_MATCH_STATS=1 or PROFILE=1 still swap the tracked PatternMatcher in) records whole passes too.
  Each rewrite group also keeps the Python stack that opened it (group_stacks), as tinygrad's viewer keeps it under VIZ."""
  with Context(TRACK_MATCH_STATS=max(2, uop_ops.TRACK_MATCH_STATS.value)):
    if uop_ops.add_trace_group is _stacked_add_trace_group:
      yield
      return
    uop_ops.add_trace_group = _stacked_add_trace_group
    try: yield
    finally: uop_ops.add_trace_group = _add_trace_group

# ***** the stack that opened each rewrite group *****

_add_trace_group = uop_ops.add_trace_group
_stacks: dict[int, list[dict[str, Any]]] = {}  # rewrite group (index into tinygrad's tracked_keys) -> its stack, outermost frame first
EXPLORER = str(pathlib.Path(__file__).resolve().parents[2])  # the explorer package: its frames are the explorer's, not the program's
MAX_FRAMES = 40

def _stacked_add_trace_group(kt: Any) -> None:
  _add_trace_group(kt)
  _stacks[len(uop_ops.tracked_keys) - 1] = call_stack(sys._getframe(2))  # 1: tinygrad's rewrite_group wrapper; 2: its caller

def call_stack(frame: Any) -> list[dict[str, Any]]:
  """The frames from frame outwards, the explorer's own left out, outermost first: tinygrad's by their path in tinygrad, the rest by
  theirs, each with its line of code (read now: a stored trace never reads a file it names)."""
  out: list[dict[str, Any]] = []
  while frame is not None and len(out) < MAX_FRAMES:
    code = frame.f_code
    if not code.co_filename.startswith(EXPLORER):
      where = stored_location(code.co_filename)
      out.append({"file": where if where.startswith("tinygrad/") else code.co_filename, "line": frame.f_lineno, "function": code.co_name,
                  "code": linecache.getline(code.co_filename, frame.f_lineno).strip()[:400]})
    frame = frame.f_back
  return out[::-1]

def take_group_stacks(base: int) -> list[dict[str, Any]]:
  """The stacks of the groups recorded from base on, each by its group index relative to base (as the trace's passes name groups);
  taken: a worker that traces again keeps none of them."""
  out = [{"group": g - base, "frames": _stacks.pop(g)} for g in sorted(_stacks) if g >= base]
  return out

def tracking_possible() -> bool:
  """tinygrad records matches only with the PatternMatcher it swaps in at import when tracking is on: a process that imported tinygrad
  without it (a notebook that imported tinygrad first) cannot record a pass's matches, whatever it sets later."""
  return uop_ops.PatternMatcher is getattr(uop_ops, "TrackedPatternMatcher", None)

@dataclass(frozen=True)
class Pass:
  group: int      # index into the trace's rewrite groups
  step: int       # index of this graph_rewrite inside its group
  name: str
  depth: int
  matches: int
  sink: int       # trace number of the graph this pass started from

def tracking_mark() -> int: return len(uop_ops.tracked_keys)

def forget_rewrites_since(mark: int) -> None:
  """Drop the rewrite groups recorded since mark (a program's repeated realize: nothing recorded refers to them)."""
  del uop_ops.tracked_keys[mark:], uop_ops.tracked_ctxs[mark:]
  for g in [g for g in _stacks if g >= mark]: del _stacks[g]

def passes_since(mark: int, base: int) -> list[tuple[str, list[Pass]]]:
  """Each rewrite group (tinygrad's top-level tracked call: 'Schedule ...', one per kernel codegen) opened since mark, with its passes.
  Group indices are relative to base, the mark the trace's rewrite blob starts from."""
  return [(ansistrip(k.display_name), [Pass(g - base, j, r.name, r.depth, len(r.matches), r.sink) for j, r in enumerate(ctxs)])
          for g, (k, ctxs) in enumerate(zip(uop_ops.tracked_keys[mark:], uop_ops.tracked_ctxs[mark:], strict=False), start=mark)]

def export_rewrites(base: int) -> bytes:
  """tinygrad's own RewriteTrace from base on, as data (encode_rewrite_log): enough to rebuild any intermediate graph later, in
  another process. ret and tb stay behind (ret may hold a renderer, tb is VIZ's Python stack)."""
  keys = [replace(k, ret=None, tb=None) for k in uop_ops.tracked_keys[base:]]
  return encode_rewrite_log(RewriteTrace(keys, uop_ops.tracked_ctxs[base:], uop_ops.uop_fields))

def trace_num(u: UOp) -> int: return u.trace_num

class LiveLog:
  """This process's own rewrite log, read in place: what a trace reads back while it records (the bufferize decisions, the call's
  arguments, loop splits) is rebuilt from tinygrad's live fields, without writing and reading back a blob or importing its viewer
  (about a quarter of a second to import). Pass groups are relative to base, as in the blob the trace stores."""
  sources: Mapping[str, str] | None = None  # rules are read from the installed packages: this process ran them

  def __init__(self, base: int = 0) -> None:
    self.base, self.built = base, dict[int, UOp]()

  def sink(self, num: int) -> UOp: return rebuild(uop_ops.uop_fields, num, self.built)

  def rewrite(self, group: int, step: int) -> TrackedGraphRewrite: return uop_ops.tracked_ctxs[self.base + group][step]

  def nums(self) -> dict[int, int]: return {id(u): n for n, u in self.built.items()}

  def pass_output(self, p: Pass) -> UOp:
    """The graph a pass ended with (its start with every match applied): replayed with tinygrad's viewer code (imported here)."""
    from explorer.tracing.tg.viewer import VizData, replayed_output
    data = VizData(RewriteTrace(uop_ops.tracked_keys[self.base:], uop_ops.tracked_ctxs[self.base:], uop_ops.uop_fields))
    return replayed_output(data, p.group, p.step, p.name)
