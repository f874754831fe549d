"""A transformer block (multi-head attention, layernorm, GELU MLP, residuals) forward and backward on a short sequence."""
from tinygrad import Context, Tensor, nn

DIM, HEADS, SEQ = 16, 2, 6

class Block:
  def __init__(self) -> None:
    self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
    self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
    self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

  def __call__(self, x: Tensor) -> Tensor:
    b, t, _ = x.shape
    q, k, v = [z.reshape(b, t, HEADS, DIM // HEADS).transpose(1, 2) for z in self.qkv(self.ln1(x)).chunk(3, dim=-1)]
    att = q.scaled_dot_product_attention(k, v, is_causal=True)  # model: attention
    x = x + self.proj(att.transpose(1, 2).reshape(b, t, DIM))  # model: attention residual
    return x + self.down(self.up(self.ln2(x)).gelu())  # model: mlp residual

def run() -> list:
  Tensor.manual_seed(2)
  block = Block()
  x = Tensor.randn(2, SEQ, DIM)
  with Context(TRAINING=1):
    out = block(x)
    loss = out.square().mean()  # model: loss
    loss.backward()
  return [loss.item()] + block.qkv.weight.grad[0, :4].tolist() + block.down.bias.grad[:4].tolist()
