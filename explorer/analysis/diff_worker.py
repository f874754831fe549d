"""The halves of explorer.analysis.diff that need tinygrad, called through explorer.tracing.workers.process.call_in_worker (with VIZ=0)."""
from __future__ import annotations
from typing import Any
import numpy as np
from explorer.spec import ConvSpec, Variant
from explorer.stages import Progress
from explorer.tracing import tg  # (its package sets tinygrad's environment before it imports tinygrad)

Steps = list[list[int]]  # [group, step] of passes in a rewrite blob

def kernel_graphs(progress: Progress, a_blob: bytes, b_blob: bytes, a_sinks: list[int], b_sinks: list[int], a_steps: Steps | None = None,
                  b_steps: Steps | None = None) -> dict[str, Any]:
  """Each side's kernel AST graphs ({nodes, edges}) by trace number, rebuilt from its rewrite blob, and the rules each of its passes
  `steps` went through (RewriteBlob.rules_fired, in the order asked): {graphs: [a's, b's], rules: [a's, b's]}."""
  a, b = side_graphs(progress, a_blob, a_sinks, a_steps), side_graphs(progress, b_blob, b_sinks, b_steps)
  return {"graphs": [a["graphs"][0], b["graphs"][0]], "rules": [a["rules"][0], b["rules"][0]]}

def side_graphs(progress: Progress, blob: bytes, sinks: list[int], steps: Steps | None = None) -> dict[str, Any]:
  """One side's kernel_graphs, where the two were recorded with different tinygrads: each in a worker of its own."""
  b = tg.RewriteBlob(blob)
  return {"graphs": [{n: b.graph_of(n) for n in sinks}], "rules": [[b.rules_fired(g, s) for g, s in steps or []]]}

def seeded_inputs(spec: ConvSpec) -> tuple[np.ndarray, np.ndarray]:
  """The input and weight every trace runs on (the same draws as explorer.tracing.pipeline.trace._run_stages)."""
  rng = np.random.default_rng(0)
  x = rng.standard_normal(spec.input_shape).astype(spec.dtype)
  w = (rng.standard_normal(spec.weight_shape) / np.sqrt(np.prod(spec.weight_shape[1:]))).astype(spec.dtype)
  return x, w

def _output(spec: ConvSpec, variant: Variant, x_np: np.ndarray, w_np: np.ndarray) -> np.ndarray:
  Tensor, dtypes = tg.Tensor, tg.dtypes
  from explorer.tracing.algorithms import build_conv
  device = variant.device or tg.default_device()
  dtype = dtypes.float16 if spec.dtype == "float16" else dtypes.float32
  with tg.opt_context(variant.opt):
    x, w = Tensor(x_np, device=device, dtype=dtype), Tensor(w_np, device=device, dtype=dtype)
    tg.realize_inputs(x, w)
    return build_conv(x, w, spec, variant.resolve(spec)).numpy().astype(np.float64)

def output_difference(progress: Progress, spec: dict[str, Any], variants: list[dict[str, Any]]) -> dict[str, Any]:
  """Run both variants on the seeded inputs in this one process and compare their outputs."""
  s = ConvSpec.from_dict(spec)
  x, w = seeded_inputs(s)
  progress("run", "start", "running A on the seeded inputs")
  a = _output(s, Variant.from_dict(variants[0]), x, w)
  progress("run", "start", "running B on the seeded inputs")
  b = _output(s, Variant.from_dict(variants[1]), x, w)
  diff = np.abs(a - b)
  scale = float(max(np.abs(a).max(), np.abs(b).max(), np.finfo(np.float64).tiny))
  return {"max_abs": float(diff.max()), "mean_abs": float(diff.mean()), "max_rel": float(diff.max()) / scale, "scale": scale,
          "argmax": [int(i) for i in np.unravel_index(int(diff.argmax()), diff.shape)], "shape": list(a.shape)}
