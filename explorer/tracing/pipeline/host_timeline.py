"""Where a trace's seconds went, on one clock: the explorer's stages as the Recorder ran them (and a program's repeated steps), beside
tinygrad's own profile of the same seconds (tg.profiling: each rewrite group and pass, each Tensor function, each kernel launch, the
memory its buffers held). Stored as the trace's `timeline` (schema.Timeline): names interned, times in microseconds from its start."""
from __future__ import annotations
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from explorer.tracing import tg

MAX_RANGES = 40_000  # past it the shortest are left out (and counted): a long program's timeline stays a few MB at most

class HostTimeline:
  def __init__(self) -> None:
    self.stages: list[tuple[str, int | None, float, float]] = []  # (stage, realize or None, start, end): perf_counter seconds
    self.profile: tg.Profiling | None = None
    self.spans: list[tuple[str, str, float, float]] = []  # (lane, name, start, end): what tinygrad's profiler does not record apart

  @contextlib.contextmanager
  def recording(self) -> Iterator[HostTimeline]:
    with tg.profiling() as self.profile: yield self

  def stage(self, name: str, realize: int | None, st: float, en: float) -> None: self.stages.append((name, realize, st, en))

  def span(self, lane: str, name: str, st: float, en: float) -> None:
    """Host work of the explorer's own measuring (each compile, timed by CompileTimer) on a lane of its own."""
    self.spans.append((lane, name, st, en))

  def record(self) -> dict[str, Any] | None:
    """The timeline as the trace stores it, and tinygrad's events taken back out of its lists; None when it never recorded."""
    if (p := self.profile) is None: return None
    ev = p.events()
    p.forget()
    origin = float(p.origin)
    lanes: dict[str, int] = {"stages": 0}
    names: dict[str, int] = {}
    def lane(x: str) -> int: return lanes.setdefault(x, len(lanes))
    def name(x: str) -> int: return names.setdefault(x, len(names))
    for fixed in ("tensor", "tinygrad"): lane(fixed)
    own = [(ln, n, round(st * 1e6 - origin, 1), round(en * 1e6 - origin, 1)) for ln, n, st, en in self.spans]
    for ln, *_ in own: lane(ln)
    every = ev.ranges + own
    ranges = sorted(every, key=lambda r: r[3] - r[2], reverse=True)[:MAX_RANGES]
    left_out = len(every) - len(ranges)
    return {
      "unit": "us",
      "stages": [{"name": s, "realize": r, "st": round(st * 1e6 - origin, 1), "en": round(en * 1e6 - origin, 1)} for s, r, st, en in self.stages],
      "ranges": [[lane(ln), name(n), st, en] for ln, n, st, en in sorted(ranges, key=lambda r: r[2])],
      "runs": [[lane(d), name(n), at] for d, n, at in ev.runs],
      "memory": {d: [[at, n] for at, n in pts] for d, pts in ev.memory.items()},
      "lanes": list(lanes), "names": list(names), "left_out": left_out,
    }

@dataclass
class Span:
  """A stage's start and end (perf_counter seconds): the one measurement its stage_seconds and its timeline range are both read from."""
  st: float
  en: float = 0.0
  @property
  def seconds(self) -> float: return self.en - self.st

@contextlib.contextmanager
def timed_stage(timeline: HostTimeline | None, name: str, realize: int | None = None) -> Iterator[Span]:
  span = Span(time.perf_counter())
  try: yield span
  finally:
    span.en = time.perf_counter()
    if timeline is not None: timeline.stage(name, realize, span.st, span.en)
