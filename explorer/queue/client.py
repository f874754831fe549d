"""The server's side of the queue: enqueue a job on its device's queue, follow it (progress from its meta, a dead worker from its
missing heartbeat), retry it once when its worker died, and hand back its result. Every call blocks: the server runs them in a thread.

A job's RQ id is chosen by the caller (`trace-<trace id>` for traces) with its attempt appended, so a server that restarts finds
the jobs it had enqueued and follows them again (`resume`)."""
from __future__ import annotations
import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar
import redis
from rq import Queue, Worker
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer
from explorer.queue.protocol import BEAT_S, JOBS, RESULT_TTL_S, QueueJobFailed, QueueUnavailable, beat_key, device_of, queue_name, safe_url, unseal
from explorer.stages import Progress

POLL_S = 0.3
BROKER_PATIENCE_S = 60.0  # a broker that stays away this long while a job runs fails the job (it can be re-run when it is back)
ATTEMPTS = 2              # a job whose worker died is retried once
BROKER_RETRY_S = 2.0      # a job followed again after a restart asks an absent broker this often
WORKER_DIED = object()
T = TypeVar("T")

class QueueClient:
  """One broker (a redis:// URL; its password stays out of every message). With a secret (settings.queue_secret) a result counts
  only when its worker signed it with that secret (explorer.queue.protocol.unseal); max_result_bytes bounds each rewrite blob."""
  def __init__(self, url: str, connect_timeout_s: float = 3.0, secret: str | None = None, max_result_bytes: int = 256 << 20):
    self.url, self.where, self.secret, self.max_result_bytes = url, safe_url(url), secret, max_result_bytes
    self.connection = redis.Redis.from_url(url, socket_connect_timeout=connect_timeout_s, socket_timeout=30, health_check_interval=10)

  def _queue(self, device: str | None) -> Queue:
    return Queue(queue_name(device), connection=self.connection, serializer=JSONSerializer)

  def ping(self) -> None:
    """Raise QueueUnavailable unless the broker answers."""
    try: self.connection.ping()
    except redis.RedisError as e: raise QueueUnavailable(f"the job queue at {self.where} does not answer ({e}); try again when it is back") from None

  def workers(self) -> list[dict[str, Any]]:
    """The live workers (registered, their heartbeat key there): name, host, state, and the devices they offer."""
    out = []
    for w in Worker.all(connection=self.connection):
      if not self._alive(w.name): continue
      names = w.queue_names()
      out.append({"name": w.name, "host": w.hostname, "state": w.get_state(), "devices": [d for d in map(device_of, names) if d],
                  "queues": names})
    return out

  def offered(self) -> list[str]:
    """Every device some registered worker offers."""
    try: return sorted({d for w in self.workers() for d in w["devices"]})
    except redis.RedisError as e: raise QueueUnavailable(f"the job queue at {self.where} does not answer ({e})") from None

  def _alive(self, worker_name: str | None) -> bool: return worker_name is not None and bool(self.connection.exists(beat_key(worker_name)))

  def _serves(self, device: str | None) -> bool:
    return any(queue_name(device) in w["queues"] for w in self.workers())

  def run(self, kind: str, kwargs: dict[str, Any], device: str | None, job_id: str, progress: Progress, timeout_s: float) -> Any:
    """Enqueue the job (any earlier job of this id is dropped) and follow it to its result."""
    self.ping()
    for attempt in range(1, ATTEMPTS + 1): self._drop(f"{job_id}-{attempt}")
    self._enqueue(kind, kwargs, device, job_id, 1, timeout_s)
    return self.resume(job_id, progress)

  def resume(self, job_id: str, progress: Progress) -> Any:
    """Follow the latest attempt of the job job_id to its result (a server that restarted calls this for the jobs it had; while its
    broker does not answer, the job stays queued and its progress says why)."""
    def latest() -> int | None: return next((a for a in range(ATTEMPTS, 0, -1) if self._fetch(f"{job_id}-{a}") is not None), None)
    attempt = self._when_up(latest, progress)
    if attempt is None: raise QueueJobFailed(f"the queue at {self.where} no longer holds job {job_id}")
    while True:
      job = self._when_up(functools.partial(self._fetch, f"{job_id}-{attempt}"), progress)
      if job is None: raise QueueJobFailed(f"the queue at {self.where} lost job {job_id}")
      outcome = self._follow(job, progress)
      if outcome is not WORKER_DIED: return outcome
      if attempt == ATTEMPTS:
        raise QueueJobFailed(f"the worker running it died ({job.worker_name or 'unknown'}), on attempt {attempt} of {ATTEMPTS}")
      progress("queue", "start", f"worker {job.worker_name} died; the job is queued again for another worker (attempt {attempt + 1} of {ATTEMPTS})")
      attempt += 1
      self._enqueue(job.meta["kind"], job.kwargs, job.meta.get("device"), job_id, attempt, job.meta["timeout_s"])

  def _when_up(self, look: Callable[[], T], progress: Progress) -> T:
    """look(), tried again every few seconds for as long as the broker does not answer (a server restarted before its broker was
    back): the job's progress says so once, and the job stays queued."""
    said = False
    while True:
      try: return look()
      except redis.RedisError as e:
        if not said: progress("queue", "start", f"the job queue at {self.where} does not answer ({e}); the job stays queued and is followed "
                                                "again once it answers")
        said = True
        time.sleep(BROKER_RETRY_S)

  def _enqueue(self, kind: str, kwargs: dict[str, Any], device: str | None, job_id: str, attempt: int, timeout_s: float) -> Job:
    meta: dict[str, Any] = {"kind": kind, "device": device, "attempt": attempt, "timeout_s": timeout_s, "progress": []}
    return self._queue(device).enqueue(JOBS[kind], kwargs=kwargs, job_id=f"{job_id}-{attempt}", job_timeout=int(timeout_s) + 120,
                                       result_ttl=RESULT_TTL_S, failure_ttl=RESULT_TTL_S, meta=meta)

  def _fetch(self, rq_id: str) -> Job | None:
    try: return Job.fetch(rq_id, connection=self.connection, serializer=JSONSerializer)
    except NoSuchJobError: return None

  def _drop(self, rq_id: str) -> None:
    if (job := self._fetch(rq_id)) is not None: job.delete()

  def _follow(self, job: Job, progress: Progress) -> Any:
    """The job's result, its progress relayed meanwhile; WORKER_DIED when its heartbeat stopped."""
    seen, said, silent_since, away_since = 0, None, None, None
    while True:
      try: status, beating, serves = self._look(job)
      except NoSuchJobError:  # the broker came back without its data (restarted without persistence)
        raise QueueJobFailed(f"the job queue at {self.where} lost this job (its broker restarted without its data); run it again") from None
      except redis.RedisError as e:
        away_since = away_since or time.monotonic()
        if time.monotonic() - away_since > BROKER_PATIENCE_S: raise QueueJobFailed(f"the job queue at {self.where} went away: {e}") from None
        time.sleep(1.0)
        continue
      away_since = None
      events = job.meta.get("progress", [])
      for stage, state, detail in events[seen:]: progress(stage, state, detail)
      seen = len(events)
      if status == JobStatus.FINISHED: return unseal(job.return_value(), self.secret)
      if status in (JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED):
        raise QueueJobFailed(job.meta.get("error") or _last_line(job) or f"the job {status.value}")
      if (word := _queue_word(job, status, serves)) not in (None, said):
        progress("queue", "done" if status == JobStatus.STARTED else "start", word)
        said = word
      if status == JobStatus.STARTED and not beating:  # a worker that died mid-job stops beating (its key expires); a busy one does not
        silent_since = silent_since or time.monotonic()
        if time.monotonic() - silent_since > BEAT_S: return WORKER_DIED  # not a job that started a moment ago, before its first beat
      else: silent_since = None
      time.sleep(POLL_S)

  def _look(self, job: Job) -> tuple[JobStatus, bool, bool]:
    """The job refreshed (status, meta, worker): its status, whether its worker is alive, whether a live worker serves its queue."""
    job.refresh()  # type: ignore[no-untyped-call]  # (RQ's Job is untyped)
    status = job.get_status(refresh=False)
    serves = status != JobStatus.QUEUED or self._serves(job.meta.get("device"))
    return status, self._alive(job.worker_name), serves

def _queue_word(job: Job, status: JobStatus, serves: bool) -> str | None:
  """The job queue's row on the progress page while the job waits or once a worker took it."""
  device = job.meta.get("device")
  if status == JobStatus.QUEUED and not serves: return f"no worker offers {device or 'any device'}; the job waits in the queue until one starts"
  if status == JobStatus.QUEUED: return f"waiting in {queue_name(device)} for a free worker"
  if status == JobStatus.STARTED: return f"taken by worker {job.worker_name}"
  return None

def _last_line(job: Job) -> str | None:
  result = job.latest_result()
  text = (getattr(result, "exc_string", None) or "").strip()
  return text.splitlines()[-1] if text else None
