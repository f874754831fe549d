"""Teaching tours in a real browser (Debian's chromium through playwright) against a live server with a fresh database: the home page's
one-click tour (progress, then the tour), a whole tour walked with the keyboard, reload at a step, large-font mode, the glossary panel,
and notes on a step, a graph node and a source line that survive a reload and show on the kernel page. Screenshots: test-artifacts/tour_*.png."""
from __future__ import annotations
import re
import httpx
import pytest
from conftest import ARTIFACTS, needs_chromium, wait_graphs

pytestmark = [pytest.mark.browser, needs_chromium]

def shot(pg, name: str) -> None: pg.screenshot(path=str(ARTIFACTS / f"tour_{name}.png"))

def step_of(pg) -> str | None: return pg.evaluate("() => new URL(location.href).searchParams.get('step')")

@pytest.fixture(scope="module")
def tour(live_server, page) -> dict:
  """One click on the home page's "Direct vs Winograd" tour: both traces run, the progress page follows them, then the tour opens."""
  page.goto(live_server + "/")
  page.click("[data-tour-start=winograd]")
  page.wait_for_url(re.compile(r".*/tours/winograd\?a=[0-9a-f]{16}&b=[0-9a-f]{16}$"))
  progress = page.locator("#tour-progress").count() > 0
  if progress:
    page.wait_for_selector("#tour-progress li.running, #tour-progress li.done", timeout=60_000)
    shot(page, "progress")
  page.wait_for_selector("#tour", timeout=300_000)  # reloads itself when both traces are stored
  a, b = re.search(r"a=([0-9a-f]{16})&b=([0-9a-f]{16})", page.url).groups()
  return {"base": live_server, "a": a, "b": b, "progress": progress, "url": page.url}

def test_one_click_tour_from_the_home_page(tour, page):
  assert tour["progress"]
  assert page.locator(".tour-steps li").count() == 30 and page.locator(".tour-steps a.current").get_attribute("data-step-id") == "a-tensor"
  wait_graphs(page)
  shot(page, "pair_first")
  page.goto(tour["url"] + "&step=compare")
  assert "1 kernel (conv)" in page.inner_text("#step-text") and page.locator("#tour-ab-table").is_visible()
  shot(page, "pair_compare")

def test_walk_a_whole_tour_with_the_keyboard(tour, page):
  page.goto(f"{tour['base']}/t/{tour['a']}/tour")
  ids = page.eval_on_selector_all(".tour-steps a", "els => els.map(e => e.dataset.stepId)")
  assert ids[0] == "tensor" and ids[-1] == "timing" and len(ids) >= 7
  texts = set()
  for i, key in zip(range(1, len(ids)), ["ArrowRight", "j"] * len(ids), strict=False):
    with page.expect_navigation(): page.keyboard.press(key)  # loaded, its keys listened to, before the next key
    page.wait_for_function(f"() => new URL(location.href).searchParams.get('step') === {ids[i]!r}")
    assert page.locator(".tour-steps a.current").get_attribute("data-step-id") == ids[i]
    assert page.inner_text("#tour-pos") == f"{i + 1} / {len(ids)}"
    texts.add(page.inner_text("#step-text"))
  assert len(texts) == len(ids) - 1  # each step explains something else
  page.keyboard.press("ArrowRight")  # the last step stays
  page.wait_for_timeout(300)
  assert step_of(page) == ids[-1]
  with page.expect_navigation(): page.keyboard.press("k")
  page.wait_for_function(f"() => new URL(location.href).searchParams.get('step') === {ids[-2]!r}")
  page.keyboard.press("ArrowLeft")
  page.wait_for_function(f"() => new URL(location.href).searchParams.get('step') === {ids[-3]!r}")
  page.reload()  # a reload (and so a shared link) opens at the same step
  assert step_of(page) == ids[-3] and page.locator(".tour-steps a.current").get_attribute("data-step-id") == ids[-3]
  page.focus(".note-form textarea")  # keys typed into a note stay there
  page.keyboard.type("jk")
  page.keyboard.press("ArrowRight")
  assert step_of(page) == ids[-3] and page.input_value(".note-form textarea") == "jk"
  page.fill(".note-form textarea", "")
  page.goto(f"{tour['base']}/t/{tour['a']}/tour?step=k0-ast")
  wait_graphs(page)
  assert page.locator("#tour-graph svg g.node").count() > 20
  shot(page, "step_ast")

def test_large_font_mode(tour, page):
  page.goto(f"{tour['base']}/t/{tour['b']}/tour?step=bufferize")
  size = lambda: float(page.eval_on_selector("#step-text", "e => parseFloat(getComputedStyle(e).fontSize)"))
  small = size()
  page.click("[data-big-toggle]")
  assert page.evaluate("() => document.documentElement.classList.contains('big')") and "big=1" in page.url and size() > small * 1.3
  assert "big=1" in page.get_attribute("#tour-next", "href")
  wait_graphs(page)
  shot(page, "big")
  page.reload()
  assert size() > small * 1.3
  page.goto(f"{tour['base']}/t/{tour['b']}/tour?step=timing")  # remembered without the URL parameter, which comes back
  assert size() > small * 1.3 and "big=1" in page.url
  page.click("[data-big-toggle]")
  assert size() == small and "big" not in page.url
  page.goto(f"{tour['base']}/t/{tour['b']}/tour?step=timing")
  assert size() == small

def test_glossary_from_every_view(tour, page):
  for url in (f"/t/{tour['b']}/tour?step=k2-uops", f"/t/{tour['b']}/k/2", "/"):
    page.goto(tour["base"] + url)
    assert page.locator("#glossary-panel").is_hidden()
    page.keyboard.press("?")
    assert page.locator("#glossary-panel").is_visible() and "RANGE" in page.inner_text("#glossary-panel")
    if url.endswith("k2-uops"): shot(page, "glossary")
    page.keyboard.press("Escape")
    assert page.locator("#glossary-panel").is_hidden()
    page.click("header [data-glossary]")
    assert page.locator("#glossary-panel").is_visible()
    page.click("#glossary-panel .glossary-close")
    assert page.locator("#glossary-panel").is_hidden()
  page.goto(tour["base"] + "/glossary")
  assert "STAGE / bufferize" in page.inner_text("#glossary")

LABEL_PX = """() => { const px = [...document.querySelectorAll('#tour-graph g.node text')].map(t => {
  const m = t.getScreenCTM(), r = t.getBoundingClientRect();
  return r.width > 0 ? parseFloat(t.getAttribute('font-size')) * Math.hypot(m.a, m.b) : 0; }).filter(x => x > 0).sort((a, b) => a - b);
  return px.length ? px[Math.floor(px.length / 2)] : 0; }"""

def test_presenter_mode_fits_a_projector(tour, browser):
  """At 1024x768 in big mode: the view stacks under the step's text at full width (not a 230 px column), graph labels are at least
  14 px, a uops step's listing is scrolled to the uop its text discusses, and the comparison opens with its three headline numbers."""
  pg = browser.new_page(viewport={"width": 1024, "height": 768})
  try:
    pg.goto(f"{tour['base']}/t/{tour['b']}/tour?step=k2-ast&big=1")
    wait_graphs(pg)
    pg.wait_for_timeout(300)
    card, view = pg.locator("#tour-card").bounding_box(), pg.locator("#tour-view").bounding_box()
    svg = pg.locator("#tour-graph svg").bounding_box()
    assert view["y"] >= card["y"] + card["height"] and view["width"] >= 0.9 * (1024 - 32), (card, view)
    assert svg["width"] >= 1024 / 2, svg
    assert pg.evaluate(LABEL_PX) >= 14
    pg.screenshot(path=str(ARTIFACTS / "tour_projector_graph.png"))
    pg.goto(f"{tour['base']}/t/{tour['b']}/tour?step=k2-uops&big=1")
    focus = int(pg.get_attribute("#tour-uops", "data-focus-uop"))
    assert f"at uop {focus}" in pg.inner_text("#step-text")
    wrap, line = pg.locator("#tour-uops").bounding_box(), pg.locator("#tour-uops .uop-line.focus").bounding_box()
    assert focus > 20 and wrap["y"] <= line["y"] and line["y"] + line["height"] <= wrap["y"] + wrap["height"], (wrap, line)
    assert pg.locator("#tour-uops .uop-line.focus").inner_text().split()[0] == str(focus)
    pg.screenshot(path=str(ARTIFACTS / "tour_projector_uops.png"))
    pg.goto(f"{tour['base']}/t/{tour['b']}/tour?step=k2-source&big=1")  # the source step: the line its text names, marked and in view
    line = int(pg.get_attribute("#tour-source", "data-focus-line"))
    assert f"Line {line} (marked)" in pg.inner_text("#step-text")
    wrap, mark = pg.locator("#tour-source").bounding_box(), pg.locator("#tour-source .tour-focus").bounding_box()
    assert wrap["y"] <= mark["y"] and mark["y"] + mark["height"] <= wrap["y"] + wrap["height"], (wrap, mark)
    pg.goto(tour["url"] + "&step=compare&big=1")
    stats = pg.locator("#tour-headline .stat")
    assert stats.count() == 3 and "kernels" in stats.nth(0).inner_text().lower()
    assert pg.locator("#tour-headline").bounding_box()["y"] < pg.locator("#tour-ab-table").bounding_box()["y"]
    table = pg.locator("#tour-ab-table").bounding_box()
    assert table["x"] + table["width"] <= 1024, table  # the comparison table is not cut off
    targets = pg.locator("#tour-targets a")  # nor the target switcher: it wraps, every target's link on the screen
    assert targets.count() >= 6 and all((box := targets.nth(i).bounding_box()) and box["x"] + box["width"] <= 1024 for i in range(targets.count()))
    assert any(targets.nth(i).inner_text().endswith(" +") for i in range(targets.count()))  # a target not rendered yet, marked as on kernel pages
  finally: pg.close()

def test_a_tour_on_another_target(tour, page):
  """?target=cuda: the switcher marks it, the kernel steps name CUDA kernels and their views show CUDA's passes and uops; an unknown
  target says so and tours the host."""
  b = tour["b"]
  page.goto(f"{tour['base']}/t/{b}/tour?step=k2-uops&target=cuda")  # the trace rendered its host only: the tour computes CUDA's records
  # (past a moment, the page says what it waits for and comes back by itself until the tour opens)
  page.wait_for_selector("#tour-targets a.active", timeout=180_000)
  raw = httpx.get(f"{tour['base']}/api/traces/{b}/raw", timeout=60).json()
  k = raw["kernels"][2]
  assert page.locator("#tour-targets a.active").inner_text() == "cuda"
  assert f"{k['targets']['cuda']['linear_uops']} uops" in page.inner_text("#step-text")
  assert k["targets"]["cuda"]["name"] in page.inner_text("#tour-view")
  page.click("#tour-next")
  page.wait_for_url(re.compile(r".*step=k2-source.*target=cuda|.*target=cuda.*step=k2-source"))
  assert page.locator(".tab-panel[data-panel=cuda]").is_visible()
  page.goto(f"{tour['base']}/t/{b}/tour?step=k2-uops&target=fortran")
  assert "There is no target 'fortran'" in page.inner_text(".url-notice")
  assert page.locator("#tour-targets a.active").inner_text().startswith("host")


def pin(page, text: str) -> None:
  page.fill(".note-form textarea", text)
  page.click(".note-form button[type=submit]")

def test_notes_on_a_step_a_node_and_a_line(tour, page):
  base, b = tour["base"], tour["b"]
  page.goto(f"{base}/t/{b}/tour?step=k1-ast")
  wait_graphs(page)
  hostile = '<img src=x onerror="window.__pwned=1">xhat tiles'
  pin(page, hostile)
  page.wait_for_selector("#step-notes li")
  assert page.inner_text("#step-notes li .note-text") == hostile
  page.locator("#tour-graph svg g.node.op-STORE").first.dispatch_event("click")  # click a node: the form pins to it
  page.wait_for_function("() => document.querySelector('.note-form [name=anchor_kind]').value === 'node'")
  assert page.input_value(".note-form [name=node]") != "" and page.locator("#tour-graph svg g.node.picked").count() == 1
  pin(page, "the store of xhat")
  page.wait_for_selector("#tour-graph svg g.node.annotated")
  assert "the store of xhat" in page.inner_text("[data-anchored-notes]") and "STORE" in page.inner_text("[data-anchored-notes]")
  page.reload()
  wait_graphs(page)
  page.wait_for_selector("#tour-graph svg g.node.annotated")
  assert page.inner_text("#step-notes li .note-text") == hostile and page.evaluate("() => window.__pwned") is None
  assert page.locator(".tour-steps a.current .note-count").inner_text() == "✎1"
  shot(page, "notes")

  page.goto(f"{base}/t/{b}/tour?step=k1-source&target=cuda")  # the tour on CUDA: its source step opens on the CUDA tab
  page.wait_for_selector(".tab-panel[data-panel=cuda]", state="visible")  # (first opened alone: "preparing" its kernels, then the step)
  page.select_option(".note-form [name=anchor_kind]", "line")
  page.select_option(".note-form [name=target]", "cuda")
  page.fill(".note-form [name=line]", "6")
  pin(page, "one thread per tile")
  page.wait_for_selector(".tab-panel[data-panel=cuda] .line-note")
  page.reload()
  page.wait_for_selector(".tab-panel[data-panel=cuda] .line-note")
  assert "target=cuda" in page.url
  assert "one thread per tile" in page.inner_text(".tab-panel[data-panel=cuda]")
  assert page.evaluate("() => document.querySelector('.line-note').previousElementSibling.id") == "L-6"
  assert page.locator(".tab-panel[data-panel=cuda] td.linenos span.noted").inner_text().strip() == "6"
  shot(page, "line_note")

  page.goto(f"{base}/t/{b}")  # the permalink lists every note, linked to where it is pinned
  page.wait_for_selector("#trace-notes li")
  assert page.locator("#trace-notes li").count() == 3 and page.inner_text("#trace-notes [data-trace-notes-count]") == "3"
  assert page.get_attribute("#trace-notes li >> nth=0 >> a.note-where", "href") == f"/t/{b}/tour?step=k1-ast"

  page.goto(f"{base}/t/{b}/k/1?code=cuda")  # the kernel page shows the node and line notes where they are drawn
  wait_graphs(page)
  page.wait_for_selector("#ast-graph svg g.node.annotated")
  page.wait_for_selector("#code-panel .line-note")
  notes = page.inner_text("#kernel-notes")
  assert "the store of xhat" in notes and "one thread per tile" in notes and "cuda line 6" in notes
  shot(page, "kernel_notes")
  for _ in range(2): page.locator("#kernel-notes [data-note-delete]").first.click()
  page.wait_for_function("() => !document.querySelector('#kernel-notes li')")
  page.reload()
  wait_graphs(page)
  assert page.locator("#kernel-notes li").count() == 0 and page.locator("#code-panel .line-note").count() == 0

def test_no_errors_in_the_browser_console(tour, errors):
  assert not errors, errors
