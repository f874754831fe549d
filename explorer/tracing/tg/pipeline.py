"""The tensor graph and the scheduler: realizes routed to the trace, tinygrad's schedule, rangeify's STAGEs and their data flow,
and the schedule's calls and buffers."""
from __future__ import annotations
import collections
import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast
from tinygrad import Tensor
from tinygrad.dtype import AddrSpace
from tinygrad.engine import jit as tiny_jit
from tinygrad.engine.realize import capturing
from tinygrad.helpers import ansistrip
from tinygrad.uop.ops import Ops, UOp
from explorer.tracing.tg.compat import PARAM, STAGE, addrspace, at_least, max_numel, param_slot
from explorer.tracing.tg.recording import LiveLog, Pass
from explorer.tracing.tg.rewrite_blob import RewriteBlob

# ***** realizes: what a realize would compute, and a hook that takes it over *****

def tensor_device(t: Tensor) -> str: return t.device if isinstance(t.device, str) else ",".join(t.device or ())

def pending(ts: Sequence[Tensor]) -> list[Tensor]:
  """The tensors a realize of ts would compute (as Tensor.realize chooses them): not yet backed by a buffer, not virtual (0.13: with a
  device, not backed by a buffer; 0.12: those whose UOp is not contiguous)."""
  if not at_least(0, 13): return [t for t in ts if not cast(Any, t.uop).is_contiguous()]
  if not at_least(0, 14): return [t for t in ts if t.uop.device is not None and not t.uop.has_buffer_identity()]
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

# ***** TinyJit: its capture takes a realize's schedule instead of running it, and its replays realize nothing *****

def jit_capturing() -> bool:
  """A TinyJit is capturing: a schedule made now is handed to it, not run (its first run and replays run it, JitRun)."""
  return bool(capturing)

@dataclass(frozen=True)
class JitRun:
  """One run of a TinyJit's captured schedule: its kernels by tinygrad's names (a graph batch's each), the values it bound its
  variables to, its host wall time; jit tells one TinyJit's runs from another's."""
  jit: int
  kernels: tuple[str, ...]
  variables: dict[str, int]
  seconds: float

def _kernel_names(call: UOp) -> list[str]:
  ast = call.src[0]
  if ast.op is Ops.PROGRAM: return [ansistrip(ast.arg.name)]
  if ast.op is Ops.CUSTOM_FUNCTION and ast.arg == "graph": return [n for c in ast.src[0].src for n in _kernel_names(c)]
  return [] if ast.op in (Ops.COPY, Ops.CUSTOM_FUNCTION) else [str(ast.op)]  # copies are the schedule's, not kernels

@contextlib.contextmanager
def on_jit(captured: Callable[[UOp, dict[str, int]], None], ran: Callable[[JitRun], None]) -> Iterator[None]:
  """While inside, a schedule a TinyJit captures (a realize's, handed to it instead of run) calls captured(linear, its variables), and
  each run of a TinyJit's captured schedule (the one right after its capture, then every replay) calls ran once it ran, as tinygrad
  ran it."""
  if not at_least(0, 13):  # 0.12's TinyJit captures ExecItems (TinyJit.add): its captures and replays are not recorded (NOT_IN_TINYGRAD)
    yield
    return
  jit: Any = getattr(tiny_jit, "_TinyJit", tiny_jit.TinyJit)  # (0.13's TinyJit is the class; 0.14's a function making a _TinyJit)
  add, call = jit.add_linear, tiny_jit.CapturedJit.__call__
  def add_linear(self: Any, linear: UOp, var_vals: dict[str, int]) -> None:
    add(self, linear, var_vals)
    captured(linear, dict(var_vals))
  def run(self: Any, input_uops: list[UOp], var_vals: dict[str, int]) -> Any:
    st = time.perf_counter()
    ret = call(self, input_uops, var_vals)
    ran(JitRun(id(self), tuple(n for c in self.linear.src for n in _kernel_names(c)), dict(var_vals), time.perf_counter() - st))
    return ret
  jit.add_linear, tiny_jit.CapturedJit.__call__ = add_linear, run  # type: ignore[method-assign]
  try: yield
  finally: jit.add_linear, tiny_jit.CapturedJit.__call__ = add, call  # type: ignore[method-assign]

# ***** tensor graph and scheduler *****

def tensor_sink(*outs: Tensor) -> UOp: return UOp.sink(*[o.uop for o in outs])

def op_histogram(sink: UOp) -> dict[str, int]: return dict(collections.Counter(u.op.name for u in sink.toposort()))

def schedule(*outs: Tensor) -> UOp:
  """tinygrad's schedule of outs, which bind no symbolic variable (schedule_with_vars for the ones that do)."""
  linear, var_vals = schedule_with_vars(*outs)
  assert not var_vals, f"a schedule with symbolic variables ({', '.join(var_vals)}): use schedule_with_vars"
  return linear

def schedule_with_vars(*outs: Tensor) -> tuple[UOp, dict[str, int]]:
  """tinygrad's schedule: an Ops.LINEAR of CALLs (kernels and copies), exactly as Tensor.realize builds it, and the values it binds
  its symbolic variables to (a KV cache's position: {"pos": 3}). Under BEAM, the kernels are marked for beam search here, as
  compile_linear would mark them, so that the programs codegen shows are the ones that run."""
  from tinygrad.engine.realize import pm_beam
  from tinygrad.helpers import BEAM
  from tinygrad.uop.ops import graph_rewrite
  linear, var_vals = Tensor.linear_with_vars(*outs)
  return (graph_rewrite(linear, pm_beam, ctx=BEAM.value, walk=True) if BEAM.value >= 1 else linear), dict(var_vals)

# ***** symbolic sizes: a dimension a Variable sets (a KV cache's position, a prefill's token count) *****

Dim = int | str  # a dimension as the trace records it: a number, or a symbolic one as tinygrad renders it ("toks", "(start_pos+1)")

def dims(shape: Sequence[Any]) -> tuple[Dim, ...]:
  """A shape as the trace records it (a Tensor's, a STAGE's, a buffer's)."""
  return tuple(_dim(d) for d in shape)

def _dim(d: Any) -> Dim:
  if isinstance(d, int): return d
  try: return int(d)
  except Exception: return str(d.render())  # noqa: BLE001 - symbolic: tinygrad says so by failing to make it one number

@dataclass(frozen=True)
class Symbolic:
  """A size that Variables set: as tinygrad renders it, each variable's bounds, and its value at the values this run bound them to."""
  expr: str
  variables: tuple[tuple[str, int, int], ...]
  at: int | None

  def record(self) -> dict[str, Any]:  # schema.Symbolic
    return {"nbytes": self.expr, "variables": {n: [lo, hi] for n, lo, hi in self.variables}, "at": self.at}

def nbytes_of(shape: Sequence[Any], itemsize: int, var_vals: dict[str, int] | None = None) -> tuple[int, Symbolic | None]:
  """The bytes a shape of elements of itemsize takes: a number, or, where Variables set a dimension, its largest (what tinygrad allocates)
  and the size as an expression of them."""
  n: Any = itemsize
  for d in shape: n = n * d
  if isinstance(n, int): return n, None
  try: return int(n), None
  except Exception: pass  # noqa: BLE001 - symbolic
  found = {v: (str(v.expr), int(v.vmin), int(v.vmax)) for v in n.variables()}
  at = None
  if var_vals and all(name in var_vals for name, _, _ in found.values()):  # (tinygrad's sym_infer fails on a rangeify graph's variables)
    with contextlib.suppress(Exception): at = int(n.substitute({v: v.const_like(var_vals[name]) for v, (name, _, _) in found.items()}).simplify())
  return int(n.vmax), Symbolic(str(n.render()), tuple(sorted(set(found.values()))), at)

@dataclass(frozen=True)
class Stage:
  """One bufferize (STAGE) node of rangeify."""
  shape: tuple[Dim, ...]
  dtype: str
  addrspace: str
  removable: bool
  src_op: str
  nbytes: int  # where Variables set its size, its largest
  num: int | None = None  # its trace number in the rewrite blob: the graph pages select the node by it
  reads: tuple[tuple[str, int], ...] = ()  # the buffers its value is computed from: ("slot", n), argument n of the scheduled call, or
  into: tuple[tuple[str, int], ...] = ()   # ("stage", num), a kept STAGE; and the buffers its value is stored into (_data_flow)
  symbolic: Symbolic | None = None  # its size as the Variables set it

def _removable(u: UOp) -> bool: return bool(getattr(u.arg, "removable", True))

def _slot(u: UOp) -> int | None:
  """The argument slot of the buffer a STORE, INDEX or AFTER addresses (its PARAM), None where it is no argument."""
  while u.op in (Ops.STORE, Ops.INDEX, Ops.AFTER, Ops.BITCAST, Ops.CAST) and u.src: u = u.src[0]
  return param_slot(u)

Flow = frozenset[tuple[str, int]]  # ("slot", n): argument n of the scheduled call (a buffer); ("stage", num): a kept STAGE, a buffer once stored

def _data_flow(sink: UOp, nums: dict[int, int], kept: Callable[[UOp], bool]) -> tuple[dict[UOp, Flow], dict[UOp, Flow]]:
  """Per UOp of a rangeify graph: the buffers its value is computed from (reads), and the buffers it is stored into (into). A buffer is a
  PARAM or the AFTER that names it once stored (an argument slot), or a kept STAGE; an inlined STAGE is recomputed by its reader, so the
  flow goes through it."""
  order = sink.toposort()
  def buffer(u: UOp) -> Flow | None:
    if u.op in (PARAM, Ops.AFTER) and (slot := _slot(u)) is not None: return frozenset({("slot", slot)})
    if u.op is STAGE and kept(u) and (num := nums.get(id(u))) is not None: return frozenset({("stage", num)})
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
      elif v.op is STAGE and (b := buffer(v)) is not None: goes |= b
      else: goes |= into.get(v, frozenset())
    into[u] = frozenset(goes)
  return reads, into

def stages_in(sink: UOp, blob: RewriteBlob | LiveLog | None = None, kept: Callable[[int | None], bool] | None = None,
              var_vals: dict[str, int] | None = None) -> list[Stage]:
  """The STAGEs of a graph, each with its data flow (reads, into), which stops at the STAGEs `kept` says became buffers (by trace
  number; default: the ones not removable); a size Variables set, at the values var_vals binds them to too."""
  nums = blob.nums() if blob is not None else {}
  reads, into = _data_flow(sink, nums, (lambda u: not _removable(u)) if kept is None else (lambda u: kept(nums.get(id(u)))))
  ret = []
  for u in sink.toposort():
    if u.op is not STAGE: continue
    shape = tuple(u.shape) if u._shape is not None else ()
    nbytes, symbolic = nbytes_of(shape, u.dtype.itemsize, var_vals)
    ret.append(Stage(dims(shape), u.dtype.name, getattr(getattr(u.arg, "addrspace", None), "name", "GLOBAL"), _removable(u), u.src[0].op.name,
                     nbytes, nums.get(id(u)), tuple(sorted(frozenset().union(*(reads[x] for x in u.src)))),
                     tuple(sorted(into.get(u, frozenset()))), symbolic))
  return ret

def call_argument_nums(blob: RewriteBlob | LiveLog, passes: list[Pass]) -> list[int | None]:
  """The trace numbers of the buffers the scheduled call takes, by argument slot (the PARAM slots of rangeify's graphs): read off the
  graph the "schedule to linear" pass started from, tinygrad's CALL of the tensor graph's SINK on its buffers."""
  p = next((p for p in passes if p.name == "schedule to linear"), None)
  if p is None: return []
  call, nums = blob.sink(p.sink), blob.nums()
  return [nums.get(id(b)) for b in call.src[1:]] if call.op is Ops.CALL else []

def realized_in(sink: UOp, blob: RewriteBlob | LiveLog, var_vals: dict[str, int] | None = None) -> list[Stage]:
  """The boundaries stored to directly rather than through a STAGE (outputs, .contiguous()): each AFTER of a buffer, as a Stage row."""
  nums, ret = blob.nums(), []
  for u in sink.toposort():
    if u.op is not Ops.AFTER or not u.src or _is_variable(u.src[0]): continue
    buf, dt = u.src[0], getattr(u.src[0].dtype, "base", u.src[0].dtype)
    shape = tuple(buf.shape) if buf._shape is not None else (max_numel(buf),)
    stored = u.src[1] if len(u.src) > 1 else buf
    while stored.op in (Ops.END, Ops.GROUP, Ops.AFTER) and stored.src: stored = stored.src[0]  # down to the STORE
    src_op = stored.src[1].op.name if stored.op is Ops.STORE and len(stored.src) > 1 else stored.op.name
    slot = _slot(u)  # the argument slot of the buffer it stores: the buffer it is, exactly
    nbytes, symbolic = nbytes_of(shape, dt.itemsize, var_vals)
    ret.append(Stage(dims(shape), dt.name, "GLOBAL", False, src_op, nbytes, nums.get(id(u)),
                     into=() if slot is None else (("slot", slot),), symbolic=symbolic))
  return ret

def _is_variable(u: UOp) -> bool:
  """A Variable's own buffer (0.14 binds a Variable as an AFTER of its ALU-space BUFFER): a value, not a boundary realized."""
  return addrspace(u) is AddrSpace.ALU if hasattr(AddrSpace, "ALU") else False

# pass names of rangeify in get_kernel_graph: STAGEs exist after apply rangeify; removable ones are fused away in DEBUF
RANGEIFY_PASS, DEBUF_PASS, STAGE_TO_STORE_PASS = "apply rangeify", "symbolic+reduce_collapse+debuf", "stage to store"

def stage_decisions(blob: RewriteBlob | LiveLog, passes: list[Pass], var_vals: dict[str, int] | None = None) -> dict[str, Any]:
  """Which STAGEs rangeify created, which the debuf pass removed (fused) and which survived to become buffers.
  Read off the graphs tinygrad recorded at the start of the debuf pass and of the pass after it."""
  names = [p.name for p in passes]
  if DEBUF_PASS not in names:  # tinygrad's schedule cache: the same graph scheduled at an earlier realize, its passes recorded there
    return {"note": "tinygrad scheduled this graph from its schedule cache: no rangeify pass ran (an earlier realize of the same graph shows them)"}
  i = names.index(DEBUF_PASS)
  after = next((p for p in passes[i+1:] if p.depth <= passes[i].depth), None)
  created = stages_in(blob.sink(passes[i].sink), blob, var_vals=var_vals)
  kept = stages_in(blob.sink(after.sink) if after is not None else blob.pass_output(passes[i]), blob, var_vals=var_vals)
  # STAGEs change identity as their sources are rewritten: pair survivors with their origin by ever looser signatures
  unpaired_created, unpaired_kept, kept_of = list(created), list(kept), {}
  for sig in (lambda s: (s.shape, s.dtype, s.addrspace, s.src_op), lambda s: (s.dtype, s.addrspace, s.src_op), lambda s: (s.dtype, s.addrspace)):
    for k in list(unpaired_kept):
      if (c := next((c for c in unpaired_created if sig(c) == sig(k)), None)) is not None:
        unpaired_created.remove(c); unpaired_kept.remove(k)
        kept_of[c.num] = kept.index(k)  # the created STAGE (by trace number) that survived as kept row k
  # the flow again, now that it is known which STAGEs survived: it goes through the inlined ones and stops at the kept ones
  created = stages_in(blob.sink(passes[i].sink), blob, kept=lambda n: n in kept_of, var_vals=var_vals)
  fused = [c for c in created if c.num not in kept_of]
  realized = realized_in(blob.sink((after or passes[i]).sink), blob, var_vals)
  return {"created": created, "kept": kept, "fused": fused, "realized": len(realized), "realized_rows": realized, "debuf_matches": passes[i].matches,
          "debuf_pass": i, "kept_of": kept_of}


# ***** the schedule's calls and buffers *****

def schedule_keys(linear: UOp) -> tuple[str, ...]:
  """What a schedule runs, as content keys in order: each call's AST (kernels and copies alike), so that two schedules of the same
  kernels in the same order have the same keys whatever buffers they run on."""
  return tuple(c.src[0].key.hex() for c in linear.src)

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

def buffer_facts(b: UOp) -> dict[str, Any]:
  arena = b.buf_uop
  facts = {"numel": max_numel(b), "dtype": b.dtype.name, "nbytes": max_numel(b) * b.dtype.itemsize,
           "device": arena.device if isinstance(arena.device, str) else ",".join(arena.device), "num": b.trace_num}
  if b.op is not Ops.BUFFER:
    facts["planned"] = f"view ({b.op.name}) into a {max_numel(arena) * arena.dtype.itemsize}-byte arena of the memory planner"
  return facts

def tensor_buffer(t: Tensor) -> UOp: return t.uop.buf_uop

def copy_ins_outs(call: Call) -> tuple[list[int], list[int]]: return [1], [0]

def kernel_reads_writes(ast: UOp) -> tuple[list[int], list[int]]:
  """Parameter slots a kernel AST loads from and stores to."""
  outs, ins = set(), set()
  for u in ast.toposort():
    if u.op is Ops.STORE:
      outs |= {s for p in u.src[0].toposort() if (s := param_slot(p)) is not None and s >= 0 and addrspace(p) is AddrSpace.GLOBAL}
  for u in ast.toposort():
    if (s := param_slot(u)) is not None and s >= 0 and addrspace(u) is AddrSpace.GLOBAL and s not in outs: ins.add(s)
  return sorted(ins), sorted(outs)
