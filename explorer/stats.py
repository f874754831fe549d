"""Is B faster than A, or is it noise? Paired timing samples (A and B timed in the same interleaved repeat) compared with a bootstrap
interval on the median ratio, a Wilcoxon signed-rank test, and a bootstrap interval on the ratio of spreads; and a verdict against a
claimed figure. numpy only (no tinygrad, no scipy)."""
from __future__ import annotations
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
  import numpy as np

BOOTSTRAP = 4000
CONFIDENCE = 0.95

def _interval(stat: np.ndarray) -> tuple[float, float]:
  import numpy as np  # here, not at import: a server reads pages without it (15 MiB)
  lo, hi = np.quantile(stat, [(1 - CONFIDENCE) / 2, 1 - (1 - CONFIDENCE) / 2])
  return float(lo), float(hi)

def median_ratio(a: Sequence[float], b: Sequence[float], seed: int = 0) -> dict[str, float]:
  """B/A per repeat (paired), its median and a percentile-bootstrap interval of that median."""
  import numpy as np
  r = np.asarray(b, dtype=np.float64) / np.asarray(a, dtype=np.float64)
  idx = np.random.default_rng(seed).integers(0, len(r), size=(BOOTSTRAP, len(r)))
  lo, hi = _interval(np.median(r[idx], axis=1))
  return {"ratio": float(np.median(r)), "ci_low": lo, "ci_high": hi}

def spread_ratio(a: Sequence[float], b: Sequence[float], seed: int = 0) -> dict[str, float]:
  """std(B)/std(A), and a bootstrap interval (repeats resampled in pairs, as they were timed)."""
  import numpy as np
  x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
  idx = np.random.default_rng(seed).integers(0, len(x), size=(BOOTSTRAP, len(x)))
  sx, sy = x[idx].std(axis=1, ddof=1), y[idx].std(axis=1, ddof=1)
  ok = sx > 0
  lo, hi = _interval(sy[ok] / sx[ok]) if ok.any() else (math.nan, math.nan)
  sa = float(x.std(ddof=1))
  return {"ratio": float(y.std(ddof=1)) / sa if sa > 0 else math.nan, "ci_low": lo, "ci_high": hi}

def signed_rank_p(a: Sequence[float], b: Sequence[float]) -> float:
  """Two-sided p-value of the Wilcoxon signed-rank test on the paired differences b - a (normal approximation with tie and zero
  corrections; fine from about 10 pairs)."""
  import numpy as np
  d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
  d = d[d != 0]
  n = len(d)
  if n == 0: return 1.0
  order = np.argsort(np.abs(d), kind="stable")
  ranks = np.empty(n)
  sorted_abs = np.abs(d)[order]
  i = 0
  while i < n:  # average ranks over ties
    j = i
    while j + 1 < n and sorted_abs[j + 1] == sorted_abs[i]: j += 1
    ranks[order[i:j + 1]] = (i + j) / 2 + 1
    i = j + 1
  w_plus = float(ranks[d > 0].sum())
  mean = n * (n + 1) / 4
  _, counts = np.unique(sorted_abs, return_counts=True)
  var = n * (n + 1) * (2 * n + 1) / 24 - float((counts ** 3 - counts).sum()) / 48
  if var <= 0: return 1.0
  z = (abs(w_plus - mean) - 0.5) / math.sqrt(var)
  return float(math.erfc(max(z, 0.0) / math.sqrt(2)))

def verdict(ci_low: float, ci_high: float, claim: float | None) -> str:
  """Against a claimed ratio B/A (below 1: B is faster): "reproduced" when the interval excludes 1 on the claim's side, "opposite"
  when it excludes 1 on the other side, "not reproduced" when it holds 1 (the difference is within the noise)."""
  if claim is None or claim == 1: return "no claim"
  if ci_high < 1: return "reproduced" if claim < 1 else "opposite"
  if ci_low > 1: return "reproduced" if claim > 1 else "opposite"
  return "not reproduced"

def count_verdict(a: float, b: float, claim: float | None) -> str:
  """Exact counts (operations: no noise, so no interval) against a claimed ratio B/A taken as a threshold: "reproduced" when B/A is at
  least as far from 1 as the claim on its side, "opposite" when it lies on the other side of 1, "not reproduced" between (or at 1)."""
  if claim is None or claim == 1 or a <= 0: return "no claim"
  r = b / a
  if claim > 1: return "reproduced" if r >= claim else "opposite" if r < 1 else "not reproduced"
  return "reproduced" if r <= claim else "opposite" if r > 1 else "not reproduced"

def claim_position(ci_low: float, ci_high: float, claim: float | None) -> str | None:
  """Where the document's figure lies against the measured interval: a verdict of direction says nothing of size (a claimed 1.4% gain
  "reproduced" by a measured 12% one is a different effect)."""
  if claim is None or not (math.isfinite(ci_low) and math.isfinite(ci_high)): return None
  return "below" if claim < ci_low else "above" if claim > ci_high else "inside"

def compare_medians(a: Sequence[float], b: Sequence[float], figure: str, claim: float | None = None) -> dict[str, Any]:
  """One paired figure (run time, compile time): the B/A median with its interval, the signed-rank p-value, the verdict."""
  t = median_ratio(a, b)
  return {"figure": figure, **t, "p_value": signed_rank_p(a, b), "claim": claim, "verdict": verdict(t["ci_low"], t["ci_high"], claim),
          "claim_position": claim_position(t["ci_low"], t["ci_high"], claim)}

def compare(a: Sequence[float], b: Sequence[float], claim_time: float | None = None, claim_spread: float | None = None) -> list[dict[str, Any]]:
  """The two figures the seed documents claim for a variant pair's run times: time (B/A median) and spread (std B / std A)."""
  s = spread_ratio(a, b)
  return [compare_medians(a, b, "time", claim_time),
          {"figure": "spread", **s, "p_value": None, "claim": claim_spread, "verdict": verdict(s["ci_low"], s["ci_high"], claim_spread),
           "claim_position": claim_position(s["ci_low"], s["ci_high"], claim_spread)}]

NOISY_SPREAD = 0.25  # a timing whose standard deviation is over this fraction of its median is flagged as noisy wherever it is shown

def noisy(t: dict[str, Any] | None) -> float | None:
  """std / median of a timing record ({median, std, n}) when that is over NOISY_SPREAD (its median then says little), else None."""
  if not t or not t.get("median") or t.get("std") is None: return None
  spread = float(t["std"]) / float(t["median"])
  return spread if spread > NOISY_SPREAD else None
