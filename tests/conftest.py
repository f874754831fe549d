"""Shared fixtures for the web tests: one real `small` trace per session (through the app's own job path), a TestClient over
a real SQLite file, and a live uvicorn server for the browser tests."""
from __future__ import annotations
import contextlib, os, pathlib, socket, subprocess, sys, time
from typing import Iterator
import httpx
import pytest
from support import app_over

REPO = pathlib.Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "test-artifacts"
SMALL_WINO = {"preset": "small", "variant": {"algo": "winograd", "targets": ["cuda", "metal"]}}  # the pages' other targets, asked for

def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
  """schemathesis's items of one test share its node id (tests/test_fuzz.py::test_api_conforms_to_its_schema for every operation):
  pytest-xdist schedules by node id, so it would run one operation of each. Each gets an id of its own, from its name (which names the
  operation); tests/test_fuzz.py checks that every operation runs."""
  seen: dict[str, int] = {}
  for item in items: seen[item.nodeid] = seen.get(item.nodeid, 0) + 1
  from _pytest.nodeid import coerce_node_id  # pytest 9 keeps a node's id as a NodeId
  for item in items:
    if seen[item.nodeid] > 1: item._id = coerce_node_id(f"{item.nodeid.rsplit('::', 1)[0]}::{item.name}")

def wait_done(client, trace_id: str, timeout_s: float = 300.0) -> dict:
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    status = client.get(f"/api/traces/{trace_id}/status").json()
    if status["status"] in ("done", "error"): return status
    time.sleep(0.2)
  raise TimeoutError(f"trace {trace_id} did not finish in {timeout_s}s")

def trace_on(base: str, body: dict, timeout_s: float = 300.0) -> str:
  """POST a trace to a live server and wait until it is done (or failed); its id."""
  r = httpx.post(f"{base}/api/traces", json=body, timeout=60)
  trace_id, deadline = r.json()["id"], time.monotonic() + timeout_s
  while httpx.get(f"{base}/api/traces/{trace_id}/status", timeout=60).json()["status"] not in ("done", "error"):
    assert time.monotonic() < deadline, f"trace {trace_id} did not finish in {timeout_s}s"
    time.sleep(0.5)
  return trace_id

@pytest.fixture(scope="session")
def web_db(tmp_path_factory) -> pathlib.Path:
  return tmp_path_factory.mktemp("web") / "traces.sqlite3"

@pytest.fixture(scope="session")
def web_client(web_db):
  from fastapi.testclient import TestClient
  app = app_over(str(web_db))
  with TestClient(app) as client: yield client

@pytest.fixture(scope="session")
def small_trace(web_client) -> str:
  """The id of the `small` Winograd trace, run once for the session through POST /api/traces."""
  r = web_client.post("/api/traces", json=SMALL_WINO)
  assert r.status_code in (200, 202), r.text
  status = wait_done(web_client, r.json()["id"])
  assert status["status"] == "done", status
  return status["id"]

def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]

@contextlib.contextmanager
def running_server(db: pathlib.Path, log_dir: pathlib.Path, log_name: str = "server.log", **settings: object) -> Iterator[str]:
  """uvicorn in a subprocess on a free loopback port over db (settings: explorer.settings's, as serve's flags give them; no background
  enrichment unless asked); yields the base URL, stops the server after (SIGTERM)."""
  port = free_port()
  env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEL_EXPLORER_")}
  settings = {"background_workers": 0, **settings}  # as app_over: background enrichment only where a test asks for it
  code = f"from explorer.web.serving import serve; serve('127.0.0.1', {port}, {str(db)!r}, **{settings!r})"
  log = open(log_dir / log_name, "w+")
  proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
  base = f"http://127.0.0.1:{port}"
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

@pytest.fixture(scope="module")
def browser():
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

def wait_graphs(pg) -> None:
  """Every graph viewer on the page has its SVG (or its error) in place."""
  pg.wait_for_function("() => [...document.querySelectorAll('.viewer')].every(v => v.dataset.loaded)", timeout=GRAPH_TIMEOUT_MS)
  for v in pg.query_selector_all(".viewer"): assert v.get_attribute("data-loaded") != "error", v.inner_text()
