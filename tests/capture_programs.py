"""Programs the capture tests run in fresh processes (the explorer imported before tinygrad, as a user's script does)."""
from __future__ import annotations
import json
import sys

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
  from tinygrad.helpers import ansistrip
  from tinygrad.uop.ops import Ops
  x, w, b = inputs()
  compiled = compile_linear(Tensor.schedule_linear(conv_bias_relu(x, w, b)))
  prgs = [c.src[0] for c in compiled.src if c.src[0].op is Ops.PROGRAM]
  return {"names": [ansistrip(p.arg.name) for p in prgs], "sources": [next(s.arg for s in p.src if s.op is Ops.SOURCE) for p in prgs]}

def captured(db: str) -> dict:
  import numpy as np
  from explorer import capture  # before tinygrad: it turns tinygrad's rewrite tracking on
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
  from explorer.tracing.pipeline.reference import conv2d_reference
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

# ***** whole programs: a training step and a residual block, each model line marked for the tests to find *****

class SmallCNN:
  def __init__(self):
    from tinygrad import nn
    self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm(8)
    self.fc = nn.Linear(8 * 4 * 4, 10)

  def __call__(self, x):
    x = self.b1(self.c1(x)).relu().max_pool2d(2)  # model: features
    return self.fc(x.flatten(1))  # model: classifier

class Residual:
  def __init__(self):
    from tinygrad import nn
    self.c1, self.c2 = nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)

  def __call__(self, x):
    h = self.c1(x).relu()  # model: first conv
    return (x + self.c2(h)).relu()  # model: second conv and the skip

def training_setup(model: str):
  from tinygrad import Tensor, nn
  Tensor.manual_seed(0)
  net = SmallCNN() if model == "cnn" else Residual()
  opt = nn.optim.Adam(nn.state.get_parameters(net), lr=1e-3) if model == "cnn" else nn.optim.SGD(nn.state.get_parameters(net), lr=1e-2)
  x = Tensor.randn(4, 3, 8, 8) if model == "cnn" else Tensor.randn(2, 4, 8, 8)
  y = Tensor.randint(4, high=10) if model == "cnn" else None
  Tensor.realize(*nn.state.get_parameters(net), *opt.params, *opt.buffers, x, *([y] if y is not None else []))
  return net, opt, x, y

def training_step(net, opt, x, y):
  from tinygrad import Context
  with Context(TRAINING=1):
    opt.zero_grad()
    out = net(x)
    loss = out.sparse_categorical_crossentropy(y) if y is not None else out.square().mean()  # model: loss
    loss.backward()  # model: backward
    opt.step()  # model: optimizer step
  return loss

def program_captured(model: str, db: str) -> dict:
  """One training step inside capture(), as one program trace."""
  from explorer import capture
  setup = training_setup(model)
  timed = model == "residual"  # the residual's step is timed: each realize's timing, merged into the program's
  with capture(name=f"{model} training step", time=timed, repeats=3) as t: training_step(*setup).realize()
  return {"id": t.store(db), "kernels": len(t.kernels), "copies": t.data["totals"]["copies"], "realizes": len(t.data["realizes"]),
          "timing": t.data.get("timing"), "times": [k["time_s"] for k in t.kernels], "realize_totals": [r["total_s"] for r in t.data["realizes"]],
          "per_realize": [len(r.kernels) for r in t.traces], "sources": [k["sources"]["host"] for k in t.kernels],
          "provenance": [k["provenance"] for k in t.kernels], "printed": str(t), "status": t.data["status"], "flops": [k["flops"] for k in t.kernels],
          "weights": weights(setup[1])}

def weights(opt) -> list[list[float]]:
  """Every parameter after the step, as the optimizer left it."""
  return [p.numpy().ravel().tolist() for p in opt.params]

def program_plain(model: str) -> dict:
  """The same step in plain tinygrad: how many kernels it runs (GlobalCounters) and what DEBUG=4 prints (every source it compiles)."""
  import contextlib
  import io
  import os
  os.environ["PARALLEL"] = "0"  # compile in this process, whose stdout DEBUG=4's sources go to (tinygrad not imported yet)
  from tinygrad import Context
  from tinygrad.helpers import GlobalCounters
  setup = training_setup(model)
  GlobalCounters.reset()
  out = io.StringIO()
  with contextlib.redirect_stdout(out), Context(DEBUG=4): training_step(*setup).realize()
  return {"count": GlobalCounters.kernel_count, "debug": out.getvalue(), "weights": weights(setup[1])}

def forward_captured(db: str) -> dict:
  """The CNN's forward pass alone: no kernel of it is backward."""
  from explorer import capture
  net, _, x, _ = training_setup("cnn")
  with capture(name="cnn forward") as t: net(x).realize()
  return {"provenance": [k["provenance"] for k in t.kernels]}

def steps(n: int, db: str | None, every_step: bool = False) -> dict:
  """A training loop's first n steps, inside one capture (db given) or in plain tinygrad (None). every_step: each step traced whole
  (the later steps' schedules come from tinygrad's schedule cache: no rangeify pass runs for them)."""
  import json as json_
  if db is not None:
    from explorer import capture  # before tinygrad: it turns tinygrad's rewrite tracking on
  setup = training_setup("cnn")
  if db is None: return {"losses": [float(training_step(*setup).realize().numpy()) for _ in range(n)]}
  with capture(name=f"{n} training steps", every_step=every_step) as t: losses = [training_step(*setup).realize() for _ in range(n)]
  return {"id": t.store(db), "status": t.data["status"], "failures": t.data["failures"], "kernels": len(t.kernels),
          "losses": [float(x.numpy()) for x in losses], "notes": [(r.data["scheduler"] or {}).get("note") for r in t.traces],
          "repeats": [len(r.get("repeats", [])) for r in t.data["realizes"]], "bytes": len(json_.dumps(t.data)), "printed": str(t),
          "timeline": [[s["name"], s["realize"]] for s in t.data["timeline"]["stages"]], "launches": len(t.data["timeline"]["runs"])}

KV_DIM, KV_MAX = 16, 32

def kv_decode(db: str | None) -> dict:
  """A KV-cache decode loop as LLM inference runs it: a TinyJit step taking a bound Variable position, the cache shrunk to it and
  attended over; four steps, captured (db given) or in plain tinygrad (None)."""
  if db is not None:
    from explorer import capture  # before tinygrad
  from tinygrad import Tensor, TinyJit, Variable
  Tensor.manual_seed(0)
  cache_k, cache_v = Tensor.zeros(KV_MAX, KV_DIM).contiguous().realize(), Tensor.zeros(KV_MAX, KV_DIM).contiguous().realize()
  wq = Tensor.randn(KV_DIM, KV_DIM).realize()
  xs = [Tensor.randn(1, KV_DIM).realize() for _ in range(4)]
  @TinyJit
  def step(x: Tensor, pos: Variable) -> Tensor:
    q = x @ wq
    cache_k[pos:pos + 1].assign(q).realize()
    cache_v[pos:pos + 1].assign(x).realize()
    k, v = cache_k[0:pos + 1], cache_v[0:pos + 1]
    return ((q @ k.T / KV_DIM ** 0.5).softmax(-1) @ v).realize()  # model: attention over the cache
  pos = Variable("pos", 0, KV_MAX - 1)
  def decode() -> list[list[float]]: return [step(x, pos.bind(i)).numpy().ravel().tolist() for i, x in enumerate(xs)]
  if db is None: return {"outputs": decode(), "caches": [cache_k.numpy().ravel().tolist(), cache_v.numpy().ravel().tolist()]}
  with capture(name="kv decode", time=True, warmup=1, repeats=3) as t: outputs = decode()
  return {"times_at": [k.get("times_at") for k in t.kernels], "caches": [cache_k.numpy().ravel().tolist(), cache_v.numpy().ravel().tolist()],
          "id": t.store(db), "status": t.data["status"], "failures": t.data["failures"], "outputs": outputs, "kernels": len(t.kernels),
          "variables": [r.get("variables") for r in t.data["realizes"]], "jits": t.data.get("jits", []), "realizes": len(t.data["realizes"]),
          "kernel_variables": [k.get("variables") for k in t.kernels], "kernel_names": [k["name"] for k in t.kernels], "printed": str(t)}

def same_computation_two_lines(db: str) -> dict:
  """One computation captured twice, from two lines of this file, each stored: two traces, not one replacing the other."""
  from explorer import capture
  x, w, b = inputs()
  with capture(name="layer") as first: conv_bias_relu(x, w, b).realize()
  with capture(name="layer") as second: x.conv2d(w, b, padding=1).relu().realize()  # the same kernels, another line
  again = first.store(db)  # stored again: the same capture, the same id
  return {"ids": [first.store(db), second.store(db), again], "kernels": [[k["ast_key"] for k in t.kernels] for t in (first, second)],
          "lines": [sorted({e["line"] for k in t.kernels for e in k.get("provenance", [])}) for t in (first, second)]}

def softmax_sqrt(x):  # three kernels: a max, a sum of exponentials, the quotient's square root (each its own reduce or op)
  m = x.max(axis=1, keepdim=True).contiguous()
  e = (x - m).exp()
  return (e / e.sum(axis=1, keepdim=True)).sqrt()

def softmax_input():
  import numpy as np
  from tinygrad import Tensor
  return Tensor(np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)).realize()

def kernel_ops(ast) -> list[str]:
  """The ops a kernel's AST computes, a REDUCE by its reduction (REDUCE:ADD): what a tensor UOp grouped in that kernel must be."""
  return sorted({f"REDUCE:{u.arg[0].name}" if u.op.name == "REDUCE" else u.op.name for u in ast.toposort()})

def softmax_plain() -> dict:
  """softmax_sqrt through plain tinygrad: its kernels' names and the ops each one's AST computes, in schedule order."""
  from tinygrad import Tensor
  from tinygrad.engine.realize import compile_linear
  from tinygrad.helpers import ansistrip
  from tinygrad.uop.ops import Ops
  linear = Tensor.schedule_linear(softmax_sqrt(softmax_input()))
  asts = [c.src[0] for c in linear.src if c.src[0].op is Ops.SINK]
  prgs = [c.src[0] for c in compile_linear(linear).src if c.src[0].op is Ops.PROGRAM]
  return {"names": [ansistrip(p.arg.name) for p in prgs], "ops": [kernel_ops(a) for a in asts]}

def softmax_captured(db: str) -> dict:
  from explorer import capture
  x = softmax_input()
  with capture(name="softmax sqrt") as t: softmax_sqrt(x).realize()
  return {"id": t.store(db), "names": [k["name"] for k in t.kernels], "calls": [k["call"] for k in t.kernels]}

if __name__ == "__main__":
  what = {"plain": lambda: tinygrads_own(), "captured": lambda: captured(sys.argv[2]), "contiguous": lambda: with_and_without_contiguous(sys.argv[2]),
          "program": lambda: program_captured(sys.argv[2], sys.argv[3]), "program-plain": lambda: program_plain(sys.argv[2]),
          "forward": lambda: forward_captured(sys.argv[2]),
          "steps": lambda: steps(int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None, "every" in sys.argv[4:]),
          "kv-decode": lambda: kv_decode(sys.argv[2] if len(sys.argv) > 2 else None),
          "two-lines": lambda: same_computation_two_lines(sys.argv[2]),
          "softmax": lambda: softmax_captured(sys.argv[2]), "softmax-plain": lambda: softmax_plain()}
  print(json.dumps(what[sys.argv[1]]()))
