"""A new user's first hour in a real browser (Debian's chromium), on a fresh server, at 1024x768 (the narrow screen where pages
clipped): the tasks the README's "Your first hour" lists, each by the first thing a user touches, without a detour. Trace and
inspect from the home form; diff two variants from the home page's link; a tour that reuses the trace the user already has;
schedule a kernel by hand on first open; the roofline and the export. Every page: no script error and nothing cut off at the right.
(Capturing a program runs in the user's Python: tests/test_capture.py.) Screenshots: test-artifacts/first_hour_*.png."""
from __future__ import annotations
import re
import httpx
import pytest
from conftest import ARTIFACTS, needs_chromium, uops_beside_the_line, wait_graphs, watched_page

pytestmark = [pytest.mark.browser, needs_chromium]
TRACE_MS = 300_000

@pytest.fixture(scope="module")
def narrow(browser, errors):
  pg = watched_page(browser, errors, 1024, 768)
  yield pg
  pg.close()

def fits(pg, name: str) -> None:
  """Nothing on the page reaches past the window's right edge (a wide table scrolls inside its own box), and it is shot."""
  pg.screenshot(path=str(ARTIFACTS / f"first_hour_{name}.png"))
  over = pg.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
  assert over <= 0, f"{name}: the page is {over}px wider than the window"

@pytest.fixture(scope="module")
def traced_from_home(live_server, narrow, errors) -> str:
  """Task 1's start: the home form, preset small, Winograd, Trace; the progress page, then the overview."""
  narrow.goto(live_server + "/")
  narrow.select_option("#preset", "small")
  narrow.click("[data-seg=algo] label:has(input[value=winograd])")
  narrow.click("#submit")
  narrow.wait_for_url(re.compile(r".*/t/[0-9a-f]{16}$"))
  narrow.wait_for_selector("#kernel-table", timeout=TRACE_MS)  # the progress page reloads into the overview
  return re.search(r"/t/([0-9a-f]{16})", narrow.url)[1]

def test_trace_and_inspect(live_server, narrow, traced_from_home, errors):
  fits(narrow, "overview")
  assert "0 targets + host" not in narrow.inner_text(".ribbon")  # CUDA rendered with the trace (render_beside)
  narrow.click("#kernel-table tbody tr:first-child a[href*='/k/0']")
  narrow.wait_for_url(re.compile(rf".*/t/{traced_from_home}/k/0.*"))
  wait_graphs(narrow)
  fits(narrow, "kernel")
  narrow.goto(f"{live_server}/t/{traced_from_home}/k/0?code=metal")  # render_ahead's next target: rendered then shown, or read if ahead
  narrow.wait_for_selector(".tab-panel[data-panel=metal]", state="visible", timeout=TRACE_MS)
  narrow.goto(f"{live_server}/t/{traced_from_home}/k/0?code=cuda")  # the ribbon's link: the source tab stored with the trace, at once
  assert narrow.locator("[data-pending-target]").count() == 0
  narrow.wait_for_selector(".tab-panel[data-panel=cuda]", state="visible", timeout=TRACE_MS)
  narrow.click("#target-switcher a[data-target=cuda]")  # the kernel on CUDA: its source beside its linear UOps, line by line
  narrow.wait_for_selector("[data-panel=cuda] .line-mapped", timeout=TRACE_MS)
  box = narrow.locator("[data-panel=cuda] .line-mapped")
  box.locator(".lm-line").nth(box.locator(".lm-line").count() // 2).click()  # a line mid-kernel
  assert box.locator(".uop-row.lm-hot").count() >= 1
  uops_beside_the_line(narrow, box)
  fits(narrow, "source")
  narrow.goto(f"{live_server}/t/{traced_from_home}")  # the ribbon counts what was rendered since
  assert "2 targets + host" in narrow.inner_text(".ribbon")
  assert not errors, errors

def test_diff_two_variants_from_the_home_page(live_server, narrow, traced_from_home, errors):
  narrow.goto(live_server + "/")
  narrow.click("#home-diff")
  narrow.wait_for_url(re.compile(r".*/diff$"))
  fits(narrow, "diff_pick")
  narrow.select_option("#pair-preset", "small")
  narrow.select_option("#pair-va", index=0)
  options = narrow.locator("#pair-vb option").all_inner_texts()
  narrow.select_option("#pair-vb", index=next(i for i, o in enumerate(options) if "fused" in o))
  narrow.click("#pair-submit")
  narrow.wait_for_url(re.compile(r".*/diff/[0-9a-f]{16}/[0-9a-f]{16}.*"), timeout=TRACE_MS)
  narrow.wait_for_selector("#diff-head", timeout=TRACE_MS)
  fits(narrow, "diff")
  assert not errors, errors

def test_a_tour_reuses_the_trace_the_user_has(live_server, narrow, traced_from_home, errors):
  """The built-in Direct vs Winograd tour: its Winograd side is the trace task 1 made (same variant, host target), not a new run."""
  tours = {t["kind"]: t for t in httpx.get(f"{live_server}/api/tours", timeout=60).json()}
  assert tours["winograd"]["b"] == traced_from_home
  narrow.goto(live_server + "/")
  narrow.click("[data-tour-start=winograd]")
  narrow.wait_for_url(re.compile(rf".*/tours/winograd\?a=[0-9a-f]{{16}}&b={traced_from_home}$"))
  narrow.wait_for_selector("#tour", timeout=TRACE_MS)
  wait_graphs(narrow)
  fits(narrow, "tour")
  narrow.keyboard.press("ArrowRight")
  narrow.wait_for_url(re.compile(r".*step=a-rangeify.*"))
  assert not errors, errors

def test_schedule_it_yourself_on_first_open(live_server, narrow, traced_from_home, errors):
  for n in range(len(httpx.get(f"{live_server}/api/traces/{traced_from_home}", timeout=60).json()["kernels"])):
    narrow.goto(f"{live_server}/t/{traced_from_home}/k/{n}")
    narrow.click("#opts-panel summary")
    narrow.wait_for_selector("#opts-result", timeout=TRACE_MS)
    status = narrow.locator("#opts-status")
    assert status.inner_text().startswith("applied") and "err" not in (status.get_attribute("class") or ""), (n, status.inner_text())
    assert narrow.locator("#opts-result [data-opts-axes-table=before] tbody tr").count() >= 1
  fits(narrow, "opts")
  assert not errors, errors

def test_roofline_and_export(live_server, narrow, traced_from_home, errors):
  narrow.goto(f"{live_server}/t/{traced_from_home}")
  narrow.click(".ribbon a[data-stage=roofline]")
  narrow.wait_for_url(re.compile(r".*/roofline.*"))
  fits(narrow, "roofline")
  exported = httpx.get(f"{live_server}/t/{traced_from_home}/export.html", timeout=120)
  assert exported.status_code == 200
  holds = re.search(r'<p class="small" id="export-holds".*?</p>', exported.text, re.S)
  assert holds and 'data-target="cuda"' in holds[0]  # the target rendered on a kernel page (task 1) is in the file, and it says so
  narrow.set_content(exported.text)
  fits(narrow, "export")
  assert not errors, errors
