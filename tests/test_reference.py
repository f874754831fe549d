import itertools
import numpy as np
import pytest
from explorer.tracing.pipeline.reference import conv2d_reference, error_stats

def conv2d_loops(x: np.ndarray, w: np.ndarray, stride: int, padding: int, groups: int) -> np.ndarray:
  """The definition, one output element at a time."""
  (n, _, h, wd), (cout, cin_g, kh, kw) = x.shape, w.shape
  oh, ow = (h + 2*padding - kh) // stride + 1, (wd + 2*padding - kw) // stride + 1
  out = np.zeros((n, cout, oh, ow))
  for b, o, y, xx in itertools.product(range(n), range(cout), range(oh), range(ow)):
    g = o // (cout // groups)
    for c, ky, kx in itertools.product(range(cin_g), range(kh), range(kw)):
      iy, ix = y*stride + ky - padding, xx*stride + kx - padding
      if 0 <= iy < h and 0 <= ix < wd: out[b, o, y, xx] += float(x[b, g*cin_g + c, iy, ix]) * float(w[o, c, ky, kx])
  return out

@pytest.mark.parametrize("n,cin,cout,h,w,k,stride,padding,groups", [
  (1, 1, 1, 3, 3, 3, 1, 0, 1),
  (1, 2, 3, 5, 6, 3, 1, 1, 1),
  (2, 3, 4, 7, 5, 3, 2, 1, 1),
  (1, 4, 6, 6, 6, 3, 1, 1, 2),
  (2, 4, 4, 5, 7, 1, 1, 0, 4),
  (1, 2, 2, 8, 6, 5, 2, 2, 1),
  (1, 3, 2, 4, 4, 3, 3, 2, 1),
])
def test_reference_matches_loops(n, cin, cout, h, w, k, stride, padding, groups):
  rng = np.random.default_rng(n * 100 + cin * 10 + k)
  x, wt = rng.standard_normal((n, cin, h, w)).astype(np.float32), rng.standard_normal((cout, cin // groups, k, k)).astype(np.float32)
  ref = conv2d_reference(x, wt, stride, padding, groups)
  assert ref.dtype == np.float64
  np.testing.assert_allclose(ref, conv2d_loops(x, wt, stride, padding, groups), rtol=1e-12, atol=1e-12)

def test_reference_identity_kernel():
  x = np.arange(2*3*4*5, dtype=np.float64).reshape(2, 3, 4, 5)
  w = np.zeros((3, 3, 3, 3)); w[[0, 1, 2], [0, 1, 2], 1, 1] = 1
  np.testing.assert_array_equal(conv2d_reference(x, w, 1, 1, 1), x)

def test_reference_rejects_bad_groups():
  with pytest.raises(ValueError): conv2d_reference(np.zeros((1, 3, 4, 4)), np.zeros((2, 3, 3, 3)), groups=2)

def test_error_stats():
  s = error_stats(np.array([1.0, 2.5, -4.0]), np.array([1.0, 2.0, -3.0]))
  assert s == {"max_abs": 1.0, "max_rel": 1.0 / 3.0, "ref_max_abs": 3.0}

def test_error_stats_near_zero_reference():
  # relative to the largest |ref|, not elementwise: a tiny reference value does not blow it up
  s = error_stats(np.array([1e-3, 10.0]), np.array([1e-12, 10.0]))
  assert s["max_rel"] == pytest.approx(1e-4)
  assert error_stats(np.zeros(3), np.zeros(3))["max_rel"] == 0.0
  assert error_stats(np.ones(3), np.zeros(3))["max_rel"] == float("inf")

def test_error_stats_shape_mismatch():
  with pytest.raises(ValueError): error_stats(np.zeros((2, 3)), np.zeros((3, 2)))

def test_the_reference_in_batch_chunks_equals_the_whole_batch_at_once(monkeypatch):
  """Chunked over the batch (so the large preset's windows stay near CHUNK_BYTES instead of 1.2 GiB): the same numbers, to float64's
  last digits (einsum may sum in another order for another batch size)."""
  import numpy as np
  from explorer.tracing.pipeline import reference
  rng = np.random.default_rng(3)
  x, w = rng.standard_normal((5, 4, 9, 7)), rng.standard_normal((6, 2, 3, 3))
  whole = reference.conv2d_reference(x, w, stride=2, padding=1, groups=2)
  monkeypatch.setattr(reference, "CHUNK_BYTES", 1)  # one image per chunk
  chunked = reference.conv2d_reference(x, w, stride=2, padding=1, groups=2)
  assert whole.shape == chunked.shape == (5, 6, 5, 4) and np.allclose(chunked, whole, rtol=1e-13, atol=1e-13)

def test_conv2d_error_streams_the_reference_and_agrees_with_the_whole(monkeypatch):
  """The trace's check (conv2d_error) goes chunk by chunk over the batch and finds what error_stats finds against the whole reference:
  the same largest error, wherever in the batch it is, and a float32 output is compared without a float64 copy of it."""
  from explorer.tracing.pipeline import reference
  rng = np.random.default_rng(3)
  x, w = rng.standard_normal((5, 4, 9, 9)).astype(np.float32), rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
  whole = reference.conv2d_reference(x.astype(np.float64), w.astype(np.float64), 2, 1, 2)
  out = whole.astype(np.float32)
  out[3, 1, 2, 2] += 0.5  # in the fourth image: a later chunk
  monkeypatch.setattr(reference, "CHUNK_BYTES", 1)  # one image per chunk
  got = reference.conv2d_error(out, x, w, 2, 1, 2)
  assert got == pytest.approx(error_stats(out.astype(np.float64), whole), rel=1e-12)
  assert got["max_abs"] == pytest.approx(0.5, abs=1e-6)
  with pytest.raises(ValueError, match="shape mismatch"): reference.conv2d_error(out[:4], x, w, 2, 1, 2)
