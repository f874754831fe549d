"""The kernel page's Schedule it yourself panel in a browser: opened, it applies the kernel's own opts (a kernel whose opts were refused
before issue #43's fix) and shows its axes; an Apply tinygrad refuses leaves the last result dimmed and named as the previous one."""
from __future__ import annotations
import pytest
from conftest import ARTIFACTS, needs_chromium, trace_on

pytestmark = [pytest.mark.browser, needs_chromium]

def test_the_panel_opens_on_the_kernels_own_opts_and_a_refused_apply_is_not_shown_as_applied(live_server, page, errors):
  trace_id = trace_on(live_server, {"preset": "small", "variant": {"algo": "winograd", "time": False}})
  page.goto(f"{live_server}/t/{trace_id}/k/3")  # the host's record: UPCAST:3:0 first, refused on the scheduled kernel's axes
  own = page.locator("#opts-panel").get_attribute("data-current")
  page.click("#opts-panel summary")
  page.wait_for_selector("#opts-result", timeout=180_000)
  assert page.locator("#opts-result").get_attribute("data-opts") == own and "UPCAST:3:0" in own
  status = page.locator("#opts-status")
  assert status.inner_text() == f"applied: {own.replace(',', ', ')}" and "err" not in status.get_attribute("class")
  before = page.locator("#opts-result [data-opts-axes-table=before] tbody tr")
  assert before.count() >= 4 and before.nth(3).locator("td").nth(2).inner_text() == "loop"
  assert int(before.nth(3).locator("td").nth(1).inner_text()) <= 16  # what UPCAST:3:0 needs: tinygrad upcasts at most 16
  assert page.locator("#opts-result [data-opts-axes-table=after] tbody tr").count() >= 1
  assert not errors, errors
  page.fill("#opts-add", "nonsense")  # no opt: said as it is added, never sent
  page.click("#opts-add-button")
  assert "is not an opt" in status.inner_text() and page.locator("#opts-chips [data-opt='NONSENSE']").count() == 0
  page.fill("#opts-add", "upcast 0 7")  # written with spaces: read as UPCAST:0:7
  page.click("#opts-add-button")
  assert page.locator("#opts-chips [data-opt='UPCAST:0:7']").count() == 1
  page.click("#opts-apply")
  page.wait_for_selector("#opts-status.err", timeout=180_000)
  assert "can't divide" in page.locator("#opts-status").inner_text()
  note = page.locator("#opts-out [data-opts-previous]")
  assert note.is_visible() and "Not applied" in note.inner_text() and own.replace(",", ", ") in note.inner_text()
  assert page.locator("#opts-result.opts-previous").count() == 1 and page.locator("#opts-result").get_attribute("data-opts") == own
  assert float(page.locator("#opts-result").evaluate("e => getComputedStyle(e).opacity")) < 1  # dimmed: not the asked-for schedule
  page.locator("#opts-panel").screenshot(path=str(ARTIFACTS / "opts_refused.png"))
  assert all("status of 422" in e for e in errors), errors  # the refusal's answer, which the browser logs
  errors.clear()
  page.click("#opts-chips [data-opt='UPCAST:0:7']")  # the refused opt removed: applied again, the result is current once more
  page.click("#opts-apply")
  page.wait_for_selector("#opts-result:not(.opts-previous)", timeout=180_000)
  assert page.locator("#opts-out [data-opts-previous]").count() == 0 and "err" not in page.locator("#opts-status").get_attribute("class")
  assert not errors, errors
