"""The runtime: a schedule compiled, run and timed as tinygrad runs it, and what a device's compiler is."""
from __future__ import annotations
import contextlib
import functools
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any
from tinygrad import Device, Tensor
from tinygrad.device import Buffer
from tinygrad.uop.ops import Ops, UOp
from explorer.tracing.tg.compat import at_least, copied, timer
from explorer.tracing.tg.device_clocks import Runnable

if TYPE_CHECKING or at_least(0, 13):  # (0.12 runs ExecItems: explorer.tracing.tg.v012 has its schedule's runtime)
  from tinygrad.engine.realize import ExecContext, compile_linear, pm_exec, resolve_params, run_linear

def compile_schedule(linear: UOp) -> UOp:
  """tinygrad's compile_linear: lowers every kernel through to_program (its cache holds the programs codegen produced above)."""
  return compile_linear(linear)

def run_schedule(compiled: UOp, var_vals: dict[str, int] | None = None) -> None: run_linear(compiled, var_vals, wait=True)

def compiled_sources(compiled: UOp) -> list[str]:
  """The source of every program in a compiled schedule, in order: what tinygrad will run."""
  return [next(s.arg for s in c.src[0].src if s.op is Ops.SOURCE) for c in compiled.src if c.src[0].op is Ops.PROGRAM]

def _kernel_calls(compiled: UOp) -> list[UOp]: return [c for c in compiled.src if c.src[0].op is Ops.PROGRAM]

def kernel_calls(compiled: UOp) -> tuple[UOp, ...]: return compiled.src  # every call of a compiled schedule, kernels and copies

def runnables(compiled: UOp, var_vals: dict[str, int] | None = None) -> list[Runnable]:
  """Each kernel of a compiled schedule, in order, as a clock times it (explorer.tracing.tg.device_clocks): launched through tinygrad's own
  executor without waiting, or run once under tinygrad's time_call; symbolic variables bound to var_vals."""
  return [runnable(c, var_vals, i) for i, c in enumerate(compiled.src) if c.src[0].op is Ops.PROGRAM]

def runnable(call: UOp, var_vals: dict[str, int] | None = None, index: int = 0) -> Runnable:
  """One compiled kernel call as a clock times it, its symbolic variables bound to var_vals (index: its place in its schedule)."""
  ctx = ExecContext(var_vals or {}, update_stats=False)
  return Runnable(call.src[0].arg.name, functools.partial(pm_exec.rewrite, call, ctx), timer(call, var_vals), index)

def call_at(compiled: UOp, index: int) -> UOp:
  """The compiled schedule's call number `index` (a kernel's `call`): kept to time it again later, its buffers with it."""
  return compiled.src[index]

def _written(call: UOp) -> list[Buffer]:
  """The buffers a kernel call writes (its program's outputs), where they are allocated."""
  prg = call.src[0]
  args = resolve_params(call, ())
  bufs = [args[g].buffer for g in prg.arg.globals]
  return [b for i in prg.arg.outs if isinstance(b := bufs[i], Buffer) and b.is_allocated()]

def outputs_kept(calls: Sequence[UOp]) -> contextlib.AbstractContextManager[None]:
  """Inside, kernels already run may run again (timed): the buffers they write are copied out first and back after, so a program
  holds what its own run left (an optimizer's update applied once, not once per sample; a KV cache as its step wrote it)."""
  return buffers_kept(b for c in calls if c.src[0].op is Ops.PROGRAM for b in _written(c))

@contextlib.contextmanager
def buffers_kept(written: Iterable[Buffer]) -> Iterator[None]:
  """Inside, these buffers may be written: each is copied out first (on the device where tinygrad can) and back after."""
  saved = [(b, copied(Buffer(b.device, b.size, b.dtype).allocate(), b)) for b in {id(b): b for b in written}.values()]
  try: yield
  finally:
    for b, copy in saved: copied(b, copy)

def replay(compiled: UOp, device: str, var_vals: dict[str, int] | None = None) -> tuple[Sequence[Callable[[], Any]], str]:
  """The schedule's kernels as tinygrad's JIT replays them, and how: batched into the device's graph where it has one (a CUDA graph;
  built and run once here, before anything times it), else each launched in turn ("launches", as the JIT runs them on the CPU)."""
  ctx = ExecContext(var_vals or {}, update_stats=False)
  kernels = UOp(Ops.LINEAR, src=tuple(_kernel_calls(compiled)))
  if Device[device].graph is not None:
    from tinygrad.engine.jit import graph_split_rewrite
    try:
      launches = [functools.partial(pm_exec.rewrite, c, ctx) for c in graph_split_rewrite(kernels).src]
      for launch in launches: launch()
      Device[device].synchronize()
      return launches, "graph"
    except Exception: pass  # noqa: BLE001 - a graph tinygrad cannot build here: the kernels one by one, as without a graph
  return [functools.partial(pm_exec.rewrite, c, ctx) for c in kernels.src], "launches"

def synchronizer(device: str) -> Callable[[], None]: return Device[device].synchronize

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
