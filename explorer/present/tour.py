"""Teaching tours: a sequence of steps through one trace (or a pair), each explained from the trace's own numbers.

A step is {"id", "title", "view", "text"}: `view` names the page that shows it (the web app maps it to a URL), `text` is
generated here from the data, never canned, so a different variant gives different sentences.
"""
from __future__ import annotations
import collections
from dataclasses import replace
from typing import Any
from explorer.clocks import how, ratio_words
from explorer.present.graphs import kernel_time
from explorer.schema import (
  InterleavedTiming,
  KernelRecord,
  ProgramInfo,
  TargetRecord,
  TimeStats,
  Totals,
  TraceRecord,
  ast_key_of,
  host_target,
  max_live_line,
  own_provenance,
  pressure_of,
  realizes_of,
  registers_of,
  stage_counts_of,
  target_record,
  timing_of,
  totals_of,
)
from explorer.spec import ConvSpec, Variant, opt_label
from explorer.stats import NOISY_SPREAD, noisy
from explorer.text import fmt_bytes, provenance_sites, si_prefix

ROLE_MEANING = {
  "conv": "the whole convolution: each output sums input x weight over the input channels and the kernel window",
  "xhat": "Winograd's input transform: each input tile d becomes Bt·d·B",
  "ghat": "Winograd's weight transform: each 3x3 filter g becomes G·g·Gt",
  "mhat": "the batched elementwise product of transformed tiles and filters, reduced over the input channels",
  "out": "Winograd's output transform: At·m·A turns each transformed tile back into output pixels",
  # a captured program's kernels (explorer.tracing.pipeline.program): what they are, not which convolution step
  "reduce": "a reduction: each output accumulates over a loop", "elementwise": "elementwise work: each output from its own inputs",
}
PROGRAM_ROLE_MEANING = {"out": "it writes a tensor the program realized"}
OPT_MEANING = {
  "UPCAST": "computes several outputs per thread, in registers", "UNROLL": "unrolls a reduce loop", "LOCAL": "splits an axis into a workgroup",
  "GROUP": "splits a reduce across threads of a group", "GROUPTOP": "splits a reduce across threads of a group",
  "THREAD": "spreads an axis over CPU threads", "TC": "uses tensor cores", "PADTO": "pads an axis to a multiple", "SWAP": "swaps two axes",
  "NOLOCALS": "uses no local memory",
}

def _plural(n: int, word: str, many: str | None = None) -> str: return f"{n} {word if n == 1 else many or word + 's'}"

def _role_text(role: str, program: bool = False) -> str:
  meaning = {**ROLE_MEANING, **PROGRAM_ROLE_MEANING} if program else ROLE_MEANING
  return "; then ".join(meaning.get(p, p) for p in role.split("+"))

def _opt_text(opts: list[str]) -> str:
  if not opts: return "No optimizations were applied (opt=none, or nothing helped): the loops stay as the AST wrote them."
  kinds = [opt_label(o).split(":")[0] for o in opts]
  parts = [f"{k} ({OPT_MEANING.get(k, 'an optimization')})" for k in dict.fromkeys(kinds)]
  return f"{_plural(len(opts), 'optimization')} applied: {', '.join(parts)}."

FOLDED = " (its graph draws fewer nodes: as in tinygrad's viewer, constants and devices are folded into the labels of the UOps that use them)"

Step = dict[str, Any]  # {"id", "title", "view", "text"}, and what a step's view needs beside (focus, side, embed, headline, ask)
SAME_TIME = "the same, within noise"

def ask(qid: str, kind: str, prompt: str, answer: str, choices: tuple[str, ...] = ()) -> dict[str, Any]:
  """A question a live class is asked at a step (explorer.web.services.classes), with the answer its presenter reveals."""
  return {"id": qid, "kind": kind, "prompt": prompt, "choices": list(choices), "answer": answer}

def faster_of(interleaved: InterleavedTiming) -> str:
  """Which side the interleaved timing found faster: A, B, or neither where the ratio's 95% interval holds 1."""
  r = interleaved["ratio"]
  lo, hi = (r["ci_low"], r["ci_high"]) if r.get("ci_low") is not None else (r["median"], r["median"])
  return "B" if hi < 1 else "A" if lo > 1 else SAME_TIME

def _step(id: str, title: str, view: str, text: str) -> Step: return {"id": id, "title": title, "view": view, "text": text}

def tour_target(trace: TraceRecord, asked: str | None) -> str | None:
  """The target a tour reads its kernels' codegen from: `asked` where every kernel has a record for it, else None (each kernel's host)."""
  kernels = trace["kernels"]
  return asked if asked and kernels and all(target_record(k, asked) is not None for k in kernels) else None

TOLD_KERNELS = 8  # a program with more kernels than this: its tour tells the heaviest this many

def told_kernels(trace: TraceRecord) -> list[int]:
  """The kernels a trace's tour tells: all of them, or of a program with more than TOLD_KERNELS, the heaviest (by measured time, else by
  FLOPs), in schedule order."""
  ks = trace["kernels"]
  if not realizes_of(trace) or len(ks) <= TOLD_KERNELS: return [k["index"] for k in ks]
  timed = all(k["time_s"] for k in ks)
  heaviest = sorted(ks, key=lambda k: -(kernel_time(k) or 0.0 if timed else k["flops"]))[:TOLD_KERNELS]
  return sorted(k["index"] for k in heaviest)

def trace_tour(trace: TraceRecord, target: str | None = None) -> list[Step]:
  """The pipeline, stage by stage, for one trace (of a convolution, or of a captured program: spec None). target: the codegen target its
  kernel steps speak of (names, opts, uops, pressure, source), where every kernel has a record for it; else the host's own. A big
  program's tells its realizes and its model lines, then its heaviest kernels (told_kernels)."""
  spec, variant = ConvSpec.from_dict(dict(trace["spec"])) if trace["spec"] else None, Variant.from_dict(dict(trace["variant"]))
  target = tour_target(trace, target)
  told = told_kernels(trace)
  steps = [_tensor_step(trace, spec, variant), *_scheduler_steps(trace), _constants_step(trace, variant), _program_step(trace, told)]
  for n in told: steps += _kernel_steps(trace, trace["kernels"][n], spec, target)
  steps.append(_timing_step(trace, spec))
  return [s for s in steps if s is not None]

def _program_step(trace: TraceRecord, told: list[int]) -> Step | None:
  """A program's realizes, the lines of the model that made most of its kernels, and which kernels the tour goes on to tell."""
  if not (realizes := realizes_of(trace)): return None
  ks = trace["kernels"]
  lines = collections.Counter(site for k in ks for site, _ in provenance_sites([dict(e) for e in own_provenance(k)]))
  busiest = ", ".join(f"{site} ({_plural(n, 'kernel')})" for site, n in lines.most_common(3))
  rest = (f"The tour goes on with the {len(told)} heaviest ({'by time' if all(k['time_s'] for k in ks) else 'by FLOPs'}): kernels "
          f"{', '.join(map(str, told))}." if len(told) < len(ks) else "The tour goes on kernel by kernel.")
  return _step("program", "The program", "program",
               f"The program ran {_plural(len(realizes), 'realize')} and {_plural(len(ks), 'kernel')}"
               f"{'; the lines of the model that made most of them: ' + busiest if busiest else ''}. Each kernel's provenance names the "
               f"Tensor functions it computes and the line that called them (the overview's kernel table; search it by a line). {rest}")

def _program(trace: TraceRecord) -> ProgramInfo:
  """A captured program's record (a trace without a spec has one; TypeError where it has not: the tour says it is incomplete)."""
  if (program := trace["program"]) is None: raise TypeError("a trace of no convolution that records no program")
  return program

def _tensor_step(trace: TraceRecord, spec: ConvSpec | None, variant: Variant | None = None) -> Step:
  g = trace["tensor_graph"] or {"uops": 0, "ops": {}, "sink": None}
  top = ", ".join(f"{n} {op}" for op, n in sorted(g["ops"].items(), key=lambda kv: -kv[1])[:4])
  what = f"The convolution {spec.label()}" if spec is not None else f"The program {_program(trace)['name']}"
  direct = "" if variant is None or variant.algo == "direct" else " (the direct-equivalent count: Winograd's kernels do fewer)"
  recipe = (f"the {si_prefix(spec.direct_flops)}FLOPs of multiply-adds a direct convolution does (counted by formula, 2 per multiply-add){direct} "
            "are only a recipe at this point."
            if spec is not None else "what it computes is only a recipe at this point.")
  step = _step("tensor", "Tensor graph", "graph/tensor",
               f"{what} starts as a lazy tensor graph of {g['uops']} UOps{FOLDED} (most common: {top}). Nothing has run yet: {recipe}")
  return {**step, "ask": ask("kernels", "number", "Predict: how many kernels will tinygrad's schedule run for this graph?",
                             str(len(trace["kernels"])))}

def _scheduler_steps(trace: TraceRecord) -> list[Step]:
  sch = trace["scheduler"]  # None where the trace failed before its schedule
  passes, counts, seconds = (sch["passes"], stage_counts_of(sch), sch["seconds"]) if sch else ([], None, 0.0)
  steps = [_step("rangeify", "Rangeify", "rangeify",
                 f"tinygrad's scheduler ran {_plural(len(passes), 'named pass', 'named passes')} with "
                 f"{sum(p['matches'] for p in passes)} pattern matches "
                 f"in {seconds:.2f} s. Rangeify gives every op explicit loop ranges and puts a STAGE (bufferize) node wherever a "
                 f"value might be written to memory.")]
  if sch and counts:
    kept_bytes = sum(s["nbytes"] for s in sch["stages"]["kept"])
    inter = [b for b in trace["buffers"] if b["role"] == "intermediate"]
    steps.append(_step("bufferize", "Bufferize decisions", "bufferize",
                       f"Rangeify created {_plural(counts['created'], 'STAGE node')}. The debuf pass removed {counts['fused']} of them: their "
                       f"values are recomputed inline by the kernel that reads them instead of stored (inlined). {counts['kept']} survived "
                       f"as buffers ({fmt_bytes(kept_bytes)}), and {counts['realized']} more stores are ones the program asked for (the "
                       f"output and any .contiguous()). In the end the kernels pass {_plural(len(inter), 'intermediate buffer')} "
                       f"({fmt_bytes(sum(b['nbytes'] for b in inter))}) through global memory."))
  return steps

def _constants_step(trace: TraceRecord, variant: Variant) -> Step | None:
  if variant.algo != "winograd": return None
  const_bufs = [b for b in trace["buffers"] if b["role"] == "constant"]
  consts, loads = sum(k["ops"]["consts"] for k in trace["kernels"]), sum(k["ops"]["loads"] for k in trace["kernels"])
  where = (f"they are {_plural(len(const_bufs), 'device buffer')} ({fmt_bytes(sum(b['nbytes'] for b in const_bufs))}), copied from the host "
           f"({_plural(sums['copies'] if (sums := totals_of(trace)) else 0, 'COPY')}) and loaded inside the kernels" if const_bufs else
           "no buffer holds them: they are folded into the kernel code as immediates")
  return _step("constants", "Where the constants went", "source",
               f"The Winograd transform matrices are {variant.consts if variant.wino_impl == 'explorer' else 'symbolic'} here: {where}. "
               f"Across the kernels the linearized code has {consts} CONST uops and {loads} loads.")

def _kernel_steps(trace: TraceRecord, k: KernelRecord, spec: ConvSpec | None, target: str | None = None) -> list[Step]:
  """The four steps of a kernel (AST, codegen passes, linear uops, source), their codegen read from its record on `target` (None: the
  host's). The uops step carries `focus`, the uop its text discusses (the peak of live values), which its view scrolls to."""
  rec = target_record(k, target) or target_record(k)
  assert rec is not None
  names = {b["index"]: f"{b['name']} ({b['role']})" for b in trace["buffers"]}
  reads, writes = ", ".join(names[i] for i in k["reads"]) or "nothing", ", ".join(names[i] for i in k["writes"])
  n, on = k["index"], target or host_target(k)
  text = (f"Kernel {rec['name']} is {k['role']}: {_role_text(k['role'], spec is None)}. It reads {reads} and writes {writes}. "
          f"Its AST has {k['ast_uops']} UOps{FOLDED}.")
  if k["role"] == "xhat" and spec is not None:
    total = sums["flops"] if (sums := totals_of(trace)) else 0
    text += (f" The whole Winograd schedule counts {si_prefix(total)}FLOPs (tinygrad's Estimates on the host's {host_target(k)} programs, index and "
             f"mask arithmetic included) against {si_prefix(spec.direct_flops)}FLOPs of multiply-adds for the direct convolution (by formula): "
             f"{spec.direct_flops / total:.2f}x fewer." if total else "")
  text += "".join(f" {note}." for note in k["notes"])
  codegen = sorted(rec["passes"], key=lambda p: -p["matches"])[:3]
  busiest = ", ".join(f"{p['name']} ({p['matches']} matches)" for p in codegen)
  o, sources = rec["ops"], k["sources"]
  own = "host" if on == host_target(k) else on  # the host's source is kept under "host"
  others = [f"{host_target(k)} (the host)" if t == "host" else t for t in sources if t != own]
  uops = _step(f"k{n}-uops", f"Kernel {n}: linearized uops", f"k/{n}/uops",
               f"For {on}, the linearizer ordered {rec['linear_uops']} uops: {o['alu']} ALU ops, {o['loads']} loads, {o['stores']} stores, "
               f"{o['consts']} constants and {_plural(o['ranges'], 'loop')}. tinygrad estimates {si_prefix(rec['flops'])}FLOPs and "
               f"{fmt_bytes(rec['bytes'])} of memory traffic on {on} (each target's program counts its own)." + _pressure_text(rec))
  source = _step(f"k{n}-source", f"Kernel {n}: source", f"k/{n}/source",
                 f"The {on} renderer turned those uops into {len(rec['source'].splitlines())} lines of source, the kernel "
                 f"{rec['name']}." + (f" The trace also rendered it for {', '.join(others)} (the tabs beside it)." if others else ""))
  if (p := pressure_of(rec)):
    line = max_live_line(p)
    uops["focus"] = {"uop": p["max_live_at"], "line": line}
    if line:
      source["text"] += f" Line {line} (marked) is where the most values are live at once, {p['max_live']}."
      source["focus"] = {"line": line}
  steps = [
    _step(f"k{n}-ast", f"Kernel {n}: {k['role']} AST", f"k/{n}", text),
    _step(f"k{n}-codegen", f"Kernel {n}: codegen passes", f"k/{n}/passes",
          f"Codegen for {on} ran {_plural(len(rec['passes']), 'pass', 'passes')} on this kernel; the busiest were {busiest}. "
          f"{_opt_text(rec['opts'])} The launch is global {rec['global_size']} x local {rec['local_size']}."),
    _cut_step(trace, n, rec),
    uops,
    source,
  ]
  return [s for s in steps if s is not None]

def _cut_step(trace: TraceRecord, n: int, rec: TargetRecord) -> Step | None:
  """Where tinygrad 0.12's "cut store ranges" (cut_store_range) cut one of the kernel's loops: the loop peeling of the codegen notes
  (seed 004), which 0.13 and 0.14 no longer have. None where it did not."""
  if not (cuts := sum(p["matches"] for p in rec["passes"] if p["name"] == "cut store ranges")): return None
  splits = [s for s in rec.get("loop_splits") or [] if s["pass"] == "cut store ranges"]
  how = "; ".join(f"a loop of {', '.join(str(r['size']) for r in s['ranges'])} iterations became loops of "
                  f"{', '.join(str(r['size']) for r in s['into'])}" for s in splits)
  return _step(f"k{n}-cut", f"Kernel {n}: a loop cut where its stores compare it with constants", f"k/{n}/passes",
               f"tinygrad {trace['env'].get('tinygrad', '')}'s \"cut store ranges\" pass (cut_store_range in codegen/simplify.py, part of "
               f"pm_split_store) matched {_plural(cuts, 'time')} here: a store inside a loop whose range it compares with constants (a "
               f"padded edge) is split into a loop per stretch between them, so that no iteration tests the comparison. This is the "
               f"loop peeling the codegen notes (seed 004) found in tinygrad; it runs on the CPU only, and tinygrad 0.13 dropped it "
               f"(the explorer's peel:N rewrite does it by hand)." + (f" Here {how}." if how else ""))

def hand_schedule_steps(trace: TraceRecord, schedules: list[dict[str, Any]]) -> list[Step]:
  """A step per hand schedule pinned to the trace's tour (explorer.web.services.enrichments.tour_schedules), after the trace's own
  steps: the kernel with those opts beside its original, in numbers. Each step carries what its view shows (`embed`)."""
  kernels, out = trace["kernels"], []
  for i, sch in enumerate(schedules):
    n, target, got = sch["kernel"], sch["target"], sch["result"]
    if n >= len(kernels): continue
    own, rec = target_record(kernels[n], target), got["record"]
    def fig(r: TargetRecord | None, key: str) -> int | None:
      if r is None: return None
      return (p["max_live"] if (p := pressure_of(r)) else None) if key == "live" else _registers(r)
    figures = [f"{label} {fig(own, key)} -> {fig(rec, key)}" for label, key in (("peak live values", "live"), ("registers", "regs"))
               if fig(own, key) is not None and fig(rec, key) is not None]
    text = (f"Scheduled by hand on {target}: {', '.join(got['opts']) or 'no opts'} (tinygrad's apply_opts) instead of "
            f"{', '.join(own['opts'] if own else []) or 'no opts'}. The kernel becomes {rec['name']}, global {rec['global_size']} x local "
            f"{rec['local_size']}, {rec['linear_uops']} linear uops (was {own['linear_uops'] if own else None})")
    text += (f"; {', '.join(figures)}." if figures else ".")
    if (t := got.get("timing")) is not None:
      text += (f" Timed on {t['device']} interleaved with the original in the same run: "
               f"{ratio_words(t['ratio'], (t['ci_low'], t['ci_high']), 'the hand schedule', 'the original')}.")
    out.append({**_step(f"k{n}-opts-{i}", f"Kernel {n} by hand: {', '.join(got['opts']) or 'no opts'}", f"k/{n}", text),
                "embed": {"kind": "opts", "own": dict(own or {}), "got": got, "target": target, "kernel": n}})
  return out

def _registers(rec: TargetRecord) -> int | None:
  """ptxas' registers per thread, where the record was compiled by a compiler that reports them (CUDA, PTX)."""
  return registers_of(compiled) if (compiled := rec["compile"]) else None

def _pressure_text(rec: TargetRecord) -> str:
  if not (p := pressure_of(rec)): return ""
  where = f" (source line {line})" if (line := max_live_line(p)) else ""
  regs = _registers(rec)
  return (f" At most {p['max_live']} values are live at once, at uop {p['max_live_at']}{where}: what the register allocator has to fit"
          + (f"; the compiler used {regs} registers per thread." if regs is not None else "."))

def _timing_step(trace: TraceRecord, spec: ConvSpec | None) -> Step:
  total: TimeStats | None = sums["time_s"] if (sums := totals_of(trace)) else None
  if not total: return _step("timing", "Timings", "timings", "This trace was not timed (--no-time).")
  share = ", ".join(f"{k['name']} {100 * t / total['median']:.0f}%" for k in trace["kernels"] if (t := kernel_time(k)) is not None)
  err = trace["error"]
  rate = f" That is {spec.direct_flops / total['median'] / 1e9:.2f} GFLOP/s of direct-convolution work." if spec is not None else ""
  checked = (f" The output differs from its reference ({err['tolerance_for']}) by at most {err['max_abs']:.2g}." if err else
             " No reference was given, so the outputs were not checked.")
  spread = noisy(dict(total))
  caveat = (f" Beware: the spread (std) is {spread:.1f}x the median, over the {NOISY_SPREAD:.0%} this explorer calls noisy: these runs "
            "were disturbed (a busy machine, a cold cache), so the median says little; time it again before comparing." if spread else "")
  device = trace["env"]["device"]
  span = tm.get("span_s") if (tm := timing_of(trace)) else None
  replayed = (f" Replayed back to back, as tinygrad's JIT runs a schedule, it spans {span['median']*1e3:.3f} ms from the first kernel's "
              f"start to the last one's end: {(span['median'] - total['median'])*1e3:.3f} ms run between the kernels." if span else "")
  return _step("timing", "Timings", "timings",
               f"On {device} the kernels, each timed alone, took {total['median']*1e3:.3f} ms summed (median; {how(total, device)})."
               f"{replayed}{caveat} {share}.{rate}{checked}")

# ***** built-in tours for the seed experiments: two traces side by side *****

# The tours' variants render the host's own target, as a trace from the home page does, so the traces a user already has count; a tour
# asked for another target (?target=cuda) computes its records first, as a kernel page does.
WINO = Variant(algo="winograd", wino_impl="explorer")
BUILTIN_TOURS: dict[str, dict[str, Any]] = {
  "constants": {"title": "Deviceless constants (seed 000)", "preset": "wino8", "a": WINO, "b": replace(WINO, consts="materialized")},
  "fusion": {"title": "Staged vs fused Winograd (seed 003)", "preset": "wino8", "a": WINO, "b": replace(WINO, staging="fused")},
  "winograd": {"title": "Direct vs Winograd", "preset": "small", "a": Variant(algo="direct"), "b": Variant(algo="winograd")},
  "codegen": {"title": "Load sinking and register pressure (seed 004)", "preset": "wino8", "a": Variant(algo="direct"),
              "b": Variant(algo="direct", rewrites=("sink-loads",))},
  "versions": {"title": "tinygrad 0.12 vs 0.14 (the documents' version)", "preset": "small",
               "a": Variant(algo="direct", tinygrad="0.12.0"), "b": Variant(algo="direct")},
}

def _peaks(tr: TraceRecord, target: str) -> list[str]:
  out = []
  for k in tr["kernels"]:
    if (rec := target_record(k, target)) and (p := pressure_of(rec)):
      out.append(f"{rec['name']} {p['max_live']}" + (f" ({regs} registers)" if (regs := _registers(rec)) is not None else ""))
  return out

def identical_kernels(a: TraceRecord, b: TraceRecord) -> dict[int, int]:
  """B's kernels that are A's, kernel for kernel (the same AST, tinygrad's content hash): B's index -> A's."""
  key = ast_key_of
  by_key = {key(k): k["index"] for k in a["kernels"] if key(k)}
  return {k["index"]: by_key[key(k)] for k in b["kernels"] if key(k) in by_key}

def headline(a: TraceRecord, b: TraceRecord, interleaved: InterleavedTiming | None = None) -> list[dict[str, str]]:
  """The comparison's three headline numbers, A -> B: kernels, bytes moved (tinygrad's Estimates), and time: the diff's interleaved
  timing where it was measured (the ratio and its 95% interval, the figure the diff page shows), else each side's own median, timed
  separately (no ratio is claimed from those), or, untimed, linearized uops."""
  ta, tb = a["totals"], b["totals"]
  rows = [{"label": "kernels", "a": str(ta["kernels"]), "b": str(tb["kernels"]), "change": f"{tb['kernels'] - ta['kernels']:+d}"},
          {"label": "bytes moved", "a": fmt_bytes(ta["bytes"]), "b": fmt_bytes(tb["bytes"]),
           "change": f"{tb['bytes'] / ta['bytes']:.2f}x" if ta["bytes"] else "–"}]
  it = interleaved  # the diff's interleaved timing (explorer.analysis.diff), where measured; a ratio has no median where no repeat ran
  if it is not None and it["compared"] and (r := it["ratio"]).get("median") is not None:
    ci = (r["ci_low"], r["ci_high"]) if r.get("ci_low") is not None else None  # no interval in older diffs
    rows.append({"label": f"time, the kernels each alone, interleaved on {it['device']}", "a": f"{it['a_total_s']['median'] * 1e6:.1f} µs",
                 "b": f"{it['b_total_s']['median'] * 1e6:.1f} µs", "change": ratio_words(r["median"], ci)})
  elif (xa := ta["time_s"]) and (xb := tb["time_s"]) and xa["median"]:
    flag = "noisy; " if noisy(dict(xa)) or noisy(dict(xb)) else ""
    rows.append({"label": "time (median, each timed apart)", "a": f"{xa['median'] * 1e6:.1f} µs", "b": f"{xb['median'] * 1e6:.1f} µs",
                 "change": f"no ratio: {flag}timed apart, the diff times them interleaved"})
  else:
    ua, ub = (sum(k["linear_uops"] for k in t["kernels"]) for t in (a, b))
    rows.append({"label": "linearized uops", "a": str(ua), "b": str(ub), "change": f"{ub / ua:.2f}x" if ua else "–"})
  return rows

def same_code(a: KernelRecord, b: KernelRecord, target: str | None) -> bool:
  """Two kernels with the same AST that codegen also made the same (their linear UOps on the tour's target): a custom rewrite such as
  sink-loads changes the order without touching the AST."""
  ra, rb = target_record(a, target) or target_record(a), target_record(b, target) or target_record(b)
  return ra is not None and rb is not None and ra["uops_listing"] == rb["uops_listing"] and ra["source"] == rb["source"]

def compare_tour(kind: str, a: TraceRecord, b: TraceRecord, target: str | None = None, interleaved: InterleavedTiming | None = None) -> list[Step]:
  """A built-in tour: the story of A, the comparison with B, then the story of B, less B's steps about kernels identical to A's (the
  comparison says which: the AST step where the ASTs match, the codegen ones only where codegen made the same code too). target: the
  codegen target the kernel steps speak of (trace_tour). interleaved: the diff's interleaved timing of the pair, where it was measured."""
  ta, tb = a["totals"], b["totals"]
  def label(tr: TraceRecord) -> str:  # a captured program is named by its program, a convolution by its variant
    return program["name"] if tr["spec"] is None and (program := tr["program"]) else Variant.from_dict(dict(tr["variant"])).label()
  def roles(tr: TraceRecord) -> str:  # each kernel's role; a big program's, counted
    if len(tr["kernels"]) <= TOLD_KERNELS: return ", ".join(k["role"] for k in tr["kernels"])
    return ", ".join(f"{n} {role}" for role, n in collections.Counter(k["role"] for k in tr["kernels"]).most_common())
  def side(t: Totals | dict[str, Any], tr: TraceRecord) -> str:
    return (f"{_plural(t['kernels'], 'kernel')} ({roles(tr)}), {_plural(t['copies'], 'copy', 'copies')}, "
            f"{_plural(t['buffers'], 'buffer')}, {si_prefix(t['flops'])}FLOPs, {sum(k['ops']['alu'] for k in tr['kernels'])} ALU uops, "
            f"{sum(k['ops']['loads'] for k in tr['kernels'])} loads")
  heads = headline(a, b, interleaved)
  top = "; ".join(f"{h['label']} {h['a']} -> {h['b']} ({h['change']})" for h in heads)
  text = f"In three numbers, A -> B: {top}. A ({label(a)}): {side(ta, a)}. B ({label(b)}): {side(tb, b)}."
  if (va := a["env"].get("tinygrad")) != (vb := b["env"].get("tinygrad")):
    text += (f" A ran on tinygrad {va}, B on {vb}: the diff below lists, group by group, the codegen passes one of them has and the "
             f"other has not, and rule by rule what fired in one only; the two are not timed against each other (one worker runs one tinygrad).")
  if ta["time_s"] and tb["time_s"] and not (interleaved is not None and interleaved["compared"]):
    text += " Each side was timed on its own: the diff view times them interleaved, for a ratio with its interval."
  kernels = a["kernels"] + b["kernels"]
  asked = (target, "cuda", *b["variant"]["targets"])
  everywhere = [t for t in asked if t and all(target_record(k, t) is not None for k in kernels)]
  if everywhere and (pa := _peaks(a, everywhere[0])) and (pb := _peaks(b, everywhere[0])):
    text += f" Peak live values on {everywhere[0]}: A {', '.join(pa)}; B {', '.join(pb)}."
  same = identical_kernels(a, b)
  coded = {n for n, m in same.items() if same_code(a["kernels"][m], b["kernels"][n], target)}
  if coded:
    which = ", ".join(f"kernel {n} ({b['kernels'][n]['role']})" for n in coded)
    text += (f" B's {which} {'is' if len(coded) == 1 else 'are'} A's, AST for AST and line for line: the tour skips "
             f"{'its' if len(coded) == 1 else 'their'} steps on B's side.")
  if (recoded := sorted(set(same) - coded)):
    which = ", ".join(f"kernel {n}" for n in recoded)
    text += (f" B's {which} {'has' if len(recoded) == 1 else 'have'} A's AST, but codegen made different code: the tour skips only "
             f"{'its' if len(recoded) == 1 else 'their'} AST step on B's side and shows what changed after it.")
  skip = {f"k{n}-{part}" for n in coded for part in ("codegen", "uops", "source")} | {f"k{n}-ast" for n in same}
  first = [dict(s, id=f"a-{s['id']}", side="a") for s in trace_tour(a, target)]
  second = [dict(s, id=f"b-{s['id']}", side="b") for s in trace_tour(b, target) if s["id"] not in skip]
  compare: Step = {"id": "compare", "title": f"{BUILTIN_TOURS[kind]['title']}: A against B", "view": "diff", "text": text, "side": "both",
                   "headline": heads}
  if interleaved is not None and interleaved["compared"] and interleaved["ratio"].get("median") is not None:
    compare["ask"] = ask("faster", "choice", f"Which is faster on {interleaved['device']}, A or B?", faster_of(interleaved),
                         ("A", "B", SAME_TIME))
  else: compare["ask"] = ask("kernels-b", "number", "Predict: how many kernels does B run?", str(tb["kernels"]))
  return [*first, compare, *second]
