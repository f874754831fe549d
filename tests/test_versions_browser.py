"""Two tinygrads side by side in a real browser: the same convolution traced on tinygrad 0.12.0 and on the server's own 0.14.0 through a
live server, then their diff page, which matches the kernels, draws each side's UOp graphs as its own tinygrad rebuilt them, and says
which codegen passes one version has and the other has not, and which rules fired where. Screenshot: test-artifacts/versions_diff.png."""
from __future__ import annotations
import time
import httpx
import pytest
from conftest import ARTIFACTS, GRAPH_TIMEOUT_MS, needs_chromium, running_server, watched_page
from test_versions import MADE

pytestmark = [pytest.mark.browser, needs_chromium, MADE]

def traced(base: str, variant: dict) -> str:
  tid = httpx.post(f"{base}/api/traces", json={"preset": "small", "variant": variant}, timeout=30).json()["id"]
  deadline = time.monotonic() + 600
  while (status := httpx.get(f"{base}/api/traces/{tid}/status", timeout=30).json()["status"]) in ("queued", "running"):
    assert time.monotonic() < deadline, f"trace {tid} still {status}"
    time.sleep(0.5)
  assert status == "done", status
  return tid

@pytest.fixture(scope="module")
def pair(tmp_path_factory):
  d = tmp_path_factory.mktemp("versions-live")
  with running_server(d / "s.sqlite3", d) as base:
    yield base, traced(base, {"targets": ["cuda"], "tinygrad": "0.12.0"}), traced(base, {"targets": ["cuda"]})

def test_a_diff_across_two_tinygrads_in_the_browser(pair, browser):
  base, older, newest = pair
  errors: list[str] = []
  page = watched_page(browser, errors, 1280, 900)
  page.goto(f"{base}/diff/{older}/{newest}")
  head = page.inner_text("#diff-head")
  assert "tinygrad 0.12.0 → 0.14.0" in head and "None" not in head, head
  changes = page.locator(".pass-changes").first
  assert changes.is_visible() and "pre_matcher" in changes.inner_text() and "cut store ranges" in changes.inner_text()
  box, source = changes.bounding_box(), page.locator(".source-diff").first.bounding_box()  # a row of its own, the source diff below
  assert box is not None and source is not None and box["width"] > 600 and box["y"] + box["height"] <= source["y"] + 1, (box, source)
  page.wait_for_function("() => !document.querySelector('.graph-pending')", timeout=GRAPH_TIMEOUT_MS)
  rules = page.locator("details.rule-changes").first
  assert int(rules.get_attribute("data-rule-changes") or 0) > 0
  rules.locator("summary").click()
  assert rules.locator(".rule-pass").first.is_visible() and ".py:" in rules.locator(".rule-pass").first.inner_text()
  assert page.locator(".graph-group svg").count() >= 1 or page.locator(".graph-identical").count() >= 1
  assert page.evaluate("() => document.documentElement.scrollWidth") <= 1280
  page.screenshot(path=str(ARTIFACTS / "versions_diff.png"), full_page=False)
  assert not errors, errors
