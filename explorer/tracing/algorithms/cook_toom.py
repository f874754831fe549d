"""Winograd transforms F(m, r) generated from interpolation points (the Cook-Toom construction Lavin and Gray use), not typed in.

With a = m + r - 1 and a - 1 finite points p_j plus the point at infinity:
  At (m x a)  At[i][j] = p_j ** i, the last column 1 in the last row (infinity)
  G  (a x r)  G[j][k] = p_j ** k / prod_{l != j} (p_j - p_l), the last row picks g's last tap
  Bt (a x a)  the unique matrix with sum_j At[i][j] G[j][k] Bt[j][l] = [l == i + k]: then y = At ((G g) * (Bt d)) is the
              correlation of d (a inputs) with g (r taps), m outputs
Bt is solved in floating point, then made exact (small rationals) and the identity checked in exact arithmetic: a bad choice of
points fails loudly here rather than as a wrong convolution."""
from __future__ import annotations
import functools
from fractions import Fraction
import numpy as np

Matrix = list[list[float]]
POINTS = (0, 1, -1, 2, -2, Fraction(1, 2), Fraction(-1, 2), 3, -3)  # small points first: smaller entries, less rounding

@functools.cache
def cook_toom(m: int, r: int) -> tuple[Matrix, Matrix, Matrix]:
  """(Bt, G, At) of F(m, r), as the explorer's Winograd applies them (explorer.tracing.algorithms.winograd)."""
  a = m + r - 1
  if a - 1 > len(POINTS): raise ValueError(f"F({m},{r}) needs {a - 1} interpolation points; {len(POINTS)} are defined")
  p = [Fraction(x) for x in POINTS[:a - 1]]
  at = [[p[j] ** i for j in range(a - 1)] + [Fraction(int(i == m - 1))] for i in range(m)]
  norm = [functools.reduce(lambda acc, q: acc * q, (p[j] - p[k] for k in range(a - 1) if k != j), Fraction(1)) for j in range(a - 1)]
  g = [[p[j] ** k / norm[j] for k in range(r)] for j in range(a - 1)] + [[Fraction(int(k == r - 1)) for k in range(r)]]
  system = np.array([[float(at[i][j] * g[j][k]) for j in range(a)] for i in range(m) for k in range(r)])
  bt = [[Fraction(0)] * a for _ in range(a)]
  for col in range(a):
    rhs = np.array([float(col == i + k) for i in range(m) for k in range(r)])
    sol = np.linalg.lstsq(system, rhs, rcond=None)[0]
    for j in range(a): bt[j][col] = Fraction(float(sol[j])).limit_denominator(1 << 12)
  for i in range(m):  # the identity, exactly
    for k in range(r):
      for col in range(a):
        if sum(at[i][j] * g[j][k] * bt[j][col] for j in range(a)) != int(col == i + k):
          raise ArithmeticError(f"F({m},{r}): the generated transforms do not compute a correlation (at {i},{k},{col})")
  def floats(mat: list[list[Fraction]]) -> Matrix: return [[float(x) for x in row] for row in mat]
  return floats(bt), floats(g), floats(at)
