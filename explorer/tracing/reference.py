"""A numpy-only float64 convolution to check every algorithm's numbers against. No tinygrad imports here."""
from __future__ import annotations
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

CHUNK_BYTES = 64 << 20  # the float64 windows einsum materializes, per batch chunk: the large preset's whole batch would be 1.2 GiB

def conv2d_reference(x: np.ndarray, w: np.ndarray, stride: int = 1, padding: int = 0, groups: int = 1) -> np.ndarray:
  """Cross-correlation like torch/tinygrad conv2d (NCHW input, (cout, cin//groups, kh, kw) weight), computed in float64, a few images
  at a time (CHUNK_BYTES of windows each)."""
  x, w = np.asarray(x), np.asarray(w)
  (n, cin, _, _), (cout, cin_g, kh, kw) = x.shape, w.shape
  if cin != cin_g * groups or cout % groups: raise ValueError(f"input {x.shape} and weight {w.shape} do not match groups={groups}")
  wg = w.astype(np.float64).reshape(groups, cout // groups, cin_g, kh, kw)
  oh, ow = ((d + 2 * padding - k) // stride + 1 for d, k in zip(x.shape[2:], (kh, kw)))
  out = np.empty((n, cout, oh, ow), dtype=np.float64)
  step = max(1, CHUNK_BYTES // max(1, cin * oh * ow * kh * kw * 8))
  for i in range(0, n, step):
    xp = np.pad(np.asarray(x[i:i + step], dtype=np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    win = sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]  # (b, cin, oh, ow, kh, kw) windows, strided
    win = win.reshape(len(xp), groups, cin_g, oh, ow, kh, kw)
    out[i:i + step] = np.einsum("ngchwyx,gocyx->ngohw", win, wg, optimize=True).reshape(len(xp), cout, oh, ow)
  return out

def error_stats(out: np.ndarray, ref: np.ndarray) -> dict[str, float]:
  """Errors of out against ref. max_rel is max_abs relative to the largest |ref| (not elementwise), so values near zero do not blow it up."""
  out, ref = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
  if out.shape != ref.shape: raise ValueError(f"shape mismatch: {out.shape} vs reference {ref.shape}")
  max_abs = float(np.max(np.abs(out - ref))) if out.size else 0.0
  ref_max_abs = float(np.max(np.abs(ref))) if ref.size else 0.0
  max_rel = max_abs / ref_max_abs if ref_max_abs > 0 else (0.0 if max_abs == 0 else float("inf"))
  return {"max_abs": max_abs, "max_rel": max_rel, "ref_max_abs": ref_max_abs}
