"""Trace overhead: a full cold trace (capture + render two targets, no timing) against the bare tinygrad pipeline for the same
program (schedule + host codegen), both cold in fresh processes, measured side by side in one run. Target: ratio <= 1.3.

Also printed: the same bare pipeline plus rendering the same two targets, i.e. the work a trace cannot avoid, so the cost of
tracking itself is visible apart from the cost of the extra renders.
"""
from __future__ import annotations
import argparse, multiprocessing as mp, os, statistics, time

def _bare(spec: dict, variant: dict, targets: tuple[str, ...], q: mp.Queue) -> None:
  os.environ["VIZ"] = "0"  # before tinygrad is imported: no rewrite tracking, as a plain realize
  os.environ["CCACHE"] = "0"
  from explorer.capture import adapter as tg
  from explorer.capture.algorithms import build_conv
  from explorer.spec import ConvSpec, Variant
  from tinygrad import Tensor
  s, v = ConvSpec(**spec), Variant.from_dict(variant)
  x, w = Tensor.randn(*s.input_shape).realize(), Tensor.randn(*s.weight_shape).realize()
  st = time.perf_counter()
  with tg.opt_context(v.opt):
    linear = tg.schedule(build_conv(x, w, s, v))
    kernels = [c.ast for c in tg.calls(linear) if c.kind == "kernel"]
    for ast in kernels: tg.codegen_host(ast, tg.host_renderer(tg.default_device()))
    host = time.perf_counter() - st
    for t in targets:
      for ast in kernels: tg.codegen_deviceless(ast, tg.render_target(t, v.arch(t)))
  q.put((host, time.perf_counter() - st))

def _traced(spec: dict, variant: dict, q: mp.Queue) -> None:
  from explorer.spec import ConvSpec, Variant
  from explorer.capture.trace import capture
  st = time.perf_counter()
  trace, _ = capture(ConvSpec(**spec), Variant.from_dict(variant))
  assert trace["status"] == "ok", trace["failures"]
  q.put(time.perf_counter() - st)

def in_fresh_process(fn, *args):
  ctx = mp.get_context("spawn")
  q = ctx.Queue()
  p = ctx.Process(target=fn, args=(*args, q))
  p.start()
  ret = q.get(timeout=1800)
  p.join()
  return ret

def main() -> None:
  from explorer.spec import PRESETS, Variant
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--presets", default="small,wino8,medium")
  ap.add_argument("--rounds", type=int, default=3)
  a = ap.parse_args()
  targets = ("cuda", "metal")
  print("| preset | algo | bare schedule+codegen s | bare + 2 renders s | full trace s | trace / bare | trace / (bare + renders) |")
  print("|---|---|---|---|---|---|---|")
  for name in a.presets.split(","):
    for algo in ("direct", "winograd"):
      v = Variant(algo=algo, targets=targets, time=False).to_dict()
      bare, bare_r, full = [], [], []
      for _ in range(a.rounds):  # interleaved, so drift on a shared machine hits both alike
        h, hr = in_fresh_process(_bare, PRESETS[name].to_dict(), v, targets)
        bare.append(h); bare_r.append(hr)
        full.append(in_fresh_process(_traced, PRESETS[name].to_dict(), v))
      b, br, f = statistics.median(bare), statistics.median(bare_r), statistics.median(full)
      print(f"| {name} | {algo} | {b:.2f} | {br:.2f} | {f:.2f} | {f/b:.2f} | {f/br:.2f} |", flush=True)

if __name__ == "__main__": main()
