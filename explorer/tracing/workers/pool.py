"""Warm worker processes for many short calls, under explorer.tracing.workers.process' Limits and error vocabulary: a spawn-context
ProcessPoolExecutor (or a fork-context one, whose processes start where their creator stands: `fork`) whose processes enter their
limits first (the data limit, a lower CPU priority, death with the parent) and whose results are capped. Two uses: `submit` (renders
for other targets inside a trace worker, which the worker's own limits and process group already bound) and `call` (graph layout in
the server: a wall-clock limit per call counted from when a process takes it, a bound on calls waiting for a process, WorkersBusy
past it). A pool whose process died (killed, out of memory, a segfault) or hung past the time limit is replaced: the call that was
running fails with a clear message, later calls run on fresh processes."""
from __future__ import annotations
import concurrent.futures
import multiprocessing
import os
import pickle
import sys
import warnings
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
  import asyncio  # (imported where a pool is awaited: a capture's render pool never is)
from explorer.tracing.workers.process import SPAWN, Limits, WorkerCrashed, WorkersBusy, WorkerTimedOut, enter_limits

NO_LIMITS = Limits()  # a pool's default: its processes hold none of their own (frozen: one instance serves every pool)

FORK = multiprocessing.get_context("fork")

def _init(parent_pid: int, limits: Limits, initializer: Callable[[], None] | None) -> None:
  enter_limits(limits, parent_pid)  # a parent that dies (a SIGKILLed server, a killed trace worker) takes its pool along
  if initializer is not None: initializer()

def _fork_now(pool: concurrent.futures.ProcessPoolExecutor) -> None:
  """Fork a fork-context executor's processes now, from this process as it stands (its first call forks them all)."""
  sys.stdout.flush(); sys.stderr.flush()  # else what is buffered would be written twice
  with warnings.catch_warnings():
    # Python 3.12 warns of a fork beside threads: a worker's are its lifeline's, which takes no lock the child could inherit held
    warnings.simplefilter("ignore", DeprecationWarning)
    pool.submit(int)

def _capped(limits: Limits, fn: Callable[..., Any], *args: Any) -> Any:
  result = fn(*args)
  limits.check_output(len(pickle.dumps(result)))
  return result

class WorkerPool:
  def __init__(self, workers: int = 1, limits: Limits = NO_LIMITS, initializer: Callable[[], None] | None = None, max_waiting: int = 32,
               max_tasks_per_child: int | None = None, fork: bool = False):
    self.workers, self.limits, self.initializer, self.max_waiting = workers, limits, initializer, max_waiting
    self.max_tasks_per_child = max_tasks_per_child  # 1: a fresh process per call (nothing a call cached leaks into the next)
    # fork: the first processes are forked from this process as it is when they start (its imports paid); any later one, a
    # replacement, is spawned, since this process will have moved on from the state its caller forked it for
    self._context: Any = FORK if fork else SPAWN
    self.replaced = 0  # pools thrown away after a death or a timeout: tests check recovery
    self._pool: concurrent.futures.ProcessPoolExecutor | None = None
    self._slots: asyncio.Semaphore | None = None
    self._waiting = 0

  def processes(self) -> list[Any]:
    return list((getattr(self._pool, "_processes", None) or {}).values())

  def start(self) -> WorkerPool:
    """Start every process now (and pay their imports while the caller does other work)."""
    for _ in range(self.workers): self._get().submit(int)
    return self

  def _get(self) -> concurrent.futures.ProcessPoolExecutor:
    if self._pool is not None and (getattr(self._pool, "_broken", False) or not all(p.is_alive() for p in self.processes())):
      self.kill()  # a process died while idle
    if self._pool is None:
      fork, self._context = self._context is FORK, SPAWN
      self._pool = concurrent.futures.ProcessPoolExecutor(self.workers, mp_context=FORK if fork else SPAWN, initializer=_init,
                                                          initargs=(os.getpid(), self.limits, self.initializer),
                                                          max_tasks_per_child=self.max_tasks_per_child)
      if fork: _fork_now(self._pool)
    return self._pool

  def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
    """fn(*args) in a pool process, now; the result is capped, the caller bounds the time."""
    return self._get().submit(_capped, self.limits, fn, *args)

  async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) in a pool process; at most `workers` run at once, so a call's time limit starts when it runs."""
    import asyncio
    if self._slots is None: self._slots = asyncio.Semaphore(self.workers)
    if self._slots.locked() and self._waiting >= self.max_waiting:
      raise WorkersBusy(f"{self._waiting} calls are already waiting for a worker process; try again shortly")
    self._waiting += 1
    try: await self._slots.acquire()
    finally: self._waiting -= 1
    try: return await self._run(fn, *args)
    finally: self._slots.release()

  async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
    import asyncio
    try: fut = self.submit(fn, *args)
    except (BrokenProcessPool, RuntimeError):  # broken between the check and the submit, or shut down: one fresh pool
      self.kill()
      fut = self.submit(fn, *args)
    try: return await asyncio.wait_for(asyncio.wrap_future(fut), self.limits.timeout_s)
    except TimeoutError:
      self.kill()
      raise WorkerTimedOut(f"it took over {self.limits.timeout_s:.0f}s; the worker process was stopped") from None
    except BrokenProcessPool:
      self.kill()
      raise WorkerCrashed("the worker process died (out of memory, or killed); try again") from None

  def kill(self) -> None:
    pool, self._pool = self._pool, None
    if pool is None: return
    self.replaced += 1
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
      if proc.is_alive(): proc.kill()
    pool.shutdown(wait=False, cancel_futures=True)

  def close(self, wait: bool = False) -> None:
    """Let idle processes exit on their own (no leaked semaphores); without wait, kill any still busy after a moment."""
    pool, self._pool = self._pool, None
    if pool is None: return
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=wait, cancel_futures=True)
    for proc in procs: proc.join(timeout=2)
    for proc in procs:
      if proc.is_alive(): proc.kill()
