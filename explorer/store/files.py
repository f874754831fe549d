"""A trace named on the command line: a JSON file (data from elsewhere: checked as strictly as a request) or a stored id (both
kernel-explorer diff and export take either)."""
from __future__ import annotations
import array
import itertools
import json
import os
import re
from typing import TYPE_CHECKING, Any
from explorer.spec import SpecError
from explorer.store.connection import StoreError, default_db_path
from explorer.store.db import Store

if TYPE_CHECKING:
  from explorer.schema import TraceRecord

MAX_TRACE_FILE_BYTES = 256 << 20  # a trace file is refused above this, before it is read (a 1,000-kernel program's is tens of MiB)
MAX_TRACE_DEPTH = 64              # JSON nesting a trace file may have (a trace's own is under 10)
MAX_TRACE_INT = 1 << 63           # the magnitude a trace's integers stay below
# what is not an array's or object's bracket outside a string, in runs: linear, as no part can fail once begun (an unterminated string
# runs to the end: a retry from each of its quotes would be quadratic) and possessive (no backtracking state kept over a long string)
_NOT_NESTING = re.compile(rb'(?:[^"\[\]{}]++|"[^"\\]*+(?:\\.?[^"\\]*+)*+(?:"|\Z))++', re.S)
_NESTING = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff"), bytes(set(range(256)) - set(b"[{]}"))  # opening +1, closing -1 (as int8)
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")

def load_trace_file(path: str) -> TraceRecord:
  """A trace JSON file, as `kernel-explorer trace --json` or the web API writes it; SpecError (one line) when it is not one: too big
  (refused before it is read), not UTF-8, not JSON, nested too deep, numbers beyond a trace's, or a trace whose references break."""
  try: return _trace_of(_read_json(path), path)
  except SpecError: raise
  except RecursionError: raise SpecError(f"trace file {path} is nested too deeply to read") from None
  except MemoryError: raise SpecError(f"trace file {path} does not fit in memory here") from None
  except (KeyError, IndexError, TypeError, ValueError) as e:  # a file this version's checks let through and its readers trip on
    raise SpecError(f"trace file {path} does not read as a trace: {type(e).__name__}: {e}"[:300].replace("\n", " ")) from None

def _mib(n: int) -> str: return f"{n / (1 << 20):.4g} MiB"

def _read_json(path: str) -> Any:
  """The file's JSON, its size bounded before it is read, its nesting before it is parsed, its numbers as they are parsed."""
  try:
    if (size := os.stat(path).st_size) > MAX_TRACE_FILE_BYTES:
      raise SpecError(f"trace file {path} is {_mib(size)}, over the {_mib(MAX_TRACE_FILE_BYTES)} a trace file may be")
    with open(path, "rb") as f: data = f.read(MAX_TRACE_FILE_BYTES + 1)
  except OSError as e: raise SpecError(f"cannot read the trace file {path}: {e}") from None
  if len(data) > MAX_TRACE_FILE_BYTES: raise SpecError(f"trace file {path} grew over the {_mib(MAX_TRACE_FILE_BYTES)} a trace file may be")
  try: text = data.decode("utf-8")
  except UnicodeDecodeError as e: raise SpecError(f"trace file {path} is not UTF-8: byte {e.start} ({data[e.start]:#04x}): {e.reason}") from None
  if _nesting(data, MAX_TRACE_DEPTH) > MAX_TRACE_DEPTH:
    raise SpecError(f"trace file {path} nests arrays and objects deeper than the {MAX_TRACE_DEPTH} levels a trace file may")
  del data
  def integer(s: str) -> int:
    if len(digits := s.lstrip("-")) > 19 or abs(n := int(s)) >= MAX_TRACE_INT:  # int() of a long one is refused, or slow
      raise SpecError(f"trace file {path} holds the integer {s[:20]}{'...' if len(s) > 20 else ''} ({len(digits)} digits), beyond the 2**63 "
                      "a trace's integers stay within")
    return n
  def number(s: str) -> float:
    if len(s) > 64: raise SpecError(f"trace file {path} holds a number of {len(s)} characters: {s[:20]}...")
    return float(s)  # Infinity and NaN as JSON's writers (ours too: an error against a zero reference) write them; the schema bounds fields
  try: got = json.loads(text, parse_int=integer, parse_float=number)
  except json.JSONDecodeError as e: raise SpecError(f"cannot read the trace file {path}: {e}") from None
  if _ESCAPED_SURROGATE.search(text) and _has_surrogate(got):  # valid JSON, but no UTF-8 text: an export could not write it
    raise SpecError(f"trace file {path} holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape), which is not text")
  return got

def _nesting(data: bytes, limit: int) -> int:
  """How deep JSON's arrays and objects nest in data, outside its strings (read to limit + 1 at most): linear, without recursion."""
  marks, depth, peak, chunk = memoryview(array.array("b", _NOT_NESTING.sub(b"", data).translate(*_NESTING))), 0, 0, 1 << 16
  for at in range(0, len(marks), chunk):  # a chunk at a time: a deep file is refused at its start
    if (peak := max(peak, max(itertools.accumulate(marks[at:at + chunk], initial=depth)))) > limit: break
    depth += sum(marks[at:at + chunk])
  return peak

def _has_surrogate(value: Any) -> bool:
  """Whether any string (key or value) in parsed JSON holds a UTF-16 surrogate, walked without recursion."""
  todo = [value]
  while todo:
    v = todo.pop()
    if isinstance(v, str) and _SURROGATE.search(v): return True
    if isinstance(v, dict): todo += [*v.keys(), *v.values()]
    elif isinstance(v, list): todo += v
  return False

def _trace_of(t: Any, path: str) -> TraceRecord:
  if isinstance(t, dict) and "trace" in t and "kernels" not in t: t = t["trace"]  # a wrapped trace (the web API's shape)
  if not isinstance(t, dict) or not {"spec", "kernels", "buffers", "schedule", "env"} <= set(t):
    raise SpecError(f"{path} is not a Kernel Explorer trace (run `kernel-explorer trace ... --json PATH`)")
  from explorer.schema import upgrade, validate_trace  # pydantic: only where a file is read
  return upgrade(dict(validate_trace({k: v for k, v in t.items() if k not in ("id", "url")}, path)))  # data from elsewhere: checked

def find_stored(trace_id: str, db: str | None, what: str) -> tuple[Store, TraceRecord, bytes | None]:
  """The store, the trace and its rewrite blob for an argument that names a stored trace id; SpecError ("{what}, and ...") when
  there is none, or when its row is corrupt."""
  path = db or default_db_path()
  if not os.path.isfile(path): raise SpecError(f"{what}, and there is no trace store at {path}")
  try:
    store = Store(path)
    if (trace := store.get_trace(trace_id)) is None: raise SpecError(f"{what}, and not a trace id stored in {path}")
    return store, trace, store.get_rewrites(trace_id)
  except StoreError as e: raise SpecError(str(e)) from None
