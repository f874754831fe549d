"""How graphs open, in a real browser at 1440x900 (a laptop): a kernel AST opens fitted, the whole graph in view; one too big for that
(hundreds of nodes) and a rangeify pass graph open on their nodes, not on the bare edges around the sink; the legend says what a node's
fill means and what the spec's marking is, apart from REDUCE's red."""
from __future__ import annotations
import httpx
import pytest
from conftest import ARTIFACTS, VIEWERS, needs_chromium, wait_graphs, watched_page

# small with the builtin Winograd: four kernel ASTs of 37 to 303 nodes (one with a REDUCE), a rangeify graph of hundreds
pytestmark = [pytest.mark.browser, needs_chromium, pytest.mark.traces({"preset": "small", "variant": {"algo": "winograd", "time": False}})]

@pytest.fixture(scope="module")
def laptop(browser, errors):
  pg = watched_page(browser, errors, 1440, 900)
  yield pg
  pg.close()

IN_VIEW = """(sel) => { const v = document.querySelector(sel), c = v.querySelector('.viewer-canvas').getBoundingClientRect();
  const big = window.explorerViewers.get(v.id).big;  // a graph over the server's node limit: drawn whole on a canvas (big_graph.js)
  const ns = big ? big.shownNodes().map((n) => { const p = big.screenOf(n.id), w = n.w * big.k, h = n.h * big.k;
    return {left: c.left + p.x - w / 2, right: c.left + p.x + w / 2, top: c.top + p.y - h / 2, bottom: c.top + p.y + h / 2}; })
    : [...v.querySelectorAll('svg g.node')].map(g => g.getBoundingClientRect());
  const inside = ns.filter(r => r.left >= c.left - 1 && r.right <= c.right + 1 && r.top >= c.top - 1 && r.bottom <= c.bottom + 1).length;
  return {nodes: ns.length, inside}; }"""

def kernels_by_size(base: str, trace_id: str) -> list[dict]:
  return sorted(httpx.get(f"{base}/api/traces/{trace_id}/kernels", timeout=60).json(), key=lambda k: k["ast_uops"])

def test_a_kernel_ast_opens_fitted(live_server, traced, laptop, errors):
  """Every node of the smallest AST is inside the canvas when the page opens (it used to open zoomed on the SINK's corner)."""
  k = kernels_by_size(live_server, traced)[0]
  laptop.goto(f"{live_server}/t/{traced}/k/{k['index']}")
  wait_graphs(laptop)
  laptop.wait_for_timeout(300)
  got = laptop.evaluate(IN_VIEW, "#ast-graph")
  laptop.screenshot(path=str(ARTIFACTS / "graph_opens_fitted.png"))
  assert got["nodes"] > 10 and got["inside"] == got["nodes"], got
  assert not errors, errors

@pytest.mark.parametrize("where", ["biggest-ast", "rangeify"])
def test_a_huge_graph_opens_on_its_nodes(live_server, traced, laptop, errors, where):
  """Too big to fit with visible nodes (hundreds of them): readable labels over many nodes, not a few nodes among long edges."""
  sel = "#ast-graph" if where == "biggest-ast" else "#pass-graph"
  url = f"/t/{traced}/k/{kernels_by_size(live_server, traced)[-1]['index']}" if where == "biggest-ast" else f"/t/{traced}/rangeify"
  laptop.goto(live_server + url)
  wait_graphs(laptop)
  laptop.wait_for_timeout(300)
  got = laptop.evaluate(IN_VIEW, sel)
  laptop.screenshot(path=str(ARTIFACTS / f"graph_opens_{where}.png"))
  assert got["nodes"] > 150 and got["inside"] >= 12, got
  px = laptop.evaluate(f"async () => {VIEWERS}.get('{sel[1:]}').labelPx(document.querySelector('{sel} svg'))")
  assert px >= 11, px  # readable, as before
  if where == "rangeify":  # over the server's node limit (400): every node drawn, none cut
    assert laptop.get_attribute(sel, "data-drawn") == "canvas" and "nearest the output" not in laptop.inner_text(f"{sel} .viewer-notes")
  assert not errors, errors

def test_the_legend_explains_fills_and_the_spec_marking(live_server, traced, laptop, errors):
  """A copy of the trace with a spec violation planted on the STORE of the REDUCE kernel's AST (tinygrad's own pipeline passes its
  specs): the STORE is outlined dashed violet over its own fill, REDUCE keeps VIZ's red, the legend names both, and the Kernels stage's
  red dot says which UOp and why."""
  from explorer.store import Store
  db = httpx.get(f"{live_server}/api/health", timeout=30).json()["db"]  # the store's path, to a loopback client
  store = Store(db)
  trace, copy = store.get_trace(traced), "00000000005bec00"
  views = {k["index"]: httpx.get(f"{live_server}/api/traces/{traced}/graphs/ast/{k['index']}", timeout=120).json() for k in trace["kernels"]}
  k = next(k for k in trace["kernels"] if any(n["op"] == "REDUCE" for n in views[k["index"]]["nodes"]))
  store_ = next(n for n in views[k["index"]]["nodes"] if n["op"] == "STORE" and "num" in n)
  message = f"UOp verification failed at 0 on Ops.STORE (planted {store_['num']})"
  k["spec"]["ast"] = {**k["spec"]["ast"], "ok": False, "violation_count": 1,
                      "violations": [{"index": 0, "op": "STORE", "dtype": "void", "trace_num": store_["num"], "message": message}]}
  store.put_trace(copy, trace, store.get_rewrites(traced))
  laptop.goto(f"{live_server}/t/{copy}/k/{k['index']}")
  wait_graphs(laptop)
  styles = laptop.evaluate("""() => [...document.querySelectorAll('#ast-graph svg g.node')].map(g => {
    const s = g.querySelector('path, polygon, ellipse');
    return {cls: g.getAttribute('class'), fill: s.getAttribute('fill'), stroke: s.getAttribute('stroke'), dash: s.getAttribute('stroke-dasharray'),
            tip: (g.querySelector('a') || g).getAttribute('xlink:title') || ''}; })""")
  bad = [s for s in styles if "spec-violation" in s["cls"]]
  reduce = [s for s in styles if "op-REDUCE" in s["cls"]]
  assert len(bad) == 1 and reduce, styles
  assert bad[0]["stroke"] == "#7c3aed" and bad[0]["dash"] and bad[0]["fill"] != reduce[0]["fill"] and bad[0]["stroke"] != reduce[0]["stroke"]
  assert bad[0]["tip"].startswith(f"tinygrad's spec rejects this UOp: {message}")
  legend = laptop.locator("#ast-graph .viewer-legend")
  assert "fill: op family" in legend.inner_text() and "REDUCE" in legend.inner_text()
  assert "rejected by tinygrad's spec" in legend.locator("[data-legend-spec]").inner_text()
  laptop.screenshot(path=str(ARTIFACTS / "graph_spec_legend.png"))
  assert message in (laptop.get_attribute(".ribbon a[data-stage=kernels]", "title") or "")
  assert laptop.locator(".ribbon a[data-stage=tensor]").get_attribute("title") is None  # a healthy stage says nothing
  assert not errors, errors
