"""Every stateful part of one app, in one typed place: explorer.web.app.create_app makes them, the routes reach them through one
dependency (explorer.web.http.deps.ServicesDep)."""
from __future__ import annotations
import collections, threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
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

class TraceCache:
  """Parsed traces by id, most recent few: a cached trace page should not parse its JSON again."""
  def __init__(self, store: Store, size: int = 8):
    self.store, self.size = store, size
    self._items: collections.OrderedDict[str, dict] = collections.OrderedDict()
    self._lock = threading.Lock()

  def get(self, trace_id: str) -> dict | None:
    with self._lock:
      if trace_id in self._items:
        self._items.move_to_end(trace_id)
        return self._items[trace_id]
    trace = self.store.get_trace(trace_id)
    if trace is not None:
      with self._lock:
        self._items[trace_id] = trace
        while len(self._items) > self.size: self._items.popitem(last=False)
    return trace

  def forget(self, trace_id: str) -> None:
    with self._lock: self._items.pop(trace_id, None)

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
  forget: Any = field(default=lambda trace_id: None)  # drop what was parsed or rendered from a stored trace that changed
