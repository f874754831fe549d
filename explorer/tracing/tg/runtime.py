"""The runtime: a schedule compiled, run and timed as tinygrad runs it, and what a device's compiler is."""
from __future__ import annotations
import time
from typing import Iterator, Sequence
from tinygrad import Device, Tensor
from tinygrad.engine.realize import compile_linear, run_linear, time_call
from tinygrad.uop.ops import Ops, UOp

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
