"""`kernel-explorer worker`: RQ workers that take the explorer's jobs for this machine's devices.

Each worker process listens on one queue per device it offers (explorer:CUDA, ...) and on explorer:any, the jobs that name no
device (they run on the worker's first device). It runs the explorer's job functions only (explorer.queue.protocol.JOBS), reads
payloads with RQ's JSON serializer (never pickle), and runs each job in its own process (SimpleWorker: the job itself spawns the
tinygrad process with its limits). --concurrency N starts N such processes, the broker's URL in their environment (KERNEL_EXPLORER_QUEUE):
a password on their command lines would show in ps."""
from __future__ import annotations
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from typing import Any
import redis
from rq import Queue, SimpleWorker
from rq.exceptions import DeserializationError
from rq.job import Job
from rq.serializers import JSONSerializer
from explorer.queue import jobs
from explorer.queue.protocol import BEAT_S, BEAT_TTL_S, JOBS, beat_key, queue_name, safe_url
from explorer.settings import ENV_PREFIX

WORKER_TTL_S = 30  # an idle worker's registration expires this long after its last heartbeat

class ExplorerWorker(SimpleWorker):
  """An RQ worker that runs the explorer's jobs and refuses any other job a queue hands it."""
  def perform_job(self, job: Job, queue: Queue) -> bool:
    if (why := refusal(job)) is None: return super().perform_job(job, queue)
    job.meta["error"] = why
    job.save_meta()  # type: ignore[no-untyped-call]  # (RQ's Job is untyped)
    job.webhooks, job.retries_left, job.repeats_left = [], None, None  # refused: nothing RQ does after a failure either
    self.handle_job_failure(job=job, queue=queue, started_job_registry=queue.started_job_registry, exc_string=why)
    return False

def refusal(job: Job) -> str | None:
  """Why this worker will not run the job (None: it runs it). It runs what the explorer's server enqueues and nothing else: one of
  protocol.JOBS with JSON keyword arguments, and nothing beside it that RQ would import and call (success, failure and stopped
  callbacks, named in the job hash), send (webhooks) or run again or later (retries, repeats, dependencies)."""
  try: name, instance, args = job.func_name, job.instance, job.args
  except DeserializationError: return "refused: the job's payload is not JSON (explorer jobs are enqueued with RQ's JSONSerializer)"
  if name not in JOBS.values(): return f"refused: {name!r} is not one of the explorer's jobs ({', '.join(sorted(JOBS.values()))})"
  beside = {"a success callback": job._success_callback_name, "a failure callback": job._failure_callback_name,
            "a stopped callback": job._stopped_callback_name, "webhooks": job.webhooks, "dependencies": job._dependency_ids,
            "retries": job.retries_left, "repeats": job.repeats_left, "an instance to call": instance, "positional arguments": args}
  if carried := [what for what, value in beside.items() if value]:
    return f"refused: the job carries {', '.join(carried)}; explorer jobs carry none (only their keyword payload)"
  return None

def detect_devices(timeout_s: float = 120.0) -> list[str]:
  """The compute devices this machine opens, best first (listed in a worker process: opening a device imports tinygrad)."""
  from explorer.analysis.roofline import list_devices
  return [d["device"] for d in list_devices(timeout_s)["devices"]]

BROKER_BACKOFF_S = (1.0, 30.0)  # a worker whose broker went away asks again after 1 s, then twice as long each time, up to 30 s

def work(url: str, devices: list[str], name: str | None = None, burst: bool = False, beat_ttl_s: float = BEAT_TTL_S) -> None:
  """One worker in this process, until SIGTERM (after its job) or, with burst, until its queues are empty. A broker that goes away
  does not end it: it asks again with backoff (saying so on stderr) and takes jobs again once the broker answers. beat_ttl_s: how
  soon after this process dies the server takes it as gone."""
  jobs.DEVICES[:] = devices
  name = name or f"{socket.gethostname()}.{os.getpid()}"
  while True:
    connection = redis.Redis.from_url(url)
    queues = [Queue(queue_name(d), connection=connection, serializer=JSONSerializer) for d in [*devices, None]]
    worker = ExplorerWorker(queues, connection=connection, serializer=JSONSerializer, worker_ttl=WORKER_TTL_S, name=name)
    done = threading.Event()
    threading.Thread(target=beat, args=(connection, worker.name, done, beat_ttl_s), daemon=True, name="heartbeat").start()
    try: worker.work(burst=burst, with_scheduler=False, logging_level=logging.getLevelName(logging.WARNING))
    except redis.RedisError: pass  # its registration or its teardown met the absent broker: waited for below
    except ValueError as e:  # our own registration outlived a broker restart (it persisted): ours to clear
      if "active worker" not in str(e): raise
      with contextlib.suppress(redis.RedisError): connection.delete(worker.key)
      continue
    finally:
      done.set()
      with contextlib.suppress(redis.RedisError): connection.delete(beat_key(worker.name))
    if burst or worker._stop_requested or not wait_for_broker(connection, url, name): return

def wait_for_broker(connection: redis.Redis, url: str, name: str) -> bool:
  """After the worker loop stopped on its own: ask the broker with backoff until it answers (True), or until SIGTERM or SIGINT (False).
  A worker loop that stopped while its broker answers is restarted at once, saying why."""
  stop = threading.Event()
  for sig in (signal.SIGTERM, signal.SIGINT): signal.signal(sig, lambda *_: stop.set())
  delay, said = BROKER_BACKOFF_S[0], False
  while True:
    try:
      connection.ping()
      again = f"the job queue at {safe_url(url)} answers again; taking jobs" if said else \
        "its worker loop stopped while the job queue answers (see the error above); starting it again"
      print(f"kernel-explorer worker {name}: {again}", file=sys.stderr, flush=True)
      return True
    except redis.RedisError as e:
      print(f"kernel-explorer worker {name}: the job queue at {safe_url(url)} does not answer ({e}); asking again in {delay:.0f} s",
            file=sys.stderr, flush=True)
      said = True
    if stop.wait(delay): return False
    delay = min(delay * 2, BROKER_BACKOFF_S[1])

def beat(connection: redis.Redis, name: str, done: threading.Event, ttl_s: float = BEAT_TTL_S) -> None:
  """This worker's heartbeat, idle or busy (a job runs in the main thread): when the process dies the key expires ttl_s later, and
  the server takes it as gone (RQ's own registration outlives a busy worker by its job's whole timeout). It is refreshed four times
  per ttl_s (at most every BEAT_S), so a beat that a busy machine delays does not let it lapse."""
  while True:
    with contextlib.suppress(redis.RedisError): connection.set(beat_key(name), "1", px=int(ttl_s * 1000))
    if done.wait(min(BEAT_S, ttl_s / 4)): return

def serve(url: str, devices: list[str], concurrency: int = 1, name: str | None = None, burst: bool = False,
          beat_ttl_s: float = BEAT_TTL_S) -> int:
  """concurrency workers: this process alone for one, else that many child processes (SIGTERM and SIGINT reach them all)."""
  print(f"kernel-explorer worker: {concurrency} x [{', '.join(devices)} + any jobs] from {safe_url(url)}", file=sys.stderr, flush=True)
  if concurrency == 1:
    work(url, devices, name, burst, beat_ttl_s)
    return 0
  base = name or f"{socket.gethostname()}.{os.getpid()}"
  argv = [sys.executable, "-m", "explorer", "worker", "--concurrency", "1", "--heartbeat-ttl", str(beat_ttl_s),
          *(a for d in devices for a in ("--device", d))]
  env = {**os.environ, f"{ENV_PREFIX}QUEUE": url}  # not on the command line: its password would show in ps
  children = [subprocess.Popen([*argv, "--name", f"{base}.{i}", *(["--burst"] if burst else [])], env=env) for i in range(concurrency)]
  def forward(sig: int, _: Any) -> None:
    for c in children: c.send_signal(sig)
  for sig in (signal.SIGTERM, signal.SIGINT): signal.signal(sig, forward)
  return max(c.wait() for c in children)
