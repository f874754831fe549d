"""Work out of process, one way: every trace, render, diff measurement, export graph, device probe and graph layout runs in a
worker process under one set of Limits (wall-clock time, memory, output size, CPU priority) and fails with one vocabulary
(WorkerFailed and its kinds). Two shapes: call_in_worker starts a fresh process per call (a trace: tinygrad's caches and context
variables cannot leak between variants, and tracking is switched on before tinygrad is imported), forked from a template that has
imported tinygrad and made nothing with it (explorer.tracing.workers.template) where the platform allows, and explorer.tracing.workers.pool
keeps warm processes for many short calls (renders inside a trace, graph layout in the server). Both enter their limits with
enter_limits and die with their parent (explorer.tracing.workers.lifeline).

Memory: RLIMIT_DATA in each process (inherited by what it starts: render processes, compilers), so a big allocation fails there
with MemoryError, plus a watch on the resident memory of the worker's whole process group. Not RLIMIT_AS: GPU runtimes (CUDA,
tinygrad's NV) reserve terabytes of address space they never touch.

Why our own supervision and not pebble or loky: a trace worker reports progress while it runs and stops at a gate until its
parent holds the device's timing lock (explorer.tracing.workers.devicelock: progress("timing", "start", DEVICE) waits for it); it leads a
process group whose every member (render processes, a hung compiler) is killed with it and whose resident total is watched; and it
must die when its parent does. Neither library offers a progress channel with a gate, group kill or group memory watch; the pool
(explorer.tracing.workers.pool) does build on the standard library's ProcessPoolExecutor."""
from __future__ import annotations
import atexit
import gc
import glob
import importlib
import multiprocessing.context
import os
import pickle
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, replace
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection
from typing import Any, NoReturn
from explorer.stages import PARTIAL, Progress
from explorer.tinygrads import TINYGRAD
from explorer.tracing.versions import TINYGRAD_VAR, EnvironmentFailed, interpreter
from explorer.tracing.workers import lifeline, template
from explorer.tracing.workers.boot import boot_code, start_python
from explorer.tracing.workers.devicelock import HeldLocks
from explorer.tracing.workers.lifeline import group_rss_mb
from explorer.tracing.workers.template import TemplateChild

DEFAULT_TIMEOUT_S = 600.0
GATED_STAGE = "timing"  # its start waits for the device lock
WATCH_S = lifeline.WATCH_S  # how often the parent reads the worker group's memory
Live = dict[int, "Worker"]  # running workers by pid

class SpawnWithoutMain(multiprocessing.context.SpawnProcess):
  """A spawned pool process that does not run the parent's __main__ again: spawn re-imports the main module in every child (so that
  its functions unpickle). That would run a user's script or notebook cell that captures with explorer.api.capture, without an
  `if __name__ == "__main__"` guard, again in each render process, and make a server's pool processes import the command line's own
  modules (rich, pydantic-settings: a third of a second). Every function a pool process runs lives in the explorer's modules."""
  _hiding = threading.Lock()  # an executor spawns from the caller's thread and from its manager thread

  def start(self) -> None:
    with self._hiding:
      main, sys.modules["__main__"] = sys.modules["__main__"], types.ModuleType("__main__")
      try: super().start()
      finally: sys.modules["__main__"] = main

class _SpawnContext(multiprocessing.context.SpawnContext):
  Process = SpawnWithoutMain

SPAWN = _SpawnContext()  # the context every pool process is started from (a worker starts as start_worker says)

# ***** one error vocabulary: the message is one line a page or a terminal shows as it is *****

class WorkerFailed(RuntimeError):
  """Work out of process failed: the work raised (the message is its first line), or one of the kinds below."""

class WorkerTimedOut(WorkerFailed):
  """Past its wall-clock limit (waiting for a device lock counts); it was stopped."""

class WorkerOutOfMemory(WorkerFailed):
  """Its processes together went over the memory limit; they were stopped."""

class WorkerCrashed(WorkerFailed):
  """It died without a word: a signal (a segfault, SIGKILL, the kernel's OOM killer) or an exit."""

class OutputTooLarge(WorkerFailed):
  """Its result is over the output cap."""

class WorkersBusy(WorkerFailed):
  """Too many calls are already waiting for a worker (a pool's bound): try again shortly."""

# ***** one set of limits *****

@dataclass(frozen=True)
class Limits:
  timeout_s: float = DEFAULT_TIMEOUT_S  # wall-clock limit of one call
  memory_mb: int = 0                   # data limit of the worker and each process it starts, and of their resident total; 0: none
  max_output_mb: float = 256.0         # largest pickled result
  nice: int = 0                        # CPU priority below the caller's (a nice increment), inherited by the processes it starts

  @classmethod
  def from_settings(cls, settings: Any = None, timeout_s: float | None = None) -> Limits:
    """trace_timeout_s (or timeout_s), worker_memory_mb, max_output_mb and worker_nice of the settings (default: the environment's;
    with no KERNEL_EXPLORER_ variable set, their defaults, without loading pydantic-settings)."""
    if settings is None and not any(k.startswith("KERNEL_EXPLORER_") for k in os.environ):
      from explorer import defaults
      return cls(float(timeout_s if timeout_s is not None else defaults.TRACE_TIMEOUT_S), defaults.WORKER_MEMORY_MB, float(defaults.MAX_OUTPUT_MB),
                 defaults.WORKER_NICE)
    from explorer.settings import Settings
    s = settings if settings is not None else Settings.load()
    return cls(float(timeout_s if timeout_s is not None else s.trace_timeout_s), int(s.worker_memory_mb), float(s.max_output_mb),
               int(s.worker_nice))

  def with_timeout(self, timeout_s: float | None) -> Limits: return self if timeout_s is None else replace(self, timeout_s=float(timeout_s))

  def check_output(self, nbytes: int) -> None:
    if nbytes > self.max_output_mb * 2**20:
      raise OutputTooLarge(f"the result is {nbytes / 2**20:.2f} MiB, over the output cap of {self.max_output_mb:.2f} MiB")

def enter_limits(limits: Limits, parent_pid: int, deadline: float | None = None, own_group: bool = False) -> None:
  """Called first in every worker process: die with the parent, the data limit, the priority, and the watchdog that keeps the time
  and memory limits when the parent cannot (own_group: this process leads a group of its own, stopped and measured whole)."""
  lifeline.die_with_parent(parent_pid)
  lifeline.watch(parent_pid, deadline, limits.memory_mb, own_group=own_group)
  if limits.memory_mb: resource.setrlimit(resource.RLIMIT_DATA, (limits.memory_mb << 20, limits.memory_mb << 20))
  if limits.nice: os.nice(limits.nice)

# ***** a worker process: forked from a template (explorer.tracing.workers.template), or `python -c BOOT`; not multiprocessing's spawn (which
# always starts a resource tracker process, 13 MiB, in whatever starts a worker, and imports the parent's __main__ again); what it
# runs arrives pickled on a pipe, from its parent only *****

BOOT = boot_code("explorer.tracing.workers.process", "_boot")

class WorkerProcess:
  """A started worker, as its supervision sees it (multiprocessing.Process's names): pid, is_alive, join, kill, exitcode (negative:
  the signal that ended it)."""
  def __init__(self, popen: subprocess.Popen[bytes]) -> None: self.popen, self.pid = popen, popen.pid
  def is_alive(self) -> bool: return self.popen.poll() is None
  def join(self, timeout: float | None = None) -> None:
    with suppress(subprocess.TimeoutExpired): self.popen.wait(timeout)
  def kill(self) -> None:
    with suppress(OSError): self.popen.kill()
  @property
  def exitcode(self) -> int | None: return self.popen.poll()

Worker = WorkerProcess | TemplateChild  # started afresh, or forked from a template

def start_worker(fn_path: str, kwargs: dict[str, Any], env: dict[str, str], limits: Limits,
                 deadline: float, fresh: bool = False) -> tuple[Worker, Connection, Connection]:
  """A worker process running _child; returns it, the end its messages arrive on and the end its timing gate is opened with. It is
  forked from this process's template for its environment (explorer.tracing.workers.template: its imports paid once), else started afresh.
  The worker shares this process's resource tracker where one runs (its render pools register their semaphores there), else it starts
  its own when it needs one."""
  out_r, out_w = os.pipe()
  gate_r, gate_w = os.pipe()
  tracker = getattr(resource_tracker._resource_tracker, "_fd", None)
  try:
    forked = _from_template(fn_path, kwargs, env, limits, deadline, out_w, gate_r, tracker) if template.supported() and not fresh else None
    proc: Worker = forked if forked is not None else _started(fn_path, kwargs, env, limits, deadline, out_w, gate_r, tracker)
  except BaseException:
    for fd in (out_r, gate_w): os.close(fd)
    raise
  finally:
    for fd in (out_w, gate_r): os.close(fd)
  return proc, Connection(out_r, writable=False), Connection(gate_w, readable=False)

def _from_template(fn_path: str, kwargs: dict[str, Any], env: dict[str, str], limits: Limits, deadline: float, out: int, gate: int,
                   tracker: int | None) -> TemplateChild | None:
  try: return template.template_for(env).fork((fn_path, kwargs, env, limits, deadline), out, gate, tracker)
  except OSError: return None  # the template could not start, or died: a fresh process instead

def _started(fn_path: str, kwargs: dict[str, Any], env: dict[str, str], limits: Limits, deadline: float, out: int, gate: int,
             tracker: int | None) -> WorkerProcess:
  fds = (out, gate, *(() if tracker is None else (tracker,)))
  call = (fn_path, kwargs, env, limits, out, gate, tracker, os.getpid(), deadline)
  return WorkerProcess(start_python(BOOT, call, fds, tinygrad=env.get(TINYGRAD_VAR)))

def _boot(f: Any) -> None:
  try: fn_path, kwargs, env, limits, out, gate, tracker, parent_pid, deadline = pickle.load(f)  # our parent's own pickle, never a client's
  except EOFError: os._exit(1)  # the parent ended as it started this worker, before it sent the call: nothing to run, nothing to say
  f.close()
  if tracker is not None: resource_tracker._resource_tracker._fd = tracker  # type: ignore[attr-defined]
  _child(fn_path, kwargs, env, limits, Connection(out, readable=False), Connection(gate, writable=False), parent_pid, deadline)

def _child(fn_path: str, kwargs: dict[str, Any], env: dict[str, str], limits: Limits, out: Connection, gate: Connection, parent_pid: int,
           deadline: float) -> None:
  try:
    os.setpgid(0, 0)  # a process group of its own: the parent measures and kills the worker with everything it starts
    enter_limits(limits, parent_pid, deadline, own_group=True)  # they hold if the parent is SIGKILLed or hangs
    os.environ.update(env)  # before the target's imports bring in tinygrad
    # and numpy: its only matrix products here are the float64 check's, which puts its chunks on threads of its own
    # (explorer.tracing.pipeline.reference); OpenBLAS's threads (one per core) would spin beside them and beside tinygrad
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    tempfile.tempdir = None  # read TMPDIR again: this worker's scratch directory
    module, name = fn_path.split(":")
    fn = getattr(importlib.import_module(module), name)
    def progress(stage: str, status: str, detail: str) -> None:
      if stage == GATED_STAGE and status == "start":
        out.send(("gate", detail))  # detail: the device(s) about to be timed
        if gate.recv() != "go": raise WorkerFailed("the parent did not let the timing stage start")
      out.send(("progress", (stage, status, detail)))
    got = fn(progress=progress, **kwargs)
    gc.disable()  # the work is done and the process exits once its answer is sent: a collection now would walk what is about to go
    result = pickle.dumps(got)
    limits.check_output(len(result))
    out.send(("result", result))
  except OutputTooLarge as e:
    with suppress(OSError): out.send(("too large", str(e)))
  except BaseException as e:  # noqa: BLE001 - anything the work raises must reach the parent as data
    with suppress(OSError): out.send(("failed", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}"))
  finally:
    out.close()
  exit_now(0)  # the answer is sent (whatever its threads still do goes with it)

def exit_now(code: int, join_threads: bool = False) -> NoReturn:
  """End this process as the interpreter would (join_threads: its other threads joined first, as it joins them), its exit handlers
  run (tinygrad's device finalizers among them) and its output flushed, but without the interpreter's teardown, which frees every
  object one at a time: a trace's graphs, 0.35-0.4 s of a medium trace's command on this 2-core VM, which its parent or its user waits for."""
  if join_threads:
    with suppress(BaseException): threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter's exit calls first
  with suppress(BaseException): atexit._run_exitfuncs()
  with suppress(BaseException): stop_own_resource_tracker()
  with suppress(OSError, ValueError): sys.stdout.flush(); sys.stderr.flush()
  os._exit(code)

def stop_own_resource_tracker() -> None:
  """multiprocessing's resource tracker, if this process started one (a worker's render pool, where its parent runs none), exits only
  when it reads EOF, after this process has exited: an orphan for a moment, or a zombie where the init process is slow to reap. Stop
  it and reap it now (at the process's end only: it unlinks what is still registered with it, the semaphores of live pools included)."""
  tracker = resource_tracker._resource_tracker
  if getattr(tracker, "_pid", None) is not None and (stop := getattr(tracker, "_stop", None)) is not None: stop()

def call_in_worker(fn_path: str, kwargs: dict[str, Any], progress: Progress | None = None, timeout_s: float | None = None,
                   env: dict[str, str] | None = None, limits: Limits | None = None,
                   exclusive: str | None = None, live: Live | None = None, tinygrad: str | None = None,
                   fresh: bool = False) -> tuple[Any, list[tuple[str, str, str]]]:
  """Call module:function(progress=..., **kwargs) in a fresh worker process (start_worker); progress is relayed to this process.
  limits: default Limits.from_settings(); timeout_s overrides its time limit. exclusive: a device whose lock is held for the whole
  run (a measurement from start to end). Waiting for a device lock counts against the time limit. live: a dict that holds the
  worker process by pid while it runs (besides LIVE), for its owner to stop. tinygrad: the version the worker runs (None: the
  server's own; another in its environment, explorer.tracing.versions: WorkerFailed where that is not made). fresh: a process started
  afresh, never one forked from a template (one that opens every backend: the template would keep the environment it was made for).
  A worker told no device is told this host's default one, once known (DEFAULT_DEVICE)."""
  env = with_default_device(env or {})
  if tinygrad is not None and tinygrad != TINYGRAD:
    try: interpreter(tinygrad)  # its environment as it is now (a template of it started earlier outlives its damage)
    except EnvironmentFailed as e: raise WorkerFailed(str(e)) from None
    env = {**env, TINYGRAD_VAR: tinygrad}
  limits = (limits if limits is not None else Limits.from_settings()).with_timeout(timeout_s)
  timeout_s = limits.timeout_s
  deadline = time.monotonic() + timeout_s
  held = HeldLocks()
  def waiting(dev: str) -> None:
    if progress is not None: progress(GATED_STAGE, "start", f"waiting for the {dev} device: another measurement is running")
  def take(devices: str) -> None:
    if (busy := held.acquire(devices, deadline, waiting)) is not None:
      raise WorkerTimedOut(f"the worker exceeded its time limit of {timeout_s:.0f}s waiting for the {busy} device (other measurements held it)")
  try:
    if exclusive: take(exclusive)
    return _supervise(fn_path, kwargs, progress, timeout_s, deadline, env, limits, held, take, keep=bool(exclusive), live=live, fresh=fresh)
  except EnvironmentFailed as e: raise WorkerFailed(str(e)) from None
  finally: held.release()

# this host's default device, once found (explorer.tracing.pipeline.run: a server looks for it as it starts, or a trace that named no
# device found it): tinygrad tries every backend in turn for one, in each process, importing each runtime on the way (NV's and AMD's
# hold about 45 MiB of a worker on a CPU-only machine); told DEV, a worker opens that device alone, and every worker of this process
# has one environment, so one template (explorer.tracing.workers.template: one per environment)
DEFAULT_DEVICE: dict[str, str] = {}

def remember_default_device(device: str) -> None:
  """Keep the first default device found (its name: DEV's own syntax reads "CUDA:1" differently)."""
  DEFAULT_DEVICE.setdefault("device", device.split(":")[0])

def with_default_device(env: dict[str, str]) -> dict[str, str]:
  """env with DEV set to this host's default device where it is known and neither env nor this process's environment sets DEV."""
  if "DEV" in env or "DEV" in os.environ or "device" not in DEFAULT_DEVICE: return env
  return {"DEV": DEFAULT_DEVICE["device"], **env}

SCRATCH_PREFIX = "kernel-explorer-worker-"

def scratch_dir() -> str:
  """A fresh temporary directory for one worker, named after this process: the worker and everything it starts (a compiler's -keep
  files, NVRTC's) write their temporary files there (TMPDIR), and it goes when the worker ends, however it ends. Directories that
  processes gone before they could clean up left behind (a SIGKILLed server) are removed here, the first time."""
  global _swept
  if not _swept:
    _swept = True
    for d in glob.glob(os.path.join(tempfile.gettempdir(), f"{SCRATCH_PREFIX}*-*")):
      pid = os.path.basename(d)[len(SCRATCH_PREFIX):].split("-", 1)[0]
      if pid.isdigit() and not os.path.exists(f"/proc/{pid}"): shutil.rmtree(d, ignore_errors=True)
  return tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
_swept = False

def _supervise(fn_path: str, kwargs: dict[str, Any], progress: Progress | None, timeout_s: float, deadline: float, env: dict[str, str],
               limits: Limits, held: HeldLocks, take: Callable[[str], None], keep: bool, live: Live | None,
               fresh: bool = False) -> tuple[Any, list[tuple[str, str, str]]]:
  scratch = scratch_dir()
  try: return _supervised(fn_path, kwargs, progress, timeout_s, deadline, {**env, "TMPDIR": scratch}, limits, held, take, keep, live, fresh)
  finally: shutil.rmtree(scratch, ignore_errors=True)

def _supervised(fn_path: str, kwargs: dict[str, Any], progress: Progress | None, timeout_s: float, deadline: float, env: dict[str, str],
                limits: Limits, held: HeldLocks, take: Callable[[str], None], keep: bool,
                live: Live | None, fresh: bool = False) -> tuple[Any, list[tuple[str, str, str]]]:
  # pipes, not Queues: no semaphores for a killed worker to leak; its whole process group is killed below whatever happens
  proc, recv, gate_send = start_worker(fn_path, kwargs, env, limits, deadline, fresh)
  for registry in (LIVE, live if live is not None else {}): registry[proc.pid] = proc
  seen: list[tuple[str, str, str]] = []
  next_watch = time.monotonic() + WATCH_S
  try:
    while True:
      if time.monotonic() >= next_watch:
        next_watch = time.monotonic() + WATCH_S
        if limits.memory_mb and (rss := group_rss_mb(proc.pid)) > limits.memory_mb:
          raise WorkerOutOfMemory(f"the worker's processes used {rss:.0f} MiB, over the memory limit of {limits.memory_mb} MiB; it was stopped")
      if not recv.poll(min(WATCH_S, max(0.01, deadline - time.monotonic()))):
        if time.monotonic() > deadline: raise WorkerTimedOut(f"the worker exceeded its time limit of {timeout_s:.0f}s")
        continue
      try: kind, payload = recv.recv()
      except EOFError:  # the worker is gone without a word
        proc.join(timeout=5)
        raise WorkerCrashed(_death(proc.exitcode) + (f"; it had a memory limit of {limits.memory_mb} MiB" if limits.memory_mb else "")) from None
      if kind == "gate":
        take(payload)
        gate_send.send("go")
      elif kind == "progress":
        if payload[0] != PARTIAL: seen.append(payload)  # a trace's partial data goes to progress only
        if progress is not None: progress(*payload)
        if payload[0] == GATED_STAGE and payload[1] in ("done", "error") and not keep: held.release()
      elif kind == "result": return pickle.loads(payload), seen  # our own worker's pickle, never a client's bytes
      elif kind == "too large": raise OutputTooLarge(payload)
      else: raise WorkerFailed(payload.splitlines()[0] if payload else "the worker failed")
  finally:
    proc.join(timeout=0.5 if proc.is_alive() else 0)  # a worker that sent its result is exiting
    kill_group(proc)  # and whatever is left: the worker if it hangs, render processes orphaned by a crash, a hung compiler
    proc.join(timeout=5)
    for registry in (LIVE, live if live is not None else {}): registry.pop(proc.pid, None)
    recv.close(); gate_send.close()

def _death(code: int | None) -> str:
  if code is not None and code < 0:
    try: name = signal.Signals(-code).name
    except ValueError: name = f"signal {-code}"
    return f"the worker was killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
  return f"the worker died (exit code {code})"

# ***** the worker's process group: it and everything it starts, orphans of a crash included *****

LIVE: Live = {}  # this process's running workers by pid: stop_all() ends them at a signal or shutdown

def kill_group(proc: Worker) -> None:
  """SIGKILL the worker's group (a pid that leads a live group is never reused), and the worker if it had no time to make its group."""
  with suppress(OSError): os.killpg(proc.pid, signal.SIGKILL)
  if proc.is_alive(): proc.kill()

def stop(procs: list[Worker]) -> None:
  """SIGKILL each worker's group, then reap each worker (a second at most each), so that none is left a zombie of a caller that is
  about to exit (its orphans go to init, which may be slow to reap them), and wait for the rest of each group to be gone: a killed
  process is still there while the kernel frees its memory (a render process's hundreds of megabytes take a while on a busy host)."""
  for proc in procs: kill_group(proc)
  for proc in procs: proc.join(timeout=1)
  deadline = time.monotonic() + 2
  for proc in procs:
    while _group_left(proc.pid) and time.monotonic() < deadline: time.sleep(0.01)

def _group_left(pgid: int) -> bool:
  try: os.killpg(pgid, 0)
  except OSError: return False  # no process is left in the group (or it is not ours to signal: nothing to wait for)
  return True

def stop_all() -> None:
  """Stop every running worker (safe in a signal handler): the caller is exiting, and no worker outlives it."""
  stop(list(LIVE.values()))
