"""What is made when a trace is stored, so that no reader parses it for it: the trace's document as the API serves it (GET
/api/traces/ID: the trace read light, each kernel listed with its targets by name and its passes counted), kept compressed beside the
trace and good while the trace and what was merged into it since are as they were (Traces.trace_version): a 10,000-kernel program's
is 16 MB of JSON that took its first reader a parse and 0.26 s to make."""
from __future__ import annotations
import sqlite3, time, uuid, zlib
from typing import TYPE_CHECKING, Any, Mapping
from explorer.store.pieces import HEAVY, LIGHT
from explorer.version import __version__
if TYPE_CHECKING: from explorer.schema import KernelRecord, TraceRecord

DOC_V = 1  # the document's layout: a change to it makes every stored one stale

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

def made(trace: TraceRecord) -> bytes:
  """The trace's document (read light, as get_trace(light=True) reads it), without its id and url (`with_id` puts them first)."""
  return sliced_json(listed(trace), "kernels")

def version_key(row_length: int, version: tuple[Any, ...]) -> str:
  """What a stored document is good for: this explorer (its reading of stored traces), the layout, the trace's row (its length) and the
  trace's version."""
  return f"{__version__}:{DOC_V}:{row_length}:{version!r}"

KEY = "{}:document"  # its row in graph_cache (one per trace: a newer one replaces it)

def put(c: sqlite3.Connection, trace_id: str, row_length: int, version: tuple[Any, ...], doc: bytes) -> None:
  c.execute("INSERT OR REPLACE INTO graph_cache (key, trace_id, ref, kind, body, created) VALUES (?,?,?,?,?,?)",
            (KEY.format(trace_id), trace_id, version_key(row_length, version), "document", zlib.compress(doc, 1), time.time()))

def get(c: sqlite3.Connection, trace_id: str, row_length: int, version: tuple[Any, ...]) -> bytes | None:
  """The stored document where it is good for `version`; None where there is none, it is stale, or it does not decompress (a
  damaged row is dropped: it is made again)."""
  row = c.execute("SELECT ref, body FROM graph_cache WHERE key = ?", (KEY.format(trace_id),)).fetchone()
  if row is None or row[0] != version_key(row_length, version): return None
  try: doc = zlib.decompress(row[1])
  except (zlib.error, TypeError):
    c.execute("DELETE FROM graph_cache WHERE key = ?", (KEY.format(trace_id),))
    return None
  return doc if doc.startswith(b"{") and doc.endswith(b"}") else None
