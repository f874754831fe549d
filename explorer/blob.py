"""A rewrite blob's format, without tinygrad: its first bytes, and how its body is read as plain data (numbers, strings, bytes, lists,
tuples, dicts and sets) by an unpickler that admits no class or function at all. explorer.tracing.tg writes and decodes blobs
with it; the server checks a blob that arrives from a queue worker with it before keeping it (explorer.queue.protocol)."""
from __future__ import annotations
import io
import pickle
import zlib
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
  """The body of a blob in the data format, as plain data; BlobRefused for anything else. The body is the blob's last pickle; a dict
  body may follow parts of its "fields" columns, each (name, list) a pickle of its own (PlainWriter.part), appended in order."""
  if not blob.startswith(MAGIC): raise refused("it lacks the data format's first bytes")
  try:
    stream, parts = io.BytesIO(inflate(blob[len(MAGIC):])), list[Any]()
    body = PlainData(stream).load()
    while stream.tell() < len(stream.getbuffer()): parts, body = [*parts, body], PlainData(stream).load()
    for part in parts: _add_part(body, part)
    return body
  except BlobRefused: raise
  except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, RecursionError, MemoryError) as e:
    raise refused(f"{type(e).__name__}: {str(e)[:120]}") from None

def _add_part(body: Any, part: Any) -> None:
  if not (isinstance(body, dict) and isinstance(columns := body.get("fields"), dict)): raise refused("a part follows a body without columns")
  if not (isinstance(part, tuple) and len(part) == 2 and isinstance(part[1], list) and isinstance(columns.get(part[0]), list)):
    raise refused("a part is not one of its body's columns")
  columns[part[0]] += part[1]

class PlainWriter:
  """A blob in the data format, written as it comes: any number of parts of its body's columns, then its body (read_plain appends each
  part to its column), each pickled and compressed as soon as it is given, so that a training step's log never exists whole, in
  objects or in bytes. Pickled without a memo (fast mode: plain data has no cycles, and the memo of a big log's tuples would cost more memory
  than the log)."""
  def __init__(self) -> None: self.z, self.parts = zlib.compressobj(1), [MAGIC]

  def write(self, b: bytes) -> int:
    self.parts.append(self.z.compress(b))
    return len(b)

  def dump(self, x: Any) -> None:
    pickler = pickle.Pickler(self, protocol=5)
    pickler.fast = True
    pickler.dump(x)

  def part(self, column: str, values: list[Any]) -> None: self.dump((column, values))

  def done(self) -> bytes: return b"".join([*self.parts, self.z.flush()])

def write_plain(body: Any) -> bytes:
  """body in the data format, whole."""
  (w := PlainWriter()).dump(body)
  return w.done()

# ***** rule locations: data, never paths to open *****
# A rewrite log names where each rule and each graph_rewrite call is (file, line). The blob keeps them package-relative
# ("tinygrad/codegen/simplify.py") with the source captured when the trace ran ("sources"), so a page never opens a file a blob names;
# a log from before that names absolute paths, which a reader maps to the installed package and reads only from inside it.

SOURCE_PACKAGES = ("tinygrad", "explorer")  # the only packages whose files a rule location may name
ELSEWHERE = "<elsewhere>/"                  # a location outside them (a user's rewrite file): its name only, its source captured

def package_path(path: str) -> str | None:
  """A location's file as its package-relative path ("tinygrad/codegen/simplify.py"), or None when it names no Python file of tinygrad
  or the explorer (no '..', '.' or empty part past the package's name)."""
  parts = path.replace("\\", "/").split("/")
  starts = [i for i, p in enumerate(parts[:-1]) if p in SOURCE_PACKAGES]
  if not starts: return None
  rel = parts[starts[-1]:]
  if any(p in ("", ".", "..") for p in rel) or not rel[-1].endswith(".py"): return None
  return "/".join(rel)

def stored_location(path: str) -> str:
  """How a blob names a location's file: package-relative, or ELSEWHERE and the file's name."""
  return got if (got := package_path(path)) is not None else ELSEWHERE + path.replace("\\", "/").rsplit("/", 1)[-1]

def location_key(loc: Any) -> str:
  """A location ([file, line] as the blob stores it) as the key of its captured source."""
  return f"{stored_location(str(loc[0]))}:{loc[1]}"

def location_refused(loc: Any) -> str | None:
  """Why a blob's location (its encoded [file, line]) is not one the explorer writes, or None: the file must be package-relative or
  ELSEWHERE and a name, never a path to open."""
  if not (isinstance(loc, list) and len(loc) == 2 and isinstance(loc[0], str) and type(loc[1]) is int):
    return f"a location {loc!r:.80} is not [file, line]"
  path = loc[0]
  if path.startswith(ELSEWHERE) and "/" not in (name := path[len(ELSEWHERE):]) and name not in ("", ".", ".."): return None
  return None if package_path(path) == path else f"a location names {path[:120]!r}, not a file of tinygrad or the explorer"

def check_locations(body: Any) -> None:
  """BlobRefused when a rewrite log's body (read_plain's) names a location that is not package-relative: a log from outside this
  process (a queue worker's result, a row to store) can make no page read a file of its choosing."""
  if not isinstance(body, dict): return
  names, groups = body.get("rewrite_fields"), body.get("rewrites")
  if not (isinstance(names, list) and isinstance(groups, list) and "loc" in names and "matches" in names): raise refused("it names no rewrite fields")
  at_loc, at_matches = names.index("loc"), names.index("matches")
  seen: set[int] = set()  # an encoded location is one list, shared by every match of its rule
  for group in groups:
    for r in group if isinstance(group, list) else ():
      if not (isinstance(r, list) and len(r) == len(names)): raise refused("a rewrite is malformed")
      for loc in (r[at_loc], *(m[2] for m in r[at_matches] if isinstance(m, list) and len(m) == 4)):
        if id(loc) in seen: continue
        if (why := location_refused(loc)) is not None: raise refused(why)
        seen.add(id(loc))
  sources = body.get("sources", {})
  if not (isinstance(sources, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in sources.items())):
    raise refused("its rule sources are not text by location")
