"""Traces: a row per trace (its JSON less its kernels' parts, which explorer.store.pieces keeps once per distinct content; the host's
rewrite blob; a summary for listing), read back typed, whole, with what was computed for it since merged in; the library's search
over them."""
from __future__ import annotations
import collections
import json
import logging
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast
from explorer.background import TRACE
from explorer.store import annotations as notes, caches, documents, enrichments, pieces, rewrites as blobs, tasks
from explorer.store.collector import collector_paused
from explorer.store.connection import Connected, StoreError, transaction
from explorer.store.rewrites import checked_locations
from explorer.store.tasks import capped

if TYPE_CHECKING:
  from explorer.schema import KernelRecord, TraceRecord

log = logging.getLogger(__name__)

# library search: fields kept in the summary column (older rows: read from the trace itself)
VARIANT_FILTERS = ("algo", "wino_impl", "tile", "staging", "consts", "opt")

def listing_fields(trace: Mapping[str, Any]) -> dict[str, Any]:
  """The few fields the recent-traces list shows, kept in their own column so listing never parses whole traces."""
  totals, variant = trace.get("totals") or {}, trace.get("variant") or {}
  return {"label": trace.get("label"), "preset": trace.get("preset"), "status": trace.get("status"), "kernels": totals.get("kernels"),
          "time_s": (totals.get("time_s") or {}).get("median"), "time_method": (totals.get("time_s") or {}).get("method"),
          "algo": "program" if trace.get("program") else variant.get("algo"), "device": (trace.get("env") or {}).get("device"),
          "failures": len(trace.get("failures") or []), "tinygrad": (trace.get("env") or {}).get("tinygrad"),
          **{k: variant.get(k) for k in VARIANT_FILTERS if k != "algo"}, "targets": variant.get("targets")}

def _field(name: str) -> str:
  return f"COALESCE(json_extract(summary, '$.{name}'), json_extract(trace, '$.variant.{name}'))"

def _like(text: str) -> str: return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"

def _listed(trace_id: str, created: float, preset: str | None, label: str, status: str, summary: str) -> dict[str, Any]:
  """A listing row as the library shows it, read defensively: its summary's fields where they parse, its free text capped."""
  try: extra = json.loads(summary) if isinstance(summary, (str, bytes)) else {}
  except json.JSONDecodeError: extra = {}
  extra = extra if isinstance(extra, dict) else {}
  return {**extra, **{k: capped(v, 80) for k, v in extra.items() if isinstance(v, str)}, "id": trace_id, "created": created,
          "preset": capped(preset, 40) if preset is not None else None, "label": capped(label),
          "status": "partial" if status == "error" else capped(status, 20)}  # (a trace with a failed stage, as older rows name it)

LISTED = "id, created, preset, label, status, summary"

class Traces(Connected):
  def put_trace(self, trace_id: str, trace: Mapping[str, Any], rewrites: bytes, target_rewrites: dict[str, bytes] | None = None) -> bool:
    """The trace, the host's rewrite blob and each other target's, in one transaction: a stored trace is never half-written. A blob
    whose rule locations name a file outside tinygrad and the explorer is refused (StoreError), nothing kept. True where it replaced a
    trace stored under the id before (the same computation: ids are content hashes), what was computed for that one dropped."""
    for blob in (rewrites, *(target_rewrites or {}).values()): checked_locations(blob)
    rest, parts = pieces.split(trace)
    rest, chunks = pieces.chunked(rest)
    row = (trace_id, time.time(), trace.get("preset"), trace.get("label") or trace_id, trace.get("status") or "ok", json.dumps(listing_fields(trace)),
           json.dumps(rest, default=str), rewrites)
    with transaction(self._conn()) as c:
      replaced = c.execute("SELECT 1 FROM traces WHERE id = ?", (trace_id,)).fetchone() is not None
      c.execute("INSERT OR REPLACE INTO traces (id, created, preset, label, status, summary, trace, rewrites) VALUES (?,?,?,?,?,?,?,?)", row)
      pieces.put(c, trace_id, parts, chunks)
      blobs.forget(c, trace_id)
      enrichments.forget(c, trace_id)  # they were the replaced trace's, and so were its graphs and diffs
      caches.forget(c, trace_id)
      blobs.put_target_blobs(c, trace_id, target_rewrites or {})
    self.make_document(trace_id)
    return replaced

  def make_document(self, trace_id: str) -> None:
    """Make and keep the trace's API document now (explorer.store.documents: put_trace does, once the trace is written), from the trace
    read light. A trace it cannot be made of (one without the fields a document lists: a partial one) has none kept: a reader asking
    for it gets what reading it says."""
    if (version := self.trace_version(trace_id)) is None: return
    try: doc = documents.made(trace_id, trace) if (trace := self.get_trace(trace_id, light=True)) is not None else None
    except Exception as e:  # (the trace is stored already: a document is only a reader's shortcut)
      log.warning("kernel-explorer: no API document kept for trace %s: %s", trace_id, str(e).splitlines()[0][:300] if str(e) else type(e).__name__)
      return
    if doc is not None: self.put_document(trace_id, version, doc)

  def put_document(self, trace_id: str, version: tuple[Any, ...], doc: bytes) -> None:
    """Keep `doc`, the trace's document (documents.made) as read at `version` (trace_version)."""
    documents.put(self._conn(), trace_id, self._row_length(trace_id), version, doc)

  def drop_document(self, trace_id: str) -> None: documents.drop(self._conn(), trace_id)

  def document(self, trace_id: str) -> bytes | None:
    """The trace's API document, gzipped (documents.made), where the one kept is good for the trace as it is now (its
    version, and its row's length: a row changed in place, as damage does, is not served from it); None where there is no trace, or
    none kept (a trace stored before documents), or it is stale (an enrichment merged since)."""
    if (version := self.trace_version(trace_id)) is None: return None
    return documents.get(self._conn(), trace_id, self._row_length(trace_id), version)

  def _row_length(self, trace_id: str) -> int:
    row = self._conn().execute("SELECT length(trace) FROM traces WHERE id = ?", (trace_id,)).fetchone()
    return row[0] if row is not None and row[0] is not None else -1

  def trace_version(self, trace_id: str) -> tuple[float, int, float | None] | None:
    """What a parsed copy of the trace is good for (None: no such trace): its row's time, and the count and latest time of the
    enrichments merged into it. Cheap (index lookups): a cache asks it before each use."""
    c = self._conn()
    if (row := c.execute("SELECT created FROM traces WHERE id = ?", (trace_id,)).fetchone()) is None: return None
    return (row[0], *enrichments.version(c, trace_id))

  def get_trace(self, trace_id: str, light: bool = False) -> TraceRecord | None:
    """The stored trace, as this version reads it (explorer.schema.upgrade: once, here), with its enrichments merged in. light: its
    kernels' light halves only (explorer.store.pieces: a kernel kept in a part has `light` and lacks its UOp listing, sources and
    passes, and its records theirs; `kernel_heavy` has them)."""
    with collector_paused(): return self._parsed(trace_id, light)

  def _parsed(self, trace_id: str, light: bool) -> TraceRecord | None:
    c = self._conn()
    row = c.execute("SELECT trace FROM traces WHERE id = ?", (trace_id,)).fetchone()
    if row is None: return None
    from pydantic_core import from_json  # here, not at import: a trace worker never loads pydantic (and reads no stored trace)
    from explorer.schema import upgrade
    try: trace = from_json(row[0])  # a third faster than json.loads on a big program's tens of megabytes
    except (ValueError, TypeError) as e: raise StoreError(f"stored trace {trace_id} is corrupt: its JSON does not parse ({e})") from None
    if not isinstance(trace, dict) or "spec" not in trace or not isinstance(trace.get("kernels"), list):
      raise StoreError(f"stored trace {trace_id} is corrupt: it is not a Kernel Explorer trace")
    trace = pieces.joined(c, trace_id, pieces.unchunked(c, trace_id, trace), light)
    return cast("TraceRecord", enrichments.merged(c, trace_id, dict(upgrade(trace))))  # upgraded first: enrichments land on its records

  def whole_kernels(self, trace_id: str, per: int = 50) -> Iterator[list[KernelRecord]]:
    """The trace's kernels whole (as get_trace reads them), `per` at a time: what an export of a big program streams, never the whole
    program in memory at once (a trace kept without chunks: its kernels in one slice). Reads this thread's connection
    at each step (a stream is read from whichever thread)."""
    from explorer.schema import upgrade
    if not (seqs := pieces.kernel_chunks(self._conn(), trace_id)):
      if (trace := self.get_trace(trace_id)) is not None: yield trace["kernels"]
      return
    parts: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
    for seq in seqs:
      own = pieces.kernel_chunk(self._conn(), trace_id, seq)
      for lo in range(0, len(own), per):
        c = self._conn()
        with collector_paused():  # (never across a yield: the reader may take its time)
          kernels = pieces.whole_slice(c, trace_id, own[lo:lo + per], seq * pieces.CHUNK + lo, parts)
          kernels = enrichments.merged(c, trace_id, dict(upgrade({"kernels": kernels})))["kernels"]
        yield cast("list[KernelRecord]", kernels)

  def recorded_with(self, trace_id: str) -> str | None:
    """The tinygrad version that recorded the trace (its listing's), None where there is no trace or it names none."""
    row = self._conn().execute("SELECT json_extract(summary, '$.tinygrad') FROM traces WHERE id = ?", (trace_id,)).fetchone()
    return row[0] if row is not None and isinstance(row[0], str) else None

  def stored_bytes(self, trace_id: str, light: bool = False) -> int:
    """The JSON a parse of the trace reads (its row, chunks and parts; light: their light halves), in bytes: 0 where there is none."""
    c, parts = self._conn(), "SELECT DISTINCT hash FROM kernel_refs WHERE trace_id = ?"
    size = "sum(length(CAST({} AS BLOB)))"  # bytes, without counting characters (a text's length walks it: 20 ms of a 10,000-kernel program)
    return sum(c.execute(q, (trace_id,)).fetchone()[0] or 0 for q in (
      f"SELECT {size.format('trace')} FROM traces WHERE id = ?", f"SELECT {size.format('body')} FROM trace_chunks WHERE trace_id = ?",
      f"SELECT {size.format('body')} FROM kernel_parts WHERE hash IN ({parts})",
      *(() if light else (f"SELECT {size.format('body')} FROM kernel_heavy WHERE hash IN ({parts})",))))

  def kernel_heavy(self, trace_id: str, kernel: int) -> dict[str, Any] | None:
    """Kernel `kernel`'s heavy half (explorer.store.pieces.whole puts it together with the kernel read light); None where the trace
    keeps no part for it (it was stored whole)."""
    return pieces.heavy_of(self._conn(), trace_id, kernel)

  def kernel_part(self, trace_id: str, kernel: int) -> str | None:
    """The hash of kernel `kernel`'s part (the kernels that repeat it share it); None where the trace keeps none for it."""
    return pieces.part_of(self._conn(), trace_id, kernel)

  def heavy_half(self, trace_id: str, part: str) -> dict[str, Any]:
    """Part `part`'s heavy half (its hash: kernel_part), read and parsed."""
    return pieces.heavy_half(self._conn(), trace_id, part)

  def get_rewrites(self, trace_id: str, target: str | None = None) -> bytes | None:
    """The host's rewrite blob, or another target's (by its key: the target's name for one rendered with the trace, the key a record
    computed on first view names, `cuda@3f2a...`)."""
    c = self._conn()
    if target is not None: blob = blobs.target_blob(c, trace_id, target)
    else: blob = (row := c.execute("SELECT rewrites FROM traces WHERE id = ?", (trace_id,)).fetchone()) and row[0]
    if blob is None: return None
    if not isinstance(blob, bytes): raise StoreError(f"stored rewrite blob of trace {trace_id} is corrupt: not bytes")
    return blob

  def recent(self, limit: int = 50) -> list[dict[str, Any]]:
    rows = self._conn().execute(f"SELECT {LISTED} FROM traces ORDER BY created DESC LIMIT ?", (limit,)).fetchall()
    return [_listed(*r) for r in rows]

  def search(self, text: str | None = None, preset: str | None = None, device: str | None = None, status: str | None = None,
             limit: int = 25, offset: int = 0, studies: bool = True, **variant: str | None) -> tuple[list[dict[str, Any]], int]:
    """Stored traces, newest first, filtered by label/id text, preset, device, status and variant fields (opt=beam: any width);
    studies=False leaves out the traces a finished study made (its page lists them). Returns (one page of rows shaped like recent(),
    the number of matches)."""
    if unknown := set(variant) - set(VARIANT_FILTERS): raise ValueError(f"unknown filter(s): {', '.join(sorted(unknown))}")
    where: list[str] = []
    args: list[Any] = []
    if text and "\x00" in text: where.append("0")  # SQLite's LIKE ends a pattern at NUL ("%" matched all); no label holds one
    elif text: where.append("(label LIKE ? ESCAPE '\\' OR id LIKE ? ESCAPE '\\')"); args += [_like(text), _like(text)]
    if preset: where.append("preset IS ?" if preset != "custom" else "preset IS NULL"); args += [preset] if preset != "custom" else []
    if status: where.append("status = ?"); args.append(status)
    if device: where.append("json_extract(summary, '$.device') = ?"); args.append(device)
    for k, v in variant.items():
      if not v: continue
      if k == "opt" and v == "beam": where.append(f"{_field(k)} LIKE 'beam:%'")
      else: where.append(f"{_field(k)} = ?"); args.append(v)
    c = self._conn()
    if not studies and (made := list(tasks.study_traces(c))):
      where.append(f"id NOT IN ({','.join('?' * len(made))})"); args += made
    cond = f"WHERE {' AND '.join(where)}" if where else ""
    total = c.execute(f"SELECT COUNT(*) FROM traces {cond}", args).fetchone()[0]
    rows = c.execute(f"SELECT {LISTED} FROM traces {cond} ORDER BY created DESC LIMIT ? OFFSET ?", [*args, limit, offset]).fetchall()
    return [_listed(*r) for r in rows], total

  def facets(self) -> dict[str, list[str]]:
    """The values each library filter takes in this store (for its drop-downs)."""
    c, out = self._conn(), {}
    for name, expr in [("preset", "COALESCE(preset, 'custom')"), ("device", "json_extract(summary, '$.device')"), ("status", "status"),
                       *((k, _field(k)) for k in VARIANT_FILTERS)]:
      out[name] = sorted(str(v) for (v,) in c.execute(f"SELECT DISTINCT {expr} FROM traces").fetchall() if v is not None)
    return out

  def delete_trace(self, trace_id: str) -> bool:
    """Drop a trace with everything kept for it: its blobs, enrichments, notes, cached graphs and every cached diff it is a side of.
    False: there was no such trace."""
    c = self._conn()
    gone = c.execute("DELETE FROM traces WHERE id = ?", (trace_id,)).rowcount > 0
    for part in (caches, notes, blobs, enrichments, pieces): part.forget(c, trace_id)
    if gone: tasks.forget(c, TRACE, trace_id)  # its finished job's status goes with it (GET .../status: 404)
    return gone
