"""The web app in a real browser (Debian's chromium through playwright) against a live uvicorn server with a fresh database:
submit `small` from the home form, watch its progress, then the trace, the bufferize view, graphs and source tabs.
Screenshots land in test-artifacts/ (gitignored)."""
from __future__ import annotations
import re
import pytest
from conftest import ARTIFACTS, needs_chromium, wait_graphs

pytestmark = [pytest.mark.browser, needs_chromium]

def shot(pg, name: str) -> None: pg.screenshot(path=str(ARTIFACTS / f"{name}.png"))

@pytest.fixture(scope="module")
def submitted(live_server, page) -> dict:
  """Submit the `small` preset with Winograd from the home form; record what the progress page showed."""
  page.goto(live_server + "/")
  assert page.locator("#preset").input_value() == "small"
  page.click("label:has(input[name=algo][value=winograd])")
  assert page.is_disabled("input[name=tile][value='F(2,3)']")  # the builtin Winograd has one tile: the form says so
  assert not page.is_checked("input[name=targets][value=cuda]")  # by default the host's own target only; the kernel tabs below ask for two
  for t in ("cuda", "metal"): page.check(f"input[name=targets][value={t}]")
  shot(page, "browser_home")
  page.click("#submit")
  page.wait_for_url(re.compile(r".*/t/[0-9a-f]{16}$"))
  trace_id = page.url.rsplit("/", 1)[1]
  progress = page.locator("#progress").count() > 0
  seen: set[str] = set()
  if progress:
    page.wait_for_selector("#stages li.running, #stages li.done", timeout=60_000)
    seen = set(page.eval_on_selector_all("#stages li", "els => els.map(e => e.className)"))
    shot(page, "browser_progress")
  page.wait_for_selector("#kernel-table", timeout=300_000)  # the page reloads itself when the trace is done
  shot(page, "browser_trace")
  return {"base": live_server, "id": trace_id, "progress": progress, "seen": seen}

@pytest.mark.check  # make check's one trace end to end, in a real browser
def test_submit_watch_progress_then_the_trace(submitted, page):
  assert submitted["progress"] and submitted["seen"] & {"running", "done"}
  rows = page.locator("#kernel-table tbody tr")
  assert rows.count() >= 3
  assert "winograd" in page.locator(".trace-title h1").inner_text()
  assert page.locator(".ribbon a").count() == 8 and page.locator(".ribbon .dot.error").count() == 0  # the pipeline, then the timeline
  assert page.locator("#kernel-table .bar span").count() >= 3  # time bars

def test_bufferize_view(submitted, page):
  page.click(".ribbon a[data-stage=bufferize]")
  page.wait_for_url(f"**/t/{submitted['id']}/bufferize")
  wait_graphs(page)
  n_buffers = page.locator("#buffer-table tbody tr").count()
  n_kernels = page.locator("#kernel-graph svg g.node.call").count()
  assert n_buffers >= 5 and n_kernels >= 3
  assert page.locator("#kernel-graph svg g.node.buffer").count() == n_buffers
  realized = page.locator('#stage-table tr[data-fate="realized"]').count()
  counts = page.locator("#stage-table tbody tr").evaluate_all("rows => rows.map(r => +r.dataset.count)")  # identical STAGEs share a row
  assert realized >= 1 and sum(counts) == int(page.inner_text("#stages-created")) + realized and len(counts) < sum(counts)
  # no figure on a card is cut (they wrap)
  assert page.evaluate("() => [...document.querySelectorAll('.stat .v')].every(v => v.scrollWidth <= v.clientWidth + 1)")
  assert page.locator("#stage-table .badge.kept").count() == int(page.inner_text("#stages-kept")) >= 1
  shot(page, "browser_bufferize")
  page.click("#kernel-graph svg g.node.call >> nth=0")  # kernel nodes link to their pages
  page.wait_for_url(re.compile(r".*/k/\d+$"))

def test_kernel_graph_and_source_tabs(submitted, page):
  page.goto(f"{submitted['base']}/t/{submitted['id']}/k/1")
  wait_graphs(page)
  assert page.locator("#ast-graph svg g.node").count() > 20
  legend = page.inner_text("#ast-graph .viewer-legend")
  assert "STORE" in legend and "RANGE" in legend and "INDEX" in legend
  page.click("[data-tab=metal]")
  assert "code=metal" in page.url
  metal = page.locator("[data-panel=metal]")
  assert metal.is_visible() and "kernel void" in metal.inner_text() and not page.locator("[data-panel=cuda]").is_visible()
  shot(page, "browser_kernel_metal")
  page.click("[data-tab=cuda]")
  assert "code=cuda" in page.url and "__global__" in page.locator("[data-panel=cuda]").inner_text()
  shot(page, "browser_kernel_cuda")
  page.goto(f"{submitted['base']}/t/{submitted['id']}/k/1?code=metal")  # the URL keeps the tab
  assert page.locator("[data-panel=metal]").is_visible()

def test_codegen_pass_stepper(submitted, page):
  page.goto(f"{submitted['base']}/t/{submitted['id']}/k/1?graph=passes")
  wait_graphs(page)
  assert page.locator("#passes a.active").count() == 1
  page.click("[data-step=prev-match]")  # from "after" back to the last steppable match
  page.wait_for_url(re.compile(r".*at=m\d+"))
  wait_graphs(page)
  assert page.locator("#pass-graph svg g.node.changed").count() >= 1
  assert "rule" in page.inner_text("#pass-graph .viewer-rule")
  shot(page, "browser_codegen_step")
  page.keyboard.press("j")  # next pass with matches
  page.wait_for_function("() => new URL(location.href).searchParams.get('at') === 'after'")
  wait_graphs(page)
  at_pass = page.evaluate("() => +new URL(location.href).searchParams.get('pass')")
  page.keyboard.press("l")  # from "after", next match: the first match of the next pass that matched anything
  page.wait_for_function(f"() => +new URL(location.href).searchParams.get('pass') > {at_pass}")
  assert page.evaluate("() => new URL(location.href).searchParams.get('at')") == "m1"
  wait_graphs(page)

def test_rangeify_and_tensor_graph(submitted, page):
  page.goto(f"{submitted['base']}/t/{submitted['id']}/rangeify")
  wait_graphs(page)
  assert "debuf" in page.inner_text("#passes a.active")
  assert "changed" in page.inner_text("#pass-graph .viewer-stats")
  shot(page, "browser_rangeify")
  page.goto(f"{submitted['base']}/t/{submitted['id']}/graph/tensor")
  wait_graphs(page)
  assert page.locator("#tensor-graph svg g.node").count() > 50
  shot(page, "browser_tensor")

def test_the_trace_page_shows_kernels_before_its_last_stage_ends(submitted, page):
  """The page comes before the work: while the trace still times its kernels (its last stage), its page already lists every kernel
  that went through codegen, with its figures, and the kernel graph; the whole trace takes their place once it is stored."""
  import httpx
  body = {"preset": "medium", "variant": {"algo": "winograd", "repeats": 400, "warmup": 1}}  # seconds of timing after codegen
  trace_id = httpx.post(f"{submitted['base']}/api/traces", json=body, timeout=30).json()["id"]
  page.goto(f"{submitted['base']}/t/{trace_id}")
  page.wait_for_selector("#live-kernel-table", timeout=120_000)
  seen = page.evaluate_handle("""() => new Promise(done => { const look = () => {
      const rows = [...document.querySelectorAll('#live-kernel-table tbody tr')];
      if (rows.length && rows.every(r => r.dataset.kernel !== undefined))
        return done({rows: rows.length, timing: document.querySelector('#stages li[data-stage=timing]')?.className,
                     stored: !!document.querySelector('#kernel-table'), flops: rows.map(r => r.children[7].textContent.trim())});
      setTimeout(look, 50); }; look(); })""").json_value()
  shot(page, "browser_live_kernels")
  assert seen["rows"] >= 4 and not seen["stored"] and seen["timing"] in ("pending", "running"), seen
  assert all(f and f != "—" for f in seen["flops"]) and page.locator("#live-graph tbody tr").count() >= seen["rows"]
  page.wait_for_selector("#kernel-table", timeout=300_000)  # then the stored trace, in place
  assert page.locator("#kernel-table tbody tr").count() == seen["rows"]

def test_api_docs_render_offline(submitted, page):
  page.goto(f"{submitted['base']}/docs")
  page.wait_for_selector(".swagger-ui .opblock", timeout=30_000)
  assert page.locator(".opblock").count() >= 10
  shot(page, "browser_docs")

def test_no_errors_in_the_browser_console(submitted, errors):
  assert not errors, errors
