"""The diff pages on real tiny traces (the explorer's Winograd, staged against fused): kernels matched by role and data flow
(xhat with xhat, ghat with ghat, mhat and out against mhat+out), the UOp graph diff drawn and cached, sources per target and
across two targets, the measurements as background jobs (cached), quick picks, and the page in a real browser."""
from __future__ import annotations
import os
import re
import socket
import sqlite3
import time
from contextlib import closing
import httpx
import pytest
from conftest import ARTIFACTS, needs_chromium, running_server, wait_done
from fastapi.testclient import TestClient
from stored_traces import copy_trace, stored_pair
from support import app_over, copy_store
from explorer.store import Store
from explorer.web.services.diffs import GRAPHS, structural_kind

@pytest.fixture(scope="module")
def pair():
  db, staged, fused = stored_pair()
  with TestClient(app_over(str(db))) as client: yield client, db, staged, fused

def roles(g: dict) -> tuple[tuple[str, ...], tuple[str, ...]]: return tuple(k["role"] for k in g["a"]), tuple(k["role"] for k in g["b"])

def wait_measure(client, url: str, timeout_s: float = 240) -> dict:
  deadline = time.monotonic() + timeout_s
  while (s := client.get(url).json())["status"] in ("queued", "running"):
    assert time.monotonic() < deadline, s
    time.sleep(0.3)
  return s

def test_api_matches_staged_and_fused_by_role_and_data_flow(pair):
  client, db, staged, fused = pair
  r = client.get(f"/api/diff/{staged}/{fused}")
  assert r.status_code == 200, r.text
  d = r.json()
  groups = {roles(g): g for g in d["groups"]}
  assert set(groups) == {(("xhat",), ("xhat",)), (("ghat",), ("ghat",)), (("mhat", "out"), ("mhat+out",))}
  assert groups[(("xhat",), ("xhat",))]["relation"] == groups[(("ghat",), ("ghat",))]["relation"] == "same"
  fused_group = groups[(("mhat", "out"), ("mhat+out",))]
  assert fused_group["relation"] == "fused" and d["fusions"] == ["mhat and out fused into mhat+out in B"]
  assert [b["what"] for b in d["buffers"]["only_a"]] == ["intermediate mhat -> out"] and d["buffers"]["only_b"] == []
  assert d["totals"]["delta"]["kernels"] == -1 and d["totals"]["a"]["bytes_moved"] > d["totals"]["b"]["bytes_moved"]
  gd = fused_group["graph"]
  assert gd["only_a"] and gd["only_b"] and gd["only_a_ops"]["STORE"] == 2 and gd["only_b_ops"]["STORE"] == 1
  assert groups[(("xhat",), ("xhat",))]["graph"]["only_a"] == [] and d["url"] == f"/diff/{staged}/{fused}?target=cuda&target_b=cuda"
  store = Store(db)
  assert store.get_diff(staged, fused, GRAPHS) is not None and store.get_diff(staged, fused, structural_kind("cuda", "cuda")) is not None
  # the card counts what the rows count: the diff's target (CUDA), kernel names included
  assert d["totals"]["delta"]["linear_uops"] == sum(g["metrics"]["delta"]["linear_uops"] for g in d["groups"])
  assert d["totals"]["delta"]["flops"] == sum(g["metrics"]["delta"]["flops"] for g in d["groups"])
  a_trace = store.get_trace(staged)
  for k in (k for g in d["groups"] for k in g["a"]):
    kernel = a_trace["kernels"][k["index"]]
    assert k["name"] == kernel["targets"]["cuda"]["name"] and k["host_name"] == kernel["name"]
  runs = client.app.state.services.diffs.graph_runs
  assert client.get(f"/api/diff/{staged}/{fused}?target=metal").json()["groups"][2]["graph"]["only_a"]  # graphs: from the cache
  assert client.app.state.services.diffs.graph_runs == runs

def test_diff_page_and_permalinks(pair):
  client, _, staged, fused = pair
  r = client.get(f"/diff?a={staged}&b={fused}&target=metal", follow_redirects=False)
  assert r.status_code == 303 and r.headers["location"] == f"/diff/{staged}/{fused}?target=metal"
  assert client.get(f"/diff/{staged}/{fused}/graphs").status_code == 200  # what the page's script loads: then the page has it too
  page = client.get(f"/diff/{staged}/{fused}").text
  for needle in ('id="groups-table"', "mhat and out fused into mhat+out in B", "intermediate mhat -&gt; out", "staging staged → fused",
                 'class="rel rel-fused"', 'data-kind="timing"', 'data-kind="numerics"', 'class="sbs hl"', "UOp graph diff"):
    assert needle in page, needle
  text = re.sub(r"<[^>]+>", "", page)
  assert "__global__" in text and "kernel void" not in text
  metal = re.sub(r"<[^>]+>", "", client.get(f"/diff/{staged}/{fused}?target=metal").text)
  assert "kernel void" in metal and "__global__" not in metal
  both = re.sub(r"<[^>]+>", "", client.get(f"/diff/{staged}/{staged}?target=cuda&target_b=metal").text)  # one trace, two renderers
  assert "__global__" in both and "kernel void" in both and "source CUDA → Metal" in both
  for url in (f"/diff/{staged}/nope", f"/api/diff/nope/{fused}", f"/api/diff/{staged}/{fused}/speed"):
    assert client.get(url).status_code == 404, url

def test_measurements_run_in_the_background_and_are_cached(pair):
  client, db, staged, fused = pair
  base = f"/api/diff/{staged}/{fused}"
  assert client.get(f"{base}/numerics").json()["status"] in ("none", "done")
  started = client.post(f"{base}/numerics")
  assert started.status_code == 202 and started.json()["status"] in ("queued", "running")
  n = wait_measure(client, f"{base}/numerics")
  assert n["status"] == "done" and n["result"]["compared"] and n["result"]["max_rel"] < 1e-4 and n["result"]["shape"] == [1, 2, 8, 8]
  assert n["result"]["ran_on"]["by"] == f"{os.getpid()}@{socket.gethostname()}"  # measured by this server's process (in the test's)
  assert client.post(f"{base}/timing", params={"repeats": 3, "warmup": 1}).status_code == 202
  t = wait_measure(client, f"{base}/timing")
  assert t["status"] == "done" and t["result"]["compared"] and t["result"]["ratio"]["n"] == 3 and t["result"]["device"] == "CPU"
  r = t["result"]["ratio"]
  assert 0 < r["min"] <= r["q1"] <= r["median"] <= r["q3"] <= r["max"]
  # the verdicts on the kernels' sum (the headline) and on the span, by the host's clock, the interval the words' way round
  assert t["result"]["method"] == "host" and t["result"]["headline"] == "kernels" and t["result"]["span_ratio"]["n"] == 3
  for key, ratio in (("verdict", r), ("span_verdict", t["result"]["span_ratio"])):
    words = t["result"][key]
    assert words.startswith("B is ") and (" faster (" in words) == (ratio["median"] < 1), words
    lo, hi = (float(x) for x in re.search(r"95% interval ([0-9.]+)-([0-9.]+)x", words).groups())
    shown = float(re.search(r"B is ([0-9.]+)x", words).group(1))
    assert lo <= shown <= hi, words
  # the traces' pages quote this interleaved measurement, each from its own side
  for side, tid in (("A", staged), ("B", fused)):
    page = client.get(f"/t/{tid}").text
    assert f'href="/diff/{staged}/{fused}" data-compared-in>a diff as {side}: B is ' in page, side
  store = Store(db)
  assert store.get_diff(staged, fused, "timing")["repeats"] == 3 and store.get_diff(staged, fused, "numerics")["compared"]
  d = client.get(base).json()
  assert d["timing"]["ratio"]["n"] == 3 and d["numerics"]["compared"]
  copy_trace(db, fused, "f0f0f0f0f0f0f0f0", device="CUDA")
  assert client.post(f"/api/diff/{staged}/f0f0f0f0f0f0f0f0/timing").status_code == 409  # not on the same device
  assert client.post(f"{base}/timing", params={"repeats": 5000}).status_code == 422

def test_compare_with_quick_picks(pair):
  client, _, staged, fused = pair
  menu = client.get(f"/diff/pick/{staged}").text
  assert f'href="/diff/{staged}/{fused}"' in menu and "staged → fused" in menu  # stored: a link
  assert 'name="pick" value="consts"' in menu and "trace it" in menu  # not stored: traced on demand
  assert f"/diff/{staged}/{staged}?target=cuda&amp;target_b=metal" in menu  # two targets of this trace
  assert 'id="compare-menu"' in client.get(f"/t/{staged}").text and 'data-src="/diff/pick/' in client.get(f"/t/{staged}/bufferize").text
  r = client.post("/diff/quick", data={"a": staged, "pick": "consts"}, follow_redirects=False)
  assert r.status_code == 303 and r.headers["location"].startswith(f"/diff/{staged}/")
  other = r.headers["location"].rsplit("/", 1)[1]
  page = client.get(r.headers["location"])
  assert page.status_code == 200 and ('id="progress"' in page.text or 'id="groups-table"' in page.text)  # B runs first, at the same URL
  assert wait_done(client, other)["status"] == "done"
  d = client.get(f"/api/diff/{staged}/{other}?graphs=0").json()
  assert d["variant_changes"] == {"consts": ["symbolic", "materialized"]} and {g["relation"] for g in d["groups"]} == {"same"}
  changed = [g for g in d["groups"] if not g["identical"]]
  labels = re.findall(r'<span class="rel rel-same">([^<]*)</span>', client.get(f"/diff/{staged}/{other}").text)
  assert changed and labels.count("same role, changed") >= len(changed) and "same" not in labels  # a changed kernel never reads "same"
  assert client.post("/diff/quick", data={"a": staged, "pick": "bogus"}).status_code == 422

# ***** in the browser *****

@pytest.fixture(scope="module")
def server(pair, tmp_path_factory):
  with running_server(pair[1], tmp_path_factory.mktemp("diff-live")) as base: yield base

@pytest.mark.browser
@needs_chromium
def test_diff_page_in_the_browser(pair, server, browser):
  _, _, staged, fused = pair
  ARTIFACTS.mkdir(exist_ok=True)
  with closing(browser.new_page(viewport={"width": 1500, "height": 950})) as page:
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(f"{server}/t/{staged}")
    page.click("#compare-menu summary")
    page.wait_for_selector("#diff-picker [data-pick=staging]")
    page.screenshot(path=str(ARTIFACTS / "diff_compare_menu.png"))
    page.click("#diff-picker [data-pick=staging]")
    page.wait_for_url(f"**/diff/{staged}/{fused}", timeout=180_000)  # its first view computes both sides' CUDA compile facts
    # the verdict first, in one line on the first screen, its timing started by the page itself (no click)
    page.wait_for_function(r"() => /\d+\.\d\dx (slower|faster)/.test(document.querySelector('#diff-verdict').textContent)", timeout=180_000)
    verdict = page.inner_text("#diff-verdict")
    page.wait_for_selector("#measure-timing [data-time-verdict]")
    assert page.locator("#measure-timing .badge.clock[data-clock='host']").count() == 1  # how the times were measured, beside them
    assert page.locator("#measure-timing [data-span-verdict]").inner_text().startswith("the schedule replayed back to back")
    spread = page.locator("#measure-timing").inner_text()  # ratios written as ratios (0.98×), not as raw decimals (0.046–94.950)
    assert re.search(r"IQR [0-9.]+×–[0-9.]+×, range [0-9.]+×–[0-9.]+×", spread) and re.search(r"median B/A [0-9.]+×", spread), spread
    assert verdict.startswith("staging fused: ") and " moved" in verdict and "peak live values" in verdict and "95% interval" in verdict, verdict
    box = page.locator("#diff-verdict").bounding_box()
    assert box is not None and box["y"] + box["height"] <= 950
    page.set_viewport_size({"width": 1024, "height": 950})  # a laptop's window: every column of the groups table on the screen
    wrap = page.locator(".groups-scroll").bounding_box()
    assert wrap is not None and wrap["x"] + wrap["width"] <= 1024 and page.evaluate(
      "() => { const w = document.querySelector('.groups-scroll'); return w.scrollWidth <= w.clientWidth + 1; }"), wrap
    page.set_viewport_size({"width": 1500, "height": 950})
    rows = page.locator("#groups-table tbody tr")
    assert rows.count() == 3 and "fused" in rows.nth(2).inner_text() and "mhat+out" in rows.nth(2).inner_text()
    page.wait_for_function("() => !document.querySelector('.graph-pending')", timeout=120_000)
    assert page.locator("#group-2 .diff-graph svg g.node.changed").count() > 0  # nodes only one side has, outlined
    assert page.locator("[data-graph-count='2']").inner_text() != "…"
    page.wait_for_function("() => document.querySelector('#measure-numerics').dataset.status === 'done'", timeout=120_000)
    assert "max |A−B|" in page.inner_text("#measure-numerics")
    page.screenshot(path=str(ARTIFACTS / "diff_page.png"))
    page.click("#target-tabs a[data-target=metal]")
    page.wait_for_url(re.compile(r".*target=metal"))
    src = page.locator("#group-2 .source-diff")
    assert "kernel void" in src.inner_text() and page.locator("#target-tabs a.active").inner_text() == "Metal"
    assert src.locator("tr.b_only").count() > 0 and src.locator("tr.changed").count() > 0
    unfold = page.locator("#group-0 [data-unfold]")
    assert unfold.count() == 1 and page.locator("#group-0 tbody.folded").count() == 1
    unfold.click()
    assert page.locator("#group-0 tbody.folded").is_visible()
    page.locator("#group-2").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "diff_source_metal.png"))
    page.locator("#graph-diff-2").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "diff_graphs.png"))
  assert not errors, errors
  for url in ("/traces", f"/t/{staged}/export.html", f"/api/diff/{staged}/{fused}", f"/diff/pick/{staged}"):
    assert httpx.get(server + url, timeout=120).status_code == 200, url
  assert httpx.get(f"{server}/api/health").json()["tinygrad_imported"] is False  # the graph diff and measurements ran in workers

@pytest.mark.browser
@needs_chromium
def test_a_kernel_graph_over_the_node_limit_is_diffed_whole_on_a_canvas(pair, browser, tmp_path):
  """Over the node limit (20 here) the diff draws each side's kernel graph whole, grouped by loop nest: every node, where the change
  starts outlined as the graph diff found it (the frontier of the nodes only that side has), what differs downstream marked apart."""
  _, db, staged, fused = pair
  copy = tmp_path / "copy.sqlite3"
  copy_store(db, copy)
  with closing(sqlite3.connect(copy)) as c, c: c.execute("DELETE FROM diff_cache")  # the graph diff computed anew, under the small limit
  with running_server(copy, tmp_path, graph_node_limit=20) as base, closing(browser.new_page(viewport={"width": 1500, "height": 950})) as page:
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{base}/diff/{staged}/{fused}")
    page.wait_for_function("() => !document.querySelector('.graph-pending')", timeout=180_000)
    boxes = page.locator("#graph-diff-2 .diff-graph")
    assert boxes.count() >= 2 and page.locator("#graph-diff-2 .diff-graph svg").count() == 0
    page.wait_for_function("() => [...document.querySelectorAll('#graph-diff-2 .diff-graph')].every((b) => b.dataset.drawn === 'canvas')")
    graph = httpx.get(f"{base}/api/diff/{staged}/{fused}", timeout=120).json()["groups"][2]["graph"]
    for side in ("a", "b"):
      drawn = page.evaluate(f"""() => [...document.querySelectorAll('#graph-diff-2 .graph-side.side-{side} .diff-graph')].map((b) => {{
        const g = b.wholeGraph, total = Number(b.querySelector('.viewer-stats').textContent.split(' ')[0].replace(/,/g, ''));
        return {{nodes: g.nodes.length, total, changed: [...g.changed], downstream: [...g.downstream], groups: g.groups.length}}; }})""")
      only = graph[f"only_{side}"]
      starts, rest = {n["id"] for n in only if n["frontier"]}, {n["id"] for n in only if not n["frontier"]}
      assert set().union(*(d["changed"] for d in drawn)) == starts and set().union(*(d["downstream"] for d in drawn)) == rest, side
      assert all(d["nodes"] == d["total"] > 20 and d["groups"] > 0 for d in drawn), drawn
    page.locator("#graph-diff-2").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "diff_graphs_whole.png"))
  assert not errors, errors

def test_a_trace_that_failed_early_still_diffs_and_exports(pair):
  client, db, staged, fused = pair
  trace = Store(db).get_trace(staged)
  broken = {**trace, "status": "error", "failures": [{"stage": "codegen", "error": "RuntimeError: boom"}],
            "kernels": [{k: v for k, v in kern.items() if k != "ast_sink" or kern["index"] < 2} for kern in trace["kernels"]]}
  Store(db).put_trace("bad0bad0bad0bad0", broken, Store(db).get_rewrites(staged))
  d = client.get(f"/api/diff/bad0bad0bad0bad0/{fused}").json()
  graphs = {tuple(k["role"] for k in g["a"]): g["graph"] for g in d["groups"]}
  assert graphs[("mhat", "out")] is None and graphs[("xhat",)] is not None
  page = client.get(f"/diff/bad0bad0bad0bad0/{fused}")
  assert page.status_code == 200 and "A FAILED" not in page.text and "stage failure" in page.text
  assert client.get(f"/diff/bad0bad0bad0bad0/{fused}/graphs").status_code == 200
  export = client.get("/t/bad0bad0bad0bad0/export.html")
  assert export.status_code == 200 and "Stage codegen failed" in export.text
