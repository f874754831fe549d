"""One clock (explorer.clocks, explorer.tracing.tg.device_clocks): every kept time says how it was measured; the clock chosen per device; the
CUDA clocks' calls checked against stand-ins for NVIDIA's CUPTI binding and for the driver (no GPU here: their order and what they
return); the schedule's span measured on the CPU against real tinygrad kernels; ratios quoted in words whose interval runs their way."""
from __future__ import annotations
import statistics
import time
from types import SimpleNamespace
from typing import Any
import pytest
from explorer import clocks
from explorer.analysis.diff import time_headline
from explorer.tracing import tg
from explorer.tracing.tg.device_clocks import CuptiClock, EventsClock, HeldEventsClock, HostClock, Runnable, clock_for

# ***** the records *****

def test_a_record_names_its_clock_cache_state_samples_and_interval():
  t = clocks.timed([3e-6, 1e-6, 2e-6, 2e-6, 4e-6], "cupti", "flushed")
  assert t["median"] == 2e-6 and t["n"] == 5 and t["method"] == "cupti" and t["l2"] == "flushed"
  assert t["ci_low"] <= t["median"] <= t["ci_high"] and "batch" not in t
  assert clocks.timed([1.0, 2.0], "host", "warm").keys().isdisjoint({"ci_low", "ci_high"})  # two samples: no interval claimed
  assert clocks.how(t, "CUDA").startswith("GPU clock (CUPTI), L2 flushed, 5 samples, 95% interval ")
  assert clocks.timed([1e-6] * 4, "events-held", "warm", batch=32)["batch"] == 32

def test_records_of_older_traces_read_as_what_measured_them():
  old = {"median": 1e-5, "mean": 1e-5, "std": 0.0, "min": 1e-5, "n": 10}
  assert clocks.method_of(old, "CPU") == "host" and clocks.method_of(old, "CUDA:1") == "events" and clocks.method_of(old, "METAL") == "events"
  assert clocks.how(old, "CUDA") == "tinygrad's timer, 10 samples, no interval recorded"
  assert clocks.interval_of(old) is None and clocks.l2_of(old) is None

def test_a_speed_up_is_quoted_with_the_interval_of_the_speed_up():
  """The diff said "1.13x faster" beside "95% interval of B/A 0.86-0.91": words and interval must run the same way."""
  assert clocks.ratio_words(0.885, (0.86, 0.91)) == "B is 1.13x faster (95% interval 1.10-1.16x)"
  assert clocks.ratio_words(2.2, (2.17, 2.22)) == "B is 2.20x slower (95% interval 2.17-2.22x)"
  assert clocks.ratio_words(1.001, (0.99, 1.01)) == "B takes the same time (95% interval of the ratio 0.99-1.01)"
  assert clocks.ratio_words(0.5, None, "the hand schedule", "the original") == "the hand schedule is 2.00x faster than the original"
  stored = {"compared": True, "ratio": {"n": 20, "median": 0.885, "ci_low": 0.86, "ci_high": 0.91}}
  assert time_headline(stored) == "B is 1.13x faster (95% interval 1.10-1.16x)"
  assert time_headline({**stored, "span_ratio": {"n": 20, "median": 1.5, "ci_low": 1.4, "ci_high": 1.6}}, "span") == \
    "B is 1.50x slower (95% interval 1.40-1.60x)"
  assert time_headline(stored, "span") is None  # a diff stored before spans were measured

# ***** the clock chosen per device *****

class Driver:
  """A stand-in for the CUDA driver's calls (tg.clocks.GpuDriver): each recorded in order into `log`, launches too; elapsed() returns
  the next of `times`."""
  def __init__(self, log: list[str], times: list[float] | None = None):
    self.log, self.times, self.flag = log, list(times or [1e-6] * 100), 0
    log.append("flag=0")  # written before anything waits on it, as CudaDriver does
  def hold(self, value: int) -> None: self.log.append(f"wait flag>={value}")
  def release(self, value: int) -> None: self.flag = value; self.log.append(f"flag={value}")
  def flush_l2(self) -> None: self.log.append("flush L2")
  def mark(self, which: int) -> None: self.log.append(f"event {'start' if which == 0 else 'end'}")
  def elapsed(self) -> float:
    assert self.flag > 0, "waited on events queued behind a flag never released: the GPU would wait forever"
    self.log.append("wait end event")
    return self.times.pop(0)
  def synchronize(self) -> None: self.log.append("synchronize")
  def close(self) -> None: self.log.append("close")

class Cupti:
  """A stand-in for NVIDIA's cupti-python binding (`from cupti import cupti`): launches queue activity records (kind, name, start,
  end in ns, from `durations_ns`), activity_flush_all hands them to the registered completion callback, as CUPTI does."""
  ActivityKind = SimpleNamespace(CONCURRENT_KERNEL=10)
  def __init__(self, log: list[str], durations_ns: list[int], enable_error: Exception | None = None):
    self.log, self.durations, self.error, self.pending, self.clock_ns = log, list(durations_ns), enable_error, [], 1_000_000
  def activity_register_callbacks(self, requested: Any, completed: Any) -> None:
    self.requested, self.completed = requested, completed
    self.log.append("cupti register")
  def activity_enable(self, kind: int) -> None:
    if self.error is not None: raise self.error
    self.log.append(f"cupti enable {kind}")
  def activity_disable(self, kind: int) -> None: self.log.append(f"cupti disable {kind}")
  def activity_flush_all(self, force: int) -> None:
    size, _ = self.requested()
    assert size > 0
    got, self.pending = self.pending, []
    if got: self.completed(got)
  def launched(self, name: str) -> None:  # what the GPU would record for a launch
    start = self.clock_ns + 500
    end = start + self.durations.pop(0)
    self.clock_ns = end
    self.pending.append(SimpleNamespace(kind=10, name=name, start=start, end=end))
    self.pending.append(SimpleNamespace(kind=2, name="memset", start=0, end=1))  # another kind: not a kernel's

def runnable(log: list[str], name: str, cupti: Cupti | None = None, tinygrad_s: float = 9e-6) -> Runnable:
  def launch() -> None:
    log.append(f"launch {name}")
    if cupti is not None: cupti.launched(name)
  return Runnable(name, launch, lambda: tinygrad_s)

def test_the_clock_on_the_cpu_is_the_hosts():
  assert isinstance(clock_for("CPU"), HostClock) and clock_for("CPU").method == "host" and clock_for("CPU").l2 == "warm"

def test_cuda_uses_cupti_where_the_binding_imports():
  log: list[str] = []
  c = clock_for("CUDA", cupti_loader=lambda: Cupti(log, []), driver=lambda d: Driver(log))
  assert isinstance(c, CuptiClock) and c.method == "cupti" and c.l2 == "flushed" and c.notice is None
  assert log == ["flag=0", "cupti register", "cupti enable 10"]

def test_cuda_holds_its_events_where_cupti_does_not_import_or_start():
  def missing() -> Any: raise ImportError("No module named 'cupti'")
  c = clock_for("CUDA:1", cupti_loader=missing, driver=lambda d: Driver([]))
  assert isinstance(c, HeldEventsClock) and c.method == "events-held" and "ImportError: No module named 'cupti'" in (c.notice or "")
  busy = RuntimeError("CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED")  # another profiler holds CUPTI
  c = clock_for("CUDA", cupti_loader=lambda: Cupti([], [], enable_error=busy), driver=lambda d: Driver([]))
  assert isinstance(c, HeldEventsClock) and "MULTIPLE_SUBSCRIBERS" in (c.notice or "")

def test_tinygrads_timer_is_the_labelled_last_resort():
  def no_driver(device: str) -> Any: raise AttributeError("failed to load library cuda")
  c = clock_for("CUDA", cupti_loader=lambda: Cupti([], []), driver=no_driver)
  assert isinstance(c, EventsClock) and c.method == "events" and "failed to load library cuda" in (c.notice or "")
  assert isinstance(m := clock_for("METAL"), EventsClock) and "METAL" in (m.notice or "")
  assert isinstance(clock_for("CUDA", driver=lambda d: Driver([]), want="events"), EventsClock)
  assert isinstance(clock_for("CUDA", cupti_loader=lambda: Cupti([], []), driver=lambda d: Driver([]), want="events-held"), HeldEventsClock)

# ***** the CUDA clocks' calls, in order *****

def test_held_events_queue_everything_behind_the_flag_then_release_it():
  log: list[str] = []
  clock = HeldEventsClock(Driver(log, [4e-6, 3e-6, 64e-6, 9e-6]))
  k = runnable(log, "E_4")
  assert clock.kernel(k) == 4e-6
  assert log == ["flag=0", "wait flag>=1", "flush L2", "event start", "launch E_4", "event end", "flag=1", "wait end event"]
  del log[:]
  assert clock.warm(k) == 3e-6 and log == ["wait flag>=2", "event start", "launch E_4", "event end", "flag=2", "wait end event"]
  del log[:]
  assert clock.batch(k, 32) == 2e-6 and log.count("launch E_4") == 32 and log[:2] == ["wait flag>=3", "event start"]
  assert log[-3:] == ["event end", "flag=3", "wait end event"]
  del log[:]
  ks = [runnable(log, n) for n in ("a", "b", "c")]
  assert clock.span([x.launch for x in ks], lambda: None) == 9e-6
  assert log == ["wait flag>=4", "flush L2", "event start", "launch a", "launch b", "launch c", "event end", "flag=4", "wait end event"]

def test_a_launch_that_fails_still_releases_the_stream():
  log: list[str] = []
  clock = HeldEventsClock(Driver(log))
  def bad() -> None: raise RuntimeError("CUDA Error 700")
  with pytest.raises(RuntimeError): clock.kernel(Runnable("bad", bad, lambda: 0.0))
  assert log[-1] == "flag=1"  # the GPU is not left waiting on the flag

def test_cupti_yields_the_recorded_kernel_durations():
  log: list[str] = []
  cupti = Cupti(log, [1_000, 5_200, 15_900, 3_800, 2_000, 2_000, 2_000])
  clock = CuptiClock(cupti, Driver(log))
  ks = [runnable(log, n, cupti) for n in ("ghat", "xhat", "mhat", "out")]
  assert [clock.kernel(k) for k in ks] == pytest.approx([1.0e-6, 5.2e-6, 15.9e-6, 3.8e-6])
  assert log[-3:] == ["flush L2", "launch out", "synchronize"]  # flushed, launched alone, its record read once it ran
  span = clock.span([k.launch for k in ks[:3]], lambda: None)
  assert span == pytest.approx((2_000 * 3 + 500 * 2) * 1e-9)  # first start to last end: the gaps between kernels included
  clock.close()
  assert log[-2:] == ["cupti disable 10", "close"]

def test_cupti_that_records_nothing_fails_loudly():
  from explorer.tracing.tg.device_clocks import ClockFailed
  clock = CuptiClock(Cupti([], []), Driver([]))
  with pytest.raises(ClockFailed, match="no kernel"): clock.kernel(Runnable("k", lambda: None, lambda: 0.0))

# ***** the CPU: real kernels, each alone and replayed back to back *****

def three_kernels() -> Any:
  x = tg.Tensor.randn(1 << 16).realize()
  y = ((x * 2).contiguous() + 1).contiguous().exp2().contiguous().sum()
  return tg.compile_schedule(tg.schedule(y))

def test_a_schedules_span_lies_between_its_longest_kernel_and_its_kernels_launched_alone():
  from explorer.tracing.pipeline.timing import Replay, time_schedule
  compiled = three_kernels()
  clock = clock_for("CPU")
  got = time_schedule(clock, compiled, "CPU", warmup=2, repeats=15)
  assert len(got["kernels"]) >= 3 and got["method"] == "host" and got["replay"] == "launches"
  for k in got["kernels"]: assert k["time_s"]["method"] == "host" and "ci_low" in k["time_s"] and "time_warm_s" not in k
  span, total = got["span_s"], got["total_s"]
  assert span["n"] == total["n"] == 15 and len(span["samples"]) == 15 and "ci_low" in span and span["method"] == "host"
  assert span["min"] >= max(k["time_s"]["min"] for k in got["kernels"])
  # each kernel launched alone and waited for (the host's clock around its launch and the device's synchronize), interleaved with
  # replays: the back-to-back replay costs no more than those launches
  r = Replay(compiled, "CPU")
  alone, replayed = [], []
  for _ in range(15):
    st = time.perf_counter()
    for k in r.kernels: k.launch(); r.synchronize()
    alone.append(time.perf_counter() - st)
    replayed.append(clock.span(r.launches, r.synchronize))
  assert min(replayed) <= min(alone) * 1.1, (statistics.median(replayed), statistics.median(alone))

def test_a_device_that_fails_to_open_says_why(monkeypatch):
  """tinygrad's NV device fails with a bare StopIteration in some VMs (where CUDA opens): the devices list says so."""
  from explorer.tracing.tg import devices
  class Failing:
    def __getitem__(self, name: str) -> Any:
      if name == "NV": raise StopIteration
      return SimpleNamespace(device=name)
  monkeypatch.setattr(devices, "Device", Failing())
  devices.open_error.cache_clear()
  try:
    assert devices.open_error("NV") == "StopIteration: (no message: tinygrad found no interface it could open)"
    assert devices.open_error("CUDA") is None
    assert [d for d, _ in devices.unopened_devices()] == ["NV"]
  finally: devices.open_error.cache_clear()
