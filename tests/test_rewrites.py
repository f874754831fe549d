"""Custom codegen rewrites (explorer/tracing/pipeline/rewrites.py): each runs as a named pass of real tinygrad codegen on every target and on the
host, whose rewritten programs then run and are checked against numpy; sink-loads lowers peak live values, peel:N splits a loop and
keeps the output right, drop-end fails at a named stage with the compiler's own message; the server lists the catalogue and never
runs a user's rewrite file."""
from __future__ import annotations
import json
import os
import shutil
import subprocess
import sys
import pytest
from conftest import REPO
from fastapi.testclient import TestClient
from support import WINO8_BUILTIN, app_over, shared_run
from explorer.spec import PRESETS, REWRITES, SpecError, Variant
from explorer.store import Store
from explorer.tracing.enrichments.enrich import add_facts
from explorer.tracing.pipeline.run import TraceResult, run_trace

SINK_LOADS_CHECK = r"""
import json
from explorer.tracing import tg
from explorer.tracing.pipeline.rewrites import FENCES, sink_loads
from explorer.spec import PRESETS
s = PRESETS["wino8"]
x, w = tg.Tensor.empty(s.batch, s.cin, s.height, s.width), tg.Tensor.empty(s.cout, s.cin, s.kernel, s.kernel)
ast = next(c.ast for c in tg.calls(tg.schedule(x.conv2d(w, padding=1))) if c.kind == "kernel")
prg = tg.codegen_deviceless(ast, tg.render_target("cuda", "sm_90"))
lin = list(next(u for u in prg.src if u.op is tg.Ops.LINEAR).src)
out = sink_loads(lin)
pos = {u: i for i, u in enumerate(out)}
users = {}
for u in out:
  for s_ in u.src: users.setdefault(s_, []).append(pos[u])
loads = [u for u in lin if u.op is tg.Ops.LOAD]
def fences_between(seq, a, b): return sum(seq[k].op in FENCES for k in range(a + 1, b))
print(json.dumps({"same_set": sorted(map(id, out)) == sorted(map(id, lin)), "idempotent": sink_loads(out) == out,
  "topological": all(pos[s_] < pos[u] for u in out for s_ in u.src if s_ in pos),
  "moved": sum(lin.index(u) != pos[u] for u in loads),
  "adjacent": sum(min(users[u]) == pos[u] + 1 for u in loads if u in users),
  "fences_kept": all(fences_between(lin, 0, lin.index(u)) == fences_between(out, 0, pos[u]) for u in loads), "loads": len(loads)}))
"""

def test_sink_loads_moves_loads_to_their_first_use_and_nothing_else():
  """On the wino8 direct kernel for CUDA: the same UOps, still in dependency order, loads moved down (none past a store, loop or branch
  mark), and applying it twice changes nothing (graph_rewrite runs a rule to a fixed point)."""
  env = {k: v for k, v in os.environ.items() if k not in ("VIZ", "TRACK_MATCH_STATS")}
  got = json.loads(subprocess.run([sys.executable, "-c", SINK_LOADS_CHECK], capture_output=True, text=True, cwd=REPO, env=env, check=True,
                                  timeout=300).stdout)
  assert got["same_set"] and got["topological"] and got["idempotent"] and got["fences_kept"], got
  assert got["moved"] > 0 and got["adjacent"] > got["loads"] // 2, got

def _kernel(trace: dict) -> dict: return trace["kernels"][0]

@pytest.fixture(scope="module")
def wino8_runs() -> dict[str, TraceResult]:
  """The wino8 direct convolution traced plain, with sink-loads and with peel:2 (cuda and the host's clang rendered)."""
  return {rw: run_trace(PRESETS["wino8"], Variant(targets=("cuda",), time=False, rewrites=(rw,) if rw else ()), analysis=True)
          for rw in ("", "sink-loads", "peel:2")}

@pytest.fixture(scope="module")
def wino8_direct(wino8_runs) -> dict[str, dict]: return {rw: r.trace for rw, r in wino8_runs.items()}

def test_sink_loads_lowers_the_peak_of_live_values(wino8_direct):
  """docs/reference/rewrites.md's figure: wino8 direct, one kernel; measured here on every run. Registers where this machine has ptxas."""
  plain, sunk = _kernel(wino8_direct[""]), _kernel(wino8_direct["sink-loads"])
  for target in ("cuda", "clang"):
    a, b = plain["targets"][target], sunk["targets"][target]
    assert b["pressure"]["max_live"] < a["pressure"]["max_live"], (target, a["pressure"]["max_live"], b["pressure"]["max_live"])
    assert b["linear_uops"] == a["linear_uops"] and b["source"] != a["source"]
    assert [(p["name"], p["matches"]) for p in b["passes"] if p["name"].startswith("explorer")] == [("explorer rewrite sink-loads", 1)]
    assert "linearize" in [p["name"] for p in b["passes"]] and not any(p["name"].startswith("explorer") for p in a["passes"])
  if shutil.which("ptxas"):
    # compile facts are computed when asked for
    regs = [_kernel(add_facts(wino8_direct[rw], ["cuda"]))["targets"]["cuda"]["compile"]["registers"] for rw in ("", "sink-loads")]
    assert regs[1] <= regs[0], regs
  assert wino8_direct["sink-loads"]["error"]["max_abs"] < 1e-4  # the host ran the rewritten program
  assert wino8_direct["sink-loads"]["rewrites"][0]["name"] == "sink-loads" and "def sink_loads" in wino8_direct["sink-loads"]["rewrites"][0]["source"]

def test_peel_splits_the_outer_loop_and_keeps_the_output_right(wino8_direct):
  trace = wino8_direct["peel:2"]
  assert trace["status"] == "ok" and trace["error"]["max_abs"] < 1e-4, trace["failures"]
  for target in ("cuda", "clang"):
    rec = _kernel(trace)["targets"][target]
    peeled = [s for s in rec["loop_splits"] if s["pass"] == "explorer rewrite peel:2"]
    assert len(peeled) == 1, rec["loop_splits"]
    (cut,), into = peeled[0]["ranges"], peeled[0]["into"]
    assert sorted(r["size"] for r in into) == sorted([2, cut["size"] - 2]), peeled[0]
    assert peeled[0]["rule"].startswith("explorer/tracing/pipeline/rewrites.py:") and "pm_peel" in peeled[0]["rule_source"]
    spec = rec["spec"]
    assert spec["ok"] and rec["source"].count("for (") == _kernel(wino8_direct[""])["targets"][target]["source"].count("for (") + 1 + \
      (0 if target == "cuda" else 2)  # clang's two loops nested in the peeled one are copied with it

def test_drop_end_fails_at_codegen_with_the_compilers_message(tmp_path):
  """The codegen notes' "missing .end()": the host's compiler rejects the unclosed loop; the trace records the stage, clang's own
  message and the source it was given, and the CLI exits 1 (no traceback)."""
  out = tmp_path / "t.json"
  p = subprocess.run([sys.executable, "-m", "explorer", "trace", "--preset", "wino8", "--target", "cuda", "--rewrite", "drop-end", "--no-time",
                      "--quiet", "--json", str(out)], capture_output=True, text=True, cwd=REPO, timeout=300)
  assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
  trace = json.loads(out.read_text())
  (f,) = trace["failures"]
  assert trace["status"] == "partial" and f["stage"] == "codegen"
  assert "expected '}'" in f["error"] and "rejected the kernel" in f["error"]
  assert f["source"].count("{") == f["source"].count("}") + 1
  assert "FAILED in codegen" in p.stdout and p.stdout.splitlines()[1].startswith("PARTIAL TRACE: stage codegen failed: ")

def test_rewrite_file_runs_from_the_cli(tmp_path):
  out = tmp_path / "t.json"
  p = subprocess.run([sys.executable, "-m", "explorer", "trace", "--preset", "small", "--target", "cuda", "--no-time", "--quiet", "--json", str(out),
                      "--rewrite-file", str(REPO / "examples" / "rewrite_rename_kernels.py")], capture_output=True, text=True, cwd=REPO, timeout=300)
  assert p.returncode == 0, p.stderr[-2000:]
  trace = json.loads(out.read_text())
  k = _kernel(trace)
  assert k["name"].startswith("mine_") and k["targets"]["cuda"]["name"].startswith("mine_")
  assert any(q["name"] == "explorer rewrite file:rewrite_rename_kernels.py" and q["matches"] == 1 for q in k["targets"]["cuda"]["passes"])
  assert trace["rewrites"][0]["source"].startswith('"""A rewrite file')
  bad = tmp_path / "bad.py"
  bad.write_text("matcher = 3\n")
  p = subprocess.run([sys.executable, "-m", "explorer", "trace", "--preset", "small", "--target", "cuda", "--no-time", "--quiet", "--json", str(out),
                      "--rewrite-file", str(bad)], capture_output=True, text=True, cwd=REPO, timeout=300)
  assert p.returncode == 1 and "must define `matcher`" in p.stdout and "Traceback" not in p.stderr

def test_variant_validates_rewrites():
  assert Variant(rewrites=("sink-loads", "peel:3")).validate().label().endswith("+sink-loads +peel:3")
  for bad in (("peel:0",), ("peel",), ("sink",), ("peel:2", "peel:3")):
    with pytest.raises(SpecError): Variant(rewrites=bad).validate()
  assert set(REWRITES) == {"sink-loads", "peel", "drop-end"}

def test_the_server_lists_the_catalogue_and_refuses_user_code(tmp_path, wino8_runs):
  app = app_over(str(tmp_path / "s.sqlite3"))
  run = wino8_runs["sink-loads"]
  Store(tmp_path / "s.sqlite3").put_trace("00000000000000bb", run.trace, run.rewrites, run.target_rewrites)
  with TestClient(app) as client:
    cat = client.get("/api/rewrites").json()
    assert [r["usage"] for r in cat] == ["sink-loads", "peel:N", "drop-end"]
    assert all("PatternMatcher([" in r["source"] for r in cat) and "def peel(" in cat[1]["source"]
    r = client.post("/api/traces", json={"preset": "small", "variant": {"rewrite_file": str(REPO / "examples" / "rewrite_rename_kernels.py")}})
    assert r.status_code == 422 and "never runs user code" in r.text
    assert client.post("/api/traces", json={"preset": "small", "variant": {"rewrites": ["peel:0"]}}).status_code == 422
    page = client.get("/t/00000000000000bb/k/0?target=cuda").text
    assert 'data-rewrite="sink-loads"' in page and "<b>1</b> match in this kernel" in page
    line = run.trace["kernels"][0]["targets"]["cuda"]["pressure"]["max_live_line"]
    assert f'href="#L-{line}" id="peak-line"' in page and f'id="L-{line}"' in page  # the peak links to its source line
    assert 'id="longest-ranges"' in page
    assert 'name="rewrites" value="peel"' in client.get("/").text
    form = "preset=small&algo=direct&opt=heuristic&targets=cuda&warmup=0&repeats=1&rewrites=peel&peel=3&rewrites=sink-loads"
    import urllib.parse
    from explorer.web.routes.home import form_to_request
    _, req = form_to_request(urllib.parse.parse_qs(form))
    assert req.variant.rewrites == ["peel:3", "sink-loads"]

def test_stored_ids_without_rewrites_are_unchanged():
  """A variant without rewrites keys as it did before the fields existed (stored traces and permalinks keep their ids)."""
  import dataclasses
  import hashlib
  from explorer.store import device_key, tinygrad_version, trace_key
  v, spec = Variant(targets=("cuda",)), PRESETS["small"]
  before = {k: x for k, x in v.to_dict().items() if k not in ("notes", "device", "cuda_arch", "metal_arch", "rewrites", "rewrite_file", "tinygrad")}
  payload = {"spec": spec.to_dict(), "variant": before, "tinygrad": tinygrad_version(), "device": device_key(v)}
  assert trace_key(spec, v) == hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]
  assert trace_key(spec, v) != trace_key(spec, dataclasses.replace(v, rewrites=("sink-loads",)))

def test_spec_violations_are_marked_on_the_graph_nodes(tmp_path, wino8_runs):
  """A stage's spec violations (trace numbers of the rejected UOps) fill those nodes red in its graphs. tinygrad's own pipeline passes
  its specs, so the violation here is planted on the recorded tensor graph's SINK and on the kernel AST's: the plumbing from a
  recorded trace number to the node drawn is what is checked, with real blobs."""
  run = wino8_runs[""]
  trace = json.loads(json.dumps(run.trace))
  kernel = trace["kernels"][0]
  for check, num in ((trace["spec_checks"]["tensor_graph"], trace["tensor_graph"]["sink"]), (kernel["spec"]["ast"], kernel["ast_sink"])):
    check.update(ok=False, violation_count=1, violations=[{"index": 0, "op": "SINK", "dtype": "void", "trace_num": num, "message": "planted"}])
  Store(tmp_path / "s.sqlite3").put_trace("00000000000000cc", trace, run.rewrites, run.target_rewrites)
  with TestClient(app_over(str(tmp_path / "s.sqlite3"))) as client:
    for ref in ("tensor", "ast/0"):
      view = client.get(f"/api/traces/00000000000000cc/graphs/{ref}").json()
      (bad,) = view["violations"]
      assert next(n for n in view["nodes"] if n["id"] == bad)["op"] == "SINK" and any("spec rejects" in n for n in view["notes"])
      svg = client.get(f"/api/traces/00000000000000cc/graphs/{ref}.svg").text
      assert svg.count("spec&#45;violation") == 1 and f'id="n{bad}"' in svg  # graphviz writes - as &#45;
    assert client.get("/api/traces/00000000000000cc/graphs/codegen/0/0/before").json()["violations"] == []

def test_the_diff_answers_did_pressure_go_down(wino8_direct):
  """sink-loads vs none in one view: the matched kernel's peak live values (and registers where ptxas is here) A -> B."""
  from explorer.analysis.diff import diff_traces, summary
  d = diff_traces(wino8_direct[""], wino8_direct["sink-loads"], target="cuda")
  (g,) = d["groups"]
  a, b = g["metrics"]["a"], g["metrics"]["b"]
  assert b["max_live"] < a["max_live"] and d["variant_changes"]["rewrites"] == [[], ["sink-loads"]]
  assert f"{a['max_live']} -> {b['max_live']}" in summary(d)

def test_line_map_covers_every_body_line_of_the_c_like_targets(wino8_runs):
  """targets[T].line_map, captured from the renderer as it renders: every non-blank line of the kernel body is mapped, every index is a
  linear UOp, and the pressure peak has its source line; targets without a C-style renderer say why they have no map."""
  run = shared_run("wino8", True, **WINO8_BUILTIN)
  for k in run.trace["kernels"]:
    for target, rec in k["targets"].items():
      if target == "wgsl": continue  # not C-like
      if target == "ptx":
        assert rec["line_map"] is None and "C-style" in rec["line_map_note"]
        continue
      lines = rec["source"].split("\n")
      head = next(i for i, ln in enumerate(lines) if k["targets"][target]["name"] in ln and ln.rstrip().endswith("{"))
      end = max(i for i, ln in enumerate(lines) if ln.rstrip() == "}")  # the function's closing brace
      body = [i + 1 for i in range(head + 1, end) if lines[i].strip()]
      mapped = dict(rec["line_map"])
      assert set(body) <= set(mapped), (target, [lines[i - 1] for i in set(body) - set(mapped)][:5])
      assert all(0 <= i < rec["linear_uops"] and ix for ix in mapped.values() for i in ix)
      assert rec["pressure"]["max_live_line"] in mapped
      for r in rec["pressure"]["longest"]:  # each long live range names the line that defines it
        # what holds the peak: live at it, not a thread or block index (those are live throughout)
        assert r["uop"] <= rec["pressure"]["max_live_at"] <= r["until"] and r["op"] != "SPECIAL", (target, r)
        assert r["line"] in mapped and (r["uop"] in mapped[r["line"]] or all(r["uop"] not in ix for ix in mapped.values()))
  store_loads = [ln for ln, ix in k["targets"]["cuda"]["line_map"] if "= (*(" in k["targets"]["cuda"]["source"].split("\n")[ln - 1]]
  listing = k["targets"]["cuda"]["uops_listing"]
  assert store_loads and all(any("LOAD" in listing[i] for i in dict(k["targets"]["cuda"]["line_map"])[ln]) for ln in store_loads)

def test_the_codegen_tour_tells_the_pressure_story(wino8_direct):
  """The built-in tour for the codegen notes (seed 004): direct wino8 without and with sink-loads; its comparison step gives each
  side's peak live values (and registers where ptxas is here), and each kernel's uops step says where the peak is."""
  from explorer.present.tour import BUILTIN_TOURS, compare_tour, identical_kernels
  assert BUILTIN_TOURS["codegen"]["b"].rewrites == ("sink-loads",)
  steps = compare_tour("codegen", wino8_direct[""], wino8_direct["sink-loads"])
  compare = next(s for s in steps if s["id"] == "compare")["text"]
  (na, a), (nb, b) = ((r["name"], r["pressure"]["max_live"]) for r in (_kernel(wino8_direct[x])["targets"]["cuda"] for x in ("", "sink-loads")))
  assert f"Peak live values on cuda: A {na} {a}" in compare and f"B {nb} {b}" in compare and na != _kernel(wino8_direct[""])["name"]
  uops = next(s for s in steps if s["id"] == "a-k0-uops")["text"]
  assert "values are live at once" in uops and "source line" in uops
  # sink-loads leaves the AST as it was and changes the linear order: B's AST step is skipped, its uops and source steps are told
  ids = [s["id"] for s in steps]
  assert identical_kernels(wino8_direct[""], wino8_direct["sink-loads"]) == {0: 0}
  assert "b-k0-ast" not in ids and "b-k0-uops" in ids and "b-k0-source" in ids and "codegen made different code" in compare
