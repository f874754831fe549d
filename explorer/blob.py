"""A rewrite blob's format, without tinygrad: its first bytes, and how its body is read as plain data (numbers, strings, bytes, lists,
tuples, dicts and sets) by an unpickler that admits no class or function at all. explorer.tracing.adapter writes and decodes blobs
with it; the server checks a blob that arrives from a queue worker with it before keeping it (explorer.queue.protocol)."""
from __future__ import annotations
import io, pickle, zlib
from typing import Any

MAGIC = b"kernel-explorer rewrite log 1\n"  # the data format's first bytes; the store's older blobs are pickles of objects and lack them
MAX_EXPANDED = 2 << 30                     # a blob's body expands to at most this much
MAX_RATIO = 32                             # ...and to at most this many times its compressed size (seen: about 3)

class BlobRefused(ValueError):
  """A rewrite blob that is not one the explorer wrote: the message is one line."""

def refused(why: str) -> BlobRefused: return BlobRefused(f"the rewrite blob is not one the explorer wrote: {why}")

class PlainData(pickle.Unpickler):
  """Plain data only: any class or function a pickle names is refused before it is looked up."""
  def find_class(self, module: str, name: str) -> Any:
    raise BlobRefused(f"the rewrite blob names {module}.{name}: a rewrite log is plain data, so nothing was loaded")
  def persistent_load(self, pid: Any) -> Any: raise BlobRefused("the rewrite blob asks for a persistent object: nothing was loaded")

def inflate(data: bytes) -> bytes:
  """zlib data expanded, bounded by MAX_EXPANDED and MAX_RATIO (a zlib bomb is refused, not expanded)."""
  limit = min(MAX_EXPANDED, max(1 << 20, MAX_RATIO * len(data)))
  try:
    z = zlib.decompressobj()
    out = z.decompress(data, limit)
  except zlib.error as e: raise refused(f"zlib: {e}") from None
  if z.unconsumed_tail: raise refused(f"it expands past {limit >> 20} MiB")
  return out

def read_plain(blob: bytes) -> Any:
  """The body of a blob in the data format, as plain data; BlobRefused for anything else."""
  if not blob.startswith(MAGIC): raise refused("it lacks the data format's first bytes")
  try: return PlainData(io.BytesIO(inflate(blob[len(MAGIC):]))).load()
  except BlobRefused: raise
  except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, RecursionError, MemoryError) as e:
    raise refused(f"{type(e).__name__}: {str(e)[:120]}") from None

def write_plain(body: Any) -> bytes: return MAGIC + zlib.compress(pickle.dumps(body, protocol=5), 1)
