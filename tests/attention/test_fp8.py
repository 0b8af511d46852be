"""`fp8`: FP8 attention with incoherent processing, and the fp8 KV cache.

Small shapes: each distinct call compiles once (about a second on 2 cores).
"""
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import attention
from attention import fp8 as F
from tests import reference
from tests.attention.test_decode import SHAPE
from tests.attention.test_exact import make_inputs, make_mask

fp8 = attention.get("fp8")
# one compilation per static configuration (eager calls would compile op by op)
fp8j = jax.jit(fp8, static_argnames=("causal", "granularity", "hadamard", "quantize"))
rotate = jax.jit(F.rotate, static_argnames="seed")
step = jax.jit(attention.decode_step, static_argnames="hadamard")


def decode(name, q, k, v, prefill, cache_dtype=None, **kw):
  """`prefill` positions in one step, then one token per step (two compilations)."""
  B, T, Hq, D = q.shape
  st = attention.init_decode_state(name, batch=B, max_len=T, num_kv_heads=k.shape[2],
                                   head_dim=D, v_head_dim=v.shape[-1],
                                   cache_dtype=cache_dtype)
  outs = []
  for a, b in [(0, prefill)] + [(t, t + 1) for t in range(prefill, T)]:
    o, st = step(st, q[:, a:b], k[:, a:b], v[:, a:b], **kw)
    outs.append(o)
  return jnp.concatenate(outs, axis=1), st


def _sylvester(n):
  h = np.ones((1, 1))
  while h.shape[0] < n:
    h = np.kron(np.array([[1, 1], [1, -1]]), h)
  return h


def test_fwht_is_sylvesters_hadamard_and_rotation_preserves_qk():
  """fwht(x) = x H; rotate is orthogonal (D = 48 is zero-padded to 64), so q·k is
  unchanged, while one outlier channel is spread over every channel."""
  np.testing.assert_array_equal(F.fwht(jnp.eye(16)), _sylvester(16))
  rng = np.random.default_rng(0)
  q, k = rng.standard_normal((2, 5, 48)).astype(np.float32)
  rq, rk = rotate(q, seed=3), rotate(k, seed=3)
  assert rq.shape == (5, 64)
  np.testing.assert_allclose(rq @ rk.T, q @ k.T, atol=2e-5)
  np.testing.assert_allclose(jnp.linalg.norm(rq, axis=-1), np.linalg.norm(q, axis=-1),
                             rtol=1e-6)
  spike = rotate(np.zeros((5, 48), np.float32) + 10.0 * (np.arange(48) == 7))
  np.testing.assert_allclose(jnp.abs(spike), 10 / 8, rtol=1e-6)  # 10 / sqrt(64) each
  assert not np.allclose(rotate(q, seed=4), rq)   # the seed picks the signs
  with pytest.raises(attention.AttentionError, match="power of two"):
    F.fwht(jnp.ones((3, 12)))


def test_e4m3_rounding_equals_ml_dtypes_casts():
  """round_e4m3 (under jit, as XLA computes it) gives exactly the float8_e4m3fn values
  of ml_dtypes' round-to-nearest-even cast, midpoints included, and saturates at 448
  where a bare cast gives NaN."""
  grid = np.asarray(np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn),
                    np.float32)
  grid = np.sort(grid[np.isfinite(grid)])
  mids = (grid[1:] + grid[:-1]) / 2                     # ties: to even
  rng = np.random.default_rng(1)
  x = np.concatenate([grid, mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf),
                      rng.standard_normal(4000).astype(np.float32) * 30,
                      rng.standard_normal(1000).astype(np.float32) * 1e-2]).astype(np.float32)
  got = np.asarray(jax.jit(attention.core.quantize.round_e4m3)(x), np.float32)
  np.testing.assert_array_equal(got, x.astype(ml_dtypes.float8_e4m3fn).astype(np.float32))
  sat = np.asarray(jax.jit(attention.core.quantize.round_e4m3)(np.float32([500.0, -1e4])), np.float32)
  np.testing.assert_array_equal(sat, [448.0, -448.0])


def test_fp8_values_are_those_of_fp8_arithmetic():
  """One 16 x 16 tile, per-block scales: the output equals FA3's algorithm written out
  with numpy float8 casts and float64 products (e4m3 x e4m3 products and their short
  sums are exact in float32)."""
  rng = np.random.default_rng(2)
  q, k, v = (rng.standard_normal((1, 16, 1, 8)).astype(np.float32) * 3 for _ in range(3))
  out = np.asarray(fp8j(q, k, v, granularity="block"))
  e4m3 = lambda x: np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
  s = {n: np.abs(x).max() / 448 for n, x in (("q", q), ("k", k), ("v", v))}
  q8, k8, v8 = e4m3(q[0, :, 0] / s["q"]), e4m3(k[0, :, 0] / s["k"]), e4m3(v[0, :, 0] / s["v"])
  z = (q8 @ k8.T) * s["q"] * s["k"] / np.sqrt(8)
  p = np.exp(z - z.max(-1, keepdims=True))
  want = (e4m3(256 * p) @ v8) * s["v"] / 256 / p.sum(-1, keepdims=True)
  np.testing.assert_allclose(out[0, :, 0], want, rtol=2e-5, atol=1e-6)


def _draw(outliers, shape, seed):
  """FA3's test distribution: N(0, 1) + N(0, 100) * Bernoulli(0.001) per entry."""
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((3, *shape))
  if outliers:
    x = x + rng.normal(0, 10, x.shape) * (rng.random(x.shape) < 1e-3)
  return x


def test_error_ordering_on_outliers():
  """With FA3's outlier distribution, Hadamard + block scales beat per-tensor FP8,
  which is an order of magnitude worse than bf16; without outliers, the rotation
  changes little. (N = 512, D = 64: 32 outliers per tensor.)"""
  f = lambda q, k, v, g, h: fp8j(q, k, v, granularity=g, hadamard=h)
  bf16 = jax.jit(lambda q, k, v: jax.nn.dot_product_attention(
      *(x.astype(jnp.bfloat16) for x in (q, k, v))).astype(jnp.float32))
  err = {}
  for outliers in (True, False):
    x = _draw(outliers, (1, 512, 1, 64), seed=5)
    ref = reference.attention("softmax", *x)
    rmse = lambda o: float(np.sqrt(np.mean((np.asarray(o, np.float64) - ref) ** 2)))
    x32 = [jnp.asarray(a, jnp.float32) for a in x]
    err[outliers] = dict(bf16=rmse(bf16(*x32)), tensor=rmse(f(*x32, "tensor", False)),
                         had=rmse(f(*x32, "block", True)))
  o, n = err[True], err[False]
  assert o["tensor"] > 1.4 * o["had"] > 1.4 * 5 * o["bf16"], o
  assert n["had"] == pytest.approx(n["tensor"], rel=0.15), n
  assert 4 * n["bf16"] < n["had"] < 0.1 * 0.053, n   # 0.053: rms of the output


def test_contract_masks_empty_rows_gqa_and_refusals():
  """Token scales under the whole contract: causal + padding mask with a fully masked
  row (zeros), GQA equal to the repeated-heads MHA call, bf16 in -> bf16 out."""
  shape = (1, 5, 9, 4, 2, 8, 8)
  q, k, v = (jnp.asarray(x, jnp.float32) for x in make_inputs(shape))
  mask = jnp.asarray(make_mask("padding+causal", shape))
  out = fp8j(q, k, v, causal=True, mask=mask, hadamard=True)
  ref = reference.attention("softmax", q, k, v,
                            causal=True, mask=np.asarray(mask), scale=None)
  np.testing.assert_allclose(out, ref, atol=0.1)
  assert float(jnp.max(jnp.abs(out - ref))) > 1e-4          # it does round
  np.testing.assert_array_equal(out[:, 0], 0.0)             # the row with no allowed key
  rep = lambda x: jnp.repeat(x, 2, axis=2)
  np.testing.assert_array_equal(
      fp8j(q, rep(k), rep(v), causal=True, mask=mask, hadamard=True), out)
  assert jax.eval_shape(fp8, q.astype(jnp.bfloat16), k, v).dtype == jnp.bfloat16
  refused = [(dict(granularity="block", causal=True), "granularity='token'"),
             (dict(granularity="tensor", mask=mask), "granularity='token'"),
             (dict(granularity="row"), "granularity must be one of"),
             # a shared scale would let one packed segment round another
             (dict(granularity="block", q_seg=np.ones((1, q.shape[1]), np.int32),
                   k_seg=np.ones((1, k.shape[1]), np.int32)),
              "segment ids with granularity='block'.*spans segments"),
             (dict(quantize="qx"), "subset of 'qkvp'")]
  for kw, msg in refused:   # raised while tracing: nothing is compiled
    with pytest.raises(attention.AttentionError, match=msg):
      jax.eval_shape(lambda q, k, v: fp8(q, k, v, **kw), q, k, v)


def test_backward_is_exact_attentions():
  """Straight-through: the gradient is flash's (exact attention's) at the inputs."""
  q, k, v = (jnp.asarray(x, jnp.float32) for x in make_inputs((1, 6, 6, 2, 1, 8, 8)))
  w = jnp.asarray(np.random.default_rng(6).standard_normal(q.shape), jnp.float32)
  g = lambda f: jax.jit(jax.grad(lambda q, k, v: (f(q, k, v, causal=True) * w).sum(),
                                 (0, 1, 2)))(q, k, v)
  for a, b in zip(g(fp8), g(attention.get("flash"))):
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_fp8_cache_decode_against_the_float_cache():
  """The fp8 cache: e4m3 storage with per-(batch, head, position) scales, the same
  bytes as int8; the decoded output stays within the rigorous bound of the float
  cache's and equals attention over the dequantised cache."""
  q, k, v = (jnp.asarray(x) for x in make_inputs(SHAPE, seed=3, dtype=np.float32))
  out8, st8 = decode("softmax", q, k, v, 5, cache_dtype="fp8")
  out, st = decode("softmax", q, k, v, 5)
  err = float(jnp.max(jnp.abs(out8 - out)))
  assert 0 < err <= float(attention.fp8_output_error_bound(q, k, v)), err
  assert err < 0.1 and float(jnp.sqrt(jnp.mean((out8 - out) ** 2))) < 0.02
  assert st8.k.dtype == st8.v.dtype == jnp.float8_e4m3fn and st8.k_scale.dtype == jnp.float32
  sizes = dict(batch=1, max_len=16, num_kv_heads=2, head_dim=64)
  i8 = attention.init_decode_state("softmax", cache_dtype="int8", **sizes)
  assert attention.init_decode_state("softmax", cache_dtype="fp8", **sizes).nbytes == i8.nbytes
  deq = lambda x, s: jnp.swapaxes(attention.dequantize_fp8(x, s), 1, 2)
  ref = jax.jit(attention.get("softmax"), static_argnames="causal")(
      q, deq(st8.k, st8.k_scale), deq(st8.v, st8.v_scale), causal=True)
  np.testing.assert_allclose(out8, ref, atol=2e-6)
  x = k * jnp.float32(7.0)
  qx, s = attention.quantize_fp8(x)
  assert bool(jnp.all(jnp.abs(attention.dequantize_fp8(qx, s) - x)
                      <= attention.core.quantize.fp8_rounding_bound(x, s)))


def test_fp8_variant_decode_equals_its_causal_forward():
  """decode_step through the fp8 variant (fp8 cache) equals fp8's causal forward pass
  on the dequantised keys and values: token scales make each position's rounding
  independent of the others."""
  q, k, v = (jnp.asarray(x) for x in make_inputs(SHAPE, seed=4, dtype=np.float32))
  out, st = decode("fp8", q, k, v, 5, cache_dtype="fp8", hadamard=True)
  deq = lambda x, s: jnp.swapaxes(attention.dequantize_fp8(x, s), 1, 2)
  ref = fp8j(q, deq(st.k, st.k_scale), deq(st.v, st.v_scale), causal=True, hadamard=True)
  np.testing.assert_allclose(out, ref, atol=1e-6)
  assert int(st.pos) == 9
