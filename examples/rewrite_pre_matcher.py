"""A rewrite file placed where the codegen notes inject theirs: Renderer.pre_matcher (tinygrad 0.12 and 0.13; 0.14 has no such hook and
refuses this file, saying so). full_rewrite_to_sink runs it as its own pass, "pre_matcher", after the index dtypes are lowered and
before the decompositions and the renderer's final rules; a pre_matcher takes no context, so a rule sees only the UOp it matched.

This one puts the two loads of each multiply in one order (by their keys): the kernel computes the same, its source reads differently.
  kernel-explorer trace --preset small --tinygrad 0.13.0 --rewrite-file examples/rewrite_pre_matcher.py
"""
from tinygrad.uop.ops import Ops, PatternMatcher, UOp, UPat

def ordered(m: UOp) -> UOp | None:
  a, b = m.src
  return m.replace(src=(b, a)) if a.key > b.key else None

matcher = PatternMatcher([(UPat(Ops.MUL, src=(UPat(Ops.LOAD), UPat(Ops.LOAD)), name="m"), ordered)])
point = "pre_matcher"
