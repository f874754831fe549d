"""Compile facts without the device: each target's source compiled by a real compiler of this machine, when one is here.

  cuda    NVRTC (NVIDIA's wheel: pip install 'kernel-explorer[cuda]') or nvcc on PATH, with `-Xptxas -v` and line information:
          registers, spills, shared memory, stack; the PTX it made, SASS where cuobjdump is, and where nvdisasm is, each SASS
          instruction with its source line and the registers live there (explorer.tracing.compilers.nvdisasm)
  ptx     ptxas on PATH (or the wheel's), on the PTX tinygrad hands it (placeholders filled): the same facts, and SASS (its lines
          number the PTX)
  opencl  clang's OpenCL C front end; C and LLVM IR: clang, as tinygrad's CPU compiler calls it, with the assembly it makes
  metal   never: Apple's compiler runs only on macOS; wgsl: no compiler here (a WebGPU implementation validates it)

Every result says which compiler ran, or which is missing and how to install it; a compiler that fails, crashes or hangs (each
call has a time limit) is a per-kernel result with its message, never a failed trace. CUDA facts also give the theoretical
occupancy for the kernel's block size on its arch (NVIDIA's occupancy calculator rules, cuda_occupancy.h)."""
from __future__ import annotations
import functools
import importlib.util
import math
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from explorer import targets
from explorer.tracing.compilers import compile_cache, nvdisasm

TIMEOUT_S = 60.0
MAX_DISASM_LINES = 4000
CLANG_C_FLAGS = ["-O2", "-fPIC", "-ffreestanding", "-fno-math-errno", "-nostdlib", "-fno-ident", "--target=x86_64-none-unknown-elf", "-march=native"]
Facts = dict[str, Any]
Nvrtc = Callable[[str, str], Facts]  # NVRTC's compile of (source, arch), where its library is here (explorer.tracing.tg.nvrtc)

# ***** occupancy: resident warps over the SM's maximum, from registers, shared memory and the block size *****

# max threads per SM, max resident blocks per SM, shared memory per SM (CUDA C Programming Guide, "Technical Specifications per Compute
# Capability"); 65536 registers per SM, 255 per thread, allocated per warp in units of 256 on every one of them
SM = {"sm_75": (1024, 16, 65536), "sm_80": (2048, 32, 167936), "sm_86": (1536, 16, 102400), "sm_89": (1536, 24, 102400),
      "sm_90": (2048, 32, 233472)}

def occupancy(arch: str, registers: int, block: int, shared_bytes: int = 0) -> Facts:
  """Theoretical occupancy of a block of `block` threads. Agrees with cudaOccMaxActiveBlocksPerMultiprocessor (checked on 1620 cases)."""
  threads_sm, blocks_sm, smem_sm = SM[arch]
  def up(x: int, u: int) -> int: return -(-x // u) * u
  warps_block, max_warps = -(-block // 32), threads_sm // 32
  limits = {"blocks": blocks_sm, "warps": max_warps // warps_block if block <= 1024 else 0}
  regs_warp = up(max(registers, 1) * 32, 256)
  limits["registers"] = 0 if registers > 255 or regs_warp * up(warps_block, 4) > 65536 else (65536 // 4 // regs_warp) * 4 // warps_block
  limits["shared"] = 0 if shared_bytes > 49152 else smem_sm // up(shared_bytes + 1024, 128)  # 1 KB reserved per block
  blocks = min(limits.values())
  return {"occupancy": blocks * warps_block / max_warps, "warps_per_sm": blocks * warps_block, "max_warps_per_sm": max_warps,
          "blocks_per_sm": blocks, "block_threads": block, "limited_by": sorted(k for k, v in limits.items() if v == blocks)}

# ***** the report ptxas writes (through nvcc, NVRTC or itself) *****

PTXAS_FIELDS = {"registers": r"(?i)used (\d+) registers", "barriers": r"used (\d+) barriers", "stack_bytes": r"(\d+) bytes stack frame",
                "spill_store_bytes": r"(\d+) bytes spill stores", "spill_load_bytes": r"(\d+) bytes spill loads", "shared_bytes": r"(\d+) bytes smem"}

def parse_ptxas(log: str) -> Facts:
  """The facts of ptxas -v; absent fields are 0 (ptxas omits zero shared memory), registers None when not reported."""
  return {k: int(m.group(1)) if (m := re.search(p, log)) else (None if k == "registers" else 0) for k, p in PTXAS_FIELDS.items()}

# ***** tools *****

def nvidia_file(pattern: str) -> pathlib.Path | None:
  """A file of NVIDIA's pip wheels (the `nvidia` namespace package), e.g. "*/lib/libnvrtc.so.*"."""
  spec = importlib.util.find_spec("nvidia")
  for root in (spec.submodule_search_locations or []) if spec is not None else []:
    for p in sorted(pathlib.Path(root).glob(pattern)): return p
  return None

def nvrtc_library() -> pathlib.Path | None: return nvidia_file("*/lib/libnvrtc.so.*[0-9]")

def tool(name: str) -> str | None:
  """A compiler on PATH, or in NVIDIA's wheels (ptxas, cuobjdump, nvdisasm)."""
  return shutil.which(name) or (str(p) if (p := nvidia_file(f"*/bin/{name}")) is not None else None)

@functools.cache
def version(exe: str) -> str:
  try: out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=TIMEOUT_S).stdout
  except (OSError, subprocess.TimeoutExpired): return "?"
  m = re.search(r"release (\d+\.\d+)|version (\d+[.\d]*)", out)
  return (m.group(1) or m.group(2)) if m else "?"

def _run(cmd: list[str], stdin: str | None = None) -> tuple[int, str, str]:
  try: p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S)
  except subprocess.TimeoutExpired: return -1, "", f"{pathlib.Path(cmd[0]).name} did not finish within {TIMEOUT_S:.0f}s"
  except OSError as e: return -1, "", f"{pathlib.Path(cmd[0]).name} could not run: {e}"
  return p.returncode, p.stdout, p.stderr

def _clip(text: str) -> str:
  lines = text.splitlines()
  return "\n".join(lines[:MAX_DISASM_LINES] + ([f"... {len(lines) - MAX_DISASM_LINES} more lines"] if len(lines) > MAX_DISASM_LINES else []))

def _failed(compiler: str, out: str) -> Facts:
  lines = [ln for ln in out.strip().splitlines() if ln.strip()]
  return {"ok": False, "compiler": compiler, "message": "\n".join(lines[-12:]) or "the compiler failed without a message"}

def missing(what: str, how: str) -> Facts: return {"ok": None, "compiler": None, "message": f"no {what} here: {how}"}

# ***** per target *****

def _sass(cubin: pathlib.Path) -> Facts | None:
  if (exe := tool("cuobjdump")) is None: return None
  rc, out, _ = _run([exe, "-sass", str(cubin)])
  return {"kind": "SASS (cuobjdump -sass)", "text": _clip(out)} if rc == 0 and out.strip() else None

NVDISASM_HOW = "pip install 'kernel-explorer[cuda]' (NVIDIA's nvdisasm wheel), or put the CUDA toolkit's nvdisasm on PATH"

def _with_sass(facts: Facts, cubin: pathlib.Path, source_name: str, source: str) -> Facts:
  """facts with `sass` (each instruction's line and live registers: explorer.tracing.compilers.nvdisasm), or None and `sass_note` saying why not."""
  if (exe := tool("nvdisasm")) is None: return {**facts, "sass": None, "sass_note": f"no nvdisasm here: {NVDISASM_HOW}"}
  try: return {**facts, "sass": nvdisasm.disassemble(exe, f"nvdisasm {version(exe)}", cubin, source_name, source, facts.get("registers"), _run)}
  except nvdisasm.SassUnavailable as e: return {**facts, "sass": None, "sass_note": str(e)}

def _cuda_facts(log: str, arch: str, block: int | None, compiler: str) -> Facts:
  facts = {"ok": True, "compiler": compiler, "message": "compiled", **parse_ptxas(log)}
  if facts["registers"] is not None and block: facts["occupancy"] = occupancy(arch, facts["registers"], block, facts["shared_bytes"])
  elif not block: facts["message"] += "; the block size is chosen at run time (no local size), so no occupancy"
  return facts

def compile_cuda(src: str, arch: str, block: int | None, nvrtc: Nvrtc | None = None) -> Facts:
  """CUDA C through NVRTC (when the wheel's library loaded) or nvcc: ptxas' report, occupancy, the PTX, SASS where cuobjdump is."""
  if nvrtc is not None:
    got = nvrtc(src, arch)
    if not got["ok"]: return _failed(got["compiler"], got["log"])
    with tempfile.TemporaryDirectory() as d:
      (cubin := pathlib.Path(d) / "k.cubin").write_bytes(got["cubin"])
      facts = _cuda_facts(got["log"], arch, block, got["compiler"])
      facts["disasm"] = _sass(cubin) or {"kind": "PTX (NVRTC)", "text": _clip(got["ptx"])}
      return _with_sass(facts, cubin, got.get("file") or "", "cuda")
  if (nvcc := shutil.which("nvcc")) is None:
    return missing("CUDA compiler", "pip install 'kernel-explorer[cuda]' (NVIDIA's NVRTC wheel), or put nvcc (CUDA toolkit) on PATH")
  with tempfile.TemporaryDirectory() as d:
    cu, cubin = pathlib.Path(d) / "k.cu", pathlib.Path(d) / "k.cubin"
    cu.write_text(src)
    # -keep leaves the PTX it made on the way beside the cubin: one front-end run, not a second `nvcc -ptx`
    # -lineinfo: each SASS instruction's source line (it leaves the code as it is)
    rc, _, err = _run([nvcc, f"-arch={arch}", "-cubin", "-lineinfo", "-Xptxas", "-v", "-keep", "-keep-dir", d, "-o", str(cubin), str(cu)])
    compiler = f"nvcc {version(nvcc)}"
    if rc != 0: return _failed(compiler, err)
    facts = _cuda_facts(err, arch, block, compiler)
    ptx = (pathlib.Path(d) / "k.ptx").read_text() if (pathlib.Path(d) / "k.ptx").exists() else ""
    facts["disasm"] = _sass(cubin) or ({"kind": "PTX (nvcc)", "text": _clip(ptx)} if ptx else None)
    return _with_sass(facts, cubin, cu.name, "cuda")

def compile_ptx(filled: str, arch: str, block: int | None) -> Facts:
  """The PTX tinygrad compiles (placeholders filled) through ptxas -v."""
  if (ptxas := tool("ptxas")) is None:
    return missing("ptxas", "pip install nvidia-cuda-nvcc-cu12 (it ships ptxas), or put the CUDA toolkit's ptxas on PATH")
  with tempfile.TemporaryDirectory() as d:
    ptx, cubin = pathlib.Path(d) / "k.ptx", pathlib.Path(d) / "k.cubin"
    ptx.write_text(nvdisasm.with_ptx_lines(filled))  # a .loc per line: the same code, each SASS instruction's PTX line
    rc, _, err = _run([ptxas, f"-arch={arch}", "-v", "-lineinfo", "-o", str(cubin), str(ptx)])
    compiler = f"ptxas {version(ptxas)}"
    if rc != 0: return _failed(compiler, err)
    facts = _cuda_facts(err, arch, block, compiler)
    facts["disasm"] = _sass(cubin)
    return _with_sass(facts, cubin, nvdisasm.PTX_FILE, "ptx")

def _clang(args: list[str], src: str, lang: str, asm_note: str) -> Facts:
  if (clang := shutil.which("clang")) is None: return missing("clang", "apt-get install clang")
  compiler = f"clang {version(clang)}"
  # one run: -S goes through the front end and code generation, where a source is accepted or rejected (assembling clang's own
  # output adds nothing to judge), and gives the assembly
  rc, asm, err = _run([clang, "-x", lang, *args, "-S", "-", "-o", "-"], src)
  if rc != 0: return _failed(compiler, err)
  return {"ok": True, "compiler": compiler, "message": "compiled", "disasm": {"kind": asm_note, "text": _clip(asm)}}

def compile_opencl(src: str) -> Facts:
  note = "x86-64 assembly (clang's OpenCL C front end; a GPU's ISA differs)"
  return _clang(["-cl-std=CL2.0", "-Xclang", "-finclude-default-header"], src, "cl", note)

def compile_c(src: str) -> Facts: return _clang(CLANG_C_FLAGS, src, "c", "x86-64 assembly (clang, tinygrad's CPU flags)")

def compile_llvm(src: str) -> Facts:
  facts = _clang(CLANG_C_FLAGS[:1] + CLANG_C_FLAGS[-2:], src, "ir", "x86-64 assembly (clang -x ir)")
  if facts["ok"] is False and "expected" in facts["message"]:
    facts["message"] += "\n(tinygrad's IR needs an LLVM with opaque pointers, 15 or newer; this clang is older)"
  return facts

def _clang_tools(nvrtc: bool) -> dict[str, Any]: return {"clang": compile_cache.identity(shutil.which("clang"))}

def _disassemblers() -> dict[str, Any]:
  return {"cuobjdump": compile_cache.identity(tool("cuobjdump")), "nvdisasm": compile_cache.identity(tool("nvdisasm"))}

def _cuda_tools(nvrtc: bool) -> dict[str, Any]:
  if not nvrtc: return {"nvcc": compile_cache.identity(shutil.which("nvcc")), **_disassemblers()}
  return {"nvrtc": compile_cache.identity(os.environ.get("NVRTC_PATH") or nvrtc_library()),
          "include": os.environ.get("KERNEL_EXPLORER_CUDA_INCLUDE"), **_disassemblers()}

def _ptx_tools(nvrtc: bool) -> dict[str, Any]: return {"ptxas": compile_cache.identity(tool("ptxas")), **_disassemblers()}

@dataclass(frozen=True)
class Compiler:
  """How one target's source is compiled here: run(source, arch, block threads, filled PTX, NVRTC), and the tools that decide its
  facts beside the source, each by its identity (explorer.tracing.compilers.compile_cache), given whether NVRTC compiles."""
  run: Callable[[str, str, int | None, str | None, Nvrtc | None], Facts]
  tools: Callable[[bool], dict[str, Any]]

# the targets a compiler of this machine compiles (explorer.targets names the others' reason, `no_compiler`)
COMPILE = {
  "cuda": Compiler(lambda src, arch, block, ptx, nvrtc: compile_cuda(src, arch, block, nvrtc), _cuda_tools),
  "ptx": Compiler(lambda src, arch, block, ptx, nvrtc: compile_ptx(ptx if ptx is not None else src, arch, block), _ptx_tools),
  "opencl": Compiler(lambda src, *_: compile_opencl(src), _clang_tools),
  "clang": Compiler(lambda src, *_: compile_c(src), _clang_tools),
  "llvm": Compiler(lambda src, *_: compile_llvm(src), _clang_tools),
}

def _tools(target: str, nvrtc: bool) -> dict[str, Any]:
  """What compiles `target` here, each tool by its identity: what decides its facts beside the source."""
  return c.tools(nvrtc) if (c := COMPILE.get(target)) is not None else {}

def compile_target(target: str, source: str, arch: str, block: int | None, ptx: str | None = None,
                   nvrtc: Nvrtc | None = None) -> Facts:
  """The compile facts of one kernel's source for `target` (ptx: the filled PTX for the ptx target), read from the compile cache where
  the same source was compiled by the same tools before. Never raises."""
  name = compile_cache.key(target=target, source=source, arch=arch, block=block, ptx=ptx, tools=_tools(target, nvrtc is not None))
  if (kept := compile_cache.get(name)) is not None: return kept
  compile_cache.put(name, facts := _compile(target, source, arch, block, ptx, nvrtc))
  return facts

def _compile(target: str, source: str, arch: str, block: int | None, ptx: str | None, nvrtc: Nvrtc | None) -> Facts:
  try:
    if (c := COMPILE.get(target)) is not None: return c.run(source, arch, block, ptx, nvrtc)
    if (t := targets.BY_NAME.get(target)) is not None and t.no_compiler: return {"ok": None, "compiler": None, "message": t.no_compiler}
    return missing(f"{target} compiler", "none is known to the explorer")
  except Exception as e:  # a compiler wrapper that breaks is one kernel's result, not a failed trace
    return {"ok": False, "compiler": None, "message": f"{type(e).__name__}: {e}"}

def block_threads(local_size: list[Any] | None) -> int | None:
  return math.prod(int(x) for x in local_size) if local_size and all(isinstance(x, int) for x in local_size) else None
