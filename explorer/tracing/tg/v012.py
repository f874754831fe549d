"""tinygrad 0.12's schedule and runtime, under the names explorer.tracing.tg.runtime and .pipeline give 0.13's and 0.14's: where those
have an Ops.LINEAR of CALLs (compile_linear, run_linear, time_call), 0.12 schedules a list of ExecItems (an AST and its Buffers), lowers
each to a runner found in engine.realize.method_cache (get_runner, get_program: a ProgramSpec) and runs it (ExecItem.run). A "linear"
here is that list, a "compiled" one the same list lowered. explorer.tracing.tg imports these in place of the others on 0.12."""
from __future__ import annotations
import contextlib
import functools
import importlib
from collections.abc import Callable, Sequence
from typing import Any
from tinygrad import Device
from tinygrad.helpers import ansistrip
from tinygrad.uop.ops import Ops, UOp
from explorer.tracing.tg.device_clocks import Runnable
from explorer.tracing.tg.pipeline import Call
from explorer.tracing.tg.runtime import buffers_kept

# tinygrad 0.12's own, typed loosely: the type checker reads the newest tinygrad, where these are gone or differ
realize: Any = importlib.import_module("tinygrad.engine.realize")
CompiledRunner, ExecItem, tiny_run_schedule = realize.CompiledRunner, realize.ExecItem, realize.run_schedule
Tensor: Any = importlib.import_module("tinygrad").Tensor
Buffer: Any = importlib.import_module("tinygrad.device").Buffer

# ***** the schedule *****

def schedule_with_vars(*outs: Any) -> tuple[list[Any], dict[str, int]]:
  """tinygrad's schedule of outs, as Tensor.realize makes it (0.12: ExecItems), and the values it binds its symbolic variables to."""
  sched, var_vals = Tensor.schedule_with_vars(*outs)
  return list(sched), dict(var_vals)

def schedule(*outs: Any) -> list[Any]:
  sched, var_vals = schedule_with_vars(*outs)
  assert not var_vals, f"a schedule with symbolic variables ({', '.join(var_vals)}): use schedule_with_vars"
  return sched

def schedule_keys(linear: Sequence[Any]) -> tuple[str, ...]: return tuple(ei.ast.key.hex() for ei in linear)

def calls(linear: Sequence[Any]) -> list[Call]:
  return [Call(i, "kernel" if ei.ast.op is Ops.SINK else ei.ast.op.name.lower(), ei.ast, list(ei.bufs)) for i, ei in enumerate(linear)]

def _uop_of(b: Any) -> UOp | None:
  """The BUFFER UOp a Buffer belongs to (0.12 keeps UOp -> Buffer in uop.ops.buffers): the tensor graph's node for it."""
  from tinygrad.uop.ops import buffers
  return next((u for u, x in list(buffers.items()) if x is b), None)

def buffer_key(b: Any) -> int:
  """One logical buffer: a Buffer, or a UOp by the Buffer it holds (a tensor's)."""
  return id(b.buffer if isinstance(b, UOp) else b)

def buffer_facts(b: Any) -> dict[str, Any]:
  u = _uop_of(b)
  facts = {"numel": b.size, "dtype": b.dtype.name, "nbytes": b.nbytes, "device": b.device, "num": u.trace_num if u is not None else None}
  if b._base is not None: facts["planned"] = f"view into a {b._base.nbytes}-byte buffer of the memory planner"
  return facts

def tensor_buffer(t: Any) -> Any:
  """The Buffer a realized (or scheduled) tensor holds."""
  base = t.uop.base
  while base.op in (Ops.CONTIGUOUS_BACKWARD, Ops.CONTIGUOUS, Ops.DETACH): base = base.src[0].base  # (the marks a schedule left on it)
  return base.buffer if base.op is Ops.BUFFER else base.buf_uop.buffer

# ***** the runtime *****

def compile_schedule(linear: Sequence[Any]) -> list[Any]:
  """Each ExecItem lowered (get_runner: the programs codegen put in method_cache are the ones found)."""
  return [ei.lower() for ei in linear]

def run_schedule(compiled: Sequence[Any], var_vals: dict[str, int] | None = None) -> None:
  tiny_run_schedule(list(compiled), var_vals, do_update_stats=False)  # (it empties the list it is given)
  Device[compiled[0].prg.device if compiled and compiled[0].prg is not None else Device.DEFAULT].synchronize()

def _kernels(compiled: Sequence[Any]) -> list[Any]: return [ei for ei in compiled if isinstance(ei.prg, CompiledRunner)]

def kernel_calls(compiled: Sequence[Any]) -> list[Any]: return list(compiled)

def compiled_sources(compiled: Sequence[Any]) -> list[str]: return [ei.prg.p.src for ei in _kernels(compiled)]

def runnables(compiled: Sequence[Any], var_vals: dict[str, int] | None = None) -> list[Runnable]:
  return [runnable(ei, var_vals, i) for i, ei in enumerate(compiled) if isinstance(ei.prg, CompiledRunner)]

def runnable(call: Any, var_vals: dict[str, int] | None = None, index: int = 0) -> Runnable:
  """One lowered kernel as a clock times it: launched without waiting, or run once synchronized (CompiledRunner's own timer, as 0.12's
  beam search times a program)."""
  call.lower()
  launch = functools.partial(call.run, var_vals or {}, wait=False, do_update_stats=False)
  def timed() -> float: return float(call.run(var_vals or {}, wait=True, do_update_stats=False) or 0.0)
  return Runnable(ansistrip(call.prg.p.name), launch, timed, index)

def call_at(compiled: Sequence[Any], index: int) -> Any: return compiled[index]

def _written(ei: Any) -> list[Any]:
  return [b for i in ei.prg.p.outs if isinstance(b := ei.bufs[i], Buffer) and b.is_allocated()]

def outputs_kept(calls: Sequence[Any]) -> contextlib.AbstractContextManager[None]:
  """Inside, kernels already run may run again: the buffers they write are copied out first and back after (runtime.outputs_kept)."""
  return buffers_kept(b for ei in calls if isinstance(ei.prg, CompiledRunner) for b in _written(ei))

def replay(compiled: Sequence[Any], device: str, var_vals: dict[str, int] | None = None) -> tuple[Sequence[Callable[[], Any]], str]:
  """The schedule's kernels as 0.12's JIT replays them: each launched in turn (0.12 batches a JIT's items into the device's graph only
  once captured: apply_graph_to_jit, which a schedule run here has not been)."""
  return [functools.partial(ei.run, var_vals or {}, wait=False, do_update_stats=False) for ei in _kernels(compiled)], "launches"
