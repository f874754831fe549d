"""A training loop captured whole: the small CNN's step (tests/capture_programs.py: conv, batchnorm, max-pool, linear, Adam) run N
times inside capture() against the same loop in plain tinygrad, each in a fresh process, interleaved over rounds; the capture's wall
time over plain tinygrad's (target: within 1.5x at 100 steps) and its trace's size against the trace of two steps (target: about the
size of a few steps, not N).

  python benchmarks/loop_capture.py [--steps 100] [--rounds 2]"""
from __future__ import annotations
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
TARGET_RATIO = 1.5

LOOP = """
import json, sys, time
sys.path.insert(0, {tests!r})
captured = {captured!r}
if captured: from explorer import capture
from capture_programs import training_setup, training_step
setup = training_setup("cnn")
st = time.perf_counter()
if captured:
  with capture(name="loop") as t:
    for _ in range({steps}): training_step(*setup).realize()
  size = len(json.dumps(t.data)) + len(t.rewrites)
else:
  for _ in range({steps}): training_step(*setup).realize()
  size = 0
print(json.dumps({{"seconds": time.perf_counter() - st, "bytes": size}}))
"""

def run(steps: int, captured: bool) -> dict:
  code = LOOP.format(tests=str(REPO / "tests"), captured=captured, steps=steps)
  with tempfile.TemporaryDirectory() as tmp:
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True, timeout=3600)
  if r.returncode != 0: raise RuntimeError(r.stderr[-2000:])
  return json.loads(r.stdout.strip().splitlines()[-1])

def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--steps", type=int, default=100)
  ap.add_argument("--rounds", type=int, default=2)
  a = ap.parse_args()
  plain, captured = [], []
  for i in range(a.rounds):  # interleaved, every other round in reverse: drift hits both alike
    order = [(plain, False), (captured, True)] if i % 2 == 0 else [(captured, True), (plain, False)]
    for into, cap in order: into.append(run(a.steps, cap))
  two = run(2, True)["bytes"]
  p, c = statistics.median(x["seconds"] for x in plain), statistics.median(x["seconds"] for x in captured)
  size = statistics.median(x["bytes"] for x in captured)
  met = c / p <= TARGET_RATIO
  print(f"the small CNN's training step x{a.steps}, medians of {a.rounds} interleaved rounds, fresh processes:")
  print(f"  plain tinygrad {p:.1f} s, captured {c:.1f} s: {c / p:.2f}x (target: within {TARGET_RATIO}x)   {'met' if met else 'NOT MET'}")
  print(f"  the trace with its rewrite log: {size / 2**20:.1f} MiB, {size / two:.2f}x the trace of two steps ({two / 2**20:.1f} MiB)")
  return 0 if met else 1

if __name__ == "__main__": sys.exit(main())
