"""Faults lose nothing, each against a real server process (tests/servers.py), each waiting on the event it needs (the stage the
fault is for has started; the kill has been seen), never on time alone: the server SIGKILLed while it stores a trace, a trace worker
SIGKILLed mid-trace, the store's disk full, and a store that cannot be used at start."""
from __future__ import annotations
import contextlib
import json
import os
import pathlib
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
import httpx
import pytest
from conftest import REPO
from servers import Server, post, status, wait_for, worker_groups
from support import minimal_trace, settings_free_env
from explorer.schema import validate_trace
from explorer.store import Store

TINY = {"spec": {"batch": 1, "cin": 2, "cout": 2, "height": 8, "width": 8, "kernel": 3}, "variant": {"targets": [], "repeats": 2}}
SLOW = {"preset": "medium", "variant": {"algo": "direct", "targets": [], "warmup": 0, "repeats": 1000}}  # a minute in its timing stage

@pytest.fixture(autouse=True)
def private_locks(tmp_path, monkeypatch):
  monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))

@pytest.fixture
def server(tmp_path) -> Iterator[Server]:
  s = Server(tmp_path / "traces.sqlite3", tmp_path / "server.log")
  yield s.start()
  s.stop()

def stage_started(base: str, trace_id: str, stage: str) -> bool:
  return any(x["stage"] == stage and x["status"] != "pending" for x in status(base, trace_id)["stages"])

def integrity(db: pathlib.Path) -> str:
  with contextlib.closing(sqlite3.connect(db)) as c: return str(c.execute("PRAGMA integrity_check").fetchone()[0])

def test_a_server_killed_while_it_stores_a_trace_leaves_it_whole_or_absent(server):
  """The kill lands as the job's store stage starts (its progress says so) or, where the write was quicker than a poll, just after it
  (the job done): the trace is whole or absent either way, as SQLite's transaction makes it, and the job answers after a restart."""
  trace_id = post(server.base, TINY)
  def storing() -> bool: return stage_started(server.base, trace_id, "store") or status(server.base, trace_id)["status"] == "done"
  wait_for("the trace is being stored", storing, 180, 0.005)
  assert server.proc is not None
  server.proc.send_signal(signal.SIGKILL)
  server.proc.wait()
  assert integrity(server.db) == "ok"
  stored = Store(server.db).get_trace(trace_id)
  if stored is not None: validate_trace(json.loads(json.dumps(stored)))  # whole: it reads as a trace, every field
  server.start()  # the restart
  got = status(server.base, trace_id)
  assert got["status"] == ("done" if stored is not None else "interrupted"), got
  if stored is None:  # nothing lost: its request runs again in one click
    assert httpx.post(f"{server.base}/api/traces/{trace_id}/rerun", timeout=30).status_code == 202
    assert wait_for("the re-run", lambda: status(server.base, trace_id)["status"] == "done", 180)

def test_a_trace_worker_killed_mid_trace_fails_its_job_in_one_line_and_the_server_goes_on(server):
  trace_id = post(server.base, SLOW)
  wait_for("the trace reaches its timing stage", lambda: stage_started(server.base, trace_id, "timing"), 180)
  assert server.proc is not None
  (group,) = worker_groups(server.proc.pid)
  os.killpg(group, signal.SIGKILL)
  got = wait_for("the job ends", lambda: (s := status(server.base, trace_id))["status"] in ("error", "done") and s, 60)
  assert got["status"] == "error" and "\n" not in got["error"] and "Traceback" not in got["error"], got
  assert httpx.get(f"{server.base}/api/health", timeout=10).status_code == 200 and integrity(server.db) == "ok"
  other = post(server.base, TINY)  # the server goes on tracing
  assert wait_for("another trace", lambda: status(server.base, other)["status"] == "done", 180)

# ***** the store's disk full; a store that cannot be used at start *****

@contextlib.contextmanager
def small_filesystem(tmp_path: pathlib.Path, size: str = "8m") -> Iterator[pathlib.Path]:
  """A tmpfs of `size` mounted for the test (root with CAP_SYS_ADMIN: make test's machines; skipped with the reason elsewhere)."""
  mnt = tmp_path / "small"
  mnt.mkdir()
  r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True, text=True)
  if r.returncode != 0: pytest.skip(f"cannot mount a small filesystem here: {r.stderr.strip() or r.returncode}")
  try: yield mnt
  finally: subprocess.run(["umount", "-l", str(mnt)], capture_output=True)

def fill(path: pathlib.Path) -> None:
  """Write into path until the filesystem has no room left."""
  with open(path, "wb") as f, contextlib.suppress(OSError):
    while True: f.write(b"\0" * (1 << 16)); f.flush()

def test_a_full_disk_refuses_writes_with_507_and_reads_go_on(tmp_path):

  with small_filesystem(tmp_path) as mnt:
    db = mnt / "traces.sqlite3"
    Store(db).put_trace("a1b2c3d4e5f60718", minimal_trace(), b"")
    s = Server(db, tmp_path / "server.log").start()
    try:
      fill(mnt / "filler")
      r = httpx.post(f"{s.base}/api/traces", json=TINY, timeout=60)
      assert r.status_code == 507 and "disk is full" in r.json()["detail"] and "still answer" in r.json()["detail"], r.text
      assert httpx.get(f"{s.base}/api/traces/a1b2c3d4e5f60718", timeout=30).status_code == 200  # reads go on
      assert httpx.get(f"{s.base}/t/a1b2c3d4e5f60718", timeout=30).status_code == 200
      (mnt / "filler").unlink()
      assert httpx.post(f"{s.base}/api/traces", json=TINY, timeout=60).status_code == 202  # room again: accepted
    finally: s.stop()
    assert integrity(db) == "ok"

def test_a_full_disk_leaves_a_stale_documents_readers_and_a_jobs_end_each_one_line(tmp_path):
  """The disk fills (1) under a trace whose kept API document went stale since (an analysis merged into it): its readers, gzip or
  plain, get the document made from the light parse, not a 507 for the write that would keep it; (2) while a trace runs: the job ends
  in one line (its trace could not be stored) and so does its row's final write, never an unretrieved task's traceback."""
  from explorer.stages import ENRICH_ANALYSIS

  with small_filesystem(tmp_path) as mnt:
    db, stale = mnt / "traces.sqlite3", "5a1e5a1e5a1e5a1e"
    store = Store(db)
    store.put_trace(stale, minimal_trace(), b"")
    store.put_enrichments(stale, ENRICH_ANALYSIS, {(0, "clang"): {}})  # merged into it: the document kept at put_trace is stale
    store.close()
    s = Server(db, tmp_path / "server.log").start()
    try:
      trace_id = post(s.base, {**SLOW, "variant": {**SLOW["variant"], "repeats": 100}})  # a few seconds in its timing stage
      wait_for("the trace runs", lambda: stage_started(s.base, trace_id, "timing"), 180)
      fill(mnt / "filler")
      for encoding in ("gzip", "identity"):
        r = httpx.get(f"{s.base}/api/traces/{stale}", headers={"Accept-Encoding": encoding}, timeout=30)
        assert r.status_code == 200 and r.json()["id"] == stale, r.text
      got = wait_for("the job ends", lambda: (st := status(s.base, trace_id))["status"] in ("error", "done") and st, 180)
      assert got["status"] == "error" and "full" in got["error"] and "\n" not in got["error"], got
    finally: s.stop()
    log = (tmp_path / "server.log").read_text()
    assert "Traceback" not in log and "never retrieved" not in log, log[-3000:]
    assert f"trace {trace_id} ended error, but its row could not be written" in log, log[-3000:]

@pytest.mark.parametrize("how", ["truncated", "not a database", "read-only", "named by KERNEL_EXPLORER_DB"])
def test_a_store_that_cannot_be_used_stops_serve_with_one_line(tmp_path, how):
  """serve checks the store it will serve: --db, else KERNEL_EXPLORER_DB (it checked the default path while serving the variable's)."""
  db = tmp_path / "traces.sqlite3"
  if how == "read-only":
    with small_filesystem(tmp_path, "4m") as mnt:
      db = mnt / "traces.sqlite3"
      Store(db).close()
      subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
      out = serve_once(db)
  else:
    Store(db).close()
    data = db.read_bytes()
    db.write_bytes(data[:100] if how == "truncated" else os.urandom(len(data)))
    for extra in (db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")): extra.unlink(missing_ok=True)
    out = serve_once(db, by_env=how.startswith("named"))
  assert out.returncode == 2, out
  lines = out.stderr.strip().splitlines()
  assert len(lines) == 1 and "cannot be used" in lines[0] and str(db) in lines[0] and "Traceback" not in out.stderr, out.stderr

CRASHED_WRITER = """import os, shutil, sys
sys.path[:0] = [{repo!r}, {tests!r}]
from explorer.store import Store
from support import minimal_trace
store = Store(sys.argv[1])
store._conn().execute("PRAGMA wal_autocheckpoint=0")  # nothing folded into the file: all of it in the log
store.put_trace(sys.argv[2], minimal_trace(label=sys.argv[2]), b"")
os._exit(0)  # as a SIGKILLed server leaves its store: the log beside the file, no checkpoint
"""

def test_serve_refuses_a_log_that_is_not_its_stores_before_sqlite_replays_it(tmp_path):
  """A write-ahead log copied beside a store from another one (SQLite would replay it on open and the store would be the other's for
  good, its quick check saying ok): serve says so in one line before any connection, the store and the log untouched; the log a
  crashed server left beside its own store replays as it should."""
  from explorer.store import wal
  mine, theirs = tmp_path / "mine.sqlite3", tmp_path / "theirs.sqlite3"
  store = Store(mine)
  store.put_trace("a" * 16, minimal_trace(), b"")
  store.close()  # (a connection of this process would hold the store in use: its log left alone)
  code = CRASHED_WRITER.format(repo=str(REPO), tests=str(REPO / "tests"))
  subprocess.run([sys.executable, "-c", code, str(theirs), "b" * 16], check=True, env=settings_free_env(), timeout=60)
  their_log = pathlib.Path(f"{theirs}-wal").read_bytes()
  assert len(their_log) > 32 and wal.problem(theirs) is None  # its own: replayed when opened
  pathlib.Path(f"{mine}-wal").write_bytes(their_log)
  out = serve_once(mine)
  lines = out.stderr.strip().splitlines()
  assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
  assert "has a write-ahead log beside it (mine.sqlite3-wal" in lines[0] and "does not belong to it" in lines[0], lines[0]
  assert "none of the 1 traces this database holds would remain" in lines[0] and "move mine.sqlite3-wal aside" in lines[0], lines[0]
  assert pathlib.Path(f"{mine}-wal").read_bytes() == their_log  # nothing replayed
  pathlib.Path(f"{mine}-wal").unlink()
  assert Store(mine).get_trace("a" * 16) is not None and Store(mine).get_trace("b" * 16) is None
  assert Store(theirs).get_trace("b" * 16)["label"] == "b" * 16  # a crashed server's log, replayed into its own store

def serve_once(db: pathlib.Path, by_env: bool = False) -> subprocess.CompletedProcess:
  env = settings_free_env() | ({"KERNEL_EXPLORER_DB": str(db)} if by_env else {})
  return subprocess.run([sys.executable, "-m", "explorer.cli", "serve", "--port", "0", *([] if by_env else ["--db", str(db)])], cwd=REPO,
                        capture_output=True, text=True, timeout=60, env=env)

def test_a_sqlite_error_reads_in_one_line_with_its_extended_code():
  """"disk I/O error" alone does not say which of SQLite's twenty-odd I/O failures it was: an error's one line carries the extended
  code where SQLite gives one (SQLITE_IOERR_SHMMAP, SQLITE_CONSTRAINT_CHECK), and no more than the message where it gives the base."""
  from explorer.text import one_line
  c = sqlite3.connect(":memory:")
  c.execute("CREATE TABLE t (n INTEGER CHECK (n > 0))")
  with pytest.raises(sqlite3.IntegrityError) as checked: c.execute("INSERT INTO t VALUES (0)")
  assert one_line(checked.value) == "CHECK constraint failed: n > 0 (SQLITE_CONSTRAINT_CHECK)"
  with pytest.raises(sqlite3.OperationalError) as missing: c.execute("SELECT * FROM nowhere")
  assert one_line(missing.value) == "no such table: nowhere"
  assert one_line(ValueError("first\nsecond")) == "first" and one_line(ValueError()) == "ValueError"
