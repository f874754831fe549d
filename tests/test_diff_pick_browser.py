"""A user's way to a diff in a real browser at 1024x768: the home page's link, the picker's two lists, and a diff page that fits the
window (the groups table not clipped), says "identical" in a line, outlines only where the UOp graphs' change starts, and keeps
each group's delta column beside the source diff, not under it, with large fonts at 1440x900 too."""
from __future__ import annotations
import json
import re
import pytest
from conftest import ARTIFACTS, GRAPH_TIMEOUT_MS, needs_chromium, running_server
from stored_traces import stored_pair

pytestmark = [pytest.mark.browser, needs_chromium]

@pytest.fixture(scope="module")
def server(tmp_path_factory):
  db, staged, fused = stored_pair()
  with running_server(db, tmp_path_factory.mktemp("diff-pick-live")) as base: yield base, staged, fused

FITS = "(s) => [...document.querySelectorAll(s)].map(e => [e.scrollWidth, e.clientWidth])"

def overlap(a: dict, b: dict) -> bool:
  return a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"] and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"]

def deltas_beside_sources(page) -> int:
  """Each changed group's metrics table: whole in its box, and its last (delta) column clear of the source diff. The groups checked."""
  groups = page.locator(".diff-group:not([data-identical])")
  for i in range(groups.count()):
    g = groups.nth(i)
    table, src = g.locator("table.metrics"), g.locator(".source-diff").bounding_box()
    width, client = table.evaluate("t => [t.scrollWidth, t.clientWidth]")
    assert width <= client, (width, client)
    for cell in table.locator("tr > :last-child").all()[:6]:
      box = cell.bounding_box()
      assert box is not None and src is not None and not overlap(box, src), (box, src)
  return groups.count()

def test_home_to_picker_to_a_diff_that_fits_1024(server, browser):
  base, staged, fused = server
  errors: list[str] = []
  page = browser.new_page(viewport={"width": 1024, "height": 768})
  page.on("pageerror", lambda e: errors.append(str(e)))
  page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
  page.goto(f"{base}/")
  link = page.locator("#home-diff")
  box = link.bounding_box()
  assert box is not None and box["y"] + box["height"] <= 768 and box["x"] + box["width"] <= 1024  # on the first screen
  link.click()
  page.wait_for_url("**/diff")
  assert page.locator("#variants-form").is_visible() and page.locator("#pair-submit").is_visible()
  page.select_option("#pick-a", staged)
  page.select_option("#pick-b", fused)
  with page.expect_navigation(url=f"**/diff/{staged}/{fused}", timeout=240_000):  # a cold diff computes both sides' compile facts first
    page.click("#pick-diff", no_wait_after=True)
  # nothing at the top clipped at 1024: the page, the head, the schedule panel and its groups table (the table fits; it would scroll, not clip)
  assert page.evaluate("() => document.documentElement.scrollWidth") <= 1024
  for sel in (".topbar", "#diff-head", "#schedule", ".groups-scroll"):
    assert all(w <= c for w, c in page.evaluate(FITS, sel)), (sel, page.evaluate(FITS, sel))
  last = page.locator("#groups-table th:last-child").bounding_box()
  assert last is not None and last["x"] + last["width"] <= 1024
  # identical kernels in a line or two, not a page of empty panes
  same = page.locator("#group-0[data-identical]")
  assert same.count() == 1 and "Identical" in same.inner_text()
  assert (same.bounding_box() or {"height": 1e9})["height"] < 220
  assert deltas_beside_sources(page) >= 1
  page.wait_for_function("() => !document.querySelector('.graph-pending')", timeout=GRAPH_TIMEOUT_MS)
  fused_group = page.locator(".diff-group:not([data-identical])").last
  red, amber = fused_group.locator("svg g.node.changed").count(), fused_group.locator("svg g.node.downstream").count()
  assert 0 < red < amber and red <= 30 and fused_group.locator("[data-graph-legend]").is_visible()
  ARTIFACTS.mkdir(exist_ok=True)
  page.screenshot(path=str(ARTIFACTS / "diff_1024.png"))
  # large fonts (A+) at 1440x900: the delta column widens its column instead of sliding under the source
  page.set_viewport_size({"width": 1440, "height": 900})
  page.goto(f"{base}/diff/{staged}/{fused}?big=1")
  assert page.evaluate("() => document.documentElement.classList.contains('big')")
  assert deltas_beside_sources(page) >= 1
  page.close()
  assert not errors, errors

def test_a_tours_a_against_b_step_times_the_pair_interleaved_as_the_diff_page_does(server, browser):
  """The fusion tour's A-against-B step over the staged and fused traces: it measures the pair interleaved on first view (the diff's
  own measurement, reused where it ran) and shows the ratio with its interval and its clock, whole at 1024x768 and at the presenter's
  big font, and asks the class which is faster once it is measured."""
  base, staged, fused = server
  page = browser.new_page(viewport={"width": 1024, "height": 768})
  errors: list[str] = []
  page.on("pageerror", lambda e: errors.append(str(e)))
  for big in ("", "&big=1"):
    page.goto(f"{base}/tours/fusion?a={staged}&b={fused}&step=compare{big}")
    verdict = page.wait_for_selector("#tour-timing [data-time-verdict]", timeout=180_000)
    assert re.search(r"B is \d+\.\d\dx (faster|slower) \(95% interval \d+\.\d\d-\d+\.\d\dx\)|takes the same time", verdict.inner_text())
    assert page.locator("#tour-timing .badge.clock").count() == 1
    width, client = page.evaluate("() => { const e = document.querySelector('#tour-timing'); return [e.scrollWidth, e.clientWidth]; }")
    assert width <= client, (big, width, client)
  page.reload()  # measured now: the tour quotes the ratio in its headline and asks the class which side is faster
  ask = json.loads(page.get_attribute("#tour", "data-ask"))
  assert ask["id"] == "faster" and ask["choices"] == ["A", "B", "the same, within noise"] and ask["answer"] in ask["choices"]
  assert "interleaved" in page.inner_text("#tour-headline").lower()
  assert not errors, errors
  page.close()
