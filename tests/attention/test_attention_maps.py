"""attention.implied_weights: for every variant, the weight matrix it applies to the
values, checked against the variant itself (weights @ v == output), rows summing to 1,
and for local and sparse, zero outside their pattern. Tiny shapes, eager mode."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from attention.core import weights as W

B, T, H, D = 1, 16, 2, 8


def qkv(seed=0, Hkv=H):
  """Unit normal q, k, v (NumPy's generator: jax.random would compile a program per
  shape)."""
  rng = np.random.default_rng(seed)
  return tuple(jnp.asarray(rng.standard_normal(s, np.float32))
               for s in ((B, T, H, D), (B, T, Hkv, D), (B, T, Hkv, 5)))


def params(name, Hkv=H):
  """The variant's parameters, made by its own ParamSpecs (as the models do), and its
  per-token inputs (Variant.inputs), random."""
  kw = {}
  v = attention.variant(name)
  for i, (p, spec) in enumerate(v.params.items()):
    if spec.when is not None:        # switched on by an option (sinks): off here
      continue
    kw[p] = spec.init(jax.random.PRNGKey(10 + i), spec.shape(H, D, T), jnp.float32)
  for i, (n, shape) in enumerate(v.input_shapes(B, T, H, Hkv, D).items()):
    kw[n] = jnp.asarray(np.random.default_rng(20 + i).standard_normal(shape, np.float32))
  return kw


OPTIONS = {"local": dict(window=4), "sparse": dict(pattern="strided", stride=4),
           "reformer": dict(chunk_size=4)}
CASES = [("softmax", True), ("additive", True), ("linear", True), ("linear", False),
         ("performer", True), ("local", True), ("sparse", True), ("reformer", True),
         ("linformer", False), ("gla", True), ("deltanet", True)]


def apply(w, v):
  """weights (B, Hq, Tq, Tk) @ v (B, Tk, Hkv, Dv), v's heads repeated over groups
  (NumPy, float64: no program compiled per op)."""
  w, v = np.asarray(w, np.float64), np.asarray(v, np.float64)
  v = np.repeat(v, w.shape[1] // v.shape[2], axis=2)
  return np.einsum("bhqk,bkhd->bqhd", w, v)


@pytest.mark.parametrize("name,causal", CASES)
def test_weights_reproduce_the_output_and_rows_sum_to_one(name, causal):
  q, k, v = qkv()
  opts = dict(name=name, causal=causal, **OPTIONS.get(name, {}))

  @jax.jit                            # one compilation per case (eager is slower)
  def both(q, k, v, p):
    return (W.implied_weights(q, k, **opts, **p),
            attention.get(name)(q, k, v, causal=causal, **OPTIONS.get(name, {}), **p))

  w, out = both(q, k, v, params(name))
  assert w.shape == (B, H, T, T) and w.dtype == jnp.float32
  w = np.asarray(w)
  np.testing.assert_allclose(apply(w, v), out, atol=2e-5, rtol=2e-5)
  # linformer mixes positions with signed weights; the gated family's are not
  # normalised (and deltanet's are signed)
  if name != "linformer" and attention.variant(name).family != "gated":
    assert float(w.min()) >= -1e-6
    sums = np.asarray(w.sum(-1))      # 1, or 0 for a query that may see no key
    np.testing.assert_allclose(sums, np.round(sums), atol=1e-4)   # (reformer's first
    assert (np.round(sums) == 1).mean() > 0.9                     # query: only itself)
  if causal:                          # nothing from the future
    assert float(np.abs(np.triu(w, 1)).max()) < 1e-6


def test_kernel_weights_are_the_normalised_feature_products():
  """linear's weights are φ(q)·φ(k) normalised, φ = elu + 1, written out here (NumPy,
  float64)."""
  q, k, _ = (np.asarray(x, np.float64) for x in qkv(1))
  phi = lambda x: np.where(x > 0, x + 1, np.exp(x))
  s = np.einsum("bqhd,bkhd->bhqk", phi(q), phi(k)) * np.tril(np.ones((T, T)))
  ref = s / (s.sum(-1, keepdims=True) + 1e-6)
  w = jax.jit(lambda q, k: W.implied_weights(q, k, name="linear", causal=True))(q, k)
  np.testing.assert_allclose(w, ref,
                             rtol=1e-5, atol=1e-6)


def test_patterns_of_local_and_sparse_are_visible():
  q, k, _ = qkv(2)
  w, ws = jax.jit(lambda q, k: (
      W.implied_weights(q, k, name="local", causal=True, window=4),
      W.implied_weights(q, k, name="sparse", causal=True, pattern="strided", stride=4)))(
          q, k)
  w, ws = np.asarray(w), np.asarray(ws)
  i, j = np.indices((T, T))
  assert (w[:, :, (j > i) | (j <= i - 4)] == 0).all()      # the causal window of 4
  assert (w[:, :, (j <= i) & (j > i - 4)] > 0).all()
  allowed = (j <= i) & ((i - j < 4) | ((i - j) % 4 == 0))  # Child et al.'s strided
  assert (ws[:, :, ~allowed] == 0).all() and (ws[:, :, allowed] > 0).all()


def test_gqa_and_an_unknown_name():
  q, k, v = qkv(3, Hkv=1)
  w, out = jax.jit(lambda q, k, v: (W.implied_weights(q, k, name="linear", causal=True),
                                    attention.get("linear")(q, k, v, causal=True)))(q, k, v)
  np.testing.assert_allclose(apply(w, v), out, atol=2e-5, rtol=2e-5)
  with pytest.raises(Exception, match="softmax"):
    W.implied_weights(q, k, name="nope")
