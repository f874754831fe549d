"""Real servers in subprocesses, for the tests that signal, restart or starve them: `kernel-explorer serve` over one database
(start() again after a kill is a restart), and the waits and calls those tests share."""
from __future__ import annotations
import os
import pathlib
import subprocess
import sys
import time
import httpx
from conftest import REPO, free_port
from support import settings_free_env

def wait_for(what: str, check, timeout_s: float, every_s: float = 0.1):
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    if (got := check()): return got
    time.sleep(every_s)
  raise AssertionError(f"{what} within {timeout_s}s")

def stat_of(pid: int) -> list[str] | None:
  try:
    with open(f"/proc/{pid}/stat") as f: stat = f.read()
  except OSError: return None
  return stat[stat.rfind(")") + 2:].split()

def descendants(root: int) -> set[int]:
  """Every live process under `root` (children, their children...), zombies left out."""
  stats = {int(d): st for d in os.listdir("/proc") if d.isdigit() and (st := stat_of(int(d))) is not None and st[0] != "Z"}
  kids: dict[int, list[int]] = {}
  for pid, st in stats.items(): kids.setdefault(int(st[1]), []).append(pid)
  out, todo = set(), [root]
  while todo: out |= set(k := kids.get(todo.pop(), [])); todo += k
  return out

def worker_groups(parent: int) -> list[int]:
  """Workers started by `parent`: its descendants that lead a process group of their own (forked by its worker template, a child of
  it, or started by it)."""
  return [pid for pid in descendants(parent) if (st := stat_of(pid)) is not None and int(st[2]) == pid]

class Server:
  """`kernel-explorer serve` in a subprocess over one database; start() again after a kill is a restart."""
  def __init__(self, db: pathlib.Path, log: pathlib.Path, **env: str):
    self.db, self.log, self.port = db, log, free_port()
    self.env = {**settings_free_env(), **env}
    self.proc: subprocess.Popen | None = None

  @property
  def base(self) -> str: return f"http://127.0.0.1:{self.port}"

  def start(self) -> Server:
    cmd = [sys.executable, "-m", "explorer.cli", "serve", "--port", str(self.port), "--db", str(self.db)]
    self.proc = subprocess.Popen(cmd, cwd=REPO, env=self.env, stdout=open(self.log, "a"),  # noqa: SIM115 - its log
                                 stderr=subprocess.STDOUT)
    def up() -> bool:
      assert self.proc is not None and self.proc.poll() is None, self.log.read_text()
      try: return httpx.get(f"{self.base}/api/health", timeout=2).status_code == 200
      except httpx.HTTPError: return False
    wait_for("the server answers", up, 60, 0.2)
    return self

  def stop(self) -> None:
    if self.proc is not None and self.proc.poll() is None:
      self.proc.kill()
      self.proc.wait()

def post(base: str, body: dict) -> str:
  r = httpx.post(f"{base}/api/traces", json=body, timeout=30)
  assert r.status_code in (200, 202), r.text
  return r.json()["id"]

def status(base: str, trace_id: str) -> dict:
  r = httpx.get(f"{base}/api/traces/{trace_id}/status", timeout=30)
  assert r.status_code == 200, r.text
  return r.json()

