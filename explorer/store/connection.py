"""The SQLite file: where it is, its schema (every table, one version), the migrations to it, and one connection per thread."""
from __future__ import annotations
import os
import pathlib
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from explorer.text import one_line

SCHEMA = """
CREATE TABLE IF NOT EXISTS traces (
  id TEXT PRIMARY KEY,
  created REAL NOT NULL,
  preset TEXT,
  label TEXT NOT NULL,
  status TEXT NOT NULL,
  summary TEXT NOT NULL,
  trace TEXT NOT NULL,
  rewrites BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS traces_created ON traces(created);
CREATE TABLE IF NOT EXISTS target_rewrites (
  trace_id TEXT NOT NULL,
  target TEXT NOT NULL,
  rewrites BLOB NOT NULL,
  PRIMARY KEY (trace_id, target)
);
CREATE TABLE IF NOT EXISTS kernel_parts (
  hash TEXT PRIMARY KEY,
  body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS kernel_heavy (
  hash TEXT PRIMARY KEY,
  body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS kernel_refs (
  trace_id TEXT NOT NULL,
  kernel INTEGER NOT NULL,
  hash TEXT NOT NULL,
  PRIMARY KEY (trace_id, kernel)
);
CREATE INDEX IF NOT EXISTS kernel_refs_hash ON kernel_refs(hash);
CREATE TABLE IF NOT EXISTS trace_chunks (
  trace_id TEXT NOT NULL,
  field TEXT NOT NULL,
  seq INTEGER NOT NULL,
  body TEXT NOT NULL,
  PRIMARY KEY (trace_id, field, seq)
);
CREATE TABLE IF NOT EXISTS enrichments (
  trace_id TEXT NOT NULL,
  kernel INTEGER NOT NULL,
  target TEXT NOT NULL,
  kind TEXT NOT NULL,
  value TEXT NOT NULL,
  created REAL NOT NULL,
  PRIMARY KEY (trace_id, kernel, target, kind)
);
CREATE TABLE IF NOT EXISTS graph_cache (
  key TEXT PRIMARY KEY,
  trace_id TEXT NOT NULL,
  ref TEXT NOT NULL,
  kind TEXT NOT NULL,
  body TEXT NOT NULL,
  created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS graph_cache_trace ON graph_cache(trace_id);
CREATE TABLE IF NOT EXISTS diff_cache (
  key TEXT PRIMARY KEY,
  a TEXT NOT NULL,
  b TEXT NOT NULL,
  kind TEXT NOT NULL,
  body TEXT NOT NULL,
  created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS diff_cache_a ON diff_cache(a);
CREATE INDEX IF NOT EXISTS diff_cache_b ON diff_cache(b);
CREATE TABLE IF NOT EXISTS annotations (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  trace_id TEXT NOT NULL,
  anchor_kind TEXT NOT NULL,
  anchor TEXT NOT NULL,
  text TEXT NOT NULL,
  created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS annotations_trace ON annotations(trace_id);
CREATE TABLE IF NOT EXISTS tasks (
  kind TEXT NOT NULL,
  id TEXT NOT NULL,
  status TEXT NOT NULL,
  label TEXT NOT NULL,
  request TEXT NOT NULL,
  owner TEXT NOT NULL,
  client TEXT,
  detail TEXT NOT NULL DEFAULT '',
  error TEXT,
  result TEXT,
  created REAL NOT NULL,
  started REAL,
  finished REAL,
  PRIMARY KEY (kind, id)
);
CREATE INDEX IF NOT EXISTS tasks_created ON tasks(kind, created);
CREATE TABLE IF NOT EXISTS classes (
  id TEXT PRIMARY KEY,
  key_hash TEXT NOT NULL,
  state TEXT NOT NULL,
  seq INTEGER NOT NULL,
  poll TEXT,
  created REAL NOT NULL,
  updated REAL NOT NULL,
  ended REAL
);
"""
VERSION = 1  # PRAGMA user_version: 0, jobs and studies in tables of their own; 1, both in tasks

# version 0 -> 1, per old table: a trace job keeps its row and times; a study its kind in its request (as a study's request names it)
TASKS_OF = {
  "jobs": "INSERT OR IGNORE INTO tasks (kind, id, status, label, request, owner, error, created, started, finished) "
          "SELECT 'trace', id, status, label, request, owner, error, created, started, finished FROM jobs",
  "studies": "INSERT OR IGNORE INTO tasks (kind, id, status, label, request, owner, error, result, created, started, finished) "
             "SELECT 'study', id, status, label, CASE WHEN json_valid(request) THEN json_set(request, '$.kind', kind) ELSE request END, "
             "owner, error, result, created, created, finished FROM studies",
}

class StoreError(RuntimeError):
  """A stored row cannot be read back (corrupt or from an incompatible version): the message says which and why."""

def default_db_path() -> pathlib.Path:
  base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
  return pathlib.Path(base) / "kernel-explorer" / "traces.sqlite3"

@contextmanager
def transaction(c: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
  """One write transaction: all of it is kept, or none (a return inside keeps what was written so far)."""
  c.execute("BEGIN IMMEDIATE")
  try: yield c
  except BaseException:
    c.execute("ROLLBACK")
    raise
  c.execute("COMMIT")

def migrate(c: sqlite3.Connection) -> None:
  """Brings a file written by an earlier version to VERSION, once (the first process to open it does it, the others find it done)."""
  if c.execute("PRAGMA user_version").fetchone()[0] >= VERSION: return
  with transaction(c):
    if c.execute("PRAGMA user_version").fetchone()[0] >= VERSION: return
    tables = {name for (name,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table in (t for t in TASKS_OF if t in tables):
      c.execute(TASKS_OF[table])
      c.execute(f"DROP TABLE {table}")
    c.execute(f"PRAGMA user_version = {VERSION}")

class Connected:
  """One SQLite file (WAL mode); one connection per thread. Each part of the store (explorer.store.db.Store) keeps its tables over it."""
  def __init__(self, path: str | os.PathLike[str] | None = None):
    self.path = pathlib.Path(path) if path is not None else default_db_path()
    self._local = threading.local()
    try:
      self.path.parent.mkdir(parents=True, exist_ok=True)
      c = self._conn()
      c.executescript(SCHEMA)
      migrate(c)
    except (sqlite3.Error, OSError) as e: raise self._unusable(e) from None

  def _unusable(self, e: BaseException) -> StoreError:
    self.close()
    return StoreError(f"the store {self.path} cannot be used: {one_line(e)} (a file that is read-only, truncated or not a SQLite "
                      "database: move it aside, or name another with --db, to start on an empty store)")

  def check_usable(self) -> None:
    """What a server checks before it serves: the file reads whole (SQLite's quick check: a scan of every page) and can be written
    (a write lock taken and given back). StoreError, one line, where not."""
    try:
      c = self._conn()
      if (check := c.execute("PRAGMA quick_check(1)").fetchone()[0]) != "ok": raise sqlite3.DatabaseError(f"its quick check says {check}")
      c.execute("BEGIN IMMEDIATE")
      c.execute("ROLLBACK")
    except (sqlite3.Error, OSError) as e: raise self._unusable(e) from None

  def _conn(self) -> sqlite3.Connection:
    """This thread's connection (opened on first use)."""
    conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
    if conn is None:
      conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
      conn.execute("PRAGMA journal_mode=WAL")
      conn.execute("PRAGMA synchronous=NORMAL")
      self._local.conn = conn
    return conn

  def close(self) -> None:
    if (conn := getattr(self._local, "conn", None)) is not None: conn.close(); self._local.conn = None

  def has_trace(self, trace_id: str) -> bool:
    """Whether the trace is stored: every other row hangs off one (the parts check it in their write transactions)."""
    return self.stored_at(trace_id) is not None

  def stored_at(self, trace_id: str) -> float | None:
    """When the trace was stored (None: it is not): a trace stored again under its id, by any process, is another row."""
    row = self._conn().execute("SELECT created FROM traces WHERE id = ?", (trace_id,)).fetchone()
    return None if row is None else row[0]
