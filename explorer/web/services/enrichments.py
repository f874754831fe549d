"""Enrichments of stored traces: what a trace does not compute while tinygrad runs, computed when a page or the API first needs it
(explorer.tracing.enrichments.enrich), one mechanism for every kind (explorer.stages.ENRICH_KINDS): a kernel's record on another target, a record's
analysis (line map, live values, loop splits, program spec), a record's compile facts. The kernel asked for is computed first, alone,
in a worker; then, at a lower priority, its neighbours (NEIGHBOURS kernels either side), which a user's request for one of them
overtakes. Each computation is a Task, stored in its own transaction (a row per kernel, target and kind) and served from the store
after; identical requests share one task; a server that stops mid-way has stored nothing of it, and the next view computes it again
(its row in the store's tasks table, kind "enrichment" or "opts", says it was interrupted).
Each kind of work is bounded per client and in all (the lifecycle's admission rule, before any work starts); queued work holds the
trace's id and reads the trace (the server's one parsed copy) when its turn comes; what is stored is merged into that copy.
Also here: kernels scheduled by hand (explorer.tracing.enrichments.handopts: opts a user picked, on a target, timed against the original)."""
from __future__ import annotations
import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast
from explorer.background import ENRICHMENT, OPTS as OPTS_TASK
from explorer.schema import KernelRecord, RanOn, TraceRecord, host_target, target_records
from explorer.spec import Variant
from explorer.stages import ANALYSIS_MARK, ENRICH_ANALYSIS, ENRICH_FACTS, ENRICH_TARGET, Progress, lacks_facts
from explorer.store import Store
from explorer.targets import TARGETS
from explorer.tracing import versions
from explorer.tracing.workers.process import Limits, Live, WorkerFailed, kill_group
from explorer.web.services.lifecycle import DONE, ERROR, Busy, Journal, Task, Tasks
from explorer.web.services.permit import CROSS_SITE_REFUSED, WorkPermit

NEIGHBOURS = 4  # after the kernel asked for, this many on either side are computed in the background
AHEAD_CHUNK = 2  # kernels per background task rendering a stored trace's kernels ahead (render_ahead): what a page's work stopping one loses
STOPPED = "the server stopped before this was computed: viewing it again computes it"
BACKGROUND_WAITING = 32  # background tasks waiting for their worker; past it a neighbour is left for its first view
BACKGROUND_NICE = 5  # background work runs this much further below the server's CPU priority than the work a page waits for
QUIET_S = 1.0  # a background worker starts once no work a page waits for has been queued for this long (a person clicking through
               # pages would otherwise stop and restart the same render again and again)

def ran_on(trace: TraceRecord, target: str, by: str) -> TraceRecord:
  """The trace saying where its records on `target` were computed (env.ran_on.targets), a copy along that path."""
  env = trace["env"]
  ran: dict[str, Any] = dict(env.get("ran_on") or {})
  return {**trace, "env": {**env, "ran_on": cast(RanOn, {**ran, "targets": {**(ran.get("targets") or {}), target: by}})}}

class EnrichmentUnavailable(RuntimeError):
  """This enrichment cannot be computed for this trace (an unknown target, a kernel without a record for it, a trace recorded before
  per-target records or one that ran a user's rewrite file)."""

class EnrichmentFailed(RuntimeError):
  """The computation a request followed failed: its one-line error, said once (the next request tries again)."""

def in_line(refused: Busy) -> str: return f"waits for a place in the line ({refused})"  # as a page's script says it on a 429

@dataclass(frozen=True)
class Asked:
  """An enrichment a page's first view asked for: running (started now or followed), with the task's words; or why it is not."""
  running: bool = False
  detail: str = ""
  error: str | None = None

@dataclass(frozen=True)
class FirstView:
  """What a kernel page's first view of a target started: the kernel's record on it, where the trace has none (the page shows the
  host's meanwhile, `shown`); else the shown record's analysis and compile facts, where they are still to compute."""
  shown: str
  record: Asked | None = None
  analysis: Asked | None = None
  facts: Asked | None = None

# what a failed computation of one kernel was doing, in words (else: the {kind} of kernel {n} on {target})
WHAT = {ENRICH_TARGET: "rendering kernel {n} for {target}", ENRICH_FACTS: "compiling kernel {n} for {target}"}

@dataclass
class EnrichTask(Task):
  kind: str = ""
  target: str = ""
  kernels: tuple[int, ...] = ()
  background: bool = False
  started: float = field(default_factory=time.time)
  live: Live = field(default_factory=dict)  # a background task's worker while it runs, for the work a page waits for to stop it
  yielded: bool = False  # a background task stopped for that work: it is queued again

  def view(self, ahead: int | None = None) -> dict[str, Any]:
    """The job as the API shows it while it runs (explorer.web.http.models.EnrichmentJob); ahead: the tasks waiting before it."""
    detail = self.detail if ahead is None else f"{self.detail}, {ahead} ahead" if ahead else f"{self.detail}, next"
    return {"kind": self.kind, "target": self.target, "kernels": list(self.kernels), "status": self.status, "detail": detail,
            "error": self.error, "started": self.started, "ahead": ahead}

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


Merge = Callable[[TraceRecord], TraceRecord]  # a stored trace with what was just stored into it (copy-on-write: enrich.with_*)

class EnrichmentService:
  def __init__(self, store: Store, limits: Limits, on_stored: Callable[[str, Merge | None], None],
               read: Callable[[str, Iterable[int] | None], TraceRecord | None], background_workers: int = 1, max_waiting: int = 256,
               per_client: int = 64, opts_waiting: int = 32, opts_per_client: int = 4):
    """on_stored(id, merge): something was stored into trace id (merge: how to put it into a parsed copy; None: read it again);
    read(id, kernels): the stored trace, parsed (the server's one copy), with these kernels whole (None: all of it; the others may be
    read light: explorer.web.services.registry.TraceCache.with_kernels); max_waiting, per_client: the admission rule's bounds of the
    enrichments pages wait for (a person's pages queue, a flood is refused); opts_waiting, opts_per_client: those of hand schedules."""
    self.store, self.limits, self.on_stored, self.read = store, limits, on_stored, read
    self.background_limits = dataclasses.replace(limits, nice=limits.nice + BACKGROUND_NICE)
    # what a page or a request waits for
    self.tasks: Tasks[EnrichTask] = Tasks(parallel=2, max_waiting=max_waiting, per_client=per_client, what="enrichments", client_retry_s=3)
    # the rest, at a lower priority: the server's own work, bounded (a neighbour left out is computed when it is viewed)
    self.background: Tasks[EnrichTask] = Tasks(parallel=max(1, background_workers), max_waiting=BACKGROUND_WAITING,
                                               what="background enrichments")
    self.background_workers = background_workers
    # two hand schedules at once (their timing on a device is one at a time: explorer.tracing.workers.devicelock), one client's on one of
    # them (reserve): another client's schedule starts at once
    self.opts_tasks: Tasks[OptsTask] = Tasks(parallel=2, max_waiting=opts_waiting, per_client=opts_per_client, what="hand schedules",
                                             reserve=True)
    self.journal, self.opts_journal = Journal(store, ENRICHMENT, STOPPED), Journal(store, OPTS_TASK, STOPPED)
    self._pins = threading.Lock()
    self._closing = False
    self._page_work_at = 0.0  # time.monotonic() when work a page waits for was last queued
    self.computed = 0  # worker runs for requests: tests check that concurrent and later requests compute nothing more
    self.computed_background = 0  # worker runs of background tasks

  @staticmethod
  def _key(trace_id: str, kind: str, target: str, kernels: tuple[int | str, ...]) -> tuple[str, str, str, tuple[int | str, ...]]:
    return trace_id, kind, target, kernels

  def status(self, trace_id: str, kind: str, target: str, kernels: tuple[int, ...]) -> EnrichTask | None:
    return self.tasks.get(self._key(trace_id, kind, target, kernels))

  def view(self, task: EnrichTask) -> dict[str, Any]:
    """The task as the API shows it, with the tasks waiting for a worker before it while it waits."""
    return task.view(self.tasks.ahead(task))

  def forget(self, trace_id: str, kind: str, target: str, kernels: tuple[int, ...]) -> None:
    self.tasks.forget(self._key(trace_id, kind, target, kernels))

  def missing(self, trace: TraceRecord, kind: str, target: str, kernels: list[int] | None = None) -> list[int]:
    """The kernels (of these; default all) whose `kind` on `target` is not in the trace yet."""
    from explorer.tracing.enrichments import enrich
    if kind == ENRICH_TARGET: return enrich.lacking(trace, target, kernels)
    def lacks(k: Any, t: str, rec: Any) -> bool: return enrich.lacks_analysis(k, t, rec) if kind == ENRICH_ANALYSIS else lacks_facts(rec, t)
    return sorted({k["index"] for k, t, rec in enrich.each_record(trace, [target], kernels) if lacks(k, t, rec)})

  def start(self, trace_id: str, trace: TraceRecord, kind: str, target: str, kernels: tuple[int, ...], permit: WorkPermit,
            neighbours: bool = True) -> EnrichTask:
    """The task computing `kind` of these kernels on `target` (the running one, or a new one); EnrichmentUnavailable when it cannot
    be. It starts a worker: the request's permit (explorer.web.services.permit) says it may. neighbours: once it is stored, the kernels
    around it follow in the background."""
    self._check(trace, kind, target, kernels)
    work = self._work(trace_id, kind, target, kernels)
    which = ", ".join(map(str, kernels))
    task = EnrichTask(kind=kind, target=target, kernels=kernels, detail=f"{target} {kind} of kernel(s) {which} waits for a worker",
                      client=permit.client)
    async def ended(t: EnrichTask) -> None:
      await self.journal.ended(t)
      if neighbours and t.status == DONE: await self._then_neighbours(trace_id, kind, target, kernels)
    got = self.tasks.start(self._key(trace_id, kind, target, kernels), task, work[0], self.journal.started, work[1], ended)
    if got is task: self._yield_background()
    return self._accepted(got, task, trace_id)

  def follow(self, trace_id: str, trace: TraceRecord, kind: str, target: str, n: int, permit: Callable[[], WorkPermit]) -> dict[str, Any]:
    """The view of the task computing kernel n's `kind` on `target`: the one running, else one started now (only then is the
    request's permit asked for). EnrichmentUnavailable where it cannot be computed; EnrichmentFailed where it failed (forgotten as it
    is said: the next request tries again)."""
    kernels = (n,)
    if (task := self.status(trace_id, kind, target, kernels)) is None:  # (a done task the trace read here lacks: stored since)
      task = self.start(trace_id, trace, kind, target, kernels, permit())
    if task.status == ERROR:
      self.forget(trace_id, kind, target, kernels)
      raise EnrichmentFailed(f"{WHAT.get(kind, 'the {kind} of kernel {n} on {target}').format(n=n, target=target, kind=kind)} failed: {task.error}")
    return self.view(task)

  def asked(self, trace_id: str, trace: TraceRecord, kind: str, target: str, n: int, permit: Callable[[], WorkPermit | None]) -> Asked:
    """follow, as a page's first view asks: never refused for it (a full line, Busy, is what the page says it waits for, and its
    script asks again); where it cannot be, or the request may not start work (permit() is None), the reason in words."""
    def allowed() -> WorkPermit:
      if (p := permit()) is None: raise EnrichmentUnavailable(CROSS_SITE_REFUSED)
      return p
    try: return Asked(True, str(self.follow(trace_id, trace, kind, target, n, allowed)["detail"]))
    except Busy as e: return Asked(True, in_line(e))
    except (EnrichmentUnavailable, EnrichmentFailed) as e: return Asked(error=str(e))

  def first_view(self, trace_id: str, trace: TraceRecord, kernel: KernelRecord, n: int, target: str | None,
                 permit: Callable[[], WorkPermit | None]) -> FirstView:
    """What kernel n's page shows of `target` (None: the host's) and the enrichments its first view starts for it (FirstView)."""
    records = target_records(kernel)
    if target is not None and target not in records:
      return FirstView(host_target(kernel), record=self.asked(trace_id, trace, ENRICH_TARGET, target, n, permit))
    shown = target or host_target(kernel)
    rec = records[shown]
    def ask(kind: str, needed: bool) -> Asked | None: return self.asked(trace_id, trace, kind, shown, n, permit) if needed else None
    return FirstView(shown, analysis=ask(ENRICH_ANALYSIS, ANALYSIS_MARK not in rec and rec.get("linear_nums") is not None),
                     facts=ask(ENRICH_FACTS, lacks_facts(rec, shown)))

  def _accepted(self, got: EnrichTask, task: EnrichTask, trace_id: str) -> EnrichTask:
    """The task Tasks.start returned, its row written where it is the new one (not identical work joined)."""
    request = {"trace_id": trace_id, "kind": task.kind, "target": task.target, "kernels": list(task.kernels), "background": task.background}
    if got is task: self.journal.accept(task, f"{trace_id}: {task.detail}", request)
    return got

  def start_background(self, trace_id: str, kind: str, target: str, kernels: list[int],
                       then: Callable[[], None] | None = None) -> EnrichTask | None:
    """Compute `kind` of these kernels on `target` at a lower priority, one background task at a time (what is stored meanwhile, by a
    user's request, is left out when its turn comes); None when there is nothing to do. then: called once the task has ended."""
    if not kernels or not self.background_workers: return None
    key = self._key(trace_id, kind, target, ("background", *kernels))
    def work(task: EnrichTask, progress: Progress) -> Any:
      self._wait_for_pages()
      trace = self.read(trace_id, kernels)
      if self._closing or trace is None or not (still := self.missing(trace, kind, target, kernels)): return None
      self._check(trace, kind, target, tuple(still))
      fn, keep = self._work(trace_id, kind, target, tuple(still), background=True)
      task.kernels = tuple(still)
      try: return keep, fn(task, progress)
      except WorkerFailed:
        if not task.yielded: raise
        task.detail = f"{target} {kind} in the background: stopped for the work a page waits for, queued again"
        return None
    async def kept(task: EnrichTask, got: Any) -> Any:
      if got is not None: await got[0](task, got[1])
    async def ended(task: EnrichTask) -> None:
      await self.journal.ended(task)
      if self._closing: return
      if task.yielded: self.start_background(trace_id, kind, target, kernels, then)
      elif then is not None: then()
    task = EnrichTask(kind=kind, target=target, kernels=tuple(kernels), background=True, detail=f"{target} {kind} in the background")
    try: got = self.background.start(key, task, work, self.journal.started, kept, ended)
    except Busy: return None  # the background is full: what it would have done is computed when a page asks for it
    return self._accepted(got, task, trace_id)

  def render_ahead(self, trace_id: str, trace: TraceRecord, targets: Iterable[str], at_most: int) -> None:
    """The trace's first at_most kernels rendered on each of these targets in the background; nothing for a target the trace cannot
    be rendered on from its blob."""
    kernels = list(range(min(at_most, len(trace.get("kernels") or []))))
    for target in targets:
      try: self._check(trace, ENRICH_TARGET, target, tuple(kernels))
      except EnrichmentUnavailable: continue
      self._ahead(trace_id, target, self.missing(trace, ENRICH_TARGET, target, kernels))

  def _ahead(self, trace_id: str, target: str, kernels: list[int]) -> None:
    """AHEAD_CHUNK of these kernels in one background task, the rest once it has ended: a target holds one place in the background's
    line at a time, and what a page asks for meanwhile is left out of the tasks after it."""
    now, rest = kernels[:AHEAD_CHUNK], kernels[AHEAD_CHUNK:]
    if now: self.start_background(trace_id, ENRICH_TARGET, target, now, lambda: self._ahead(trace_id, target, rest))

  def _wait_for_pages(self) -> None:
    """Block (a background task's thread) while work a page waits for is queued or running, and QUIET_S after it was last queued: the
    background never runs beside it, on a server's few cores or in its memory."""
    while not self._closing and (self.tasks.active() or self.opts_tasks.active() or time.monotonic() - self._page_work_at < QUIET_S):
      time.sleep(0.1)

  def _yield_background(self) -> None:
    """Work a page waits for was queued: each background worker running is stopped (its task queued again, behind that work)."""
    self._page_work_at = time.monotonic()
    for task in self.background.active():
      for proc in list(task.live.values()):
        task.yielded = True
        kill_group(proc)

  async def _then_neighbours(self, trace_id: str, kind: str, target: str, kernels: tuple[int, ...]) -> None:
    if (trace := await asyncio.to_thread(self.read, trace_id, ())) is None: return
    n = len(trace.get("kernels") or [])
    around = sorted({i for k in kernels for i in range(max(0, k - NEIGHBOURS), min(n, k + NEIGHBOURS + 1))} - set(kernels))
    if (trace := await asyncio.to_thread(self.read, trace_id, around)) is None: return
    self.start_background(trace_id, kind, target, self.missing(trace, kind, target, around))

  @staticmethod
  def _check(trace: TraceRecord, kind: str, target: str, kernels: tuple[int, ...]) -> None:
    """EnrichmentUnavailable when `kind` of these kernels on `target` cannot be computed for this trace."""
    if target not in TARGETS: raise EnrichmentUnavailable(f"unknown target {target!r}; known: {', '.join(TARGETS)}")
    ks = trace.get("kernels") or []
    if bad := [n for n in kernels if not 0 <= n < len(ks)]: raise EnrichmentUnavailable(f"the trace has no kernel {bad[0]} (it has {len(ks)})")
    if kind == ENRICH_TARGET:
      if (trace.get("schema") or 1) < 2 or not all(k.get("ast_sink") is not None for k in ks):
        raise EnrichmentUnavailable("this trace was recorded before per-target records: trace it again to see other targets")
      if (trace.get("variant") or {}).get("rewrite_file"):
        raise EnrichmentUnavailable("this trace ran a user's rewrite file, and the server never runs user code: render more targets with the CLI")
      Variant.from_dict(dict(trace["variant"]))  # a stored trace's variant still reads (it names the arch)
    elif kind in (ENRICH_ANALYSIS, ENRICH_FACTS):
      if missing := [n for n in kernels if target not in (ks[n].get("targets") or {})]:
        raise EnrichmentUnavailable(f"no {target} record for kernel(s) {', '.join(map(str, missing))}: compute the target first")
    else: raise EnrichmentUnavailable(f"no enrichment {kind!r}")

  def _work(self, trace_id: str, kind: str, target: str, kernels: tuple[int, ...],
            background: bool = False) -> tuple[Callable[[EnrichTask, Progress], Any], Callable[[EnrichTask, Any], Any]]:
    """(work, kept) of one computation (checked by _check): the worker's part, which reads the trace when its turn comes (work waiting
    for a worker holds an id, not a parsed trace), and what is stored of its result."""
    from explorer.tracing.enrichments import enrich
    from explorer.tracing.pipeline.run import ran_here
    limits = self.background_limits if background else self.limits
    def live(task: EnrichTask) -> Live | None: return task.live if background else None  # a background worker, for a page's work to stop
    def trace_now() -> TraceRecord:
      if (trace := self.read(trace_id, kernels)) is None: raise WorkerFailed(f"trace {trace_id} was deleted")
      if background: self.computed_background += 1
      else: self.computed += 1
      return trace
    if kind == ENRICH_TARGET:
      def render(task: EnrichTask, progress: Progress) -> Any:
        if (blob := self.store.get_rewrites(trace_id)) is None:
          raise WorkerFailed(f"trace {trace_id} has no stored rewrites to rebuild its kernels from")
        return enrich.compute_target(trace_now(), blob, target, kernels, progress, limits, live=live(task))
      async def keep_records(task: EnrichTask, got: Any) -> str:
        records, key, blob = got
        by = ran_here()["by"]
        await asyncio.to_thread(self.store.put_target_records, trace_id, target, records, key, blob, by)
        self.on_stored(trace_id, lambda t: ran_on(enrich.with_target(t, target, records), target, by))
        return f"{target} records of {len(records)} kernel(s) in {time.time() - task.started:.1f}s"
      return render, keep_records
    if kind == ENRICH_ANALYSIS:
      def analyse(task: EnrichTask, progress: Progress) -> Any:
        jobs = enrich.analysis_jobs(trace_now(), [target], kernels)
        blobs: dict[str, bytes] = {}
        for key in {j["blob"] or "" for j in jobs}:
          if (b := self.store.get_rewrites(trace_id, key or None)) is None:
            raise WorkerFailed(f"trace {trace_id} keeps no rewrite blob {key or 'of its own'}")
          blobs[key] = b
        return enrich.compute_analysis(jobs, blobs, progress, limits, tinygrad=versions.recorded(trace_now()), live=live(task))
      return analyse, self._keeper(trace_id, ENRICH_ANALYSIS, target, enrich.with_analysis)
    def compile_(task: EnrichTask, progress: Progress) -> Any:
      return enrich.compute_facts(enrich.facts_jobs(trace_now(), [target], kernels), progress, limits, live=live(task))
    return compile_, self._keeper(trace_id, ENRICH_FACTS, target, enrich.with_facts)

  def _keeper(self, trace_id: str, kind: str, target: str, merge: Callable[[TraceRecord, Any], TraceRecord]) -> Callable[[EnrichTask, Any], Any]:
    async def kept(task: EnrichTask, got: Any) -> str:
      await asyncio.to_thread(self.store.put_enrichments, trace_id, kind, got)
      self.on_stored(trace_id, lambda t: merge(t, got))
      return f"{target} {kind} of {len(got)} kernel(s) in {time.time() - task.started:.1f}s"
    return kept

  async def completed(self, trace_id: str, trace: TraceRecord, kind: str, target: str, permit: WorkPermit,
                      which: list[int] | None = None) -> TraceRecord:
    """The trace with `kind` on `target` for every kernel (or those `which` names), computed first where missing (a diff compares
    registers and peak live values; a big program's tour, its heaviest kernels'); a failure leaves the trace as it was (its figures then
    say "—")."""
    kernels = tuple(self.missing(trace, kind, target, which))
    if not kernels: return trace
    task = self.start(trace_id, trace, kind, target, kernels, permit, neighbours=False)
    while task.active: await asyncio.sleep(0.1)
    if task.status == ERROR: self.forget(trace_id, kind, target, kernels)
    if task.status != DONE: return trace
    light = any("light" in k for k in trace["kernels"])  # read as it was given: light, or whole
    return await asyncio.to_thread(self.read, trace_id, () if light else None) or trace

  async def with_facts(self, trace_id: str, trace: TraceRecord, target: str, permit: WorkPermit) -> TraceRecord:
    """The trace with every kernel's compile facts and analysis on `target`, computed first where missing (what a diff compares)."""
    trace = await self.completed(trace_id, trace, ENRICH_ANALYSIS, target, permit)
    return await self.completed(trace_id, trace, ENRICH_FACTS, target, permit)

  # ***** hand schedules *****

  def stored_opts(self, trace_id: str, n: int, target: str, start: str, opts: tuple[str, ...]) -> dict[str, Any] | None:
    return self.store.enrichments(trace_id, opts_kind(start, opts)).get((n, target))

  def opts_status(self, trace_id: str, n: int, target: str, start: str, opts: tuple[str, ...]) -> OptsTask | None:
    return self.opts_tasks.get((trace_id, n, target, opts_kind(start, opts)))

  def forget_opts(self, trace_id: str, n: int, target: str, start: str, opts: tuple[str, ...]) -> None:
    self.opts_tasks.forget((trace_id, n, target, opts_kind(start, opts)))

  def start_opts(self, trace_id: str, trace: TraceRecord, n: int, target: str, start: str, opts: tuple[str, ...], permit: WorkPermit,
                 on_device: bool = True) -> OptsTask:
    """The task scheduling kernel n by hand on `target` (opts checked as text: explorer.spec.hand_opts); on the trace's own target and
    device (on_device: this server runs that device) it is timed against the original too. EnrichmentUnavailable when it cannot be."""
    from explorer.tracing.enrichments.handopts import Unschedulable, opts_args
    try: args = opts_args(trace, n, target, start, opts, on_device)
    except Unschedulable as e: raise EnrichmentUnavailable(str(e)) from None
    def work(task: OptsTask, progress: Progress) -> Any:
      from explorer.tracing.workers.process import WorkerFailed, call_in_worker
      if (blob := self.store.get_rewrites(trace_id)) is None: raise WorkerFailed(f"trace {trace_id} has no stored rewrites to rebuild kernel {n}")
      self.computed += 1
      try: got, _ = call_in_worker("explorer.tracing.enrichments.handopts:opts_in_worker", {**args, "blob": blob}, progress, limits=self.limits,
                                   exclusive=args["device"] if args["time"] else None)
      except WorkerFailed as e:
        if str(e).startswith("OptRefused: "): raise OptsRefused(str(e).removeprefix("OptRefused: ")) from None
        raise
      return got
    async def kept(task: OptsTask, got: dict[str, Any]) -> dict[str, Any]:
      await asyncio.to_thread(self.store.put_enrichments, trace_id, opts_kind(start, opts), {(n, target): got})
      return got
    task = OptsTask(kernel=n, target=target, start=start, opts=opts, detail=f"{target} codegen waits for a worker", client=permit.client)
    got = self.opts_tasks.start((trace_id, n, target, opts_kind(start, opts)), task, work, self.opts_journal.started, kept, self.opts_journal.ended)
    request = {"trace_id": trace_id, "kernel": n, "target": target, "from": start, "opts": list(opts)}
    if got is task:
      self._yield_background()
      self.opts_journal.accept(task, f"{trace_id}: kernel {n} on {target}, {opts_kind(start, opts)}", request)
    return got

  def add_to_tour(self, trace_id: str, n: int, target: str, start: str, opts: tuple[str, ...]) -> list[list[Any]]:
    """Pin a computed hand schedule to the trace's tour (a step of its own, after the trace's steps); the kernel's pins, in order."""
    with self._pins:
      pins = self.store.enrichments(trace_id, TOUR).get((n, target)) or []
      if [start, list(opts)] not in pins: pins.append([start, list(opts)])
      self.store.put_enrichments(trace_id, TOUR, {(n, target): pins})
    self.on_stored(trace_id, lambda t: t)  # the tour's pages change, the trace does not
    return pins

  def tour_schedules(self, trace_id: str) -> list[dict[str, Any]]:
    """Every hand schedule pinned to the trace's tour, with its stored result: [{kernel, target, start, opts, result}]."""
    out = []
    for (n, target), pins in sorted(self.store.enrichments(trace_id, TOUR).items()):
      for start, opts in pins if isinstance(pins, list) else []:
        if (got := self.stored_opts(trace_id, n, target, str(start), tuple(opts))) is not None:
          out.append({"kernel": n, "target": target, "start": start, "opts": list(opts), "result": got})
    return out

  def cancel_all(self) -> None:
    """The server is stopping: what runs is interrupted (in the store too) and cancelled."""
    self._closing = True
    self.journal.interrupt([*self.tasks.active(), *self.background.active()])
    self.opts_journal.interrupt(self.opts_tasks.active())
    for tasks in (self.tasks, self.background, self.opts_tasks): tasks.cancel_all()
    self.journal.close()
    self.opts_journal.close()
