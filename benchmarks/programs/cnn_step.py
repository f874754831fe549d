"""One training step of a small CNN (conv, batchnorm, relu, max-pool, linear, Adam), as a tinygrad user writes it.

  python benchmarks/programs/cnn_step.py              tinygrad alone (run it with VIZ=-1 for tinygrad's own capture)
  python benchmarks/programs/cnn_step.py --capture    inside the explorer's `capture()` block; prints the kernel count

Both seed tinygrad the same way, so both run the same kernels.
"""
import sys

if "--capture" in sys.argv:
  from explorer.api import capture  # before tinygrad: it switches on rewrite tracking at import
from tinygrad import Context, Tensor, nn
from tinygrad.helpers import GlobalCounters

class Net:
  def __init__(self) -> None:
    self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm(8)
    self.c2, self.b2 = nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm(16)
    self.fc = nn.Linear(16 * 4 * 4, 10)

  def __call__(self, x: Tensor) -> Tensor:
    x = self.b1(self.c1(x)).relu().max_pool2d(2)
    x = self.b2(self.c2(x)).relu().max_pool2d(2)
    return self.fc(x.flatten(1))

def setup() -> tuple[Net, nn.optim.Optimizer, Tensor, Tensor]:
  Tensor.manual_seed(0)
  net = Net()
  opt = nn.optim.Adam(nn.state.get_parameters(net), lr=1e-3)
  x, y = Tensor.randn(8, 3, 16, 16), Tensor.randint(8, high=10)
  Tensor.realize(*nn.state.get_parameters(net), x, y)
  return net, opt, x, y

def step(net: Net, opt: nn.optim.Optimizer, x: Tensor, y: Tensor) -> None:
  with Context(TRAINING=1):
    opt.zero_grad()
    loss = net(x).sparse_categorical_crossentropy(y)
    loss.backward()
    opt.step()
    loss.realize()

if __name__ == "__main__":
  if "--capture" in sys.argv:
    model = setup()
    GlobalCounters.reset()
    with capture("cnn training step") as t: step(*model)
    print(f"{GlobalCounters.kernel_count} kernels (copies included), {len(t.kernels)} kernels and {t.data['totals']['copies']} copies "
          f"traced in one program of {len(t.data['realizes'])} realizes")
  else:
    model = setup()
    GlobalCounters.reset()
    step(*model)
    print(f"{GlobalCounters.kernel_count} kernels")
