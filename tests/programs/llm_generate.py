"""tinygrad's own LLM (tinygrad/llm/model.py's Transformer, a tiny random config: 2 blocks, dim 64, vocab 256, context 32), driven as
tinygrad/llm/cli.py drives it: Transformer.generate, whose prefill runs a TinyJit with symbolic start_pos and toks, then the decode
TinyJit token by token. The 0.14.0 wheel lacks tinygrad/llm/kernels/, which model.py imports: off AMD its amd module does nothing
(amd_custom_kernels_supported() is False, Linear is nn.Linear), which is what stands in for it here."""
import sys, types
from tinygrad import Tensor, nn

def _stand_in_amd_kernels() -> None:
  if "tinygrad.llm.kernels.amd" in sys.modules: return
  def amd_only(*args, **kwargs): raise NotImplementedError("AMD's custom kernels: not in the tinygrad 0.14.0 wheel")
  amd = types.ModuleType("tinygrad.llm.kernels.amd")
  amd.Linear, amd.amd_custom_kernels_supported = nn.Linear, lambda device=None: False
  amd.gated_delta_prefill = amd.flash_attention = amd_only
  kernels = types.ModuleType("tinygrad.llm.kernels")
  kernels.amd = amd
  sys.modules["tinygrad.llm.kernels"], sys.modules["tinygrad.llm.kernels.amd"] = kernels, amd

def run() -> list:
  _stand_in_amd_kernels()
  from tinygrad.llm.model import Transformer, TransformerConfig
  Tensor.manual_seed(5)
  config = TransformerConfig(num_blocks=2, dim=64, hidden_dim=128, n_heads=4, n_kv_heads=2, norm_eps=1e-5, vocab_size=256, head_dim=16,
                             rope_theta=10000.0, rope_dim=16, v_head_dim=16, max_context=32)
  model = Transformer(config)  # model: build
  gen = model.generate(toks := [1, 2, 3, 4, 5])  # model: prompt
  tokens = [next(gen) for _ in range(5)]  # model: generate
  cache = model.blk[0].cache_kv.float()
  return tokens + [toks[-1]] + cache.sum(axis=(0, 1, 2, 4)).tolist()[:8]
