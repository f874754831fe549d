import math
import re
import numpy as np
import pytest
from tinygrad import Tensor, dtypes
from explorer.spec import ERROR_TOLERANCE, ConvSpec, Variant
from explorer.tracing.algorithms import build_conv
from explorer.tracing.algorithms.winograd import WINOGRAD_MATRICES, winograd_explorer
from explorer.tracing.pipeline.reference import conv2d_reference, error_stats

# batch 2, cin != cout, H and W no multiple of either tile (so padding up to whole tiles and the final shrink are exercised)
SPEC = ConvSpec(2, 3, 5, 9, 11, 3)
TILES, STAGINGS, CONSTS = ("F(4,3)", "F(2,3)"), ("staged", "fused", "single"), ("symbolic", "materialized")
# compute kernels tinygrad 0.14 schedules; single+materialized cuts before the reduce (the XHAT*GHAT product with both transforms inlined)
KERNELS = {("staged", "symbolic"): 4, ("staged", "materialized"): 4, ("fused", "symbolic"): 3, ("fused", "materialized"): 3,
           ("single", "symbolic"): 1, ("single", "materialized"): 2}
# max |out - ref| / max |ref|
TOL = ERROR_TOLERANCE  # the tolerances the explorer judges traces by
ANSI = re.compile(r"\x1b\[[0-9;]*m")

def inputs(spec: ConvSpec, seed: int = 0) -> tuple[Tensor, Tensor, np.ndarray]:
  rng = np.random.default_rng(seed)
  xn, wn = (rng.standard_normal(s).astype(spec.dtype) for s in (spec.input_shape, spec.weight_shape))
  x, w = Tensor(xn).realize(), Tensor(wn).realize()
  return x, w, conv2d_reference(xn, wn, spec.stride, spec.pad, spec.groups)

def schedule(out: Tensor) -> list:
  """The ASTs of the schedule's calls (SINK for a compute kernel, COPY, ...). NOTE: this turns `out` into an unfilled buffer."""
  return [call.src[0] for call in out.schedule_linear().src]

def call_inputs(out: Tensor) -> list[tuple[str, int]]:
  """(op name of the call, size) for every buffer that a compute kernel reads or writes."""
  return [(call.src[0].op.name, math.prod(b.shape)) for call in out.schedule_linear().src for b in call.src[1:]]

def matrix_sizes(tile: str) -> set[int]: return {len(m) * len(m[0]) for m in WINOGRAD_MATRICES[tile]}

@pytest.fixture(scope="module")
def data(): return inputs(SPEC)

@pytest.fixture(scope="module")
def direct_out(data):
  x, w, _ = data
  return x.conv2d(w, padding=SPEC.pad).numpy()

@pytest.mark.parametrize("consts", CONSTS)
@pytest.mark.parametrize("staging", STAGINGS)
@pytest.mark.parametrize("tile", TILES)
def test_numerics(data, direct_out, tile, staging, consts):
  x, w, ref = data
  out = winograd_explorer(x, w, SPEC, tile, staging, consts)
  assert out.shape == SPEC.output_shape and out.dtype == x.dtype
  o = out.numpy()
  assert error_stats(o, ref)["max_rel"] < TOL[(tile, "float32")]
  assert error_stats(o, direct_out)["max_rel"] < TOL[(tile, "float32")]

@pytest.mark.parametrize("consts", CONSTS)
@pytest.mark.parametrize("staging", STAGINGS)
@pytest.mark.parametrize("tile", TILES)
def test_kernel_counts(data, tile, staging, consts):
  x, w, _ = data
  asts = schedule(winograd_explorer(x, w, SPEC, tile, staging, consts))
  assert sum(a.op.name == "SINK" for a in asts) == KERNELS[(staging, consts)]
  # the only non-compute calls are the COPYs of the three materialized matrices
  assert [a.op.name for a in asts if a.op.name != "SINK"] == (["COPY"] * 3 if consts == "materialized" else [])
  assert all(ANSI.sub("", a.arg.name) for a in asts if a.op.name == "SINK")

@pytest.mark.parametrize("tile", TILES)
def test_single_has_fewer_kernels_than_fused(data, tile):
  x, w, _ = data
  for consts in CONSTS:
    n = {s: sum(a.op.name == "SINK" for a in schedule(winograd_explorer(x, w, SPEC, tile, s, consts))) for s in STAGINGS}
    assert n["single"] < n["fused"] < n["staged"]

@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("staging", ["staged", "fused"])
def test_constants_buffers(data, tile, staging):
  x, w, _ = data
  sym = call_inputs(winograd_explorer(x, w, SPEC, tile, staging, "symbolic"))
  mat = call_inputs(winograd_explorer(x, w, SPEC, tile, staging, "materialized"))
  sizes = matrix_sizes(tile)
  assert not {s for _, s in sym} & sizes, "symbolic constants must fold into the code, no buffer for a matrix"
  assert sorted(s for op, s in mat if op == "COPY") == sorted(2 * list(sizes)), "each matrix is copied from the host once"
  assert {s for op, s in mat if op == "SINK"} >= sizes, "the kernels load the materialized matrices"

def test_materialized_fresh_each_call(data):
  # a realized first call must not leave the matrices realized for the next one
  x, w, _ = data
  winograd_explorer(x, w, SPEC, "F(2,3)", "staged", "materialized").realize()
  assert [a.op.name for a in schedule(winograd_explorer(x, w, SPEC, "F(2,3)", "staged", "materialized"))].count("COPY") == 3

@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("padding,hw", [(0, (3, 3)), (0, (10, 7)), (2, (5, 9)), (1, (4, 4))])
def test_padding_and_sizes(tile, padding, hw):
  spec = ConvSpec(1, 2, 3, *hw, 3, padding=padding)
  x, w, ref = inputs(spec, seed=padding)
  out = winograd_explorer(x, w, spec, tile, "fused", "symbolic")
  assert out.shape == spec.output_shape
  assert error_stats(out.numpy(), ref)["max_rel"] < TOL[(tile, "float32")]

@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("staging,consts", [("staged", "symbolic"), ("fused", "materialized")])
def test_float16(tile, staging, consts):
  spec = ConvSpec(2, 3, 4, 8, 10, 3, dtype="float16")
  x, w, ref = inputs(spec, seed=1)
  out = winograd_explorer(x, w, spec, tile, staging, consts)
  assert out.dtype == dtypes.half and out.shape == spec.output_shape
  o = out.numpy()
  assert np.isfinite(o).all()
  assert error_stats(o, ref)["max_rel"] < TOL[(tile, "float16")]

@pytest.mark.parametrize("bad", [{"tile": "F(6,3)"}, {"staging": "none"}, {"consts": "lazy"}])
def test_rejects_bad_arguments(data, bad):
  x, w, _ = data
  with pytest.raises(ValueError): winograd_explorer(x, w, SPEC, **{"tile": "F(4,3)", "staging": "staged", "consts": "symbolic", **bad})

def test_rejects_a_kernel_the_tile_is_not_for():
  spec = ConvSpec(1, 2, 2, 8, 8, 5)
  x, w, _ = inputs(spec)
  with pytest.raises(ValueError, match="needs a 3x3 kernel"): winograd_explorer(x, w, spec)
  x, w, _ = inputs(SPEC)
  with pytest.raises(ValueError, match="needs a 5x5 kernel"): winograd_explorer(x, w, SPEC, "F(2,5)")

# ***** 5x5: transforms generated from interpolation points (Cook-Toom) *****

SPEC5 = ConvSpec(2, 3, 4, 11, 9, 5)  # H and W no multiple of either tile

@pytest.mark.parametrize("tile", ["F(2,5)", "F(4,5)"])
@pytest.mark.parametrize("staging,consts", [("staged", "symbolic"), ("fused", "materialized"), ("single", "symbolic")])
def test_5x5_numerics(tile, staging, consts):
  x, w, ref = inputs(SPEC5, seed=5)
  out = winograd_explorer(x, w, SPEC5, tile, staging, consts)
  assert out.shape == SPEC5.output_shape
  assert error_stats(out.numpy(), ref)["max_rel"] < TOL[(tile, "float32")]

@pytest.mark.parametrize("tile", ["F(2,5)", "F(4,5)"])
def test_5x5_float16_and_padding(tile):
  spec = ConvSpec(1, 3, 4, 10, 12, 5, dtype="float16")
  x, w, ref = inputs(spec, seed=6)
  o = winograd_explorer(x, w, spec, tile, "staged", "symbolic").numpy()
  assert np.isfinite(o).all() and error_stats(o, ref)["max_rel"] < TOL[(tile, "float16")]
  spec = ConvSpec(1, 2, 3, 7, 6, 5, padding=0)
  x, w, ref = inputs(spec, seed=7)
  assert error_stats(winograd_explorer(x, w, spec, tile, "fused", "symbolic").numpy(), ref)["max_rel"] < TOL[(tile, "float32")]

def test_generated_transforms_compute_a_correlation():
  """The 1-D identity y = At ((G g) * (Bt d)) for random taps and inputs, for the generated 5x5 tiles and for a generated F(2,3) and
  F(4,3) (which need not equal the typed-in ones, only compute the same)."""
  from explorer.tracing.algorithms.cook_toom import cook_toom
  rng = np.random.default_rng(0)
  for m, r in ((2, 3), (4, 3), (2, 5), (4, 5), (6, 3)):
    bt, g, at = (np.array(x) for x in cook_toom(m, r))
    taps, d = rng.standard_normal(r), rng.standard_normal(m + r - 1)
    assert np.allclose(at @ ((g @ taps) * (bt @ d)), [taps @ d[i:i + r] for i in range(m)], atol=1e-9), (m, r)
  assert WINOGRAD_MATRICES["F(4,5)"] == cook_toom(4, 5)

def test_the_5x5_preset_runs_as_winograd():
  assert Variant(algo="winograd", wino_impl="explorer", tile="F(4,5)").winograd_problem(ConvSpec(1, 2, 2, 8, 8, 5)) is None
  assert "needs a 3x3 kernel" in Variant(algo="winograd").winograd_problem(ConvSpec(1, 2, 2, 8, 8, 5))
  assert "needs a 5x5 kernel" in Variant(algo="winograd", wino_impl="explorer", tile="F(2,5)").winograd_problem(SPEC)

def test_builtin_wino_via_build_conv():
  spec = ConvSpec(1, 3, 4, 12, 12, 3)
  x, w, ref = inputs(spec)
  variant = Variant(algo="winograd").resolve(spec)
  assert sum(a.op.name == "SINK" for a in schedule(build_conv(x, w, spec, variant))) == 4
  assert sum(a.op.name == "SINK" for a in schedule(build_conv(x, w, spec, Variant().resolve(spec)))) == 1
  assert error_stats(build_conv(x, w, spec, variant).numpy(), ref)["max_rel"] < 1e-3

def test_explorer_wino_via_build_conv():
  spec = ConvSpec(1, 3, 4, 12, 12, 3)
  x, w, ref = inputs(spec)
  variant = Variant(algo="winograd", wino_impl="explorer", tile="F(2,3)", staging="fused").resolve(spec)
  assert sum(a.op.name == "SINK" for a in schedule(build_conv(x, w, spec, variant))) == 3
  assert error_stats(build_conv(x, w, spec, variant).numpy(), ref)["max_rel"] < 1e-4
