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
