"""Trace jobs: POST returns at once; explorer.tracing.pipeline.run.run_trace runs in a daemon thread (it spawns the tinygrad process itself),
progress reaches the event loop through call_soon_threadsafe, and the finished trace lands in the store.
Identical requests share one job: the job id is the store key.

Jobs are durable: each is a row of the store's tasks table (kind "trace"), written when accepted (with its request), and again as it
starts and ends (lifecycle.Journal). A server that stops (SIGTERM) marks its unfinished jobs interrupted; one that died (SIGKILL) has
them marked by the next server that opens the store and finds their owner process gone. Every accepted id keeps answering, and an
interrupted one re-runs from its stored request with one click (POST /api/traces/{id}/rerun)."""
from __future__ import annotations
import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from explorer.background import TRACE, TaskState
from explorer.spec import ConvSpec, SpecError, Variant
from explorer.stages import PARTIAL, STAGES
from explorer.store import Store
from explorer.text import one_line
from explorer.web.services import remote
from explorer.web.services.lifecycle import ACTIVE, DONE, INTERRUPTED, QUEUE_OWNER, QUEUED, RUNNING, Busy, ClientBusy, Journal, Task, Tasks

if TYPE_CHECKING:
  from explorer.queue.client import QueueClient  # the [queue] extra: imported only with a job queue
  from explorer.schema import Buffer, KernelRow, ScheduleRow, TensorGraph

STOPPED = "the server stopped before this trace finished; re-run it from its page (one click) or with POST /api/traces/{id}/rerun"
QUEUED_ELSEWHERE = ("this trace was queued on a job queue, which this server does not use: restart it with --queue URL to follow it there, "
                    "or re-run it here from its page (one click) or with POST /api/traces/{id}/rerun")


MAX_REPORT = 4 << 20  # the largest report of a running trace kept (its schedule of a big program included)

@dataclass
class SoFar:
  """What a running trace has reported so far (explorer.tracing.pipeline.trace.Recorder.partial), checked as data: the trace page shows it while
  codegen goes on (schedule, buffers, a row per kernel as its codegen ends)."""
  schedule: list[ScheduleRow] = field(default_factory=list)
  buffers: list[Buffer] = field(default_factory=list)
  tensor_graph: TensorGraph | None = None
  kernels: dict[int, KernelRow] = field(default_factory=dict)

  def add(self, what: str, text: str) -> bool:
    """Keep one report; False (nothing kept) for one that does not read as data of its kind."""
    from explorer.schema import validate_partial
    if len(text) > MAX_REPORT: return False
    try: got = validate_partial(what, json.loads(text))
    except (ValueError, SpecError): return False
    if what == "schedule": self.schedule, self.buffers, self.tensor_graph = got["schedule"], got["buffers"], got["tensor_graph"]
    else: self.kernels[got["index"]] = got
    return True

  @property
  def started(self) -> bool: return bool(self.schedule)

  def view(self) -> dict[str, Any]:
    """A trace-shaped dict of what is known: what the trace page's live panels render."""
    kernels = [self.kernels[i] for i in sorted(self.kernels)]
    schedule = [dict(s, name=next((k["name"] for k in kernels if k["call"] == s["index"]), None),
                     kernel=next((k["index"] for k in kernels if k["call"] == s["index"]), None)) for s in self.schedule]
    return {"schedule": schedule, "buffers": self.buffers, "kernels": kernels, "tensor_graph": self.tensor_graph,
            "expected": sum(1 for s in self.schedule if s["kind"] == "kernel")}

@dataclass
class TraceTask(Task):
  """A trace job: the lifecycle's task with the trace's stages (each pending, running, done, error or skipped) and its progress as
  events, for the live progress stream."""
  spec: ConvSpec = field(default_factory=lambda: ConvSpec(1, 1, 1, 1, 1, 1))
  variant: Variant = field(default_factory=Variant)
  label: str = ""
  stages: dict[str, dict[str, str]] = field(default_factory=lambda: {s: {"stage": s, "status": "pending", "detail": ""} for s in STAGES})
  events: list[dict[str, Any]] = field(default_factory=list)
  failed: str | None = None  # the stage that failed in a trace that was stored all the same: its job is done, with this error
  changed: asyncio.Event = field(default_factory=asyncio.Event)
  so_far: SoFar = field(default_factory=SoFar)  # what the trace has reported while it runs

  def emit(self, event: dict[str, Any]) -> None:
    self.events.append(event)
    self.changed.set()
    self.changed = asyncio.Event()  # waiters hold the set one; the next change wakes new waiters

  def start_running(self) -> None:
    if self.status == QUEUED:
      self.status = RUNNING
      self.emit({"event": "status", "status": RUNNING})

  def note(self, stage: str, status: str, detail: str) -> None:
    if stage == PARTIAL:  # a report of what the trace holds so far, not a stage
      if self.so_far.add(status, detail): self.emit({"event": "partial", "what": status, "kernels": len(self.so_far.kernels)})
      return
    if stage != "queue": self.start_running()  # "queue": the job queue's word on a job still waiting
    row = self.stages.setdefault(stage, {"stage": stage, "status": "pending", "detail": ""})
    row["status"], row["detail"] = {"start": "running"}.get(status, status), detail
    self.emit({"event": "stage", "stage": stage, "status": row["status"], "detail": detail})

  def finish(self, status: TaskState, result: Any = None, error: str | None = None) -> None:
    super().finish(status, result, error or (self.failed if status == DONE else None))
    for row in self.stages.values():
      if row["status"] == "running": row["status"] = "done" if status == DONE else "error"
      elif row["status"] == "pending": row["status"] = "skipped"
    self.emit({"event": "done", "status": status, "error": self.error})

  def view(self) -> dict[str, Any]:
    """The job as GET /api/traces/{id}/status shows it (explorer.web.http.models.TraceStatus, less its url)."""
    return {"id": self.id, "status": self.status, "label": self.label, "stages": list(self.stages.values()), "error": self.error}

def stored_job_status(row: dict[str, Any]) -> dict[str, Any]:
  """The status of a job known only from the store: one that failed, was interrupted, or runs in another server process."""
  stages = [{"stage": s, "status": "pending" if row["status"] in ACTIVE else "skipped", "detail": ""} for s in STAGES]
  error = (row.get("error") or STOPPED).replace("{id}", row["id"]) if row["status"] == INTERRUPTED else row.get("error")
  return {"id": row["id"], "status": row["status"], "label": row["label"], "stages": stages, "error": error}

class QueueFull(Busy):
  """No trace can be accepted now: too many are waiting for a worker."""
  retry_after_s = 60

class JobManager:
  """Runs at most `parallel` traces at once, queues up to `max_queue` more; finished jobs stay listed for `keep_s` seconds."""
  def __init__(self, store: Store, parallel: int = 1, timeout_s: float = 600.0, keep_s: float = 3600.0,
               runner: Callable[..., Any] | None = None, max_queue: int = 16, limits: Any = None, queue_wait_s: float = 900.0,
               queue: QueueClient | None = None, max_per_client: int = 0, on_stored: Callable[[str, dict[str, Any]], None] | None = None,
               beside: tuple[str, ...] = ()):
    """With queue, traces run on the job queue's workers (explorer.web.services.remote) and outlive this server: they are followed again
    when it restarts (resume_queued) instead of being marked interrupted. on_stored(id, trace): a trace was stored (what may follow it in
    the background starts there). beside: other targets this server's own workers render with each trace (settings.render_beside)."""
    self.queue, self.on_stored, self.beside = queue, on_stored, beside
    self.store, self.timeout_s, self.keep_s, self.max_queue, self.limits = store, timeout_s, keep_s, max_queue, limits
    self.max_per_client = max_per_client
    # the free workers take jobs at once, max_queue more may wait; a client's traces run on all but one worker (they can take minutes)
    self.tasks: Tasks[TraceTask] = Tasks(parallel, queue_wait_s, reserve=True)
    self.followed: Tasks[TraceTask] = Tasks()  # jobs a restarted server follows on the job queue: their workers are the queue's
    self.runs = 0  # trace runs started: tests check that identical requests are not run twice
    self.live: dict[int, Any] = {}  # this manager's running worker processes by pid (explorer.tracing.workers.process registers them)
    self.journal = Journal(store, TRACE, STOPPED, QUEUED_ELSEWHERE, with_queue=queue is not None)
    self.owner, self.interrupted_at_start = self.journal.owner, self.journal.interrupted_at_start
    self._parallel = parallel
    self._runner = runner

  def _all(self) -> list[TraceTask]: return [*self.tasks.tasks.values(), *self.followed.tasks.values()]

  def get(self, job_id: str) -> TraceTask | None:
    self._forget_old()
    return self.tasks.get(job_id) or self.followed.get(job_id)

  def running(self) -> int: return sum(1 for j in self._all() if j.active)

  def stored(self, job_id: str) -> dict[str, Any] | None:
    """The job's row in the store (its request parsed; None where it does not parse): one that failed, was interrupted, or runs in
    another server process."""
    return self.store.get_task(TRACE, job_id)

  def forget(self, job_id: str) -> None:
    """A finished job's status goes (its trace was deleted)."""
    for tasks in (self.tasks, self.followed):
      if (job := tasks.get(job_id)) is not None and not job.active: tasks.forget(job_id)

  async def submit(self, job_id: str, spec: ConvSpec, variant: Variant, request: dict[str, Any], client: str | None = None) -> TraceTask:
    """The job for this id: the one already queued or running, else a new one, written to the store (with the request that
    re-runs it) before this returns (the caller checked the store for a finished trace first). client: the address that asked,
    held to max_per_client jobs running or waiting (ClientBusy past it; joining a running job is free)."""
    return (await self.submit_all([(job_id, spec, variant, request)], client))[0]

  async def submit_all(self, wanted: list[tuple[str, ConvSpec, Variant, dict[str, Any]]], client: str | None = None) -> list[TraceTask]:
    """Jobs for several traces at once (a diff's two variants), admitted together: each joins its identical job where one is queued or
    running; the new ones are admitted as one (QueueFull, ClientBusy: none of them is started) and registered in the same step, with
    nothing awaited between the check and the registration, so that requests arriving at the same instant join them or count against
    the bounds. Then each is written to the store, then launched."""
    jobs: list[TraceTask] = []
    new: dict[str, TraceTask] = {}
    for job_id, spec, variant, _ in wanted:
      if (job := self.get(job_id)) is not None and job.active: jobs.append(job)
      elif job_id in new: jobs.append(new[job_id])
      else: jobs.append(new.setdefault(job_id, self._new_job(job_id, spec, variant, f"{spec.label()} | {variant.label()}", client)))
    self._admit(len(new), client)
    for job in new.values(): self.tasks.claim(job.id, job)
    try:
      await remote.queue_answers(self.queue)
      for job_id, _, _, request in wanted:
        if job_id in new: await asyncio.wrap_future(self.journal.accept(new[job_id], new[job_id].label, request))
    except Exception as e:
      for job in new.values(): self.tasks.release(job.id, job, f"not accepted: {one_line(e)}")
      raise
    for job in new.values(): self._launch(self.tasks, job, claimed=True)
    return jobs

  def _admit(self, n: int, client: str | None) -> None:
    """Room for n new jobs: QueueFull once the workers and the queue behind them are full, ClientBusy past the client's share."""
    if not n: return
    if self.running() + n > self._parallel + self.max_queue:  # the free workers take jobs at once; max_queue more may wait
      raise QueueFull(f"{self.max_queue} traces are already waiting for a worker; try again in a minute")
    if client is not None and self.max_per_client and \
       (mine := sum(1 for j in self._all() if j.client == client and j.active)) + n > self.max_per_client:
      raise ClientBusy(f"this client has {mine} traces running or waiting, its share (max_jobs_per_client); try again when one is done")

  def _new_job(self, job_id: str, spec: ConvSpec, variant: Variant, label: str, client: str | None = None) -> TraceTask:
    job = TraceTask(id=job_id, spec=spec, variant=variant, label=label, client=client, running_on_turn=False)
    if self.queue is not None: job.stages = {"queue": {"stage": "queue", "status": "pending", "detail": ""}, **job.stages}
    return job

  def resume_queued(self, resolve: Callable[[dict[str, Any]], tuple[ConvSpec, Variant]]) -> int:
    """Follow again the traces this server had on the job queue before it restarted (call from the event loop); resolve turns a
    stored request into its spec and variant. Returns how many."""
    if self.queue is None: return 0
    rows = self.store.unfinished_tasks(TRACE, QUEUE_OWNER)
    for row in rows:
      spec, variant = resolve(row["request"])
      self._launch(self.followed, self._new_job(row["id"], spec, variant, row["label"]), resume=True)
    return len(rows)

  def _launch(self, tasks: Tasks[TraceTask], job: TraceTask, resume: bool = False, claimed: bool = False) -> TraceTask:
    """Run the trace (once a worker slot is free) and store it; a failure becomes the job's one-line error, every change its row."""
    async def started(job: TraceTask) -> None:
      if self.queue is None: job.start_running()  # on the job queue it is queued until a worker takes it (its first stage's progress)
      self.runs += 1
      await self.journal.started(job)
    async def kept(job: TraceTask, result: Any) -> Any:
      job.note("store", "start", "writing the trace to the store")
      await asyncio.to_thread(self.store.put_trace, job.id, result.trace, result.rewrites, result.target_rewrites)
      job.note("store", "done", "")
      if failures := result.trace.get("failures") or []: job.failed = f"stage {failures[0]['stage']} failed: {failures[0]['error']}"
      if self.on_stored is not None: self.on_stored(job.id, result.trace)
      return None  # stored: the job keeps no copy
    async def ended(job: TraceTask) -> None: await self.journal.ended(job)
    work = lambda job, progress: self._run_trace(job, progress, resume)
    return tasks.launch(job, work, started, kept, ended) if claimed else tasks.start(job.id, job, work, started, kept, ended)

  def learn_default_device(self) -> None:
    """Where this server runs its traces itself, this host's default device found now, in a worker of its own, so that the first trace
    opens it alone as the next ones do (explorer.tracing.pipeline.run.learn_default_device); a server starting calls it."""
    if self._runner is None and self.queue is None:
      from explorer.tracing.pipeline.run import learn_default_device
      learn_default_device(self.timeout_s)

  def _run_trace(self, job: TraceTask, progress: Callable[[str, str, str], None], resume: bool = False) -> Any:
    if self._runner is not None: return self._runner(job.spec, job.variant, progress, self.timeout_s)
    if self.queue is not None:
      if resume: return remote.resume_trace(self.queue, job.id, progress, job.spec, job.variant)
      return remote.run_trace(self.queue, job.id, job.spec, job.variant, progress, self.timeout_s)
    from explorer.tracing.pipeline.run import run_trace  # no tinygrad import: run_trace spawns the process that imports it
    return run_trace(job.spec, job.variant, progress=progress, timeout_s=self.timeout_s, limits=self.limits, live=self.live,
                     beside=self.beside)

  def _forget_old(self) -> None:
    now = time.time()
    for tasks in (self.tasks, self.followed):
      for k in [k for k, j in tasks.tasks.items() if j.finished is not None and now - j.finished > self.keep_s]: tasks.forget(k)

  async def wait_idle(self) -> None:
    running = [*self.tasks.running, *self.followed.running]
    if running: await asyncio.gather(*running, return_exceptions=True)

  def shutdown(self) -> None:
    """The server is stopping: unfinished jobs are marked interrupted (in the store too) and their workers' groups killed. Jobs on
    the queue go on: the next server follows them."""
    from explorer.tracing.workers.process import stop
    self.journal.interrupt(self._all())
    stop(list(self.live.values()))
    self.tasks.cancel_all()
    self.followed.cancel_all()
    self.journal.close()
