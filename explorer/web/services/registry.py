"""Every stateful part of one app, in one typed place: explorer.web.app.create_app makes them, the routes reach them through one
dependency (explorer.web.http.deps.ServicesDep)."""
from __future__ import annotations
import collections
import logging
import sqlite3
import threading
import zlib
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast
from explorer.schema import KernelRecord, TraceRecord
from explorer.settings import Settings
from explorer.store import Store, StoreError, documents
from explorer.store.collector import collector_paused
from explorer.store.pieces import whole
from explorer.text import one_line

if TYPE_CHECKING:
  from explorer.web.services.classes import ClassService
  from explorer.web.services.devices import DeviceCatalog, QueueDevices
  from explorer.web.services.diffs import DiffService
  from explorer.web.services.enrichments import EnrichmentService
  from explorer.web.services.graphs import GraphService
  from explorer.web.services.probes import Probes
  from explorer.web.services.studies import StudyService
  from explorer.web.services.traces import JobManager

T = TypeVar("T")
_MISSING = object()
log = logging.getLogger(__name__)

OPENED_KEPT = 256  # kept documents seen to open, by trace and CRC
DOCUMENT_AFTER_S = 2.0  # a document made stale by what this server stored is made again this long after the last such write
HEAVY_KEPT = 64  # kernels' heavy halves kept parsed (by part: content-addressed, the same for every trace that holds the part)

class TraceCache:
  """Parsed traces by id, the most recent few, one parse per trace and kind (whole, or light: its kernels' light halves, what the
  overview, search, the kernel table, the bufferize view and the kernel graph read; a kernel's page adds its own heavy half, `kernel`):
  readers of a trace that is not parsed yet wait for one parse and share it (ten cold overviews of a big program parse it once); an
  entry serves while the store's version of its trace (the row and the enrichments merged into it) is the one it was parsed at, so a
  write by another process is seen; an enrichment this server stores is merged into the cached trace (copy-on-write: readers holding
  the old one keep it) instead of dropping it."""
  def __init__(self, store: Store, size: int = 8, freeze_over: int = 0):
    """freeze_over: a parse of more stored bytes than this is frozen out of the garbage collector's walks (explorer.store.collector;
    0: none)."""
    self.store, self.size, self.freeze_over = store, size, freeze_over
    # (id, light) -> (version, trace, as stored: read from the store, not merged into since in memory, `update`)
    self._items: collections.OrderedDict[tuple[str, bool], tuple[Any, TraceRecord, bool]] = collections.OrderedDict()
    self._lock = threading.Lock()
    self._parsing: dict[tuple[str, bool], threading.Lock] = {}
    self.parses = self.whole_parses = self.heavy_reads = 0  # traces parsed from the store, those whole, kernels' heavy halves read (tests count them)
    self.documents_read = 0  # API documents served as stored, without a parse
    # (id, light, what) -> (the trace it was computed from, value): a whole parse's and a light one's apart (a page of each, in turn,
    # would otherwise compute it again each time)
    self._derived: dict[tuple[str, bool, Hashable], tuple[TraceRecord, Any]] = {}
    self._deriving: dict[tuple[str, bool, Hashable], threading.Lock] = {}
    self.derivations = 0  # values computed by derived() (tests count them)
    self._heavy: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()  # part hash -> its heavy half, parsed
    self._opened: collections.OrderedDict[tuple[str, int], None] = collections.OrderedDict()  # kept documents seen to open
    self._remakes: dict[str, threading.Timer] = {}  # trace id -> the remake of its stale document, waiting (stale_document)
    self.busy: Callable[[], bool] = lambda: False  # whether more may be stored into traces soon (their remakes wait for it to end)
    self.documents_made = 0  # documents made again after this server stored into their traces (tests count them)

  def derived(self, trace_id: str, trace: TraceRecord, what: Hashable, compute: Callable[[TraceRecord], T]) -> T:
    """compute(trace), once per parsed trace: what a page shows of a whole trace (a program's timeline, its kernels by line) is computed
    by the first reader of that parse, readers meanwhile wait for it, and later ones read it, until the trace changes (a new parse, or
    an enrichment merged: a new trace object). Kept for the traces this cache keeps."""
    with self._lock: light = next((kind for (tid, kind), got in self._items.items() if got[1] is trace), False)
    key = (trace_id, light, what)
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
        if any(got[1] is trace for got in self._items.values()): self._derived[key] = (trace, value)  # still a kept parse
    return value

  def _cached(self, key: tuple[str, bool], version: Any) -> TraceRecord | None:
    with self._lock:
      if (got := self._items.get(key)) is None or got[0] != version: return None
      self._items.move_to_end(key)
      return got[1]

  def get(self, trace_id: str, light: bool = False) -> TraceRecord | None:
    """The trace, parsed whole or light (explorer.store.Store.get_trace); None where there is none."""
    if (version := self.store.trace_version(trace_id)) is None:
      self.forget(trace_id)
      return None
    key = (trace_id, light)
    if (trace := self._cached(key, version)) is not None: return trace
    with self._lock: parsing = self._parsing.setdefault(key, threading.Lock())
    with parsing:  # one parse at a time per trace and kind: whoever waited here finds it cached
      if (trace := self._cached(key, version)) is not None: return trace
      big = self.freeze_over > 0 and self.store.stored_bytes(trace_id, light) > self.freeze_over
      with collector_paused(freeze=big):
        if (trace := self.store.get_trace(trace_id, light)) is None: return None
      self.parses += 1
      self.whole_parses += not light
      with self._lock:
        self._items[key] = (version, trace, True)
        while len(self._items) > self.size: self._items.popitem(last=False)
        self._drop_derived()
    return trace

  def document(self, trace_id: str) -> bytes | None:
    """The trace's API document, gzipped (explorer.store.documents): as the store keeps it where it is good for the trace
    as it is (no parse: `documents_read` counts them; opened once per server to see that it is one: a kept one that is not is dropped);
    else made from the light parse and kept for the next reader, at the parse's version. None where there is no trace."""
    if (doc := self.store.document(trace_id)) is not None:
      if self._opens(trace_id, doc):
        self.documents_read += 1
        return doc
      self.store.drop_document(trace_id)
    return self._made(trace_id)

  def _opens(self, trace_id: str, doc: bytes) -> bool:
    """Whether a kept document is gzip that opens (each one checked once: a 10,000-kernel program's takes about 50 ms)."""
    key = (trace_id, zlib.crc32(doc))
    with self._lock:
      if key in self._opened: return True
    try: documents.opened(doc)
    except (OSError, EOFError, zlib.error) as e:
      log.warning("kernel-explorer: trace %s's kept document does not open (%s): made again", trace_id, one_line(e))
      return False
    with self._lock:
      self._opened[key] = None
      while len(self._opened) > OPENED_KEPT: self._opened.popitem(last=False)
    return True

  def _made(self, trace_id: str) -> bytes | None:
    """The document made from the light parse, and kept for the next reader where the store can keep it now."""
    if (trace := self.get(trace_id, light=True)) is None: return None
    doc = documents.made(trace_id, trace)
    with self._lock: got = self._items.get((trace_id, True))
    if got is not None and got[1] is trace and got[2]:  # (a parse, as stored then)
      try: self.store.put_document(trace_id, got[0], doc)
      except sqlite3.OperationalError as e:  # the disk full, say: readers go on, each making it
        log.warning("kernel-explorer: trace %s's document not kept (%s): made again by its next reader", trace_id, one_line(e))
    return doc

  def stale_document(self, trace_id: str, after_s: float = DOCUMENT_AFTER_S) -> None:
    """This server stored into the trace (an enrichment merged): its kept document, stale now, is made again from the store, in a
    thread, `after_s` after the last such write and once nothing more may be stored soon (`busy`), so that the next server's first
    reader of it, or this one's, does not make it (a 10,000-kernel program's light parse and document: 0.3 s that every reader
    arriving with it waited on)."""
    timer = threading.Timer(after_s, self._remake_document, (trace_id, after_s))
    timer.daemon = True
    with self._lock:
      if (waiting := self._remakes.pop(trace_id, None)) is not None: waiting.cancel()
      self._remakes[trace_id] = timer
    timer.start()

  def _remake_document(self, trace_id: str, after_s: float) -> None:
    if self.busy():
      self.stale_document(trace_id, after_s)
      return
    with self._lock:
      if self._remakes.get(trace_id) is threading.current_thread(): del self._remakes[trace_id]
    try:
      if self.store.document(trace_id) is not None: return  # made meanwhile
      self.store.make_document(trace_id)  # (none where the trace is gone)
      self.documents_made += 1
    except (sqlite3.Error, StoreError) as e:  # (the disk full, say: its next reader makes it)
      log.warning("kernel-explorer: trace %s's document not made again (%s): its next reader makes it", trace_id, one_line(e))

  def close(self) -> None:
    """Remakes still waiting are dropped (a stale document is made by its next reader)."""
    with self._lock: waiting, self._remakes = list(self._remakes.values()), {}
    for timer in waiting: timer.cancel()

  def kernel(self, trace_id: str, trace: TraceRecord, n: int) -> KernelRecord:
    """Kernel n of the trace (read whole or light), whole: a kernel read light put together with its heavy half (one row read, the last
    HEAVY_KEPT kept: what a program's repeats share is read once by a diff or an export of it)."""
    k = trace["kernels"][n]
    if "light" not in k: return k
    if (part := self.store.kernel_part(trace_id, n)) is None:
      raise StoreError(f"stored trace {trace_id} is corrupt: kernel {n} was read light but keeps no part")
    with self._lock:
      if (heavy := self._heavy.get(part)) is not None: self._heavy.move_to_end(part)
    if heavy is None:
      self.heavy_reads += 1
      heavy = self.store.heavy_half(trace_id, part)
      with self._lock:
        self._heavy[part] = heavy
        while len(self._heavy) > HEAVY_KEPT: self._heavy.popitem(last=False)
    return cast(KernelRecord, whole(cast(dict[str, Any], k), heavy))

  def with_kernels(self, trace_id: str, kernels: Iterable[int] | None) -> TraceRecord | None:
    """The trace read light with these kernels whole (what work on a few kernels reads: their sources, passes, listings); None: all of
    it, read whole."""
    if kernels is None: return self.get(trace_id)
    if (trace := self.get(trace_id, light=True)) is None: return None
    ks = list(trace["kernels"])
    for n in kernels:
      if 0 <= n < len(ks): ks[n] = self.kernel(trace_id, trace, n)
    return {**trace, "kernels": ks}

  def _drop_derived(self) -> None:
    """What was derived from parses no longer kept (called with the lock held): an old parse is not kept alive for it."""
    kept = {id(got[1]) for got in self._items.values()}
    for k in [k for k, (trace, _) in self._derived.items() if id(trace) not in kept]: del self._derived[k]

  def update(self, trace_id: str, merge: Callable[[TraceRecord], TraceRecord]) -> None:
    """Something was stored into a trace (after the store wrote it): merge(trace) is each cached parse of it with it, at the store's
    version."""
    version = self.store.trace_version(trace_id)
    with self._lock:
      for key in [k for k in self._items if k[0] == trace_id]:
        if version is None: del self._items[key]
        else:
          # good for `version` as far as this server knows (another process may have stored more meanwhile): not as stored
          self._items[key] = (version, merge(self._items[key][1]), False)
      self._drop_derived()

  def forget(self, trace_id: str) -> None:
    with self._lock:
      for key in [k for k in self._items if k[0] == trace_id]: del self._items[key]
      self._drop_derived()

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
  classes: ClassService                     # live classes: a presenter drives its students' browsers
  forget: Any = field(default=lambda trace_id, merge=None: None)  # drop what was rendered from a stored trace that changed (merge: how)
