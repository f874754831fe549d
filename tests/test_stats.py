"""The study statistics against known answers: paired ratios and their intervals, the signed-rank test checked against exact
enumeration on a small sample, and verdicts that follow the intervals."""
from __future__ import annotations
import itertools
import math
import numpy as np
from explorer import stats

def test_a_clear_speedup_is_reproduced_and_noise_is_not():
  rng = np.random.default_rng(1)
  a = 1.0 + 0.01 * rng.standard_normal(60)
  fast = a * 0.95 + 0.002 * rng.standard_normal(60)
  same = a * (1 + 0.01 * rng.standard_normal(60))
  t_fast, t_same = stats.compare(a, fast, claim_time=0.97)[0], stats.compare(a, same, claim_time=0.97)[0]
  assert t_fast["ci_high"] < 1 and abs(t_fast["ratio"] - 0.95) < 0.01 and t_fast["p_value"] < 1e-6 and t_fast["verdict"] == "reproduced"
  assert t_same["ci_low"] < 1 < t_same["ci_high"] and t_same["p_value"] > 0.01 and t_same["verdict"] == "not reproduced"
  assert stats.compare(fast, a, claim_time=0.97)[0]["verdict"] == "opposite"
  # the direction is reproduced; the size is told apart: a claimed 3% gain lies above a measured 5% one's interval
  assert t_fast["claim_position"] == "above" and stats.compare(a, fast, claim_time=0.95)[0]["claim_position"] == "inside"
  assert stats.compare(a, fast)[0]["claim_position"] is None

def test_spread_ratio_sees_a_90_percent_drop():
  rng = np.random.default_rng(2)
  a = 1.0 + 0.1 * rng.standard_normal(50)
  b = 1.0 + 0.01 * rng.standard_normal(50)
  s = stats.compare(a, b, claim_spread=0.1)[1]
  assert s["ci_high"] < 0.2 and abs(s["ratio"] - 0.1) < 0.05 and s["verdict"] == "reproduced"

def _exact_p(d: np.ndarray) -> float:
  """Two-sided signed-rank p-value by enumerating every sign assignment (no ties, no zeros)."""
  ranks = np.argsort(np.argsort(np.abs(d))) + 1
  w = ranks[d > 0].sum()
  all_w = [sum(r for r, s in zip(ranks, signs, strict=False) if s) for signs in itertools.product((0, 1), repeat=len(d))]
  mean = len(d) * (len(d) + 1) / 4
  return sum(abs(x - mean) >= abs(w - mean) for x in all_w) / len(all_w)

def test_signed_rank_p_agrees_with_exact_enumeration():
  rng = np.random.default_rng(3)
  for shift in (0.0, 0.4, 1.0):
    d = rng.standard_normal(14) + shift
    a = np.ones(14)
    assert math.isclose(stats.signed_rank_p(a, a + d), _exact_p(d), abs_tol=0.02), shift
  assert stats.signed_rank_p([1, 2, 3], [1, 2, 3]) == 1.0

def test_exact_counts_are_judged_against_the_claims_threshold():
  """Seed 000's "hundreds to dozens": B (materialized) at least 2x A (symbolic)'s operations."""
  assert stats.count_verdict(40, 300, 2.0) == "reproduced" and stats.count_verdict(100, 200, 2.0) == "reproduced"
  assert stats.count_verdict(278, 300, 2.0) == "not reproduced" and stats.count_verdict(61, 61, 2.0) == "not reproduced"
  assert stats.count_verdict(300, 278, 2.0) == "opposite"
  assert stats.count_verdict(300, 100, 0.5) == "reproduced" and stats.count_verdict(300, 200, 0.5) == "not reproduced"
  assert stats.count_verdict(300, 301, 0.5) == "opposite" and stats.count_verdict(300, 30, None) == "no claim"
