"""Enrichments: what was computed for a stored trace after it ran (explorer.tracing.enrichments.enrich), a row per trace, kernel, target and kind,
merged into the trace when it is read."""
from __future__ import annotations
import json
import sqlite3
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast
from explorer.stages import ENRICH_ANALYSIS, ENRICH_FACTS, ENRICH_TARGET
from explorer.store.connection import Connected, transaction
from explorer.store.rewrites import checked_locations, put_target_blobs

if TYPE_CHECKING:
  from explorer.schema import KernelRecord, TargetRecord

MERGED_KINDS = (ENRICH_TARGET, ENRICH_ANALYSIS, ENRICH_FACTS)  # the enrichments a stored trace is read with (merged)

def add_target_record(kernel: KernelRecord | dict[str, Any], target: str, rec: dict[str, Any]) -> None:
  """One kernel's record for `target` (or {"error": ...} where its codegen failed), with its source kept in `sources` too (a kernel read
  light has none: its `light` names the target instead, on a copy)."""
  if "error" in rec: kernel.setdefault("source_errors", {})[target] = rec["error"]
  elif (light := kernel.get("light")) is not None:
    kernel.setdefault("targets", {})[target] = cast("TargetRecord", rec)
    analysable = [*light.get("analysable", []), *([target] if rec.get("linear_nums") is not None else [])]
    kernel["light"] = {**light, "sources": [*light["sources"], target], "analysable": analysable}
  else: kernel.setdefault("targets", {})[target], kernel.setdefault("sources", {})[target] = cast("TargetRecord", rec), rec["source"]

def of_kind(c: sqlite3.Connection, trace_id: str, kind: str) -> dict[tuple[int, str], Any]:
  rows = c.execute("SELECT kernel, target, value FROM enrichments WHERE trace_id = ? AND kind = ?", (trace_id, kind)).fetchall()
  out = {}
  for kernel, target, value in rows:
    try: out[(int(kernel), str(target))] = json.loads(value)
    except (json.JSONDecodeError, TypeError, ValueError): continue  # a corrupt row is computed again on the next view
  return out

def _reads(adapter: Any, value: Any) -> bool:
  """Whether a stored value reads as its type (explorer.schema's, checked as a trace file is): a row that does not is left out, and
  computed again when next asked for, never merged into a page."""
  from pydantic import ValidationError
  try: adapter.validate_python(value)
  except ValidationError: return False
  return True

def merged(c: sqlite3.Connection, trace_id: str, trace: dict[str, Any]) -> dict[str, Any]:
  """The stored trace with what was computed for it since: other targets' records (kernels[i].targets, with where they ran,
  env.ran_on.targets), then the records' analyses and compile facts; each read as its type first (a damaged row is left out). Kernels
  that repeat share their records (explorer.store.pieces.joined): a kernel gets copies of its own of what changes on it."""
  rows = {kind: of_kind(c, trace_id, kind) for kind in MERGED_KINDS}
  if not any(rows.values()): return trace
  from explorer.schema import record_adapters  # here: trace workers import this module, and pydantic stays out of them
  adapters = record_adapters()
  kernels = {k.get("index"): k for k in trace["kernels"] if isinstance(k, dict)}
  for (kernel, target), got in sorted(rows[ENRICH_TARGET].items()):
    if (k := kernels.get(kernel)) is None or not isinstance(got, dict) or not isinstance(rec := got.get("record"), dict): continue
    if not _reads(adapters["record"], rec): continue
    if target not in (k.get("targets") or {}):
      k["targets"] = dict(k.get("targets") or {})
      if "sources" in k or "light" not in k: k["sources"] = dict(k.get("sources") or {})
      add_target_record(k, target, rec)
    if isinstance(by := got.get("ran_by"), str): trace.setdefault("env", {}).setdefault("ran_on", {}).setdefault("targets", {})[target] = by
  puts: tuple[tuple[str, Callable[[dict[str, Any], Any], None]], ...] = ((ENRICH_ANALYSIS, lambda rec, v: rec.update(v)),
                                                                   (ENRICH_FACTS, lambda rec, v: rec.__setitem__("compile", v)))
  for kind, put in puts:
    for (kernel, target), value in rows[kind].items():
      k = kernels.get(kernel) or {}
      if isinstance(rec := (k.get("targets") or {}).get(target), dict) and isinstance(value, dict) and _reads(adapters[kind], value):
        k["targets"] = {**k["targets"], target: (rec := dict(rec))}
        put(rec, value)
  return trace

def version(c: sqlite3.Connection, trace_id: str) -> tuple[int, float | None]:
  """The count and latest time of the enrichments merged into the trace (what a parsed copy of it is good for, with its row's time)."""
  got: tuple[int, float | None] = c.execute("SELECT count(*), max(created) FROM enrichments WHERE trace_id = ? AND kind IN (?, ?, ?)",
                                            (trace_id, *MERGED_KINDS)).fetchone()
  return got

def forget(c: sqlite3.Connection, trace_id: str) -> None:
  c.execute("DELETE FROM enrichments WHERE trace_id = ?", (trace_id,))

class Enrichments(Connected):
  def put_target_records(self, trace_id: str, target: str, records: dict[int, dict[str, Any]], key: str, rewrites: bytes,
                         ran_by: str | None = None) -> bool:
    """Kernels' records on a target computed after the trace (an enrichment, explorer.tracing.enrichments.enrich.compute_target: {kernel: record or
    {"error"}}), the rewrite blob they address (under `key`, which the records name) and where they were computed (ran_by, NAME@HOST:
    env.ran_on.targets), in one transaction; False (nothing kept) when the trace is gone. StoreError for a blob naming files elsewhere."""
    checked_locations(rewrites)
    now = time.time()
    with transaction(self._conn()) as c:
      if not self.has_trace(trace_id): return False
      c.executemany("INSERT OR REPLACE INTO enrichments (trace_id, kernel, target, kind, value, created) VALUES (?,?,?,?,?,?)",
                    [(trace_id, n, target, ENRICH_TARGET, json.dumps({"record": rec, "ran_by": ran_by}), now) for n, rec in records.items()])
      put_target_blobs(c, trace_id, {key: rewrites})
    return True

  def put_enrichments(self, trace_id: str, kind: str, values: dict[tuple[int, str], Any]) -> bool:
    """{(kernel, target): value} of one kind, in one transaction; False (nothing kept) when the trace is gone."""
    now = time.time()
    with transaction(self._conn()) as c:
      if not self.has_trace(trace_id): return False
      c.executemany("INSERT OR REPLACE INTO enrichments (trace_id, kernel, target, kind, value, created) VALUES (?,?,?,?,?,?)",
                    [(trace_id, k, t, kind, json.dumps(v), now) for (k, t), v in values.items()])
    return True

  def enrichments(self, trace_id: str, kind: str) -> dict[tuple[int, str], Any]: return of_kind(self._conn(), trace_id, kind)
