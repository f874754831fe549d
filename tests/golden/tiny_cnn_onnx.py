"""Writes tests/programs/tiny_cnn.onnx (3.6 KB, checked in): a small CNN whose nodes are named as PyTorch's exporter names them (a
scope path, then the op), for the ONNX program of the corpus (tests/programs/onnx_runner.py). Needs the `onnx` package, which the
explorer does not: `pip install onnx && python tests/golden/tiny_cnn_onnx.py`."""
import pathlib
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

def model() -> onnx.ModelProto:
  rng = np.random.default_rng(7)
  w = lambda *shape: numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32))
  weights = [("conv1.weight", w(4, 1, 3, 3)), ("conv1.bias", w(4)), ("fc.weight", w(10, 64)), ("fc.bias", w(10))]
  inits = []
  for name, t in weights:
    t.name = name
    inits.append(t)
  nodes = [
    helper.make_node("Conv", ["image", "conv1.weight", "conv1.bias"], ["/features/conv1/Conv_output_0"], name="/features/conv1/Conv",
                     pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
    helper.make_node("Relu", ["/features/conv1/Conv_output_0"], ["/features/relu/Relu_output_0"], name="/features/relu/Relu"),
    helper.make_node("MaxPool", ["/features/relu/Relu_output_0"], ["/features/pool/MaxPool_output_0"], name="/features/pool/MaxPool",
                     kernel_shape=[2, 2], strides=[2, 2]),
    helper.make_node("Flatten", ["/features/pool/MaxPool_output_0"], ["/classifier/Flatten_output_0"], name="/classifier/Flatten"),
    helper.make_node("Gemm", ["/classifier/Flatten_output_0", "fc.weight", "fc.bias"], ["/classifier/fc/Gemm_output_0"],
                     name="/classifier/fc/Gemm", transB=1),
    helper.make_node("Softmax", ["/classifier/fc/Gemm_output_0"], ["probs"], name="/classifier/Softmax", axis=1),
  ]
  graph = helper.make_graph(nodes, "tiny_cnn", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 8, 8])],
                            [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])], inits)
  m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="kernel-explorer tests")
  onnx.checker.check_model(m)
  return m

if __name__ == "__main__":
  out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[1] / "programs" / "tiny_cnn.onnx"
  out.write_bytes(model().SerializeToString())
  print(out, out.stat().st_size, "bytes")
