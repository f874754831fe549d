"""Rewrite blobs of targets other than the host's (the table target_rewrites): those rendered with the trace, under the target's name,
and those a record computed on first view addresses, under its key (`cuda@3f2a...`). The host's blob is in the trace's row."""
from __future__ import annotations
import sqlite3
from explorer.blob import MAGIC as BLOB_MAGIC, BlobRefused, check_locations, read_plain
from explorer.store.connection import StoreError

def checked_locations(blob: bytes) -> None:
  """StoreError when a rewrite blob in the data format names a rule location outside tinygrad and the explorer (explorer.blob); other
  bytes are kept as they are (a reader refuses what it cannot decode)."""
  if not blob.startswith(BLOB_MAGIC): return
  try: check_locations(read_plain(blob))
  except BlobRefused as e: raise StoreError(f"refused to store it: {e}") from None

def put_target_blobs(c: sqlite3.Connection, trace_id: str, blobs: dict[str, bytes]) -> None:
  c.executemany("INSERT OR REPLACE INTO target_rewrites (trace_id, target, rewrites) VALUES (?,?,?)", [(trace_id, t, b) for t, b in blobs.items()])

def target_blob(c: sqlite3.Connection, trace_id: str, key: str) -> object:
  row = c.execute("SELECT rewrites FROM target_rewrites WHERE trace_id = ? AND target = ?", (trace_id, key)).fetchone()
  return None if row is None else row[0]  # bytes, unless the row is corrupt: the reader checks

def forget(c: sqlite3.Connection, trace_id: str) -> None:
  c.execute("DELETE FROM target_rewrites WHERE trace_id = ?", (trace_id,))
