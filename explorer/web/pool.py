"""A spawn-context process pool for work the server process must not do itself (graph expansion imports tinygrad), under the
worker limits: a lower CPU priority than the server's, a wall-clock limit per call counted from when a process takes it (the pool
is replaced past it), a data limit per process (RLIMIT_DATA), a cap on each pickled result, and a bound on calls waiting for a
process (PoolBusy past it).
A pool whose process died (killed, out of memory, a segfault: BrokenProcessPool) is replaced: the call that was running fails
with a clear message, and every later call runs on fresh processes."""
from __future__ import annotations
import asyncio, concurrent.futures, multiprocessing as mp, os, pickle, resource
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable
from explorer import lifeline

class PoolBusy(RuntimeError):
  """Too many calls are waiting for a process."""

class PoolFailed(RuntimeError):
  """The process running the call died or ran past its time limit; the pool was replaced."""

class OutputTooLarge(RuntimeError):
  """The call's result is over the output cap (raised in the worker process)."""

def _init(parent_pid: int, memory_mb: int, nice: int, initializer: Callable[[], None] | None) -> None:
  lifeline.die_with_parent(parent_pid)  # a server that is SIGKILLed leaves no graph worker behind
  lifeline.watch(parent_pid)
  if memory_mb: resource.setrlimit(resource.RLIMIT_DATA, (memory_mb << 20, memory_mb << 20))
  if nice: os.nice(nice)
  if initializer is not None: initializer()

def _capped(max_bytes: int, fn: Callable[..., Any], *args: Any) -> Any:
  result = fn(*args)
  if max_bytes and (n := len(pickle.dumps(result))) > max_bytes:
    raise OutputTooLarge(f"the result is {n / 2**20:.1f} MiB, over the output cap of {max_bytes / 2**20:.1f} MiB")
  return result

class WorkerPool:
  def __init__(self, workers: int = 1, initializer: Callable[[], None] | None = None, memory_mb: int = 0, max_output_mb: float = 256.0,
               timeout_s: float = 180.0, max_waiting: int = 32, nice: int = 0):
    self.workers, self.initializer, self.memory_mb, self.timeout_s, self.max_waiting = workers, initializer, memory_mb, timeout_s, max_waiting
    self.nice = nice
    self.max_bytes = int(max_output_mb * 2**20)
    self.replaced = 0  # pools thrown away after a death or a timeout: tests check recovery
    self._pool: concurrent.futures.ProcessPoolExecutor | None = None
    self._slots: asyncio.Semaphore | None = None
    self._waiting = 0

  def processes(self) -> list[Any]:
    return list((getattr(self._pool, "_processes", None) or {}).values())

  def _get(self) -> concurrent.futures.ProcessPoolExecutor:
    if self._pool is not None and (getattr(self._pool, "_broken", False) or not all(p.is_alive() for p in self.processes())):
      self.kill()  # a process died while idle
    if self._pool is None:
      self._pool = concurrent.futures.ProcessPoolExecutor(self.workers, mp_context=mp.get_context("spawn"), initializer=_init,
                                                          initargs=(os.getpid(), self.memory_mb, self.nice, self.initializer))
    return self._pool

  async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) in a pool process; at most `workers` run at once, so a call's time limit starts when it runs."""
    if self._slots is None: self._slots = asyncio.Semaphore(self.workers)
    if self._slots.locked() and self._waiting >= self.max_waiting:
      raise PoolBusy(f"{self._waiting} calls are already waiting for a worker process; try again shortly")
    self._waiting += 1
    try: await self._slots.acquire()
    finally: self._waiting -= 1
    try: return await self._run(fn, *args)
    finally: self._slots.release()

  async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
    try: fut = self._get().submit(_capped, self.max_bytes, fn, *args)
    except (BrokenProcessPool, RuntimeError):  # broken between the check and the submit, or shut down: one fresh pool
      self.kill()
      fut = self._get().submit(_capped, self.max_bytes, fn, *args)
    try: return await asyncio.wait_for(asyncio.wrap_future(fut), self.timeout_s)
    except asyncio.TimeoutError:
      self.kill()
      raise PoolFailed(f"it took over {self.timeout_s:.0f}s; the worker process was stopped") from None
    except BrokenProcessPool:
      self.kill()
      raise PoolFailed("the worker process died (out of memory, or killed); try again") from None

  def kill(self) -> None:
    pool, self._pool = self._pool, None
    if pool is None: return
    self.replaced += 1
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
      if proc.is_alive(): proc.kill()
    pool.shutdown(wait=False, cancel_futures=True)

  def close(self) -> None:
    """At shutdown: let idle processes exit on their own (no leaked semaphores), kill any still busy after a moment."""
    pool, self._pool = self._pool, None
    if pool is None: return
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs: proc.join(timeout=2)
    for proc in procs:
      if proc.is_alive(): proc.kill()
