"""SASS with its lines and live registers, without a GPU (tracing.compilers.toolchain.nvdisasm, analysis.sass): the listing against cuobjdump's
and against nvdisasm's own JSON line table of the same cubin compiled again here, the live-register peak against ptxas' count, a
kernel that spills, the page's clicks in a real browser, the diff, the CLI, and a machine without nvdisasm."""
from __future__ import annotations
import json
import pathlib
import re
import shutil
import subprocess
import tempfile
import pytest
from conftest import computed, trace_of
from explorer.tracing.compilers import nvdisasm, toolchain

MISSING = [t for t in ("nvdisasm", "cuobjdump", "ptxas") if toolchain.tool(t) is None] + ([] if shutil.which("nvcc") else ["nvcc"])
needs_tools = pytest.mark.skipif(bool(MISSING), reason=f"no {', '.join(MISSING)} here (make test installs NVIDIA's nvdisasm and cuobjdump "
                                 "wheels; nvcc and ptxas: the CUDA toolkit)")
WINO = {"preset": "small", "variant": {"algo": "winograd", "targets": ["cuda", "ptx"], "time": False}}  # 4 kernels
pytestmark = pytest.mark.traces(WINO)
SPILLS = {"preset": "wino8", "variant": {"algo": "winograd", "wino_impl": "explorer", "staging": "fused", "targets": ["ptx"], "time": False}}

def got_sass(client, trace_id: str, n: int, target: str, timeout_s: float = 300) -> dict:
  """The SASS API, polled through what it computes first (the record's compile facts, its line map)."""
  r = computed(client, f"/api/traces/{trace_id}/kernels/{n}/targets/{target}/sass", timeout_s)
  assert r.status_code == 200, r.text
  return r.json()

def cubin_here(rec: dict, target: str, d: pathlib.Path) -> pathlib.Path:
  """The record compiled again, as the facts compiled it: nvcc -lineinfo on the CUDA C, ptxas -lineinfo on the PTX with a .loc a line."""
  cubin = d / f"{target}.cubin"
  if target == "cuda":
    (d / "k.cu").write_text(rec["source"])
    cmd = ["nvcc", f"-arch={rec['arch']}", "-cubin", "-lineinfo", "-o", str(cubin), str(d / "k.cu")]
  else:
    (d / nvdisasm.PTX_FILE).write_text(nvdisasm.with_ptx_lines(rec["compiled_source"]))
    cmd = [str(toolchain.tool("ptxas")), f"-arch={rec['arch']}", "-lineinfo", "-o", str(cubin), str(d / nvdisasm.PTX_FILE)]
  subprocess.run(cmd, check=True, capture_output=True, timeout=120)
  return cubin

def cuobjdump_listing(cubin: pathlib.Path) -> list[tuple[int, str]]:
  out = subprocess.run([str(toolchain.tool("cuobjdump")), "-sass", str(cubin)], check=True, capture_output=True, text=True).stdout
  return [(int(m.group(1), 16), " ".join(m.group(2).split())) for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", out)]

def json_lines(cubin: pathlib.Path, source_name: str) -> list[int | None]:
  """Each instruction's line in nvdisasm's JSON (a line holds until the next instruction names one), for lines of source_name."""
  doc = json.loads(subprocess.run([str(toolchain.tool("nvdisasm")), "-c", "-json", "-g", str(cubin)], check=True, capture_output=True,
                                  text=True).stdout)
  files = doc[-1]["files"]
  (fn,) = doc[1]
  out, line = [], None
  for ins in fn["sass-instructions"]:
    if "source-line" in ins: line = ins["source-line"] if files[ins["source-file-id"]]["file"].endswith(source_name) else None
    out.append(line)
  return out

@needs_tools
def test_the_listing_is_cuobjdumps_with_nvdisasms_lines_and_ptxas_registers(web_client, traced):
  """About 60 s of CPU here: every kernel of the module's trace on CUDA and PTX (eight listings, each computed in workers: compile
  facts, line map, nvdisasm), each checked against cuobjdump's listing and nvdisasm's lines of the same cubin made here again."""
  n_kernels = len(web_client.get(f"/api/traces/{traced}").json()["kernels"])
  for n in range(n_kernels):
    for target in ("cuda", "ptx"):
      got = got_sass(web_client, traced, n, target)
      rec = web_client.get(f"/api/traces/{traced}/kernels/{n}/targets/{target}").json()
      with tempfile.TemporaryDirectory() as d:
        cubin = cubin_here(rec, target, pathlib.Path(d))
        theirs = cuobjdump_listing(cubin)
        ours = [(i["offset"], i["text"]) for i in got["instructions"]]
        assert len(ours) == len(theirs) == got["count"] and got["left_out"] == 0
        for (o, t), (o2, t2) in zip(ours, theirs, strict=False):  # the same instructions in order; nvdisasm names branch targets by label
          assert o == o2 and (t == t2 if "`(" not in t else t.split()[0] == t2.split()[0]), (n, target, o, t, t2)
        lines = json_lines(cubin, "k.cu" if target == "cuda" else nvdisasm.PTX_FILE)
        assert [i["line"] for i in got["instructions"]] == lines and any(lines), (n, target)
      assert sum(got["mix"].values()) == got["count"] and got["spills"] == 0 and rec["compile"]["spill_store_bytes"] == 0
      assert all(i["op"] == "NOP" for i in got["instructions"] if i["live"] is None)  # the padding after the last branch: never run
      live = {i["offset"]: i["live"] for i in got["instructions"] if i["live"] is not None}
      assert got["peak_live"] == max(live.values()) == live[got["peak_offset"]]
      # ptxas allocates up to the highest register named and reserves two; what is live at once is at most that (often much less)
      assert got["registers"] == rec["compile"]["registers"] == got["highest_register"] + 3 and 0 < got["peak_live"] <= got["registers"] - 2
      if target == "cuda":  # through the line map, each instruction's UOps are those of its line
        by_line = dict(rec["line_map"])
        assert got["uops_mapped"] and all(i["uops"] == by_line.get(i["line"], []) for i in got["instructions"])
        assert got["estimate"] == rec["pressure"]["max_live"] and got["heaviest"][0]["instructions"] >= got["heaviest"][-1]["instructions"]
      else: assert not got["uops_mapped"] and got["lines_of"] == "ptx"

@needs_tools
def test_a_ptx_loc_per_line_changes_no_instruction(web_client, traced):
  rec = web_client.get(f"/api/traces/{traced}/kernels/0/targets/ptx").json()
  with tempfile.TemporaryDirectory() as d:
    p = pathlib.Path(d)
    (p / "plain.ptx").write_text(rec["compiled_source"])
    ptxas = str(toolchain.tool("ptxas"))
    subprocess.run([ptxas, f"-arch={rec['arch']}", "-o", str(p / "plain.cubin"), str(p / "plain.ptx")], check=True, capture_output=True)
    lined = cubin_here(rec, "ptx", p)
    assert cuobjdump_listing(p / "plain.cubin") == cuobjdump_listing(lined)

@needs_tools
def test_a_kernel_that_spills_has_its_local_loads_and_stores_marked(web_client):
  """The explorer's fused Winograd F(4,3) on wino8, as tinygrad's PTX renders it: ptxas caps it at 255 registers and spills."""
  tid = trace_of(web_client, SPILLS)
  facts = {}
  for n in range(len(web_client.get(f"/api/traces/{tid}").json()["kernels"])):
    got = got_sass(web_client, tid, n, "ptx")
    if (facts := web_client.get(f"/api/traces/{tid}/kernels/{n}/targets/ptx/facts").json())["spill_store_bytes"]: break
  assert facts["spill_store_bytes"] > 0 and facts["registers"] == 255
  spilled = [i for i in got["instructions"] if i["op"].split(".")[0] in ("LDL", "STL")]
  assert got["spills"] >= len(spilled) > 0 and got["mix"].get("STL", 0) + got["mix"].get("LDL", 0) == got["spills"]
  assert got["left_out"] == got["count"] - len(got["instructions"]) and len(got["instructions"]) <= nvdisasm.MAX_INSTRUCTIONS
  page = web_client.get(f"/t/{tid}/k/{n}/sass", params={"target": "ptx"}).text
  assert page.count('class="spill') == len(spilled) and f'id="sass-spills">{got["spills"]}<' in page
  assert f"{got['left_out']:,} more are counted above" in page

@needs_tools
def test_the_page_and_the_diff_show_it(web_client, traced):
  got = got_sass(web_client, traced, 2, "cuda")
  page = web_client.get(f"/t/{traced}/k/2/sass").text
  assert page.count('<tr id="i') == got["count"] and f'data-peak="{got["peak_live"]}"' in page and 'id="sass-heaviest"' in page
  kernel = web_client.get(f"/t/{traced}/k/2", params={"target": "cuda"}).text
  assert 'id="sass-link"' in kernel and f"{got['count']} instructions" in kernel
  assert web_client.get(f"/api/traces/{traced}/kernels/0/targets/clang/sass").status_code == 404  # SASS is NVIDIA's
  # the diff of two schedules on cuda: each side's SASS summed, its mix side by side, in the verdict
  other = trace_of(web_client, {**WINO, "variant": {**WINO["variant"], "opt": "none"}})
  for n in range(4): got_sass(web_client, other, n, "cuda")
  d = web_client.get(f"/api/diff/{traced}/{other}?graphs=0").json()
  sm = d["sass"]
  assert sm is not None and sm["a"]["count"] == sum(got_sass(web_client, traced, n, "cuda")["count"] for n in range(4))
  assert sum(r["a"] for r in sm["mix"]) == sm["a"]["count"] and sum(r["b"] for r in sm["mix"]) == sm["b"]["count"]
  assert all(g["metrics"]["a"]["sass_instructions"] is not None for g in d["groups"] if g["a"] and g["b"])
  html = web_client.get(f"/diff/{traced}/{other}").text
  assert 'id="sass-diff"' in html and f"{sm['a']['count']} → {sm['b']['count']}" in html and "data-sass-live=" in html

def test_without_nvdisasm_the_page_says_what_to_install(web_client, traced, monkeypatch, tmp_path):
  """Facts compiled where nvdisasm is not (the compiler wrapper sees none): a note, and every page still answers."""
  if not shutil.which("nvcc"): pytest.skip("no nvcc here: nothing compiles CUDA C to show a note beside")
  from fastapi.testclient import TestClient
  from support import app_over
  from explorer.stages import ENRICH_FACTS
  from explorer.store import Store
  db = tmp_path / "t.sqlite3"
  src = web_client.app.state.services.store
  # with the CUDA record's rewrite blob: its line map is computed here where this worker's store has not computed it yet
  Store(db).put_trace("0000000000005a55", src.get_trace(traced), src.get_rewrites(traced), {"cuda": src.get_rewrites(traced, "cuda")})
  rec = Store(db).get_trace("0000000000005a55")["kernels"][0]["targets"]["cuda"]
  found = toolchain.tool
  monkeypatch.setattr(toolchain, "tool", lambda name: None if name == "nvdisasm" else found(name))
  facts = toolchain.compile_target("cuda", rec["source"], rec["arch"], toolchain.block_threads(rec["local_size"]))
  assert facts["ok"] and facts["sass"] is None and "pip install 'kernel-explorer[cuda]'" in facts["sass_note"]
  Store(db).put_enrichments("0000000000005a55", ENRICH_FACTS, {(0, "cuda"): facts})
  with TestClient(app_over(db)) as client:
    r = computed(client, "/api/traces/0000000000005a55/kernels/0/targets/cuda/sass")  # the line map, where the copy lacks it, is computed first
    assert r.status_code == 409 and "no nvdisasm here" in r.json()["detail"]
    page = client.get("/t/0000000000005a55/k/0/sass")
    assert page.status_code == 200 and 'id="sass-error"' in page.text and "pip install" in page.text
    kernel = client.get("/t/0000000000005a55/k/0", params={"target": "cuda"})
    assert kernel.status_code == 200 and 'id="sass-note"' in kernel.text and 'id="sass-link"' not in kernel.text

@needs_tools
def test_the_cli_and_the_python_api(web_client, traced, tmp_path, capsys):
  from explorer.api import Trace
  from explorer.cli.main import main
  from explorer.store import Store
  svc = web_client.app.state.services
  trace = Trace(svc.store.get_trace(traced), svc.store.get_rewrites(traced) or b"", {"cuda": svc.store.get_rewrites(traced, "cuda") or b""})
  got, api = trace.kernel(1).sass(), got_sass(web_client, traced, 1, "cuda")
  assert {k: v for k, v in got.items() if k not in ("lines", "line_uops")} == {k: v for k, v in api.items() if k not in ("lines", "line_uops")}
  with pytest.raises(ValueError, match="SASS is for cuda and ptx"): trace.kernel(1).sass("metal")
  bare = {**trace.data, "kernels": [{**k, "targets": {t: r for t, r in k["targets"].items() if t != "ptx"}} for k in trace.kernels]}
  with pytest.raises(LookupError, match="has no ptx record"): Trace(bare, trace.rewrites).kernel(1).sass("ptx")
  db = tmp_path / "cli.sqlite3"
  Store(db).put_trace(traced, svc.store.get_trace(traced), svc.store.get_rewrites(traced))
  assert main(["enrich", traced, "--db", str(db), "--sass", "--quiet"]) == 0
  said = capsys.readouterr().out
  assert f"cuda kernel 1 {trace.kernels[1]['name']}: {got['count']} SASS instructions, peak {got['peak_live']} of {got['registers']}" in said
  assert main(["enrich", traced, "--db", str(db), "--sass", "--target", "metal", "--quiet"]) == 2
  assert "SASS is for cuda and ptx" in capsys.readouterr().err
