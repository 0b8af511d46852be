"""LoRA: starts at the base model, only adapters train, merge is exact, any Dense."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from models import ModelConfig, build, param_count
from models.lora import ScaledLoRALinear, apply_lora, lora_count, merge_lora

CFG = ModelConfig(vocab_size=11, d_model=16, num_heads=2, d_ff=24, num_layers=2, max_len=16)
Y = jnp.arange(16).reshape(2, 8) % 11
nll = nnx.jit(lambda m, y: m.nll(y).mean())


def test_adapters_start_at_base_then_train_alone_and_merge_exactly():
  m = build(CFG, rngs=nnx.Rngs(0))
  m.eval()
  base = nll(m, Y)
  n = apply_lora(m, rank=2, targets="q,v,mlp", alpha=4, rngs=nnx.Rngs(1))
  assert n == 2 * 4                                      # 2 layers x (q, v, fc1, fc2)
  assert isinstance(m.decoder.blocks[0].ffn.fc1, ScaledLoRALinear)
  assert not isinstance(m.decoder.blocks[0].attn.k, ScaledLoRALinear)
  np.testing.assert_allclose(nll(m, Y), base, atol=1e-6)      # B = 0
  assert lora_count(m) == 2 * 2 * (2 * (16 + 16) + (16 + 24) + (24 + 16))
  frozen = jax.tree.map(jnp.copy, nnx.to_pure_dict(nnx.state(m, nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam)))))
  opt = nnx.Optimizer(m, optax.adam(1e-2), wrt=nnx.LoRAParam)
  assert sum(x.size for x in jax.tree.leaves(nnx.state(opt))
             if hasattr(x, "shape") and x.ndim) == 2 * lora_count(m)   # adam mu, nu only

  @nnx.jit
  def step(m, opt):
    loss, g = nnx.value_and_grad(lambda m: m.nll(Y).mean(),
                                 argnums=nnx.DiffState(0, nnx.LoRAParam))(m)
    opt.update(m, g)
    return loss

  for _ in range(3):
    step(m, opt)
  after = nnx.to_pure_dict(nnx.state(m, nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))))
  for a, b in zip(jax.tree.leaves(frozen), jax.tree.leaves(after)):
    np.testing.assert_array_equal(a, b)                       # the base did not move
  adapted = nll(m, Y)
  assert float(adapted) < float(base)
  assert merge_lora(m) == 8 and lora_count(m) == 0
  np.testing.assert_allclose(nll(m, Y), adapted, atol=1e-5)   # merged == unmerged
  assert param_count(m)["params"] == param_count(build(CFG, rngs=nnx.Rngs(0)))["params"]


def test_bad_targets_list_the_dense_layers():
  m = build(CFG, rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="match no Dense layer.*'fc1'"):
    apply_lora(m, rank=2, targets="query", rngs=nnx.Rngs(1))
  with pytest.raises(ValueError, match="positive int"):
    apply_lora(m, rank=0, rngs=nnx.Rngs(1))
