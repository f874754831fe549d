"""Live classes: a row per class a teacher started (explorer.web.services.classes), holding what the presenter shows now (its state,
plain JSON, and how many moves made it) and the question it asks (with its students' answers and, once revealed, the answer), so
that a student who reconnects, or every student after a server restart, lands on it and the answers stay counted.
The presenter's key is kept as its SHA-256 only."""
from __future__ import annotations
import json
import time
from dataclasses import dataclass
from typing import Any
from explorer.store.connection import Connected, transaction

@dataclass(frozen=True)
class ClassRow:
  id: str
  key_hash: str
  state: dict[str, Any]
  seq: int
  poll: dict[str, Any] | None
  created: float
  updated: float
  ended: float | None

FIELDS = ("id", "key_hash", "state", "seq", "poll", "created", "updated", "ended")

class Classes(Connected):
  def add_class(self, class_id: str, key_hash: str, state: dict[str, Any]) -> ClassRow:
    now = time.time()
    with transaction(self._conn()) as c:
      c.execute("INSERT INTO classes (id, key_hash, state, seq, created, updated) VALUES (?,?,?,?,?,?)",
                (class_id, key_hash, json.dumps(state), 0, now, now))
    return ClassRow(class_id, key_hash, state, 0, None, now, now, None)

  def class_row(self, class_id: str) -> ClassRow | None:
    """The class's row; None for none (or one whose stored state is not a JSON object: a damaged row reads as no class)."""
    row = self._conn().execute(f"SELECT {', '.join(FIELDS)} FROM classes WHERE id = ?", (class_id,)).fetchone()
    if row is None: return None
    try: state, poll = json.loads(row[2]), json.loads(row[4]) if row[4] is not None else None
    except ValueError: return None
    if not isinstance(state, dict) or not isinstance(poll, dict | None): return None
    return ClassRow(row[0], row[1], state, row[3], poll, row[5], row[6], row[7])

  def put_class_state(self, class_id: str, state: dict[str, Any], seq: int) -> None:
    self._conn().execute("UPDATE classes SET state = ?, seq = ?, updated = ? WHERE id = ?", (json.dumps(state), seq, time.time(), class_id))

  def put_class_poll(self, class_id: str, poll: dict[str, Any] | None) -> None:
    self._conn().execute("UPDATE classes SET poll = ? WHERE id = ?", (None if poll is None else json.dumps(poll), class_id))

  def end_class(self, class_id: str) -> None:
    self._conn().execute("UPDATE classes SET ended = ? WHERE id = ? AND ended IS NULL", (time.time(), class_id))
