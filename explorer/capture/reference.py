"""A numpy-only float64 convolution to check every algorithm's numbers against. No tinygrad imports here."""
from __future__ import annotations
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

def conv2d_reference(x: np.ndarray, w: np.ndarray, stride: int = 1, padding: int = 0, groups: int = 1) -> np.ndarray:
  """Cross-correlation like torch/tinygrad conv2d (NCHW input, (cout, cin//groups, kh, kw) weight), computed in float64."""
  x, w = np.asarray(x, dtype=np.float64), np.asarray(w, dtype=np.float64)
  (n, cin, _, _), (cout, cin_g, kh, kw) = x.shape, w.shape
  if cin != cin_g * groups or cout % groups: raise ValueError(f"input {x.shape} and weight {w.shape} do not match groups={groups}")
  xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
  # (n, cin, oh, ow, kh, kw) windows, strided
  win = sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
  oh, ow = win.shape[2:4]
  win = win.reshape(n, groups, cin_g, oh, ow, kh, kw)
  wg = w.reshape(groups, cout // groups, cin_g, kh, kw)
  out = np.einsum("ngchwyx,gocyx->ngohw", win, wg, optimize=True)
  return out.reshape(n, cout, oh, ow)

def error_stats(out: np.ndarray, ref: np.ndarray) -> dict[str, float]:
  """Errors of out against ref. max_rel is max_abs relative to the largest |ref| (not elementwise), so values near zero do not blow it up."""
  out, ref = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
  if out.shape != ref.shape: raise ValueError(f"shape mismatch: {out.shape} vs reference {ref.shape}")
  max_abs = float(np.max(np.abs(out - ref))) if out.size else 0.0
  ref_max_abs = float(np.max(np.abs(ref))) if ref.size else 0.0
  max_rel = max_abs / ref_max_abs if ref_max_abs > 0 else (0.0 if max_abs == 0 else float("inf"))
  return {"max_abs": max_abs, "max_rel": max_rel, "ref_max_abs": ref_max_abs}
