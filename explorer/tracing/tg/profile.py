"""The host's work over time, as tinygrad's own profiler records it (PROFILE, read at each event, so it can be switched on around a
trace): every rewrite group and pass ("TINY"), each Tensor function a program called ("USER"), each kernel's launch (an `exec` point on
its device), each buffer's allocation and free. The events are read back as plain data and taken out of tinygrad's lists again, unless
the process asked for PROFILE itself (tinygrad then writes them to its profile.pkl at exit)."""
from __future__ import annotations
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from tinygrad.device import Buffer, Compiled
from tinygrad.helpers import PROFILE, Context, ProfilePointEvent, ProfileRangeEvent, TracingKey, ansistrip, cpu_events, perf_counter_us

LANES = {"TINY": "tinygrad", "USER": "tensor"}  # tinygrad's host devices as the timeline names them; the rest are compute devices

@dataclass
class HostEvents:
  """tinygrad's profile events since `origin` (microseconds on time.perf_counter's clock, as tinygrad stamps them)."""
  ranges: list[tuple[str, str, float, float]] = field(default_factory=list)  # (lane, name, start, end)
  runs: list[tuple[str, str, float]] = field(default_factory=list)            # (device, kernel name, launched at)
  memory: dict[str, list[tuple[float, int]]] = field(default_factory=dict)    # device -> (at, bytes allocated after the event)

class Profiling:
  """tinygrad's profiler switched on inside; `events()` reads what it recorded since the start."""
  def __init__(self) -> None:
    self.origin = perf_counter_us()
    self.marks = (len(cpu_events), len(Compiled.profile_events), len(Buffer.profile_events))
    self.own = not PROFILE.value  # the process did not ask for tinygrad's profile: what is recorded here is taken back out

  def _since(self) -> list[Any]:
    a, b, c = self.marks
    return cpu_events[a:] + Compiled.profile_events[b:] + Buffer.profile_events[c:]

  def at(self, ts: Decimal) -> float: return round(float(ts - self.origin), 1)

  def events(self) -> HostEvents:
    out, sizes, in_use = HostEvents(), dict[tuple[str, int], int](), dict[str, int]()
    timed = [e for e in self._since() if isinstance(e, (ProfileRangeEvent, ProfilePointEvent))]  # (0.13 lists its programs there too)
    for e in sorted(timed, key=lambda e: e.ts if isinstance(e, ProfilePointEvent) else e.st):
      if isinstance(e, ProfileRangeEvent) and e.en is not None:
        name = e.name.display_name if isinstance(e.name, TracingKey) else str(e.name)
        out.ranges.append((LANES.get(e.device, e.device), ansistrip(name), self.at(e.st), self.at(e.en)))
      elif isinstance(e, ProfilePointEvent) and e.name == "exec":
        out.runs.append((e.device, ansistrip(str(e.arg.get("name", "?"))).strip(), self.at(e.ts)))
      elif isinstance(e, ProfilePointEvent) and e.name in ("alloc", "free"):
        if e.name == "alloc": sizes[(e.device, e.key)] = n = e.arg["sz"] * e.arg["dtype"].itemsize
        else: n = -sizes.pop((e.device, e.key), 0)
        in_use[e.device] = in_use.get(e.device, 0) + n
        out.memory.setdefault(e.device, []).append((self.at(e.ts), in_use[e.device]))
    return out

  def forget(self) -> None:
    if not self.own: return
    a, b, c = self.marks
    del cpu_events[a:], Compiled.profile_events[b:], Buffer.profile_events[c:]

@contextlib.contextmanager
def profiling() -> Iterator[Profiling]:
  p = Profiling()
  with Context(PROFILE=max(1, PROFILE.value)): yield p

def profiling_paused() -> contextlib.AbstractContextManager[Any]:
  """No events inside (the timing stage's thousands of runs are the timing record's, not the timeline's)."""
  return Context(PROFILE=0) if PROFILE.value else contextlib.nullcontext()
