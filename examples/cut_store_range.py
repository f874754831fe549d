"""A program whose kernel tinygrad 0.12 cuts with cut_store_range (codegen/simplify.py), the loop peeling the codegen notes (seed 004)
describe: a one-channel convolution over one dimension, padded by 2, so that its output is one loop of 20 stores compared with the
constants 2 and 18 (where the padding ends and starts again). On the CPU, 0.12's "cut store ranges" pass splits it into three loops
and no iteration tests the comparison; 0.13 and 0.14 no longer have the pass. The explorer's convolutions (explorer.spec.ConvSpec) pad
both spatial dimensions alike, which this rule never cuts: a captured program shows it.

  kernel-explorer trace --script examples/cut_store_range.py --tinygrad 0.12.0 --analysis
"""
from tinygrad import Tensor

x = Tensor.arange(16).float().reshape(1, 1, 16)  # (batch, channels, width)
w = Tensor([[[2.0]]])                            # one 1-wide filter
print(x.conv2d(w, padding=2).numpy())            # 20 values: 2 zeros, 2*x, 2 zeros
