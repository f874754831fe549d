"""How long the event loop is held: every callback the loop runs (a step of a request's handler or of a middleware, uvicorn's reads and
writes) timed on the loop thread's own CPU clock. A step that computes holds the loop; a step that waits for the interpreter lock, while
threads render pages, does not hold it (it is slowed by them), so the two are told apart: `cpu` is the holding, `wall` the step's time
with the waits. On with settings.loop_watch; /api/health?held_since=T reports the longest steps since T (time.monotonic, the system's
clock: a client's T is the server's)."""
from __future__ import annotations
import asyncio
import collections
import heapq
import sysconfig
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

NOTED_MS = 5.0  # a step this long (held, or with its waits) is kept, with when it started and what ran it; shorter ones are counted
NOTED = 4096  # the steps kept, the latest: a report's window is exact while its noted steps number fewer
HELD_MS = 50.0  # a step holding the loop longer than this is what the big-program benchmark's target forbids
SHOWN = 16  # the longest steps a report lists

@dataclass(order=True)
class Step:
  cpu_s: float
  wall_s: float = field(compare=False)
  at: float = field(compare=False)  # time.monotonic() when it started
  what: str = field(compare=False)

class LoopWatch:
  """Installed on the running loop's thread (`install`, from the app's start; `uninstall` at its stop): one per process at a time."""
  active: LoopWatch | None = None

  def __init__(self) -> None:
    self.steps = 0
    self.noted: collections.deque[Step] = collections.deque(maxlen=NOTED)  # in the order they ran
    self._thread, self._lock, self._run = 0, threading.Lock(), asyncio.events.Handle._run

  def install(self) -> None:
    if LoopWatch.active is not None: raise RuntimeError("a loop watch is installed already (one per process)")
    self._thread, LoopWatch.active = threading.get_ident(), self
    watch, run = self, self._run
    def timed(handle: asyncio.events.Handle) -> None:
      if threading.get_ident() != watch._thread: return run(handle)
      at, cpu = time.monotonic(), time.thread_time()
      try: return run(handle)
      finally: watch.ran(handle, at, time.thread_time() - cpu)
    asyncio.events.Handle._run = timed  # type: ignore[method-assign,assignment]

  def uninstall(self) -> None:
    if LoopWatch.active is self:
      asyncio.events.Handle._run = self._run  # type: ignore[method-assign]
      LoopWatch.active = None

  def ran(self, handle: asyncio.events.Handle, at: float, cpu_s: float) -> None:
    wall_s = time.monotonic() - at
    step = Step(cpu_s, wall_s, at, step_name(handle)) if max(cpu_s, wall_s) * 1e3 >= NOTED_MS else None  # named only when noted
    with self._lock:
      self.steps += 1
      if step is not None: self.noted.append(step)

  def report(self, since: float | None = None) -> dict[str, Any]:
    """The steps run so far; of those that started at or after `since` (all, when None): how many held the loop past HELD_MS and the
    SHOWN longest of those past NOTED_MS, longest first."""
    with self._lock: steps, noted = self.steps, list(self.noted)
    window = [s for s in noted if since is None or s.at >= since]
    return {"steps": steps, "noted_ms": NOTED_MS, "over_ms": HELD_MS, "over": sum(1 for s in window if s.cpu_s * 1e3 > HELD_MS),
            "longest": [{"cpu_ms": round(s.cpu_s * 1e3, 1), "wall_ms": round(s.wall_s * 1e3, 1), "at": s.at, "what": s.what}
                        for s in heapq.nlargest(SHOWN, window)]}

def step_name(handle: asyncio.events.Handle) -> str:
  """What a step ran: a task's innermost coroutine of this program's own (neither the standard library's nor an installed package's)
  where it stands now (its function, file and line: where the request's handler went on after the step; else the innermost coroutine),
  or the callback's name."""
  callback: Callable[..., Any] = handle._callback  # type: ignore[attr-defined]
  task = getattr(callback, "__self__", None)
  if not isinstance(task, asyncio.Task): return str(getattr(callback, "__qualname__", repr(callback)))[:200]
  chain: list[tuple[bool, str]] = []
  coro: Any = task.get_coro()
  while coro is not None and (frame := getattr(coro, "cr_frame", None)) is not None:
    file = frame.f_code.co_filename
    chain.append((not file.startswith(LIBRARY) and "-packages/" not in file, f"{coro.__qualname__} ({short(file)}:{frame.f_lineno})"))
    coro = getattr(coro, "cr_await", None)
  return next((c for own, c in reversed(chain) if own), chain[-1][1] if chain else f"task {task.get_name()}")

LIBRARY = sysconfig.get_paths()["stdlib"]

def short(file: str) -> str: return file[file.rindex("/explorer/") + 1:] if "/explorer/" in file else "/".join(file.rsplit("/", 2)[-2:])
