"""Lifecycle and exposure faults, each as it was found: a device name that wrote files, idle sockets that locked every client out,
workers that outlived a SIGKILLed server or a SIGTERMed CLI, jobs forgotten across a restart, trace workers at the server's own
priority, a queue that admitted fewer jobs than it should, and the small ones (paths in /api/health, cross-site GETs that start
work, short tokens, NUL in a search). Real servers in subprocesses, real workers, real signals."""
from __future__ import annotations
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time
import httpx
import pytest
from conftest import REPO, wait_done
from fastapi.testclient import TestClient
from servers import Server, descendants, post, stat_of, status, wait_for, worker_groups
from support import app_over, fake_result, minimal_trace, run_async
from explorer.settings import Settings
from explorer.store import Store
from explorer.tracing.workers.lifeline import group_members

# a trace that runs for a minute: a thousand timed repeats of the medium direct conv (killed long before)
SLOW = {"preset": "medium", "variant": {"algo": "direct", "targets": ["cuda"], "warmup": 0, "repeats": 1000}}
QUICK = {"spec": {"batch": 1, "cin": 2, "cout": 2, "height": 8, "width": 8, "kernel": 3}, "variant": {"targets": ["cuda"], "repeats": 2}}

@pytest.fixture(autouse=True)
def private_locks(tmp_path, monkeypatch):
  monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))

@pytest.fixture
def server(tmp_path):
  made: list[Server] = []
  def make(**env: str) -> Server:
    made.append(s := Server(tmp_path / "traces.sqlite3", tmp_path / "server.log", **env))
    return s.start()
  yield make
  for s in made: s.stop()

# ***** 0: devices from a list; idle sockets close and count for nothing *****

@pytest.mark.parametrize("device", ["DISK:KE_WRITTEN_BY_A_REQUEST", "TINYFS:127.0.0.1:9", "PYTHON", "NULL", "CPU/../x", "cpu"])
def test_a_device_outside_the_servers_list_is_refused_and_touches_nothing(tmp_path, device):
  app = app_over(str(tmp_path / "d.sqlite3"), runner=lambda *a: pytest.fail("a trace ran"))
  with TestClient(app) as client:
    r = client.post("/api/traces", json={"preset": "small", "variant": {"device": device}})
    assert r.status_code == 422, r.text
    assert "CPU" in r.json()["detail"] and app.state.services.jobs.runs == 0
  assert not (REPO / "KE_WRITTEN_BY_A_REQUEST").exists() and not pathlib.Path("KE_WRITTEN_BY_A_REQUEST").exists()

def test_only_the_devices_this_host_opens_are_offered(tmp_path):
  """The list is what a worker finds on the host (CPU here): a compute device the host lacks is refused too, naming the offer."""
  app = app_over(str(tmp_path / "d.sqlite3"))
  with TestClient(app) as client:
    r = client.post("/api/traces", json={"preset": "small", "variant": {"device": "METAL", "time": False}})
    assert r.status_code == 422 and "this server offers: CPU" in r.json()["detail"], r.text
    ok = client.post("/api/traces", json={**QUICK, "variant": {**QUICK["variant"], "device": "CPU"}})
    assert ok.status_code == 202, ok.text
    assert wait_done(client, ok.json()["id"], 120)["status"] == "done"

def test_the_cli_may_use_other_devices_with_a_warning():
  cmd = [sys.executable, "-m", "explorer.cli", "trace", "--shape", "1,1,1,4,4,3", "--device", "PYTHON", "--no-time", "--target", "cuda", "--quiet"]
  out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
  assert "warning: PYTHON is none of the compute devices" in out.stderr, out.stderr

def test_idle_and_half_sent_sockets_lock_nobody_out(server):
  s = server(KERNEL_EXPLORER_REQUEST_HEAD_TIMEOUT_S="3")
  socks = []
  for i in range(300):
    sk = socket.create_connection(("127.0.0.1", s.port))
    if i % 3 == 0: sk.sendall(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # a head never finished
    socks.append(sk)
  try:
    st = time.monotonic()
    r = httpx.get(f"{s.base}/api/health", timeout=5)
    assert r.status_code == 200 and time.monotonic() - st < 1.0, (r.status_code, time.monotonic() - st)
    assert httpx.get(f"{s.base}/api/presets", timeout=5).status_code == 200  # not only health: requests are counted, not sockets
    closed_by = time.monotonic() + 3 + 2  # the head timeout, and the server's margin to act on it
    for sk in socks:  # each read waits for its socket's close: the first about 3 s, the rest at once
      sk.settimeout(max(0.1, closed_by - time.monotonic()))
      assert sk.recv(1) == b""
  finally:
    for sk in socks: sk.close()

# ***** 1, 2: no worker outlives its server or its CLI *****

def running_worker(s: Server, trace_id: str) -> int:
  wait_for("the trace runs", lambda: status(s.base, trace_id)["status"] == "running", 60)
  assert s.proc is not None
  return wait_for("a worker group appears", lambda: (worker_groups(s.proc.pid) or [None])[0], 60)

def test_a_sigkilled_servers_workers_die_and_its_jobs_answer_after_a_restart(server):
  s = server(KERNEL_EXPLORER_MAX_WORKERS="1")
  slow, queued = post(s.base, SLOW), post(s.base, QUICK)
  pgid = running_worker(s, slow)
  ran = lambda: any(x["stage"] == "run" and x["status"] != "pending" for x in status(s.base, slow)["stages"])
  wait_for("the trace reaches its run stage", ran, 120)
  assert status(s.base, queued)["status"] == "queued"
  s.proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
  s.proc.wait()  # type: ignore[union-attr]
  wait_for("the worker's whole group is gone", lambda: not group_members(pgid), 10)
  s.start()  # a restart over the same store: every accepted id answers, none 404
  for trace_id in (slow, queued):
    got = status(s.base, trace_id)
    assert got["status"] == "interrupted" and "rerun" in got["error"], got
    assert "Re-run this trace" in httpx.get(f"{s.base}/t/{trace_id}", timeout=30).text
  r = httpx.post(f"{s.base}/api/traces/{queued}/rerun", timeout=30)  # the one click: the stored request runs again
  assert r.status_code == 202 and r.json()["id"] == queued, r.text
  finished = lambda: (got := status(s.base, queued))["status"] in ("done", "error") and got
  assert wait_for("the re-run finishes", finished, 120)["status"] == "done"

def test_a_sigtermed_server_stops_its_workers_and_marks_its_jobs(server):
  s = server(KERNEL_EXPLORER_MAX_WORKERS="1")
  slow, queued = post(s.base, SLOW), post(s.base, QUICK)
  pgid = running_worker(s, slow)
  s.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
  # its whole shutdown ran (measurements stopped, its record of the store it served gone), then it ended as SIGTERM's says
  assert s.proc.wait(timeout=20) == 128 + signal.SIGTERM  # type: ignore[union-attr]
  assert not group_members(pgid), "a worker outlived its server's SIGTERM"
  from explorer.web.serving import served_record
  assert not served_record(s.db).exists() and "Traceback" not in s.log.read_text(), s.log.read_text()[-2000:]
  store = Store(s.db)
  assert {store.get_task("trace", i)["status"] for i in (slow, queued)} == {"interrupted"}  # marked by the server itself as it stopped

# a script that realizes a small tensor every 0.1 s for a minute: what the command traces in a worker (killed long before)
SLOW_SCRIPT = "import time\nfrom tinygrad import Tensor\nfor _ in range(600):\n  (Tensor.ones(4) + 1).realize()\n  time.sleep(0.1)\n"

@pytest.mark.parametrize("how", ["convolution in the command", "script in a worker"])
def test_a_sigtermed_cli_leaves_no_process(tmp_path, how):
  """SIGTERM mid-trace: the command exits as the signal says and nothing it started outlives it, neither the render processes of a
  convolution it traces in its own process nor the worker (its own process group) of a script's trace."""
  if how == "script in a worker":
    (script := tmp_path / "slow.py").write_text(SLOW_SCRIPT)
    what = ["--script", str(script), "--no-time"]
  else: what = ["--preset", "medium", "--warmup", "0", "--repeats", "1000"]
  cmd = [sys.executable, "-m", "explorer.cli", "trace", *what, "--target", "cuda", "--quiet"]
  cli = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "XDG_RUNTIME_DIR": str(tmp_path)})
  if how == "script in a worker": started = {wait_for("the CLI starts a worker", lambda: (worker_groups(cli.pid) or [None])[0], 60)}
  else: started = wait_for("the CLI starts its render process", lambda: descendants(cli.pid), 60)
  time.sleep(1)  # mid-trace, past the start of what it started
  started |= descendants(cli.pid)
  cli.send_signal(signal.SIGTERM)
  assert cli.wait(timeout=10) == 128 + signal.SIGTERM, cli.stderr.read()  # type: ignore[union-attr]
  alive = lambda: {p for p in started if (st := stat_of(p)) is not None and st[0] != "Z"}
  wait_for("every process the CLI started is gone", lambda: not alive(), 5)

def test_a_cli_that_ends_normally_leaves_no_process(tmp_path):
  """A trace command in a session of its own: once it has exited, no process of that session is left, not its worker, its renders,
  nor multiprocessing's resource tracker (which would otherwise exit after the command, an orphan, and be a zombie until init reaps it)."""
  cmd = [sys.executable, "-m", "explorer.cli", "trace", "--preset", "small", "--target", "cuda,metal", "--no-time", "--quiet"]
  cli = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                         env={**os.environ, "XDG_RUNTIME_DIR": str(tmp_path)})
  assert cli.wait(timeout=300) == 0, cli.stderr.read()  # type: ignore[union-attr]
  left = subprocess.run(["ps", "-s", str(cli.pid), "-o", "pid=,stat=,args="], capture_output=True, text=True).stdout.strip()
  assert not left, f"left behind by the command: {left}"

def test_a_worker_enforces_its_own_limits_without_its_parent(tmp_path):
  """The watchdog alone (no supervising parent): past its deadline, and past its memory limit, the worker stops its own group."""
  code = ("import os, time, sys; from explorer.tracing.workers import lifeline; os.setpgid(0, 0); "
          "lifeline.watch(os.getppid(), deadline=time.monotonic() + {d}, memory_mb={m}, own_group=True); "
          "x = bytearray({b} << 20) if {b} else None; x and x.__setitem__(slice(None, None, 4096), b'1' * len(x[::4096])); time.sleep(60)")
  for d, m, b in ((1, 0, 0), (600, 200, 400)):
    st = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code.format(d=d, m=m, b=b)], cwd=REPO, timeout=30)
    assert p.returncode == -signal.SIGKILL and time.monotonic() - st < 12, (d, m, b, p.returncode)

# ***** 4: priorities *****

def test_web_trace_workers_run_at_worker_nice(tmp_path):
  app = app_over(str(tmp_path / "n.sqlite3"), worker_nice=7)
  with TestClient(app) as client:
    client.post("/api/traces", json=SLOW)
    pid = wait_for("a trace worker", lambda: next(iter(app.state.services.jobs.live), None), 60)
    own = os.getpriority(os.PRIO_PROCESS, 0)
    # the worker lowers its own priority as it enters its limits, a moment after it is listed: on a loaded machine, a while after
    wait_for("the worker runs at worker_nice", lambda: os.getpriority(os.PRIO_PROCESS, pid) - own == 7, 30)
  wait_for("the worker is stopped with the app", lambda: not group_members(pid), 10)

# ***** 6: the small ones *****

def test_the_queue_admits_workers_plus_max_queue_in_a_burst(tmp_path):
  release = threading.Event()
  def blocked(spec, variant, progress, timeout_s):
    release.wait(30)
    return fake_result(minimal_trace(spec))
  app = app_over(str(tmp_path / "q.sqlite3"), max_workers=2, max_queue=1, runner=blocked)
  with TestClient(app) as client:
    codes = [client.post("/api/traces", json={**QUICK, "variant": {"repeats": r}}).status_code for r in (1, 2, 3, 4)]
    release.set()
  assert codes == [202, 202, 202, 503]

def test_health_shows_paths_only_to_the_trusted(tmp_path):
  app = app_over(str(tmp_path / "h.sqlite3"), runner=lambda *a: None)
  with TestClient(app) as client:  # TestClient's address is not loopback
    assert "db" not in client.get("/api/health").json()
  token = "a-token-of-enough-length"
  app = app_over(str(tmp_path / "h.sqlite3"), token=token, runner=lambda *a: None)
  with TestClient(app) as client:
    assert "db" not in client.get("/api/health").json()
    assert client.get("/api/health", headers={"X-Access-Token": token}).json()["db"].endswith("h.sqlite3")

def test_cross_site_gets_that_start_work_are_refused(web_client, small_trace):
  graph = f"/api/traces/{small_trace}/graphs/ast/0.svg"
  img = {"sec-fetch-site": "cross-site", "sec-fetch-mode": "no-cors", "sec-fetch-dest": "image"}
  for url in (graph, f"/diff/{small_trace}/{small_trace}", f"/api/diff/{small_trace}/{small_trace}", f"/t/{small_trace}/export.html"):
    r = web_client.get(url, headers=img)
    assert r.status_code == 403 and "starts work" in r.text, (url, r.status_code)
  assert web_client.get(f"/t/{small_trace}", headers=img).status_code == 200  # a page that starts nothing
  followed = {"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate", "sec-fetch-user": "?1"}  # a person clicked a link
  for headers in (followed, {"sec-fetch-site": "same-origin"}):
    r = web_client.get(graph, headers=headers)
    assert r.status_code == 200, (headers, r.status_code, r.text[:300])

def test_tokens_are_long_and_the_cli_makes_them():
  with pytest.raises(ValueError, match="at least 16 characters"): Settings.load(env={"KERNEL_EXPLORER_TOKEN": "short"})
  with pytest.raises(ValueError, match="at least 16 characters"): Settings.load(env={}, token="x")
  out = subprocess.run([sys.executable, "-m", "explorer.cli", "token"], cwd=REPO, capture_output=True, text=True, timeout=60)
  tok = out.stdout.strip()
  assert out.returncode == 0 and len(tok) >= 32 and Settings.load(env={}, token=tok).token == tok
  bad = subprocess.run([sys.executable, "-m", "explorer.cli", "serve", "--host", "0.0.0.0"], cwd=REPO, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "KERNEL_EXPLORER_TOKEN": "short"})
  assert bad.returncode == 2 and "at least 16 characters" in bad.stderr

def test_a_nul_in_a_search_matches_nothing(web_client, small_trace):
  assert web_client.get("/api/library", params={"q": "winograd"}).json()["total"] >= 1
  assert web_client.get("/api/library", params={"q": "wino\x00"}).json()["total"] == 0
  assert web_client.get("/api/library", params={"q": "\x00"}).json()["total"] == 0

def test_a_waiting_task_knows_how_many_are_ahead_of_it():
  """A task waiting for a slot says how many get one before it, by the rule that hands slots on: the client running the fewest first,
  then the oldest; another client's task is next although one client queued three before it."""
  import asyncio
  from explorer.web.services.lifecycle import Task, Tasks
  async def scenario() -> list[int | None]:
    gate = threading.Event()
    tasks: Tasks[Task] = Tasks(parallel=1, per_client=8, what="things")
    mine = [tasks.start(("a", i), Task(client="a"), lambda t, p: gate.wait(10)) for i in range(4)]
    await asyncio.sleep(0.2)
    theirs = tasks.start(("b", 0), Task(client="b"), lambda t, p: gate.wait(10))
    await asyncio.sleep(0.1)
    ahead = [tasks.ahead(t) for t in (*mine, theirs)]
    gate.set()
    while tasks.active(): await asyncio.sleep(0.05)
    return ahead + [tasks.ahead(theirs)]
  # a0 holds the slot; b0 goes first (b runs none), then a1, a2, a3 in turn; done, nothing waits
  assert run_async(scenario()) == [None, 1, 2, 3, 0, None]

def test_one_admission_rule():
  """Tasks admit new work by one rule: joining identical work is free; a client past its share gets ClientBusy (429), anyone past the
  kind's bound Busy (503), both with a Retry-After; a free slot goes to the client running the fewest; with `reserve` (traces) one
  client's tasks run on all but one slot, so another client's start at once."""
  import asyncio
  from explorer.web.services.lifecycle import Busy, ClientBusy, Task, Tasks
  async def scenario(reserve: bool) -> list[str | None]:
    gates: dict[str, threading.Event] = {c: threading.Event() for c in "abc"}
    ran: list[str | None] = []
    def work(task: Task, progress) -> None:
      ran.append(task.client)
      gates[str(task.client)].wait(10)
    tasks: Tasks[Task] = Tasks(parallel=2, max_waiting=2, per_client=3, what="things", reserve=reserve)
    first = [tasks.start(("a", i), Task(client="a"), work) for i in range(3)]
    assert tasks.start(("a", 0), Task(client="a"), work) is first[0]  # identical work is shared, whatever the share
    with pytest.raises(ClientBusy) as refused: tasks.start(("a", 3), Task(client="a"), work)
    assert refused.value.status == 429 and refused.value.retry_after_s > 0
    await asyncio.sleep(0.3)
    assert ran == ["a"] * (1 if reserve else 2), ran  # reserved: its share runs on one of the two slots
    tasks.start(("b", 0), Task(client="b"), work)
    await asyncio.sleep(0.3)
    if reserve: assert ran == ["a", "b"], ran  # another client's work starts at once
    with pytest.raises(Busy) as full: tasks.start(("c", 0), Task(client="c"), work)
    assert full.value.status == 503 and full.value.retry_after_s > 0
    gates["a"].set()
    await asyncio.sleep(0.3)
    if not reserve: assert ran[:3] == ["a", "a", "b"], ran  # the first free slot went to b, before a's third
    gates["b"].set()
    while tasks.active(): await asyncio.sleep(0.05)
    return ran
  assert sorted(run_async(scenario(reserve=True)), key=str) == ["a", "a", "a", "b"]
  assert sorted(run_async(scenario(reserve=False)), key=str) == ["a", "a", "a", "b"]

def test_one_journal_for_every_kind_of_task(tmp_path):
  """Every kind of background work is kept the same way: a row written when accepted, as it starts and as it ends; the one restart
  rule marks what a gone server left unfinished interrupted, saying why; a stopping server marks its own."""
  import asyncio
  from explorer.web.services.lifecycle import Journal, Task
  store = Store(tmp_path / "j.sqlite3")
  store.put_task("enrichment", "left", "left by a dead server", {}, f"{socket.gethostname()}:999999999:1")
  journal = Journal(store, "enrichment", "stopped: view it again")
  assert journal.interrupted_at_start == 1 and store.get_task("enrichment", "left")["error"] == "stopped: view it again"
  async def lifecycle() -> Task:
    done, running = Task(client="me"), Task()
    for task in (done, running): await asyncio.wrap_future(journal.accept(task, "label", {"trace_id": "t"}))
    await journal.started(done)
    assert store.get_task("enrichment", done.id)["status"] == "running" and store.get_task("enrichment", running.id)["status"] == "queued"
    done.finish("done", "ok")
    await journal.ended(done, result={"kept": 1})
    running.status = "running"
    journal.interrupt([done, running])
    return running
  running = run_async(lifecycle())
  journal.close()
  assert running.status == "interrupted" and store.get_task("enrichment", running.id)["status"] == "interrupted"
  assert {k: v for k, v in store.get_task("enrichment", "left", with_result=True).items() if k in ("status", "result")} == \
         {"status": "interrupted", "result": None}
  assert [r["status"] for r in store.recent_tasks("enrichment")][:2] == ["interrupted", "done"] and store.recent_tasks("opts") == []
