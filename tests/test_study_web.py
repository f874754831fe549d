"""Studies on the web. A real study (the `small` preset, symbolic vs materialized constants) started from the /studies form in Debian's
chromium against a live server: its progress page, the busy answer to a second study, the finished page (the document's table with
intervals and verdicts, a distribution plot per case, links to each variant's stored trace), the JSON contract and the offline export.
Validation, the store's durability and the plot's drawing are checked without running a study."""
from __future__ import annotations
import re
import socket
import time
import httpx
import pytest
from conftest import ARTIFACTS, needs_chromium
from support import app_over
from explorer.store import Store

TINY = {"batch": 1, "cin": 2, "cout": 2, "height": 8, "width": 8, "kernel": 3}
STUDY_ID = re.compile(r"/studies/([0-9a-f]{12})$")

# ***** a real study through the browser *****

@pytest.fixture(scope="module")
def started(live_server, page) -> str:
  """The form: constants on `small`, 5 repeats exactly (no interval target), a short budget; the page it lands on."""
  page.goto(f"{live_server}/studies")
  page.select_option("select[name=kind]", "constants")
  page.check("input[name=presets][value=small]")
  page.fill("input[name=repeats]", "5")
  page.fill("input[name=ci_width]", "")
  page.fill("input[name=budget_s]", "30")
  page.click("text=Start the study")
  page.wait_for_url(STUDY_ID, timeout=30_000)
  return STUDY_ID.search(page.url).group(1)

@needs_chromium
def test_the_form_starts_a_study_whose_page_shows_its_progress(started, live_server, page):
  """Two traces take far longer than the page takes to load: the progress panel is up, and a second study is refused meanwhile."""
  assert page.locator("#study-progress").is_visible()
  assert "of 3" in page.locator("#study-step").inner_text()  # trace symbolic, trace materialized, timing
  r = httpx.post(f"{live_server}/api/studies", json={"kind": "fusion", "specs": [TINY]}, timeout=30)
  assert r.status_code == 409 and started in r.json()["detail"]
  assert httpx.get(f"{live_server}/studies", timeout=30).text.count(f"/studies/{started}") >= 2  # listed, and named as the running one

@pytest.fixture(scope="module")
def finished(started, page, errors) -> str:
  page.wait_for_selector(".study-table", timeout=300_000)  # the page reloads itself when the study ends
  page.screenshot(path=str(ARTIFACTS / "study.png"), full_page=True)
  assert not errors, errors
  return started

@needs_chromium
def test_the_finished_page_has_the_documents_table_a_plot_and_the_traces(finished, live_server, page):
  rows = page.locator(".study-table tbody tr")
  figures = [rows.nth(i).locator("td").nth(3).inner_text() for i in range(rows.count())]
  assert figures[:3] == ["run time, the kernels each alone, summed (the headline): median of B/A per repeat",
                         "run time, the schedule replayed back to back (its span): median of B/A per repeat", "standard deviation, B over A"]
  assert {"compile time (the device's compiler on every kernel's source, uncached), median of B/A per repeat",
          "codegen + compile (one trace each), B over A", "tensor graph UOps, A -> B", "linear UOps (all kernels), A -> B"} <= set(figures)
  graph_row = rows.nth(figures.index("tensor graph UOps, A -> B"))
  assert "dozens" in graph_row.inner_text()  # seed 000's words beside the counts
  assert page.locator(".study-table .badge").first.inner_text() in ("reproduced", "not reproduced", "opposite", "no claim")
  plot = page.locator("svg.study-plot")
  assert plot.count() == 1
  assert plot.locator("circle.sample").count() == 5 * 2 + 5  # each variant's 5 repeats, and the 5 paired ratios
  assert plot.locator("rect.ci").count() == 1 and plot.locator("line.one").count() == 1
  links = page.locator(".study-case tbody a[href^='/t/']")
  assert links.count() == 2
  trace = httpx.get(f"{live_server}/api/traces/{links.first.get_attribute('href')[3:]}", timeout=60)
  assert trace.status_code == 200 and trace.json()["variant"]["consts"] == "symbolic"
  diff = page.locator(".study-case a.study-diff")  # the second variant against the first, on CUDA: SASS side by side
  ids = [links.nth(i).get_attribute("href")[3:] for i in range(2)]
  assert diff.count() == 1 and diff.get_attribute("href") == f"/diff/{ids[0]}/{ids[1]}?target=cuda#sass-diff"

def test_the_study_json_keeps_the_contract(finished, live_server):
  s = httpx.get(f"{live_server}/api/studies/{finished}", timeout=60).json()
  assert s["status"] == "done" and s["kind"] == "constants" and s["request"]["presets"] == ["small"]
  case = s["result"]["cases"][0]
  assert case["preset"] == "small" and case["identical_kernels"] is False
  for c in case["comparisons"]: assert {"figure", "ratio", "ci_low", "ci_high", "p_value", "verdict", "claim"} <= set(c)
  for r in case["rows"]:  # what ran where, per variant
    assert r["device"] == "CPU" and r["compiler"] and r["fallback"] is None and len(r["samples"]) == 5
  assert case["sampling"]["ended"] == "repeats"
  assert [t["case"] for t in s["table"]] == [0] * len(s["table"])

@needs_chromium
def test_the_export_is_one_offline_file(finished, live_server, browser, tmp_path):
  r = httpx.get(f"{live_server}/studies/{finished}/export.html", timeout=60)
  assert r.status_code == 200 and "attachment" in r.headers["content-disposition"]
  html = r.text
  assert "<script" not in html and not re.search(r'(?:src|href)="(?!#)', html)  # nothing outside the file
  assert html.count('<svg class="study-plot"') == 1 and "exported" in html
  path = tmp_path / "study.html"
  path.write_text(html)
  pg = browser.new_page()
  try:
    pg.route("**/*", lambda route: route.abort() if not route.request.url.startswith("file:") else route.continue_())  # offline
    pg.goto(path.as_uri())
    assert pg.locator(".study-table tbody tr").count() >= 5 and pg.locator("svg.study-plot circle.sample").count() == 15
  finally: pg.close()

# ***** without running a study *****

def test_bad_requests_get_one_line_answers(web_client):
  r = web_client.post("/api/studies", json={"kind": "constants", "presets": ["nope"]})
  assert r.status_code == 422 and "presets" in r.json()["detail"]
  r = web_client.post("/api/studies", json={"kind": "constants", "specs": [{**TINY, "batch": 1024, "cin": 4096, "height": 4096, "width": 4096}]})
  assert r.status_code == 422 and "memory" in r.json()["detail"]
  assert web_client.post("/api/studies", json={"kind": "constants", "repeats": 2}).status_code == 422
  r = web_client.post("/api/studies", json={"kind": "constants", "presets": ["small"], "tile": "F(2,5)"})  # a 5x5 tile, a 3x3 case
  assert r.status_code == 422 and "5x5 kernels" in r.json()["detail"]
  assert web_client.post("/api/studies", json={"kind": "constants", "device": "DISK"}).status_code == 422
  assert web_client.get("/api/studies/nope").status_code == 404
  page = web_client.get("/studies/nope", headers={"accept": "text/html"})
  assert page.status_code == 404 and "no study nope" in page.text

def test_a_study_outlives_its_server_as_interrupted(tmp_path):
  """A study whose server died is marked interrupted by the next server over the same store; its permalink says so, and it is not
  exported (only a finished study is)."""
  from fastapi.testclient import TestClient
  db = tmp_path / "s.sqlite3"
  Store(db).put_task("study", "0123456789ab", "constants: small", {"kind": "constants"}, f"{socket.gethostname()}:999999999:1", "running")
  with TestClient(app_over(str(db))) as client:
    s = client.get("/api/studies/0123456789ab").json()
    assert s["status"] == "interrupted" and "start it again" in s["error"]
    assert client.get("/api/studies").json()[0]["status"] == "interrupted"
    assert client.get("/studies/0123456789ab/export.html").status_code == 409
    assert "start it again" in client.get("/studies/0123456789ab", headers={"accept": "text/html"}).text

def synthetic_case(claim: float | None) -> dict:
  a = [1.0, 1.1, 0.9, 1.05, 0.95, 1.0]
  b = [x * 1.2 for x in a]
  return {"preset": "p", "case": "", "spec": {**TINY, "stride": 1, "padding": None, "groups": 1, "dtype": "float32"}, "tile": "F(4,3)",
          "warmup": 1, "repeats": 6, "sampling": {"repeats": 6, "ended": "repeats"}, "claim": {"time": claim, "says": {"time": "B 20% slower"}},
          "rows": [{"variant": "A", "samples": a, "codegen_s": 1.0, "compile_s": 0.0, "graph_uops": 300, "linear_uops": 100,
                    "time_median_s": 0.0023, "time_std_s": 0.0001},
                   {"variant": "B", "samples": b, "codegen_s": 2.0, "compile_s": 0.0, "graph_uops": 30, "linear_uops": 90,
                    "time_median_s": 0.00276, "time_std_s": 0.00012}],
          "comparisons": [{"a": "A", "b": "B", "figure": "time", "ratio": 1.2, "ci_low": 1.19, "ci_high": 1.21, "p_value": 0.03, "claim": claim,
                           "verdict": "reproduced"},
                          {"a": "A", "b": "B", "figure": "spread", "ratio": 1.2, "ci_low": 0.8, "ci_high": 1.6, "p_value": None, "claim": None,
                           "verdict": "no claim"}]}

def test_the_plot_draws_boxes_samples_the_interval_and_the_claim():
  from explorer.present.study import distribution_svg
  svg = distribution_svg(synthetic_case(1.25))
  assert svg.count('class="box') == 3 and svg.count("<circle") == 6 * 3  # A, B, and B/A per repeat
  assert svg.count('class="ci"') == 1 and svg.count('class="claim"') == 1 and "the document: 1.2500" in svg
  assert 'class="claim"' not in distribution_svg(synthetic_case(None))

def test_the_table_puts_the_documents_words_beside_each_figure():
  from explorer.present.study import document_rows
  rows = document_rows({"cases": [synthetic_case(1.25)]})
  by_figure = {r["figure"]: r for r in rows}
  time_row = by_figure["run time, the kernels each alone, summed (the headline): median of B/A per repeat"]
  shown = (time_row["document"], time_row["a_value"], time_row["b_value"], time_row["measured"], time_row["interval"], time_row["verdict"])
  assert shown == ("B 20% slower", "median 2.3 ms", "median 2.76 ms", "1.2x", "1.19–1.21", "reproduced")  # as 003's table: A, B, B/A
  assert (by_figure["standard deviation, B over A"]["a_value"], by_figure["standard deviation, B over A"]["b_value"]) == ("std 0.1 ms", "std 0.12 ms")
  build = by_figure["codegen + compile (one trace each), B over A"]
  assert (build["a_value"], build["b_value"], build["measured"]) == ("1000 ms", "2000 ms", "2x")
  from explorer.text import fmt_ms
  assert [fmt_ms(x) for x in (0.0001217, 0.3684, 39.53, None)] == ["0.1217 ms", "368.4 ms", "39530 ms", "-"]  # no 3.953e+04 ms
  graph = by_figure["tensor graph UOps, A -> B"]
  assert (graph["a_value"], graph["b_value"], graph["measured"]) == ("300", "30", "0.1x")
  from explorer.present.study import document_markdown
  assert ("| p | 1x2->2 8x8 k3 | A | B | run time, the kernels each alone, summed (the headline): median of B/A per repeat | B 20% slower | "
          "median 2.3 ms | median 2.76 ms | 1.2x |") in document_markdown({"study": "constants", "cases": [synthetic_case(1.25)]})

def test_the_table_gives_exact_counts_a_verdict_against_the_threshold():
  from explorer.present.study import document_markdown, document_rows
  case = synthetic_case(None) | {"claim": {"uops": 2.0, "says": {"uops": "A: dozens; B: hundreds"}},
                                 "counts": [{"a": "A", "b": "B", "figure": "uops", "kernel": "xhat", "a_count": 40, "b_count": 120, "ratio": 3.0,
                                             "claim": 2.0, "verdict": "reproduced"}]}
  (row,) = [r for r in document_rows({"cases": [case]}) if "UOps" in r["figure"]]
  shown = (row["figure"], row["document"], row["a_value"], row["b_value"], row["measured"], row["interval"], row["verdict"], row["size"])
  assert shown == ("linear UOps, xhat kernel, A -> B", "A: dozens; B: hundreds", "40", "120", "3x", "exact count", "reproduced",
                   "the claim: B/A at least 2")
  assert "| exact count | - | reproduced (the claim: B/A at least 2) |" in document_markdown({"study": "constants", "cases": [case]})

def test_finished_studies_keep_their_results_in_the_store(tmp_path):
  store = Store(tmp_path / "s.sqlite3")
  store.put_task("study", "a", "fusion: wino8", {"kind": "fusion"}, "h:1:1", "running")
  time.sleep(0.01)
  store.put_task("study", "b", "constants: small", {"kind": "constants"}, "h:1:1", "running")
  store.task_finished("study", "a", "done", result={"study": "fusion", "cases": []})
  assert [s["id"] for s in store.recent_tasks("study")] == ["b", "a"]
  assert store.get_task("study", "a", with_result=True)["result"] == {"study": "fusion", "cases": []}
  assert store.get_task("study", "b")["status"] == "running" and store.get_task("study", "c") is None and store.get_task("trace", "a") is None

def test_the_forms_interval_width_is_the_clis_default(web_client):
  from explorer.spec import STUDY_CI_WIDTH
  page = web_client.get("/studies", headers={"accept": "text/html"})
  assert page.status_code == 200 and f'name="ci_width" value="{STUDY_CI_WIDTH}"' in page.text

# ***** studies a server had on the job queue, followed again after its restart *****

def test_queued_studies_resumed_after_a_restart_each_follow_their_own_row(tmp_path, monkeypatch):
  """Two studies of different kinds and specs on the job queue when the server stopped: the restarted server follows each on the queue
  with its own row's kind and specs (a closure in the loop over the rows once read the last row's for every run). The queue's side is
  replaced here: what is checked is what the server asks it."""
  import asyncio
  import concurrent.futures
  import dataclasses
  from explorer.background import RUNNING, STUDY
  from explorer.spec import PRESETS
  from explorer.web.services import remote
  from explorer.web.services.lifecycle import QUEUE_OWNER
  from explorer.web.services.studies import StudyService
  store = Store(str(tmp_path / "s.sqlite3"))
  rows = {"a" * 12: {"kind": "constants", "presets": ["small"], "specs": []},
          "b" * 12: {"kind": "fusion", "presets": [], "specs": [dataclasses.asdict(PRESETS["medium"])]}}
  for study_id, request in rows.items(): store.put_task(STUDY, study_id, request["kind"], request, QUEUE_OWNER, status=RUNNING)
  asked: dict[str, tuple[str, list[str]]] = {}
  def resume_study(queue, study_id, progress, keep, kind=None, specs=None):
    asked[study_id] = (kind, [s.label() for s in specs])
    raise RuntimeError("the queue's side is not run here")
  monkeypatch.setattr(remote, "resume_study", resume_study)
  async def restart() -> int:
    resumed = StudyService(store, queue=object()).resume_queued()  # type: ignore[arg-type]
    for _ in range(200):
      if len(asked) == len(rows): break
      await asyncio.sleep(0.05)
    return resumed
  with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a loop of its own: the module's browser tests run one in this thread
    assert pool.submit(asyncio.run, restart()).result() == 2
  assert asked == {"a" * 12: ("constants", [PRESETS["small"].label()]), "b" * 12: ("fusion", [PRESETS["medium"].label()])}
