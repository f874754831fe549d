"""Work that goes wrong on purpose, run by tests/test_worker.py in real worker processes."""
import ctypes, os, signal, time

def segfault(progress) -> None: ctypes.string_at(0)
def hang(progress) -> None: time.sleep(3600)
def hog(progress) -> bytes: return bytearray(2 << 30)  # 2 GiB, over the test's limit
def killed(progress) -> None: os.kill(os.getpid(), signal.SIGKILL)
def big_result(progress) -> bytes: return b"x" * (2 << 20)
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
def fake_capture(progress, spec: dict, variant: dict, dump_io=None) -> tuple[dict, bytes]:
  """explorer.worker._capture's shape without tinygrad: each stage reported, the timing stage asking for the CPU device."""
  for stage in ("tensor_graph", "schedule", "kernel_graph", "codegen", "render", "run", "timing"):
    progress(stage, "start", "CPU" if stage == "timing" else "")
    progress(stage, "done", "0.01s")
  return {"spec": spec, "variant": variant}, b""
def grow(progress, mb: int) -> int:
  """Touches memory a page at a time in small pieces: each allocation passes the data limit's check until the total is over it."""
  chunks = [bytearray(1 << 20) for _ in range(mb)]
  time.sleep(30)
  return len(chunks)
def spawn_hog(progress, mb: int) -> None:
  """A child process (in the worker's process group) that holds memory: the parent's watch sees the whole group."""
  import subprocess, sys
  subprocess.Popen([sys.executable, "-c", f"import time; x = bytearray({mb} << 20); time.sleep(60)"])
  time.sleep(60)
