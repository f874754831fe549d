"""Every stateful part of one app, in one typed place: explorer.web.app.create_app makes them, the routes reach them through one
dependency (explorer.web.http.deps.ServicesDep)."""
from __future__ import annotations
import collections, threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Hashable, TypeVar, cast
from explorer.schema import TraceRecord
from explorer.settings import Settings
from explorer.store import Store
if TYPE_CHECKING:
  from explorer.web.services.devices import DeviceCatalog, QueueDevices
  from explorer.web.services.diffs import DiffService
  from explorer.web.services.enrichments import EnrichmentService
  from explorer.web.services.graphs import GraphService
  from explorer.web.services.probes import Probes
  from explorer.web.services.studies import StudyService
  from explorer.web.services.traces import JobManager

T = TypeVar("T")
_MISSING = object()

class TraceCache:
  """Parsed traces by id, the most recent few, one parse per trace: readers of a trace that is not parsed yet wait for one parse and
  share it (ten cold overviews of a big program parse it once); an entry serves while the store's version of its trace (the row and the
  enrichments merged into it) is the one it was parsed at, so a write by another process is seen; an enrichment this server stores is
  merged into the cached trace (copy-on-write: readers holding the old one keep it) instead of dropping it."""
  def __init__(self, store: Store, size: int = 8):
    self.store, self.size = store, size
    self._items: collections.OrderedDict[str, tuple[Any, TraceRecord]] = collections.OrderedDict()  # id -> (store version, trace)
    self._lock = threading.Lock()
    self._parsing: dict[str, threading.Lock] = {}
    self.parses = 0  # traces parsed from the store (tests count them)
    self._derived: dict[tuple[str, Hashable], tuple[TraceRecord, Any]] = {}  # (id, what) -> (the trace it was computed from, value)
    self._deriving: dict[tuple[str, Hashable], threading.Lock] = {}
    self.derivations = 0  # values computed by derived() (tests count them)

  def derived(self, trace_id: str, trace: TraceRecord, what: Hashable, compute: Callable[[TraceRecord], T]) -> T:
    """compute(trace), once per parsed trace: what a page shows of a whole trace (a program's timeline, its kernels by line) is computed
    by the first reader of that parse, readers meanwhile wait for it, and later ones read it, until the trace changes (a new parse, or
    an enrichment merged: a new trace object). Kept for the traces this cache keeps."""
    key = (trace_id, what)
    def kept() -> Any:
      with self._lock: got = self._derived.get(key)
      return got[1] if got is not None and got[0] is trace else _MISSING
    if (value := kept()) is not _MISSING: return cast(T, value)
    with self._lock: deriving = self._deriving.setdefault(key, threading.Lock())
    with deriving:
      if (value := kept()) is not _MISSING: return cast(T, value)
      value = compute(trace)
      with self._lock:
        self.derivations += 1
        if (got := self._items.get(trace_id)) is not None and got[1] is trace: self._derived[key] = (trace, value)  # still the kept parse
    return value

  def _cached(self, trace_id: str, version: Any) -> TraceRecord | None:
    with self._lock:
      if (got := self._items.get(trace_id)) is None or got[0] != version: return None
      self._items.move_to_end(trace_id)
      return got[1]

  def get(self, trace_id: str) -> TraceRecord | None:
    if (version := self.store.trace_version(trace_id)) is None:
      self.forget(trace_id)
      return None
    if (trace := self._cached(trace_id, version)) is not None: return trace
    with self._lock: parsing = self._parsing.setdefault(trace_id, threading.Lock())
    with parsing:  # one parse at a time per trace: whoever waited here finds it cached
      if (trace := self._cached(trace_id, version)) is not None: return trace
      if (trace := self.store.get_trace(trace_id)) is None: return None
      self.parses += 1
      with self._lock:
        self._items[trace_id] = (version, trace)
        self._drop_derived(trace_id)
        while len(self._items) > self.size: self._drop_derived(self._items.popitem(last=False)[0])
    return trace

  def _drop_derived(self, trace_id: str) -> None:
    """What was derived from the trace's previous parse (called with the lock held): the old parse is not kept alive for it."""
    for k in [k for k in self._derived if k[0] == trace_id]: del self._derived[k]

  def update(self, trace_id: str, merge: Callable[[TraceRecord], TraceRecord]) -> None:
    """Something was stored into a trace (after the store wrote it): merge(trace) is the cached trace with it, at the store's version."""
    version = self.store.trace_version(trace_id)
    with self._lock:
      if (got := self._items.get(trace_id)) is None: return
      self._drop_derived(trace_id)
      if version is None: del self._items[trace_id]
      else: self._items[trace_id] = (version, merge(got[1]))

  def forget(self, trace_id: str) -> None:
    with self._lock:
      self._items.pop(trace_id, None)
      self._drop_derived(trace_id)

@dataclass
class Services:
  settings: Settings
  store: Store
  traces: TraceCache                        # stored traces, parsed
  jobs: JobManager                          # trace jobs
  graphs: GraphService
  diffs: DiffService
  enrichments: EnrichmentService            # other targets' records, analyses, compile facts: computed on first view
  studies: StudyService
  devices: DeviceCatalog | QueueDevices
  probes: Probes                            # roofline probes, one per device
  forget: Any = field(default=lambda trace_id, merge=None: None)  # drop what was rendered from a stored trace that changed (merge: how)
