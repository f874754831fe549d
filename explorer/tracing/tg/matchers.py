"""tinygrad's pattern matchers compiled ahead, for a worker template (explorer.tracing.template_process) to do while it waits: tinygrad
compiles each pattern of a PatternMatcher into Python code the first time it is tried (`upat_deferred_compile`), in every process, so
every worker forked from a template would compile the patterns its codegen tries again (a third of a second of another target's
first view). Compiled in the template, they come to each child made. The code compiled is the code the first try would compile:
what a rewrite matches and records is unchanged."""
from __future__ import annotations
import gc, time
from typing import Any, Callable, Iterator
from tinygrad.uop.ops import PatternMatcher, upat_interpret
from tinygrad.uop.upat import upat_compile

def _lazy(entry: list) -> bool: return getattr(entry[1], "__name__", "") == "lazy_compile"

def _uncompiled() -> Iterator[tuple[Any, Callable, list[list]]]:
  """(pattern, its function, the entries that still compile it on first use) of every PatternMatcher this process holds."""
  for pm in [o for o in gc.get_objects() if isinstance(o, PatternMatcher)]:
    entries: dict[int, list[list]] = {}
    for es in pm.pdict.values():
      for e in es:
        if _lazy(e): entries.setdefault(id(e[0]), []).append(e)
    for p, fxn in pm.patterns:
      if es := entries.pop(id(p), []): yield p, fxn, es

class Warming:
  """The patterns left to compile, a slice at a time: `step(budget_s)` compiles for about that long, False once none are left."""
  def __init__(self) -> None:
    self._left = _uncompiled()
    self.compiled = 0

  def step(self, budget_s: float) -> bool:
    until = time.monotonic() + budget_s
    for p, fxn, entries in self._left:
      matcher = upat_compile(p, fxn) or upat_interpret(p, fxn)  # as tinygrad's lazy_compile does on the first try
      for e in entries:
        if _lazy(e): e[1] = matcher
      self.compiled += 1
      if time.monotonic() >= until: return True
    return False
