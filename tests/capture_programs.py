"""Programs the capture tests run in fresh processes (the explorer imported before tinygrad, as a user's script does)."""
from __future__ import annotations
import json, sys

def conv_bias_relu(x, w, b): return x.conv2d(w, b, padding=1).relu()

def inputs(seed: int = 0):
  import numpy as np
  from tinygrad import Tensor
  rng = np.random.default_rng(seed)
  return [Tensor(rng.standard_normal(s).astype(np.float32)).realize() for s in ((1, 4, 16, 16), (8, 4, 3, 3), (8,))]

def tinygrads_own() -> dict:
  """The same program through plain tinygrad (no tracking, no explorer): the programs compile_linear compiles, by name and source."""
  from tinygrad import Tensor
  from tinygrad.engine.realize import compile_linear
  from tinygrad.uop.ops import Ops
  from tinygrad.helpers import ansistrip
  x, w, b = inputs()
  compiled = compile_linear(Tensor.schedule_linear(conv_bias_relu(x, w, b)))
  prgs = [c.src[0] for c in compiled.src if c.src[0].op is Ops.PROGRAM]
  return {"names": [ansistrip(p.arg.name) for p in prgs], "sources": [next(s.arg for s in p.src if s.op is Ops.SOURCE) for p in prgs]}

def captured(db: str) -> dict:
  from explorer import capture  # before tinygrad: it turns tinygrad's rewrite tracking on
  import numpy as np
  x, w, b = inputs()
  ref = np.maximum(0, conv_ref(x.numpy(), w.numpy(), b.numpy()))
  with capture(name="conv+bias+relu", targets=("cuda", "metal"), time=True, repeats=3, reference=[ref], rel_tolerance=1e-4) as t:
    y = conv_bias_relu(x, w, b)
    y.realize()
  return {"id": t.store(db), "names": [k["name"] for k in t.kernels], "sources": [k["sources"]["host"] for k in t.kernels],
          "roles": [k["role"] for k in t.kernels], "cuda": all("cuda" in k["sources"] for k in t.kernels), "error": t.data["error"],
          "metal": all("kernel void" in k["sources"].get("metal", "") for k in t.kernels),
          "timed": all(k["time_s"]["n"] == 3 for k in t.kernels) and t.data["timing"]["repeats"] == 3,
          "passes": sum(p["matches"] for k in t.kernels for p in k["passes"]), "realizes": len(t.traces), "value": float(y.numpy().sum()),
          "program": t.data["program"]}

def conv_ref(x, w, b):
  from explorer.tracing.reference import conv2d_reference
  return conv2d_reference(x.astype("float64"), w.astype("float64"), 1, 1, 1) + b.astype("float64")[None, :, None, None]

def with_and_without_contiguous(db: str) -> dict:
  """"My layer with and without .contiguous()": two captures, stored, and their diff from Python."""
  from explorer.api import capture
  x, w, b = inputs()
  with capture(name="layer") as plain: conv_bias_relu(x, w, b).realize()
  with capture(name="layer, contiguous") as staged: x.conv2d(w, b, padding=1).contiguous().relu().realize()
  d = plain.diff(staged)
  from explorer.present.tour import compare_tour
  tour = compare_tour("constants", plain.data, staged.data)
  return {"a": plain.store(db), "b": staged.store(db), "kernels": [len(plain.kernels), len(staged.kernels)], "diff": str(d),
          "compare": next(s["text"] for s in tour if s["id"] == "compare")}

if __name__ == "__main__":
  what = {"plain": lambda: tinygrads_own(), "captured": lambda: captured(sys.argv[2]), "contiguous": lambda: with_and_without_contiguous(sys.argv[2])}
  print(json.dumps(what[sys.argv[1]]()))
