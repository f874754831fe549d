"""Run each trace in a fresh worker process: tinygrad's caches and context variables cannot leak between variants,
tracking is switched on before tinygrad is imported, and a hung or crashed trace cannot take the caller down.

Every worker runs under Limits (from explorer.settings unless given): a wall-clock limit, a memory limit and a cap on the
result's size. Memory: RLIMIT_DATA in the worker (inherited by the processes it starts: render processes, compilers), so a
big allocation fails there with MemoryError, and the parent watches the resident memory of the worker's whole process group,
stopping it past the limit. Not RLIMIT_AS: GPU runtimes (CUDA, tinygrad's NV) reserve terabytes of address space they never
touch, which an address-space limit forbids.

Timing is serialized per device (explorer.devicelock): a worker reporting progress("timing", "start", DEVICE) waits until its
parent holds DEVICE's lock, and the lock is let go when it reports the stage done or failed, or when the worker ends."""
from __future__ import annotations
import multiprocessing as mp
import importlib, os, pickle, resource, signal, time, traceback
from contextlib import suppress
from multiprocessing.connection import Connection
from dataclasses import dataclass, field
from typing import Callable
from explorer import lifeline
from explorer.devicelock import HeldLocks
from explorer.lifeline import group_rss_mb
from explorer.spec import ConvSpec, Variant

DEFAULT_TIMEOUT_S = 600.0
GATED_STAGE = "timing"  # its start waits for the device lock
WATCH_S = lifeline.WATCH_S  # how often the parent reads the worker group's memory
Progress = Callable[[str, str, str], None]

class TraceFailed(RuntimeError):
  """The worker died, hung past its limit or failed outside any stage."""

@dataclass
class TraceResult:
  trace: dict
  rewrites: bytes
  progress: list[tuple[str, str, str]] = field(default_factory=list)

@dataclass(frozen=True)
class Limits:
  memory_mb: int = 0            # data limit of the worker and each process it starts, and of their resident total; 0: none
  max_output_mb: float = 256.0  # largest pickled result
  nice: int = 0                 # CPU priority below the caller's (a nice increment), inherited by the processes it starts

  @classmethod
  def from_settings(cls, settings: object = None) -> Limits:
    """KERNEL_EXPLORER_WORKER_MEMORY_MB and KERNEL_EXPLORER_MAX_OUTPUT_MB (explorer.settings), or those of the settings given."""
    from explorer.settings import Settings
    s = settings if settings is not None else Settings.load()
    return cls(memory_mb=int(s.worker_memory_mb), max_output_mb=float(s.max_output_mb), nice=int(s.worker_nice))  # type: ignore[attr-defined]

def _child(fn_path: str, kwargs: dict, env: dict[str, str], limits: Limits, out: Connection, gate: Connection, parent_pid: int,
           deadline: float) -> None:
  try:
    os.setpgid(0, 0)  # a process group of its own: the parent measures and kills the worker with everything it starts
    lifeline.die_with_parent(parent_pid)
    lifeline.watch(parent_pid, deadline, limits.memory_mb, own_group=True)  # the limits hold if the parent is SIGKILLed or hangs
    os.environ.update(env)  # before the target's imports bring in tinygrad
    if limits.memory_mb: resource.setrlimit(resource.RLIMIT_DATA, (limits.memory_mb << 20, limits.memory_mb << 20))
    if limits.nice: os.nice(limits.nice)
    module, name = fn_path.split(":")
    fn = getattr(importlib.import_module(module), name)
    def progress(stage: str, status: str, detail: str) -> None:
      if stage == GATED_STAGE and status == "start":
        out.send(("gate", detail))  # detail: the device(s) about to be timed
        if gate.recv() != "go": raise TraceFailed("the parent did not let the timing stage start")
      out.send(("progress", (stage, status, detail)))
    result = pickle.dumps(fn(progress=progress, **kwargs))
    if len(result) > limits.max_output_mb * 2**20:
      raise TraceFailed(f"the result is {len(result)/2**20:.2f} MiB, over the output cap of {limits.max_output_mb:.2f} MiB")
    out.send(("result", result))
  except BaseException as e:  # noqa: BLE001 - anything the work raises must reach the parent as data
    with suppress(OSError): out.send(("failed", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}"))
  finally:
    out.close()

def call_in_worker(fn_path: str, kwargs: dict, progress: Progress | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                   env: dict[str, str] | None = None, limits: Limits | None = None,
                   exclusive: str | None = None, live: dict | None = None) -> tuple[object, list[tuple[str, str, str]]]:
  """Call module:function(progress=..., **kwargs) in a fresh spawned process; progress is relayed to this process.
  exclusive: a device whose lock is held for the whole run (a measurement from start to end). Waiting for a device lock counts
  against timeout_s. live: a dict that holds the worker process by pid while it runs (besides LIVE), for its owner to stop."""
  limits = limits if limits is not None else Limits.from_settings()
  deadline = time.monotonic() + timeout_s
  held = HeldLocks()
  def waiting(dev: str) -> None:
    if progress is not None: progress(GATED_STAGE, "start", f"waiting for the {dev} device: another measurement is running")
  def take(devices: str) -> None:
    if (busy := held.acquire(devices, deadline, waiting)) is not None:
      raise TraceFailed(f"the worker exceeded its time limit of {timeout_s:.0f}s waiting for the {busy} device (other measurements held it)")
  try:
    if exclusive: take(exclusive)
    return _supervise(fn_path, kwargs, progress, timeout_s, deadline, env or {}, limits, held, take, keep=bool(exclusive), live=live)
  finally: held.release()

def _supervise(fn_path: str, kwargs: dict, progress: Progress | None, timeout_s: float, deadline: float, env: dict[str, str], limits: Limits,
               held: HeldLocks, take: Callable[[str], None], keep: bool, live: dict | None) -> tuple[object, list[tuple[str, str, str]]]:
  ctx = mp.get_context("spawn")
  recv, send = ctx.Pipe(duplex=False)  # pipes, not Queues: no semaphores for a killed worker to leak
  gate_recv, gate_send = ctx.Pipe(duplex=False)
  # not a daemon: a trace starts its own render processes; its whole process group is killed below whatever happens
  proc = ctx.Process(target=_child, args=(fn_path, kwargs, env, limits, send, gate_recv, os.getpid(), deadline), daemon=False)
  proc.start()
  for registry in (LIVE, live if live is not None else {}): registry[proc.pid] = proc  # type: ignore[index]
  send.close(); gate_recv.close()
  seen: list[tuple[str, str, str]] = []
  next_watch = time.monotonic() + WATCH_S
  try:
    while True:
      if time.monotonic() >= next_watch:
        next_watch = time.monotonic() + WATCH_S
        if limits.memory_mb and (rss := group_rss_mb(proc.pid)) > limits.memory_mb:  # type: ignore[arg-type]
          raise TraceFailed(f"the worker's processes used {rss:.0f} MiB, over the memory limit of {limits.memory_mb} MiB; it was stopped")
      if not recv.poll(min(WATCH_S, max(0.01, deadline - time.monotonic()))):
        if time.monotonic() > deadline: raise TraceFailed(f"the worker exceeded its time limit of {timeout_s:.0f}s")
        continue
      try: kind, payload = recv.recv()
      except EOFError:  # the worker is gone without a word
        proc.join(timeout=5)
        raise TraceFailed(_death(proc.exitcode) + (f"; it had a memory limit of {limits.memory_mb} MiB" if limits.memory_mb else "")) from None
      if kind == "gate":
        take(payload)
        gate_send.send("go")
      elif kind == "progress":
        seen.append(payload)
        if progress is not None: progress(*payload)
        if payload[0] == GATED_STAGE and payload[1] in ("done", "error") and not keep: held.release()
      elif kind == "result": return pickle.loads(payload), seen  # our own worker's pickle, never a client's bytes
      else: raise TraceFailed(payload.splitlines()[0] if payload else "the worker failed")
  finally:
    proc.join(timeout=0.5 if proc.is_alive() else 0)  # a worker that sent its result is exiting
    kill_group(proc)  # and whatever is left: the worker if it hangs, render processes orphaned by a crash, a hung compiler
    proc.join(timeout=5)
    for registry in (LIVE, live if live is not None else {}): registry.pop(proc.pid, None)  # type: ignore[arg-type]
    recv.close(); gate_send.close()

def _death(code: int | None) -> str:
  if code is not None and code < 0:
    try: name = signal.Signals(-code).name
    except ValueError: name = f"signal {-code}"
    return f"the worker was killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
  return f"the worker died (exit code {code})"

# ***** the worker's process group: it and everything it starts, orphans of a crash included *****

LIVE: dict[int, mp.process.BaseProcess] = {}  # this process's running workers by pid: stop_all() ends them at a signal or shutdown

def kill_group(proc: mp.process.BaseProcess) -> None:
  """SIGKILL the worker's group (a pid that leads a live group is never reused), and the worker if it had no time to make its group."""
  with suppress(OSError): os.killpg(proc.pid, signal.SIGKILL)  # type: ignore[arg-type]
  if proc.is_alive(): proc.kill()

def stop_all() -> None:
  """SIGKILL every running worker's group (safe in a signal handler): the caller is exiting, and no worker outlives it."""
  for proc in list(LIVE.values()): kill_group(proc)

# ***** traces *****

def _capture(progress: Progress, spec: dict, variant: dict, dump_io: str | None) -> tuple[dict, bytes]:
  from explorer.trace import capture  # imports tinygrad: first time in this process
  return capture(ConvSpec.from_dict(spec), Variant.from_dict(variant), progress, dump_io)

def run_trace(spec: ConvSpec, variant: Variant, progress: Progress | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
              dump_io: str | None = None, limits: Limits | None = None, live: dict | None = None) -> TraceResult:
  """Trace (spec, variant) in a fresh spawned process; progress is called in this process as each stage starts and ends."""
  (trace, blob), seen = call_in_worker("explorer.worker:_capture", {"spec": spec.to_dict(), "variant": variant.to_dict(), "dump_io": dump_io},
                                       progress, timeout_s, limits=limits, live=live)  # type: ignore[misc]
  return TraceResult(trace, blob, seen)
