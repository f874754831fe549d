"""One measurement per device at a time: a timing stage (a trace's, a study's or a diff's interleaved re-timing, the roofline probe)
holds its device's lock, an flock on a file per device. File locks serialize every Kernel Explorer process of this user on this
host: the web server's jobs, and CLI runs beside it. The lock belongs to the process that spawned the worker (explorer.tracing.workers.process):
the worker asks it before timing, and a worker that dies cannot leave its device locked."""
from __future__ import annotations
import fcntl
import os
import pathlib
import re
import time
from collections.abc import Callable

POLL_S = 0.05

def lock_dir() -> pathlib.Path:
  base = os.environ.get("XDG_RUNTIME_DIR") or os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return pathlib.Path(base) / "kernel-explorer" / "locks"

def lock_name(device: str) -> str:
  """CUDA and CUDA:0 are one device; CUDA:1 another. Only [A-Z0-9_.-] reach the file name."""
  base, _, idx = device.strip().upper().partition(":")
  return re.sub(r"[^A-Z0-9_.-]", "_", base + (f"-{idx}" if idx not in ("", "0") else "")) or "DEFAULT"

class DeviceLock:
  def __init__(self, device: str, directory: pathlib.Path | None = None):
    self.device, self.path = device, (directory or lock_dir()) / f"{lock_name(device)}.lock"
    self._fd: int | None = None

  def try_acquire(self) -> bool:
    if self._fd is not None: return True
    self.path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      os.close(fd)
      return False
    self._fd = fd
    return True

  def acquire(self, deadline: float) -> bool:
    """Wait for the lock until time.monotonic() reaches deadline; False if it did not come."""
    while not self.try_acquire():
      if time.monotonic() >= deadline: return False
      time.sleep(POLL_S)
    return True

  def release(self) -> None:
    fd, self._fd = self._fd, None
    if fd is not None: os.close(fd)  # closing the descriptor drops the flock

class HeldLocks:
  """The device locks one worker holds; devices given as "CPU" or "CUDA,CPU" (taken in sorted order: no deadlock)."""
  def __init__(self) -> None:
    self.locks: dict[str, DeviceLock] = {}

  def acquire(self, devices: str, deadline: float, waiting: Callable[[str], None] | None = None) -> str | None:
    """Takes every named device's lock; returns None, or the device that did not come free before the deadline."""
    for dev in sorted({lock_name(d) for d in devices.split(",") if d.strip()}):
      if dev in self.locks: continue
      lock = DeviceLock(dev)
      if not lock.try_acquire():
        if waiting is not None: waiting(dev)
        if not lock.acquire(deadline): return dev
      self.locks[dev] = lock
    return None

  def release(self) -> None:
    for lock in self.locks.values(): lock.release()
    self.locks.clear()
