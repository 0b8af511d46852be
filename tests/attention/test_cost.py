"""attention.cost against XLA's own accounting of the compiled computation."""
import jax.numpy as jnp
import pytest

import attention
from tests.reference import cpu_cost_analysis
from tests.attention.test_exact import make_params

CASES = [(1, 128, 4, 64, False), (2, 64, 2, 32, True)]


@pytest.mark.parametrize("name", ["softmax", "dot", "general", "additive", "cosine",
                                  "location"])
@pytest.mark.parametrize("B,T,H,D,causal", CASES)
def test_naive_cost_matches_xla_cost_analysis(name, B, T, H, D, causal):
  q = jnp.ones((B, T, H, D))
  params = {k: jnp.asarray(v, jnp.float32)
            for k, v in make_params(name, (B, T, T, H, H, D, D)).items()}
  f = lambda q, k, v, p: attention.get(name)(q, k, v, causal=causal, **p)
  xla = cpu_cost_analysis(f, q, q, q, params)
  c = attention.cost(name, batch=B, q_len=T, num_heads=H, head_dim=D, causal=causal,
                     **params)
  assert c.flops == pytest.approx(xla["flops"], rel=0.05)
  assert c.transcendentals == pytest.approx(xla["transcendentals"], rel=0.05)
  assert c.bytes == pytest.approx(xla["bytes accessed"], rel=0.25)


def test_flash_cost_is_the_same_compute_with_linear_memory():
  kw = dict(batch=1, num_heads=8, head_dim=64)
  for T in (1024, 4096, 16384):
    naive = attention.cost("softmax", q_len=T, **kw)
    flash = attention.cost("flash", q_len=T, **kw)
    assert flash.flops == naive.flops
    assert flash.temp_bytes == 4 * 8 * T * (64 + 3)  # O(N): accumulators and stats
    assert naive.temp_bytes == 2 * 4 * 8 * T * T     # O(N^2): scores and probabilities
  causal = attention.cost("flash", q_len=4096, causal=True, **kw)
  full = attention.cost("flash", q_len=4096, **kw)
  assert causal.flops / full.flops == pytest.approx(0.5, abs=0.01)


def test_flash_fwd_bwd_is_3_5x_forward_matmuls():
  kw = dict(batch=1, q_len=512, num_heads=2, head_dim=64)
  fwd = attention.cost("flash", mode="fwd", **kw).flops
  both = attention.cost("flash", mode="fwd_bwd", **kw).flops
  assert both / fwd == pytest.approx(3.5, rel=0.02)


def test_decode_cost_is_linear_in_context_and_int8_reads_less():
  kw = dict(batch=1, q_len=1, num_heads=8, head_dim=64, mode="decode")
  c1 = attention.cost("softmax", kv_len=1024, **kw)
  c2 = attention.cost("softmax", kv_len=2048, **kw)
  assert c2.flops == pytest.approx(2 * c1.flops, rel=0.01)


def test_unknown_mode_is_refused():
  with pytest.raises(ValueError, match="mode"):
    attention.cost("softmax", batch=1, q_len=8, num_heads=1, head_dim=8, mode="train")
