"""The stable layout (iongraph's idea, with graphviz): stepping from one graph to the next, the UOps both hold keep their place, new
ones are placed beside the neighbours they attach to, and no two nodes overlap."""
from __future__ import annotations
import shutil
import pytest
from explorer.present import graphs

pytestmark = pytest.mark.skipif(shutil.which("neato") is None, reason="graphviz neato is not installed")

def _node(i: int, op: str) -> dict: return {"id": str(i), "label": f"{op}\ndtypes.float\n(6,1)", "op": op, "color": "#ffffe0", "num": 1000 + i}

def _overlaps(pos: dict, sizes: dict) -> list:
  ids = sorted(pos)
  return [(a, b) for k, a in enumerate(ids) for b in ids[k + 1:]
          if abs(pos[a][0] - pos[b][0]) < (sizes[a][0] + sizes[b][0]) / 2 and abs(pos[a][1] - pos[b][1]) < (sizes[a][1] + sizes[b][1]) / 2]

def test_survivors_keep_their_place_and_new_nodes_fit_beside_them():
  chain = [{"src": str(i), "dst": str(i + 1), "idx": 0} for i in range(11)]
  a = {"nodes": [_node(i, "ADD" if i % 2 else "WHERE") for i in range(12)], "edges": chain}
  _, pos_a = graphs.layout(graphs.uop_dot(a, set(), "a"))
  anchor = {1000 + int(k): xy for k, xy in pos_a.items()}
  # the next graph: node 5 rewritten into a new node, eight new inputs hung on the chain
  b_nodes = [n for n in a["nodes"] if n["id"] != "5"] + [_node(50, "MUL")] + [_node(20 + j, "MUL") for j in range(8)]
  b_edges = [e for e in a["edges"] if "5" not in (e["src"], e["dst"])] + [{"src": "4", "dst": "50", "idx": 0}, {"src": "50", "dst": "6", "idx": 0}]
  b_edges += [{"src": str(20 + j), "dst": str(j + 2 if j + 2 != 5 else 50), "idx": 1} for j in range(8)]
  b = {"nodes": b_nodes, "edges": b_edges}
  dot = graphs.uop_dot(b, set(), "b")
  svg, pos_b = graphs.stable_layout(b, dot, anchor)
  assert svg.startswith("<svg") and set(pos_b) == {n["id"] for n in b_nodes}
  for k in pos_a:
    if k != "5": assert max(abs(pos_b[k][0] - pos_a[k][0]), abs(pos_b[k][1] - pos_a[k][1])) < 0.5, k  # survivors stay put
  sizes = {k: (w, h) for k, (_, _, w, h) in graphs.node_boxes(graphs._graphviz("dot", dot, 20)["plain"]).items()}
  assert _overlaps(pos_b, sizes) == []
  assert abs(pos_b["50"][1] - pos_a["5"][1]) < 80  # the rewritten node lands about where the one it replaced was

def test_without_survivors_it_is_dots_layout():
  a = {"nodes": [_node(i, "ADD") for i in range(3)], "edges": [{"src": "0", "dst": "1", "idx": 0}, {"src": "1", "dst": "2", "idx": 0}]}
  fresh = graphs.layout(graphs.uop_dot(a, set(), "a"))[1]
  assert graphs._anchored(a, fresh, {}) == fresh and graphs._anchored(a, fresh, {4242: (1.0, 2.0)}) == fresh  # nothing to anchor to
