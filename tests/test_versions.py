"""The tinygrads a trace may run on (explorer.tinygrads.TINYGRADS): each older one's environment made from its hash-checked lock
(explorer.tracing.versions; `make tinygrad-versions` makes them for the suite, in .tinygrads, kept between runs), where it stands,
and what imports there."""
from __future__ import annotations
import json
import os
import pathlib
import re
import subprocess
import sys
import time
from typing import Any
import pytest
from explorer.spec import SpecError
from explorer.tinygrads import TINYGRAD, TINYGRADS, tinygrad_problem
from explorer.tracing import versions

OLDER = [v for v in TINYGRADS if v != TINYGRAD]

def plain_env(**more: str) -> dict[str, str]:
  """This environment without the explorer's tracking (a tinygrad that tracks prints its statistics as it exits)."""
  return {**{k: v for k, v in os.environ.items() if k not in ("TRACK_MATCH_STATS", "VIZ", "CAPTURE_PROCESS_REPLAY")}, "VIZ": "0", **more}
def _unmade() -> str:
  """Why the older tinygrads' environments are not here to test ("": they are)."""
  if not os.environ.get(versions.DIR_VAR): return "KERNEL_EXPLORER_TINYGRADS names no environments (make test and make check set it)"
  return "; ".join(f"tinygrad {e.version}'s environment is {e.state}" for e in map(versions.environment, OLDER) if e.state != "ready")

MADE = pytest.mark.skipif(bool(_unmade()), reason=f"the older tinygrads' environments are made by `make tinygrad-versions`: {_unmade()}")

def test_the_server_runs_its_own_tinygrad_and_names_the_others():
  """0.14.0 is the server's own (pinned), 0.13.0 and 0.12.0 the others; any other version is refused, naming the supported ones."""
  import importlib.metadata
  assert TINYGRAD == importlib.metadata.version("tinygrad") == TINYGRADS[0] and set(OLDER) == {"0.13.0", "0.12.0"}
  assert all(tinygrad_problem(v) is None for v in TINYGRADS)
  for bad in ("0.11.0", "0.14", "latest", "0.13.0; rm -rf /"):
    assert (problem := tinygrad_problem(bad)) is not None and "0.14.0, 0.13.0, 0.12.0" in problem
  with pytest.raises(SpecError, match="not supported"): versions.environment("0.11.0")

def test_each_older_tinygrad_is_pinned_by_one_hash():
  """A lock pins exactly its version, with one sha256: pip installs it with --require-hashes, no dependency resolved."""
  for v in OLDER:
    text = versions.lock(v).read_text()
    assert re.findall(r"^tinygrad==([\d.]+)", text, re.M) == [v] and len(re.findall(r"--hash=sha256:[0-9a-f]{64}\b", text)) == 1
  assert sorted(p.name for p in versions.LOCKS.glob("*.txt")) == sorted(f"tinygrad-{v}.txt" for v in OLDER)

def test_where_an_environment_stands_is_read_off_its_files(tmp_path, monkeypatch):
  """missing (no venv), broken (no stamp: half made; no interpreter; a file its tinygrad's install recorded missing), stale (made from
  another lock), ready; the server's own is the server's interpreter."""
  monkeypatch.setenv(versions.DIR_VAR, str(tmp_path))
  assert versions.environment(TINYGRAD) == versions.Environment(TINYGRAD, "server", sys.executable)
  v = OLDER[0]
  assert versions.environment(v).state == "missing" and versions.environment(v).path == str(tmp_path / v)
  (venv := tmp_path / v / "bin").mkdir(parents=True)
  assert versions.environment(v).state == "broken"
  (tmp_path / v / versions.STAMP).write_text("0" * 64)
  assert versions.environment(v).state == "broken"  # no interpreter
  (venv / "python").symlink_to(sys.executable)
  assert versions.environment(v).state == "broken"  # no tinygrad installed in it
  site = pathlib.Path(versions.site_packages(tmp_path / v))
  (site / f"tinygrad-{v}.dist-info").mkdir(parents=True)
  (site / f"tinygrad-{v}.dist-info" / "RECORD").write_text(f"tinygrad/__init__.py,sha256=x,5\ntinygrad-{v}.dist-info/RECORD,,\n")
  assert versions.environment(v).state == "broken"  # a file of its tinygrad missing
  (site / "tinygrad").mkdir()
  (site / "tinygrad" / "__init__.py").write_text("#1234")
  assert versions.environment(v).state == "stale"
  (tmp_path / v / versions.STAMP).write_text(versions.lock_hash(v) + "\n")
  assert versions.environment(v) == versions.Environment(v, "ready", str(venv / "python"), str(tmp_path / v))
  assert [e.version for e in versions.environments()] == list(TINYGRADS)

@MADE
def test_an_environment_missing_a_file_of_its_tinygrad_is_broken_and_nothing_runs_the_servers_in_its_place(tmp_path, monkeypatch):
  """A copy of a made environment with one file of its tinygrad gone (or cut short) is listed broken, not ready; a worker asked for it
  fails in one line saying how to make it again; and a worker process started on it anyway imports no tinygrad at all (never the
  server's in its place), so no tinygrad writes its rewrites.pkl into the temporary folder."""
  import shutil
  from explorer.tracing.workers.process import WorkerFailed, call_in_worker
  v = OLDER[0]
  made = pathlib.Path(versions.environment(v).path or "")
  shutil.copytree(made, tmp_path / v, symlinks=True)
  monkeypatch.setenv(versions.DIR_VAR, str(tmp_path))
  assert versions.environment(v).state == "ready"
  tensor = pathlib.Path(versions.site_packages(tmp_path / v)) / "tinygrad" / "tensor.py"
  for damage in (lambda: tensor.write_text(tensor.read_text()[:100]), tensor.unlink):
    damage()
    assert versions.environment(v).state == "broken", damage
  with pytest.raises(WorkerFailed, match=rf"tinygrad {re.escape(v)}'s environment is broken .*versions --make {re.escape(v)}$"):
    call_in_worker("explorer.tracing.versions:imported", {}, timeout_s=60, tinygrad=v)
  (scratch := tmp_path / "tmp").mkdir()
  python, path = str(tmp_path / v / "bin" / "python"), [versions.site_packages(tmp_path / v), *sys.path]
  code = f"import sys; sys.path[:] = {path!r}; import explorer.tracing.tg"
  env = {**os.environ, versions.TINYGRAD_VAR: v, "TMPDIR": str(scratch)}
  done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120, env=env)
  said = done.stderr.strip().splitlines()[-1]
  assert done.returncode != 0 and "broken" in said, done.stderr
  assert said.startswith(f"ImportError: this worker was to run tinygrad {v} and would import "), said
  assert not list(scratch.rglob("*")), list(scratch.rglob("*"))

def test_the_cli_lists_them_and_refuses_a_version_it_does_not_support(tmp_path):
  env = {**os.environ, versions.DIR_VAR: str(tmp_path)}
  listed = subprocess.run([sys.executable, "-m", "explorer", "versions"], capture_output=True, text=True, env=env, timeout=120)
  assert listed.returncode == 0 and all(v in listed.stdout for v in TINYGRADS) and "missing: not made yet" in listed.stdout
  refused = subprocess.run([sys.executable, "-m", "explorer", "versions", "--make", "0.11.0"], capture_output=True, text=True, env=env, timeout=120)
  assert refused.returncode == 1 and "0.14.0, 0.13.0, 0.12.0" in refused.stderr and "Traceback" not in refused.stderr
  assert not any(tmp_path.iterdir())

@MADE
@pytest.mark.parametrize("version", OLDER)
def test_an_older_tinygrads_environment_imports_it_and_the_explorer(version):
  """Made from its lock: its interpreter imports that tinygrad, from its own site-packages, and the explorer from the server's."""
  env = versions.environment(version)
  assert env.state == "ready" and env.python is not None and env.path is not None, env
  code = "import importlib.metadata as m, json, tinygrad, explorer.spec, numpy; print(json.dumps([m.version('tinygrad'), tinygrad.__file__, " \
         "explorer.spec.__file__]))"
  got = subprocess.run([env.python, "-c", code], capture_output=True, text=True, timeout=120, env=plain_env())
  assert got.returncode == 0, got.stderr
  tg, where, explorer = json.loads(got.stdout.strip().splitlines()[-1])
  assert tg == version and pathlib.Path(where).is_relative_to(env.path)
  assert pathlib.Path(explorer).resolve() == (pathlib.Path(__file__).parents[1] / "explorer" / "spec.py").resolve()

def test_the_server_lists_them_on_a_page_and_in_the_api(tmp_path, monkeypatch):
  """/versions and GET /api/versions: each version and its state (never the environment's path: a server's files are its own)."""
  from fastapi.testclient import TestClient
  from support import app_over
  monkeypatch.setenv(versions.DIR_VAR, str(tmp_path))
  (tmp_path / OLDER[1]).mkdir()  # half made
  with TestClient(app_over(str(tmp_path / "s.sqlite3"))) as client:
    listed = client.get("/api/versions").json()
    assert [(v["version"], v["state"]) for v in listed] == [(TINYGRAD, "server"), (OLDER[0], "missing"), (OLDER[1], "broken")]
    assert all(set(v) == {"version", "state", "meaning"} for v in listed)
    page = client.get("/versions").text
    assert all(f'data-version="{v}"' in page for v in TINYGRADS) and 'data-state="broken"' in page and str(tmp_path) not in page

@MADE
def test_a_worker_runs_the_tinygrad_it_is_asked_for():
  """call_in_worker(tinygrad=V): the worker runs V's interpreter with V's tinygrad first (a template per version: the environment names
  it); the server's own by default and by name; a version not made is the call's failure, in a line."""
  from explorer.tracing.workers.process import WorkerFailed, call_in_worker
  def run(tinygrad: str | None) -> dict[str, str]:
    return call_in_worker("explorer.tracing.versions:imported", {}, timeout_s=120, tinygrad=tinygrad)[0]
  for v in (None, TINYGRAD): assert run(v) == {"tinygrad": TINYGRAD, "from": run(v)["from"], "python": sys.executable}
  for v in OLDER:
    got, env = run(v), versions.environment(v)
    assert got["tinygrad"] == v and pathlib.Path(got["from"]).is_relative_to(env.path or "/nowhere") and got["python"] == env.python
  with pytest.MonkeyPatch.context() as mp:
    mp.setenv(versions.DIR_VAR, "/nonexistent/tinygrads")
    with pytest.raises(WorkerFailed, match=r"tinygrad 0\.13\.0's environment is missing .*versions --make 0\.13\.0"): run("0.13.0")

PLAIN_HOST_CODEGEN = r"""
import json, sys
from tinygrad import Device, Tensor
from tinygrad.codegen import do_to_program
from tinygrad.uop.ops import Ops
spec = json.loads(sys.argv[1])
x = Tensor.empty(spec["batch"], spec["cin"], spec["height"], spec["width"])
w = Tensor.empty(spec["cout"], spec["cin"] // spec["groups"], spec["kernel"], spec["kernel"])
out = x.conv2d(w, padding=spec["kernel"] // 2, groups=spec["groups"])
asts = [c.src[0] for c in out.schedule_linear().src if c.src[0].op is Ops.SINK]
from tinygrad.codegen.opt import tc
from tinygrad.device import Compiler
from tinygrad.helpers import Target
from tinygrad.renderer import Renderer
from tinygrad.renderer.cstyle import CUDARenderer
from tinygrad.renderer.cstyle import OpenCLRenderer
from tinygrad.renderer.llvmir import CPULLVMRenderer
from tinygrad.renderer.ptx import PTXRenderer
from tinygrad.renderer.wgsl import WGSLRenderer
def deviceless(cls, target, **attrs):  # as its device would configure it, without one (its __init__ would load the device's compiler)
  r = cls.__new__(cls); Renderer.__init__(r, target)
  for k, v in attrs.items(): setattr(r, k, v)
  r.compiler = Compiler()
  return r
others = {"cuda": deviceless(CUDARenderer, Target("CUDA", "CUDA", "sm_90"), tensor_cores=tc.get_cuda("sm_90")),
          "ptx": deviceless(PTXRenderer, Target("CUDA", "PTX", "sm_90"), tensor_cores=PTXRenderer.tc_sm80),
          "opencl": deviceless(OpenCLRenderer, Target("CL", "CL", "")), "llvm": deviceless(CPULLVMRenderer, Target("CPU", "LLVM", "x86_64")),
          "wgsl": deviceless(WGSLRenderer, Target("WEBGPU", "WGSL", ""))}
def sources(r): return [next(s.arg for s in do_to_program(a, r).src if s.op is Ops.SOURCE) for a in asts]
which = sys.argv[2]  # one target a process: tinygrad names a kernel codegen made before anew (r_..n1), as the explorer's renders never see
print(json.dumps(sources(Device[Device.DEFAULT].renderer if which == "host" else others[which])))
"""
COMPARED = ("cuda", "ptx", "opencl", "llvm", "wgsl")  # (metal: its tensor cores follow the Mac's arch, which a plain script here would not)

# tinygrad 0.12's own codegen for the same schedule: its schedule is ExecItems, get_program gives a ProgramSpec, CUDARenderer takes the arch
PLAIN_HOST_CODEGEN_012 = r"""
import json, sys
from tinygrad import Device, Tensor
from tinygrad.codegen import get_program
from tinygrad.device import Compiler
from tinygrad.renderer.cstyle import CUDARenderer
from tinygrad.uop.ops import Ops
spec = json.loads(sys.argv[1])
x = Tensor.empty(spec["batch"], spec["cin"], spec["height"], spec["width"])
w = Tensor.empty(spec["cout"], spec["cin"] // spec["groups"], spec["kernel"], spec["kernel"])
out = x.conv2d(w, padding=spec["kernel"] // 2, groups=spec["groups"])
asts = [ei.ast for ei in out.schedule() if ei.ast.op is Ops.SINK]
from tinygrad.renderer.cstyle import OpenCLRenderer
from tinygrad.renderer.llvmir import LLVMRenderer
from tinygrad.renderer.ptx import PTXRenderer
from tinygrad.renderer.wgsl import WGSLRenderer
others = {"cuda": CUDARenderer("sm_90"), "ptx": PTXRenderer("sm_90"), "opencl": OpenCLRenderer(), "llvm": LLVMRenderer.__new__(LLVMRenderer),
          "wgsl": WGSLRenderer()}  # (LLVMRenderer's __init__ loads LLVM: the renderer needs nothing of it)
for r in others.values(): r.compiler = Compiler()
which = sys.argv[2]  # one target a process: tinygrad names a kernel codegen made before anew (r_..n1), as the explorer's renders never see
print(json.dumps([get_program(a, Device[Device.DEFAULT].renderer if which == "host" else others[which]).src for a in asts]))
"""

@MADE
@pytest.mark.parametrize("version", OLDER)
def test_a_trace_on_an_older_tinygrad_records_every_stage_as_that_tinygrad_makes_it(version):
  """The small preset traced in a worker running tinygrad 0.13.0 or 0.12.0: every stage recorded, none failed, the trace names its tinygrad, each
  kernel's host source (clang) and its CUDA, PTX (sm_90), OpenCL, LLVM and WGSL sources (deviceless renderers, as their devices would configure
  them) byte for byte what plain tinygrad of that version makes for that schedule in the same environment, the float64 check within its tolerance.
  Neither has spec_kernel_graph: that check is left out, not failed. Both have Renderer.pre_matcher, whose pass shows (the explorer sets the hook,
  empty); 0.12 also has cut_store_range's pass (which cuts nothing here: see the program test below)."""
  from explorer.spec import PRESETS, Variant
  from explorer.tracing.workers.process import call_in_worker
  spec = PRESETS["small"]
  variant = Variant(targets=(*COMPARED, "clang"), repeats=3, warmup=1)
  args = {"spec": spec.to_dict(), "variant": variant.to_dict(), "dump_io": None}
  (trace, blob, _), _ = call_in_worker("explorer.tracing.pipeline.run:trace_in_worker", args, timeout_s=600, env={"DEV": "CPU"}, tinygrad=version)
  assert trace["env"]["tinygrad"] == version and trace["failures"] == [] and blob
  assert set(trace["stage_seconds"]) == {"tensor_graph", "schedule", "kernel_graph", "codegen", "render", "run", "timing"}
  assert "kernel_graph" not in trace["spec_checks"] and trace["spec_checks"]["tensor_graph"]["ok"]
  assert trace["error"] is not None and trace["error"]["within"]
  stages = trace["scheduler"]["stages"]  # rangeify's passes and its bufferize decisions: 0.12 keeps the output a bufferize of its own
  assert trace["scheduler"]["passes"] and len(stages["kept"] if version == "0.12.0" else stages["realized"]) == 1
  env = versions.environment(version)
  script = PLAIN_HOST_CODEGEN_012 if version == "0.12.0" else PLAIN_HOST_CODEGEN
  def plain(target: str) -> list[str]:
    got = subprocess.run([env.python or "", "-c", script, json.dumps(spec.to_dict()), target], capture_output=True, text=True, timeout=300,
                         env=plain_env(DEV="CPU"))
    assert got.returncode == 0, got.stderr[-2000:]
    return json.loads(got.stdout.strip().splitlines()[-1])
  sources = {t: plain(t) for t in ("host", *COMPARED)}
  assert all(len(sources[t]) == len(trace["kernels"]) >= 1 for t in ("host", *COMPARED))
  for i, k in enumerate(trace["kernels"]):
    assert k["host_target"] == "clang" and k["targets"]["clang"]["source"] == sources["host"][i]
    assert [t for t in COMPARED if k["targets"][t]["source"] != sources[t][i]] == []
    assert k["passes"] and k["linear_uops"] > 0 and k["uops_listing"] and k["time_s"] is not None and k["spec"]["ast"]["ok"]
    for target in ("clang", "cuda"):  # Renderer.pre_matcher's pass, where the version runs it: the explorer sets the hook, empty
      passes = [(p["name"], p["matches"]) for p in k["targets"][target]["passes"]]
      assert [p for p in passes if p[0] == "pre_matcher"] == [("pre_matcher", 0)]
      assert ("cut store ranges" in dict(passes)) == (version == "0.12.0")

@MADE
@pytest.mark.parametrize("version", OLDER)
def test_a_server_traces_on_an_older_tinygrad_and_reads_it_there(tmp_path, version):
  """Through the API: a trace asking for tinygrad 0.13.0 (or 0.12.0) runs in its environment and is stored under its own id; its pages
  answer, its graphs are rebuilt from its rewrite blob by a worker of that tinygrad (tensor, AST, a codegen pass, a match, a rangeify
  pass), and what it computes later (an analysis, another target's record) is computed there too; the diff against the server's own
  matches the kernels, says which passes each has and which rules fired where; the picker offers the convolution on that tinygrad."""
  from conftest import wait_done
  from fastapi.testclient import TestClient
  from support import app_over
  with TestClient(app_over(str(tmp_path / "s.sqlite3"))) as client:
    variant = {"targets": ["cuda"], "repeats": 3, "warmup": 1}
    older = client.post("/api/traces", json={"preset": "small", "variant": {**variant, "tinygrad": version}}).json()
    assert f"tinygrad {version}" in older["label"] and wait_done(client, tid := older["id"])["status"] == "done"
    trace = client.get(f"/api/traces/{tid}/raw").json()
    assert trace["env"]["tinygrad"] == version and trace["variant"]["tinygrad"] == version and trace["failures"] == []
    for page in (f"/t/{tid}", f"/t/{tid}/k/0", f"/t/{tid}/bufferize", f"/t/{tid}/rangeify", f"/t/{tid}/graph/tensor"):
      got = client.get(page, headers={"accept": "text/html"})
      assert got.status_code == 200 and f"workers of tinygrad {version}" in got.text and "spec_kernel_graph is tinygrad 0.14" in got.text, page
      assert "Renderer.pre_matcher" in got.text and ("cut_store_range" in got.text) == (version == "0.12.0"), page
      assert ('id="opts-panel"' in got.text) is False and ('id="opts-not-built"' in got.text) == page.endswith("/k/0"), page
    refs = client.get(f"/api/traces/{tid}/graphs").json()
    last = int(refs["codegen"]["0"].split("/")[2].split("..")[1])
    for ref in ("tensor", "ast/0", f"codegen/0/{last}/after", "codegen/0/3/m1", "rangeify/2/after"):
      got = client.get(f"/api/traces/{tid}/graphs/{ref}")
      assert got.status_code == 200 and got.json()["total_nodes"] > 0, (ref, got.text[:300])
    analysis = client.get(f"/api/traces/{tid}/kernels/0/targets/clang/analysis")
    for _ in range(240):
      if analysis.status_code != 202: break
      time.sleep(0.25)
      analysis = client.get(f"/api/traces/{tid}/kernels/0/targets/clang/analysis")
    assert analysis.status_code == 200 and analysis.json()["pressure"]["max_live"] > 0
    ptx = client.get(f"/api/traces/{tid}/kernels/0/targets/ptx")
    for _ in range(240):
      if ptx.status_code != 202: break
      time.sleep(0.25)
      ptx = client.get(f"/api/traces/{tid}/kernels/0/targets/ptx")
    assert ptx.status_code == 200 and ".entry" in ptx.json()["source"]
    hand = client.post(f"/api/traces/{tid}/kernels/0/opts", json={"opts": ["UPCAST:0:4"]})  # opts by hand: the server's tinygrad's alone
    assert hand.status_code == 409 and f"tinygrad {version} are not built yet" in hand.text
    own = client.post("/api/traces", json={"preset": "small", "variant": variant}).json()["id"]
    assert own != tid and wait_done(client, own)["status"] == "done"  # the server's own: another trace
    diff = client.get(f"/api/diff/{tid}/{own}").json()  # across versions: each side's graphs rebuilt by its own tinygrad
    assert diff["specs_match"] and diff["notes"] == [] and all(g["graph"] is not None for g in diff["groups"])
    passes = diff["groups"][0]["passes"]  # what changed in the pipeline between the two: passes 0.14 added or dropped, matches
    assert passes["only_b"] and passes["only_a"] and passes["same"] > 0
    assert "pre_matcher" in passes["only_a"] and ("cut store ranges" in passes["only_a"]) == (version == "0.12.0")
    rules = diff["groups"][0]["rules"]  # rule by rule: 0.14 wrote fold_const_alu's pattern anew (uop/symbolic.py), among others
    reworded = {r["action"] for p in rules for r in p["reworded"] if r["a"] != r["b"]}
    assert version != "0.13.0" or "fold_const_alu" in reworded, rules
    assert any(p["only_a"] or p["only_b"] for p in rules) and all(re.fullmatch(r"[\w/.]+\.py:\d+", r["at"]) for p in rules for r in p["only_b"])
    page = client.get(f"/diff/{tid}/{own}", headers={"accept": "text/html"}).text
    assert version in page and 'class="pass-changes small"' in page and passes["only_b"][0] in page
    fragment = client.get(f"/diff/{tid}/{own}/graphs").text
    assert f'data-rule-changes="{len(rules)}"' in fragment and all(f'data-reworded="{r}"' in fragment for r in reworded)
    picked = client.post("/diff/variants", content=f"preset=small&va=direct&vb=direct%40{version}&targets=cuda", follow_redirects=False,
                         headers={"content-type": "application/x-www-form-urlencoded"})  # the picker: the same convolution on two tinygrads
    assert picked.status_code == 303 and (ids := picked.headers["location"].split("/")[2:4])
    assert all(wait_done(client, i)["status"] == "done" for i in ids)
    assert [client.get(f"/api/traces/{i}/raw").json()["env"]["tinygrad"] for i in ids] == ["0.14.0", version]
    refused = client.post("/api/traces", json={"preset": "small", "variant": {**variant, "tinygrad": version, "opt": "beam:2"}})
    assert refused.status_code == 422 and "not built yet" in refused.text
    assert f'value="{version}"' in client.get("/").text

REPO = pathlib.Path(__file__).parents[1]

@MADE
@pytest.mark.parametrize("version", OLDER)
def test_custom_rewrites_run_on_an_older_tinygrad_and_a_file_may_go_into_its_pre_matcher(tmp_path, version):
  """On 0.13 and 0.12 the catalogue's rewrites run as on 0.14 (peel:2 and sink-loads on wino8: one match each) and a rewrite file may set
  point = "pre_matcher": the renderer's pre_matcher then holds it and tinygrad's own "pre_matcher" pass shows its matches, for the host
  and a deviceless target alike; the rewritten program ran and kept the output right. On 0.14, which has no such hook, the same file is
  refused in a line."""
  out, example = tmp_path / "t.json", str(REPO / "examples" / "rewrite_pre_matcher.py")
  cmd = [sys.executable, "-m", "explorer", "trace", "--preset", "wino8", "--target", "cuda", "--rewrite", "peel:2,sink-loads", "--no-time", "--quiet",
         "--rewrite-file", example, "--json", str(out)]
  p = subprocess.run([*cmd, "--tinygrad", version], capture_output=True, text=True, cwd=REPO, timeout=600)
  assert p.returncode == 0, p.stderr[-2000:]
  trace = json.loads(out.read_text())
  assert trace["env"]["tinygrad"] == version and trace["status"] == "ok" and trace["error"]["within"], trace["failures"]
  (kernel,) = trace["kernels"]
  for target in ("clang", "cuda"):
    passes = {p["name"]: p["matches"] for p in kernel["targets"][target]["passes"]}
    assert passes["pre_matcher"] > 0 and passes["explorer rewrite peel:2"] == passes["explorer rewrite sink-loads"] == 1, (target, passes)
  assert [r["name"] for r in trace["rewrites"]] == ["peel:2", "sink-loads", "file:rewrite_pre_matcher.py"]
  p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=600)
  assert p.returncode == 1 and "Traceback" not in p.stderr and "Renderer.pre_matcher is not in this tinygrad" in p.stdout, p.stdout[-2000:]

@MADE
def test_cut_store_range_cuts_a_padded_loop_on_0_12_and_the_tour_tells_it(tmp_path):
  """The codegen notes' cut_store_range (seed 004), 0.12's alone: examples/cut_store_range.py (a padded one-channel convolution over one
  dimension) traced on 0.12 has its "cut store ranges" pass match, its analysis records the loop of 20 cut into 16, 2 and 2 by the rule
  in codegen/simplify.py, the trace's tour has a step telling it, and the program still computes what numpy does; on 0.13 and 0.14 the
  pass is not there at all."""
  from explorer.present.tour import trace_tour
  def traced(*more: str) -> dict[str, Any]:
    out = tmp_path / f"t{len(more)}.json"
    p = subprocess.run([sys.executable, "-m", "explorer", "trace", "--script", str(REPO / "examples" / "cut_store_range.py"), "--analysis",
                        "--quiet", "--json", str(out), *more], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-2000:]
    return json.loads(out.read_text())
  older = traced("--tinygrad", "0.12.0")
  (k,) = older["kernels"]
  rec = k["targets"][k["host_target"]]
  assert older["env"]["tinygrad"] == "0.12.0" and older["status"] == "ok"
  assert [p["matches"] for p in rec["passes"] if p["name"] == "cut store ranges"] == [1]
  (cut,) = [c for c in rec["loop_splits"] if c["pass"] == "cut store ranges"]
  assert [r["size"] for r in cut["ranges"]] == [20] and sorted(r["size"] for r in cut["into"]) == [2, 2, 16]
  assert cut["rule"].startswith("codegen/simplify.py:") and "cut_store_range" in cut["rule_source"]
  assert rec["source"].count("for (") == 1 and rec["source"].count("data0_20+18") == 1  # the padding's two stretches stored unlooped
  step = next(s for s in trace_tour(older) if s["id"] == "k0-cut")
  assert "cut_store_range" in step["text"] and "a loop of 20 iterations became loops of 16, 2, 2" in step["text"]
  for newer in (traced("--tinygrad", "0.13.0"), traced()):  # (a program on 0.13: its realize and TinyJit are hooked as 0.13 names them)
    assert newer["status"] == "ok" and not any(p["name"] == "cut store ranges" for k in newer["kernels"] for p in k["passes"])
    assert not any(s["id"].endswith("-cut") for s in trace_tour(newer))

@MADE
@MADE
def test_the_versions_tour_tells_one_convolution_on_two_tinygrads_timed_in_turns(tmp_path):
  """The built-in "versions" tour: the small preset on 0.12.0 and on the server's own, started with one POST; its compare step names
  both tinygrads and sends to the diff, A's steps speak of 0.12's trace. The diff times the two interleaved, each side in a worker of
  its own tinygrad taking turns on the CPU by the host's clock (explorer.tracing.pipeline.turns), and the tour quotes that ratio; their outputs
  are not run in one worker (one tinygrad), and the diff says so."""
  from conftest import wait_done
  from fastapi.testclient import TestClient
  from support import app_over
  with TestClient(app_over(str(tmp_path / "s.sqlite3"))) as client:
    started = client.post("/api/tours/versions").json()
    assert all(wait_done(client, started[side]["id"])["status"] == "done" for side in ("a", "b"))
    tour = client.get("/api/tours/versions").json()
    compare = next(s for s in tour["steps"] if s["id"] == "compare")
    assert "A ran on tinygrad 0.12.0, B on 0.14.0" in compare["text"] and compare["view"] == "diff"
    assert client.get(f"/api/traces/{tour['a']}/raw").json()["env"]["tinygrad"] == "0.12.0"
    assert client.get(tour["steps"][0]["url"]).status_code == 200
    base = f"/api/diff/{tour['a']}/{tour['b']}"
    assert client.post(f"{base}/timing", params={"repeats": 6, "warmup": 1}).status_code == 202
    deadline = time.monotonic() + 240
    while (measured := client.get(f"{base}/timing").json())["status"] in ("queued", "running"):
      assert time.monotonic() < deadline, measured
      time.sleep(0.3)
    t = measured["result"]
    assert t["compared"] and t["tinygrads"] == ["0.12.0", TINYGRAD] and t["method"] == "host" and t["device"] == "CPU", t
    assert t["ratio"]["n"] == 6 and t["span_ratio"]["n"] == 6 and t["verdict"].startswith("B is "), t
    assert client.post(f"{base}/numerics").status_code == 409
    page = client.get(f"/diff/{tour['a']}/{tour['b']}").text
    assert "each in a worker of its own tinygrad's environment, taking turns by one clock" in page
    assert "Outputs not compared: they ran on different tinygrads (0.12.0 and 0.14.0)" in page
    heads = next(s for s in client.get("/api/tours/versions").json()["steps"] if s["id"] == "compare")
    assert "interleaved on CPU" in json.dumps(heads), heads

def test_two_tinygrads_are_timed_in_turns_and_their_outputs_compared_within_one():
  """A diff's timing of sides that asked for different tinygrads runs them in turns (explorer.tracing.pipeline.turns); their outputs, compared
  in one worker of one tinygrad, are not, and it says why; a trace stored before the choice (no variant.tinygrad) is the server's own."""
  from explorer.analysis.diff import comparable
  side = {"spec": {"batch": 1}, "env": {"device": "CPU", "tinygrad": "0.14.0"}, "variant": {}}
  older = {**side, "env": {"device": "CPU", "tinygrad": "0.13.0"}, "variant": {"tinygrad": "0.13.0"}}
  assert comparable(side, older, "timing") is None
  assert (comparable(side, older) or "").startswith("they ran on different tinygrads (0.14.0 and 0.13.0): outputs are compared within one")
  assert comparable(side, {**side, "variant": {"tinygrad": TINYGRAD}}) is None and comparable(older, older) is None

@MADE
def test_a_side_that_fails_ends_the_turns_in_one_line():
  """A side whose variant cannot be built fails the measurement with its worker's one line, at once: the other is not waited for."""
  from explorer.spec import PRESETS, Variant
  from explorer.tracing.pipeline.turns import time_across
  from explorer.tracing.workers.process import WorkerFailed
  good = {**Variant().to_dict(), "device": "CPU"}
  st = time.monotonic()
  with pytest.raises(WorkerFailed) as failed:
    time_across(PRESETS["small"].to_dict(), [good, {**good, "algo": "nosuch"}], [OLDER[0], None], "CPU", 1, 3, 120)
  assert "nosuch" in str(failed.value).splitlines()[0], failed.value
  assert time.monotonic() - st < 60

@MADE
def test_a_study_runs_its_cases_on_an_older_tinygrad():
  """The constants study (seed 000) on tinygrad 0.13.0: both variants traced and timed interleaved in that tinygrad's environment (the
  explorer's symbolic constants there a column of stacked CONSTs, as 0.13 builds one), its verdicts said to be 0.13's."""
  from explorer.analysis.study import run_studies
  from explorer.present.study import document_markdown
  from explorer.spec import PRESETS
  study = run_studies("constants", [("small", PRESETS["small"])], repeats=3, warmup=1, targets=(), compile_repeats=0, timeout_s=600,
                      tinygrad="0.13.0")
  case = study["cases"][0]
  assert study["tinygrad"] == "0.13.0" and [r["variant"] for r in case["rows"]] == ["symbolic", "materialized"]
  assert all(r["status"] == "ok" and r["time_median_s"] > 0 for r in case["rows"])
  assert all("tinygrad 0.13.0" in t["label"] for t in case["traces"].values()) and not case["identical_kernels"]
  assert "measured again on tinygrad 0.13.0" in document_markdown(study)

def test_a_diff_says_which_codegen_passes_were_added_dropped_renamed_or_match_differently():
  """pass_changes by pass name over a group's kernels (matches summed): only in A, only in B, a name in each that reads alike paired as
  probably renamed, matches that differ; a light kernel (no passes) counts none."""
  from explorer.analysis.diff import pass_changes
  def k(*passes: tuple[str, int]) -> Any: return {"passes": [{"name": n, "depth": 0, "matches": m} for n, m in passes]}
  a = [k(("expander", 108), ("remove_reduce", 1), ("devectorize", 5), ("transcendental", 0)), k(("expander", 2))]
  b = [k(("expander", 6), ("remove reduces", 1), ("devectorize2", 5), ("memory coalescing", 3), ("linearize", 1))]
  assert pass_changes(a, b) == {"only_a": ["transcendental"], "only_b": ["memory coalescing", "linearize"],
                                "renamed": [{"a": "remove_reduce", "b": "remove reduces"}, {"a": "devectorize", "b": "devectorize2"}],
                                "changed": [{"name": "expander", "a": 110, "b": 6}], "same": 0}
  assert pass_changes([{}], b)["only_b"] == ["expander", "remove reduces", "devectorize2", "memory coalescing", "linearize"]

def test_a_diff_compares_the_rules_each_pass_went_through_by_their_code():
  """rule_changes over a group's passes (by name, and a pair read as renamed): a rule by its code, not its line; one that fired on one
  side only, one whose named function kept while its pattern was written anew (paired, not listed twice), one that fired more or less;
  a pass alike on both sides is left out; a side whose passes were not looked at gives None."""
  from explorer.analysis.diff import rule_changes
  def k(*passes: tuple[str, int, int]) -> Any:
    return {"passes": [{"name": n, "depth": 0, "matches": 1, "group": g, "step": st} for n, g, st in passes]}
  def r(code: str, at: str, n: int) -> dict[str, Any]: return {"code": code, "at": at, "count": n}
  fold_a, fold_b = "(UPat(Ops.ADD, src=(UPat.cvar(),)*2), fold_const_alu),", "(UPat(GroupOp.Binary, src=(const_pat,)*2), fold_const_alu),"
  fired_a = {(0, 0): [r(fold_a, "uop/symbolic.py:124", 3), r("(UPat(Ops.MUL), lambda x: x),", "uop/symbolic.py:9", 2)],
             (0, 1): [r("(UPat(Ops.RANGE), flatten),", "codegen/simplify.py:18", 1)],
             (0, 2): [r("(UPat(Ops.END), cut),", "codegen/simplify.py:30", 4)]}
  fired_b = {(5, 0): [r(fold_b, "uop/symbolic.py:150", 3), r("(UPat(Ops.MUL), lambda x: x),", "uop/symbolic.py:12", 5)],
             (5, 1): [r("(UPat(Ops.RANGE), flatten),", "codegen/simplify.py:22", 1)],
             (5, 2): [r("(UPat(Ops.END), cut),", "codegen/simplify.py:40", 4)]}
  a, b = [k(("symbolic", 0, 0), ("simplify", 0, 1), ("remove_reduce", 0, 2))], [k(("symbolic", 5, 0), ("simplify", 5, 1), ("remove reduces", 5, 2))]
  (sym,) = rule_changes(a, b, fired_a, fired_b)
  assert (sym["a"], sym["b"], sym["only_a"], sym["only_b"]) == ("symbolic", "symbolic", [], [])
  assert [(x["action"], x["at_a"], x["at_b"]) for x in sym["reworded"]] == [("fold_const_alu", "uop/symbolic.py:124", "uop/symbolic.py:150")]
  assert sym["changed"] == [{"code": "(UPat(Ops.MUL), lambda x: x),", "at_a": "uop/symbolic.py:9", "at_b": "uop/symbolic.py:12", "a": 2, "b": 5}]
  fired_b[(5, 2)] = [r("(UPat(Ops.END), cut_new),", "codegen/simplify.py:40", 4)]  # the renamed pass: its rule wrote another function
  renamed = rule_changes(a, b, fired_a, fired_b)[1]
  assert (renamed["a"], renamed["b"], [x["at"] for x in renamed["only_a"]], [x["at"] for x in renamed["only_b"]]) == \
    ("remove_reduce", "remove reduces", ["codegen/simplify.py:30"], ["codegen/simplify.py:40"])
  assert rule_changes(a, b, fired_a, {}) is None

@MADE
def test_a_study_on_an_older_tinygrad_through_the_api(tmp_path):
  """POST /api/studies with tinygrad 0.13.0: its label says so, its cases are 0.13's traces, its result names the tinygrad; the form
  offers the versions the explorer traces on; one it does not (0.11.0) is a 422."""
  from fastapi.testclient import TestClient
  from support import app_over
  with TestClient(app_over(str(tmp_path / "s.sqlite3"))) as client:
    assert client.post("/api/studies", json={"kind": "constants", "presets": ["small"], "tinygrad": "0.11.0"}).status_code == 422
    assert 'name="tinygrad"' in client.get("/studies").text and '<option value="0.13.0">' in client.get("/studies").text
    run = client.post("/api/studies", json={"kind": "constants", "presets": ["small"], "repeats": 3, "warmup": 1, "ci_width": None,
                                            "budget_s": 5, "targets": ["clang"], "tinygrad": "0.13.0"})
    assert run.status_code == 202 and run.json()["label"] == "constants: small on tinygrad 0.13.0"
    deadline = time.monotonic() + 600
    while (got := client.get(f"/api/studies/{run.json()['id']}").json())["status"] in ("queued", "running") and time.monotonic() < deadline:
      time.sleep(0.5)
    assert got["status"] == "done", got.get("error")
    assert got["result"]["tinygrad"] == "0.13.0" and all("tinygrad 0.13.0" in t["label"] for t in got["result"]["cases"][0]["traces"].values())

@MADE
def test_a_trace_on_a_tinygrad_not_made_yet_makes_its_environment_first_and_says_so(tmp_path, monkeypatch):
  """The first trace asking for a version whose environment is missing makes it from its lock (seconds: PyPI's wheel, hash-checked),
  saying so as the trace's first progress, then traces there; one that cannot be made fails the trace in a line."""
  from explorer.spec import PRESETS, Variant
  from explorer.tracing.pipeline.run import run_trace
  from explorer.tracing.workers.process import WorkerFailed
  monkeypatch.setenv(versions.DIR_VAR, str(tmp_path / "fresh"))
  said: list[tuple[str, str, str]] = []
  result = run_trace(PRESETS["small"], Variant(tinygrad="0.13.0", time=False), progress=lambda *a: said.append(a), timeout_s=600)
  assert result.trace["env"]["tinygrad"] == "0.13.0" and versions.environment("0.13.0").state == "ready"
  making = [d for stage, _, d in said if "tinygrad 0.13.0:" in d]
  assert said[0][0] == "tensor_graph" and making[0].startswith("tinygrad 0.13.0: a venv at") and making[-1] == "tinygrad 0.13.0: ready"
  (tmp_path / "locks").mkdir()
  bad = tmp_path / "locks" / "tinygrad-0.13.0.txt"
  bad.write_text("tinygrad==0.13.0 --hash=sha256:" + "0" * 64 + "\n")  # a hash no wheel has: pip refuses it
  monkeypatch.setattr(versions, "LOCKS", tmp_path / "locks")
  with pytest.raises(WorkerFailed, match=r"tinygrad 0\.13\.0: installing tinygrad failed"):
    run_trace(PRESETS["small"], Variant(tinygrad="0.13.0", time=False), timeout_s=600)
  assert versions.environment("0.13.0").state == "stale"  # the one made before stays, and says it was made from another lock
