"""The same CNN's training step under TinyJit: its first call runs as written, the second is captured, the rest replay it."""
from tinygrad import Context, Tensor, TinyJit, nn
from programs.cnn_loop import Net

def run() -> list:
  Tensor.manual_seed(0)
  net = Net()
  opt = nn.optim.SGD(nn.state.get_parameters(net), lr=0.05)
  x, y = Tensor.randn(8, 1, 8, 8).realize(), Tensor.randint(8, high=10).realize()

  @TinyJit
  def step() -> Tensor:
    opt.zero_grad()
    loss = net(x).sparse_categorical_crossentropy(y).backward()  # model: loss
    opt.step()  # model: step
    return loss.realize()

  with Context(TRAINING=1): return [step().item() for _ in range(4)]
