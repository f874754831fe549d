"""Tour texts are computed from the trace: change the variant and the sentences change with the numbers."""
import pytest
from explorer.present.tour import compare_tour, trace_tour
from explorer.spec import ConvSpec, Variant
from explorer.tracing.pipeline.run import run_trace

SPEC = ConvSpec(1, 2, 2, 8, 8, 3)

@pytest.fixture(scope="module")
def traces():
  run = lambda **kw: run_trace(SPEC, Variant(targets=("cuda",), repeats=2, **kw), analysis=True).trace
  return {"direct": run(), "symbolic": run(algo="winograd", wino_impl="explorer"), "materialized": run(algo="winograd", wino_impl="explorer",
          consts="materialized"), "fused": run(algo="winograd", wino_impl="explorer", staging="fused")}

def text(steps: list[dict], id: str) -> str: return next(s["text"] for s in steps if s["id"] == id)

def test_steps_cover_the_pipeline(traces):
  steps = trace_tour(traces["symbolic"])
  ids = [s["id"] for s in steps]
  assert ids[:3] == ["tensor", "rangeify", "bufferize"] and ids[-1] == "timing"
  assert {"k0-ast", "k0-codegen", "k0-uops", "k0-source", "constants"} <= set(ids)
  assert all(s["text"] and s["view"] for s in steps)

def test_numbers_come_from_the_trace(traces):
  for tr in traces.values():
    steps = trace_tour(tr)
    assert f"{tr['tensor_graph']['uops']} UOps" in text(steps, "tensor")
    k = tr["kernels"][0]
    assert f"{k['linear_uops']} uops" in text(steps, "k0-uops") and f"{k['ops']['alu']} ALU ops" in text(steps, "k0-uops")
    sc = tr["scheduler"]["stage_counts"]
    assert f"removed {sc['fused']} of them" in text(steps, "bufferize")

def test_constants_text_changes_with_the_variant(traces):
  sym, mat = text(trace_tour(traces["symbolic"]), "constants"), text(trace_tour(traces["materialized"]), "constants")
  assert "folded into the kernel code as immediates" in sym and "3 device buffers" in mat and "3 COPYs" in mat
  assert not any(s["id"] == "constants" for s in trace_tour(traces["direct"]))

def test_winograd_flop_saving_sentence(traces):
  t = text(trace_tour(traces["symbolic"]), next(s["id"] for s in trace_tour(traces["symbolic"]) if "xhat AST" in s["title"]))
  assert "fewer" in t and "Winograd's input transform" in t

def test_compare_tour(traces):
  steps = compare_tour("constants", traces["symbolic"], traces["materialized"])
  cmp = next(s for s in steps if s["id"] == "compare")
  assert "3 copies" in cmp["text"] and "0 copies" in cmp["text"]
  assert steps[0]["side"] == "a" and steps[-1]["side"] == "b"

def test_a_tour_speaks_of_the_target_asked(traces):
  """?target=cuda: every kernel step reads the kernel's CUDA record (its name, uops, pressure), never the host's; a target some kernel has
  no record of is not used (the host's, each kernel's own)."""
  tr = traces["symbolic"]
  assert any(k["targets"]["cuda"]["name"] != k["targets"][k["host_target"]]["name"] for k in tr["kernels"])
  steps = {s["id"]: s for s in trace_tour(tr, "cuda")}
  for k in tr["kernels"]:
    cuda, host = k["targets"]["cuda"], k["targets"][k["host_target"]]
    n = k["index"]
    assert f"Kernel {cuda['name']} is" in steps[f"k{n}-ast"]["text"]
    if cuda["name"] != host["name"]: assert host["name"] not in steps[f"k{n}-ast"]["text"]
    uops = steps[f"k{n}-uops"]
    assert uops["text"].startswith("For cuda,") and f"{cuda['linear_uops']} uops" in uops["text"]
    assert f"at uop {cuda['pressure']['max_live_at']}" in uops["text"] and uops["focus"]["uop"] == cuda["pressure"]["max_live_at"]
    assert "KiB" in uops["text"] or " B of memory" in uops["text"]  # binary units, as the diff and the CLI write bytes
    assert f"lines of source, the kernel {cuda['name']}" in steps[f"k{n}-source"]["text"]
  host_steps = {s["id"]: s for s in trace_tour(tr, "metal-or-nothing")}
  k = tr["kernels"][0]
  assert f"Kernel {k['targets'][k['host_target']]['name']} is" in host_steps["k0-ast"]["text"]

def test_a_pair_tour_skips_what_b_shares_with_a(traces):
  """Staged against fused: B's weight and input transforms are A's, AST for AST, so B's steps skip them; the comparison opens with three
  headline numbers (kernels, bytes moved, time) and says which kernels were skipped."""
  from explorer.present.tour import identical_kernels
  a, b = traces["symbolic"], traces["fused"]
  same = identical_kernels(a, b)
  assert same and all(a["kernels"][ia]["ast_key"] == b["kernels"][ib]["ast_key"] for ib, ia in same.items())
  assert {b["kernels"][n]["role"] for n in same} == {"ghat", "xhat"}
  steps = compare_tour("fusion", a, b)
  ids = [s["id"] for s in steps]
  assert not any(i.startswith(f"b-k{n}-") for n in same for i in ids) and all(f"a-k{n}-ast" in ids for n in same)
  fused = next(k["index"] for k in b["kernels"] if k["role"] == "mhat+out")
  assert f"b-k{fused}-ast" in ids
  cmp = next(s for s in steps if s["id"] == "compare")
  assert [h["label"] for h in cmp["headline"]] == ["kernels", "bytes moved", "time (median, each timed apart)"]
  assert cmp["headline"][2]["change"].startswith("no ratio: ")  # two medians timed apart claim no ratio
  timed = {"compared": True, "device": "CPU", "a_total_s": {"median": 1e-4}, "b_total_s": {"median": 2.5e-4},
           "ratio": {"median": 2.505, "ci_low": 2.486, "ci_high": 2.521}}  # the diff's interleaved timing, as the store keeps it
  quoted = next(s for s in compare_tour("fusion", a, b, interleaved=timed) if s["id"] == "compare")
  assert quoted["headline"][2] == {"label": "time, the kernels each alone, interleaved on CPU", "a": "100.0 µs", "b": "250.0 µs",
                                   "change": "B is 2.50x slower (95% interval 2.49-2.52x)"}
  assert "Each side was timed on its own" not in quoted["text"] and "B is 2.50x slower (95% interval 2.49-2.52x)" in quoted["text"]
  assert cmp["headline"][0]["a"] == str(len(a["kernels"])) and cmp["headline"][0]["b"] == str(len(b["kernels"]))
  assert cmp["text"].startswith("In three numbers, A -> B: kernels") and "the tour skips their steps on B's side" in cmp["text"]
  assert len(compare_tour("constants", a, traces["materialized"])) == len(trace_tour(a)) + 1 + len(trace_tour(traces["materialized"])) \
    - 4 * len(identical_kernels(a, traces["materialized"]))
