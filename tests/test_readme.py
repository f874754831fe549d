"""The README's examples run as pasted: the capture script, in a fresh process of its own (the explorer imported first, as the
README says), prints the program's kernels with the script's lines."""
from __future__ import annotations
import os, re, subprocess, sys
from conftest import REPO

def python_blocks(text: str) -> list[str]: return re.findall(r"```python\n(.*?)```", text, re.S)

def test_the_readmes_capture_script_runs_as_pasted(tmp_path):
  (script,) = [b for b in python_blocks((REPO / "docs" / "using" / "python.md").read_text()) if "capture(name=" in b]
  path = tmp_path / "script.py"
  path.write_text(script)
  env = {**{k: v for k, v in os.environ.items() if not k.startswith("KERNEL_EXPLORER_")}, "XDG_DATA_HOME": str(tmp_path / "data")}
  r = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "conv2d bw <- script.py:6" in r.stdout and "'backward': True" in r.stdout and "script.py" in r.stdout.splitlines()[-1], r.stdout[-3000:]
