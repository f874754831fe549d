"""Provenance: the Tensor functions, and the program's lines, that made each kernel.

tinygrad names the Tensor function that made each tensor-graph UOp (all_metadata: Metadata(name, backward); the gradient marks its UOps
backward) but keeps neither the line that called it nor the link to kernels, and a UOp is one object wherever its structure recurs
(hash-consing: two kernels that compute alike at two lines, the schedule an earlier realize cached). So:
- `sited_metadata` records where each outermost Tensor call came from (a `Site`: the model's line, the program's call beside it where
  that line is a model shipped inside tinygrad, the ONNX node being computed) and, on a backward entry, the `.backward()` line;
- `carrying_metadata` carries metadata through the rewrites of one schedule (and through those that make a `@function`'s body and its
  gradient), trusting only what this schedule wrote or this realize's tensor graph holds: an entry an older schedule left on a shared
  UOp is stale;
- a kernel's provenance is read where tinygrad splits it off the scheduled graph (its own compute, on its own buffers), and found again
  for each call of the schedule's linear by its position in the schedule tinygrad made, or cached, for the graph.
"""
from __future__ import annotations
import collections
import contextlib
import dataclasses
import functools
import os
import site
import sys
import sysconfig
import types
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
import tinygrad
from tinygrad import Tensor, dtypes
from tinygrad.dtype import AddrSpace
from tinygrad.helpers import Metadata
from tinygrad.uop import ops as uop_ops
from tinygrad.uop.ops import GroupOp, KernelInfo, Ops, UOp
from explorer.tracing.tg.compat import CALL, CALLS, PARAM, addrspace

Entry = dict[str, Any]  # schema.Provenance

_EXPLORER_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))  # explorer/, this package two levels down
_TINYGRAD_DIR = os.path.dirname(os.path.abspath(tinygrad.__file__))
_MODEL_DIRS = (os.path.join(_TINYGRAD_DIR, "llm") + os.sep,)  # models shipped as source inside tinygrad: their lines are the model's
_STDLIB = tuple({os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib")})
_SITE_PACKAGES = tuple({os.path.abspath(p) + os.sep for p in (*site.getsitepackages(), site.getusersitepackages(),
                                                              sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])})
_COMPUTE = frozenset(GroupOp.ALU) | {Ops.REDUCE, Ops.CAST, Ops.BITCAST, Ops.WMMA, Ops.STORE}
# what every kernel reading it shares (a buffer, a constant, a variable): no kernel's alone, so not followed into the one that reads it first
_SHARED = {op for name in ("BUFFER", "UNIQUE", "LUNIQUE", "DEVICE", "CONST", "VCONST", "PARAM", "DEFINE_VAR", "BIND", "SINK", "NOOP")
           if (op := getattr(Ops, name, None)) is not None}
_INDEX = {d for d in (getattr(dtypes, "weakint", None), getattr(dtypes, "index", None)) if d is not None}

def _scalar(u: UOp) -> Any: return getattr(u.dtype, "base", u.dtype)

def _computes(u: UOp) -> bool:
  """u computes a value a Tensor function asked for: not the index arithmetic and masks rangeify makes of movement ops, which recur alike
  in every kernel of one shape (one UOp for all: an entry on it would be the first kernel's) and say nothing of what made a kernel. A
  comparison of values is one (relu's x > 0)."""
  if u.op not in _COMPUTE or (d := _scalar(u)) in _INDEX: return False
  return d is not dtypes.bool or (u.op in GroupOp.Comparison and any(_scalar(s) not in _INDEX and _scalar(s) is not dtypes.bool for s in u.src))

# ***** where a Tensor call came from *****

@dataclass(frozen=True)
class Site:
  """Where an outermost Tensor call came from: the line of the model (the program's own, or a model shipped inside tinygrad), `via`
  the tinygrad function that line called when not the Tensor function itself (an nn layer's __call__, an optimizer's step), `caller`
  the program's line that ran a shipped model's, and `onnx` the node tinygrad's ONNX runner was computing (op, index, name, outputs)."""
  file: str
  line: int
  via: str | None = None
  caller: tuple[str, int] | None = None
  onnx: tuple[str, int, str, tuple[str, ...]] | None = None
  # the module instances the line ran inside, outermost first: (class, its n-th instance seen); not part of what a kernel's provenance
  # tells apart (its entries name lines), only of the tensor graph's groups (uop_sites)
  scope: tuple[tuple[str, int], ...] = dataclasses.field(default=(), compare=False)

@dataclass(frozen=True)
class SitedMetadata(Metadata):
  site: Site | None = dataclasses.field(default=None, compare=False)
  backward_site: tuple[str, int] | None = dataclasses.field(default=None, compare=False)  # the .backward() (or .gradient()) line

_kinds: dict[str, str] = {}

def _in_stdlib(path: str) -> bool: return path.startswith(_STDLIB) and not path.startswith(_SITE_PACKAGES)

def _kind(filename: str) -> str:
  """"inner" (tinygrad's own machinery, the explorer, the standard library: decorators and context managers included), "model" (a model
  shipped inside tinygrad) or "user" (the program; packages it installed too)."""
  if (k := _kinds.get(filename)) is None:
    path = os.path.abspath(filename) if not filename.startswith("<") else filename
    if path.startswith(_MODEL_DIRS): k = "model"
    elif path.startswith((_TINYGRAD_DIR + os.sep, _EXPLORER_DIR + os.sep, "<frozen")) or _in_stdlib(path): k = "inner"
    else: k = "user"
    _kinds[filename] = k
  return k

def _via(callee: Any) -> str | None:
  """The tinygrad function a model's line called, when not the Tensor function itself."""
  if callee is None: return None
  fn = callee.f_code.co_filename
  if not fn.startswith(_TINYGRAD_DIR) or fn.endswith("tensor.py"): return None
  module = os.path.relpath(fn, _TINYGRAD_DIR).removesuffix(".py").removesuffix("/__init__").replace(os.sep, ".")
  return f"{module}.{callee.f_code.co_qualname}"

_onnx_names: weakref.WeakKeyDictionary[Any, tuple[str, ...]] = weakref.WeakKeyDictionary()  # an OnnxRunner -> its nodes' names

def _onnx_node(frame: Any) -> tuple[str, int, str, tuple[str, ...]] | None:
  """The node tinygrad's OnnxRunner.__call__ is computing in this frame: its op type, index, name and outputs."""
  local = frame.f_locals
  node, num, runner = local.get("node"), local.get("num"), local.get("self")
  if node is None or not isinstance(num, int): return None
  names = _onnx_names.get(runner, ()) if runner is not None else ()
  return (str(node.op), num, names[num] if num < len(names) else "", tuple(str(o) for o in node.outputs)[:4])

def _is_onnx_call(code: Any) -> bool: return code.co_name == "__call__" and code.co_qualname == "OnnxRunner.__call__"

class _Instances:
  """Which instance of its class each module object is, in the order a capture first saw them: Block 0, Block 1... (the objects are
  held while sited_metadata is on, so that an id is never another object's)."""
  def __init__(self) -> None:
    self.of: dict[int, tuple[str, int]] = {}
    self.count: collections.Counter[str] = collections.Counter()
    self.held: list[Any] = []

  def name(self, obj: Any) -> tuple[str, int]:
    if (got := self.of.get(id(obj))) is None:
      cls = type(obj).__qualname__
      got = self.of[id(obj)] = (cls, self.count[cls])
      self.count[cls] += 1
      self.held.append(obj)
    return got

_instances = [_Instances()]
MAX_SCOPE = 16  # module objects kept per site, outermost first (schema.Provenance allows more)

def _scope(frame: Any) -> tuple[tuple[str, int], ...]:
  """The objects whose methods the program's (or a shipped model's) frames from this one out are running in, outermost first."""
  out: list[tuple[str, int]] = []
  last = None
  for f in _frames(frame):
    code = f.f_code
    if not (code.co_argcount and code.co_varnames[0] == "self" and _kind(code.co_filename) != "inner"): continue
    if (obj := f.f_locals.get("self")) is not None and obj is not last and not isinstance(obj, type):
      out.append(_instances[0].name(obj))
      last = obj
  return tuple(reversed(out))[:MAX_SCOPE]

def _frames(f: Any) -> Iterator[Any]:
  while f is not None:
    yield f
    f = f.f_back

def _site_of(frame: Any, scoped: bool = False) -> Site | None:
  f, callee, onnx = frame, None, None
  while f is not None and (kind := _kind(f.f_code.co_filename)) == "inner":
    if onnx is None and _is_onnx_call(f.f_code): onnx = _onnx_node(f)
    f, callee = f.f_back, f
  if f is None: return None
  caller = None
  if kind == "model":
    g = f.f_back
    while g is not None and _kind(g.f_code.co_filename) != "user": g = g.f_back
    if g is not None: caller = (g.f_code.co_filename, g.f_lineno)
  return Site(f.f_code.co_filename, f.f_lineno, _via(callee), caller, onnx, _scope(f) if scoped else ())

def user_site() -> tuple[str, int] | None:
  """The program's line this call came from: the first frame outside tinygrad, the explorer and the standard library."""
  site = _site_of(sys._getframe(1))
  return None if site is None else (site.file, site.line)

# ***** recording sites, and the .backward() line *****

_backward_site: list[tuple[str, int] | None] = [None]  # the .backward() line of the gradient being computed

class _GradientDataclasses(types.SimpleNamespace):
  """tinygrad's gradient marks a forward entry backward with dataclasses.replace: here that replace also names the .backward() line."""
  @staticmethod
  def replace(obj: Any, /, **changes: Any) -> Any:
    if isinstance(obj, SitedMetadata) and changes.get("backward") and _backward_site[0] is not None:
      changes = {**changes, "backward_site": _backward_site[0]}
    return dataclasses.replace(obj, **changes)

def _gradient_module() -> Any:
  try:
    import tinygrad.mixin.gradient as grad  # (0.14's; until 0.14 it was tinygrad/gradient.py)
  except ImportError:
    import tinygrad.gradient as grad  # type: ignore[no-redef]
  return grad

@contextlib.contextmanager
def sited_metadata() -> Iterator[None]:
  """While inside, each outermost Tensor function call records where it came from with its metadata (a `Site`), a gradient names its
  .backward() line on its entries, and the bodies of @function calls and their gradients keep their forward's metadata (their
  rewrites carried, as a schedule's are). ONNX runners made inside also keep their nodes' names."""
  import tinygrad.tensor as tensor_module
  plain = tensor_module._METADATA
  class Sited(type(plain)):  # type: ignore[misc]
    def set(self, x: Any) -> Any:
      return super().set(SitedMetadata(x.name, x.backward, _site_of(sys._getframe(2), scoped=True)) if type(x) is Metadata else x)
  tensor_module._METADATA = Sited(plain.get())
  with contextlib.ExitStack() as stack:
    stack.callback(setattr, tensor_module, "_METADATA", plain)
    _instances[0] = _Instances()
    stack.callback(_instances.__setitem__, 0, _Instances())
    grad = _gradient_module()
    if grad is not None and hasattr(grad, "dataclasses"):
      stack.callback(setattr, grad, "dataclasses", grad.dataclasses)
      grad.dataclasses = _GradientDataclasses()
    _patch(stack, Tensor, "gradient", lambda plain_gradient: _recording_backward(plain_gradient))
    with contextlib.suppress(ImportError):
      from tinygrad.function import _function
      _patch(stack, _function, "__call__", lambda call: _carried_call(call))
    _patch_onnx(stack)
    yield

def _patch(stack: contextlib.ExitStack, owner: Any, name: str, wrap: Callable[[Any], Any]) -> None:
  had, plain = name in owner.__dict__, getattr(owner, name)
  setattr(owner, name, wrap(plain))
  stack.callback(setattr, owner, name, plain) if had else stack.callback(delattr, owner, name)

def _recording_backward(plain_gradient: Callable[..., Any]) -> Callable[..., Any]:
  def gradient(self: Any, *targets: Any, gradient: Any = None) -> Any:
    site, saved = _site_of(sys._getframe(1)), _backward_site[0]
    _backward_site[0] = None if site is None else (site.file, site.line)
    try:
      with _carrying_outside_a_schedule(): return plain_gradient(self, *targets, gradient=gradient)
    finally: _backward_site[0] = saved
  return gradient

def _carried_call(call: Callable[..., Any]) -> Callable[..., Any]:
  def carried(self: Any, *args: Any, **kwargs: Any) -> Any:
    with _carrying_outside_a_schedule(): return call(self, *args, **kwargs)
  return carried

def _patch_onnx(stack: contextlib.ExitStack) -> None:
  """An OnnxRunner made while inside keeps its nodes' names (the runner itself keeps only their op types and outputs)."""
  try:
    import tinygrad.nn.onnx as onnx
  except Exception: return  # noqa: BLE001 - no ONNX runner in this tinygrad: nothing to name
  runner = getattr(onnx, "OnnxRunner", None)
  if runner is None or not hasattr(runner, "_init_from_graph"): return
  def init(plain: Callable[..., Any]) -> Callable[..., Any]:
    def named(self: Any, graph: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
      ret = plain(self, graph, *args, **kwargs)
      with contextlib.suppress(Exception): _onnx_names[self] = tuple(str(n.get("name") or "") for n in graph["node"])
      return ret
    return named
  _patch(stack, runner, "_init_from_graph", init)

# ***** carrying metadata through rewrites *****

@dataclass
class Split:
  """A kernel as the schedule split it: its provenance, the trace numbers of the tensor UOps it computes, and the generation (the
  schedule) that split it."""
  entries: list[Entry]
  members: list[int]
  gen: int

def _last(replace: dict[UOp, UOp], u: UOp) -> UOp:
  """What u finally became in one rewrite (a node rewritten to one that was rewritten again)."""
  for _ in range(64):
    if (nxt := replace.get(u, u)) is u: break
    u = nxt
  return u

def _through(u: UOp, replace: dict[UOp, UOp], inner: dict[UOp, list[UOp]], alive: Callable[[], set[UOp]]) -> UOp:
  """What u finally became in a rewrite whose rules ran rewrites of their own (inner: what each made of a UOp, in the order made): the
  first of those that is in the rewrite's result (a removed STAGE's body substituted into its reader, then simplified there; a rule's
  trial substitution it dropped is not), else u as this rewrite left it."""
  u = _last(replace, u)
  if u not in inner or u in alive(): return u
  stack, seen = [u], {u}
  while stack:
    for made in inner.get(stack.pop(), ()):
      if (made := _last(replace, made)) in alive(): return made
      if made not in seen and len(seen) < 4096:
        seen.add(made)
        stack.append(made)
  return u

def _kept(form: UOp) -> UOp:
  """Where a tensor UOp's value is followed to: a value stored into a buffer (an AFTER of the buffer and its store) is the store's,
  whose kernel computes it (the AFTER becomes the loads of the kernels that read it)."""
  if form.op is not Ops.AFTER: return form
  return next((s for s in reversed(form.src[1:]) if s.op in (Ops.STORE, Ops.END)), form)

class _Carry:
  """What carrying knows: the generation (a schedule is one), which UOps it wrote an entry on and in which generation, the tensor graph of
  the schedule under way (its entries hold as they stand), each kernel's provenance by its CALL as split (and as the linear of its graph
  names it: on the PARAMs of the graph, so one CALL for a kernel of two graphs alike: good only until the graph's linear is made), and
  each linear tinygrad's schedule cache keeps, the provenance of its calls in order (`linears`)."""
  def __init__(self) -> None:
    self.gen, self.depth, self.patched = 0, 0, 0
    self.written: weakref.WeakKeyDictionary[UOp, int] = weakref.WeakKeyDictionary()
    self.scope: set[UOp] | None = None
    self.owners: dict[UOp, list[int]] = {}  # in a schedule: what each tensor UOp has become so far -> the trace numbers of those UOps
    self.nested: list[dict[UOp, list[UOp]]] = []  # per rewrite under way: what the rewrites run inside it so far made of each UOp
    self.claims: dict[UOp, list[tuple[UOp, list[int]]]] = {}  # a kernel's AST -> its CALLs as made, each with what it claimed then
    self.kernels: dict[UOp, Split] = {}
    self.calls: list[tuple[UOp, Split | None]] = []  # the schedule's CALLs in the order made, with their provenance then
    self.linears: weakref.WeakKeyDictionary[UOp, list[Split | None]] = weakref.WeakKeyDictionary()

  def made(self, linears: list[UOp]) -> None:
    """The linears the schedule just made, in the order it made them: each one's calls' provenance, as it stood when the linear's calls
    were made (after that graph's kernels were split, before the next graph's), else (not seen made) from the latest split."""
    at = 0
    for linear in linears:
      n, run = len(linear.src), None
      for i in range(at, len(self.calls) - n + 1):
        if all(self.calls[i + j][0] is c for j, c in enumerate(linear.src)):
          run, at = [split for _, split in self.calls[i:i + n]], i + n
          break
      self.linears[linear] = run if run is not None else [self.kernels.get(c) for c in linear.src]

  def called(self, call: UOp) -> None:
    """A CALL just made (create_schedule makes each of a linear's so): it and its provenance as known now. A kernel split off the
    scheduled graph claims its tensor UOps as it is made, before the next kernel's body is rewritten: two kernels alike are one AST."""
    self.calls.append((call, self.kernels.get(call)))
    if self.owners and call.src and call.src[0].op is Ops.SINK and isinstance(call.src[0].arg, KernelInfo):
      self.claims.setdefault(call.src[0], []).append((call, self._claimed(call)))

  def _claims_of(self, call: UOp, replace: dict[UOp, UOp]) -> list[int]:
    """What the kernel `call` claimed as it was made: made as a CALL whose arguments this rewrite then rewrote into call's (a kernel
    reading an earlier one's buffer, which that one's CALL rebuilt); two kernels alike share an AST, so they are told apart so."""
    made = self.claims.get(call.src[0], [])
    for i, (c, members) in enumerate(made):
      if len(c.src) == len(call.src) and all(_last(replace, a) is b for a, b in zip(c.src[1:], call.src[1:], strict=True)):
        del made[i]
        return members
    return self._claimed(call)

  def trusted(self, u: UOp) -> bool:
    """An entry on u is this schedule's (or, outside one, this generation's or tinygrad's own)."""
    return self.scope is None or u in self.scope or self.written.get(u) == self.gen

  def holds(self, u: UOp) -> bool:
    """u has an entry that a carry must not replace: one this generation wrote (the first carried there: a UOp two kernels share, a relu
    a max-pool also reads, keeps the first's), or, in a schedule, one of its tensor graph's."""
    return u in uop_ops.all_metadata and (self.written.get(u) == self.gen or (self.scope is not None and u in self.scope))

  def carry(self, replace: dict[UOp, UOp], inner: dict[UOp, list[UOp]] | None = None, result: UOp | None = None) -> None:
    """After a rewrite (its replace map), each entry carried to what its UOp became, and each tensor UOp followed to its new form: through
    the rewrites that rules ran inside it (`inner`: run before this one's map was known, on the forms it was making) into its result."""
    md = uop_ops.all_metadata
    alive = functools.cache(lambda: set(result.toposort()) if result is not None else set())
    for old, new in replace.items():
      if new is old: continue
      if self.owners and (owned := self.owners.pop(old, []) + self._absorbed(old, to := _last(replace, new), replace)):
        self.owners.setdefault(_kept(_through(to, replace, inner, alive) if inner else to), []).extend(owned)
      if new.op is CALL:
        if old in self.kernels: self._kernel(new, self.kernels[old])
        elif old.op in (Ops.STORE, Ops.END) and self.scope is not None:
          self._kernel(new, Split(own_compute(old, self.trusted), self._claims_of(new, replace), self.gen))
        if new in self.kernels and (owned := self.owners.pop(new, [])): self.kernels[new].members += owned  # (folded into it)
      m = md.get(old) if self.trusted(old) else None
      if m is None and (not _computes(new) or self.holds(new) or (m := self._beneath(old)) is None): continue
      for _ in range(64):  # a node rewritten to one that was rewritten again: each along the chain is the old one's
        if new is old: break
        if _computes(new) and not self.holds(new): md[new], self.written[new] = m, self.gen
        old, new = new, replace.get(new, new)

  def _absorbed(self, old: UOp, new: UOp, replace: dict[UOp, UOp]) -> list[int]:
    """What a rule folded into old's replacement new without visiting it (RESHAPE(REDUCE) -> REDUCE(RESHAPE) made from the parent; a
    kernel's body become its CALL): the tensor UOps whose forms lie beneath old, unvisited by this rewrite, short of another kernel's
    stored value (an AFTER). Nothing is folded into a reference (a buffer become a PARAM)."""
    if new.op in _SHARED or new.op is Ops.AFTER: return []
    out: list[int] = []
    stack, seen = list(old.src), set()
    while stack:
      if (u := stack.pop()) in replace or u in seen or u.op in _SHARED or u.op is Ops.AFTER: continue
      seen.add(u)
      if (owned := self.owners.pop(u, None)) is not None: out += owned
      stack.extend(u.src)
    return out

  def _claimed(self, call: UOp) -> list[int]:
    """The tensor UOps a kernel split off the scheduled graph computes: those whose rewritten forms its AST holds (each claimed by the
    first kernel that holds it: a UOp two kernels share, a constant, stays the first's)."""
    return [num for u in call.src[0].toposort() if (owned := self.owners.pop(u, None)) for num in owned] if call.src else []

  def _kernel(self, call: UOp, split: Split) -> None:
    """A kernel's CALL as split (and as its arguments are tidied), and the CALL the schedule's linear makes of it (its AST on the buffer
    states of its arguments: tinygrad's create_schedule), both to its provenance. That one is on the PARAMs of its graph, so two graphs
    alike (a precompiled @function's and the one calling it) may split a kernel to the same CALL: `made` tells them apart."""
    self.kernels[call] = split
    if call.src and call.src[0].op is Ops.SINK:
      with contextlib.suppress(Exception):  # (not a kernel create_schedule would call so: left out)
        self.kernels[_call_on(call.src[0], _buffer_states(call))] = split

  def _beneath(self, u: UOp) -> tuple[Any, ...] | None:
    """The entry of the compute nearest below a view (a movement op a rewrite turned into compute: RESHAPE(REDUCE) -> REDUCE(RESHAPE))."""
    frontier = list(u.src)
    for _ in range(4):
      for s in frontier:
        if _computes(s) and self.trusted(s) and (m := uop_ops.all_metadata.get(s)) is not None: return m
      frontier = [s for x in frontier if x.op in GroupOp.Movement for s in x.src]
    return None

_CARRY = _Carry()

_plain_call = getattr(UOp, "call", None)  # (none before 0.13: its schedule was ExecItems)

def _call_on(ast: UOp, args: tuple[UOp, ...]) -> UOp:
  """The CALL tinygrad's create_schedule makes of a kernel (UOp.call, not seen as made by the schedule: `_Carry.called`)."""
  assert _plain_call is not None
  return _plain_call(ast, *args)

def _buffer_states(call: UOp) -> tuple[UOp, ...]:
  """A kernel CALL's arguments as the linear names them: each one's buffer (tinygrad's create_schedule: _unwrap_src(s).buf_uop)."""
  out = []
  for s in call.src[1:]:
    if s.is_bound_var: continue
    while s.src and s.op not in (Ops.AFTER, Ops.BUFFER, PARAM, Ops.MSELECT, Ops.MSTACK): s = s.src[0]
    out.append(s.buf_uop)
  return tuple(out)

def _carried(rewrite: Callable[[Any, UOp], UOp]) -> Callable[[Any, UOp], UOp]:
  def carried(ctx: Any, root: UOp) -> UOp:
    if not (_CARRY.depth and _CARRY.owners): return _plain_carried(rewrite, ctx, root)
    _CARRY.nested.append({})  # what the rewrites a rule runs inside this one make (a removed STAGE's body substituted into its reader)
    try: ret = rewrite(ctx, root)
    finally: inner = _CARRY.nested.pop()
    _CARRY.carry(ctx.replace, inner, ret)
    if _CARRY.nested:  # this one ran inside a rule of another: the other follows its forms through it
      outer = _CARRY.nested[-1]
      for old, new in ctx.replace.items():
        if new is not old: outer.setdefault(old, []).append(new)
      for old, made in inner.items(): outer.setdefault(old, []).extend(made)
    return ret
  return carried

def _plain_carried(rewrite: Callable[[Any, UOp], UOp], ctx: Any, root: UOp) -> UOp:
  ret = rewrite(ctx, root)
  if _CARRY.depth: _CARRY.carry(ctx.replace)
  return ret

@contextlib.contextmanager
def _rewrites_carried() -> Iterator[None]:
  ctx: Any = uop_ops.RewriteContext
  names = [n for n in ("walk_rewrite", "unified_rewrite") if hasattr(ctx, n)]  # (0.12 rewrote by unified_rewrite alone)
  if _CARRY.patched == 0:
    saved = {n: getattr(ctx, n) for n in names}
    for n, fn in saved.items(): setattr(ctx, n, _carried(fn))
  _CARRY.patched += 1
  try: yield
  finally:
    _CARRY.patched -= 1
    if _CARRY.patched == 0:
      for n, fn in saved.items(): setattr(ctx, n, fn)

@contextlib.contextmanager
def _carrying_outside_a_schedule() -> Iterator[None]:
  """A @function's body made (its inputs become PARAMs) or differentiated: each rewritten compute UOp keeps its original's entry."""
  with _rewrites_carried():
    _CARRY.depth += 1
    try: yield
    finally: _CARRY.depth -= 1

def _schedule_cache() -> dict[str, Any] | None:
  """tinygrad's schedule cache (a graph's linear by its key), the dict itself: tinygrad's compiled patterns keep the globals their
  functions name as they were when first compiled, so the dict is watched and emptied in place, never replaced."""
  cache = getattr(sys.modules.get("tinygrad.schedule"), "schedule_cache", None)
  return cache if isinstance(cache, dict) else None

class Carrying:
  """One schedule's carrying, and what it learnt: `provenance(linear)`, each call's kernel provenance (None: not a kernel, or not found).
  made: the linears tinygrad's schedule cache gained while it ran, in the order they were made (the outermost graph's last)."""
  def __init__(self, gen: int) -> None:
    self.made: list[UOp] = []
    self.gen = gen

  def provenance(self, linear: UOp) -> list[list[Entry] | None]:
    """The linear's calls' provenance, from the cached linear it was resolved from: one made now, else an earlier one of the same kernels
    in the same order (a graph found in the cache). [] for a schedule that is no linear (0.12's ExecItems)."""
    return [split.entries if split is not None else None for split in self._splits(linear)]

  def members(self, linear: UOp) -> list[list[int] | None]:
    """The linear's calls' tensor UOps (trace numbers: each tensor-graph UOp in the kernel it ended up in), where this schedule split
    them: None for a call found in tinygrad's schedule cache (its kernel was split from an earlier graph's UOps) or not a kernel."""
    return [split.members if split is not None and split.gen == self.gen else None for split in self._splits(linear)]

  def _splits(self, linear: UOp) -> list[Split | None]:
    if not isinstance(linear, UOp): return []
    want = [c.src[0] for c in linear.src]
    for top in (*reversed(self.made), *list(_CARRY.linears.keys())):
      if (calls := _expanded(top)) is not None and len(calls) == len(want) and all(_same_kernel(c, w) for (c, _), w in zip(calls, want, strict=True)):
        return [split for _, split in calls]
    return [None] * len(linear.src)

def _same_kernel(cached: UOp, ast: UOp) -> bool:
  """A cached linear's call and a resolved one's AST are the same kernel (a copy's call may have become a COPY since)."""
  return not cached.src or cached.src[0] is ast or cached.src[0].op is not Ops.SINK or ast.op is not Ops.SINK

def _expanded(linear: UOp) -> list[tuple[UOp, Split | None]] | None:
  """A cached linear's calls, each with its provenance, as the schedule runs them: a call of a nested linear (a precompiled @function's)
  in its place, flattened. None where a linear's was not kept (made before the capture, or with tinygrad's schedule cache off)."""
  if (own := _CARRY.linears.get(linear)) is None: return None
  out: list[tuple[UOp, Split | None]] = []
  for c, split in zip(linear.src, own, strict=False):
    if c.op is CALL and c.src and c.src[0].op is Ops.LINEAR:
      if (inner := _expanded(c.src[0])) is None: return None
      out += inner
    else: out.append((c, split))
  return out

@contextlib.contextmanager
def carrying_metadata(sink: UOp, fresh: bool = False) -> Iterator[Carrying]:
  """While inside (a schedule of the tensor graph `sink`), a compute UOp a rewrite makes of another keeps the other's metadata, and each
  kernel split off the graph keeps the provenance of its own compute. Only compute UOps: a constant or a buffer is shared by every kernel
  that uses it, and would carry one kernel's functions into all of them. fresh: the graph is scheduled again, not found in tinygrad's
  schedule cache (this realize's passes and lines, where an earlier realize's of the same graph would be found): the cache is emptied
  while it runs, and holds what it held, and what was made, after."""
  cache = _schedule_cache()
  held = dict(cache) if cache is not None else {}
  if fresh and cache is not None: cache.clear()
  _CARRY.gen += 1
  carrying = Carrying(_CARRY.gen)
  _CARRY.scope, _CARRY.kernels, _CARRY.calls = set(sink.toposort()), {}, []
  _CARRY.owners = {u: [u.trace_num] for u in _CARRY.scope if u.op not in _SHARED}
  def call(self: UOp, *args: Any, **kwargs: Any) -> UOp:
    assert _plain_call is not None
    _CARRY.called(ret := _plain_call(self, *args, **kwargs))
    return ret
  with _rewrites_carried():
    _CARRY.depth += 1
    if _plain_call is not None: UOp.call = call  # type: ignore[method-assign]
    try: yield carrying
    finally:
      if _plain_call is not None: UOp.call = _plain_call  # type: ignore[method-assign]
      _CARRY.depth -= 1
      if cache is not None:
        carrying.made = [linear for key, linear in cache.items() if fresh or key not in held]
        _CARRY.made(carrying.made)
        if fresh: cache.update({**held, **cache})
      _CARRY.scope, _CARRY.kernels, _CARRY.calls, _CARRY.owners, _CARRY.claims = None, {}, [], {}, {}
      _CARRY.gen += 1  # what is carried outside a schedule is the next one's

def site_signature(sink: UOp) -> frozenset[Any]:
  """The Tensor functions and lines a tensor graph's metadata names: two realizes of one graph from other lines differ in it."""
  md = uop_ops.all_metadata
  return frozenset((m.name, m.backward, getattr(m, "site", None)) for u in sink.toposort() if (ms := md.get(u)) for m in ms)

def uop_sites(sink: UOp) -> tuple[list[Entry], list[list[int]]]:
  """Which Tensor function (and model line, where recorded) made each UOp of a tensor graph: the distinct entries, and [trace number,
  entry index] for each UOp that has metadata (its first entry: tinygrad's outermost call). A graph viewer groups the graph by them."""
  entries: dict[tuple[Any, ...], int] = {}
  table: list[Entry] = []
  pairs: list[list[int]] = []
  for u in sink.toposort():
    if not (ms := uop_ops.all_metadata.get(u)): continue
    m = ms[0]
    site = getattr(m, "site", None)
    key = (m.name, m.backward, site, getattr(m, "backward_site", None), site.scope if site else ())
    if (i := entries.get(key)) is None:
      i = entries[key] = len(table)
      table.append(entry(m))
      if site is not None and site.scope: table[-1]["scope"] = [{"cls": cls, "index": n} for cls, n in site.scope]
    pairs.append([u.trace_num, i])
  return table, pairs

# ***** a kernel's provenance *****

def _global(u: UOp) -> bool:
  """A global buffer, or one after another kernel's store to it: what a kernel loads is computed elsewhere."""
  while u.op is Ops.AFTER and u.src: u = u.src[0]
  return u.op in (PARAM, Ops.BUFFER) and addrspace(u) in (AddrSpace.GLOBAL, None)

def own_compute(root: UOp, trusted: Callable[[UOp], bool] = lambda u: True) -> list[Entry]:
  """The Tensor functions whose compute a kernel does, each with where it came from when recorded: the entries of the compute UOps its
  stores are computed from, not looking into what it loads (those values were computed by the kernels that stored them) nor into
  another call. Deduplicated, in source order; metadata made before the recording began (a random seed's counter) has no line: noise
  beside a kernel's recorded lines, left out where there are some."""
  out: dict[tuple[Any, ...], Entry] = {}
  seen: set[UOp] = set()
  stack = [root]
  while stack:
    u = stack.pop()
    if u in seen or u.op in CALLS or _global(u) or (u.op is Ops.INDEX and u.src and _global(u.src[0])): continue
    seen.add(u)
    if _computes(u) and trusted(u):
      for m in uop_ops.all_metadata.get(u, ()):
        key = (m.name, m.backward, getattr(m, "site", None), getattr(m, "backward_site", None))
        if key not in out: out[key] = entry(m)
    stack.extend(u.src)
  entries = sorted(out.values(), key=lambda e: (e["file"] or "", e["line"] or 0, e["fn"]))
  return [e for e in entries if e["file"] is not None] or entries

def entry(m: Metadata) -> Entry:
  """One metadata entry as the trace records it (schema.Provenance)."""
  site: Site | None = getattr(m, "site", None)
  e: Entry = {"fn": m.name, "file": site.file if site else None, "line": site.line if site else None, "backward": m.backward,
              "via": site.via if site else None}
  if site is not None and site.caller is not None: e["caller"] = {"file": site.caller[0], "line": site.caller[1]}
  if site is not None and site.onnx is not None:
    op, index, name, outputs = site.onnx
    e["onnx"] = {"op": op, "index": index, "name": name, "outputs": list(outputs)}
  if m.backward and (bw := getattr(m, "backward_site", None)) is not None: e["backward_line"] = {"file": bw[0], "line": bw[1]}
  return e

def kernel_provenance(ast: UOp) -> list[Entry]:
  """A kernel's provenance read off its AST (where its schedule did not say it: `Carrying.provenance`): the compute its stores are
  computed from, its loads' PARAMs the boundary."""
  return own_compute(ast)
