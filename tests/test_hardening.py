"""Hardening, proved: workers that crash, hang, run out of memory or are killed fail alone (through the server's own job path) while
another trace completes and /api/health keeps answering; graph workers are replaced when they die or hang; timing is serialized per
device; every input is bounded; bodies, URLs, cross-site posts and foreign Host headers are refused; the token is required beyond
loopback; annotations are escaped wherever they render; no user data is ever evaluated or unpickled; every setting is documented."""
from __future__ import annotations
import ast
import dataclasses
import logging
import os
import pathlib
import signal
import threading
import time
import pytest
from conftest import REPO, wait_done
from fastapi.testclient import TestClient
from support import app_over, copy_store
from explorer.settings import ENV_PREFIX, SETTINGS, Settings
from explorer.spec import ConvSpec
from explorer.store import Store
from explorer.tracing.pipeline.run import run_trace
from explorer.tracing.workers.devicelock import DeviceLock
from explorer.tracing.workers.process import Limits, WorkerFailed, call_in_worker

TINY = {"batch": 1, "cin": 2, "cout": 2, "height": 8, "width": 8, "kernel": 3}
FAST = {"targets": ["cuda"], "warmup": 1, "repeats": 3}

@pytest.fixture(autouse=True)
def private_locks(tmp_path, monkeypatch):
  """Device locks in this test's own folder: nothing else on the host waits for these tests' timing, nor they for it."""
  monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))

# ***** faults through the server's job path *****

FAULTS = {3: ("segfault", "SIGSEGV"), 4: ("hang", "time limit of 12s"), 5: ("hog", "MemoryError"), 6: ("killed", "SIGKILL"),
          7: ("assertion", "AssertionError: an assertion inside tinygrad")}

def fault_runner(settings: Settings):
  """The job runner for these tests: real traces, except specs whose cin names a fault, which run that fault in a real worker
  under the server's own limits. Test-only (create_app's runner argument): nothing in the public API can reach it."""
  limits = Limits.from_settings(settings)
  def run(spec: ConvSpec, variant, progress, timeout_s: float):
    if spec.cin in FAULTS:
      call_in_worker(f"tests.worker_faults:{FAULTS[spec.cin][0]}", {}, progress, timeout_s, limits=limits)
      raise AssertionError("a fault worker returned")
    return run_trace(spec, variant, progress, timeout_s, limits=limits)
  return run

def post(client: TestClient, body: dict) -> str:
  r = client.post("/api/traces", json=body)
  assert r.status_code in (200, 202), r.text
  return r.json()["id"]

def test_crashing_hanging_and_hungry_workers_fail_alone(tmp_path):
  settings = Settings.load(env={}, max_workers=3, trace_timeout_s=12, worker_memory_mb=1536, max_jobs_per_client=0)  # one client, many jobs
  app = app_over(tmp_path / "f.sqlite3", settings=settings, runner=fault_runner(settings))
  with TestClient(app) as client:
    hang = post(client, {"spec": {**TINY, "cin": 4}, "variant": FAST})
    good = post(client, {"spec": TINY, "variant": FAST})
    faults = {cin: post(client, {"spec": {**TINY, "cin": cin}, "variant": FAST}) for cin in FAULTS if cin != 4} | {4: hang}
    slowest, deadline = 0.0, time.monotonic() + 120
    while any(client.get(f"/api/traces/{i}/status").json()["status"] in ("queued", "running") for i in [good, *faults.values()]):
      t0 = time.monotonic()
      assert client.get("/api/health").status_code == 200
      slowest = max(slowest, time.monotonic() - t0)
      assert time.monotonic() < deadline, "the jobs did not finish"
      time.sleep(0.1)
    assert slowest < 1.0, f"/api/health took {slowest:.2f}s while workers crashed"
    for cin, trace_id in faults.items():
      s = client.get(f"/api/traces/{trace_id}/status").json()
      assert s["status"] == "error" and FAULTS[cin][1] in s["error"], (FAULTS[cin], s["error"])
      assert client.get(f"/t/{trace_id}").status_code == 200 and client.get(f"/api/traces/{trace_id}").status_code == 404
    assert client.get(f"/api/traces/{good}/status").json()["status"] == "done"
    assert client.get(f"/api/traces/{good}").json()["status"] == "ok"
    store = Store(tmp_path / "f.sqlite3")  # the store as another process would see it: the good trace only
    assert store.has_trace(good) and not any(store.has_trace(i) for i in faults.values())
    again = post(client, {"spec": TINY, "variant": {**FAST, "opt": "none"}})  # the workers recovered: a new trace runs
    assert wait_done(client, again, 120)["status"] == "done"

def test_memory_of_the_whole_worker_group_is_watched():
  """Each process stays under its data limit, the group together goes over: the parent stops the group, orphans included."""
  pids: list[int] = []
  def progress(stage: str, status: str, detail: str) -> None:
    if stage == "hog": pids.extend(int(p) for p in detail.split(","))
  with pytest.raises(WorkerFailed, match="over the memory limit of 400 MiB; it was stopped"):
    call_in_worker("tests.worker_faults:spawn_hog", {"mb": 250, "n": 2}, progress, timeout_s=60, limits=Limits(memory_mb=400))
  assert len(pids) == 2
  time.sleep(0.2)
  assert not [p for p in pids if alive(p)], "the worker's children outlived it"

def alive(pid: int) -> bool:
  try: state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
  except (OSError, IndexError): return False
  return state not in ("Z", "X")

# ***** timing: one measurement per device at a time *****

def test_timing_stages_on_one_device_never_overlap(tmp_path):
  log, said = tmp_path / "log", []
  def measure(device: str, name: str) -> None:
    call_in_worker("tests.worker_faults:measure", {"device": device, "log": str(log), "hold_s": 0.8, "name": name},
                   lambda *a: said.append((name, *a)), timeout_s=60)
  threads = [threading.Thread(target=measure, args=a) for a in (("CPU", "a"), ("CPU", "b"), ("OTHER", "c"))]
  for t in threads: t.start()
  for t in threads: t.join()
  spans = {name: (float(s), float(e)) for name, s, e in (line.split() for line in log.read_text().splitlines())}
  (s1, e1), (s2, e2) = sorted([spans["a"], spans["b"]])
  assert e1 <= s2, f"two CPU measurements overlapped: {spans}"
  assert spans["c"][0] < max(e1, e2) and spans["c"][1] > min(s1, s2), "another device's measurement should not wait"
  assert any("waiting for the CPU device" in x[3] for x in said)

def test_a_real_trace_job_waits_for_its_device(tmp_path):
  """Someone else holds the CPU's timing lock: the trace runs up to its timing stage, waits there (the page says so), then finishes."""
  held = DeviceLock("CPU")
  assert held.try_acquire()
  try:
    app = app_over(str(tmp_path / "d.sqlite3"))
    with TestClient(app) as client:
      trace_id = post(client, {"spec": TINY, "variant": {**FAST, "device": "CPU"}})
      deadline = time.monotonic() + 120
      while "waiting for the CPU device" not in (timing := client.get(f"/api/traces/{trace_id}/status").json()["stages"][-1])["detail"]:
        assert time.monotonic() < deadline, timing
        time.sleep(0.1)
      time.sleep(0.5)
      assert client.get(f"/api/traces/{trace_id}/status").json()["status"] == "running"
      held.release()
      assert wait_done(client, trace_id, 60)["status"] == "done"
      assert client.get(f"/api/traces/{trace_id}").json()["timing"]["repeats"] == 3
  finally: held.release()

# ***** graph workers: replaced when they die or hang, bounded, capped *****

@pytest.fixture
def copied(web_db, small_trace, tmp_path) -> tuple[str, str]:
  """A copy of the session's store (the real `small` trace) with no cached graphs: every graph request expands in a worker."""
  path = tmp_path / "copy.sqlite3"
  copy_store(web_db, path)
  Store(path).clear_cache()
  return str(path), small_trace

def wait_for_worker(pool, timeout_s: float = 30.0) -> list:
  deadline = time.monotonic() + timeout_s
  while not (procs := [p for p in pool.processes() if p.is_alive()]):
    assert time.monotonic() < deadline, "no graph worker started"
    time.sleep(0.02)
  return procs

def test_graph_workers_are_replaced_when_they_die_or_hang(copied):
  db, trace_id = copied
  app = app_over(db)
  with TestClient(app) as client:
    pool, url = app.state.services.graphs.pool, f"/api/traces/{trace_id}/graphs"
    got: dict = {}
    t = threading.Thread(target=lambda: got.update(r=client.get(f"{url}/ast/0")))
    t.start()
    for p in wait_for_worker(pool): os.kill(p.pid, signal.SIGKILL)  # killed mid-expansion (it is still importing tinygrad)
    t.join()
    assert got["r"].status_code == 409 and "died" in got["r"].json()["detail"]
    assert client.get(f"{url}/ast/0").status_code == 200 and pool.replaced == 1  # the next request runs on a fresh pool
    for p in wait_for_worker(pool):  # killed while idle: noticed before the next call, which does not fail
      p.kill(); p.join()
    assert client.get(f"{url}/ast/1").status_code == 200 and pool.replaced == 2
    pool.limits = dataclasses.replace(pool.limits, timeout_s=0.2)  # hangs past its limit (a cold process takes longer to import tinygrad)
    pool.kill()
    r = client.get(f"{url}/ast/2")
    assert r.status_code == 409 and "took over" in r.json()["detail"]
    pool.limits = dataclasses.replace(pool.limits, timeout_s=120, max_output_mb=1000 / 2**20)  # a result over the output cap
    r = client.get(f"{url}/tensor")
    assert r.status_code == 409 and "output cap" in r.json()["detail"]
    pool.limits = dataclasses.replace(pool.limits, max_output_mb=256)
    assert client.get(f"{url}/tensor").status_code == 200 and client.get("/api/health").status_code == 200

def test_graph_requests_past_the_waiting_bound_get_503(copied):
  db, trace_id = copied
  app = app_over(db, max_graph_queue=0)
  with TestClient(app) as client:
    got: dict = {}
    t = threading.Thread(target=lambda: got.update(r=client.get(f"/api/traces/{trace_id}/graphs/ast/0")))
    t.start()
    wait_for_worker(app.state.services.graphs.pool)
    busy = client.get(f"/api/traces/{trace_id}/graphs/ast/1")
    t.join()
    assert busy.status_code == 503 and busy.headers["retry-after"] and "waiting" in busy.json()["detail"]
    assert got["r"].status_code == 200

# ***** input: every field bounded, bodies and URLs limited, unknown fields rejected *****

BOUNDS = [
  ({"spec": {**TINY, "height": 5000}}, "spec.height"),
  ({"spec": {**TINY, "batch": 10**12}}, "spec.batch"),
  ({"spec": {**TINY, "kernel": "3; import os"}}, "spec.kernel"),
  ({"spec": TINY, "variant": {"repeats": 1001}}, "variant.repeats"),
  ({"spec": TINY, "variant": {"warmup": 10**9}}, "variant.warmup"),
  ({"spec": TINY, "variant": {"repeats": 200}}, "repeats"),              # over this server's max_repeats (100)
  ({"spec": TINY, "variant": {"opt": "beam:5"}}, "beam width 5"),        # over this server's max_beam (4)
  ({"spec": TINY, "variant": {"opt": "beam:" + "9" * 40}}, "variant.opt"),
  ({"spec": TINY, "variant": {"targets": ["cuda"] * 8}}, "variant.targets"),
  ({"spec": TINY, "variant": {"device": "CPU" * 20}}, "variant.device"),
  ({"spec": TINY, "variant": {"device": "__import__('os')"}}, "variant.device"),
  ({"preset": "x" * 1500}, "preset"),
  ({"spec": TINY, "variant": {"algo": "direct", "code": "print(1)"}}, "variant.code"),
  ({"spec": {**TINY, "extra": {"nested": 1}}}, "spec.extra"),
  ({"spec": TINY, "callback": "http://elsewhere"}, "callback"),
]

@pytest.fixture
def limited(tmp_path):
  settings = Settings.load(env={}, max_repeats=100, max_beam=4, max_body_bytes=2048)
  def never(*a):
    raise AssertionError("no trace should start")
  app = app_over(tmp_path / "l.sqlite3", settings=settings, runner=never)
  with TestClient(app) as client: yield client, app

@pytest.mark.parametrize("body,where", BOUNDS)
def test_every_field_is_bounded(limited, body, where):
  client, app = limited
  r = client.post("/api/traces", json=body)
  assert r.status_code == 422 and where in r.json()["detail"], r.text
  assert app.state.services.jobs.runs == 0

def test_bodies_and_urls_are_limited(limited):
  client, _ = limited
  big = b'{"preset": "small", "variant": {"targets": [' + b'"cuda", ' * 400 + b'"cuda"]}}'
  assert client.post("/api/traces", content=big, headers={"content-type": "application/json"}).status_code == 413
  chunks = iter([b'{"preset": "small", ', b" " * 4096, b"}"])  # no Content-Length: counted as it streams
  r = client.post("/api/traces", content=chunks, headers={"content-type": "application/json"})
  assert r.status_code == 413 and "2048 bytes" in r.json()["detail"]
  assert client.post("/t", content=iter([b"preset=small&" * 400]), headers={"content-type": "application/x-www-form-urlencoded"}).status_code == 413
  assert client.get("/api/traces/" + "a" * 9000).status_code == 414
  assert client.get("/api/traces/" + "a" * 500).status_code == 404

def test_cross_site_posts_are_refused(limited):
  client, _ = limited
  for headers in ({"origin": "http://evil.example"}, {"origin": "null"}, {"sec-fetch-site": "cross-site"}):
    r = client.post("/api/traces", json={"preset": "small", "variant": {"repeats": 1001}}, headers=headers)
    assert r.status_code == 403 and "cross-site" in r.json()["detail"], headers
    assert client.post("/t", data={"preset": "small"}, headers=headers).status_code == 403
  same = client.post("/api/traces", json={"preset": "small", "variant": {"repeats": 1001}}, headers={"origin": "http://testserver"})
  assert same.status_code == 422  # same origin: through to validation

def test_safety_headers(limited):
  client, _ = limited
  for url in ("/", "/api/health", "/nope"):
    h = client.get(url).headers
    assert h["x-content-type-options"] == "nosniff" and h["x-frame-options"] == "DENY" and "frame-ancestors 'none'" in h["content-security-policy"]

def test_queue_full_on_the_form_is_503_with_retry_after(tmp_path):
  gate = threading.Event()
  def slow(spec, variant, progress, timeout_s):
    assert gate.wait(30)
    raise WorkerFailed("stopped by the test")
  app = app_over(str(tmp_path / "q.sqlite3"), max_workers=1, max_queue=1, runner=slow)
  with TestClient(app) as client:
    try:
      assert client.post("/api/traces", json={"preset": "small"}).status_code == 202  # runs
      time.sleep(0.3)
      assert client.post("/api/traces", json={"preset": "wino8"}).status_code == 202  # waits
      r = client.post("/t", data={"preset": "wino16", "targets": ["cuda"], "warmup": "2", "repeats": "10"})
      assert r.status_code == 503 and r.headers["retry-after"] and "waiting for a worker" in r.text
      api = client.post("/api/traces", json={"preset": "medium"})
      assert api.status_code == 503 and api.headers["retry-after"]
    finally: gate.set()

# ***** exposure: the access token, loopback, what the server says at start *****

def test_the_token_is_required_and_compared_in_constant_time(tmp_path, monkeypatch):
  import explorer.web.http.access as access
  compared = []
  real = access.hmac.compare_digest
  monkeypatch.setattr(access.hmac, "compare_digest", lambda a, b: compared.append(1) or real(a, b))
  app = app_over(str(tmp_path / "t.sqlite3"), token="s3cret-token-0123456789", runner=lambda *a: None)
  with TestClient(app) as client:
    assert client.get("/api/health").status_code == 200
    for headers in ({}, {"X-Access-Token": "wrong"}, {"X-Access-Token": "s3cret-token-0123456789X"}, {"X-Access-Token": "s3cret-token-012345678"}):
      assert client.get("/api/traces", headers=headers).status_code == 401
      assert client.post("/api/traces", json={"preset": "small"}, headers=headers).status_code == 401
    assert app.state.services.jobs.runs == 0 and compared
    assert client.get("/api/traces", headers={"X-Access-Token": "s3cret-token-0123456789"}).status_code == 200
    client.cookies.set("ke_token", "s3cret-token-0123456789")
    assert client.get("/").status_code == 200

@pytest.fixture
def captured_serve(monkeypatch, capsys):
  """explorer.web.serving.serve up to uvicorn.run: the app it would serve, where, and what it printed."""
  import uvicorn
  got: dict = {}
  monkeypatch.setattr(uvicorn, "run", lambda app, host, port, **kw: got.update(app=app, host=host, port=port))
  monkeypatch.setattr("explorer.web.serving.port_taken", lambda host, port: None)  # nothing listens: uvicorn.run is not run
  for s in SETTINGS: monkeypatch.delenv(ENV_PREFIX + s.name.upper(), raising=False)
  saved = dict(os.environ)
  def serve(*args, **kwargs) -> tuple[dict, str]:
    from explorer.web.serving import serve as _serve
    _serve(*args, **kwargs)
    return got, capsys.readouterr().err
  yield serve
  os.environ.clear()  # serve exports its flags (KERNEL_EXPLORER_*): none may reach the tests after this one
  os.environ.update(saved)

def test_serving_beyond_loopback_needs_the_token_and_says_so(tmp_path, monkeypatch, captured_serve):
  with pytest.raises(SystemExit, match="needs an access token"): captured_serve("0.0.0.0", 8000, str(tmp_path / "a.sqlite3"))
  monkeypatch.setenv("KERNEL_EXPLORER_TOKEN", "t0ken-t0ken-t0ken-1")
  got, said = captured_serve("0.0.0.0", 8000, str(tmp_path / "a.sqlite3"))
  assert got["host"] == "0.0.0.0" and "every request needs the access token" in said and "t0ken-t0ken-t0ken-1" not in said
  with TestClient(got["app"]) as client:
    assert client.get("/api/traces").status_code == 401
    assert client.get("/api/traces", headers={"X-Access-Token": "t0ken-t0ken-t0ken-1"}).status_code == 200
    assert client.get("/api/health", headers={"host": "example.org"}).status_code == 200  # beyond loopback: any Host, with the token
  access = logging.getLogger("uvicorn.access")  # the link that sets the cookie carries the token: the access log does not
  args = ("10.0.0.2:5", "GET", "/?token=t0ken-t0ken-t0ken-1", "1.1", 303)
  line = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d', args, None)
  assert access.filter(line) and "t0ken-t0ken-t0ken-1" not in line.getMessage() and "token=***" in line.getMessage()

def test_loopback_serving_pins_the_host_header(tmp_path, captured_serve):
  got, said = captured_serve("127.0.0.1", 8000, str(tmp_path / "b.sqlite3"))
  assert "loopback only" in said and "limits:" in said
  with TestClient(got["app"]) as client:
    r = client.get("/api/health", headers={"host": "rebound.example:8000"})
    assert r.status_code == 403 and "loopback" in r.json()["detail"]
    for host in ("127.0.0.1:8000", "localhost:8000", "[::1]:8000"): assert client.get("/api/health", headers={"host": host}).status_code == 200

def test_a_port_in_use_is_said_in_one_line(tmp_path):
  """A port something listens on (tinygrad's VIZ=1 viewer on 8000, say): one line naming it and the flag to change, before any app
  starts; a free one passes."""
  import socket
  from explorer.web.serving import port_taken, serve
  with socket.socket() as taken:
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    with pytest.raises(SystemExit, match=f"127.0.0.1:{port} is in use: serve on another port"): serve("127.0.0.1", port, str(tmp_path / "c.sqlite3"))
  assert port_taken("127.0.0.1", port) is None

# ***** settings: one table, every entry documented, every entry a serve flag *****

def test_every_setting_is_documented_in_the_settings_page():
  page = (REPO / "docs" / "reference" / "settings.md").read_text()
  rows = {line.split("|")[1].strip().strip("`") for line in page.splitlines() if line.startswith("| `KERNEL_EXPLORER_")}
  names = {ENV_PREFIX + s.name.upper() for s in SETTINGS}
  assert not names - rows, f"settings missing from docs/reference/settings.md's table: {sorted(names - rows)}"
  assert not rows - names, f"docs/reference/settings.md documents settings that do not exist: {sorted(rows - names)}"

def test_every_setting_is_a_serve_flag(captured_serve, tmp_path):
  from explorer.cli.main import SECRET_OR_SHARED, build_parser
  flags = {a.dest for a in build_parser()._subparsers._group_actions[0].choices["serve"]._actions}  # type: ignore[union-attr]
  assert {f"set_{s.name}" for s in SETTINGS if s.name not in SECRET_OR_SHARED} <= flags
  got, said = captured_serve("127.0.0.1", 8000, str(tmp_path / "c.sqlite3"), max_queue=3, trace_timeout_s=30.0)
  s = got["app"].state.services.settings
  assert s.max_queue == 3 and s.trace_timeout_s == 30.0 and got["app"].state.services.jobs.max_queue == 3 and "3 queued" in said
  assert os.environ["KERNEL_EXPLORER_MAX_QUEUE"] == "3" and Limits.from_settings() == Limits.from_settings(s)  # workers agree

def test_settings_are_checked():
  with pytest.raises(ValueError, match="KERNEL_EXPLORER_MAX_QUEUE: Input should be a valid integer"):
    Settings.load(env={"KERNEL_EXPLORER_MAX_QUEUE": "lots"})
  with pytest.raises(ValueError, match="KERNEL_EXPLORER_WORKER_MEMORY_MB: Input should be greater than or equal to 0"):
    Settings.load(env={"KERNEL_EXPLORER_WORKER_MEMORY_MB": "-1"})
  with pytest.raises(ValueError, match="unknown setting"): Settings.load(env={}, max_qeue=3)

# ***** nothing a client sends is evaluated or unpickled *****

DANGEROUS = {"eval", "exec", "compile", "__import__", "pickle.loads", "pickle.load", "marshal.loads", "yaml.load", "shelve.open", "dill.loads",
             "importlib.import_module", "os.system", "subprocess.getoutput"}
ALLOWED = {("explorer/tracing/workers/process.py", "pickle.loads"),            # the result our own worker process sent back
           ("explorer/tracing/workers/process.py", "pickle.load"),             # a worker's call, from its parent, on a pipe only the two hold
           ("explorer/tracing/workers/process.py", "importlib.import_module"),  # the worker's target: a constant module path (checked below)
           # a worker forked from a template: the template's messages to its parent (pids, exit statuses), its own start and each
           # child's call, from its parent, on a socket pair and pipes only the two hold
           ("explorer/tracing/workers/template.py", "pickle.loads"), ("explorer/tracing/workers/template_process.py", "pickle.load"),
           # `kernel-explorer trace --script`: the user's own script, in a worker, from the command line only (checked below)
           ("explorer/tracing/pipeline/program.py", "compile"), ("explorer/tracing/pipeline/program.py", "exec"),
           # the templates' compiled code, read back from this package's own __pycache__ as Python reads a .pyc: the same place and the
           # same trust as the code itself (a file that does not match its template's checksum and this Python is compiled again)
           ("explorer/present/render.py", "marshal.loads")}
# where a trace and its rewrite blob may be stored: a finished trace job's worker result, a study's own workers' traces, and the Python
# API's (the user's own process, into their own store)
STORES_TRACES = {"explorer/web/services/traces.py", "explorer/web/services/studies.py", "explorer/api.py"}

def dotted(node: ast.AST) -> str | None:
  """a.b.c for a chain of names and attributes, else None."""
  if isinstance(node, ast.Name): return node.id
  if isinstance(node, ast.Attribute) and (base := dotted(node.value)) is not None: return f"{base}.{node.attr}"
  return None

def calls(path: pathlib.Path) -> list[tuple[str, ast.Call]]:
  nodes = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)]
  return [(name, n) for n in nodes if (name := dotted(n.func)) is not None]

def unpicklers(tree: ast.AST) -> list[ast.ClassDef]:
  return [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and any(dotted(b) in ("pickle.Unpickler", "Unpickler") for b in n.bases)]

def test_no_user_data_is_evaluated_or_unpickled():
  """Rewrite blobs load through explorer.tracing.tg's own unpicklers, each of which looks up no name it was not given: the data
  format's admits none at all, the older format's only the classes of tinygrad's rewrite log."""
  sources = sorted((REPO / "explorer").rglob("*.py"))
  found_unpicklers = {(p.relative_to(REPO).as_posix(), c.name) for p in sources for c in unpicklers(ast.parse(p.read_text()))}
  assert found_unpicklers == {("explorer/blob.py", "PlainData"), ("explorer/tracing/tg/rewritelog.py", "_LegacyUnpickler")}
  for p in sources:
    for c in unpicklers(ast.parse(p.read_text())):
      assert {f.name for f in c.body if isinstance(f, ast.FunctionDef)} >= {"find_class", "persistent_load"}, f"{p}: {c.name}"
  def constant_import(name: str, node: ast.Call) -> bool:
    return name in ("__import__", "importlib.import_module") and bool(node.args) and isinstance(node.args[0], ast.Constant)
  found = {(p.relative_to(REPO).as_posix(), n) for p in sources for n, node in calls(p) if n in DANGEROUS and not constant_import(n, node)}
  assert found <= ALLOWED, f"evaluation or unpickling outside the audited places: {sorted(found - ALLOWED)}"
  for p in sources:
    where = p.relative_to(REPO).as_posix()
    for name, node in calls(p):
      if name == "call_in_worker":  # the worker's target is always a constant in our own package
        assert isinstance(node.args[0], ast.Constant) and node.args[0].value.startswith("explorer."), f"{where}:{node.lineno}"
      if name.split(".")[-1] in ("run", "Popen", "call", "check_output", "check_call") and name.startswith("subprocess"):
        assert not any(k.arg == "shell" for k in node.keywords), f"{where}:{node.lineno} runs a shell"
    for node in ast.walk(ast.parse(p.read_text())):  # rewrite blobs reach the store only from our own workers or the user's own process
      if isinstance(node, ast.Attribute) and node.attr == "put_trace": assert where in STORES_TRACES, f"{where}:{node.lineno} stores a trace"
      if isinstance(node, ast.Constant) and node.value == "explorer.tracing.pipeline.program:script_in_worker":
        assert where == "explorer/tracing/pipeline/run.py", f"{where}:{node.lineno} runs a user's script"
      if isinstance(node, ast.Name) and node.id == "run_script": assert where in ("explorer/tracing/pipeline/run.py", "explorer/cli/main.py"), where

def test_no_endpoint_accepts_uploads(web_client):
  spec = web_client.get("/openapi.json").json()
  types = {ct for path in spec["paths"].values() for op in path.values() for ct in (op.get("requestBody") or {}).get("content", {})}
  assert types <= {"application/json"}, types
  import inspect
  from support import routes
  walked = [r for r in routes(web_client.app) if getattr(r, "endpoint", None) is not None and r.path.startswith("/api")]
  assert len(walked) > 30, "the walk missed the included routers' routes"
  for route in walked:
    for param in inspect.signature(route.endpoint).parameters.values():
      assert "UploadFile" not in str(param.annotation) and param.annotation not in (bytes, "bytes"), (route.path, param)

# ***** annotations are escaped wherever they render *****

PAYLOAD = "<script>alert('x')</script><img src=x onerror=alert(1)>"

def test_annotations_are_escaped_everywhere(copied):
  db, trace_id = copied
  app = app_over(db)
  with TestClient(app) as client:
    tour = client.get(f"/api/traces/{trace_id}/tour")
    assert tour.status_code == 200, "the annotations API is expected beside the tours (explorer/web/routes/tours.py)"
    step = tour.json()["steps"][0]["id"]
    r = client.post(f"/api/traces/{trace_id}/annotations", json={"anchor_kind": "step", "anchor": step, "text": PAYLOAD})
    assert r.status_code == 201, r.text
    api = client.get(f"/api/traces/{trace_id}/annotations")
    assert api.headers["content-type"].startswith("application/json") and api.json()[0]["text"] == PAYLOAD
    from support import routes
    pages = [r.path.replace("{trace_id}", trace_id).replace("{n}", "0") for r in routes(app)
             if (r.path or "").startswith("/t/{trace_id}") and "GET" in (r.methods or ())]
    assert len(pages) >= 6, "the walk missed the included routers' pages"
    kinds = [t["kind"] for t in client.get("/api/tours").json()]
    pages = [p for p in pages if "{" not in p] + [f"/t/{trace_id}/tour?step={step}", f"/diff/{trace_id}/{trace_id}", "/traces", "/",
                                                  f"/traces/{trace_id}/delete"] + [f"/tours/{k}?a={trace_id}&b={trace_id}" for k in kinds]
    escaped = 0
    for url in pages:
      page = client.get(url)
      if not page.headers.get("content-type", "").startswith("text/html"): continue
      assert "<script>alert" not in page.text and "<img src=x" not in page.text, url
      escaped += "&lt;script&gt;alert(" in page.text
    assert escaped >= 1, "no page showed the note"
