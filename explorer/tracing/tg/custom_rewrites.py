"""Custom rewrites: extra named passes in codegen (explorer.tracing.pipeline.rewrites holds the catalogue)."""
from __future__ import annotations
import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from tinygrad.codegen import do_linearize, full_rewrite_to_sink, pm_to_program
from tinygrad.helpers import Context, TracingKey
from tinygrad.renderer import Renderer
from tinygrad.uop.ops import PatternMatcher, UOp, graph_rewrite
from explorer.tracing.tg.compat import PRE_MATCHER, named, program, rewrite_group, unlinearized

# A rewrite runs as a graph_rewrite pass of its own, at one of two points: "sink", on the graph full_rewrite_to_sink hands the
# linearizer, or "linear", on PROGRAM(sink, LINEAR) before rendering (tinygrad renders a LINEAR in the order given; its linearizer is
# what places loads). tinygrad 0.14 has no Renderer.pre_matcher (the codegen notes' hook; its Renderer.extra_matcher runs inside the
# "final rewrite" pass among tinygrad's own rules); on older ones a rewrite may go there too ("pre_matcher": a contextless
# PatternMatcher, as the notes inject one), and the hook is always set so that its pass shows where it runs.

REWRITE_PASS = "explorer rewrite {}"  # the name of a custom rewrite's pass

@dataclass(frozen=True)
class Rewrite:
  name: str                                 # as the variant names it: sink-loads, peel:2, a file's name
  point: str                                # "sink" or "linear"
  matcher: PatternMatcher
  context: Callable[[UOp], Any] = lambda root: None  # the rewrite's ctx, from the graph it is about to rewrite

  @property
  def pass_name(self) -> str: return REWRITE_PASS.format(self.name)

_pm_linearize = PatternMatcher([(unlinearized(), do_linearize)])

@contextlib.contextmanager
def pre_matcher_set(renderer: Renderer, rewrites: Sequence[Rewrite]) -> Iterator[None]:
  """On a tinygrad with Renderer.pre_matcher, the renderer's own (None but on DSP) with the "pre_matcher" rewrites' after it, set on the
  renderer while inside: its full_rewrite_to_sink then runs it as its "pre_matcher" pass, empty where nothing is there."""
  if not PRE_MATCHER:
    yield
    return
  hook = [r.matcher for r in rewrites if r.point == "pre_matcher"]
  own = renderer.__dict__.get("pre_matcher", _UNSET)
  matcher = sum(hook, type(renderer).pre_matcher or PatternMatcher([]))  # type: ignore[attr-defined]
  renderer.pre_matcher = matcher  # type: ignore[attr-defined]
  try: yield
  finally:
    if own is _UNSET: del renderer.pre_matcher  # type: ignore[attr-defined]
    else: renderer.pre_matcher = own  # type: ignore[attr-defined]

_UNSET = object()

def _apply(root: UOp, rewrites: Sequence[Rewrite], point: str) -> UOp:
  for r in rewrites:
    if r.point == point: root = graph_rewrite(root, r.matcher, ctx=r.context(root), name=r.pass_name)
  return root

@rewrite_group(name=lambda ast, renderer, rewrites, ret, **_: TracingKey((k := ret.src[0].arg).name, (k.function_name, ast, ret.key), ret=renderer))
@Context(ALLOW_DEVICE_USAGE=0)
def to_program_rewritten(ast: UOp, renderer: Renderer, rewrites: tuple[Rewrite, ...]) -> UOp:
  """do_to_program with the rewrites' passes in it: full_rewrite_to_sink, the "sink" rewrites, linearize, the "linear" rewrites,
  then tinygrad's pm_to_program (Estimates, render, compile) on the result."""
  sink = _apply(full_rewrite_to_sink(named(ast), renderer, optimize=ast.tag is None), rewrites, "sink")
  prg = program(sink, renderer)
  if any(r.point == "linear" for r in rewrites):
    prg = _apply(graph_rewrite(prg, _pm_linearize, ctx=renderer, name="linearize"), rewrites, "linear")
  return graph_rewrite(prg, pm_to_program, ctx=renderer, name="linearize/render")
