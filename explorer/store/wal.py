"""A write-ahead log found beside a store before a server opens it. SQLite replays a `-wal` file into its database when the first
connection opens it, whatever database the log was written for: a log copied from another store, or one left from the file's earlier
life (a database restored from a backup beside its newer log), is folded in for good before anything could refuse it (a foreign log
replaced a store's every table, and its quick check still said ok). So a log no process has open is replayed first into a copy of
the two, and the store is opened only where that copy reads as this store: whole (SQLite's quick check), a Kernel Explorer store of a
version this one reads, keeping some of the traces the file alone holds. A log a running process has open is its own: left alone."""
from __future__ import annotations
import contextlib
import fcntl
import os
import pathlib
import shutil
import sqlite3
import struct
import tempfile
import time
from explorer.store.connection import VERSION, StoreError, default_db_path
from explorer.text import one_line

WAL_MAGIC = (0x377F0682, 0x377F0683)  # the header's first word (its checksums' byte order)
SHM_DMS = 128  # the byte of the -shm file every connection holds a shared lock on while it is open (SQLite's unix VFS: UNIX_SHM_DMS)

def in_use(db: pathlib.Path) -> bool:
  """Whether another process has the store open (its lock on the shared-memory file's DMS byte)."""
  try: fd = os.open(f"{db}-shm", os.O_RDWR)
  except OSError: return False
  try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, SHM_DMS)
    fcntl.lockf(fd, fcntl.LOCK_UN, 1, SHM_DMS)
    return False
  except OSError: return True
  finally: os.close(fd)

def _traces(path: pathlib.Path, immutable: bool) -> tuple[set[str], int]:
  """The trace ids a database holds and its user_version (immutable: the file alone, its log not read)."""
  uri = f"file:{path}?{'immutable=1' if immutable else 'mode=rw'}"
  with contextlib.closing(sqlite3.connect(uri, uri=True)) as c:
    if immutable is False and (check := c.execute("PRAGMA quick_check(1)").fetchone()[0]) != "ok":
      raise ValueError(f"the two together fail SQLite's quick check ({check})")
    tables = {name for (name,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    ids = {i for (i,) in c.execute("SELECT id FROM traces")} if "traces" in tables else set()
    return ids, c.execute("PRAGMA user_version").fetchone()[0] if "traces" in tables else -1

def problem(db: pathlib.Path) -> str | None:
  """Why the log beside `db` must not be replayed into it (None: there is none, a running process has it open, or it replays into
  this store)."""
  wal = pathlib.Path(f"{db}-wal")
  try: size = wal.stat().st_size
  except OSError: return None
  if size < 32 or not db.exists() or in_use(db): return None
  with open(wal, "rb") as f: magic, _, page_size = struct.unpack(">III", f.read(12))
  if magic not in WAL_MAGIC: return None  # no log SQLite would replay: it is reset, not read
  try:
    with open(db, "rb") as f: head = f.read(18)
    own_page = struct.unpack(">H", head[16:18])[0] if head.startswith(b"SQLite format 3\0") else None
    if own_page is not None and (own_page if own_page != 1 else 65536) != page_size:
      return f"it was written for a database of {page_size}-byte pages, and this one has {own_page}-byte pages"
    own, _ = _traces(db, immutable=True)
    with tempfile.TemporaryDirectory(prefix="kernel-explorer-wal-") as tmp:
      copy = pathlib.Path(tmp) / db.name
      shutil.copyfile(db, copy)
      shutil.copyfile(wal, f"{copy}-wal")
      replayed, version = _traces(copy, immutable=False)
  except (sqlite3.Error, ValueError) as e: return one_line(e)
  except OSError as e: return f"it could not be checked on a copy ({one_line(e)})"
  if version < 0: return "replayed, the database would not be a Kernel Explorer store"
  if version > VERSION: return f"replayed, the database would be of store version {version}, newer than this explorer's {VERSION}"
  if own and not own & replayed: return f"replayed, none of the {len(own)} traces this database holds would remain (another store's log?)"
  return None

def check(db: str | os.PathLike[str] | None) -> None:
  """StoreError, one line, where the log beside the store (None: the default one) must not be replayed into it: nothing of the store
  is touched. Only before this process opens the store: the descriptors it opens on the store's files and closes would drop the
  process's POSIX locks on them, SQLite's own."""
  path = pathlib.Path(db) if db is not None else default_db_path()
  if (why := problem(path)) is None: return
  wal = pathlib.Path(f"{path}-wal")
  written = time.strftime("%Y-%m-%d %H:%M", time.localtime(wal.stat().st_mtime))
  raise StoreError(f"the store {path} has a write-ahead log beside it ({wal.name}, {wal.stat().st_size:,} bytes, written {written}) that "
                   f"does not belong to it: {why}. The store itself is untouched: move {wal.name} aside to serve it without that log")
