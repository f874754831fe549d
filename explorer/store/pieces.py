"""A trace kept in pieces: each kernel's heavy part (its records per target, its UOp listing, sources and codegen passes: nearly all of
a program's bytes; and its provenance, op histogram and spec checks, which a program's repeats share: four fifths of what is left of
a kernel) is stored apart from the trace, once per distinct content, and referenced by the kernels it belongs to. A program's
repeated kernels (a training loop's steps, a model's identical layers) cost one row however often they ran, and are parsed once when
the trace is read; the trace row keeps each kernel's own fields (its position, call, buffers, times) and the schedule. A program's long
lists (its kernels' own fields, its schedule, its buffers) are kept in chunks of CHUNK items beside the row, each parsed on its own:
a reader parses a 10,000-kernel program in slices of a few milliseconds, and the server's other requests go on between them."""
from __future__ import annotations
import hashlib, json, sqlite3
from typing import Any, Mapping
from explorer.store.connection import StoreError

PART_FIELDS = ("targets", "uops_listing", "sources", "passes", "provenance", "ops", "spec")  # a kernel's fields kept in its part
CHUNKED, CHUNK = ("kernels", "schedule", "buffers"), 500  # a trace's lists kept in chunks of CHUNK items, where longer
Chunks = list[tuple[str, int, str]]  # (field, its chunk's position, the chunk's JSON)

def split(trace: Mapping[str, Any]) -> tuple[dict[str, Any], list[tuple[int, str, str]]]:
  """(the trace with its kernels' parts cut out, [(kernel position, part hash, part JSON)]): a cut field stays in its kernel as null,
  so that the kernel reads back with its fields in their order. A part's hash is its JSON's (its fields in the order they were made,
  which the pages keep: a kernel's targets in the order they were rendered); kernels that hold the very same values (a program
  scaled by repetition) are written once."""
  kernels, refs, made = [], [], {}
  for i, k in enumerate(trace.get("kernels") or []):
    if not isinstance(k, dict) or not (part := {f: k[f] for f in PART_FIELDS if f in k}):
      kernels.append(k)
      continue
    same = tuple(id(v) for v in part.values())
    if same not in made:
      body = json.dumps(part, default=str)
      made[same] = (hashlib.sha256(body.encode()).hexdigest()[:32], body)
    refs.append((i, *made[same]))
    kernels.append({f: None if f in part else v for f, v in k.items()})
  return {**trace, "kernels": kernels}, refs

def chunked(trace: Mapping[str, Any]) -> tuple[dict[str, Any], Chunks]:
  """(the trace with its long lists emptied, their chunks): a list of more than CHUNK items is [] in the row, its items in chunks."""
  rest, chunks = dict(trace), []
  for f in CHUNKED:
    if isinstance(items := trace.get(f), list) and len(items) > CHUNK:
      chunks += [(f, i // CHUNK, json.dumps(items[i:i + CHUNK], default=str)) for i in range(0, len(items), CHUNK)]
      rest[f] = []
  return rest, chunks

def put(c: sqlite3.Connection, trace_id: str, refs: list[tuple[int, str, str]], chunks: Chunks) -> None:
  """The trace's parts (a part already stored for any trace is not written again), its kernels' references to them, its chunks."""
  forget(c, trace_id)
  c.executemany("INSERT OR IGNORE INTO kernel_parts (hash, body) VALUES (?, ?)", ((h, body) for _, h, body in refs))
  c.executemany("INSERT INTO kernel_refs (trace_id, kernel, hash) VALUES (?, ?, ?)", ((trace_id, i, h) for i, h, _ in refs))
  c.executemany("INSERT INTO trace_chunks (trace_id, field, seq, body) VALUES (?, ?, ?, ?)", ((trace_id, *ch) for ch in chunks))

def unchunked(c: sqlite3.Connection, trace_id: str, trace: dict[str, Any]) -> dict[str, Any]:
  """The trace with its chunked lists put back, in place, each chunk parsed apart (a trace stored before chunks has none). A chunk
  missing, out of order, or that does not parse to a list is StoreError."""
  from pydantic_core import from_json  # as get_trace parses the row: here, not at import (trace workers never load pydantic)
  got: dict[str, list[Any]] = {}
  for f, seq, body in c.execute("SELECT field, seq, body FROM trace_chunks WHERE trace_id = ? ORDER BY field, seq", (trace_id,)):
    items = got.setdefault(f, [])
    try: chunk = from_json(body)
    except (ValueError, TypeError) as e:
      raise StoreError(f"stored trace {trace_id} is corrupt: chunk {seq} of its {f} does not parse ({e})") from None
    if f not in CHUNKED or not isinstance(chunk, list) or seq != len(items) // CHUNK or len(items) % CHUNK:
      raise StoreError(f"stored trace {trace_id} is corrupt: chunk {seq} of its {f} is out of place or not a list")
    items += chunk
  for f, items in got.items():
    if trace.get(f): raise StoreError(f"stored trace {trace_id} is corrupt: its {f} is both in its row and in chunks")
    trace[f] = items
  return trace

def joined(c: sqlite3.Connection, trace_id: str, trace: dict[str, Any]) -> dict[str, Any]:
  """The trace with its kernels' parts put back, in place (a trace stored whole, before parts, has none and reads as it was). Each
  distinct part is read and parsed once: the kernels that share it share its values, records included (what is merged into one
  kernel's records later is put on copies of them: explorer.store.enrichments.merged). A part that does not parse to an object is
  StoreError."""
  refs = c.execute("SELECT kernel, hash FROM kernel_refs WHERE trace_id = ?", (trace_id,)).fetchall()
  if not refs: return trace
  from pydantic_core import from_json  # as get_trace parses the row: here, not at import (trace workers never load pydantic)
  parts: dict[str, Any] = {}
  for h, body in c.execute("SELECT hash, body FROM kernel_parts WHERE hash IN (SELECT hash FROM kernel_refs WHERE trace_id = ?)", (trace_id,)):
    try: parts[h] = from_json(body)
    except (ValueError, TypeError) as e: raise StoreError(f"stored trace {trace_id} is corrupt: kernel part {h} does not parse ({e})") from None
  kernels = trace.get("kernels") or []
  for i, h in refs:
    if not isinstance(part := parts.get(h), dict) or not 0 <= i < len(kernels) or not isinstance(kernels[i], dict):
      raise StoreError(f"stored trace {trace_id} is corrupt: kernel {i}'s part {h} is missing or not an object")
    kernels[i].update(part)
  return trace

def forget(c: sqlite3.Connection, trace_id: str) -> None:
  """The trace's chunks and references, and the parts no other trace references."""
  c.execute("DELETE FROM trace_chunks WHERE trace_id = ?", (trace_id,))
  hashes = [h for (h,) in c.execute("SELECT DISTINCT hash FROM kernel_refs WHERE trace_id = ?", (trace_id,))]
  c.execute("DELETE FROM kernel_refs WHERE trace_id = ?", (trace_id,))
  c.executemany("DELETE FROM kernel_parts WHERE hash = ? AND NOT EXISTS (SELECT 1 FROM kernel_refs WHERE hash = ?)", ((h, h) for h in hashes))
