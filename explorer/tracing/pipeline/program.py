"""Any tinygrad program, traced: every Tensor.realize with something to compute inside `Capturing` goes through the same pipeline as a
convolution (tensor graph, schedule, kernel graph, codegen with the other targets rendered beside it, run, timing if asked) and
becomes a trace of the same schema. What is convolution-only stays out: kernels get data-flow roles ("reduce", "elementwise"),
and outputs are checked only against a reference the user passes.

Used by the Python API (explorer.api.capture, in the user's own process) and by `kernel-explorer trace --script` (in a worker)."""
from __future__ import annotations
import contextlib
import dataclasses
import inspect
import math
import pathlib
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast
from explorer.clocks import timed
from explorer.spec import Variant
from explorer.stages import Progress
from explorer.store import add_target_record
from explorer.tracing import tg  # (its package sets tinygrad's tracking environment before it imports tinygrad)
from explorer.tracing.pipeline.host_timeline import HostTimeline, timed_stage
from explorer.tracing.pipeline.renders import RenderPool
from explorer.tracing.pipeline.trace import (
  Program,
  Recorder,
  Scheduled,
  _quiet,
  add_totals,
  new_trace,
  other_targets,
  pipeline,
  record,
  schedule_ahead,
)

if TYPE_CHECKING:
  import numpy as np  # numpy (and pydantic) only where a capture needs them: a reference to check, kernels to time

NOT_TRACKING = ("tinygrad was imported before the explorer with rewrite tracking off, so its passes' matches cannot be recorded "
                "(tinygrad chooses its tracking at import). Restart the interpreter (the notebook's kernel) and import the explorer "
                "first (from explorer.api import capture), or set TRACK_MATCH_STATS=2 in the environment before starting it.")

class CaptureUnavailable(RuntimeError):
  """This process cannot record rewrites (tinygrad was imported without tracking): the message says what to do."""

def kernel_role(s: dict[str, Any], buffers: list[dict[str, Any]], call: Any) -> str:
  """What a program's kernel does, from what it is: a reduction or elementwise work, and whether it writes an output."""
  kind = "reduce" if tg.has_reduce(call.ast) else "elementwise"
  return kind + ("+out" if any(buffers[i]["role"] == "output" for i in s["writes"]) else "")

def reference_check(reference: Sequence[np.ndarray], rel_tolerance: float) -> Callable[[dict[str, Any], list[np.ndarray]], None]:
  """The outputs against the user's reference arrays, in order: the largest error over all of them, judged against rel_tolerance."""
  def check(trace: dict[str, Any], got: list[np.ndarray]) -> None:
    import numpy as np
    from explorer.tracing.pipeline.reference import error_stats
    if len(got) != len(reference): raise ValueError(f"the program realized {len(got)} tensor(s) but {len(reference)} reference array(s) were given")
    stats = [error_stats(g.astype(np.float64), np.asarray(r, dtype=np.float64)) for g, r in zip(got, reference, strict=False)]
    worst = max(stats, key=lambda e: e["max_rel"])
    trace["error"] = {**worst, "tolerance": rel_tolerance, "tolerance_for": "the user's reference", "within": worst["max_rel"] <= rel_tolerance}
  return check

def trace_outputs(outs: list[Any], name: str, variant: Variant, progress: Progress = _quiet, source: str | None = None,
                  reference: Sequence[np.ndarray] | None = None, rel_tolerance: float = 1e-5,
                  origin: dict[str, Any] | None = None, analysis: bool = False,
                  program: ProgramRealize | None = None, scheduled: Scheduled | None = None,
                  runs: bool = True) -> tuple[dict[str, Any], bytes, dict[str, bytes]]:
  """Trace the realize of `outs` (tensors whose graphs are built, not yet realized). origin: how the program ran, for its reproducer
  ({"kind": "script", "fn": NAME or None} or {"kind": "capture", "line": the with statement's line in `source`}). program: this realize
  is one of a program's (its rewrite log, provenance and buffers are the program's; its other targets are rendered with the program's).
  scheduled: outs were scheduled already (schedule_ahead): the pipeline goes on from there. runs=False: a TinyJit took the schedule as
  it captured it (nothing runs now: its runs are the JIT's), traced up to its render."""
  if not tg.tracking_possible(): raise CaptureUnavailable(NOT_TRACKING)
  devices = {tg.tensor_device(o) for o in outs}
  if len(devices) != 1: raise ValueError(f"the realized tensors live on {len(devices)} devices ({', '.join(sorted(devices))}): trace one at a time")
  device = devices.pop()
  info = {"name": name, "source": source, "origin": origin, "outputs": [{"shape": list(tg.dims(o.shape)), "dtype": o.dtype.name} for o in outs]}
  trace = new_trace(None, variant, device, info)
  roles = lambda: {tg.buffer_key(tg.tensor_buffer(o)): "output" for o in outs}
  check = reference_check(reference, rel_tolerance) if reference is not None else None
  plan = Program(outs, roles, kernel_role, check, provenance=program is not None, buffer_refs=None if program is None else program.refs,
                 asts=None if program is None else program.asts, scheduled=scheduled, runs=runs,
                 symbolic=None if program is None else program.symbolic)
  def stages(rec: Recorder, base: int, pool: RenderPool, blobs: dict[str, bytes]) -> None:  # the graph exists already: the user's code built it
    with tg.opt_context(variant.opt): pipeline(rec, plan, variant, device, base, pool, blobs)
  if program is None: return record(trace, variant, device, progress, stages, analysis)
  return record(trace, variant, device, progress, stages, analysis, base=program.base, timeline=program.timeline, realize=program.index)

@dataclass
class ProgramRealize:
  """What one realize of a program hands the program: where the program's rewrite log begins, and (filled by the pipeline) a weak
  reference to each of its buffers' UOps and its kernels' ASTs."""
  base: int
  index: int = 0                        # which of the program's realizes
  timeline: HostTimeline | None = None  # the program's: this realize's stages join it
  refs: list[Any] = field(default_factory=list)
  asts: list[Any] = field(default_factory=list)
  symbolic: list[tuple[int, Any]] = field(default_factory=list)  # (kernel index in the realize, its compiled call) per symbolic kernel

class ProgramTrace:
  """A program's realizes merged, as they run, into one trace: kernels and schedule rows numbered across the program (each row and
  kernel says its `realize`), a buffer shared by two realizes (a weight written by one, read by the next) listed once, the scheduler's
  passes and STAGE rows of every realize, totals over all, and `realizes`, each realize's range of kernels and schedule rows."""
  def __init__(self, name: str, variant: Variant, source: str | None, origin: dict[str, Any] | None, file: str | None = None):
    self.variant = variant
    self.trace = new_trace(None, variant, "", {"name": name, "source": source, "origin": origin, "outputs": [], "file": file})
    self.asts: list[Any] = []
    self.trace["scheduler"] = {"seconds": 0.0, "groups": [], "passes": [], "stage_counts": {}}
    self._buffers: dict[int, tuple[Any, int]] = {}  # id of a live buffer UOp -> (its weak reference, program buffer index)

  def add(self, realize: dict[str, Any], refs: list[Any], asts: list[Any], runs: bool = True) -> None:
    p, r = self.trace, len(self.trace.setdefault("realizes", []))
    if r == 0: p["env"] = realize["env"]
    k0, s0 = len(p["kernels"]), len(p["schedule"])
    bufs = [self._buffer(b, ref, s0) for b, ref in zip(realize["buffers"], refs, strict=False)]
    def moved(xs: list[int]) -> list[int]: return sorted({bufs[i] for i in xs})
    for row in realize["schedule"]:
      p["schedule"].append({**row, "index": row["index"] + s0, "reads": moved(row["reads"]), "writes": moved(row["writes"]),
                            "kernel": None if row["kernel"] is None else row["kernel"] + k0, "realize": r})
    for k in realize["kernels"]:
      p["kernels"].append({**k, "index": k["index"] + k0, "call": k["call"] + s0, "reads": moved(k["reads"]), "writes": moved(k["writes"]),
                           "realize": r})
    self.asts += asts
    self._scheduler(realize.get("scheduler"), bufs)
    for stage, sec in realize["stage_seconds"].items(): p["stage_seconds"][stage] = p["stage_seconds"].get(stage, 0.0) + sec
    mine = p.setdefault("tinygrad_seconds", {})
    for stage, sec in realize.get("tinygrad_seconds", {}).items(): mine[stage] = mine.get(stage, 0.0) + sec
    p["failures"] += realize["failures"]
    if realize["status"] != "ok": p["status"] = "partial"
    p["program"]["outputs"] += realize["program"]["outputs"]
    if realize.get("error") is not None and (p["error"] is None or realize["error"]["max_rel"] > p["error"]["max_rel"]): p["error"] = realize["error"]
    checks = p.setdefault("spec_checks", {})
    for spec, check in (realize.get("spec_checks") or {}).items(): checks[spec] = _merged_check(checks.get(spec), check)
    p["realizes"].append({"index": r, "name": realize["program"]["name"], "kernels": [k0, len(p["kernels"])],
                          "schedule": [s0, len(p["schedule"])], "tensor_graph": realize["tensor_graph"],
                          "seconds": sum(realize["stage_seconds"].values()), "outputs": realize["program"]["outputs"],
                          "total_s": (timing := realize.get("timing") or {}).get("total_s"), "span_s": timing.get("span_s"),
                          **({"variables": realize["variables"]} if realize.get("variables") else {}), **({} if runs else {"captured": True})})
    if timing:
      spans = [x["span_s"] for x in p["realizes"] if x.get("span_s")]
      eager = [x for x in ((p.get("timing") or {}).get("eager_s"), timing.get("eager_s")) if x is not None]  # each realize's first run
      p["timing"] = {**timing, "total_s": _summed([x["total_s"] for x in p["realizes"] if x["total_s"]]), "span_s": _summed(spans),
                     "eager_s": sum(eager) if eager else None}

  def add_repeat(self, first: int, seconds: float, variables: dict[str, int]) -> None:
    """Realize `first` ran again, the same kernels: its repeats' wall times (schedule from tinygrad's cache, compile cache, run) and
    the values its variables took."""
    self.trace["realizes"][first].setdefault("repeats", []).append({"seconds": seconds, **({"variables": variables} if variables else {})})

  def add_jit_run(self, run: tg.JitRun, jit: int) -> list[int]:
    """A run of the program's TinyJit number `jit` (its captured schedule, as tinygrad ran it): its seconds and variables; the first
    run also says which kernels it runs and which of the traced realizes ran the same ones, [first, end) (none: they ran before the
    capture began, or differ). Returns that span."""
    jits = self.trace.setdefault("jits", [])
    if jit == len(jits): jits.append({"index": jit, "kernels": list(run.kernels), "realizes": self._realizes_running(run.kernels), "runs": []})
    jits[jit]["runs"].append({"seconds": run.seconds, **({"variables": run.variables} if run.variables else {})})
    realizes: list[int] = jits[jit]["realizes"]
    return realizes

  def _realizes_running(self, names: tuple[str, ...]) -> list[int]:
    """The latest realizes, in a row, whose kernels are these, in this order (a JIT's own capture, just before its first run, rather
    than the first call that ran the same kernels): [first, end), or [] where none are."""
    realizes, kernels = self.trace.get("realizes", []), self.trace["kernels"]
    for a in reversed(range(len(realizes))):
      got: list[str] = []
      for b in range(a, len(realizes)):
        got += [kernels[i]["name"] for i in range(*realizes[b]["kernels"])]
        if len(got) >= len(names): break
      if names and tuple(got) == names: return [a, b + 1]
    return []

  def _buffer(self, b: dict[str, Any], ref: Any, s0: int) -> int:
    """The program's index of a realize's buffer: the same buffer UOp (alive, so not another at a reused address) is listed once."""
    blist, obj = self.trace["buffers"], ref()
    known = self._buffers.get(id(obj)) if obj is not None else None
    if known is not None and known[0]() is obj: i = known[1]
    else:
      i = len(blist)
      blist.append({**b, "index": i, "name": f"buf{i}", "written_by": [], "read_by": []})
      if obj is not None: self._buffers[id(obj)] = (ref, i)
    mine = blist[i]
    mine["written_by"] += [w + s0 for w in b["written_by"]]
    mine["read_by"] += [x + s0 for x in b["read_by"]]
    if b["role"] == "output": mine["role"] = "output"
    elif mine["role"] in ("constant", "host") and b["written_by"]: mine["role"] = "intermediate"  # written here: computed, not a constant
    return i

  def _scheduler(self, s: dict[str, Any] | None, bufs: list[int]) -> None:
    if s is None: return
    mine = self.trace["scheduler"]
    first_pass = len(mine["passes"])
    mine["seconds"] += s["seconds"]
    mine["groups"] += s["groups"]
    mine["passes"] += s.get("passes", [])
    for name, n in (s.get("stage_counts") or {}).items(): mine["stage_counts"][name] = mine["stage_counts"].get(name, 0) + n
    if (stages := s.get("stages")) is None: return
    def row(x: dict[str, Any]) -> dict[str, Any]:
      out = dict(x)
      if out.get("buffer") is not None: out["buffer"] = bufs[out["buffer"]]
      for f in ("reads", "into"):
        if f in out: out[f] = sorted({bufs[i] for i in out[f]})
      return out
    merged = mine.setdefault("stages", {"created": [], "kept": [], "fused": [], "realized": [], "debuf_pass": first_pass + stages["debuf_pass"]})
    for fate in ("created", "kept", "fused", "realized"): merged[fate] += [row(x) for x in stages[fate]]

  def finish(self, base: int, device: str, analysis: bool) -> tuple[dict[str, Any], bytes, dict[str, bytes]]:
    """The program's kernels on the other targets (rendered now, all at once: one rewrite log per target), its totals and its rewrite
    log."""
    p, blobs = self.trace, dict[str, bytes]()
    p["env"]["device"] = p["env"].get("device") or device
    graphs = [x["tensor_graph"] for x in p["realizes"] if x["tensor_graph"]]
    biggest = max(p["realizes"], key=lambda x: x["kernels"][1] - x["kernels"][0])
    drawn = biggest["tensor_graph"] or {}  # the graph a program's tensor graph page draws: its biggest realize's
    p["tensor_graph"] = {"uops": sum(g["uops"] for g in graphs), "ops": _counted([g["ops"] for g in graphs]), "sink": drawn.get("sink"),
                         "sites": drawn.get("sites", []), "uop_sites": drawn.get("uop_sites", [])} if graphs else None
    if p["tensor_graph"] is not None and (calls := drawn.get("uop_calls")) is not None:  # in the program's schedule's numbering
      p["tensor_graph"]["uop_calls"] = [[num, call + biggest["schedule"][0]] for num, call in calls]
    for g in graphs:  # kept once, on the program's: a realize's would repeat them
      for key in ("sites", "uop_sites", "uop_calls"): g.pop(key, None)
    if not p["scheduler"]["passes"]: p["scheduler"] = None
    self._render_targets(device, analysis, blobs)
    asked = p["variant"]["targets"]
    for k in p["kernels"]:
      if (host := k.get("host_target")) in asked: k["sources"][host] = k["targets"][host]["source"]
    if len(p["realizes"]) > 1: p["label"] = f"{p['program']['name']} | {len(p['realizes'])} realizes | opt={self.variant.opt}"
    infer_provenance(p)  # across realizes: a fill made in one (a BatchNorm's running mean) is read in a later one
    add_totals(p)
    p["rewrite_stacks"] = tg.take_group_stacks(base)
    return p, tg.export_rewrites(base), blobs

  def _render_targets(self, device: str, analysis: bool, blobs: dict[str, bytes]) -> None:
    p, v = self.trace, self.variant
    targets = other_targets(v, device) if p["kernels"] else {}
    if not targets: return
    chosen = [k["opts"] for k in p["kernels"]] if v.opt.startswith("beam:") else None
    pool = RenderPool(targets, max(1, min(2, len(targets))))
    try:
      renders = pool.submit(self.asts, targets, v.opt, v.rewrites, v.rewrite_file, chosen, analysis)
      for t, fut in renders.items():
        records, blobs[t] = fut.result()
        pool.done(t)
        for k, got in zip(p["kernels"], records, strict=False): add_target_record(k, t, got)
    except Exception as e:  # noqa: BLE001 - recorded: the host's trace stands without the other targets
      p["failures"].append({"stage": "render", "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=8)})
      p["status"] = "partial"
    finally: pool.close()

def _merged_check(a: dict[str, Any] | None, b: dict[str, Any]) -> dict[str, Any]:
  if a is None: return dict(b)
  return {"spec": a["spec"], "ok": a["ok"] and b["ok"], "checked": a["checked"] + b["checked"],
          "violations": (a["violations"] + b["violations"])[:50], "violation_count": a["violation_count"] + b["violation_count"]}

def _counted(hists: list[dict[str, int]]) -> dict[str, int]:
  out: dict[str, int] = {}
  for h in hists:
    for k, n in h.items(): out[k] = out.get(k, 0) + n
  return out

def _summed(xs: list[dict[str, Any]]) -> dict[str, Any] | None:
  """Per-realize timing records as the program's: each realize's samples summed repeat by repeat (they were timed with the same
  repeats, by the same clock), a record of those sums with its interval; records without samples (older traces): medians, means and
  minimums add up, spreads add as variances, no interval."""
  if not xs: return None
  if all(x.get("samples") for x in xs) and len({len(x["samples"]) for x in xs}) == 1:
    sums = [sum(col) for col in zip(*(x["samples"] for x in xs), strict=True)]
    return {**timed(sums, xs[0]["method"], xs[0]["l2"]), "samples": sums}
  return {"median": sum(x["median"] for x in xs), "mean": sum(x["mean"] for x in xs), "std": math.sqrt(sum(x["std"] ** 2 for x in xs)),
          "min": sum(x["min"] for x in xs), "n": min(x["n"] for x in xs)}

class Capturing:
  """Record every realize inside the block as one program (`result`: its trace, rewrite blob and target blobs); `realizes` keeps each
  realize's own trace as recorded (the host's records; they share the program's rewrite blob)."""
  def __init__(self, name: str, variant: Variant, progress: Progress = _quiet, source: str | None = None,
               reference: Sequence[np.ndarray] | None = None, rel_tolerance: float = 1e-5, origin: dict[str, Any] | None = None,
               analysis: bool = False, file: str | None = None, every_step: bool = False):
    """every_step: trace every realize whole, a repeat of an earlier one's kernels too (by default a repeat is run and timed only)."""
    self.name, self.variant, self.progress, self.source, self.origin, self.analysis = name, variant, progress, source, origin, analysis
    self.every_step = every_step
    self.reference, self.rel_tolerance = reference, rel_tolerance
    self.realizes: list[dict[str, Any]] = []
    self.result: tuple[dict[str, Any], bytes, dict[str, bytes]] | None = None
    self._program = ProgramTrace(name, variant, source, origin, file)
    self._own_variant = dataclasses.replace(variant, targets=())  # a realize renders the host only: the program renders the rest at once
    self._stack = contextlib.ExitStack()
    self._base = 0
    self._seen: dict[tuple[tuple[str, ...], frozenset[Any]], int] = {}  # the kernels a realize ran (their AST keys, in order) and the lines
    # its graph was made at -> the first realize that ran them from there
    self._signatures: set[frozenset[Any]] = set()  # the lines each realize's graph was made at (_lines)
    self._timeline = HostTimeline()
    self._jits: dict[int, int] = {}  # a TinyJit's captured schedule (its id) -> its index in the trace's `jits`
    self._jit_linears: list[tuple[Any, dict[str, int]]] = []  # what a TinyJit captured of the realize at hand
    self._symbolic: dict[str, Any] = {}  # a symbolic kernel's AST key -> a compiled call of it, run once: timed at the end

  def _on_realize(self, outs: list[Any]) -> None:
    if tg.jit_capturing(): return self._jit_captures(outs)
    st = time.perf_counter()
    lines = self._lines(tg.tensor_sink(*outs))
    ahead = schedule_ahead(outs, provenance=True, fresh=lines[1])
    kernels = tg.schedule_keys(ahead.linear)
    repeat = kernels and not self.every_step and self.reference is None  # a reference is checked against every realize's outputs
    n = len(self.realizes)
    first = self._seen.get((kernels, lines[0])) if repeat else None
    self._timeline.stage("schedule", n if first is None else first, st, st + ahead.seconds)
    if first is not None: return self._repeat(first, ahead)
    self._trace(outs, ahead)
    if kernels: self._seen.setdefault((kernels, lines[0]), n)

  def _lines(self, sink: Any) -> tuple[frozenset[Any], bool]:
    """The lines a realize's tensor graph was made at (tg.site_signature), and whether they are new to this program: a graph made at
    lines no realize before was is scheduled afresh (tinygrad's schedule cache would hand it an earlier realize's schedule, made at
    other lines: the ONNX runner called directly, then under TinyJit), and a realize of the same kernels from other lines is no repeat."""
    lines = tg.site_signature(sink)
    new = lines not in self._signatures
    self._signatures.add(lines)
    return lines, new

  def _jit_captures(self, outs: list[Any]) -> None:
    """A TinyJit is capturing: tinygrad's realize hands the schedule it makes to the JIT, and nothing runs. The schedule is traced up
    to its render (the JIT's runs run it, _on_jit_run), so that every kernel the JIT runs is in the trace."""
    sink, mark, st = tg.tensor_sink(*outs), tg.tracking_mark(), time.perf_counter()
    self._jit_linears.clear()
    with tg.carrying_metadata(sink, self._lines(sink)[1]) as carrying: outs[0].realize(*outs[1:])
    if not self._jit_linears: return
    (linear, var_vals), = self._jit_linears
    self._timeline.stage("schedule", len(self.realizes), st, now := time.perf_counter())
    ahead = Scheduled(sink, linear, var_vals, mark, now - st, carrying.provenance(linear), carrying.members(linear))
    self._trace(outs, ahead, runs=False)

  def _trace(self, outs: list[Any], ahead: Scheduled, runs: bool = True) -> None:
    n = len(self.realizes)
    name = (self.name if n == 0 else f"{self.name} (realize {n})") + ("" if runs else " (captured by TinyJit)")  # (numbered as the pages number it)
    mine = ProgramRealize(self._base, n, self._timeline)
    trace, _, _ = trace_outputs(outs, name, self._own_variant, self.progress, self.source, self.reference, self.rel_tolerance, self.origin,
                                self.analysis, mine, ahead, runs)
    self.realizes.append(trace)
    infer_provenance(trace)
    for k in trace["kernels"]:  # nothing it computes names a line, nothing near it does (a fill nothing reads): the line that realized it
      if not k.get("provenance") and (site := tg.user_site()) is not None:
        k["provenance"] = [{"fn": "realize", "file": site[0], "line": site[1], "backward": False, "via": None, "inferred": True}]
    k0 = len(self._program.trace["kernels"])
    self._program.add(trace, mine.refs, mine.asts, runs)
    for i, call in mine.symbolic: self._symbolic.setdefault(self._program.trace["kernels"][k0 + i].get("ast_key", ""), call)
    if runs and "run" not in trace["stage_seconds"]:  # scheduled (the tensors now name their buffers) but never run: never read zeros
      f = (trace["failures"] or [{"stage": "?", "error": "unknown"}])[0]
      raise RuntimeError(f"tracing {name} failed at stage {f['stage']} ({f['error']}), before the program ran: its tensors hold no values")

  def _repeat(self, first: int, ahead: Scheduled) -> None:
    """A realize that runs the same kernels as an earlier one (a training loop's next step, a decode loop's next token): run as
    Tensor.realize runs it, its seconds and variables kept as a repeat of that realize; what its schedule left in the rewrite log goes
    (nothing recorded refers to it), so a long loop's trace is the size of its first steps."""
    st = time.perf_counter()
    with timed_stage(self._timeline, "repeat", first), tg.disable_gc(): tg.run_schedule(tg.compile_schedule(ahead.linear), ahead.var_vals)
    seconds = time.perf_counter() - st + ahead.seconds
    tg.forget_rewrites_since(ahead.mark)
    self._program.add_repeat(first, seconds, ahead.var_vals)

  def _on_jit_run(self, run: tg.JitRun) -> None:
    jit = self._jits.setdefault(run.jit, len(self._jits))
    span = self._program.add_jit_run(run, jit)
    now = time.perf_counter()
    self._timeline.stage("TinyJit run", span[0] if span else None, now - run.seconds, now)

  def __enter__(self) -> Capturing:
    if not tg.tracking_possible(): raise CaptureUnavailable(NOT_TRACKING)
    self._base = tg.tracking_mark()
    self._stack.enter_context(tg.tracking())  # each rewrite group with the stack that opened it (the schedule is made ahead of a trace)
    self._stack.enter_context(tg.sited_metadata())
    self._stack.enter_context(tg.on_realize(self._on_realize))
    self._stack.enter_context(tg.on_jit(lambda linear, var_vals: self._jit_linears.append((linear, var_vals)), self._on_jit_run))
    self._stack.enter_context(self._timeline.recording())
    return self

  def __exit__(self, *exc: Any) -> None:
    self._stack.close()
    try:
      if self.realizes and exc[0] is None and self.variant.time and self._symbolic:
        with timed_stage(self._timeline, "timing at bound values", None): self._time_bound_values()
    finally: self._symbolic.clear()  # the calls hold their buffers (untimed, or the block failed, too): let them go
    timeline = self._timeline.record()  # tinygrad's events taken back out of its lists, whatever happened
    if self.realizes and exc[0] is None:
      self._program.trace["timeline"] = timeline
      device = self.realizes[0]["env"]["device"]
      self.result = self._program.finish(self._base, device, self.analysis)

  def _time_bound_values(self) -> None:
    """Each symbolic kernel timed alone at every set of values the program ran it with (its realize's, its repeats', its TinyJit's
    runs'), by the clock its trace's timing used: a decode step's attention at each position (KernelRecord.times_at)."""
    from explorer.schema import TraceRecord, bound_sets
    from explorer.tracing.pipeline.timing import time_at_values
    trace = self._program.trace
    clock = tg.clock_for(trace["env"]["device"])
    try:
      with tg.disable_gc():
        for k in trace["kernels"]:  # a TinyJit's captured kernels (never run by the capture) by a run realize's call of the same AST
          if (call := self._symbolic.get(k.get("ast_key", ""))) is not None and (values := bound_sets(cast(TraceRecord, trace), k)):
            k["times_at"] = time_at_values(clock, call, values, self.variant.warmup, self.variant.repeats)
    finally: clock.close()

def infer_provenance(trace: dict[str, Any]) -> None:
  """A kernel whose own compute carries no metadata (a copy, a fill, or compute the scheduler rebuilt beyond tinygrad's reach) gets
  its provenance from data flow: that of the kernels that read what it writes (it was computed for them), else of those that wrote what
  it reads, each entry marked `inferred`."""
  kernels, buffers = trace["kernels"], trace["buffers"]
  by_call = {k["call"]: k for k in kernels}
  own = {k["index"]: [e for e in k.get("provenance") or [] if not e.get("inferred")] for k in kernels}
  def neighbours(k: dict[str, Any], downstream: bool) -> list[dict[str, Any]]:
    calls = {c for b in (k["writes"] if downstream else k["reads"]) for c in buffers[b]["read_by" if downstream else "written_by"]}
    return [by_call[c] for c in sorted(calls) if c in by_call and c != k["call"]]
  for k in kernels:
    if own[k["index"]] or "provenance" not in k: continue
    for downstream in (True, False):
      seen, frontier, found = {k["index"]}, neighbours(k, downstream), list[dict[str, Any]]()
      while frontier and not found:
        nxt = []
        for n in frontier:
          if n["index"] in seen: continue
          seen.add(n["index"])
          if own[n["index"]]: found += own[n["index"]]
          else: nxt += neighbours(n, downstream)
        frontier = nxt
      if found: break
    if found: k["provenance"] = [{**e, "inferred": True} for e in {(e["fn"], e["backward"], e["file"], e["line"]): e for e in found}.values()]

def script_in_worker(progress: Progress, path: str, fn: str | None, variant: dict[str, Any],
                     analysis: bool = False) -> tuple[tuple[dict[str, Any], bytes, dict[str, bytes]], list[dict[str, Any]]]:
  """`kernel-explorer trace --script PATH [--fn NAME]`: run the script (as __main__ without --fn; else run it as a module and call
  NAME()) with every realize recorded. It runs in a namespace of its own, sys.modules untouched: the render processes this worker
  spawns must not import the script again (multiprocessing's spawn imports the __main__ module it finds there)."""
  source = pathlib.Path(path).read_text()
  code = compile(source, path, "exec")
  namespace: dict[str, Any] = {"__name__": "__main__" if fn is None else "explorer_script", "__file__": path, "__builtins__": __builtins__}
  with Capturing(fn or path.rsplit("/", 1)[-1], Variant.from_dict(variant), progress, source, origin={"kind": "script", "fn": fn},
                 analysis=analysis, file=path) as cap:
    exec(code, namespace)  # noqa: S102 - the user's own script, from the command line only (the server never runs user code)
    if fn is not None:
      if not callable(target := namespace.get(fn)): raise ValueError(f"{path} defines no function {fn!r}")
      if inspect.signature(target).parameters: raise ValueError(f"{fn}() must take no arguments (it is called as {fn}())")
      target()
  if cap.result is None: raise ValueError(f"{path} realized nothing: call .realize() (or .numpy()) on the tensors to trace")
  return cap.result, cap.realizes
