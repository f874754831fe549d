"""A recurrence: tinygrad's nn.LSTMCell over five steps of a sequence, then a linear readout of the last hidden state."""
from tinygrad import Tensor, nn

def run() -> list:
  Tensor.manual_seed(5)
  cell, readout = nn.LSTMCell(4, 8), nn.Linear(8, 2)
  xs = Tensor.randn(5, 3, 4)
  hc = None
  for t in range(5):
    hc = cell(xs[t], hc)  # model: lstm step
    hc = (hc[0].realize(), hc[1].realize())
  return readout(hc[0]).tolist()  # model: readout
