"""Targets on first request: a trace computes its host and the targets it asked for; any other target of a stored trace is computed
when a page or the API first asks for it, in a worker (explorer.tracing.run:targets_in_worker) that rebuilds the kernels' ASTs from
the trace's rewrite blob and renders them as a cold trace would, then stored with the trace (with where it ran: this server's
process, env.ran_on.targets), so the next request is instant.
Identical requests share one job; jobs of one trace are stored one at a time (each adds its target to the stored trace)."""
from __future__ import annotations
import asyncio, time
from typing import Any, Callable
from explorer.tracing.workers import Limits, WorkerFailed
from explorer.spec import TARGETS, Variant
from explorer.store import Store
from explorer.web.services.permit import WorkPermit

class TargetUnavailable(RuntimeError):
  """This target cannot be computed for this trace (an unknown target, a trace recorded before per-target records)."""

class TargetService:
  def __init__(self, store: Store, limits: Limits, on_stored: Callable[[str], None]):
    self.store, self.limits, self.on_stored = store, limits, on_stored
    self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
    self.tasks: set[asyncio.Task] = set()
    self._locks: dict[str, asyncio.Lock] = {}
    self.computed = 0  # worker runs: tests check that a second request computes nothing

  def status(self, trace_id: str, target: str) -> dict[str, Any] | None: return self.jobs.get((trace_id, target))

  def forget(self, trace_id: str, target: str) -> None: self.jobs.pop((trace_id, target), None)

  def start(self, trace_id: str, trace: dict, target: str, permit: WorkPermit) -> dict[str, Any]:
    """The job computing `target` for this stored trace (the running one, or a new one); TargetUnavailable when it cannot be. It
    starts a worker: the request's permit (explorer.web.http.work) says it may."""
    if target not in TARGETS: raise TargetUnavailable(f"unknown target {target!r}; known: {', '.join(TARGETS)}")
    if (trace.get("schema") or 1) < 2 or not all(k.get("ast_sink") is not None for k in trace.get("kernels") or []):
      raise TargetUnavailable("this trace was recorded before per-target records: trace it again to see other targets")
    if (trace.get("variant") or {}).get("rewrite_file"):
      raise TargetUnavailable("this trace ran a user's rewrite file, and the server never runs user code: render more targets with the CLI")
    key = (trace_id, target)
    if (job := self.jobs.get(key)) is not None and job["status"] in ("queued", "running"): return job
    job = self.jobs[key] = {"target": target, "status": "queued", "detail": f"{target} waits for a worker", "error": None,
                            "started": time.time()}
    task = asyncio.get_running_loop().create_task(self._run(trace_id, trace, target, job))
    self.tasks.add(task)
    task.add_done_callback(self.tasks.discard)
    return job

  async def _run(self, trace_id: str, trace: dict, target: str, job: dict[str, Any]) -> None:
    from explorer.tracing.run import ran_here
    from explorer.tracing.workers import call_in_worker
    from explorer.web.services.traces import run_in_daemon_thread
    loop = asyncio.get_running_loop()
    def progress(stage: str, status: str, detail: str) -> None:
      loop.call_soon_threadsafe(job.update, {"status": "running", "detail": f"{detail}: {stage} {status}"})
    variant = Variant.from_dict(trace["variant"])
    args: dict[str, Any] = {"blob": None, "sinks": [k["ast_sink"] for k in trace["kernels"]], "targets": {target: variant.arch(target)},
                            "opt": variant.opt, "rewrites": list(variant.rewrites)}
    try:
      args["blob"] = await asyncio.to_thread(self.store.get_rewrites, trace_id)
      if args["blob"] is None: raise WorkerFailed(f"trace {trace_id} has no stored rewrites to rebuild its kernels from")
      job.update(status="running", detail=f"rendering {target} in a worker")
      self.computed += 1
      got, _ = await run_in_daemon_thread(lambda: call_in_worker("explorer.tracing.run:targets_in_worker", args, progress, limits=self.limits))
      records, blob = got[target]
      async with self._locks.setdefault(trace_id, asyncio.Lock()):
        await asyncio.to_thread(self.store.add_targets, trace_id, {target: records}, {target: blob}, ran_here()["by"])
      self.on_stored(trace_id)
      job.update(status="done", detail=f"{target} computed in {time.time() - job['started']:.1f}s")
    except Exception as e:
      job.update(status="error", error=(str(e).strip().splitlines() or [type(e).__name__])[0])

  def cancel_all(self) -> None:
    for t in list(self.tasks): t.cancel()
