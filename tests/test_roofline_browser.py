"""The roofline page's probe button in a real browser: it starts the probe (a job: the POST answers at once), shows what the probe
measures while it polls the probe's status, then reloads into the roofline the measured peaks make possible. A live server of its
own, with an empty peaks cache (a CPU has no spec-sheet entry, so the page offers the probe)."""
from __future__ import annotations
import pytest
from conftest import ARTIFACTS, SMALL_WINO, needs_chromium, running_server, shared_trace_on

pytestmark = [pytest.mark.browser, needs_chromium]

@pytest.fixture(scope="module")
def probe_server(tmp_path_factory):
  with pytest.MonkeyPatch.context() as mp:
    mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))  # the server's probe cache: empty
    with running_server(tmp_path_factory.mktemp("probe") / "traces.sqlite3", tmp_path_factory.mktemp("probe-log")) as base: yield base

def test_the_probe_button_shows_progress_then_the_roofline(probe_server, page, errors):
  trace_id = shared_trace_on(probe_server, SMALL_WINO)
  page.goto(f"{probe_server}/t/{trace_id}/roofline")
  assert "no probe measured on this host yet" in page.inner_text("main")
  page.click("#probe")
  # "<what it measures>… (<n> s)" while the page polls
  page.wait_for_function("() => /… \\(\\d+ s\\)$/.test(document.getElementById('probe-status').textContent)", timeout=60_000)
  assert page.is_disabled("#probe")
  page.wait_for_selector(".roofline-plot svg", timeout=300_000)  # done: the page reloaded into the roofline
  page.screenshot(path=str(ARTIFACTS / "browser_roofline_probe.png"))
  assert "measured on" in page.inner_text("main") and not errors, errors
