"""The tensor programs the explorer traces: each builds the convolution's output Tensor lazily (nothing is realized here)."""
from __future__ import annotations
from explorer.tracing.tg import Context, Tensor
from explorer.spec import ConvSpec, Variant

def direct(x: Tensor, w: Tensor, spec: ConvSpec) -> Tensor:
  return x.conv2d(w, stride=spec.stride, padding=spec.pad, groups=spec.groups)

def winograd_builtin(x: Tensor, w: Tensor, spec: ConvSpec) -> Tensor:
  # tinygrad reads WINO when conv2d builds the graph, so the context only needs to span graph construction
  with Context(WINO=1): return direct(x, w, spec)

def build_conv(x: Tensor, w: Tensor, spec: ConvSpec, variant: Variant) -> Tensor:
  """The output Tensor for (spec, variant); variant must already be resolved against spec (Variant.resolve)."""
  if variant.algo == "direct": return direct(x, w, spec)
  if variant.wino_impl == "builtin": return winograd_builtin(x, w, spec)
  from explorer.tracing.algorithms.winograd import winograd_explorer
  return winograd_explorer(x, w, spec, tile=variant.tile, staging=variant.staging, consts=variant.consts)
