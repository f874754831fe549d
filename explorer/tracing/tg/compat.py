"""What differs between the tinygrads the explorer runs (explorer.tinygrads.TINYGRADS), in one place: each name the seam uses that an older
version moved, renamed or lacks, as this worker's tinygrad has it, or a stand-in that does what that version does. The rest of the seam
is written against the newest and imports these from here (what a version lacks outright, a stage leaves out: specs.has_spec)."""
from __future__ import annotations
import functools
import importlib
import re
from typing import TYPE_CHECKING, Any
from tinygrad.uop.ops import Ops, UOp

def _version() -> str:
  """The installed tinygrad's version, from the name of its dist-info beside the package (importlib.metadata would import the email
  package to read it: a capture's process pays for what it imports)."""
  import pathlib
  import tinygrad
  found = list(pathlib.Path(str(tinygrad.__file__)).resolve().parent.parent.glob("tinygrad-*.dist-info"))
  if len(found) == 1: return found[0].name.removeprefix("tinygrad-").removesuffix(".dist-info")
  import importlib.metadata
  return importlib.metadata.version("tinygrad")

VERSION = _version()
V = tuple(int(x) for x in re.findall(r"\d+", VERSION)[:3])  # (a build of tinygrad from source: 0.14.0.dev0)

def at_least(*version: int) -> bool: return version <= V

if TYPE_CHECKING or at_least(0, 14):  # (the type checker reads the newest's)
  from tinygrad.codegen import to_program_key as to_program_key
  from tinygrad.helpers import NUM_CPU_THREADS as NUM_CPU_THREADS
  from tinygrad.uop.ops import ParamArg as ParamArg, rewrite_group as rewrite_group
else:
  import os
  from tinygrad.helpers import ContextVar
  from tinygrad.uop.ops import track_rewrites as rewrite_group  # noqa: F401 - its name until 0.14

  class ParamArg:  # until 0.14 a PARAM's arg is its slot (an int); nothing is an instance of this
    slot: int
    device: Any

  NUM_CPU_THREADS = ContextVar("NUM_CPU_THREADS", os.cpu_count() or 1)  # (0.14's setting: BEAM's workers; older ones used PARALLEL)

  def to_program_key(ast: UOp, renderer: Any) -> tuple:
    """The key tinygrad's to_program caches a program under, as 0.13's to_program computes it inline (on 0.12, the explorer's own
    to_program below: the settings codegen reads, where 0.12 has them)."""
    import tinygrad.helpers as h
    names = ("NOOPT", "EMULATED_DTYPES", "NOLOCALS", "USE_TC", "IMAGE", "DISABLE_FAST_IDIV", "TRANSCENDENTAL", "ALLOW_TF32")
    if not at_least(0, 13): return (ast.key, type(renderer), renderer.device, getattr(renderer, "arch", None),
                                    *[getattr(h, n).value for n in (*names, "BEAM", "DEVECTORIZE") if hasattr(h, n)])
    return (ast.key, type(renderer), renderer.target, *[getattr(h, n).value for n in names])

if TYPE_CHECKING or at_least(0, 13):
  from tinygrad.codegen import do_to_program as do_to_program, to_program as to_program, to_program_cache as to_program_cache
  from tinygrad.dtype import ConstFloat as ConstFloat
  from tinygrad.helpers import Target as Target
  from tinygrad.renderer.llvmir import CPULLVMRenderer as CPULLVMRenderer
  from tinygrad.uop.ops import CallInfo as CallInfo, ProgramInfo as ProgramInfo
else:  # tinygrad 0.12: get_program returned a ProgramSpec, lowered kernels were cached as runners (engine.realize.method_cache)
  from dataclasses import dataclass
  from tinygrad.renderer.llvmir import LLVMRenderer as CPULLVMRenderer  # noqa: F401 - 0.12's CPU LLVM renderer

  @dataclass(frozen=True)
  class Target:  # 0.12 has none: a renderer knows its device (a class attribute) and, for CUDA and PTX, its arch
    device: str = ""
    renderer: str = ""
    arch: str = ""

  ConstFloat = float  # 0.12 keeps a float CONST's value a plain float

  class CallInfo:  # 0.12 has no CALL op and no PROGRAM arg: nothing is an instance of these
    pass

  class ProgramInfo:
    pass


  def do_to_program(ast: UOp, renderer: Any) -> UOp:
    """0.12's get_program without its ProgramSpec: the PROGRAM(sink, DEVICE, LINEAR, SOURCE[, BINARY]) it lowers the kernel to, in a
    rewrite group of its own as get_program's."""
    from tinygrad.codegen import full_rewrite_to_sink, pm_to_program
    from tinygrad.helpers import TracingKey
    from tinygrad.uop.ops import graph_rewrite, track_rewrites
    @track_rewrites(name=lambda ast, renderer, ret, **_: TracingKey(ret.src[0].arg.name, (ret.src[0].arg.function_name, ast), ret=renderer))
    def lowered(ast: UOp, renderer: Any) -> UOp:
      ast = named(ast)
      prg = UOp(Ops.PROGRAM, src=(full_rewrite_to_sink(ast, renderer, optimize=ast.tag is None), UOp(Ops.DEVICE, arg=renderer.device)))
      return graph_rewrite(prg, pm_to_program, ctx=renderer, name="linearize/render")
    return lowered(ast, renderer)

  to_program_cache: dict[tuple, UOp] = {}

  def to_program(ast: UOp, renderer: Any) -> UOp:
    if (prg := to_program_cache.get(key := to_program_key(ast, renderer))) is None: to_program_cache[key] = prg = do_to_program(ast, renderer)
    return prg

def named(ast: UOp) -> UOp:
  """A kernel's SINK as codegen takes it: 0.12 scheduled it with no arg, and its get_program named it (KernelInfo()) first."""
  if at_least(0, 13) or ast.op is not Ops.SINK or ast.arg is not None: return ast
  from tinygrad.uop.ops import KernelInfo
  return ast.replace(arg=KernelInfo())

def runs(ast: UOp, renderer: Any, prg: UOp) -> None:
  """Make the schedule run this PROGRAM for ast, the one codegen recorded: 0.13 and 0.14 run what to_program cached under its key; 0.12
  lowered an ExecItem through get_runner, which looks in engine.realize.method_cache under the ExecItem's AST (and compiles again,
  naming the kernel anew: r_..n1, where none is there), so a CompiledRunner of it goes there under both of its keys."""
  if at_least(0, 13):
    to_program_cache[to_program_key(ast, renderer)] = prg
    return
  from dataclasses import replace
  from tinygrad import Device
  # 0.12's modules, typed loosely (the type checker reads the newest tinygrad, where these names are gone)
  realize: Any = importlib.import_module("tinygrad.engine.realize")
  helpers: Any = importlib.import_module("tinygrad.helpers")
  spec: Any = importlib.import_module("tinygrad.renderer")
  device = renderer.device
  runner = realize.CompiledRunner(replace(spec.ProgramSpec.from_uop(prg), device=device))
  context, comp = (helpers.BEAM.value, helpers.NOOPT.value, helpers.DEVECTORIZE.value), type(Device[device].compiler)
  realize.method_cache[(device, comp, ast.key, context, False)] = realize.method_cache[(device.split(":")[0], comp, ast.key, context, True)] = runner

# ops an older tinygrad names otherwise: a kernel's buffer argument (0.12: DEFINE_GLOBAL, its arg the slot) and rangeify's bufferize
PARAM = Ops["PARAM"] if "PARAM" in Ops.__members__ else Ops["DEFINE_GLOBAL"]
STAGE = Ops["STAGE"] if "STAGE" in Ops.__members__ else Ops["BUFFERIZE"]
CALL = Ops.__members__.get("CALL")  # a kernel (or function) called on its arguments: none before 0.13, whose schedule was ExecItems
CALLS = frozenset(Ops[n] for n in ("CALL", "FUNCTION") if n in Ops.__members__)

def param_slot(u: UOp) -> int | None:
  """A PARAM's argument slot (0.14: its ParamArg's; before: its arg)."""
  if u.op is not PARAM: return None
  if at_least(0, 14): return u.arg.slot if isinstance(u.arg, ParamArg) else None
  return u.arg if isinstance(u.arg, int) else None

def addrspace(u: UOp) -> Any:
  """Where a buffer lives (AddrSpace): 0.14's UOp says it; before, its pointer dtype does."""
  return u.addrspace if at_least(0, 14) else getattr(u.dtype, "addrspace", None)

def max_numel(u: UOp) -> int:
  """The number of elements of a buffer at its largest (0.14's max_numel; before, its max_shape's product)."""
  if at_least(0, 14): return int(u.max_numel())
  if not at_least(0, 13) and (size := getattr(u.dtype, "size", -1)) >= 0: return int(size)  # 0.12: a pointer's size (DEFINE_GLOBAL, _REG)
  from tinygrad.helpers import prod
  return int(prod(u.max_shape))

def const_text(u: UOp) -> str:
  """A CONST as print_uops lists it among a UOp's sources (0.14: its value; before: its arg)."""
  return f"{u.val}" if at_least(0, 14) else f"{u.arg}"

def constant(value: int, dtype: Any) -> UOp:
  """A constant of a dtype, as codegen's graphs hold one (0.14's UOp.cconst, a CONST cast to it; before, a CONST of that dtype)."""
  if at_least(0, 14): return UOp.cconst(value, dtype)
  older: Any = UOp  # (its const took the dtype first)
  return older.const(dtype, value)

def copied(dst: Any, src: Any) -> Any:
  """dst (an allocated Buffer) holding src's bytes: 0.14 copies on the device; before, through the host (0.12: its as_buffer)."""
  if at_least(0, 14): return dst.copy_from(src)
  dst.copyin(src.as_memoryview() if at_least(0, 13) else src.as_buffer())
  return dst

def timer(call: UOp, var_vals: dict[str, int] | None = None) -> Any:
  """A function that runs the call once under tinygrad's time_call and returns its seconds (0.14's time_call is a generator, compiled
  once; before, a function that compiles each time)."""
  from tinygrad.engine.realize import time_call
  return functools.partial(next, time_call(call, var_vals)) if at_least(0, 14) else functools.partial(time_call, call, var_vals)

# a dtype in a rewrite blob (explorer.tracing.tg.rewritelog): 0.14's is four scalars (priority, bits, name, format); before, a dtype is
# a dataclass of more fields (a vector's count and scalar, a pointer's base, address space and size), its own class among these
FLAT_DTYPES = at_least(0, 14)

def dtype_classes() -> dict[str, type]:
  import tinygrad.dtype as d
  return {name: getattr(d, name) for name in ("DType", "PtrDType", "ImageDType") if hasattr(d, name)}

def const_column(values: tuple[float, ...], dtype: Any) -> Any:
  """A 1-D Tensor of constants with no buffer behind it (the explorer's "symbolic" Winograd constants): 0.14's Tensor.const of a tuple,
  a STACK of CONSTs; before, the CONSTs stacked by Tensor.stack (0.13's Tensor.const of a tuple is one vector-typed UOp, not a column)."""
  from tinygrad import Tensor
  if at_least(0, 14): return Tensor.const(values, dtype)
  if not at_least(0, 13): return Tensor.stack(*[Tensor.full((), v, dtype=dtype) for v in values])  # (0.12: a CONST expanded to ())
  older: Any = Tensor  # (its const took the dtype first)
  return Tensor.stack(*[older.const(dtype, v) for v in values])

def program(sink: UOp, renderer: Any) -> UOp:
  """The PROGRAM do_to_program makes of a kernel's final sink, before linearizing: 0.14's holds the sink alone and its ProgramInfo knows
  the target; before, a DEVICE beside the sink."""
  if not at_least(0, 13): return UOp(Ops.PROGRAM, src=(sink, UOp(Ops["DEVICE"], arg=renderer.device)))  # (0.12's has no arg)
  from tinygrad.uop.ops import ProgramInfo
  if at_least(0, 14): return UOp(Ops.PROGRAM, src=(sink,), arg=ProgramInfo.from_sink(sink, renderer.target))
  older: Any = ProgramInfo  # (its from_sink took the sink alone)
  return UOp(Ops.PROGRAM, src=(sink, UOp(Ops["DEVICE"], arg=renderer.target.device)), arg=older.from_sink(sink))  # (0.14 has no DEVICE op)

def linearized(lin: str) -> Any:
  """The pattern of a linearized PROGRAM, its LINEAR named `lin` (0.14: PROGRAM(sink, LINEAR); before, a DEVICE between them)."""
  from tinygrad.uop.ops import UPat
  if at_least(0, 14): return UPat(Ops.PROGRAM, src=(UPat(Ops.SINK), UPat(Ops.LINEAR, name=lin)), name="prg")
  return UPat(Ops.PROGRAM, src=(UPat(Ops.SINK), UPat(Ops["DEVICE"]), UPat(Ops.LINEAR, name=lin)), name="prg")

# Renderer.pre_matcher, the codegen notes' hook (a PatternMatcher full_rewrite_to_sink runs as a pass named "pre_matcher", after the
# index dtypes are lowered): in tinygrad 0.11 to 0.13, gone in 0.14
PRE_MATCHER = not at_least(0, 14)

def unlinearized() -> Any:
  """The pattern of a PROGRAM not linearized yet (its sink named `sink`), as `program` makes it."""
  from tinygrad.uop.ops import UPat
  if at_least(0, 14): return UPat(Ops.PROGRAM, src=(UPat(Ops.SINK, name="sink"),), name="prg")
  return UPat(Ops.PROGRAM, src=(UPat(Ops.SINK, name="sink"), UPat(Ops["DEVICE"])), name="prg")

def dev_set() -> bool:
  """The user named a device (DEV=...: tinygrad's rule, DEV wins); 0.12 also read a bare CPU=1, CUDA=1 ..."""
  if at_least(0, 13):
    from tinygrad.helpers import DEV
    return bool(DEV.device)
  import os
  from tinygrad import Device
  return bool(os.environ.get("DEV")) or any(os.environ.get(d) == "1" for d in Device._devices)

def launch(prg: UOp) -> Any:
  """A compiled PROGRAM's name, global_size, local_size and estimates (tinygrad's Estimates: FLOPs, loads, bytes): 0.13 and 0.14 keep
  them in its ProgramInfo and its sink's KernelInfo; 0.12 made them into a ProgramSpec (ProgramSpec.from_uop)."""
  from types import SimpleNamespace
  if at_least(0, 13):
    return SimpleNamespace(name=prg.arg.name, global_size=prg.arg.global_size, local_size=prg.arg.local_size, estimates=prg.src[0].arg.estimates)
  renderer: Any = importlib.import_module("tinygrad.renderer")  # (0.12's; typed loosely, as above)
  return renderer.ProgramSpec.from_uop(prg)

def onchip(u: UOp, space: Any) -> bool:
  """Whether u is a buffer kept on chip in that address space (0.14: a BUFFER; before, 0.13's too; 0.12: DEFINE_REG, DEFINE_LOCAL)."""
  if u.op is Ops.BUFFER: return addrspace(u) is space
  return u.op.name in ("DEFINE_REG", "DEFINE_LOCAL") and addrspace(u) is space
