"""Admission held at the same instant: requests released together by a barrier (threads through one app, whose event loop interleaves
them as a server's does) get the client's share and the server's bounds, no more; identical ones run one trace; a diff's two variants
are admitted both or neither. The runner is gated (no tinygrad): what is counted is what was admitted and started."""
from __future__ import annotations
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from fastapi.testclient import TestClient
from support import app_over, fake_result, minimal_trace
from explorer.web.services.traces import STAGES

class Gate:
  """A runner that holds every trace until released, counting the runs it started."""
  def __init__(self) -> None:
    self.calls, self.gate, self.lock = 0, threading.Event(), threading.Lock()
  def __call__(self, spec: Any, variant: Any, progress: Any, timeout_s: float) -> Any:
    with self.lock: self.calls += 1
    progress(STAGES[0], "start", "")
    assert self.gate.wait(60), "never released"
    return fake_result(minimal_trace(spec, variant))

def at_once(n: int, fn: Any) -> list[Any]:
  """fn(i) for i < n on n threads, released together."""
  barrier = threading.Barrier(n)
  def go(i: int) -> Any:
    barrier.wait()
    return fn(i)
  with ThreadPoolExecutor(n) as pool: return list(pool.map(go, range(n)))

def body(i: int) -> dict:
  return {"spec": {"batch": 1, "cin": 1, "cout": 1 + i, "height": 8, "width": 8, "kernel": 3}, "variant": {"targets": [], "time": False}}

def test_thirty_posts_at_once_from_one_client_get_its_share_and_leave_room_for_others(tmp_path):
  gate = Gate()
  app = app_over(str(tmp_path / "a.sqlite3"), max_workers=1, max_queue=16, max_jobs_per_client=4, runner=gate)
  try:
    with TestClient(app) as one, TestClient(app, client=("192.0.2.2", 50000)) as other:
      codes = at_once(30, lambda i: one.post("/api/traces", json=body(i)).status_code)
      assert codes.count(202) == 4 and codes.count(429) == 26, codes
      assert sum(1 for j in app.state.services.jobs._all() if j.active) == 4  # what was refused left nothing behind
      r = other.post("/api/traces", json=body(99))
      assert r.status_code == 202, r.text  # the first client's flood took its share, not the server's queue
  finally: gate.gate.set()

def test_identical_requests_at_once_from_many_clients_run_one_trace(tmp_path):
  gate = Gate()
  app = app_over(str(tmp_path / "b.sqlite3"), max_workers=1, max_queue=16, max_jobs_per_client=1, runner=gate)
  try:
    clients = [TestClient(app, client=(f"127.0.0.{10 + i}", 50000)) for i in range(12)]
    for c in clients: c.__enter__()
    answers = at_once(12, lambda i: clients[i].post("/api/traces", json=body(0)))
    assert {r.status_code for r in answers} == {202} and len({r.json()["id"] for r in answers}) == 1
    deadline = time.monotonic() + 10
    while gate.calls == 0: assert time.monotonic() < deadline; time.sleep(0.02)
    assert gate.calls == 1
  finally:
    gate.gate.set()
    for c in clients: c.__exit__(None, None, None)

def test_a_diffs_two_variants_are_admitted_both_or_neither(tmp_path):
  gate = Gate()
  app = app_over(str(tmp_path / "c.sqlite3"), max_workers=1, max_queue=16, max_jobs_per_client=3, runner=gate)
  pairs = [(preset, "staged", "fused") for preset in ("small", "medium", "large", "wino8", "wino16", "wino32")]  # no trace in common
  try:
    with TestClient(app) as one:
      def post(i: int) -> int:
        preset, va, vb = pairs[i]
        return one.post("/diff/variants", data={"preset": preset, "va": va, "vb": vb}, follow_redirects=False).status_code
      codes = at_once(len(pairs), post)
      active = sum(1 for j in app.state.services.jobs._all() if j.active)
      assert codes.count(303) == 1 and active == 2, (codes, active)  # a share of 3: one pair fits, the others are refused whole
      assert all(c in (303, 429) for c in codes), codes
  finally: gate.gate.set()

def test_a_class_of_eight_tracing_the_same_variant_at_once_runs_one_trace(tmp_path):
  """benchmarks/load.py's class phase at its smallest, on a real server: eight students on eight loopback addresses (127.0.0.10-17)
  released together by a barrier ask for the same trace; one trace runs, none is refused, every student gets a usable page."""
  import sys
  from conftest import REPO, running_server
  sys.path.insert(0, str(REPO / "benchmarks"))
  from load import class_round
  with running_server(tmp_path / "class.sqlite3", tmp_path) as base:
    got = class_round(base, [{**body(0), "variant": {"targets": [], "repeats": 2}}] * 8)
  assert got["traces"] == 1 and got["refused"] == [] and got["failed"] == [] and len(got["usable_s"]) == 8, got
