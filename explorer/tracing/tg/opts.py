"""Opts: the variant's optimization setting as tinygrad context, and opts by hand (checked, applied, timed and compared as
tinygrad's apply_opts and BEAM would)."""
from __future__ import annotations
import contextlib
import functools
import os
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any
import tinygrad
import tinygrad.device
from tinygrad import UOp, dtypes
from tinygrad.codegen import full_rewrite_to_sink
from tinygrad.codegen.opt import Opt, OptOps
from tinygrad.helpers import Context, ansistrip, getenv
from tinygrad.renderer import Renderer
from tinygrad.uop.ops import AxisType, KernelInfo, Ops
from explorer.tracing.tg.compat import NUM_CPU_THREADS, PARAM, do_to_program, param_slot, timer, to_program_key
from explorer.tracing.tg.device_clocks import Runnable
from explorer.tracing.tg.environment import USER_PARALLEL
from explorer.tracing.tg.pipeline import kernel_reads_writes

# ***** options: the variant's optimization setting as tinygrad context *****

def opt_context(opt: str) -> contextlib.AbstractContextManager[Any]:
  if opt == "none": return Context(NOOPT=1, BEAM=0)
  if opt.startswith("beam:"): return Context(NOOPT=0, BEAM=int(opt.split(":")[1]))
  return Context(NOOPT=0, BEAM=0)

# ***** opts by hand: tinygrad's Opt(op, axis, arg), written "UPCAST:0:4", applied as apply_opts applies a kernel's opts_to_apply *****

TINYGRAD_OPT_OPS = tuple(o.name for o in OptOps)  # this tinygrad's (explorer.spec.OPT_OPS: the syntax a request may use)

class OptRefused(ValueError):
  """Text that is no opt, or an opt tinygrad refuses for this kernel at this point (its KernelOptError's message)."""

def opt_text(o: Opt) -> str:
  """UPCAST:0:4, LOCAL:1:8, TC:0:-1,2,1 (TC's arg is a tuple), NOLOCALS:: (no axis, no arg)."""
  arg = ",".join(map(str, o.arg)) if isinstance(o.arg, tuple) else "" if o.arg is None else str(o.arg)
  return f"{o.op.name}:{'' if o.axis is None else o.axis}:{arg}"

def parse_opt(text: str) -> Opt:
  op, _, rest = text.strip().partition(":")
  axis, _, arg = rest.partition(":")
  if op.upper() not in TINYGRAD_OPT_OPS:
    raise OptRefused(f"{text!r}: no such opt; tinygrad's are {', '.join(TINYGRAD_OPT_OPS)} (written OP:AXIS:ARG, UPCAST:0:4)")
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

_starts: dict[tuple[Any, ...], UOp] = {}  # opts_start by tinygrad's program key: a schedule's checks, heuristic and next opts share one

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
    except (AssertionError, IndexError, TypeError, ValueError) as e:  # an axis or a size out of range fails before tinygrad's own checks
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
  return ast.substitute({p: p.replace(arg=replace(p.arg, device=device)) for p in ast.toposort() if p.op is PARAM})

def kernel_outputs(asts: Sequence[UOp], renderer: Renderer, device: str, seed: int = 0) -> list[list[Any]] | None:
  """Each variant of one kernel run once on the device over the same inputs (seeded random values in every buffer it has): the
  values of every buffer it writes, per variant, as numpy arrays. None where a buffer's dtype has no numpy twin."""
  import numpy as np
  from tinygrad.codegen.opt.postrange import args_from_ast
  from tinygrad.dtype import _to_np_dtype
  slots = sorted(s for p in asts[0].backward_slice if (s := param_slot(p)) is not None and s >= 0)
  _, written = kernel_reads_writes(asts[0])
  rng, start, out = np.random.default_rng(seed), None, []
  for ast in asts:
    shapes, var_vals = args_from_ast(ast, device)
    if any(_to_np_dtype(b.dtype) is None for b in shapes): return None
    if start is None:
      start = [(rng.standard_normal(b.size) if dtypes.is_float(b.dtype) else rng.integers(0, 8, b.size)).astype(_to_np_dtype(b.dtype))
               for b in shapes]
    bufs = [tinygrad.device.Buffer(device, b.size, b.dtype, initial_value=data.tobytes()) for b, data in zip(shapes, start, strict=False)]
    timer(do_to_program(_on_device(ast, device), renderer).call(*[UOp.from_buffer(b) for b in bufs]), var_vals)()
    out.append([bufs[slots.index(s)].numpy().copy() for s in written])
  return out

def kernel_runnables(asts: Sequence[UOp], renderer: Renderer, device: str) -> list[Runnable]:
  """Each of these variants of one kernel compiled for the device and run on the same fresh buffers of its parameters' sizes (as BEAM
  times a candidate, at full size), as a clock times it (explorer.tracing.tg.device_clocks)."""
  from tinygrad.codegen.opt.postrange import args_from_ast
  from tinygrad.engine.realize import ExecContext, compile_linear, pm_exec
  rawbufs, var_vals = args_from_ast(asts[0], device)
  args = [UOp.from_buffer(b.ensure_allocated()) for b in rawbufs]
  ctx, out = ExecContext(var_vals, update_stats=False), []
  for ast in asts:
    call = compile_linear(UOp(Ops.LINEAR, src=(do_to_program(_on_device(ast, device), renderer).call(*args),))).src[0]
    out.append(Runnable(call.src[0].arg.name, functools.partial(pm_exec.rewrite, call, ctx), timer(call, var_vals)))
  return out

MAX_BEAM_CANDIDATES = 4000  # recorded per kernel: a wide BEAM on a big kernel times thousands

@contextlib.contextmanager
def recording_beam() -> Iterator[list[tuple[list[str], float]]]:
  """Every candidate tinygrad's beam_search times while inside, in order: (its opts, the least of its run times). Candidates it never
  times (code identical to an earlier one's, a failed compile, 1000x the least compute) are not in it, as they are not in its choice.
  The disk cache of BEAM results is off inside (CACHELEVEL=0): a cached answer would time nothing. The candidates compile as plain
  tinygrad's BEAM compiles them, in tinygrad's pool of processes (one per core, or the user's PARALLEL) that import tinygrad without
  tracking: their rewrites are not the kernel's. Only the winner's codegen, after the search, is recorded, in this process."""
  from tinygrad.codegen.opt import search
  from tinygrad.engine.worker import get_worker_pool, terminate_worker_pool
  timed: list[tuple[list[str], float]] = []
  original_time, original_compile = search._time_program, search._try_compile
  def timer(prg: UOp, *args: Any, **kwargs: Any) -> list[float]:
    tms = original_time(prg, *args, **kwargs)
    if len(timed) < MAX_BEAM_CANDIDATES: timed.append(([opt_text(o) for o in prg.src[0].arg.applied_opts], min(tms)))
    return tms
  def untracked(x: tuple[int, Any]) -> Any:  # a search without the pool (PARALLEL=0) compiles here
    with Context(TRACK_MATCH_STATS=0): return original_compile(x)
  search._time_program = timer
  tracking = os.environ.pop("TRACK_MATCH_STATS", None)  # the pool's processes start (and restart) while inside
  try:
    with Context(CACHELEVEL=0, PARALLEL=beam_parallel()):
      if get_worker_pool() is None: search._try_compile = untracked
      yield timed
  finally:
    terminate_worker_pool()  # it would outlive the search holding tinygrad in every process
    if tracking is not None: os.environ["TRACK_MATCH_STATS"] = tracking
    search._time_program, search._try_compile = original_time, original_compile

def beam_parallel() -> int:
  """The compile processes of plain tinygrad's BEAM search: the user's PARALLEL, else tinygrad's default when it is not tracking (one
  per core, shared among pytest-xdist's workers)."""
  if USER_PARALLEL is not None: return int(USER_PARALLEL)
  return NUM_CPU_THREADS.value // max(1, getenv("PYTEST_XDIST_WORKER_COUNT", 1))

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
          for i, (s, t) in enumerate(zip(k.full_shape, k.axis_types, strict=True))]
