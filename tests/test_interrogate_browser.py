"""Questioning what the pages show, in a real browser (Debian's chromium): a source line lights up the linear UOps that made it and the
reverse; every match of a pass with over a thousand of them is reachable, each with its rule's source; keyboard stepping survives a
click on the before/after radio."""
from __future__ import annotations
import re
import httpx
import pytest
from conftest import ARTIFACTS, VIEWERS, needs_chromium, uops_beside_the_line, wait_graphs

# wino8 with the builtin Winograd, CUDA rendered: its xhat kernel's devectorize pass has over a thousand matches
pytestmark = [pytest.mark.browser, needs_chromium,
              pytest.mark.traces({"preset": "wino8", "variant": {"algo": "winograd", "targets": ["cuda"], "time": False}})]

def analysis_of(url: str, timeout_s: float = 120) -> dict:
  import time
  deadline = time.monotonic() + timeout_s
  while (r := httpx.get(url, timeout=60)).status_code == 202:
    assert time.monotonic() < deadline
    time.sleep(0.3)
  assert r.status_code == 200, r.text
  return r.json()

def test_a_source_line_lights_its_uops_and_back(live_server, traced, page, errors):
  rec = httpx.get(f"{live_server}/api/traces/{traced}/kernels/0/targets/cuda", timeout=60).json()
  rec |= analysis_of(f"{live_server}/api/traces/{traced}/kernels/0/targets/cuda/analysis")  # computed on first request, as the page asks
  source = rec["source"].split("\n")
  line, uops = next((ln, ix) for ln, ix in rec["line_map"] if "= (*(" in source[ln - 1])  # a line that loads
  page.set_viewport_size({"width": 1440, "height": 900})  # the kernel page's split: its source beside the AST graph
  page.goto(f"{live_server}/t/{traced}/k/0?target=cuda&code=cuda")
  box = page.locator("[data-panel=cuda] .line-mapped")
  box.locator(f'[id="S-{line}"]').click()
  uops_beside_the_line(page, box)
  hot = box.locator(".uop-row.lm-hot")
  assert sorted(int(x) for x in hot.evaluate_all("rows => rows.map(r => r.dataset.uop)")) == uops
  assert any("LOAD" in t for t in hot.all_inner_texts())
  assert box.locator(f'[id="S-{line}"]').get_attribute("class").count("lm-hot") == 1
  # the pane scrolled to the line's own UOp (one no other line shares), and no UOp row is cut at the pane's edge
  own = [u for u in uops if sum(u in ix for _, ix in rec["line_map"]) == 1]
  assert own, uops
  assert box.evaluate("""(b, u) => { const p = b.querySelector('.lm-uops').getBoundingClientRect();
    const r = b.querySelector(`.uop-row[data-uop="${u}"]`).getBoundingClientRect(); return r.top >= p.top && r.bottom <= p.bottom; }""", own[0])
  assert box.locator(".lm-uops").evaluate("p => p.scrollWidth <= p.clientWidth")
  # line -> rule: the passes and rules that made its UOps, read from the CUDA render's rewrite log
  page.wait_for_function("() => document.querySelector('[data-panel=cuda] .lm-origins').textContent.includes('is made of UOps from')",
                         timeout=60_000)
  said = box.locator(".lm-origins").inner_text()
  assert f"line {line} is made of UOps from:" in said and ": rule " in said and ".py:" in said, said
  page.screenshot(path=str(ARTIFACTS / "line_map.png"))
  box.locator(f'[id="S-{line}"]').click()  # unpin
  assert box.locator(".lm-hot").count() == 0
  u = max(uops)  # the line's own load, say: which lines did it go into?
  box.locator(f'.uop-row[data-uop="{u}"]').click()
  lines = sorted(int(x) for x in box.locator(".lm-source .lm-hot").evaluate_all("els => els.map(e => e.dataset.line)"))
  assert line in lines and lines == sorted(ln for ln, ix in rec["line_map"] if u in ix)
  page.set_viewport_size({"width": 1500, "height": 950})  # the module's page, as the other tests have it
  assert not errors, errors

def test_every_match_is_reachable_with_its_rule(live_server, traced, page, errors):
  rec = httpx.get(f"{live_server}/api/traces/{traced}/kernels/0/targets/cuda", timeout=60).json()
  p, big = max(enumerate(rec["passes"]), key=lambda ip: ip[1]["matches"])
  assert big["matches"] > 1000, big
  page.goto(f"{live_server}/t/{traced}/k/0?target=cuda&graph=passes&pass={p}&at=after")
  wait_graphs(page)
  page.wait_for_selector("[data-match-list] tr[data-match]")
  assert f"{big['matches']} in all" in page.locator("[data-match-call]").inner_text()
  goto = page.locator("[data-goto-match]")
  goto.fill(str(big["matches"]))
  goto.press("Enter")
  page.wait_for_url(re.compile(rf".*at=m{big['matches']}.*"))
  wait_graphs(page)
  assert f"Match {big['matches']} of {big['matches']}" in page.locator("#pass-graph .viewer-notes").inner_text()
  row = page.locator(f"[data-match-list] tr.current[data-match='{big['matches']}']")
  row.wait_for()
  row.locator("details").first.click()
  assert "UPat" in row.locator("pre.listing").inner_text()  # the rule's source, not only its file:line
  page.screenshot(path=str(ARTIFACTS / "matches_last.png"))
  page.click("label:has([data-at-choice][value=before])")  # clicking the radio used to swallow the keys
  page.wait_for_url(re.compile(r".*at=before.*"))
  page.keyboard.press("j")
  page.wait_for_url(re.compile(rf".*pass=(?!{p}&)\d+.*"))
  assert not errors, errors

def test_a_graph_can_be_searched_and_a_node_questioned(live_server, traced, page, errors):
  view = httpx.get(f"{live_server}/api/traces/{traced}/graphs/ast/1", timeout=120).json()
  loads = [n for n in view["nodes"] if "index" in n["label"].lower()]  # what the search matches: the label text
  page.goto(f"{live_server}/t/{traced}/k/1")
  wait_graphs(page)
  viewer = page.locator(".viewer").first
  viewer.locator("[data-act=search]").fill("INDEX")
  assert len(loads) > 1
  assert viewer.locator("[data-hits]").inner_text() == f"1 / {len(loads)}" and viewer.locator("g.node.hit").count() == len(loads)
  viewer.locator("[data-act=search]").press("Enter")
  assert viewer.locator("[data-hits]").inner_text() == f"2 / {len(loads)}"
  sel = viewer.locator("g.node.selected")
  node = sel.get_attribute("id")[1:]
  ins = [e for e in view["edges"] if e["dst"] == node]
  outs = [e for e in view["edges"] if e["src"] == node]
  assert viewer.locator("g.node.parent").count() == len({e["src"] for e in ins})
  assert viewer.locator("g.node.child").count() == len({e["dst"] for e in outs})
  assert viewer.locator("g.edge.parent").count() == len(ins) and viewer.locator("g.edge.child").count() == len(outs)
  detail = viewer.locator(".viewer-detail")
  assert detail.is_visible() and f"node {node}" in detail.inner_text()
  page.screenshot(path=str(ARTIFACTS / "graph_question.png"))
  if outs:  # a user's link selects that user
    detail.locator("a[data-node]").last.click()
    assert viewer.locator("g.node.selected").get_attribute("id") == f"n{outs[-1]['dst']}" or viewer.locator("g.node.selected").count() == 1
  assert not errors, errors

def test_a_stage_row_leads_to_its_node(live_server, traced, page, errors):
  st = httpx.get(f"{live_server}/api/traces/{traced}/raw", timeout=60).json()["scheduler"]["stages"]
  page.goto(f"{live_server}/t/{traced}/bufferize")
  row = page.locator('#stage-table tr[data-fate="kept"]').first
  assert row.locator("a[href*='/k/']").count() >= 1  # the kernels that write and read the buffer it became
  row.locator("a", has_text="graph").click()
  page.wait_for_url(re.compile(rf".*/rangeify\?pass={st['debuf_pass']}&at=after&node={st['kept'][0]['num']}"))
  wait_graphs(page)
  selected = page.wait_for_function("""() => { const v = window.explorerViewers.get('pass-graph');  // an SVG's or a canvas's (big_graph.js)
    return v && v.selected != null && (v.big || document.querySelector('#pass-graph g.node.selected')) && v.graph.byId.get(v.selected).num; }""")
  assert selected.json_value() == st["kept"][0]["num"]
  detail = page.locator("#pass-graph .viewer-detail").inner_text()
  assert "STAGE" in detail, detail
  assert not errors, errors

def test_stage_rows_say_what_they_hold(live_server, traced, page, errors):
  """Every STAGE row in terms of the schedule, from rangeify's own data flow, and consistent with the schedule's reads and writes: the
  kept MHAT STAGE became the buffer the reducing kernel writes; an inlined STAGE goes into buffers whose writer reads what it is computed
  from (that kernel recomputes it inline), and the page says which kernel."""
  raw = httpx.get(f"{live_server}/api/traces/{traced}/raw", timeout=60).json()
  st, buffers, schedule = raw["scheduler"]["stages"], raw["buffers"], raw["schedule"]
  (kept,) = st["kept"]
  writer = schedule[buffers[kept["buffer"]]["written_by"][0]]
  assert writer["role"] == "mhat" and set(kept["reads"]) <= set(writer["reads"]), (kept, writer)
  for row in st["fused"]:
    assert row["into"], row
    for b in row["into"]:
      (w,) = buffers[b]["written_by"]
      assert set(row["reads"]) <= set(schedule[w]["reads"]), (row, schedule[w])
  weight = next(b["index"] for b in buffers if b["role"] == "weight")
  ghat = next(r for r in st["fused"] if r["reads"] == [weight])
  page.goto(f"{live_server}/t/{traced}/bufferize")
  rows = page.locator('#stage-table tr[data-fate="fused"]')
  assert rows.count() >= 1
  texts = rows.locator(".stage-became").all_inner_texts()
  ghat_kernel = schedule[buffers[ghat["into"][0]]["written_by"][0]]["name"]
  assert all(t.startswith("inlined into ") for t in texts) and any(ghat_kernel in t for t in texts)
  assert any("weight" in t for t in rows.locator(".stage-from").all_inner_texts())
  assert not errors, errors

def test_nested_passes_fold_under_their_pass(live_server, traced, page, errors):
  """A nested rewrite is listed under the pass that ran it, folded until that pass is opened (or stepped into)."""
  rec = httpx.get(f"{live_server}/api/traces/{traced}/kernels/0/targets/cuda", timeout=60).json()
  top = next(i for i, p in enumerate(rec["passes"]) if not p["depth"] and i + 1 < len(rec["passes"]) and rec["passes"][i + 1]["depth"]
             and any(q["matches"] for q in rec["passes"][i + 1:] if q["depth"]))
  first = next(i for i, p in enumerate(rec["passes"]) if p["matches"] and not p["depth"] and i != top)
  page.goto(f"{live_server}/t/{traced}/k/0?target=cuda&graph=passes&pass={first}&at=after")
  wait_graphs(page)
  nested = page.locator(f'#passes a[data-top="{top}"]')
  assert nested.count() >= 1 and all(not nested.nth(i).is_visible() for i in range(nested.count()))
  twisty = page.locator(f'#passes [data-toggle-nested="{top}"]')
  assert f"{nested.count()} nested" in twisty.inner_text()
  twisty.click()
  assert any(nested.nth(i).is_visible() for i in range(nested.count())) and "pass=" + str(first) in page.url  # opened, not navigated
  twisty.click()
  assert all(not nested.nth(i).is_visible() for i in range(nested.count()))
  assert not errors, errors

def test_the_node_pane_stays_in_view(live_server, traced, page, errors):
  """Clicking a node opens its pane over the graph, inside the viewport, not below the page's fold."""
  page.goto(f"{live_server}/t/{traced}/k/1")
  wait_graphs(page)
  page.locator("#ast-graph").scroll_into_view_if_needed()
  page.locator("#ast-graph g.node.op-STORE").first.dispatch_event("click")
  pane, canvas = page.locator("#ast-graph .viewer-detail"), page.locator("#ast-graph .viewer-canvas").bounding_box()
  pane.wait_for()
  box, vp = pane.bounding_box(), page.viewport_size
  assert box["y"] >= 0 and box["y"] + min(box["height"], 200) <= vp["height"] and box["x"] + box["width"] <= vp["width"], (box, vp)
  assert canvas["y"] <= box["y"] < canvas["y"] + canvas["height"], (box, canvas)
  assert "STORE" in pane.inner_text()
  assert not errors, errors

def test_passes_can_be_filtered_scrubbed_and_a_node_followed(live_server, traced, page, errors):
  rec = httpx.get(f"{live_server}/api/traces/{traced}/kernels/0/targets/cuda", timeout=60).json()
  rec |= analysis_of(f"{live_server}/api/traces/{traced}/kernels/0/targets/cuda/analysis")
  last = next(i for i, p in enumerate(rec["passes"]) if p["name"] == "linearize/render")
  page.goto(f"{live_server}/t/{traced}/k/0?target=cuda&graph=passes&pass={last}&at=before&code=cuda")
  wait_graphs(page)
  # a source line lights its UOps in this graph (the sink codegen hands the linearizer holds the linear UOps)
  line, uops = next((ln, ix) for ln, ix in rec["line_map"] if "= (*(" in rec["source"].split("\n")[ln - 1])
  page.locator(f'[data-panel=cuda] [id="S-{line}"]').click()
  in_graph = {n["num"] for n in httpx.get(f"{live_server}/api/traces/{traced}/graphs/codegen@cuda/0/{last}/before", timeout=60).json()["nodes"]
              if "num" in n}
  linked = page.locator("#pass-graph g.node.linked").count()
  assert linked == len({rec["linear_nums"][u] for u in uops} & in_graph) > 0
  page.locator(f'[data-panel=cuda] [id="S-{line}"]').click()  # unpin
  # the filter box keeps the passes whose name has the text
  page.fill("[data-pass-filter]", "symbolic")
  shown = list(page.locator("#passes a[data-pass]:visible").all_inner_texts())
  assert shown and all("symbolic" in t for t in shown)
  page.fill("[data-pass-filter]", "")
  # a node selected in one pass stays selected in the next where it survives
  page.locator("#pass-graph g.node.op-SINK").first.dispatch_event("click")  # the graph opens on its busiest part: the SINK may be off-canvas
  num = page.evaluate(f"async () => {VIEWERS}.get('pass-graph').keepNum")
  assert isinstance(num, int)
  assert re.search(r"made( by)?:", page.locator("#pass-graph .viewer-detail").inner_text())  # which pass made this UOp
  slider = page.locator("[data-pass-slider]")
  slider.evaluate(f"(s) => {{ s.value = {last - 1}; s.dispatchEvent(new Event('input')); }}")
  page.wait_for_url(re.compile(rf".*pass={last - 1}&.*"))
  wait_graphs(page)
  still = page.evaluate(f"async () => {{ const v = {VIEWERS}.get('pass-graph'); return [...v.graph.byId.values()].some(n => n.num === v.keepNum); }}")
  assert still == (page.locator("#pass-graph g.node.selected").count() == 1)
  assert not errors, errors

def test_graph_labels_are_readable_and_follow_the_font_control(live_server, traced, page, errors):
  """A big graph opens zoomed so its labels are readable (not fitted into 5 px text); the presenter's big-font mode makes them bigger."""
  js = "() => { const h = [...document.querySelectorAll('#ast-graph g.node text')].map(t => t.getBoundingClientRect().height).filter(x => x > 0);" \
       " h.sort((a, b) => a - b); return h[Math.floor(h.length / 2)]; }"
  sizes = {}
  for big in ("0", "1"):
    page.goto(f"{live_server}/t/{traced}/k/1?big={big}")
    wait_graphs(page)
    page.wait_for_timeout(300)
    sizes[big] = page.evaluate(js)
  assert sizes["0"] >= 9 and sizes["1"] > sizes["0"], sizes
  page.goto(f"{live_server}/t/{traced}/k/1?big=0")  # leave the mode off for the other tests
  assert not errors, errors

# where each UOp is in the graph's canvas (not the window: a line of the stepper's text above it may wrap once the step is drawn)
STABLE_JS = "async () => { const v = " + VIEWERS + """.get('pass-graph'), out = {}, c = v.canvas.getBoundingClientRect();
  for (const n of v.graph.byId.values()) { if (n.num == null) continue; const g = v.nodeEl(n.id); if (!g) continue;
    const r = g.getBoundingClientRect(); out[n.num] = [r.left + r.width / 2 - c.left, r.top + r.height / 2 - c.top]; }
  return out; }"""

def stepped_to_after(page, places: str) -> tuple[dict, dict]:
  """The UOps' places (the script `places` reads) before and after the stepper's "after" of the pass shown, laid out stably."""
  before = page.evaluate(places)
  page.click("label:has([data-at-choice][value=after])")
  page.wait_for_url(re.compile(r".*at=after.*"))
  page.wait_for_function("() => document.querySelector('#pass-graph').dataset.loaded && document.querySelector('#pass-graph').dataset.stable === '1'")
  return before, page.evaluate(places)

def test_stepping_keeps_surviving_uops_in_place(live_server, traced, page, errors):
  """With the stable layout, the UOps two consecutive graphs share stay where they were in the graph's canvas (iongraph's idea); new
  ones are placed beside them. Measured over a step from one pass to the next."""
  rec = httpx.get(f"{live_server}/api/traces/{traced}/kernels/0/targets/cuda", timeout=60).json()
  p = next(i for i, q in enumerate(rec["passes"]) if q["name"] == "add gpudims")
  page.goto(f"{live_server}/t/{traced}/k/0?target=cuda&graph=passes&pass={p}&at=before")
  wait_graphs(page)
  before, after = stepped_to_after(page, STABLE_JS)
  shared = [k for k in before if k in after]
  moved = sorted(max(abs(before[k][0] - after[k][0]), abs(before[k][1] - after[k][1])) for k in shared)
  page.screenshot(path=str(ARTIFACTS / "stable_step.png"))
  assert len(shared) >= 5 and moved[len(moved) // 2] < 2 and moved[int(len(moved) * 0.9)] < 4, (len(shared), moved)
  assert not errors, errors

CANVAS_AT = """() => { const v = window.explorerViewers.get('pass-graph');  // a canvas-drawn graph's UOps in it, by trace number
  return v.big ? Object.fromEntries([...v.big.screenState().at].filter(([k]) => typeof k === 'number').map(([k, p]) => [k, [p.x, p.y]]))
    : null; }"""

def test_stepping_keeps_surviving_uops_in_place_on_a_canvas(live_server, traced, page, errors):
  """The same over graphs too big for graphviz, drawn whole on a canvas (rangeify's debuf pass, before and after, fitted): the UOps
  both hold are drawn where they were, to the pixel, at the zoom the first was seen at."""
  passes = httpx.get(f"{live_server}/api/traces/{traced}/rangeify", timeout=60).json()["passes"]
  p = next(q["index"] for q in passes if q["name"] == "symbolic+reduce_collapse+debuf")
  page.goto(f"{live_server}/t/{traced}/rangeify?pass={p}&at=before")
  wait_graphs(page)
  assert page.get_attribute("#pass-graph", "data-drawn") == "canvas"
  page.click("#pass-graph [data-act=fit]")  # the whole graph on screen: its survivors are where the next one must keep them
  before, after = stepped_to_after(page, CANVAS_AT)
  shared = [k for k in before if k in after]
  moved = max(max(abs(before[k][0] - after[k][0]), abs(before[k][1] - after[k][1])) for k in shared)
  page.screenshot(path=str(ARTIFACTS / "stable_step_canvas.png"))
  assert len(shared) >= 30 and moved < 0.5, (len(shared), moved)  # (62 of its UOps survive the pass)
  assert not errors, errors
