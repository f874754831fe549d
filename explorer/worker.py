"""Run each trace in a fresh worker process: tinygrad's caches and context variables cannot leak between variants,
tracking is switched on before tinygrad is imported, and a hung or crashed trace cannot take the caller down."""
from __future__ import annotations
import multiprocessing as mp
import importlib, os, pickle, resource, signal, time, traceback
from multiprocessing.connection import Connection
from dataclasses import dataclass, field
from typing import Callable
from explorer.spec import ConvSpec, Variant

DEFAULT_TIMEOUT_S = 600.0
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
  memory_mb: int = 0            # address-space limit of the worker (and the compilers it starts); 0: none
  max_output_mb: float = 256.0  # largest pickled result

def _child(fn_path: str, kwargs: dict, env: dict[str, str], limits: Limits, out: Connection) -> None:
  try:
    os.environ.update(env)  # before the target's imports bring in tinygrad
    if limits.memory_mb: resource.setrlimit(resource.RLIMIT_AS, (limits.memory_mb << 20, limits.memory_mb << 20))
    module, name = fn_path.split(":")
    fn = getattr(importlib.import_module(module), name)
    def progress(stage: str, status: str, detail: str) -> None: out.send(("progress", (stage, status, detail)))
    result = pickle.dumps(fn(progress=progress, **kwargs))
    if len(result) > limits.max_output_mb * 2**20:
      raise TraceFailed(f"the result is {len(result)/2**20:.2f} MiB, over the output cap of {limits.max_output_mb:.2f} MiB")
    out.send(("result", result))
  except BaseException as e:  # noqa: BLE001 - anything the work raises must reach the parent as data
    out.send(("failed", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}"))
  finally:
    out.close()

def call_in_worker(fn_path: str, kwargs: dict, progress: Progress | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                   env: dict[str, str] | None = None, limits: Limits = Limits()) -> tuple[object, list[tuple[str, str, str]]]:
  """Call module:function(progress=..., **kwargs) in a fresh spawned process; progress is relayed to this process."""
  ctx = mp.get_context("spawn")
  recv, send = ctx.Pipe(duplex=False)  # a pipe, not a Queue: no semaphores for a killed worker to leak
  # not a daemon: a trace starts its own render process; killed below whatever happens
  proc = ctx.Process(target=_child, args=(fn_path, kwargs, env or {}, limits, send), daemon=False)
  proc.start()
  send.close()
  seen: list[tuple[str, str, str]] = []
  deadline = time.monotonic() + timeout_s
  try:
    while True:
      if not recv.poll(min(0.5, max(0.01, deadline - time.monotonic()))):
        if time.monotonic() > deadline: raise TraceFailed(f"the worker exceeded its time limit of {timeout_s:.0f}s")
        continue
      try: kind, payload = recv.recv()
      except EOFError:  # the worker is gone without a word
        proc.join(timeout=5)
        raise TraceFailed(_death(proc.exitcode) + (f"; it had a memory limit of {limits.memory_mb} MiB" if limits.memory_mb else "")) from None
      if kind == "progress":
        seen.append(payload)
        if progress is not None: progress(*payload)
      elif kind == "result": return pickle.loads(payload), seen
      else: raise TraceFailed(payload.splitlines()[0] if payload else "the worker failed")
  finally:
    if proc.is_alive(): proc.kill()
    proc.join(timeout=5)
    recv.close()

def _death(code: int | None) -> str:
  if code is not None and code < 0:
    try: name = signal.Signals(-code).name
    except ValueError: name = f"signal {-code}"
    return f"the worker was killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
  return f"the worker died (exit code {code})"

def _capture(progress: Progress, spec: dict, variant: dict, dump_io: str | None) -> tuple[dict, bytes]:
  from explorer.trace import capture  # imports tinygrad: first time in this process
  return capture(ConvSpec.from_dict(spec), Variant.from_dict(variant), progress, dump_io)

def run_trace(spec: ConvSpec, variant: Variant, progress: Progress | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
              dump_io: str | None = None, limits: Limits = Limits()) -> TraceResult:
  """Trace (spec, variant) in a fresh spawned process; progress is called in this process as each stage starts and ends."""
  (trace, blob), seen = call_in_worker("explorer.worker:_capture", {"spec": spec.to_dict(), "variant": variant.to_dict(), "dump_io": dump_io},
                                       progress, timeout_s, limits=limits)  # type: ignore[misc]
  return TraceResult(trace, blob, seen)
