"""A trace kept in pieces: each kernel's heavy part (its records per target, its UOp listing, sources and codegen passes: nearly all of
a program's bytes; and its provenance, op histogram and spec checks, which a program's repeats share: four fifths of what is left of
a kernel) is stored apart from the trace, once per distinct content, and referenced by the kernels it belongs to. A program's
repeated kernels (a training loop's steps, a model's identical layers) cost one row however often they ran, and are parsed once when
the trace is read; the trace row keeps each kernel's own fields (its position, call, buffers, times) and the schedule."""
from __future__ import annotations
import hashlib, json, sqlite3
from typing import Any, Mapping
from explorer.store.connection import StoreError

PART_FIELDS = ("targets", "uops_listing", "sources", "passes", "provenance", "ops", "spec")  # a kernel's fields kept in its part

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

def put(c: sqlite3.Connection, trace_id: str, refs: list[tuple[int, str, str]]) -> None:
  """The trace's parts (a part already stored for any trace is not written again) and its kernels' references to them."""
  forget(c, trace_id)
  c.executemany("INSERT OR IGNORE INTO kernel_parts (hash, body) VALUES (?, ?)", ((h, body) for _, h, body in refs))
  c.executemany("INSERT INTO kernel_refs (trace_id, kernel, hash) VALUES (?, ?, ?)", ((trace_id, i, h) for i, h, _ in refs))

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
  """The trace's references, and the parts no other trace references."""
  hashes = [h for (h,) in c.execute("SELECT DISTINCT hash FROM kernel_refs WHERE trace_id = ?", (trace_id,))]
  c.execute("DELETE FROM kernel_refs WHERE trace_id = ?", (trace_id,))
  c.executemany("DELETE FROM kernel_parts WHERE hash = ? AND NOT EXISTS (SELECT 1 FROM kernel_refs WHERE hash = ?)", ((h, h) for h in hashes))
