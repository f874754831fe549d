"""A trace kept in pieces: each kernel's part (its records per target, its UOp listing, sources and codegen passes: nearly all of a
program's bytes; and its provenance, op histogram and spec checks, which a program's repeats share: four fifths of what is left of a
kernel) is stored apart from the trace, once per distinct content, and referenced by the kernels it belongs to. A program's repeated
kernels (a training loop's steps, a model's identical layers) cost one row however often they ran, and are parsed once when the trace
is read; the trace row keeps each kernel's own fields (its position, call, buffers, times) and the schedule. A part is kept in two
halves: its light half (what the overview, search, the kernel table, the bufferize view and the kernel graph show: its records'
names, dims and figures) and its heavy half (the UOp listings, sources and passes, its records' too: what only a kernel's own page,
an export or a diff reads), so that the pages of a program parse a tenth of it (a light read) and a kernel's page one heavy half
(`heavy_of`). A program's long lists (its kernels' own fields, its schedule, its buffers) are kept in chunks of CHUNK items beside
the row, each parsed on its own: a reader parses a 10,000-kernel program in slices of a few milliseconds, and the server's other
requests go on between them."""
from __future__ import annotations
import collections
import hashlib
import json
import sqlite3
from collections.abc import Mapping
from typing import Any, cast
from explorer.store.connection import StoreError

PART_FIELDS = ("targets", "uops_listing", "sources", "passes", "provenance", "ops", "spec")  # a kernel's fields kept in its part
HEAVY = ("uops_listing", "sources", "passes")  # a part's fields in its heavy half
HEAVY_RECORD = ("uops_listing", "passes", "source", "compiled_source", "line_map", "linear_nums")  # its records' fields there
LIGHT = "light"  # what a kernel read light has of its heavy half: {"sources": its sources' targets, "passes": how many codegen passes,
                 # "analysable": the targets whose record keeps the UOp numbers an analysis is rebuilt by}
CHUNKED, CHUNK = ("kernels", "schedule", "buffers"), 500  # a trace's lists kept in chunks of CHUNK items, where longer
Chunks = list[tuple[str, int, str]]  # (field, its chunk's position, the chunk's JSON)

Ref = tuple[int, str, str, str]  # (kernel position, its part's hash, the part's light half as JSON, its heavy half)

def _without(fields: Any, names: tuple[str, ...]) -> Any:
  return {f: v for f, v in fields.items() if f not in names} if isinstance(fields, dict) else fields

def halves(part: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
  """(light, heavy) of a kernel's part. The light half has the part's fields less HEAVY, its records less HEAVY_RECORD, and LIGHT; the
  heavy half has HEAVY and, under "records", each record's fields in their order, those of the light half as null (what puts a record
  back together in its order: `record`)."""
  records: dict[str, Any] = part["targets"] if isinstance(part.get("targets"), dict) else {}
  light = _without(part, HEAVY)
  if records: light["targets"] = {t: _without(rec, HEAVY_RECORD) for t, rec in records.items()}
  sources, passes = part.get("sources"), part.get("passes")
  light[LIGHT] = {"sources": list(sources) if isinstance(sources, dict) else [], "passes": len(passes) if isinstance(passes, list) else 0,
                  "analysable": [t for t, rec in records.items() if isinstance(rec, dict) and rec.get("linear_nums") is not None]}
  heavy = {f: part[f] for f in HEAVY if f in part}
  heavy["records"] = {t: {f: rec[f] if f in HEAVY_RECORD else None for f in rec} for t, rec in records.items() if isinstance(rec, dict)}
  return light, heavy

def record(light: dict[str, Any], heavy: dict[str, Any] | None) -> dict[str, Any]:
  """A record whole again, its fields in their order: the light record's value where it has the field (what was merged into it since,
  an analysis's line map included, wins over what was stored), else the heavy half's."""
  if not heavy: return light
  return {**{f: light.get(f, v) for f, v in heavy.items()}, **{f: v for f, v in light.items() if f not in heavy}}

def whole(light: dict[str, Any], heavy: dict[str, Any]) -> dict[str, Any]:
  """A kernel (or its part) whole again from its light fields and its heavy half: HEAVY put in their places (a light kernel's are
  after its own fields), each record put back together, and a record merged into it since (another target's, computed on first view)
  with its source in `sources` too."""
  out = {f: v for f, v in light.items() if f != LIGHT} | {f: heavy[f] for f in HEAVY if f in heavy}
  records = heavy.get("records") or {}
  if isinstance(targets := light.get("targets"), dict):
    out["targets"] = {t: record(rec, records.get(t)) if isinstance(rec, dict) else rec for t, rec in targets.items()}
    if isinstance(sources := out.get("sources"), dict) and (more := {t: r["source"] for t, r in out["targets"].items()
                                                                      if t not in sources and t not in records and "source" in r}):
      out["sources"] = {**sources, **more}
  return out

def split(trace: Mapping[str, Any]) -> tuple[dict[str, Any], list[Ref]]:
  """(the trace with its kernels' parts cut out, [(kernel position, part hash, light half, heavy half)]): a cut field stays in its
  kernel as null, so that the kernel reads back with its fields in their order. A part's hash is its whole JSON's (its fields in the
  order they were made, which the pages keep: a kernel's targets in the order they were rendered); kernels that hold the very same
  values (a program scaled by repetition) are written once."""
  kernels, refs, made = [], [], {}
  for i, k in enumerate(trace.get("kernels") or []):
    if not isinstance(k, dict) or not (part := {f: k[f] for f in PART_FIELDS if f in k}):
      kernels.append(k)
      continue
    same = tuple(id(v) for v in part.values())
    if same not in made:
      light, heavy = halves(part)
      made[same] = (hashlib.sha256(json.dumps(part, default=str).encode()).hexdigest()[:32], json.dumps(light, default=str),
                    json.dumps(heavy, default=str))
    refs.append((i, *made[same]))
    kernels.append({f: None if f in part else v for f, v in k.items()})
  return {**trace, "kernels": kernels}, refs

COUNTS = "_chunked"  # the row's {field: its length} of the lists kept in chunks: a chunk missing at the end is seen

def chunked(trace: Mapping[str, Any]) -> tuple[dict[str, Any], Chunks]:
  """(the trace with its long lists emptied, their chunks): a list of more than CHUNK items is [] in the row, its items in chunks,
  and its length in the row's COUNTS."""
  rest, chunks, counts = dict(trace), [], {}
  for f in CHUNKED:
    if isinstance(items := trace.get(f), list) and len(items) > CHUNK:
      chunks += [(f, i // CHUNK, json.dumps(items[i:i + CHUNK], default=str)) for i in range(0, len(items), CHUNK)]
      rest[f], counts[f] = [], len(items)
  if counts: rest[COUNTS] = counts
  return rest, chunks

def _corrupt(trace_id: str, what: str) -> StoreError: return StoreError(f"stored trace {trace_id} is corrupt: {what}")

def _checked_chunk(trace_id: str, f: str, seq: int, chunk: Any, before: int) -> list[Any]:
  """A parsed chunk, in its place (`before` items of its list read ahead of it), a list of JSON objects; else StoreError."""
  if f not in CHUNKED or not isinstance(chunk, list) or seq != before // CHUNK or before % CHUNK:
    raise _corrupt(trace_id, f"chunk {seq} of its {f} is out of place or not a list")
  if not all(isinstance(item, dict) for item in chunk): raise _corrupt(trace_id, f"chunk {seq} of its {f} holds items that are not records")
  return chunk

def counted(trace_id: str, f: str, got: int, counts: Any) -> None:
  """StoreError where the row says its list `f` has another length than the `got` items its chunks hold (a row stored before
  COUNTS says nothing)."""
  if isinstance(counts, dict) and f in counts and counts[f] != got:
    raise _corrupt(trace_id, f"{got} of its {counts[f]} {f} items are kept: a chunk is missing")

def put(c: sqlite3.Connection, trace_id: str, refs: list[Ref], chunks: Chunks) -> None:
  """The trace's parts (a part already stored for any trace is not written again), its kernels' references to them, its chunks."""
  forget(c, trace_id)
  c.executemany("INSERT OR IGNORE INTO kernel_parts (hash, body) VALUES (?, ?)", ((h, light) for _, h, light, _ in refs))
  c.executemany("INSERT OR IGNORE INTO kernel_heavy (hash, body) VALUES (?, ?)", ((h, heavy) for _, h, _, heavy in refs))
  c.executemany("INSERT INTO kernel_refs (trace_id, kernel, hash) VALUES (?, ?, ?)", ((trace_id, i, h) for i, h, _, _ in refs))
  c.executemany("INSERT INTO trace_chunks (trace_id, field, seq, body) VALUES (?, ?, ?, ?)", ((trace_id, *ch) for ch in chunks))

def unchunked(c: sqlite3.Connection, trace_id: str, trace: dict[str, Any]) -> dict[str, Any]:
  """The trace with its chunked lists put back, in place, each chunk parsed apart (a trace stored before chunks has none). A chunk
  missing, out of order, or that does not parse to a list is StoreError."""
  from pydantic_core import from_json  # as get_trace parses the row: here, not at import (trace workers never load pydantic)
  got: dict[str, list[Any]] = {}
  counts = trace.pop(COUNTS, None)
  for f, seq, body in c.execute("SELECT field, seq, body FROM trace_chunks WHERE trace_id = ? ORDER BY field, seq", (trace_id,)):
    items = got.setdefault(f, [])
    try: chunk = from_json(body)
    except (ValueError, TypeError) as e: raise _corrupt(trace_id, f"chunk {seq} of its {f} does not parse ({e})") from None
    items += _checked_chunk(trace_id, f, seq, chunk, len(items))
  for f in CHUNKED: counted(trace_id, f, len(got.get(f, [])), counts)
  for f, items in got.items():
    if trace.get(f): raise _corrupt(trace_id, f"its {f} is both in its row and in chunks")
    trace[f] = items
  return trace

def _parsed(trace_id: str, what: str, body: str) -> dict[str, Any]:
  from pydantic_core import from_json  # as get_trace parses the row: here, not at import (trace workers never load pydantic)
  try: got = from_json(body)
  except (ValueError, TypeError) as e: raise StoreError(f"stored trace {trace_id} is corrupt: {what} does not parse ({e})") from None
  if not isinstance(got, dict): raise StoreError(f"stored trace {trace_id} is corrupt: {what} is not an object")
  return got

def _whole_part(trace_id: str, h: str, body: str, heavy: str | None) -> dict[str, Any]:
  """A part whole from its stored light half and heavy half (a part stored whole, before halves, has no heavy half)."""
  part = _parsed(trace_id, f"kernel part {h}", body)
  if heavy is not None: return whole(part, _parsed(trace_id, f"kernel part {h}'s heavy half", heavy))
  if LIGHT in part: raise _no_heavy_half(trace_id, h)
  return part

def _whole_parts(c: sqlite3.Connection, trace_id: str, hashes: str, args: Any) -> dict[str, dict[str, Any]]:
  """The parts whose hashes the SQL `hashes` selects (a subquery or ?-marks, with args), each whole."""
  rows = c.execute(f"SELECT p.hash, p.body, h.body FROM kernel_parts p LEFT JOIN kernel_heavy h ON h.hash = p.hash WHERE p.hash IN ({hashes})", args)
  return {h: _whole_part(trace_id, h, body, heavy) for h, body, heavy in rows}

def _light(part: dict[str, Any]) -> dict[str, Any]:
  """A part's light half: as stored, or cut from a part stored whole (before halves: it has no LIGHT)."""
  return part if LIGHT in part else halves(part)[0]

def joined(c: sqlite3.Connection, trace_id: str, trace: dict[str, Any], light: bool = False) -> dict[str, Any]:
  """The trace with its kernels' parts put back, in place (a trace stored whole, before parts, has none and reads as it was); light:
  their light halves only, each such kernel without HEAVY and with LIGHT (a kernel of schema 1, without records: whole). Each distinct
  part is read and parsed once: the kernels that share it share its values, records included (what is merged into one kernel's
  records later is put on copies of them: explorer.store.enrichments.merged). A part that does not parse to an object is StoreError."""
  refs = c.execute("SELECT kernel, hash FROM kernel_refs WHERE trace_id = ?", (trace_id,)).fetchall()
  if not refs: return trace
  mine = "SELECT hash FROM kernel_refs WHERE trace_id = ?"
  if not light: parts = _whole_parts(c, trace_id, mine, (trace_id,))
  else:
    parts = {h: _light(_parsed(trace_id, f"kernel part {h}", body))
             for h, body in c.execute(f"SELECT hash, body FROM kernel_parts WHERE hash IN ({mine})", (trace_id,))}
    if older := [h for h, part in parts.items() if "targets" not in part]:  # schema 1: its record is made from its own fields: whole
      parts.update(_whole_parts(c, trace_id, ",".join("?" * len(older)), older))
  kernels = trace.get("kernels") or []
  for i, h in refs:
    if (got := parts.get(h)) is None or not 0 <= i < len(kernels) or not isinstance(kernels[i], dict):
      raise StoreError(f"stored trace {trace_id} is corrupt: kernel {i}'s part {h} is missing or not an object")
    kernels[i].update(got)
    if LIGHT in got:
      for f in HEAVY: kernels[i].pop(f, None)
  return trace

def kernel_chunks(c: sqlite3.Connection, trace_id: str) -> list[int]:
  """The positions of the trace's chunks of kernels, in order ([]: its kernels are in its row); StoreError where the row says it
  has more or fewer (a chunk missing at the end)."""
  seqs = [seq for (seq,) in c.execute("SELECT seq FROM trace_chunks WHERE trace_id = ? AND field = 'kernels' ORDER BY seq", (trace_id,))]
  row = c.execute(f"SELECT json_extract(trace, '$.{COUNTS}.kernels') FROM traces WHERE id = ?", (trace_id,)).fetchone()
  if row is not None and isinstance(n := row[0], int) and len(seqs) != -(-n // CHUNK):
    raise _corrupt(trace_id, f"its kernels keep {len(seqs)} of their {-(-n // CHUNK)} chunks")
  return seqs

def kernel_chunk(c: sqlite3.Connection, trace_id: str, seq: int) -> list[Any]:
  """Chunk `seq` of the trace's kernels as stored: their own fields, their parts' fields null."""
  from pydantic_core import from_json  # as get_trace parses the row: here, not at import (trace workers never load pydantic)
  row = c.execute("SELECT body FROM trace_chunks WHERE trace_id = ? AND field = 'kernels' AND seq = ?", (trace_id, seq)).fetchone()
  try: kernels = from_json(row[0]) if row is not None else None
  except (ValueError, TypeError): kernels = None
  if not isinstance(kernels, list): raise _corrupt(trace_id, f"chunk {seq} of its kernels is missing or not a list")
  return _checked_chunk(trace_id, "kernels", seq, kernels, seq * CHUNK)

def whole_slice(c: sqlite3.Connection, trace_id: str, kernels: list[Any], first: int, parts: collections.OrderedDict[str, dict[str, Any]],
                keep: int = 64) -> list[Any]:
  """kernels (the trace's from position `first` on, as stored) each whole, in place: its part put back, as `joined` does. Parts are
  read once across calls: `parts` keeps the last `keep` of them, so a program's repeated kernels are parsed once and memory stays
  bounded whatever its length."""
  refs = c.execute("SELECT kernel, hash FROM kernel_refs WHERE trace_id = ? AND kernel >= ? AND kernel < ?",
                   (trace_id, first, first + len(kernels))).fetchall()
  if wanted := sorted({h for _, h in refs} - set(parts)): parts.update(_whole_parts(c, trace_id, ",".join("?" * len(wanted)), wanted))
  for i, h in refs:
    if (part := parts.get(h)) is None or not isinstance(kernels[i - first], dict):
      raise StoreError(f"stored trace {trace_id} is corrupt: kernel {i}'s part {h} is missing or not an object")
    parts.move_to_end(h)
    kernels[i - first].update(part)
  while len(parts) > keep: parts.popitem(last=False)
  return kernels

def part_of(c: sqlite3.Connection, trace_id: str, kernel: int) -> str | None:
  """The hash of kernel `kernel`'s part; None where the trace keeps no part for it."""
  row = c.execute("SELECT hash FROM kernel_refs WHERE trace_id = ? AND kernel = ?", (trace_id, kernel)).fetchone()
  return cast("str | None", row and row[0])

def heavy_half(c: sqlite3.Connection, trace_id: str, h: str) -> dict[str, Any]:
  """Part h's heavy half (`whole` puts it together with a kernel read light: the same for every kernel that shares the part)."""
  row = c.execute("SELECT p.body, h.body FROM kernel_parts p LEFT JOIN kernel_heavy h ON h.hash = p.hash WHERE p.hash = ?", (h,)).fetchone()
  if row is None: raise StoreError(f"stored trace {trace_id} is corrupt: its kernel part {h} is missing")
  body, heavy = row
  if heavy is not None: return _parsed(trace_id, f"kernel part {h}'s heavy half", heavy)
  if LIGHT in (part := _parsed(trace_id, f"kernel part {h}", body)): raise _no_heavy_half(trace_id, h)
  return halves(part)[1]

def heavy_of(c: sqlite3.Connection, trace_id: str, kernel: int) -> dict[str, Any] | None:
  """Kernel `kernel`'s heavy half; None where the trace keeps no part for it."""
  return None if (h := part_of(c, trace_id, kernel)) is None else heavy_half(c, trace_id, h)

def _no_heavy_half(trace_id: str, h: str) -> StoreError:
  return StoreError(f"stored trace {trace_id} is corrupt: kernel part {h}'s heavy half is missing")

def forget(c: sqlite3.Connection, trace_id: str) -> None:
  """The trace's chunks and references, and the parts no other trace references."""
  c.execute("DELETE FROM trace_chunks WHERE trace_id = ?", (trace_id,))
  hashes = [h for (h,) in c.execute("SELECT DISTINCT hash FROM kernel_refs WHERE trace_id = ?", (trace_id,))]
  c.execute("DELETE FROM kernel_refs WHERE trace_id = ?", (trace_id,))
  for table in ("kernel_parts", "kernel_heavy"):
    c.executemany(f"DELETE FROM {table} WHERE hash = ? AND NOT EXISTS (SELECT 1 FROM kernel_refs WHERE hash = ?)", ((h, h) for h in hashes))
