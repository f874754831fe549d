"""How long the event loop is held: every callback the loop runs (a step of a request's handler or of a middleware, uvicorn's reads and
writes) timed on the loop thread's own CPU clock. A step that computes holds the loop; a step that waits for the interpreter lock, while
threads render pages, does not hold it (it is slowed by them), so the two are told apart: `cpu` is the holding, `wall` the step's time
with the waits. On with settings.loop_watch; /api/health?held_since=T reports the longest steps since T (time.monotonic, the system's
clock: a client's T is the server's)."""
from __future__ import annotations
import asyncio, heapq, sysconfig, threading, time
from dataclasses import dataclass, field
from typing import Any, Callable

KEPT = 16  # the longest steps kept (by CPU time), and the steps past HELD_MS counted
HELD_MS = 50.0  # a step holding the loop longer than this is counted: the target of docs/results.md's big-program runs

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
    self.steps, self.over = 0, 0
    self.longest: list[Step] = []  # a min-heap of the KEPT longest steps
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
    with self._lock:
      self.steps += 1
      self.over += cpu_s * 1e3 > HELD_MS
      if len(self.longest) < KEPT or cpu_s > self.longest[0].cpu_s:
        step = Step(cpu_s, wall_s, at, step_name(handle))  # named only when kept: a step's name walks its coroutines
        (heapq.heappush if len(self.longest) < KEPT else heapq.heapreplace)(self.longest, step)

  def report(self, since: float | None = None) -> dict[str, Any]:
    """The steps so far and those over HELD_MS; the longest kept steps that started at or after `since` (all, when None), longest first."""
    with self._lock: steps, over, longest = self.steps, self.over, sorted(self.longest, reverse=True)
    shown = [s for s in longest if since is None or s.at >= since]
    return {"steps": steps, "over_ms": HELD_MS, "over": over, "longest": [
      {"cpu_ms": round(s.cpu_s * 1e3, 1), "wall_ms": round(s.wall_s * 1e3, 1), "at": s.at, "what": s.what} for s in shown]}

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
