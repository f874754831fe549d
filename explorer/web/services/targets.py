"""Targets on first request: a trace computes its host and the targets it asked for; any other target of a stored trace is computed
when a page or the API first asks for it, in a worker (explorer.tracing.run:targets_in_worker) that rebuilds the kernels' ASTs from
the trace's rewrite blob and renders them as a cold trace would, then stored with the trace (with where it ran: this server's
process, env.ran_on.targets), so the next request is instant.
Identical requests share one job; jobs of one trace are stored one at a time (each adds its target to the stored trace)."""
from __future__ import annotations
import asyncio, time
from dataclasses import dataclass, field
from typing import Any, Callable
from explorer.tracing.workers import Limits, WorkerFailed
from explorer.spec import TARGETS, Variant
from explorer.store import Store
from explorer.web.services.lifecycle import Progress, Task, Tasks
from explorer.web.services.permit import WorkPermit

class TargetUnavailable(RuntimeError):
  """This target cannot be computed for this trace (an unknown target, a trace recorded before per-target records)."""

@dataclass
class TargetTask(Task):
  target: str = ""
  started: float = field(default_factory=time.time)

  def view(self) -> dict[str, Any]:
    """The job as GET .../targets/{target} shows it while it runs (explorer.web.http.models.TargetJob)."""
    return {"target": self.target, "status": self.status, "detail": self.detail, "error": self.error, "started": self.started}

class TargetService:
  def __init__(self, store: Store, limits: Limits, on_stored: Callable[[str], None]):
    self.store, self.limits, self.on_stored = store, limits, on_stored
    self.tasks: Tasks[TargetTask] = Tasks()
    self._locks: dict[str, asyncio.Lock] = {}
    self.computed = 0  # worker runs: tests check that a second request computes nothing

  def status(self, trace_id: str, target: str) -> TargetTask | None: return self.tasks.get((trace_id, target))

  def forget(self, trace_id: str, target: str) -> None: self.tasks.forget((trace_id, target))

  def start(self, trace_id: str, trace: dict, target: str, permit: WorkPermit) -> TargetTask:
    """The job computing `target` for this stored trace (the running one, or a new one); TargetUnavailable when it cannot be. It
    starts a worker: the request's permit (explorer.web.services.permit) says it may."""
    if target not in TARGETS: raise TargetUnavailable(f"unknown target {target!r}; known: {', '.join(TARGETS)}")
    if (trace.get("schema") or 1) < 2 or not all(k.get("ast_sink") is not None for k in trace.get("kernels") or []):
      raise TargetUnavailable("this trace was recorded before per-target records: trace it again to see other targets")
    if (trace.get("variant") or {}).get("rewrite_file"):
      raise TargetUnavailable("this trace ran a user's rewrite file, and the server never runs user code: render more targets with the CLI")
    variant = Variant.from_dict(trace["variant"])
    args: dict[str, Any] = {"sinks": [k["ast_sink"] for k in trace["kernels"]], "targets": {target: variant.arch(target)}, "opt": variant.opt,
                            "rewrites": list(variant.rewrites)}
    def work(task: TargetTask, progress: Progress) -> Any:
      from explorer.tracing.workers import call_in_worker
      if (blob := self.store.get_rewrites(trace_id)) is None:
        raise WorkerFailed(f"trace {trace_id} has no stored rewrites to rebuild its kernels from")
      self.computed += 1
      relay: Progress = lambda stage, status, detail: progress(stage, status, f"{detail}: {stage} {status}")
      got, _ = call_in_worker("explorer.tracing.run:targets_in_worker", {**args, "blob": blob}, relay, limits=self.limits)
      return got[target]
    async def kept(task: TargetTask, got: Any) -> str:
      from explorer.tracing.run import ran_here
      records, blob = got
      async with self._locks.setdefault(trace_id, asyncio.Lock()):  # one trace's targets are added to it one at a time
        await asyncio.to_thread(self.store.add_targets, trace_id, {target: records}, {target: blob}, ran_here()["by"])
      self.on_stored(trace_id)
      return f"{target} computed in {time.time() - task.started:.1f}s"
    return self.tasks.start((trace_id, target), TargetTask(target=target, detail=f"{target} waits for a worker"), work, kept=kept)

  def cancel_all(self) -> None: self.tasks.cancel_all()
