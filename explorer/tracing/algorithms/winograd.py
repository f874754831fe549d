"""The explorer's own Winograd convolution F(m x m, r x r) (r = 3, or 5 with generated transforms), built with tinygrad's public Tensor
API only.

Shapes (m = output tile, a = m+2 = input tile, t = tiles along H and W):
  d    (a, a, N, C, th, tw)     input tiles, the padded input unfolded with stride m
  XHAT (a, a, N, C, th, tw)     Bt d B                 input transform
  GHAT (a, a, K, C)             G g Gt                 weight transform
  MHAT (a, a, N, K, th, tw)     sum_C XHAT * GHAT      batched product, reduced over the input channels
  Y    (m, m, N, K, th, tw)     At MHAT A              output transform, then interleaved to NCHW and shrunk

Staging (where tinygrad's scheduler puts kernel boundaries; `.contiguous()` marks a STAGE that rangeify keeps):
  staged  XHAT, GHAT, MHAT and Y each their own kernel: 4 compute kernels.
  fused   XHAT and GHAT, then ONE kernel for the product, the reduce and the output transform: 3 compute kernels.
          Dropping `.contiguous()` on MHAT is not enough in tinygrad 0.14 (rangeify still realizes a reduce that is read back
          with expanded ranges), so the output transform is moved inside the reduce, which linearity allows:
            Y = At (sum_C XHAT*GHAT) A = sum_C At (XHAT*GHAT) A
          One reduce over C whose body is the transformed product. Written out, each output element (i, j) of a tile re-does
          the a*a products and its own At combination for every input channel: up to m*m times the product+transform work
          (16x for F(4,3), 4x for F(2,3)) of staged, in exchange for MHAT never going to memory. Codegen shares part of it
          again when it upcasts (i, j): tinygrad's Estimates on a 1x8->8 32x32 conv (CPU, heuristic opts) counted
          1.27 MFLOP fused vs 0.58 staged for F(4,3) (0.91 vs 0.66 for F(2,3)); direct is 1.18.
  single  the fused formulation with no `.contiguous()` at all. With symbolic constants tinygrad inlines the input and weight
          transforms too: ONE kernel, where each output element also recomputes its XHAT and GHAT values (2.61 MFLOP for
          F(4,3), 1.55 for F(2,3) on the conv above) and codegen is the slowest. With materialized constants rangeify cuts
          once more, before the reduce: kernel 1 writes the XHAT*GHAT product (both transforms inlined, a*a*N*K*C*tiles
          values), kernel 2 reduces it and applies At: 2 compute kernels.

Constants:
  symbolic      the matrices' columns are stacked CONSTs (`Tensor.const(tuple)`), folded into kernel code as immediates.
  materialized  each matrix is a device buffer made from host data in this call (a COPY in the schedule), loaded in kernels.
"""
from __future__ import annotations
import math
from typing import Callable
import numpy as np
from explorer.tracing.tg import Tensor, const_column
from explorer.tracing.algorithms.cook_toom import cook_toom
from explorer.spec import ConvSpec

Matrix = list[list[float]]
# (Bt, G, At) per tile: F(4x4,3x3) are tinygrad's WINO matrices, F(2x2,3x3) Lavin & Gray's
WINOGRAD_MATRICES: dict[str, tuple[Matrix, Matrix, Matrix]] = {
  "F(4,3)": ([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
             [[1/4, 0, 0], [-1/6, -1/6, -1/6], [-1/6, 1/6, -1/6], [1/24, 1/12, 1/6], [1/24, -1/12, 1/6], [0, 0, 1]],
             [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]),
  "F(2,3)": ([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
             [[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]],
             [[1, 1, 1, 0], [0, 1, -1, -1]]),
}
# 5x5 kernels: generated from interpolation points (explorer.tracing.algorithms.cook_toom)
WINOGRAD_MATRICES |= {f"F({m},5)": cook_toom(m, 5) for m in (2, 4)}
STAGINGS, CONSTS = ("staged", "fused", "single"), ("symbolic", "materialized")

def taps(tile: str) -> int: return int(tile.strip("F()").split(",")[1])  # F(4,3) -> 3: the kernel size a tile is for

# a column source: k -> the k-th column of a matrix as a 1-D Tensor (length = the matrix's rows)
Columns = Callable[[int], Tensor]

def symbolic_columns(mat: Matrix, dtype) -> Columns:
  return lambda k: const_column(tuple(float(row[k]) for row in mat), dtype)

def materialized_columns(mat: Matrix, device, dtype) -> Columns:
  # a fresh, unrealized tensor from host data each call, so the schedule shows its COPY and the kernels LOAD it
  buf = Tensor(np.array(mat, dtype=np.float64), device=device, dtype=dtype)
  return lambda k: buf[:, k]

def apply_matrix(t: Tensor, cols: Columns, nrows: int, ncols: int, dims: int = 2) -> Tensor:
  """Apply mat along each of t's first `dims` axes (kron(mat, mat) @ t), as sums of column * slice: elementwise, no reduce."""
  ret = t
  for dim in range(dims):
    ret = ret.transpose(0, dim)
    assert ret.shape[0] == ncols, f"matrix with {ncols} columns applied to an axis of {ret.shape[0]}"
    terms = [cols(k).reshape((nrows,) + (1,) * (ret.ndim - 1)) * ret[k] for k in range(ncols)]
    ret = sum(terms[1:], terms[0]).transpose(0, dim)
  return ret

def input_tiles(x: Tensor, m: int, pad: int, r: int = 3) -> tuple[Tensor, tuple[int, int]]:
  """(a, a, N, C, th, tw) overlapping input tiles (a = m + r - 1); the input is padded by `pad` and then up to whole output tiles."""
  out_hw = tuple(d + 2 * pad - (r - 1) for d in x.shape[2:])
  tiles = tuple(math.ceil(o / m) for o in out_hw)
  xp = x.pad(((0, 0), (0, 0), *((pad, pad + t * m - o) for t, o in zip(tiles, out_hw))))
  d = xp.unfold(2, m + r - 1, m).unfold(3, m + r - 1, m)  # unfold appends the window axis: (N, C, th, tw, a, a)
  return d.permute(4, 5, 0, 1, 2, 3), out_hw  # type: ignore[return-value]

def winograd_explorer(x: Tensor, w: Tensor, spec: ConvSpec, tile: str = "F(4,3)", staging: str = "staged", consts: str = "symbolic") -> Tensor:
  """The lazy NCHW output of the rxr (the tile's r), stride 1, groups 1 convolution of x by w with the Winograd tile, staging and
  constants given."""
  if tile not in WINOGRAD_MATRICES: raise ValueError(f"tile must be one of {', '.join(WINOGRAD_MATRICES)}, got {tile!r}")
  if staging not in STAGINGS: raise ValueError(f"staging must be one of {', '.join(STAGINGS)}, got {staging!r}")
  if consts not in CONSTS: raise ValueError(f"consts must be one of {', '.join(CONSTS)}, got {consts!r}")
  r = taps(tile)
  if w.shape[2:] != (r, r) or spec.stride != 1 or spec.groups != 1:
    raise ValueError(f"the explorer's Winograd {tile} needs a {r}x{r} kernel, stride 1, groups 1")
  mats = WINOGRAD_MATRICES[tile]
  m, a = len(mats[2]), len(mats[0])
  bt, g, at = (symbolic_columns(mat, x.dtype) if consts == "symbolic" else materialized_columns(mat, x.device, x.dtype) for mat in mats)
  stage = (lambda t: t) if staging == "single" else (lambda t: t.contiguous())

  d, out_hw = input_tiles(x, m, spec.pad, r)
  (n, c), (th, tw), k = d.shape[2:4], d.shape[4:], w.shape[0]
  xhat = stage(apply_matrix(d, bt, a, a)).reshape(a, a, n, 1, c, th, tw)
  ghat = stage(apply_matrix(w.permute(2, 3, 0, 1), g, a, r)).reshape(a, a, 1, k, c, 1, 1)
  if staging == "staged": y = apply_matrix((xhat * ghat).sum(4).contiguous(), at, m, a)  # (m, m, N, K, th, tw)
  else: y = apply_matrix(xhat * ghat, at, m, a).sum(4)  # the output transform inside the reduce over C
  # (m, m, N, K, th, tw) -> (N, K, th, m, tw, m) -> NCHW, cut to the output size
  y = y.permute(2, 3, 4, 0, 5, 1).reshape(n, k, th * m, tw * m)
  return y.shrink(((0, n), (0, k), (0, out_hw[0]), (0, out_hw[1]))).cast(x.dtype).contiguous()
