"""The one module that touches tinygrad internals. A tinygrad upgrade should only need changes here.

Import it first in a fresh process: tinygrad swaps in its tracking PatternMatcher at import time, so the environment must be
set before. With VIZ unset (a trace worker), every named graph_rewrite is recorded (TRACK_MATCH_STATS=2), without VIZ's
profiling and stack traces, which cost more than the tracking itself. A process that sets VIZ gets tinygrad's own behaviour:
VIZ=0 is a plain, untracked tinygrad (renders for other targets, timing, benchmarks' baselines). Always PARALLEL=0 (compile
in this process). tinygrad's disk cache of compiles stays as tinygrad has it (CCACHE): a trace compiles what tinygrad would, and
says which kernels came from the cache (explorer.tracing.trace); studies time compiles afresh (compile_seconds).
"""
from __future__ import annotations
import os
if "VIZ" not in os.environ: os.environ.setdefault("TRACK_MATCH_STATS", "2")
# compile in this process: a worker is already its own process, and tinygrad's compile pool would outlive it
os.environ.setdefault("PARALLEL", "0")

import atexit, collections, collections.abc, contextlib, ctypes, dataclasses, difflib, enum, functools, glob, io, itertools, linecache, math
import pathlib, pickle, platform, re, subprocess, sys, tempfile, time, typing
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping, Sequence
import tinygrad
from tinygrad import Device, Tensor, dtypes
from tinygrad.codegen import do_linearize, do_to_program, full_rewrite_to_sink, pm_to_program, to_program, to_program_cache, to_program_key
from tinygrad.codegen.opt import Opt, OptOps, tc
from tinygrad.device import Compiler
from tinygrad.dtype import AddrSpace, ConstFloat, DType, Invalid, InvalidType
from tinygrad.engine.realize import compile_linear, run_linear, time_call
from tinygrad.helpers import Context, Metadata, Target, TracingKey, ansistrip
from tinygrad.renderer import Estimates, Renderer
from tinygrad.renderer.cstyle import ClangRenderer, CUDARenderer, MetalRenderer, OpenCLRenderer
from tinygrad.renderer.llvmir import CPULLVMRenderer
from tinygrad.renderer.ptx import PTXRenderer
from tinygrad.renderer.wgsl import WGSLRenderer
from tinygrad.uop import ops as uop_ops
from tinygrad.schedule.indexing import BufferizeOpts
from tinygrad.uop.ops import (AxisType, CallInfo, GroupOp, KernelInfo, Ops, ParamArg, PatternMatcher, ProgramInfo, RewriteTrace, TrackedGraphRewrite,
                              UOp, UPat, graph_rewrite, multirange_str, rewrite_group)
import tinygrad.device
from explorer.blob import MAGIC as REWRITE_LOG_MAGIC, BlobRefused, inflate, location_key, package_path, read_plain, refused, stored_location
from explorer.blob import write_plain
from explorer.spec import COMPUTE_DEVICES
if typing.TYPE_CHECKING:  # types only: pydantic (the schema's validation) stays out of the worker processes
  from explorer.schema import Analysis, LoopRange, LoopSplit, Pressure, SpecCheck, SpecViolation, Storage

# the public names the rest of the explorer uses: it imports tinygrad only through this module
__all__ = ["AddrSpace", "Context", "Device", "KernelInfo", "Ops", "PatternMatcher", "Tensor", "UOp", "UPat", "dtypes"]

TINYGRAD_VERSION = getattr(tinygrad, "__version__", None) or __import__("importlib.metadata").metadata.version("tinygrad")

# with tracking on, tinygrad pickles every rewrite (and any profile) to /tmp at exit; the explorer keeps its own copy instead
for _hook in (getattr(uop_ops, "print_match_stats", None), getattr(tinygrad.device, "finalize_profile", None)):
  if _hook is not None: atexit.unregister(_hook)

def tracking_enabled() -> bool: return uop_ops.TRACK_MATCH_STATS.value >= 2

def tracking() -> contextlib.AbstractContextManager:
  """Every named graph_rewrite recorded with its matches while inside (TRACK_MATCH_STATS=2, read at each rewrite): a process whose
  environment asked for less (TRACK_MATCH_STATS=1 or PROFILE=1 still swap the tracked PatternMatcher in) records whole passes too."""
  return Context(TRACK_MATCH_STATS=max(2, uop_ops.TRACK_MATCH_STATS.value))

def tracking_possible() -> bool:
  """tinygrad records matches only with the PatternMatcher it swaps in at import when tracking is on: a process that imported tinygrad
  without it (a notebook that imported tinygrad first) cannot record a pass's matches, whatever it sets later."""
  return uop_ops.PatternMatcher is getattr(uop_ops, "TrackedPatternMatcher", None)

def tensor_device(t: Tensor) -> str: return t.device if isinstance(t.device, str) else ",".join(t.device or ())

def pending(ts: Sequence[Tensor]) -> list[Tensor]:
  """The tensors a realize of ts would compute (as Tensor.realize chooses them): not yet backed by a buffer, not virtual."""
  return [t for t in ts if not t.uop.is_virtual and not t.uop.has_buffer_identity()]

@contextlib.contextmanager
def on_realize(hook: Callable[[list[Tensor]], None]) -> Iterator[None]:
  """While inside, every Tensor.realize with something to compute calls hook(those tensors) instead (hook must realize them); a
  realize from inside the hook (reading a result back) is tinygrad's own."""
  original, busy = Tensor.realize, [False]
  def realize(self: Tensor, *lst: Tensor, do_update_stats: bool = True) -> Tensor:
    todo = pending((self, *lst))
    if busy[0] or not todo: return original(self, *lst, do_update_stats=do_update_stats)
    busy[0] = True
    try: hook(todo)
    finally: busy[0] = False
    return self
  Tensor.realize = realize  # type: ignore[method-assign]
  try: yield
  finally: Tensor.realize = original  # type: ignore[method-assign]

# ***** devices and renderers *****

def default_device() -> str: return best_device()  # defined at the end of this module

def host_renderer(device: str) -> Renderer: return Device[device].renderer

def _deviceless(cls: type[Renderer], target: Target, **attrs: Any) -> Renderer:
  # render for a device this machine lacks: skip the class __init__ (it loads the device's compiler library) and set what it would
  r = cls.__new__(cls)
  Renderer.__init__(r, target)
  for k, v in attrs.items(): setattr(r, k, v)
  r.compiler = Compiler()  # tinygrad's base Compiler returns the source as the "binary": codegen stops at rendering
  return r

def _metal_tensor_cores(arch: str) -> list:  # as MetalRenderer.__init__: Apple7 (M1) and later
  return tc.metal if arch.startswith("Apple") and arch[5:].isdigit() and int(arch[5:]) >= 7 else []

# each target's renderer as its device would configure it for arch (keys: explorer.spec.TARGETS; arches: explorer.spec.TARGET_ARCHES).
# CUDA keeps device "CUDA" in its Target: tinygrad's TF32 tensor-core rule checks it.
RENDER_TARGETS: dict[str, Any] = {
  "cuda": lambda arch: _deviceless(CUDARenderer, Target("CUDA", "CUDA", arch), tensor_cores=tc.get_cuda(arch)),
  "metal": lambda arch: _deviceless(MetalRenderer, Target("METAL", "METAL", arch), tensor_cores=_metal_tensor_cores(arch)),
  "opencl": lambda arch: _deviceless(OpenCLRenderer, Target("CL", "CL", arch)),
  "clang": lambda arch: _deviceless(ClangRenderer, Target("CPU", "CLANG", arch)),
  "llvm": lambda arch: _deviceless(CPULLVMRenderer, Target("CPU", "LLVM", arch)),
  "ptx": lambda arch: _deviceless(PTXRenderer, Target("CUDA", "PTX", arch), tensor_cores=PTXRenderer.tc_sm80 if int(arch[3:]) >= 80 else []),
  "wgsl": lambda arch: _deviceless(WGSLRenderer, Target("WEBGPU", "WGSL", arch)),
}
TARGET_OF_RENDERER = {ClangRenderer: "clang", CPULLVMRenderer: "llvm", CUDARenderer: "cuda", PTXRenderer: "ptx", MetalRenderer: "metal",
                      OpenCLRenderer: "opencl", WGSLRenderer: "wgsl"}

def render_target(name: str, arch: str) -> Renderer: return RENDER_TARGETS[name](arch)

def target_name(renderer: Renderer) -> str:
  """The explorer's name for the target a renderer renders (the host's own renderer included): clang, cuda, ..."""
  return next((n for cls, n in TARGET_OF_RENDERER.items() if type(renderer) is cls), type(renderer).__name__.removesuffix("Renderer").lower())

def renderer_arch(renderer: Renderer) -> str: return renderer.target.arch

def renderer_device(renderer: Renderer) -> str: return renderer.target.device

def without_beam(ast: UOp) -> tuple[UOp, int]:
  """The kernel with its BEAM width cleared (a deviceless target cannot time candidates: heuristic opts instead) and that width."""
  beam = getattr(ast.arg, "beam", 0) or 0
  return (ast.replace(arg=replace(ast.arg, beam=0)) if beam else ast), beam

def fill_ptx(src: str, arch: str) -> str:
  """The PTX tinygrad's PTXCompiler hands to ptxas: its VERSION and TARGET placeholders filled (runtime/support/compiler_cuda.py)."""
  from tinygrad.runtime.support.compiler_cuda import PTXCompiler
  return PTXCompiler(arch).compile(src).decode()

# ***** options: the variant's optimization setting as tinygrad context *****

def opt_context(opt: str) -> contextlib.AbstractContextManager:
  if opt == "none": return Context(NOOPT=1, BEAM=0)
  if opt.startswith("beam:"): return Context(NOOPT=0, BEAM=int(opt.split(":")[1]))
  return Context(NOOPT=0, BEAM=0)

# ***** rewrite tracking *****

@dataclass(frozen=True)
class Pass:
  group: int      # index into the trace's rewrite groups
  step: int       # index of this graph_rewrite inside its group
  name: str
  depth: int
  matches: int
  sink: int       # trace number of the graph this pass started from

def tracking_mark() -> int: return len(uop_ops.tracked_keys)

def passes_since(mark: int, base: int) -> list[tuple[str, list[Pass]]]:
  """Each rewrite group (tinygrad's top-level tracked call: 'Schedule ...', one per kernel codegen) opened since mark, with its passes.
  Group indices are relative to base, the mark the trace's rewrite blob starts from."""
  return [(ansistrip(k.display_name), [Pass(g - base, j, r.name, r.depth, len(r.matches), r.sink) for j, r in enumerate(ctxs)])
          for g, (k, ctxs) in enumerate(zip(uop_ops.tracked_keys[mark:], uop_ops.tracked_ctxs[mark:]), start=mark)]

def export_rewrites(base: int) -> bytes:
  """tinygrad's own RewriteTrace from base on, as data (encode_rewrite_log): enough to rebuild any intermediate graph later, in
  another process. ret and tb stay behind (ret may hold a renderer, tb is VIZ's Python stack)."""
  keys = [replace(k, ret=None, tb=None) for k in uop_ops.tracked_keys[base:]]
  return encode_rewrite_log(RewriteTrace(keys, uop_ops.tracked_ctxs[base:], uop_ops.uop_fields))

def trace_num(u: UOp) -> int: return u.trace_num

def rebuild(fields: collections.abc.Mapping[int, tuple], num: int, built: dict[int, UOp]) -> UOp:
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

class LiveLog:
  """This process's own rewrite log, read in place: what a trace reads back while it records (the bufferize decisions, the call's
  arguments, loop splits) is rebuilt from tinygrad's live fields, without writing and reading back a blob or importing its viewer
  (about a quarter of a second to import). Pass groups are relative to base, as in the blob the trace stores."""
  sources: Mapping[str, str] | None = None  # rules are read from the installed packages: this process ran them

  def __init__(self, base: int = 0) -> None:
    self.base, self.built = base, dict[int, UOp]()

  def sink(self, num: int) -> UOp: return rebuild(uop_ops.uop_fields, num, self.built)

  def rewrite(self, group: int, step: int) -> TrackedGraphRewrite: return uop_ops.tracked_ctxs[self.base + group][step]

  def nums(self) -> dict[int, int]: return {id(u): n for n, u in self.built.items()}

  def pass_output(self, p: Pass) -> UOp:
    """The graph a pass ended with (its start with every match applied): replayed with tinygrad's viewer code (imported here)."""
    from tinygrad.viz.serve import VizData, get_full_rewrite
    data = VizData(RewriteTrace(uop_ops.tracked_keys[self.base:], uop_ops.tracked_ctxs[self.base:], uop_ops.uop_fields))
    last = None
    for last in get_full_rewrite(data, data.trace.rewrites[p.group][p.step]): pass
    assert last is not None, f"pass {p.name} replayed no graph"
    return last["_sink"]

# ***** graphs: expand lazily from the rewrite blob, with tinygrad# ***** the rewrite log as data: what a trace stores and what may cross a wire *****
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
      DType: lambda x: {"d": self.dtype(x)}, ConstFloat: lambda x: {"f": float(x)}, InvalidType: lambda x: {"i": 1},
      frozenset: lambda x: {"s": [self.value(e) for e in x]},
      **{c: lambda x: {"e": type(x).__name__, "n": x.name} for c in LOG_ENUMS.values()},
      **{c: lambda x: {"c": type(x).__name__, "a": [self.value(getattr(x, f.name)) for f in dataclasses.fields(x)]} for c in LOG_CLASSES.values()}}

  def dtype(self, d: DType) -> int:
    if (i := self.dtypes.get(d)) is None: i = self.dtypes[d] = len(self.dtypes)
    return i

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
  columns: dict[str, list] = {"num": [], "op": [], "dtype": [], "src": [], "arg": [], "tag": [], "meta": []}
  done = 0
  while done < len(fields):  # a UOp in an arg is numbered (and recorded) as it is met: those are written in the next round
    nums = list(fields)[done:]
    done += len(nums)
    # a column at a time, names bound locally: a training step records millions of UOps, and most args and tags are plain
    rows = [fields[n] for n in nums]
    op_index, dtype, value, plain, dtypes = ops.__getitem__, enc.dtype, enc.value, _PLAIN, enc.dtypes
    columns["num"] += nums
    columns["op"] += [op_index(r[0]) for r in rows]
    columns["dtype"] += [i if (i := dtypes.get(r[1])) is not None else dtype(r[1]) for r in rows]
    columns["src"] += [r[2] for r in rows]
    columns["arg"] += [a if type(a := r[3]) in plain else value(a) for r in rows]
    columns["tag"] += [None if (t := r[4]) is None else value(t) for r in rows]
    columns["meta"] += [value(r[5]) if len(r) > 5 else None for r in rows]
  if enc.unstored: ENCODER_UNSTORED.update(enc.unstored)
  body = {"ops": [o.name for o in ops], "dtypes": [[d.priority, d.bitsize, d.name, d.fmt] for d in enc.dtypes], "keys": keys, "rewrites": rewrites,
          "fields": columns, "rewrite_fields": [f.name for f in dataclasses.fields(TrackedGraphRewrite)], "sources": sources}
  return write_plain(body)

ENCODER_UNSTORED: collections.Counter[str] = collections.Counter()  # classes kept as their repr in this process (tests check it stays empty)

def _check(ok: bool, why: str) -> None:
  if not ok: raise refused(why)

class _LogFields(collections.abc.Mapping):
  """A rewrite log's UOp fields by trace number, each decoded when first read (tinygrad's viewer reads uop_fields[n] only)."""
  def __init__(self, body: dict[str, Any]):
    cols = body["fields"]
    _check(isinstance(cols, dict) and all(isinstance(cols.get(c), list) and len(cols[c]) == len(cols["num"]) for c in
                                          ("num", "op", "dtype", "src", "arg", "tag", "meta")), "its UOp fields are not columns of one length")
    self.cols, self.row = cols, {n: i for i, n in enumerate(cols["num"]) if type(n) is int}
    _check(len(self.row) == len(cols["num"]), "a UOp's trace number is not a whole number, or repeats")
    _check(isinstance(body["ops"], list) and all(isinstance(n, str) and n in Ops.__members__ for n in body["ops"]), "it names an op tinygrad lacks")
    self.ops = [Ops[n] for n in body["ops"]]
    _check(isinstance(body["dtypes"], list) and all(isinstance(d, list) and len(d) == 4 and type(d[0]) is int and type(d[1]) is int
                                                   and isinstance(d[2], str) and (d[3] is None or isinstance(d[3], str)) for d in body["dtypes"]),
           "a dtype is not (priority, bits, name, format)")
    self.dtypes = [DType(*d) for d in body["dtypes"]]
    self.decoded: dict[int, tuple] = {}
    self.built: dict[int, UOp] = {}
    self.sources: dict[str, str] = {}  # each rule location's source, as the trace captured it (location_key -> text)

  def __len__(self) -> int: return len(self.row)
  def __iter__(self) -> Iterator[int]: return iter(self.row)
  def __getitem__(self, num: int) -> tuple:
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

def decode_rewrite_log(blob: bytes) -> RewriteTrace:
  """A rewrite blob back as tinygrad's RewriteTrace (UOp fields decoded as they are read); BlobRefused, one line, for anything that is not
  plain data of the shape encode_rewrite_log writes. A blob from before this format (a pickled RewriteTrace) loads through
  load_legacy_rewrite_log."""
  if not blob.startswith(REWRITE_LOG_MAGIC): return load_legacy_rewrite_log(blob)
  body = read_plain(blob)
  _check(isinstance(body, dict) and {"ops", "dtypes", "keys", "rewrites", "fields", "rewrite_fields"} <= set(body), "it lacks a part of the log")
  names = [f.name for f in dataclasses.fields(TrackedGraphRewrite)]
  _check(body["rewrite_fields"] == names, f"its rewrites have the fields {body['rewrite_fields']!r:.100}, tinygrad's have {names}")
  fields = _LogFields(body)
  sources = body.get("sources", {})  # a blob written before sources were captured has none: its rules are read from the installed packages
  fields.sources = {k: v for k, v in sources.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(sources, dict) else {}
  _check(isinstance(body["keys"], list) and all(isinstance(k, list) and len(k) == 2 and isinstance(k[0], str) for k in body["keys"]),
         "a key is malformed")
  keys = [TracingKey(name, tuple(fields.value(v)) if isinstance(v, list) else (), None, None) for name, v in body["keys"]]
  _check(isinstance(body["rewrites"], list) and all(isinstance(g, list) and all(isinstance(r, list) and len(r) == len(names) for r in g)
                                                     for g in body["rewrites"]), "a rewrite is malformed")
  def rewrite(r: list) -> TrackedGraphRewrite:
    got = dict(zip(names, r))
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

class RewriteBlob:
  """A loaded rewrite trace. Rebuilding a graph replays tinygrad's recorded matches, so callers should cache results."""
  def __init__(self, blob: bytes):
    from tinygrad.viz.serve import VizData
    log = decode_rewrite_log(blob)
    self.data = VizData(log)
    self.sources: dict[str, str] = getattr(log.uop_fields, "sources", None) or {}
    if isinstance(log.uop_fields, _LogFields): self.data.all_uops.update(log.uop_fields.built)

  def sink(self, trace_num: int) -> UOp:
    from tinygrad.viz.serve import _reconstruct
    return _reconstruct(self.data, trace_num)

  def graph_of(self, trace_num: int) -> dict: return uop_graph(self, self.sink(trace_num))

  def rewrite(self, group: int, step: int) -> TrackedGraphRewrite: return self.data.trace.rewrites[group][step]

  def nums(self) -> dict[int, int]:
    """id(UOp) -> trace number, for every UOp rebuilt so far (whole graphs rebuilt from the blob are kept by tinygrad's VizData)."""
    return {id(u): n for n, u in self.data.all_uops.items()}

  def pass_output(self, p: Pass) -> UOp:
    """The graph a pass ended with (its start with every match applied)."""
    from tinygrad.viz.serve import get_full_rewrite
    last = None
    for last in get_full_rewrite(self.data, self.data.trace.rewrites[p.group][p.step]): pass
    assert last is not None, f"pass {p.name} replayed no graph"
    return last["_sink"]

  def node_ids(self, trace_nums: list[int]) -> list[str]:
    """The graph node ids (uop_graph's) of recorded UOps: rebuilt UOps are interned, so while a graph of this blob holds its UOps,
    rebuilding one of them gives the same object."""
    out = []
    for n in trace_nums:
      try: out.append(str(id(self.sink(n))))
      except (KeyError, IndexError): pass  # a UOp the blob does not hold
    return out

  def pass_steps(self, group: int, step: int, limit: int) -> Iterator[dict]:
    """The graph before a pass, then after each of its first `limit` matches (changed nodes and the matching rule named)."""
    from tinygrad.viz.serve import get_full_rewrite
    for i, st in enumerate(get_full_rewrite(self.data, self.data.trace.rewrites[group][step])):
      if i > limit: break
      yield {"graph": _with_nums(_graph_from_viz(st["graph"]), self.nums()), "changed": [str(c) for c in (st["change"] or [])], "diff": st["diff"],
             "rule": None if st["upat"] is None else f"{st['upat'][0][0].split('/')[-1]}:{st['upat'][0][1]}"}

  def pass_record(self, group: int, step: int) -> dict:
    """Where in tinygrad a pass was called (the graph_rewrite call's file:line and its code) and how many matches it recorded."""
    r = self.data.trace.rewrites[group][step]
    return {"name": r.name, "call": f"{_rule_file(r.loc[0])}:{r.loc[1]}", "call_code": rule_source(r.loc, self.sources).split("\n")[0].strip(),
            "total": len(r.matches), "bottom_up": r.bottom_up, "depth": r.depth}

  def matches(self, group: int, step: int, offset: int, limit: int, depth: int = 3) -> list[dict]:
    """Matches offset+1..offset+limit of a pass (every one tinygrad recorded), each with its rule (file:line and the UPat's source as
    it stands in its file), the time the match took, and the rewritten UOp before and after: graphs `depth` sources deep and the
    text diff of their Python forms (tinygrad's pyrender, as its viewer diffs them). No replay of the pass: each match is rebuilt alone."""
    from tinygrad.viz.serve import _reconstruct, pystr, uop_to_json
    out = []
    for i, (before, after, loc, seconds) in enumerate(self.data.trace.rewrites[group][step].matches[offset:offset + limit], start=offset + 1):
      u0, u1 = _reconstruct(self.data, before, depth), _reconstruct(self.data, after, depth)
      diff = list(difflib.unified_diff(pystr(u0).splitlines(), pystr(u1).splitlines(), lineterm=""))[2:]  # no ---/+++ header
      out.append({"index": i, "op": u0.op.name, "rule": f"{_rule_file(loc[0])}:{loc[1]}", "rule_source": rule_source(loc, self.sources),
                  "time_s": seconds, "error": u1.arg if u1.op is Ops.REWRITE_ERROR else None, "diff": diff,
                  "before": _graph_from_viz(uop_to_json(self.data, u0)), "after": _graph_from_viz(uop_to_json(self.data, u1))})
    return out

  def origins(self, group: int, nums: Sequence[int]) -> list[dict]:
    """origin() of each of nums, sharing the replay's graphs."""
    seen: dict[int, set[int]] = {}
    return [self.origin(group, n, seen) for n in nums]

  def origin(self, group: int, num: int, seen: dict[int, set[int]] | None = None) -> dict:
    """Which pass of a rewrite group made the UOp with trace number num, read from the log itself by replaying where it first appears:
    pass by pass in the order they ran, the graph the pass started from, then each match's result. The first match whose result holds
    it (and whose pass did not start with it) made it: that pass and that rule. A UOp first seen in the graph a pass starts from was
    made between passes (graph_rewrite rebuilding a user whose sources changed, or a rewrite nobody tracked): no rule made it. A match
    whose rule ran nested rewrites (their passes are listed after it) is credited with what it returned. Nested passes are named with
    the pass they ran inside."""
    rewrites, u, seen = self.data.trace.rewrites[group], self.sink(num), {} if seen is None else seen  # seen: each graph's UOps
    def holds(root: int) -> bool:
      if root not in seen: seen[root] = {id(x) for x in self.sink(root).toposort()}
      return id(u) in seen[root]
    def name(step: int) -> str:
      r = rewrites[step]
      parent = next((q.name for q in reversed(rewrites[:step]) if q.depth < r.depth), None)
      return f"{r.name} (inside {parent})" if parent and r.depth > 0 else r.name
    def found(kind: str, step: int | None, match: int | None = None, loc: Any = None) -> dict:
      return {"num": num, "kind": kind, "step": step, "name": None if step is None else name(step), "match": match,
              "depth": None if step is None else rewrites[step].depth, "rule": None if loc is None else f"{_rule_file(loc[0])}:{loc[1]}",
              "rule_source": None if loc is None else rule_source(loc, self.sources)}
    for step, r in enumerate(rewrites):
      if r.sink is not None and holds(r.sink): return found("input" if step == 0 else "start", step)
      for j, (_, after, loc, _) in enumerate(r.matches, start=1):
        if holds(after): return found("match", step, j, loc)
    return found("unknown", None)

  def python(self, trace_num: int, max_lines: int = 4000) -> tuple[str, bool]:
    """A recorded graph as Python (tinygrad's pyrender, what its viewer shows), cut at max_lines; and whether it was cut."""
    from tinygrad.viz.serve import pystr
    lines = pystr(self.sink(trace_num)).splitlines()
    return "\n".join(lines[:max_lines]), len(lines) > max_lines

def uop_graph(blob: RewriteBlob, sink: UOp) -> dict:
  from tinygrad.viz.serve import uop_to_json
  return _with_nums(_graph_from_viz(uop_to_json(blob.data, sink)), blob.nums())

def _with_nums(g: dict, nums: dict[int, int]) -> dict:
  """Each node that is a recorded UOp gets its trace number (`num`): stable across graphs and processes, unlike the node ids."""
  for n in g["nodes"]:
    if (num := nums.get(int(n["id"]))) is not None: n["num"] = num
  return g

def _graph_from_viz(g: dict[int, dict]) -> dict:
  nodes = [{"id": str(k), "label": plain(v["label"]), "op": v["label"].split("\n", 1)[0], "color": v["color"],
            "addrspace": v.get("addrspace")} for k, v in g.items() if not v["exclude"]]
  keep = {n["id"] for n in nodes}
  edges = [{"src": str(s), "dst": str(k), "idx": i} for k, v in g.items() if str(k) in keep for i, s in v["src"] if str(s) in keep]
  return {"nodes": nodes, "edges": edges}

# ***** provenance: the Tensor functions, and the user's lines, that made each kernel *****
# tinygrad names the Tensor function that made each tensor-graph UOp (all_metadata: Metadata(name, backward); the gradient pass marks its
# UOps backward) but keeps neither the caller's line nor the link to kernels. `sited_metadata` records the line (a Metadata subclass,
# kept by the gradient's dataclasses.replace), `carrying_metadata` carries it through the scheduler's rewrites (a rewritten compute
# UOp keeps its original's), and `kernel_provenance` reads it back off a kernel's AST.

_EXPLORER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TINYGRAD_DIR = os.path.dirname(os.path.abspath(tinygrad.__file__))
_COMPUTE = frozenset(GroupOp.ALU) | {Ops.REDUCE, Ops.CAST, Ops.BITCAST, Ops.WMMA, Ops.STORE}

@dataclass(frozen=True)
class SitedMetadata(Metadata):
  site: tuple[str, int, str | None] | None = dataclasses.field(default=None, compare=False)  # the user's (file, line) and `via`

def _user_site() -> tuple[str, int, str | None] | None:
  """The first frame outside tinygrad and the explorer (the user's line that called the Tensor function), and `via`: the tinygrad
  function that line called when it is not the Tensor function itself (an nn layer's __call__, an optimizer's step)."""
  f: Any = sys._getframe(2)
  callee = None
  while f is not None and f.f_code.co_filename.startswith((_TINYGRAD_DIR, _EXPLORER_DIR, "<frozen")):
    f, callee = f.f_back, f
  if f is None: return None
  via = None
  if callee is not None and callee.f_code.co_filename.startswith(_TINYGRAD_DIR) and not callee.f_code.co_filename.endswith("tensor.py"):
    module = os.path.relpath(callee.f_code.co_filename, _TINYGRAD_DIR).removesuffix(".py").removesuffix("/__init__").replace(os.sep, ".")
    via = f"{module}.{callee.f_code.co_qualname}"
  return (f.f_code.co_filename, f.f_lineno, via)

@contextlib.contextmanager
def sited_metadata() -> Iterator[None]:
  """While inside, each outermost Tensor function call records its caller's file and line with its metadata."""
  import tinygrad.tensor as tensor_module
  plain = tensor_module._METADATA
  class Sited(type(plain)):  # type: ignore[misc]
    def set(self, x: Any) -> Any:
      return super().set(SitedMetadata(x.name, x.backward, _user_site()) if type(x) is Metadata else x)
  sited = Sited(plain.get())
  tensor_module._METADATA = sited
  try: yield
  finally: tensor_module._METADATA = plain

def _carry(rewrite: Callable[[Any, UOp], UOp]) -> Callable[[Any, UOp], UOp]:
  def carried(ctx: Any, root: UOp) -> UOp:
    ret, md, replace = rewrite(ctx, root), uop_ops.all_metadata, ctx.replace
    for old, new in replace.items():
      if (m := md.get(old)) is None and (new.op not in _COMPUTE or new in md or (m := _beneath(old)) is None): continue
      for _ in range(64):  # a node rewritten to one that was rewritten again: each along the chain is the old one's
        if new is old: break
        if new.op in _COMPUTE and new not in md: md[new] = m
        old, new = new, replace.get(new, new)
    return ret
  return carried

def _beneath(u: UOp) -> tuple | None:
  """The metadata of the compute nearest below a view (a movement op a rewrite turned into compute: RESHAPE(REDUCE) -> REDUCE(RESHAPE))."""
  frontier = list(u.src)
  for _ in range(4):
    for s in frontier:
      if s.op in _COMPUTE and (m := uop_ops.all_metadata.get(s)) is not None: return m
    frontier = [s for x in frontier if x.op in GroupOp.Movement for s in x.src]
  return None

@contextlib.contextmanager
def carrying_metadata() -> Iterator[None]:
  """While inside (the schedule), a compute UOp a rewrite makes of another keeps the other's metadata. Only compute UOps: a constant or
  a buffer is shared by every kernel that uses it, and would carry one kernel's functions into all of them."""
  ctx = uop_ops.RewriteContext
  walk, unified = ctx.walk_rewrite, ctx.unified_rewrite
  ctx.walk_rewrite, ctx.unified_rewrite = _carry(walk), _carry(unified)  # type: ignore[method-assign,assignment]
  try: yield
  finally: ctx.walk_rewrite, ctx.unified_rewrite = walk, unified  # type: ignore[method-assign]

def kernel_provenance(ast: UOp) -> list[dict[str, Any]]:
  """The Tensor functions whose compute a kernel does, each with the user's file and line when recorded: the metadata of the compute
  UOps its stores are computed from, not looking into what it loads (those values were computed by the kernels that stored them).
  Deduplicated, in source order."""
  out: dict[tuple, dict[str, Any]] = {}
  seen: set[UOp] = set()
  stack = [u for u in ast.toposort() if u.op is Ops.STORE]
  while stack:
    u = stack.pop()
    if u in seen or (u.op is Ops.INDEX and u.src[0].op is Ops.PARAM): continue
    seen.add(u)
    if u.op in _COMPUTE:
      for m in uop_ops.all_metadata.get(u, ()):
        site = getattr(m, "site", None)
        key = (m.name, m.backward, site)
        if key not in out: out[key] = {"fn": m.name, "file": site[0] if site else None, "line": site[1] if site else None, "backward": m.backward,
                                       "via": site[2] if site else None}
    stack.extend(u.src)
  entries = sorted(out.values(), key=lambda e: (e["file"] or "", e["line"] or 0))
  # metadata of UOps made before the recording began (a random seed's counter) has no line: noise beside a kernel's recorded lines
  return [e for e in entries if e["file"] is not None] or entries

# ***** tensor graph and scheduler *****

def tensor_sink(*outs: Tensor) -> UOp: return UOp.sink(*[o.uop for o in outs])

def op_histogram(sink: UOp) -> dict[str, int]: return dict(collections.Counter(u.op.name for u in sink.toposort()))

def schedule(*outs: Tensor) -> UOp:
  """tinygrad's schedule: an Ops.LINEAR of CALLs (kernels and copies), exactly as Tensor.realize builds it. Under BEAM, the kernels
  are marked for beam search here, as compile_linear would mark them, so that the programs codegen shows are the ones that run."""
  from tinygrad.engine.realize import pm_beam
  from tinygrad.helpers import BEAM
  from tinygrad.uop.ops import graph_rewrite
  linear = Tensor.schedule_linear(*outs)
  return graph_rewrite(linear, pm_beam, ctx=BEAM.value, walk=True) if BEAM.value >= 1 else linear

@dataclass(frozen=True)
class Stage:
  """One bufferize (Ops.STAGE) node of rangeify."""
  shape: tuple[int, ...]
  dtype: str
  addrspace: str
  removable: bool
  src_op: str
  nbytes: int
  num: int | None = None  # its trace number in the rewrite blob: the graph pages select the node by it
  reads: tuple[tuple[str, int], ...] = ()  # the buffers its value is computed from: ("slot", n), argument n of the scheduled call, or
  into: tuple[tuple[str, int], ...] = ()   # ("stage", num), a kept STAGE; and the buffers its value is stored into (_data_flow)

def _removable(u: UOp) -> bool: return bool(getattr(u.arg, "removable", True))

def _slot(u: UOp) -> int | None:
  """The argument slot of the buffer a STORE, INDEX or AFTER addresses (its PARAM), None where it is no argument."""
  while u.op in (Ops.STORE, Ops.INDEX, Ops.AFTER, Ops.BITCAST, Ops.CAST) and u.src: u = u.src[0]
  return u.arg.slot if u.op is Ops.PARAM and isinstance(u.arg, ParamArg) else None

Flow = frozenset[tuple[str, int]]  # ("slot", n): argument n of the scheduled call (a buffer); ("stage", num): a kept STAGE, a buffer once stored

def _data_flow(sink: UOp, nums: dict[int, int], kept: Callable[[UOp], bool]) -> tuple[dict[UOp, Flow], dict[UOp, Flow]]:
  """Per UOp of a rangeify graph: the buffers its value is computed from (reads), and the buffers it is stored into (into). A buffer is a
  PARAM or the AFTER that names it once stored (an argument slot), or a kept STAGE; an inlined STAGE is recomputed by its reader, so the
  flow goes through it."""
  order = sink.toposort()
  def buffer(u: UOp) -> Flow | None:
    if u.op in (Ops.PARAM, Ops.AFTER) and (slot := _slot(u)) is not None: return frozenset({("slot", slot)})
    if u.op is Ops.STAGE and kept(u) and (num := nums.get(id(u))) is not None: return frozenset({("stage", num)})
    return None
  reads: dict[UOp, Flow] = {}
  for u in order: reads[u] = b if (b := buffer(u)) is not None else frozenset().union(*(reads[x] for x in u.src))
  users: dict[UOp, list[UOp]] = collections.defaultdict(list)
  for u in order:
    for x in u.src: users[x].append(u)
  into: dict[UOp, Flow] = {}
  for u in reversed(order):
    goes: set[tuple[str, int]] = set()
    for v in users[u]:
      if v.op is Ops.STORE and (slot := _slot(v)) is not None: goes.add(("slot", slot))
      elif v.op is Ops.STAGE and (b := buffer(v)) is not None: goes |= b
      else: goes |= into.get(v, frozenset())
    into[u] = frozenset(goes)
  return reads, into

def stages_in(sink: UOp, blob: RewriteBlob | LiveLog | None = None, kept: Callable[[int | None], bool] | None = None) -> list[Stage]:
  """The STAGEs of a graph, each with its data flow (reads, into), which stops at the STAGEs `kept` says became buffers (by trace
  number; default: the ones not removable)."""
  nums = blob.nums() if blob is not None else {}
  reads, into = _data_flow(sink, nums, (lambda u: not _removable(u)) if kept is None else (lambda u: kept(nums.get(id(u)))))
  ret = []
  for u in sink.toposort():
    if u.op is not Ops.STAGE: continue
    shape = tuple(int(s) for s in u.shape) if u._shape is not None else ()
    n = 1
    for s in shape: n *= s
    ret.append(Stage(shape, u.dtype.name, getattr(getattr(u.arg, "addrspace", None), "name", "GLOBAL"), _removable(u), u.src[0].op.name,
                     n * u.dtype.itemsize, nums.get(id(u)), tuple(sorted(frozenset().union(*(reads[x] for x in u.src)))),
                     tuple(sorted(into.get(u, frozenset())))))
  return ret

def call_argument_nums(blob: RewriteBlob | LiveLog, passes: list[Pass]) -> list[int | None]:
  """The trace numbers of the buffers the scheduled call takes, by argument slot (the PARAM slots of rangeify's graphs): read off the
  graph the "schedule to linear" pass started from, tinygrad's CALL of the tensor graph's SINK on its buffers."""
  p = next((p for p in passes if p.name == "schedule to linear"), None)
  if p is None: return []
  call, nums = blob.sink(p.sink), blob.nums()
  return [nums.get(id(b)) for b in call.src[1:]] if call.op is Ops.CALL else []

def realized_in(sink: UOp, blob: RewriteBlob | LiveLog) -> list[Stage]:
  """The boundaries stored to directly rather than through a STAGE (outputs, .contiguous()): each AFTER of a buffer, as a Stage row."""
  nums, ret = blob.nums(), []
  for u in sink.toposort():
    if u.op is not Ops.AFTER or not u.src: continue
    buf, dt = u.src[0], getattr(u.src[0].dtype, "base", u.src[0].dtype)
    shape = tuple(int(x) for x in buf.shape) if buf._shape is not None else (int(buf.max_numel()),)
    stored = u.src[1] if len(u.src) > 1 else buf
    while stored.op in (Ops.END, Ops.GROUP, Ops.AFTER) and stored.src: stored = stored.src[0]  # down to the STORE
    src_op = stored.src[1].op.name if stored.op is Ops.STORE and len(stored.src) > 1 else stored.op.name
    slot = _slot(u)  # the argument slot of the buffer it stores: the buffer it is, exactly
    ret.append(Stage(shape, dt.name, "GLOBAL", False, src_op, math.prod(shape) * dt.itemsize, nums.get(id(u)),
                     into=() if slot is None else (("slot", slot),)))
  return ret

# pass names of rangeify in get_kernel_graph: STAGEs exist after apply rangeify; removable ones are fused away in DEBUF
RANGEIFY_PASS, DEBUF_PASS, STAGE_TO_STORE_PASS = "apply rangeify", "symbolic+reduce_collapse+debuf", "stage to store"

def stage_decisions(blob: RewriteBlob | LiveLog, passes: list[Pass]) -> dict:
  """Which STAGEs rangeify created, which the debuf pass removed (fused) and which survived to become buffers.
  Read off the graphs tinygrad recorded at the start of the debuf pass and of the pass after it."""
  names = [p.name for p in passes]
  if DEBUF_PASS not in names: return {"created": [], "kept": [], "fused": [], "note": "no rangeify pass was recorded"}
  i = names.index(DEBUF_PASS)
  after = next((p for p in passes[i+1:] if p.depth <= passes[i].depth), None)
  created = stages_in(blob.sink(passes[i].sink), blob)
  kept = stages_in(blob.sink(after.sink), blob) if after is not None else stages_in(blob.pass_output(passes[i]), blob)
  # STAGEs change identity as their sources are rewritten: pair survivors with their origin by ever looser signatures
  unpaired_created, unpaired_kept, kept_of = list(created), list(kept), {}
  for sig in (lambda s: (s.shape, s.dtype, s.addrspace, s.src_op), lambda s: (s.dtype, s.addrspace, s.src_op), lambda s: (s.dtype, s.addrspace)):
    for k in list(unpaired_kept):
      if (c := next((c for c in unpaired_created if sig(c) == sig(k)), None)) is not None:
        unpaired_created.remove(c); unpaired_kept.remove(k)
        kept_of[c.num] = kept.index(k)  # the created STAGE (by trace number) that survived as kept row k
  # the flow again, now that it is known which STAGEs survived: it goes through the inlined ones and stops at the kept ones
  created = stages_in(blob.sink(passes[i].sink), blob, kept=lambda n: n in kept_of)
  fused = [c for c in created if c.num not in kept_of]
  realized = realized_in(blob.sink((after or passes[i]).sink), blob)
  return {"created": created, "kept": kept, "fused": fused, "realized": len(realized), "realized_rows": realized, "debuf_matches": passes[i].matches,
          "debuf_pass": i, "kept_of": kept_of}


# ***** the schedule's calls and buffers *****

@dataclass
class Call:
  index: int
  kind: str                 # "kernel" | "copy" | other tinygrad call kinds
  ast: UOp
  buffers: list[UOp]        # the call's buffer arguments, in slot order

def calls(linear: UOp) -> list[Call]:
  from tinygrad.engine.realize import get_call_arg_uops
  ret = []
  for i, c in enumerate(linear.src):
    ast = c.src[0]
    kind = "kernel" if ast.op in (Ops.SINK, Ops.PROGRAM) else ast.op.name.lower()
    ret.append(Call(i, kind, ast, list(get_call_arg_uops(c))))
  return ret

def buffer_key(b: UOp) -> int:
  # the memory planner hands some kernels a view (e.g. a BITCAST) into a shared arena: each distinct view is one logical buffer
  return id(b if b.op is not Ops.BUFFER else b.buf_uop)

def buffer_facts(b: UOp) -> dict:
  arena = b.buf_uop
  facts = {"numel": int(b.max_numel()), "dtype": b.dtype.name, "nbytes": int(b.max_numel()) * b.dtype.itemsize,
           "device": arena.device if isinstance(arena.device, str) else ",".join(arena.device), "num": b.trace_num}
  if b.op is not Ops.BUFFER:
    facts["planned"] = f"view ({b.op.name}) into a {int(arena.max_numel()) * arena.dtype.itemsize}-byte arena of the memory planner"
  return facts

def tensor_buffer(t: Tensor) -> UOp: return t.uop.buf_uop

def copy_ins_outs(call: Call) -> tuple[list[int], list[int]]: return [1], [0]

def kernel_reads_writes(ast: UOp) -> tuple[list[int], list[int]]:
  """Parameter slots a kernel AST loads from and stores to."""
  outs, ins = set(), set()
  for u in ast.toposort():
    if u.op is Ops.STORE:
      outs |= {p.arg.slot for p in u.src[0].toposort() if p.op is Ops.PARAM and p.arg.slot >= 0 and p.addrspace is AddrSpace.GLOBAL}
  for u in ast.toposort():
    if u.op is Ops.PARAM and u.arg.slot >= 0 and u.addrspace is AddrSpace.GLOBAL and u.arg.slot not in outs: ins.add(u.arg.slot)
  return sorted(ins), sorted(outs)

# ***** codegen *****

class CompileFailed(RuntimeError):
  """The host's compiler rejected a kernel: its message (what the compiler wrote to stderr) and the source it was given."""
  def __init__(self, message: str, source: str):
    super().__init__(message)
    self.source = source

@contextlib.contextmanager
def _stderr_to(f: Any) -> Iterator[None]:
  """fd 2 (which a compiler subprocess inherits) into the file f while the block runs."""
  sys.stderr.flush()
  saved = os.dup(2)
  os.dup2(f.fileno(), 2)
  try: yield
  finally:
    os.dup2(saved, 2)
    os.close(saved)

class CompileTimer:
  """Times the exact compile calls tinygrad makes for a renderer (around its compiler's compile method); a failed compile raises
  CompileFailed with the compiler's own message."""
  def __init__(self, renderer: Renderer):
    self.seconds, self.calls = 0.0, 0  # calls: compiles that ran (none: tinygrad's disk cache had the binary)
    comp = renderer.compiler
    inner = comp.compile
    def timed(src: str) -> bytes:
      self.calls += 1
      st = time.perf_counter()
      with tempfile.TemporaryFile("w+") as err:
        try:
          with _stderr_to(err): return inner(src)
        except Exception as e:
          err.seek(0)
          said = "\n".join(err.read().splitlines()[:40])
          raise CompileFailed(f"{type(comp).__name__} rejected the kernel: " + (said or f"{type(e).__name__}: {e}"), src) from e
        finally: self.seconds += time.perf_counter() - st
    self._comp, self._inner = comp, inner
    comp.compile = timed  # type: ignore[method-assign]
  def close(self) -> None: self._comp.compile = self._inner  # type: ignore[method-assign]

def codegen_host(ast: UOp, renderer: Renderer, rewrites: Sequence[Rewrite] = ()) -> UOp:
  """tinygrad's own to_program: the PROGRAM it caches is the one compile_linear/run_linear then run. With rewrites, the rewritten
  PROGRAM goes into that cache under the kernel's key, so the schedule runs what was rewritten."""
  if not rewrites: return to_program(ast, renderer)
  to_program_cache[to_program_key(ast, renderer)] = prg = _to_program_rewritten(ast, renderer, tuple(rewrites))
  return prg

def codegen_deviceless(ast: UOp, renderer: Renderer, rewrites: Sequence[Rewrite] = ()) -> UOp:
  return _to_program_rewritten(ast, renderer, tuple(rewrites)) if rewrites else do_to_program(ast, renderer)

# ***** opts by hand: tinygrad's Opt(op, axis, arg), written "UPCAST:0:4", applied as apply_opts applies a kernel's opts_to_apply *****

OPT_OPS = tuple(o.name for o in OptOps)

class OptRefused(ValueError):
  """Text that is no opt, or an opt tinygrad refuses for this kernel at this point (its KernelOptError's message)."""

def opt_text(o: Opt) -> str:
  """UPCAST:0:4, LOCAL:1:8, TC:0:-1,2,1 (TC's arg is a tuple), NOLOCALS:: (no axis, no arg)."""
  arg = ",".join(map(str, o.arg)) if isinstance(o.arg, tuple) else "" if o.arg is None else str(o.arg)
  return f"{o.op.name}:{'' if o.axis is None else o.axis}:{arg}"

def parse_opt(text: str) -> Opt:
  op, _, rest = text.strip().partition(":")
  axis, _, arg = rest.partition(":")
  if op.upper() not in OPT_OPS: raise OptRefused(f"{text!r}: no such opt; tinygrad's are {', '.join(OPT_OPS)} (written OP:AXIS:ARG, UPCAST:0:4)")
  try:
    args = tuple(int(x) for x in arg.split(",")) if arg else ()
    return Opt(OptOps[op.upper()], int(axis) if axis else None, args if len(args) > 1 else args[0] if args else None)
  except ValueError: raise OptRefused(f"{text!r}: the axis and the argument are integers (OP:AXIS:ARG, UPCAST:0:4)") from None

class _AtApplyOpts(Exception):
  def __init__(self, sink: UOp) -> None: self.sink = sink

def opts_start(ast: UOp, renderer: Renderer) -> UOp:
  """The kernel as tinygrad's apply_opts receives it in full_rewrite_to_sink: after the passes before it (split ranges, symbolic,
  simplify ranges), which merge and split ranges. An opt's axis numbers this AST's ranges, not the scheduled kernel's; replayed on
  that one, a kernel's own opts are refused (their axes point elsewhere). Untracked: no kernel's rewrite group records these passes."""
  import tinygrad.codegen as codegen
  def stop(ast: UOp, ren: Renderer, beam: int = 0) -> UOp: raise _AtApplyOpts(ast)
  original, codegen.apply_opts = codegen.apply_opts, stop
  try:
    with Context(TRACK_MATCH_STATS=0): full_rewrite_to_sink(with_opts(ast, ()), renderer)
  except _AtApplyOpts as at: return at.sink
  finally: codegen.apply_opts = original
  raise RuntimeError("tinygrad's codegen did not reach apply_opts")

_starts: dict[tuple, UOp] = {}  # opts_start by tinygrad's program key: a schedule's checks, heuristic and next opts share one

def _scheduler(ast: UOp, renderer: Renderer, opts: Sequence[Opt]) -> Any:
  """tinygrad's Scheduler for the kernel, as apply_opts starts it, with these opts applied in order (OptRefused names the one refused)."""
  from tinygrad.codegen.opt import KernelOptError
  from tinygrad.codegen.opt.postrange import Scheduler
  if (start := _starts.get(key := to_program_key(ast, renderer))) is None:
    if len(_starts) >= 16: _starts.clear()
    start = _starts[key] = opts_start(ast, renderer)
  k = Scheduler(start, renderer)
  k.convert_loop_to_global()
  for i, o in enumerate(opts):
    which = f"{opt_text(o)} (opt {i + 1} of {len(opts)})"
    try: k.apply_opt(o)
    except KernelOptError as e: raise OptRefused(f"{which}: {ansistrip(str(e)) or 'tinygrad refused it'}") from None
    except (AssertionError, IndexError, ValueError) as e:  # an axis out of range fails before tinygrad's own checks
      raise OptRefused(f"{which}: {type(e).__name__}: {ansistrip(str(e))}") from None
  return k

def heuristic_opts(ast: UOp, renderer: Renderer) -> list[Opt]:
  """The opts tinygrad's heuristic (hand_coded_optimizations) picks for the kernel on this renderer."""
  from tinygrad.codegen.opt.heuristic import hand_coded_optimizations
  return list(hand_coded_optimizations(_scheduler(ast, renderer, [])).applied_opts)

def legal_opts(ast: UOp, renderer: Renderer, opts: Sequence[Opt]) -> list[Opt]:
  """The opts tinygrad's BEAM search would try next after these (get_kernel_actions: the legal ones within its upcast and local caps)."""
  from tinygrad.codegen.opt.search import actions, get_kernel_actions
  return [actions[i - 1] for i in get_kernel_actions(_scheduler(ast, renderer, opts), include_0=False)]

def with_opts(ast: UOp, opts: Sequence[Opt]) -> UOp:
  """The kernel with exactly these opts to apply (tinygrad's KernelInfo.opts_to_apply: neither the heuristic nor BEAM runs)."""
  info = ast.arg if isinstance(ast.arg, KernelInfo) else KernelInfo()
  return ast.replace(arg=replace(info, opts_to_apply=tuple(opts), applied_opts=(), beam=0))

def _on_device(ast: UOp, device: str) -> UOp:
  return ast.substitute({p: p.replace(arg=replace(p.arg, device=device)) for p in ast.toposort() if p.op is Ops.PARAM})

def kernel_outputs(asts: Sequence[UOp], renderer: Renderer, device: str, seed: int = 0) -> list[list[Any]] | None:
  """Each variant of one kernel run once on the device over the same inputs (seeded random values in every buffer it has): the
  values of every buffer it writes, per variant, as numpy arrays. None where a buffer's dtype has no numpy twin."""
  import numpy as np
  from tinygrad.codegen.opt.postrange import args_from_ast
  from tinygrad.dtype import _to_np_dtype
  slots = sorted(p.arg.slot for p in asts[0].backward_slice if p.op is Ops.PARAM and p.arg.slot >= 0)
  _, written = kernel_reads_writes(asts[0])
  rng, start, out = np.random.default_rng(seed), None, []
  for ast in asts:
    shapes, var_vals = args_from_ast(ast, device)
    if any(_to_np_dtype(b.dtype) is None for b in shapes): return None
    if start is None:
      start = [(rng.standard_normal(b.size) if dtypes.is_float(b.dtype) else rng.integers(0, 8, b.size)).astype(_to_np_dtype(b.dtype))
               for b in shapes]
    bufs = [tinygrad.device.Buffer(device, b.size, b.dtype, initial_value=data.tobytes()) for b, data in zip(shapes, start)]
    next(time_call(do_to_program(_on_device(ast, device), renderer).call(*[UOp.from_buffer(b) for b in bufs]), var_vals))
    out.append([bufs[slots.index(s)].numpy().copy() for s in written])
  return out

def kernel_timers(asts: Sequence[UOp], renderer: Renderer, device: str) -> list[Iterator[float]]:
  """tinygrad's time_call for each of these variants of one kernel, compiled for the device and run on the same fresh buffers of its
  parameters' sizes (as BEAM times a candidate, at full size): each yields one synchronized run time in seconds."""
  from tinygrad.codegen.opt.postrange import args_from_ast
  rawbufs, var_vals = args_from_ast(asts[0], device)
  args = [UOp.from_buffer(b.ensure_allocated()) for b in rawbufs]
  timers = []
  for ast in asts: timers.append(time_call(do_to_program(_on_device(ast, device), renderer).call(*args), var_vals))
  return timers

MAX_BEAM_CANDIDATES = 4000  # recorded per kernel: a wide BEAM on a big kernel times thousands

@contextlib.contextmanager
def recording_beam() -> Iterator[list[tuple[list[str], float]]]:
  """Every candidate tinygrad's beam_search times while inside, in order: (its opts, the least of its run times). Candidates it never
  times (code identical to an earlier one's, a failed compile, 1000x the least compute) are not in it, as they are not in its choice.
  The disk cache of BEAM results is off inside (CACHELEVEL=0): a cached answer would time nothing. A candidate's codegen runs
  untracked (its rewrites are not the kernel's: only the winner's codegen, after the search, is recorded), at tinygrad's own cost."""
  from tinygrad.codegen.opt import search
  timed: list[tuple[list[str], float]] = []
  original_time, original_compile = search._time_program, search._try_compile
  def timer(prg: UOp, *args: Any, **kwargs: Any) -> list[float]:
    tms = original_time(prg, *args, **kwargs)
    if len(timed) < MAX_BEAM_CANDIDATES: timed.append(([opt_text(o) for o in prg.src[0].arg.applied_opts], min(tms)))
    return tms
  def untracked(x: tuple[int, Any]) -> Any:
    with Context(TRACK_MATCH_STATS=0): return original_compile(x)
  search._time_program = timer
  if search.get_worker_pool() is None: search._try_compile = untracked  # in this process (a pool's workers track nothing)
  try:
    with Context(CACHELEVEL=0): yield timed
  finally: search._time_program, search._try_compile = original_time, original_compile

def check_opts(ast: UOp, renderer: Renderer, opts: Sequence[Opt]) -> None:
  """OptRefused (tinygrad's reason) unless every opt applies, in order, before codegen runs."""
  _scheduler(ast, renderer, opts)

def kernel_axes(ast: UOp, renderer: Renderer, opts: Sequence[Opt] = ()) -> list[dict[str, Any]]:
  """The kernel's axes after these opts, as apply_opt numbers them: each one's size and kind (tinygrad's AxisType; WEAK, a loop not
  yet made global, is "loop"), and for a reduce axis its number for UNROLL (among the unrollable axes) and GROUP (among the reduce ones)."""
  k = _scheduler(ast, renderer, opts)
  unroll, group = k.unrollable_dims, k.axes_of(AxisType.REDUCE)
  def kind(t: AxisType) -> str: return "loop" if t in (AxisType.WEAK, AxisType.LOOP) else t.name.lower()
  return [{"axis": i, "size": s if isinstance(s, int) else ansistrip(s.render()), "kind": kind(t),
           "unroll": unroll.index(i) if i in unroll else None, "group": group.index(i) if i in group else None}
          for i, (s, t) in enumerate(zip(k.full_shape, k.axis_types))]

# ***** custom rewrites: extra named passes in codegen (explorer.tracing.rewrites holds the catalogue) *****
# tinygrad 0.14 has no Renderer.pre_matcher (the codegen notes' hook); its Renderer.extra_matcher runs inside the "final rewrite" pass
# among tinygrad's own rules. So a rewrite runs as a graph_rewrite pass of its own, at one of two points: "sink", on the graph
# full_rewrite_to_sink hands the linearizer, or "linear", on PROGRAM(sink, LINEAR) before rendering (tinygrad renders a LINEAR in the
# order given; its linearizer is what places loads).

REWRITE_PASS = "explorer rewrite {}"  # the name of a custom rewrite's pass

@dataclass(frozen=True)
class Rewrite:
  name: str                                 # as the variant names it: sink-loads, peel:2, a file's name
  point: str                                # "sink" or "linear"
  matcher: PatternMatcher
  context: Callable[[UOp], Any] = lambda root: None  # the rewrite's ctx, from the graph it is about to rewrite

  @property
  def pass_name(self) -> str: return REWRITE_PASS.format(self.name)

_pm_linearize = PatternMatcher([(UPat(Ops.PROGRAM, src=(UPat(Ops.SINK, name="sink"),), name="prg"), do_linearize)])

def _apply(root: UOp, rewrites: Sequence[Rewrite], point: str) -> UOp:
  for r in rewrites:
    if r.point == point: root = graph_rewrite(root, r.matcher, ctx=r.context(root), name=r.pass_name)
  return root

@rewrite_group(name=lambda ast, renderer, rewrites, ret, **_: TracingKey((k := ret.src[0].arg).name, (k.function_name, ast, ret.key), ret=renderer))
@Context(ALLOW_DEVICE_USAGE=0)
def _to_program_rewritten(ast: UOp, renderer: Renderer, rewrites: tuple[Rewrite, ...]) -> UOp:
  """do_to_program with the rewrites' passes in it: full_rewrite_to_sink, the "sink" rewrites, linearize, the "linear" rewrites,
  then tinygrad's pm_to_program (Estimates, render, compile) on the result."""
  sink = _apply(full_rewrite_to_sink(ast, renderer, optimize=ast.tag is None), rewrites, "sink")
  prg = UOp(Ops.PROGRAM, src=(sink,), arg=ProgramInfo.from_sink(sink, renderer.target))
  if any(r.point == "linear" for r in rewrites):
    prg = _apply(graph_rewrite(prg, _pm_linearize, ctx=renderer, name="linearize"), rewrites, "linear")
  return graph_rewrite(prg, pm_to_program, ctx=renderer, name="linearize/render")

@dataclass
class ProgramFacts:
  name: str
  global_size: list
  local_size: list | None
  flops: int
  lds: int
  mem: int
  opts: list[str]
  linear: list[str]
  ops: dict[str, int]
  source: str
  storage: Storage          # buffers the kernel keeps on chip: registers and local (shared) memory
  nums: list[int]           # each linear UOp's trace number in the rewrite blob: the graph pages find them by it
  sink: int                 # the program's SINK (what spec_program checks) by its trace number: an analysis rebuilds it from the blob

UOP_CLASSES = {"alu": lambda u: u.op in GroupOp.ALU, "loads": lambda u: u.op is Ops.LOAD, "stores": lambda u: u.op is Ops.STORE,
               "consts": lambda u: u.op is Ops.CONST, "ranges": lambda u: u.op is Ops.RANGE}

# ***** loop splitting: where tinygrad's "split ranges" pass (pm_split_ranges, codegen/simplify.py) cut a loop *****

def rule_source(loc: tuple[str, int], sources: Mapping[str, str] | None = None) -> str:
  """A rule's (or a graph_rewrite call's) source: as the rewrite log captured it when the trace ran, else as it stands in the installed
  tinygrad or explorer. No other file is ever opened: a location is data from the log, which may come from elsewhere."""
  if sources and (got := sources.get(location_key(loc))) is not None: return got
  return _installed_source(*loc)

@functools.cache
def _package_roots() -> dict[str, pathlib.Path]:
  return {"tinygrad": pathlib.Path(tinygrad.__file__).resolve().parent, "explorer": pathlib.Path(__file__).resolve().parents[1]}

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

RangeFact = tuple[Any, Any, str]  # a loop's axis, size and kind, hashable (loops are counted)

def _range_fact(u: UOp) -> RangeFact:
  n = u.src[0].src[0] if u.src and u.src[0].op is Ops.CAST and u.src[0].src[0].op is Ops.CONST else u.src[0] if u.src else None
  size = None if n is None else n.arg if n.op is Ops.CONST else str(n)
  kind = str(u.arg[-1]).split(".")[-1] if isinstance(u.arg, tuple) else ""
  return (u.arg[0] if isinstance(u.arg, tuple) else u.arg, size, kind)

def _loop_range(f: RangeFact) -> LoopRange: return {"axis": f[0], "size": f[1], "kind": f[2]}

def _rule_file(path: str) -> str:
  """tinygrad's rules by their path in tinygrad (codegen/simplify.py), the explorer's own by theirs (explorer/tracing/rewrites.py), any
  other by its file's name."""
  rel = stored_location(path)
  return rel.removeprefix("tinygrad/")

def _splits_loops(pass_name: str) -> bool:
  """tinygrad's "split ranges" pass, and the explorer's peel:N rewrite (explorer.tracing.rewrites)."""
  return pass_name == "split ranges" or pass_name.startswith(REWRITE_PASS.format("peel:"))

def loop_splits(log: LiveLog | RewriteBlob, passes: Sequence[Pass]) -> list[LoopSplit]:
  """Each match of a "split ranges" pass among a kernel's passes: the loop(s) it cut (axis, trip count, kind), the loops they became,
  the rule (its file:line and source, read from tinygrad now). tinygrad records the pass's rewrite of the kernel; the cut ranges are
  what the graph lost and the new ranges what it gained. log: where the passes' groups point (this process's, or a stored blob)."""
  out: list[LoopSplit] = []
  for p in passes:
    if not _splits_loops(p.name) or not p.matches: continue
    for before, after, loc, _ in log.rewrite(p.group, p.step).matches:
      fb, fa = (collections.Counter(_range_fact(u) for u in log.sink(n).toposort() if u.op is Ops.RANGE) for n in (before, after))
      if fb == fa: continue  # a match of the pass that cut nothing (it also flattens ranges)
      # the loops it cut and the ones they became; a loop nested in a peeled one is copied, not cut, and is left out of both
      out.append({"pass": p.name, "step": p.step, "ranges": [_loop_range(f) for f in sorted(fb - fa, key=str)],
                  "into": [_loop_range(f) for f in sorted(fa - fb, key=str) if f not in fb],
                  "rule": f"{_rule_file(loc[0])}:{loc[1]}", "rule_source": rule_source(loc, log.sources)})
  return out

# ***** spec checks: tinygrad's own specs (tinygrad/uop/spec.py), every UOp checked, every violation kept *****

MAX_VIOLATIONS = 50
SPECS = {"tensor": "spec_tensor", "kernel_graph": "spec_kernel_graph", "program": "spec_program"}

def spec_check(roots: list[UOp], spec: str, enter_calls: bool = True) -> SpecCheck:
  """Run one of tinygrad's spec PatternMatchers over every UOp under roots, as type_verify does, but recording each UOp no rule accepts
  (with type_verify's message) instead of raising at the first. Returns {spec, ok, checked, violations (at most MAX_VIOLATIONS),
  violation_count}."""
  from tinygrad.uop import spec as specs
  matcher = getattr(specs, SPECS[spec])
  lst = list(dict.fromkeys(u for r in roots for u in r.toposort(enter_calls=enter_calls)))
  bad: list[SpecViolation] = []
  with Context(TRACK_MATCH_STATS=0):
    for i, u in enumerate(lst):
      if matcher.rewrite(u) is not True:
        bad.append({"index": i, "op": u.op.name, "dtype": str(u.dtype), "trace_num": trace_num(u), "message": f"UOp verification failed at "
                    f"{i} on {u.op} {u.dtype} {len(u.src)} {[(x.op, x.dtype, x.arg) for x in u.src]} {u.arg}"[:400]})
  return {"spec": SPECS[spec], "ok": not bad, "checked": len(lst), "violations": bad[:MAX_VIOLATIONS], "violation_count": len(bad)}

def tensor_spec_check(sink: UOp) -> SpecCheck:
  """spec_tensor over the tensor graph where tinygrad checks it (lower_sink_to_linear): the function Tensor.realize schedules
  (transform_to_call's CALL body, storage as PARAMs). The graph the tensors hold is only ever checked against spec_full: in it an AFTER
  on a COPY (Tensor.rand's counter, copied from PYTHON) is legal, and spec_tensor rejects it. The graph as held where the call cannot
  be built (the schedule then fails and says why)."""
  from tinygrad.tensor import transform_to_call
  first = next(UOp.unique_num)  # its outputs' new buffers take slots: given back, the realize numbers them as plain tinygrad does
  try:
    with Context(TRACK_MATCH_STATS=0): call, _ = transform_to_call(sink)
  except Exception: return spec_check([sink], "tensor")
  finally: UOp.unique_num = itertools.count(first)
  return spec_check([call.src[0]], "tensor")

def schedule_calls(linear: UOp) -> list[UOp]: return list(linear.src)  # the kernel graph's calls (tinygrad checks them before linearizing)

def program_sink(prg: UOp) -> UOp: return prg.src[0]

# ***** register pressure: values live at once over the linear order (what a register allocator has to fit) *****

CURVE_POINTS = 512
NOT_VALUES = (Ops.CONST, Ops.PARAM, Ops.SINK, Ops.GROUP, Ops.AFTER, Ops.NOOP, Ops.RANGE, Ops.END, Ops.IF, Ops.ENDIF)

def _is_value(u: UOp) -> bool:
  """A value the kernel holds in registers: not void, not an immediate (a CONST or a cast of one), not a kernel argument, no loop mark."""
  return u.dtype != dtypes.void and u.op not in NOT_VALUES and not (u.op is Ops.CAST and u.src and u.src[0].op is Ops.CONST)

def _lanes(u: UOp) -> int:
  if u.op is Ops.BUFFER: return int(u.max_numel()) if u.addrspace is AddrSpace.REG else 0  # a register array holds its elements
  return max(1, int(getattr(u.dtype, "count", 1)))

def pressure(lin: list[UOp]) -> Pressure:
  """Liveness over the linearized UOps: a value is live from its definition to its last use, extended to the END of any loop it is
  used in that started after it was defined (the loop reads it every iteration); a vector counts once per lane, a register array
  once per element. Returns ssa_values, max_live (lanes), max_live_at (uop index), the curve (at most CURVE_POINTS [uop index, live]
  points, each the peak of its stretch) and the longest live ranges of the values live at the peak (not the thread indices)."""
  pos = {u: i for i, u in enumerate(lin)}
  loops = [(pos[u.src[-1]], i) for i, u in enumerate(lin) if u.op is Ops.END and u.src and u.src[-1].op is Ops.RANGE and u.src[-1] in pos]
  last = {i: i for i, u in enumerate(lin) if _is_value(u)}
  for j, u in enumerate(lin):
    for s in u.src:
      if (i := pos.get(s)) is None or i not in last: continue
      last[i] = max(last[i], j, *(end for start, end in loops if i < start < j <= end))
  delta = [0] * (len(lin) + 1)
  for i, end in last.items():
    delta[i] += (n := _lanes(lin[i]))
    delta[end + 1] -= n
  curve, live = [], 0
  for d in delta[:-1]: curve.append(live := live + d)
  peak_at = max(range(len(curve)), key=curve.__getitem__, default=0)
  step = max(1, -(-len(curve) // CURVE_POINTS))
  points = [[i, max(curve[i:i + step])] for i in range(0, len(curve), step)]
  # what holds the peak: the values live there, longest first; thread and block indices (SPECIAL) are live throughout, the peak or not
  at_peak = [i for i in last if i <= peak_at <= last[i] and lin[i].op is not Ops.SPECIAL]
  longest = sorted(at_peak, key=lambda i: (last[i] - i, -i), reverse=True)[:5]
  return {"ssa_values": len(last), "max_live": curve[peak_at] if curve else 0, "max_live_at": peak_at, "curve": points,
          "longest": [{"uop": i, "op": lin[i].op.name, "until": last[i], "lanes": _lanes(lin[i])} for i in longest]}

_REPR_ANSI = re.compile(r"\\x1b\[[0-9;]*m")

def plain(text: str) -> str:
  """Text without terminal colours: tinygrad colours kernel names, and a KernelInfo's repr carries them escaped ('r\\x1b[90m_...')."""
  return _REPR_ANSI.sub("", ansistrip(text))

def uops_listing(lin: Sequence[UOp], device: str | None = None) -> list[str]:
  """tinygrad's print_uops, line for line (without colour), in linear time: print_uops looks each source up in the list itself, which
  took minutes on the large fused Winograd kernel (16,808 uops). device: the device of the target it was rendered for, which its PARAMs
  name (a deviceless target renders the AST the trace's device scheduled, whose PARAMs name that device: codegen never reads it)."""
  index = {u: i for i, u in enumerate(lin)}
  def src(x: UOp) -> Any: return (index[x] if x.op is not Ops.CONST else f"{x.val}") if x in index else "--"
  def arg(u: UOp) -> Any:
    return dataclasses.replace(u.arg, device=device) if device and isinstance(u.arg, ParamArg) and u.arg.device is not None else u.arg
  return [plain(f"{i:4d} {str(u.op):20s}: {multirange_str(u.ranges, color=True, pad=10)} {str(u.dtype):40s} "
                    f"{str([src(x) for x in u.src]):32s} {arg(u)}") for i, u in enumerate(lin)]

def program_facts(prg: UOp, device: str | None = None) -> ProgramFacts:
  """What the trace records of a compiled PROGRAM; device: its target's, for the listing's PARAMs (uops_listing)."""
  sink = prg.src[0]
  lin = next(s for s in prg.src if s.op is Ops.LINEAR).src
  src = next((s.arg for s in prg.src if s.op is Ops.SOURCE), "")
  est = sink.arg.estimates
  counts = {k: sum(1 for u in lin if f(u)) for k, f in UOP_CLASSES.items()}
  detail = collections.Counter(u.op.name for u in lin)
  def num(x: Any) -> Any: return int(x) if isinstance(x, (int, float)) else str(x)
  onchip = {sp: [u for u in lin if u.op is Ops.BUFFER and u.addrspace is sp] for sp in (AddrSpace.REG, AddrSpace.LOCAL)}
  storage: Storage = {"reg_buffers": len(onchip[AddrSpace.REG]), "reg_values": sum(int(u.max_numel()) for u in onchip[AddrSpace.REG]),
             "local_buffers": len(onchip[AddrSpace.LOCAL]),
             "local_bytes": sum(int(u.max_numel()) * u.dtype.itemsize for u in onchip[AddrSpace.LOCAL])}
  return ProgramFacts(ansistrip(prg.arg.name), [num(x) for x in prg.arg.global_size],
                      None if prg.arg.local_size is None else [num(x) for x in prg.arg.local_size],
                      int(est.ops) if est is not None else 0, int(est.lds) if est is not None else 0, int(est.mem) if est is not None else 0,
                      [opt_text(o) for o in sink.arg.applied_opts], uops_listing(lin, device),
                      {**counts, "total": len(lin), **{f"op:{k}": v for k, v in detail.items()}},
                      src, storage, [trace_num(u) for u in lin], trace_num(sink))

def ast_uop_count(ast: UOp) -> int: return len(ast.toposort())

def ast_key(ast: UOp) -> str:
  """The kernel AST's content hash (tinygrad's UOp key, its KernelInfo name aside): equal keys, identical kernels."""
  return (ast.replace(arg=KernelInfo()) if ast.op is Ops.SINK and isinstance(ast.arg, KernelInfo) else ast).key.hex()

# ***** line maps: which linear UOps made each source line, captured from the renderer as it renders *****

class _LineTracker:
  """Stands in for a C-style renderer's string_rewrite: each call is one UOp being rendered, and the renderer's own list of kernel
  lines (a local of CStyleLanguage._render, read from its frame) says how many lines it held then. The lines a UOp's turn appended
  are that UOp's; a UOp whose turn appended none was inlined into its users' lines."""
  def __init__(self, inner: PatternMatcher):
    self.inner = inner
    self.turns: list[tuple[UOp, int]] = []
    self.kernel: list[str] | None = None
  def rewrite(self, u: UOp, ctx: Any = None) -> Any:
    kernel = sys._getframe(1).f_locals.get("kernel")
    if isinstance(kernel, list): self.kernel = kernel
    self.turns.append((u, len(kernel) if isinstance(kernel, list) else -1))
    return self.inner.rewrite(u, ctx)

LineMap = list[tuple[int, list[int]]]  # [(source line, [linear uop indexes]), ...]

def line_map(lin: list[UOp], source: str, renderer: Renderer) -> tuple[LineMap | None, str | None]:
  """[[source line (1-based), [linear uop indexes]], ...] for every line of the kernel body, or None and why. The program's linear
  UOps are rendered again by a copy of its renderer whose string_rewrite is a _LineTracker; the map is kept only if that render is
  the program's source, character for character."""
  from tinygrad.renderer.cstyle import CStyleLanguage
  if not isinstance(renderer, CStyleLanguage):
    return None, f"{type(renderer).__name__} does not render through tinygrad's C-style renderer, whose line-by-line rendering this reads"
  copy_ = object.__new__(type(renderer))  # not copy.copy: a renderer pickles as "build me for this target", which loads its compiler
  copy_.__dict__.update(renderer.__dict__)
  copy_.string_rewrite = tracker = _LineTracker(renderer.string_rewrite)  # type: ignore[assignment]
  if copy_.render(lin) != source or tracker.kernel is None: return None, "rendering again with the line tracker did not give the same source"
  body = "\n".join(tracker.kernel)
  if not body or (at := source.find(body)) < 0: return None, "the kernel body was not found in the source"
  first, pos = source.count("\n", 0, at) + 1, {u: i for i, u in enumerate(lin)}
  starts = list(itertools.accumulate((e.count("\n") + 1 for e in tracker.kernel), initial=first))  # the first line of each entry
  ends = [n for _, n in tracker.turns[1:]] + [len(tracker.kernel)]
  lines: dict[UOp, set[int]] = {}
  for (u, n), end in zip(tracker.turns, ends):
    if n >= 0 and end > n: lines[u] = set(range(starts[n], starts[end]))
  users: dict[UOp, list[UOp]] = collections.defaultdict(list)
  for u in lin:
    for src in u.src: users[src].append(u)
  for u, _ in reversed(tracker.turns):  # inlined: the lines of the users its text went into
    if u not in lines: lines[u] = set().union(*(lines.get(v, set()) for v in users[u]))
  by_line: dict[int, list[int]] = collections.defaultdict(list)
  for u, ls in lines.items():
    for ln in ls: by_line[ln].append(pos[u])
  return [(ln, sorted(ix)) for ln, ix in sorted(by_line.items())], None

def source_line(uop: int, lines: LineMap | None) -> int | None:
  """The source line of a linear UOp: its own (the first it appears in), or that of the nearest UOp before it that has one."""
  if not lines: return None
  line_of: dict[int, int] = {}
  for ln, ix in lines:
    for i in ix: line_of.setdefault(i, ln)
  return next((line_of[i] for i in range(uop, -1, -1) if i in line_of), None)

def with_lines(pressure: Pressure, lines: LineMap | None) -> Pressure:
  """The pressure record with source lines: of the peak (max_live_line) and of each longest live range's definition."""
  return {**pressure, "max_live_line": source_line(pressure["max_live_at"], lines),
          "longest": [{**r, "line": source_line(r["uop"], lines)} for r in pressure["longest"]]}

# ***** a program's analysis: what a page asks of a kernel's record beyond what tinygrad made (an enrichment, explorer.tracing.enrich) *****

def analysis(lin: list[UOp], sink: UOp, source: str, renderer: Renderer, log: LiveLog | RewriteBlob, passes: Sequence[Pass]) -> Analysis:
  """The line map (source line <-> linear UOps), the live values over the linear order with their lines, the loops "split ranges" cut,
  and tinygrad's program spec over the program's SINK: computed from the program in this process (program_analysis), or from the
  rewrite blob it was recorded in (blob_analysis): both are the same UOps."""
  lines, why = line_map(lin, source, renderer)
  return {"pressure": with_lines(pressure(lin), lines), "line_map": lines, "line_map_note": why, "loop_splits": loop_splits(log, passes),
          "spec": spec_check([sink], "program")}

def program_analysis(prg: UOp, renderer: Renderer, log: LiveLog, passes: Sequence[Pass]) -> Analysis:
  lin = list(next(s for s in prg.src if s.op is Ops.LINEAR).src)
  return analysis(lin, prg.src[0], next((s.arg for s in prg.src if s.op is Ops.SOURCE), ""), renderer, log, passes)

def blob_analysis(blob: RewriteBlob, linear_nums: Sequence[int], sink: int, source: str, renderer: Renderer, passes: Sequence[Pass]) -> Analysis:
  """The analysis of a stored record: its linear UOps and SINK rebuilt from the blob its codegen was recorded in."""
  return analysis([blob.sink(n) for n in linear_nums], blob.sink(sink), source, renderer, blob, passes)

# ***** runtime *****

def compile_schedule(linear: UOp) -> UOp:
  """tinygrad's compile_linear: lowers every kernel through to_program (its cache holds the programs codegen produced above)."""
  return compile_linear(linear)

def run_schedule(compiled: UOp) -> None: run_linear(compiled, wait=True)

def compiled_sources(compiled: UOp) -> list[str]:
  """The source of every program in a compiled schedule, in order: what tinygrad will run."""
  return [next(s.arg for s in c.src[0].src if s.op is Ops.SOURCE) for c in compiled.src if c.src[0].op is Ops.PROGRAM]

def call_timers(compiled: UOp) -> list[tuple[int, Iterator[float]]]:
  """tinygrad's time_call for each kernel of the compiled schedule: each yields one synchronized run time in seconds."""
  return [(i, time_call(c)) for i, c in enumerate(compiled.src) if c.src[0].op is Ops.PROGRAM]

def realize_inputs(*ts: Tensor) -> None: Tensor.realize(*ts)

def compile_seconds(device: str, sources: Sequence[str]) -> float:
  """Seconds the device's compiler takes to compile these kernel sources, each afresh: its compile, not compile_cached (whose disk
  cache would answer a repeat without compiling)."""
  compiler = Device[device].compiler
  st = time.perf_counter()
  for src in sources: compiler.compile(src)
  return time.perf_counter() - st



def has_reduce(ast: UOp) -> bool: return any(u.op is Ops.REDUCE for u in ast.toposort())

def compiler_name(device: str) -> str: return type(Device[device].compiler).__name__

def fallback_reason(device: str) -> str | None:
  """Seed 003 saw Metal hand a kernel to tinygrad's PYTHON interpreter (500x slower): say so instead of timing it silently."""
  if Device.canonicalize(device).split(":")[0] == "PYTHON" or compiler_name(device) == "PythonCompiler":
    return f"{device} runs kernels in tinygrad's Python interpreter (PythonCompiler): timings are not native"
  return None

# ***** devices on this host (GPU hosts) *****

# tinygrad's own order (tinygrad.device.ALL_DEVICES) kept to the explorer's backends: GPUs, then OpenCL, then the CPU.
# The same order keeps best_device() equal to Device.DEFAULT, which tinygrad uses for anything made without a device.
DEVICE_PREFERENCE = COMPUTE_DEVICES

def _opens(device: str) -> bool:
  try: return bool(Device[device].device)
  except Exception: return False

def available_devices() -> list[str]:
  """The devices of DEVICE_PREFERENCE this host can open, best first. Opening a GPU creates a context on it: call this in a worker."""
  return [d for d in DEVICE_PREFERENCE if _opens(d)]

@functools.cache
def best_device() -> str:
  """DEV, when set, wins (tinygrad's rule); else the first device of DEVICE_PREFERENCE that opens."""
  from tinygrad.helpers import DEV
  if DEV.device: return Device.DEFAULT
  return next((d for d in DEVICE_PREFERENCE if _opens(d)), Device.DEFAULT)

def _cuda_name(dev: Any) -> str:
  from tinygrad.runtime.autogen import cuda
  cuda.cuDeviceGetName(buf := ctypes.create_string_buffer(256), 256, dev.cu_device)
  return buf.value.decode()

def _nvidia_proc_model() -> str:
  for f in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):
    if (m := re.search(r"^Model:\s*(.+?)\s*$", open(f).read(), re.M)): return m.group(1)
  raise LookupError("no /proc/driver/nvidia/gpus entry")

def _metal_name(dev: Any) -> str:
  from tinygrad.runtime.ops_metal import from_ns_str
  return from_ns_str(dev.sysdevice.name())

def cpu_model() -> str:
  with contextlib.suppress(OSError):
    if (m := re.search(r"^model name\s*:\s*(.+?)\s*$", open("/proc/cpuinfo").read(), re.M)): return m.group(1)
  with contextlib.suppress(Exception):
    if (name := subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True).stdout.strip()): return name
  return platform.processor() or platform.machine()

def device_name(device: str) -> str:
  """The hardware's name as its driver reports it (CUDA, Metal, NVIDIA's /proc entry for NV) or the CPU model; else device and arch."""
  base, dev = Device.canonicalize(device).split(":")[0], Device[device]
  getters = {"CUDA": [lambda: _cuda_name(dev), _nvidia_proc_model], "NV": [_nvidia_proc_model], "METAL": [lambda: _metal_name(dev)],
             "CPU": [cpu_model]}
  for get in getters.get(base, []):
    with contextlib.suppress(Exception):
      if (name := get()): return name
  return " ".join(x for x in (base, str(getattr(dev, "arch", "") or "")) if x)

# ***** NVRTC (NVIDIA's wheel), through tinygrad's own bindings: CUDA compile facts without a GPU *****

NVRTC_FILE = "kernel.cu"  # the name the program's source has: its SASS lines name it

def nvrtc_compiler() -> Callable[[str, str], dict] | None:
  """A compile function (source, arch) -> {ok, compiler, log, ptx, cubin}, when NVRTC's library loads (NVRTC_PATH set before this
  module was imported; explorer.tracing.renders sets it from the wheel); None otherwise."""
  try:
    from tinygrad.runtime.autogen import nvrtc
    from tinygrad.runtime.support.compiler_cuda import _get_bytes, nvrtc_check
    from tinygrad.helpers import to_char_p_p
    nvrtc.nvrtcVersion(major := ctypes.c_int(), minor := ctypes.c_int())
  except Exception: return None
  name = f"NVRTC {major.value}.{minor.value}"
  include = os.environ.get("KERNEL_EXPLORER_CUDA_INCLUDE")  # the wheel's cuda_fp16.h: NVRTC does not build it in
  def compile(src: str, arch: str) -> dict:
    opts = [f"--gpu-architecture={arch}", "--generate-line-info", "-Xptxas", "-v"] + ([f"-I{include}"] if include else [])
    nvrtc_check(nvrtc.nvrtcCreateProgram(ctypes.byref(prog := nvrtc.nvrtcProgram()), src.encode(), NVRTC_FILE.encode(), 0, None, None))
    try:
      rc = nvrtc.nvrtcCompileProgram(prog, len(opts), to_char_p_p([o.encode() for o in opts]))
      log = _get_bytes(prog, nvrtc.nvrtcGetProgramLog, nvrtc.nvrtcGetProgramLogSize, nvrtc_check).decode(errors="replace").rstrip("\0 \n")
      if rc != 0: return {"ok": False, "compiler": name, "log": log}
      ptx = _get_bytes(prog, nvrtc.nvrtcGetPTX, nvrtc.nvrtcGetPTXSize, nvrtc_check).rstrip(b"\0").decode()
      cubin = _get_bytes(prog, nvrtc.nvrtcGetCUBIN, nvrtc.nvrtcGetCUBINSize, nvrtc_check)
      return {"ok": True, "compiler": name, "log": log, "ptx": ptx, "cubin": cubin, "file": NVRTC_FILE}
    finally: nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
  return compile
