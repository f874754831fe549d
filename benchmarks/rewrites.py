"""What each custom codegen rewrite does to register pressure: every kernel of each case traced plain and with the rewrite, side by
side in one run. Peak live values are the explorer's liveness over the linearized UOps (a vector once per lane); registers and spill
bytes are ptxas -v on the CUDA source, where ptxas is on this machine. The host's run checks every rewritten program's output.

  python benchmarks/rewrites.py [--presets wino8,wino16,small] [--rewrite sink-loads] [--cuda-arch sm_90]
"""
from __future__ import annotations
import argparse
import dataclasses
import sys

CASES = {"direct": {"algo": "direct"}, "winograd": {"algo": "winograd"},
         "wino fused": {"algo": "winograd", "wino_impl": "explorer", "staging": "fused"}}

def _facts(rec: dict) -> tuple[int, str, str]:
  c = rec.get("compile") or {}
  regs = "-" if c.get("registers") is None else str(c["registers"])
  spills = "-" if c.get("spill_store_bytes") is None else f"{c['spill_store_bytes']}/{c['spill_load_bytes']}"
  return rec["pressure"]["max_live"], regs, spills

def main() -> int:
  from explorer.spec import CUDA_ARCHES, PRESETS, Variant
  from explorer.text import table
  from explorer.tracing.pipeline.run import run_trace
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--presets", default="wino8,wino16,small")
  ap.add_argument("--rewrite", default="sink-loads")
  ap.add_argument("--cuda-arch", choices=CUDA_ARCHES, default="sm_90")
  a = ap.parse_args()
  rows, changed = [], 0
  for preset in a.presets.split(","):
    for case, fields in CASES.items():
      base = Variant(targets=("cuda",), time=False, cuda_arch=a.cuda_arch, **fields)
      plain, rewritten = (run_trace(PRESETS[preset], v).trace for v in (base, dataclasses.replace(base, rewrites=(a.rewrite,))))
      for t in (plain, rewritten): assert t["status"] == "ok" and t["error"]["max_abs"] < 1e-3, (preset, case, t["failures"], t["error"])
      for ka, kb in zip(plain["kernels"], rewritten["kernels"], strict=False):
        (pa, ra, sa), (pb, rb, sb) = _facts(ka["targets"]["cuda"]), _facts(kb["targets"]["cuda"])
        changed += pa != pb
        rows.append((preset, case, ka["role"], ka["name"], f"{pa} -> {pb}", f"{pb - pa:+d}", f"{ra} -> {rb}", f"{sa} -> {sb}"))
      print(f"  {preset} {case} done", file=sys.stderr, flush=True)
  print(f"{a.rewrite} on CUDA {a.cuda_arch}: peak live values and ptxas registers, plain -> rewritten (spills: bytes stored/loaded)")
  print(table(("preset", "case", "role", "kernel", "peak live", "change", "registers", "spills"), rows, text_columns=4))
  print(f"{changed} of {len(rows)} kernels changed their peak")
  return 0

if __name__ == "__main__": sys.exit(main())
