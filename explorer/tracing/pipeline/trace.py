"""The trace engine: run one (spec, variant) through tinygrad's pipeline and record every stage as plain data.

Call `capture` in a fresh process (explorer.tracing.workers.process does): tinygrad's rewrite tracking must be switched on before it is imported,
and its caches and context variables must not leak between variants.
"""
from __future__ import annotations
import contextlib
import datetime
import json
import platform
import socket
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from explorer.spec import REWRITES, ConvSpec, Variant, error_tolerance, preset_of, rewrite_file_name
from explorer.stages import PARTIAL, TRACE_SCHEMA, Progress
from explorer.store import add_target_record
from explorer.tracing import tg  # (its package sets tinygrad's tracking environment before it imports tinygrad)
from explorer.tracing.pipeline.beam import beam_record
from explorer.tracing.pipeline.host_timeline import HostTimeline, timed_stage
from explorer.tracing.pipeline.renders import RenderPool, make_target_record, pass_record

if TYPE_CHECKING:  # types only: pydantic stays out of trace workers, numpy out of a capture that checks nothing
  import numpy as np
  from explorer.schema import KernelRecord, Storage


def _quiet(stage: str, status: str, detail: str) -> None: pass

class StageFailed(Exception): pass

class TinygradClock:
  """The seconds each stage spends inside tinygrad's own calls (building the graph, scheduling, codegen, compiling, running, timing):
  what tinygrad pays without the explorer too, under VIZ=-1 or not. The rest of a stage's seconds is the explorer's (its records, line
  maps, spec checks, the reference check, waiting for other targets), so a page can say which of the two a slow trace waited for."""
  def __init__(self, trace: dict[str, Any]) -> None: self.seconds: dict[str, float] = trace.setdefault("tinygrad_seconds", {})

  @contextlib.contextmanager
  def __call__(self, stage: str) -> Iterator[None]:
    st = time.perf_counter()
    try: yield
    finally: self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - st

class Recorder:
  """Runs the stages in order; a stage that raises is recorded (which stage, the error) and stops the trace there. Work of a stage that
  tinygrad does not wait for (the float64 reference check) may run beside the next ones (`beside`), and is settled before anything is
  timed and before the trace is returned."""
  def __init__(self, trace: dict[str, Any], progress: Progress, analysis: bool = False, timeline: HostTimeline | None = None,
               realize: int | None = None):
    """timeline: where each stage's start and end go (realize: which of a program's realizes this is)."""
    self.trace, self.progress, self.tinygrad, self.analysis = trace, progress, TinygradClock(trace), analysis
    self.timeline, self.realize = timeline, realize
    self.pending: list[tuple[str, threading.Thread, list[BaseException]]] = []
    self.eager_s: float | None = None  # the run stage's one run of the schedule, host wall clock

  def partial(self, what: str, data: dict[str, Any]) -> None:
    """What the trace holds so far, for a page that shows it while it runs: `schedule` (its calls and buffers, once scheduled), then a
    `kernel` row as each kernel's codegen ends (explorer.web.services.traces.Partial reads them)."""
    self.progress(PARTIAL, what, json.dumps(data, default=str))

  def beside(self, stage: str, fn: Callable[[], None], what: str) -> None:
    """fn in a thread of its own: numpy's float64 reference releases the GIL, so it runs on the other core while the trace goes on.
    what: its name on the timeline (a failure is the stage's)."""
    failed: list[BaseException] = []
    def body() -> None:
      try:
        with timed_stage(self.timeline, what, self.realize): fn()
      except Exception as e: failed.append(e)  # noqa: BLE001 - recorded as the stage's failure by settle()
    t = threading.Thread(target=body, name=f"{stage} beside", daemon=True)
    t.start()
    self.pending.append((stage, t, failed))

  def settle(self) -> None:
    """Wait for the work running beside the stages; a failure is its stage's, recorded as run() records one."""
    for stage, t, failed in self.pending:
      t.join()
      for e in failed:
        self.trace["failures"].append({"stage": stage, "error": f"{type(e).__name__}: {e}",
                                       "traceback": "".join(traceback.format_exception(e, limit=8))})
        self.trace["status"] = "partial"
        self.progress(stage, "error", f"{type(e).__name__}: {e}")
    self.pending.clear()

  def run(self, stage: str, fn: Callable[[], Any], detail: str = "") -> Any:
    """detail goes with the start: the timing stage names its device there (explorer.tracing.workers.process waits for that device's lock)."""
    self.progress(stage, "start", detail)
    try:
      with timed_stage(self.timeline, stage, self.realize) as span, tg.profiling_paused() if stage == "timing" else contextlib.nullcontext():
        ret = fn()
    except Exception as e:
      failure = {"stage": stage, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=8)}
      if isinstance(e, tg.CompileFailed): failure["source"] = e.source  # the kernel source the compiler rejected
      self.trace["failures"].append(failure)
      self.trace["status"] = "partial"
      self.progress(stage, "error", f"{type(e).__name__}: {e}")
      raise StageFailed(stage) from e
    self.trace["stage_seconds"][stage] = span.seconds  # (the timeline's range of the stage: one measurement, not two that drift apart)
    self.progress(stage, "done", f"{span.seconds:.2f}s")
    return ret

def new_trace(spec: ConvSpec | None, variant: Variant, device: str, program: dict[str, Any] | None = None) -> dict[str, Any]:
  """A trace about to be recorded: of a convolution (spec), or of any tinygrad program (program: its name, source and outputs)."""
  label = f"{spec.label()} | {variant.label()}" if spec is not None else f"{program['name'] if program else 'program'} | opt={variant.opt}"
  return {"schema": TRACE_SCHEMA, "spec": spec.to_dict() if spec is not None else None, "preset": preset_of(spec) if spec is not None else None,
          "program": program, "variant": variant.to_dict(), "label": label,
          "env": {"tinygrad": tg.TINYGRAD_VERSION, "device": device, "host": socket.gethostname(), "python": platform.python_version(),
                  "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "tracking": tg.tracking_enabled()},
          "status": "ok", "failures": [], "notes": list(variant.notes), "stage_seconds": {},
          "tensor_graph": None, "scheduler": None, "schedule": [], "buffers": [], "kernels": [], "totals": {}, "error": None,
          "rewrites": _rewrites_record(variant)}

MAX_REWRITE_FILE = 64 << 10

def _rewrites_record(variant: Variant) -> list[dict[str, Any]]:
  """The variant's custom rewrites as the trace shows them: name, where in codegen, summary, and the source that ran."""
  from explorer.tracing.pipeline.catalogue import rewrite_source
  out = [{"name": r, "point": (i := REWRITES[r.split(":")[0]]).point, "summary": i.summary, "source": rewrite_source(r)} for r in variant.rewrites]
  if (path := variant.rewrite_file) is not None:
    try:
      with open(path) as f: text = f.read(MAX_REWRITE_FILE)
    except OSError as e: text = f"(cannot read {path}: {e.strerror or e})"
    out.append({"name": rewrite_file_name(path), "point": "from the file", "summary": f"the user's rewrite file {path}", "source": text})
  return out

def capture(spec: ConvSpec, variant: Variant, progress: Progress = _quiet, dump_io: str | None = None,
            analysis: bool = False, fork_renders: bool = False, beside: tuple[str, ...] = ()) -> tuple[dict[str, Any], bytes, dict[str, bytes]]:
  """Trace one convolution. Returns the trace (JSON-ready), the compressed rewrite blob the host's graphs expand from, and each other
  target's (its codegen ran in a process of its own). analysis: the host's records with their analysis now (line maps, live values,
  loop splits, program spec), rather than when first viewed. fork_renders: this process has imported tinygrad and made nothing with
  it (a fresh trace worker): the renders' processes are forked from it now, before the trace opens a device (RenderPool.forked).
  beside: other targets rendered as the variant's are, though it did not ask for them (a server's settings.render_beside): the trace
  keeps their records, and its variant (its id) stays the one asked for."""
  variant = variant.resolve(spec)
  rendered = replace(variant, targets=(*variant.targets, *(t for t in beside if t not in variant.targets)))
  pool = RenderPool.forked(rendered.targets, render_processes(rendered)) if fork_renders and rendered.targets else None
  device = variant.device or tg.default_device()
  return record(new_trace(spec, variant, device), rendered, device, progress,
                lambda rec, base, pool, blobs: _run_stages(rec, spec, rendered, device, dump_io, base, pool, blobs), analysis, pool=pool)

def render_processes(variant: Variant) -> int: return max(1, min(2, len(variant.targets)))  # two at a time at most

StageRunner = Callable[[Recorder, int, RenderPool, dict[str, bytes]], None]

def record(trace: dict[str, Any], variant: Variant, device: str, progress: Progress, stages: StageRunner, analysis: bool = False,
           base: int | None = None, timeline: HostTimeline | None = None, realize: int | None = None,
           pool: RenderPool | None = None) -> tuple[dict[str, Any], bytes, dict[str, bytes]]:
  """Run the stages into `trace`, the other targets' renders beside them; then the rewrite blob and the bufferize decisions.
  base: where the rewrite log of a trace begins, if before this one (a program's realizes share their program's log: their blob is
  left to the program, b"" here). timeline: the program's, which this realize's stages join (realize: its index); without one the
  trace records its own. pool: the renders' processes, started already (else started here, beside the schedule)."""
  trace["env"]["compiler"], trace["env"]["fallback"] = _safe(lambda: tg.compiler_name(device)), _safe(lambda: tg.fallback_reason(device))
  trace["env"]["device_name"] = _safe(lambda: tg.device_name(device))  # the hardware, for its roofline
  shared, base = base is not None, tg.tracking_mark() if base is None else base
  if pool is None:
    try: warm = other_targets(variant, device)
    except Exception: warm = {}  # the pipeline meets the device's error in its stage
    pool = RenderPool(warm, render_processes(variant))  # the renders' processes start now, beside the schedule
  blobs: dict[str, bytes] = {}
  own = HostTimeline() if timeline is None else None
  rec = Recorder(trace, progress, analysis, timeline or own, realize)
  with tg.tracking(), own.recording() if own is not None else contextlib.nullcontext():
    trace["env"]["tracking"] = tg.tracking_enabled()
    try: stages(rec, base, pool, blobs)
    except StageFailed: pass
    finally: pool.close()
  with tg.disable_gc():  # the rewrite log is read whole: a collection would only walk the graphs realize made, all alive
    blob = b"" if shared else tg.export_rewrites(base)  # while the reference check, if one runs beside, goes on
    if not shared: trace["rewrite_stacks"] = tg.take_group_stacks(base)
    if trace["scheduler"] is not None and trace["scheduler"].get("passes"): _record_stages(trace, tg.LiveLog(base))
  rec.settle()
  if own is not None: trace["timeline"] = own.record()
  return trace, blob, blobs

def other_targets(variant: Variant, device: str) -> dict[str, str]:
  """The variant's targets but the host's own (its record is the host codegen's), each with its arch."""
  host = tg.target_name(tg.host_renderer(device))
  return {t: variant.arch(t) for t in variant.targets if t != host}

def _safe(fn: Callable[[], Any]) -> Any:
  try: return fn()
  except Exception as e: return f"unavailable: {type(e).__name__}: {e}"

@dataclass
class Program:
  """What the pipeline traces: the tensors to realize (their graph built, nothing realized yet), each known buffer's role, what each
  kernel computes, and how to check the outputs (None: no reference, nothing to check against)."""
  outs: list[Any]
  roles: Callable[[], dict[int, str]]                # buffer key -> input, weight, output...: asked once the schedule exists
  kernel_role: Callable[[dict[str, Any], list[dict[str, Any]], Any], str]  # (schedule row, buffers, call) -> role
  check: Callable[[dict[str, Any], list[np.ndarray]], None] | None = None
  check_beside: bool = False  # the check computes its own reference (heavy numpy): it runs beside the rest of the trace
  provenance: bool = False    # each kernel's provenance (the Tensor functions and user lines it computes): a captured program's
  buffer_refs: list[Any] | None = None  # filled with a weak reference per trace buffer (a program merges its realizes' buffers by them)
  asts: list[Any] | None = None         # filled with its kernels' ASTs (a program renders its other targets from them at its end)
  scheduled: Scheduled | None = None    # scheduled already (a program's realize, to see whether it repeats an earlier one)
  runs: bool = True  # False: a TinyJit took the schedule as it captured it; the JIT's runs run it (neither run nor timing here)
  symbolic: list[tuple[int, Any]] | None = None  # filled with (kernel index, its compiled call) per symbolic kernel run here

@dataclass
class Scheduled:
  """A realize scheduled before its pipeline runs: its tensor graph's sink as it stood before (scheduling rebinds the tensors to
  buffers; UOps do not change), tinygrad's linear and the values it binds its variables to, where the rewrite log stood, its
  seconds, and (with provenance) each call's kernel provenance as the schedule found it (None where it did not) and the tensor UOps
  (trace numbers) each call's kernel computes, where this schedule split it (tg.Carrying.members)."""
  sink: Any
  linear: Any
  var_vals: dict[str, int]
  mark: int
  seconds: float
  provenance: list[Any] | None = None
  members: list[list[int] | None] | None = None

def schedule_ahead(outs: list[Any], provenance: bool = False, fresh: bool = False) -> Scheduled:
  """tinygrad's schedule of outs, as Tensor.realize makes it (the collector off), ahead of the pipeline. provenance: each kernel's, its
  metadata carried through the schedule; fresh: scheduled again where tinygrad's schedule cache holds the graph (see carrying_metadata)."""
  sink, mark, st = tg.tensor_sink(*outs), tg.tracking_mark(), time.perf_counter()
  with tg.disable_gc(), tg.carrying_metadata(sink, fresh) if provenance else contextlib.nullcontext() as carrying:
    linear, var_vals = tg.schedule_with_vars(*outs)
  found, members = (carrying.provenance(linear), carrying.members(linear)) if carrying is not None else (None, None)
  return Scheduled(sink, linear, var_vals, mark, time.perf_counter() - st, found, members)

def _run_stages(rec: Recorder, spec: ConvSpec, variant: Variant, device: str, dump_io: str | None, base: int, pool: RenderPool,
                blobs: dict[str, bytes]) -> None:
  """The convolution: seeded inputs, the variant's algorithm, roles from its data flow, the float64 reference."""
  import numpy as np
  Tensor, dtypes = tg.Tensor, tg.dtypes
  from explorer.tracing.algorithms import build_conv
  rng = np.random.default_rng(0)
  x_np = rng.standard_normal(spec.input_shape).astype(spec.dtype)
  w_np = (rng.standard_normal(spec.weight_shape) / np.sqrt(np.prod(spec.weight_shape[1:]))).astype(spec.dtype)
  dtype = dtypes.float16 if spec.dtype == "float16" else dtypes.float32
  def inputs_and_graph() -> tuple[Any, Any, Any]:
    with rec.tinygrad("tensor_graph"):
      x, w = Tensor(x_np, device=device, dtype=dtype), Tensor(w_np, device=device, dtype=dtype)
      tg.realize_inputs(x, w)
      return x, w, build_conv(x, w, spec, variant)
  with tg.opt_context(variant.opt):
    x, w, out = rec.run("tensor_graph", inputs_and_graph)
    roles = lambda: {tg.buffer_key(tg.tensor_buffer(t)): role for t, role in ((x, "input"), (w, "weight"), (out, "output"))}
    check = lambda trace, got: _check_conv(trace, spec, x_np, w_np, got[0], dump_io)
    pipeline(rec, Program([out], roles, lambda s, buffers, call: _role(s, buffers, call, variant), check, check_beside=True), variant, device,
             base, pool, blobs)

def _realize(rec: Recorder, program: Program, variant: Variant, device: str, base: int, pool: RenderPool,
             blobs: dict[str, bytes]) -> Any:
  """What Tensor.realize runs: schedule, kernel graph, codegen (the other targets rendered beside it), the run and its check. Returns
  what the run compiled (what timing times)."""
  trace = rec.trace
  if (before := program.scheduled) is not None:  # scheduled before: its record, and its seconds as the stage's
    ahead, linear = before, rec.run("schedule", lambda: _scheduler_record(trace, before, base))
    trace["stage_seconds"]["schedule"] = rec.tinygrad.seconds["schedule"] = before.seconds
  else: ahead, linear = rec.run("schedule", lambda: _schedule(trace, program.outs, base, rec.tinygrad, program.provenance))
  calls = rec.run("kernel_graph", lambda: _record_schedule(trace, linear, program.roles(), program.kernel_role, program.buffer_refs))
  rec.partial("schedule", {"schedule": trace["schedule"], "buffers": trace["buffers"], "tensor_graph": trace["tensor_graph"]})
  if tg.has_spec("kernel_graph"): trace["spec_checks"]["kernel_graph"] = tg.spec_check(tg.schedule_calls(linear), "kernel_graph", enter_calls=False)
  asts, targets, beam = [c.ast for c in calls if c.kind == "kernel"], other_targets(variant, device), variant.opt.startswith("beam:")
  if program.asts is not None: program.asts += asts
  # the other targets render beside host codegen; under BEAM after it, with the opts BEAM chose on the device where they are legal there
  renders = {} if beam else pool.submit(asts, targets, variant.opt, variant.rewrites, variant.rewrite_file, analysis=rec.analysis)
  rec.run("codegen", lambda: _codegen(rec, calls, device, base, variant))
  if program.provenance:
    if (calls_of := uop_calls(ahead.members)) is not None and trace["tensor_graph"] is not None: trace["tensor_graph"]["uop_calls"] = calls_of
    found = ahead.provenance or []
    for k in trace["kernels"]:
      own = found[k["call"]] if k["call"] < len(found) else None
      k["provenance"] = own if own is not None else tg.kernel_provenance(calls[k["call"]].ast)
  if beam:
    chosen = [k["opts"] for k in trace["kernels"]] if len(trace["kernels"]) == len(asts) else None  # None: codegen failed, heuristic
    renders = pool.submit(asts, targets, variant.opt, variant.rewrites, variant.rewrite_file, chosen, rec.analysis)
  rec.run("render", lambda: _render(trace, calls, renders, pool, blobs))
  if not program.runs: return None
  return rec.run("run", lambda: _run(rec, linear, program))

def pipeline(rec: Recorder, program: Program, variant: Variant, device: str, base: int, pool: RenderPool, blobs: dict[str, bytes]) -> None:
  """Every stage after the tensor graph is built: schedule, kernel graph, codegen (with the other targets rendered beside it), the run
  and its check, timing."""
  trace = rec.trace
  sink = program.scheduled.sink if program.scheduled is not None else tg.tensor_sink(*program.outs)
  sites, uop_sites = tg.uop_sites(sink)
  trace["tensor_graph"] = {"uops": len(sink.toposort()), "ops": tg.op_histogram(sink), "sink": tg.trace_num(sink), "sites": sites,
                           "uop_sites": uop_sites}
  trace["spec_checks"] = {"tensor_graph": tg.tensor_spec_check(sink)}  # tinygrad's own specs, every UOp (schema.SpecCheck)
  with tg.disable_gc():  # as Tensor.realize runs them: schedule, codegen and the run with tinygrad's cyclic garbage collector off
    compiled = _realize(rec, program, variant, device, base, pool, blobs)
  if program.symbolic is not None and compiled is not None:  # a program times them at every value it binds, once it has run them all
    program.symbolic += [(k["index"], tg.call_at(compiled, k["call"])) for k in trace["kernels"] if k.get("variables")]
  if variant.time and program.runs:
    rec.settle()  # nothing else runs while kernels are timed
    rec.run("timing", lambda: _time(trace, compiled, variant, rec.tinygrad, rec.eager_s), detail=device)
  add_totals(trace)

def uop_calls(members: list[list[int] | None] | None) -> list[list[int]] | None:
  """[trace number, call index] for each tensor UOp in the kernel it ended up in (schema.TensorGraph.uop_calls); None where the
  schedule was not split here (found in tinygrad's schedule cache)."""
  if not members or all(m is None for m in members): return None
  return [[num, call] for call, nums in enumerate(members) for num in nums or ()]

def _schedule(trace: dict[str, Any], outs: list[Any], base: int, tinygrad: TinygradClock, provenance: bool = False) -> tuple[Scheduled, Any]:
  with tinygrad("schedule"): ahead = schedule_ahead(outs, provenance)
  return ahead, _scheduler_record(trace, ahead, base)

def _scheduler_record(trace: dict[str, Any], ahead: Scheduled, base: int) -> Any:
  """The schedule's record (its passes, since ahead.mark; its variables' values in this run); returns tinygrad's linear."""
  if ahead.var_vals: trace["variables"] = ahead.var_vals
  groups = tg.passes_since(ahead.mark, base)
  trace["scheduler"] = {"seconds": ahead.seconds, "groups": [{"name": n, "passes": [pass_record(p) for p in ps]} for n, ps in groups]}
  trace["scheduler"]["passes"] = [p for g in trace["scheduler"]["groups"] if g["name"].startswith("Schedule") for p in g["passes"]]
  return ahead.linear


def _record_schedule(trace: dict[str, Any], linear: Any, roles: dict[int, str],
                     kernel_role: Callable[[dict[str, Any], list[dict[str, Any]], Any], str], refs: list[Any] | None = None) -> list[tg.Call]:
  calls = tg.calls(linear)
  index: dict[int, int] = {}
  blist: list[dict[str, Any]] = []
  def buf(b: Any) -> int:
    if (k := tg.buffer_key(b)) not in index:
      index[k] = len(blist)
      blist.append({"index": len(blist), "name": f"buf{len(blist)}", "role": roles.get(k, "intermediate"), **tg.buffer_facts(b),
                    "written_by": [], "read_by": []})
      if refs is not None: refs.append(weakref.ref(b))
    return index[k]
  for c in calls:
    ins, outs = tg.kernel_reads_writes(c.ast) if c.kind == "kernel" else tg.copy_ins_outs(c)
    reads, writes = [buf(c.buffers[i]) for i in ins], [buf(c.buffers[i]) for i in outs]
    for i in writes: blist[i]["written_by"].append(c.index)
    for i in reads: blist[i]["read_by"].append(c.index)
    trace["schedule"].append({"index": c.index, "kind": c.kind, "reads": reads, "writes": writes,
                              "name": "copy" if c.kind == "copy" else None, "kernel": None})
  for b in blist:
    if b["role"] == "intermediate" and any(trace["schedule"][i]["kind"] == "copy" for i in b["written_by"]): b["role"] = "constant"
    if b["role"] == "intermediate" and not b["written_by"]:
      b["role"] = "host" if b["read_by"] and all(trace["schedule"][i]["kind"] == "copy" for i in b["read_by"]) else "constant"
  trace["buffers"] = blist
  for s in trace["schedule"]: s["role"] = kernel_role(s, blist, calls[s["index"]]) if s["kind"] == "kernel" else s["kind"]
  return calls

def _role(s: dict[str, Any], buffers: list[dict[str, Any]], call: tg.Call, variant: Variant) -> str:
  """What a convolution's kernel computes, from data flow: which of input/weight it reads, whether it reduces, whether it writes the
  output."""
  read_roles = {buffers[i]["role"] for i in s["reads"]}
  writes_output = any(buffers[i]["role"] == "output" for i in s["writes"])
  if variant.algo == "direct": return "conv" if writes_output else "prep"
  parts = [name for name, hit in (("xhat", "input" in read_roles), ("ghat", "weight" in read_roles),
                                   ("mhat", tg.has_reduce(call.ast)), ("out", writes_output)) if hit]
  return "+".join(parts) or "other"

def _codegen(rec: Recorder, calls: list[tg.Call], device: str, base: int, variant: Variant) -> None:
  """Each kernel through the host's codegen, recorded as tinygrad made it; what a page asks beyond that is an enrichment
  (explorer.tracing.enrichments.enrich: compile facts; the analysis, unless the trace was asked for it). The progress says each kernel as it is
  done, with its seconds."""
  from explorer.tracing.pipeline.rewrites import build
  trace, renderer, custom = rec.trace, tg.host_renderer(device), build(variant.rewrites, variant.rewrite_file)
  points = {r.name: r.point for r in custom}  # a rewrite file's point is its own: known once it ran
  for r in trace["rewrites"]: r["point"] = points.get(r["name"], r["point"])
  arch = tg.renderer_arch(renderer)
  total = sum(1 for c in calls if c.kind == "kernel")
  for c in calls:
    if c.kind != "kernel": continue
    mark = tg.tracking_mark()
    timer = tg.CompileTimer(renderer)
    st = time.perf_counter()
    beam: contextlib.AbstractContextManager[list[Any]] = tg.recording_beam() if variant.opt.startswith("beam:") else contextlib.nullcontext([])
    try:
      with rec.tinygrad("codegen"), beam as timed: prg = tg.codegen_host(c.ast, renderer, custom)
    finally: timer.close()
    seconds = time.perf_counter() - st
    facts = tg.program_facts(prg, var_vals=trace.get("variables"))
    if (timeline := rec.timeline) is not None:
      for cst, cen in timer.spans: timeline.span("compile", facts.name, cst, cen)
    ps = [p for _, group in tg.passes_since(mark, base) for p in group]
    passes = [pass_record(p) for p in ps]
    s = trace["schedule"][c.index]
    kernel: KernelRecord = {"index": len(trace["kernels"]), "call": c.index, "name": facts.name, "role": s["role"], "kind": "kernel",
                             "ast_uops": tg.ast_uop_count(c.ast), "ast_sink": tg.trace_num(c.ast), "ast_key": tg.ast_key(c.ast),
                             "linear_uops": facts.ops["total"],
                             "ops": facts.ops, "opts": facts.opts, "flops": facts.flops, "bytes": facts.mem, "lds": facts.lds,
                             "global_size": facts.global_size, "local_size": facts.local_size, "passes": passes, "uops_listing": facts.linear,
                             "sources": {"host": facts.source}, "source_errors": {}, "codegen_s": seconds - timer.seconds, "compile_s": timer.seconds,
                             "compile_cached": timer.calls == 0,
                             "reads": s["reads"], "writes": s["writes"], "time_s": None, "storage": facts.storage,
                             "notes": _kernel_notes(s["role"], facts.storage), "host_target": (host := tg.target_name(renderer)),
                             "targets": {host: make_target_record(facts, passes, arch, [])}}
    kernel["spec"] = {"ast": tg.spec_check([c.ast], "ast")}
    if variables := tg.ast_variables(c.ast): kernel["variables"] = variables
    if rec.analysis: kernel["targets"][host].update(tg.program_analysis(prg, renderer, tg.LiveLog(base), ps))  # else when first viewed
    if timed: kernel["beam"] = beam_record(timed, int(variant.opt.split(":")[1]), facts.opts, device)
    s["name"], s["kernel"] = facts.name, len(trace["kernels"])  # once the kernel is there: a failure above leaves no row naming it
    trace["kernels"].append(kernel)
    row: dict[str, Any] = dict(kernel)
    rec.partial("kernel", {f: row[f] for f in PARTIAL_KERNEL if f in row} | {"name": facts.name, "call": c.index})
    rec.progress("codegen", "start", f"{len(trace['kernels'])} of {total} kernels: {facts.name} in {seconds:.2f}s "
                                     f"(tinygrad's codegen and compile)")

PARTIAL_KERNEL = ("index", "role", "ast_uops", "linear_uops", "flops", "bytes", "global_size", "local_size", "opts", "codegen_s", "compile_s",
                  "compile_cached")  # a kernel's row while the trace runs

def _kernel_notes(role: str, storage: Storage) -> list[str]:
  notes = []
  if "mhat" in role.split("+") and "out" in role.split("+"):
    where = [f"{storage['reg_buffers']} register buffer(s), {storage['reg_values']} values"] if storage["reg_buffers"] else []
    where += [f"local memory, {storage['local_bytes']} bytes"] if storage["local_buffers"] else []
    notes.append("MHAT never reaches global memory: the reduce accumulates it " + (f"in {' and '.join(where)}" if where else "in scalar registers"))
  return notes

def _render(trace: dict[str, Any], calls: list[tg.Call], renders: dict[str, Future[Any]], pool: RenderPool, blobs: dict[str, bytes]) -> None:
  """Every target's records (rendered beside codegen) and rewrite blob; `sources` keeps each target's source too."""
  kernels = [c for c in calls if c.kind == "kernel"]
  by_call = {k["call"]: k for k in trace["kernels"]}
  asked = trace["variant"]["targets"]
  for k in trace["kernels"]:
    host = k["host_target"]
    if host in asked: k["sources"][host] = k["targets"][host]["source"]  # asked for the host's own target: its record
  for t, fut in renders.items():
    records, blobs[t] = fut.result()
    pool.done(t)
    for c, got in zip(kernels, records, strict=False): add_target_record(by_call[c.index], t, got)

def _run(rec: Recorder, linear: Any, program: Program) -> Any:
  trace, tinygrad, check = rec.trace, rec.tinygrad, program.check
  with tinygrad("run"): compiled = tg.compile_schedule(linear)
  if tg.compiled_sources(compiled) != [k["sources"]["host"] for k in trace["kernels"]]:
    raise RuntimeError("tinygrad compiled other programs than the ones codegen recorded: the trace would not show what runs")
  with tinygrad("run"):
    st = time.perf_counter()
    tg.run_schedule(compiled, trace.get("variables"))
    rec.eager_s = time.perf_counter() - st  # the first run (programs loaded, buffers allocated): the timing record keeps it
    outs = [o.numpy() for o in program.outs] if check is not None else []
  if check is not None and program.check_beside: rec.beside("run", lambda: check(trace, outs), "reference check")
  elif check is not None: check(trace, outs)
  return compiled

def _check_conv(trace: dict[str, Any], spec: ConvSpec, x_np: np.ndarray, w_np: np.ndarray, got: np.ndarray, dump_io: str | None) -> None:
  from explorer.tracing.pipeline.reference import conv2d_error
  trace["error"] = conv2d_error(got, x_np, w_np, spec.stride, spec.pad, spec.groups)
  tolerance, judged = error_tolerance(trace["variant"], spec.dtype)
  trace["error"].update(tolerance=tolerance, tolerance_for=judged, within=trace["error"]["max_rel"] <= tolerance)
  if dump_io is not None: _dump_io(dump_io, x_np, w_np, got)

def _dump_io(path: str, x: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
  import pathlib
  import numpy as np
  p = pathlib.Path(path)
  p.mkdir(parents=True, exist_ok=True)
  for name, arr in (("input", x), ("weight", w), ("output", out)): np.save(p / f"{name}.npy", arr)

def _time(trace: dict[str, Any], compiled: Any, variant: Variant, tinygrad: TinygradClock, eager_s: float | None) -> None:
  """The kernels each alone and the schedule replayed back to back, by the device's clock (explorer.tracing.pipeline.timing.time_schedule)."""
  from explorer.tracing.pipeline.timing import time_schedule
  device = trace["env"]["device"]
  clock = tg.clock_for(device)
  try:
    with tinygrad("timing"): got = time_schedule(clock, compiled, device, variant.warmup, variant.repeats, trace.get("variables"))
  finally: clock.close()
  by_call = {k["call"]: k for k in trace["kernels"]}
  for rec in got["kernels"]: by_call[rec.pop("call")].update(rec)
  trace["timing"] = {"device": device, "warmup": variant.warmup, "repeats": variant.repeats, "total_s": got["total_s"],
                     "method": got["method"], "notice": got["notice"], "span_s": got["span_s"], "replay": got["replay"],
                     "eager_s": eager_s}

def add_totals(trace: dict[str, Any]) -> None:
  ks = trace["kernels"]
  trace["totals"] = {"kernels": len(ks), "copies": sum(1 for s in trace["schedule"] if s["kind"] == "copy"), "buffers": len(trace["buffers"]),
                     "flops": sum(k["flops"] for k in ks), "bytes": sum(k["bytes"] for k in ks), "compile_s": sum(k["compile_s"] for k in ks),
                     "codegen_s": sum(k["codegen_s"] for k in ks), "time_s": (trace.get("timing") or {}).get("total_s")}

def _link_stages(trace: dict[str, Any], d: dict[str, Any], arg_nums: list[int | None]) -> None:
  """The STAGE rows in terms of the schedule's buffers (indexes into trace.buffers), from rangeify's data flow (tg.pipeline.stages_in):
  a realized row's `buffer` is the argument it stores; a kept row's, the intermediate of its size written by the kernel that reads
  what its value is computed from; each created and inlined row gets `reads` (the buffers its value is computed from) and `into` (the
  buffers it is stored into: the kernels writing them compute it, inline where it was removed). A buffer is found by the scheduled
  call's argument (slot -> the buffer UOp's trace number -> trace.buffers); what cannot be found is left out (None, or not listed)."""
  stages, buffers, schedule = trace["scheduler"]["stages"], trace["buffers"], trace["schedule"]
  by_num = {b["num"]: b["index"] for b in buffers if b.get("num") is not None}
  def slot_buffer(n: int) -> int | None: return by_num.get(arg_nums[n]) if 0 <= n < len(arg_nums) else None
  for row, st in zip(stages["realized"], d["realized_rows"], strict=False):
    row["buffer"] = next((b for k, n in st.into if k == "slot" and (b := slot_buffer(n)) is not None), None)
  taken = {row["buffer"] for row in stages["realized"]}
  created = {st.num: st for st in d["created"]}
  of_kept = {k: n for n, k in d["kept_of"].items()}
  for k, row in enumerate(stages["kept"]):
    fits = [b for b in buffers if b["index"] not in taken and b["role"] == "intermediate" and b["nbytes"] == row["nbytes"]
            and b["dtype"].endswith(row["dtype"])]
    want = {b for kind, n in (created[of_kept[k]].reads if k in of_kept else ()) if kind == "slot" and (b := slot_buffer(n)) is not None}
    b = next((b for b in fits if want <= {r for i in b["written_by"] for r in schedule[i]["reads"]}), fits[0] if fits else None)
    row["buffer"] = None if b is None else b["index"]
    taken.add(row["buffer"])
  def named(flow: tuple[tuple[str, int], ...]) -> list[int]:
    out = {slot_buffer(n) if kind == "slot" else stages["kept"][d["kept_of"][n]]["buffer"] if n in d["kept_of"] else None for kind, n in flow}
    return sorted(b for b in out if b is not None)
  for fate in ("created", "fused"):
    for row, st in zip(stages[fate], d[fate], strict=False): row["reads"], row["into"] = named(st.reads), named(st.into)
  for k, row in enumerate(stages["kept"]):
    if k in of_kept: row["reads"] = named(created[of_kept[k]].reads)

def _record_stages(trace: dict[str, Any], log: tg.LiveLog) -> None:
  """Bufferize decisions, read off this process's rewrite log (rebuilding only the graphs needed)."""
  try:
    passes = [tg.Pass(p["group"], p["step"], p["name"], p["depth"], p["matches"], p["sink"]) for p in trace["scheduler"]["passes"]]
    d = tg.stage_decisions(log, passes, trace.get("variables"))
  except Exception as e:
    trace["failures"].append({"stage": "bufferize", "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=8)})
    trace["status"] = "partial"
    return
  if "note" in d:  # no rangeify pass ran for this schedule: nothing decided here
    trace["scheduler"]["note"] = d["note"]
    return
  def rows(xs: list[Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in s.__dict__.items() if k not in ("reads", "into", "symbolic")} | {"shape": list(s.shape)}
            | ({"symbolic": s.symbolic.record()} if s.symbolic is not None else {}) for s in xs]
  trace["scheduler"]["stages"] = {"created": rows(d["created"]), "kept": rows(d["kept"]), "fused": rows(d["fused"]),
                                  "realized": rows(d["realized_rows"]), "debuf_pass": d["debuf_pass"]}
  _link_stages(trace, d, tg.call_argument_nums(log, passes))
  # realized: buffers stored to directly (user .contiguous(), outputs) rather than through a STAGE
  trace["scheduler"]["stage_counts"] = {**{k: len(d[k]) for k in ("created", "kept", "fused")}, "realized": d["realized"]}
