"""Work that goes wrong on purpose, and a stand-in timing stage: run by tests/test_worker.py and tests/test_hardening.py in real workers."""
import ctypes
import os
import pathlib
import signal
import time

def segfault(progress) -> None: ctypes.string_at(0)
def hang(progress) -> None: time.sleep(3600)
def hog(progress) -> bytes: return bytearray(2 << 30)  # 2 GiB, over the test's limit
def killed(progress) -> None: os.kill(os.getpid(), signal.SIGKILL)
def big_result(progress) -> bytes: return b"x" * (2 << 20)
def environ(progress, name: str) -> str | None: return os.environ.get(name)
def fine(progress, n: int) -> int:
  progress("work", "done", str(n))
  return n * 2
def measure(progress, device: str, log: str, hold_s: float, name: str) -> str:
  """A stand-in timing stage: asks for the device, then logs when it measured (this process's clock, after the parent said go)."""
  progress("timing", "start", device)
  start = time.time()
  time.sleep(hold_s)
  with open(log, "a") as f: f.write(f"{name} {start} {time.time()}\n")
  progress("timing", "done", "")
  return name
def spawn_hog(progress, mb: int, n: int) -> None:
  """n child processes (in the worker's process group), each holding mb MiB of touched memory: each under the data limit, together over it."""
  import subprocess
  import sys
  kids = [subprocess.Popen([sys.executable, "-c", f"import time; x = b'1' * ({mb} << 20); time.sleep(60)"]) for _ in range(n)]
  progress("hog", "start", ",".join(str(k.pid) for k in kids))
  time.sleep(60)
def assertion(progress) -> None:
  progress("tensor_graph", "start", "")
  raise AssertionError("an assertion inside tinygrad, say")
def scratch(progress) -> None:
  """A temporary directory made the usual way, then a hang: the worker is killed with its files still there."""
  import tempfile
  d = tempfile.mkdtemp()
  pathlib.Path(d, "kept.ptx").write_text("x" * 1000)
  progress("scratch", "start", d)
  time.sleep(3600)

MARK: str | None = None  # set by a test in its own process: a process forked from it sees it, a spawned one does not
def mark() -> str | None: return MARK
def spin(progress, n: int) -> tuple[float, float]:
  import time
  st, cpu = time.perf_counter(), time.process_time()
  x = 0
  for i in range(n): x += i * i
  return time.perf_counter() - st, time.process_time() - cpu
def lineage(progress, blob: bytes = b"") -> dict:
  """Where a worker came from, and what it found made already: its parent, tinygrad imported or not, anything tracked or opened."""
  import sys
  got = {"ppid": os.getppid(), "pid": os.getpid(), "tinygrad": "tinygrad" in sys.modules, "blob": len(blob)}
  if got["tinygrad"]:
    from tinygrad.device import Device
    from tinygrad.uop import ops
    got.update(tracked=len(ops.tracked_keys), opened=sorted(Device._opened_devices))
  return got
