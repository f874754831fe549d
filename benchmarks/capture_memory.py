"""capture()'s memory against tinygrad's own capture of the same programs, side by side in one run: tinygrad's own examples as the
corpus writes them (tests/programs: beautiful_mnist with @function, tinygrad's LLM through Transformer.generate, the ONNX runner under
TinyJit) and the corpus's MNIST-style convnet, each run once inside the explorer's `capture()` block and once plainly under VIZ=-1
(tinygrad's rewrite tracking and profile on, no viewer: what a user runs instead), in fresh processes, the sides interleaved round by
round; the peak of the process tree's memory (PSS: a page shared by several processes counted once; sampled from /proc), medians.
Target (issue 71): capture() at most 1.15x VIZ=-1's peak on each program.

  python benchmarks/capture_memory.py [--programs beautiful_mnist,llm_generate,onnx_runner,mnist] [--rounds 3]"""
from __future__ import annotations
import argparse
import os
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from trace_overhead import CLEAN, measure  # noqa: E402 - a sibling benchmark's sampler of a process tree

REPO = pathlib.Path(__file__).resolve().parent.parent
TARGET = 1.15
PROGRAMS = ("beautiful_mnist", "llm_generate", "onnx_runner", "mnist")

CAPTURED = """import sys; sys.path.insert(0, {tests!r})
from explorer import capture
import programs.{name} as program
with capture(name={name!r}) as t: program.run()
"""
PLAIN = """import sys; sys.path.insert(0, {tests!r})
import programs.{name} as program
program.run()
"""

def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--programs", default=",".join(PROGRAMS))
  ap.add_argument("--rounds", type=int, default=3)
  a = ap.parse_args()
  env = {k: v for k, v in os.environ.items() if k not in CLEAN}
  viz = {**env, "VIZ": "-1", "DEBUG": "0"}
  names, met = [n.strip() for n in a.programs.split(",") if n.strip()], True
  print(f"capture() against VIZ=-1, peak PSS of the process tree, medians of {a.rounds} interleaved rounds (target: <= {TARGET}x)")
  print("| program | VIZ=-1 MiB | capture() MiB | ratio | VIZ=-1 s | capture() s | |")
  print("|---|---|---|---|---|---|---|")
  for name in names:
    sides: dict[str, list] = {"plain": [], "captured": []}
    for i in range(a.rounds):
      order = [("plain", PLAIN, viz), ("captured", CAPTURED, env)]
      for side, code, e in (order if i % 2 == 0 else order[::-1]):
        sides[side].append(measure([sys.executable, "-c", code.format(tests=str(REPO / "tests"), name=name)], e))
    p, c = (statistics.median(r.peak_pss_mib for r in sides[s]) for s in ("plain", "captured"))
    pw, cw = (statistics.median(r.wall_s for r in sides[s]) for s in ("plain", "captured"))
    ok = c / p <= TARGET
    met &= ok
    print(f"| {name} | {p:.0f} | {c:.0f} | {c / p:.2f}x | {pw:.1f} | {cw:.1f} | {'met' if ok else 'NOT MET'} |")
  return 0 if met else 1

if __name__ == "__main__": sys.exit(main())
