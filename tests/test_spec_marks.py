"""Red says one thing: a REDUCE is filled red (tinygrad VIZ's colour), a UOp tinygrad's spec rejects is outlined apart (dashed, violet,
over its own op's fill) with the spec's message in its tooltip, and a stage's red dot says which UOp and why. The tensor graph is
checked where tinygrad checks it: a healthy program with Tensor.rand (its counter copied from PYTHON) passes."""
from __future__ import annotations
import json
import re
import subprocess
import sys
from conftest import REPO
from explorer.present import graphs

REDUCE_FILL = "#ff5b5b"

def test_a_rand_program_passes_tinygrads_own_tensor_spec():
  """The graph the tensors hold has an AFTER on the COPY of Tensor.rand's counter from PYTHON: spec_full allows it, spec_tensor does
  not; tinygrad checks spec_tensor on the function Tensor.realize schedules, where the counter is a PARAM. The explorer's verdict is
  tinygrad's: ok, while the same matcher over the graph as held rejects that AFTER."""
  code = r"""
import json
from explorer.tracing import tg
x, w = tg.Tensor.rand(1, 3, 8, 8), tg.Tensor.rand(4, 3, 3, 3)
sink = tg.tensor_sink(x.conv2d(w).relu())
print(json.dumps({"held": tg.spec_check([sink], "tensor"), "ours": tg.tensor_spec_check(sink)}))
"""
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  got = json.loads(r.stdout.strip().splitlines()[-1])
  assert not got["held"]["ok"] and got["held"]["violations"][0]["op"] == "AFTER" and "Ops.COPY" in got["held"]["violations"][0]["message"]
  assert got["ours"]["ok"] and got["ours"]["spec"] == "spec_tensor" and got["ours"]["checked"] > 100, got["ours"]

def node_attrs(svg: str, node_id: str) -> str:
  """The drawn shape of one node: its <g> up to the end of its first polygon/path/ellipse."""
  m = re.search(rf'<g id="n{node_id}" class="[^"]*">.*?<(?:polygon|path|ellipse)[^>]*>', svg, re.S)
  assert m, node_id
  return m.group(0)

def test_reduce_and_spec_rejected_nodes_are_drawn_apart():
  graph = {"nodes": [{"id": "1", "label": "REDUCE\nADD", "op": "REDUCE", "color": REDUCE_FILL},
                     {"id": "2", "label": "LOAD\ndtypes.float", "op": "LOAD", "color": "#ffc0c0", "spec": "UOp verification failed at 0 on Ops.LOAD"},
                     {"id": "3", "label": "SINK", "op": "SINK", "color": "#ffffff"}],
           "edges": [{"src": "2", "dst": "1", "idx": 0}, {"src": "1", "dst": "3", "idx": 0}]}
  svg = graphs.layout_svg(graphs.uop_dot(graph, set(), "t", {"2"}))
  reduce, bad = node_attrs(svg.lower(), "1"), node_attrs(svg.lower(), "2")  # graphviz writes colours in lower case
  assert f'fill="{REDUCE_FILL}"' in reduce and "spec&#45;violation" not in reduce
  assert 'fill="#ffc0c0"' in bad and REDUCE_FILL not in bad  # its own op's fill, not a red one
  assert f'stroke="{graphs.SPEC_OUTLINE.lower()}"' in bad and "stroke-dasharray" in bad and "spec&#45;violation" in bad
  assert "tinygrad&#39;s spec rejects this UOp: UOp verification failed at 0 on Ops.LOAD" in svg  # its tooltip

def test_a_stage_red_for_its_spec_says_which_uop_and_why():
  from explorer.schema import upgrade
  from explorer.web.routes.common import ribbon
  bad = {"spec": "spec_tensor", "ok": False, "checked": 9, "violation_count": 2,
         "violations": [{"index": 3, "op": "AFTER", "dtype": "uint", "trace_num": 7, "message": "UOp verification failed at 3 on Ops.AFTER"}]}
  trace = upgrade({"spec_checks": {"tensor_graph": bad, "kernel_graph": {"spec": "spec_kernel_graph", "ok": True}},  # as the store reads it
                   "kernels": [{"index": 0, "spec": {"ast": {**bad, "violation_count": 1}}}], "stage_seconds": {}, "failures": [],
                   "scheduler": None, "tensor_graph": None, "buffers": [], "totals": {}, "variant": {"targets": []}, "env": {"device": "CPU"}})
  rows = {r["key"]: r for r in ribbon(trace, "0123456789abcdef", "overview")}
  assert rows["tensor"]["state"] == "error" and rows["tensor"]["why"] == \
    "tinygrad's spec rejects this UOp: UOp verification failed at 3 on Ops.AFTER (and 1 more) [spec_tensor]"
  assert rows["kernels"]["why"].startswith("tinygrad's spec rejects this UOp: ") and "(and" not in rows["kernels"]["why"]
  assert rows["bufferize"]["why"] is None and rows["rangeify"]["why"] is None
