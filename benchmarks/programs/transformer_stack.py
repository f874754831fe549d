"""One training step of a stack of transformer blocks (attention, layernorm, GELU MLP, residuals; AdamW), each block its own width, so
that no two blocks share a kernel: a real program of thousands of distinct kernels, as a tinygrad user writes it.

  python benchmarks/programs/transformer_stack.py [LAYERS]              tinygrad alone; prints the kernel count
  python benchmarks/programs/transformer_stack.py [LAYERS] --capture DB inside the explorer's `capture()` block, stored in the store
                                                                       DB; prints the trace's id and its kernel count

Both seed tinygrad the same way, so both run the same kernels.
"""
import sys

if "--capture" in sys.argv:
  from explorer.api import capture  # before tinygrad: it switches on rewrite tracking at import
from tinygrad import Context, Tensor, nn
from tinygrad.helpers import GlobalCounters

HEADS, SEQ, BATCH = 2, 6, 2

class Block:
  def __init__(self, dim: int) -> None:
    self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
    self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
    self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

  def __call__(self, x: Tensor) -> Tensor:
    b, t, dim = x.shape
    q, k, v = [z.reshape(b, t, HEADS, dim // HEADS).transpose(1, 2) for z in self.qkv(self.ln1(x)).chunk(3, dim=-1)]
    x = x + self.proj(q.scaled_dot_product_attention(k, v, is_causal=True).transpose(1, 2).reshape(b, t, dim))
    return x + self.down(self.up(self.ln2(x)).gelu())

class Stack:
  """Block i is 8 + 2*i wide, with a linear map between neighbouring widths."""
  def __init__(self, layers: int) -> None:
    self.dims = [8 + 2 * i for i in range(layers)]
    self.blocks = [Block(d) for d in self.dims]
    self.widen = [nn.Linear(a, b) for a, b in zip(self.dims, self.dims[1:], strict=False)]

  def __call__(self, x: Tensor) -> Tensor:
    for i, block in enumerate(self.blocks):
      x = block(x)
      if i < len(self.widen): x = self.widen[i](x)
    return x

def step(layers: int) -> int:
  """The step, realized; returns how many kernels tinygrad ran for it."""
  Tensor.manual_seed(0)
  net = Stack(layers)
  opt = nn.optim.AdamW(nn.state.get_parameters(net), lr=1e-3)
  x = Tensor.randn(BATCH, SEQ, net.dims[0])
  Tensor.realize(*nn.state.get_parameters(net), x)
  GlobalCounters.reset()
  with Context(TRAINING=1):
    opt.zero_grad()
    loss = net(x).square().mean()
    loss.backward()
    opt.step()
  return GlobalCounters.kernel_count

if __name__ == "__main__":
  layers = int(next((a for a in sys.argv[1:] if a.isdigit()), "24"))
  if "--capture" in sys.argv:
    with capture(name=f"transformer stack x{layers}") as t: step(layers)
    print(t.store(sys.argv[sys.argv.index("--capture") + 1]), len(t.data["kernels"]))
  else: print(step(layers))
