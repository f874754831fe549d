"""Scheduling a kernel by hand (explorer.tracing.enrichments.handopts): tinygrad's opts applied through its own apply_opts give what plain tinygrad's
do_to_program gives for the same opts (in a subprocess, renderers built independently), a bad opt is refused with tinygrad's reason,
the host target is timed against the original, and the kernel page's Opts panel applies a chip and shows the new registers."""
from __future__ import annotations
import json
import re
import shutil
import subprocess
import sys
import pytest
from conftest import ARTIFACTS, REPO, needs_chromium, scheduled

pytestmark = pytest.mark.traces({"preset": "small", "variant": {"targets": ["cuda"], "time": False}})

PLAIN_OPTS = r"""
import json, sys
from dataclasses import replace
from tinygrad import Tensor
from tinygrad.codegen import do_to_program
from tinygrad.codegen.opt import Opt, OptOps, tc
from tinygrad.device import Compiler, Device
from tinygrad.helpers import Target, ansistrip
from tinygrad.renderer import Renderer
from tinygrad.renderer.cstyle import CUDARenderer
from tinygrad.uop.ops import Ops
spec, opts = json.loads(sys.argv[1]), [Opt(OptOps[o.split(":")[0]], int(o.split(":")[1]), int(o.split(":")[2])) for o in sys.argv[2].split(",")]
def deviceless(cls, target, **attrs):
  r = cls.__new__(cls); Renderer.__init__(r, target)
  for k, v in attrs.items(): setattr(r, k, v)
  r.compiler = Compiler(); return r
x = Tensor.empty(spec["batch"], spec["cin"], spec["height"], spec["width"])
w = Tensor.empty(spec["cout"], spec["cin"] // spec["groups"], spec["kernel"], spec["kernel"])
ast = next(c.src[0] for c in x.conv2d(w, padding=spec["kernel"] // 2).schedule_linear().src if c.src[0].op is Ops.SINK)
ast = ast.replace(arg=replace(ast.arg, opts_to_apply=tuple(opts)))
got = {}
renderers = {"cuda": lambda: deviceless(CUDARenderer, Target("CUDA", "CUDA", "sm_90"), tensor_cores=tc.get_cuda("sm_90")),
             "clang": lambda: Device["CPU"].renderer}
for name in sys.argv[3].split(","):
  p = do_to_program(ast, renderers[name]())
  got[name] = [ansistrip(p.arg.name), list(p.arg.global_size), None if p.arg.local_size is None else list(p.arg.local_size),
               next(s.arg for s in p.src if s.op is Ops.SOURCE)]
print(json.dumps(got))
"""

def plain_tinygrad(spec: dict, opts: list[str], target: str) -> dict:
  """Plain tinygrad (no tracking, no explorer) in a process of its own: the conv's kernel with these opts to apply, through do_to_program."""
  out = subprocess.run([sys.executable, "-c", PLAIN_OPTS, json.dumps(spec), ",".join(opts), target], capture_output=True, text=True,
                       timeout=300, cwd=REPO, env={"PATH": "/usr/bin:/bin", "VIZ": "0", "DEV": "CPU"})
  assert out.returncode == 0, out.stderr[-2000:]
  return json.loads(out.stdout.strip().splitlines()[-1])

def test_hand_opts_give_what_tinygrad_gives_for_them_on_cuda_and_the_host(web_client, traced):
  trace = web_client.get(f"/api/traces/{traced}/raw").json()
  opts = ["UPCAST:0:4", "LOCAL:1:8"]
  want = plain_tinygrad(trace["spec"], opts, "cuda")
  cuda = scheduled(web_client, traced, 0, {"target": "cuda", "opts": opts, "from": "none"})
  assert cuda.status_code == 200, cuda.text
  got = cuda.json()
  rec = got["record"]
  assert [rec["name"], rec["global_size"], rec["local_size"], rec["source"]] == want["cuda"]
  assert got["opts"] == rec["opts"] == opts and got["next"] and got["timing"] is None  # CUDA does not run here: not timed
  assert rec["compile"] is not None and rec["pressure"]["max_live"] > 0
  original = trace["kernels"][0]["targets"]["cuda"].get("compile") or got["original_compile"]  # compiled beside it where the trace had none
  if shutil.which("nvcc"): assert original is not None and isinstance(original["registers"], int), original
  host = scheduled(web_client, traced, 0, {"target": "clang", "opts": opts[:1], "from": "none"})
  assert host.status_code == 200, host.text
  hrec, timing = host.json()["record"], host.json()["timing"]
  # the host's own kernel with UPCAST:0:4 alone: compare with plain tinygrad for that opt list on the CPU renderer
  assert [hrec["name"], hrec["global_size"], hrec["local_size"], hrec["source"]] == plain_tinygrad(trace["spec"], opts[:1], "clang")["clang"]
  assert timing["device"] == "CPU" and len(timing["a_samples"]) == len(timing["b_samples"]) == timing["repeats"]
  assert timing["ci_low"] <= timing["ratio"] <= timing["ci_high"] and timing["b_median_s"] > 0
  assert timing["method"] == "host" and timing["a_s"]["method"] == timing["b_s"]["method"] == "host" and "ci_low" in timing["a_s"]
  panel = web_client.get(f"/t/{traced}/k/0/opts", params={"target": "clang", "opts": opts[0], "from": "none"}).text
  assert "measured in this run, the original and the hand schedule interleaved" in panel and 'data-clock="host"' in panel
  assert "the original here is timed again beside the hand schedule" in panel  # not the kernel page's figure, and it says so
  check = host.json()["check"]  # it runs, over the same seeded inputs as the original, and writes the same values
  spec = trace["spec"]
  assert check["same"] and check["values"] == spec["batch"] * spec["cout"] * spec["height"] * spec["width"] and check["max_abs_diff"] < 1e-4
  again = web_client.post(f"/api/traces/{traced}/kernels/0/opts", json={"target": "clang", "opts": opts[:1], "from": "none"})
  assert again.status_code == 200 and again.json() == host.json()  # stored: asked again, answered at once

def test_a_bad_opt_is_refused_with_tinygrads_reason(web_client, traced):
  r = scheduled(web_client, traced, 0, {"target": "cuda", "opts": ["UPCAST:0:7"], "from": "none"})
  assert r.status_code == 422 and "UPCAST:0:7 (opt 1 of 1)" in r.json()["detail"] and "can't divide" in r.json()["detail"], r.text
  assert "Traceback" not in r.text and "\x1b" not in r.text
  r = web_client.post(f"/api/traces/{traced}/kernels/0/opts", json={"target": "cuda", "opts": ["UPCAST:zero:4"]})
  assert r.status_code == 422 and "not an opt" in r.text
  for negative in ("UPCAST:0:-1", "LOCAL:0:-4", "PADTO:0:-32"):  # a size below 0: refused as text, before any work (tinygrad fails inside)
    r = web_client.post(f"/api/traces/{traced}/kernels/0/opts", json={"target": "cuda", "opts": [negative], "from": "none"})
    assert r.status_code == 422 and "argument is a size, 0 or more" in r.json()["detail"], r.text
  r = web_client.post(f"/api/traces/{traced}/kernels/0/opts", json={"target": "fortran", "opts": []})
  assert r.status_code == 409 and "unknown target" in r.text
  assert web_client.get(f"/api/traces/{traced}/kernels/0/opts", params={"opts": "LOCAL:0:2"}).status_code == 404

def test_the_heuristics_opts_are_the_kernels_own(web_client, traced):
  trace = web_client.get(f"/api/traces/{traced}/raw").json()
  r = scheduled(web_client, traced, 0, {"target": "cuda", "opts": [], "from": "heuristic"})
  assert r.status_code == 200, r.text
  own = trace["kernels"][0]["targets"]["cuda"]
  assert r.json()["opts"] == own["opts"] and r.json()["record"]["source"] == own["source"]

@pytest.mark.browser
@needs_chromium
def test_the_opts_panel_applies_a_chip_and_shows_the_new_registers(live_server, page, errors):
  from conftest import trace_on
  trace_id = trace_on(live_server, {"preset": "small", "variant": {"targets": ["cuda"], "time": False}})
  page.goto(f"{live_server}/t/{trace_id}/k/0?target=cuda")
  page.click("#opts-panel summary")
  page.click("#opts-panel [data-opts-from=none]")  # start over from no opts: the kernel as its AST wrote it
  page.wait_for_selector("#opts-result", timeout=180_000)
  assert page.locator("#opts-chips").inner_text() == "none"
  first = page.locator("#opts-result").inner_text()
  page.locator("#opts-result [data-add-opt='UPCAST:0:4']").click()  # a chip tinygrad offers next: added and applied
  page.wait_for_selector("#opts-result[data-opts='UPCAST:0:4']", timeout=180_000)
  assert "UPCAST:0:4" in page.locator("#opts-chips").inner_text() and page.locator("#opts-result").inner_text() != first
  registers = page.locator("#opts-result [data-opts-registers]").inner_text()
  original = page.locator("#opts-result tr:has([data-opts-registers]) td").nth(1).inner_text()
  if shutil.which("nvcc"): assert registers.isdigit() and original.isdigit(), (original, registers)
  assert page.locator("#opts-result .opts-diff").count() == 1
  assert not errors, errors
  page.fill("#opts-add", "UPCAST:0:7")
  page.click("#opts-add-button")
  page.click("#opts-apply")
  page.wait_for_selector("#opts-status.err", timeout=180_000)
  assert "can't divide" in page.locator("#opts-status").inner_text()  # tinygrad's reason, one line
  assert all("status of 422" in e for e in errors), errors  # the refusal's answer, which the browser logs
  errors.clear()
  permalink = page.locator("#opts-result [data-opts-permalink]").get_attribute("href")
  page.goto(f"{live_server}/t/{trace_id}/k/0{permalink}")
  page.wait_for_selector("#opts-result[data-opts='UPCAST:0:4']", timeout=60_000)
  page.screenshot(path=str(ARTIFACTS / "opts_panel.png"))
  assert not errors, errors

def test_the_cli_and_the_python_api_schedule_by_hand(tmp_path, capsys):
  from explorer.api import trace
  from explorer.cli.main import main
  from explorer.spec import SpecError
  t = trace("small", targets=("cuda",), time=False)
  opts = ["UPCAST:0:4", "LOCAL:1:8"]
  got = t.kernel(0).with_opts(opts, target="cuda", start="none", time=False)
  want = plain_tinygrad(t.data["spec"], opts, "cuda")["cuda"]
  assert [got["record"][f] for f in ("name", "global_size", "local_size", "source")] == want and got["opts"] == opts
  with pytest.raises(SpecError, match="can't divide"): t.kernel(0).with_opts(["UPCAST:0:7"], target="cuda", start="none")
  db = tmp_path / "s.sqlite3"
  trace_id = t.store(db)
  out_json = tmp_path / "o.json"
  assert main(["opts", trace_id, "--db", str(db), "--target", "cuda", *(a for o in opts for a in ("--opt", o)), "--from", "none",
               "--json", str(out_json), "--quiet"]) == 0
  said = capsys.readouterr().out
  assert got["record"]["name"] in said and "registers" in said and "not timed" in said
  if shutil.which("nvcc"):  # the original's registers too, compiled beside it (the trace keeps no compile facts yet): never "—"
    (regs_row,) = [line.split() for line in said.splitlines() if line.startswith("registers")]
    assert len(regs_row) == 3 and all(r.isdigit() for r in regs_row[1:]), regs_row
  assert json.loads(out_json.read_text())["record"]["source"] == got["record"]["source"]
  assert main(["opts", trace_id, "--db", str(db), "--opt", "UPCAST:0:2", "--quiet"]) == 0  # the host's own target: timed here
  said = capsys.readouterr().out
  assert "time on CPU, the original and the hand schedule interleaved in this run (30 pairs, host clock, caches warm, " in said
  assert re.search(r"the hand schedule (is [0-9.]+x (faster|slower) than|takes the same time as) the original \(95% interval ", said), said
  assert main(["opts", trace_id, "--db", str(db), "--target", "cuda", "--opt", "UPCAST:0:7", "--from", "none", "--quiet"]) == 2
  err = capsys.readouterr().err
  assert "tinygrad refused UPCAST:0:7" in err and "Traceback" not in err
  assert main(["opts", trace_id, "--db", str(db), "--opt", "upcast:zero", "--quiet"]) == 2 and "not an opt" in capsys.readouterr().err
  # a trace file keeps no rewrite log: the convolution is traced again for it, and the schedule is the same
  t.save(saved := tmp_path / "t.json")
  assert main(["opts", str(saved), "--target", "cuda", *(a for o in opts for a in ("--opt", o)), "--from", "none", "--no-time",
               "--json", str(out_json), "--quiet"]) == 0
  assert json.loads(out_json.read_text())["record"]["source"] == got["record"]["source"]

def test_two_schedules_diff_and_a_schedule_joins_the_tour(web_client, traced):
  one, two = (["UPCAST:0:4"], ["UPCAST:0:4", "LOCAL:1:8"])
  a, b = (scheduled(web_client, traced, 0, {"target": "cuda", "opts": o, "from": "none"}) for o in (one, two))
  assert a.status_code == b.status_code == 200, (a.text, b.text)
  ra, rb = a.json()["record"], b.json()["record"]
  asked = {"target": "cuda", "opts": ",".join(two), "from": "none", "vs": one[0], "vs_from": "none"}  # two against one: A is a schedule
  frag = web_client.get(f"/t/{traced}/k/0/opts", params=asked).text
  assert "A: by hand: UPCAST:0:4" in frag and ra["name"] in frag and rb["name"] in frag and "--- by hand: UPCAST:0:4" in frag
  pin = web_client.post(f"/api/traces/{traced}/kernels/0/opts/tour", json={"target": "cuda", "opts": two, "from": "none"})
  assert pin.status_code == 200 and pin.json()["pinned"] >= 1, pin.text
  never = {"target": "cuda", "opts": ["LOCAL:0:2"], "from": "none"}
  assert web_client.post(f"/api/traces/{traced}/kernels/0/opts/tour", json=never).status_code == 404
  steps = web_client.get(f"/api/traces/{traced}/tour").json()["steps"]
  step = next(s for s in steps if s["title"] == "Kernel 0 by hand: UPCAST:0:4, LOCAL:1:8")
  own = web_client.get(f"/api/traces/{traced}/kernels/0/targets/cuda/analysis")  # the tour computed it to tell it
  assert own.status_code == 200, own.text
  live = f"peak live values {own.json()['pressure']['max_live']} -> {rb['pressure']['max_live']}"
  assert rb["name"] in step["text"] and live in step["text"] and "embed" not in step
  page = web_client.get(f"/t/{traced}/tour", params={"step": step["id"]}).text
  assert 'id="opts-result"' in page and "open it on the kernel page" in page and rb["name"] in page
