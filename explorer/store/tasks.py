"""The tasks table: every piece of background work a server accepted (a trace job, a study, an enrichment, a hand schedule), a row per
kind and id, written when accepted and again as it starts and ends (explorer.web.services.lifecycle.Journal writes them). Its states
are explorer.background's: queued -> running -> done | error | interrupted; ids of finished work keep answering after a restart."""
from __future__ import annotations
import json
import sqlite3
import time
from collections.abc import Callable
from typing import Any
from explorer.background import ACTIVE, DONE, INTERRUPTED, QUEUED, RUNNING, STATES, STUDY, UNKNOWN, TaskKind, TaskState
from explorer.store.connection import Connected, StoreError

FIELDS = ("kind", "id", "status", "label", "request", "owner", "client", "detail", "error", "created", "started", "finished")
_ACTIVE = f"status IN ({', '.join(repr(s) for s in ACTIVE)})"

def forget(c: sqlite3.Connection, kind: TaskKind, task_id: str) -> None:
  c.execute("DELETE FROM tasks WHERE kind = ? AND id = ?", (kind, task_id))

# a finished study's variants' trace ids, read in SQL from its stored result, which may be of any shape (an older or damaged row): each
# level is read only where it is what a study's result holds there (an object with an array of cases, each an object with an array of
# rows, each an object), anything else reads as nothing
STUDY_TRACES = """SELECT s.id, json_extract(r.value, '$.trace_id') FROM tasks s,
  json_each(CASE WHEN json_valid(s.result) AND json_type(s.result, '$.cases') = 'array' THEN s.result ELSE '{"cases": []}' END, '$.cases') c,
  json_each(CASE WHEN c.type = 'object' AND json_type(c.value, '$.rows') = 'array' THEN c.value ELSE '{"rows": []}' END, '$.rows') r
  WHERE s.kind = ? AND s.status = ? AND r.type = 'object'"""

def study_traces(c: sqlite3.Connection) -> dict[str, str]:
  """Trace id -> the id of the finished study that made it (a study traces each of its variants: they belong to its page)."""
  return {str(t): str(sid) for sid, t in c.execute(STUDY_TRACES, (STUDY, DONE)).fetchall() if isinstance(t, str) and t}

MAX_LABEL = 300  # a row's label as read: what a listing shows of it (labels are capped where they enter too)

def capped(text: Any, limit: int = MAX_LABEL) -> str:
  """Free text from a row, as a page may show it: a string of at most `limit` characters (an ellipsis says it was cut)."""
  said = text if isinstance(text, str) else "" if text is None else str(text)
  return said if len(said) <= limit else said[:limit - 1] + "…"

def _row(values: tuple[Any, ...]) -> dict[str, Any]:
  """A row read defensively, once: its request parsed (None where it does not parse: the work cannot run again from it), its label
  capped, and a state this version does not know read as `unknown`, its error saying what the row held."""
  row = dict(zip(FIELDS, values, strict=True))
  try: row["request"] = json.loads(row["request"]) if isinstance(row["request"], (str, bytes)) else None
  except json.JSONDecodeError: row["request"] = None
  if not isinstance(row["request"], dict): row["request"] = None
  row["label"], row["detail"] = capped(row["label"]), capped(row["detail"], 2000)
  if row["error"] is not None: row["error"] = capped(row["error"], 2000)
  if row["status"] not in STATES:
    row["error"] = f"this row's state {capped(row['status'], 40)!r} is none this version knows (a damaged or newer database)"
    row["status"] = UNKNOWN
  return row

class TaskRows(Connected):
  def put_task(self, kind: TaskKind, task_id: str, label: str, request: dict[str, Any], owner: str, status: TaskState = QUEUED,
               client: str | None = None, detail: str = "") -> None:
    """Work accepted now (running at once, or queued for its turn); a re-run replaces the row of the earlier attempt."""
    now = time.time()
    self._conn().execute("INSERT OR REPLACE INTO tasks (kind, id, status, label, request, owner, client, detail, created, started) "
                         "VALUES (?,?,?,?,?,?,?,?,?,?)", (kind, task_id, status, label, json.dumps(request, default=str), owner, client,
                                                          detail, now, now if status == RUNNING else None))

  def task_started(self, kind: TaskKind, task_id: str) -> None:
    self._conn().execute("UPDATE tasks SET status = ?, started = ? WHERE kind = ? AND id = ?", (RUNNING, time.time(), kind, task_id))

  def task_finished(self, kind: TaskKind, task_id: str, status: TaskState, error: str | None = None, result: Any = None,
                    detail: str = "") -> None:
    """How it ended, with its result (what it made, or where that is kept: a stored trace is under the task's id)."""
    self._conn().execute("UPDATE tasks SET status = ?, error = ?, result = ?, detail = ?, finished = ? WHERE kind = ? AND id = ?",
                         (status, error, None if result is None else json.dumps(result, default=str), detail, time.time(), kind, task_id))

  def get_task(self, kind: TaskKind, task_id: str, with_result: bool = False) -> dict[str, Any] | None:
    """The row ({FIELDS}, the request parsed; with_result: its result too), None for an unknown id; StoreError for a corrupt result."""
    row = self._conn().execute(f"SELECT {', '.join(FIELDS)}, result FROM tasks WHERE kind = ? AND id = ?", (kind, task_id)).fetchone()
    if row is None: return None
    got = _row(row[:-1])
    if with_result:
      try: got["result"] = row[-1] and json.loads(row[-1])
      except json.JSONDecodeError as e: raise StoreError(f"{kind} {task_id} is corrupt ({e})") from None
    return got

  def unfinished_tasks(self, kind: TaskKind, owner: str) -> list[dict[str, Any]]:
    """The queued and running tasks of this kind and owner, oldest first (without results)."""
    rows = self._conn().execute(f"SELECT {', '.join(FIELDS)} FROM tasks WHERE kind = ? AND {_ACTIVE} AND owner = ? ORDER BY created",
                                (kind, owner)).fetchall()
    return [_row(r) for r in rows]

  def recent_tasks(self, kind: TaskKind, limit: int = 50) -> list[dict[str, Any]]:
    """Newest first, without their results."""
    rows = self._conn().execute(f"SELECT {', '.join(FIELDS)} FROM tasks WHERE kind = ? ORDER BY created DESC LIMIT ?", (kind, limit)).fetchall()
    return [_row(r) for r in rows]

  def interrupt_tasks(self, kind: TaskKind, owner_gone: Callable[[str], bool], error: str) -> int:
    """Marks the queued and running tasks of this kind whose owner is gone as interrupted, saying so (error); returns how many."""
    c = self._conn()
    gone = [i for i, owner in c.execute(f"SELECT id, owner FROM tasks WHERE kind = ? AND {_ACTIVE}", (kind,)).fetchall() if owner_gone(owner)]
    for task_id in gone:
      c.execute(f"UPDATE tasks SET status = ?, error = ?, finished = ? WHERE kind = ? AND id = ? AND {_ACTIVE}",
                (INTERRUPTED, error, time.time(), kind, task_id))
    return len(gone)

  def reopen_tasks(self, kind: TaskKind, owner: str, error: str, status: TaskState) -> int:
    """Tasks of this kind and owner that were interrupted with this error (left on a job queue, seen by a server without one) are
    `status` again (queued, or running for work that runs from the start), for a server with the job queue to follow; returns how many."""
    return self._conn().execute("UPDATE tasks SET status = ?, error = NULL, finished = NULL WHERE kind = ? AND owner = ? AND status = ? "
                                "AND error = ?", (status, kind, owner, INTERRUPTED, error)).rowcount

  def study_traces(self) -> dict[str, str]: return study_traces(self._conn())
