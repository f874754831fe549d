"""Codegen: a kernel to a PROGRAM (tinygrad's to_program, or with custom rewrites), compiles timed, and what a trace records of a
program."""
from __future__ import annotations
import collections
import contextlib
import dataclasses
import os
import sys
import tempfile
import time
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from tinygrad.dtype import AddrSpace
from tinygrad.helpers import ansistrip
from tinygrad.renderer import Renderer
from tinygrad.uop.ops import GroupOp, KernelInfo, Ops, UOp, multirange_str, sym_infer
from explorer.tracing.tg.compat import ParamArg, at_least, const_text, do_to_program, launch, max_numel, onchip, runs, to_program
from explorer.tracing.tg.custom_rewrites import Rewrite, pre_matcher_set, to_program_rewritten
from explorer.tracing.tg.opts import opt_text
from explorer.tracing.tg.recording import trace_num
from explorer.tracing.tg.rewrite_blob import plain

if typing.TYPE_CHECKING:  # types only: pydantic (the schema's validation) stays out of the worker processes
  from explorer.schema import Storage

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
    self.spans: list[tuple[float, float]] = []  # each compile's start and end (perf_counter)
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
        finally:
          self.spans.append((st, en := time.perf_counter()))
          self.seconds += en - st
    self._comp, self._inner = comp, inner
    comp.compile = timed  # type: ignore[method-assign]
  def close(self) -> None: self._comp.compile = self._inner  # type: ignore[method-assign]

def codegen_host(ast: UOp, renderer: Renderer, rewrites: Sequence[Rewrite] = ()) -> UOp:
  """tinygrad's own to_program: the PROGRAM it caches is the one compile_linear/run_linear then run. With rewrites, the rewritten
  PROGRAM goes into that cache under the kernel's key, so the schedule runs what was rewritten."""
  with pre_matcher_set(renderer, rewrites):
    prg = to_program_rewritten(ast, renderer, tuple(rewrites)) if rewrites else to_program(ast, renderer)
  if rewrites or not at_least(0, 13): runs(ast, renderer, prg)
  return prg

def codegen_deviceless(ast: UOp, renderer: Renderer, rewrites: Sequence[Rewrite] = ()) -> UOp:
  with pre_matcher_set(renderer, rewrites):
    return to_program_rewritten(ast, renderer, tuple(rewrites)) if rewrites else do_to_program(ast, renderer)

@dataclass
class ProgramFacts:
  name: str
  global_size: list[Any]
  local_size: list[Any] | None
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

UOP_CLASSES: dict[str, Callable[[UOp], bool]] = {
  "alu": lambda u: u.op in GroupOp.ALU, "loads": lambda u: u.op is Ops.LOAD, "stores": lambda u: u.op is Ops.STORE,
  "consts": lambda u: u.op is Ops.CONST, "ranges": lambda u: u.op is Ops.RANGE}

def uops_listing(lin: Sequence[UOp], device: str | None = None) -> list[str]:
  """tinygrad's print_uops, line for line (without colour), in linear time: print_uops looks each source up in the list itself, which
  took minutes on the large fused Winograd kernel (16,808 uops). device: the device of the target it was rendered for, which its PARAMs
  name (a deviceless target renders the AST the trace's device scheduled, whose PARAMs name that device: codegen never reads it)."""
  index = {u: i for i, u in enumerate(lin)}
  def src(x: UOp) -> Any: return (index[x] if x.op is not Ops.CONST else const_text(x)) if x in index else "--"
  def arg(u: UOp) -> Any:
    return dataclasses.replace(u.arg, device=device) if device and isinstance(u.arg, ParamArg) and u.arg.device is not None else u.arg
  return [plain(f"{i:4d} {str(u.op):20s}: {multirange_str(u.ranges, color=True, pad=10)} {str(u.dtype):40s} "
                    f"{str([src(x) for x in u.src]):32s} {arg(u)}") for i, u in enumerate(lin)]

def program_facts(prg: UOp, device: str | None = None, var_vals: dict[str, int] | None = None) -> ProgramFacts:
  """What the trace records of a compiled PROGRAM; device: its target's, for the listing's PARAMs (uops_listing). A symbolic kernel's
  counts (FLOPs, bytes) are tinygrad's Estimates at the run's bound values (var_vals), or at their upper bounds where none are given."""
  sink = prg.src[0]
  lin = next(s for s in prg.src if s.op is Ops.LINEAR).src
  src = next((s.arg for s in prg.src if s.op is Ops.SOURCE), "")
  about = launch(prg)
  est = about.estimates
  def count(x: Any) -> int:
    if isinstance(x, (int, float)): return int(x)
    return int(sym_infer(x, var_vals)) if var_vals and all(v.expr in var_vals for v in x.variables()) else int(x.vmax)
  counts = {k: sum(1 for u in lin if f(u)) for k, f in UOP_CLASSES.items()}
  detail = collections.Counter(u.op.name for u in lin)
  def num(x: Any) -> Any: return int(x) if isinstance(x, (int, float)) else str(x)
  kept = {sp: [u for u in lin if onchip(u, sp)] for sp in (AddrSpace.REG, AddrSpace.LOCAL)}
  storage: Storage = {"reg_buffers": len(kept[AddrSpace.REG]), "reg_values": sum(max_numel(u) for u in kept[AddrSpace.REG]),
             "local_buffers": len(kept[AddrSpace.LOCAL]),
             "local_bytes": sum(max_numel(u) * u.dtype.itemsize for u in kept[AddrSpace.LOCAL])}
  return ProgramFacts(ansistrip(about.name), [num(x) for x in about.global_size],
                      None if about.local_size is None else [num(x) for x in about.local_size],
                      count(est.ops) if est is not None else 0, count(est.lds) if est is not None else 0, count(est.mem) if est is not None else 0,
                      [opt_text(o) for o in sink.arg.applied_opts], uops_listing(lin, device),
                      {**counts, "total": len(lin), **{f"op:{k}": v for k, v in detail.items()}},
                      src, storage, [trace_num(u) for u in lin], trace_num(sink))

def ast_uop_count(ast: UOp) -> int: return len(ast.toposort())

def ast_variables(ast: UOp) -> dict[str, list[int]]:
  """The symbolic variables a kernel takes (its source's parameters), each with its bounds [min, max]."""
  return {v.expr: [int(v.vmin), int(v.vmax)] for v in sorted(ast.variables(), key=lambda v: v.expr)}

def ast_key(ast: UOp) -> str:
  """The kernel AST's content hash (tinygrad's UOp key, its KernelInfo name aside): equal keys, identical kernels."""
  return (ast.replace(arg=KernelInfo()) if ast.op is Ops.SINK and isinstance(ast.arg, KernelInfo) else ast).key.hex()
