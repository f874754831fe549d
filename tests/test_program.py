"""Whole programs: a training step (conv, batchnorm, relu, max-pool, linear, Adam) and a residual block of tinygrad.nn layers, each
captured as one program trace, against plain tinygrad running the same code in a process of its own (its kernel count and every source
it compiles, DEBUG=4); every kernel traced back to the lines of the model (tests/capture_programs.py marks them), backward kernels
marked; the program view, its search and the kernel list of a 1,000-kernel program answer within a second."""
from __future__ import annotations
import pathlib
import re
import statistics
import time
from typing import Any
import pytest
from support import app_over, copy_store, run_async, scaled
from test_capture import run_json
from explorer.text import fmt_flops

PROGRAMS = pathlib.Path(__file__).resolve().parent / "capture_programs.py"

def model_line(marker: str) -> int:
  """The line of capture_programs.py marked `# model: marker`."""
  return next(i for i, line in enumerate(PROGRAMS.read_text().splitlines(), 1) if line.rstrip().endswith(f"# model: {marker}"))

CNN_LINES = {model_line(m) for m in ("features", "classifier", "loss", "optimizer step")}
RESIDUAL_LINES = {model_line(m) for m in ("first conv", "second conv and the skip", "loss", "optimizer step")}

@pytest.fixture(scope="module")
def db(tmp_path_factory) -> pathlib.Path: return tmp_path_factory.mktemp("program") / "p.sqlite3"

@pytest.fixture(scope="module")
def cnn(db) -> dict: return run_json("program", "cnn", str(db))

@pytest.fixture(scope="module")
def residual(db) -> dict: return run_json("program", "residual", str(db))

def of_the_model(entries: list[dict]) -> set[int]:
  return {e["line"] for e in entries if (e["file"] or "").endswith("capture_programs.py")}

def own(entries: list[dict]) -> list[dict]: return [e for e in entries if not e.get("inferred")]

@pytest.mark.parametrize("model", ["cnn", "residual"])
def test_a_training_step_is_one_program_of_tinygrads_own_kernels(model, cnn, residual, db):
  got = cnn if model == "cnn" else residual
  plain = run_json("program-plain", model)
  assert got["status"] == "ok" and got["realizes"] == len(got["per_realize"]) >= 1 and sum(got["per_realize"]) == got["kernels"]
  assert got["kernels"] + got["copies"] == plain["count"]  # tinygrad counts copies among its kernels
  missing = [i for i, src in enumerate(got["sources"]) if src not in plain["debug"]]
  assert not missing, f"kernels {missing} are not among the sources plain tinygrad compiled"
  lines = CNN_LINES if model == "cnn" else RESIDUAL_LINES
  for i, entries in enumerate(got["provenance"]):
    assert of_the_model(entries) & lines, f"kernel {i} names no line of the model: {entries}"
    if got["flops"][i] > 0: assert own(entries), f"kernel {i} computes ({got['flops'][i]} FLOPs) but has no provenance of its own"
  named = set().union(*(of_the_model(own(e)) for e in got["provenance"]))
  assert named >= lines - {model_line("loss")} if model == "residual" else named == lines, named  # the residual's loss is fused into its bw
  backward = {e["fn"] for entries in got["provenance"] for e in own(entries) if e["backward"]}
  assert {"conv2d", "relu" if model == "residual" else "linear"} <= backward, backward
  optimizer = [e for entries in got["provenance"] for e in own(entries) if e["line"] == model_line("optimizer step")]
  assert optimizer and all((e["via"] or "").startswith("nn.optim") for e in optimizer)
  assert got["weights"] == plain["weights"]  # the step applied once, as plain tinygrad applies it: timing runs kernels again, not the step
  if model == "residual":  # timed: every kernel, and the program's total is its realizes' summed
    assert all(t and t["n"] == 3 for t in got["times"]) and got["timing"]["repeats"] == 3
    sums = [sum(repeat) for repeat in zip(*(r["samples"] for r in got["realize_totals"]), strict=False)]  # each repeat's realizes summed
    assert got["timing"]["total_s"]["median"] == pytest.approx(statistics.median(sums)) and got["timing"]["total_s"]["method"] == "host"
    assert got["timing"]["total_s"]["ci_low"] <= got["timing"]["total_s"]["median"] <= got["timing"]["total_s"]["ci_high"]
    from fastapi.testclient import TestClient
    with TestClient(app_over(str(db))) as client:
      page = client.get(f"/t/{got['id']}").text
    assert re.search(r"<h3>Timeline <span[^>]*>[^<]* measured: each kernel's median alone, summed<span class=\"badge clock\" "
                     r"data-clock=\"host\"[^>]*>host clock</span> \(the median of the sums per repeat, in the header", page), \
      "the timeline says its widths are measured times, summed, beside the header's median of whole runs"

def test_a_forward_pass_has_no_backward_kernel(db):
  got = run_json("forward", str(db))
  assert got["provenance"] and all(not e["backward"] for entries in got["provenance"] for e in entries)
  assert all(of_the_model(entries) & {model_line("features"), model_line("classifier")} for entries in got["provenance"])

@pytest.fixture(scope="module")
def plain_steps() -> dict:
  """Four training steps in plain tinygrad: their losses, the first two of which are two steps' (the same seed, the same kernels)."""
  return run_json("steps", "4")

def test_two_training_steps_traced_whole_in_one_capture(db, plain_steps):
  """The same step twice inside one capture() crashed the user's process (KeyError 'realized_rows'): tinygrad schedules the second
  step's graphs from its schedule cache, so no rangeify pass ran for them, and the trace says so (every_step: each step traced whole)."""
  got = run_json("steps", "2", str(db), "every")
  assert got["status"] == "ok" and not got["failures"], got["failures"]
  assert got["losses"] == plain_steps["losses"][:2]  # the same kernels: the same bits
  assert any(n and "schedule cache" in n for n in got["notes"]) and not any(got["repeats"])

def test_a_training_loop_reads_as_a_loop(db, plain_steps):
  """Steps that run the same kernels are kept as repeats of the first realize that ran them (its wall time each): the trace of four
  steps holds the kernels of the first two, no more, and prints the repeats; the losses are plain tinygrad's."""
  two, four = run_json("steps", "2", str(db)), run_json("steps", "4", str(db))
  assert four["status"] == "ok" and four["losses"] == plain_steps["losses"]
  more = [r4 - r2 for r4, r2 in zip(four["repeats"], two["repeats"], strict=False)]  # two more steps: each realize of a step repeated twice more
  assert four["kernels"] == two["kernels"] and len(four["repeats"]) == len(two["repeats"]) and set(more) == {0, 2}, (four, two)
  assert four["bytes"] < 1.05 * two["bytes"] and "more times, the same kernels (a loop's later steps)" in four["printed"]
  stages = [tuple(s) for s in four["timeline"]]  # the timeline: each realize's stages, then each repeat of it, as they ran
  assert [stages.count(("repeat", r)) for r in range(len(four["repeats"]))] == four["repeats"]
  assert all(("codegen", r) in stages for r in range(len(four["repeats"])))
  assert four["launches"] > four["kernels"]  # every kernel of the first steps, and again in each repeat

def test_a_symbolic_kv_cache_decode_under_tinyjit(db):
  """A TinyJit step taking a bound Variable position failed in the schedule stage ("AssertionError: "): the schedule's variables are
  bound, recorded per realize, and the run and its timing use their values. Its first call is traced whole; its capture hands the
  schedule to the JIT (nothing runs then: it is traced up to its render), and the JIT's runs (the one right after its capture, then
  each replay) are recorded as runs of those realizes' kernels, with the position each was bound to; a symbolic kernel names its
  variable and bounds. Timed, each symbolic kernel is timed alone at every position it ran with (the JIT's captured kernels by the
  first call's compiled kernels of the same AST), its writes kept as the program left them: the outputs and the caches are plain's."""
  got, plain = run_json("kv-decode", str(db)), run_json("kv-decode")
  assert got["status"] == "ok" and not got["failures"], got["failures"]
  assert got["outputs"] == plain["outputs"] and got["caches"] == plain["caches"] and got["kernels"] > 0
  for variables, times in zip(got["kernel_variables"], got["times_at"], strict=False):  # every symbolic kernel, at each position it ran with
    if variables: assert times and all(t["time_s"]["n"] == 3 and t["time_s"]["method"] == "host" and t["time_s"]["median"] > 0 for t in times)
    else: assert times is None
  half = len(got["times_at"]) // 2
  assert {tuple(t["variables"]["pos"] for t in ts) for ts in got["times_at"][:half] if ts} == {(0,)}  # the first call: pos=0, run
  assert {tuple(t["variables"]["pos"] for t in ts) for ts in got["times_at"][half:] if ts} == {(1, 2, 3)}  # the JIT's runs'

  assert got["variables"] == [{"pos": 0}] * 3 + [{"pos": 1}] * 3  # the first call's realizes, run; the second's, captured by the JIT
  (jit,) = got["jits"]
  assert jit["realizes"] == [3, 6] and jit["kernels"] == got["kernel_names"][len(got["kernel_names"]) // 2:]
  assert [r["variables"] for r in jit["runs"]] == [{"pos": i} for i in range(1, 4)] and all(r["seconds"] > 0 for r in jit["runs"])
  assert {"pos": [0, 31]} in got["kernel_variables"] and "TinyJit 1: " in got["printed"] and "pos=3" in got["printed"]
  from fastapi.testclient import TestClient
  n = len(got["kernel_variables"]) - 1 - got["kernel_variables"][::-1].index({"pos": [0, 31]})  # a kernel of the JIT's capture
  with TestClient(app_over(str(db))) as client:
    program, kernel = client.get(f"/t/{got['id']}").text, client.get(f"/t/{got['id']}/k/{n}").text
  assert 'data-jit-runs="3"' in program and "pos=3" in program
  symbolic = kernel[kernel.index('id="symbolic"'):]
  assert all(f'<td class="num mono">{i}</td>' in symbolic for i in range(1, 4)) and "TinyJit 1" in symbolic and "captured by TinyJit" in symbolic
  alone = re.findall(r'<td class="num" data-alone>(.*?)</td>', symbolic, re.S)
  assert alone[0] == "–" and all('data-clock="host"' in a for a in alone[1:]) and len(alone) == 4  # captured (not run), then 3 runs

def test_a_programs_roofline_puts_each_kernel_against_its_own_dtypes_roof(residual, db):
  """A program's roofline was a 500 ("no single dtype to put against the roofs"): each kernel goes against its own dtype's roof."""
  from explorer.analysis import roofline as R
  from explorer.store import Store
  trace = Store(db).get_trace(residual["id"])
  peaks = {"device": "CPU", "name": "test", "model": None, "sources": {"fp32": "a test", "bw": "a test"}, "measured": None, "fp32": 1e12,
           "fp16": None, "tf32_tc": None, "fp16_tc": None, "bw": 1e11}
  rl = R.roofline(trace, peaks)
  assert rl["dtype"] == "float32" and len(rl["kernels"]) == len(trace["kernels"]) and rl["plot"]["points"]
  assert all(k["roof_key"] == "fp32" for k in rl["kernels"]) and all(k["pct_bandwidth"] is not None for k in rl["kernels"] if k["time_s"])
  block = R.export_block(trace)  # the export's: a roofline, or why none (no peaks for this host's CPU yet), never a refusal of programs
  assert block["rl"] is not None or "program" not in (block["why"] or "")

def test_print_shows_every_kernel_with_its_lines(cnn):
  printed = cnn["printed"]
  assert "provenance" in printed and "realize" in printed and f"capture_programs.py:{model_line('features')}" in printed
  assert "conv2d bw" in printed and printed.count("\n") > cnn["kernels"]

def test_the_program_view_and_its_search(cnn, residual, db):
  from fastapi.testclient import TestClient
  tid, site = cnn["id"], f"capture_programs.py:{model_line('classifier')}"
  with TestClient(app_over(str(db))) as client:
    page = client.get(f"/t/{tid}").text
    assert 'id="program"' in page and "By model line" in page and page.count('class="realize"') == cnn["realizes"]
    assert page.count('class="tl ') == cnn["kernels"]  # the timeline: a mark per kernel
    found = client.get(f"/t/{tid}", params={"q": site}).text
    rows = re.findall(r'<tr data-phase="(\w+)">', found)
    assert 0 < len(rows) < cnn["kernels"] and "backward" in rows and "forward" in rows
    api = client.get(f"/api/traces/{tid}/kernels", params={"q": site})
    assert int(api.headers["X-Total-Count"]) == len(rows) == len(api.json())
    assert f"<b>{len(rows)} matching</b>" in found  # the footer sums what matched, not the whole program
    assert f'<td class="num">{fmt_flops(sum(k["flops"] for k in api.json()))}</td>' in found.split("matching</b>")[1]
    assert all(any(e["line"] == model_line("classifier") for e in k["provenance"]) for k in api.json())
    kernel = client.get(f"/t/{tid}/k/{api.json()[0]['index']}").text
    assert site in kernel and f"/t/{tid}/source#L{model_line('classifier')}" in kernel  # the kernel page links to the program's line
    raw = client.get(f"/api/traces/{tid}/raw").json()
    realized = re.search(r"realized <b>(.*?)</b>", page)
    assert realized and "dtypes." not in realized[1] and " float" in realized[1]  # the header names dtypes as tinygrad does: float
    assert {o["dtype"] for o in raw["program"]["outputs"]} <= {"float", "int", "uchar", "char", "bool", "half", "long"}
  # by model line: a kernel made from several lines (the residual's: its first conv's relu computed again in the second's kernel, an
  # SGD update with the gradient it applies) is listed under each, its time counted once (the lines' own plus shared = total)
  from explorer.analysis import program
  from explorer.analysis.roofline import peaks_of_trace
  with TestClient(app_over(str(db))) as client: raw = client.get(f"/api/traces/{residual['id']}/raw").json()
  peaks = peaks_of_trace(raw) or {"fp32": 1e12, "bw": 1e11}  # untimed on a host without roofs: estimated against these
  tl, lines = program.kernels_as_run(raw, peaks), program.by_line(raw, peaks)
  shared = [k for k in raw["kernels"] if len(program.provenance_sites(program.own_provenance(k))) > 1]
  assert shared and tl["known"] and sum(g["shared"] for g in lines) >= 2 * len(shared)
  once = sum(program.kernel_seconds(k, peaks)[0] or 0.0 for k in shared)
  assert sum(g["seconds"] for g in lines) + once == pytest.approx(tl["total_s"])
  with TestClient(app_over(str(db))) as client:
    source = client.get(f"/t/{tid}/source").text
    assert f'id="L{model_line("classifier")}"' in source and "class SmallCNN" in source

@pytest.fixture
def alone(tmp_path_factory):
  """Held by the tests that time a big program's pages and by the one that floods a server with work: under pytest-xdist they would
  otherwise run at once on the two cores, and the flood's workers would be timed in the pages' latencies."""
  import fcntl
  with open(tmp_path_factory.getbasetemp().parent / "big-program.lock", "w") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    yield

BIG_PROGRAM_PAGES = ("/t/big0program00000", "/t/big0program00000?q={site}", "/t/big0program00000?offset=800", "/api/traces/big0program00000",
                     "/api/traces/big0program00000/kernels?limit=100", "/api/traces/big0program00000/kernels?q={site}&limit=50",
                     "/t/big0program00000/bufferize", "/t/big0program00000/bufferize?offset=800", "/api/traces/big0program00000/graphs/kernels",
                     "/t/big0program00000/k/999", "/t/big0program00000/source")

def test_a_long_documents_json_is_encoded_a_slice_at_a_time_byte_for_byte():
  """A trace's JSON with its kernels encoded a slice at a time (the encoder holds the interpreter for a call: 150 ms for a
  10,000-kernel program's, which the event loop waited on) is to_json's, byte for byte, strings that look like its marker included."""
  from pydantic_core import to_json
  from explorer.store.documents import JSON_SLICE, sliced_json
  doc = {"id": "x", "label": 'kernel-explorer-slices-" \u0000 é', "kernels": [{"i": i, "s": "é\n" * (i % 3)} for i in range(2 * JSON_SLICE + 7)],
         "after": [1.5, None]}
  assert sliced_json(doc, "kernels") == to_json(doc) and sliced_json({**doc, "kernels": []}, "kernels") == to_json({**doc, "kernels": []})

def settled(enrichments: Any, within_s: float = 120) -> None:
  """Wait until no enrichment runs, none again 0.2 s later (a finished one starts its neighbours' after it)."""
  deadline, idle = time.monotonic() + within_s, 0
  while idle < 2 and time.monotonic() < deadline:
    idle = idle + 1 if not (enrichments.tasks.active() or enrichments.background.active()) else 0
    time.sleep(0.2)
  assert idle == 2, "the enrichments a page started did not finish"

def test_a_thousand_kernel_program_answers_in_bounded_pages(cnn, db, alone):
  """Every view of a 1,000-kernel program is a page of it: its size bounded whatever the program's length (each answer under 600 KB, a
  sixtieth of the trace; the trace's own summary, /api/traces/ID, is all of it by design), so its time is too. The latencies
  themselves (target: under a second each, first view included) are measured by benchmarks/load.py's phase 3 on a quiet machine;
  here a wall-clock guard only catches a page that does the whole program's work again (a suite on two busy cores is no stopwatch)."""
  from fastapi.testclient import TestClient
  from explorer.schema import validate_trace
  from explorer.store import Store
  store = Store(str(db))
  big = validate_trace(scaled(store.get_trace(cnn["id"]), 1000))
  assert len(big["kernels"]) >= 1000
  store.put_trace("big0program00000", big, store.get_rewrites(cnn["id"]))
  site = f"capture_programs.py:{model_line('features')}"
  with TestClient(app_over(str(db))) as client:
    # the server's first page compiles its templates and imports what pages need, once per process: a small program's pays for it
    assert client.get(f"/t/{cnn['id']}", headers={"accept": "text/html"}).status_code == 200
    for url in (u.format(site=site) for u in BIG_PROGRAM_PAGES):
      st = time.perf_counter()
      r = client.get(url, headers={"accept": "text/html"} if url.startswith("/t/") else {})
      took = time.perf_counter() - st
      assert r.status_code == 200, (url, r.text[:300])
      if url != "/api/traces/big0program00000": assert len(r.content) < 600_000, f"{url} answered {len(r.content):,} bytes"
      assert took < 5.0, f"{url} took {took:.2f}s"
    traces = client.app.state.services.traces  # what they read: the program light, once, and the kernel page's own heavy half
    assert traces.whole_parses == 0 and traces.parses == 2 and 1 <= traces.heavy_reads <= 3  # (its facts and analysis, if started, read it too)
    bufferize = client.get("/t/big0program00000/bufferize").text  # the buffer table paged, the memory drawing its largest buffers
    assert bufferize.count("<tr><td class=\"mono\">") <= 200 and 'id="buffer-pages"' in bufferize and "?offset=800#buffer-table" in bufferize
    assert bufferize.count('class="mem-bar') == 64 and f"the 64 largest of {len(big['buffers'])} buffers drawn" in bufferize
    assert bufferize.count('class="mem-live') == len(big["schedule"])  # but a bar for every step
    graph = client.get("/api/traces/big0program00000/graphs/kernels").json()
    assert graph["total_nodes"] < 200 and any("collapsed into" in n for n in graph["notes"])  # collapsed by realize and model line
    settled(client.app.state.services.enrichments)  # what the kernel page started, merged into the trace (a new parse to derive from)
    page = client.get("/t/big0program00000").text
    assert page.count('<tr data-phase=') == 200 and "offset=1000" in page  # paged: 200 rows, the rest a link away
    derived = traces.derivations  # the whole program's summary and table total: once per parse, not once per view
    for url in ("/t/big0program00000?offset=200", f"/t/big0program00000?q={site}", "/t/big0program00000"):
      assert client.get(url).status_code == 200
    assert traces.derivations == derived
    steps = client.get("/api/traces/big0program00000/tour").json()["steps"]  # the tour tells the program, then its heaviest kernels
    assert any(s["id"] == "program" for s in steps) and len({s["id"].split("-")[0] for s in steps if s["id"].startswith("k")}) == 8
    st = time.perf_counter()  # its first view computed those 8 kernels' analyses (in a worker, as any trace's tour does); then:
    assert client.get("/t/big0program00000/tour", headers={"accept": "text/html"}).status_code == 200 and time.perf_counter() - st < 1.0
    diff = client.get("/diff/big0program00000/big0program00000").text  # every group listed, the sources of a page of them
    assert diff.count('class="panel flush diff-group"') == 40 and 'offset=40"' in diff
    for _ in range(2):  # read twice: sent gzipped as the store keeps it where the client takes gzip, else opened
      whole = client.get("/api/traces/big0program00000")
      plain = client.get("/api/traces/big0program00000", headers={"accept-encoding": "identity"})
      assert whole.headers["content-encoding"] == "gzip" and "content-encoding" not in plain.headers
      assert whole.content == plain.content and len(whole.json()["kernels"]) == len(big["kernels"])

def test_a_long_programs_timeline_draws_runs_of_kernels():
  """Past MAX_MARKS kernels the timeline draws a mark per run of consecutive kernels: every kernel in exactly one run, in order, each
  run's seconds its kernels' sum (None where one is unknown), its phase the one most of its kernels are in."""
  from explorer.analysis import program
  rows = [{"index": i, "name": f"k{i}", "realize": i // 700, "phase": "backward" if i % 3 else "forward", "seconds": 1e-6 * (i % 7 + 1),
           "estimated": i % 5 == 0, "start": 0.0} for i in range(2500)]
  tl = {"kernels": rows, "total_s": sum(r["seconds"] for r in rows)}
  marks = program.marks(tl, at_most=1000)
  assert len(marks) <= 1000 and marks[0]["index"] == 0 and marks[-1]["last"] == 2499
  assert all(b["index"] == a["last"] + 1 for a, b in zip(marks, marks[1:], strict=False))  # consecutive, none skipped, none twice
  assert sum(m["seconds"] for m in marks) == pytest.approx(tl["total_s"]) and {m["phase"] for m in marks[:-1]} == {"backward"}  # 2 of 3
  assert [m["name"] for m in program.marks(tl, at_most=2500)] == [r["name"] for r in rows]  # a mark per kernel where they fit
  rows[5]["seconds"] = None
  assert program.marks(tl, at_most=1000)[1]["seconds"] is None  # a run with a kernel of unknown time has no time

def test_a_long_schedules_memory_draws_runs_of_steps_keeping_the_peak():
  """Past as many steps as the drawing has pixels, a bar per run of consecutive steps, as tall as the most bytes alive in it."""
  from explorer.present.render import memory_bars
  steps = [{"index": i, "name": f"k{i}", "live_bytes": (i * 7919) % 10007} for i in range(5000)]
  bars = memory_bars(steps, 1600)
  assert len(bars) <= 1600 and bars[0]["first"] == 0 and bars[-1]["last"] == 4999
  assert all(b["first"] == a["last"] + 1 for a, b in zip(bars, bars[1:], strict=False))
  assert max(b["live_bytes"] for b in bars) == max(s["live_bytes"] for s in steps)  # the peak is drawn
  assert all(b["live_bytes"] == max(s["live_bytes"] for s in steps[b["first"]:b["last"] + 1]) for b in bars)
  assert [b["name"] for b in memory_bars(steps[:1600], 1600)] == [s["name"] for s in steps[:1600]]  # a bar per step where they fit

def test_what_a_kernels_provenance_decides_is_computed_once_per_provenance_read():
  """A program's repeats share their provenance as the store reads them back (explorer.store.pieces): its phase and lines are worked
  out once per distinct list, not per kernel; kernels with equal but separate lists (a trace stored whole) each get their own."""
  from explorer.analysis.program import per_provenance
  shared, calls = [{"fn": "conv2d", "file": "m.py", "line": 3, "backward": False}], []
  count = per_provenance(lambda k: calls.append(k["index"]) or len(calls))
  kernels = [{"index": i, "provenance": shared} for i in range(5)] + [{"index": 5, "provenance": list(shared)}, {"index": 6}, {"index": 7}]
  assert [count(k) for k in kernels] == [1, 1, 1, 1, 1, 2, 3, 3] and calls == [0, 5, 6]
  from explorer.analysis.program import matches, search
  named = [{**k, "name": f"E_{k['index']}"} for k in kernels]
  for q in ("m.py:3", "conv2d", "E_6", "", "nothing"):  # a search is the kernels that match, each worked out once per provenance
    assert search(named, q) == [k for k in named if matches(k, q)], q

def test_a_long_programs_memory_line_draws_the_envelope_of_runs_of_steps():
  """The overview's line of bytes alive: a point per step where the steps fit, else each run's least and most at its first step (a
  10,000-step program drew 10,000 points), so the peak and the troughs stay drawn."""
  from explorer.present.render import memory_line
  live = [(i * 7919) % 10007 for i in range(5000)]
  points = [tuple(map(float, p.split(","))) for p in memory_line(live, 1600).split()]
  assert len(points) <= 2 * 1600 and points[0][0] == 0 and points[-1][0] < 5000
  ys = [y for _, y in points]
  assert min(ys) == 2.0 and max(ys) == round(40 - 38 * min(live) / max(live), 2)  # the peak (top of the box) and the lowest
  assert memory_line(live[:1600], 1600).split() == [f"{i},{round(40 - 38 * b / max(live[:1600]), 2)}" for i, b in enumerate(live[:1600])]

# ***** bounded work: a 1,000-kernel program under a flood of first views, from a real server *****

def server_pid(base: str) -> int:
  import psutil
  port = int(base.rsplit(":", 1)[1])
  return next(c.pid for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port and c.status == "LISTEN" and c.pid)

def test_a_flood_of_first_views_is_bounded(cnn, db, tmp_path, alone):
  """A client floods a 1,000-kernel program with first views of other targets (10 a second) and hand schedules: past its share it
  gets 429 with Retry-After before any work starts; the server's memory stays bounded (one parsed copy of the trace, queued work holds
  ids); another client (its own address through a trusted proxy) meanwhile gets its first view computed at once and its health checks
  answered quickly."""
  import sqlite3
  import statistics
  import threading
  import httpx
  import psutil
  from conftest import running_server
  from explorer.schema import validate_trace
  from explorer.store import Store
  flood_db = tmp_path / "flood.sqlite3"
  copy_store(db, flood_db)
  store = Store(str(flood_db))
  store.put_trace("f100d00000000000", validate_trace(scaled(store.get_trace(cnn["id"]), 1000)), store.get_rewrites(cnn["id"]))
  big = "/api/traces/f100d00000000000"
  flooder, other = {"X-Forwarded-For": "198.51.100.1"}, {"X-Forwarded-For": "198.51.100.2"}
  with running_server(flood_db, tmp_path, trusted_proxies="127.0.0.1", max_workers=2, max_page_work_per_client=4) as base:
    proc = psutil.Process(server_pid(base))
    assert httpx.get(f"{base}{big}/kernels/0", headers=other, timeout=60).status_code == 200  # parsed once, before the flood
    rss0, peak, health, answers, stop = proc.memory_info().rss, 0, [], [], threading.Event()
    def probe() -> None:
      with httpx.Client(base_url=base, headers=other, timeout=30) as c:
        while not stop.is_set():
          st = time.perf_counter()
          assert c.get("/api/health").status_code == 200
          health.append(time.perf_counter() - st)
          time.sleep(0.1)
    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    with httpx.Client(base_url=base, headers=flooder, timeout=30) as c:
      for i in range(80):  # 8 s at 10 a second, each a kernel and target no one asked for yet
        r = c.get(f"{big}/kernels/{(i * 37) % 1000}/targets/{('cuda', 'metal', 'opencl', 'wgsl')[i % 4]}")
        answers.append((r.status_code, r.headers.get("retry-after")))
        if i == 40:  # meanwhile the other client's first view is computed now, not after the flood's
          st = time.perf_counter()
          while (got := httpx.get(f"{base}{big}/kernels/500/targets/cuda", headers=other, timeout=30)).status_code == 202: time.sleep(0.2)
          assert got.status_code == 200, got.text
          other_s = time.perf_counter() - st
        peak = max(peak, proc.memory_info().rss)
        time.sleep(0.1)
      flood_end = time.time()
      schedules = [c.post(f"{big}/kernels/{n}/opts", json={"opts": ["UPCAST:0:2"], "from": "none"}) for n in range(12)]
    stop.set()
    prober.join(10)
  statuses = [s for s, _ in answers]
  # its share (4 at once: the fifth, a tenth of a second later, finds none finished; one more as each earlier one finishes, by the store's
  # record of them: a task's row says it finished a moment after its slot is free), the rest refused
  with sqlite3.connect(flood_db) as conn:
    done = conn.execute("SELECT count(*) FROM tasks WHERE kind = 'enrichment' AND client = ? AND finished <= ?",
                        (flooder["X-Forwarded-For"], flood_end + 0.5)).fetchone()[0]
  assert statuses[:5] == [202, 202, 202, 202, 429] and set(statuses) <= {202, 429} and statuses.count(202) <= 4 + done, (done, statuses)
  assert all(ra is not None and int(ra) > 0 for s, ra in answers if s in (429, 503)), answers
  assert [r.status_code for r in schedules].count(202) <= 4 and all(r.headers.get("retry-after") for r in schedules if r.status_code == 429)
  grew = (peak - rss0) / 2**20
  p99 = sorted(health)[int(0.99 * len(health))]
  print(f"flood: {statuses.count(202)} accepted, {statuses.count(429)} refused; server RSS {rss0 / 2**20:.0f} -> peak "
        f"{peak / 2**20:.0f} MiB; other client's health p99 {p99 * 1e3:.0f} ms (median {statistics.median(health) * 1e3:.0f}); "
        f"its first view {other_s:.1f} s")
  assert grew < 500, f"the server grew {grew:.0f} MiB during the flood"
  assert p99 < 0.25, f"another client's health p99 was {p99 * 1e3:.0f} ms"
  assert other_s < 30, f"another client's first view took {other_s:.1f} s"

def test_one_parse_per_trace(cnn, db, tmp_path, alone):
  """Ten concurrent cold views of a big program parse it once (light: explorer.store.pieces); an enrichment stored into it is merged into
  that parsed copy (no second parse), and a write by another process (a new version in the store) is seen."""
  import asyncio
  import httpx
  from explorer.schema import validate_trace
  from explorer.store import Store
  one_db = tmp_path / "one.sqlite3"
  copy_store(db, one_db)
  store = Store(str(one_db))
  store.put_trace("0e0a0e0000000000", validate_trace(scaled(store.get_trace(cnn["id"]), 1000)), store.get_rewrites(cnn["id"]))
  app = app_over(str(one_db))
  traces = app.state.services.traces
  async def views() -> list[int]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as c:
      got = await asyncio.gather(*(c.get(f"/t/0e0a0e0000000000?offset={200 * (i % 5)}&q={'' if i < 5 else 'conv'}") for i in range(10)))
      assert all(r.status_code == 200 for r in got), [r.status_code for r in got]
      for _ in range(600):  # a kernel's record on another target: computed, stored, merged
        if (r := await c.get("/api/traces/0e0a0e0000000000/kernels/3/targets/cuda")).status_code != 202: break
        await asyncio.sleep(0.2)
      assert r.status_code == 200, r.text
      return [r.status_code]
  run_async(views())
  assert traces.parses == 1, f"{traces.parses} parses"
  assert "cuda" in traces.get("0e0a0e0000000000", light=True)["kernels"][3]["targets"] and traces.parses == 1  # merged in place
  Store(str(one_db)).put_enrichments("0e0a0e0000000000", "facts", {(3, "cuda"): {"ok": None, "compiler": None, "message": "elsewhere"}})
  assert traces.get("0e0a0e0000000000", light=True)["kernels"][3]["targets"]["cuda"]["compile"]["message"] == "elsewhere" and traces.parses == 2

def test_a_programs_export_names_every_kernels_model_line(cnn, db):
  """A program's export dropped every kernel's model line: each kernel's section says which line of the program made it."""
  from explorer.present.export import render_html
  from explorer.store import Store
  trace = Store(db).get_trace(cnn["id"])
  html = render_html(trace, cnn["id"], {}, [])
  sections = html.count('class="panel flush kernel"')
  lines = re.findall(r'data-provenance>.*?capture_programs\.py:(\d+)', html)
  assert sections == cnn["kernels"] and html.count("data-provenance>") == sections and {int(n) for n in lines} >= CNN_LINES - {model_line("loss")}

def test_each_rewrite_keeps_the_python_stack_that_opened_it(cnn, db):
  """A pass's matches come with the stack that opened its rewrite group (tinygrad's viewer shows it under VIZ): the program's own line
  that realized, tinygrad's frames by their path in tinygrad, each with its line of code as it ran, none of the explorer's."""
  from fastapi.testclient import TestClient
  from explorer.store import Store
  trace = Store(db).get_trace(cnn["id"])
  first, kernel = trace["scheduler"]["passes"][0], trace["kernels"][0]["passes"][0]
  source = trace["program"]["source"].splitlines()
  with TestClient(app_over(str(db))) as client:
    for p in (first, kernel):
      r = client.get(f"/api/traces/{cnn['id']}/rewrites/{p['group']}/{p['step']}/matches", params={"limit": 1})
      assert r.status_code == 200, r.text
      frames = r.json()["stack"]
      mine = [f for f in frames if f["file"] == trace["program"]["file"]]
      assert any(f["code"] == "with capture(name=f\"{model} training step\", time=timed, repeats=3) as t: training_step(*setup).realize()"
                 for f in mine), frames
      assert all(source[f["line"] - 1].strip() == f["code"] for f in mine)
      assert any(f["file"].startswith("tinygrad/") for f in frames) and frames[-1]["file"].startswith("tinygrad/")  # opened in tinygrad
      assert not any("/explorer/" in f["file"] or f["file"].startswith("explorer/") for f in frames), frames

def test_a_program_reads_the_same_preset_in_recent_and_the_library(cnn, db):
  """One label: a program has no preset ("–") in the home page's Recent list and in the Library alike (the Library said "custom")."""
  from fastapi.testclient import TestClient
  with TestClient(app_over(str(db))) as client: pages = client.get("/").text, client.get("/traces").text
  for page in pages:
    row = page[page.index(f'{cnn["id"]}</span></td>'):]
    assert row.split("<td>", 1)[1].startswith("–</td>"), row[:300]
