"""tinygrad's examples/beautiful_mnist.py as written upstream (@function on the model's __call__, a TinyJit train step under
Context(TRAINING=1) that samples its batch with Tensor.randint and realizes Adam's schedule_step), scaled down: 8x8 digits of random
data, 16 samples a batch, four steps; what it returns, the losses and a weight, is what the steps computed."""
from typing import Callable
from tinygrad import Context, Tensor, TinyJit, function, nn

class Model:
  def __init__(self):
    self.layers: list[Callable[[Tensor], Tensor]] = [
      nn.Conv2d(1, 4, 3), Tensor.relu,  # model: conv1
      nn.Conv2d(4, 4, 3), Tensor.relu,  # model: conv2
      nn.BatchNorm(4), Tensor.max_pool2d,
      lambda x: x.flatten(1), nn.Linear(16, 10)]  # model: head

  @function
  def __call__(self, x:Tensor) -> Tensor: return x.sequential(self.layers)  # model: forward

  @TinyJit
  @Context(TRAINING=1)
  def train_step(self, X_train:Tensor, Y_train:Tensor) -> Tensor:
    opt.zero_grad()
    samples = Tensor.randint(16, high=X_train.shape[0])  # model: batch
    loss = self(X_train[samples]).sparse_categorical_crossentropy(Y_train[samples]).backward()  # model: loss
    return loss.realize(*opt.schedule_step())  # model: step

def run() -> list:
  global opt
  Tensor.manual_seed(4)
  X_train, Y_train = Tensor.rand(64, 1, 8, 8).realize(), Tensor.randint(64, high=10).realize()  # model: data
  model = Model()  # model: init
  opt = nn.optim.Adam(nn.state.get_parameters(model))  # model: optimizer
  losses = [model.train_step(X_train, Y_train).item() for _ in range(4)]  # model: train
  return losses + model.layers[0].weight[0, 0, 0].tolist() + model.layers[4].running_mean.tolist()
