"""Compile facts are an enrichment (explorer.tracing.enrichments.enrich): a trace compiles nothing beyond what tinygrad runs; a kernel's facts on a
target are computed when its page or its API URL first asks, for that kernel alone, once however many ask at the same time, stored in
the enrichments table and served from it after."""
from __future__ import annotations
import copy
import json
import shutil
from concurrent.futures import ThreadPoolExecutor
import pytest
from conftest import computed
from explorer.stages import ENRICH_FACTS
from explorer.tracing.enrichments.enrich import add_facts

pytestmark = pytest.mark.traces({"preset": "small", "variant": {"targets": ["cuda", "ptx"], "time": False}})

def _facts(client, url: str, timeout_s: float = 120) -> dict:
  r = computed(client, url, timeout_s, lambda answer: answer["kind"] == ENRICH_FACTS)
  assert r.status_code == 200, r.text
  return r.json()

def test_a_kernels_facts_are_computed_once_on_first_request_and_for_it_alone(web_client, traced):
  svc = web_client.app.state.services
  trace = svc.store.get_trace(traced)
  assert all(rec["compile"] is None for k in trace["kernels"] for rec in k["targets"].values())  # the trace compiled nothing more
  assert svc.store.enrichments(traced, ENRICH_FACTS) == {}
  url, before = f"/api/traces/{traced}/kernels/0/targets/cuda/facts", svc.enrichments.computed
  with ThreadPoolExecutor(2) as pool: firsts = list(pool.map(lambda _: web_client.get(url), range(2)))  # two first views at once
  assert [r.status_code for r in firsts] == [202, 202], [r.text for r in firsts]
  facts = _facts(web_client, url)
  assert svc.enrichments.computed == before + 1 and set(svc.store.enrichments(traced, ENRICH_FACTS)) == {(0, "cuda")}
  assert _facts(web_client, url) == facts and svc.enrichments.computed == before + 1  # served from the store after
  # what the trace JSON and the kernel record say now, and what the same records compiled here (the CLI's path) give
  stored = web_client.get(f"/api/traces/{traced}/kernels/0/targets/cuda").json()["compile"]
  here = add_facts(copy.deepcopy(trace), ["cuda"], [0])["kernels"][0]["targets"]["cuda"]["compile"]
  assert stored == facts == here
  again = web_client.get(f"/api/traces/{traced}/raw").json()
  assert [t for k in again["kernels"] for t, rec in k["targets"].items() if rec["compile"] is not None] == ["cuda"]
  if shutil.which("nvcc"): assert facts["ok"] and facts["registers"] > 0 and facts["occupancy"]["block_threads"] > 0

def test_the_kernel_page_starts_its_facts_and_shows_them_once_stored(web_client, traced):
  page = web_client.get(f"/t/{traced}/k/0?target=ptx").text
  assert "compiling this kernel for" in page and 'id="compiled-pane"' in page and "data-facts-poll" in page
  facts = _facts(web_client, f"/api/traces/{traced}/kernels/0/targets/ptx/facts")
  fragment = web_client.get(f"/t/{traced}/k/0/facts?target=ptx").text
  page = web_client.get(f"/t/{traced}/k/0?target=ptx").text
  assert "compiling this kernel" not in page and "data-facts-poll" not in page
  if facts["ok"]:
    assert f"<b>{facts['registers']}</b> registers/thread" in fragment and f"<b>{facts['registers']}</b> registers/thread" in page
  else: assert facts["message"].split(":")[0] in fragment

def test_a_cross_site_view_starts_no_compile(web_client, traced):
  svc = web_client.app.state.services
  before = svc.enrichments.computed
  r = web_client.get(f"/api/traces/{traced}/kernels/0/targets/clang/facts", headers={"sec-fetch-site": "cross-site", "sec-fetch-mode": "no-cors",
                                                                                                 "sec-fetch-dest": "image"})
  assert r.status_code == 403 and svc.enrichments.computed == before and svc.enrichments.status(traced, ENRICH_FACTS, "clang", (0,)) is None
  r = web_client.get(f"/api/traces/{traced}/kernels/9/targets/clang/facts")
  assert r.status_code == 404, r.text

# ***** the CLI: `trace --facts` asks for them now, `enrich` fills them in later (a trace file, or a stored trace with more targets) *****

def test_the_cli_computes_facts_when_asked_and_enrich_fills_in_later(tmp_path, capsys):
  from explorer.cli.main import main
  from explorer.spec import PRESETS, Variant
  from explorer.store import Store
  from explorer.tracing.pipeline.run import run_trace
  path = tmp_path / "t.json"
  assert main(["trace", "--preset", "small", "--no-time", "--target", "cuda", "--json", str(path), "--quiet"]) == 0
  assert "compile facts" not in capsys.readouterr().out
  written = json.loads(path.read_text())
  assert all(rec["compile"] is None for k in written["kernels"] for rec in k["targets"].values())
  assert main(["enrich", str(path), "--facts", "--target", "cuda", "--quiet"]) == 0
  said, enriched = capsys.readouterr().out, json.loads(path.read_text())
  facts = enriched["kernels"][0]["targets"]["cuda"]["compile"]
  assert facts is not None and enriched["kernels"][0]["targets"]["clang"]["compile"] is None  # cuda only, as asked
  assert said.startswith("cuda compile facts: " + enriched["kernels"][0]["targets"]["cuda"]["name"])
  if shutil.which("nvcc"): assert f"{facts['registers']} registers" in said
  assert main(["enrich", str(path), "--facts", "--kernel", "7", "--quiet"]) == 2 and "--kernel" in capsys.readouterr().err
  assert main(["enrich", str(path), "--facts", "--target", "fortran", "--quiet"]) == 2 and "unknown fortran" in capsys.readouterr().err
  # a trace file keeps no rewrite blob: its convolution is traced again (the same kernels, by their AST keys) to render another target
  assert main(["enrich", str(path), "--target", "opencl"]) == 0
  err, again = capsys.readouterr().err, json.loads(path.read_text())
  assert "keeps no rewrite log: tracing" in err and all("opencl" in k["targets"] and "pressure" in k["targets"]["opencl"] for k in again["kernels"])
  assert not any("pressure" in k["targets"]["clang"] for k in again["kernels"])  # the host's analyses: when asked for
  assert main(["enrich", str(path), "--analysis", "--quiet"]) == 0
  assert all(json.loads(path.read_text())["kernels"][n]["targets"]["clang"]["pressure"]["max_live"] > 0 for n in range(len(again["kernels"])))
  # a stored trace: a target it lacks is rendered from its rewrite blob and stored, then its facts are kept in the store
  db = tmp_path / "s.sqlite3"
  run = run_trace(PRESETS["small"], Variant(time=False))
  Store(db).put_trace("ab00000000000001", run.trace, run.rewrites, run.target_rewrites)
  assert main(["enrich", "ab00000000000001", "--db", str(db), "--target", "opencl", "--facts", "--quiet"]) == 0
  stored = Store(db).get_trace("ab00000000000001")
  assert stored["kernels"][0]["targets"]["opencl"]["compile"] is not None and set(Store(db).enrichments("ab00000000000001", ENRICH_FACTS)) == {
    (k["index"], "opencl") for k in stored["kernels"]}
  assert "opencl compile facts:" in capsys.readouterr().out
