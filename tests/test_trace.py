"""The trace engine on real tinygrad kernels: what it records, and that it records what tinygrad really does."""
import json
import os
import subprocess
import sys
import numpy as np
import pytest
from explorer.cli import main
from explorer.spec import PRESETS, ConvSpec, Variant
from explorer.targets import TARGETS
from explorer.tracing.pipeline.run import run_trace
from explorer.tracing.workers.process import WorkerFailed

SOURCE_MARKERS = {"host": "void", "cuda": "__global__", "metal": "kernel void", "opencl": "__kernel", "clang": "void", "llvm": "define",
                  "ptx": ".entry", "wgsl": "@compute"}

@pytest.fixture(scope="module")
def direct():
  return run_trace(PRESETS["small"], Variant(targets=TARGETS, repeats=4)).trace

@pytest.fixture(scope="module")
def wino():
  return run_trace(PRESETS["small"], Variant(algo="winograd", targets=("cuda",), repeats=3)).trace

def test_trace_has_documented_keys(direct):
  assert {"spec", "variant", "env", "kernels", "buffers", "totals", "error", "schedule", "scheduler", "tensor_graph"} <= set(direct)
  k = direct["kernels"][0]
  assert {"name", "role", "kind", "ast_uops", "linear_uops", "ops", "flops", "bytes", "global_size", "local_size", "sources", "compile_s",
          "time_s", "opts", "passes", "uops_listing"} <= set(k)
  assert set(k["time_s"]) == {"median", "mean", "std", "min", "n", "method", "l2", "ci_low", "ci_high"} and k["time_s"]["n"] == 4
  assert k["time_s"]["method"] == "host" and k["time_s"]["l2"] == "warm" and k["time_s"]["ci_low"] <= k["time_s"]["median"] <= k["time_s"]["ci_high"]
  tm = direct["timing"]
  assert tm["method"] == "host" and tm["notice"] is None and tm["replay"] == "launches" and tm["eager_s"] > 0
  for t in (tm["total_s"], tm["span_s"]): assert t["method"] == "host" and t["n"] == 4 and len(t["samples"]) == 4 and "ci_low" in t
  assert direct["env"]["tinygrad"] == "0.14.0" and direct["env"]["device"] == "CPU" and direct["env"]["tracking"]
  json.dumps(direct)  # JSON-ready as is

def test_direct_is_one_conv_kernel(direct):
  assert direct["status"] == "ok", direct["failures"]
  assert [k["role"] for k in direct["kernels"]] == ["conv"]
  assert sorted(b["role"] for b in direct["buffers"]) == ["input", "output", "weight"]
  assert direct["error"]["max_abs"] < 1e-4 * direct["error"]["ref_max_abs"]

def test_every_target_renders_without_its_device(direct):
  k = direct["kernels"][0]
  assert not k["source_errors"]
  for target, marker in SOURCE_MARKERS.items(): assert marker in k["sources"][target], target

def test_op_histogram_and_estimates(direct):
  k = direct["kernels"][0]
  assert k["ops"]["alu"] > 0 and k["ops"]["loads"] > 0 and k["ops"]["stores"] > 0 and k["ops"]["ranges"] >= 0
  assert k["ops"]["total"] == k["linear_uops"] == len(k["uops_listing"])
  # tinygrad's Estimates counts every multiply and add: at least the direct conv's 2*MACs, plus the output's bias-free adds
  assert k["flops"] >= PRESETS["small"].direct_flops
  assert k["bytes"] >= 4 * (3*32*32 + 16*3*3*3 + 16*32*32)

def test_winograd_builtin_stages_and_roles(wino):
  assert wino["status"] == "ok", wino["failures"]
  assert sorted(k["role"] for k in wino["kernels"]) == ["ghat", "mhat", "out", "xhat"]
  sc = wino["scheduler"]["stage_counts"]
  assert sc["created"] > sc["kept"] >= 1 and sc["fused"] == sc["created"] - sc["kept"]
  assert any(p["name"] == "symbolic+reduce_collapse+debuf" for p in wino["scheduler"]["passes"])
  intermediates = [b for b in wino["buffers"] if b["role"] == "intermediate"]
  assert len(intermediates) == 3 and all(b["written_by"] and b["read_by"] for b in intermediates)
  assert wino["error"]["max_abs"] < 1e-3 * wino["error"]["ref_max_abs"]

def test_codegen_passes_recorded_per_kernel(wino):
  for k in wino["kernels"]:
    names = [p["name"] for p in k["passes"]]
    assert "linearize/render" in names and len(names) > 10

FIDELITY_SCRIPT = r"""
import json, sys
from tinygrad import Tensor
from tinygrad.helpers import Context, ansistrip
from tinygrad.codegen import to_program_cache
from tinygrad.uop.ops import Ops
import numpy as np
spec = json.loads(sys.argv[1])
rng = np.random.default_rng(0)
x = Tensor(rng.standard_normal((spec["batch"], spec["cin"], spec["height"], spec["width"])).astype(np.float32)).realize()
w = Tensor(rng.standard_normal((spec["cout"], spec["cin"], spec["kernel"], spec["kernel"])).astype(np.float32)).realize()
n0 = len(to_program_cache)
with Context(WINO=int(sys.argv[2])): out = x.conv2d(w, padding=spec["kernel"]//2)
out.realize()
progs = list(to_program_cache.values())[n0:]
print(json.dumps({ansistrip(p.arg.name): next(s.arg for s in p.src if s.op is Ops.SOURCE) for p in progs}))
"""

@pytest.mark.parametrize("algo", ["direct", "winograd"])
def test_fidelity_sources_are_what_tinygrad_compiles(algo, direct, wino):
  """Plain tinygrad (no tracking, its own realize) compiles exactly the kernels and sources the trace shows for the host."""
  trace = direct if algo == "direct" else wino
  plain_env = {k: v for k, v in os.environ.items() if k not in ("VIZ", "TRACK_MATCH_STATS")}  # importing explorer.tracing.tg here set them
  out = subprocess.run([sys.executable, "-c", FIDELITY_SCRIPT, json.dumps(trace["spec"]), str(int(algo == "winograd"))],
                       capture_output=True, text=True, check=True, timeout=300, env=plain_env)
  plain = json.loads(out.stdout.strip().splitlines()[-1])
  assert len(plain) == len(trace["kernels"])
  assert plain == {k["name"]: k["sources"]["host"] for k in trace["kernels"]}

def test_stage_failure_is_recorded_not_raised():
  trace = run_trace(PRESETS["small"], Variant(device="NOSUCHDEVICE", time=False, targets=("cuda",))).trace
  assert trace["status"] == "partial"
  assert trace["failures"][0]["stage"] == "tensor_graph" and "NOSUCHDEVICE" in trace["failures"][0]["error"].upper()

def test_worker_time_limit():
  with pytest.raises(WorkerFailed, match="time limit"): run_trace(PRESETS["small"], Variant(time=False), timeout_s=0.05)

def test_cli_trace_json_and_dump_io(tmp_path, capsys):
  path, io = tmp_path / "t.json", tmp_path / "io"
  assert main(["trace", "--shape", "1,2,4,9,9,3", "--no-time", "--target", "opencl", "--json", str(path), "--dump-io", str(io), "--quiet"]) == 0
  assert "conv" in capsys.readouterr().out
  trace = json.loads(path.read_text())
  assert trace["kernels"][0]["time_s"] is None and "opencl" in trace["kernels"][0]["sources"]
  x, w, out = (np.load(io / f"{n}.npy") for n in ("input", "weight", "output"))
  # an independent check anyone could do: explicit loops over the padded input
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  ref = np.zeros(out.shape)
  for i in range(9):
    for j in range(9): ref[:, :, i, j] = np.einsum("ncyx,ocyx->no", xp[:, :, i:i+3, j:j+3], w)
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)

@pytest.mark.parametrize("argv, message", [
  (["trace", "--preset", "k5", "--algo", "winograd"], "3x3"),
  (["trace", "--shape", "1,2,3"], "6 integers"),
  (["trace", "--opt", "fast"], "heuristic"),
  (["trace", "--target", "cuda,vulkan"], "vulkan"),
  (["trace", "--preset", "nope"], "invalid choice"),
  (["trace", "--shape", "1,3,4,8,8,3", "--groups", "2"], "groups"),
])
def test_cli_bad_input_exits_2_with_one_line(argv, message, capsys):
  assert main(argv) == 2
  err = capsys.readouterr().err.strip()
  assert message in err and len(err.splitlines()) == 1

def test_cli_fallback_note(capsys):
  assert main(["trace", "--shape", "1,2,2,8,8,5", "--algo", "winograd", "--fallback", "--no-time", "--target", "cuda", "--quiet"]) == 0
  assert "fell back to the direct algorithm" in capsys.readouterr().out

def test_cli_lists(capsys):
  assert main(["presets"]) == 0 and main(["targets"]) == 0
  out = capsys.readouterr().out
  assert all(n in out for n in PRESETS) and all(t in out for t in TARGETS)

def test_spec_memory_budget_from_cli(capsys):
  assert main(["trace", "--shape", "64,512,512,512,512,3"]) == 2
  assert "memory budget" in capsys.readouterr().err

def test_float16_trace():
  spec = ConvSpec(1, 3, 4, 8, 8, 3, dtype="float16")
  trace = run_trace(spec, Variant(time=False, targets=("cuda",))).trace
  assert trace["status"] == "ok" and "half" in trace["kernels"][0]["sources"]["cuda"]
  assert trace["error"]["max_rel"] < 1e-2

@pytest.mark.parametrize("staging, roles", [("staged", ["ghat", "mhat", "out", "xhat"]), ("fused", ["ghat", "mhat+out", "xhat"]),
                                            ("single", ["xhat+ghat+mhat+out"])])
def test_explorer_winograd_roles_follow_data_flow(staging, roles):
  trace = run_trace(ConvSpec(1, 2, 2, 8, 8, 3), Variant(algo="winograd", wino_impl="explorer", staging=staging, time=False, targets=("cuda",))).trace
  assert trace["status"] == "ok", trace["failures"]
  assert sorted(k["role"] for k in trace["kernels"]) == roles
  fused = [k for k in trace["kernels"] if "mhat+out" in k["role"] or k["role"] == "xhat+ghat+mhat+out"]
  assert all(any("never reaches global memory" in n for n in k["notes"]) for k in fused)

BEAM_PROCESSES = "from {module} import {name}; print({expr})"

@pytest.mark.parametrize("parallel", [None, "0", "3"])
def test_beam_compiles_its_candidates_in_as_many_processes_as_plain_tinygrad(parallel):
  """A trace's codegen runs in its own process (PARALLEL=0, where rewrites are recorded), but its BEAM search compiles candidates in
  tinygrad's pool of as many processes as plain tinygrad's BEAM uses (its PARALLEL default, or the user's): asked of plain tinygrad
  and of the explorer, each in a process of its own."""
  env = {k: v for k, v in os.environ.items() if k not in ("PARALLEL", "VIZ", "TRACK_MATCH_STATS")} | ({"PARALLEL": parallel} if parallel else {})
  def ask(module: str, name: str, expr: str, extra: dict) -> str:
    out = subprocess.run([sys.executable, "-c", BEAM_PROCESSES.format(module=module, name=name, expr=expr)], capture_output=True, text=True,
                         timeout=120, env={**env, **extra})
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()
  plain = ask("tinygrad.helpers", "PARALLEL", "PARALLEL.value", {"VIZ": "0"})
  assert ask("explorer.tracing.tg.opts", "beam_parallel", "beam_parallel()", {}) == plain
  if parallel: assert plain == parallel

def test_beam_programs_shown_are_the_ones_that_run_and_what_it_tried_is_recorded(tmp_path):
  """Under BEAM the kernels are searched once, at codegen; the run stage checks that tinygrad then runs exactly those programs. What
  BEAM timed is kept per kernel (kernels[i].beam): at least two candidates, rounds of one more opt each, the winner's path ending in the
  kernel's applied opts; the CUDA render gets those opts where CUDA accepts them, and says so."""
  spec = ConvSpec(1, 2, 4, 8, 8, 3)
  beam_run, none_run = (run_trace(spec, Variant(opt=opt, targets=("cuda",), repeats=2)) for opt in ("beam:2", "none"))
  beam, none = beam_run.trace, none_run.trace
  assert beam["status"] == "ok" and "run" in beam["stage_seconds"], beam["failures"]
  # the search applied opts (it may well land on the heuristic's choice, so compare with none)
  assert beam["kernels"][0]["opts"] and beam["kernels"][0]["opts"] != none["kernels"][0]["opts"]
  for k, plain in zip(beam["kernels"], none["kernels"], strict=False):
    # the candidates' codegen is not the kernel's: its passes are the winner's codegen alone, one pipeline, as a kernel never searched
    first, last = plain["passes"][0]["name"], plain["passes"][-1]["name"]
    assert [p["name"] for p in k["passes"]].count(first) == [p["name"] for p in k["passes"]].count(last) == 1, len(k["passes"])
    b = k["beam"]
    assert b["width"] == 2 and len(b["candidates"]) >= 2 and b["chosen"] == k["opts"] and b["path"][-1] == k["opts"]
    assert all(c["round"] == len(c["opts"]) and c["time_s"] > 0 for c in b["candidates"])
    assert [r["round"] for r in b["rounds"]] == sorted({c["round"] for c in b["candidates"]}) and all(r["kept"] <= 2 for r in b["rounds"][:-1])
    assert all(any(c["opts"] == p and c["kept"] for c in b["candidates"]) for p in b["path"])  # every step of the path was timed and kept
    cuda = k["targets"]["cuda"]
    applied = any("the opts BEAM chose on the trace's device, applied here" in n for n in cuda["notes"])
    assert applied == (cuda["opts"] == k["opts"]) and (applied or any("not legal here" in n for n in cuda["notes"])), cuda["notes"]
  # the kernel page draws it: a dot per candidate, each a link to it as a hand schedule, the winner's path
  from fastapi.testclient import TestClient
  from support import app_over
  from explorer.store import Store
  Store(tmp_path / "b.sqlite3").put_trace("be00000000000001", beam, beam_run.rewrites, beam_run.target_rewrites)
  with TestClient(app_over(str(tmp_path / "b.sqlite3"))) as client:
    page = client.get("/t/be00000000000001/k/0").text
  b = beam["kernels"][0]["beam"]
  assert "What BEAM tried" in page and page.count("data-beam-candidate=") == len(b["candidates"])
  assert f'opts={",".join(b["chosen"])}&amp;from=none#opts-panel' in page and '<path d="M' in page

def test_tinygrads_own_seconds_per_stage_and_kernels_as_they_finish(wino):
  """tinygrad_seconds: the part of each stage spent in tinygrad's own calls, never more than the stage, codegen's equal to the kernels'
  own codegen and compile seconds; the explorer's records and the render wait are none of it. The progress names every kernel as
  its codegen ends; the page and the CLI say the share."""
  own, secs = wino["tinygrad_seconds"], wino["stage_seconds"]
  assert set(own) <= set(secs) and {"tensor_graph", "schedule", "codegen", "run", "timing"} <= set(own)
  assert all(0 < own[s] <= secs[s] for s in own)
  assert own["codegen"] == pytest.approx(sum(k["codegen_s"] + k["compile_s"] for k in wino["kernels"]), rel=0.05, abs=0.02)
  assert "render" not in own and "kernel_graph" not in own
  events = []
  trace = run_trace(PRESETS["small"], Variant(algo="winograd", targets=("cuda",), time=False), progress=lambda *e: events.append(e)).trace
  done = [d for s, st, d in events if s == "codegen" and st == "start" and "kernels:" in d]
  assert [d.split(":")[0] for d in done] == [f"{i} of 4 kernels" for i in range(1, 5)]
  assert [d.split(": ")[1].split(" in ")[0] for d in done] == [k["name"] for k in trace["kernels"]]
  from explorer.cli.main import summary
  assert f"tinygrad's own calls {sum(trace['tinygrad_seconds'].values()):.2f}s" in summary(trace)

def test_a_trace_that_names_no_device_tells_the_next_workers_which_one_to_open(monkeypatch):
  """tinygrad tries every backend in turn for its default device in each new process; the first trace's answer is handed to the next
  workers as DEV (the same device, found once), unless DEV is set here."""
  from explorer.tracing.pipeline import run
  from explorer.tracing.workers import process
  monkeypatch.delenv("DEV", raising=False)
  monkeypatch.setattr(process, "DEFAULT_DEVICE", {})
  assert run.device_env(Variant()) == {}
  tiny, v = ConvSpec(1, 2, 2, 8, 8, 3), Variant(time=False, targets=())
  first = run_trace(tiny, v).trace["env"]["device"]
  assert run.device_env(Variant()) == {"DEV": first} and run.device_env() == {"DEV": first}
  assert run_trace(tiny, v).trace["env"]["device"] == first
  assert run.device_env(Variant(device="CPU:0")) == {"DEV": "CPU"}
  monkeypatch.setenv("DEV", "CPU")
  assert run.device_env(Variant()) == {}

def test_a_server_finds_its_default_device_as_it_starts_and_tells_every_worker(monkeypatch, tmp_path):
  """A server looks for this host's default device as it starts, in a process of its own; every worker after is told it (DEV), its
  first trace's too: the device a trace that is told none finds itself."""
  import time
  from fastapi.testclient import TestClient
  from explorer.settings import Settings
  from explorer.tracing.pipeline import run
  from explorer.tracing.workers import process
  from explorer.web.app import create_app
  monkeypatch.delenv("DEV", raising=False)
  monkeypatch.setattr(process, "DEFAULT_DEVICE", {})
  with TestClient(create_app(str(tmp_path / "traces.sqlite3"), settings=Settings.load(env={}))):
    deadline = time.monotonic() + 120
    while "device" not in process.DEFAULT_DEVICE and time.monotonic() < deadline: time.sleep(0.1)
  learned = process.DEFAULT_DEVICE.get("device")
  assert learned, "the server did not find its default device as it started"
  assert process.with_default_device({"VIZ": "0"}) == {"DEV": learned, "VIZ": "0"} and run.device_env(Variant()) == {"DEV": learned}
  assert process.with_default_device({"DEV": "CPU:1"}) == {"DEV": "CPU:1"}  # a device asked for wins
  monkeypatch.setattr(process, "DEFAULT_DEVICE", {})  # a trace told no device searches for itself
  assert run_trace(ConvSpec(1, 2, 2, 8, 8, 3), Variant(time=False, targets=())).trace["env"]["device"].split(":")[0] == learned
