"""The render targets: each declared once, as one `Target`; every table of them elsewhere is derived from `ALL`.

Adding a target is a row here and its renderer in `explorer/tracing/tg/devices.py` (`RENDER_TARGETS`: tinygrad's renderer for an
arch, built without the device); a target with a compiler on this machine also names its compile function in
`explorer/tracing/compilers/toolchain.py` (`COMPILE`), and one without says why in its row (`no_compiler`). tests/test_targets.py checks
that every row has a renderer, a lexer, and exactly one of a compile function or that reason. No tinygrad, no pygments here: the
seam and the presentation resolve the names."""
from __future__ import annotations
from dataclasses import dataclass

@dataclass(frozen=True)
class Target:
  name: str          # the explorer's word for it: URLs, --target, the store
  description: str   # what it renders as (`kernel-explorer targets`, the API)
  label: str         # a tab's title
  lexer: str         # the pygments lexer class (pygments.lexers) that colours its source
  arch: str = ""     # the arch it renders for: fixed, or a Variant field (`cuda_arch`, `metal_arch`) when it names one
  no_compiler: str = ""  # why no compiler here gives it compile facts, as the kernel page says it (else: compilers.COMPILE)
  sass: bool = False     # its compile facts carry SASS with lines and live registers

  def arch_for(self, variant_arches: dict[str, str]) -> str:
    """The arch this target renders for, given the variant's arch fields by name."""
    return variant_arches.get(self.arch, self.arch)

ALL = (
  Target("cuda", "CUDA C for sm_90 (H100)", "CUDA", "CudaLexer", arch="cuda_arch", sass=True),
  Target("metal", "Metal for Apple9 (M3)", "Metal", "CppLexer", arch="metal_arch",
         no_compiler="Metal compiles only on macOS (Apple's Metal compiler); not on this machine"),
  # OpenCL's arch is the device's extension string (none: half is emulated)
  Target("opencl", "OpenCL C", "OpenCL", "CLexer"),
  Target("clang", "C for clang (x86_64)", "C (clang)", "CLexer", arch="x86_64"),
  Target("llvm", "LLVM IR (x86_64)", "LLVM IR", "LlvmLexer", arch="x86_64"),
  Target("ptx", "PTX for sm_90", "PTX", "PtxLexer", arch="cuda_arch", sass=True),
  Target("wgsl", "WGSL (WebGPU)", "WGSL", "WgslLexer",
         no_compiler="no WGSL compiler here: a WebGPU implementation validates WGSL when it builds the pipeline"),
)
BY_NAME = {t.name: t for t in ALL}
TARGETS = tuple(BY_NAME)
TARGET_DESCRIPTIONS = {t.name: t.description for t in ALL}
SASS_TARGETS = tuple(t.name for t in ALL if t.sass)  # their compile facts carry SASS with lines and live registers (or say why not)
