"""A small CNN's training loop: three steps of conv, batchnorm, max-pool, linear, cross-entropy and SGD, no JIT."""
from tinygrad import Context, Tensor, nn

class Net:
  def __init__(self) -> None:
    self.conv, self.bn, self.fc = nn.Conv2d(1, 4, 3), nn.BatchNorm(4), nn.Linear(4 * 3 * 3, 10)

  def __call__(self, x: Tensor) -> Tensor:
    x = self.bn(self.conv(x)).relu().max_pool2d(2)  # model: features
    return self.fc(x.flatten(1))  # model: classifier

def run() -> list:
  Tensor.manual_seed(0)
  net = Net()
  opt = nn.optim.SGD(nn.state.get_parameters(net), lr=0.05)
  x, y = Tensor.randn(8, 1, 8, 8), Tensor.randint(8, high=10)
  losses = []
  with Context(TRAINING=1):
    for _ in range(3):
      opt.zero_grad()
      loss = net(x).sparse_categorical_crossentropy(y).backward()  # model: loss
      opt.step()  # model: step
      losses.append(loss.item())
  return losses
