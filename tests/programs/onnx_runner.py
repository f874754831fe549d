"""tinygrad's ONNX runner (tinygrad/nn/onnx.py's OnnxRunner) on a small CNN (tiny_cnn.onnx: tests/golden/tiny_cnn_onnx.py made it),
driven as tinygrad's examples/benchmark_onnx.py drives a model: called directly once, then under TinyJit(prune=True) through a lambda,
three times, each on new inputs."""
import pathlib
import numpy as np
from tinygrad import Tensor, TinyJit
from tinygrad.nn.onnx import OnnxRunner

MODEL = pathlib.Path(__file__).resolve().with_name("tiny_cnn.onnx")

def run() -> list:
  run_onnx = OnnxRunner(MODEL)
  run_onnx_jit = TinyJit(lambda **kwargs: next(iter(run_onnx({k: v.to(None) for k, v in kwargs.items()}).values())), prune=True)  # model: jitted
  rng = np.random.default_rng(6)
  image = lambda: Tensor(rng.standard_normal((1, 1, 8, 8)).astype(np.float32))
  probs = [next(iter(run_onnx({"image": image()}).values())).tolist()]  # model: direct
  for _ in range(3): probs.append(run_onnx_jit(image=image()).tolist())  # model: runs
  return probs
