"""Trust nothing that crossed a wire: a queue worker's result is data, checked before anything keeps it; a stored rewrite blob is
loaded as data; a trace file reaches a reproducer only as literals; slow bodies and open streams lock nobody out; a cross-site GET
starts nothing; one device, one name; workers outlive their broker. Real servers, a real redis-server, a real rogue RQ worker."""
from __future__ import annotations
import base64
import contextlib
import json
import os
import pathlib
import pickle
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
import httpx
import pytest
from conftest import REPO, running_server
from fastapi.testclient import TestClient
from support import app_over, filled, get_paths
from test_queue import NO_REDIS, REDIS_SERVER, broker as broker  # the module's real redis-server (a fixture)
from explorer.settings import Settings
from explorer.spec import ConvSpec, Variant
from explorer.store import Store

TINY_SPEC = {"batch": 1, "cin": 2, "cout": 2, "height": 8, "width": 8, "kernel": 3}

def tiny(cout: int) -> dict: return {"spec": {**TINY_SPEC, "cout": cout}, "variant": {"algo": "direct"}}

@pytest.fixture(scope="module")
def real_trace(tmp_path_factory) -> pathlib.Path:
  """A real trace of the tiny direct convolution (its JSON, and its rewrite blob base64 in PATH.blob): what a worker would send."""
  from explorer.tracing.pipeline.run import run_trace
  res = run_trace(ConvSpec(**TINY_SPEC), Variant())
  path = tmp_path_factory.mktemp("rogue") / "trace.json"
  path.write_text(json.dumps(res.trace))
  pathlib.Path(f"{path}.blob").write_text(json.dumps(base64.b64encode(res.rewrites).decode()))
  return path

# ***** 0: a worker's result is data *****

class Touch:
  """Unpickled with the full machinery, it creates the marker file: the proof that a payload ran."""
  def __init__(self, marker: pathlib.Path): self.marker = marker
  def __reduce__(self): return (pathlib.Path.touch, (self.marker,))

@contextlib.contextmanager
def rogue(url: str, trace: pathlib.Path, marker: pathlib.Path, secret: str, log_dir: pathlib.Path) -> Iterator[subprocess.Popen]:
  from explorer.queue.client import QueueClient
  log = open(log_dir / "rogue.log", "w")  # noqa: SIM115 - its log, open while it runs
  proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "rogue_worker.py"), url, str(trace), str(marker), secret], cwd=REPO,
                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
  try:
    deadline = time.monotonic() + 60
    while not any(w["name"] == "rogue" for w in QueueClient(url).workers()):
      assert proc.poll() is None and time.monotonic() < deadline, (log_dir / "rogue.log").read_text()
      time.sleep(0.2)
    yield proc
  finally:
    with contextlib.suppress(ProcessLookupError): os.killpg(proc.pid, 9)
    proc.wait()
    log.close()

needs_redis = pytest.mark.skipif(REDIS_SERVER is None, reason=NO_REDIS)

@pytest.mark.queue
@needs_redis
def test_a_rogue_workers_answers_are_refused_or_stay_inert(broker, real_trace, tmp_path):
  """The server refuses a result that is not a trace of the asked computation, a blob that is not plain data in the data format (a
  pickle, or a pickle behind the format's first bytes), and a result not signed with its queue secret. A well-formed result is kept,
  and when a pickle reaches its row another way, every page, the graphs and the reproducer of that trace leave no file behind, and
  the graph answers a JSON error."""
  from test_queue import status, submit, wait_for
  marker, secret = tmp_path / "ran", "the-queue-secret-0123"
  with running_server(tmp_path / "s.sqlite3", tmp_path, queue=broker, queue_secret=secret) as base, \
       rogue(broker, real_trace, marker, secret, tmp_path):
    for cout, why in ((2, "spec.stride"), (3, "lacks the data format's first bytes"), (4, "names pathlib.Path.touch"),
                      (5, "signed with another secret"), (6, "is not a rewrite log"), (8, "names '/etc/hostname', not a file of tinygrad")):
      s = wait_for(base, submit(base, tiny(cout)))
      assert s["status"] == "error" and "refused, nothing kept" in s["error"] and why in s["error"], s
      assert httpx.get(f"{base}/api/traces/{s['id']}", timeout=30).status_code == 404
    trace_id = submit(base, tiny(7))  # well-formed: stored, and every page of it can be opened
    assert wait_for(base, trace_id)["status"] == "done", status(base, trace_id)
    store = Store(tmp_path / "s.sqlite3")  # a pickle that reached the store by another way (an older version's row): loaded, never run
    store._conn().execute("UPDATE traces SET rewrites = ? WHERE id = ?", (zlib.compress(pickle.dumps(Touch(marker))), trace_id))
    graph = httpx.get(f"{base}/api/traces/{trace_id}/graphs/tensor", timeout=120)
    assert graph.status_code == 409 and "names pathlib" in graph.json()["detail"] and "nothing was loaded" in graph.json()["detail"], graph.text
    answers = {}
    for path in get_paths(app_over(str(tmp_path / "routes.sqlite3"))):
      url = filled(path, trace_id)
      r = httpx.get(f"{base}{url}", timeout=120)
      answers[url] = r.status_code
      assert r.status_code < 500, (url, r.status_code, r.text[:300])
    assert answers[f"/t/{trace_id}"] == 200 and answers[f"/api/traces/{trace_id}/graphs/tensor"] == 409
    script = tmp_path / "repro.py"
    script.write_text(httpx.get(f"{base}/api/traces/{trace_id}/repro.py", timeout=30).text)
    ran = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0 and "output (1, 7, 8, 8)" in ran.stdout, ran.stderr[-2000:]
  assert not marker.exists(), "a payload from the broker ran"

def test_blobs_load_as_data_alone(tmp_path):
  """In a fresh process: a pickle in the data format, a legacy pickle naming a function, and a zlib bomb are refused in one line each,
  and nothing runs; a real trace's blob decodes to the very fields tinygrad recorded (its rule locations package-relative)."""
  marker = tmp_path / "ran"
  code = f"""
import pathlib, pickle, zlib
from explorer.tracing import tg
from explorer.tracing.pipeline.trace import capture
from explorer.spec import ConvSpec, Variant
from tinygrad.uop import ops
class Touch:
  def __reduce__(self): return (pathlib.Path.touch, (pathlib.Path({str(marker)!r}),))
for blob in (tg.REWRITE_LOG_MAGIC + zlib.compress(pickle.dumps(Touch())), zlib.compress(pickle.dumps(Touch())),
             tg.REWRITE_LOG_MAGIC + zlib.compress(b"\\0" * (64 << 20), 9), b"not even zlib"):
  try: tg.decode_rewrite_log(blob); print("LOADED")
  except tg.BlobRefused as e: print("refused:", e)
capture(ConvSpec(1, 2, 2, 8, 8, 3), Variant(algo="winograd", wino_impl="explorer", targets=("cuda",), repeats=2))
live, back = dict(ops.uop_fields), tg.decode_rewrite_log(tg.export_rewrites(0))
same = all(back.uop_fields[n][:3] == f[:3] and back.uop_fields[n][3] == f[3] and type(back.uop_fields[n][3]) is type(f[3])
           and back.uop_fields[n][4] == f[4] for n, f in live.items())
import dataclasses
from explorer.blob import stored_location
def at(loc): return (stored_location(loc[0]), loc[1])  # a blob names locations package-relative (tinygrad/codegen/...), its sources beside
live_rewrites = [[dataclasses.replace(r, loc=at(r.loc), matches=[(a, b, at(l), t) for a, b, l, t in r.matches]) for r in g] for g in ops.tracked_ctxs]
print("same fields:", same, len(live), "same rewrites:", back.rewrites == live_rewrites, "unstored:", dict(tg.ENCODER_UNSTORED))
"""
  out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
  lines = out.stdout.splitlines()
  assert out.returncode == 0 and len(lines) == 5, out.stderr[-2000:]
  assert "names pathlib.Path.touch: a rewrite log is plain data, so nothing was loaded" in lines[0]
  assert "names pathlib.Path.touch, which is not among the classes tinygrad's rewrite log holds" in lines[1]
  assert lines[2].startswith("refused:") and lines[3].startswith("refused:") and all("\n" not in x for x in lines)
  assert lines[4].startswith("same fields: True") and "same rewrites: True" in lines[4] and lines[4].endswith("unstored: {}"), lines[4]
  assert not marker.exists()

def poisoned_locations(blob: bytes, call: str, rule: str) -> bytes:
  """The rewrite log with every pass called from `call`, every rule at `rule` (line 1), and no captured sources."""
  from explorer.blob import read_plain, write_plain
  body = read_plain(blob)
  at_loc, at_matches = body["rewrite_fields"].index("loc"), body["rewrite_fields"].index("matches")
  for group in body["rewrites"]:
    for r in group:
      r[at_loc] = [call, 1]
      for m in r[at_matches]: m[2] = [rule, 1]
  return write_plain({**body, "sources": {}})

def test_a_rewrite_log_names_no_file_a_page_reads(real_trace, tmp_path):
  """Rule locations are data: the store refuses a log that names a file outside tinygrad and the explorer; one that reached a row
  another way (an older version's absolute paths, a '..' out of tinygrad) shows nothing of those files where pages show rules."""
  from explorer.store import StoreError
  secret = tmp_path / "secret.py"
  secret.write_text("TOKEN = 'the-secret-0123456789'\n")
  blob = base64.b64decode(json.loads(pathlib.Path(f"{real_trace}.blob").read_text()))
  trace, store, tid = json.loads(real_trace.read_text()), Store(tmp_path / "s.sqlite3"), "10ca7e0000000001"
  with pytest.raises(StoreError, match="not a file of tinygrad or the explorer"):
    store.put_trace(tid, trace, poisoned_locations(blob, str(secret), str(secret)))
  store.put_trace(tid, trace, blob)
  escape = "/usr/lib/tinygrad/" + "../" * 12 + str(secret).lstrip("/")
  store._conn().execute("UPDATE traces SET rewrites = ? WHERE id = ?", (poisoned_locations(blob, str(secret), escape), tid))
  p = next(p for k in trace["kernels"] for p in k["passes"] if p["matches"] and p.get("group") is not None)
  with TestClient(app_over(tmp_path / "s.sqlite3")) as client:
    r = client.get(f"/api/traces/{tid}/rewrites/{p['group']}/{p['step']}/matches?limit=5")
    assert r.status_code == 200 and r.json()["matches"], r.text
    assert "the-secret" not in r.text and all(m["rule_source"] == "" for m in r.json()["matches"]), r.text[:500]
    assert r.json()["call"].endswith("secret.py:1") and r.json()["call_code"] == "", r.json()["call"]
    r = client.get(f"/api/traces/{tid}/rewrites/{p['group']}/origins?nums={p['sink']}")
    assert r.status_code == 200 and "the-secret" not in r.text, r.text[:500]

# ***** 1: a reproducer runs only tinygrad *****

def test_a_crafted_trace_file_reaches_repro_as_text_alone(real_trace, tmp_path):
  marker = tmp_path / "ran"
  payload = f'"""\nimport pathlib; pathlib.Path({str(marker)!r}).touch()\n"""'
  trace = json.loads(real_trace.read_text())
  crafted = tmp_path / 'evil"""name.json'
  crafted.write_text(json.dumps({**trace, "label": payload, "env": {**trace["env"], "tinygrad": payload}}))
  script = tmp_path / "repro.py"
  cli = [sys.executable, "-m", "explorer", "repro", str(crafted), "-o", str(script)]
  assert subprocess.run(cli, cwd=REPO, capture_output=True, text=True, timeout=120).returncode == 0
  ran = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
  assert ran.returncode == 0 and "output (1, 2, 8, 8)" in ran.stdout and not marker.exists(), ran.stderr[-2000:]
  for field, value, why in (("env", {**trace["env"], "device": f'CPU"""; {payload}'}, "env.device"),
                            ("spec", {**trace["spec"], "stride": f"1); __import__('pathlib').Path({str(marker)!r}).touch(); dict(a=1"},
                             "spec.stride")):
    crafted.write_text(json.dumps({**trace, field: value}))
    out = subprocess.run(cli, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and why in out.stderr and "Traceback" not in out.stderr, out.stderr
  assert not marker.exists()

# ***** 2: slow bodies and open streams hold no request slot *****

@pytest.mark.slow
def test_slow_bodies_lock_nobody_out_and_meet_their_deadline(tmp_path):
  """260 connections send a head and part of a 60000-byte body, then nothing, for 20 s: every page answers within a second all the
  while (their bodies hold no request slot, and 260 > max_connections); past request_body_timeout_s each gets a 408 and is closed."""
  from test_lifecycle import Server
  s = Server(tmp_path / "t.sqlite3", tmp_path / "server.log", KERNEL_EXPLORER_REQUEST_BODY_TIMEOUT_S="24").start()
  socks = []
  try:
    for _ in range(260):
      sk = socket.create_connection(("127.0.0.1", s.port))
      sk.sendall(b"POST /api/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n{\"preset\"")
      socks.append(sk)
    opened, slowest = time.monotonic(), 0.0
    while time.monotonic() - opened < 20:
      for url in ("/", "/api/presets", "/api/traces"):
        st = time.monotonic()
        assert httpx.get(f"{s.base}{url}", timeout=5).status_code == 200, url
        slowest = max(slowest, time.monotonic() - st)
      time.sleep(0.5)
    assert slowest < 1.0, f"a page took {slowest:.2f}s while slow bodies were open"
    time.sleep(max(0.0, opened + 27 - time.monotonic()))
    for sk in socks:
      sk.settimeout(5)
      head = sk.recv(200)
      assert head.startswith(b"HTTP/1.1 408"), head
  finally:
    for sk in socks: sk.close()
    s.stop()

def test_event_streams_have_caps_of_their_own(tmp_path):
  """A trace that waits keeps its progress streams open: past max_streams_per_client a client's next stream gets 503 (its page polls
  instead), and pages and other clients' streams still answer; the streams do not count against max_connections."""
  import uvicorn
  from test_web_api import GatedRunner
  runner = GatedRunner()
  app = app_over(str(tmp_path / "s.sqlite3"), max_streams_per_client=3, max_streams=5, max_connections=2, runner=runner)
  server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=(port := __import__("conftest").free_port()), log_level="warning"))
  thread = threading.Thread(target=server.run, daemon=True)
  thread.start()
  base = f"http://127.0.0.1:{port}"
  try:
    while not server.started: time.sleep(0.05)
    trace_id = httpx.post(f"{base}/api/traces", json={"preset": "small"}, timeout=30).json()["id"]
    with contextlib.ExitStack() as open_streams:
      clients = [open_streams.enter_context(httpx.Client(base_url=base, timeout=30)) for _ in range(3)]
      streams = [open_streams.enter_context(c.stream("GET", f"/api/traces/{trace_id}/events")) for c in clients]
      assert all(r.status_code == 200 for r in streams)
      extra = httpx.get(f"{base}/api/traces/{trace_id}/events", timeout=30)
      assert extra.status_code == 503 and extra.headers["retry-after"] and "polling" in extra.json()["detail"]
      assert httpx.get(f"{base}/api/traces/{trace_id}/status", timeout=5).status_code == 200  # 3 streams open, max_connections 2
      assert httpx.get(f"{base}/api/presets", timeout=5).status_code == 200
    runner.release()
  finally:
    runner.release()
    server.should_exit = True
    thread.join(10)

# ***** 3: a GET from another site starts nothing *****

def test_no_route_starts_work_for_another_site(web_client, web_db, small_trace):
  """Every GET route, asked for a fresh copy of a trace (nothing cached) the way a page elsewhere would (an image, a fetch): nothing
  starts (no target, analysis, compile facts, graph expansion, diff or job), and each route that takes a work gate answers 403 saying
  why."""
  import inspect
  from explorer.schema import ANALYSIS_FIELDS
  from explorer.store import Store
  from explorer.web.http.work import WorkGate
  fresh, store = "cf0000000000000a", Store(web_db)
  def pristine(rec: dict) -> dict: return {**{k: v for k, v in rec.items() if k not in ANALYSIS_FIELDS}, "compile": None}
  trace = store.get_trace(small_trace)  # as it was traced: without what other tests of the session computed for it since
  kernels = [{**k, "targets": {t: pristine(r) for t, r in k["targets"].items() if not r.get("rewrites")}} for k in trace["kernels"]]
  trace = {**trace, "kernels": kernels}
  store.put_trace(fresh, trace, store.get_rewrites(small_trace))
  app, cross = web_client.app, {"sec-fetch-site": "cross-site", "sec-fetch-mode": "no-cors", "sec-fetch-dest": "image"}
  st = app.state.services
  def counters() -> tuple:
    return (st.enrichments.computed, st.graphs.expansions, st.diffs.graph_runs, st.diffs.structural_runs, st.jobs.runs)
  before, gated = counters(), 0
  from support import routes
  for r in routes(app):
    if not r.path or "GET" not in (r.methods or ()) or r.path.startswith(("/static", "/docs")): continue
    takes_gate = any(p.annotation is WorkGate or "Work" in str(p.annotation) for p in inspect.signature(r.endpoint).parameters.values())
    sass = r.path.endswith("/sass")  # SASS is CUDA's and PTX's: asked for CUDA, what it needs first would start work
    got = web_client.get(filled(r.path, fresh, **({"target": "cuda"} if sass else {})), headers=cross)
    assert counters() == before, f"{r.path} started work for another site"
    if r.path == "/t/{trace_id}/k/{n}/sass": assert got.status_code == 200 and "starts work" in got.text  # the page says why, in place
    # the kernel page starts work only for a target it lacks (below); tours go without the analyses they cannot compute cross-site
    elif takes_gate and r.path not in ("/t/{trace_id}/k/{n}", "/t/{trace_id}/tour", "/api/traces/{trace_id}/tour", "/tours/{kind}",
                                       "/api/tours/{kind}"):
      gated += 1
      said = got.json()["detail"] if r.path.startswith("/api/") else got.text  # a page's address answers its error as a page
      assert got.status_code == 403 and "starts work" in said, (r.path, got.status_code)
      assert r.path.startswith("/api/") or got.headers["content-type"].startswith("text/html"), (r.path, got.headers["content-type"])
  assert gated >= 9
  kernel = web_client.get(f"/t/{fresh}/k/0?target=wgsl", headers=cross)
  from explorer.stages import ENRICH_KINDS, ENRICH_TARGET
  assert kernel.status_code == 200 and "starts work" in kernel.text and st.enrichments.status(fresh, ENRICH_TARGET, "wgsl", (0,)) is None
  assert all(st.enrichments.status(fresh, kind, "clang", (0,)) is None for kind in ENRICH_KINDS) and counters() == before
  followed = {"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate", "sec-fetch-user": "?1"}  # a person clicked a link
  assert web_client.get(f"/api/traces/{fresh}/kernels/0/targets/wgsl", headers=followed).status_code == 202

# ***** 4: one device, one name *****

def test_a_device_has_one_name(tmp_path):
  app = app_over(str(tmp_path / "d.sqlite3"), runner=lambda *a: pytest.fail("nothing should run here"))
  with TestClient(app, raise_server_exceptions=False) as client:
    from explorer.store import trace_key
    from explorer.web.http.deps import resolved
    from explorer.web.http.models import TraceRequest
    ids = {d: trace_key(*resolved(TraceRequest.model_validate({"preset": "small", "variant": {"device": d}}), Settings.load(env={})))
           for d in ("CPU", "CPU:0", "CPU:00")}
    assert len(set(ids.values())) == 1, ids
    for device, why in (("CPU:1", "CPU has one instance; name it CPU"), ("METAL", "this server offers: CPU"), ("cpu", "this server offers: CPU")):
      r = client.post("/api/traces", json={"preset": "small", "variant": {"device": device}})
      assert r.status_code == 422 and why in r.json()["detail"], r.text
      assert "AMD" not in r.json()["detail"], "the 422 names devices this server does not offer"

def test_a_reproducer_names_a_device_tinygrad_reads(real_trace):
  from explorer.present.repro import repro_script
  trace = json.loads(real_trace.read_text())
  assert "os.environ.setdefault('DEV', 'CPU')" in repro_script({**trace, "env": {**trace["env"], "device": "CPU:0"}}, "x")
  indexed = repro_script({**trace, "env": {**trace["env"], "device": "CUDA:1"}}, "x")
  assert "os.environ.setdefault('DEV', 'CUDA')" in indexed and "device='CUDA:1')" in indexed

# ***** 6: one client, its share; every error is JSON; no scratch file outlives its worker *****

def test_a_client_is_its_socket_unless_the_operator_names_its_proxy(tmp_path):
  """A real server: X-Forwarded-For from loopback changes nobody's address (uvicorn would trust it from 127.0.0.1 by default, and a
  local client would escape its share); listed as a trusted proxy, loopback's header names the client."""
  forged = {"X-Forwarded-For": "203.0.113.9"}
  with running_server(tmp_path / "s.sqlite3", tmp_path) as base:
    assert "db" in httpx.get(f"{base}/api/health", headers=forged, timeout=30).json()  # still the loopback client it is
  with running_server(tmp_path / "s.sqlite3", tmp_path, log_name="proxied.log", trusted_proxies="127.0.0.1") as base:
    assert "db" not in httpx.get(f"{base}/api/health", headers=forged, timeout=30).json()  # the proxy says 203.0.113.9
    assert "db" in httpx.get(f"{base}/api/health", timeout=30).json()
  with pytest.raises(ValueError, match="TRUSTED_PROXIES.*not an IP address"): Settings.load(env={}, trusted_proxies="10.0.0.1,proxy.example")

def test_one_client_gets_its_share_of_the_queue(tmp_path):
  from test_web_api import GatedRunner
  runner = GatedRunner()
  app = app_over(str(tmp_path / "c.sqlite3"), max_jobs_per_client=2, max_workers=1, runner=runner)
  with TestClient(app) as client:
    try:
      first = [client.post("/api/traces", json=tiny(c)) for c in (2, 3)]
      assert [r.status_code for r in first] == [202, 202]
      again = client.post("/api/traces", json=tiny(2))  # joining its own running trace is free
      third = client.post("/api/traces", json=tiny(4))
      assert again.status_code == 202 and third.status_code == 429 and third.headers["retry-after"] == "30", third.text
      assert "max_jobs_per_client" in third.json()["detail"]
    finally: runner.release()

def test_one_client_never_holds_every_worker(tmp_path):
  """With two trace workers, one client's second trace waits for its first (its share runs on all but one worker) while another
  client's trace starts at once."""
  from test_web_api import GatedRunner
  runner = GatedRunner()
  app = app_over(str(tmp_path / "w.sqlite3"), max_workers=2, runner=runner)
  with TestClient(app) as one, TestClient(app, client=("192.0.2.2", 50000)) as another:
    try:
      assert [one.post("/api/traces", json=tiny(c)).status_code for c in (2, 3)] == [202, 202]
      time.sleep(0.5)
      assert runner.calls == 1, "one client's traces ran on both workers"
      assert another.post("/api/traces", json=tiny(4)).status_code == 202
      deadline = time.monotonic() + 10
      while runner.calls < 2: assert time.monotonic() < deadline, "another client's trace waited behind the first client's"; time.sleep(0.05)
    finally: runner.release()

def test_a_bug_answers_one_line_of_json(tmp_path):
  app = app_over(str(tmp_path / "e.sqlite3"))
  app.state.services.store.put_trace("badc0ffee0000000", {"spec": None, "label": "x", "kernels": ["not a kernel"], "env": {}}, b"")  # a bug
  with TestClient(app, raise_server_exceptions=False) as client:
    r = client.get("/api/traces/badc0ffee0000000")
    assert r.status_code == 500 and r.headers["content-type"] == "application/json", r.text
    assert r.json()["detail"].startswith("the server failed: ") and "\n" not in r.json()["detail"] and "Traceback" not in r.text

def test_a_killed_workers_scratch_files_go_with_it():
  from explorer.tracing.workers.process import Limits, WorkerTimedOut, call_in_worker
  seen: list[str] = []
  with pytest.raises(WorkerTimedOut):
    call_in_worker("tests.worker_faults:scratch", {}, lambda stage, status, detail: seen.append(detail), limits=Limits(timeout_s=8))
  (made,) = seen
  assert "kernel-explorer-worker-" in made and not os.path.exists(made)
  assert not os.path.exists(os.path.dirname(made)), "the worker's scratch directory outlived it"

def busy_kinds() -> list[type]:
  """Every Busy the services raise (each module imported, so each subclass is defined)."""
  import importlib
  import pkgutil
  import explorer.web.services as services
  from explorer.web.services.lifecycle import Busy
  for m in pkgutil.iter_modules(services.__path__): importlib.import_module(f"explorer.web.services.{m.name}")
  kinds, todo = [], [Busy]
  while todo: kinds.append(kind := todo.pop()); todo += kind.__subclasses__()
  return kinds

def test_every_refusal_for_lack_of_room_says_when_to_come_back(tmp_path):
  """A 503 or 429 always carries Retry-After: the services raise Busy (each kind answered through the app's one handler, as JSON and
  as the error page), the request limits answer their own with the header, and no route writes a 503 or 429 by hand."""
  import ast
  from fastapi import APIRouter
  kinds = busy_kinds()
  assert {k.__name__ for k in kinds} >= {"Busy", "QueueFull", "ClientBusy", "QueueDown", "GraphBusy", "DevicesUnavailable"}
  app, router = app_over(tmp_path / "b.sqlite3"), APIRouter()
  for i, kind in enumerate(kinds):
    def raiser(kind: type = kind) -> None: raise kind(f"no room ({kind.__name__})")
    router.add_api_route(f"/api/busy/{i}", raiser)
    router.add_api_route(f"/busy/{i}", raiser)
  app.include_router(router)
  with TestClient(app) as client:
    for i, kind in enumerate(kinds):
      for path, accept in ((f"/api/busy/{i}", "application/json"), (f"/busy/{i}", "text/html")):
        r = client.get(path, headers={"accept": accept})
        assert r.status_code == kind.status and r.headers["retry-after"] == str(kind.retry_after_s), (kind, path, r.text[:200])
        assert f"no room ({kind.__name__})" in r.text
  for path in (REPO / "explorer").rglob("*.py"):
    for node in ast.walk(ast.parse(path.read_text())):
      if not isinstance(node, ast.Call) or len(node.args) < 2: continue
      name, status = ast.unparse(node.func), node.args[1] if ast.unparse(node.func) == "respond" else node.args[0]
      if not isinstance(status, ast.Constant) or status.value not in (429, 503): continue
      where = f"{path.relative_to(REPO)}:{node.lineno}"
      assert name == "respond", f"{where}: {name} answers {status.value} by hand; raise a Busy (explorer.web.services.lifecycle)"
      assert len(node.args) >= 4 and "retry-after" in ast.unparse(node.args[3]), f"{where}: a {status.value} without Retry-After"
