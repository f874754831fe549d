"""The clocks a compiled kernel, or a whole schedule, is timed by: one per device, chosen by `clock_for` (explorer.clocks names their
methods and says what each includes).

- `HostClock` (CPU devices): tinygrad's own timer, which on the CPU is the host's clock around the kernel's call in this process.
- `CuptiClock` (CUDA, where NVIDIA's `cupti-python` imports and CUPTI's activity API can be enabled): each kernel's start and end from
  the GPU's own clock, read from CUPTI's CONCURRENT_KERNEL activity records, the L2 flushed before each sample.
- `HeldEventsClock` (CUDA otherwise): the stream waits on a flag in host memory (cuStreamWaitValue32) while the L2 flush, the start
  event, the launches and the end event are queued behind it; the host then writes the flag and the GPU runs them back to back, so the
  time between the events holds no host launch latency. Short kernels also get a batch figure: many launches in one held pair.
- `EventsClock` (any other GPU, or CUDA where neither of the above can be used): tinygrad's own launch-inclusive timer, labelled so.

A clock times `Runnable`s: a kernel's launch without waiting, and tinygrad's own synchronized run of it (explorer.tracing.tg.runtime
makes them from a compiled schedule). The CUDA clocks reach the driver through `CudaDriver` (tinygrad's CUDA bindings) and CUPTI
through the module `load_cupti` imports; both are parameters, so that their calls can be checked without a GPU.
"""
from __future__ import annotations
import ctypes
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast
from explorer.clocks import HOST_DEVICES, L2State, Method

@dataclass(frozen=True)
class Runnable:
  """One compiled call: `launch` queues it on its device without waiting; `tinygrad_time` runs it once under tinygrad's own timer
  (engine.realize.time_call: synchronized) and returns its seconds."""
  name: str
  launch: Callable[[], Any]
  tinygrad_time: Callable[[], float]
  call: int = 0  # its index among the schedule's calls

class ClockFailed(RuntimeError):
  """A clock could not read a time (CUPTI recorded no kernel, a driver call failed): the message says which."""

class Clock:
  """Times one runnable alone (`kernel`), and runnables replayed back to back (`span`: the first start to the last end). GPU clocks
  also time a kernel with the L2 warm (`warm`) and many launches at once (`batch`); other clocks return None there."""
  method: Method = "host"
  l2: L2State = "warm"
  notice: str | None = None  # why a better clock was not used (None: this is the device's best)

  def kernel(self, r: Runnable) -> float: return r.tinygrad_time()
  def warm(self, r: Runnable) -> float | None: return None
  def batch(self, r: Runnable, launches: int) -> float | None: return None

  def span(self, launches: Sequence[Callable[[], Any]], synchronize: Callable[[], None]) -> float:
    st = time.perf_counter()
    for launch in launches: launch()
    synchronize()
    return time.perf_counter() - st

  def close(self) -> None: pass

class HostClock(Clock):
  """A CPU device: its kernels run in this process, timed by tinygrad's timer (the host's clock around the kernel's call); a span is the
  host's clock from the first launch to the device's synchronize after the last."""

class EventsClock(Clock):
  """tinygrad's own timer on a GPU: on CUDA an event pair around one launch, the host's launch latency inside it. A labelled fallback."""
  method: Method = "events"
  def __init__(self, notice: str | None = None): self.notice = notice

# ***** CUDA *****

class GpuDriver(Protocol):
  """What the CUDA clocks ask of the driver, on the stream tinygrad launches on (the legacy default stream)."""
  def hold(self, value: int) -> None: ...     # queue a wait: the stream goes on once the host flag is at least value
  def release(self, value: int) -> None: ...  # the host writes value into the flag
  def flush_l2(self) -> None: ...             # queue a memset over twice the L2's size
  def mark(self, which: int) -> None: ...     # queue event `which` (0: start, 1: end)
  def elapsed(self) -> float: ...             # wait for the end event: seconds between the two
  def synchronize(self) -> None: ...
  def close(self) -> None: ...

class HeldEventsClock(Clock):
  """CUDA events with the stream held: hold, flush, start event, launches, end event are queued while the stream waits on the host's
  flag, then the flag is released, so the launches run back to back on the GPU and the events see no host latency."""
  method: Method = "events-held"
  l2: L2State = "flushed"

  def __init__(self, driver: GpuDriver, notice: str | None = None):
    self.driver, self.notice, self.value = driver, notice, 0

  def _held(self, launches: Sequence[Callable[[], Any]], flush: bool, times: int = 1) -> float:
    d = self.driver
    self.value += 1
    d.hold(self.value)
    try:
      if flush: d.flush_l2()
      d.mark(0)
      for _ in range(times):
        for launch in launches: launch()
      d.mark(1)
    finally: d.release(self.value)  # never leave the stream waiting, whatever a launch raised
    return d.elapsed() / times

  def kernel(self, r: Runnable) -> float: return self._held([r.launch], flush=True)
  def warm(self, r: Runnable) -> float | None: return self._held([r.launch], flush=False)
  def batch(self, r: Runnable, launches: int) -> float | None: return self._held([r.launch], flush=False, times=launches)
  def span(self, launches: Sequence[Callable[[], Any]], synchronize: Callable[[], None]) -> float: return self._held(launches, flush=True)
  def close(self) -> None: self.driver.close()

class CuptiClock(Clock):
  """The GPU's own start and end of each kernel, from CUPTI's activity records (CONCURRENT_KERNEL), flushed after each sample."""
  method: Method = "cupti"
  l2: L2State = "flushed"
  BUFFER_BYTES = 8 << 20

  def __init__(self, cupti: Any, driver: GpuDriver, notice: str | None = None):
    self.cupti, self.driver, self.notice = cupti, driver, notice
    self.kind = cupti.ActivityKind.CONCURRENT_KERNEL
    self.records: list[tuple[str, int, int]] = []
    cupti.activity_register_callbacks(self._requested, self._completed)
    cupti.activity_enable(self.kind)  # raises where another profiler holds CUPTI: clock_for falls back

  def _requested(self) -> tuple[int, int]: return self.BUFFER_BYTES, 0
  def _completed(self, activities: Sequence[Any]) -> None:
    self.records += [(str(a.name), int(a.start), int(a.end)) for a in activities if a.kind == self.kind]

  def _run(self, launches: Sequence[Callable[[], Any]], flush: bool) -> list[tuple[str, int, int]]:
    self.cupti.activity_flush_all(1)
    self.records = []
    if flush: self.driver.flush_l2()
    for launch in launches: launch()
    self.driver.synchronize()
    self.cupti.activity_flush_all(1)
    got, self.records = self.records, []
    if not got: raise ClockFailed(f"CUPTI recorded no kernel for {len(launches)} launch(es)")
    return got

  def _one(self, r: Runnable, flush: bool) -> float:
    got = self._run([r.launch], flush)
    if len(got) != 1: raise ClockFailed(f"CUPTI recorded {len(got)} kernels for one launch of {r.name}")
    return (got[0][2] - got[0][1]) * 1e-9

  def kernel(self, r: Runnable) -> float: return self._one(r, flush=True)
  def warm(self, r: Runnable) -> float | None: return self._one(r, flush=False)
  def span(self, launches: Sequence[Callable[[], Any]], synchronize: Callable[[], None]) -> float:
    got = self._run(launches, flush=True)
    return (max(e for _, _, e in got) - min(s for _, s, _ in got)) * 1e-9

  def close(self) -> None:
    try:
      self.cupti.activity_disable(self.kind)
      self.cupti.activity_flush_all(1)
    finally: self.driver.close()

class CudaDriver:
  """GpuDriver through tinygrad's CUDA bindings, on the device's context: a flag in pinned host memory the device reads, a scratch
  buffer of twice the L2 for flushing it, and two events."""
  def __init__(self, device: str):
    from tinygrad import Device
    from tinygrad.runtime.autogen import cuda
    from tinygrad.runtime.ops_cuda import check
    self.cuda, self.dev = cuda, cast(Any, Device[device])  # a CUDADevice: its context and cu_device
    self.check: Callable[[Any], None] = check  # tinygrad's: raises on a CUDA error
    check(cuda.cuCtxSetCurrent(self.dev.context))
    self.host = ctypes.c_void_p()
    check(cuda.cuMemHostAlloc(ctypes.byref(self.host), 4, 0x02))  # CU_MEMHOSTALLOC_DEVICEMAP
    self.flag = ctypes.c_uint32.from_address(self.host.value or 0)
    self.flag.value = 0  # written before anything waits on it
    self.flag_dev = cuda.CUdeviceptr()
    check(cuda.cuMemHostGetDevicePointer_v2(ctypes.byref(self.flag_dev), self.host, 0))
    l2 = ctypes.c_int32()
    check(cuda.cuDeviceGetAttribute(ctypes.byref(l2), cuda.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, self.dev.cu_device))
    self.scratch_bytes = max(2 * l2.value, 1 << 20)
    self.scratch = cuda.CUdeviceptr()
    check(cuda.cuMemAlloc_v2(ctypes.byref(self.scratch), self.scratch_bytes))
    self.events = [cuda.CUevent() for _ in range(2)]
    for ev in self.events: check(cuda.cuEventCreate(ctypes.byref(ev), 0))

  def hold(self, value: int) -> None:
    self.check(self.cuda.cuStreamWaitValue32_v2(None, self.flag_dev, value, self.cuda.CU_STREAM_WAIT_VALUE_GEQ))
  def release(self, value: int) -> None: self.flag.value = value
  def flush_l2(self) -> None: self.check(self.cuda.cuMemsetD8Async(self.scratch, 0, self.scratch_bytes, None))
  def mark(self, which: int) -> None: self.check(self.cuda.cuEventRecord(self.events[which], None))
  def elapsed(self) -> float:
    self.check(self.cuda.cuEventSynchronize(self.events[1]))
    self.check(self.cuda.cuEventElapsedTime(ctypes.byref(ms := ctypes.c_float()), self.events[0], self.events[1]))
    return ms.value * 1e-3
  def synchronize(self) -> None: self.dev.synchronize()
  def close(self) -> None:
    self.dev.synchronize()
    for ev in self.events: self.cuda.cuEventDestroy_v2(ev)
    self.cuda.cuMemFree_v2(self.scratch)
    self.cuda.cuMemFreeHost(self.host)

def load_cupti() -> Any:
  """NVIDIA's CUPTI binding (`pip install cupti-python`, the [gpu] extra): its major version must match the driver's CUDA."""
  from cupti import cupti
  return cupti

CLOCK_ENV = "KERNEL_EXPLORER_CLOCK"  # a method to use on CUDA instead of the best one (to compare them): cupti, events-held or events

def _line(e: BaseException) -> str: return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")[:200]

def clock_for(device: str, cupti_loader: Callable[[], Any] = load_cupti, driver: Callable[[str], GpuDriver] = CudaDriver,
              want: str | None = None) -> Clock:
  """The best clock for `device`: the host's on a CPU device; on CUDA CUPTI, else held events, else tinygrad's timer, with a notice
  saying why a better one was not used; tinygrad's timer on any other GPU. want (default: $KERNEL_EXPLORER_CLOCK) asks for a lesser
  CUDA clock by its method's name."""
  base = device.split(":")[0]
  if base in HOST_DEVICES: return HostClock()
  if base != "CUDA": return EventsClock(f"{base} has no clock of its own in the explorer: tinygrad's timer, launch latency included")
  want = want if want is not None else os.environ.get(CLOCK_ENV) or None
  if want == "events": return EventsClock(f"{CLOCK_ENV}=events asked for tinygrad's timer")
  try: d = driver(device)
  except Exception as e: return EventsClock(f"the held-event clock could not start ({_line(e)}): tinygrad's timer, launch latency included")
  if want == "events-held": return HeldEventsClock(d, f"{CLOCK_ENV}=events-held asked for held events")
  try: return CuptiClock(cupti_loader(), d)
  except Exception as e: return HeldEventsClock(d, f"CUPTI not used ({_line(e)}): CUDA events with the stream held")
