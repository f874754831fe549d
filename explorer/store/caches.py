"""What is cached beside the traces, computed again when gone: laid-out graphs (expanded graph JSON and SVG, per trace and graph
reference) and diffs of two traces (structural diffs, graph diffs, timings and output comparisons)."""
from __future__ import annotations
import json
import sqlite3
import time
from typing import Any
from explorer.store.connection import Connected

def forget(c: sqlite3.Connection, trace_id: str) -> None:
  """Drop the trace's cached graphs and every cached diff it is a side of."""
  c.execute("DELETE FROM graph_cache WHERE trace_id = ?", (trace_id,))
  c.execute("DELETE FROM diff_cache WHERE a = ? OR b = ?", (trace_id, trace_id))

class Caches(Connected):
  # ***** graph cache *****

  def put_cached(self, trace_id: str, ref: str, kind: str, body: Any) -> None:
    text = body if isinstance(body, str) else json.dumps(body)
    self._conn().execute("INSERT OR REPLACE INTO graph_cache (key, trace_id, ref, kind, body, created) VALUES (?,?,?,?,?,?)",
                         (f"{trace_id}:{kind}:{ref}", trace_id, ref, kind, text, time.time()))

  def get_cached(self, trace_id: str, ref: str, kind: str) -> str | None:
    row = self._conn().execute("SELECT body FROM graph_cache WHERE key = ?", (f"{trace_id}:{kind}:{ref}",)).fetchone()
    return None if row is None else row[0]

  def get_cached_json(self, trace_id: str, ref: str, kind: str) -> Any:
    """The cached value, or None where there is none or it does not parse (a damaged row is dropped: it is computed again)."""
    if (text := self.get_cached(trace_id, ref, kind)) is None: return None
    try: return json.loads(text)
    except json.JSONDecodeError:
      self._conn().execute("DELETE FROM graph_cache WHERE key = ?", (f"{trace_id}:{kind}:{ref}",))
      return None

  def clear_cache(self, trace_id: str | None = None) -> None:
    if trace_id is None: self._conn().execute("DELETE FROM graph_cache")
    else: self._conn().execute("DELETE FROM graph_cache WHERE trace_id = ?", (trace_id,))

  # ***** diff cache *****

  def put_diff(self, a: str, b: str, kind: str, body: Any) -> None:
    self._conn().execute("INSERT OR REPLACE INTO diff_cache (key, a, b, kind, body, created) VALUES (?,?,?,?,?,?)",
                         (f"{a}:{b}:{kind}", a, b, kind, json.dumps(body, default=str), time.time()))

  def get_diff(self, a: str, b: str, kind: str) -> Any:
    """The cached diff or measurement, or None where there is none or it is not a JSON object (a damaged row is dropped: a diff is
    computed again, a measurement is asked for again)."""
    row = self._conn().execute("SELECT body FROM diff_cache WHERE key = ?", (f"{a}:{b}:{kind}",)).fetchone()
    if row is None: return None
    try: body = json.loads(row[0])
    except (json.JSONDecodeError, TypeError): body = None
    if isinstance(body, dict): return body
    self._conn().execute("DELETE FROM diff_cache WHERE key = ?", (f"{a}:{b}:{kind}",))
    return None

  def timings_of(self, trace_id: str, limit: int = 8) -> list[tuple[str, str, Any]]:
    """The interleaved timings stored for diffs this trace is a side of, newest first: (a, b, the timing); a corrupt one is left out."""
    rows = self._conn().execute("SELECT a, b, body FROM diff_cache WHERE kind = 'timing' AND (a = ? OR b = ?) ORDER BY created DESC LIMIT ?",
                                (trace_id, trace_id, limit)).fetchall()
    out = []
    for a, b, body in rows:
      try: out.append((a, b, json.loads(body)))
      except (json.JSONDecodeError, TypeError): continue
    return out

  def clear_diffs(self, a: str | None = None, b: str | None = None) -> None:
    if a is None: self._conn().execute("DELETE FROM diff_cache")
    else: self._conn().execute("DELETE FROM diff_cache WHERE a = ? AND b = ?", (a, b if b is not None else a))
