"""The kernel page's target switcher in a real browser (Debian's chromium): one click turns every figure to the target, and a target
the trace did not ask for is computed while the page shows its progress, then shown."""
from __future__ import annotations
import re
import shutil
import time
import httpx
import pytest
from conftest import ARTIFACTS, duplicate_ids, needs_chromium, trace_on, wait_graphs

pytestmark = [pytest.mark.browser, needs_chromium, pytest.mark.traces({"preset": "small", "variant": {"targets": ["cuda"], "time": False}})]

def test_the_switcher_turns_the_page_to_the_target(live_server, traced, page, errors):
  page.goto(f"{live_server}/t/{traced}/k/0")
  host_dims = page.locator("#dims").inner_text()
  page.click("#target-switcher a[data-target=cuda]")
  page.wait_for_url(re.compile(r".*target=cuda.*"))
  assert page.locator("#target-facts").get_attribute("data-target") == "cuda"
  assert page.locator("#dims").inner_text() == "2×4×1 × 16×8×1" != host_dims  # the case: CUDA's 16x8 threads, not the host's
  assert duplicate_ids(page) == []  # each source tab's lines have ids of their own (cuda-L-3): S-12 was there twice
  assert "compile:" in page.locator("#compile-facts").inner_text()
  assert page.evaluate("() => [...document.querySelectorAll('.stat .v')].every(v => v.scrollWidth <= v.clientWidth + 1)")  # nothing cut
  page.evaluate("window.stillThisPage = true")
  # compile facts are computed on this first view: the placeholder becomes the facts, and the Compiled tab its disassembly, in place
  page.wait_for_selector("#compile-facts:not([data-facts-poll])", timeout=120_000)
  assert page.evaluate("window.stillThisPage === true")  # filled in, not reloaded
  if shutil.which("nvcc"):
    assert re.search(r"\d+ registers/thread", page.locator("#compile-facts").inner_text()), page.locator("#compile-facts").inner_text()
    page.click("#code-panel [data-tab=compiled]")
    assert "SASS" in page.locator("#compiled-pane").inner_text() or "PTX" in page.locator("#compiled-pane").inner_text()
  page.screenshot(path=str(ARTIFACTS / "targets_cuda.png"))
  source = page.locator(".ribbon a[data-stage=source] .fact")
  assert source.inner_text() == "1 target + host"
  page.click("#target-switcher a[data-target=opencl]")  # not traced: computed now, the page follows, then puts it in place
  page.wait_for_selector("#target-facts[data-target=opencl]", timeout=300_000)
  assert "opencl kernel" in page.locator("#target-facts").inner_text().lower() and not page.locator("#pending-target").count()
  assert source.inner_text() == "2 targets + host"  # the ribbon's Source stage counts it, with no reload
  assert not errors, errors

def test_a_nodes_pane_names_the_pass_and_rule_that_made_it(live_server, page, errors):
  """Issue 29's case: a RANGE that "split ranges" made says so and names its rule (read from the rewrite log), not a later pass."""
  trace_id = trace_on(live_server, {"preset": "wino8", "variant": {"algo": "winograd", "time": False}})
  kernels = httpx.get(f"{live_server}/api/traces/{trace_id}/kernels", timeout=60).json()
  n = next(k["index"] for k in kernels if k["role"] == "out")
  kernel = httpx.get(f"{live_server}/api/traces/{trace_id}/kernels/{n}", timeout=60).json()
  url = f"{live_server}/api/traces/{trace_id}/kernels/{n}/targets/{kernel['host_target']}/analysis"  # an enrichment: computed when asked
  while (r := httpx.get(url, timeout=60)).status_code == 202: time.sleep(0.3)
  passes, rule = kernel["passes"], r.json()["loop_splits"][0]["rule"]
  split = next(i for i, p in enumerate(passes) if p["name"] == "split ranges")
  page.goto(f"{live_server}/t/{trace_id}/k/{n}?graph=passes&pass={split}&at=after")
  wait_graphs(page)
  said = []
  ranges = page.locator("#pass-graph svg g.node.op-RANGE")
  for i in range(min(ranges.count(), 8)):
    ranges.nth(i).dispatch_event("click")
    page.wait_for_function("() => { const o = document.querySelector('#pass-graph [data-origin]'); return o && !o.textContent.includes('…'); }",
                           timeout=60_000)
    said.append(page.locator("#pass-graph [data-origin]").inner_text())
    if "split ranges" in said[-1]: break
  assert any(f"pass {split + 1} split ranges, match" in s and f"rule {rule} " in s for s in said), (said, rule)
  assert not errors, errors

def test_a_tab_past_the_share_waits_its_turn_and_fills_in(browser, tmp_path):
  """One person, a share of one lazy part at a time (max_page_work_per_client=1): the second target tab opened while the first renders
  says it waits for a place in the line, then (its script asking again as the 429's Retry-After says) renders and fills in, no
  reload, no error page; the first fills in too."""
  from contextlib import closing
  from conftest import running_server, watched_page
  errors: list[str] = []
  with running_server(tmp_path / "w.sqlite3", tmp_path, max_page_work_per_client=1) as base:
    trace_id = trace_on(base, {"preset": "small", "variant": {"targets": [], "time": False}})
    with closing(watched_page(browser, errors)) as first, closing(watched_page(browser, errors)) as second:
      first.goto(f"{base}/t/{trace_id}/k/0?target=metal")
      second.goto(f"{base}/t/{trace_id}/k/0?target=opencl")
      assert "waits for a place in the line" in second.locator("#pending-target").inner_text()
      second.evaluate("window.stillThisPage = true")
      for pg, target in ((first, "metal"), (second, "opencl")):
        pg.wait_for_selector(f"#target-facts[data-target={target}]", timeout=300_000)
        assert not pg.locator("#pending-target").count() and f"{target} kernel" in pg.locator("#target-facts").inner_text().lower()
      assert second.evaluate("window.stillThisPage === true")  # filled in, not reloaded
  # a refused poll is logged by the browser as a failed load; nothing else may be
  assert not [e for e in errors if "status of 429" not in e], errors
