"""The Store: one SQLite file, one connection per thread, one schema version (explorer.store.connection), and its parts, each keeping
its own tables: traces and their rewrite blobs, enrichments, cached graphs and diffs, annotations, the tasks of background work and live classes."""
from __future__ import annotations
from explorer.store.annotations import Annotations
from explorer.store.caches import Caches
from explorer.store.classes import Classes
from explorer.store.enrichments import Enrichments
from explorer.store.tasks import TaskRows
from explorer.store.traces import Traces

class Store(Traces, Enrichments, Caches, Annotations, TaskRows, Classes):
  """One SQLite file (WAL mode); one connection per thread. Store(path) creates the file, or brings an older one to this version."""
