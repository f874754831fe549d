"""NVRTC (NVIDIA's wheel), through tinygrad's own bindings: CUDA compile facts without a GPU."""
from __future__ import annotations
import ctypes
import os
from collections.abc import Callable
from typing import Any

NVRTC_FILE = "kernel.cu"  # the name the program's source has: its SASS lines name it

def nvrtc_compiler() -> Callable[[str, str], dict[str, Any]] | None:
  """A compile function (source, arch) -> {ok, compiler, log, ptx, cubin}, when NVRTC's library loads (NVRTC_PATH set before this
  package was imported; explorer.tracing.pipeline.renders sets it from the wheel); None otherwise."""
  try:
    from tinygrad.helpers import to_char_p_p
    from tinygrad.runtime.autogen import nvrtc
    from tinygrad.runtime.support.compiler_cuda import _get_bytes, nvrtc_check
    nvrtc.nvrtcVersion(major := ctypes.c_int(), minor := ctypes.c_int())
  except Exception: return None
  name = f"NVRTC {major.value}.{minor.value}"
  include = os.environ.get("KERNEL_EXPLORER_CUDA_INCLUDE")  # the wheel's cuda_fp16.h: NVRTC does not build it in
  def compile(src: str, arch: str) -> dict[str, Any]:
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
