"""The custom rewrites a variant may add to codegen (Variant.rewrites; explorer.spec.REWRITES describes them, in the codegen notes'
terms): each is a tinygrad PatternMatcher run as a named pass of its own (explorer.tracing.tg.Rewrite says where), so its matches,
rule and before/after graphs are recorded like any of tinygrad's passes. explorer.tracing.pipeline.catalogue shows this file's source of each."""
from __future__ import annotations
import functools
import itertools
import runpy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from explorer.spec import SpecError, rewrite_file_name
from explorer.tracing.tg import PRE_MATCHER, Ops, PatternMatcher, Rewrite, UOp, UPat, constant, linearized

# ***** sink-loads: each LOAD moved down to just before its first use, within its block *****

# a load never moves past these: a store may write what it reads, and a loop or branch mark would change how often it runs
FENCES = frozenset({Ops.STORE, Ops.RANGE, Ops.END, Ops.BARRIER, Ops.IF, Ops.ENDIF})

def sink_loads(lin: list[UOp]) -> list[UOp]:
  """The linear order with each LOAD just before its first user, where no fence lies between them. A load that another load uses
  travels with its user."""
  first_use: dict[UOp, int] = {}
  for j, u in enumerate(lin):
    for s in u.src: first_use.setdefault(s, j)
  fences = list(itertools.accumulate((u.op in FENCES for u in lin), initial=0))  # fences[k]: fences in lin[:k]
  waiting: dict[int, list[UOp]] = {}  # index of a user -> the loads that go just before it
  out: list[UOp] = []
  for i, u in enumerate(lin):
    here = waiting.pop(i, [])
    user = first_use.get(u)
    # a load right before its user goes through `waiting` too: loads bound for one user keep their order (so this is idempotent)
    if u.op is Ops.LOAD and user is not None and fences[user] == fences[i + 1]: waiting.setdefault(user, []).extend([*here, u])
    else: out.extend([*here, u])
  return out

def _sink_program_loads(prg: UOp, lin: UOp) -> UOp | None:
  order = sink_loads(list(lin.src))
  return None if order == list(lin.src) else prg.replace(src=tuple(lin.replace(src=tuple(order)) if s is lin else s for s in prg.src))

pm_sink_loads = PatternMatcher([(linearized("lin"), _sink_program_loads)])

# ***** the outermost loop: what peel:N and drop-end act on *****

@dataclass(frozen=True)
class LoopContext:
  loop: UOp | None  # the kernel's first outermost RANGE with more than `keep` iterations (None: it has none)
  keep: int         # peel:N's N
  new_axis: int     # an axis number no RANGE of the kernel uses

def outermost_loop(sink: UOp, keep: int = 0) -> LoopContext:
  ranges = [u for u in sink.toposort() if u.op is Ops.RANGE]
  outer = [r for r in ranges if not any(x.op is Ops.RANGE for x in r.backward_slice) and int(r.vmax) + 1 > keep]
  return LoopContext(outer[0] if outer else None, keep, max((r.arg[0] for r in ranges), default=-1) + 1)

# ***** peel:N: the first N iterations of the outermost loop become a loop of their own *****

def peel(ctx: LoopContext, e: UOp) -> UOp | None:
  """END(body, r) -> END(body[r := head], head) then END(body[r := tail + N], tail). tail starts after head's END, as tinygrad's
  control-flow pass orders sibling loops (a RANGE with the END it follows as an extra source); RANGEs nested in the loop and AFTERs
  placed in it name the new loop itself rather than tail + N."""
  if (r := ctx.loop) is None or len(e.src) != 2 or e.src[1] is not r: return None
  head = r.replace(src=(constant(ctx.keep, r.dtype), *r.src[1:]))
  head_end = e.src[0].substitute({r: head}).end(head)
  tail = r.replace(src=(constant(int(r.vmax) + 1 - ctx.keep, r.dtype), *r.src[1:], head_end), arg=(ctx.new_axis, *r.arg[1:]))
  shifted: UOp = tail + constant(ctx.keep, r.dtype)
  body = e.src[0].substitute({r: shifted})
  marks = {u: u.replace(src=tuple(tail if s is shifted else s for s in u.src))
           for u in body.toposort() if u.op in (Ops.RANGE, Ops.AFTER) and shifted in u.src}
  looped: UOp = (body.substitute(marks) if marks else body).end(tail)
  return looped

pm_peel = PatternMatcher([(UPat(Ops.END, name="e"), peel)])

# ***** drop-end: the codegen notes' "missing .end()" (a teaching case: the loop is never closed) *****

def drop_end(ctx: LoopContext, e: UOp) -> UOp | None:
  return e.src[0] if ctx.loop is not None and len(e.src) == 2 and e.src[1] is ctx.loop else None

pm_drop_end = PatternMatcher([(UPat(Ops.END, name="e"), drop_end)])

# ***** the catalogue *****

def catalogue_rewrite(name: str) -> Rewrite:
  """A rewrite by the name a variant gives it (explorer.spec.REWRITE_RE has checked it)."""
  if name == "sink-loads": return Rewrite(name, "linear", pm_sink_loads)
  if name == "drop-end": return Rewrite(name, "sink", pm_drop_end, outermost_loop)
  if name.startswith("peel:"): return Rewrite(name, "sink", pm_peel, functools.partial(outermost_loop, keep=int(name[5:])))
  raise SpecError(f"unknown rewrite {name!r}")

def file_rewrite(path: str) -> Rewrite:
  """A user's rewrite: a Python file that defines `matcher` (a tinygrad PatternMatcher) and may set `point` ("sink", the default,
  "linear", or on a tinygrad that has the hook, "pre_matcher": the renderer's pre_matcher, as the codegen notes inject one). This runs
  the user's code, so only the CLI offers it (the server refuses such a variant)."""
  try: module: dict[str, Any] = runpy.run_path(path)
  except OSError as e: raise SpecError(f"cannot read the rewrite file {path}: {e.strerror or e}") from None
  if not isinstance(matcher := module.get("matcher"), PatternMatcher):
    raise SpecError(f"{path} must define `matcher`, a tinygrad PatternMatcher (got {type(matcher).__name__})")
  points = ("sink", "linear", *(("pre_matcher",) if PRE_MATCHER else ()))
  if (point := module.get("point", "sink")) not in points:
    gone = " (Renderer.pre_matcher is not in this tinygrad: it ends with 0.13)" if point == "pre_matcher" else ""
    raise SpecError(f"{path}: point must be {' or '.join(map(repr, points))}, got {point!r}{gone}")
  return Rewrite(rewrite_file_name(path), point, matcher)

def build(names: Sequence[str], file: str | None = None) -> list[Rewrite]:
  return [catalogue_rewrite(n) for n in names] + ([file_rewrite(file)] if file else [])
