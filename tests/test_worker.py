"""Workers that crash, hang, run out of memory or answer too much give a clear error; the next worker is fine."""
import pytest
from explorer.spec import ConvSpec, Variant
from explorer.tracing.workers import Limits, WorkerFailed, call_in_worker
from explorer.tracing.run import run_trace

@pytest.mark.parametrize("fn, limits, timeout, message", [
  ("segfault", Limits(), 60, "SIGSEGV"),
  ("killed", Limits(), 60, "SIGKILL"),
  ("hang", Limits(), 1.5, "time limit"),
  ("hog", Limits(memory_mb=1024), 60, "MemoryError"),
  ("big_result", Limits(max_output_mb=1), 60, "output cap"),
])
def test_fault_gives_clear_error(fn, limits, timeout, message):
  with pytest.raises(WorkerFailed, match=message): call_in_worker(f"tests.worker_faults:{fn}", {}, timeout_s=timeout, limits=limits)
  seen = []
  assert call_in_worker("tests.worker_faults:fine", {"n": 21}, progress=lambda *a: seen.append(a))[0] == 42 and seen == [("work", "done", "21")]

def test_trace_under_memory_limit():
  trace = run_trace(ConvSpec(1, 2, 2, 8, 8, 3), Variant(time=False, targets=("cuda",)), limits=Limits(memory_mb=4096)).trace
  assert trace["status"] == "ok"

def test_a_workers_numpy_runs_openblas_on_one_thread_unless_told_otherwise(monkeypatch):
  """The float64 check compares its chunks on threads of its own (explorer.tracing.reference): OpenBLAS's threads, one per core by
  default, would spin beside them and beside tinygrad. A setting from the caller's environment or the call's wins."""
  assert call_in_worker("tests.worker_faults:environ", {"name": "OPENBLAS_NUM_THREADS"})[0] == "1"
  assert call_in_worker("tests.worker_faults:environ", {"name": "OPENBLAS_NUM_THREADS"}, env={"OPENBLAS_NUM_THREADS": "3"})[0] == "3"
  monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
  assert call_in_worker("tests.worker_faults:environ", {"name": "OPENBLAS_NUM_THREADS"})[0] == "2"
