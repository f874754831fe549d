"""Tour texts are computed from the trace: change the variant and the sentences change with the numbers."""
import pytest
from explorer.spec import ConvSpec, Variant
from explorer.present.tour import compare_tour, trace_tour
from explorer.tracing.run import run_trace

SPEC = ConvSpec(1, 2, 2, 8, 8, 3)

@pytest.fixture(scope="module")
def traces():
  run = lambda **kw: run_trace(SPEC, Variant(targets=("cuda",), repeats=2, **kw)).trace
  return {"direct": run(), "symbolic": run(algo="winograd", wino_impl="explorer"), "materialized": run(algo="winograd", wino_impl="explorer",
          consts="materialized")}

def text(steps: list[dict], id: str) -> str: return next(s["text"] for s in steps if s["id"] == id)

def test_steps_cover_the_pipeline(traces):
  steps = trace_tour(traces["symbolic"])
  ids = [s["id"] for s in steps]
  assert ids[:3] == ["tensor", "rangeify", "bufferize"] and ids[-1] == "timing"
  assert {"k0-ast", "k0-codegen", "k0-uops", "k0-source", "constants"} <= set(ids)
  assert all(s["text"] and s["view"] for s in steps)

def test_numbers_come_from_the_trace(traces):
  for name, tr in traces.items():
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
