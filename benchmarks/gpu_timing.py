"""The explorer's kernel times against the GPU's own clock, measured apart: for each case, every kernel's time as a trace records it
(its clock, explorer.clocks) beside CUPTI's durations of the same kernels taken in a separate process that runs tinygrad alone (the
explorer's tensor program, scheduled, compiled and run by plain tinygrad, the L2 flushed before each kernel as the explorer flushes
it), and the schedule's span (first start to last end, replayed back to back). Target: each kernel within 10% (or 0.5 us) of CUPTI.

  python benchmarks/gpu_timing.py [--cases medium-wino,large-wino,medium-direct,k5-direct] [--repeats 20]
  KERNEL_EXPLORER_CLOCK=events python benchmarks/gpu_timing.py   # tinygrad's launch-inclusive timer, for comparison

Needs an NVIDIA GPU that tinygrad's CUDA device opens and NVIDIA's cupti-python (the [gpu] extra) for the reference; on a machine
without one it says so and exits 0."""
from __future__ import annotations
import argparse
import json
import os
import statistics
import subprocess
import sys

CASES = {"medium-wino": ("medium", "winograd"), "large-wino": ("large", "winograd"), "medium-direct": ("medium", "direct"),
         "k5-direct": ("k5", "direct")}
WITHIN, FLOOR_S = 0.10, 0.5e-6

def cuda_opens() -> str | None:
  """Why this machine cannot run the benchmark (None: it can), asked of a subprocess (opening CUDA imports tinygrad)."""
  code = "from explorer.tracing import tg; import sys; sys.exit(0 if 'CUDA' in tg.available_devices() else 3)"
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**os.environ, "VIZ": "0"})
  return None if r.returncode == 0 else "no CUDA device that tinygrad opens on this machine"

def plain_cupti(preset: str, algo: str, repeats: int) -> dict[str, list[float]]:
  """In this process, tinygrad alone: the case's kernels scheduled and compiled as realize does, then each launched `repeats` times
  after a memset of twice the L2, CUPTI's CONCURRENT_KERNEL records read back: seconds per kernel name."""
  os.environ["VIZ"] = "0"
  import ctypes
  import numpy as np
  from cupti import cupti
  from tinygrad import Device, Tensor
  from tinygrad.engine.realize import ExecContext, compile_linear, pm_exec
  from tinygrad.runtime.autogen import cuda
  from tinygrad.uop.ops import Ops
  from explorer.spec import PRESETS, Variant
  from explorer.tracing.algorithms import build_conv
  spec, variant = PRESETS[preset], Variant(algo=algo).resolve(PRESETS[preset])
  rng = np.random.default_rng(0)
  x = Tensor(rng.standard_normal(spec.input_shape).astype("float32"), device="CUDA")
  w = Tensor(rng.standard_normal(spec.weight_shape).astype("float32"), device="CUDA")
  Tensor.realize(x, w)
  compiled = compile_linear(Tensor.schedule_linear(build_conv(x, w, spec, variant)))
  calls = [c for c in compiled.src if c.src[0].op is Ops.PROGRAM]
  dev = Device["CUDA"]
  l2 = ctypes.c_int32()
  cuda.cuDeviceGetAttribute(ctypes.byref(l2), cuda.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev.cu_device)
  scratch, nbytes = cuda.CUdeviceptr(), 2 * l2.value
  cuda.cuMemAlloc_v2(ctypes.byref(scratch), nbytes)
  records: list[tuple[str, int, int]] = []
  def completed(activities) -> None: records.extend((a.name, a.start, a.end) for a in activities if a.kind == cupti.ActivityKind.CONCURRENT_KERNEL)
  cupti.activity_register_callbacks(lambda: (8 << 20, 0), completed)
  ctx = ExecContext(update_stats=False)
  for c in calls: pm_exec.rewrite(c, ctx)  # warm-up: programs loaded
  dev.synchronize()
  cupti.activity_enable(cupti.ActivityKind.CONCURRENT_KERNEL)
  for _ in range(repeats):
    for c in calls:
      cuda.cuMemsetD8Async(scratch, 0, nbytes, None)
      pm_exec.rewrite(c, ctx)
  dev.synchronize()
  cupti.activity_flush_all(1)
  cupti.activity_disable(cupti.ActivityKind.CONCURRENT_KERNEL)
  out: dict[str, list[float]] = {}
  for name, start, end in records: out.setdefault(name, []).append((end - start) * 1e-9)
  return out

def explorer_times(preset: str, algo: str, repeats: int) -> dict:
  from explorer.spec import PRESETS, Variant
  from explorer.tracing.pipeline.run import run_trace
  trace = run_trace(PRESETS[preset], Variant(algo=algo, targets=("cuda",), device="CUDA", repeats=repeats)).trace
  assert trace["status"] == "ok", trace["failures"]
  return trace

def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--cases", default=",".join(CASES))
  ap.add_argument("--repeats", type=int, default=20)
  ap.add_argument("--cupti-child", nargs=2, metavar=("PRESET", "ALGO"), help=argparse.SUPPRESS)
  a = ap.parse_args()
  if a.cupti_child:
    print(json.dumps(plain_cupti(*a.cupti_child, a.repeats)))
    return 0
  if (why := cuda_opens()) is not None:
    print(f"gpu_timing: {why}: nothing measured (run it on a GPU host: ../shared/device/README.md)")
    return 0
  worst = 0.0
  for case in a.cases.split(","):
    preset, algo = CASES[case]
    trace = explorer_times(preset, algo, a.repeats)
    child = subprocess.run([sys.executable, __file__, "--cupti-child", preset, algo, "--repeats", str(a.repeats)], capture_output=True,
                           text=True, timeout=900, env={**os.environ, "VIZ": "0"})
    if child.returncode != 0:
      print(f"{case}: CUPTI's reference failed: {child.stderr.strip().splitlines()[-1] if child.stderr.strip() else child.returncode}")
      continue
    ref = json.loads(child.stdout.strip().splitlines()[-1])
    tm = trace["timing"]
    print(f"\n{case} ({preset}, {algo}) on {trace['env'].get('device_name') or 'CUDA'}: the explorer's clock {tm['method']}"
          + (f" ({tm['notice']})" if tm.get("notice") else "") + f", {a.repeats} repeats, L2 flushed")
    print(f"{'kernel':<28} {'explorer us':>12} {'CUPTI us':>10} {'ratio':>7} {'within':>7}")
    for k in trace["kernels"]:
      mine, theirs = k["time_s"]["median"], statistics.median(ref.get(k["name"], [float("nan")]))
      ok = abs(mine - theirs) <= max(WITHIN * theirs, FLOOR_S)
      worst = max(worst, abs(mine / theirs - 1) if theirs == theirs else float("inf"))
      print(f"{k['name']:<28} {mine * 1e6:>12.2f} {theirs * 1e6:>10.2f} {mine / theirs:>7.2f} {'yes' if ok else 'NO':>7}")
    span, total = tm["span_s"]["median"], tm["total_s"]["median"]
    print(f"schedule: kernels alone summed {total * 1e6:.1f} us, span ({tm.get('replay')}) {span * 1e6:.1f} us, "
          f"between kernels {(span - total) * 1e6:.1f} us; CUPTI's kernels summed {sum(statistics.median(v) for v in ref.values()) * 1e6:.1f} us")
  print(f"\nworst kernel against CUPTI: {worst:.1%} off (target: within {WITHIN:.0%} or {FLOOR_S * 1e6:.1f} us)")
  return 0

if __name__ == "__main__": sys.exit(main())
