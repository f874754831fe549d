"""The web app through FastAPI's TestClient: a real `small` trace in a real SQLite file (session fixture), jobs, progress,
graphs, pages, invalid input, unknown ids, and the rule that the server process never imports tinygrad."""
from __future__ import annotations
import ast
import json
import pathlib
import subprocess
import sys
import textwrap
import threading
import time
import pytest
from conftest import REPO, SMALL_WINO, wait_done
from fastapi.testclient import TestClient
from support import app_over, fake_result, minimal_trace
from explorer.present import graphs
from explorer.spec import PRESETS
from explorer.stages import STAGE_TITLES, STAGES
from explorer.store import Store
from explorer.web.http.models import ValidationErrorBody

# ***** a fake runner: jobs without tinygrad, to see queueing, joining and live progress *****

class GatedRunner:
  """Reports each stage, then waits for release() before returning."""
  def __init__(self):
    self.calls, self.gate = 0, threading.Event()
  def __call__(self, spec, variant, progress, timeout_s):
    self.calls += 1
    for i, stage in enumerate(STAGES):
      progress(stage, "start", "")
      if i == 2: assert self.gate.wait(30), "never released"
      progress(stage, "done", "0.01s")
    return fake_result(minimal_trace(label=spec.label()))
  def release(self): self.gate.set()

@pytest.fixture
def fake(tmp_path):
  runner = GatedRunner()
  app = app_over(str(tmp_path / "fake.sqlite3"), max_workers=1, max_queue=1, max_body_bytes=4096, runner=runner)
  with TestClient(app) as client:
    try: yield client, runner, app
    finally: runner.release()

def test_stages_match_the_engine():
  """The stages the engine runs (rec.run("stage", ...) in explorer/tracing/pipeline/trace.py, in source order: the convolution's tensor graph,
  then the pipeline's), in order, are the ones the jobs report."""
  tree = ast.parse((REPO / "explorer" / "tracing" / "pipeline" / "trace.py").read_text())
  calls = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "run" and n.args
                  and isinstance(n.args[0], ast.Constant)), key=lambda n: n.lineno)
  runs = [n.args[0].value for n in calls]
  assert tuple(sorted(set(runs), key=runs.index)) == STAGES

def test_post_returns_at_once_and_identical_requests_share_one_job(fake):
  client, runner, app = fake
  t0 = time.monotonic()
  r = client.post("/api/traces", json={"preset": "small"})
  assert r.status_code == 202 and time.monotonic() - t0 < 2
  first = r.json()
  assert first["status"] in ("queued", "running") and first["url"] == f"/t/{first['id']}"
  again = client.post("/api/traces", json={"spec": PRESETS["small"].to_dict()})  # the same convolution, spelled out
  assert again.status_code == 202 and again.json()["id"] == first["id"]
  deadline = time.monotonic() + 10
  while (s := client.get(f"/api/traces/{first['id']}/status").json())["stages"][2]["status"] != "running":
    assert time.monotonic() < deadline
    time.sleep(0.05)
  assert [x["status"] for x in s["stages"][:3]] == ["done", "done", "running"]
  page = client.get(f"/t/{first['id']}")
  assert page.status_code == 200 and 'id="progress"' in page.text and "Kernel graph" in page.text
  assert client.get(f"/api/traces/{first['id']}").status_code == 409  # still running
  runner.release()
  assert wait_done(client, first["id"])["status"] == "done"
  assert runner.calls == 1 and app.state.services.jobs.runs == 1
  cached = client.post("/api/traces", json={"preset": "small"})
  assert cached.status_code == 200 and cached.json()["cached"] and runner.calls == 1

def test_live_progress_over_server_sent_events(fake):
  client, runner, _ = fake
  trace_id = client.post("/api/traces", json={"preset": "wino8"}).json()["id"]
  threading.Timer(0.5, runner.release).start()
  events = []
  with client.stream("GET", f"/api/traces/{trace_id}/events") as r:
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    for line in r.iter_lines():
      if line.startswith("event: "): events.append(line[7:])
      if line.startswith("data: ") and events[-1] == "stage": assert json.loads(line[6:])["stage"] in STAGE_TITLES  # the trace's and the store's
  assert events[0] == "snapshot" and events[-1] == "done" and "stage" in events

def test_queue_full_is_503_and_body_limit_413(fake):
  client, runner, _ = fake
  assert client.post("/api/traces", json={"preset": "small"}).status_code == 202   # runs (one worker)
  time.sleep(0.3)
  assert client.post("/api/traces", json={"preset": "wino8"}).status_code == 202   # queued
  full = client.post("/api/traces", json={"preset": "wino16"})
  assert full.status_code == 503 and "waiting" in full.json()["detail"] and full.headers["retry-after"]
  big = client.post("/api/traces", content=b"{" + b" " * 5000 + b"}", headers={"content-type": "application/json"})
  assert big.status_code == 413

def test_a_trace_queued_too_long_is_dropped_with_a_message(tmp_path):
  runner = GatedRunner()
  app = app_over(str(tmp_path / "q.sqlite3"), max_workers=1, queue_wait_s=0.5, runner=runner)
  with TestClient(app) as client:
    try:
      client.post("/api/traces", json={"preset": "small"})
      waiting = client.post("/api/traces", json={"preset": "wino8"}).json()["id"]
      status = wait_done(client, waiting, timeout_s=10)
      assert status["status"] == "error" and "waited over" in status["error"] and runner.calls == 1
    finally: runner.release()

def test_failed_trace_shows_its_error(tmp_path):
  from explorer.tracing.workers.process import WorkerFailed
  def failing(spec, variant, progress, timeout_s):
    progress("tensor_graph", "start", "")
    raise WorkerFailed("the worker was killed by SIGKILL (out of memory?)")
  app = app_over(str(tmp_path / "f.sqlite3"), runner=failing)
  with TestClient(app) as client:
    trace_id = client.post("/api/traces", json={"preset": "small"}).json()["id"]
    status = wait_done(client, trace_id)
    assert status["status"] == "error" and "SIGKILL" in status["error"]
    assert status["stages"][0]["status"] == "error" and status["stages"][1]["status"] == "skipped"
    page = client.get(f"/t/{trace_id}")
    assert page.status_code == 200 and "The trace failed" in page.text and "SIGKILL" in page.text

def test_a_failed_stage_shows_on_the_trace_page(tmp_path):
  def stage_fails(spec, variant, progress, timeout_s):
    progress("tensor_graph", "start", ""); progress("tensor_graph", "done", "0.01s")
    progress("schedule", "start", ""); progress("schedule", "error", "RuntimeError: rangeify broke")
    failure = {"stage": "schedule", "error": "RuntimeError: rangeify broke", "traceback": "Traceback ...\nRuntimeError"}
    trace = minimal_trace() | {"status": "error", "stage_seconds": {"tensor_graph": 0.01}, "failures": [failure]}
    return fake_result(trace)
  app = app_over(str(tmp_path / "s.sqlite3"), runner=stage_fails)
  with TestClient(app) as client:
    trace_id = client.post("/api/traces", json={"preset": "small"}).json()["id"]
    status = wait_done(client, trace_id)
    assert status["status"] == "done" and "schedule failed" in status["error"]
    assert [s["status"] for s in status["stages"][:3]] == ["done", "error", "skipped"]
    page = client.get(f"/t/{trace_id}").text
    assert "Stage Schedule (rangeify) failed" in page and "rangeify broke" in page and 'class="dot error"' in page
    for url in (f"/t/{trace_id}/bufferize", f"/t/{trace_id}/rangeify", f"/t/{trace_id}/graph/tensor"):
      assert client.get(url).status_code == 200, url
    assert client.get(f"/api/traces/{trace_id}/graphs/tensor").status_code == 404  # no tensor graph was recorded

# ***** the real `small` Winograd trace *****

def test_trace_page_says_how_much_was_tinygrads_own(web_client, small_trace):
  """The Timings panel: each stage's seconds split into tinygrad's own calls and the explorer's, and the total share, from the trace's
  tinygrad_seconds; a trace recorded before them shows the seconds alone."""
  t = web_client.get(f"/api/traces/{small_trace}").json()
  own, secs = t["tinygrad_seconds"], t["stage_seconds"]
  page = web_client.get(f"/t/{small_trace}").text
  assert f"<b>{sum(own.values()):.2f} s</b> of the {sum(secs.values()):.2f} s these stages took" in page
  assert f'<td class="num">{secs["codegen"]:.3f}</td><td class="num">{own["codegen"]:.3f}</td>' in page
  assert f'<td class="num">{secs["render"]:.3f}</td><td class="num">0.000</td><td class="num">{secs["render"]:.3f}</td>' in page
  assert f"<b>{sum(own.values()):.2f} s</b>" in web_client.get(f"/t/{small_trace}/export.html").text  # the offline page too
  from explorer.present.render import environment
  before = environment().get_template("_partials/stage_seconds.html").render(tr={"stage_seconds": secs}, titles={})
  assert "tinygrad's own" not in before and f'<td class="num">{secs["codegen"]:.3f}</td></tr>' in before

def test_the_pages_environment_looks_up_a_records_field_as_jinja_does():
  """A dict's `.field` is looked up as the item at once (explorer.present.render.Environment): the same value as Jinja's own lookup
  for a key, a key named like a dict method (Jinja's method wins), a missing key, a dict subclass and an object's attribute."""
  import collections
  import jinja2
  from explorer.present.render import environment
  source = ("{{ d.name }}|{{ d.items() | list | length }}|{{ d.nope is defined }}|{{ d.keys is callable }}|{{ o.name }}|{{ od.name }}|"
            "{{ o.real }}|{{ d.get('name') }}")
  values = {"d": {"name": "r_4", "items": 3, "keys": "k"}, "o": collections.namedtuple("K", "name")("E_2"), "od": collections.OrderedDict(name="od")}
  ours, theirs = environment().from_string(source).render(**values), jinja2.Environment(autoescape=True).from_string(source).render(**values)
  assert ours == theirs == "r_4|3|False|True|E_2|od||r_4"
  with_strict = environment()
  with_strict.undefined = jinja2.StrictUndefined
  with pytest.raises(jinja2.UndefinedError): with_strict.from_string("{{ d.nope }}").render(d={})

def test_the_overview_counts_what_was_rendered_and_says_cached_compiles(web_client, small_trace):
  """The ribbon and the Result panel count the targets the kernels have records of (asked for or computed since), and the Timings
  card's compile says "cached" as the kernel page does when tinygrad's disk cache had every binary."""
  from explorer.present.render import compile_summary, rendered_targets
  raw = web_client.get(f"/api/traces/{small_trace}/raw").json()
  page = web_client.get(f"/t/{small_trace}").text
  host = raw["kernels"][0]["host_target"]
  assert rendered_targets(raw)[:3] == [host, "cuda", "metal"]
  others = len(rendered_targets(raw)) - 1
  assert f"{others} targets + host" in page and f"<dd>{', '.join(rendered_targets(raw))}</dd>" in page
  assert compile_summary(raw) in page
  cached = {**raw, "kernels": [{**k, "compile_cached": True} for k in raw["kernels"]]}
  assert compile_summary(cached) == "cached" and "0 of" not in compile_summary(raw)
  one = {**raw, "kernels": [{**k, "compile_cached": i == 0} for i, k in enumerate(raw["kernels"])]}
  assert compile_summary(one).endswith(f"(1 of {len(raw['kernels'])} cached)")
  assert rendered_targets({**raw, "variant": {**raw["variant"], "targets": []}}) == rendered_targets(raw)  # read off the records

def test_trace_json(web_client, small_trace):
  r = web_client.get(f"/api/traces/{small_trace}")
  assert r.status_code == 200
  t = r.json()
  assert t["id"] == small_trace and t["status"] == "ok" and t["preset"] == "small" and t["variant"]["algo"] == "winograd"
  assert len(t["kernels"]) >= 3 and all("sources" not in k and "cuda" in k["targets"] for k in t["kernels"])
  assert t["scheduler"]["stage_counts"]["created"] > 0 and "passes" not in t["scheduler"]
  raw = web_client.get(f"/api/traces/{small_trace}/raw").json()
  assert "cuda" in raw["kernels"][0]["sources"] and raw["scheduler"]["passes"]

def test_identical_request_is_a_cache_hit(web_client, small_trace):
  runs = web_client.app.state.services.jobs.runs
  r = web_client.post("/api/traces", json=SMALL_WINO)
  assert r.status_code == 200 and r.json()["id"] == small_trace and r.json()["cached"] and r.json()["status"] == "done"
  assert web_client.app.state.services.jobs.runs == runs

def test_status_and_events_of_a_stored_trace(web_client, small_trace):
  s = web_client.get(f"/api/traces/{small_trace}/status").json()
  assert s["status"] == "done" and [x["stage"] for x in s["stages"]] == list(STAGES) and all(x["status"] == "done" for x in s["stages"])
  text = web_client.get(f"/api/traces/{small_trace}/events").text
  assert text.startswith("event: snapshot") and "event: done" in text

def test_listing_presets_targets_health(web_client, small_trace):
  assert any(r["id"] == small_trace and r["kernels"] >= 3 for r in web_client.get("/api/traces").json())
  assert web_client.get("/api/presets").json()["small"]["cin"] == 3
  assert {t["name"] for t in web_client.get("/api/targets").json()} >= {"cuda", "metal", "ptx", "wgsl"}
  h = web_client.get("/api/health").json()
  assert h["status"] == "ok" and h["tinygrad"] == "0.14.0" and h["dot"]

def test_kernel_bufferize_rangeify_json(web_client, small_trace):
  k = web_client.get(f"/api/traces/{small_trace}/kernels/0").json()
  assert {"cuda", "metal", "host"} <= set(k["sources"]) and k["uops_listing"] and k["passes"]
  every = web_client.get(f"/api/traces/{small_trace}/kernels")
  assert len(every.json()) >= 3 and every.headers["x-total-count"] == str(len(every.json()))
  page = web_client.get(f"/api/traces/{small_trace}/kernels", params={"offset": 1, "limit": 2})  # a page of a long program's kernels
  assert page.json() == every.json()[1:3] and page.headers["x-total-count"] == every.headers["x-total-count"]
  assert web_client.get(f"/api/traces/{small_trace}/kernels", params={"limit": 0}).status_code == 422
  b = web_client.get(f"/api/traces/{small_trace}/bufferize").json()
  assert b["stage_counts"]["kept"] == len(b["stages"]["kept"]) and {x["role"] for x in b["buffers"]} >= {"input", "weight", "output"}
  rg = web_client.get(f"/api/traces/{small_trace}/rangeify").json()
  assert any(p["name"] == "symbolic+reduce_collapse+debuf" for p in rg["passes"])

def test_each_listing_names_its_targets_device(web_client, small_trace):
  """A deviceless target renders the AST the trace's device scheduled: its listing's PARAMs name that target's device, not the host's."""
  for target, device in (("cuda", "CUDA"), ("metal", "METAL")):
    listing = web_client.get(f"/api/traces/{small_trace}/kernels/0/targets/{target}").json()["uops_listing"]
    params = [line for line in listing if "PARAM" in line and "ParamArg(" in line]
    assert params and all(f"device='{device}'" in line for line in params), (target, params[:2])
  host, device = web_client.get(f"/api/traces/{small_trace}/kernels/0").json(), web_client.get(f"/api/traces/{small_trace}").json()["env"]["device"]
  assert any(f"device='{device}'" in line for line in host["uops_listing"])

def debuf_pass(client, trace_id) -> int:
  passes = client.get(f"/api/traces/{trace_id}/rangeify").json()["passes"]
  return next(p["index"] for p in passes if p["name"] == "symbolic+reduce_collapse+debuf")

def test_graphs_json_svg_and_cache(web_client, small_trace):
  gs = web_client.app.state.services.graphs
  p = debuf_pass(web_client, small_trace)
  codegen = next(i for i, q in enumerate(web_client.get(f"/api/traces/{small_trace}/kernels/0").json()["passes"]) if q["matches"])
  for ref in ("tensor", "kernels", "ast/0", f"rangeify/{p}/before", f"rangeify/{p}/after", f"rangeify/{p}/m2", f"codegen/0/{codegen}/after",
              f"codegen/0/{codegen}/m1"):
    view = web_client.get(f"/api/traces/{small_trace}/graphs/{ref}")
    assert view.status_code == 200, (ref, view.text)
    v = view.json()
    assert v["nodes"] and v["shown_nodes"] <= graphs.MAX_NODES and v["legend"] and v["svg_url"].endswith(".svg")
    if "/m" in ref: assert v["rule"] and v["highlight"]
    svg = web_client.get(v["svg_url"])
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml") and svg.text.startswith("<svg")
  kernels_svg = web_client.get(f"/api/traces/{small_trace}/graphs/kernels.svg").text
  assert f"/t/{small_trace}/k/0" in kernels_svg  # kernel nodes link to their pages
  before = gs.expansions
  for ref in ("tensor", "ast/0", f"rangeify/{p}/m2", f"rangeify/{p}/m3"):  # m3 came with m2's window
    assert web_client.get(f"/api/traces/{small_trace}/graphs/{ref}.svg").status_code == 200
  assert gs.expansions == before
  light = web_client.get(f"/api/traces/{small_trace}/graphs/tensor?nodes=0").json()
  assert "nodes" not in light and light["total_nodes"] > 0

@pytest.mark.parametrize("ref", ["bogus", "ast/99", "rangeify/99999/after", "codegen/0/0/m99999", "codegen/99/0/before", "rangeify/0/sideways"])
def test_unknown_graphs_404(web_client, small_trace, ref):
  r = web_client.get(f"/api/traces/{small_trace}/graphs/{ref}")
  assert r.status_code == 404 and r.json()["detail"]

def test_pages(web_client, small_trace):
  base = f"/t/{small_trace}"
  checks = {"/": ["trace-form", "small", "winograd", "F(2,3)", "beam", "Recent traces", small_trace],
            base: ["Kernels", "kernel-table", "GFLOP/s", "Tensor graph", "Rangeify", "Kernel graph", "Timings", "max error", "tinygrad"],
            f"{base}/bufferize": ["STAGE table", "inlined (removed)", "kept → buffer", 'data-ref="kernels"', "GLOBAL"],
            f"{base}/graph/tensor": ['data-ref="tensor"', "RESHAPE"],
            f"{base}/rangeify": ["symbolic+reduce_collapse+debuf", "data-stepper", "matched only"],
            f"{base}/k/0": ['data-ref="ast/0"', 'data-tab="cuda"', 'data-tab="metal"', 'class="hl"', "Copy", "UOps"],
            f"{base}/k/1?graph=passes&code=metal&pass=3&at=before": ['data-prefix="codegen/1"', 'data-pass="3"', 'data-at="before"'],
            f"{base}/rangeify?pass=2&at=m1": ['data-pass="2"']}
  for url, needles in checks.items():
    r = web_client.get(url)
    assert r.status_code == 200, url
    for n in needles: assert n in r.text, (url, n)
  metal = web_client.get(f"{base}/k/0?code=metal").text  # the asked tab is the one shown
  assert 'data-panel="cuda" hidden' in metal and 'data-panel="metal" hidden' not in metal
  assert web_client.get(f"{base}/k/99").status_code == 404
  assert web_client.get("/assets/pygments.css").text.startswith(".hl")

def test_form_post_redirects_to_the_trace(web_client, small_trace):
  form = {"preset": "small", "algo": "winograd", "wino_impl": "builtin", "opt": "heuristic", "targets": ["cuda", "metal"], "warmup": "2",
          "repeats": "10", "time": "1"}
  r = web_client.post("/t", data=form, follow_redirects=False)
  assert r.status_code == 303 and r.headers["location"] == f"/t/{small_trace}"
  shape = {"batch": "-1", "cin": "3", "cout": "16", "height": "32", "width": "32", "kernel": "3"}
  bad = web_client.post("/t", data={**form, "preset": "custom", **shape})
  assert bad.status_code == 422 and "Cannot trace that" in bad.text
  # in words (which field, what limit, what was given), the field marked: not "spec.batch: Input should be greater than or equal to 1"
  assert "The batch size is -1: it must be at least 1." in bad.text and 'name="batch" min="1" value="-1" required class="invalid"' in bad.text
  big = web_client.post("/t", data={**form, "preset": "custom", **shape, "batch": "1", "kernel": "16"}).text
  assert "The kernel size is 16: this server takes at most 15." in big and 'name="kernel"' in big and 'aria-invalid="true"' in big
  k5 = web_client.post("/t", data={**form, "preset": "k5"})
  assert k5.status_code == 422 and "3x3 kernel" in k5.text

INVALID = [
  ({}, "give exactly one of preset or spec"),
  ({"preset": "small", "spec": PRESETS["small"].to_dict()}, "exactly one"),
  ({"preset": "huge"}, "preset"),
  ({"spec": {**PRESETS["small"].to_dict(), "batch": 0}}, "spec.batch"),
  ({"spec": {**PRESETS["small"].to_dict(), "colour": "red"}}, "colour"),
  ({"spec": {**PRESETS["small"].to_dict(), "padding": False}}, "not true or false"),  # pydantic alone would read false as 0
  ({"spec": {k: v for k, v in PRESETS["small"].to_dict().items() if k != "cin"}}, "spec.cin"),
  ({"spec": {**PRESETS["small"].to_dict(), "groups": 2}}, "groups=2 must divide"),
  ({"spec": {**PRESETS["small"].to_dict(), "batch": 1024, "cin": 4096, "height": 4096, "width": 4096}}, "memory budget"),
  ({"preset": "small", "variant": {"algo": "fft"}}, "variant.algo"),
  ({"preset": "small", "variant": {"targets": ["vulkan"]}}, "variant.targets"),
  ({"preset": "small", "variant": {"targets": ["cuda", "cuda"]}}, "more than once"),
  ({"preset": "small", "variant": {"opt": "beam:99"}}, "beam width 99"),
  ({"preset": "small", "variant": {"opt": "fast"}}, "variant.opt"),
  ({"preset": "small", "variant": {"repeats": 0}}, "variant.repeats"),
  ({"preset": "small", "variant": {"algo": "winograd", "tile": "F(2,3)"}}, "builtin Winograd"),
  ({"preset": "k5", "variant": {"algo": "winograd"}}, "3x3 kernel"),
  ({"preset": "small", "variant": {"wino_impl": "explorer"}}, "--wino-impl applies to --algo winograd only"),
  ({"preset": "small", "variant": {"device": "cpu; rm -rf"}}, "variant.device"),
]

@pytest.mark.parametrize("body,message", INVALID)
def test_invalid_input_is_422_with_a_readable_message(web_client, body, message):
  r = web_client.post("/api/traces", json=body)
  assert r.status_code == 422, r.text
  assert message in r.json()["detail"], r.json()["detail"]
  ValidationErrorBody.model_validate(r.json())  # the documented 422 body: errors per field, empty where the server refuses the request

def test_malformed_json_is_422(web_client):
  r = web_client.post("/api/traces", content=b"{not json", headers={"content-type": "application/json"})
  assert r.status_code == 422 and r.json()["detail"] and r.json()["errors"][0]["type"] == "json_invalid"

def test_a_method_the_path_lacks_is_405_with_every_method_it_has(web_client):
  for method, url, allow in (("PUT", "/api/traces/nope", "GET, DELETE"), ("PATCH", "/api/traces", "GET, POST"), ("DELETE", "/t", "POST")):
    r = web_client.request(method, url)
    assert r.status_code == 405 and r.headers["allow"] == allow, (method, url, r.headers)

@pytest.mark.parametrize("url", ["/api/traces/nope", "/api/traces/nope/raw", "/api/traces/nope/status", "/api/traces/nope/events",
                                 "/api/traces/nope/kernels", "/api/traces/nope/kernels/0", "/api/traces/nope/bufferize", "/api/traces/nope/rangeify",
                                 "/api/traces/nope/graphs", "/api/traces/nope/graphs/tensor", "/api/traces/nope/graphs/tensor.svg"])
def test_unknown_ids_404(web_client, url):
  r = web_client.get(url)
  assert r.status_code == 404 and "nope" in r.json()["detail"]

def test_unknown_pages_404_as_html(web_client):
  for url in ("/t/nope", "/t/nope/bufferize", "/t/nope/k/0", "/t/nope/rangeify", "/t/nope/graph/tensor"):
    r = web_client.get(url, headers={"accept": "text/html"})
    assert r.status_code == 404 and "Not found" in r.text and r.headers["content-type"].startswith("text/html")

def test_corrupt_row_is_a_clear_error_and_a_new_request_heals_it(tmp_path):
  runner = GatedRunner(); runner.release()
  app = app_over(str(tmp_path / "c.sqlite3"), runner=runner)
  with TestClient(app) as client:
    trace_id = client.post("/api/traces", json={"preset": "small"}).json()["id"]
    wait_done(client, trace_id)
    app.state.services.traces.forget(trace_id)
    app.state.services.store._conn().execute("UPDATE traces SET trace = '{broken' WHERE id = ?", (trace_id,))
    r = client.get(f"/api/traces/{trace_id}")  # (its document, kept apart when it was stored, is not served for a row changed since)
    assert r.status_code == 500 and "corrupt" in r.json()["detail"] and trace_id in r.json()["detail"]
    assert client.post("/api/traces", json={"preset": "small"}).status_code == 202  # dropped and traced again
    assert wait_done(client, trace_id)["status"] == "done" and runner.calls == 2

def test_docs_are_served_offline(web_client):
  html = web_client.get("/docs").text
  assert "/static/vendor/swagger-ui-5.35.0/swagger-ui-bundle.js" in html and "cdn" not in html.lower()
  assert web_client.get("/static/vendor/swagger-ui-5.35.0/swagger-ui-bundle.js").status_code == 200
  assert web_client.get("/static/vendor/svg-pan-zoom-3.6.2.min.js").status_code == 200
  spec = web_client.get("/openapi.json").json()
  assert "/api/traces/{trace_id}/graphs/{ref}" in spec["paths"] and "/api/traces/{trace_id}/events" in spec["paths"]

def test_the_pages_scripts_are_served_as_javascript(web_client):
  """A browser runs a module only under a JavaScript MIME type (under text/plain, as a misread system table may say, no page works)."""
  for path in sorted((REPO / "explorer" / "static").glob("*.js")):
    r = web_client.get(f"/static/{path.name}")
    assert r.status_code == 200 and r.headers["content-type"].split(";")[0] in ("text/javascript", "application/javascript"), path.name

def test_access_token(tmp_path):
  app = app_over(str(tmp_path / "t.sqlite3"), token="s3cret-token-0123456789")
  with TestClient(app) as client:
    assert client.get("/api/health").status_code == 200
    assert client.get("/api/traces").status_code == 401 and client.get("/").status_code == 401
    assert client.get("/api/traces", headers={"X-Access-Token": "s3cret-token-0123456789"}).status_code == 200
    assert client.get("/?token=wrong").status_code == 401
    r = client.get("/?token=s3cret-token-0123456789", follow_redirects=False)
    assert r.status_code == 303 and "token" not in r.headers["location"]
    assert client.get("/").status_code == 200  # the cookie set above

def test_serving_beyond_loopback_needs_a_token(monkeypatch):
  from explorer.web.serving import serve
  monkeypatch.delenv("KERNEL_EXPLORER_TOKEN", raising=False)
  with pytest.raises(SystemExit, match="access token"): serve("0.0.0.0", 1)

# ***** graphs.py: simplification and dot limits *****

def chain_graph(n: int) -> dict:
  op = lambda i: "ADD" if i % 2 else "MUL"
  dtype = lambda i: "dtypes.weakint" if i % 3 == 0 else "dtypes.float"
  nodes = [{"id": str(i), "label": f"{op(i)}\n{dtype(i)}", "op": op(i), "color": "#ffffc0"} for i in range(n)]
  return {"nodes": nodes, "edges": [{"src": str(i), "dst": str(i + 1), "idx": 0} for i in range(n - 1)]}

def test_big_graphs_are_simplified_and_say_so():
  g, notes = graphs.simplify(chain_graph(2000), 400)
  assert len(g["nodes"]) <= 400 and len(notes) == 2 and "index-arithmetic" in notes[0] and "nearest the output" in notes[1]
  assert any(e.get("via") for e in g["edges"])  # contracted through the removed index math
  assert str(1999) in {n["id"] for n in g["nodes"]}  # the output is kept
  small, none = graphs.simplify(chain_graph(50), 400)
  assert small == chain_graph(50) and none == []

def test_dot_timeout_is_a_clear_error():
  g, _ = graphs.simplify(chain_graph(3000), 3000)
  with pytest.raises(graphs.LayoutError, match="did not finish the layout within"): graphs.layout_svg(graphs.uop_dot(g), timeout_s=0.01)

# ***** the server process never imports tinygrad *****

def test_server_process_never_imports_tinygrad(web_db, small_trace):
  script = textwrap.dedent(f"""
    import sys
    from fastapi.testclient import TestClient
    from explorer.settings import Settings
    from explorer.web.app import create_app
    app = create_app({str(web_db)!r}, settings=Settings.load(env={{}}))
    with TestClient(app) as c:
      for url in ("/", "/t/{small_trace}", "/t/{small_trace}/bufferize", "/t/{small_trace}/k/0", "/t/{small_trace}/rangeify",
                  "/api/traces/{small_trace}/graphs/ast/1.svg", "/api/traces/{small_trace}/graphs/ast/1.svg?full=1", "/api/health"):
        assert c.get(url).status_code == 200, url
      assert app.state.services.graphs.expansions >= 1  # expanded in a worker process
      assert c.get("/api/health").json()["tinygrad_imported"] is False
    assert "tinygrad" not in sys.modules and "explorer.tracing.tg" not in sys.modules, "the server imported tinygrad"
    print("ok")
  """)
  r = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr

def test_store_survives_a_restart(web_db, small_trace):
  assert Store(pathlib.Path(web_db)).get_trace(small_trace)["preset"] == "small"

def test_no_terminal_colours_reach_a_page_or_its_json(web_client, small_trace):
  """tinygrad colours kernel names for its terminal, and a KernelInfo's repr in a UOp listing or a graph label carries them escaped."""
  last = len(web_client.get(f"/api/traces/{small_trace}/kernels/0").json()["passes"]) - 1
  for url in (f"/api/traces/{small_trace}", f"/api/traces/{small_trace}/kernels/0", f"/t/{small_trace}/k/0", f"/t/{small_trace}/k/0?target=cuda",
              f"/api/traces/{small_trace}/graphs/codegen/0/{last}/after", f"/api/traces/{small_trace}/graphs/codegen/0/0/before",
              f"/api/traces/{small_trace}/graphs/ast/0"):
    r = web_client.get(url)
    assert r.status_code == 200, (url, r.status_code)
    assert not any(colour in r.text for colour in ("\x1b", "\\x1b", "\\u001b", "[90m", "[0m")), url

def test_the_kernel_page_shows_the_target_asked_for_and_says_what_it_did_not_find(web_client, small_trace):
  """One target everywhere (the source tab, the kernel tabs, the title) and nothing in a URL ignored in silence (issue 29)."""
  raw = web_client.get(f"/api/traces/{small_trace}/raw").json()
  host = raw["kernels"][0]["host_target"]
  page = web_client.get(f"/t/{small_trace}/k/0?target={host}").text
  assert 'data-tab="host" class="active"' in page and 'data-tab="cuda" class="active"' not in page and "url-notice" not in page
  cuda = web_client.get(f"/t/{small_trace}/k/0?target=cuda").text
  assert 'data-tab="cuda" class="active"' in cuda
  for k in raw["kernels"]:
    assert f'<span class="mono">{k["targets"]["cuda"]["name"]}</span>' in cuda and f"/k/{k['index']}?graph=ast&amp;target=cuda" in cuda
    if k["targets"]["cuda"]["name"] != k["name"]: assert f'<span class="mono">{k["name"]}</span>' not in cuda
  assert f"<title>Kernel Explorer · {raw['kernels'][0]['targets']['cuda']['name']} ·" in cuda
  fortran = web_client.get(f"/t/{small_trace}/k/0?target=fortran").text
  assert "There is no target &#39;fortran&#39;" in fortran and f"Showing the host&#39;s, {host}." in fortran
  assert 'data-tab="host" class="active"' in fortran
  passes = len(raw["kernels"][0]["passes"])
  bad = web_client.get(f"/t/{small_trace}/k/0?graph=passes&pass=9999&at=m999").text
  assert f"There is no pass &#39;9999&#39; in kernel 0&#39;s {host} codegen (it has {passes}, numbered 0 to {passes - 1})" in bad
  assert "&#39;m999&#39; is not a step of pass" in bad
  assert "url-notice" not in web_client.get(f"/t/{small_trace}/k/0?graph=passes&pass=1&at=before").text
  nested = [p for p in raw["kernels"][0]["passes"] if p["name"] == "graph_rewrite" and p["depth"]]  # tinygrad's unnamed nested rewrites
  listed = web_client.get(f"/t/{small_trace}/k/0?graph=passes").text
  assert nested and listed.count("graph_rewrite in ") >= 2 * len(nested)  # named by the pass they ran in (the label and data-name)
  table = web_client.get(f"/t/{small_trace}?target=cuda").text  # the trace table's switcher marks the target it shows
  assert 'data-target="cuda" aria-current="true"' in table and 'data-target="metal" aria-current' not in table

def test_a_tour_says_when_its_step_is_unknown_and_flags_a_noisy_timing(web_client, small_trace):
  page = web_client.get(f"/t/{small_trace}/tour?step=no-such-step").text
  assert "This tour has no step &#39;no-such-step&#39;" in page and "showing step 1" in page
  assert "url-notice" not in web_client.get(f"/t/{small_trace}/tour?step=timing").text
  from explorer.present.tour import trace_tour
  raw = web_client.get(f"/api/traces/{small_trace}/raw").json()
  raw["totals"]["time_s"] = {"median": 6.6e-5, "std": 4.826e-3, "n": 10, "min": 5e-5, "max": 1.5e-2}  # the case: std 70x the median
  text = next(s for s in trace_tour(raw) if s["id"] == "timing")["text"]
  assert "Beware: the spread (std) is 73.1x the median" in text
  raw["totals"]["time_s"] = {"median": 1e-3, "std": 1e-4, "n": 10, "min": 9e-4, "max": 1.2e-3}
  assert "Beware" not in next(s for s in trace_tour(raw) if s["id"] == "timing")["text"]
