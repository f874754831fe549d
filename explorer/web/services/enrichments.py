"""Enrichments of stored traces, computed when a page or the API first needs them (explorer.tracing.enrich): compile facts of a kernel
on a target, for one kernel when its page opens, for every kernel when a diff compares registers. Each computation is a Task in a
worker, stored in its own transaction (Store.put_enrichments: a row per kernel, target and kind) and served from the store after.
Identical requests share one task; a server that stops mid-way has stored nothing of it, and the next view computes it again."""
from __future__ import annotations
import asyncio, time
from dataclasses import dataclass, field
from typing import Any, Callable
from explorer.spec import ENRICH_FACTS, TARGETS
from explorer.store import Store
from explorer.tracing.workers import Limits
from explorer.web.services.lifecycle import DONE, ERROR, Progress, Task, Tasks
from explorer.web.services.permit import WorkPermit

class EnrichmentUnavailable(RuntimeError):
  """This enrichment cannot be computed for this trace (an unknown target, a kernel without a record for it)."""

@dataclass
class FactsTask(Task):
  target: str = ""
  kernels: tuple[int, ...] = ()
  started: float = field(default_factory=time.time)

  def view(self) -> dict[str, Any]:
    """The job as GET .../facts shows it while it runs (explorer.web.http.models.EnrichmentJob)."""
    return {"kind": ENRICH_FACTS, "target": self.target, "kernels": list(self.kernels), "status": self.status, "detail": self.detail,
            "error": self.error, "started": self.started}

class EnrichmentService:
  def __init__(self, store: Store, limits: Limits, on_stored: Callable[[str], None]):
    self.store, self.limits, self.on_stored = store, limits, on_stored
    self.tasks: Tasks[FactsTask] = Tasks(parallel=2)
    self.computed = 0  # worker runs: tests check that concurrent and later requests compute nothing more

  @staticmethod
  def _key(trace_id: str, target: str, kernels: tuple[int, ...]) -> tuple:
    return trace_id, ENRICH_FACTS, target, kernels

  def status(self, trace_id: str, target: str, kernels: tuple[int, ...]) -> FactsTask | None:
    return self.tasks.get(self._key(trace_id, target, kernels))

  def forget(self, trace_id: str, target: str, kernels: tuple[int, ...]) -> None: self.tasks.forget(self._key(trace_id, target, kernels))

  def start_facts(self, trace_id: str, trace: dict, target: str, kernels: tuple[int, ...], permit: WorkPermit) -> FactsTask:
    """The task computing these kernels' compile facts on `target` (the running one, or a new one); EnrichmentUnavailable when it
    cannot be. It starts a worker: the request's permit says it may."""
    from explorer.tracing.enrich import facts_jobs
    if target not in TARGETS: raise EnrichmentUnavailable(f"unknown target {target!r}; known: {', '.join(TARGETS)}")
    jobs = facts_jobs(trace, [target], kernels)
    have = {k["index"] for k in trace.get("kernels") or [] if target in (k.get("targets") or {})}
    if missing := [n for n in kernels if n not in have]:
      raise EnrichmentUnavailable(f"no {target} record for kernel(s) {', '.join(map(str, missing))}: compute the target first")
    def work(task: FactsTask, progress: Progress) -> Any:
      from explorer.tracing.enrich import compute_facts
      self.computed += 1
      return compute_facts(jobs, progress, self.limits)
    async def kept(task: FactsTask, facts: Any) -> str:
      await asyncio.to_thread(self.store.put_enrichments, trace_id, ENRICH_FACTS, facts)
      self.on_stored(trace_id)
      return f"{target} compile facts of {len(facts)} kernel(s) in {time.time() - task.started:.1f}s"
    task = FactsTask(target=target, kernels=kernels, detail=f"{target} compile facts wait for a worker")
    return self.tasks.start(self._key(trace_id, target, kernels), task, work, kept=kept)

  async def with_facts(self, trace_id: str, trace: dict, target: str, permit: WorkPermit) -> dict:
    """The trace with every kernel's compile facts on `target`, computed first where missing (a diff compares registers); a failure
    leaves the trace as it was (its figures then say "—")."""
    from explorer.tracing.enrich import facts_jobs
    kernels = tuple(sorted({j["kernel"] for j in facts_jobs(trace, [target])}))
    if not kernels: return trace
    task = self.start_facts(trace_id, trace, target, kernels, permit)
    while task.active: await asyncio.sleep(0.1)
    if task.status == ERROR: self.forget(trace_id, target, kernels)
    if task.status != DONE: return trace
    return await asyncio.to_thread(self.store.get_trace, trace_id) or trace

  def cancel_all(self) -> None: self.tasks.cancel_all()
