"""The cost of each extra target: a cold trace (no timing) with the host's target alone against the same trace with one more target
(its codegen with tracking, in its own process), interleaved in one run, medians. Compile facts are computed when first viewed; with
--facts every trace also computes them at once (every record's, the host's included: `kernel-explorer trace --facts`).

  python benchmarks/targets.py [--preset wino8] [--algo winograd] [--repeats 3] [--facts]

Everything shares this machine's cores: the extra target's process overlaps host codegen and the run, so on 2 cores the ratio is
what a user waits, not the extra CPU time."""
from __future__ import annotations
import argparse
import dataclasses
import statistics
import sys
import time

def main() -> int:
  from explorer.spec import PRESETS, Variant
  from explorer.targets import TARGETS
  from explorer.tracing.enrichments.enrich import add_facts
  from explorer.tracing.pipeline.run import run_trace
  from explorer.tracing.tg import default_device, host_renderer, target_name  # only to name the host's target (this process never traces)
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--preset", choices=sorted(PRESETS), default="wino8")
  ap.add_argument("--algo", choices=("direct", "winograd"), default="winograd")
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--facts", action="store_true", help="every trace computes every record's compile facts too")
  a = ap.parse_args()
  host = target_name(host_renderer(default_device()))
  base = Variant(algo=a.algo, targets=(host,), time=False)
  variants = {"host only": base} | {f"+ {t}": dataclasses.replace(base, targets=(host, t)) for t in TARGETS if t != host}
  times: dict[str, list[float]] = {name: [] for name in variants}
  for r in range(a.repeats):
    for name, v in variants.items():  # interleaved: drift and noise hit every variant alike
      st = time.perf_counter()
      trace = run_trace(PRESETS[a.preset], v).trace
      if a.facts: trace = add_facts(trace)
      times[name].append(time.perf_counter() - st)
      assert trace["status"] == "ok", trace["failures"]
    print(f"  repeat {r + 1}/{a.repeats} done", file=sys.stderr, flush=True)
  ref = statistics.median(times["host only"])
  print(f"{a.preset} {a.algo}, host target {host}, cold traces without timing{', with compile facts' if a.facts else ''}, median of {a.repeats}:")
  print(f"{'trace':<12} {'wall s':>8} {'x host only':>12}")
  for name, ts in times.items(): print(f"{name:<12} {statistics.median(ts):>8.2f} {statistics.median(ts) / ref:>12.2f}")
  return 0

if __name__ == "__main__": sys.exit(main())
