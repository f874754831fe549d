"""Unit tests for explorer/spec.py: presets, validation messages, Winograd applicability, Variant options, round trips."""
import dataclasses
import json
import pytest
from explorer.spec import ALGOS, CONSTS, DEFAULT_MEMORY_BUDGET, PRESETS, STAGINGS, TILES, WINO_IMPLS, ConvSpec, SpecError, Variant, preset_of
from explorer.targets import TARGETS

def raises_one_line(fn, *match: str) -> str:
  """fn() raises SpecError with a one-line message containing every string in match."""
  with pytest.raises(SpecError) as ei: fn()
  msg = str(ei.value)
  assert msg and "\n" not in msg, f"not a one-line message: {msg!r}"
  for m in match: assert m in msg, f"{m!r} not in {msg!r}"
  return msg

# ***** presets *****

EXPECTED_PRESETS = {  # name: (batch, cin, cout, height, width, kernel)
  "small": (1, 3, 16, 32, 32, 3),
  "medium": (8, 16, 32, 64, 64, 3),
  "large": (16, 32, 64, 128, 128, 3),
  "k5": (8, 16, 32, 64, 64, 5),
  "wino8": (1, 8, 8, 32, 32, 3),
  "wino16": (1, 16, 16, 32, 32, 3),
  "wino32": (1, 32, 32, 64, 64, 3),
}

def test_preset_names_exact():
  assert list(PRESETS) == list(EXPECTED_PRESETS)

@pytest.mark.parametrize("name,dims", EXPECTED_PRESETS.items())
def test_preset_shape(name, dims):
  p = PRESETS[name]
  b, cin, cout, h, w, k = dims
  assert (p.batch, p.cin, p.cout, p.height, p.width, p.kernel) == dims
  assert (p.stride, p.padding, p.groups, p.dtype) == (1, None, 1, "float32")
  assert p.pad == k // 2
  assert p.out_hw == (h, w), "default padding keeps the spatial size"
  assert p.input_shape == (b, cin, h, w)
  assert p.weight_shape == (cout, cin, k, k)
  assert p.output_shape == (b, cout, h, w)
  assert p.validate() is p
  assert preset_of(p) == name
  assert preset_of(dataclasses.replace(p)) == name, "presets are found by value, not identity"

def test_preset_of_unknown():
  assert preset_of(ConvSpec(2, 3, 16, 32, 32, 3)) is None
  assert preset_of(dataclasses.replace(PRESETS["small"], dtype="float16")) is None

def test_small_sizes():
  s = PRESETS["small"]
  assert s.itemsize == 4
  assert s.tensor_bytes == (1*3*32*32 + 16*3*3*3 + 1*16*32*32) * 4
  assert s.direct_flops == 2 * (1*16*32*32) * 3 * 3*3
  assert s.label() == "1x3->16 32x32 k3"

# ***** ConvSpec geometry *****

@pytest.mark.parametrize("kw,out_hw", [
  ({"kernel": 3}, (32, 32)),
  ({"kernel": 5}, (32, 32)),
  ({"kernel": 1}, (32, 32)),
  ({"kernel": 3, "stride": 2}, (16, 16)),
  ({"kernel": 3, "padding": 0}, (30, 30)),
  ({"kernel": 5, "padding": 0, "stride": 2}, (14, 14)),
])
def test_out_hw(kw, out_hw):
  assert ConvSpec(1, 4, 8, 32, 32, **kw).validate().out_hw == out_hw

def test_non_square_and_dtype():
  s = ConvSpec(2, 4, 8, 16, 24, 3, dtype="float16").validate()
  assert s.output_shape == (2, 8, 16, 24)
  assert s.itemsize == 2
  assert s.tensor_bytes == (2*4*16*24 + 8*4*9 + 2*8*16*24) * 2

def test_groups_geometry():
  s = ConvSpec(1, 16, 32, 8, 8, 3, groups=4).validate()
  assert s.weight_shape == (32, 4, 3, 3)
  assert s.direct_flops == 2 * (1*32*8*8) * 4 * 9
  assert s.label() == "1x16->32 8x8 k3 g4"

def test_label_extras():
  assert ConvSpec(1, 4, 8, 32, 32, 3, stride=2, padding=0, dtype="float16").label() == "1x4->8 32x32 k3 s2 p0 float16"
  assert ConvSpec(1, 4, 8, 32, 32, 3, padding=1).label() == "1x4->8 32x32 k3", "padding equal to the default is not shown"

# ***** ConvSpec validation *****

@pytest.mark.parametrize("field_,value", [
  ("batch", 0), ("cin", -1), ("cout", 0), ("height", 0), ("width", -5), ("kernel", 0), ("stride", 0), ("groups", 0),
  ("batch", 2.0), ("kernel", "3"), ("cin", True), ("height", None),
])
def test_bad_positive_int(field_, value):
  raises_one_line(dataclasses.replace(PRESETS["small"], **{field_: value}).validate, field_, "positive integer", repr(value))

@pytest.mark.parametrize("value", [-1, 1.5, "1"])
def test_bad_padding(value):
  raises_one_line(dataclasses.replace(PRESETS["small"], padding=value).validate, "padding", "non-negative")

def test_zero_padding_ok():
  assert ConvSpec(1, 3, 16, 32, 32, 3, padding=0).validate().pad == 0

@pytest.mark.parametrize("dtype", ["int8", "float64", "fp32", ""])
def test_bad_dtype(dtype):
  raises_one_line(dataclasses.replace(PRESETS["small"], dtype=dtype).validate, "dtype", "float32", "float16")

@pytest.mark.parametrize("cin,cout,groups", [(16, 32, 3), (3, 16, 2), (16, 6, 4), (4, 8, 8)])
def test_bad_groups(cin, cout, groups):
  raises_one_line(ConvSpec(1, cin, cout, 8, 8, 3, groups=groups).validate, f"groups={groups}", str(cin), str(cout))

@pytest.mark.parametrize("cin,cout,groups", [(16, 32, 16), (8, 8, 8), (3, 3, 1)])
def test_good_groups(cin, cout, groups):
  ConvSpec(1, cin, cout, 8, 8, 3, groups=groups).validate()

def test_kernel_too_big():
  raises_one_line(ConvSpec(1, 3, 16, 4, 4, 7, padding=0).validate, "kernel 7x7", "4x4")
  ConvSpec(1, 3, 16, 4, 4, 7).validate()  # padding 3 makes it fit

def test_memory_budget():
  huge = ConvSpec(64, 256, 256, 512, 512, 3)
  assert huge.tensor_bytes > DEFAULT_MEMORY_BUDGET
  raises_one_line(huge.validate, "MiB", "memory budget")
  small = PRESETS["small"]
  raises_one_line(lambda: small.validate(memory_budget=small.tensor_bytes - 1), "memory budget")
  assert small.validate(memory_budget=small.tensor_bytes) is small

def test_spec_error_is_value_error():
  assert issubclass(SpecError, ValueError)

def test_frozen():
  with pytest.raises(dataclasses.FrozenInstanceError): PRESETS["small"].batch = 2  # type: ignore[misc]
  with pytest.raises(dataclasses.FrozenInstanceError): Variant().opt = "none"  # type: ignore[misc]

# ***** Variant validation *****

def test_variant_defaults_valid():
  v = Variant()
  assert v.validate() is v
  assert (v.algo, v.opt, v.targets, v.beam) == ("direct", "heuristic", (), 0)  # the host's own target only; others on first view
  assert v.label() == "direct opt=heuristic"

@pytest.mark.parametrize("opt,beam", [("heuristic", 0), ("none", 0), ("beam:1", 1), ("beam:4", 4), ("beam:8", 8)])
def test_good_opt(opt, beam):
  v = Variant(opt=opt).validate()
  assert v.beam == beam

@pytest.mark.parametrize("opt", [
  "", "beam", "beam:", "beam:0", "beam:01", "beam:-1", "beam:x", "beam: 2", "BEAM:2", "Heuristic", "heuristic ", " none", "beam:2:3", "greedy",
  "heuristic\n", "beam:2\n",
])
def test_bad_opt(opt):
  raises_one_line(Variant(opt=opt).validate, "opt must be heuristic, none or beam:N")

def test_beam_limit():
  raises_one_line(Variant(opt="beam:9").validate, "beam width 9", "limit of 8")
  assert Variant(opt="beam:9").validate(max_beam=16).beam == 9

@pytest.mark.parametrize("targets", [("cuda",), ("clang",), TARGETS, ("wgsl", "ptx")])
def test_good_targets(targets):
  assert Variant(targets=targets).validate().targets == targets

@pytest.mark.parametrize("targets,bad", [(("vulkan",), "vulkan"), (("cuda", "CUDA"), "CUDA"), (("metal", "gpu", "hip"), "gpu, hip")])
def test_unknown_targets(targets, bad):
  raises_one_line(Variant(targets=targets).validate, f"unknown target(s) {bad}", "cuda")

def test_duplicate_targets():
  raises_one_line(Variant(targets=("cuda", "metal", "cuda")).validate, "more than once")

@pytest.mark.parametrize("name,allowed", [("algo", ALGOS), ("wino_impl", WINO_IMPLS), ("tile", TILES), ("staging", STAGINGS), ("consts", CONSTS)])
def test_one_of_fields(name, allowed):
  raises_one_line(Variant(**{name: "bogus"}).validate, name, "bogus", *allowed)

@pytest.mark.parametrize("warmup,repeats,ok", [(0, 1, True), (1000, 1000, True), (-1, 10, False), (2, 0, False), (2, 1001, False), (1001, 10, False)])
def test_warmup_repeats(warmup, repeats, ok):
  v = Variant(warmup=warmup, repeats=repeats)
  if ok: v.validate()
  else: raises_one_line(v.validate, "warmup", "repeats")

def test_wino_impl_needs_winograd():
  raises_one_line(Variant(wino_impl="explorer").validate, "--wino-impl", "winograd")

@pytest.mark.parametrize("kw", [{"tile": "F(2,3)"}, {"staging": "fused"}, {"consts": "materialized"}])
def test_builtin_winograd_is_fixed(kw):
  raises_one_line(Variant(algo="winograd", **kw).validate, "builtin Winograd", "--wino-impl explorer")
  Variant(algo="winograd", wino_impl="explorer", **kw).validate()

@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("staging", STAGINGS)
@pytest.mark.parametrize("consts", CONSTS)
def test_explorer_winograd_combinations(tile, staging, consts):
  v = Variant(algo="winograd", wino_impl="explorer", tile=tile, staging=staging, consts=consts)
  assert v.resolve(PRESETS["wino8" if tile.endswith(",3)") else "k5"]) is v  # a tile for 3x3 or for 5x5 kernels
  assert v.label() == f"winograd {tile} {staging} {consts} opt=heuristic"

def test_variant_labels():
  assert Variant(algo="winograd", opt="beam:2").label() == "winograd builtin opt=beam:2"

# ***** Winograd applicability and fallback *****

@pytest.mark.parametrize("name", ["small", "medium", "large", "wino8", "wino16", "wino32"])
@pytest.mark.parametrize("impl", WINO_IMPLS)
def test_winograd_applies_to_3x3_presets(name, impl):
  v = Variant(algo="winograd", wino_impl=impl)
  assert v.winograd_problem(PRESETS[name]) is None
  assert v.resolve(PRESETS[name]) is v

@pytest.mark.parametrize("spec,match", [
  (PRESETS["k5"], "5x5"),
  (ConvSpec(1, 8, 8, 32, 32, 3, stride=2), "stride 2"),
  (ConvSpec(1, 8, 8, 32, 32, 1), "1x1"),
])
@pytest.mark.parametrize("impl", WINO_IMPLS)
def test_winograd_not_applicable_raises(spec, match, impl):
  raises_one_line(lambda: Variant(algo="winograd", wino_impl=impl).resolve(spec), match, "--fallback")

def test_explorer_winograd_groups():
  spec = ConvSpec(1, 8, 8, 32, 32, 3, groups=2)
  raises_one_line(lambda: Variant(algo="winograd", wino_impl="explorer").resolve(spec), "groups=1")
  Variant(algo="winograd").resolve(spec)  # the builtin one takes groups

@pytest.mark.parametrize("spec,match", [(PRESETS["k5"], "5x5"), (ConvSpec(1, 8, 8, 32, 32, 3, stride=2), "stride 2")])
@pytest.mark.parametrize("impl", WINO_IMPLS)
def test_winograd_fallback(spec, match, impl):
  kw = {"tile": "F(2,3)", "staging": "fused", "consts": "materialized"} if impl == "explorer" else {}
  v = Variant(algo="winograd", wino_impl=impl, fallback=True, opt="beam:2", targets=("clang",), notes=("earlier",), **kw)
  r = v.resolve(spec)
  assert (r.algo, r.wino_impl, r.tile, r.staging, r.consts) == ("direct", "builtin", "F(4,3)", "staged", "symbolic")
  assert (r.opt, r.targets, r.fallback) == ("beam:2", ("clang",), True), "the rest is kept"
  assert r.notes[0] == "earlier" and len(r.notes) == 2
  assert r.notes[1].startswith("fell back to the direct algorithm") and match in r.notes[1] and "\n" not in r.notes[1]
  assert r.validate() is r
  assert r.winograd_problem(spec) is None

def test_fallback_not_used_when_winograd_applies():
  v = Variant(algo="winograd", fallback=True)
  assert v.resolve(PRESETS["wino16"]) is v and v.notes == ()

def test_direct_ignores_winograd_limits():
  assert Variant().winograd_problem(PRESETS["k5"]) is None
  assert Variant().resolve(ConvSpec(1, 8, 8, 32, 32, 5, stride=2)).algo == "direct"

def test_resolve_validates_both():
  raises_one_line(lambda: Variant(opt="beam:0").resolve(PRESETS["small"]), "opt")
  raises_one_line(lambda: Variant().resolve(ConvSpec(0, 3, 16, 32, 32, 3)), "batch")

# ***** round trips *****

@pytest.mark.parametrize("spec", [*PRESETS.values(), ConvSpec(2, 16, 32, 24, 40, 5, stride=2, padding=1, groups=4, dtype="float16")], ids=str)
def test_spec_round_trip(spec):
  d = spec.to_dict()
  assert set(d) == {f.name for f in dataclasses.fields(ConvSpec)}
  assert ConvSpec.from_dict(d) == spec
  assert ConvSpec.from_dict(json.loads(json.dumps(d))) == spec

@pytest.mark.parametrize("v", [
  Variant(),
  Variant(algo="winograd", wino_impl="explorer", tile="F(2,3)", staging="single", consts="materialized", opt="beam:3",
          targets=("clang", "llvm", "wgsl"), warmup=0, repeats=1, time=False, fallback=True, device="CPU", notes=("a", "b")),
], ids=["default", "everything"])
def test_variant_round_trip(v):
  d = v.to_dict()
  assert isinstance(d["targets"], list) and isinstance(d["notes"], list)
  back = Variant.from_dict(json.loads(json.dumps(d)))
  assert back == v
  assert back.targets == v.targets and isinstance(back.targets, tuple)
  assert back.notes == v.notes and isinstance(back.notes, tuple)
  assert back.to_dict() == d

def test_variant_from_partial_dict():
  v = Variant.from_dict({"algo": "winograd", "targets": ["clang"]})
  assert v == Variant(algo="winograd", targets=("clang",))

@pytest.mark.parametrize("cls,d,match", [
  (ConvSpec, {**PRESETS["small"].to_dict(), "bogus": 1}, "unknown spec field(s): bogus"),
  (ConvSpec, {**PRESETS["small"].to_dict(), "zz": 1, "aa": 2}, "unknown spec field(s): aa, zz"),
  (Variant, {"algo": "direct", "beam": 2}, "unknown variant field(s): beam"),
  (Variant, {"target": ["cuda"]}, "unknown variant field(s): target"),
])
def test_unknown_fields_rejected(cls, d, match):
  raises_one_line(lambda: cls.from_dict(d), match)

def test_spec_from_dict_missing_field():
  raises_one_line(lambda: ConvSpec.from_dict({"batch": 1}), "cin")

def test_from_dict_does_not_mutate_input():
  d = {"targets": ["cuda"], "notes": ["x"]}
  Variant.from_dict(d)
  assert d == {"targets": ["cuda"], "notes": ["x"]}

def test_hand_opts_are_checked_as_text_and_split_as_urls_write_them():
  import re
  from explorer.spec import HAND_OPTS_QUERY, hand_opts, opt_label, split_opts
  assert split_opts("UPCAST:0:4,TC:0:-1,2,1,local:1:8") == ["UPCAST:0:4", "TC:0:-1,2,1", "local:1:8"]
  assert hand_opts(split_opts("UPCAST:0:4,TC:0:-1,2,1,local:1:8"), "none") == ("UPCAST:0:4", "TC:0:-1,2,1", "LOCAL:1:8")
  assert hand_opts(["NOLOCALS::"]) == ("NOLOCALS::",) and split_opts(None) == []
  for bad, says in ((["UPCAST:0"], "not an opt"), (["FOO:0:4"], "not an opt"), (["UPCAST:0:4"] * 17, "at most 16"), ([""], "empty"),
                     (["UPCAST:0:-1"], "UPCAST's argument is a size, 0 or more")):
    raises_one_line(lambda bad=bad: hand_opts(bad), says)
  raises_one_line(lambda: hand_opts([], "beam"), "from must be one of current, none, heuristic")
  assert re.fullmatch(HAND_OPTS_QUERY, "UPCAST:0:4,TC:0:-1,2,1") and not re.fullmatch(HAND_OPTS_QUERY, "UPCAST:0:4;LOCAL:1:8")
  assert opt_label("Opt(op=OptOps.UPCAST, axis=0, arg=4)") == "UPCAST:0:4" and opt_label("Opt(op=OptOps.TC, axis=0, arg=(-1, 2, 1))") == "TC:0:-1,2,1"
  assert opt_label("Opt(op=OptOps.NOLOCALS, axis=None, arg=None)") == "NOLOCALS::" and opt_label("LOCAL:1:8") == "LOCAL:1:8"

def test_the_opt_syntax_names_tinygrads_opts():
  """spec.OPT_OPS (what a request may write, checked without tinygrad) is the installed tinygrad's OptOps, in its order."""
  from explorer.spec import OPT_OPS
  from explorer.tracing.tg.opts import TINYGRAD_OPT_OPS
  assert OPT_OPS == TINYGRAD_OPT_OPS
