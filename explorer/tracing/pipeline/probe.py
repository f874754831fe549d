"""Device facts and a measured roofline probe, run on the device through tinygrad. Call these in a worker with VIZ=0
(explorer.tracing.workers.process.call_in_worker): they import tinygrad through explorer.tracing.tg, and opening a GPU creates a context on it."""
from __future__ import annotations
import time
from collections.abc import Callable
from typing import Any
from explorer.tracing import tg  # (its package sets tinygrad's environment before it imports tinygrad)

def _safe(fn: Callable[[], Any]) -> Any:
  try: return fn()
  except Exception as e: return f"unavailable: {type(e).__name__}: {e}"

def describe(progress: Any = None, device: str | None = None) -> dict[str, Any]:
  """The device a trace would use (device or the best one present), with its hardware name."""
  import socket
  d = device or tg.default_device()
  return {"device": d, "name": _safe(lambda: tg.device_name(d)), "compiler": _safe(lambda: tg.compiler_name(d)),
          "fallback": _safe(lambda: tg.fallback_reason(d)), "host": socket.gethostname(), "tinygrad": tg.TINYGRAD_VERSION}

def default_device(progress: Any = None) -> str:
  """The device a trace that names none opens: the first that opens of tinygrad's backends, in the explorer's order."""
  return tg.default_device()

def list_devices(progress: Any = None) -> dict[str, Any]:
  """Every device this host can open, best first, and the one traces use by default."""
  devs = tg.available_devices()
  return {"default": tg.default_device(), "devices": [describe(device=d) for d in devs],
          "unopened": [{"device": d, "reason": why} for d, why in tg.unopened_devices()]}

def _best_time(out: Any, budget_s: float, min_runs: int = 3, max_runs: int = 50) -> tuple[float, int, str]:
  """The fastest of several runs of out's single kernel by its device's clock (tg.clock_for), after one warmup run; and the clock's
  method."""
  device = tg.tensor_device(out)
  kernels = tg.runnables(tg.compile_schedule(tg.schedule(out)))
  assert len(kernels) == 1, f"the probe expected one kernel, got {len(kernels)}"
  clock = tg.clock_for(device)
  try:
    clock.kernel(kernels[0])
    ts: list[float] = []
    while len(ts) < min_runs or (len(ts) < max_runs and sum(ts) < budget_s): ts.append(clock.kernel(kernels[0]))
  finally: clock.close()
  return min(ts), len(ts), clock.method

def _filled(n: int, device: str) -> Any:
  x = tg.Tensor.full((n,), 1.0, device=device).contiguous()
  tg.realize_inputs(x)
  return x

def bandwidth(device: str, n: int, budget_s: float) -> dict[str, Any]:
  """out = x + 1 over n float32s: reads 4n bytes, writes 4n bytes, one FLOP per element."""
  t, runs, method = _best_time(_filled(n, device) + 1.0, budget_s)
  return {"elements": n, "bytes": 8 * n, "time_s": t, "runs": runs, "method": method, "bytes_per_s": 8 * n / t}

def fma(device: str, n: int, chains: int, length: int, budget_s: float) -> dict[str, Any]:
  """Independent multiply-add chains per element (y = y * a + b, length times), summed: enough independent work to hide the
  FMA latency, and 8 bytes moved per element against thousands of FLOPs, so compute bound on any device."""
  x = _filled(n, device)
  ys = [x * (1.0 + j * 1e-3) for j in range(chains)]
  for _ in range(length): ys = [y * 0.999 + 0.001 for y in ys]
  out = ys[0]
  for y in ys[1:]: out = out + y
  t, runs, method = _best_time(out, budget_s)
  flops = n * (chains + 2 * chains * length + chains - 1)
  return {"elements": n, "chains": chains, "length": length, "flops": flops, "time_s": t, "runs": runs, "method": method, "flops_per_s": flops / t}

def measure(progress: Any = None, device: str | None = None, budget_s: float = 0.5) -> dict[str, Any]:
  """Measured peaks of the device: float32 FLOP/s (fma chain) and memory bandwidth (a large copy-add), with the runs behind them.
  progress hears each step ("probe", "running", what it measures now)."""
  def say(detail: str) -> None:
    if progress is not None: progress("probe", "running", detail)
  say("opening the device")
  info = describe(device=device)
  d = info["device"]
  cpu = d.split(":")[0] == "CPU"
  st = time.perf_counter()
  # arrays well beyond the last-level cache (H100: 50 MB of L2)
  n_bw, n_fp = 1 << (24 if cpu else 26), 1 << (18 if cpu else 26)
  say(f"memory bandwidth on {d}: a copy-add over {8 * n_bw >> 20} MiB")
  bw = bandwidth(d, n_bw, budget_s)
  say(f"FP32 FLOP/s on {d}: multiply-add chains over {n_fp} elements")
  fp = fma(d, n_fp, 16, 16, budget_s)
  return {**info, "fp32": fp["flops_per_s"], "bw": bw["bytes_per_s"], "probe": {"bandwidth": bw, "fma": fp, "seconds": time.perf_counter() - st}}
