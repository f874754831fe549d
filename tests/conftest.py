"""Shared fixtures for the web tests: one real `small` trace and a module's own (`traced`), each made once per test run (support.
trace_once: as the app's job makes it) and served through the app's own POST, a TestClient over a real SQLite file, and a live uvicorn
server for the browser tests."""
from __future__ import annotations
import compileall
import contextlib
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any
import httpx
import pytest
from support import COMPILE_CACHE_VAR, RUN_DIR_VAR, app_over, seeded, settings_free_env

def _import_anyio_whole() -> None:
  """anyio (4.16) imports its parts on first use, from whichever thread uses them first (a TestClient's portal, a live server's), and
  pytest rewrites a plugin's modules as they are imported, with `ast.parse`. Python 3.11.7's parser counts its recursion depth per
  interpreter, not per thread (CPython gh-106905): two threads parsing at once fail with "AST constructor recursion depth mismatch".
  All of anyio is imported here, at collection, on the main thread."""
  import anyio
  for name in dir(anyio): getattr(anyio, name)

_import_anyio_whole()

REPO = pathlib.Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "test-artifacts"
SMALL_WINO = {"preset": "small", "variant": {"algo": "winograd", "targets": ["cuda", "metal"]}}  # the pages' other targets, asked for

# `make check`, the fast loop (docs/testing.md): these modules, less the tests that trace for long or run a CLI trace (named by a test
# or by the module fixture that traces), and the tests marked `check` elsewhere (a trace submitted and read in a real browser)
CHECK: dict[str, tuple[str, ...]] = {
  "test_architecture.py": (), "test_clocks.py": (), "test_notebook.py": (), "test_reference.py": (), "test_schema.py": (),
  "test_spec.py": (), "test_stable_layout.py": (), "test_stats.py": (), "test_winograd.py": (), "test_worker.py": (),
  "test_hostile_files.py": (), "test_stored_rows.py": (), "test_store.py": (), "test_store_pieces.py": (),
  "test_admission.py": (), "test_spec_marks.py": (), "test_versions.py": (),
  "test_docs.py": (), "test_api.py": ("test_diff_of_two_traces", "test_open_starts_a_server_when_none_answers_and_says_so"),
  "test_diff.py": ("runs", "staged_fused", "test_cli_two_flag_sets"), "test_roofline.py": ("test_cli_devices_and_trace_roofline",),
  "test_web_api.py": (),  # the API over the session's small trace: one trace, through the app's own job path
}

# ***** CPU seconds per test (benchmarks/suite_cpu.py reads them): this process's and its reaped children's (trace workers, servers,
# chromium), written per xdist worker at the session's end. A module's servers and browser count when they stop, which is in its last
# test's teardown here: booked to "MODULE::(module teardown)", not to that test *****

CPU_DIR = ARTIFACTS / "cpu"
_cpu: dict[str, float] = {}

def _cpu_now() -> float:
  import resource
  from explorer.tracing.workers.template import children_cpu_s  # workers forked from this process's templates, reaped by them
  own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
  return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime + children_cpu_s()

@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
  st = _cpu_now()
  try: return (yield)
  finally: _cpu[item.nodeid] = _cpu.get(item.nodeid, 0.0) + _cpu_now() - st

@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
  st = _cpu_now()
  try: return (yield)
  finally:
    if nextitem is None or nextitem.path != item.path:  # the module's fixtures end here: moved off the test to the module's own line
      spent = _cpu_now() - st
      _cpu[item.nodeid] = _cpu.get(item.nodeid, 0.0) - spent
      key = f"{item.nodeid.split('::', 1)[0]}::(module teardown)"
      _cpu[key] = _cpu.get(key, 0.0) + spent

def pytest_sessionfinish(session: pytest.Session) -> None:
  from explorer.tracing.workers.template import close_all
  close_all()  # reaped here, not left for an exit that might skip them: their CPU is the run's
  if not _cpu: return
  import json
  CPU_DIR.mkdir(parents=True, exist_ok=True)
  (CPU_DIR / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{os.getpid()}.json").write_text(json.dumps(_cpu))

def pytest_configure(config: pytest.Config) -> None:
  """The directory the run's processes share (support.run_dir), made by the first process before it starts the xdist workers."""
  if not hasattr(config, "workerinput") and RUN_DIR_VAR not in os.environ:
    os.environ[RUN_DIR_VAR] = tempfile.mkdtemp(prefix="ke-test-run-")
    config.add_cleanup(lambda: shutil.rmtree(os.environ.pop(RUN_DIR_VAR), ignore_errors=True))
    # the run's compile cache, shared by its processes and empty as it starts: each distinct kernel is compiled once per run, never
    # read from an earlier run's (the run's CPU seconds stay what a fresh machine's are)
    os.environ[COMPILE_CACHE_VAR] = os.path.join(os.environ[RUN_DIR_VAR], "compile-cache")
    # the explorer's bytecode, written where Python reads it even when the environment says not to write it (PYTHONDONTWRITEBYTECODE,
    # as on this project's machines): else each of the run's hundreds of processes (servers, CLIs, workers' templates, scripts)
    # compiles the modules it imports again, about 0.35 CPU s for the web app's. Only sources newer than their bytecode are compiled.
    for tree in ("explorer", "tests"): compileall.compile_dir(REPO / tree, quiet=1, workers=1)

@pytest.fixture(autouse=True)
def children_keep_their_environment() -> Iterator[None]:
  """tinygrad sets DEV in os.environ once it picks its default device in a process that imported it (for the processes it spawns; a test
  that uses tinygrad in the test process does): the servers later tests of this process start must not inherit it (their trace ids
  would name CPU, not the default device, and a trace made once per run for them would be traced again)."""
  before = os.environ.get("DEV")
  yield
  if before is None: os.environ.pop("DEV", None)
  else: os.environ["DEV"] = before

def pytest_addoption(parser: pytest.Parser) -> None:
  parser.addoption("--check", action="store_true", help="the fast loop only (make check): tests/conftest.py's CHECK and the tests marked check")

def _in_check(item: pytest.Item) -> bool:
  if item.get_closest_marker("check"): return True
  left_out = CHECK.get(item.path.name)
  return left_out is not None and not ({getattr(item, "originalname", item.name), *getattr(item, "fixturenames", ())} & set(left_out))

def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
  if config.getoption("--check"):
    kept, dropped = [i for i in items if _in_check(i)], [i for i in items if not _in_check(i)]
    if dropped: config.hook.pytest_deselected(items=dropped)
    items[:] = kept
  _own_ids(items)

def _own_ids(items: list[pytest.Item]) -> None:
  """schemathesis's items of one test share its node id (tests/test_fuzz.py::test_api_conforms_to_its_schema for every operation):
  pytest-xdist schedules by node id, so it would run one operation of each. Each gets an id of its own, from its name (which names the
  operation); tests/test_fuzz.py checks that every operation runs."""
  seen: dict[str, int] = {}
  for item in items: seen[item.nodeid] = seen.get(item.nodeid, 0) + 1
  for item in items:
    if seen[item.nodeid] > 1: _rename(item, f"{item.nodeid.rsplit('::', 1)[0]}::{item.name}")

def _rename(item: pytest.Item, nodeid: str) -> None:
  """A node's id set anew: pytest 9 keeps it as a NodeId (item._id), older ones (the GPU machines' pytest) as a string (item._nodeid)."""
  try:
    from _pytest.nodeid import coerce_node_id  # pytest 9
  except ImportError: item._nodeid = nodeid  # type: ignore[attr-defined]
  else: item._id = coerce_node_id(nodeid)  # type: ignore[attr-defined]

def wait_done(client, trace_id: str, timeout_s: float = 300.0) -> dict:
  """Trace trace_id's status once it is done or failed; client: the app's TestClient, or an httpx.Client on a live server's URL."""
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    status = client.get(f"/api/traces/{trace_id}/status").json()
    if status["status"] in ("done", "error"): return status
    time.sleep(0.2)
  raise TimeoutError(f"trace {trace_id} did not finish in {timeout_s}s")

def computed(client, url: str, timeout_s: float = 300.0, pending: Callable[[Any], bool] = lambda body: True, **params: str) -> Any:
  """url's answer through client (as wait_done's) once it is not 202 (work the request started and has not done: asked again, each
  202's body checked by pending); params: the query."""
  deadline = time.monotonic() + timeout_s
  while (r := client.get(url, params=params or None)).status_code == 202:
    assert pending(r.json()) and time.monotonic() < deadline, r.json()
    time.sleep(0.2)
  return r

def scheduled(client, trace_id: str, n: int, body: dict, timeout_s: float = 180.0) -> Any:
  """Kernel n of the trace scheduled by hand (POST .../opts with body), the answer once computed."""
  url = f"/api/traces/{trace_id}/kernels/{n}/opts"
  if (r := client.post(url, json=body)).status_code != 202: return r
  query = {"opts": ",".join(body.get("opts", [])), "from": body.get("from", "current"), **({"target": body["target"]} if "target" in body else {})}
  return computed(client, url, timeout_s, lambda answer: answer["kind"] == "opts", **query)

def trace_of(client, body: dict, timeout_s: float = 300.0) -> str:
  """POST a trace request (body: POST /api/traces's) through client, as wait_done's, and wait until it is done; its id."""
  r = client.post("/api/traces", json=body)
  assert r.status_code in (200, 202), r.text
  status = wait_done(client, r.json()["id"], timeout_s)
  assert status["status"] == "done", status
  return status["id"]

def trace_on(base: str, body: dict, timeout_s: float = 300.0) -> str:
  """trace_of on the live server at the URL base."""
  with httpx.Client(base_url=base, timeout=60) as client: return trace_of(client, body, timeout_s)

@pytest.fixture(scope="module")
def traced(request) -> str:
  """The id of a trace of what the module's `traces` mark names (pytestmark = pytest.mark.traces(body), body: POST /api/traces's),
  made once per test run (support.trace_once), put in the store of the server the module's tests talk to (the module's live_server
  where they use one, the session's web_client otherwise) and POSTed there as a user would, which serves it from that store."""
  mark = request.node.get_closest_marker("traces")
  assert mark, f"{request.module.__name__} asks for `traced` but names no trace: pytestmark = pytest.mark.traces(body)"
  if "live_server" in request.fixturenames: return shared_trace_on(request.getfixturevalue("live_server"), mark.args[0])
  return served(seeded(request.getfixturevalue("web_db"), mark.args[0]), trace_of(request.getfixturevalue("web_client"), mark.args[0]))

def shared_trace_on(base: str, body: dict) -> str:
  """trace_on for a test that reads a trace rather than watches one run: the run's one trace of body (support.trace_once), put in the
  live server's store, then POSTed, which serves it from there."""
  return served(seeded(SERVED[base], body), trace_on(base, body))

def served(stored: str, posted: str) -> str:
  assert stored == posted, f"the request was stored as {stored} but the server keys it {posted}: it traced again"
  return posted

@pytest.fixture(scope="session")
def web_db(tmp_path_factory) -> pathlib.Path:
  return tmp_path_factory.mktemp("web") / "traces.sqlite3"

@pytest.fixture(scope="session")
def web_client(web_db):
  from fastapi.testclient import TestClient
  app = app_over(str(web_db))
  with TestClient(app) as client: yield client

@pytest.fixture(scope="session")
def small_trace(web_db, web_client) -> str:
  """The id of the `small` Winograd trace, made once per test run and served through POST /api/traces (as `traced`)."""
  return served(seeded(web_db, SMALL_WINO), trace_of(web_client, SMALL_WINO))

def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]

SERVED: dict[str, pathlib.Path] = {}  # each live server's store, by its base URL

@contextlib.contextmanager
def running_server(db: pathlib.Path, log_dir: pathlib.Path, log_name: str = "server.log", **settings: object) -> Iterator[str]:
  """uvicorn in a subprocess on a free loopback port over db (settings: explorer.settings's, as serve's flags give them; no background
  enrichment unless asked); yields the base URL, stops the server after (SIGTERM)."""
  port = free_port()
  env = settings_free_env()
  settings = {"background_workers": 0, **settings}  # as app_over: background enrichment only where a test asks for it
  code = f"from explorer.web.serving import serve; serve('127.0.0.1', {port}, {str(db)!r}, **{settings!r})"
  log = open(log_dir / log_name, "w+")  # noqa: SIM115 - the process's log, open while it runs
  proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
  base = f"http://127.0.0.1:{port}"
  SERVED[base] = db
  try:
    deadline = time.monotonic() + 60
    while True:
      try:
        if httpx.get(f"{base}/api/health", timeout=2).status_code == 200: break
      except httpx.HTTPError: pass
      if proc.poll() is not None or time.monotonic() > deadline:
        log.seek(0)
        raise RuntimeError(f"the server did not start:\n{log.read()}")
      time.sleep(0.2)
    yield base
  finally:
    proc.terminate()
    try: proc.wait(timeout=10)
    except subprocess.TimeoutExpired: proc.kill()
    log.close()

@pytest.fixture(scope="module")
def live_server(tmp_path_factory):
  """A live server with a fresh database; yields the base URL."""
  with running_server(tmp_path_factory.mktemp("live") / "traces.sqlite3", tmp_path_factory.mktemp("live-log")) as base: yield base

# ***** the browser: Debian's chromium through playwright *****

CHROMIUM = "/usr/bin/chromium"
# without the background-networking flags chromium keeps dialing out, and this machine's closed network refuses it
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no {CHROMIUM}")
GRAPH_TIMEOUT_MS = 120_000

def launch_chromium(playwright):
  return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)

@pytest.fixture(scope="session")
def browser():
  """One Chromium per test process (about 1.6 CPU s a launch with its driver), shared by its modules: each test or module opens pages
  of its own (browser.new_page: a context of its own, no cookie or storage shared)."""
  sync_api = pytest.importorskip("playwright.sync_api")
  with sync_api.sync_playwright() as p:
    b = launch_chromium(p)
    yield b
    b.close()

@pytest.fixture(scope="module")
def errors() -> list[str]: return []

def watched_page(browser, errors: list[str], width: int = 1500, height: int = 950):
  """A new page of this size whose page errors and console errors are collected in `errors`."""
  ARTIFACTS.mkdir(exist_ok=True)
  pg = browser.new_page(viewport={"width": width, "height": height})
  pg.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
  pg.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
  return pg

@pytest.fixture(scope="module")
def page(browser, errors):
  """One page for a test module; page errors and console errors are collected in `errors`."""
  pg = watched_page(browser, errors)
  yield pg
  pg.close()

def uops_beside_the_line(pg, box) -> None:
  """The clicked line's UOps are lit beside it, in the window as it stands (no scrolling to find them): a UOp row of the line's lies
  right of the line's start and between the window's top and bottom."""
  got = box.evaluate("""b => { const l = b.querySelector('.lm-source .lm-hot').getBoundingClientRect();
    const rows = [...b.querySelectorAll('.uop-row.lm-hot')].map(r => r.getBoundingClientRect());
    return {line: [l.left, l.top], rows: rows.map(r => [r.left, r.top, r.bottom]), h: window.innerHeight}; }""")
  lx, _ = got["line"]
  assert any(x > lx + 100 and top >= 0 and bottom <= got["h"] for x, top, bottom in got["rows"]), got

def duplicate_ids(pg) -> list[str]:
  """The element ids the page holds more than once."""
  return pg.evaluate("() => { const n = {}; document.querySelectorAll('[id]').forEach(e => n[e.id] = (n[e.id] || 0) + 1);"
                     " return Object.keys(n).filter(k => n[k] > 1) }")

# the page's graph viewers by element id (static/viewer.js's map, no global): import() of the URL the page loaded answers its module
VIEWERS = "(await import('/static/viewer.js')).viewers"

def wait_graphs(pg) -> None:
  """Every graph viewer on the page has its SVG (or its error) in place."""
  pg.wait_for_function("() => [...document.querySelectorAll('.viewer')].every(v => v.dataset.loaded)", timeout=GRAPH_TIMEOUT_MS)
  for v in pg.query_selector_all(".viewer"): assert v.get_attribute("data-loaded") != "error", v.inner_text()
