"""How a time was measured, named once. Every time the explorer keeps (a kernel's, a schedule's span, a diff's or a study's
interleaved totals, a hand schedule's pair) is a timing record that carries the clock it was read from (`method`), the cache state it
was read in (`l2`), its samples and the 95% interval of its median. The clocks themselves run in workers (explorer.tracing.tg.device_clocks);
the pages badge each time with its method and the glossary explains each from METHODS. It imports nothing else of the explorer, and
never tinygrad."""
from __future__ import annotations
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Method = Literal["host", "cupti", "events-held", "events"]
L2State = Literal["flushed", "warm"]

@dataclass(frozen=True)
class MethodInfo:
  label: str    # the badge's text
  summary: str  # the badge's tooltip and the glossary's entry

METHODS: dict[str, MethodInfo] = {
  "host": MethodInfo("host clock", "the host's clock around the kernel's own call (a CPU device runs its kernels in this process): what the "
                     "kernel costs the host, caches warm from the runs before"),
  "cupti": MethodInfo("GPU clock (CUPTI)", "the GPU's own start and end of each kernel, from CUPTI's activity records: no launch latency, "
                      "no host in the figure; the ground truth Nsight Compute reports"),
  "events-held": MethodInfo("CUDA events, held", "a CUDA event pair around the kernel, queued while the stream waited on a flag the host "
                            "released after queueing them: the GPU's time between the events, with the host's launch latency kept out"),
  "events": MethodInfo("tinygrad's timer", "tinygrad's own timer (CUDA: an event pair around one launch, the host's launch latency inside "
                       "it, 6-9 us on an H200): a fallback, kept only where no better clock could be used"),
}
L2_STATES: dict[str, str] = {
  "flushed": "the GPU's L2 cache flushed before each sample (a memset of twice its size), as triton's do_bench and NVBench time",
  "warm": "caches warm from the sample before: a kernel that fits in cache reads faster than it would the first time",
}
HOST_DEVICES = ("CPU",)  # devices whose kernels run in the process that times them: the host's clock is theirs

def default_method(device: str) -> Method:
  """The method a record without one was measured by (traces stored before methods were recorded): the host's clock on a CPU device,
  tinygrad's launch-inclusive timer anywhere else."""
  return "host" if device.split(":")[0] in HOST_DEVICES else "events"

BOOTSTRAP, CONFIDENCE = 4000, 0.95  # as explorer.stats compares paired samples

def median_interval(xs: Sequence[float], seed: int = 0) -> tuple[float, float] | None:
  """The 95% interval of the median of xs (a percentile bootstrap of one series' samples); None for fewer than 3, where it says
  nothing."""
  if len(xs) < 3: return None
  import numpy as np  # where a record is made (a worker), never where a page reads one
  x = np.asarray(xs, dtype=np.float64)
  medians = np.median(x[np.random.default_rng(seed).integers(0, len(x), size=(BOOTSTRAP, len(x)))], axis=1)
  lo, hi = np.quantile(medians, [(1 - CONFIDENCE) / 2, 1 - (1 - CONFIDENCE) / 2])
  return float(lo), float(hi)

def timed(samples: Sequence[float], method: Method, l2: L2State, batch: int | None = None) -> dict[str, Any]:
  """A timing record (explorer.schema.TimeStats) of samples in seconds, measured by `method` with the cache `l2`; batch: the launches
  each sample was divided by (a batched figure), None where each sample is one launch."""
  import statistics
  xs = list(samples)
  out: dict[str, Any] = {"median": statistics.median(xs), "mean": statistics.fmean(xs), "std": statistics.pstdev(xs) if len(xs) > 1 else 0.0,
                         "min": min(xs), "n": len(xs), "method": method, "l2": l2}
  if (ci := median_interval(xs)) is not None: out["ci_low"], out["ci_high"] = ci
  if batch is not None: out["batch"] = batch
  return out

def method_of(t: Mapping[str, Any], device: str) -> str:
  """A timing record's method: as recorded, else what a record of an older trace on `device` was measured by."""
  return str(t.get("method") or default_method(device))

def l2_of(t: Mapping[str, Any]) -> str | None:
  """A record's cache state, None where it was not recorded (older traces)."""
  return t.get("l2")

def interval_of(t: Mapping[str, Any]) -> tuple[float, float] | None:
  """A record's 95% interval of its median, None where it has none (older traces, or fewer than 3 samples)."""
  return (t["ci_low"], t["ci_high"]) if "ci_low" in t and "ci_high" in t else None

def how(t: Mapping[str, Any], device: str) -> str:
  """How a record was measured, in words: "host clock, caches warm, 30 samples, 95% interval 38.1-39.0 us"."""
  parts = [METHODS[m].label if (m := method_of(t, device)) in METHODS else m]
  if (l2 := l2_of(t)) is not None: parts.append("L2 flushed" if l2 == "flushed" else "caches warm")
  parts.append(f"{t['n']} sample{'s' if t['n'] != 1 else ''}" + (f" of {t['batch']} launches each" if t.get("batch") else ""))
  if (ci := interval_of(t)) is not None: parts.append(f"95% interval {seconds_text(ci[0])}-{seconds_text(ci[1])}")
  else: parts.append("no interval recorded")
  return ", ".join(parts)

def seconds_text(s: float) -> str:
  if s < 1e-3: return f"{s*1e6:.1f} us"
  if s < 1: return f"{s*1e3:.2f} ms"
  return f"{s:.2f} s"

def ratio_words(ratio: float, ci: tuple[float, float] | None, what: str = "B", than: str | None = None) -> str:
  """A B/A ratio as words whose interval runs the same way: "B is 1.13x faster (95% interval 1.10-1.16x)" for B/A 0.885 with
  B/A's interval 0.86-0.91 (read as A/B), "B is 2.20x slower (95% interval 2.17-2.22x)" for B/A 2.2. than: what A is called, where
  the words name it ("... faster than the original")."""
  faster = ratio < 1
  shown = 1 / ratio if faster else ratio
  if abs(ratio - 1) < 0.005:
    return f"{what} takes the same time{f' as {than}' if than else ''}" + (f" (95% interval of the ratio {ci[0]:.2f}-{ci[1]:.2f})" if ci else "")
  words = f"{what} is {shown:.2f}x {'faster' if faster else 'slower'}{f' than {than}' if than else ''}"
  if ci is None: return words
  lo, hi = sorted((1 / ci[1], 1 / ci[0]) if faster else ci)
  return words + f" (95% interval {lo:.2f}-{hi:.2f}x)"
