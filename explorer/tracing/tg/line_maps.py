"""Line maps: which linear UOps made each source line, captured from the renderer as it renders."""
from __future__ import annotations
import collections
import itertools
import sys
import typing
from typing import Any
from tinygrad.renderer import Renderer
from tinygrad.uop.ops import PatternMatcher, UOp

if typing.TYPE_CHECKING:  # types only: pydantic (the schema's validation) stays out of the worker processes
  from explorer.schema import Pressure

class _LineTracker:
  """Stands in for a C-style renderer's string_rewrite: each call is one UOp being rendered, and the renderer's own list of kernel
  lines (a local of CStyleLanguage._render, read from its frame) says how many lines it held then. The lines a UOp's turn appended
  are that UOp's; a UOp whose turn appended none was inlined into its users' lines."""
  def __init__(self, inner: PatternMatcher):
    self.inner = inner
    self.turns: list[tuple[UOp, int]] = []
    self.kernel: list[str] | None = None
  def rewrite(self, u: UOp, ctx: Any = None) -> Any:
    kernel = sys._getframe(1).f_locals.get("kernel")
    if isinstance(kernel, list): self.kernel = kernel
    self.turns.append((u, len(kernel) if isinstance(kernel, list) else -1))
    return self.inner.rewrite(u, ctx)

LineMap = list[tuple[int, list[int]]]  # [(source line, [linear uop indexes]), ...]

def line_map(lin: list[UOp], source: str, renderer: Renderer) -> tuple[LineMap | None, str | None]:
  """[[source line (1-based), [linear uop indexes]], ...] for every line of the kernel body, or None and why. The program's linear
  UOps are rendered again by a copy of its renderer whose string_rewrite is a _LineTracker; the map is kept only if that render is
  the program's source, character for character."""
  from tinygrad.renderer.cstyle import CStyleLanguage
  if not isinstance(renderer, CStyleLanguage):
    return None, f"{type(renderer).__name__} does not render through tinygrad's C-style renderer, whose line-by-line rendering this reads"
  copy_ = object.__new__(type(renderer))  # not copy.copy: a renderer pickles as "build me for this target", which loads its compiler
  copy_.__dict__.update(renderer.__dict__)
  copy_.string_rewrite = tracker = _LineTracker(renderer.string_rewrite)  # type: ignore[assignment]
  if copy_.render(lin) != source or tracker.kernel is None: return None, "rendering again with the line tracker did not give the same source"
  body = "\n".join(tracker.kernel)
  if not body or (at := source.find(body)) < 0: return None, "the kernel body was not found in the source"
  first, pos = source.count("\n", 0, at) + 1, {u: i for i, u in enumerate(lin)}
  starts = list(itertools.accumulate((e.count("\n") + 1 for e in tracker.kernel), initial=first))  # the first line of each entry
  ends = [n for _, n in tracker.turns[1:]] + [len(tracker.kernel)]
  lines: dict[UOp, set[int]] = {}
  for (u, n), end in zip(tracker.turns, ends, strict=True):
    if n >= 0 and end > n: lines[u] = set(range(starts[n], starts[end]))
  users: dict[UOp, list[UOp]] = collections.defaultdict(list)
  for u in lin:
    for src in u.src: users[src].append(u)
  for u, _ in reversed(tracker.turns):  # inlined: the lines of the users its text went into
    if u not in lines: lines[u] = set().union(*(lines.get(v, set()) for v in users[u]))
  by_line: dict[int, list[int]] = collections.defaultdict(list)
  for u, ls in lines.items():
    for ln in ls: by_line[ln].append(pos[u])
  return [(ln, sorted(ix)) for ln, ix in sorted(by_line.items())], None

def source_line(uop: int, lines: LineMap | None) -> int | None:
  """The source line of a linear UOp: its own (the first it appears in), or that of the nearest UOp before it that has one."""
  if not lines: return None
  line_of: dict[int, int] = {}
  for ln, ix in lines:
    for i in ix: line_of.setdefault(i, ln)
  return next((line_of[i] for i in range(uop, -1, -1) if i in line_of), None)

def with_lines(pressure: Pressure, lines: LineMap | None) -> Pressure:
  """The pressure record with source lines: of the peak (max_live_line) and of each longest live range's definition."""
  return {**pressure, "max_live_line": source_line(pressure["max_live_at"], lines),
          "longest": [{**r, "line": source_line(r["uop"], lines)} for r in pressure["longest"]]}
