"""What is made when a trace is stored, so that no reader parses it for it: the trace's document as the API serves it (GET
/api/traces/ID: the trace read light, each kernel listed with its targets by name and its passes counted), kept gzipped beside the
trace, as a client that takes gzip is sent it, and good while the trace and what was merged into it since are as they were
(Traces.trace_version): a 10,000-kernel program's is 16 MB of JSON that took its first reader a parse and 0.26 s to make, and each
reader after it 0.1 s more to open, put its id first and gzip again."""
from __future__ import annotations
import contextlib
import gzip
import sqlite3
import time
import uuid
import zlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from explorer.store.keys import trace_path
from explorer.store.pieces import HEAVY, LIGHT
from explorer.version import __version__

if TYPE_CHECKING:
  from explorer.schema import KernelRecord, TraceRecord

DOC_V = 2  # the document's layout (2: gzipped, its id and url in it): a change to it makes every stored one stale

def listed_kernel(kernel: KernelRecord) -> dict[str, Any]:
  """The kernel as the API lists it: its targets by name, its passes counted (a kernel read light has both in `light`)."""
  targets, passes = (kernel["light"]["sources"], kernel["light"]["passes"]) if LIGHT in kernel else (kernel["sources"], len(kernel["passes"]))
  return {k: v for k, v in kernel.items() if k not in HEAVY and k != LIGHT} | {"targets": sorted(targets), "n_passes": passes}

def listed(trace: TraceRecord) -> dict[str, Any]:
  """The trace without the heavy per-kernel fields (sources, UOp listings, passes: under /kernels/{n}) and its scheduler's passes; and
  without an "id" or "url" of its own (a hand-made trace's: the document's are the store's, put first by with_id)."""
  sched: dict[str, Any] = dict(trace["scheduler"] or {})
  sched.pop("passes", None)
  if "groups" in sched: sched["groups"] = [{"name": g["name"], "passes": len(g["passes"])} for g in sched["groups"]]
  return {**{k: v for k, v in trace.items() if k not in ("id", "url")}, "kernels": [listed_kernel(k) for k in trace["kernels"]],
          "scheduler": sched}

def with_id(trace_id: str, url: str, doc: bytes) -> bytes:
  """`doc` (a JSON object's bytes, as sliced_json writes them) with "id" and "url" first: to_json({"id", "url", **its object})."""
  from pydantic_core import to_json  # (not at import: a trace worker never loads pydantic)
  head = b'{"id":' + to_json(trace_id) + b',"url":' + to_json(url)
  return head + (b"," + doc[1:] if doc != b"{}" else b"}")

JSON_SLICE = 500  # items of a long list encoded per call (a 10,000-kernel program's kernels: about 5 ms a slice)

def sliced_json(doc: Mapping[str, Any], field: str, per: int = JSON_SLICE) -> bytes:
  """to_json(doc), byte for byte, with its list `field` encoded `per` items at a time: pydantic-core's encoder holds the interpreter
  for the whole of one call (a 10,000-kernel program's trace, 16 MB, was 150 ms that the event loop and every other request waited
  on, though it ran in a thread); between slices they go on."""
  from pydantic_core import to_json
  items = doc.get(field)
  if not isinstance(items, list) or len(items) <= per: return to_json(doc)
  mark = to_json(token := f"kernel-explorer-slices-{uuid.uuid4().hex}")
  outline = to_json({**doc, field: token})
  if outline.count(mark) != 1: return to_json(doc)  # the token elsewhere in doc: never in practice, but then whole
  body = b"[" + b",".join(to_json(items[i:i + per])[1:-1] for i in range(0, len(items), per)) + b"]"
  return outline.replace(mark, body)

def made(trace_id: str, trace: TraceRecord) -> bytes:
  """The trace's document (read light, as get_trace(light=True) reads it), gzipped at level 1 (16 MB in 56 ms to 2.1 MB; level 6
  took 182 ms to 1.5 MB): its id and its page's address first, the trace as `listed` after them."""
  return gzip.compress(with_id(trace_id, trace_path(trace_id), sliced_json(listed(trace), "kernels")), compresslevel=1, mtime=0)

def opened(doc: bytes) -> bytes:
  """A document as `made` keeps it, as JSON (for a client that does not take gzip)."""
  return gzip.decompress(doc)

def version_key(row_length: int, version: tuple[Any, ...]) -> str:
  """What a stored document is good for: this explorer (its reading of stored traces), the layout, the trace's row (its length) and the
  trace's version."""
  return f"{__version__}:{DOC_V}:{row_length}:{version!r}"

def _ref(row_length: int, version: tuple[Any, ...], doc: bytes) -> str:
  """The row's ref: what it is good for, and the CRC-32 of its bytes (a client is sent them as they are: never a damaged row)."""
  return f"{version_key(row_length, version)}:{zlib.crc32(doc):08x}"

KEY = "{}:document"  # its row in graph_cache (one per trace: a newer one replaces it)

def put(c: sqlite3.Connection, trace_id: str, row_length: int, version: tuple[Any, ...], doc: bytes) -> None:
  c.execute("INSERT OR REPLACE INTO graph_cache (key, trace_id, ref, kind, body, created) VALUES (?,?,?,?,?,?)",
            (KEY.format(trace_id), trace_id, _ref(row_length, version, doc), "document", doc, time.time()))

GZIP_MAGIC = b"\x1f\x8b"

def get(c: sqlite3.Connection, trace_id: str, row_length: int, version: tuple[Any, ...]) -> bytes | None:
  """The stored document (as `made` made it) where it is good for `version`; None where there is none, it is stale, or its bytes are
  not those stored or not gzip (a damaged row is dropped: it is made again)."""
  row = c.execute("SELECT ref, body FROM graph_cache WHERE key = ?", (KEY.format(trace_id),)).fetchone()
  if row is None or not isinstance(row[0], str) or not row[0].startswith(version_key(row_length, version) + ":"): return None
  if not isinstance(row[1], bytes) or row[0] != _ref(row_length, version, row[1]) or not row[1].startswith(GZIP_MAGIC):
    drop(c, trace_id)
    return None
  return row[1]

def drop(c: sqlite3.Connection, trace_id: str) -> None:
  """Forget the kept document (a reader makes it again); a store that cannot be written now keeps it, and it is stale or refused anyway."""
  with contextlib.suppress(sqlite3.OperationalError): c.execute("DELETE FROM graph_cache WHERE key = ?", (KEY.format(trace_id),))
