"""One lifecycle for the server's background work: a trace job, a study, a target computed on first view, a diff's measurement, a
roofline probe. Each is a Task: queued -> running -> done | error | interrupted, with a one-line detail of what it does now, a
one-line error, and its times. Tasks runs them: identical work (one key) shares one task, at most `parallel` run at once (the rest
wait their turn, queued), the work itself runs in a daemon thread (it spawns its worker processes) and reports progress into the task
from there. A service with no room for more work raises Busy; the HTTP edge answers it, one handler for all, with its status and a
Retry-After.

One admission rule for all of it (Tasks.start, before any work is done or any trace read for it): joining identical work is free; new
work is refused with ClientBusy (429) once its client has `per_client` tasks of the kind queued or running, and with Busy (503) once
`parallel + max_waiting` are. A free slot goes to the waiting task whose client runs the fewest (then the oldest), so another client's
work is next whatever one client queued; and where work is long (traces: `reserve`), one client's tasks run on at most parallel - 1
slots, so another client always finds one free at once.

Work that outlives a request is kept in the store's one tasks table, a row per kind and id (Journal: traces, studies, enrichments,
hand schedules), with one restart rule for every kind: a task its server left queued or running is marked interrupted, saying why,
by the next server that opens the store, unless it was left on a job queue that this server follows."""
from __future__ import annotations
import asyncio
import contextlib
import logging
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar
from explorer.background import (
  ACTIVE as ACTIVE,
  DONE as DONE,
  ERROR as ERROR,
  INTERRUPTED as INTERRUPTED,
  QUEUED as QUEUED,
  RUNNING as RUNNING,
  TaskKind,
  TaskState,
)
from explorer.stages import Progress
from explorer.text import one_line

if TYPE_CHECKING:
  from explorer.store import Store

log = logging.getLogger(__name__)

class Busy(RuntimeError):
  """No room for this work now: answered with `status` (503, or 429 for one client's share) and Retry-After `retry_after_s`."""
  status, retry_after_s = 503, 30

  def __init__(self, message: str, retry_after_s: int | None = None):
    super().__init__(message)
    if retry_after_s is not None: self.retry_after_s = retry_after_s

class ClientBusy(Busy):
  """This client has its share of this kind of work queued or running already: its next one waits until one of them ends."""
  status = 429

@dataclass
class Task:
  """One piece of background work."""
  id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
  status: TaskState = QUEUED
  detail: str = ""
  error: str | None = None
  result: Any = None
  created: float = field(default_factory=time.time)
  finished: float | None = None
  running_on_turn: bool = field(default=True, repr=False)  # running once its turn comes (a trace on a job queue waits for a worker)
  client: str | None = None  # the address that asked for it: its share is bounded (None: the server's own work)

  @property
  def active(self) -> bool: return self.status in ACTIVE

  def note(self, stage: str, status: str, detail: str) -> None:
    """Progress from the work: it runs, and this is what it does now."""
    if self.active: self.status, self.detail = RUNNING, detail or f"{stage} {status}"

  def finish(self, status: TaskState, result: Any = None, error: str | None = None) -> None:
    self.status, self.result, self.error, self.finished = status, result, error, time.time()
    if status != RUNNING: self.detail = "" if status == DONE else self.detail

  @property
  def elapsed_s(self) -> float: return round((self.finished or time.time()) - self.created, 1)

  def snapshot(self) -> dict[str, Any]:
    return {"id": self.id, "status": self.status, "detail": self.detail, "error": self.error, "elapsed_s": self.elapsed_s}

def run_in_daemon_thread(fn: Callable[[], Any]) -> asyncio.Future[Any]:
  """Like asyncio.to_thread, but the thread never holds up interpreter exit (a trace can run for minutes)."""
  loop = asyncio.get_running_loop()
  fut: asyncio.Future[Any] = loop.create_future()
  def deliver(ok: bool, value: Any) -> None:
    if fut.done(): return
    if ok: fut.set_result(value)
    else: fut.set_exception(value)
  def body() -> None:
    try: ret, ok = fn(), True
    except BaseException as e: ret, ok = e, False  # noqa: BLE001 - handed to the awaiting coroutine
    with contextlib.suppress(RuntimeError): loop.call_soon_threadsafe(deliver, ok, ret)  # (RuntimeError: the loop closed while we ran)
  threading.Thread(target=body, daemon=True, name="task").start()
  return fut

T = TypeVar("T", bound=Task)
Hook = Callable[[T], Awaitable[None]]

class Tasks(Generic[T]):
  """Tasks by key, run in the background (start from the event loop), admitted by one rule (the module's docstring)."""
  def __init__(self, parallel: int | None = None, wait_s: float | None = None, max_waiting: int | None = None, per_client: int = 0,
               what: str = "tasks", reserve: bool = False, client_retry_s: int = 10):
    """parallel: how many run at once (None: no limit); wait_s: how long a task may wait for its turn before it fails, saying so;
    max_waiting: how many more may wait for a turn (None: no bound); per_client: one client's tasks queued or running at once (0: no
    bound); what: the work, as refusals name it; reserve: one client's tasks hold at most parallel - 1 slots (long work);
    client_retry_s: the Retry-After of a client past its share (about how long one of its tasks takes)."""
    self.parallel, self.wait_s, self.max_waiting, self.per_client, self.what = parallel, wait_s, max_waiting, per_client, what
    self.reserve, self.client_retry_s = reserve, client_retry_s
    self.tasks: dict[Hashable, T] = {}
    self.running: set[asyncio.Task[None]] = set()
    self._holding: list[T] = []  # the tasks holding a slot
    self._waiting: list[tuple[T, asyncio.Future[None]]] = []  # the tasks waiting for one, oldest first

  def admit(self, client: str | None) -> None:
    """Refuse new work where the rule says so (ClientBusy: this client's share; Busy: the server's); the caller has checked that no
    identical work is queued or running (joining it is free). Cheap: it reads only what runs."""
    active = self.active()
    if self.max_waiting is not None and self.parallel is not None and len(active) >= self.parallel + self.max_waiting:
      raise Busy(f"{len(active)} {self.what} are running or waiting already; try again in a minute", 60)
    if client is not None and self.per_client and (mine := sum(1 for t in active if t.client == client)) >= self.per_client:
      raise ClientBusy(f"this client has {mine} {self.what} running or waiting, its share; try again when one is done", self.client_retry_s)

  def get(self, key: Hashable) -> T | None: return self.tasks.get(key)

  def ahead(self, task: T) -> int | None:
    """How many tasks get a slot before this one as the line stands (the rule of _hand_on, slots handed in turn); None when it is not
    waiting, or will take a free slot at once (one just launched joins the line at its end)."""
    line = [t for t, _ in self._waiting]
    if task not in line:
      if task.status != QUEUED or task in self._holding: return None
      line.append(task)
    free = len(line) if self.parallel is None else self.parallel - len(self._holding)
    holds = Counter(t.client for t in self._holding)
    for n in range(len(line)):
      nxt = line.pop(min(range(len(line)), key=lambda i: (holds[line[i].client], i)))
      if nxt is task: return n if n >= free else None
      holds[nxt.client] += 1
    return None

  def active(self) -> list[T]: return [t for t in self.tasks.values() if t.active]

  def forget(self, key: Hashable) -> None: self.tasks.pop(key, None)

  def claim(self, key: Hashable, task: T) -> tuple[T, bool]:
    """(the task of this key when one is queued or running, False): identical work is shared; else (`task`, True), admitted (ClientBusy
    or Busy otherwise) and registered in the same step, nothing awaited between: requests that arrive together join it or count against
    the bounds. A claimed task is `launch`ed, or `release`d if what was to follow its admission failed."""
    if (current := self.tasks.get(key)) is not None and current.active: return current, False
    self.admit(task.client)
    self.tasks[key] = task
    return task, True

  def release(self, key: Hashable, task: T, error: str) -> None:
    """A claimed task that will not run: it ends with `error` (whoever joined it meanwhile sees why) and its key is free again."""
    task.finish(ERROR, error=error)
    if self.tasks.get(key) is task: self.tasks.pop(key)

  def start(self, key: Hashable, task: T, work: Callable[[T, Progress], Any], started: Hook[T] | None = None,
            kept: Callable[[T, Any], Awaitable[Any]] | None = None, ended: Hook[T] | None = None) -> T:
    """The task of this key when one is queued or running (identical work is shared), else `task`, admitted (ClientBusy or Busy
    otherwise) and launched."""
    task, new = self.claim(key, task)
    return self.launch(task, work, started, kept, ended) if new else task

  def launch(self, task: T, work: Callable[[T, Progress], Any], started: Hook[T] | None = None,
             kept: Callable[[T, Any], Awaitable[Any]] | None = None, ended: Hook[T] | None = None) -> T:
    """Run a claimed task: once its turn comes, started(task), then work(task, progress) in a daemon thread, kept(task, result) (what
    is kept of it: stored, say), and ended(task) whatever the outcome. A failure anywhere is the task's one-line error."""
    job = asyncio.get_running_loop().create_task(self._run(task, work, started, kept, ended))
    self.running.add(job)
    job.add_done_callback(self.running.discard)
    return task

  def _holds(self, client: str | None) -> int: return sum(1 for t in self._holding if t.client == client)

  def _may_take(self, task: T) -> bool:
    """A free slot, and (reserve) not this client's last one."""
    if self.parallel is None: return True
    if len(self._holding) >= self.parallel: return False
    return not (self.reserve and task.client is not None and self.parallel > 1 and self._holds(task.client) >= self.parallel - 1)

  def _hand_on(self) -> None:
    """Free slots to the waiting tasks that may take them: the client running the fewest first, then the oldest."""
    while (ready := [(self._holds(t.client), i) for i, (t, _) in enumerate(self._waiting) if self._may_take(t)]):
      task, fut = self._waiting.pop(min(ready)[1])
      self._holding.append(task)
      fut.set_result(None)

  async def _take_slot(self, task: T) -> bool:
    """Wait for this task's turn (False: it waited past wait_s)."""
    fut = asyncio.get_running_loop().create_future()
    self._waiting.append((task, fut))
    self._hand_on()  # it may take a slot now (another client's queued work may not)
    if fut.done(): return True
    try: await asyncio.wait_for(asyncio.shield(fut), self.wait_s)
    except TimeoutError: pass
    except asyncio.CancelledError:
      if fut.done() and not fut.cancelled(): self._free_slot(task)  # given a slot as it was cancelled: handed on
      raise
    finally:
      if not fut.done():  # timed out or cancelled while waiting: out of the line
        self._waiting = [(t, f) for t, f in self._waiting if f is not fut]
        fut.cancel()
    return fut.done() and not fut.cancelled()

  def _free_slot(self, task: T) -> None:
    self._holding.remove(task)
    self._hand_on()

  async def _run(self, task: T, work: Callable[[T, Progress], Any], started: Hook[T] | None, kept: Callable[[T, Any], Awaitable[Any]] | None,
                 ended: Hook[T] | None) -> None:
    holding = False
    try:
      if not (holding := await self._take_slot(task)):
        task.finish(ERROR, error=f"waited over {self.wait_s:.0f}s for a free worker and was dropped; try again when the server is less busy")
        return
      await self._work(task, work, started, kept)
    finally:
      if holding: self._free_slot(task)
      if ended is not None and task.status != INTERRUPTED: await ended(task)

  async def _work(self, task: T, work: Callable[[T, Progress], Any], started: Hook[T] | None,
                  kept: Callable[[T, Any], Awaitable[Any]] | None) -> None:
    loop = asyncio.get_running_loop()
    def progress(stage: str, status: str, detail: str) -> None: loop.call_soon_threadsafe(task.note, stage, status, detail)
    try:
      if task.running_on_turn and task.status == QUEUED: task.status = RUNNING
      if started is not None: await started(task)
      result = await run_in_daemon_thread(lambda: work(task, progress))
      await asyncio.sleep(0)  # progress the work's thread queued lands before the outcome
      if kept is not None: result = await kept(task, result)
    except Exception as e:
      if task.status != INTERRUPTED: task.finish(ERROR, error=one_line(e))  # interrupted: the server stopped it on purpose
      return
    if task.status != INTERRUPTED: task.finish(DONE, result)

  def cancel_all(self) -> None:
    for job in list(self.running): job.cancel()

# ***** the tasks kept in the store, and what a restart does to them *****

QUEUE_OWNER = "queue"  # the owner of work run by the job queue's workers: no server process owns it, a restarted server follows it

def _start_time(pid: int) -> str | None:
  """The process's start time in clock ticks since boot (Linux): with the pid, it names one process for good."""
  try:
    with open(f"/proc/{pid}/stat") as f: stat = f.read()
    return stat[stat.rfind(")") + 2:].split()[19]
  except (OSError, IndexError): return None

def this_owner() -> str:
  return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid()) or '?'}"

def owner_gone(owner: str) -> bool:
  """True when the process that owned a task has ended (a task of another host is never judged gone from here)."""
  host, pid, started = (owner.rsplit(":", 2) + ["", ""])[:3]
  if host != socket.gethostname() or not pid.isdigit(): return False
  if started != "?": return _start_time(int(pid)) != started
  try: os.kill(int(pid), 0)
  except ProcessLookupError: return True
  except PermissionError: pass
  return False

class Journal:
  """The store's rows of one kind of task (explorer.store.tasks): written when accepted, as it starts and as it ends, off the event
  loop and in order (one writer thread), so its id keeps answering after a restart. Opening one applies the restart rule: the
  unfinished tasks of owners that are gone are marked interrupted (`stopped`, where `{id}` names the task: why, and how to run it
  again); those left on a job queue (`queued_elsewhere` says how to follow them) are taken back by a server with the queue (`first`
  again: the state work is accepted in) and marked interrupted by one without."""
  def __init__(self, store: Store, kind: TaskKind, stopped: str, queued_elsewhere: str | None = None, with_queue: bool = False,
               first: TaskState = QUEUED):
    self.store, self.kind, self.stopped, self.first = store, kind, stopped, first
    self.owner = QUEUE_OWNER if with_queue else this_owner()
    self._writer: ThreadPoolExecutor | None = None
    self.interrupted_at_start = store.interrupt_tasks(kind, owner_gone, stopped)
    if queued_elsewhere is None: return
    if with_queue: store.reopen_tasks(kind, QUEUE_OWNER, queued_elsewhere, first)
    else: self.interrupted_at_start += store.interrupt_tasks(kind, lambda owner: owner == QUEUE_OWNER, queued_elsewhere)

  def write(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
    if self._writer is None: self._writer = ThreadPoolExecutor(1, thread_name_prefix=f"{self.kind}-store")
    return self._writer.submit(fn, *args)

  def accept(self, task: Task, label: str, request: dict[str, Any]) -> Future[Any]:
    return self.write(self.store.put_task, self.kind, task.id, label, request, self.owner, self.first, task.client, task.detail)

  async def started(self, task: Task) -> None: await asyncio.wrap_future(self.write(self.store.task_started, self.kind, task.id))

  async def ended(self, task: Task, status: TaskState | None = None, result: Any = None) -> None:
    """Its row says how it ended (status: the task's own unless given), with its result where one is kept there. A store that cannot
    be written now (its disk full) leaves the row as it was, saying so in one line: the task ended all the same, and this server
    answers for it from memory; the next server marks the row interrupted (its owner is gone)."""
    try:
      await asyncio.wrap_future(self.write(self.store.task_finished, self.kind, task.id, status or task.status, task.error, result, task.detail))
    except sqlite3.OperationalError as e:
      log.warning("kernel-explorer: %s %s ended %s, but its row could not be written: %s", self.kind, task.id, status or task.status, one_line(e))

  def interrupt(self, tasks: Iterable[Task]) -> None:
    """The server is stopping: its unfinished tasks are interrupted, saying so, in the store too (now, not in turn). Those on a job
    queue go on: the next server follows them."""
    if self.owner == QUEUE_OWNER: return
    for task in [t for t in tasks if t.active]:
      task.finish(INTERRUPTED, error=self.stopped.format(id=task.id))
      self.store.task_finished(self.kind, task.id, INTERRUPTED, task.error)

  def close(self) -> None:
    """Writes what is pending, then stops the writer (a restarted lifespan gets a fresh one)."""
    if self._writer is not None: self._writer.shutdown(wait=True)
    self._writer = None
