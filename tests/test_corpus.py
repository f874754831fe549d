"""Programs as people write them (tests/programs: a CNN training loop, the same under TinyJit, an MNIST-style convnet with Adam, a
transformer block forward and backward, a KV-cache decode loop with a symbolic position under TinyJit, a ResNet basic block, an
LSTMCell recurrence, random initialisers), each captured whole in a process of its own: its outputs bit for bit plain tinygrad's
(golden data, tests/golden/corpus.py, one program run plain again each day), every kernel tinygrad launched (its own profiler's
record) in the trace, every kernel with a line of the program, loops and TinyJit runs recorded as such."""
from __future__ import annotations
import datetime, importlib.metadata, json, os, pathlib, subprocess, sys
import pytest
from corpus import PROGRAMS
from golden.corpus import GOLDEN, programs_hash

TESTS = pathlib.Path(__file__).resolve().parent
GOLDEN_DATA = json.loads(GOLDEN.read_text())
EXPECTED = {"cnn_loop": {"repeats": 2}, "cnn_jit": {"jit_runs": 3}, "kv_decode": {"jit_runs": 4}}  # loops and JITs, as written

# what another test in this worker may have set (a device, a clock, opts): each program runs as a user would run it, as the golden ran
TINYGRAD_SETTINGS = ("DEV", "NOOPT", "BEAM", "DEBUG", "JIT", "VIZ", "PROFILE", "TRACK_MATCH_STATS", "PARALLEL", "CCACHE")

def run(*args: str) -> dict:
  env = {k: v for k, v in os.environ.items() if k not in TINYGRAD_SETTINGS}
  r = subprocess.run([sys.executable, str(TESTS / "corpus.py"), *args], capture_output=True, text=True, timeout=1800, env=env)
  assert r.returncode == 0, r.stderr[-3000:]
  return json.loads(r.stdout.splitlines()[-1])

def test_the_golden_outputs_are_plain_tinygrads_of_these_programs():
  assert GOLDEN_DATA["tinygrad"] == importlib.metadata.version("tinygrad"), "another tinygrad: regenerate with `make golden`"
  assert GOLDEN_DATA["programs"] == programs_hash(), "tests/programs changed: regenerate with `make golden`"
  assert set(GOLDEN_DATA["outputs"]) == set(PROGRAMS)

@pytest.mark.parametrize("name", PROGRAMS)
def test_a_program_is_captured_whole(name, tmp_path):
  got = run("captured", str(tmp_path / "t.sqlite3"), name)[name]
  assert got["status"] == "ok" and not got["failures"], got["failures"]
  assert got["outputs"] == GOLDEN_DATA["outputs"][name]  # bit for bit: the same kernels ran
  kernels = set(got["kernels"])
  assert [n for n in got["launched"] if n not in kernels and not n.startswith("copy")] == []  # every kernel tinygrad launched
  files = {f"{p}.py" for p in PROGRAMS}
  assert all(sites and all(f in files for f, _, _ in sites) for sites in got["sites"]), [(k, s) for k, s in zip(got["kernels"], got["sites"])]
  want = EXPECTED.get(name, {})
  assert got["repeats"] == want.get("repeats", got["repeats"])
  if "jit_runs" in want:
    (jit,) = got["jits"]
    assert jit["runs"] == want["jit_runs"] and jit["realizes"] and jit["kernels"] == jit["traced"], jit
  else: assert got["jits"] == []

def test_one_program_a_day_against_plain_tinygrad_now():
  name = PROGRAMS[datetime.date.today().toordinal() % len(PROGRAMS)]
  assert run("plain", name)[name]["outputs"] == GOLDEN_DATA["outputs"][name], f"{name}: plain tinygrad now differs from the golden data"
