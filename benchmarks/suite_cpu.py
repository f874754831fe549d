"""The test suite's CPU seconds (target: at most 3,000 for the whole suite on a 2-core machine): pytest run as `make test` runs it
(xdist, work stealing), the CPU of it and of every process it started (getrusage of the reaped children), and where they went, per
module and per test, from what tests/conftest.py records per test (its process and its reaped children: a module's server and browser
count at its last teardown).

  python benchmarks/suite_cpu.py [PYTEST_ARGS...]      # default: the whole suite; e.g. --check for make check's loop
  python benchmarks/suite_cpu.py --read                # the last run's records only (test-artifacts/cpu/), no run"""
from __future__ import annotations
import ast
import collections
import functools
import json
import pathlib
import resource
import shutil
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
CPU_DIR = REPO / "test-artifacts" / "cpu"
TARGET_S = 3000.0

def run(args: list[str]) -> tuple[float, float, int]:
  """pytest with args; returns (CPU seconds of it and its children, wall seconds, exit code)."""
  shutil.rmtree(CPU_DIR, ignore_errors=True)
  st = time.perf_counter()
  rc = subprocess.call([sys.executable, "-m", "pytest", "-q", "-n", "auto", "--dist", "worksteal", "-p", "no:cacheprovider", *args], cwd=REPO)
  kids = resource.getrusage(resource.RUSAGE_CHILDREN)
  return kids.ru_utime + kids.ru_stime, time.perf_counter() - st, rc

def per_test() -> dict[str, float]:
  out: dict[str, float] = {}
  for f in sorted(CPU_DIR.glob("*.json")): out.update(json.loads(f.read_text()))
  return out

@functools.cache
def _docstrings(path: str) -> dict[str, str]:
  """Every test function's and class's docstring in a test file, by name."""
  try: tree = ast.parse((REPO / path).read_text())
  except (OSError, SyntaxError): return {}
  return {n.name: ast.get_docstring(n) or "" for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}

def says_why(node: str) -> bool:
  """Whether a test over 60 s has a docstring (its own, or its class's): where it says why it costs what it does."""
  path, *names = node.split("::")
  docs = _docstrings(path)
  return any(docs.get(n.split("[", 1)[0]) for n in names) or names[-1:] == ["(module teardown)"]

def report(tests: dict[str, float], top: int = 25) -> None:
  modules: dict[str, float] = collections.Counter()
  for node, sec in tests.items(): modules[node.split("::", 1)[0]] += sec
  print(f"{len(tests)} tests, {sum(tests.values()):.0f} CPU s recorded per test")
  print(f"\nmodules, most CPU first (top {top}):")
  for mod, sec in sorted(modules.items(), key=lambda x: -x[1])[:top]: print(f"  {sec:8.1f} s  {mod}")
  print(f"\ntests, most CPU first (top {top}; over 60 s each should say why in its docstring):")
  for node, sec in sorted(tests.items(), key=lambda x: -x[1])[:top]:
    print(f"  {sec:8.1f} s  {node}{'' if sec <= 60 or says_why(node) else '   <- over 60 s without a docstring'}")

def main() -> int:
  if sys.argv[1:] == ["--read"]:
    report(per_test())
    return 0
  cpu, wall, rc = run(sys.argv[1:])
  report(per_test())
  print(f"\nthe run: {cpu:.0f} CPU s (target {TARGET_S:.0f}: {cpu / TARGET_S:.2f}x), {wall:.0f} s wall, pytest exit {rc}")
  return rc

if __name__ == "__main__": sys.exit(main())
