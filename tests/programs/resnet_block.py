"""A ResNet basic block (conv-bn-relu-conv-bn plus a strided 1x1 shortcut) trained one step with SGD and momentum."""
from tinygrad import Context, Tensor, nn

class BasicBlock:
  def __init__(self, cin: int, cout: int, stride: int) -> None:
    self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm(cout)
    self.c2, self.b2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm(cout)
    self.short, self.bs = nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm(cout)

  def __call__(self, x: Tensor) -> Tensor:
    out = self.b1(self.c1(x)).relu()  # model: first conv
    return (self.b2(self.c2(out)) + self.bs(self.short(x))).relu()  # model: second conv and shortcut

def run() -> list:
  Tensor.manual_seed(4)
  block = BasicBlock(3, 8, 2)
  opt = nn.optim.SGD(nn.state.get_parameters(block), lr=0.01, momentum=0.9)
  x = Tensor.randn(2, 3, 8, 8)
  with Context(TRAINING=1):
    opt.zero_grad()
    loss = block(x).mean()  # model: loss
    loss.backward()
    opt.step()  # model: sgd
  return [loss.item()] + block.c1.weight[0, 0, 0].tolist()
