"""Devices and renderers: the host's devices (best first, by name), and each target's renderer built for an arch without its device."""
from __future__ import annotations
import contextlib
import ctypes
import functools
import glob
import pathlib
import platform
import re
import subprocess
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NamedTuple
from tinygrad import Device
from tinygrad.codegen.opt import tc
from tinygrad.device import Compiler
from tinygrad.renderer import Renderer
from tinygrad.renderer.cstyle import ClangRenderer, CUDARenderer, MetalRenderer, OpenCLRenderer
from tinygrad.renderer.ptx import PTXRenderer
from tinygrad.renderer.wgsl import WGSLRenderer
from tinygrad.uop.ops import UOp
from explorer.spec import COMPUTE_DEVICES
from explorer.tracing.tg.compat import CPULLVMRenderer, Target, at_least, dev_set

# ***** devices and renderers *****

def default_device() -> str: return best_device()  # defined below, with the host's devices

def host_renderer(device: str) -> Renderer: return Device[device].renderer

def _deviceless(cls: type[Renderer], target: Target, **attrs: Any) -> Renderer:
  # render for a device this machine lacks: skip the class __init__ (it loads the device's compiler library) and set what it would
  r = cls.__new__(cls)
  if at_least(0, 13): Renderer.__init__(r, target)
  else:  # 0.12's Renderer has no Target: its device (a class attribute, per instance here), CUDA's and PTX's arch
    older: Any = r
    older.target, older.device = target, target.device
    if cls in (CUDARenderer, PTXRenderer): older.__init__(target.arch)  # (they set their tensor cores for the arch; no GPU touched)
  for k, v in attrs.items(): setattr(r, k, v)
  r.compiler = Compiler()  # tinygrad's base Compiler returns the source as the "binary": codegen stops at rendering
  return r

def _cuda_tensor_cores(arch: str) -> dict[str, Any]: return {"tensor_cores": tc.get_cuda(arch)} if at_least(0, 13) else {}

def _ptx_tensor_cores(arch: str) -> dict[str, Any]:
  return {"tensor_cores": PTXRenderer.tc_sm80 if int(arch[3:]) >= 80 else []} if at_least(0, 13) else {}

def _metal_tensor_cores(arch: str) -> list[Any]:  # as MetalRenderer.__init__: Apple7 (M1) and later
  return tc.metal if arch.startswith("Apple") and arch[5:].isdigit() and int(arch[5:]) >= 7 else []

class Renderable(NamedTuple):
  """A target's renderer as its device would configure it for an arch: tinygrad's class, the Target's device and renderer names, and
  the attributes the device's __init__ would set for the arch (its tensor cores)."""
  cls: type[Renderer]
  device: str
  renderer: str
  attrs: Callable[[str], dict[str, Any]] = lambda arch: {}

# each target's renderer (keys: explorer.targets.TARGETS). CUDA keeps device "CUDA" in its Target: tinygrad's TF32 tensor-core rule checks it.
RENDER_TARGETS = {
  "cuda": Renderable(CUDARenderer, "CUDA", "CUDA", _cuda_tensor_cores),
  "metal": Renderable(MetalRenderer, "METAL", "METAL", lambda arch: {"tensor_cores": _metal_tensor_cores(arch)}),
  "opencl": Renderable(OpenCLRenderer, "CL", "CL"),
  "clang": Renderable(ClangRenderer, "CPU", "CLANG"),
  "llvm": Renderable(CPULLVMRenderer, "CPU", "LLVM"),
  "ptx": Renderable(PTXRenderer, "CUDA", "PTX", _ptx_tensor_cores),
  "wgsl": Renderable(WGSLRenderer, "WEBGPU", "WGSL"),
}
TARGET_OF_RENDERER = {r.cls: name for name, r in RENDER_TARGETS.items()}

def render_target(name: str, arch: str) -> Renderer:
  r = RENDER_TARGETS[name]
  return _deviceless(r.cls, Target(r.device, r.renderer, arch), **r.attrs(arch))

def target_name(renderer: Renderer) -> str:
  """The explorer's name for the target a renderer renders (the host's own renderer included): clang, cuda, ... (a subclass by its
  base's: tinygrad 0.13's CPU device renders with ClangJITRenderer, a ClangRenderer)."""
  exact = next((n for cls, n in TARGET_OF_RENDERER.items() if type(renderer) is cls), None)
  by_base = next((n for cls, n in TARGET_OF_RENDERER.items() if isinstance(renderer, cls)), None)
  return exact or by_base or type(renderer).__name__.removesuffix("Renderer").lower()

def _target(renderer: Renderer) -> Target:
  """What a renderer renders for (0.12's has no Target: its device, and the arch CUDA's and PTX's keep)."""
  if (t := getattr(renderer, "target", None)) is not None: return t
  older: Any = renderer
  return Target(older.device, type(renderer).__name__.removesuffix("Renderer").upper(), getattr(renderer, "arch", None) or "")

def renderer_arch(renderer: Renderer) -> str: return _target(renderer).arch

def renderer_device(renderer: Renderer) -> str: return _target(renderer).device

def without_beam(ast: UOp) -> tuple[UOp, int]:
  """The kernel with its BEAM width cleared (a deviceless target cannot time candidates: heuristic opts instead) and that width."""
  beam = getattr(ast.arg, "beam", 0) or 0
  return (ast.replace(arg=replace(ast.arg, beam=0)) if beam else ast), beam

def fill_ptx(src: str, arch: str) -> str:
  """The PTX tinygrad's PTXCompiler hands to ptxas: its VERSION and TARGET placeholders filled (runtime/support/compiler_cuda.py)."""
  from tinygrad.runtime.support.compiler_cuda import PTXCompiler
  return PTXCompiler(arch).compile(src).decode()

# ***** devices on this host (GPU hosts) *****

# tinygrad's own order (tinygrad.device.ALL_DEVICES) kept to the explorer's backends: GPUs, then OpenCL, then the CPU.
# The same order keeps best_device() equal to Device.DEFAULT, which tinygrad uses for anything made without a device.
DEVICE_PREFERENCE = COMPUTE_DEVICES

def _opens(device: str) -> bool: return open_error(device) is None

@functools.cache
def open_error(device: str) -> str | None:
  """Why tinygrad could not open `device` here (its error, one line), None where it opens. Some VMs make tinygrad's NV device fail
  with a bare StopIteration while CUDA opens: the devices list says so rather than leaving NV out silently."""
  try: return None if Device[device].device else f"{device} opened without a name"
  except Exception as e:
    text = str(e).splitlines()[0] if str(e) else "(no message: tinygrad found no interface it could open)"
    return f"{type(e).__name__}: {text}"[:300]

def unopened_devices() -> list[tuple[str, str]]:
  """The compute devices this host does not open, each with tinygrad's reason."""
  return [(d, why) for d in DEVICE_PREFERENCE if (why := open_error(d)) is not None]

def available_devices() -> list[str]:
  """The devices of DEVICE_PREFERENCE this host can open, best first. Opening a GPU creates a context on it: call this in a worker."""
  return [d for d in DEVICE_PREFERENCE if _opens(d)]

@functools.cache
def best_device() -> str:
  """DEV, when set, wins (tinygrad's rule); else the first device of DEVICE_PREFERENCE that opens."""
  if dev_set(): return Device.DEFAULT
  return next((d for d in DEVICE_PREFERENCE if _opens(d)), Device.DEFAULT)

def _cuda_name(dev: Any) -> str:
  from tinygrad.runtime.autogen import cuda
  cuda.cuDeviceGetName(buf := ctypes.create_string_buffer(256), 256, dev.cu_device)
  return buf.value.decode()

def _nvidia_proc_model() -> str:
  for f in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):
    if (m := re.search(r"^Model:\s*(.+?)\s*$", pathlib.Path(f).read_text(), re.M)): return m.group(1)
  raise LookupError("no /proc/driver/nvidia/gpus entry")

def _metal_name(dev: Any) -> str:
  from tinygrad.runtime.ops_metal import from_ns_str
  return from_ns_str(dev.sysdevice.name())

def cpu_model() -> str:
  with contextlib.suppress(OSError):
    if (m := re.search(r"^model name\s*:\s*(.+?)\s*$", pathlib.Path("/proc/cpuinfo").read_text(), re.M)): return m.group(1)
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
