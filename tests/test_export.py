"""Exports: the trace as JSON, and as ONE self-contained HTML file (inline CSS, JS and SVG) that a browser opens from a file:// URL
with no server running and no network request; from the web app and from `kernel-explorer export`."""
from __future__ import annotations
import json
import re
import sqlite3
import time
from contextlib import closing
import pytest
from conftest import ARTIFACTS, needs_chromium
from fastapi.testclient import TestClient
from stored_traces import copy_trace, stored_pair
from support import app_over, copy_store
from explorer.cli import main
from explorer.store import Store

@pytest.fixture(scope="module", autouse=True)
def no_peaks(tmp_path_factory):
  """No device peaks known unless a test measures them (a roofline page's probe caches them per host): the same file everywhere."""
  with pytest.MonkeyPatch.context() as mp:
    mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("no-peaks")))
    yield

@pytest.fixture(scope="module")
def exported(tmp_path_factory):
  """The staged trace (with an annotation) exported through the web app, once for the module."""
  db, staged, _ = stored_pair()
  store = Store(db)
  if not store.annotations(staged): store.add_annotation(staged, "step", "schedule", "MHAT stays a buffer between mhat and out")
  with TestClient(app_over(str(db))) as client:
    page, js = client.get(f"/t/{staged}/export.html"), client.get(f"/t/{staged}/export.json")
  path = tmp_path_factory.mktemp("export") / f"{staged}.html"
  path.write_text(page.text)
  return {"db": db, "id": staged, "page": page, "json": js, "path": path, "trace": store.get_trace(staged)}

def external_refs(html: str) -> list[str]:
  """Anything that would make a browser fetch or navigate away: src/href to anything but an anchor or data:, stylesheet links, imports."""
  refs = re.findall(r'\b(?:src|href|xlink:href|action)="(?!#|data:)([^"]*)"', html)
  refs += re.findall(r"<link\b[^>]*>", html) + re.findall(r"@import|url\((?!['\"]?(?:#|data:))", html)
  return refs

def test_json_export_is_the_stored_trace_with_its_annotations(exported):
  r = exported["json"]
  assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
  assert r.headers["content-disposition"] == f'attachment; filename="kernel-explorer-{exported["id"]}.json"'
  body = r.json()
  assert body["annotations"][0]["text"] == "MHAT stays a buffer between mhat and out"
  assert {k: v for k, v in body.items() if k != "annotations"} == exported["trace"]

def test_html_export_is_self_contained(exported):
  r, html = exported["page"], exported["page"].text
  assert r.status_code == 200 and r.headers["content-disposition"].startswith("attachment;") and html.startswith("<!doctype html>")
  assert external_refs(html) == [], external_refs(html)[:5]
  assert "/static/" not in html and "cdn" not in html.lower() and "<script src" not in html
  trace = exported["trace"]
  assert html.count("<svg") == 2 + len(trace["kernels"])  # tensor graph, kernel graph, each kernel's AST
  assert all(f'id="kernel-{k["index"]}"' in html for k in trace["kernels"]) and 'href="#kernel-0"' in html  # kernel graph links stay inside
  text = re.sub(r"<[^>]+>", "", html)
  assert "__global__" in text and "kernel void" in text and 'class="hl"' in html  # CUDA and Metal, highlighted
  assert "MHAT stays a buffer between mhat and out" in html and 'id="stage-table"' in html and 'id="buffer-table"' in html
  assert Store(exported["db"]).get_cached(exported["id"], "ast/0", "svg") is not None  # the server's own layouts, cached

def test_cli_export_html_json_and_from_a_file(exported, tmp_path, capsys):
  db, trace_id = exported["db"], exported["id"]
  out = tmp_path / "t.html"
  assert main(["export", trace_id, "--db", str(db), "-o", str(out), "--quiet"]) == 0
  html = out.read_text()
  assert external_refs(html) == [] and html.count("<svg") == 2 + len(exported["trace"]["kernels"]) and "MHAT stays a buffer" in html
  assert main(["export", trace_id, "--db", str(db), "--format", "json", "-o", str(tmp_path / "t.json"), "--quiet"]) == 0
  as_json = json.loads((tmp_path / "t.json").read_text())
  assert as_json["annotations"] and as_json["kernels"] == exported["trace"]["kernels"]
  plain = tmp_path / "plain.json"
  plain.write_text(json.dumps(exported["trace"]))
  assert main(["export", str(plain), "-o", str(tmp_path / "plain.html"), "--quiet"]) == 0
  from_file = (tmp_path / "plain.html").read_text()
  assert from_file.count("<svg") == 1 and "no rewrite blob" in from_file  # the kernel graph; UOp graphs need the stored blob
  assert main(["export", "nope", "--db", str(db), "--quiet"]) == 2 and "not a trace id stored in" in capsys.readouterr().err

@pytest.mark.browser
@needs_chromium
def test_the_html_file_opens_offline_in_a_browser(exported, browser):
  ARTIFACTS.mkdir(exist_ok=True)
  with closing(browser.new_page(viewport={"width": 1500, "height": 950})) as page:
    requests, errors = [], []
    def only_files(route) -> None:  # anything that is not the file itself fails, and is counted
      if route.request.url.startswith("file://"): return route.continue_()
      requests.append(route.request.url)
      route.abort()
    page.route("**/*", only_files)
    page.on("request", lambda req: None if req.url.startswith(("file://", "data:")) else requests.append(req.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(exported["path"].as_uri())
    page.wait_for_load_state("load")
    assert page.locator("#kernel-table tbody tr").count() == len(exported["trace"]["kernels"])
    assert "winograd" in page.locator(".trace-title h1").inner_text()
    graph = page.locator(".export-graph[data-ref=kernels] svg")
    assert graph.is_visible() and graph.locator("g.node").count() > 4
    page.screenshot(path=str(ARTIFACTS / "export_offline.png"))
    section = page.locator("#kernel-1")
    section.scroll_into_view_if_needed()
    section.locator("[data-tab=metal]").click()
    assert "kernel void" in section.locator("[data-panel=metal]").inner_text() and not section.locator("[data-panel=cuda]").is_visible()
    assert section.locator(".export-graph svg g.node").count() > 10
    page.screenshot(path=str(ARTIFACTS / "export_offline_kernel.png"))
    assert page.locator("#annotations").inner_text().count("MHAT stays a buffer") == 1
  assert requests == [] and errors == [], (requests, errors)

def ready(client, url: str, timeout_s: float = 300) -> dict:
  """An enrichment or a probe, polled as a page polls it: 202 (or a probe queued or running) until it is done."""
  deadline = time.monotonic() + timeout_s
  while (r := client.get(url)).status_code == 202 or r.json().get("status") in ("queued", "running"):
    assert time.monotonic() < deadline, url
    time.sleep(0.3)
  assert r.status_code == 200 and r.json().get("status", "done") == "done", r.text
  return r.json()

def section(html: str, start: str, end: str) -> str:
  i = html.index(start)
  return html[i:html.index(end, i)]

def test_the_export_holds_what_was_computed_since_and_says_so(exported, tmp_path, monkeypatch):
  """A target and compile facts computed after the trace (as a kernel page asks for them: GET, 202, then 200) are in the export (the
  web's and the CLI's), its header says which targets it holds for how many kernels and which are not computed, and it has the
  roofline once the device's peaks are known (measured here, by the roofline page's probe)."""
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  db, copy = tmp_path / "export.sqlite3", "00000000000e0e0e"
  copy_store(exported["db"], db)  # a store of its own: the others' exports stay as they were
  with closing(sqlite3.connect(db)) as c, c: c.execute("DELETE FROM enrichments WHERE trace_id = ?", (exported["id"],))  # others' since
  trace = copy_trace(db, exported["id"], copy)  # the trace as it was traced: what this test computes is all it holds since
  host, n = trace["kernels"][0]["host_target"], len(trace["kernels"])
  with TestClient(app_over(str(db))) as client:
    assert client.post(f"/api/traces/{copy}/roofline/probe").status_code == 202
    ready(client, f"/api/traces/{copy}/roofline/probe")
    opencl = ready(client, f"/api/traces/{copy}/kernels/0/targets/opencl")
    facts = ready(client, f"/api/traces/{copy}/kernels/0/targets/{host}/facts")
    html = client.get(f"/t/{copy}/export.html").text
  assert external_refs(html) == [], external_refs(html)[:5]
  holds = section(html, 'id="export-holds"', "</p>")
  assert f'data-target="{host}"' in holds and 'data-target="cuda"' in holds and 'data-target="opencl"' in holds
  assert re.search(rf'data-target="opencl">[^<]*</b>: 1 of {n} kernels', holds) and f"{n} of {n} kernels" in holds, holds
  assert "compile facts for 1" in holds and "the roofline" in holds and "no roofline" not in holds
  missing = section(html, 'id="export-missing"', "</span>")
  assert "OpenCL" not in missing and "WGSL" in missing and "PTX" in missing, missing
  k0, k1 = section(html, 'id="kernel-0"', "</section>"), section(html, 'id="kernel-1"', "</section>")
  assert 'data-tab="opencl"' in k0 and 'data-tab="opencl"' not in k1
  assert opencl["name"] in re.sub(r"<[^>]+>", "", section(k0, 'data-panel="opencl"', "</div></div>"))
  host_panel = section(k0, 'data-panel="host"', '<div class="tab-panel" data-panel="uops"')  # other targets' facts may be there too
  assert "compile:</span>" in host_panel and facts["compiler"] in section(host_panel, 'class="small facts-line"', "</div>")
  roof = section(html, '<div id="roofline">', '<div class="panel" id="annotations">')
  assert "<svg" in roof and "memory bandwidth" in roof and 'href="#kernel-0"' in roof  # the plot, peaks and kernels, linked inside
  out = tmp_path / "cli.html"
  assert main(["export", copy, "--db", str(db), "-o", str(out), "--quiet"]) == 0
  cli = out.read_text()
  assert 'data-target="opencl"' in section(cli, 'id="export-holds"', "</p>") and "<svg" in section(cli, '<div id="roofline">', 'id="annotations"')

def test_the_untimed_or_unprobed_export_says_it_has_no_roofline(exported):
  holds = section(exported["page"].text, 'id="export-holds"', "</p>")
  assert "no roofline (no spec-sheet peaks for" in holds and "Not in this file: no spec-sheet peaks" in exported["page"].text

@pytest.mark.browser
@needs_chromium
def test_the_bufferize_tables_are_not_cut_at_1440(exported, browser):
  """At 1440x900 the STAGE and buffer tables fit the page's width, or scroll: nothing is clipped by a panel."""
  with closing(browser.new_page(viewport={"width": 1440, "height": 900})) as page:
    page.goto(exported["path"].as_uri())
    got = page.evaluate("""() => ['#stage-table', '#buffer-table'].map(sel => { const t = document.querySelector(sel);
      let box = t.parentElement; while (box && getComputedStyle(box).overflowX === 'visible') box = box.parentElement;
      return {sel, width: t.getBoundingClientRect().width, room: box.clientWidth,
              scrolls: ['auto', 'scroll'].includes(getComputedStyle(box).overflowX)}; })""")
    page.locator("#bufferize").screenshot(path=str(ARTIFACTS / "export_bufferize.png"))
  assert all(g["width"] <= g["room"] + 1 for g in got if g["sel"] == "#stage-table"), got  # at this width it fits whole
  assert all(g["width"] <= g["room"] + 1 or g["scrolls"] for g in got), got

def test_a_graph_over_the_node_limit_is_exported_whole_with_its_groups(exported):
  """From the command line (graphs expanded from the blob here): a graph over the node limit is not cut but kept whole for the file to
  draw on a canvas: the same nodes as drawn under the default limit, each edge between them, an AST grouped by the loops its UOps are
  in; a graph within the limit stays inline SVG. The file holds the drawings and the scripts that draw them, and nothing external."""
  from explorer.present import export
  store = Store(exported["db"])
  trace, blob = store.get_trace(exported["id"]), store.get_rewrites(exported["id"])
  small, drawn = 20, export.local_graphs(trace, exported["id"], blob)
  cut = export.local_graphs(trace, exported["id"], blob, node_limit=small)
  assert cut.keys() == drawn.keys() and any(b["total_nodes"] > small for b in drawn.values())
  for ref, b in cut.items():
    assert b["error"] is None and b["total_nodes"] == drawn[ref]["total_nodes"], ref
    if b["total_nodes"] <= small:
      assert b["svg"] and "whole" not in b
      continue
    whole = b["whole"]
    assert b["svg"] is None and b["shown_nodes"] == len(whole["nodes"]) == b["total_nodes"]
    ids = {n["id"] for n in whole["nodes"]}
    assert all(e["src"] in ids and e["dst"] in ids for e in whole["edges"])
    if ref.startswith("ast/"):
      assert whole["groups"], ref
      for n in whole["nodes"]:
        if "group" in n: assert sorted(n["ranges"]) == sorted(whole["groups"][n["group"]]["ranges"]), (ref, n)
  html = export.render_html(trace, exported["id"], cut)
  views = html.count('<script type="application/json" data-whole-view>')
  assert views == sum("whole" in b for b in cut.values()) and "layOutInPage(layered)" in html
  assert external_refs(html) == [] and "\nexport " not in html and 'from "./' not in html
