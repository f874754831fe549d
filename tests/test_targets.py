"""Every target is a whole pipeline: per-target kernel names, launch dims and sources equal what plain tinygrad 0.14 makes with a
renderer configured the same way (built in a subprocess, independently of the explorer's code, and kept as golden data:
tests/golden/plain_codegen.py), the opt setting reaches every
target, BEAM falls back to heuristic opts with a note, and the CUDA compile facts equal ptxas -v on the same source and arch."""
from __future__ import annotations
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
import pytest
from conftest import REPO, computed, trace_of
from fastapi.testclient import TestClient
from golden import plain_codegen as golden_codegen
from golden.plain_codegen import CASE_VARIANTS, CASES
from support import WINO8_BUILTIN, app_over, shared_run
from explorer.spec import PRESETS, Variant
from explorer.tracing.compilers.toolchain import occupancy, parse_ptxas
from explorer.tracing.enrichments.enrich import add_facts
from explorer.tracing.pipeline.run import run_trace

def reference(case: str, trace: dict) -> dict:
  """Plain tinygrad's codegen for the case: the golden file (tests/golden/plain_codegen.py) where it was made on the trace's device
  for the trace's very spec and variant, else plain tinygrad run now in a process of its own (a GPU host's trace)."""
  golden = golden_codegen.read(case)
  if golden["device"] == trace["env"]["device"] and (golden["spec"], golden["variant"]) == (trace["spec"], trace["variant"]):
    return golden["codegen"]
  return golden_codegen.plain_codegen(trace["spec"], trace["variant"], trace["env"]["device"])

@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_each_targets_kernels_are_what_tinygrad_makes_for_that_renderer(case):
  """Slow: each case is five targets' codegen (tinygrad takes about 4 s per target for the fused medium Winograd kernel), against
  plain tinygrad's, kept as golden data (the tests below keep that data honest)."""
  preset, variant = CASES[case]
  trace = shared_run(preset, case == "wino8 builtin", **CASE_VARIANTS[case]).trace  # wino8's analysed trace is read by the tests below
  assert trace["status"] == "ok" and trace["schema"] == 2, trace["failures"]
  plain = reference(case, trace)
  for target in variant.targets:
    ours = [[k["targets"][target][f] for f in ("name", "global_size", "local_size", "source")] for k in trace["kernels"]]
    assert ours == plain[target], f"{case}: {target} differs from plain tinygrad"
    assert all(k["targets"][target]["arch"] == variant.arch(target) and k["targets"][target]["passes"] for k in trace["kernels"])

def test_the_golden_codegen_was_made_by_the_installed_tinygrad_for_these_cases():
  """Every case has its file, made by the tinygrad installed here from the explorer's Winograd builder as it is, for the case's spec
  and variant as they are: else `make golden` (python tests/golden/plain_codegen.py) makes them again."""
  import importlib.metadata
  version, builder = importlib.metadata.version("tinygrad"), golden_codegen.builder_hash()
  for case in CASES:
    assert golden_codegen.path(case).exists(), f"no golden codegen for {case!r}: run `make golden`"
    g = golden_codegen.read(case)
    assert g["tinygrad"] == version, f"{case}: made by tinygrad {g['tinygrad']}, {version} is installed: run `make golden`"
    assert g["builder"] == builder, f"{case}: made from another explorer/tracing/algorithms: run `make golden`"
    assert (g["case"], g["spec"], g["variant"]) == (case, *golden_codegen.inputs(case)), f"{case}: its inputs changed: run `make golden`"
  assert sorted(p.name for p in golden_codegen.GOLDEN.iterdir()) == sorted(golden_codegen.path(c).name for c in CASES)  # none stale

@pytest.mark.slow
def test_the_golden_codegen_is_what_plain_tinygrad_makes_now():
  """One case a day, in turn (the day since the epoch picks it, so every case comes round): made again now by plain tinygrad in a
  process of its own, byte for byte the stored file, so the golden data cannot drift from what tinygrad makes."""
  case = list(CASES)[int(time.time() // 86400) % len(CASES)]
  print(f"golden case checked today: {case}")
  assert golden_codegen.make(case) == golden_codegen.path(case).read_bytes(), f"{case}: plain tinygrad makes other code now: run `make golden`"

def test_the_opt_setting_reaches_every_target():
  """The issue's case: wino8 direct with NOOPT renders r_8_32_32_8_3_3 for CUDA (it rendered heuristic opts before)."""
  trace = shared_run("wino8", **CASE_VARIANTS["wino8 direct NOOPT"]).trace
  for t in ("clang", "cuda", "metal", "opencl"):
    assert trace["kernels"][0]["targets"][t]["name"] == "r_8_32_32_8_3_3" and trace["kernels"][0]["targets"][t]["opts"] == [], t

BEAM_CHOICE = r"""
import json
from explorer.tracing import tg
from explorer.tracing.pipeline.renders import _beam_choice
x, w = tg.Tensor.empty(1, 2, 8, 8), tg.Tensor.empty(4, 2, 3, 3)
ast = next(c.src[0] for c in x.conv2d(w, padding=1).schedule_linear().src if c.src[0].op is tg.Ops.SINK)
cuda = tg.render_target("cuda", "sm_90")
out = {}
for opts in (["UPCAST:0:4"], ["THREAD:0:2"]):  # THREAD splits a CPU kernel across cores: CUDA has no such axis
  got, notes = _beam_choice(ast, cuda, opts)
  prg = tg.codegen_deviceless(got, cuda)
  out[",".join(opts)] = {"notes": notes, "opts": [tg.opt_text(o) for o in prg.src[0].arg.applied_opts]}
out["heuristic"] = [tg.opt_text(o) for o in tg.heuristic_opts(ast, cuda)]
print(json.dumps(out))
"""

def test_beam_on_a_deviceless_target_gets_the_devices_choice_where_legal_else_the_heuristics():
  """A deviceless target cannot time BEAM's candidates: it renders with the opts BEAM chose on the trace's device where tinygrad accepts
  them for that target, and with the heuristic's otherwise; its notes say which (tests/test_trace.py checks a BEAM trace end to end)."""
  out = subprocess.run([sys.executable, "-c", BEAM_CHOICE], capture_output=True, text=True, timeout=300, cwd=REPO,
                       env={**{k: v for k, v in os.environ.items() if k != "TRACK_MATCH_STATS"}, "VIZ": "0"})
  assert out.returncode == 0, out.stderr[-2000:]
  got = json.loads(out.stdout.strip().splitlines()[-1])
  legal, illegal = got["UPCAST:0:4"], got["THREAD:0:2"]
  assert legal["opts"] == ["UPCAST:0:4"] and "applied here: UPCAST:0:4" in legal["notes"][0]
  assert illegal["opts"] == got["heuristic"] and "BEAM needs the device" in illegal["notes"][0] and "not legal here" in illegal["notes"][0]

needs_cuda_tools = pytest.mark.skipif(not (shutil.which("nvcc") and shutil.which("ptxas")),
                                      reason="no CUDA compiler here (nvcc and ptxas); pip install 'kernel-explorer[cuda]' for NVRTC")

@needs_cuda_tools
def test_cuda_registers_are_what_ptxas_reports():
  """Every CUDA kernel of a trace, compiled here again by nvcc -ptx then ptxas -v for the same arch: the registers and spills the
  trace reports are ptxas' own."""
  trace = add_facts(run_trace(PRESETS["wino8"], Variant(algo="winograd", wino_impl="explorer", staging="fused", targets=("cuda",),
                                                   time=False)).trace)
  for k in trace["kernels"]:
    rec = k["targets"]["cuda"]
    with tempfile.TemporaryDirectory() as d:
      with open(f"{d}/k.cu", "w") as f: f.write(rec["source"])
      subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "-o", f"{d}/k.ptx", f"{d}/k.cu"], check=True, capture_output=True, timeout=120)
      report = subprocess.run(["ptxas", "-arch=sm_90", "-v", "-o", f"{d}/k.cubin", f"{d}/k.ptx"], check=True, capture_output=True, text=True,
                              timeout=120).stderr
    regs = int(re.search(r"Used (\d+) registers", report).group(1))
    assert rec["compile"]["ok"] and rec["compile"]["registers"] == regs, (k["name"], rec["compile"], report)
    assert rec["compile"]["spill_store_bytes"] == parse_ptxas(report)["spill_store_bytes"]
    if rec["local_size"]: assert rec["compile"]["occupancy"]["block_threads"] == eval("*".join(map(str, rec["local_size"])))  # noqa: S307

def test_occupancy_follows_the_calculators_rules():
  assert occupancy("sm_90", 64, 128)["occupancy"] == 0.5 and occupancy("sm_90", 64, 128)["limited_by"] == ["registers"]
  assert occupancy("sm_86", 64, 128)["warps_per_sm"] == 32 and occupancy("sm_86", 64, 128)["max_warps_per_sm"] == 48
  assert occupancy("sm_90", 255, 128)["occupancy"] == 8 / 64
  assert occupancy("sm_90", 32, 1)["limited_by"] == ["blocks"]  # 1-thread blocks: the block cap, not registers
  assert occupancy("sm_80", 32, 256, 49153)["occupancy"] == 0  # over the 48 KB of static shared memory a block may have

def test_compile_facts_say_what_ran_or_what_is_missing():
  trace = add_facts(run_trace(PRESETS["small"], Variant(targets=("metal", "wgsl", "opencl"), time=False)).trace)
  k = trace["kernels"][0]["targets"]
  assert k["metal"]["compile"]["ok"] is None and "macOS" in k["metal"]["compile"]["message"]
  assert k["wgsl"]["compile"]["ok"] is None and k["wgsl"]["compile"]["message"]
  if shutil.which("clang"):
    assert k["opencl"]["compile"]["ok"] and k["opencl"]["compile"]["compiler"].startswith("clang")
    assert k["clang"]["compile"]["ok"] and "assembly" in k["clang"]["compile"]["disasm"]["kind"]

def test_bad_archs_are_refused(tmp_path):
  from explorer.cli import main
  assert main(["trace", "--preset", "small", "--cuda-arch", "sm_99", "--no-time", "--quiet"]) == 2
  app = app_over(str(tmp_path / "a.sqlite3"), runner=lambda *a: pytest.fail("a trace ran"))
  with TestClient(app) as client:
    r = client.post("/api/traces", json={"preset": "small", "variant": {"cuda_arch": "sm_99"}})
    assert r.status_code == 422 and "sm_90" in r.text

def test_the_kernel_page_switches_every_figure_to_the_target(tmp_path):
  app = app_over(str(tmp_path / "k.sqlite3"))
  with TestClient(app) as client:
    trace_id = trace_of(client, {"preset": "small", "variant": {"targets": ["cuda", "metal"], "time": False}})
    trace = client.get(f"/api/traces/{trace_id}/raw").json()
    host, cuda = trace["kernels"][0]["targets"]["clang"], trace["kernels"][0]["targets"]["cuda"]
    assert host["local_size"] != cuda["local_size"]  # the case: host 2x1x1 / none, CUDA 16x8 threads
    for target, rec in (("clang", host), ("cuda", cuda)):
      page = client.get(f"/t/{trace_id}/k/0?target={target}").text
      dims = re.search(r'id="dims">([^<]*)<', page).group(1)
      assert dims == f"{'×'.join(map(str, rec['global_size']))} × {'×'.join(map(str, rec['local_size']))}", (target, dims)
      assert rec["name"] in page and f'data-target="{target}"' in page
      api = client.get(f"/api/traces/{trace_id}/kernels/0/targets/{target}")
      assert api.status_code == 200 and api.json()["name"] == rec["name"]
    table = client.get(f"/t/{trace_id}?target=cuda").text  # the trace page's kernel table turns to the target too
    assert f'>{cuda["name"]}</a>' in table and f'>{host["name"]}</a>' not in table
    assert f'>{host["name"]}</a>' in client.get(f"/t/{trace_id}").text

@needs_cuda_tools
def test_a_diff_on_cuda_compares_cuda_kernels_registers_included():
  """Staged vs fused explorer Winograd, diffed on CUDA: each group's figures are the CUDA records' (not the host's), and the fused
  MHAT+out kernel needs more registers than the staged MHAT and output kernels."""
  from explorer.analysis.diff import full_diff
  runs = {s: shared_run("wino8", **CASE_VARIANTS[f"wino8 explorer {s}"]) for s in ("staged", "fused")}
  d = full_diff(runs["staged"].trace, runs["fused"].trace, runs["staged"].blobs, runs["fused"].blobs, "cuda", time=False, numerics=False)
  fused = next(g for g in d["groups"] if g["relation"] == "fused")
  cuda_uops = sum(k["targets"]["cuda"]["linear_uops"] for k in runs["fused"].trace["kernels"] if k["index"] in [x["index"] for x in fused["b"]])
  assert fused["metrics"]["b"]["linear_uops"] == cuda_uops
  assert fused["metrics"]["a"]["registers"] < fused["metrics"]["b"]["registers"], fused["metrics"]
  assert fused["metrics"]["a"]["max_live"] < fused["metrics"]["b"]["max_live"]  # "did pressure go up?" answered in one view
  assert "registers" in fused["metrics"]["delta"]
  for side, run in (("a", runs["staged"]), ("b", runs["fused"])):  # one name per kernel on the page: the memory row's are CUDA's too
    cuda_names = [k["targets"]["cuda"]["name"] for k in run.trace["kernels"]]
    stepped = [s["name"] for s in d["memory"][side]["steps"] if s["kind"] == "kernel"]
    assert stepped == [cuda_names[r["kernel"]] for r in run.trace["schedule"] if r["kind"] == "kernel"] and set(stepped) <= set(cuda_names)
    assert [g_k["name"] for g in d["groups"] for g_k in g[side]] and all(g_k["name"] in cuda_names for g in d["groups"] for g_k in g[side])

def test_every_targets_codegen_steps_are_browsable(tmp_path):
  """Each target's codegen ran in its own process and kept its rewrite blob: its passes expand like the host's (codegen@T/...)."""
  app = app_over(str(tmp_path / "b.sqlite3"))
  with TestClient(app) as client:
    trace_id = trace_of(client, {"preset": "small", "variant": {"targets": ["cuda", "metal"], "time": False}})
    for target in ("cuda", "metal"):
      rec = client.get(f"/api/traces/{trace_id}/kernels/0/targets/{target}").json()
      p = next(i for i, q in enumerate(rec["passes"]) if q["matches"])
      for at in ("before", "after", "m1"):
        r = client.get(f"/api/traces/{trace_id}/graphs/codegen@{target}/0/{p}/{at}?nodes=0")
        assert r.status_code == 200 and target in r.json()["title"] and r.json()["total_nodes"] > 0, (target, at, r.text[:200])
      assert client.get(f"/api/traces/{trace_id}/graphs/codegen@{target}/0/{p}/after.svg").status_code == 200
      page = client.get(f"/t/{trace_id}/k/0?target={target}&graph=passes").text
      assert f'data-prefix="codegen@{target}/0"' in page
    assert client.get(f"/api/traces/{trace_id}/graphs/codegen@wgsl/0/0/after").status_code == 404

@pytest.mark.slow
def test_a_target_not_asked_for_is_computed_on_first_request_and_stored(tmp_path):
  """A kernel's record on a target the trace did not render: computed when first asked for, for that kernel alone first (its AST rebuilt
  from the stored rewrite blob, rendered in a worker as a trace renders it), the same record an eager trace makes; stored and served
  from the store after; then its neighbours in the background. Slow: an eager trace (two targets) to compare with, a served trace,
  then the lazy target's codegen in workers."""
  from explorer.stages import ENRICH_TARGET
  app = app_over(str(tmp_path / "l.sqlite3"), background_workers=1, render_ahead="")  # its first views, not the render ahead
  body = {"preset": "wino8", "variant": {"algo": "winograd", "targets": ["cuda"], "time": False}}
  eager = json.loads(json.dumps(shared_run("wino8", True, **WINO8_BUILTIN).trace))  # metal among its targets; as the API serves it (no tuples)
  with TestClient(app) as client:  # a server stopped while it computes a kernel's record stores nothing of it
    trace_id = trace_of(client, body)
    assert client.get(f"/api/traces/{trace_id}/kernels/1/targets/metal").status_code == 202
  app = app_over(str(tmp_path / "l.sqlite3"), background_workers=1, render_ahead="")  # its first views, not the render ahead
  with TestClient(app) as client:  # restarted: it serves the trace, and the next view computes the record again
    svc = app.state.services
    assert client.get(f"/api/traces/{trace_id}").status_code == 200
    assert svc.store.enrichments(trace_id, ENRICH_TARGET) == {} and all("metal" not in k["targets"] for k in svc.store.get_trace(trace_id)["kernels"])
    assert all(set(k["targets"]) == {"clang", "cuda"} and k["targets"]["cuda"]["compile"] is None for k in svc.store.get_trace(trace_id)["kernels"])
    url = f"/api/traces/{trace_id}/kernels/1/targets/metal"
    with ThreadPoolExecutor(2) as pool: firsts = list(pool.map(lambda _: client.get(url), range(2)))  # two first views at once
    assert [r.status_code for r in firsts] == [202, 202], [r.text for r in firsts]
    page = client.get(f"/t/{trace_id}/k/1?target=metal")
    assert 'data-pending-target="metal"' in page.text and page.headers["cache-control"] == "no-store"
    got = wait_for_target(client, url)
    assert svc.enrichments.computed == 1  # one computation for the three requests
    assert set(svc.store.enrichments(trace_id, ENRICH_TARGET)) == {(1, "metal")}  # that kernel alone first
    fields = ("name", "global_size", "local_size", "source", "opts", "linear_uops", "ops", "uops_listing", "pressure", "line_map")
    assert [got[f] for f in fields] == [eager["kernels"][1]["targets"]["metal"][f] for f in fields]
    computed = svc.enrichments.computed
    assert client.get(url).status_code == 200 and svc.enrichments.computed == computed  # from the store, at once
    page = client.get(f"/t/{trace_id}/k/1?target=metal").text
    assert "data-pending-target" not in page and got["name"] in page
    assert "metal" in client.get(f"/api/traces/{trace_id}/kernels/1").json()["sources"]
    assert client.get(f"/api/traces/{trace_id}/graphs/codegen@metal/1/0/after?nodes=0").status_code == 200  # its own rewrite blob
    assert client.get(f"/api/traces/{trace_id}/kernels/1/targets/nosuch").status_code == 404
    deadline = time.monotonic() + 120  # then its neighbours, in the background
    while len(svc.store.enrichments(trace_id, ENRICH_TARGET)) < len(eager["kernels"]): assert time.monotonic() < deadline; time.sleep(0.5)
    later = client.get(f"/api/traces/{trace_id}/kernels/3/targets/metal").json()
    assert [later[f] for f in fields] == [eager["kernels"][3]["targets"]["metal"][f] for f in fields]

@pytest.mark.slow
def test_a_stored_trace_renders_its_first_kernels_ahead_and_stops_that_for_a_pages_work(tmp_path):
  """Once a trace is stored its first kernels are rendered on the render-ahead targets in the background (render_ahead_kernels of
  them, AHEAD_CHUNK a task): a page's first view of one is then read from the store, nothing computed for it; the records are those an
  eager trace makes. Work a page waits for stops a background worker that runs (its task queued again, behind that work, which runs
  with no background worker beside it) and the render ahead still ends with every kernel it was asked for. Slow: a served trace, and
  the background's renders in workers."""
  from explorer.stages import ENRICH_TARGET
  app = app_over(str(tmp_path / "a.sqlite3"), background_workers=1, render_ahead="metal,opencl", render_ahead_kernels=3)
  eager = json.loads(json.dumps(shared_run("wino8", True, **WINO8_BUILTIN).trace))  # metal and opencl among its targets
  fields = ("name", "global_size", "local_size", "source", "opts", "linear_uops", "ops", "uops_listing", "pressure", "line_map")
  with TestClient(app) as client:
    svc = app.state.services.enrichments
    trace_id = trace_of(client, {"preset": "wino8", "variant": {"algo": "winograd", "time": False}})
    assert len(eager["kernels"]) > 3  # so that the render ahead stops short of the last kernels
    deadline = time.monotonic() + 120
    while not any(t.live for t in svc.background.active()):  # a background worker running (the host's analyses, then the renders)
      assert time.monotonic() < deadline, "no background worker ran after the trace was stored"
      time.sleep(0.02)
    running = [t for t in svc.background.active() if t.live]
    stopped = {pid for t in running for pid in t.live}
    assert client.get(f"/api/traces/{trace_id}/kernels/{len(eager['kernels']) - 1}/targets/wgsl").status_code == 202  # a page's work
    assert all(t.yielded for t in running)
    while svc.tasks.active():  # (a stopped worker is held until its thread has read its end)
      assert {pid for t in svc.background.active() for pid in t.live} <= stopped, "a background worker started beside a page's work"
      time.sleep(0.02)
    def ahead() -> set[tuple[int, str]]: return {k for k in svc.store.enrichments(trace_id, ENRICH_TARGET) if k[1] in ("metal", "opencl")}
    while ahead() != {(n, t) for n in range(3) for t in ("metal", "opencl")}:
      assert time.monotonic() < deadline + 240, f"the render ahead stored {sorted(ahead())}"
      time.sleep(0.2)
    while svc.background.active(): time.sleep(0.1)
    assert ahead() == {(n, t) for n in range(3) for t in ("metal", "opencl")}  # the first three kernels only
    computed = svc.computed
    for n in range(3):
      got = client.get(f"/api/traces/{trace_id}/kernels/{n}/targets/metal")
      assert got.status_code == 200, got.text
      assert [got.json()[f] for f in fields] == [eager["kernels"][n]["targets"]["metal"][f] for f in fields]
    assert svc.computed == computed  # read from the store: nothing computed for these views
    assert client.get(f"/api/traces/{trace_id}/kernels/3/targets/metal").status_code == 202  # past render_ahead_kernels: on first view

@pytest.mark.slow
def test_a_servers_trace_renders_its_first_render_ahead_target_beside_itself(tmp_path):
  """render_beside: the first of render_ahead's targets is rendered with the trace, in a process beside its host codegen, so that
  every kernel's record on it is in the trace as it is stored, with no background worker (there is none here) and nothing computed for
  its first view: the record an eager trace of that target makes, its codegen steps expanded from its own rewrite blob. The trace's
  variant and id are the ones asked for, and render_ahead's other targets are left to the background (here: their first view).
  Slow: a served trace with a render process beside it."""
  from explorer.store.keys import trace_key
  app = app_over(str(tmp_path / "b.sqlite3"), render_ahead="cuda,metal", render_beside=1)  # background_workers=0
  eager = json.loads(json.dumps(shared_run("wino8", True, **WINO8_BUILTIN).trace))  # cuda among its targets
  fields = ("name", "global_size", "local_size", "source", "opts", "linear_uops", "ops", "uops_listing", "passes")
  variant = {"algo": "winograd", "time": False}
  with TestClient(app) as client:
    svc = app.state.services
    trace_id = trace_of(client, {"preset": "wino8", "variant": variant})
    assert trace_id == trace_key(PRESETS["wino8"], Variant(**variant))  # the id of the trace asked for
    stored = svc.store.get_trace(trace_id)
    assert stored["variant"]["targets"] == [] and len(stored["kernels"]) == len(eager["kernels"])
    host = stored["kernels"][0]["host_target"]
    assert all(set(k["targets"]) == {host, "cuda"} for k in stored["kernels"])  # cuda stored with the trace, metal not
    for k, want in zip(stored["kernels"], eager["kernels"], strict=True):
      assert [k["targets"]["cuda"][f] for f in fields] == [want["targets"]["cuda"][f] for f in fields], k["index"]
    computed = svc.enrichments.computed
    for n in range(len(stored["kernels"])):
      got = client.get(f"/api/traces/{trace_id}/kernels/{n}/targets/cuda")
      assert got.status_code == 200 and got.json()["source"] == eager["kernels"][n]["targets"]["cuda"]["source"], got.text[:300]
    assert svc.enrichments.computed == computed  # read from the trace: nothing computed for these first views
    assert client.get(f"/api/traces/{trace_id}/graphs/codegen@cuda/1/0/after?nodes=0").status_code == 200  # its own rewrite blob
    assert client.get(f"/api/traces/{trace_id}/kernels/0/targets/metal").status_code == 202  # render_ahead's next: computed when asked

def test_a_local_trace_records_where_each_part_ran(tmp_path):
  """Without a job queue every part runs under the server's process: each stage the trace ran, and a target added on first request,
  name it as PID@HOST (a queue worker's traces name it as NAME@HOST: test_queue); the page's facts row says so in one place."""
  import socket
  from explorer.stages import STAGES
  app = app_over(str(tmp_path / "l.sqlite3"))
  body = {"spec": {"batch": 1, "cin": 2, "cout": 2, "height": 8, "width": 8, "kernel": 3}, "variant": {"targets": ["cuda"], "repeats": 2}}
  here = f"{os.getpid()}@{socket.gethostname()}"
  with TestClient(app) as client:
    trace_id = trace_of(client, body)
    ran_on = client.get(f"/api/traces/{trace_id}").json()["env"]["ran_on"]
    assert ran_on == {"worker": None, "host": socket.gethostname(), "pid": os.getpid(), "by": here, "stages": dict.fromkeys(STAGES, here)}
    assert f"ran on <b>{here}</b></span>" in client.get(f"/t/{trace_id}").text
    wait_for_target(client, f"/api/traces/{trace_id}/kernels/0/targets/metal")
    assert client.get(f"/api/traces/{trace_id}").json()["env"]["ran_on"]["targets"] == {"metal": here}
    assert f"ran on <b>{here}</b> (every stage, Metal target)</span>" in client.get(f"/t/{trace_id}").text

def test_a_persons_tabs_wait_their_turn_and_the_overview_reads_every_target_as_they_land(tmp_path):
  """One person opens a kernel's five other target tabs at once, past their share of work running or waiting (3 here; 64 by default):
  every tab answers its page (200), the first two rendering, the third next in line, the last two waiting for a place in it, and each
  fills in; meanwhile the overview, read at every target in a loop, answers 200 with the totals as its rows show them (the kernels
  without a record on that target yet counted by their own figures, saying how many)."""
  import threading
  from explorer.targets import TARGETS
  app = app_over(str(tmp_path / "p.sqlite3"), max_page_work_per_client=3, background_workers=0)
  body = {"spec": {"batch": 1, "cin": 2, "cout": 2, "height": 8, "width": 8, "kernel": 3},
          "variant": {"algo": "winograd", "targets": ["cuda"], "repeats": 2}}
  with TestClient(app) as client:
    trace_id = trace_of(client, body)
    tabs = [t for t in TARGETS if t not in ("cuda", "clang")]
    assert len(tabs) == 5 and len(client.get(f"/api/traces/{trace_id}/kernels").json()) == 4
    overview, stop = [], threading.Event()
    def read_overview() -> None:
      while not stop.is_set():
        for target in TARGETS:
          r = client.get(f"/t/{trace_id}", params={"target": target})
          overview.append((r.status_code, target, r.text if r.status_code != 200 else ""))
    reader = threading.Thread(target=read_overview, daemon=True)
    reader.start()
    pages = [client.get(f"/t/{trace_id}/k/0", params={"target": t}) for t in tabs]
    assert [p.status_code for p in pages] == [200] * 5 and all(f'data-pending-target="{t}"' in p.text for p, t in zip(pages, tabs, strict=False))
    assert all("waits for a place in the line" not in p.text for p in pages[:2]), "the first two run at once"
    assert "waits for a worker, next" in pages[2].text, pages[2].text
    assert all("waits for a place in the line (this client has 3 enrichments running or waiting" in p.text for p in pages[3:])
    deadline = time.monotonic() + 300
    for t in tabs:  # each tab's script polls its record's URL (here without the Retry-After's pause) until it is stored
      while (r := client.get(f"/api/traces/{trace_id}/kernels/0/targets/{t}")).status_code in (202, 429):
        assert time.monotonic() < deadline, (t, r.text)
        time.sleep(0.2)
      assert r.status_code == 200 and r.json()["name"], r.text
    stop.set()
    reader.join(60)
    assert overview and all(code == 200 for code, _, _ in overview), [o for o in overview if o[0] != 200][:3]
    page = client.get(f"/t/{trace_id}", params={"target": "metal"}).text
    assert "(3 of 4 not on Metal yet)" in page, "kernels 1-3 have no Metal record: their own figures are summed, and the total says so"

def wait_for_target(client, url: str, timeout_s: float = 300) -> dict:
  # a done task behind a 202: its record was stored after this request read the trace (the next request answers 200)
  r = computed(client, url, timeout_s, lambda answer: answer["status"] in ("queued", "running", "done"))
  assert r.status_code == 200, r.text
  return r.json()

def test_a_compiler_that_hangs_or_crashes_is_one_kernels_result(tmp_path, monkeypatch):
  from explorer.tracing.compilers import toolchain
  for name, body in (("clang", "sleep 30"), ("nvcc", "kill -SEGV $$")):
    (tmp_path / name).write_text(f"#!/bin/sh\n{body}\n")
    (tmp_path / name).chmod(0o755)
  monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
  monkeypatch.setattr(toolchain, "TIMEOUT_S", 0.5)
  toolchain.version.cache_clear()
  hung = toolchain.compile_target("clang", "int main(){}", "x86_64", None)
  assert hung["ok"] is False and "did not finish within" in hung["message"]
  crashed = toolchain.compile_target("cuda", "extern \"C\" __global__ void k() {}", "sm_90", 128)
  assert crashed["ok"] is False and crashed["message"]
  toolchain.version.cache_clear()

def test_compile_facts_are_kept_by_what_decides_them_and_read_back_only_as_facts(tmp_path, monkeypatch):
  """The compile cache (explorer.tracing.compilers.compile_cache): a kernel compiled again by the same tools is read back (no compiler runs),
  exactly the facts it had, SASS included; a kept file that does not read as facts is compiled again; a failure is never kept; another
  build of a tool is another key; "off" keeps nothing."""
  from explorer.tracing.compilers import compile_cache, toolchain
  monkeypatch.setenv(compile_cache.CACHE_VAR, str(cache := tmp_path / "cache"))
  real_run = toolchain._run
  def ran(cmd, stdin=None):
    calls.append(pathlib.Path(cmd[0]).name)
    return real_run(cmd, stdin)
  monkeypatch.setattr(toolchain, "_run", ran)
  sources = {"clang": "int twice(int x) { return 2 * x; }"}
  if shutil.which("nvcc") and toolchain.tool("nvdisasm"): sources["cuda"] = 'extern "C" __global__ void k(float* a) { a[threadIdx.x] *= 2.0f; }'
  for target, src in sources.items():
    calls: list[str] = []
    fresh = toolchain.compile_target(target, src, "sm_90", 32)
    assert fresh["ok"] and calls and (target != "cuda" or fresh["sass"]["instructions"]), fresh
    calls.clear()
    assert toolchain.compile_target(target, src, "sm_90", 32) == json.loads(json.dumps(fresh)) and calls == [], calls
  assert len(list(cache.glob("*.json"))) == len(sources)
  monkeypatch.setenv(compile_cache.CACHE_VAR, str(one := tmp_path / "one"))
  fresh = toolchain.compile_target("clang", sources["clang"], "sm_90", 32)
  [kept] = one.glob("*.json")
  for garbage in (b"\x80not json", b'{"ok": "yes", "compiler": 1}', b"[]", b'{"ok": true}'):
    kept.write_bytes(garbage)
    calls = []
    assert toolchain.compile_target("clang", sources["clang"], "sm_90", 32) == fresh and calls == ["clang"]  # compiled again
    assert json.loads(kept.read_bytes()) == json.loads(json.dumps(fresh))  # and kept again
  monkeypatch.setenv(compile_cache.CACHE_VAR, str(cache))
  calls = []
  bad = toolchain.compile_target("clang", "int broken(", "sm_90", None)
  assert bad["ok"] is False and calls and len(list(cache.glob("*.json"))) == len(sources)  # a failure is not kept
  (tmp_path / "bin").mkdir()
  (fake := tmp_path / "bin" / "clang").write_text(f"#!/bin/sh\nexec {shutil.which('clang')} \"$@\"\n")
  fake.chmod(0o755)
  monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
  calls = []
  assert toolchain.compile_target("clang", sources["clang"], "sm_90", 32)["ok"] and calls == ["clang"]  # another clang: compiled again
  monkeypatch.setenv(compile_cache.CACHE_VAR, "off")
  for _ in range(2):
    calls = []
    assert toolchain.compile_target("clang", sources["clang"], "sm_90", 32)["ok"] and calls == ["clang"]  # off: nothing read back
  assert len(list(cache.glob("*.json"))) == len(sources) + 1 and not list(cache.glob("*.tmp"))

def test_a_trace_of_the_previous_schema_still_opens(tmp_path):
  """Schema 1 (sources per target only): its kernel page, table and API show the host record; other targets say why they cannot."""
  from explorer.store import Store
  trace = run_trace(PRESETS["small"], Variant(targets=("cuda",), time=False))
  kernels = [{k: v for k, v in kern.items() if k not in ("targets", "host_target")} for kern in trace.trace["kernels"]]
  old = {**trace.trace, "schema": 1, "kernels": kernels}
  Store(tmp_path / "o.sqlite3").put_trace("0123456789abcdef", old, trace.rewrites)
  app = app_over(str(tmp_path / "o.sqlite3"))
  with TestClient(app) as client:
    for url in ("/t/0123456789abcdef", "/t/0123456789abcdef/k/0", "/t/0123456789abcdef/k/0?target=cuda&graph=passes"):
      assert client.get(url).status_code == 200, url
    assert client.get("/api/traces/0123456789abcdef/kernels/0/targets/host").json()["name"] == old["kernels"][0]["name"]
    r = client.get("/api/traces/0123456789abcdef/kernels/0/targets/cuda")
    assert r.status_code == 409 and "trace it again" in r.json()["detail"]

def test_register_pressure_picks_out_the_fused_kernel():
  """Liveness over the linear UOps (targets[T].pressure): on the medium preset the fused explorer Winograd's MHAT+out kernel holds more
  values at once than the staged variant's output kernel; the peak is where the curve says."""
  from explorer.tracing.enrichments.enrich import add_analysis
  peaks = {}
  for staging in ("staged", "fused"):
    run = shared_run("medium", **CASE_VARIANTS[f"medium explorer {staging}"])
    trace = add_analysis(run.trace, run.blobs, ["clang"])  # the host's alone, from the shared trace's rewrite blob
    for k in trace["kernels"]:
      p = k["targets"]["clang"]["pressure"]
      assert max(v for _, v in p["curve"]) == p["max_live"] and len(p["curve"]) <= 512 and p["ssa_values"] > 0
      peaks[(staging, k["role"])] = p["max_live"]
  assert peaks[("fused", "mhat+out")] > peaks[("staged", "out")], peaks

def test_spec_checks_run_on_every_stage_and_keep_every_violation(tmp_path):
  """tinygrad's own specs over the tensor graph, the kernel graph, each kernel AST and each target's program; a graph that breaks a
  spec has every bad UOp listed (type_verify would stop at the first) and its stage turns red."""
  trace = shared_run("wino8", True, **WINO8_BUILTIN).trace
  assert {s: (c["spec"], c["ok"]) for s, c in trace["spec_checks"].items()} == {"tensor_graph": ("spec_tensor", True),
                                                                                 "kernel_graph": ("spec_kernel_graph", True)}
  assert all(k["spec"]["ast"]["ok"] and k["targets"][k["host_target"]]["spec"]["ok"] and k["targets"]["cuda"]["spec"]["ok"] for k in trace["kernels"])
  assert all(c["checked"] > 0 for c in trace["spec_checks"].values())
  check = r"""
from explorer.tracing import tg
from tinygrad.uop.ops import UOp, Ops
bad = UOp(Ops.ADD, tg.dtypes.float, (UOp(Ops.CONST, tg.dtypes.int, arg=1), UOp(Ops.CONST, tg.dtypes.float, arg=2.0)))
import json; print(json.dumps(tg.spec_check([bad.sink()], "program")))
"""
  got = json.loads(subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True, cwd=REPO, timeout=120).stdout)
  assert not got["ok"] and got["violation_count"] == 2 and [v["op"] for v in got["violations"]] == ["CONST", "ADD"]
  assert "UOp verification failed" in got["violations"][1]["message"]
  from explorer.web.routes.common import ribbon
  broken = {**trace, "spec_checks": {**trace["spec_checks"], "kernel_graph": {**trace["spec_checks"]["kernel_graph"], "ok": False}}}
  assert next(r for r in ribbon(broken, "x", "overview") if r["key"] == "bufferize")["state"] == "error"

def test_loop_splits_are_recorded_with_the_rule_read_from_tinygrad(tmp_path):
  """tinygrad's "split ranges" pass cuts the builtin Winograd output kernel's 32-wide loops into 8 x 4: the record names the loops, what
  they became, and the rule as it stands in tinygrad's file (read when the trace ran, not a copied string)."""
  import inspect
  from tinygrad.codegen import simplify
  run = shared_run("wino8", True, **WINO8_BUILTIN)
  trace = run.trace
  out = next(k for k in trace["kernels"] if k["role"] == "out")
  for target in ("clang", "cuda"):
    splits = out["targets"][target]["loop_splits"]
    assert splits and all(s["pass"] == "split ranges" for s in splits), target
    for s in splits:
      for r in s["ranges"]:
        became = [n["size"] for n in s["into"] if n["axis"] == r["axis"]]
        assert len(became) == 2 and became[0] * became[1] == r["size"], (r, became)
      path, line = s["rule"].split(":")
      assert s["rule_source"].splitlines()[0] == inspect.getsource(simplify).splitlines()[int(line) - 1]
  assert not any(k["targets"]["cuda"]["loop_splits"] for k in trace["kernels"] if k["role"] == "ghat")
  # the same analysis read back from the stored rewrite blob, as a page computes it when first viewed
  from explorer.tracing.enrichments.enrich import add_analysis
  fields = ("pressure", "line_map", "line_map_note", "loop_splits", "spec")
  bare = {**trace, "kernels": [{**k, "targets": {**k["targets"], "clang": {f: v for f, v in k["targets"]["clang"].items() if f not in fields}}}
                               for k in trace["kernels"]]}
  lazy = json.loads(json.dumps(add_analysis(bare, {"": run.rewrites}, ["clang"])))  # as the store keeps it (and shared_run's trace is)
  for lk, k in zip(lazy["kernels"], trace["kernels"], strict=False):
    assert [lk["targets"]["clang"][f] for f in fields] == [k["targets"]["clang"][f] for f in fields]
  app = app_over(str(tmp_path / "s.sqlite3"))
  from explorer.store import Store
  Store(tmp_path / "s.sqlite3").put_trace("00000000000000aa", run.trace, run.rewrites)
  with TestClient(app) as client:
    n = next(k["index"] for k in run.trace["kernels"] if k["role"] == "out")
    assert 'id="loop-splits"' in client.get(f"/t/00000000000000aa/k/{n}?target=cuda").text
    assert client.get(f"/api/traces/00000000000000aa/kernels/{n}/targets/cuda").json()["loop_splits"][0]["pass"] == "split ranges"
    # provenance from the rewrite log (issue 29): the RANGEs the split made say "split ranges" and its rule, not a pass after it
    host = out["targets"]["clang"]
    split = next(p for p in out["passes"] if p["name"] == "split ranges")
    graph = client.get(f"/api/traces/00000000000000aa/graphs/codegen/{n}/{out['passes'].index(split)}/after").json()
    origins = [client.get(f"/api/traces/00000000000000aa/rewrites/{split['group']}/origin/{g['num']}").json()
               for g in graph["nodes"] if g["op"] == "RANGE" and g.get("num") is not None]
    made = [o for o in origins if o["kind"] == "match"]
    assert made and all(o["name"] == "split ranges" and o["step"] == split["step"] for o in made), origins
    assert {o["rule"] for o in made} == {s["rule"] for s in host["loop_splits"]} and all(o["rule_source"] for o in made)
    first = client.get(f"/api/traces/00000000000000aa/rewrites/{split['group']}/origin/{out['ast_sink']}").json()
    assert first["kind"] in ("input", "start") and client.get("/api/traces/00000000000000aa/rewrites/999/origin/1").status_code == 404

# ***** a target is declared once (explorer.targets): every table of targets derives from its rows *****

def test_each_target_has_a_renderer_a_lexer_and_a_compiler_or_the_reason_it_has_none():
  from pygments.lexer import Lexer
  from explorer import targets
  from explorer.present.render import LEXERS, TARGET_LABELS
  from explorer.targets import SASS_TARGETS, TARGET_DESCRIPTIONS, TARGETS
  from explorer.tracing.compilers import toolchain
  from explorer.tracing.tg.devices import RENDER_TARGETS, render_target, target_name
  assert TARGETS == targets.TARGETS and set(RENDER_TARGETS) == set(TARGETS) == set(LEXERS) == set(TARGET_DESCRIPTIONS)
  variant = Variant(cuda_arch="sm_80", metal_arch="Apple8")
  for t in targets.ALL:
    renderer = render_target(t.name, arch := variant.arch(t.name))
    assert target_name(renderer) == t.name and renderer.target.arch == arch, t  # the renderer is the target's, for its arch
    assert issubclass(LEXERS[t.name], Lexer) and TARGET_LABELS[t.name] == t.label, t
    assert (t.name in toolchain.COMPILE) != bool(t.no_compiler), f"{t.name}: a compiler, or the reason it has none (not both)"
    assert not t.sass or t.name in toolchain.COMPILE, t
    if t.no_compiler:
      assert toolchain.compile_target(t.name, "x", arch, None) == {"ok": None, "compiler": None, "message": t.no_compiler}
  assert (variant.arch("cuda"), variant.arch("ptx"), variant.arch("metal"), variant.arch("clang")) == ("sm_80", "sm_80", "Apple8", "x86_64")
  assert SASS_TARGETS == ("cuda", "ptx")

ADDED_TARGET = '''  Target("c99", "C99 for clang (a test's target)", "C99 (test)", "CLexer", arch="x86_64",
         no_compiler="a test's target: no compiler"),
'''
ADDED_RENDERER = ('class C99Renderer(ClangRenderer): pass  # a test\'s target\n\n',
                  '  "c99": Renderable(C99Renderer, "CPU", "CLANG"),\n')

def test_adding_a_target_is_one_row_and_its_renderer(tmp_path):
  """ARCHITECTURE.md's walk, followed in a copy of the package: a row in explorer/targets.py and a renderer in
  explorer/tracing/tg/devices.py, nothing else, and the CLI lists it, traces with it and renders it; a page labels and colours it."""
  pkg = tmp_path / "explorer"
  shutil.copytree(REPO / "explorer", pkg, ignore=shutil.ignore_patterns("__pycache__", "static"))
  rows = (pkg / "targets.py").read_text()
  (pkg / "targets.py").write_text(rows.replace("\n)\nBY_NAME", "\n" + ADDED_TARGET + ")\nBY_NAME", 1))
  devices = (pkg / "tracing" / "tg" / "devices.py").read_text()
  devices = devices.replace("class Renderable(NamedTuple):", ADDED_RENDERER[0] + "class Renderable(NamedTuple):", 1)
  devices = devices.replace("\n}\nTARGET_OF_RENDERER", "\n" + ADDED_RENDERER[1] + "}\nTARGET_OF_RENDERER", 1)
  (pkg / "tracing" / "tg" / "devices.py").write_text(devices)
  env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
  run = lambda *args: subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
  listed = run("-m", "explorer", "targets")
  assert listed.returncode == 0 and "C99 for clang (a test's target)" in listed.stdout, listed.stdout + listed.stderr
  got = run("-m", "explorer", "trace", "--shape", "1,1,1,4,4,3", "--target", "c99,clang", "--no-time", "--quiet", "--json", "t.json")
  assert got.returncode == 0, got.stderr
  kernels = json.loads((tmp_path / "t.json").read_text())["kernels"]
  assert kernels and all(k["targets"]["c99"]["source"] == k["targets"]["clang"]["source"] for k in kernels)  # ClangRenderer's C
  facts = run("-m", "explorer", "enrich", "t.json", "--target", "c99", "--facts", "--quiet")
  assert facts.returncode == 0, facts.stderr
  said = [k["targets"]["c99"]["compile"] for k in json.loads((tmp_path / "t.json").read_text())["kernels"]]
  assert said == [{"ok": None, "compiler": None, "message": "a test's target: no compiler"}] * len(kernels)  # its row's reason
  page = run("-c", "from explorer.present.render import LEXERS, TARGET_LABELS; print(TARGET_LABELS['c99'], LEXERS['c99'].__name__)")
  assert page.stdout.split() == ["C99", "(test)", "CLexer"], page.stdout + page.stderr
  assert run("-c", "import explorer; print(explorer.__file__)").stdout.strip() == str(pkg / "__init__.py")  # the copy ran, not the repo
