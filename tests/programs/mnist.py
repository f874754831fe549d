"""An MNIST-style convnet (two conv blocks with BatchNorm and max-pool, a linear head) trained two steps with Adam on random digits."""
from tinygrad import Context, Tensor, nn

class ConvNet:
  def __init__(self) -> None:
    self.c1, self.b1 = nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm(4)
    self.c2, self.b2 = nn.Conv2d(4, 8, 3, padding=1), nn.BatchNorm(8)
    self.head = nn.Linear(8 * 3 * 3, 10)

  def __call__(self, x: Tensor) -> Tensor:
    x = self.b1(self.c1(x)).relu().max_pool2d(2)  # model: block 1
    x = self.b2(self.c2(x)).relu().max_pool2d(2)  # model: block 2
    return self.head(x.flatten(1))  # model: head

def run() -> list:
  Tensor.manual_seed(1)
  net = ConvNet()
  opt = nn.optim.Adam(nn.state.get_parameters(net), lr=1e-3)
  x, y = Tensor.rand(4, 1, 12, 12), Tensor.randint(4, high=10)
  losses = []
  with Context(TRAINING=1):
    for _ in range(2):
      opt.zero_grad()
      loss = net(x).sparse_categorical_crossentropy(y).backward()  # model: loss
      opt.step()  # model: adam
      losses.append(loss.item())
  return losses + net.head.weight[0, :4].tolist()
