"""Random initialisers: Tensor.rand, randn, uniform, kaiming_uniform and a Linear's default init, each made by tinygrad's random
kernels, then used."""
from tinygrad import Tensor, nn

def run() -> list:
  Tensor.manual_seed(6)
  a, b = Tensor.rand(4, 4), Tensor.randn(4, 4)  # model: rand and randn
  u, k = Tensor.uniform(4, 4, low=-1, high=1), Tensor.kaiming_uniform(4, 4)  # model: uniform and kaiming
  layer = nn.Linear(4, 3)  # model: linear init
  return layer((a + b) @ (u * k)).tolist()  # model: use
