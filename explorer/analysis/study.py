"""The seed studies as one command each: several variants traced (op counts, codegen) and then timed interleaved in ONE worker,
so that their ratios hold on a noisy machine.

  constants  seed 000: symbolic ("deviceless") vs materialized Winograd constants
  fusion     seed 003: staged vs fused vs single (and tinygrad's builtin) Winograd
"""
from __future__ import annotations
import dataclasses
import statistics
from collections.abc import Callable, Sequence
from typing import Any, Literal, cast
from explorer import stats
from explorer.schema import Claim, Comparison, CountComparison, StudyCase, StudyResult, StudyRow, TraceRecord, VariantTiming, ast_key_of, setting_of
from explorer.spec import STUDY_COMPILE_REPEATS, ConvSpec, SpecError, Variant
from explorer.stages import Progress
from explorer.tinygrads import TINYGRAD
from explorer.tracing.pipeline.run import device_env, run_trace
from explorer.tracing.workers.process import call_in_worker

STUDY_VARIANTS: dict[str, list[tuple[str, Variant]]] = {
  "constants": [("symbolic", Variant(algo="winograd", wino_impl="explorer", consts="symbolic")),
                ("materialized", Variant(algo="winograd", wino_impl="explorer", consts="materialized"))],
  "fusion": [("staged", Variant(algo="winograd", wino_impl="explorer", staging="staged")),
             ("fused", Variant(algo="winograd", wino_impl="explorer", staging="fused")),
             ("single", Variant(algo="winograd", wino_impl="explorer", staging="single")),
             ("builtin", Variant(algo="winograd", wino_impl="builtin"))],
}

# the documents' cases: seed 000 measured small, medium, large and a 5x5 kernel; seed 003 its three shapes
DEFAULT_PRESETS = {"constants": ("small", "medium", "large", "k5"), "fusion": ("wino8", "wino16", "wino32")}
# tinygrad's builtin Winograd does not apply to a 5x5 kernel: in seed 000's setting both constant modes ran the same direct kernels
# called with each variant's finished trace (explorer.tracing.pipeline.run.TraceResult); returns where it was kept (a stored trace's id), or None
KeepTrace = Callable[[ConvSpec, Variant, Any], str | None]
NOISE_PAIR = [("builtin (falls back to direct)", Variant(algo="winograd", fallback=True)), ("direct", Variant(algo="direct"))]

def tile_fits(tile: str, spec: ConvSpec) -> bool: return tile.endswith(f",{spec.kernel})")  # F(m,r) is for an r x r kernel

def tile_for(spec: ConvSpec, tile: str | None) -> str:
  """The explorer's tile for this kernel size: as asked where it fits the kernel, else F(4,r) (a study's cases may mix 3x3 and 5x5)."""
  return tile if tile is not None and tile_fits(tile, spec) else f"F(4,{spec.kernel})"

def tile_problem(tile: str | None, cases: Sequence[tuple[str, ConvSpec]]) -> str | None:
  """Why a tile cannot apply to a study (None: it fits at least one case; the others keep their F(4,r))."""
  if tile is None or any(tile_fits(tile, spec) for _, spec in cases): return None
  r = tile.rstrip(")").split(",")[-1]
  return f"tile {tile} is for {r}x{r} kernels and no case has one ({', '.join(f'{n}: {s.kernel}x{s.kernel}' for n, s in cases)})"

def run_studies(kind: str, presets: Sequence[tuple[str, ConvSpec]], repeats: int = 20, warmup: int = 3, tile: str | None = None,
                targets: tuple[str, ...] = ("cuda",), device: str | None = None, progress: Progress | None = None,
                timeout_s: float = 1800, ci_width: float | None = None, budget_s: float | None = None, keep: KeepTrace | None = None,
                compile_repeats: int | None = None, tinygrad: str | None = None) -> StudyResult:
  """Every case of a study (presets: (name, spec) pairs; a name in CLAIMS brings the document's figures): {"study", "cases": [{"preset",
  "rows", "comparisons", "identical_kernels", ...}]}. For a 5x5 case of the constants study a second case times tinygrad's builtin
  path (it falls back to the direct kernels) against direct: identical kernels, so any difference between them is noise by
  construction, and its interval shows how big that noise is. tinygrad: the one every case traces and times on (None: the server's own;
  another in its environment, explorer.tracing.versions)."""
  if (why := tile_problem(tile, presets)) is not None: raise SpecError(why)
  cases: list[StudyCase] = []
  for preset, spec in presets:
    claim = CLAIMS.get(kind, {}).get(preset)
    # the documents measured tinygrad's 3x3 Winograd; a 5x5 kernel ran direct there, so their 5x5 figure belongs to the builtin case
    mine = claim if spec.kernel == 3 else None
    cases.append({"preset": preset, "case": f"the explorer's Winograd {tile_for(spec, tile)}",
                  **run_study(kind, spec, repeats, warmup, tile_for(spec, tile), targets, device, progress, timeout_s, claim=mine,
                              ci_width=ci_width, budget_s=budget_s, keep=keep, compile_repeats=compile_repeats, tinygrad=tinygrad)})
    if _noise_case(kind, spec):
      cases.append({"preset": preset, "case": "tinygrad's builtin path (falls back to direct): identical kernels by construction",
                    **run_study(kind, spec, repeats, warmup, "F(4,3)", targets, device, progress, timeout_s, variants=NOISE_PAIR,
                                claim=_only(claim, "time") if claim else None, ci_width=ci_width, budget_s=budget_s, keep=keep,
                                compile_repeats=compile_repeats, tinygrad=tinygrad)})
  return {"study": kind, "cases": cases, "tinygrad": tinygrad or TINYGRAD}

def _only(claim: Claim, *figures: str) -> Claim:
  return cast(Claim, {**{f: v for f, v in claim.items() if f in figures and f != "says"},
                      "says": {f: w for f, w in claim["says"].items() if f in figures}})

def _noise_case(kind: str, spec: ConvSpec) -> bool: return kind == "constants" and spec.kernel != 3

def study_steps(kind: str, specs: Sequence[ConvSpec] = ()) -> list[str]:
  """The steps run_study reports, in order: one trace per variant, then the interleaved timing; with specs, those of every case
  run_studies runs for them."""
  def steps(variants: list[tuple[str, Variant]]) -> list[str]: return [f"trace {name}" for name, _ in variants] + ["timing"]
  if not specs: return steps(STUDY_VARIANTS[kind])
  return [s for spec in specs for s in steps(STUDY_VARIANTS[kind]) + (steps(NOISE_PAIR) if _noise_case(kind, spec) else [])]

def run_study(kind: str, spec: ConvSpec, repeats: int = 20, warmup: int = 3, tile: str = "F(4,3)", targets: tuple[str, ...] = ("cuda",),
              device: str | None = None, progress: Progress | None = None, timeout_s: float = 1800,
              variants: list[tuple[str, Variant]] | None = None, claim: Claim | None = None,
              ci_width: float | None = None, budget_s: float | None = None, keep: KeepTrace | None = None,
              compile_repeats: int | None = None, tinygrad: str | None = None) -> StudyCase:
  """claim: the document's figures for this case as B/A ratios (CLAIMS), to give each comparison a verdict. ci_width: sample past
  `repeats` until each ratio's 95% interval is narrower than this, or budget_s is spent. keep: called with each variant's trace; a row
  names the id it returns (trace_id). compile_repeats (default spec.STUDY_COMPILE_REPEATS; 0: none): how many times the timing worker compiles
  every variant's kernel sources again, interleaved, for the compile-time comparison."""
  step: Progress = progress or (lambda stage, status, detail: None)
  compile_repeats = STUDY_COMPILE_REPEATS if compile_repeats is None else compile_repeats
  claim = claim or {}
  variants = [(name, dataclasses.replace(v, tile=tile if v.wino_impl == "explorer" else v.tile, targets=targets, time=False, device=device,
                                         tinygrad=tinygrad)) for name, v in (variants or STUDY_VARIANTS[kind])]
  traces: dict[str, TraceRecord] = {}
  kept: dict[str, str | None] = {}
  for name, v in variants:
    step(f"trace {name}", "start", "tracing")
    result = run_trace(spec, resolved := v.resolve(spec), timeout_s=timeout_s)
    traces[name], kept[name] = result.trace, keep(spec, resolved, result) if keep is not None else None
    step(f"trace {name}", "done", traces[name]["status"])
  step("timing", "start", f"{len(variants)} variants interleaved, {warmup} warmup + {repeats} repeats")
  timing: list[VariantTiming]
  timing, _ = call_in_worker("explorer.tracing.pipeline.timing:time_interleaved",
                             {"spec": spec.to_dict(), "variants": [v.to_dict() for _, v in variants], "warmup": warmup, "repeats": repeats,
                              "target_width": ci_width, "budget_s": budget_s, "compile_repeats": compile_repeats},
                             progress=lambda _stage, _status, detail: step("timing", "running", detail), timeout_s=timeout_s,
                             env={"VIZ": "0", **device_env()}, tinygrad=tinygrad)
  step("timing", "done", "")
  rows: list[StudyRow] = [{**_row(name, traces[name], t), "trace_id": kept[name]} for (name, _), t in zip(variants, timing, strict=False)]
  base = rows[0]["time_median_s"]
  for r in rows: r["slowdown_vs_first"] = r["time_median_s"] / base if base else None
  comparisons = [c for r in rows[1:] for c in _compare(rows[0], r, claim)]
  keys = [[ast_key_of(k) for k in t["kernels"]] for t in traces.values()]
  counts = [c for r in rows[1:] for c in count_comparisons(rows[0], r, claim)]
  return {"study": kind, "spec": spec.to_dict(), "tile": tile, "repeats": repeats, "warmup": warmup, "compile_repeats": compile_repeats,
          "rows": rows, "claim": claim,
          "comparisons": comparisons, "counts": counts, "sampling": timing[0]["sampling"],
          "identical_kernels": all(k == keys[0] for k in keys) and None not in keys[0],
          "traces": {n: _trace_summary(t) for n, t in traces.items()}}

# the seed documents' figures, as B/A ratios of a variant (`of`; default: every one) against the study's first (below 1: B faster or
# steadier), and their words where they gave no number.
# Seed 000 (symbolic first, materialized second): symbolic was 1.37% (medium), 2.33% (large) and 5.64% (5x5) faster, on large its timing
# standard deviation was 90% lower, and its graph went "from hundreds to dozens" of operations.
# Seed 003 (staged first): the fused kernel ran 564x, 470x and 575x slower and compiled 93x, 47x and 100x slower (Metal fell back to
# tinygrad's Python emulator: "PYTHON: using PythonCompiler").
# "from hundreds to dozens" of operations as a ratio: "hundreds" is at least 200 (plural) and "dozens" below 100 (else it would be "a
# hundred"), so the materialized graph has at least twice the symbolic one's operations. A floor, not an estimate: anything under 2x
# does not read as hundreds against dozens.
HUNDREDS_TO_DOZENS = 2.0

def seed_000(faster_pct: float | None = None, std_lower_pct: float | None = None) -> Claim:
  """Seed 000's figures for a case: symbolic faster by a percentage, its std lower by one, its operations "from hundreds to dozens"
  (tensor graph and linearized kernels alike); the ratios B/A with its own words."""
  ops = f"symbolic: dozens of operations; materialized: hundreds (B/A at least {HUNDREDS_TO_DOZENS:g})"
  claim: Claim = {"graph": HUNDREDS_TO_DOZENS, "uops": HUNDREDS_TO_DOZENS, "says": {"graph": ops, "uops": ops}}
  if faster_pct is not None: claim["time"], claim["says"]["time"] = 1 / (1 - faster_pct / 100), f"symbolic {faster_pct}% faster"
  if std_lower_pct is not None: claim["spread"], claim["says"]["spread"] = 1 / (1 - std_lower_pct / 100), f"symbolic's std {std_lower_pct}% lower"
  return claim

def seed_003(slower: float, compile_slower: float) -> Claim:
  """Seed 003's figures for a shape: the fused kernel against the staged baseline."""
  return {"of": "fused", "time": slower, "compile": compile_slower,
          "says": {"time": f"fused {slower:.0f}x slower (Python fallback)", "compile": f"fused {compile_slower:.0f}x slower"}}

CLAIMS: dict[str, dict[str, Claim]] = {
  "constants": {"small": seed_000(), "medium": seed_000(1.37), "large": seed_000(2.33, 90), "k5": seed_000(5.64)},
  "fusion": {"wino8": seed_003(564, 93), "wino16": seed_003(470, 47), "wino32": seed_003(575, 100)},
}

def claim_for(claim: Claim, variant: str, figure: str) -> Any:
  """The document's figure for this variant against the first, if it made one."""
  return claim.get(figure) if claim.get("of", variant) == variant else None

def _compare(a: StudyRow, b: StudyRow, claim: Claim) -> list[Comparison]:
  """B's paired samples against A's: run time and its spread, and compile time where the timing worker compiled them again."""
  out = stats.compare(a["samples"], b["samples"], claim_for(claim, b["variant"], "time"), claim_for(claim, b["variant"], "spread"))
  if (sa := a.get("span_samples")) and (sb := b.get("span_samples")):  # the schedule replayed back to back (absent in older studies)
    out.insert(1, stats.compare_medians(sa, sb, "span", claim_for(claim, b["variant"], "time")))  # the document's run time: both judged
  if a["compile_samples"] and b["compile_samples"]:
    out.append(stats.compare_medians(a["compile_samples"], b["compile_samples"], "compile", claim_for(claim, b["variant"], "compile")))
  return [cast(Comparison, {"a": a["variant"], "b": b["variant"], **c}) for c in out]

def count_comparisons(a: StudyRow, b: StudyRow, claim: Claim) -> list[CountComparison]:
  """B's operation counts against A's, exact (one trace each, no noise), with a verdict against the document's threshold
  (stats.count_verdict): the tensor graph's UOps, all kernels' linearized UOps, and each kernel's where both have the same kernels
  (matched by role: the schedule may order them differently)."""
  pairs: list[tuple[Literal["graph", "uops"], str | None, int | None, int | None]] = [
    ("graph", None, a["graph_uops"], b["graph_uops"]), ("uops", None, a["linear_uops"], b["linear_uops"])]
  roles_a, roles_b = [k["role"] for k in a["per_kernel"]], [k["role"] for k in b["per_kernel"]]
  if sorted(roles_a) == sorted(roles_b) and len(set(roles_a)) == len(roles_a):
    of_b = {k["role"]: k for k in b["per_kernel"]}
    pairs += [("uops", k["role"], k["linear_uops"], of_b[k["role"]]["linear_uops"]) for k in a["per_kernel"]]
  out: list[CountComparison] = []
  for figure, kernel, x, y in pairs:
    if x is None or y is None: continue
    c = claim_for(claim, b["variant"], figure)
    out.append({"a": a["variant"], "b": b["variant"], "figure": figure, "kernel": kernel, "a_count": x, "b_count": y,
                "ratio": y / x if x else None, "claim": c, "verdict": stats.count_verdict(x, y, c)})
  return out

ZERO_TOTALS = {"copies": 0, "buffers": 0, "flops": 0, "codegen_s": 0.0, "compile_s": 0.0}  # a trace that failed early has empty totals

def _row(name: str, trace: TraceRecord, timing: VariantTiming) -> StudyRow:
  ks, totals, err, graph = trace["kernels"], {**ZERO_TOTALS, **trace["totals"]}, trace["error"], trace["tensor_graph"]
  def total(key: str) -> int: return sum(k["ops"][key] for k in ks)  # alu, loads, consts, total: counted for every kernel
  return {"variant": name, "status": trace["status"], "kernels": len(ks), "graph_uops": graph["uops"] if graph is not None else None,
          "copies": totals["copies"], "buffers": totals["buffers"], "roles": [k["role"] for k in ks], "alu": total("alu"),
          "loads": total("loads"), "consts": total("consts"), "linear_uops": total("total"), "flops": totals["flops"],
          "codegen_s": totals["codegen_s"], "compile_s": totals["compile_s"],
          "source_lines": sum(len(k["sources"]["host"].splitlines()) for k in ks),
          "max_abs_error": err["max_abs"] if err is not None else None, "max_rel_error": err["max_rel"] if err is not None else None,
          "time_median_s": timing["total_s"]["median"], "time_std_s": timing["total_s"]["std"], "time_min_s": timing["total_s"]["min"],
          "time_n": timing["total_s"]["n"], "samples": timing["samples"], "method": timing.get("method"),
          "span_median_s": (span := timing.get("span_s")) and span["median"], "span_samples": timing.get("span_samples") or [],
          "device": timing["device"], "compiler": timing["compiler"],
          "fallback": timing["fallback"], "compile_samples": (cs := timing["compile_samples"]),
          "compile_median_s": float(statistics.median(cs)) if cs else None,
          "per_kernel": [{"name": k["name"], "role": k["role"], "alu": k["ops"]["alu"], "loads": k["ops"]["loads"], "consts": k["ops"]["consts"],
                          "linear_uops": k["linear_uops"], "codegen_s": k["codegen_s"] + k["compile_s"]} for k in ks],
          "failures": trace["failures"]}

def _trace_summary(t: TraceRecord) -> dict[str, Any]: return {"label": t["label"], "status": t["status"], "totals": t["totals"], "error": t["error"]}

def markdown(study: StudyCase) -> str:
  s = ConvSpec.from_dict(study["spec"])
  case = f" ({setting})" if (setting := setting_of(study)) else ""
  repeats = study["sampling"]["repeats"] if study["sampling"] is not None else study["repeats"]
  compiles = f", every kernel compiled {study['compile_repeats']} more times" if study["compile_repeats"] else ""
  head = f"### study {study['study']}: {s.label()}{case}, {study['tile']}, device {study['rows'][0]['device']}, " \
         f"{study['warmup']} warmup + {repeats} interleaved repeats{compiles}\n\n"
  cols = ("variant", "kernels", "copies", "buffers", "ALU ops", "loads", "consts", "uops", "FLOPs", "codegen+compile ms", "source lines",
          "run ms (median)", "std ms", "vs first", "compile ms (median)", "max abs err", "fallback")
  lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
  for r in study["rows"]:
    lines.append("| " + " | ".join(str(c) for c in (r["variant"], r["kernels"], r["copies"], r["buffers"], r["alu"], r["loads"], r["consts"],
      r["linear_uops"], r["flops"], f"{(r['codegen_s']+r['compile_s'])*1e3:.0f}", r["source_lines"], f"{r['time_median_s']*1e3:.4f}",
      f"{r['time_std_s']*1e3:.4f}", f"{r['slowdown_vs_first']:.2f}x" if r["slowdown_vs_first"] else "-",
      f"{r['compile_median_s']*1e3:.1f}" if r["compile_median_s"] is not None else "-",
      f"{r['max_abs_error']:.2g}" if r["max_abs_error"] is not None else "-", r["fallback"] or "no")) + " |")
  per = ["", "Per kernel (ALU / loads / consts / uops / codegen+compile ms):", ""]
  for r in study["rows"]:
    per.append(f"- {r['variant']}: " + "; ".join(f"{k['role']} `{k['name']}` {k['alu']}/{k['loads']}/{k['consts']}/{k['linear_uops']}/"
                                                  f"{k['codegen_s']*1e3:.0f}" for k in r["per_kernel"]))
  method = study["rows"][0].get("method") or "tinygrad's timer"
  cmp = ["", f"Comparisons (paired interleaved repeats, by the {method} clock: time is the kernels each alone, summed, the headline; span, "
         "the schedule replayed back to back; compile time; "
         f"median B/A with its {stats.CONFIDENCE:.0%} bootstrap interval; Wilcoxon signed-rank p-value; std B / std A):", "",
         "| A | B | figure | B/A | interval | p | claim | verdict |",
         "|---|---|---|---|---|---|---|---|"]
  def num(x: float | None, fmt: str) -> str: return "-" if x is None else format(x, fmt)
  for c in study["comparisons"]:
    cmp.append(f"| {c['a']} | {c['b']} | {c['figure']} | {c['ratio']:.4f} | {c['ci_low']:.4f}–{c['ci_high']:.4f} | {num(c['p_value'], '.2g')} | "
               f"{num(c['claim'], '.4f')} | {c['verdict']} |")
  same = ["", "The variants' kernels are identical (equal AST keys): any time difference between them is noise by construction."
          if study["identical_kernels"] else "The variants' kernels differ (their AST keys)."]
  return head + "\n".join(lines + per + cmp + same) + "\n"
