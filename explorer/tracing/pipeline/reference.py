"""A numpy-only float64 convolution to check every algorithm's numbers against. No tinygrad imports here."""
from __future__ import annotations
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
import numpy as np

CHUNK_BYTES = 4 << 20  # a batch chunk's float64 working set (its padded input, one tap's copy of it, the output and a term)
# chunks compared at once: numpy's matrix products release the GIL, so chunks on threads of their own run on two cores, where
# OpenBLAS's own threads gain little on products this small and spin (a worker runs OpenBLAS single-threaded: explorer.tracing.workers.process)
CHECK_THREADS = 2

def conv2d_reference_chunks(x: np.ndarray, w: np.ndarray, stride: int = 1, padding: int = 0,
                            groups: int = 1) -> Iterator[tuple[slice, np.ndarray]]:
  """Cross-correlation like torch/tinygrad conv2d (NCHW input, (cout, cin//groups, kh, kw) weight), computed in float64 a few images
  at a time: (batch slice, its float64 output) per chunk of about CHUNK_BYTES. Each chunk sums one matrix product per filter tap, so
  no image's windows are materialized (kh*kw times its input), and a float32 input is converted a chunk at a time, never whole."""
  chunk, starts = _chunks(x, w, stride, padding, groups)
  for i in starts: yield chunk(i)

def _chunks(x: np.ndarray, w: np.ndarray, stride: int, padding: int,
            groups: int) -> tuple[Callable[[int], tuple[slice, np.ndarray]], range]:
  """The reference's batch chunks: a function from a chunk's first image to (its batch slice, its float64 output), and the starts."""
  x, w = np.asarray(x), np.asarray(w)
  (n, cin, h, wd), (cout, cin_g, kh, kw) = x.shape, w.shape
  if cin != cin_g * groups or cout % groups: raise ValueError(f"input {x.shape} and weight {w.shape} do not match groups={groups}")
  wg = w.astype(np.float64).reshape(groups, cout // groups, cin_g, kh, kw)
  _, _, oh, ow = conv2d_shape(x.shape, w.shape, stride, padding)
  per_image = (cin * ((h + 2 * padding) * (wd + 2 * padding) + oh * ow) + 2 * cout * oh * ow) * 8
  step = max(1, CHUNK_BYTES // max(1, per_image))
  def chunk(i: int) -> tuple[slice, np.ndarray]:
    xp = np.pad(np.asarray(x[i:i + step], dtype=np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    xg, out = xp.reshape(len(xp), groups, cin_g, *xp.shape[2:]), np.zeros((len(xp), groups, cout // groups, oh, ow))
    for ky in range(kh):
      for kx in range(kw):
        tap = xg[:, :, :, ky:ky + stride * (oh - 1) + 1:stride, kx:kx + stride * (ow - 1) + 1:stride]  # (b, g, c, oh, ow)
        out += np.einsum("ngchw,goc->ngohw", tap, wg[..., ky, kx], optimize=True)
    return slice(i, i + len(xp)), out.reshape(len(xp), cout, oh, ow)
  return chunk, range(0, n, step)

def conv2d_shape(x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: int = 1, padding: int = 0) -> tuple[int, int, int, int]:
  (n, _, h, w), (cout, _, kh, kw) = x_shape, w_shape
  return n, cout, (h + 2 * padding - kh) // stride + 1, (w + 2 * padding - kw) // stride + 1

def conv2d_reference(x: np.ndarray, w: np.ndarray, stride: int = 1, padding: int = 0, groups: int = 1) -> np.ndarray:
  """The whole float64 reference output (conv2d_reference_chunks assembled)."""
  out = np.empty(conv2d_shape(np.shape(x), np.shape(w), stride, padding), dtype=np.float64)
  for rows, chunk in conv2d_reference_chunks(x, w, stride, padding, groups): out[rows] = chunk
  return out

def conv2d_error(out: np.ndarray, x: np.ndarray, w: np.ndarray, stride: int = 1, padding: int = 0, groups: int = 1) -> dict[str, float]:
  """error_stats of out against the float64 reference, chunk by chunk (CHECK_THREADS at once): neither the whole reference nor a
  float64 copy of out is held."""
  if out.shape != (want := conv2d_shape(x.shape, w.shape, stride, padding)): raise ValueError(f"shape mismatch: {out.shape} vs reference {want}")
  chunk, starts = _chunks(x, w, stride, padding, groups)
  def compared(i: int) -> tuple[float, float]:
    rows, ref = chunk(i)
    if ref.size == 0: return 0.0, 0.0
    return float(np.max(np.abs(np.asarray(out[rows], dtype=np.float64) - ref))), float(np.max(np.abs(ref)))
  with ThreadPoolExecutor(CHECK_THREADS) as pool: parts = list(pool.map(compared, starts))
  return _relative(max((p[0] for p in parts), default=0.0), max((p[1] for p in parts), default=0.0))

def error_stats(out: np.ndarray, ref: np.ndarray) -> dict[str, float]:
  """Errors of out against ref. max_rel is max_abs relative to the largest |ref| (not elementwise), so values near zero do not blow it up."""
  out, ref = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
  if out.shape != ref.shape: raise ValueError(f"shape mismatch: {out.shape} vs reference {ref.shape}")
  return _relative(float(np.max(np.abs(out - ref))) if out.size else 0.0, float(np.max(np.abs(ref))) if ref.size else 0.0)

def _relative(max_abs: float, ref_max_abs: float) -> dict[str, float]:
  max_rel = max_abs / ref_max_abs if ref_max_abs > 0 else (0.0 if max_abs == 0 else float("inf"))
  return {"max_abs": max_abs, "max_rel": max_rel, "ref_max_abs": ref_max_abs}
