"""A trace in a worker: run_trace is what the CLI, the web's jobs, the studies and the diff call; trace_in_worker is the function the
worker runs (it imports tinygrad, through explorer.tracing.pipeline.trace, for the first time in that process)."""
from __future__ import annotations
import os
import resource
import shutil
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast
from explorer.spec import ConvSpec, Variant
from explorer.stages import PARTIAL, STAGES, Progress
from explorer.tinygrads import TINYGRAD
from explorer.tracing import versions
from explorer.tracing.workers import process
from explorer.tracing.workers.devicelock import HeldLocks
from explorer.tracing.workers.process import GATED_STAGE, Limits, Live, WorkerFailed, WorkerTimedOut, call_in_worker, scratch_dir

if TYPE_CHECKING:
  from explorer.schema import TraceRecord  # types only: pydantic stays out of trace workers

@dataclass
class TraceResult:
  trace: TraceRecord
  rewrites: bytes                                                        # the host's rewrite blob
  progress: list[tuple[str, str, str]] = field(default_factory=list)
  target_rewrites: dict[str, bytes] = field(default_factory=dict)        # each other target's, by target name
  others: list[TraceRecord] = field(default_factory=list)              # a script's every realize, in order (run_script)

  @property
  def blobs(self) -> dict[str, bytes]:
    """Every rewrite blob by the key its records name ("" the host's): what an enrichment reads (explorer.tracing.enrichments.enrich)."""
    return {"": self.rewrites, **self.target_rewrites}

def trace_in_worker(progress: Progress, spec: dict[str, Any], variant: dict[str, Any], dump_io: str | None,
                    analysis: bool = False, beside: list[str] | None = None) -> tuple[dict[str, Any], bytes, dict[str, bytes]]:
  from explorer.tracing.pipeline.trace import capture
  return capture(ConvSpec.from_dict(spec), Variant.from_dict(variant), progress, dump_io, analysis, fork_renders=True,  # a fresh worker
                 beside=tuple(beside or ()))

def run_trace(spec: ConvSpec, variant: Variant, progress: Progress | None = None, timeout_s: float | None = None,
              dump_io: str | None = None, limits: Limits | None = None, live: Live | None = None,
              analysis: bool = False, here: bool = False, beside: tuple[str, ...] = ()) -> TraceResult:
  """Trace (spec, variant) in a fresh worker process; progress is called in this process as each stage starts and ends. What is
  otherwise computed when first viewed (explorer.tracing.enrichments.enrich), asked for now: analysis, every record's analysis (line
  maps, live values, loop splits, program spec: in the trace's worker and its render processes). here: in this process instead,
  where it can be (trace_here). beside: other targets rendered with the trace though its variant does not name them (a server's
  settings.render_beside), their records in the trace."""
  environment_for(variant, progress)
  kwargs = {"spec": spec.to_dict(), "variant": variant.to_dict(), "dump_io": dump_io, "analysis": analysis, "beside": list(beside)}
  if here and can_trace_here(variant):
    whole = (limits if limits is not None else Limits.from_settings()).with_timeout(timeout_s)
    (trace, blob, blobs), seen = trace_here(kwargs, progress, whole, device_env(variant))
  else:
    (trace, blob, blobs), seen = call_in_worker("explorer.tracing.pipeline.run:trace_in_worker", kwargs, progress, timeout_s, env=device_env(variant),
                                                limits=limits, live=live, tinygrad=variant.tinygrad)
  _learn_default_device(variant, trace)
  return TraceResult(record_ran_on(trace), blob, seen, blobs)

def can_trace_here(variant: Variant) -> bool:
  """This process has not imported tinygrad (whose tracking is set as it is imported) and the variant runs this process's tinygrad."""
  return "tinygrad" not in sys.modules and variant.tinygrad in (None, TINYGRAD)

def trace_here(kwargs: dict[str, Any], progress: Progress | None, limits: Limits,
               env: dict[str, str]) -> tuple[Any, list[tuple[str, str, str]]]:
  """trace_in_worker(**kwargs) in this process, for a command that traces one variant and exits: a worker keeps one variant's
  tinygrad caches and context variables from the next one's, which such a command never runs, and costs a second interpreter, its
  imports and the result pickled across (a medium trace's memory a third again: benchmarks/trace_overhead.py). It is held as a
  worker is: its environment set before tinygrad is imported, the data limit (inherited by its render processes and compilers), the
  wall-clock limit (past it the process ends, saying so), the device's timing lock, a scratch directory of its own, and a failure
  is WorkerFailed in the worker's words."""
  os.environ.update(env)
  os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as a worker sets it (explorer.tracing.workers.process._child)
  if limits.memory_mb: resource.setrlimit(resource.RLIMIT_DATA, (limits.memory_mb << 20, limits.memory_mb << 20))
  deadline, held, seen = time.monotonic() + limits.timeout_s, HeldLocks(), []
  def relay(stage: str, status: str, detail: str) -> None:
    if stage == GATED_STAGE and status == "start" and (busy := held.acquire(detail, deadline)) is not None:
      raise WorkerTimedOut(f"the worker exceeded its time limit of {limits.timeout_s:.0f}s waiting for the {busy} device "
                           "(other measurements held it)")
    if stage != PARTIAL: seen.append((stage, status, detail))
    if progress is not None: progress(stage, status, detail)
    if stage == GATED_STAGE and status in ("done", "error"): held.release()
  timer = threading.Timer(limits.timeout_s, _timed_out, (limits.timeout_s,))
  timer.daemon = True
  scratch, tmpdir = scratch_dir(), os.environ.get("TMPDIR")
  os.environ["TMPDIR"], tempfile.tempdir = scratch, None
  timer.start()
  try: return trace_in_worker(relay, **kwargs), seen
  except WorkerFailed: raise
  except Exception as e: raise WorkerFailed(f"{type(e).__name__}: {e}".splitlines()[0]) from e
  finally:
    timer.cancel()
    held.release()
    if tmpdir is None: os.environ.pop("TMPDIR", None)
    else: os.environ["TMPDIR"] = tmpdir
    tempfile.tempdir = None
    shutil.rmtree(scratch, ignore_errors=True)

def _timed_out(timeout_s: float) -> None:
  print(f"kernel-explorer: trace failed: the worker exceeded its time limit of {timeout_s:.0f}s", file=sys.stderr, flush=True)
  os._exit(1)

def ran_here(worker: str | None = None) -> dict[str, Any]:
  """This process as a trace or a result records where a part ran: the job queue's worker (None: a server's or a command's own
  process), host and pid, and `by`, in one word: NAME@HOST for a worker, PID@HOST otherwise."""
  host, pid = socket.gethostname(), os.getpid()
  return {"worker": worker, "host": host, "pid": pid, "by": f"{worker or pid}@{host}"}

def record_ran_on(trace: TraceRecord | dict[str, Any], worker: str | None = None) -> TraceRecord:
  """env.ran_on: which process ran the trace (ran_here) and `stages`, each stage it ran (done or failed) -> NAME@HOST. A part added
  later records itself beside them: `targets`, target -> NAME@HOST (explorer.store.enrichments.Enrichments.put_target_records)."""
  raw = cast(dict[str, Any], trace)
  here, failed = ran_here(worker), {f.get("stage") for f in raw.get("failures") or []}
  ran = [s for s in STAGES if s in (raw.get("stage_seconds") or {}) or s in failed]
  raw.setdefault("env", {})["ran_on"] = {**here, "stages": dict.fromkeys(ran, here["by"])}
  return cast("TraceRecord", raw)  # the engine's JSON, typed from here on

def environment_for(variant: Variant, progress: Progress | None) -> None:
  """The variant's tinygrad's environment, made first where it is not (its first trace: seconds, said as the first stage's progress);
  WorkerFailed where it cannot be."""
  def say(line: str) -> None:
    if progress is not None: progress(STAGES[0], "start", line)
  try: versions.ready(variant.tinygrad, say)
  except versions.EnvironmentFailed as e: raise WorkerFailed(f"tinygrad {variant.tinygrad}: {e}") from None

# held while learn_default_device searches: a trace that names no device meanwhile waits for its answer (device_env) rather than
# searching itself in a worker of another environment (a template of its own: its imports again, and its memory beside the next one)
_searching = threading.Lock()

def device_env(variant: Variant | None = None) -> dict[str, str]:
  """DEV set to the variant's device (its name: DEV's own syntax reads "CUDA:1" differently), or, for a variant that names none, to
  this host's default device once this process knows it (process.DEFAULT_DEVICE: found as a server starts, learn_default_device, or
  by an earlier trace): tinygrad then opens that device as its default instead of trying every backend for one (about 0.5 s and 45
  MiB per process on a CPU-only machine), in the worker and its renders. DEV set in this process's environment wins."""
  if variant is not None and variant.device: return {"DEV": variant.device.split(":")[0]}
  if "device" not in process.DEFAULT_DEVICE and _searching.acquire(timeout=120):  # a search under way: its answer, not one of our own
    _searching.release()
  return process.with_default_device({})

def _learn_default_device(variant: Variant, trace: dict[str, Any]) -> None:
  if not variant.device and isinstance(device := trace.get("env", {}).get("device"), str) and device:
    process.remember_default_device(device)

def learn_default_device(timeout_s: float = 120.0) -> str | None:
  """This host's default device, found now in a process started afresh (the search opens every backend) where this process does not
  know it yet and DEV does not name it; kept for every worker after (process.DEFAULT_DEVICE). A server calls it as it starts, so that
  its first trace is as light as the next ones. None where the search failed (a trace then searches, as it would have)."""
  if "DEV" in os.environ or "device" in process.DEFAULT_DEVICE: return process.DEFAULT_DEVICE.get("device")
  with _searching:
    try: found, _ = call_in_worker("explorer.tracing.pipeline.probe:default_device", {}, timeout_s=timeout_s, env={"VIZ": "0"}, fresh=True)
    except WorkerFailed: return None
    if isinstance(found, str) and found: process.remember_default_device(found)
  return process.DEFAULT_DEVICE.get("device")

def run_script(path: str, fn: str | None, variant: Variant, progress: Progress | None = None, timeout_s: float | None = None,
               limits: Limits | None = None, analysis: bool = False) -> TraceResult:
  """Run a tinygrad script (or its function fn) in a fresh worker, every realize traced (explorer.tracing.pipeline.program): the result is the
  program's one trace, and `others` each realize's own, in order."""
  environment_for(variant, progress)
  ((trace, blob, blobs), realizes), seen = call_in_worker("explorer.tracing.pipeline.program:script_in_worker",
                                                          {"path": path, "fn": fn, "variant": variant.to_dict(), "analysis": analysis},
                                                          progress, timeout_s, env=device_env(variant), limits=limits, tinygrad=variant.tinygrad)
  _learn_default_device(variant, trace)
  return TraceResult(record_ran_on(trace), blob, seen, blobs, others=[record_ran_on(r) for r in realizes])
