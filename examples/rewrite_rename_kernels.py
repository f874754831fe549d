"""A rewrite file for `kernel-explorer trace --rewrite-file` (the CLI only: the server never runs user code).

It must define `matcher`, a tinygrad PatternMatcher; `point` says where in codegen it runs: "sink" (the default: the graph tinygrad's
full_rewrite_to_sink hands the linearizer) or "linear" (PROGRAM(sink, LINEAR) after linearizing, before rendering). Its pass shows up
in each kernel's pass list as "explorer rewrite file:rewrite_rename_kernels.py", with its matches.

This one renames every kernel (a change you can see in the source and the kernel table):
  kernel-explorer trace --preset small --rewrite-file examples/rewrite_rename_kernels.py
"""
from dataclasses import replace
from tinygrad.uop.ops import Ops, PatternMatcher, UOp, UPat

def rename(s: UOp) -> UOp | None:
  return None if s.arg.name.startswith("mine_") else s.replace(arg=replace(s.arg, name="mine_" + s.arg.name))

matcher = PatternMatcher([(UPat(Ops.SINK, name="s"), rename)])
point = "sink"
