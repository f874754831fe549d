"""Device workers over a job queue: a real redis-server (Debian's; `make test` installs it, and these tests skip, saying why, where it
is absent), real `kernel-explorer worker` processes and real servers started with --queue."""
from __future__ import annotations
import contextlib
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any
import httpx
import pytest
from conftest import REPO, free_port, needs_chromium, running_server
from support import settings_free_env
from explorer.stages import STAGES

REDIS_SERVER = shutil.which("redis-server")
NO_REDIS = "no redis-server on PATH (Debian: apt-get install redis-server; make test installs it)"
pytestmark = [pytest.mark.queue, pytest.mark.skipif(REDIS_SERVER is None, reason=NO_REDIS)]
TINY = {"spec": {"batch": 1, "cin": 2, "cout": 2, "height": 8, "width": 8, "kernel": 3}, "variant": {"algo": "direct"}}
ENV = settings_free_env()

def tiny(cout: int = 2, **variant: Any) -> dict:
  return {"spec": {**TINY["spec"], "cout": cout}, "variant": {**TINY["variant"], **variant}}

@contextlib.contextmanager
def redis_server(workdir: pathlib.Path, port: int | None = None, password: str | None = None) -> Iterator[str]:
  """A throwaway redis-server on a loopback port (a free one by default; no persistence unless shut down with SHUTDOWN SAVE, which a
  later one in workdir loads); yields its URL."""
  import redis
  port = port or free_port()
  proc = subprocess.Popen([str(REDIS_SERVER), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                           "--dir", str(workdir), *(["--requirepass", password] if password else [])],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  url = f"redis://{f':{password}@' if password else ''}127.0.0.1:{port}/0"
  try:
    deadline = time.monotonic() + 20
    while True:
      try:
        if redis.Redis.from_url(url).ping(): break
      except redis.RedisError:
        if time.monotonic() > deadline: raise
        time.sleep(0.1)
    yield url
  finally:
    proc.kill()
    proc.wait()

@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[str]:
  with redis_server(tmp_path_factory.mktemp("redis")) as url: yield url

QUICK_DEATH = ("--heartbeat-ttl", "5")  # a killed worker is taken as gone 5 s after its last heartbeat (12 s by default)

@contextlib.contextmanager
def worker(url: str, name: str, log_dir: pathlib.Path, *flags: str, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
  """`kernel-explorer worker` in a session of its own (killing the session is a machine going away); registered before it yields.
  env: more environment variables (with KERNEL_EXPLORER_QUEUE the URL is not on the command line)."""
  from explorer.queue.client import QueueClient
  log = open(log_dir / f"worker-{name}.log", "w")  # noqa: SIM115 - the worker's log, open while it runs
  where = [] if "KERNEL_EXPLORER_QUEUE" in (env or {}) else ["--queue", url]
  proc = subprocess.Popen([sys.executable, "-m", "explorer", "worker", *where, "--device", "CPU", "--name", name, *flags], cwd=REPO,
                          env={**ENV, **(env or {})}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
  try:
    deadline = time.monotonic() + 60
    while "--burst" not in flags and not any(w["name"] == name or w["name"].startswith(f"{name}.") for w in QueueClient(url).workers()):
      assert proc.poll() is None and time.monotonic() < deadline, (log_dir / f"worker-{name}.log").read_text()
      time.sleep(0.2)
    yield proc
  finally:
    with contextlib.suppress(ProcessLookupError): os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    log.close()

def submit(base: str, body: dict) -> str:
  r = httpx.post(f"{base}/api/traces", json=body, timeout=60)
  assert r.status_code == 202, r.text
  return r.json()["id"]

def status(base: str, trace_id: str) -> dict: return httpx.get(f"{base}/api/traces/{trace_id}/status", timeout=60).json()

def wait_for(base: str, trace_id: str, timeout_s: float = 240.0) -> dict:
  deadline = time.monotonic() + timeout_s
  while (s := status(base, trace_id))["status"] not in ("done", "error"):
    assert time.monotonic() < deadline, f"trace {trace_id} still {s}"
    time.sleep(0.3)
  return s

def ran_on(base: str, trace_id: str) -> dict: return httpx.get(f"{base}/api/traces/{trace_id}", timeout=60).json()["env"]["ran_on"]

def test_a_trace_submitted_over_http_runs_on_a_worker_process(broker, tmp_path):
  with running_server(tmp_path / "s.sqlite3", tmp_path, queue=broker) as base, worker(broker, "w1", tmp_path):
    assert httpx.get(f"{base}/api/devices", timeout=60).json() == {"devices": ["CPU"], "unopened": []}  # what the registered workers offer
    trace_id = submit(base, TINY)
    assert wait_for(base, trace_id)["status"] == "done"
    where = ran_on(base, trace_id)
    assert where["worker"] == "w1" and where["host"] and where["pid"] and where["by"] == f"w1@{where['host']}"
    assert where["stages"] == dict.fromkeys(STAGES, f"w1@{where['host']}")  # every stage of the trace ran on the worker
    assert httpx.get(f"{base}/api/traces/{trace_id}", timeout=60).json()["env"]["device"] == "CPU"
    assert f"ran on <b>w1@{where['host']}</b></span>" in httpx.get(f"{base}/t/{trace_id}", timeout=60).text  # the page says where
    r = httpx.get(f"{base}/api/traces/{trace_id}/kernels/0/targets/opencl", timeout=60)  # a target added later: on the server
    deadline = time.monotonic() + 240
    while r.status_code == 202:
      assert time.monotonic() < deadline, r.json()
      time.sleep(0.3)
      r = httpx.get(f"{base}/api/traces/{trace_id}/kernels/0/targets/opencl", timeout=60)
    server = ran_on(base, trace_id)["targets"]["opencl"]
    assert r.status_code == 200 and re.fullmatch(rf"\d+@{re.escape(socket.gethostname())}", server) and server != f"{where['pid']}@{where['host']}"
    page = httpx.get(f"{base}/t/{trace_id}", timeout=60).text
    assert f"ran on <b>w1@{where['host']}</b> (every stage), <b>{server}</b> (OpenCL target)</span>" in page

def test_two_workers_share_a_batch_of_jobs(broker, tmp_path):
  """`--concurrency 2`: two worker processes (NAME.0 and NAME.1) under one command."""
  with running_server(tmp_path / "s.sqlite3", tmp_path, queue=broker) as base, worker(broker, "pair", tmp_path, "--concurrency", "2"):
    ids = [submit(base, tiny(cout=c)) for c in (2, 3, 4, 5)]
    assert all(wait_for(base, i)["status"] == "done" for i in ids)
    assert {ran_on(base, i)["worker"] for i in ids} == {"pair.0", "pair.1"}

def test_a_job_for_a_device_no_worker_offers_waits_and_says_so(broker, tmp_path):
  with running_server(tmp_path / "s.sqlite3", tmp_path, queue=broker) as base, worker(broker, "cpu-only", tmp_path):
    trace_id = submit(base, tiny(device="METAL"))
    deadline = time.monotonic() + 30
    while not (s := status(base, trace_id))["stages"][0]["detail"]:
      assert time.monotonic() < deadline, s
      time.sleep(0.2)
    assert s["status"] == "queued" and s["stages"][0]["stage"] == "queue"
    assert s["stages"][0]["detail"] == "no worker offers METAL; the job waits in the queue until one starts"

def test_a_worker_killed_mid_trace_is_retried_on_another(broker, tmp_path):
  """The machine running the job goes away (its worker's whole session SIGKILLed): its heartbeat stops, the server notices within
  seconds and queues the job again; another worker finishes it. Without a second attempt left, the job fails saying why."""
  with running_server(tmp_path / "s.sqlite3", tmp_path, queue=broker) as base:
    with worker(broker, "doomed", tmp_path, *QUICK_DEATH) as doomed:
      trace_id = submit(base, tiny(cout=6, time=True, repeats=1000))  # its timing stage: killed there, never before it or after
      deadline = time.monotonic() + 180
      while not any(st["stage"] == "timing" and st["status"] == "running" for st in status(base, trace_id)["stages"]):
        assert time.monotonic() < deadline and status(base, trace_id)["status"] in ("queued", "running"), status(base, trace_id)
        time.sleep(0.05)
      os.killpg(doomed.pid, signal.SIGKILL)
      killed = time.monotonic()
    with worker(broker, "rescuer", tmp_path):
      assert wait_for(base, trace_id)["status"] == "done"
      assert ran_on(base, trace_id)["worker"] == "rescuer" and time.monotonic() - killed < 120

@pytest.mark.slow
def test_a_job_whose_workers_all_die_fails_with_a_clear_message(broker, tmp_path):
  """Slow: a worker is started and SIGKILLed mid-job once per attempt, and each death is noticed only after its heartbeat lapses (5 s
  here: QUICK_DEATH)."""
  from explorer.queue.client import ATTEMPTS
  with running_server(tmp_path / "s.sqlite3", tmp_path, queue=broker) as base:
    trace_id = submit(base, tiny(cout=7, time=True, repeats=1000))  # long enough that no attempt ends before its worker is killed
    for attempt in range(ATTEMPTS):
      with worker(broker, f"doomed{attempt}", tmp_path, *QUICK_DEATH) as doomed:
        deadline = time.monotonic() + 120
        while not (f"doomed{attempt}" in (s := status(base, trace_id))["stages"][0]["detail"] and s["status"] == "running"):
          assert time.monotonic() < deadline, s
          time.sleep(0.1)
        os.killpg(doomed.pid, signal.SIGKILL)
    final = wait_for(base, trace_id, timeout_s=120)
    assert final["status"] == "error" and f"the worker running it died (doomed{ATTEMPTS - 1}), on attempt {ATTEMPTS} of {ATTEMPTS}" in final["error"]

@pytest.mark.slow
def test_a_restarted_server_follows_the_jobs_it_had_queued(broker, tmp_path):
  """Slow: two real servers in turn (each starts its process and database) and a worker that traces the jobs the first one queued."""
  db = tmp_path / "s.sqlite3"
  with running_server(db, tmp_path, "first.log", queue=broker) as base:
    trace_id = submit(base, tiny(cout=8))  # no worker yet: they wait in the queue
    r = httpx.post(f"{base}/api/studies", json={"kind": "constants", "specs": [tiny(cout=3)["spec"]], "repeats": 3, "warmup": 1}, timeout=60)
    study = r.json()["id"]
  with running_server(db, tmp_path, "second.log", queue=broker) as base:
    assert status(base, trace_id)["status"] in ("queued", "running")
    with worker(broker, "late", tmp_path):
      assert wait_for(base, trace_id)["status"] == "done" and ran_on(base, trace_id)["worker"] == "late"
      deadline = time.monotonic() + 400
      while (st := httpx.get(f"{base}/api/studies/{study}", timeout=60).json())["status"] == "running":
        assert time.monotonic() < deadline, st
        time.sleep(0.5)
      assert st["status"] == "done" and st["result"]["ran_on"]["worker"] == "late", st

def test_a_server_restarted_while_its_broker_is_down_keeps_its_jobs_queued_until_the_broker_is_back(tmp_path):
  import redis
  db, port = tmp_path / "s.sqlite3", free_port()
  with redis_server(tmp_path, port=port) as url:
    with running_server(db, tmp_path, "first.log", queue=url) as base: trace_id = submit(base, tiny(cout=11))
    redis.Redis.from_url(url).shutdown(save=True)  # the broker goes away, its jobs saved in tmp_path
  with running_server(db, tmp_path, "second.log", queue=url) as base:
    deadline = time.monotonic() + 60
    while "does not answer" not in (s := status(base, trace_id))["stages"][0]["detail"]:
      assert time.monotonic() < deadline, s
      time.sleep(0.2)
    assert s["status"] == "queued" and s["error"] is None and "the job stays queued and is followed again once it answers" in s["stages"][0]["detail"]
    with redis_server(tmp_path, port=port), worker(url, "back", tmp_path):  # the broker is back, with its jobs
      assert wait_for(base, trace_id)["status"] == "done" and ran_on(base, trace_id)["worker"] == "back"

def test_a_server_without_the_queue_marks_the_jobs_queued_on_it_interrupted_saying_how_to_follow_them(broker, tmp_path):
  db = tmp_path / "s.sqlite3"
  with running_server(db, tmp_path, "queued.log", queue=broker) as base:
    trace_id = submit(base, tiny(cout=12))  # no worker: it waits in the queue
    r = httpx.post(f"{base}/api/studies", json={"kind": "constants", "specs": [tiny(cout=5)["spec"]], "repeats": 3, "warmup": 1}, timeout=60)
    study = r.json()["id"]
  with running_server(db, tmp_path, "local.log") as base:  # the same store, no --queue
    s = status(base, trace_id)
    assert s["status"] == "interrupted" and s["error"].startswith("this trace was queued on a job queue, which this server does not use: "
                                                                  "restart it with --queue URL to follow it there"), s
    assert f"/api/traces/{trace_id}/rerun" in s["error"]
    st = httpx.get(f"{base}/api/studies/{study}", timeout=60).json()
    assert st["status"] == "interrupted" and "restart it with --queue URL" in st["error"], st
  with running_server(db, tmp_path, "again.log", queue=broker) as base:  # with the queue again: followed
    assert httpx.get(f"{base}/api/studies/{study}", timeout=60).json()["status"] == "running"
    with worker(broker, "follower", tmp_path):
      assert wait_for(base, trace_id)["status"] == "done" and ran_on(base, trace_id)["worker"] == "follower"

@pytest.mark.slow
def test_studies_and_diff_measurements_run_on_a_worker(broker, tmp_path):
  """Slow: two traces, a study (two traces and their timing) and a diff measurement, each a job a real worker takes from redis."""
  with running_server(tmp_path / "s.sqlite3", tmp_path, queue=broker) as base, worker(broker, "lab", tmp_path):
    a, b = submit(base, TINY), submit(base, tiny(algo="winograd"))
    assert wait_for(base, a)["status"] == wait_for(base, b)["status"] == "done"
    r = httpx.post(f"{base}/api/diff/{a}/{b}/timing?repeats=5&warmup=1", timeout=60)
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 240
    while (m := httpx.get(f"{base}/api/diff/{a}/{b}/timing", timeout=60).json())["status"] not in ("done", "error"):
      assert time.monotonic() < deadline, m
      time.sleep(0.5)
    assert m["status"] == "done" and m["result"]["compared"] and m["result"]["ran_on"]["by"] == f"lab@{socket.gethostname()}"
    r = httpx.post(f"{base}/api/studies", json={"kind": "constants", "specs": [TINY["spec"]], "repeats": 3, "warmup": 1}, timeout=60)
    assert r.status_code == 202, r.text
    study = r.json()["id"]
    deadline = time.monotonic() + 400
    while (st := httpx.get(f"{base}/api/studies/{study}", timeout=60).json())["status"] == "running":
      assert time.monotonic() < deadline, st
      time.sleep(0.5)
    assert st["status"] == "done", st
    assert st["result"]["ran_on"]["worker"] == "lab" and st["result"]["cases"][0]["rows"][0]["device"] == "CPU"
    trace_ids = [r["trace_id"] for c in st["result"]["cases"] for r in c["rows"]]
    assert trace_ids and all(httpx.get(f"{base}/api/traces/{t}", timeout=60).status_code == 200 for t in trace_ids)  # stored here
    from test_versions import _unmade
    if _unmade(): return  # (the older tinygrads' environments: `make tinygrad-versions`)
    r = httpx.post(f"{base}/api/studies", json={"kind": "constants", "specs": [TINY["spec"]], "repeats": 3, "warmup": 1, "tinygrad": "0.13.0"},
                   timeout=60)  # the worker runs it on tinygrad 0.13.0, in that tinygrad's environment on its own host
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 400
    while (st := httpx.get(f"{base}/api/studies/{r.json()['id']}", timeout=60).json())["status"] == "running":
      assert time.monotonic() < deadline, st
      time.sleep(0.5)
    assert st["status"] == "done" and st["result"]["tinygrad"] == "0.13.0" and st["result"]["ran_on"]["worker"] == "lab", st
    older = [r["trace_id"] for c in st["result"]["cases"] for r in c["rows"]]
    assert all(httpx.get(f"{base}/api/traces/{t}/raw", timeout=60).json()["env"]["tinygrad"] == "0.13.0" for t in older)

def test_the_worker_runs_only_the_explorers_jobs(broker, tmp_path):
  """A queue is a way into every worker: a job naming any other function is failed unrun, and a payload that is not JSON (RQ's
  default pickle) is never unpickled."""
  import redis
  from rq import Queue
  from rq.job import Job
  from rq.serializers import JSONSerializer
  from explorer.queue.protocol import queue_name
  connection = redis.Redis.from_url(broker)
  marker = tmp_path / "ran"
  evil = Queue(queue_name(None), connection=connection, serializer=JSONSerializer).enqueue("pathlib.Path.touch", str(marker))
  pickled = Queue(queue_name("CPU"), connection=connection).enqueue("pathlib.Path.touch", str(marker))
  with worker(broker, "guard", tmp_path, "--burst") as proc: proc.wait(timeout=60)
  assert proc.returncode == 0 and not marker.exists()
  job = Job.fetch(evil.id, connection=connection, serializer=JSONSerializer)
  assert job.get_status() == "failed" and job.meta["error"].startswith("refused: 'pathlib.Path.touch' is not one of the explorer's jobs")
  job = Job.fetch(pickled.id, connection=connection, serializer=JSONSerializer)
  assert job.get_status() == "failed" and job.meta["error"].startswith("refused: the job's payload is not JSON")

def test_the_worker_refuses_jobs_carrying_callbacks_webhooks_or_reruns(broker, tmp_path):
  """RQ imports and calls a job's success, failure and stopped callbacks by the names in its hash, sends its webhooks, and runs it
  again or later for retries, repeats and dependencies: an explorer job carrying any of them is failed unrun, and nothing it names
  is imported, called or sent."""
  import redis
  from rq import Callback, Queue, Repeat, Retry
  from rq.job import Dependency, Job
  from rq.serializers import JSONSerializer
  from rq.webhook import Webhook
  from explorer.queue.protocol import JOBS, queue_name
  marker = tmp_path / "hit"
  (tmp_path / "rider.py").write_text(f"def hit(*args, **kwargs): open({str(marker)!r}, 'a').write('hit')\n")
  hook = socket.create_server(("127.0.0.1", 0))
  hook.setblocking(False)
  connection = redis.Redis.from_url(broker)
  q = Queue(queue_name("CPU"), connection=connection, serializer=JSONSerializer)
  good, bad = {**TINY, "timeout_s": 120}, {"spec": {}, "variant": {}, "timeout_s": 120}  # bad: fails at once, which fires failure riders
  first = q.enqueue(JOBS["trace"], kwargs=bad)
  riders = {"a success callback": q.enqueue(JOBS["trace"], kwargs=good, on_success=Callback("rider.hit")),
            "a failure callback": q.enqueue(JOBS["trace"], kwargs=bad, on_failure=Callback("rider.hit")),
            "a stopped callback": q.enqueue(JOBS["trace"], kwargs=bad, on_stopped=Callback("rider.hit")),
            "webhooks": q.enqueue(JOBS["trace"], kwargs=bad, webhooks=[Webhook(f"http://127.0.0.1:{hook.getsockname()[1]}/", "failed")]),
            "retries": q.enqueue(JOBS["trace"], kwargs=bad, retry=Retry(max=3)),
            "repeats": q.enqueue(JOBS["trace"], kwargs=good, repeat=Repeat(times=3)),
            "dependencies": q.enqueue(JOBS["trace"], kwargs=good, depends_on=Dependency([first], allow_failure=True)),
            "positional arguments": q.enqueue(JOBS["trace"], TINY["spec"], TINY["variant"], 120)}
  with worker(broker, "picky", tmp_path, "--burst", env={"PYTHONPATH": str(tmp_path)}) as proc: proc.wait(timeout=120)
  assert proc.returncode == 0 and not marker.exists()
  with pytest.raises(BlockingIOError): hook.accept()  # no webhook connected
  for rider, job in riders.items():
    job = Job.fetch(job.id, connection=connection, serializer=JSONSerializer)
    assert job.get_status() == "failed" and job.meta["error"].startswith(f"refused: the job carries {rider}"), (rider, job.meta)
  assert Job.fetch(first.id, connection=connection, serializer=JSONSerializer).get_status() == "failed"  # an explorer job, run

STUDY = {"kind": "constants", "cases": [["tiny", TINY["spec"]]], "params": {"repeats": 3, "warmup": 1, "tile": None, "targets": ["cuda"],
         "device": None, "ci_width": 0.02, "budget_s": 120, "timeout_s": 720}}
MEASURE = {"kind": "timing", "a": {**TINY, "env": {"device": "CPU"}}, "b": {**TINY, "env": {"device": "CPU"}}, "repeats": 5, "warmup": 1,
           "timeout_s": 600}
OUT_OF_BOUNDS = [  # (job, a payload with one field past what the server allows, the worker's words): its settings are the defaults
  ("trace", {**TINY, "timeout_s": 100000}, "timeout_s must be a number in (0, 600] on this worker, got 100000"),
  ("trace", {**tiny(repeats=10**6), "timeout_s": 60}, "warmup must be 0..1000 and repeats 1..1000"),
  ("trace", {**tiny(rewrite_file="/tmp/rw.py"), "timeout_s": 60}, "variant.rewrite_file runs user code, which a worker never does"),
  ("trace", {**tiny(device="METAL"), "timeout_s": 60}, "device: device METAL is not offered here; this worker offers: CPU"),
  ("measure", {**MEASURE, "timeout_s": -1}, "timeout_s must be a number in (0, 600] on this worker, got -1"),
  ("measure", {**MEASURE, "repeats": 5000}, "warmup must be 0..1000 and repeats 1..1000"),
  ("measure", {**MEASURE, "kind": "rm"}, "unknown measurement 'rm'"),
  ("measure", {**MEASURE, "b": {**TINY, "env": {"device": "CPU;x"}}}, "device: device must be a device name"),
  ("study", {**STUDY, "params": {**STUDY["params"], "budget_s": 1e9}}, "budget_s must be a number in [1, 3600] on this worker, got 1000000000.0"),
  ("study", {**STUDY, "params": {**STUDY["params"], "timeout_s": 1e9}}, "timeout_s must be a number in (0, 720] on this worker, got 1000000000.0"),
  ("study", {**STUDY, "params": {**STUDY["params"], "ci_width": 5}}, "ci_width must be a number in (0, 1] on this worker, got 5"),
  ("study", {**STUDY, "params": {**STUDY["params"], "repeats": 2}}, "repeats must be a number in [3, 1000] on this worker, got 2"),
  ("study", {**STUDY, "params": {**STUDY["params"], "warmup": 500}}, "warmup must be a number in [0, 100] on this worker, got 500"),
  ("study", {**STUDY, "params": {**STUDY["params"], "targets": ["nope"]}}, "unknown target(s) nope"),
  ("study", {**STUDY, "params": {**STUDY["params"], "tile": "F(9,9)"}}, "tile must be one of"),
  ("study", {**STUDY, "params": {**STUDY["params"], "device": "METAL"}}, "device: device METAL is not offered here"),
  ("study", {**STUDY, "cases": STUDY["cases"] * 17}, "a study has 1 to 16 cases"),
]

def test_a_payload_past_the_servers_bounds_is_refused_saying_which(broker, tmp_path):
  """Whoever writes to the broker could ask a worker for anything the server would refuse: every numeric field is bounded by the
  worker's own settings (and the studies' request bounds), the spec and variant validated as the server validates them."""
  import redis
  from rq import Queue
  from rq.job import Job
  from rq.serializers import JSONSerializer
  from explorer.queue.protocol import JOBS, queue_name
  connection = redis.Redis.from_url(broker)
  q = Queue(queue_name("CPU"), connection=connection, serializer=JSONSerializer)
  jobs = [(why, q.enqueue(JOBS[kind], kwargs=kwargs)) for kind, kwargs, why in OUT_OF_BOUNDS]
  with worker(broker, "bounded", tmp_path, "--burst") as proc: proc.wait(timeout=120)
  for why, job in jobs:
    job = Job.fetch(job.id, connection=connection, serializer=JSONSerializer)
    assert job.get_status() == "failed" and why in job.meta["error"], (why, job.meta.get("error"))

def test_the_workers_study_bounds_are_the_servers():
  from explorer.queue.jobs import MAX_CASES, STUDY_BOUNDS
  from explorer.web.http.models import StudyRequest
  fields = StudyRequest.model_json_schema()["properties"]
  for name, (least, most) in STUDY_BOUNDS.items():
    bounds = next(b for b in fields[name].get("anyOf", [fields[name]]) if b.get("type") != "null")
    assert (bounds.get("minimum", bounds.get("exclusiveMinimum")), bounds["maximum"]) == (least, most), name
  assert fields["presets"]["maxItems"] + fields["specs"]["maxItems"] == MAX_CASES

def test_worker_processes_get_the_brokers_password_from_the_environment_not_their_command_line(tmp_path):
  """--concurrency N starts N child processes: the URL reaches them in KERNEL_EXPLORER_QUEUE, as docs/serving/queue.md says to give it, never
  on a command line (ps shows those to every user of the machine)."""
  from explorer.queue.client import QueueClient
  secret = f"pw-{os.getpid()}-{time.time_ns()}"
  with redis_server(tmp_path, password=secret) as url, \
       worker(url, "hush", tmp_path, "--concurrency", "2", env={"KERNEL_EXPLORER_QUEUE": url}) as proc:
    deadline = time.monotonic() + 60
    while {w["name"] for w in QueueClient(url).workers()} != {"hush.0", "hush.1"}:  # both children reached the broker
      assert time.monotonic() < deadline
      time.sleep(0.2)
    cmdlines = {pid: pathlib.Path(f"/proc/{pid}/cmdline").read_bytes() for pid in session_pids(proc.pid)}
    assert sum(b"hush." in c for c in cmdlines.values()) == 2, cmdlines  # the parent and its two children
    assert not [c for c in cmdlines.values() if secret.encode() in c], cmdlines

def session_pids(sid: int) -> list[int]:
  """The processes of a session (a worker started in one of its own, with its children)."""
  out = []
  for entry in pathlib.Path("/proc").iterdir():
    with contextlib.suppress(OSError, ValueError):
      if entry.name.isdigit() and os.getsid(int(entry.name)) == sid: out.append(int(entry.name))
  return out

def test_a_broker_gone_gives_503_with_a_reason_and_keeps_what_is_stored(tmp_path):
  db = tmp_path / "s.sqlite3"
  with redis_server(tmp_path) as url, running_server(db, tmp_path, queue=url) as base, worker(url, "w", tmp_path):
    kept = submit(base, TINY)
    assert wait_for(base, kept)["status"] == "done"
  with running_server(db, tmp_path, "after.log", queue=url) as base:  # the same server set-up, its broker gone
    r = httpx.post(f"{base}/api/traces", json=tiny(cout=9), timeout=60)
    assert r.status_code == 503 and "does not answer" in r.json()["detail"] and "redis://127.0.0.1" in r.json()["detail"]
    assert httpx.get(f"{base}/api/traces/{kept}", timeout=60).status_code == 200
    r = httpx.post(f"{base}/api/studies", json={"kind": "constants", "specs": [TINY["spec"]]}, timeout=60)
    assert r.status_code == 503 and "does not answer" in r.json()["detail"]

def test_the_worker_command_says_what_is_wrong(tmp_path):
  port = free_port()  # nothing listens there
  run = subprocess.run([sys.executable, "-m", "explorer", "worker", "--queue", f"redis://:secret@127.0.0.1:{port}/0"], cwd=REPO, env=ENV,
                       capture_output=True, text=True, timeout=60)
  assert run.returncode != 0 and "does not answer" in run.stderr and "secret" not in run.stderr and "Traceback" not in run.stderr
  run = subprocess.run([sys.executable, "-m", "explorer", "worker"], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=60)
  assert run.returncode != 0 and "--queue" in run.stderr and "Traceback" not in run.stderr

@needs_chromium
def test_the_browser_follows_a_queued_trace_to_its_page(broker, tmp_path, page, errors):
  """The progress page works as it does locally: the job queue's row while no worker serves it, then the stages live as a worker
  runs it, then the trace's page, which says where it ran."""
  with running_server(tmp_path / "s.sqlite3", tmp_path, queue=broker) as base:
    trace_id = submit(base, tiny(cout=10))
    page.goto(f"{base}/t/{trace_id}")
    row = page.locator('#stages li[data-stage="queue"]')
    assert row.locator(".name").inner_text() == "Job queue"
    page.wait_for_function("() => document.querySelector('#stages li[data-stage=queue] .detail').textContent.includes('no worker offers')",
                           timeout=30_000)
    with worker(broker, "shown", tmp_path):
      page.wait_for_selector("#ran-on", timeout=240_000)
      assert page.locator("#ran-on").inner_text().startswith("ran on shown@")
  assert not errors, errors

def test_a_device_with_an_index_goes_to_its_devices_queue():
  from explorer.queue.protocol import device_of, queue_name
  assert queue_name("CUDA:1") == queue_name("CUDA") == "explorer:CUDA" and queue_name(None) == "explorer:any"
  assert device_of("explorer:CUDA") == "CUDA" and device_of("explorer:any") is None and device_of("other:CUDA") is None

def test_a_worker_outlives_its_broker(tmp_path):
  """redis-server SIGKILLed under an idle worker for a few seconds: the worker says so, asks again with backoff and, once a broker
  answers on that address again, takes the next job. (RQ's dequeue retries a refused connection itself; a broker lost in any other
  call ends RQ's loop, and explorer.queue.worker.work starts it again once the broker answers.)"""
  port = free_port()
  broker_ = redis_server(tmp_path, port=port)
  url = broker_.__enter__()
  stubborn = worker(url, "stubborn", tmp_path)
  w, log = stubborn.__enter__(), tmp_path / "worker-stubborn.log"
  try:
    broker_.__exit__(None, None, None)  # SIGKILL
    deadline = time.monotonic() + 30
    while not any(said in log.read_text() for said in ("does not answer", "could not connect to Redis")):  # ours, or RQ's own retry
      assert w.poll() is None and time.monotonic() < deadline, log.read_text()
      time.sleep(0.2)
    time.sleep(3)
    assert w.poll() is None, log.read_text()
    with redis_server(tmp_path, port=port), running_server(tmp_path / "s.sqlite3", tmp_path, queue=url) as base:
      trace_id = submit(base, tiny(cout=9))
      assert wait_for(base, trace_id, timeout_s=120)["status"] == "done" and ran_on(base, trace_id)["worker"] == "stubborn", log.read_text()
  finally: stubborn.__exit__(None, None, None)

def test_a_worker_whose_broker_dies_mid_job_comes_back(tmp_path):
  """The broker dies while the worker runs a job (its progress cannot be saved, RQ's loop ends): the worker says the broker does not
  answer, asks again with backoff, and takes jobs again once a broker answers; the server, restarted with the broker, says in words
  what became of the job the broker lost."""
  port = free_port()
  broker_ = redis_server(tmp_path, port=port)
  url = broker_.__enter__()
  hardy = worker(url, "hardy", tmp_path)
  w, log = hardy.__enter__(), tmp_path / "worker-hardy.log"
  try:
    with running_server(tmp_path / "s.sqlite3", tmp_path, "first.log", queue=url) as base:
      lost = submit(base, tiny(cout=13, time=True, repeats=1000))  # seconds of timing: the broker dies while the job still runs
      deadline = time.monotonic() + 120
      while not any(st["stage"] != "queue" and st["status"] != "pending" for st in status(base, lost)["stages"]):
        assert time.monotonic() < deadline
        time.sleep(0.1)
      broker_.__exit__(None, None, None)  # SIGKILL, mid-job
      deadline = time.monotonic() + 60
      while "does not answer" not in log.read_text():
        assert w.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
      with redis_server(tmp_path, port=port):
        answer = wait_for(base, lost, timeout_s=180)
        assert answer["status"] == "error" and "lost this job" in answer["error"] and "No such job" not in answer["error"], answer
        trace_id = submit(base, tiny(cout=14))
        assert wait_for(base, trace_id, timeout_s=120)["status"] == "done" and ran_on(base, trace_id)["worker"] == "hardy", log.read_text()
        assert "answers again; taking jobs" in log.read_text()
  finally: hardy.__exit__(None, None, None)

def test_a_workers_heartbeat_ttl_is_bounded(capsys):
  from explorer.cli.main import main
  for bad in ("1", "301", "soon"):
    assert main(["worker", "--queue", "redis://127.0.0.1:1/0", "--heartbeat-ttl", bad]) == 2
    assert "--heartbeat-ttl" in capsys.readouterr().err
