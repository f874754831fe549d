"""Interleaved timing of several variants in one process (run it in a fresh worker with tracking off: VIZ=0)."""
from __future__ import annotations
from typing import Any
import numpy as np
from explorer.capture import adapter as tg
from explorer.spec import ConvSpec, Variant

def _prepare(spec: ConvSpec, variant: Variant, x_np: np.ndarray, w_np: np.ndarray) -> list[tuple[int, Any]]:
  Tensor = tg.Tensor
  from explorer.capture.algorithms import build_conv
  device = variant.device or tg.default_device()
  with tg.opt_context(variant.opt):
    x, w = Tensor(x_np, device=device), Tensor(w_np, device=device)
    tg.realize_inputs(x, w)
    compiled = tg.compile_schedule(tg.schedule(build_conv(x, w, spec, variant)))
    return tg.call_timers(compiled)

def time_interleaved(progress, spec: dict, variants: list[dict], warmup: int, repeats: int) -> list[dict]:
  """A, B, C, A, B, C...: each repeat runs every variant's kernels once, so drift on a shared machine hits all variants alike."""
  from explorer.capture.trace import stats
  s = ConvSpec.from_dict(spec)
  rng = np.random.default_rng(0)
  x_np, w_np = rng.standard_normal(s.input_shape).astype(s.dtype), rng.standard_normal(s.weight_shape).astype(s.dtype)
  vs = [Variant.from_dict(v).resolve(s) for v in variants]
  timers = []
  for i, v in enumerate(vs):
    progress("compile", "start", f"compiling variant {i + 1} of {len(vs)}")
    timers.append(_prepare(s, v, x_np, w_np))
  totals: list[list[float]] = [[] for _ in vs]
  progress("timing", "start", ",".join(sorted({v.device or tg.default_device() for v in vs})))  # waits for the devices' locks
  every = max(1, (warmup + repeats) // 10)  # about ten progress reports, outside the timed kernels
  for r in range(warmup + repeats):
    if r % every == 0: progress("timing", "running", f"{'warmup' if r < warmup else 'repeat'} {r + 1} of {warmup + repeats}")
    for i, ts in enumerate(timers):
      t = sum(next(gen) for _, gen in ts)
      if r >= warmup: totals[i].append(t)
  progress("timing", "done", f"{warmup} warmup + {repeats} repeats")
  out = []
  for v, xs in zip(vs, totals):
    device = v.device or tg.default_device()
    compiler = tg.compiler_name(device)
    # samples: the per-repeat totals, so callers can take ratios repeat by repeat (explorer.analysis.diff)
    out.append({"total_s": stats(xs), "samples": xs, "device": device, "compiler": compiler, "fallback": tg.fallback_reason(device)})
  return out
