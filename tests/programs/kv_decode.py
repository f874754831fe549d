"""LLM-style decoding: a TinyJit step that writes a token's key and value into a KV cache at a symbolic position (a bound Variable)
and attends over the cache up to it, for five tokens."""
from tinygrad import Tensor, TinyJit, Variable

DIM, MAX = 16, 32

def run() -> list:
  Tensor.manual_seed(3)
  cache_k, cache_v = Tensor.zeros(MAX, DIM).contiguous().realize(), Tensor.zeros(MAX, DIM).contiguous().realize()
  wq, wk = Tensor.randn(DIM, DIM).realize(), Tensor.randn(DIM, DIM).realize()
  tokens = [Tensor.randn(1, DIM).realize() for _ in range(5)]

  @TinyJit
  def step(x: Tensor, pos: Variable) -> Tensor:
    q = x @ wq
    cache_k[pos:pos + 1].assign(x @ wk).realize()  # model: cache write
    cache_v[pos:pos + 1].assign(x).realize()
    k, v = cache_k[0:pos + 1], cache_v[0:pos + 1]
    return ((q @ k.T / DIM ** 0.5).softmax(-1) @ v).realize()  # model: attention

  pos = Variable("pos", 0, MAX - 1)
  return [step(x, pos.bind(i)).tolist() for i, x in enumerate(tokens)]
