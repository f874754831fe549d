"""The rewrite log as data: tinygrad's RewriteTrace written and read as plain data (what a trace stores and what may cross a
wire), the pickled blobs of older traces, and the source of each rule a log names."""
from __future__ import annotations
import collections
import collections.abc
import dataclasses
import enum
import functools
import io
import linecache
import pathlib
import pickle
from collections.abc import Callable, Iterator, Mapping
from typing import Any
import tinygrad
from tinygrad.codegen.opt import Opt, OptOps
from tinygrad.dtype import AddrSpace, DType, Invalid, InvalidType
from tinygrad.helpers import Metadata, TracingKey
from tinygrad.renderer import Estimates
from tinygrad.schedule.indexing import BufferizeOpts
from tinygrad.uop.ops import AxisType, KernelInfo, Ops, RewriteTrace, TrackedGraphRewrite, UOp
from explorer.blob import (
  MAGIC as REWRITE_LOG_MAGIC,
  BlobRefused,
  PlainWriter,
  inflate,
  location_key,
  package_path,
  read_plain,
  refused,
  stored_location,
)
from explorer.tracing.tg.compat import FLAT_DTYPES, CallInfo, ConstFloat, ParamArg, ProgramInfo, Target, dtype_classes

def rebuild(fields: collections.abc.Mapping[int, tuple[Any, ...]], num: int, built: dict[int, UOp]) -> UOp:
  """The UOp a rewrite log recorded as `num`, rebuilt from its fields (op, dtype, sources' numbers, arg, tag), as tinygrad's viewer
  rebuilds it, without recursion (a deep graph would exhaust Python's stack). built caches what is rebuilt: UOps are interned, so a
  rebuilt graph shares its nodes with every other rebuilt from the same cache."""
  stack = [num]
  while stack:
    n = stack[-1]
    if n in built:
      stack.pop()
      continue
    op, dtype, src, arg, *rest = fields[n]
    if missing := [x for x in src if x not in built]:
      stack.extend(missing)
      continue
    built[n] = UOp(op, dtype, tuple(built[x] for x in src), arg, *rest)
    stack.pop()
  return built[num]

# ***** the rewrite log as data: what a trace stores and what may cross a wire *****
# A rewrite blob is tinygrad's RewriteTrace written as plain data (numbers, strings, bytes, lists and dicts), never as pickled objects:
# loading one builds each object itself, from a fixed list of tinygrad's data classes, with the blob's values as their fields. A blob
# from outside this process (a queue worker's result, a stored row) can name no function and no other class, so loading it runs no
# code of its choosing and alters no class or shared instance (the BUILD opcode of a pickle could).

# tinygrad's data classes a recorded UOp's arg or tag may hold (read off the blobs of every preset, target, opt setting and a captured
# training step), each rebuilt from its fields in order; and the enums, by member name
LOG_CLASSES: dict[str, type] = {c.__name__: c for c in (KernelInfo, ProgramInfo, CallInfo, ParamArg, Opt, Estimates, BufferizeOpts, Target,
                                                         Metadata)}
LOG_ENUMS: dict[str, type[enum.Enum]] = {c.__name__: c for c in (Ops, AddrSpace, AxisType, OptOps)}
_PLAIN = (type(None), bool, int, float, str, bytes)  # exact types: ConstFloat is a float subclass, and is tagged

class _Encoder:
  """One RewriteTrace as plain data: each UOp's op and dtype by their index in a table, an arg or tag as its value, with tuples as
  lists and every other object as a dict ({"u": trace number} for a UOp, {"d": dtype index}, {"e": enum, "n": member},
  {"c": class, "a": [fields]}, {"f": float} for a ConstFloat, {"i": 1} for Invalid, {"s": [...]} for a frozenset). An object of any
  other class is kept as its repr ({"r": text}) and counted in `unstored`."""
  def __init__(self) -> None:
    self.dtypes: dict[DType, int] = {}
    self.unstored: collections.Counter[str] = collections.Counter()
    self.by_type: dict[type, Callable[[Any], Any]] = {  # one lookup per value: a big trace records millions of UOp fields
      tuple: lambda x: [e if type(e) in _PLAIN else self.value(e) for e in x], UOp: lambda x: {"u": x.trace_num},
      **{c: lambda x: {"d": self.dtype(x)} for c in dtype_classes().values()}, ConstFloat: lambda x: {"f": float(x)}, InvalidType: lambda x: {"i": 1},
      frozenset: lambda x: {"s": [self.value(e) for e in x]},
      **{c: lambda x: {"e": type(x).__name__, "n": x.name} for c in LOG_ENUMS.values()},
      **{c: lambda x: {"c": type(x).__name__, "a": [self.value(getattr(x, f.name)) for f in dataclasses.fields(x)]} for c in LOG_CLASSES.values()}}

  def dtype(self, d: DType) -> int:
    if (i := self.dtypes.get(d)) is None:
      if not FLAT_DTYPES:  # the dtypes it is made of first: a row names only earlier ones
        for f in dataclasses.fields(d):
          if isinstance(v := getattr(d, f.name), DType): self.dtype(v)
      i = self.dtypes[d] = len(self.dtypes)
    return i

  def dtype_row(self, d: DType) -> Any:
    """0.14's: [priority, bits, name, format]; before, {"t": its class, "a": its fields, a dtype among them as {"d": index}}."""
    if FLAT_DTYPES: return [d.priority, d.bitsize, d.name, d.fmt]
    return {"t": type(d).__name__, "a": [self.value(getattr(d, f.name)) for f in dataclasses.fields(d)]}

  def value(self, x: Any) -> Any:
    t = type(x)
    if t in _PLAIN: return x
    if (encode := self.by_type.get(t)) is not None: return encode(x)
    self.unstored[f"{t.__module__}.{t.__name__}"] += 1
    return {"r": repr(x)[:400]}

def encode_rewrite_log(log: RewriteTrace) -> bytes:
  enc, fields = _Encoder(), log.uop_fields
  ops = {o: i for i, o in enumerate(Ops)}
  keys = [[k.display_name, enc.value(tuple(k.keys))] for k in log.keys]
  locs: dict[Any, Any] = {}  # a rule's location, encoded once: a pass records tens of thousands of matches of a few rules
  sources: dict[str, str] = {}  # each location's source, read now from the file that ran (a page never opens a file a blob names)
  def loc_of(loc: Any) -> Any:
    if (got := locs.get(loc)) is not None: return got
    path, line = loc
    sources[location_key(stored := [stored_location(path), line])] = _read_rule_source(path, line)
    return locs.setdefault(loc, stored)
  def field_of(r: TrackedGraphRewrite, name: str) -> Any:
    if name == "matches": return [[a, b, loc_of(loc), t] for a, b, loc, t in r.matches]
    return loc_of(r.loc) if name == "loc" else enc.value(getattr(r, name))
  rewrites = [[[field_of(r, f.name) for f in dataclasses.fields(r)] for r in group] for group in log.rewrites]
  out = PlainWriter()
  done = 0
  while done < len(fields):  # a UOp in an arg is numbered (and recorded) as it is met: those are written in the next round
    nums = list(fields)[done:]
    done += len(nums)
    # a column at a time, names bound locally (a training step records millions of UOps, and most args and tags are plain), each
    # written as it is made and then dropped: the body that names the dtypes comes last
    rows = [fields[n] for n in nums]
    op_index, dtype, value, plain, dtypes = ops.__getitem__, enc.dtype, enc.value, _PLAIN, enc.dtypes
    out.part("num", nums)
    out.part("op", [op_index(r[0]) for r in rows])
    out.part("dtype", [i if (i := dtypes.get(r[1])) is not None else dtype(r[1]) for r in rows])
    out.part("src", [r[2] for r in rows])
    out.part("arg", [a if type(a := r[3]) in plain else value(a) for r in rows])
    out.part("tag", [None if (t := r[4]) is None else value(t) for r in rows])
    out.part("meta", [value(r[5]) if len(r) > 5 else None for r in rows])
  if enc.unstored: ENCODER_UNSTORED.update(enc.unstored)
  out.dump({"ops": [o.name for o in ops], "dtypes": [enc.dtype_row(d) for d in enc.dtypes], "keys": keys, "rewrites": rewrites,
            "fields": {c: [] for c in COLUMNS}, "rewrite_fields": [f.name for f in dataclasses.fields(TrackedGraphRewrite)], "sources": sources})
  return out.done()

COLUMNS = ("num", "op", "dtype", "src", "arg", "tag", "meta")  # a UOp's fields, a column each in the blob

ENCODER_UNSTORED: collections.Counter[str] = collections.Counter()  # classes kept as their repr in this process (tests check it stays empty)

def _check(ok: bool, why: str) -> None:
  if not ok: raise refused(why)

class LogFields(collections.abc.Mapping[int, Any]):
  """A rewrite log's UOp fields by trace number, each decoded when first read (tinygrad's viewer reads uop_fields[n] only)."""
  def __init__(self, body: dict[str, Any]):
    cols = body["fields"]
    _check(isinstance(cols, dict) and all(isinstance(cols.get(c), list) and len(cols[c]) == len(cols["num"]) for c in
                                          ("num", "op", "dtype", "src", "arg", "tag", "meta")), "its UOp fields are not columns of one length")
    self.cols, self.row = cols, {n: i for i, n in enumerate(cols["num"]) if type(n) is int}
    _check(len(self.row) == len(cols["num"]), "a UOp's trace number is not a whole number, or repeats")
    _check(isinstance(body["ops"], list) and all(isinstance(n, str) and n in Ops.__members__ for n in body["ops"]), "it names an op tinygrad lacks")
    self.ops = [Ops[n] for n in body["ops"]]
    _check(isinstance(body["dtypes"], list), "its dtypes are not a list")
    self.dtypes: list[DType] = []
    for d in body["dtypes"]: self.dtypes.append(self._dtype(d))
    self.decoded: dict[int, tuple[Any, ...]] = {}
    self.built: dict[int, UOp] = {}
    self.sources: dict[str, str] = {}  # each rule location's source, as the trace captured it (location_key -> text)

  def _dtype(self, d: Any) -> DType:
    """A dtype row (_Encoder.dtype_row) as this tinygrad's DType; its fields only plain values, enums and earlier dtypes."""
    if FLAT_DTYPES:
      _check(isinstance(d, list) and len(d) == 4 and type(d[0]) is int and type(d[1]) is int and isinstance(d[2], str)
             and (d[3] is None or isinstance(d[3], str)), "a dtype is not (priority, bits, name, format)")
      return DType(*d)
    classes = dtype_classes()
    _check(isinstance(d, dict) and d.get("t") in classes and isinstance(d.get("a"), list), "a dtype is not one of tinygrad's dtype classes")
    def field(v: Any) -> Any:
      if type(v) in _PLAIN: return v
      if isinstance(v, list): return tuple(field(x) for x in v)
      _check(isinstance(v, dict), "a dtype's field is malformed")
      if "d" in v:
        _check(type(v["d"]) is int and 0 <= v["d"] < len(self.dtypes), "a dtype names a dtype after it")
        return self.dtypes[v["d"]]
      _check(v.get("e") in LOG_ENUMS and isinstance(v.get("n"), str) and v["n"] in LOG_ENUMS[v["e"]].__members__, "a dtype's enum is unknown")
      return LOG_ENUMS[v["e"]][v["n"]]
    cls = classes[d["t"]]
    _check(len(d["a"]) == len(dataclasses.fields(cls)), "a dtype has the wrong number of fields")
    return cls(*[field(v) for v in d["a"]])

  def __len__(self) -> int: return len(self.row)
  def __iter__(self) -> Iterator[int]: return iter(self.row)
  def __getitem__(self, num: int) -> tuple[Any, ...]:
    if (got := self.decoded.get(num)) is not None: return got
    i, c = self.row[num], self.cols
    op, dtype, src = c["op"][i], c["dtype"][i], c["src"][i]
    _check(type(op) is int and 0 <= op < len(self.ops) and type(dtype) is int and 0 <= dtype < len(self.dtypes), f"UOp {num} has no such op or dtype")
    _check(type(src) is tuple and all(type(s) is int and s in self.row for s in src), f"UOp {num} has a source the log lacks")
    got = (self.ops[op], self.dtypes[dtype], src, self.value(c["arg"][i]), self.value(c["tag"][i]))
    if c["meta"][i] is not None: got += (self.value(c["meta"][i]),)
    self.decoded[num] = got
    return got

  def uop(self, num: int) -> UOp:
    """The recorded UOp with every source (built bottom-up without recursion: graphs can be thousands of UOps deep)."""
    _check(type(num) is int and num in self.row, f"it refers to UOp {num!r}, which it lacks")
    return rebuild(self, num, self.built)

  def value(self, x: Any) -> Any:
    t = type(x)
    if t in _PLAIN: return x
    if t is list: return tuple(self.value(e) for e in x)
    _check(t is dict and len(x) in (1, 2), f"a value of type {t.__name__} is not plain data")
    if "u" in x: return self.uop(x["u"])
    if "d" in x:
      _check(type(x["d"]) is int and 0 <= x["d"] < len(self.dtypes), "a dtype index is out of range")
      return self.dtypes[x["d"]]
    if "f" in x and type(x["f"]) is float: return ConstFloat(x["f"])
    if "i" in x: return Invalid
    if "s" in x and type(x["s"]) is list: return frozenset(self.value(e) for e in x["s"])
    if "r" in x and type(x["r"]) is str: return x["r"]
    if "e" in x:
      kind = LOG_ENUMS.get(x["e"]) if isinstance(x["e"], str) else None
      member = kind.__members__.get(x.get("n")) if kind is not None and isinstance(x.get("n"), str) else None
      _check(member is not None, f"no enum member {x!r:.80}")
      return member
    if "c" in x:
      cls, args = LOG_CLASSES.get(x["c"]), x.get("a")
      _check(cls is not None and type(args) is list and len(args) == len(dataclasses.fields(cls)),
             f"no class of the rewrite log is {x.get('c')!r:.60} with those fields")
      try: return cls(*(self.value(a) for a in args))  # type: ignore[misc]
      except (TypeError, ValueError) as e: raise refused(f"{x['c']} does not take those fields ({e})") from None
    raise refused(f"a value {x!r:.80} is not plain data")

def log_fields(blob: bytes) -> LogFields:
  """A rewrite blob's UOp fields alone (blob in the data format), checked as decode_rewrite_log checks them: no rewrite is decoded,
  for a reader that rebuilds a few recorded UOps (a kernel's AST) and no graph of a pass."""
  body = read_plain(blob)
  _check(isinstance(body, dict) and {"ops", "dtypes", "fields"} <= set(body), "it lacks a part of the log")
  return LogFields(body)

def decode_rewrite_log(blob: bytes) -> RewriteTrace:
  """A rewrite blob back as tinygrad's RewriteTrace (UOp fields decoded as they are read); BlobRefused, one line, for anything that is not
  plain data of the shape encode_rewrite_log writes. A blob from before this format (a pickled RewriteTrace) loads through
  load_legacy_rewrite_log."""
  if not blob.startswith(REWRITE_LOG_MAGIC): return load_legacy_rewrite_log(blob)
  body = read_plain(blob)
  _check(isinstance(body, dict) and {"ops", "dtypes", "keys", "rewrites", "fields", "rewrite_fields"} <= set(body), "it lacks a part of the log")
  names = [f.name for f in dataclasses.fields(TrackedGraphRewrite)]
  _check(body["rewrite_fields"] == names, f"its rewrites have the fields {body['rewrite_fields']!r:.100}, tinygrad's have {names}")
  fields = LogFields(body)
  sources = body.get("sources", {})  # a blob written before sources were captured has none: its rules are read from the installed packages
  fields.sources = {k: v for k, v in sources.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(sources, dict) else {}
  _check(isinstance(body["keys"], list) and all(isinstance(k, list) and len(k) == 2 and isinstance(k[0], str) for k in body["keys"]),
         "a key is malformed")
  keys = [TracingKey(name, tuple(fields.value(v)) if isinstance(v, list) else (), None, None) for name, v in body["keys"]]
  _check(isinstance(body["rewrites"], list) and all(isinstance(g, list) and all(isinstance(r, list) and len(r) == len(names) for r in g)
                                                     for g in body["rewrites"]), "a rewrite is malformed")
  def rewrite(r: list[Any]) -> TrackedGraphRewrite:
    got = dict(zip(names, r, strict=False))
    _check(isinstance(got["matches"], list) and all(isinstance(m, list) and len(m) == 4 and m[0] in fields.row and m[1] in fields.row
                                                    and type(m[3]) in (int, float) for m in got["matches"]), "a rewrite's matches are malformed")
    _check(type(got["sink"]) is int and got["sink"] in fields.row, "a rewrite starts from a UOp the log lacks")
    got = {k: tuple(tuple(m[:2]) + (fields.value(m[2]), m[3]) for m in v) if k == "matches" else fields.value(v) for k, v in got.items()}
    got["matches"] = list(got["matches"])
    return TrackedGraphRewrite(**got)
  return RewriteTrace(keys, [[rewrite(r) for r in g] for g in body["rewrites"]], fields)  # type: ignore[arg-type]

# the classes a pickled RewriteTrace (the blobs of traces stored before the data format) may name, by module
LEGACY_LOG_CLASSES: dict[str, frozenset[str]] = {
  "tinygrad.uop.ops": frozenset({"RewriteTrace", "TrackedGraphRewrite", "UOp", "KernelInfo", "ProgramInfo", "CallInfo", "ParamArg", "AxisType"}),
  "tinygrad.uop": frozenset({"Ops"}), "tinygrad.dtype": frozenset({"DType", "AddrSpace", "ConstFloat", "InvalidType"}),
  "tinygrad.helpers": frozenset({"TracingKey", "Target", "Metadata"}), "tinygrad.codegen.opt": frozenset({"Opt", "OptOps"}),
  "tinygrad.renderer": frozenset({"Estimates"}), "tinygrad.schedule.indexing": frozenset({"BufferizeOpts"}),
}

class _LegacyUnpickler(pickle.Unpickler):
  def find_class(self, module: str, name: str) -> Any:
    if name in LEGACY_LOG_CLASSES.get(module, ()): return super().find_class(module, name)
    raise BlobRefused(f"the rewrite blob names {module}.{name}, which is not among the classes tinygrad's rewrite log holds: nothing was loaded")
  def persistent_load(self, pid: Any) -> Any: raise BlobRefused("the rewrite blob asks for a persistent object: nothing was loaded")

def load_legacy_rewrite_log(blob: bytes) -> RewriteTrace:
  """A pickled RewriteTrace (traces stored before the data format), through an unpickler that admits only LEGACY_LOG_CLASSES: a name
  outside them (os.system, a Buffer, a renderer) is refused before it is looked up. Such a pickle could still set attributes of those
  classes in this process; the store's own rows are the only source of such blobs (a queue result must be data: explorer.schema)."""
  try: log = _LegacyUnpickler(io.BytesIO(inflate(blob))).load()
  except BlobRefused: raise
  except (pickle.UnpicklingError, EOFError, TypeError, ValueError, AttributeError, IndexError, KeyError, RecursionError) as e:
    raise refused(f"{type(e).__name__}: {str(e)[:120]}") from None
  _check(isinstance(log, RewriteTrace) and isinstance(log.keys, list) and isinstance(log.rewrites, list) and isinstance(log.uop_fields, dict),
         f"it holds a {type(log).__name__}, not tinygrad's rewrite log")
  return log

# ***** rule sources: what a log's locations point at *****

def rule_source(loc: tuple[str, int], sources: Mapping[str, str] | None = None) -> str:
  """A rule's (or a graph_rewrite call's) source: as the rewrite log captured it when the trace ran, else as it stands in the installed
  tinygrad or explorer. No other file is ever opened: a location is data from the log, which may come from elsewhere."""
  if sources and (got := sources.get(location_key(loc))) is not None: return got
  return _installed_source(*loc)

@functools.cache
def _package_roots() -> dict[str, pathlib.Path]:
  return {"tinygrad": pathlib.Path(tinygrad.__file__).resolve().parent, "explorer": pathlib.Path(__file__).resolve().parents[2]}

@functools.cache
def _installed_source(path: str, line: int) -> str:
  """The source at a location inside the installed tinygrad or explorer (an absolute path of another machine's install included), read
  from this one's: resolved, so that no '..' or symlink leads out of it; '' for any other file."""
  if (rel := package_path(path)) is None or type(line) is not int: return ""
  root = _package_roots()[rel.split("/")[0]]
  file = (root.parent / rel).resolve()
  return _read_rule_source(str(file), line) if file.is_relative_to(root) and file.is_file() else ""

def _read_rule_source(path: str, line: int) -> str:
  """A PatternMatcher rule's source as it stands in its file: from its line until its parentheses close."""
  out, depth = [], 0
  for n in range(line, line + 12):
    if not (text := linecache.getline(path, n)): break
    out.append(text.rstrip())
    depth += text.count("(") - text.count(")")
    if depth <= 0: break
  return "\n".join(out)

def rule_file(path: str) -> str:
  """tinygrad's rules by their path in tinygrad (codegen/simplify.py), the explorer's own by theirs (explorer/tracing/pipeline/rewrites.py), any
  other by its file's name."""
  rel = stored_location(path)
  return rel.removeprefix("tinygrad/")
