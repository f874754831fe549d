"""Plain tinygrad's codegen for every fidelity case of tests/test_targets.py, kept as checked-in golden data (as tinygrad's own process
replay keeps its references): what plain tinygrad 0.14 makes for each target's renderer, configured as the explorer configures it,
built in a process of its own independently of the explorer's code (the explorer's Winograd builder aside: it is the program under
test). The reference changes only with tinygrad (or that builder), so the suite reads it instead of running it again per case.

  python tests/golden/plain_codegen.py            every case, two processes at a time (what `make golden` runs)
  python tests/golden/plain_codegen.py CASE ...   these cases

Each file names the tinygrad that made it and a hash of the explorer's Winograd builder; tests/test_targets.py fails when either
differs from what is installed (regenerate), and regenerates one case each run to compare it byte for byte with the stored file."""
from __future__ import annotations
import gzip
import hashlib
import importlib.metadata
import json
import os
import pathlib
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = pathlib.Path(__file__).resolve().parent / "plain_codegen"
sys.path[:0] = [str(REPO), str(REPO / "tests")]
from support import GPU_TARGETS  # noqa: E402
from explorer.spec import PRESETS, Variant  # noqa: E402

PLAIN_CODEGEN = r"""
import json, sys
from tinygrad import Tensor
from tinygrad.codegen import do_to_program
from tinygrad.codegen.opt import tc
from tinygrad.device import Compiler
from tinygrad.helpers import Context, Target, ansistrip
from tinygrad.renderer import Renderer
from tinygrad.renderer.cstyle import CUDARenderer, MetalRenderer, OpenCLRenderer
from tinygrad.renderer.ptx import PTXRenderer
from tinygrad.renderer.wgsl import WGSLRenderer
from tinygrad.uop.ops import Ops
spec, variant = json.loads(sys.argv[1]), json.loads(sys.argv[2])
wino, opt, arch = int(variant["algo"] == "winograd"), variant["opt"], variant["cuda_arch"]
def deviceless(cls, target, **attrs):  # the renderer as its device would configure it, without the device's compiler library
  r = cls.__new__(cls); Renderer.__init__(r, target)
  for k, v in attrs.items(): setattr(r, k, v)
  r.compiler = Compiler(); return r
renderers = {"cuda": deviceless(CUDARenderer, Target("CUDA", "CUDA", arch), tensor_cores=tc.get_cuda(arch)),
             "ptx": deviceless(PTXRenderer, Target("CUDA", "PTX", arch), tensor_cores=PTXRenderer.tc_sm80),
             "metal": deviceless(MetalRenderer, Target("METAL", "METAL", "Apple9"), tensor_cores=tc.metal),
             "opencl": deviceless(OpenCLRenderer, Target("CL", "CL", "")), "wgsl": deviceless(WGSLRenderer, Target("WEBGPU", "WGSL", ""))}
x = Tensor.empty(spec["batch"], spec["cin"], spec["height"], spec["width"])
w = Tensor.empty(spec["cout"], spec["cin"] // spec["groups"], spec["kernel"], spec["kernel"])
if variant["wino_impl"] == "explorer":  # the explorer's own Winograd is the program under test; its codegen below is plain tinygrad's
  from explorer.tracing.algorithms import build_conv
  from explorer.spec import ConvSpec, Variant
  out = build_conv(x, w, ConvSpec(**spec), Variant.from_dict(variant))
else:
  with Context(WINO=wino): out = x.conv2d(w, padding=spec["kernel"] // 2, groups=spec["groups"])
asts = [c.src[0] for c in out.schedule_linear().src if c.src[0].op is Ops.SINK]
got = {}
with Context(NOOPT=int(opt == "none")):
  for name, r in renderers.items():
    progs = [do_to_program(a, r) for a in asts]
    got[name] = [[ansistrip(p.arg.name), list(p.arg.global_size), None if p.arg.local_size is None else list(p.arg.local_size),
                  next(s.arg for s in p.src if s.op is Ops.SOURCE)] for p in progs]
print(json.dumps(got))
"""

def plain_codegen(spec: dict, variant: dict, device: str) -> dict:
  """Plain tinygrad (no tracking) on the trace's device (DEV: it opens that one instead of trying every backend for it)."""
  env = {**{k: v for k, v in os.environ.items() if k != "TRACK_MATCH_STATS"}, "VIZ": "0", "DEV": device}
  out = subprocess.run([sys.executable, "-c", PLAIN_CODEGEN, json.dumps(spec), json.dumps(variant)], capture_output=True, text=True,
                       timeout=600, env=env, cwd=REPO)
  assert out.returncode == 0, out.stderr[-2000:]
  return json.loads(out.stdout.strip().splitlines()[-1])

# every preset's direct conv, tinygrad's builtin Winograd on every 3x3 preset, the explorer's staged and fused Winograd, NOOPT, sm_80
GPU = {"targets": GPU_TARGETS, "time": False}
CASE_VARIANTS = {**{f"{p} direct": dict(GPU) for p in PRESETS},
                 **{f"{p} builtin": {"algo": "winograd", **GPU} for p, s in PRESETS.items() if s.kernel == 3},
                 **{f"{p} explorer {st}": {"algo": "winograd", "wino_impl": "explorer", "staging": st, **GPU}
                    for p in ("wino8", "medium") for st in ("staged", "fused")},
                 "wino8 direct NOOPT": {"opt": "none", **GPU},
                 "medium direct sm_80": {"targets": ("cuda", "ptx"), "time": False, "cuda_arch": "sm_80"}}
CASES = {case: (case.split()[0], Variant(**v)) for case, v in CASE_VARIANTS.items()}
DEVICE = "CPU"  # where the golden data was made: a trace on another device compares with plain tinygrad run there and then

def inputs(case: str) -> tuple[dict, dict]:
  """The case's spec and variant as its trace records them (trace["spec"], trace["variant"]): what plain codegen is given."""
  preset, variant = CASES[case]
  return PRESETS[preset].to_dict(), variant.to_dict()

def builder_hash() -> str:
  """The explorer's Winograd builder (explorer/tracing/algorithms/), which the explorer cases' reference runs: its sources' hash."""
  h = hashlib.sha256()
  for p in sorted((REPO / "explorer" / "tracing" / "algorithms").glob("*.py")): h.update(p.name.encode() + b"\0" + p.read_bytes())
  return h.hexdigest()[:16]

def path(case: str) -> pathlib.Path: return GOLDEN / (case.replace(" ", "_") + ".json.gz")

def encode(record: dict[str, Any]) -> bytes:
  """Byte-stable: sorted keys, no whitespace, gzip without a timestamp."""
  return gzip.compress(json.dumps(record, sort_keys=True, separators=(",", ":")).encode(), compresslevel=9, mtime=0)

def make(case: str) -> bytes:
  spec, variant = inputs(case)
  return encode({"case": case, "tinygrad": importlib.metadata.version("tinygrad"), "builder": builder_hash(), "device": DEVICE,
                 "spec": spec, "variant": variant, "codegen": plain_codegen(spec, variant, DEVICE)})

def read(case: str) -> dict[str, Any]: return json.loads(gzip.decompress(path(case).read_bytes()))

def main(argv: list[str]) -> int:
  cases = argv or list(CASES)
  if unknown := [c for c in cases if c not in CASES]:
    print(f"unknown case(s) {unknown}; known: {', '.join(CASES)}", file=sys.stderr)
    return 2
  GOLDEN.mkdir(exist_ok=True)
  def one(case: str) -> str:
    path(case).write_bytes(make(case))
    return f"{case}: {path(case).stat().st_size:,} bytes"
  with ThreadPoolExecutor(2) as pool:
    for line in pool.map(one, cases): print(line)
  return 0

if __name__ == "__main__": sys.exit(main(sys.argv[1:]))
