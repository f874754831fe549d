"""What a worker costs before its own work, side by side in one run: workers started afresh (`python -c BOOT`, every import paid
again) against workers forked from this process's template (explorer.tracing.workers.template), and a trace's renders spawned against forked
from their trace worker. CPU seconds of every process, from getrusage of the reaped children (templates are reaped, and counted,
before each side's figure is read).

  python benchmarks/worker_start.py [--calls 6] [--traces 3]"""
from __future__ import annotations
import argparse
import resource
import time
from collections.abc import Callable

def cpu_s() -> float:
  kids = resource.getrusage(resource.RUSAGE_CHILDREN)
  return kids.ru_utime + kids.ru_stime

def measured(work: Callable[[], object], n: int, forked: bool) -> tuple[float, float]:
  """(CPU seconds, wall seconds) of n calls of work, with workers forked from a template or started afresh."""
  from explorer.tracing.pipeline import renders
  from explorer.tracing.workers import template
  supported, imported_as = template.supported, renders._imported_as_a_render_would
  if not forked: template.supported, renders._imported_as_a_render_would = (lambda: False), (lambda: False)
  try:
    st, wall = cpu_s(), time.perf_counter()
    for _ in range(n): work()
    template.close_all()  # reaped: the template's own CPU and its children's are in cpu_s() now
    return cpu_s() - st, time.perf_counter() - wall
  finally: template.supported, renders._imported_as_a_render_would = supported, imported_as

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--calls", type=int, default=6, help="device probes (a worker that opens the CPU device and describes it)")
  ap.add_argument("--traces", type=int, default=3, help="traces of the small preset with two other targets")
  args = ap.parse_args()
  from explorer.spec import PRESETS, Variant
  from explorer.tracing.pipeline.run import run_trace
  from explorer.tracing.workers.process import call_in_worker
  def probe() -> object: return call_in_worker("explorer.tracing.pipeline.probe:describe", {"device": "CPU"}, env={"VIZ": "0"})
  cases = {"a CPU device probe": (probe, args.calls),
           "a small trace, cuda and metal rendered": (lambda: run_trace(PRESETS["small"], Variant(targets=("cuda", "metal"), time=False)),
                                                      args.traces)}
  for name, (work, n) in cases.items():
    fresh, forked = measured(work, n, False), measured(work, n, True)
    print(f"{name}, {n} calls: afresh {fresh[0]:.2f} CPU s ({fresh[1]:.1f} s wall), forked {forked[0]:.2f} CPU s ({forked[1]:.1f} s wall); "
          f"forked/afresh CPU {forked[0] / fresh[0]:.2f}x, {(fresh[0] - forked[0]) / n:.2f} CPU s saved a call")

if __name__ == "__main__": main()
