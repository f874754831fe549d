"""The roofline's peak probe on this host's CPU (what the first roofline view of a trace runs when no peaks are cached): its own
seconds (compiling and timing the bandwidth and FMA kernels in a worker) and the wall time of the whole measurement, over fresh
caches, against its target (the probe under 10 s, so that a first view does not wait long).

  python benchmarks/roofline_probe.py [--rounds 3]"""
from __future__ import annotations
import argparse
import os
import statistics
import tempfile
import time

TARGET_S = 10.0

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--rounds", type=int, default=3)
  rounds = ap.parse_args().rounds
  from explorer.analysis import roofline as R
  probe, wall = [], []
  for _ in range(rounds):
    with tempfile.TemporaryDirectory() as cache:
      os.environ["XDG_CACHE_HOME"] = cache  # no cached peaks: every round measures
      st = time.perf_counter()
      got = R.measured_peaks(R.describe("CPU"))
      wall.append(time.perf_counter() - st)
      probe.append(got["probe"]["seconds"])
  print(f"probe seconds: median {statistics.median(probe):.2f} (rounds {', '.join(f'{x:.2f}' for x in probe)}); target under {TARGET_S:.0f} s: "
        f"{'met' if statistics.median(probe) < TARGET_S else 'NOT met'}")
  print(f"the whole measurement (a worker started, the probe, the cache written): median {statistics.median(wall):.2f} s")

if __name__ == "__main__": main()
