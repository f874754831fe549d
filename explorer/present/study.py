"""A study as the documents laid it out: one row per case and figure, the document's number beside the measured ratio, its 95% interval,
the rank test's p-value and the verdict; and a server-rendered SVG per case of every variant's time distribution (box and samples)
with the paired B/A ratios, their interval, 1 (no difference) and the document's figure. Pure Python: no tinygrad, no JS."""
from __future__ import annotations
import html
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal
from explorer.schema import CountComparison, StudyCase, StudyResult, StudyRow, setting_of
from explorer.spec import ConvSpec
from explorer.text import fmt_ms

if TYPE_CHECKING:
  import numpy as np

def _ratio(x: float | None) -> str: return "-" if x is None or not math.isfinite(x) else f"{x:.4g}x"

FIGURES = {"time": "run time, the kernels each alone, summed (the headline): median of B/A per repeat",
           "span": "run time, the schedule replayed back to back (its span): median of B/A per repeat", "spread": "standard deviation, B over A",
           "compile": "compile time (the device's compiler on every kernel's source, uncached), median of B/A per repeat",
           "build": "codegen + compile (one trace each), B over A",
           "graph": "tensor graph UOps, A -> B", "uops": "linear UOps (all kernels), A -> B", "kernel": "linear UOps, {} kernel, A -> B"}

# where the document's figure lies against the measured interval
SIZE = {"inside": "the document's figure is inside the interval", "below": "the document's figure is below the interval",
        "above": "the document's figure is above the interval"}

def _says(case: StudyCase, variant: str, figure: str) -> str:
  """The document's words for this figure of this variant (against the case's first), or "-" (a claim names only its own figures)."""
  claim, figure = case["claim"], "time" if figure == "span" else figure  # the document's run time judges the kernels' sum and the span
  return claim.get("says", {}).get(figure, "-") if claim.get("of", variant) == variant else "-"

def _interval(lo: float | None, hi: float | None) -> str:
  return "-" if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)) else f"{lo:.4g}–{hi:.4g}"

# what each paired figure's A and B columns show: the variant's own value behind the ratio (a row's key, in seconds)
ABSOLUTE: dict[str, tuple[Literal["time_median_s", "span_median_s", "time_std_s", "compile_median_s"], str]] = {
  "time": ("time_median_s", "median "), "span": ("span_median_s", "median "), "spread": ("time_std_s", "std "),
  "compile": ("compile_median_s", "median ")}

def _absolute(row: StudyRow, figure: str) -> str:
  """A paired figure's own value of one variant ("-" where the row has none: compile_median_s, in older studies or without compiles)."""
  key, what = ABSOLUTE[figure]
  return what + fmt_ms(x) if (x := row.get(key)) is not None else "-"

def document_rows(study: StudyResult) -> list[dict[str, Any]]:
  """Every case's figures in one table, the document's words beside each, laid out as the documents' own tables: each variant's
  absolute value (A, B: its median time, its std, its count) beside their ratio. The paired figures (time, spread) carry an interval,
  a p-value (time, compile time) and a verdict; the counts (UOps) are exact, so their verdict compares B/A with the document's
  threshold; codegen + compile as traced is one sample per variant, so it has none."""
  rows = []
  for n, case in enumerate(study["cases"]):
    where = {"case": n, "preset": case["preset"], "shape": ConvSpec.from_dict(case["spec"]).label(), "setting": setting_of(case)}
    by_name = {r["variant"]: r for r in case["rows"]}
    repeated = {c["b"] for c in case["comparisons"] if c["figure"] == "compile"}  # compile time with an interval: the claim is there
    def row(a: str, b: str, figure: str, measured: str, a_value: str, b_value: str, interval: str = "-", p: float | None = None,
            verdict: str = "-") -> dict[str, Any]:
      # (called in this iteration only: the loop's case, repeated and where are this row's)
      says = _says(case, b, "compile") if figure == "build" and b not in repeated else _says(case, b, figure)  # noqa: B023
      return {**where, "a": a, "b": b, "figure": FIGURES[figure], "document": says, "a_value": a_value, "b_value": b_value,  # noqa: B023
              "measured": measured, "interval": interval, "p_value": p, "verdict": verdict, "size": ""}
    def counted(c: CountComparison) -> dict[str, Any]:
      r = row(c["a"], c["b"], c["figure"], _ratio(c["ratio"]), str(c["a_count"]), str(c["b_count"]), "exact count", None, c["verdict"])
      if c["kernel"] is not None: r["figure"] = FIGURES["kernel"].format(c["kernel"])
      return r | {"size": f"the claim: B/A at least {c['claim']:g}" if c["claim"] is not None and c["claim"] > 1 else
                          f"the claim: B/A at most {c['claim']:g}" if c["claim"] is not None else ""}
    rows += [row(c["a"], c["b"], c["figure"], _ratio(c["ratio"]), _absolute(by_name[c["a"]], c["figure"]), _absolute(by_name[c["b"]], c["figure"]),
                 _interval(c["ci_low"], c["ci_high"]), c["p_value"], c["verdict"]) | {"size": SIZE.get(c.get("claim_position") or "", "")}
             for c in case["comparisons"]]
    first = case["rows"][0]
    for r in case["rows"][1:]:
      build_a, build_b = first["codegen_s"] + first["compile_s"], r["codegen_s"] + r["compile_s"]
      rows.append(row(first["variant"], r["variant"], "build", _ratio(build_b / build_a if build_a else None), fmt_ms(build_a), fmt_ms(build_b),
                      "one trace each"))
      if "counts" not in case:  # a study stored before counts had verdicts: its rows as stored, a count absent where not yet counted
        a, b = dict[str, Any](first), dict[str, Any](r)
        rows += [row(a["variant"], b["variant"], figure, _ratio(b[key] / a[key] if a[key] else None), str(a[key]), str(b[key]),
                     "counted") for key, figure in (("graph_uops", "graph"), ("linear_uops", "uops")) if a.get(key) is not None]
    rows += [counted(c) for c in case.get("counts", [])]
  return rows

# ***** the plot *****

W, LABEL_W, ROW_H, PAD = 760, 190, 34, 28

def _scale(lo: float, hi: float, x0: float, x1: float) -> Callable[[float], float]:
  span = (hi - lo) or abs(hi) or 1.0
  lo, hi = lo - span * 0.05, hi + span * 0.05
  return lambda v: x0 + (v - lo) / (hi - lo) * (x1 - x0)

def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
  import numpy as np  # here, not at import: a server reads pages without it (15 MiB)
  step = 10 ** math.floor(math.log10(((hi - lo) or abs(hi) or 1.0) / n))
  step *= next(m for m in (1, 2, 5, 10) if (hi - lo) / (step * m) <= n)
  return list(np.arange(math.ceil(lo / step) * step, hi + step / 2, step))

def _whiskers(xs: Sequence[float] | np.ndarray) -> tuple[float, float]:
  """The furthest samples within 1.5 IQR of the quartiles: the plot's range (outliers would squeeze every box into a corner)."""
  import numpy as np
  v = np.asarray(xs, dtype=np.float64)
  q1, q3 = np.quantile(v, [0.25, 0.75])
  iqr = q3 - q1
  return float(v[v >= q1 - 1.5 * iqr].min()), float(v[v <= q3 + 1.5 * iqr].max())

def _box(y: float, xs: Sequence[float], x_of: Callable[[float], float], cls: str, lo: float, hi: float) -> list[str]:
  """A box from the quartiles, whiskers to the furthest sample within 1.5 IQR, every sample a dot (spread over the row's height);
  samples beyond the plot's range [lo, hi] sit hollow on its edge, counted."""
  import numpy as np
  v = np.asarray(xs, dtype=np.float64)
  q1, med, q3 = np.quantile(v, [0.25, 0.5, 0.75])
  lo_w, hi_w = _whiskers(xs)
  h = ROW_H * 0.55
  out = [f'<line class="whisker" x1="{x_of(lo_w):.1f}" x2="{x_of(hi_w):.1f}" y1="{y:.1f}" y2="{y:.1f}"/>',
         f'<rect class="box {cls}" x="{x_of(q1):.1f}" y="{y - h / 2:.1f}" width="{max(x_of(q3) - x_of(q1), 1):.1f}" height="{h:.1f}"/>',
         f'<line class="median" x1="{x_of(med):.1f}" x2="{x_of(med):.1f}" y1="{y - h / 2:.1f}" y2="{y + h / 2:.1f}"/>']
  jitter = np.random.default_rng(0).uniform(-h / 2.5, h / 2.5, len(xs))
  for x, j in zip(v, jitter, strict=False):
    inside = lo <= x <= hi
    out.append(f'<circle class="sample{"" if inside else " out"}" cx="{x_of(min(max(x, lo), hi)):.1f}" cy="{y + j:.1f}" r="1.6">'
               f'<title>{x:.4g}</title></circle>')
  for n, side in ((int((v < lo).sum()), lo), (int((v > hi).sum()), hi)):
    if n: out.append(f'<text class="tick" x="{x_of(side):.1f}" y="{y - h / 2 - 2:.1f}" text-anchor="middle">{n} beyond</text>')
  return out

def _axis(y: float, x_of: Callable[[float], float], lo: float, hi: float, unit: str) -> list[str]:
  out = [f'<line class="axis" x1="{LABEL_W}" x2="{W - PAD}" y1="{y:.1f}" y2="{y:.1f}"/>']
  for t in (t for t in _ticks(lo, hi) if LABEL_W <= x_of(t) <= W - PAD):
    out += [f'<line class="tick" x1="{x_of(t):.1f}" x2="{x_of(t):.1f}" y1="{y:.1f}" y2="{y + 4:.1f}"/>',
            f'<text class="tick" x="{x_of(t):.1f}" y="{y + 16:.1f}" text-anchor="middle">{t:.4g}{unit}</text>']
  return out

def distribution_svg(case: StudyCase) -> str:
  """Top: each variant's time per repeat (ms). Bottom: each B's ratio to A per repeat, the 95% interval of its median (band), 1 and
  the document's figure (dashed), so a verdict can be read off the picture."""
  import numpy as np
  rows, esc = case["rows"], html.escape
  times = [np.asarray(r["samples"], dtype=np.float64) * 1e3 for r in rows]
  ratios = [np.asarray(r["samples"], dtype=np.float64) / np.asarray(rows[0]["samples"], dtype=np.float64) for r in rows[1:]]
  comps = [c for c in case["comparisons"] if c["figure"] == "time"]
  n_top, n_bot = len(rows), len(ratios)
  top_h, bot_h = n_top * ROW_H + 40, n_bot * ROW_H + 40
  height = PAD + top_h + 24 + bot_h
  out = [f'<svg class="study-plot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {height}" width="{W}" height="{height}" role="img" '
         f'aria-label="time distribution per variant, {esc(case["preset"])}">',
         f'<text class="title" x="8" y="16">time per repeat (ms), {sum(len(t) for t in times) // max(n_top, 1)} paired repeats</text>']
  lo, hi = min(_whiskers(t)[0] for t in times), max(_whiskers(t)[1] for t in times)
  x_of = _scale(lo, hi, LABEL_W, W - PAD)
  for i, (variant, t) in enumerate(zip(rows, times, strict=False)):
    y = PAD + 10 + i * ROW_H + ROW_H / 2
    out += [f'<text class="label" x="{LABEL_W - 8}" y="{y + 4:.1f}" text-anchor="end">{esc(variant["variant"])}</text>',
            *_box(y, list(t), x_of, f"v{i}", lo, hi)]
  out += _axis(PAD + 10 + n_top * ROW_H + 4, x_of, lo, hi, "")
  if not ratios: return "\n".join(out + ["</svg>"])
  base = PAD + top_h + 24
  out.append(f'<text class="title" x="8" y="{base - 4:.1f}">each variant / {esc(rows[0]["variant"])}, per repeat · band: 95% interval of the '
             'median · line: 1 (no difference) · dashed: the document</text>')
  marks = [1.0] + [v for c in comps for v in (c["ci_low"], c["ci_high"], c["claim"]) if v is not None and math.isfinite(v) and v < 50]
  lo, hi = min(*(_whiskers(r)[0] for r in ratios), *marks), max(*(_whiskers(r)[1] for r in ratios), *marks)
  x_of = _scale(lo, hi, LABEL_W, W - PAD)
  top, bottom = base + 6, base + 6 + n_bot * ROW_H
  for i, (r, c) in enumerate(zip(ratios, comps, strict=False)):
    y = base + 6 + i * ROW_H + ROW_H / 2
    band = max(x_of(c["ci_high"]) - x_of(c["ci_low"]), 1.5)
    why = f'median {c["ratio"]:.4f}, 95% interval {c["ci_low"]:.4f}–{c["ci_high"]:.4f}: {esc(c["verdict"])}'
    out += [f'<text class="label" x="{LABEL_W - 8}" y="{y + 4:.1f}" text-anchor="end">{esc(c["b"])}</text>',
            *_box(y, list(r), x_of, f"v{i + 1}", lo, hi),  # the interval over the box: it is what the verdict reads
            f'<rect class="ci" x="{x_of(c["ci_low"]):.1f}" y="{y - ROW_H / 2 + 2:.1f}" width="{band:.1f}" height="{ROW_H - 4}">'
            f'<title>{why}</title></rect>']
    if c["claim"] is not None and lo <= c["claim"] <= hi:
      out.append(f'<line class="claim" x1="{x_of(c["claim"]):.1f}" x2="{x_of(c["claim"]):.1f}" y1="{y - ROW_H / 2:.1f}" y2="{y + ROW_H / 2:.1f}">'
                 f'<title>the document: {c["claim"]:.4f}</title></line>')
  out.append(f'<line class="one" x1="{x_of(1.0):.1f}" x2="{x_of(1.0):.1f}" y1="{top:.1f}" y2="{bottom:.1f}"/>')
  out += _axis(bottom + 4, x_of, lo, hi, "x")
  return "\n".join(out + ["</svg>"])

# ***** the page's cases, and the offline export *****

ENDED = {"max repeats": "the most repeats allowed", "repeats": "the repeats asked for"}  # why a sampling stopped

def sampling_text(case: StudyCase) -> str:
  if (s := case["sampling"]) is None: return f"{case['warmup']} warmup + {case['repeats']} interleaved repeats, stopped at "
  why = (f"every interval narrower than {s['target_width']}" if s["ended"] == "converged" else f"the {s['budget_s']}s budget was spent"
         if s["ended"] == "budget" else ENDED.get(s["ended"], s["ended"]))  # an end not named here: its own word
  return f"{case['warmup']} warmup + {s['repeats']} interleaved repeats, stopped at {why}"

def case_views(result: StudyResult) -> list[dict[str, Any]]:
  """Each case with what the page draws: its shape's label, how its sampling ended, its plot."""
  return [{**c, "shape": ConvSpec.from_dict(c["spec"]).label(), "sampling_text": sampling_text(c), "svg": distribution_svg(c)}
          for c in result["cases"]]

def render_export(status: dict[str, Any], origin: str) -> str:
  """A finished study as ONE self-contained HTML file: inline CSS and SVG, no script, no link that leaves it."""
  import datetime
  from markupsafe import Markup
  from explorer.present.export import inline_assets
  from explorer.present.render import environment
  from explorer.version import __version__
  exported = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
  return environment().get_template("study_export.html").render(s=status, cases=case_views(status["result"]), css=Markup(inline_assets()["css"]),
                                                                 exported=exported, origin=origin, version=__version__)

def document_markdown(study: StudyResult) -> str:
  """document_rows as one markdown table: what the CLI prints after a study's cases."""
  cols = ("case", "shape", "A", "B", "figure", "the document", "A value", "B value", "B/A", "95% interval", "p", "verdict")
  on = f" on tinygrad {study['tinygrad']}" if "tinygrad" in study else ""
  lines = [f"### study {study['study']}: the documents' figures, measured again{on}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
  for r in document_rows(study):
    p = "-" if r["p_value"] is None else f"{r['p_value']:.2g}"
    verdict = f"{r['verdict']} ({r['size']})" if r["size"] else r["verdict"]
    lines.append("| " + " | ".join(str(x) for x in (r["preset"], r["shape"], r["a"], r["b"], r["figure"], r["document"], r["a_value"],
                                                      r["b_value"], r["measured"], r["interval"], p, verdict)) + " |")
  return "\n".join(lines) + "\n"
