"""Every target of a trace as a whole pipeline, in processes beside the host's: each kernel's AST goes through tinygrad's codegen with
the target's renderer (configured for its arch, as its device would), under the variant's optimization setting, with rewrite tracking,
. The record per kernel and target is
what the host's is: name, opts, global and local size, linearized UOps, op histogram, Estimates, the codegen passes with their match
counts, the source. Compile facts are not made here: they are an enrichment (explorer.tracing.enrichments.enrich), computed when first asked for.

The renders share nothing with the host pipeline but the kernel ASTs (UOps pickle by value), so on a 2-core machine they overlap with
scheduling, host codegen and the run instead of adding to them. BEAM needs the device to time its candidates: a deviceless target
gets heuristic opts, and its record says so."""
from __future__ import annotations
import contextlib
import os
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any
from explorer.tracing.workers.pool import WorkerPool

if TYPE_CHECKING:  # types only: pydantic (the schema's validation) stays out of trace workers
  from explorer.schema import Pass, TargetRecord

def tracking_passes(env: Mapping[str, str]) -> dict[str, str]:
  """What a process that renders sets before tinygrad is imported: every rewrite recorded, passes included, whatever the user's
  environment says, unless VIZ does (then tinygrad's own viewer decides)."""
  return {} if "VIZ" in env else {"TRACK_MATCH_STATS": "2"}

def _init() -> None:
  os.environ.update(tracking_passes(os.environ))
  import explorer.tracing.tg  # noqa: F401 - pay tinygrad's import while the trace process schedules

def _imported_as_a_render_would() -> bool:
  return all(os.environ.get(k) == v for k, v in tracking_passes(os.environ).items())

def pass_record(p: Any) -> Pass:
  """A codegen pass as the trace records it: name, depth, matches, and where its graphs are in its rewrite blob (group, step, sink)."""
  return {"group": p.group, "step": p.step, "name": p.name, "depth": p.depth, "matches": p.matches, "sink": p.sink}

RenderFailed = dict[str, str]  # {"error": the one-line reason a kernel's codegen failed on this target}

BEAM_NOTE = "BEAM needs the device to time its candidates: this deviceless target got tinygrad's heuristic opts"

def make_target_record(facts: Any, passes: list[Pass], arch: str, notes: list[str]) -> TargetRecord:
  """One kernel on one target, in the trace's schema (explorer.schema.TargetRecord); the host's record has the same fields. Its
  analysis (line map, live values, loop splits, program spec) is added where it is computed (tg.kernel_analysis)."""
  return {"name": facts.name, "arch": arch, "opts": facts.opts, "global_size": facts.global_size, "local_size": facts.local_size,
          "linear_uops": facts.ops["total"], "ops": facts.ops, "flops": facts.flops, "bytes": facts.mem, "lds": facts.lds, "passes": passes,
          "uops_listing": facts.linear, "source": facts.source, "notes": notes, "linear_nums": facts.nums, "program_sink": facts.sink,
          "compile": None}

def _render_target(asts: list[Any], target: str, arch: str, opt: str, rewrites: tuple[str, ...] = (), rewrite_file: str | None = None,
                   beam_opts: list[list[str]] | None = None, analysis: bool = True) -> tuple[list[TargetRecord | RenderFailed], bytes]:
  """Per kernel: its target record, or {"error": message} where codegen failed; and this process's rewrite blob, which the records'
  passes address (group, step, sink), so that every target's codegen steps can be expanded like the host's. `rewrites` (and a
  rewrite file, from the CLI only) add the variant's custom passes to codegen (explorer.tracing.pipeline.rewrites). beam_opts: each kernel's opts
  that BEAM chose on the device, applied here where tinygrad accepts them for this target (else the heuristic's: the notes say which).
  analysis: each record's analysis too (a first view wants it whole; a trace's eager targets only when the trace was asked for it)."""
  from explorer.tracing import tg
  from explorer.tracing.pipeline.rewrites import build
  renderer, base = tg.render_target(target, arch), tg.tracking_mark()
  out: list[TargetRecord | RenderFailed] = []
  custom = build(rewrites, rewrite_file)
  with tg.opt_context(opt), tg.disable_gc():  # codegen as Tensor.realize runs it, the cyclic garbage collector off
    for i, ast in enumerate(asts):
      ast, beam = tg.without_beam(ast)
      notes = [BEAM_NOTE] if beam else []
      if beam and beam_opts is not None: ast, notes = _beam_choice(ast, renderer, beam_opts[i])
      mark = tg.tracking_mark()
      try: prg = tg.codegen_deviceless(ast, renderer, custom)
      except Exception as e:
        out.append({"error": f"{type(e).__name__}: {e}"})
        continue
      ps = [p for _, group in tg.passes_since(mark, base) for p in group]
      rec = make_target_record(tg.program_facts(prg, tg.renderer_device(renderer)), [pass_record(p) for p in ps], arch, notes)
      if analysis: rec.update(tg.program_analysis(prg, renderer, tg.LiveLog(base), ps))  # else an enrichment, from the rewrite blob
      if target == "ptx": rec["compiled_source"] = tg.fill_ptx(rec["source"], arch)  # what tinygrad's PTXCompiler hands ptxas
      out.append(rec)
  return out, tg.export_rewrites(base)

def _beam_choice(ast: Any, renderer: Any, opts: list[str]) -> tuple[Any, list[str]]:
  """The kernel with the opts BEAM chose on the device, where this target's tinygrad accepts them; else as it was (the heuristic's)."""
  from explorer.tracing import tg
  chosen = [tg.parse_opt(o) for o in opts]
  try: tg.check_opts(ast, renderer, chosen)
  except tg.OptRefused as e: return ast, [f"{BEAM_NOTE}: BEAM's choice on the device ({', '.join(opts) or 'no opts'}) is not legal here: {e}"]
  return tg.with_opts(ast, chosen), [f"the opts BEAM chose on the trace's device, applied here: {', '.join(opts) or 'no opts'} (this target "
                                     "was not searched: BEAM needs the device to time its candidates)"]

class RenderPool:
  """A fresh process per target, up to `processes` at once: tinygrad caches rewrites per process, so a target rendered after another
  in the same process would record fewer passes. They run inside the trace worker, under its limits: its data limit and priority are
  inherited, and its process group (and watchdog) bounds them.

  Spawned (the default), the first targets' processes start when the pool is made, so that their interpreter start and tinygrad's
  import overlap with the trace's device set-up and schedule, and a later target's when an earlier one is done. Forked (`forked`),
  every target's process is forked when the pool is made, from a trace worker that has imported tinygrad and done nothing with it
  yet: each starts where a spawned one would after its imports, without paying them (about 0.9 CPU s a target)."""
  def __init__(self, targets: Iterable[str] = (), processes: int = 2, fork: bool = False) -> None:
    self.processes, self._lock = processes, threading.Lock()
    self.pools = {t: WorkerPool(1, initializer=_init, fork=fork) for t in targets}
    # a later target's process is started from this thread, which lives as long as the pool: a process dies with the thread that
    # started it (PR_SET_PDEATHSIG), and the thread that learns of a finished target is that target's pool's, soon gone
    self._launcher = ThreadPoolExecutor(1)
    for pool in list(self.pools.values())[:None if fork else processes]: pool.start()

  @classmethod
  def forked(cls, targets: Iterable[str], processes: int = 2) -> RenderPool:
    """Forked processes where they would render as spawned ones do: this process's tinygrad imported with every rewrite tracked,
    as a render process imports it (_init), and nothing made with it yet (call this before the trace opens a device or compiles
    anything: tinygrad's caches would come along); else spawned ones."""
    return cls(targets, processes, fork=_imported_as_a_render_would())

  def _pool(self, target: str) -> WorkerPool:
    with self._lock: return self.pools.setdefault(target, WorkerPool(1, initializer=_init))

  def submit(self, asts: list[Any], targets: dict[str, str], opt: str, rewrites: tuple[str, ...] = (), rewrite_file: str | None = None,
             beam_opts: list[list[str]] | None = None, analysis: bool = False) -> dict[str, Future[Any]]:
    """targets: name -> arch. Each target's records for every kernel, as futures; at most `processes` targets render at once.
    beam_opts: per kernel, the opts BEAM chose on the device (_render_target); analysis: the records' analysis now, not when viewed."""
    futures: dict[str, Future[Any]] = {t: Future() for t in targets}
    waiting = list(targets.items())
    def next_target() -> None:
      with self._lock:
        if not waiting: return
        t, arch = waiting.pop(0)
      try: fut = self._pool(t).submit(_render_target, asts, t, arch, opt, rewrites, rewrite_file, beam_opts, analysis)
      except Exception as e:  # a pool that cannot start a process: that target's error, the others go on
        futures[t].set_exception(e)
        return next_target()
      def settle(f: Future[Any], t: str = t) -> None:
        _settle(futures[t], f)
        with contextlib.suppress(RuntimeError): self._launcher.submit(next_target)  # RuntimeError: the pool is closing
      fut.add_done_callback(settle)
    for _ in range(self.processes): next_target()
    return futures

  def done(self, target: str) -> None:
    """Let a target's process exit once its records are in: it holds tinygrad and every kernel's graphs."""
    if (pool := self.pools.get(target)) is not None: pool.close(wait=True)

  def close(self) -> None:
    self._launcher.shutdown(wait=True, cancel_futures=True)
    for pool in list(self.pools.values()): pool.close(wait=True)  # let the processes exit cleanly: nothing leaks

def _settle(into: Future[Any], fut: Future[Any]) -> None:
  if fut.cancelled(): into.cancel()
  elif (e := fut.exception()) is not None: into.set_exception(e)
  else: into.set_result(fut.result())
