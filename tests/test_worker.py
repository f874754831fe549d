"""Workers that crash, hang, run out of memory or answer too much give a clear error; the next worker is fine."""
import json
import os
import signal
import subprocess
import sys
import time
import pytest
from servers import descendants
from explorer.spec import ConvSpec, Variant
from explorer.tracing.pipeline.run import run_trace
from explorer.tracing.workers.process import Limits, WorkerFailed, call_in_worker

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
  """The float64 check compares its chunks on threads of its own (explorer.tracing.pipeline.reference): OpenBLAS's threads, one per core by
  default, would spin beside them and beside tinygrad. A setting from the caller's environment or the call's wins."""
  assert call_in_worker("tests.worker_faults:environ", {"name": "OPENBLAS_NUM_THREADS"})[0] == "1"
  assert call_in_worker("tests.worker_faults:environ", {"name": "OPENBLAS_NUM_THREADS"}, env={"OPENBLAS_NUM_THREADS": "3"})[0] == "3"
  monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
  assert call_in_worker("tests.worker_faults:environ", {"name": "OPENBLAS_NUM_THREADS"})[0] == "2"

FORKED_RENDER = r"""
import json
from explorer.tracing import tg
from explorer.tracing.pipeline.renders import RenderPool
forked = RenderPool.forked(["cuda"], 1)  # as a trace worker makes it: tinygrad imported, nothing made with it yet
x, w = tg.Tensor.empty(1, 2, 8, 8), tg.Tensor.empty(4, 2, 3, 3)
asts = [c.src[0] for c in x.conv2d(w, padding=1).relu().schedule_linear().src if c.src[0].op is tg.Ops.SINK]
spawned = RenderPool(["cuda"], 1)
got = [pool.submit(asts, {"cuda": "sm_90"}, "heuristic", analysis=True)["cuda"].result()[0] for pool in (forked, spawned)]
for pool in (forked, spawned): pool.close()
print(json.dumps([[{k: v for k, v in rec.items()} for rec in recs] for recs in got], sort_keys=True))
"""

def test_a_forked_render_records_what_a_spawned_one_records():
  """A trace worker forks its renders' processes before it opens a device (explorer.tracing.pipeline.renders.RenderPool.forked): each starts
  where a spawned one does after importing tinygrad. Its record is the spawned one's, passes and their matches included."""
  import json
  import subprocess
  import sys
  out = subprocess.run([sys.executable, "-c", FORKED_RENDER], capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  forked, spawned = json.loads(out.stdout)
  assert forked == spawned and forked[0]["passes"] and forked[0]["source"]

def test_a_forked_pool_forks_once_and_spawns_a_replacement():
  """Forked processes start from the state their creator was in when the pool started; a replacement for one that died would start
  from wherever the creator has got to since, so it is spawned."""
  import os
  import signal
  from explorer.tracing.workers.pool import WorkerPool
  from tests import worker_faults
  worker_faults.MARK = "parent"
  pool = WorkerPool(1, fork=True).start()
  try:
    assert pool.submit(worker_faults.mark).result(timeout=60) == "parent"
    for p in pool.processes(): os.kill(p.pid, signal.SIGKILL)
    for p in pool.processes(): p.join(10)
    assert pool.submit(worker_faults.mark).result(timeout=120) is None and pool.replaced == 1
  finally:
    worker_faults.MARK = None
    pool.close()

def test_workers_are_forked_from_a_template_per_environment_that_made_nothing():
  """A worker is forked from its caller's template for its environment (explorer.tracing.workers.template): tinygrad imported, no rewrite
  tracked, no device opened; the same environment reuses the template, another gets its own. Arguments of megabytes go through."""
  from explorer.tracing.workers import template
  a = call_in_worker("tests.worker_faults:lineage", {"blob": b"x" * (8 << 20)})[0]
  b = call_in_worker("tests.worker_faults:lineage", {})[0]
  c = call_in_worker("tests.worker_faults:lineage", {}, env={"KE_TEST_OTHER": "1"})[0]
  assert a["ppid"] == b["ppid"] != c["ppid"] and os.getpid() not in (a["ppid"], c["ppid"]) and a["pid"] != b["pid"]
  assert a["blob"] == 8 << 20 and a["tinygrad"] and a["tracked"] == 0 and a["opened"] == [], a
  assert {t.proc.pid for t in template._templates.values()} >= {a["ppid"], c["ppid"]}

def test_a_dead_template_fails_its_workers_in_one_line_and_the_next_call_gets_a_new_one():
  first = call_in_worker("tests.worker_faults:lineage", {})[0]["ppid"]
  import threading
  import time
  def kill_soon() -> None:
    time.sleep(1.0)
    os.kill(first, signal.SIGKILL)
  threading.Thread(target=kill_soon).start()
  with pytest.raises(WorkerFailed, match="killed by SIGKILL"): call_in_worker("tests.worker_faults:hang", {}, timeout_s=30)
  assert call_in_worker("tests.worker_faults:lineage", {})[0]["ppid"] not in (first, os.getpid())

def test_a_templates_children_count_in_its_parents_cpu():
  """A template reaps its children: their CPU reaches this process's getrusage only when it reaps the template; it reports each one's
  (explorer.tracing.workers.template.children_cpu_s), which tests/conftest.py counts per test."""
  from explorer.tracing.workers import template
  from explorer.tracing.workers.process import with_default_device
  # the one call_in_worker forks from (a worker's scratch directory aside, the same environment: DEV where this host's default is known)
  t = template.template_for(with_default_device({}))
  before = t.children_cpu_s
  spent = call_in_worker("tests.worker_faults:spin", {"n": 3_000_000})[0][1]
  assert t.children_cpu_s - before >= spent > 0 and template.children_cpu_s() >= t.children_cpu_s

CLEAN = {k: v for k, v in os.environ.items() if k not in ("VIZ", "TRACK_MATCH_STATS", "DEBUG", "NOOPT", "BEAM", "WINO", "DEV")}
WORKER_MARKS = ("explorer.tracing.workers.template_process import serve", "explorer.tracing.workers.process import _boot")

def _cmdline(pid: int) -> str:
  try:
    with open(f"/proc/{pid}/cmdline") as f: return f.read().replace("\0", " ")
  except OSError: return ""

def _watched(cmd: list[str]) -> tuple[subprocess.Popen, dict[int, str]]:
  """The command run to its end, and every process it started that was seen (polled every 10 ms), by pid, with its command line."""
  proc, seen = subprocess.Popen(cmd, env=CLEAN, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True), {}
  while proc.poll() is None:
    seen |= {p: _cmdline(p) for p in descendants(proc.pid) if p not in seen}
    time.sleep(0.01)
  return proc, seen

def test_a_command_traces_its_one_variant_in_its_own_process_as_a_worker_would(tmp_path):
  out = tmp_path / "t.json"
  proc, seen = _watched([sys.executable, "-m", "explorer", "trace", "--preset", "small", "--no-time", "--quiet", "--json", str(out)])
  assert proc.returncode == 0, proc.stderr.read()
  assert not [c for c in seen.values() if any(m in c for m in WORKER_MARKS)], seen  # no template, no worker: the command traced it
  here = json.loads(out.read_text())
  from explorer.spec import PRESETS
  spec = PRESETS["small"]
  worker = run_trace(spec, Variant(time=False).resolve(spec)).trace  # a worker's trace of the same variant: the same kernels, passes, sources
  def kernels(t: dict) -> list:
    return [(k["name"], k["sources"], [p["name"] for p in k["passes"]], k["linear_uops"]) for k in t["kernels"]]
  assert here["status"] == worker["status"] == "ok" and kernels(here) == kernels(worker) and here["error"] == worker["error"]
  assert here["stage_seconds"].keys() == worker["stage_seconds"].keys()

def test_a_command_ends_as_the_interpreter_would_without_its_teardown(tmp_path):
  """A command that traced in its own process joins its threads and runs its exit handlers, as the interpreter's exit does, then
  ends without the interpreter's teardown of every object (0.35-0.4 s of a medium trace's command): an object a module holds is
  never finalized. Watched from a sitecustomize the command's interpreter imports."""
  site = tmp_path / "site"
  site.mkdir()
  (site / "sitecustomize.py").write_text(f"""import atexit, pathlib, threading, time
here = pathlib.Path({str(tmp_path)!r})
atexit.register(lambda: (here / "exit handler").write_text("ran"))
threading.Thread(target=lambda: (time.sleep(1), (here / "thread").write_text("done"))).start()  # not a daemon: joined
class Held:
  def __del__(self): (here / "teardown").write_text("ran")
held = Held()
""")
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])}
  out = tmp_path / "t.json"
  proc = subprocess.run([sys.executable, "-m", "explorer", "trace", "--preset", "small", "--no-time", "--quiet", "--json", str(out)],
                        capture_output=True, text=True, env=env, timeout=300)
  assert proc.returncode == 0 and json.loads(out.read_text())["status"] == "ok", proc.stderr[-2000:]
  assert (tmp_path / "exit handler").read_text() == "ran" and (tmp_path / "thread").read_text() == "done"
  assert not (tmp_path / "teardown").exists()
  failed = subprocess.run([sys.executable, "-m", "explorer", "trace", "--preset", "small", "--no-time", "--quiet", "--timeout", "0.01"],
                          capture_output=True, text=True, env=env, timeout=300)
  assert failed.returncode == 1 and "trace failed" in failed.stderr, failed.stderr[-2000:]  # its status as it was

def test_a_command_past_its_time_limit_says_so_in_one_line_and_leaves_nothing_running(tmp_path):
  proc, started = _watched([sys.executable, "-m", "explorer", "trace", "--preset", "medium", "--target", "cuda", "--no-time", "--quiet",
                      "--timeout", "1", "--json", str(tmp_path / "t.json")])
  err = proc.stderr.read()
  assert proc.returncode == 1 and "trace failed: the worker exceeded its time limit of 1s" in err and "Traceback" not in err, err
  assert not (tmp_path / "t.json").exists()
  assert started  # its render processes, which die with it (PR_SET_PDEATHSIG)
  deadline = time.monotonic() + 5
  while (left := [p for p, c in started.items() if _cmdline(p) == c]) and time.monotonic() < deadline: time.sleep(0.05)
  assert not left, {p: started[p] for p in left}
