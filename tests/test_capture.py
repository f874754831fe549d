"""Any tinygrad program, traced (explorer.api.capture in the user's process; kernel-explorer trace --script in a worker): the recorded
kernels are tinygrad's own for the same program (names and host sources, against plain tinygrad in a process of its own), the trace
has the usual schema (passes with matches, other targets, the check against the user's reference) and every page serves it; what
cannot work says so at once (tinygrad imported first without tracking, a script that raises or never ends, and no worker is left)."""
from __future__ import annotations
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import time
import uuid
import pytest
from conftest import computed
from support import app_over

HERE = pathlib.Path(__file__).resolve().parent
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("VIZ", "TRACK_MATCH_STATS", "DEBUG", "NOOPT", "BEAM", "WINO")}

def run_json(*args: str) -> dict:
  r = subprocess.run([sys.executable, str(HERE / "capture_programs.py"), *args], capture_output=True, text=True, timeout=300, env=CLEAN_ENV,
                     cwd=HERE.parent)
  assert r.returncode == 0, r.stderr[-3000:]
  return json.loads(r.stdout.strip().splitlines()[-1])

@pytest.fixture(scope="module")
def db(tmp_path_factory) -> pathlib.Path: return tmp_path_factory.mktemp("capture") / "s.sqlite3"

@pytest.fixture(scope="module")
def captured(db) -> dict: return run_json("captured", str(db))

COMPUTE = {"ADD", "MUL", "EXP2", "RECIPROCAL", "SQRT", "MAX", "REDUCE:ADD", "REDUCE:MAX"}

def op_of(node: dict) -> str:
  """A tensor-graph node's op as capture_programs.kernel_ops names an AST's: a REDUCE by its reduction (its label's arg: (Ops.MAX, 1))."""
  return f"REDUCE:{node['label'].split(chr(10))[1].split(',')[0].removeprefix('(Ops.')}" if node["op"] == "REDUCE" else node["op"]

def test_a_tensor_graph_grouped_by_kernel_puts_each_uop_in_a_kernel_that_computes_it(db):
  """by=kernel: every compute UOp of a softmax's tensor graph is in the group of a kernel whose AST computes its op, as plain tinygrad
  schedules the same program in a process of its own: the max in the first kernel, the sum of exponentials in the second, the
  reciprocal and the square root in the third (the exponential, recomputed there, stays the first kernel's that computes it). The
  kernels are the top groups, in schedule order."""
  from fastapi.testclient import TestClient
  got, own = run_json("softmax", str(db)), run_json("softmax-plain")
  assert got["names"] == own["names"] == ["r_4_16", "r_4_16", "E_4_4_4"]
  with TestClient(app_over(str(db))) as client:
    view = client.get(f"/api/traces/{got['id']}/graphs/tensor", params={"whole": 1, "by": "kernel"}).json()
    lines = client.get(f"/api/traces/{got['id']}/graphs/tensor", params={"whole": 1}).json()
  assert view["by"] == "kernel" and view["groupings"] == lines["groupings"] == ["line", "kernel"] and lines["by"] == "line"
  groups = view["groups"]
  def kernel_of(node: dict) -> int:
    g = node["group"]
    while groups[g]["parent"] is not None: g = groups[g]["parent"]
    return groups[g]["kernel"]
  tops = [g for g in groups if g["parent"] is None]
  assert [(g["kernel"], g["label"]) for g in tops] == [(0, "kernel 0 r_4_16"), (1, "kernel 1 r_4_16"), (2, "kernel 2 E_4_4_4")]
  compute = [n for n in view["nodes"] if op_of(n) in COMPUTE]
  assert {op_of(n) for n in compute} >= {"REDUCE:MAX", "REDUCE:ADD", "EXP2", "RECIPROCAL", "SQRT"}
  for n in compute: assert "group" in n and op_of(n) in own["ops"][kernel_of(n)], (n["op"], n["label"], kernel_of(n))
  where = {op_of(n): kernel_of(n) for n in compute if op_of(n) in ("REDUCE:MAX", "REDUCE:ADD", "RECIPROCAL", "SQRT", "EXP2")}
  assert where == {"REDUCE:MAX": 0, "REDUCE:ADD": 1, "EXP2": 1, "RECIPROCAL": 2, "SQRT": 2}

def test_a_captured_program_runs_tinygrads_own_kernels(captured):
  own = run_json("plain")
  assert captured["names"] == own["names"] and captured["sources"] == own["sources"]
  assert captured["roles"] == ["reduce+out"] and captured["cuda"] and captured["passes"] > 100 and captured["realizes"] == 1
  assert captured["metal"] and captured["timed"]  # the docs' capture(targets=("cuda", "metal"), time=True)
  assert captured["error"]["within"] and captured["error"]["tolerance_for"] == "the user's reference"
  assert captured["value"] > 0 and captured["program"]["outputs"] == [{"shape": [1, 8, 16, 16], "dtype": "float"}]

def test_every_page_serves_a_captured_program(captured, db):
  from fastapi.testclient import TestClient
  tid = captured["id"]
  with TestClient(app_over(str(db))) as client:
    for url in (f"/t/{tid}", f"/t/{tid}/k/0", f"/t/{tid}/k/0?code=cuda", f"/t/{tid}/graph/tensor", f"/t/{tid}/bufferize", f"/t/{tid}/tour",
                f"/t/{tid}/export.html", f"/diff/{tid}/{tid}", "/traces"):
      r = client.get(url, headers={"accept": "text/html"})
      assert r.status_code == 200, (url, r.text[:300])
    assert "conv+bias+relu" in client.get(f"/t/{tid}").text
    tour = client.get(f"/api/traces/{tid}/tour").json()["steps"]
    assert "The program conv+bias+relu" in tour[0]["text"]
    assert "cannot be rebuilt" in client.get(f"/diff/{tid}/{tid}").text  # no re-measure of a captured program
    # a target the capture did not ask for arrives when its kernel is first viewed, as for a convolution (rebuilt from the stored log)
    r = computed(client, f"/api/traces/{tid}/kernels/0/targets/opencl", 120)
    assert r.status_code == 200 and r.json()["source"] and r.json()["name"] and r.json()["passes"], r.text[:300]

def test_a_diff_of_my_layer_with_and_without_contiguous(db):
  got = run_json("contiguous", str(db))
  assert got["kernels"] == [1, 2] and "matched by role" in got["diff"]
  assert got["compare"].startswith("In three numbers, A -> B: kernels 1 -> 2")  # a pair tour opens with its headline, then names the programs
  assert "A (layer): " in got["compare"] and "B (layer, contiguous): " in got["compare"]
  from fastapi.testclient import TestClient
  with TestClient(app_over(str(db))) as client:
    page = client.get(f"/diff/{got['a']}/{got['b']}", headers={"accept": "text/html"})
    assert page.status_code == 200 and "layer, contiguous" in page.text
    assert client.get(f"/api/diff/{got['a']}/{got['b']}").json()["b"]["label"].startswith("layer, contiguous")

def test_tinygrad_imported_first_fails_at_once_and_says_what_to_do():
  code = textwrap.dedent("""
    import tinygrad
    from explorer import capture
    from tinygrad import Tensor
    with capture() as t: Tensor.ones(4).contiguous().realize()
  """)
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=CLEAN_ENV)
  assert r.returncode != 0 and "import the explorer first" in r.stderr and "TRACK_MATCH_STATS=2" in r.stderr

def test_a_block_that_only_calls_backward_says_what_realizes():
  """backward() builds the gradients lazily: the block realized nothing, and the error says what would (docs/using/python.md's example steps)."""
  code = textwrap.dedent("""
    from explorer import capture
    from tinygrad import Tensor
    w = Tensor.ones(4, 4).contiguous().realize()
    with capture() as t: (Tensor.ones(2, 4) @ w).sum().backward()
  """)
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=CLEAN_ENV)
  assert r.returncode != 0 and "nothing was realized" in r.stderr and "loss.backward() only builds the gradients" in r.stderr
  assert "opt.step() realizes" in r.stderr

TWO_LAYERS = """
import numpy as np
from tinygrad import Tensor

def two_layers():
  rng = np.random.default_rng(0)
  x = Tensor(rng.standard_normal((2, 8, 16, 16)).astype(np.float32))
  w1, w2 = (Tensor(rng.standard_normal(s).astype(np.float32)) for s in ((8, 8, 3, 3), (16, 8, 3, 3)))
  return x.conv2d(w1, padding=1).relu().conv2d(w2, padding=1).relu()

if __name__ == "__main__":
  two_layers().realize()
"""

def cli(*args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "explorer", "trace", *args], capture_output=True, text=True, timeout=timeout,
                        env=env or CLEAN_ENV)

def test_a_script_traces_in_a_worker_like_tinygrad_runs_it(tmp_path):
  script = tmp_path / "layers.py"
  script.write_text(TWO_LAYERS)
  r = cli("--script", str(script), "--target", "cuda", "--no-time", "--quiet", "--json", str(tmp_path / "t.json"))
  assert r.returncode == 0, r.stderr
  trace = json.loads((tmp_path / "t.json").read_text())
  assert trace["program"]["name"] == "layers.py" and trace["program"]["source"] == TWO_LAYERS and trace["spec"] is None
  assert [k["role"] for k in trace["kernels"]] == ["reduce", "reduce+out"] and trace["scheduler"]["stage_counts"]["kept"] == 1
  code = textwrap.dedent(f"""
    import json, sys
    sys.path.insert(0, {str(tmp_path)!r})
    from layers import two_layers
    from tinygrad import Tensor
    from tinygrad.engine.realize import compile_linear
    from tinygrad.helpers import ansistrip
    from tinygrad.uop.ops import Ops
    prgs = [c.src[0] for c in compile_linear(Tensor.schedule_linear(two_layers())).src if c.src[0].op is Ops.PROGRAM]
    print(json.dumps([[ansistrip(p.arg.name), next(s.arg for s in p.src if s.op is Ops.SOURCE)] for p in prgs]))
  """)
  plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=CLEAN_ENV)
  assert json.loads(plain.stdout) == [[k["name"], k["sources"]["host"]] for k in trace["kernels"]]  # tinygrad's own programs
  fn = cli("--script", str(script), "--fn", "two_layers", "--no-time", "--quiet")  # a function that builds and does not realize
  assert fn.returncode == 1 and "realized nothing" in fn.stderr

def leftovers(mark: str) -> list[int]:
  """Processes still alive that the marked command started (they inherit its environment)."""
  found = []
  for pid in (p for p in os.listdir("/proc") if p.isdigit()):
    try:
      with open(f"/proc/{pid}/environ", "rb") as f:
        if f"KE_TEST_MARK={mark}".encode() in f.read(): found.append(int(pid))
    except OSError: continue
  return found

@pytest.mark.parametrize("body,limit,said", [("raise ValueError('the user bug')", 120, "ValueError: the user bug"),
                                             ("import time\nwhile True: time.sleep(1)", 5, "time limit of 5s")])
def test_a_script_that_raises_or_never_ends_gives_one_clear_line_and_leaves_nothing(tmp_path, body, limit, said):
  script = tmp_path / "bad.py"
  script.write_text(body + "\n")
  mark = uuid.uuid4().hex
  st = time.monotonic()
  r = cli("--script", str(script), "--quiet", "--timeout", str(limit), env={**CLEAN_ENV, "KE_TEST_MARK": mark})
  assert r.returncode == 1 and said in r.stderr and "Traceback" not in r.stderr
  assert time.monotonic() - st < limit + 60
  time.sleep(0.5)
  assert leftovers(mark) == []

MY_SCRIPT = "from explorer import capture  # first: tinygrad records its rewrites\n" + \
  TWO_LAYERS.replace('if __name__ == "__main__":\n  two_layers().realize()\n', "") + """
import json, sys

with capture(name="two layers", targets=("cuda",)) as t:
  y = two_layers()
  y.realize()
print(json.dumps({"id": t.store(sys.argv[1]), "names": [k["name"] for k in t.kernels], "roles": [k["role"] for k in t.kernels],
                  "passes": sum(p["matches"] for k in t.kernels for p in k["passes"]), "origin": t.data["program"]["origin"],
                  "printed": str(t)}))
"""

def test_two_layers_captured_from_python_reproduce_on_tinygrad_alone(tmp_path):
  """The two-layer program through `from explorer import capture` in the user's own script; its reproducer (the script, the capture
  replaced by a stand-in) runs on tinygrad alone and runs the same kernels."""
  from test_repro import kernels_named, run_script
  (script := tmp_path / "mine.py").write_text(MY_SCRIPT)
  db = tmp_path / "s.sqlite3"
  r = subprocess.run([sys.executable, str(script), str(db)], capture_output=True, text=True, timeout=300, env=CLEAN_ENV, cwd=HERE.parent)
  assert r.returncode == 0, r.stderr[-3000:]
  got = json.loads(r.stdout.strip().splitlines()[-1])
  line = MY_SCRIPT.splitlines().index('with capture(name="two layers", targets=("cuda",)) as t:') + 1
  assert got["roles"] == ["reduce", "reduce+out"] and got["passes"] > 100 and got["origin"] == {"kind": "capture", "line": line}
  printed = got["printed"].splitlines()  # print(t): the program's kernel table, a row per kernel with the lines that made it, uops, FLOPs...
  head = next(i for i, ln in enumerate(printed) if ln.split()[:4] == ["#", "realize", "kernel", "provenance"])
  assert [ln.split()[2] for ln in printed[head + 2:head + 4]] == got["names"] and "FLOPs" in printed[head]
  assert all("conv2d" in ln and "<- mine.py:" in ln for ln in printed[head + 2:head + 4]), printed[head:head + 4]
  repro = subprocess.run([sys.executable, "-m", "explorer", "repro", got["id"], "--db", str(db), "-o", "-"], capture_output=True, text=True,
                         timeout=120)
  assert repro.returncode == 0, repro.stderr
  assert "from explorer" not in repro.stdout and "print(json.dumps" not in repro.stdout  # tinygrad alone; the block is the end
  assert kernels_named(run_script(repro.stdout, tmp_path), got["names"]) == got["names"]

def test_a_script_function_traces_and_its_reproducer_calls_it(tmp_path):
  from test_repro import kernels_named, run_script
  realizing = TWO_LAYERS.replace("return x.conv2d", "y = x.conv2d").replace(".relu()\n\nif", ".relu()\n  y.realize()\n\nif")
  (script := tmp_path / "layers.py").write_text(realizing)
  r = cli("--script", str(script), "--fn", "two_layers", "--target", "cuda", "--no-time", "--quiet", "--json", str(tmp_path / "t.json"))
  assert r.returncode == 0, r.stderr
  trace = json.loads((tmp_path / "t.json").read_text())
  assert trace["program"]["name"] == "two_layers" and trace["program"]["origin"] == {"kind": "script", "fn": "two_layers"}
  assert trace["program"]["file"] == str(script) and len(trace["realizes"]) == 1  # every kernel traced back to the script's lines
  assert all(any(e["file"] == str(script) and e["fn"] == "conv2d" for e in k["provenance"]) for k in trace["kernels"])
  names = [k["name"] for k in trace["kernels"]]
  assert len(names) == 2
  repro = subprocess.run([sys.executable, "-m", "explorer", "repro", str(tmp_path / "t.json"), "-o", "-"], capture_output=True, text=True,
                         timeout=120)
  assert repro.returncode == 0 and "namespace['two_layers']()" in repro.stdout, repro.stderr
  assert kernels_named(run_script(repro.stdout, tmp_path), names) == names

def test_a_capture_records_whole_passes_whatever_tracking_level_the_environment_asked(tmp_path):
  """TRACK_MATCH_STATS=1 still swaps tinygrad's tracked matcher in, but records no pass: the capture raises it to 2 for its pipeline."""
  code = textwrap.dedent("""
    import json
    from explorer import capture
    from tinygrad import Tensor
    with capture(targets=("cuda",)) as t: (Tensor.ones(4, 4).contiguous() @ Tensor.ones(4, 4).contiguous()).realize()
    print(json.dumps({"host": sum(len(k["passes"]) for k in t.kernels), "cuda": sum(len(k["targets"]["cuda"]["passes"]) for k in t.kernels),
                      "tracking": t.data["env"]["tracking"]}))
  """)
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**CLEAN_ENV, "TRACK_MATCH_STATS": "1"})
  assert r.returncode == 0, r.stderr[-3000:]
  got = json.loads(r.stdout.strip().splitlines()[-1])
  assert got["host"] > 10 and got["cuda"] > 10 and got["tracking"] is True

def test_one_computation_captured_from_two_lines_is_two_traces_and_a_server_serves_what_is_stored_now(tmp_path):
  """Ids of captured programs cover what the trace shows, the lines that made each kernel among it: the same kernels from two lines are
  two stored traces, the same capture stored again one. And a trace stored again under its id by another process (a notebook's
  capture) is what a running server serves next, its cached responses of the old row dropped."""
  db = tmp_path / "s.sqlite3"
  got = run_json("two-lines", str(db))
  (first, second, again), (ka, kb), (la, lb) = got["ids"], got["kernels"], got["lines"]
  assert ka == kb and la != lb and first != second and again == first, got
  from fastapi.testclient import TestClient
  from explorer.store import Store
  with TestClient(app_over(str(db))) as client:
    for _ in range(2): assert client.get(f"/t/{first}").status_code == 200  # rendered, then served from the response cache
    assert client.app.state.response_cache.hits >= 1
    trace = Store(db).get_trace(first)
    Store(db).put_trace(first, {**trace, "label": "stored again elsewhere"}, Store(db).get_rewrites(first) or b"")
    assert "stored again elsewhere" in client.get(f"/t/{first}").text
    assert client.get(f"/api/traces/{first}").json()["label"] == "stored again elsewhere"
