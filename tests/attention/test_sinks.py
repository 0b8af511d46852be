"""Learned attention sinks (gpt-oss; Xiao et al. 2024, StreamingLLM, for why a head
needs them): the option `sinks` of softmax, flash and local, whose (Hq,) logits join
each query head's softmax as a column of value zero,

  out_i = sum_j exp(s_ij) v_j / (exp(sink_h) + sum_j exp(s_ij)),

against a float64 NumPy reference of that formula, causal and not, under masks (a
fully padded row stays zero) and GQA; the gradient w.r.t. the sink against its closed
form, and flash's custom VJP against softmax's autodiff; the int8 caches' steps
carry it; models create the parameter only under the option, and the variants whose
kernels cannot take it refuse it by name with why. That each decodes as it computes
forward with sinks, and keeps masks and causality, is the contract's
`test_switched_params`. Tiny shapes, one compiled program per variant.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention
from models import ConfigError, ModelConfig, build
from tests import reference

B, T, HQ, HKV, D = 2, 9, 4, 2, 8
WINDOW = 3                          # local's window: narrower than T, so that it matters


def inputs(seed=0):
  rng = np.random.default_rng(seed)
  q, k, v = (rng.standard_normal(s).astype(np.float32)
             for s in ((B, T, HQ, D), (B, T, HKV, D), (B, T, HKV, D)))
  sinks = (2.0 * rng.standard_normal(HQ)).astype(np.float32)   # heads far apart
  w = rng.standard_normal((B, T, HQ, D)).astype(np.float32)    # the loss's weights
  return q, k, v, sinks, w


def key_padding():
  """(B, 1, 1, T): row 0 sees its first 6 keys, row 1 none (its outputs are zero)."""
  m = np.zeros((B, 1, 1, T), bool)
  m[0, ..., :6] = True
  return m


def per_query():
  m = np.random.default_rng(3).random((B, 1, T, T)) < 0.6
  m[:, :, 2] = False                                           # a row with no key
  return m


def sink_reference(q, k, v, sinks, causal, mask, window=None):
  """(out (B, T, Hq, D), p_sink (B, Hq, T)) in float64: softmax over [q.k / sqrt(D),
  sink_h] with the sink's column dropped, keys as the contract allows them (and
  local's window: causal p - w < j <= p, else |j - p| <= w // 2)."""
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  k, v = reference.expand(k, HQ), reference.expand(v, HQ)
  s = np.einsum("bihd,bjhd->bhij", q, k) / np.sqrt(D)
  allow = reference.allowed(B, HQ, T, T, causal, mask)
  if window is not None:
    rel = np.arange(T)[None, :] - np.arange(T)[:, None]          # j - i
    allow &= ((rel <= 0) & (rel > -window)) if causal else (np.abs(rel) <= window // 2)
  sink = np.asarray(sinks, np.float64)[None, :, None, None]
  m = np.maximum(np.where(allow, s, -np.inf).max(-1, keepdims=True), sink)
  e = np.exp(np.where(allow, s, -np.inf) - m)
  den = np.exp(sink - m) + e.sum(-1, keepdims=True)
  out = np.einsum("bhij,bjhd->bihd", e / den, v)
  return out, (np.exp(sink - m) / den)[..., 0]


def sink_grad_reference(out, p_sink, w):
  """d sum(out * w) / d sink_h = -sum_{b, i} p_sink[b, h, i] (w_bih . out_bih)."""
  return -np.einsum("bhi,bihd,bihd->h", p_sink, np.asarray(w, np.float64), out)


# (name, options) and the masks each takes: local takes key padding only
CASES = {"softmax": {}, "flash": dict(block_q=8, block_k=8), "local": dict(window=WINDOW)}


def runs(name):
  """(causal, mask) of each checked call of `name`: flash's (a gradient each through
  its custom VJP: slow to compile) one of each mask kind and causal mode."""
  if name == "flash":
    return [(False, per_query()), (True, None), (True, key_padding())]
  masks = [None, key_padding()] + ([per_query()] if name != "local" else [])
  return [(c, m) for c in (False, True) for m in masks]


@pytest.mark.parametrize("name", list(CASES))
def test_sinks_equal_the_float64_reference_with_gradients(name):
  """Forward against the float64 formula for every (causal, mask) run, GQA; the
  gradient w.r.t. the sinks against its closed form; for flash (its own VJP, tiles
  of 8 over 9 positions, and one slice per step too) the gradients w.r.t. q, k, v and
  sinks equal softmax's autodiff, which the float64 forward already pins down."""
  q, k, v, sinks, w = inputs()
  opts, fn, sm = CASES[name], attention.get(name), attention.get("softmax")
  window = opts.get("window")
  cases = runs(name)
  # flash one (batch, kv-head) slice per step too (`_sliced_core`), on the last run
  extra = dict(step_score_bytes=1)

  def loss(f, kw, causal, mask):
    def l(q, k, v, s):
      o = f(q, k, v, causal=causal, mask=mask, sinks=s, **kw)
      return jnp.sum(o * w), o
    return l

  @jax.jit
  def run(q, k, v, s):
    res = []
    for n, (causal, mask) in enumerate(cases):
      g, o = jax.grad(loss(fn, opts, causal, mask), argnums=(0, 1, 2, 3),
                      has_aux=True)(q, k, v, s)
      ref = ()
      if name == "flash":     # softmax's autodiff, and flash one slice per step
        refs = [(sm, {})] + ([(fn, {**opts, **extra})] if n == len(cases) - 1 else [])
        ref = tuple(jax.grad(loss(f, kw, causal, mask), argnums=(0, 1, 2, 3),
                             has_aux=True)(q, k, v, s)[0] for f, kw in refs)
      res.append((o, g, ref))
    return res

  for (causal, mask), (o, g, ref) in zip(cases, run(q, k, v, sinks)):
    at = f"{name}, causal={causal}, mask={None if mask is None else mask.shape}"
    want, p_sink = sink_reference(q, k, v, sinks, causal, mask, window)
    np.testing.assert_allclose(np.asarray(o), want, atol=2e-6, rtol=1e-5, err_msg=at)
    np.testing.assert_allclose(np.asarray(g[3]), sink_grad_reference(want, p_sink, w),
                               atol=2e-5, rtol=1e-5, err_msg=f"{at}: d/dsinks")
    if mask is not None and mask.shape[2] == 1:            # row 1 sees no key
      assert np.all(np.asarray(o)[1] == 0.0), at
    without = sink_reference(q, k, v, np.full(HQ, -1e9), causal, mask, window)[0]
    assert not np.allclose(want, without, atol=1e-3), f"{at}: the sinks change nothing"
    for r in ref:
      for x, y, what in zip(g, r, ("q", "k", "v", "sinks")):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=2e-5, rtol=1e-5,
                                   err_msg=f"{at}: d/d{what} against softmax's")


@pytest.mark.parametrize("name", ["softmax", "local"])
def test_the_int8_caches_carry_the_sinks(name):
  """A quantized cache's step (the KV cache's int8 path; local's rolling window) with
  sinks, a prefill of T then one more token, equals the float64 formula over the keys
  and values the cache holds (each position's k and v rounded to int8 with its own
  scale, as `attention.quantize_int8` rounds them): the sink is in the quantized
  path's softmax, not lost there."""
  q, k, v, sinks, _ = inputs(1)
  opts = CASES[name]

  @jax.jit
  def run(q, k, v, s):
    st = attention.init_decode_state(name, batch=B, max_len=T, num_kv_heads=HKV,
                                     head_dim=D, cache_dtype="int8", **opts)
    out, st = attention.decode_step(st, q, k, v, sinks=s, **opts)
    return out, [attention.dequantize_int8(*attention.quantize_int8(x)) for x in (k, v)]

  out, (kd, vd) = run(q, k, v, sinks)
  want = sink_reference(q, kd, vd, sinks, True, None, opts.get("window"))[0]
  np.testing.assert_allclose(np.asarray(out), want, atol=2e-5, rtol=1e-5)


TINY = dict(vocab_size=11, d_model=16, num_heads=4, num_kv_heads=2, d_ff=24, num_layers=1,
            max_len=16)


def test_models_create_the_sinks_only_under_the_option_and_others_refuse_it():
  """sinks=True gives each self-attention a trainable (Hq,) `sinks` parameter, zeros
  (none without it); a variant whose kernel cannot carry a sink refuses the option in
  the config with its record's reason; a direct call with sinks=True (the config's
  switch, not the logits) is refused naming the variant."""
  for name in ("softmax", "flash", "local"):
    on = ModelConfig(**TINY, attention=name,
                     attention_options={name: {"sinks": True}}).validate()
    attn = nnx.eval_shape(lambda: build(on, rngs=nnx.Rngs(0))).decoder.blocks[0].attn
    assert attn.param_names == ("sinks",) and attn.p_sinks.shape == (TINY["num_heads"],)
    assert isinstance(attn.p_sinks, nnx.Param) and "sinks" not in dict(attn.options)
  off = nnx.eval_shape(lambda: build(ModelConfig(**TINY).validate(), rngs=nnx.Rngs(0)))
  assert off.decoder.blocks[0].attn.param_names == ()
  assert not hasattr(off.decoder.blocks[0].attn, "p_sinks")
  spec = attention.variant("softmax").params["sinks"]
  assert np.all(np.asarray(spec.init(jax.random.key(0), (4,), jnp.float32)) == 0.0)
  for name in ("sdpa", "ring", "fp8", "flash_pallas", "flash_mgpu"):
    why = attention.variant(name).refused_options["sinks"]
    with pytest.raises(ConfigError, match=f"'{name}' does not take option 'sinks'"):
      ModelConfig(**TINY, attention=name,
                  attention_options={name: {"sinks": True}}).validate()
    assert why
  q, k, v, *_ = inputs()
  for name in CASES:
    with pytest.raises(attention.AttentionError, match=f"{name}: sinks=True switches"):
      attention.get(name)(q, k, v, sinks=True)
    with pytest.raises(attention.AttentionError, match=r"shape \(Hq,\)"):
      attention.get(name)(q, k, v, sinks=jnp.zeros(HKV))
