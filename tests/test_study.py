"""The seed studies end to end on a tiny shape: traced variants, interleaved timing in one worker, the markdown table."""
import numpy as np
import pytest
from explorer.analysis.study import markdown, run_study
from explorer.spec import ConvSpec, Variant

@pytest.fixture(scope="module")
def constants():
  return run_study("constants", ConvSpec(1, 2, 2, 8, 8, 3), repeats=3, warmup=1, compile_repeats=4)

def test_constants_study_rows(constants):
  sym, mat = constants["rows"]
  assert (sym["variant"], mat["variant"]) == ("symbolic", "materialized")
  assert sym["kernels"] == mat["kernels"] == 4
  assert sym["copies"] == 0 and mat["copies"] == 3 and mat["buffers"] > sym["buffers"]
  for r in (sym, mat):
    assert r["status"] == "ok" and r["time_n"] == 3 and r["time_median_s"] > 0 and r["fallback"] is None
    assert r["max_abs_error"] < 1e-4 and len(r["per_kernel"]) == 4

def test_markdown_table_names_every_variant(constants):
  md = markdown(constants)
  assert "| symbolic |" in md and "| materialized |" in md and "device CPU" in md

def test_a_study_compares_with_intervals_and_a_test(constants):
  """The second variant against the first from the paired interleaved repeats: median ratio in its bootstrap interval, a signed-rank
  p-value, the spread ratio; no claim for a shape the documents did not measure."""
  time, span, spread, compile_ = constants["comparisons"]
  assert (time["a"], time["b"], time["figure"], span["figure"], spread["figure"], compile_["figure"]) == \
    ("symbolic", "materialized", "time", "span", "spread", "compile")
  assert span["ci_low"] <= span["ratio"] <= span["ci_high"]  # the schedule replayed back to back, paired repeat by repeat too
  assert time["ci_low"] <= time["ratio"] <= time["ci_high"] and 0 <= time["p_value"] <= 1 and time["verdict"] == "no claim"
  sym, mat = constants["rows"]
  assert len(sym["samples"]) == len(mat["samples"]) == 3
  assert "| symbolic | materialized | time |" in markdown(constants)

def test_compile_time_is_measured_repeatedly_and_compared_like_run_time(constants):
  """One trace per variant is one compile: the timing worker compiles every kernel's source again (uncached, interleaved), and the
  paired compile times get an interval, a p-value and a verdict as run times do."""
  from explorer.analysis.study import markdown
  sym, mat = constants["rows"]
  assert len(sym["compile_samples"]) == len(mat["compile_samples"]) == 4 and min(sym["compile_samples"] + mat["compile_samples"]) > 0
  assert abs(sym["compile_median_s"] - sum(sorted(sym["compile_samples"])[1:3]) / 2) < 1e-12
  (comp,) = [c for c in constants["comparisons"] if c["figure"] == "compile"]
  assert (comp["a"], comp["b"], comp["verdict"]) == ("symbolic", "materialized", "no claim")
  assert comp["ci_low"] <= comp["ratio"] <= comp["ci_high"] and 0 <= comp["p_value"] <= 1
  ratios = sorted(b / a for a, b in zip(sym["compile_samples"], mat["compile_samples"], strict=False))
  assert abs(comp["ratio"] - (ratios[1] + ratios[2]) / 2) < 1e-12  # the median of the paired ratios
  assert "every kernel compiled 4 more times" in markdown(constants) and "| symbolic | materialized | compile |" in markdown(constants)

def test_op_counts_are_compared_per_kernel_with_a_verdict(constants):
  """Exact counts, no interval: the tensor graph, all kernels, and each kernel by role, judged against seed 000's "hundreds to
  dozens" (materialized at least 2x symbolic) when the case has that claim."""
  from explorer import stats
  from explorer.analysis.study import CLAIMS, HUNDREDS_TO_DOZENS, count_comparisons
  sym, mat = constants["rows"]
  counts = constants["counts"]
  assert [(c["figure"], c["kernel"]) for c in counts] == [("graph", None), ("uops", None)] + [("uops", k["role"]) for k in sym["per_kernel"]]
  assert (counts[0]["a_count"], counts[0]["b_count"]) == (sym["graph_uops"], mat["graph_uops"])
  of_mat = {k["role"]: k["linear_uops"] for k in mat["per_kernel"]}  # by role: materialized schedules xhat first, symbolic ghat
  assert [c["b_count"] for c in counts[2:]] == [of_mat[k["role"]] for k in sym["per_kernel"]]
  assert all(c["verdict"] == "no claim" for c in counts)  # a shape the document did not measure
  judged = count_comparisons(sym, mat, CLAIMS["constants"]["medium"])
  assert all(c["claim"] == HUNDREDS_TO_DOZENS and c["verdict"] == stats.count_verdict(c["a_count"], c["b_count"], 2.0) for c in judged)
  assert judged[0]["verdict"] in ("reproduced", "not reproduced", "opposite")
  fused = {**mat, "variant": "fused", "per_kernel": mat["per_kernel"][1:]}  # other kernels: the totals only
  assert [c["kernel"] for c in count_comparisons(sym, fused, {})] == [None, None]

def test_the_documents_claims_are_b_over_a_ratios():
  from explorer.analysis.study import CLAIMS
  assert abs(CLAIMS["constants"]["medium"]["time"] - 1.0139) < 1e-4 and abs(CLAIMS["constants"]["large"]["spread"] - 10) < 1e-9
  assert CLAIMS["fusion"]["wino8"]["of"] == "fused" and CLAIMS["constants"]["k5"]["says"]["time"] == "symbolic 5.64% faster"

@pytest.mark.slow
def test_a_study_runs_every_case_and_a_5x5_one_honestly():
  """The JSON contract: {"cases": [{"preset", "rows", "comparisons", "identical_kernels"}]}. A 5x5 case runs the explorer's generated
  Winograd (F(2,5) asked for: it applies to the 5x5 case only; different kernels per constant mode) and, as the document's setting,
  tinygrad's builtin path, which falls back to the direct kernels: identical by construction. Slow: three cases, each two traces
  and their interleaved timing, every kernel compiled three more times."""
  from explorer.analysis.study import run_studies
  study = run_studies("constants", [("tiny3", ConvSpec(1, 2, 2, 8, 8, 3)), ("tiny5", ConvSpec(1, 2, 2, 8, 8, 5))], repeats=3, warmup=1,
                      tile="F(2,5)", compile_repeats=3)
  cases = study["cases"]
  assert [(c["preset"], c["tile"]) for c in cases] == [("tiny3", "F(4,3)"), ("tiny5", "F(2,5)"), ("tiny5", "F(4,3)")]
  assert [c["identical_kernels"] for c in cases] == [False, False, True]
  for c in cases:
    assert {"rows", "comparisons", "identical_kernels"} <= set(c) and all(r["status"] == "ok" and r["max_abs_error"] < 1e-3 for r in c["rows"])
    assert [x["figure"] for x in c["comparisons"]] == ["time", "span", "spread", "compile"]
  assert "identical" in cases[2]["case"] and "noise by construction" in markdown(cases[2])

@pytest.mark.slow
def test_adaptive_sampling_stops_when_the_interval_is_narrow_or_the_budget_is_spent():
  """Timing a variant against itself converges quickly to a narrow interval around 1; an impossible width stops at the budget.
  A 50 us kernel: two copies of a 3 us one differ by up to 40% on a CPU (placement), which no sampling removes. Slow: the second
  study runs until its 2 s budget is spent, by design, after two traces."""
  from explorer.analysis.study import run_study
  spec = ConvSpec(1, 8, 8, 32, 32, 3)
  same = [("direct", Variant(algo="direct")), ("direct again", Variant(algo="direct"))]
  wide = run_study("constants", spec, repeats=10, warmup=1, variants=same, ci_width=0.5, budget_s=60, compile_repeats=0)
  assert wide["sampling"]["ended"] == "converged" and wide["sampling"]["repeats"] >= 10 and wide["identical_kernels"]
  time = wide["comparisons"][0]
  assert time["ci_high"] - time["ci_low"] <= 0.5 and abs(time["ratio"] - 1) < 0.2  # the same kernels: a ratio near 1
  assert [c["figure"] for c in wide["comparisons"]] == ["time", "span", "spread"] and wide["rows"][0]["compile_samples"] == []  # none asked for
  narrow = run_study("constants", spec, repeats=10, warmup=1, variants=same, ci_width=1e-9, budget_s=2, compile_repeats=0)
  assert narrow["sampling"]["ended"] == "budget" and narrow["sampling"]["repeats"] > 10

def test_the_progress_bar_counts_every_case():
  from explorer.analysis.study import study_steps
  three, five = ConvSpec(1, 2, 2, 8, 8, 3), ConvSpec(1, 2, 2, 8, 8, 5)
  assert study_steps("constants", [three]) == study_steps("constants") == ["trace symbolic", "trace materialized", "timing"]
  assert len(study_steps("constants", [three, five])) == 3 + 3 + 3  # the 5x5 case brings its builtin-path case

def test_the_cli_writes_the_json_contract_the_documents_table_and_an_offline_page(tmp_path):
  import json
  import subprocess
  import sys
  out, page = tmp_path / "s.json", tmp_path / "s.html"
  run = subprocess.run([sys.executable, "-m", "explorer", "study", "constants", "--preset", "small", "--repeats", "4", "--warmup", "1",
                        "--ci-width", "0", "--compile-repeats", "3", "--json", str(out), "--html", str(page), "--quiet"],
                       capture_output=True, text=True, timeout=600)
  assert run.returncode == 0, run.stderr
  study = json.loads(out.read_text())
  (case,) = study["cases"]
  assert case["preset"] == "small" and case["identical_kernels"] is False and {r["variant"] for r in case["rows"]} == {"symbolic", "materialized"}
  assert case["sampling"]["ended"] == "repeats" and case["sampling"]["repeats"] == 4  # --ci-width 0: exactly --repeats
  for c in case["comparisons"]: assert {"figure", "ratio", "ci_low", "ci_high", "p_value", "verdict", "claim"} <= set(c)
  assert [c["figure"] for c in case["comparisons"]] == ["time", "span", "spread", "compile"] and len(case["rows"][0]["compile_samples"]) == 3
  assert "| compile time (the device's compiler on every kernel's source, uncached), median of B/A per repeat | - | median " in run.stdout
  assert "the documents' figures, measured again" in run.stdout
  assert "| small | 1x3->16 32x32 k3 | symbolic | materialized | tensor graph UOps" in run.stdout
  html = page.read_text()
  assert '<svg class="study-plot"' in html and "<script" not in html

def test_the_repeats_are_counterbalanced():
  """Every variant runs first as often as last: in a fixed order the second of two identical microsecond kernels timed steadily
  15-40% apart from the first on a CPU."""
  from explorer.tracing.pipeline.timing import _order
  orders = [_order(3, r) for r in range(4)]
  assert orders == [[0, 1, 2], [2, 1, 0], [0, 1, 2], [2, 1, 0]]
  assert all(sum(o.index(v) for o in orders) == sum(range(3)) * 4 // 3 for v in range(3))  # the same mean position for each

def test_the_cli_and_the_web_sample_adaptively_by_default_with_one_width():
  """`study` without --ci-width samples to the same interval width as the web form; --ci-width 0 turns it off, below 0 is refused."""
  from explorer.cli.main import build_parser, main
  from explorer.spec import STUDY_CI_WIDTH
  from explorer.web.http.models import StudyRequest
  assert STUDY_CI_WIDTH > 0
  assert build_parser().parse_args(["study", "constants"]).ci_width == STUDY_CI_WIDTH == StudyRequest(kind="constants").ci_width
  assert build_parser().parse_args(["study", "constants", "--ci-width", "0"]).ci_width == 0
  assert main(["study", "constants", "--ci-width", "-1", "--quiet"]) == 2

def test_a_tile_applies_to_the_cases_it_fits_and_one_that_fits_none_is_refused(capsys):
  from explorer.analysis.study import run_studies, tile_for
  from explorer.cli.main import main
  from explorer.spec import PRESETS, SpecError
  three, five = PRESETS["small"], PRESETS["k5"]
  assert (tile_for(three, None), tile_for(five, None)) == ("F(4,3)", "F(4,5)")
  assert (tile_for(three, "F(2,5)"), tile_for(five, "F(2,5)"), tile_for(three, "F(2,3)")) == ("F(4,3)", "F(2,5)", "F(2,3)")
  assert main(["study", "constants", "--presets", "small,medium", "--tile", "F(2,5)", "--quiet"]) == 2  # before any trace
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and "F(2,5) is for 5x5 kernels" in err and "small: 3x3" in err
  with pytest.raises(SpecError, match="no case has one"): run_studies("constants", [("small", three)], tile="F(4,5)")

@pytest.mark.slow
def test_a_named_presets_claim_reaches_a_verdict_computed_from_the_measurement(monkeypatch):
  """End to end through CLAIMS: a claim for the cheap `small` preset (seed 000's medium figures, and a compile figure) is looked up by
  run_studies, and every verdict is the one its measured interval (or exact counts) gives: none is passed through. Slow: a whole
  study (two traces, timing, compiles) through the public entry point."""
  from explorer import stats
  from explorer.analysis.study import CLAIMS, HUNDREDS_TO_DOZENS, run_studies, seed_000
  from explorer.present.study import document_rows
  from explorer.spec import PRESETS
  claim = seed_000(1.37, 90)
  claim = {**claim, "compile": 1.5, "says": {**claim["says"], "compile": "materialized compiles 1.5x slower"}}
  monkeypatch.setitem(CLAIMS["constants"], "small", claim)
  (case,) = run_studies("constants", [("small", PRESETS["small"])], repeats=10, warmup=1, compile_repeats=4)["cases"]
  by_figure = {c["figure"]: c for c in case["comparisons"]}
  for figure, claimed in (("time", 1 / (1 - 0.0137)), ("spread", 10.0), ("compile", 1.5)):
    c = by_figure[figure]
    assert c["claim"] == pytest.approx(claimed) and c["verdict"] in ("reproduced", "not reproduced", "opposite")
    assert c["verdict"] == stats.verdict(c["ci_low"], c["ci_high"], claimed)  # from the interval measured just now
    assert c["claim_position"] == stats.claim_position(c["ci_low"], c["ci_high"], claimed)
  sym, mat = case["rows"]
  assert by_figure["time"]["ratio"] == pytest.approx(float(np.median(np.asarray(mat["samples"]) / np.asarray(sym["samples"]))))
  graph = case["counts"][0]
  assert (graph["figure"], graph["a_count"], graph["b_count"]) == ("graph", sym["graph_uops"], mat["graph_uops"])
  assert graph["verdict"] == stats.count_verdict(sym["graph_uops"], mat["graph_uops"], HUNDREDS_TO_DOZENS) != "no claim"
  rows = {r["figure"]: r for r in document_rows({"cases": [case]})}
  time_row = rows["run time, the kernels each alone, summed (the headline): median of B/A per repeat"]
  span_row = rows["run time, the schedule replayed back to back (its span): median of B/A per repeat"]
  assert span_row["document"] == "symbolic 1.37% faster" and span_row["verdict"] == by_figure["span"]["verdict"]
  assert (time_row["document"], time_row["verdict"]) == ("symbolic 1.37% faster", by_figure["time"]["verdict"])
  assert rows["tensor graph UOps, A -> B"]["verdict"] == graph["verdict"]
