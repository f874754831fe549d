"""Annotations: a teacher's notes pinned to a tour step, a graph node or a source line of a trace."""
from __future__ import annotations
import sqlite3
import time
from typing import Any
from explorer.store.connection import Connected, transaction

FIELDS = ("id", "trace_id", "anchor_kind", "anchor", "text", "created")

def forget(c: sqlite3.Connection, trace_id: str) -> None:
  c.execute("DELETE FROM annotations WHERE trace_id = ?", (trace_id,))

class Annotations(Connected):
  def annotations(self, trace_id: str) -> list[dict[str, Any]]:
    """The trace's notes, oldest first: {id, trace_id, anchor_kind (step|node|line), anchor, text, created}."""
    rows = self._conn().execute(f"SELECT {', '.join(FIELDS)} FROM annotations WHERE trace_id = ? ORDER BY created, id", (trace_id,)).fetchall()
    return [dict(zip(FIELDS, r, strict=True)) for r in rows]

  def add_annotation(self, trace_id: str, anchor_kind: str, anchor: str, text: str, max_per_trace: int | None = None) -> dict[str, Any] | None:
    """Stores one note; None (and nothing stored) when the trace already has max_per_trace notes."""
    now = time.time()
    with transaction(self._conn()) as c:
      if max_per_trace is not None and c.execute("SELECT count(*) FROM annotations WHERE trace_id = ?", (trace_id,)).fetchone()[0] >= max_per_trace:
        return None
      cur = c.execute("INSERT INTO annotations (trace_id, anchor_kind, anchor, text, created) VALUES (?,?,?,?,?)",
                      (trace_id, anchor_kind, anchor, text, now))
    return {"id": cur.lastrowid, "trace_id": trace_id, "anchor_kind": anchor_kind, "anchor": anchor, "text": text, "created": now}

  def delete_annotation(self, trace_id: str, note_id: int) -> bool:
    return self._conn().execute("DELETE FROM annotations WHERE trace_id = ? AND id = ?", (trace_id, note_id)).rowcount > 0
