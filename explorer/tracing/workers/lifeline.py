"""Limits a worker process enforces on itself, so that they hold without its parent: it dies with its parent (PR_SET_PDEATHSIG,
and a watchdog that sees the parent change), and the watchdog stops the worker's whole process group past its wall-clock deadline
or its resident-memory limit. The parent's own supervision acts first and gives the clearer message (explorer.tracing.workers.process); the
watchdog acts GRACE_S later, as the backstop for a parent that was SIGKILLed, hangs or is gone.

Why a watchdog thread and not RLIMIT_CPU or RLIMIT_AS: CPU time is not wall time (a worker waiting for a device lock uses none,
a threaded numpy uses several seconds a second), and GPU runtimes reserve terabytes of address space they never touch."""
from __future__ import annotations
import ctypes
import os
import signal
import threading
import time
from contextlib import suppress

PR_SET_PDEATHSIG = 1
WATCH_S = 0.5  # how often the watchdog looks
GRACE_S = 2.0  # after the parent would have acted

def die_with_parent(parent_pid: int) -> None:
  """The kernel sends SIGKILL when the parent goes (Linux); a parent already gone by now ends this process at once."""
  with suppress(OSError, AttributeError): ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
  if os.getppid() != parent_pid: os._exit(1)

def group_members(pgid: int) -> list[int]:
  """Every process in the group, orphans of a crash included (Linux /proc; elsewhere none are found)."""
  members = []
  with suppress(OSError):
    for d in os.listdir("/proc"):
      if not d.isdigit(): continue
      try:
        with open(f"/proc/{d}/stat") as f: stat = f.read()
      except OSError: continue
      if int(stat[stat.rfind(")") + 2:].split()[2]) == pgid: members.append(int(d))
  return members

def group_rss_mb(pgid: int) -> float:
  """Resident memory of every process in the group, in MiB."""
  total = 0
  for p in group_members(pgid):
    try:
      with open(f"/proc/{p}/statm") as f: total += int(f.read().split()[1])
    except (OSError, ValueError, IndexError): pass
  return total * os.sysconf("SC_PAGE_SIZE") / 2**20

def _stop(own_group: bool) -> None:
  if own_group: os.killpg(os.getpgrp(), signal.SIGKILL)
  os.kill(os.getpid(), signal.SIGKILL)

def watch(parent_pid: int, deadline: float | None = None, memory_mb: int = 0, own_group: bool = False) -> threading.Thread:
  """Start the watchdog (a daemon thread). deadline: time.monotonic() past which the process stops (GRACE_S later);
  own_group: this process leads its own group (a worker), which is stopped whole, and memory_mb (the group's resident limit) is
  watched; else only this process is stopped."""
  def run() -> None:
    over_since: float | None = None
    while True:
      time.sleep(WATCH_S)
      now = time.monotonic()
      if os.getppid() != parent_pid or (deadline is not None and now > deadline + GRACE_S): _stop(own_group)
      if memory_mb and own_group:
        over = group_rss_mb(os.getpgrp()) > memory_mb
        over_since = (over_since or now) if over else None
        if over_since is not None and now - over_since >= GRACE_S: _stop(own_group)
  t = threading.Thread(target=run, name="lifeline", daemon=True)
  t.start()
  return t
