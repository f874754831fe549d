"""`kernel-explorer`: trace a convolution from the command line, list presets and targets, serve the web app."""
from __future__ import annotations
import argparse
import dataclasses
import json
import os
import pathlib
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast
from explorer.cli.progress import StepBars

if TYPE_CHECKING:
  from explorer.schema import TraceRecord  # types only: a command's start stays light
from explorer.clocks import how, ratio_words
from explorer.spec import (
  COMPUTE_DEVICES,
  PRESETS,
  STUDY_CI_WIDTH,
  STUDY_COMPILE_REPEATS,
  TILES,
  ConvSpec,
  Knob,
  SpecError,
  Variant,
  device_problem,
  knobs,
  normalize_device,
)
from explorer.stages import STAGES
from explorer.targets import SASS_TARGETS, TARGET_DESCRIPTIONS, TARGETS
from explorer.text import compile_facts, si, table, trace_summary as summary

class UsageError(Exception): pass

class Parser(argparse.ArgumentParser):
  def error(self, message: str) -> None:  # type: ignore[override]
    raise UsageError(message)

def _shape(s: str) -> tuple[int, ...]:
  try: dims = tuple(int(x) for x in s.split(","))
  except ValueError: raise argparse.ArgumentTypeError(f"--shape takes N,CIN,COUT,H,W,K as integers, got {s!r}") from None
  if len(dims) != 6: raise argparse.ArgumentTypeError(f"--shape takes 6 integers N,CIN,COUT,H,W,K, got {len(dims)}")
  return dims

def add_case_args(p: argparse.ArgumentParser) -> None:
  """The flags that pick a (spec, variant): shared by trace and the studies."""
  g = p.add_mutually_exclusive_group()
  g.add_argument("--preset", choices=sorted(PRESETS), help="a named shape (see `kernel-explorer presets`)")
  g.add_argument("--shape", type=_shape, help="N,CIN,COUT,H,W,K")
  p.add_argument("--stride", type=int, default=1)
  p.add_argument("--padding", type=int, default=None, help="default: kernel//2 (keeps the spatial size)")
  p.add_argument("--groups", type=int, default=1)
  p.add_argument("--dtype", choices=("float32", "float16"), default="float32")
  add_variant_args(p)
  p.add_argument("--timeout", type=float, default=600.0, help="seconds before the trace worker is stopped")

def flag_of(name: str, k: Knob) -> str: return k.flag or ("--no-" if k.cli == "negated" else "--") + name.replace("_", "-")

def add_variant_args(p: argparse.ArgumentParser) -> None:
  """One flag per knob of explorer.spec.Variant, from its declaration: its help, choices and default."""
  for name, (default, k) in knobs().items():
    flag = flag_of(name, k)
    if k.cli in ("switch", "negated"): p.add_argument(flag, action="store_true", help=k.cli_help or k.help)
    elif k.cli == "list":
      p.add_argument(flag, default=",".join(default), metavar="NAME[,NAME...]",
                     help=f"{k.help} (comma separated{': ' + ', '.join(k.choices) if k.choices else ''})")
    else: p.add_argument(flag, type=int if k.bounds else str, choices=k.choices, default=default, help=k.help)

def variant_from_args(a: argparse.Namespace) -> dict[str, Any]:
  """The knobs' values as the flags of add_variant_args gave them."""
  out: dict[str, Any] = {}
  for name, (_, k) in knobs().items():
    got = getattr(a, flag_of(name, k).removeprefix("--").replace("-", "_"))
    out[name] = (not got) if k.cli == "negated" else tuple(x.strip() for x in got.split(",") if x.strip()) if k.cli == "list" else got
  return out

def case_from_args(a: argparse.Namespace) -> tuple[ConvSpec, Variant]:
  if a.shape is not None:
    n, cin, cout, h, w, k = a.shape
    spec = ConvSpec(n, cin, cout, h, w, k, a.stride, a.padding, a.groups, a.dtype)
  else:
    base = PRESETS[a.preset or "small"]
    spec = ConvSpec(base.batch, base.cin, base.cout, base.height, base.width, base.kernel, a.stride, a.padding, a.groups, a.dtype)
  v = variant_from_args(a)
  if v["device"] is not None: v["device"] = normalize_device(v["device"])  # CPU:0 is CPU: one computation, one trace id
  if v["device"] is not None and device_problem(v["device"]) is not None:  # the CLI may use any tinygrad device; the server offers only these
    print(f"kernel-explorer: warning: {v['device']} is none of the compute devices {', '.join(COMPUTE_DEVICES)}: it may read or write "
          "files, open sockets or emulate kernels (timings would not be native)", file=sys.stderr)
  if (path := v["rewrite_file"]) is not None:
    if not os.path.isfile(path): raise SpecError(f"--rewrite-file: no such file: {path}")
    v["rewrite_file"] = os.path.abspath(path)
  return spec.validate(), Variant(**v).resolve(spec)

# ***** output *****

def cmd_trace(a: argparse.Namespace) -> int:
  from explorer.tracing.pipeline.run import run_script, run_trace
  if a.script is not None:
    if a.preset or a.shape: raise UsageError("--script traces the script's own tensors: leave out --preset and --shape")
    if not os.path.isfile(a.script): raise SpecError(f"--script: no such file: {a.script}")
    _, variant = case_from_args(a)
    with StepBars(a.quiet) as bars:
      res = run_script(os.path.abspath(a.script), a.script_fn, variant, bars.bar("", STAGES), timeout_s=a.timeout, analysis=a.analysis)
  else:
    if a.script_fn is not None: raise UsageError("--fn names a function of --script")
    spec, variant = case_from_args(a)
    with StepBars(a.quiet) as bars:
      res = run_trace(spec, variant, bars.bar("", STAGES), timeout_s=a.timeout, dump_io=a.dump_io, analysis=a.analysis, here=a.own_process)
  if a.facts:
    from explorer.tracing.enrichments.enrich import add_facts
    with StepBars(a.quiet) as bars: res.trace = add_facts(res.trace, progress=bars.bar("compile facts", ("compile",)), timeout_s=a.timeout)
  print(summary(res.trace))
  if a.roofline:
    from explorer.analysis.roofline import roofline_report
    print(roofline_report(res.trace))
  if a.json:
    with open(a.json, "w") as f: json.dump(res.trace, f, indent=1, default=str)
    print(f"wrote {a.json}", file=sys.stderr)
  return 0 if res.trace["status"] == "ok" or a.accept_partial else 1

def cmd_devices(a: argparse.Namespace) -> int:
  from explorer.analysis.roofline import devices_report
  print(devices_report(probe=a.probe))
  return 0

def cmd_presets(a: argparse.Namespace) -> int:
  print(table(("name", "shape", "FLOPs (direct)"), [(n, p.label(), si(p.direct_flops)) for n, p in PRESETS.items()]))
  return 0

def cmd_targets(a: argparse.Namespace) -> int:
  print(table(("target", "renders as"), list(TARGET_DESCRIPTIONS.items())))
  return 0

def cmd_versions(a: argparse.Namespace) -> int:
  """The tinygrads a trace may run on and where each one's environment stands; --make VERSION (or all) makes it from its lock."""
  from explorer.tracing import versions
  wanted = [e.version for e in versions.environments() if e.state not in ("server", "ready")] if a.make == "all" else [a.make] if a.make else []
  for version in wanted:
    try: versions.make(version, say=lambda line: print(line, file=sys.stderr))
    except (SpecError, versions.EnvironmentFailed) as e:
      print(f"kernel-explorer versions: {e}", file=sys.stderr)
      return 1
  print(table(("tinygrad", "state", "environment"), [(e.version, f"{e.state}: {versions.STATES[e.state]}", e.path or "this one")
                                                     for e in versions.environments()], text_columns=3))
  return 0

def cmd_rewrites(a: argparse.Namespace) -> int:
  from explorer.tracing.pipeline.catalogue import catalogue
  rows = catalogue()
  print(table(("rewrite", "runs on", "what it does"), [(r["usage"], r["point"], r["summary"]) for r in rows], text_columns=3))
  for r in rows if a.source else []: print(f"\n# {r['usage']}\n{r['source']}")
  return 0

def cmd_study(a: argparse.Namespace) -> int:
  from explorer.analysis.study import DEFAULT_PRESETS, markdown, run_studies, study_steps, tile_fits, tile_problem
  from explorer.present.study import document_markdown, document_rows, render_export
  presets = [a.preset] if a.preset else [p.strip() for p in a.presets.split(",") if p.strip()] if a.presets else list(DEFAULT_PRESETS[a.kind])
  if bad := [p for p in presets if p not in PRESETS]: raise SpecError(f"unknown preset(s) {', '.join(bad)}; known: {', '.join(PRESETS)}")
  if a.compile_repeats < 0: raise SpecError(f"--compile-repeats must be 0 or more; got {a.compile_repeats}")
  if a.ci_width < 0: raise SpecError(f"--ci-width must be positive, or 0 for exactly --repeats; got {a.ci_width}")
  if (why := tile_problem(a.tile, [(p, PRESETS[p]) for p in presets])) is not None: raise SpecError(f"--{why}")
  if a.tile and (other := [p for p in presets if not tile_fits(a.tile, PRESETS[p])]):
    print(f"--tile {a.tile} applies to {', '.join(p for p in presets if p not in other)}; {', '.join(other)} keep F(4,r)", file=sys.stderr)
  tinygrads = [v.strip() for v in a.tinygrad.split(",") if v.strip()] if a.tinygrad else [None]
  for v in tinygrads:  # each version's study: its own traces and timing (one worker runs one tinygrad), its own verdicts
    if v is not None: Variant(tinygrad=v).validate()
  ok = True
  for v in tinygrads:
    with StepBars(a.quiet) as bars:
      progress = bars.bar(f"study {a.kind}" + (f" on tinygrad {v}" if v else ""), study_steps(a.kind, [PRESETS[p] for p in presets]))
      study = run_studies(a.kind, [(p, PRESETS[p].validate()) for p in presets], repeats=a.repeats, warmup=a.warmup, tile=a.tile,
                          device=a.device, progress=progress, timeout_s=a.timeout, ci_width=a.ci_width or None, budget_s=a.budget_s,
                          compile_repeats=a.compile_repeats, tinygrad=v)
    for case in study["cases"]: print(markdown(case))
    print(document_markdown(study))
    suffix = f"-{v}" if len(tinygrads) > 1 else ""
    path = (a.json.removesuffix(".json") + suffix + ".json") if a.json else f"study-{a.kind}{suffix}.json"
    with open(path, "w") as f: json.dump(study, f, indent=1, default=str)
    print(f"wrote {path}", file=sys.stderr)
    if a.html:
      html = a.html.removesuffix(".html") + suffix + ".html"
      status = {"id": pathlib.Path(html).stem, "label": f"{a.kind}: {', '.join(presets)}", "request": {"argv": sys.argv[1:]}, "result": study,
                "table": document_rows(study)}
      pathlib.Path(html).write_text(render_export(status, f"kernel-explorer study on {socket.gethostname()}"))
      print(f"wrote {html}", file=sys.stderr)
    ok = ok and all(r["status"] == "ok" for case in study["cases"] for r in case["rows"])
  return 0 if ok else 1

# ***** diff: what A and B name *****

def load_side(arg: str, target: str = "cuda", db: str | None = None, timeout_s: float = 600.0,
              progress: Any = None) -> tuple[TraceRecord, dict[str, bytes], str]:
  """A trace from a JSON file, a quoted flag set (traced now, without timing: the diff re-times), or a stored trace id.
  Returns (trace, its rewrite blobs by key as TraceResult.blobs has them: none for a file, what it was)."""
  import shlex
  if os.path.isfile(arg):
    from explorer.store import load_trace_file
    return load_trace_file(arg), {}, f"file {arg}"
  if arg.lstrip().startswith("-"):
    from explorer.tracing.pipeline.run import run_trace
    p = Parser(prog="kernel-explorer diff (flag set)")
    add_case_args(p)
    tokens = shlex.split(arg)
    a = p.parse_args(tokens)
    def given(flag: str) -> bool: return any(t == flag or t.startswith(f"{flag}=") for t in tokens)
    if not given("--target"): a.target = target
    elif target not in a.target.split(","): a.target += f",{target}"
    a.no_time = True
    spec, variant = case_from_args(a)
    res = run_trace(spec, variant, progress, timeout_s=a.timeout if given("--timeout") else timeout_s)
    return res.trace, res.blobs, f"flags {arg.strip()}"
  return _load_stored(arg, target, db)

def _load_stored(trace_id: str, target: str, db: str | None) -> tuple[TraceRecord, dict[str, bytes], str]:
  """A stored trace with the rewrite blobs its records on `target` address (what their analyses are read from)."""
  from explorer.store import find_stored
  store, trace, blob = find_stored(trace_id, db, f"{trace_id!r} is not a trace file, not a flag set (those start with -)")
  return trace, stored_blobs(store, trace_id, trace, blob, target), f"stored trace {trace_id}"

def stored_blobs(store: Any, trace_id: str, trace: TraceRecord, blob: bytes | None, target: str) -> dict[str, bytes]:
  """A stored trace's rewrite blobs by key (TraceResult.blobs): its own, and those its records on `target` address."""
  from explorer.tracing.enrichments.enrich import blob_key
  keys = {key for k in trace["kernels"] if target in (k.get("targets") or {}) and (key := blob_key(k, target)) is not None}
  blobs = {key: b for key in keys if (b := store.get_rewrites(trace_id, key)) is not None}
  return {"": blob, **blobs} if blob is not None else blobs

def cmd_diff(a: argparse.Namespace) -> int:
  from concurrent.futures import ThreadPoolExecutor
  from explorer.analysis.diff import DIFF_STEPS, full_diff, summary as diff_summary
  with StepBars(a.quiet) as bars:
    with ThreadPoolExecutor(2) as pool:  # flag sets trace in two workers at once
      sides = ((a.a, bars.bar("A", STAGES)), (a.b, bars.bar("B", STAGES)))
      (ta, ba, _), (tb, bb, _) = pool.map(lambda side: load_side(side[0], a.target, a.db, a.timeout, side[1]), sides)
    d = full_diff(ta, tb, ba, bb, a.target, time=not a.no_time, repeats=a.repeats, warmup=a.warmup, timeout_s=a.timeout,
                  progress=bars.bar("A vs B", DIFF_STEPS))
  print(diff_summary(d))
  if a.json:
    with open(a.json, "w") as f: json.dump(d, f, indent=1, default=str)
    print(f"wrote {a.json}", file=sys.stderr)
  return 0 if ta["status"] == tb["status"] == "ok" else 1

def cmd_enrich(a: argparse.Namespace) -> int:
  """Fill in what a trace computes only when asked: other targets' records (rebuilt from the rewrite blob), the analyses (line maps,
  live values, loop splits, program spec) and compile facts. A trace file keeps no rewrite blob: its convolution is traced again for one."""
  from explorer.present.export import load
  from explorer.stages import ENRICH_ANALYSIS, ENRICH_FACTS
  from explorer.tracing import versions
  from explorer.tracing.enrichments import enrich
  from explorer.tracing.pipeline.run import ran_here
  trace, trace_id, blob, store = load(a.source, a.db)
  targets = [t.strip() for t in a.target.split(",") if t.strip()] if a.target else None
  if unknown := [t for t in targets or () if t not in TARGETS]:
    raise SpecError(f"--target: unknown {', '.join(unknown)}; known: {', '.join(TARGETS)}")
  if a.sass:
    targets, a.facts = targets or ["cuda"], True
    if other := [t for t in targets if t not in SASS_TARGETS]:
      raise SpecError(f"--sass: SASS is for {' and '.join(SASS_TARGETS)}, not {', '.join(other)}")
  try: kernels = [int(n) for n in a.kernel.split(",")] if a.kernel else None
  except ValueError: raise UsageError(f"--kernel takes kernel numbers, N[,N...], got {a.kernel!r}") from None
  if missing := [n for n in kernels or () if not 0 <= n < len(trace["kernels"])]:
    raise SpecError(f"--kernel: the trace has kernels 0 to {len(trace['kernels']) - 1}, not {', '.join(map(str, missing))}")
  todo = {t: ns for t in targets or () if (ns := enrich.lacking(trace, t, kernels))}
  source = trace  # what the analyses are read from: the trace itself, or (a file) the same kernels traced again with their rewrite log
  blobs: dict[str, bytes] = {"": blob} if blob is not None else {}
  if (todo or a.analysis) and blob is None: source, blobs = _traced_again(trace, a.source, a.timeout, a.quiet)
  with StepBars(a.quiet) as bars:
    for t, ns in todo.items():
      recs, key, blobs[key] = enrich.compute_target(source, blobs[""], t, ns, bars.bar(f"{t} records", ("render",)), timeout_s=a.timeout)
      if store is not None: store.put_target_records(trace_id, t, recs, key, blobs[key], ran_here()["by"])
      trace, source = enrich.with_target(trace, t, recs), enrich.with_target(source, t, recs)
    if a.analysis:
      jobs = enrich.analysis_jobs(source, targets, kernels)
      for key in {j["blob"] for j in jobs if j["blob"] and j["blob"] not in blobs}:
        if store is None or (b := store.get_rewrites(trace_id, key)) is None: raise SpecError(f"the trace keeps no rewrite blob {key!r} to analyse")
        blobs[key] = b
      got = enrich.compute_analysis(jobs, blobs, bars.bar("analyses", ("analysis",)), timeout_s=a.timeout, tinygrad=versions.recorded(source))
      if store is not None: store.put_enrichments(trace_id, ENRICH_ANALYSIS, got)
      trace = enrich.with_analysis(trace, got)
    if a.facts:
      got = enrich.compute_facts(enrich.facts_jobs(trace, targets, kernels), bars.bar("compile facts", ("compile",)), timeout_s=a.timeout)
      if store is not None: store.put_enrichments(trace_id, ENRICH_FACTS, got)
      trace = enrich.with_facts(trace, got)
  print(enrich_summary(trace))
  if a.sass: print(sass_summary(trace, targets or []))
  if store is None:
    with open(path := a.output or a.source, "w") as f: json.dump(trace, f, indent=1, default=str)
    print(f"wrote {path}", file=sys.stderr)
  elif a.output:
    with open(a.output, "w") as f: json.dump(trace, f, indent=1, default=str)
    print(f"wrote {a.output}", file=sys.stderr)
  return 0

def sass_summary(trace: TraceRecord, targets: list[str]) -> str:
  """Per kernel and target, its SASS in one line: instructions, peak live registers against ptxas', spills, the commonest opcodes."""
  from explorer.schema import target_records
  out = []
  for k in trace["kernels"]:
    for t in targets:
      rec: dict[str, Any] = dict(target_records(k).get(t) or {})
      facts: dict[str, Any] = dict(rec.get("compile") or {})
      if (s := facts.get("sass")) is None:
        out.append(f"{t} kernel {k['index']}: no SASS ({facts.get('sass_note') or facts.get('message') or 'no record'})")
        continue
      mix = ", ".join(f"{op} {n}" for op, n in list(s["mix"].items())[:5])
      out.append(f"{t} kernel {k['index']} {k['name']}: {s['count']} SASS instructions, peak {s['peak_live']} of {s['registers']} registers live, "
                 f"{s['spills']} spill instructions; {mix}")
  return "\n".join(out)

def enrich_summary(trace: TraceRecord) -> str:
  """What a trace has now: compile facts per target, then per target its records and analyses (peak live values)."""
  out = [f"{t} compile facts: " + ", ".join(facts) for t, facts in compile_facts(trace).items()] or ["no compile facts"]
  for t in dict.fromkeys(t for k in trace["kernels"] for t in (k.get("targets") or {})):
    recs = [(k.get("targets") or {}).get(t) for k in trace["kernels"]]
    peaks = [str(pressure["max_live"]) for r in recs if r and (pressure := r.get("pressure"))]
    out.append(f"{t}: records of {sum(1 for r in recs if r)} of {len(recs)} kernels" + (f"; peak live values {', '.join(peaks)}" if peaks else ""))
  return "\n".join(out)

def cmd_opts(a: argparse.Namespace) -> int:
  """A kernel of a stored trace scheduled by hand: tinygrad's opts applied by its own apply_opts, the result beside the original."""
  from explorer.present.export import load
  from explorer.schema import host_target, target_records
  from explorer.spec import hand_opts
  from explorer.tracing.enrichments.enrich import add_analysis
  from explorer.tracing.enrichments.handopts import Unschedulable, schedule
  from explorer.tracing.workers.process import WorkerFailed
  trace, trace_id, blob, store = load(a.source, a.db)
  if not 0 <= a.kernel < len(trace["kernels"]): raise SpecError(f"--kernel: the trace has kernels 0 to {len(trace['kernels']) - 1}")
  target, opts = a.target or host_target(trace["kernels"][a.kernel]), hand_opts(a.opt, a.start)
  if blob is None: trace, blobs = _traced_again(trace, a.source, a.timeout, a.quiet)
  else: blobs = stored_blobs(store, trace_id, trace, blob, target)
  with StepBars(a.quiet) as bars:
    trace = add_analysis(trace, blobs, [target], [a.kernel], timeout_s=a.timeout)  # the original's peak live values, beside the new
    kernel = trace["kernels"][a.kernel]
    try: got = schedule(trace, blobs[""], a.kernel, target, opts, a.start, not a.no_time, bars.bar("opts", ("codegen", "compile", "timing")),
                        a.timeout)
    except Unschedulable as e: raise SpecError(str(e)) from None
    except WorkerFailed as e:
      if str(e).startswith("OptRefused: "): raise SpecError(f"tinygrad refused {str(e).removeprefix('OptRefused: ')}") from None
      raise
  print(opts_summary(dict(target_records(kernel).get(target) or {}), got))
  if a.json:
    with open(a.json, "w") as f: json.dump(got, f, indent=1, default=str)
    print(f"wrote {a.json}", file=sys.stderr)
  return 0

def _traced_again(trace: TraceRecord, source: str, timeout_s: float, quiet: bool) -> tuple[TraceRecord, dict[str, bytes]]:
  """A trace file keeps no rewrite log: a convolution's is made again by tracing its spec and variant (the same tinygrad makes the same
  kernels: checked by their AST keys); a captured program's cannot be. Returns that trace and its rewrite blobs (TraceResult.blobs)."""
  from explorer.tracing.pipeline.run import run_trace
  if (spec := trace.get("spec")) is None or trace.get("variant") is None:
    raise SpecError(f"{source} is a trace file of a captured program, which keeps no rewrite log to rebuild its kernels from: store it "
                    "(Trace.store()) and pass its id")
  if not quiet: print(f"kernel-explorer: {source} keeps no rewrite log: tracing {trace.get('label')} again to rebuild its kernels", file=sys.stderr)
  variant = dataclasses.replace(Variant.from_dict(trace["variant"]), time=False)  # its kernels, not its timing
  with StepBars(quiet) as bars: again = run_trace(ConvSpec.from_dict(spec), variant, bars.bar("", STAGES), timeout_s=timeout_s)
  if [k.get("ast_key") for k in again.trace["kernels"]] != [k.get("ast_key") for k in trace["kernels"]]:
    raise SpecError(f"tracing {source} again made other kernels (another tinygrad or explorer version?): pass a stored trace id")
  return again.trace, again.blobs

def opts_summary(own: dict[str, Any], got: dict[str, Any]) -> str:
  """The hand schedule beside the kernel's own record: a table, then the time ratio where it was timed."""
  rec = got["record"]
  def regs(r: dict[str, Any], also: dict[str, Any] | None = None) -> str:  # also: facts compiled beside it, where the record keeps none
    n = (r.get("compile") or {}).get("registers")
    return str(n) if n is not None else str(m) if (m := (also or {}).get("registers")) is not None else "—"
  rows = [("kernel", own.get("name", "—"), rec["name"]), ("opts", ", ".join(own.get("opts") or []) or "none", ", ".join(got["opts"]) or "none"),
          ("global x local", f"{own.get('global_size')} x {own.get('local_size')}", f"{rec['global_size']} x {rec['local_size']}"),
          ("linear uops", own.get("linear_uops", "—"), rec["linear_uops"]),
          ("peak live values", (own.get("pressure") or {}).get("max_live", "—"), (rec.get("pressure") or {}).get("max_live", "—")),
          ("registers", regs(own, got.get("original_compile")), regs(rec))]
  out = [f"{got['target']}: scheduled by hand", table(("", "original", "by hand"), rows)]
  if (t := got.get("timing")) is not None:
    clock = f", {how(t['a_s'], t['device'])}" if t.get("a_s") else ""
    out.append(f"time on {t['device']}, the original and the hand schedule interleaved in this run ({t['repeats']} pairs{clock}): "
               f"{ratio_words(t['ratio'], (t['ci_low'], t['ci_high']), 'the hand schedule', 'the original')}; medians "
               f"{t['a_median_s'] * 1e3:.4f} ms (the original) and {t['b_median_s'] * 1e3:.4f} ms (by hand)")
  else: out.append("not timed (only the trace's own target runs here, on its device; --no-time skips it)")
  if got.get("next"): out.append(f"tinygrad would let BEAM try next: {' '.join(got['next'])}")
  def axes(xs: list[Any]) -> str: return ", ".join(f"{x['axis']}:{x['size']} {x['kind']}" for x in xs) or "none"
  if got.get("axes"): out.append(f"axes (AXIS:size kind) before any opt: {axes(got['axes'])}; after these opts: {axes(got.get('axes_after') or [])}")
  return "\n".join(out)

def write_out(text: str, output: str | None, default: str, hint: str = "") -> None:
  """text to `output` (- for stdout), else to the default path here, saying where on stderr."""
  if output == "-": sys.stdout.write(text); return
  with open(path := output or default, "w") as f: f.write(text)
  print(f"wrote {path}{hint.format(path=path)}", file=sys.stderr)

def cmd_export(a: argparse.Namespace) -> int:
  from explorer.analysis.roofline import export_block
  from explorer.present.export import export_file
  say = (lambda m: print(f"  {m}", file=sys.stderr, flush=True)) if not a.quiet else (lambda m: None)
  write_out(export_file(a.source, a.format, a.db, a.timeout, say=say, roofline=export_block), a.output,
            f"{a.source.rsplit('/', 1)[-1].removesuffix('.json')}.{a.format}")
  return 0

def cmd_repro(a: argparse.Namespace) -> int:
  from explorer.present.export import load
  from explorer.present.repro import repro_script
  trace, trace_id, _, _ = load(a.source, a.db)
  write_out(repro_script(trace, trace_id), a.output, f"repro-{trace_id}.py", ": run it with python {path}")
  return 0

def cmd_serve(a: argparse.Namespace) -> int:
  from explorer.settings import SETTINGS, Settings
  from explorer.store import Store, StoreError, wal
  from explorer.web.serving import serve
  try: db = a.db or Settings.load().db  # the store the server will open: --db, else KERNEL_EXPLORER_DB, else the default
  except ValueError as e: raise UsageError(str(e)) from None
  try:
    wal.check(db)  # before any connection: SQLite replays a log beside the file, whoever's, as it opens it
    Store(db).check_usable()  # a store that cannot be opened, read or written says so in one line before anything serves
  except StoreError as e: raise UsageError(str(e)) from None
  try: serve(a.host, a.port, db, **{st.name: getattr(a, f"set_{st.name}") for st in SETTINGS if hasattr(a, f"set_{st.name}")})
  except ValueError as e: raise UsageError(str(e)) from None  # a KERNEL_EXPLORER_* variable that does not parse
  return 0

def cmd_worker(a: argparse.Namespace) -> int:
  from explorer.queue.protocol import BEAT_TTL_S, NEEDS_EXTRA, QueueUnavailable
  from explorer.settings import Settings
  try:
    from explorer.queue.client import QueueClient
    from explorer.queue.worker import detect_devices, serve
  except ImportError: raise UsageError(NEEDS_EXTRA) from None
  try: url = Settings.load(queue=a.queue).queue
  except ValueError as e: raise UsageError(str(e)) from None
  if not url: raise UsageError("worker needs the job queue's URL: --queue redis://HOST:6379/0 (or KERNEL_EXPLORER_QUEUE)")
  try: a.device = [normalize_device(d) for d in a.device]
  except SpecError as e: raise UsageError(f"--device: {e}") from None
  for d in a.device:
    if (why := device_problem(d)) is not None: raise UsageError(f"--device: {why}")
  if a.concurrency < 1: raise UsageError("--concurrency must be at least 1")
  try: QueueClient(url).ping()
  except QueueUnavailable as e: raise UsageError(str(e)) from None
  return serve(url, a.device or detect_devices(), a.concurrency, a.name, a.burst, a.heartbeat_ttl or BEAT_TTL_S)

def cmd_token(a: argparse.Namespace) -> int:
  import secrets
  print(secrets.token_urlsafe(24))  # 32 characters: export KERNEL_EXPLORER_TOKEN=$(kernel-explorer token)
  return 0

def _not_negative(kind: type) -> Callable[[str], object]:
  def parse(raw: str) -> object:
    try: value = kind(raw)
    except ValueError: raise argparse.ArgumentTypeError(f"expected a {kind.__name__}, got {raw!r}") from None
    if kind is not str and value < 0: raise argparse.ArgumentTypeError(f"must not be negative, got {raw!r}")
    return value
  return parse

SECRET_OR_SHARED = ("token", "queue_secret", "db")  # secrets only from the environment (flags show in ps); --db is serve's own flag

def add_settings_flags(p: argparse.ArgumentParser) -> None:
  """One flag per setting of explorer.settings (--max-queue N for KERNEL_EXPLORER_MAX_QUEUE); a flag wins over the environment."""
  from explorer.settings import ENV_PREFIX, SETTINGS
  g = p.add_argument_group("limits and settings (each also an environment variable; see docs/reference/settings.md)")
  for st in SETTINGS:
    if st.name in SECRET_OR_SHARED: continue
    flag, kind = f"--{st.name.replace('_', '-')}", st.kind
    g.add_argument(flag, dest=f"set_{st.name}", type=_not_negative(kind), default=None, metavar=kind.__name__.upper(),
                   help=f"{st.help} [{ENV_PREFIX}{st.name.upper()}, default {st.default}]".replace("%", "%%"))

def _heartbeat_ttl(s: str) -> float:
  try: ttl = float(s)
  except ValueError: raise argparse.ArgumentTypeError(f"--heartbeat-ttl takes seconds, got {s!r}") from None
  if not 2 <= ttl <= 300: raise argparse.ArgumentTypeError(f"--heartbeat-ttl is 2 to 300 seconds, got {s}")
  return ttl

def build_parser(settings_flags: bool = True) -> argparse.ArgumentParser:
  """settings_flags: serve's flag per setting (which loads pydantic-settings: a sixth of a second that a trace waits for otherwise)."""
  p = Parser(prog="kernel-explorer", description=__doc__)
  sub = p.add_subparsers(dest="cmd", required=True, parser_class=Parser)
  t = sub.add_parser("trace", help="trace one convolution (or, with --script, any tinygrad program) through tinygrad's pipeline")
  add_case_args(t)
  t.add_argument("--script", metavar="PATH.py", help="trace what a tinygrad script realizes (every realize, as one program trace: "
                 "each kernel with the model lines that made it) instead of a convolution; it runs in a worker with the usual limits "
                 "(CLI only: the server never runs user code)")
  t.add_argument("--fn", dest="script_fn", metavar="NAME", help="with --script: call the script's function NAME() instead of running it as __main__")
  t.add_argument("--json", metavar="PATH", help="write the whole trace as JSON")
  t.add_argument("--accept-partial", action="store_true", help="exit 0 for a partial trace too (one whose stage failed: it is printed, "
                 "written and stored all the same; by default its exit status is 1)")
  t.add_argument("--dump-io", metavar="DIR", help="write input, weight and output as .npy files")
  t.add_argument("--quiet", action="store_true", help="no progress on stderr")
  t.add_argument("--roofline", action="store_true", help="also print each kernel against the device's peak FLOP/s and bandwidth")
  t.add_argument("--facts", action="store_true", help="also compile every kernel for every target now (registers, spills, occupancy, "
                 "disassembly), with this machine's compilers; by default they are computed when a page or `enrich` asks")
  t.add_argument("--analysis", action="store_true", help="also analyse every record now (line maps, live values, loop splits, "
                 "program spec: in the trace's processes); by default when a page or `enrich --analysis` asks")
  t.set_defaults(fn=cmd_trace)
  en = sub.add_parser("enrich", help="fill in what a trace computes only when asked: other targets' records, analyses, compile facts")
  en.add_argument("source", metavar="ID|JSON_FILE", help="a stored trace id (kept in the store) or a trace JSON file (written back; a "
                  "convolution's file is traced again for the rewrite log that targets and analyses are rebuilt from)")
  en.add_argument("--target", metavar="NAME[,NAME...]", help="these targets (rendered first where the trace lacks them); default: every "
                  "target the trace has")
  en.add_argument("--analysis", action="store_true", help="each record's line map, live values, loop splits and program spec")
  en.add_argument("--facts", action="store_true", help="compile facts of each kernel on those targets")
  en.add_argument("--sass", action="store_true", help="SASS with lines and live registers (part of the CUDA and PTX compile facts: "
                  "--facts on those targets, default cuda), summed up per kernel")
  en.add_argument("--kernel", metavar="N[,N...]", help="only these kernels (default: all)")
  en.add_argument("-o", "--output", metavar="PATH", help="also (a trace file: instead) write the enriched trace JSON here")
  en.add_argument("--db", default=None, help="SQLite file of stored traces (for trace ids)")
  en.add_argument("--timeout", type=float, default=600.0, help="seconds for each worker")
  en.add_argument("--quiet", action="store_true", help="no progress on stderr")
  en.set_defaults(fn=cmd_enrich)
  op = sub.add_parser("opts", help="schedule a kernel by hand: tinygrad's opts (UPCAST:0:4...) applied to a stored trace's kernel")
  op.add_argument("source", metavar="ID|JSON_FILE", help="a stored trace id (its rewrite blob rebuilds the kernel) or a convolution's trace "
                  "JSON file (traced again for its rewrite log)")
  op.add_argument("--kernel", type=int, default=0, metavar="N", help="the kernel (default 0)")
  op.add_argument("--target", metavar="NAME", help="a render target (default: the trace's own, which is also timed against the original)")
  op.add_argument("--opt", action="append", default=[], metavar="OP:AXIS:ARG", help="an opt to apply, in order (repeat it): UPCAST:0:4, LOCAL:1:8")
  op.add_argument("--from", dest="start", choices=("current", "none", "heuristic"), default="current",
                  help="the opts before --opt: the kernel's own on the target, none, or tinygrad's heuristic's (default current)")
  op.add_argument("--no-time", action="store_true", help="do not time it against the original")
  op.add_argument("--json", metavar="PATH", help="write the result (the record, the next opts, the timing) as JSON")
  op.add_argument("--db", default=None, help="SQLite file of stored traces")
  op.add_argument("--timeout", type=float, default=600.0, help="seconds for the worker")
  op.add_argument("--quiet", action="store_true", help="no progress on stderr")
  op.set_defaults(fn=cmd_opts)
  sub.add_parser("presets", help="list the named shapes").set_defaults(fn=cmd_presets)
  sub.add_parser("targets", help="list the render targets").set_defaults(fn=cmd_targets)
  vs = sub.add_parser("versions", help="list the tinygrad versions a trace may run on, and make their environments")
  vs.add_argument("--make", metavar="VERSION", help="make this version's environment from its hash-checked lock (again, if it is there), "
                  "or every one not ready: all")
  vs.set_defaults(fn=cmd_versions)
  rw = sub.add_parser("rewrites", help="list the custom codegen rewrites a trace may add (--rewrite)")
  rw.add_argument("--source", action="store_true", help="also print each one's PatternMatcher and functions")
  rw.set_defaults(fn=cmd_rewrites)
  dv = sub.add_parser("devices", help="list the tinygrad devices this host can open, and the default")
  dv.add_argument("--probe", action="store_true", help="measure each device's FP32 FLOP/s and bandwidth (refreshes the cache)")
  dv.set_defaults(fn=cmd_devices)
  st = sub.add_parser("study", help="redo a seed experiment: constants (seed 000) or fusion (seed 003)")
  st.add_argument("kind", choices=("constants", "fusion"))
  st.add_argument("--presets", default=None, metavar="NAME[,NAME...]",
                  help="the cases (default: the document's: small,medium,large,k5 for constants; wino8,wino16,wino32 for fusion)")
  st.add_argument("--preset", choices=sorted(PRESETS), default=None, help="one case (the same as --presets NAME)")
  st.add_argument("--tile", choices=TILES, default=None,
                  help="the explorer's tile, for the cases whose kernel it fits (F(m,r): r x r); the other cases, and the default: F(4,r)")
  st.add_argument("--repeats", type=int, default=20, help="timed repeats (the minimum, with --ci-width)")
  st.add_argument("--ci-width", type=float, default=STUDY_CI_WIDTH, metavar="W",
                  help="keep sampling past --repeats until every B/A ratio's 95%% interval is narrower than W times the ratio, or "
                       "--budget-s runs out (default: %(default)s; 0: exactly --repeats)")
  st.add_argument("--budget-s", type=float, default=300.0, help="time budget of the adaptive sampling per case, in seconds")
  st.add_argument("--compile-repeats", type=int, default=STUDY_COMPILE_REPEATS, metavar="N",
                  help="after the run times, compile every variant's kernel sources N more times, interleaved, for compile time's interval "
                       "(default: %(default)s; 0: compile time from the traces only, without an interval)")
  st.add_argument("--warmup", type=int, default=3)
  st.add_argument("--device", default=None)
  st.add_argument("--timeout", type=float, default=1800.0)
  st.add_argument("--json", metavar="PATH", help="default: study-KIND.json")
  st.add_argument("--html", metavar="PATH", help="also write the study as one offline HTML file (tables and plots, as the web page shows it)")
  st.add_argument("--tinygrad", metavar="V[,V...]", help="run the study on these tinygrads, each in its environment (default: this one; "
                  "kernel-explorer versions): each one's cases, verdicts and files (study-KIND-V.json)")
  st.add_argument("--quiet", action="store_true")
  st.set_defaults(fn=cmd_study)
  df = sub.add_parser("diff", help="diff two variants: kernels matched by role and data flow, buffers, sources, timing, outputs")
  df.add_argument("a", metavar="A", help="a trace JSON file, a quoted flag set (\"--preset wino8 --algo winograd ...\") or a stored trace id")
  df.add_argument("b", metavar="B", help="the same, for the other side")
  df.add_argument("--target", choices=TARGETS, default="cuda", help="the source to diff")
  df.add_argument("--json", metavar="PATH", help="write the whole diff as JSON")
  df.add_argument("--no-time", action="store_true", help="skip the interleaved re-timing")
  df.add_argument("--repeats", type=int, default=20)
  df.add_argument("--warmup", type=int, default=3)
  df.add_argument("--db", default=None, help="SQLite file of stored traces (for trace ids)")
  df.add_argument("--timeout", type=float, default=600.0, help="seconds for each worker")
  df.add_argument("--quiet", action="store_true", help="no progress on stderr")
  df.set_defaults(fn=cmd_diff)
  ex = sub.add_parser("export", help="export a stored trace or a trace JSON file as one self-contained HTML file (or JSON)")
  ex.add_argument("source", metavar="ID|JSON_FILE", help="a stored trace id or a trace JSON file")
  ex.add_argument("--format", choices=("html", "json"), default="html")
  ex.add_argument("-o", "--output", metavar="PATH", help="default: ID.html (or .json) here; - for stdout")
  ex.add_argument("--db", default=None, help="SQLite file of stored traces (for trace ids)")
  ex.add_argument("--timeout", type=float, default=600.0, help="seconds for the worker that expands graphs")
  ex.add_argument("--quiet", action="store_true", help="no progress on stderr")
  ex.set_defaults(fn=cmd_export)
  rp = sub.add_parser("repro", help="write a standalone script that reproduces a trace with tinygrad alone (to file in tinygrad's tracker)")
  rp.add_argument("source", metavar="ID|JSON_FILE", help="a stored trace id or a trace JSON file")
  rp.add_argument("-o", "--output", metavar="PATH", help="default: repro-ID.py here; - for stdout")
  rp.add_argument("--db", default=None, help="SQLite file of stored traces (for trace ids)")
  rp.set_defaults(fn=cmd_repro)
  wk = sub.add_parser("worker", help="run the jobs of servers started with --queue on this machine's devices (RQ over Redis)")
  wk.add_argument("--queue", metavar="URL", help="the job queue: redis://[:PASSWORD@]HOST:6379/0 [KERNEL_EXPLORER_QUEUE; keep a password "
                  "there, out of ps]")
  wk.add_argument("--device", action="append", default=[], metavar="DEVICE",
                  help="a device this worker offers (repeatable; default: every device this machine opens, best first)")
  wk.add_argument("--concurrency", type=int, default=1, metavar="N", help="worker processes (each runs one job at a time)")
  wk.add_argument("--name", default=None, help="the worker's name in traces and logs (default HOST.PID)")
  wk.add_argument("--burst", action="store_true", help="exit once the queues are empty")
  wk.add_argument("--heartbeat-ttl", type=_heartbeat_ttl, default=None, metavar="SECONDS",
                  help="a server takes this worker as gone this long after its last heartbeat (it died) and retries its job "
                       "(default: explorer.queue.protocol.BEAT_TTL_S, 12)")
  wk.set_defaults(fn=cmd_worker)
  sub.add_parser("token", help="print a fresh access token for KERNEL_EXPLORER_TOKEN (32 random characters)").set_defaults(fn=cmd_token)
  s = sub.add_parser("serve", help="serve the web app")
  s.add_argument("--host", default="127.0.0.1")
  s.add_argument("--port", type=int, default=8000)
  s.add_argument("--db", default=None, help="SQLite file for stored traces")
  if settings_flags: add_settings_flags(s)
  s.set_defaults(fn=cmd_serve)
  return p

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

def stop_on_signal(signum: int, frame: object) -> None:
  """Every running worker's process group is killed before the command exits (its `finally` blocks run too)."""
  from explorer.tracing.workers.process import stop_all
  stop_all()
  raise SystemExit(128 + signum)

def main(argv: Sequence[str] | None = None) -> int:
  before = {sig: signal.signal(sig, stop_on_signal) for sig in STOP_SIGNALS} if threading.current_thread() is threading.main_thread() else {}
  try: code = _run(argv)  # `serve`: uvicorn takes the signals over while it runs, then gives them back
  finally:
    for sig, handler in before.items(): signal.signal(sig, handler)
    # the process is this command (a caller passing argv may still hold pools of its own); no workers module loaded: no pool ran
    workers = sys.modules.get("explorer.tracing.workers.process") if argv is None else None
    if workers is not None: workers.stop_own_resource_tracker()
  # a command that traced in its own process ends as a worker does, without the interpreter's teardown of what it traced
  if workers is not None: workers.exit_now(code, join_threads=True)
  return code

def _run(argv: Sequence[str] | None) -> int:
  from explorer.tracing.workers.process import WorkerFailed
  args = sys.argv[1:] if argv is None else list(argv)
  try:
    a = build_parser(settings_flags=not args or args[0] in ("serve", "-h", "--help")).parse_args(args)
    a.own_process = argv is None  # the process is this command, which ends with it: a trace may run in it (run_trace's `here`)
    return cast(int, a.fn(a))
  except (UsageError, SpecError, argparse.ArgumentTypeError) as e:  # every refusal: one line (a message may quote a file name or its data)
    print(f"kernel-explorer: {joined_lines(e)}", file=sys.stderr)
    return 2
  except WorkerFailed as e:
    print(f"kernel-explorer: trace failed: {joined_lines(e)}", file=sys.stderr)
    return 1

def joined_lines(e: BaseException) -> str: return " ".join(str(e).splitlines())

if __name__ == "__main__": sys.exit(main())
