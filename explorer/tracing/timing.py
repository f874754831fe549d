"""Interleaved timing of several variants in one process (run it in a fresh worker with tracking off: VIZ=0)."""
from __future__ import annotations
import time
from typing import Any
import numpy as np
from explorer.tracing import tg
from explorer import stats
from explorer.spec import ConvSpec, Variant

def _prepare(spec: ConvSpec, variant: Variant, x_np: np.ndarray, w_np: np.ndarray) -> tuple[list[tuple[int, Any]], list[str]]:
  """The variant's kernels compiled: a timer per kernel, and their sources (what compile timing compiles again)."""
  Tensor = tg.Tensor
  from explorer.tracing.algorithms import build_conv
  device = variant.device or tg.default_device()
  with tg.opt_context(variant.opt):
    x, w = Tensor(x_np, device=device), Tensor(w_np, device=device)
    tg.realize_inputs(x, w)
    compiled = tg.compile_schedule(tg.schedule(build_conv(x, w, spec, variant)))
    return tg.call_timers(compiled), tg.compiled_sources(compiled)

def time_compiles(devices: list[str], sources: list[list[str]], repeats: int) -> list[list[float]]:
  """Each variant's kernel sources compiled afresh by its device's compiler, `repeats` times, interleaved and counterbalanced as the
  run times are: per variant, the seconds of each repeat (all its kernels)."""
  out: list[list[float]] = [[] for _ in sources]
  for r in range(repeats):
    for i in _order(len(sources), r): out[i].append(tg.compile_seconds(devices[i], sources[i]))
  return out

def _order(n: int, repeat: int) -> list[int]:
  """Counterbalanced: on a CPU a microsecond kernel that runs second in a repeat is steadily 15-30% faster or slower than the same
  kernel run first (caches, frequency), which a fixed order would report as a difference between identical variants."""
  return list(range(n)) if repeat % 2 == 0 else list(range(n))[::-1]

CHECK_EVERY = 10  # repeats between two looks at the intervals when sampling adaptively

def _stop(totals: list[list[float]], done: int, repeats: int, width: float | None, budget_s: float | None, max_repeats: int,
          elapsed: float) -> str | None:
  """Why to stop sampling after `done` timed repeats (None: go on)."""
  if done < repeats: return None
  if width is None: return "repeats"
  if done % CHECK_EVERY == 0 and converged(totals, width): return "converged"
  if done >= max(repeats, max_repeats): return "max repeats"
  if budget_s is not None and elapsed > budget_s: return "budget"
  return None

def converged(totals: list[list[float]], width: float) -> bool:
  """Every variant's paired B/A median ratio against the first has a 95% interval narrower than width, relative to the ratio (0.02:
  1.00-1.02 around 1, 9.9-10.1 around 10: a tenfold slowdown needs no finer absolute resolution than a 1% effect)."""
  return all((c := stats.median_ratio(totals[0], t))["ci_high"] - c["ci_low"] <= width * c["ratio"] for t in totals[1:])

def time_interleaved(progress, spec: dict, variants: list[dict], warmup: int, repeats: int, target_width: float | None = None,
                     budget_s: float | None = None, max_repeats: int = 1000, compile_repeats: int = 0) -> list[dict]:
  """A, B, C, C, B, A...: each repeat runs every variant's kernels once, so drift on a shared machine hits all variants alike, and
  every other repeat in reverse, so running first (or right after another variant) favours none of them.
  Adaptive (target_width): after `repeats`, keep sampling until each ratio's 95% interval is narrower than target_width, the time
  budget is spent or max_repeats are done; each result says how it ended (`sampling`). compile_repeats: then compile each variant's
  kernel sources that many times, interleaved the same way (`compile_samples`)."""
  from explorer.tracing.trace import stats as trace_stats
  s = ConvSpec.from_dict(spec)
  rng = np.random.default_rng(0)
  x_np, w_np = rng.standard_normal(s.input_shape).astype(s.dtype), rng.standard_normal(s.weight_shape).astype(s.dtype)
  vs = [Variant.from_dict(v).resolve(s) for v in variants]
  devices = [v.device or tg.default_device() for v in vs]
  timers, sources = [], []
  for i, v in enumerate(vs):
    progress("compile", "start", f"compiling variant {i + 1} of {len(vs)}")
    with tg.disable_gc(): timer, src = _prepare(s, v, x_np, w_np)  # schedule and codegen as Tensor.realize runs them: collector off
    timers.append(timer)
    sources.append(src)
  totals: list[list[float]] = [[] for _ in vs]
  progress("timing", "start", ",".join(sorted(set(devices))))  # waits for the devices' locks
  every = max(1, (warmup + repeats) // 10)  # about ten progress reports, outside the timed kernels
  start, r = time.perf_counter(), 0
  while (ended := _stop(totals, r - warmup, repeats, target_width, budget_s, max_repeats, time.perf_counter() - start)) is None:
    if r % every == 0:
      progress("timing", "running", f"{'warmup' if r < warmup else 'repeat'} {r + 1}" + ("" if target_width else f" of {warmup + repeats}"))
    for i in _order(len(timers), r):
      t = sum(next(gen) for _, gen in timers[i])
      if r >= warmup: totals[i].append(t)
    r += 1
  progress("timing", "done", f"{warmup} warmup + {r - warmup} repeats ({ended})")
  sampling = {"repeats": r - warmup, "ended": ended, "target_width": target_width, "budget_s": budget_s}
  if compile_repeats: progress("compile timing", "start", f"every variant's kernels compiled {compile_repeats} times, interleaved")
  compiles = time_compiles(devices, sources, compile_repeats)
  out = []
  for device, xs, cs in zip(devices, totals, compiles):
    # samples: the per-repeat totals, so callers can take ratios repeat by repeat (explorer.analysis.diff)
    out.append({"total_s": trace_stats(xs), "samples": xs, "device": device, "compiler": tg.compiler_name(device),
                "fallback": tg.fallback_reason(device), "sampling": sampling, "compile_samples": cs})
  return out
