"""Timing by the device's clock (explorer.tracing.tg.device_clocks; explorer.clocks names the methods): a schedule's kernels each alone and
the whole schedule replayed back to back (`time_schedule`, a trace's timing), and several variants interleaved (`time_interleaved`,
diffs and studies). Run it in a fresh worker with tracking off (VIZ=0), or in a trace worker at its timing stage."""
from __future__ import annotations
import statistics
import time
from collections.abc import Callable
from typing import Any
import numpy as np
from explorer import stats
from explorer.clocks import timed
from explorer.spec import ConvSpec, Variant
from explorer.stages import Progress
from explorer.tracing import tg

BATCH_BELOW_S = 5e-6  # a kernel this short also gets a batch figure where the clock has one (held events): host jitter is its size
BATCH_LAUNCHES = 32   # launches in one held event pair for a batch figure

class Replay:
  """A compiled schedule ready to time on its device: its kernels, each alone (tg.Runnable), and the whole schedule as tinygrad's JIT
  replays it (launches, and how: "graph" or "launches")."""
  def __init__(self, compiled: Any, device: str, var_vals: dict[str, int] | None = None):
    self.kernels = tg.runnables(compiled, var_vals)
    self.launches, self.how = tg.replay(compiled, device, var_vals)
    self.synchronize = tg.synchronizer(device)

  def sample(self, clock: tg.Clock) -> tuple[list[float], list[float | None], float]:
    """One repeat: every kernel alone (with the L2 flushed where the clock can flush it), every kernel warm (GPU clocks; None
    elsewhere), then the whole schedule's span."""
    alone = [clock.kernel(k) for k in self.kernels]
    warm = [clock.warm(k) for k in self.kernels]
    return alone, warm, clock.span(self.launches, self.synchronize)

def time_schedule(clock: tg.Clock, compiled: Any, device: str, warmup: int, repeats: int, var_vals: dict[str, int] | None = None,
                  on_repeat: Callable[[int], None] | None = None) -> dict[str, Any]:
  """Warmup, then repeats of Replay.sample, so that drift hits every kernel and the span alike. Returns each kernel's records (time_s,
  time_warm_s, time_batch_s: explorer.schema.KernelRecord's) and the schedule's (total_s: the kernels' sum per repeat; span_s), each saying
  its clock. What the kernels write is kept as their one run left it (tg.outputs_kept): a program's state is not stepped again."""
  with tg.outputs_kept(tg.kernel_calls(compiled)): return _time_schedule(clock, compiled, device, warmup, repeats, var_vals, on_repeat)

def _time_schedule(clock: tg.Clock, compiled: Any, device: str, warmup: int, repeats: int, var_vals: dict[str, int] | None,
                   on_repeat: Callable[[int], None] | None) -> dict[str, Any]:
  r = Replay(compiled, device, var_vals)
  per: list[list[float]] = [[] for _ in r.kernels]
  warm: list[list[float]] = [[] for _ in r.kernels]
  totals, spans = [], []
  for i in range(warmup + repeats):
    if on_repeat is not None: on_repeat(i)
    alone, hot, span = r.sample(clock)
    if i < warmup: continue
    for xs, t in zip(per, alone, strict=True): xs.append(t)
    for xs, w in zip(warm, hot, strict=True):
      if w is not None: xs.append(w)
    totals.append(sum(alone))
    spans.append(span)
  kernels = []
  for k, xs, ws in zip(r.kernels, per, warm, strict=True):
    rec: dict[str, Any] = {"call": k.call, "time_s": timed(xs, clock.method, clock.l2) if xs else None}
    if ws: rec["time_warm_s"] = timed(ws, clock.method, "warm")
    if xs and statistics.median(xs) < BATCH_BELOW_S and clock.batch(k, BATCH_LAUNCHES) is not None:
      rec["time_batch_s"] = timed([clock.batch(k, BATCH_LAUNCHES) or 0.0 for _ in range(repeats)], clock.method, "warm", BATCH_LAUNCHES)
    kernels.append(rec)
  return {"kernels": kernels, "total_s": _with_samples(timed(totals, clock.method, clock.l2), totals) if totals else None,
          "span_s": _with_samples(timed(spans, clock.method, clock.l2), spans) if spans else None, "replay": r.how,
          "method": clock.method, "notice": clock.notice}

def time_at_values(clock: tg.Clock, call: Any, values: list[dict[str, int]], warmup: int, repeats: int) -> list[dict[str, Any]]:
  """A symbolic kernel (a compiled call, its buffers with it) timed alone at each set of values its variables took, as time_schedule
  times a kernel (explorer.schema.BoundTime each); what it writes kept as the program left it."""
  out = []
  with tg.outputs_kept([call]):
    for vs in values:
      k = tg.runnable(call, vs)
      xs = [clock.kernel(k) for _ in range(warmup + repeats)][warmup:]
      out.append({"variables": vs, "time_s": timed(xs, clock.method, clock.l2)})
  return out

def _with_samples(t: dict[str, Any], xs: list[float]) -> dict[str, Any]:
  """A schedule's record keeps its samples: a program sums its realizes' repeat by repeat (explorer.tracing.pipeline.program)."""
  return {**t, "samples": list(xs)}

def _prepare(spec: ConvSpec, variant: Variant, x_np: np.ndarray, w_np: np.ndarray) -> tuple[Replay, list[str]]:
  """The variant's kernels compiled, ready to time, and their sources (what compile timing compiles again)."""
  Tensor = tg.Tensor
  from explorer.tracing.algorithms import build_conv
  device = variant.device or tg.default_device()
  with tg.opt_context(variant.opt):
    x, w = Tensor(x_np, device=device), Tensor(w_np, device=device)
    tg.realize_inputs(x, w)
    compiled = tg.compile_schedule(tg.schedule(build_conv(x, w, spec, variant)))
    return Replay(compiled, device), tg.compiled_sources(compiled)

def _seeded_inputs(s: ConvSpec) -> tuple[np.ndarray, np.ndarray]:
  """The input and weight every timed variant of a spec runs on: seeded, so that two workers time the same data."""
  rng = np.random.default_rng(0)
  return rng.standard_normal(s.input_shape).astype(s.dtype), rng.standard_normal(s.weight_shape).astype(s.dtype)

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

def time_interleaved(progress: Progress, spec: dict[str, Any], variants: list[dict[str, Any]], warmup: int, repeats: int,
                     target_width: float | None = None, budget_s: float | None = None, max_repeats: int = 1000,
                     compile_repeats: int = 0) -> list[dict[str, Any]]:
  """A, B, C, C, B, A...: each repeat runs every variant's kernels once alone and once replayed back to back (Replay.sample), so drift
  on a shared machine hits all variants alike, and every other repeat in reverse, so running first (or right after another variant)
  favours none of them.
  Adaptive (target_width): after `repeats`, keep sampling until each ratio's 95% interval is narrower than target_width, the time
  budget is spent or max_repeats are done; each result says how it ended (`sampling`). compile_repeats: then compile each variant's
  kernel sources that many times, interleaved the same way (`compile_samples`)."""
  s = ConvSpec.from_dict(spec)
  x_np, w_np = _seeded_inputs(s)
  vs = [Variant.from_dict(v).resolve(s) for v in variants]
  devices = [v.device or tg.default_device() for v in vs]
  replays, sources = [], []
  for i, v in enumerate(vs):
    progress("compile", "start", f"compiling variant {i + 1} of {len(vs)}")
    with tg.disable_gc(): replay, src = _prepare(s, v, x_np, w_np)  # schedule and codegen as Tensor.realize runs them: collector off
    replays.append(replay)
    sources.append(src)
  totals: list[list[float]] = [[] for _ in vs]
  spans: list[list[float]] = [[] for _ in vs]
  progress("timing", "start", ",".join(sorted(set(devices))))  # waits for the devices' locks
  clocks = {d: tg.clock_for(d) for d in dict.fromkeys(devices)}
  every = max(1, (warmup + repeats) // 10)  # about ten progress reports, outside the timed kernels
  start, r = time.perf_counter(), 0
  try:
    while (ended := _stop(totals, r - warmup, repeats, target_width, budget_s, max_repeats, time.perf_counter() - start)) is None:
      if r % every == 0:
        progress("timing", "running", f"{'warmup' if r < warmup else 'repeat'} {r + 1}" + ("" if target_width else f" of {warmup + repeats}"))
      for i in _order(len(replays), r):
        alone, _, span = replays[i].sample(clocks[devices[i]])
        if r >= warmup: totals[i].append(sum(alone)); spans[i].append(span)
      r += 1
  finally:
    for c in clocks.values(): c.close()
  progress("timing", "done", f"{warmup} warmup + {r - warmup} repeats ({ended})")
  sampling = {"repeats": r - warmup, "ended": ended, "target_width": target_width, "budget_s": budget_s}
  if compile_repeats: progress("compile timing", "start", f"every variant's kernels compiled {compile_repeats} times, interleaved")
  compiles = time_compiles(devices, sources, compile_repeats)
  out = []
  for device, replay, xs, ss, cs in zip(devices, replays, totals, spans, compiles, strict=False):
    clock = clocks[device]
    # samples: the per-repeat kernel sums (span_samples: the spans), so callers can take ratios repeat by repeat (explorer.analysis.diff)
    out.append({"total_s": timed(xs, clock.method, clock.l2), "samples": xs, "span_s": timed(ss, clock.method, clock.l2), "span_samples": ss,
                "replay": replay.how, "method": clock.method, "notice": clock.notice, "device": device, "compiler": tg.compiler_name(device),
                "fallback": tg.fallback_reason(device), "sampling": sampling, "compile_samples": cs})
  return out

def time_in_turns(progress: Progress, spec: dict[str, Any], variant: dict[str, Any], socket_path: str, side: int) -> dict[str, Any]:
  """One side of two tinygrads timed interleaved (explorer.tracing.pipeline.turns: each in a worker of its own environment, on one device):
  the variant compiled, then one repeat (Replay.sample) each time the coordinator's socket says "sample", answered with its kernels'
  sum and its span, until it says "end". The device's lock is the coordinator's, held across both workers' turns: this worker never
  asks for it. Returns what time_interleaved returns for a variant, less the samples (the coordinator has them)."""
  import json
  import socket
  s = ConvSpec.from_dict(spec)
  x_np, w_np = _seeded_inputs(s)
  v = Variant.from_dict(variant).resolve(s)
  device = v.device or tg.default_device()
  progress("compile", "start", f"compiling side {'AB'[side]} on tinygrad {tg.TINYGRAD_VERSION}")
  with tg.disable_gc(): replay, _ = _prepare(s, v, x_np, w_np)
  clock = tg.clock_for(device)
  with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
    sock.connect(socket_path)
    turns, answers = sock.makefile("r"), sock.makefile("w")
    answers.write(json.dumps({"side": side, "ready": True}) + "\n"); answers.flush()
    try:
      for line in turns:
        if line.strip() != "sample": break
        alone, _, span = replay.sample(clock)
        answers.write(json.dumps({"alone": sum(alone), "span": span}) + "\n"); answers.flush()
    finally: clock.close()
  return {"replay": replay.how, "method": clock.method, "l2": clock.l2, "notice": clock.notice, "device": device,
          "compiler": tg.compiler_name(device), "fallback": tg.fallback_reason(device), "tinygrad": tg.TINYGRAD_VERSION}
