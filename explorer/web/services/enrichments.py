"""Enrichments of stored traces, computed when a page or the API first needs them (explorer.tracing.enrich): compile facts of a kernel
on a target, for one kernel when its page opens, for every kernel when a diff compares registers; and a kernel scheduled by hand
(explorer.tracing.handopts: opts a user picked, on a target, timed against the original on the trace's device). Each computation is a Task in a
worker, stored in its own transaction (Store.put_enrichments: a row per kernel, target and kind) and served from the store after.
Identical requests share one task; a server that stops mid-way has stored nothing of it, and the next view computes it again."""
from __future__ import annotations
import asyncio, threading, time
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

OPTS = "opts"  # the enrichment kind of a hand schedule: "opts:{start}:{OP:AXIS:ARG,...}" per kernel and target

TOUR = "tour:opts"  # the hand schedules pinned to a trace's tour, per kernel and target: [[start, [opts...]], ...]

def opts_kind(start: str, opts: tuple[str, ...]) -> str: return f"{OPTS}:{start}:{','.join(opts)}"

class OptsRefused(ValueError):
  """tinygrad refused one of the opts (its KernelOptError's reason, one line)."""

@dataclass
class OptsTask(Task):
  kernel: int = 0
  target: str = ""
  start: str = "current"
  opts: tuple[str, ...] = ()
  started: float = field(default_factory=time.time)

  def view(self) -> dict[str, Any]:
    """The job as GET .../opts shows it while it runs (explorer.web.http.models.OptsJob)."""
    return {"kind": OPTS, "kernel": self.kernel, "target": self.target, "from": self.start, "opts": list(self.opts), "status": self.status,
            "detail": self.detail, "error": self.error, "started": self.started}

class EnrichmentService:
  def __init__(self, store: Store, limits: Limits, on_stored: Callable[[str], None]):
    self.store, self.limits, self.on_stored = store, limits, on_stored
    self.tasks: Tasks[FactsTask] = Tasks(parallel=2)
    self.opts_tasks: Tasks[OptsTask] = Tasks(parallel=1)  # one hand schedule at a time: each may time kernels on the device
    self._pins = threading.Lock()
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

  # ***** hand schedules *****

  def stored_opts(self, trace_id: str, n: int, target: str, start: str, opts: tuple[str, ...]) -> dict | None:
    return self.store.enrichments(trace_id, opts_kind(start, opts)).get((n, target))

  def opts_status(self, trace_id: str, n: int, target: str, start: str, opts: tuple[str, ...]) -> OptsTask | None:
    return self.opts_tasks.get((trace_id, n, target, opts_kind(start, opts)))

  def forget_opts(self, trace_id: str, n: int, target: str, start: str, opts: tuple[str, ...]) -> None:
    self.opts_tasks.forget((trace_id, n, target, opts_kind(start, opts)))

  def start_opts(self, trace_id: str, trace: dict, n: int, target: str, start: str, opts: tuple[str, ...], permit: WorkPermit,
                 on_device: bool = True) -> OptsTask:
    """The task scheduling kernel n by hand on `target` (opts checked as text: explorer.spec.hand_opts); on the trace's own target and
    device (on_device: this server runs that device) it is timed against the original too. EnrichmentUnavailable when it cannot be."""
    from explorer.tracing.handopts import Unschedulable, opts_args
    try: args = opts_args(trace, n, target, start, opts, on_device)
    except Unschedulable as e: raise EnrichmentUnavailable(str(e)) from None
    def work(task: OptsTask, progress: Progress) -> Any:
      from explorer.tracing.workers import WorkerFailed, call_in_worker
      if (blob := self.store.get_rewrites(trace_id)) is None: raise WorkerFailed(f"trace {trace_id} has no stored rewrites to rebuild kernel {n}")
      self.computed += 1
      try: got, _ = call_in_worker("explorer.tracing.handopts:opts_in_worker", {**args, "blob": blob}, progress, limits=self.limits,
                                   exclusive=args["device"] if args["time"] else None)
      except WorkerFailed as e:
        if str(e).startswith("OptRefused: "): raise OptsRefused(str(e).removeprefix("OptRefused: ")) from None
        raise
      return got
    async def kept(task: OptsTask, got: Any) -> dict:
      await asyncio.to_thread(self.store.put_enrichments, trace_id, opts_kind(start, opts), {(n, target): got})
      return got
    task = OptsTask(kernel=n, target=target, start=start, opts=opts, detail=f"{target} codegen waits for a worker")
    return self.opts_tasks.start((trace_id, n, target, opts_kind(start, opts)), task, work, kept=kept)

  def add_to_tour(self, trace_id: str, n: int, target: str, start: str, opts: tuple[str, ...]) -> list[list]:
    """Pin a computed hand schedule to the trace's tour (a step of its own, after the trace's steps); the kernel's pins, in order."""
    with self._pins:
      pins = self.store.enrichments(trace_id, TOUR).get((n, target)) or []
      if [start, list(opts)] not in pins: pins.append([start, list(opts)])
      self.store.put_enrichments(trace_id, TOUR, {(n, target): pins})
    self.on_stored(trace_id)
    return pins

  def tour_schedules(self, trace_id: str) -> list[dict]:
    """Every hand schedule pinned to the trace's tour, with its stored result: [{kernel, target, start, opts, result}]."""
    out = []
    for (n, target), pins in sorted(self.store.enrichments(trace_id, TOUR).items()):
      for start, opts in pins if isinstance(pins, list) else []:
        if (got := self.stored_opts(trace_id, n, target, str(start), tuple(opts))) is not None:
          out.append({"kernel": n, "target": target, "start": start, "opts": list(opts), "result": got})
    return out

  def cancel_all(self) -> None:
    self.tasks.cancel_all()
    self.opts_tasks.cancel_all()
