"""Studies on the web: one at a time per server (two would time against each other), run in a daemon thread by
explorer.analysis.study.run_studies, which spawns the trace and timing workers itself. Each is written to the store when accepted and
again when it ends, with its result (a row of the store's tasks table, kind "study": lifecycle.Journal): the permalink /studies/{id}
keeps answering after a restart. Each variant's trace is stored too, so the study's page links to the kernels it timed."""
from __future__ import annotations
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from explorer.analysis.study import DEFAULT_PRESETS, STUDY_VARIANTS, run_studies, study_steps
from explorer.background import DONE, RUNNING, STUDY, TaskState
from explorer.present.study import document_rows
from explorer.schema import study_problem
from explorer.spec import PRESETS, ConvSpec, Variant
from explorer.stages import Progress
from explorer.store import Store, StoreError, capped, trace_key
from explorer.text import one_line
from explorer.web.services import remote
from explorer.web.services.lifecycle import ERROR, QUEUE_OWNER, Journal, Task, Tasks
from explorer.web.urls import study_url

if TYPE_CHECKING:
  from explorer.queue.client import QueueClient  # the [queue] extra: imported only with a job queue

STOPPED = "the server stopped before this study finished; start it again from the studies page"
QUEUED_ELSEWHERE = ("this study was queued on a job queue, which this server does not use: restart it with --queue URL to follow it there, "
                    "or start it again here from the studies page")

class StudyRunning(RuntimeError):
  """A study is running already (409: studies run one at a time, or they would time each other)."""
  def __init__(self, study_id: str):
    super().__init__(f"study {study_id} is running ({study_url(study_id)}); one runs at a time: start this one when it ends")
    self.study_id = study_id

def cases_of(kind: str, presets: list[str], specs: list[ConvSpec]) -> list[tuple[str, ConvSpec]]:
  """(name, spec) per case: the presets asked for, then the custom shapes (named by their shape); neither: the document's cases."""
  if not presets and not specs: presets = list(DEFAULT_PRESETS[kind])
  return [(p, PRESETS[p]) for p in presets] + [(s.label(), s) for s in specs]

def label_of(kind: str, cases: list[tuple[str, ConvSpec]], tinygrad: str | None = None) -> str:
  return f"{kind}: {', '.join(name for name, _ in cases)}" + (f" on tinygrad {tinygrad}" if tinygrad else "")

@dataclass
class StudyTask(Task):
  """A study this server is running: its progress, from run_studies's callback (a study has no queue: it runs from the start)."""
  kind: str = ""
  label: str = ""
  request: dict[str, Any] = field(default_factory=dict)
  steps: int = 0
  step: int = 0
  current: str = "starting"
  status: TaskState = RUNNING

  def note(self, step: str, status: str, detail: str) -> None:
    if self.finished is not None: return
    self.current, self.detail = step, detail
    if status in ("done", "error"): self.step = min(self.step + 1, self.steps)

  def view(self) -> dict[str, Any]:
    return {"id": self.id, "kind": self.kind, "label": self.label, "status": self.status, "url": study_url(self.id), "step": self.step,
            "steps": self.steps, "current": self.current, "detail": self.detail, "error": self.error, "created": self.created,
            "elapsed_s": self.elapsed_s, "request": self.request}

def stored_status(row: dict[str, Any]) -> dict[str, Any]:
  """A study known from the store: done (with its result and table), failed, interrupted, or running in another server process. A row
  that does not read as one (its request, its kind or its result: an older or damaged database) is shown as damaged, saying what is
  wrong, with what of it does read."""
  request, result, damaged = row["request"], row.get("result"), None
  if request is None: damaged = "its request does not parse"
  elif request.get("kind") not in STUDY_VARIANTS: damaged = f"its kind {capped(request.get('kind'), 40)!r} is no study this version runs"
  elif result is not None and (problem := study_problem(result)) is not None: damaged = f"its result does not read as a study's ({problem})"
  if damaged is not None: result = None
  table = None
  if result:
    try: table = document_rows(result)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e: result, damaged = None, f"its result's table cannot be made ({one_line(e)})"
  created = row["created"] if isinstance(row["created"], (int, float)) else 0.0
  finished = row["finished"] if isinstance(row["finished"], (int, float)) else None
  kind = request.get("kind") if request is not None and request.get("kind") in STUDY_VARIANTS else None
  return {"id": row["id"], "kind": kind,
          "label": row["label"], "status": row["status"], "url": study_url(row["id"]), "error": row["error"], "created": created,
          "elapsed_s": round(max(0.0, (finished or time.time()) - created), 1), "request": request or {}, "result": result, "table": table,
          "damaged": f"study {row['id']} is damaged: {damaged}" if damaged else None}

class StudyService:
  def __init__(self, store: Store, on_stored: Callable[[str], None] = lambda trace_id: None, runner: Callable[..., Mapping[str, Any]] | None = None,
               queue: QueueClient | None = None):
    """runner replaces explorer.analysis.study.run_studies (the API's fuzz test answers at once without tinygrad); with queue, a
    study runs on a job queue worker that offers its device."""
    self.store, self.on_stored, self.runner, self.queue = store, on_stored, runner or run_studies, queue
    self.tasks: Tasks[StudyTask] = Tasks()
    self.journal = Journal(store, STUDY, STOPPED, QUEUED_ELSEWHERE, with_queue=queue is not None, first=RUNNING)
    self.owner, self.interrupted_at_start = self.journal.owner, self.journal.interrupted_at_start
    self._lock = threading.Lock()

  def running(self) -> StudyTask | None: return next(iter(self.tasks.active()), None)

  def start(self, kind: str, cases: list[tuple[str, ConvSpec]], request: dict[str, Any], params: dict[str, Any]) -> StudyTask:
    """Accept a study and start it (call from the event loop); StudyRunning while another one runs. params: run_studies's keywords."""
    with self._lock:
      if (busy := self.running()) is not None: raise StudyRunning(busy.id)
      run = StudyTask(kind=kind, label=label_of(kind, cases, params.get("tinygrad")), request=request,
                     steps=len(study_steps(kind, [s for _, s in cases])))
      self.journal.accept(run, run.label, {**request, "kind": kind}).result()  # written before it is answered: its permalink answers
      def work(run: StudyTask, progress: Progress) -> dict[str, Any]:
        if self.queue is not None: return remote.run_study(self.queue, run.id, kind, cases, progress, self._keep, params)
        return dict(self.runner(kind, cases, progress=progress, keep=self._keep, **params))
      return self._launch(run, work)

  def resume_queued(self) -> int:
    """Follow again the studies this server had on the job queue before it restarted (call from the event loop)."""
    if self.queue is None: return 0
    rows = [row for row in self.store.unfinished_tasks(STUDY, QUEUE_OWNER) if row["request"] is not None]
    for row in rows:
      kind = row["request"]["kind"]
      specs = [ConvSpec.from_dict(s) for s in row["request"].get("specs", [])]
      cases = cases_of(kind, list(row["request"].get("presets", [])), specs)
      run = StudyTask(id=row["id"], kind=kind, label=row["label"], request=row["request"], steps=len(study_steps(kind, [s for _, s in cases])))
      self._launch(run, self._resumed(kind, [s for _, s in cases]))
    return len(rows)

  def _resumed(self, kind: str, specs: list[ConvSpec]) -> Callable[[StudyTask, Progress], dict[str, Any]]:
    """The work that follows a queued study of `kind` to its end, bound to its own row's kind and specs (a lambda in the loop over
    rows would read the last row's when a run starts)."""
    queue = self.queue
    assert queue is not None  # (resumed only when this server has a queue)
    return lambda run, progress: remote.resume_study(queue, run.id, progress, keep=self._keep, kind=kind, specs=specs)

  def _launch(self, run: StudyTask, work: Callable[[StudyTask, Progress], dict[str, Any]]) -> StudyTask:
    """work in a daemon thread; its outcome stored (a result can be megabytes: off the event loop)."""
    async def kept(run: StudyTask, result: dict[str, Any]) -> dict[str, Any]:
      await self.journal.ended(run, DONE, result)
      run.step = run.steps
      return result
    async def ended(run: StudyTask) -> None:
      if run.status == ERROR: await self.journal.ended(run)
    return self.tasks.start(run.id, run, work, kept=kept, ended=ended)

  def _keep(self, spec: ConvSpec, variant: Variant, result: Any) -> str:
    """Store a variant's trace (its page is linked from the study's) and return its id."""
    trace_id = trace_key(spec, variant)
    self.store.put_trace(trace_id, result.trace, result.rewrites, result.target_rewrites)
    self.on_stored(trace_id)
    return trace_id

  def status(self, study_id: str) -> dict[str, Any] | None:
    """Where the study stands: this server's run while it runs, else the store's row (None: unknown id)."""
    run = self.tasks.get(study_id)
    if run is not None and run.active: return run.view()
    try: row = self.store.get_task(STUDY, study_id, with_result=True)
    except StoreError as e:  # its result is not JSON: the row as it reads without it, said damaged
      row = self.store.get_task(STUDY, study_id)
      return None if row is None else {**stored_status(row), "damaged": f"study {study_id} is damaged: {e}"}
    return stored_status(row) if row is not None else None

  def recent(self, limit: int = 50) -> list[dict[str, Any]]:
    """Newest first, without their results: {id, kind, label, status, created, finished, error, ...}."""
    return [{**row, "kind": (row["request"] or {}).get("kind")} for row in self.store.recent_tasks(STUDY, limit)]

  def shutdown(self) -> None:
    """The server is stopping: a running study is marked interrupted (its workers die with this process: explorer.tracing.workers.lifeline).
    One on the job queue goes on: the next server follows it."""
    self.journal.interrupt(self.tasks.active())
    self.journal.close()
