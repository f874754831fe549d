"""Reproducers: a trace as a standalone script run with plain Python (tinygrad, numpy; the explorer's package only for its own Winograd).
Run in a clean environment (no VIZ, no rewrite tracking), each script prints tinygrad's own DEBUG=2 line for every kernel: the names
must be the trace's kernel names, in the same order of first appearance."""
from __future__ import annotations
import os
import re
import subprocess
import sys
import pytest
from explorer.store import Store

ANSI = re.compile(r"\x1b\[[0-9;]*m")

def run_script(text: str, tmp_path) -> str:
  path = tmp_path / "repro.py"
  path.write_text(text)
  env = {k: v for k, v in os.environ.items() if k not in ("VIZ", "TRACK_MATCH_STATS", "DEBUG", "WINO", "NOOPT", "BEAM", "DEV")}
  run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
  assert run.returncode == 0, run.stderr[-2000:]
  return ANSI.sub("", run.stdout + run.stderr)

def kernels_named(out: str, names: list[str]) -> list[str]:
  """The trace's kernel names in the order tinygrad's DEBUG=2 lines first name them."""
  seen = {n: m.start() for n in names if (m := re.search(rf"\b{re.escape(n)}\b", out))}
  return sorted(seen, key=seen.get)

def test_a_builtin_winograd_trace_reproduces_with_tinygrad_alone(web_client, small_trace, tmp_path):
  r = web_client.get(f"/api/traces/{small_trace}/repro.py")
  assert r.status_code == 200 and f'filename="repro-{small_trace}.py"' in r.headers["content-disposition"]
  script = r.text
  assert "os.environ.setdefault('WINO', '1')" in script and "explorer" not in script.split('"""', 2)[2]  # tinygrad alone
  trace = web_client.get(f"/api/traces/{small_trace}").json()
  page = web_client.get(f"/t/{small_trace}", headers={"accept": "text/html"}).text
  assert f'href="/api/traces/{small_trace}/repro.py" id="repro"' in page  # the button on every trace page
  names = [k["name"] for k in trace["kernels"]]
  out = run_script(script, tmp_path)
  assert kernels_named(out, names) == names and "output (1, 16, 32, 32)" in out

def test_the_explorers_winograd_reproduces_through_its_package(tmp_path):
  from stored_traces import stored_pair
  db, staged, _ = stored_pair()
  trace = Store(db).get_trace(staged)
  cli = subprocess.run([sys.executable, "-m", "explorer", "repro", staged, "--db", str(db), "-o", "-"], capture_output=True, text=True,
                       timeout=120)
  assert cli.returncode == 0, cli.stderr
  assert "winograd_explorer(x, w, SPEC, tile='F(4,3)', staging='staged', consts='symbolic')" in cli.stdout
  names = [k["name"] for k in trace["kernels"]]
  assert kernels_named(run_script(cli.stdout, tmp_path), names) == names

def test_an_unknown_trace_has_no_reproducer(web_client):
  assert web_client.get("/api/traces/nope/repro.py").status_code == 404

@pytest.mark.parametrize("opt,var", [("none", "NOOPT"), ("beam:2", "BEAM")])
def test_the_opt_setting_travels_as_tinygrads_variable(opt, var):
  from explorer.present.repro import environment
  trace = {"variant": {"algo": "direct", "opt": opt}, "env": {"device": "CPU"}}
  assert environment(trace)[var] in ("1", "2") and environment(trace)["DEV"] == "CPU"
