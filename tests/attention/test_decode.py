"""The decode API beyond the contract: the int8 cache (its bound, its size, its
blocks), overflow, in-place updates, and the windowed caches of local and sparse.

That decoding equals the causal forward pass, token by token and after a chunked
prefill, for every variant that decodes, is tests/attention/test_contract.py."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from tests.attention.test_exact import make_inputs

SHAPE = (2, 9, 9, 4, 2, 8, 6)  # B, T, T, Hq, Hkv, D, Dv
# decode_step compiled as one program (as generation uses it): eagerly, each of its
# many small ops compiles on its own, which made these tests 2-3x slower
STEP = jax.jit(attention.decode_step)


@functools.lru_cache(maxsize=None)
def jitted_step(opts=()):
  """decode_step with the variant options `opts` ((key, value) pairs), compiled once."""
  return jax.jit(functools.partial(attention.decode_step, **dict(opts))) if opts else STEP


def run_decode(name, q, k, v, *, chunks, cache_dtype=None, capacity=None, **kw):
  """Feeds the sequence in `chunks` (sizes summing to T) through decode_step; `kw`
  (variant options) goes to the state's init and to every step."""
  B, T, Hq, D = q.shape
  state = attention.init_decode_state(name, batch=B, max_len=capacity or T,
                                      num_kv_heads=k.shape[2], head_dim=D,
                                      v_head_dim=v.shape[-1], dtype=q.dtype,
                                      cache_dtype=cache_dtype, **kw)
  step = jitted_step(tuple(sorted(kw.items())))
  outs, t = [], 0
  for n in chunks:
    o, state = step(state, q[:, t:t + n], k[:, t:t + n], v[:, t:t + n])
    outs.append(o)
    t += n
  return jnp.concatenate(outs, axis=1), state


@pytest.mark.parametrize("outlier", [1.0, 20.0])
def test_int8_cache_error_within_bound_and_4x_smaller(outlier):
  q, k, v = (jnp.asarray(x) for x in make_inputs(SHAPE, seed=3, dtype=np.float32))
  k = k.at[:, 2].multiply(outlier)  # an outlier token gets its own scale
  out8, st8 = run_decode("softmax", q, k, v, chunks=[1] * 9, cache_dtype="int8")
  out, st = run_decode("softmax", q, k, v, chunks=[1] * 9)
  err = float(jnp.max(jnp.abs(out8 - out)))
  bound = float(attention.int8_output_error_bound(q, k, v))
  assert 0 < err <= bound, (err, bound)
  if outlier == 1.0:
    assert err < 0.03  # small in absolute terms for unit-normal inputs
  assert st8.k.dtype == jnp.int8
  values = st.k.nbytes + st.v.nbytes
  assert values / (st8.k.nbytes + st8.v.nbytes) == 4.0
  # with one fp32 scale per token and head for k and for v: 4 (D + Dv) / (D + Dv + 8)
  assert st.nbytes / st8.nbytes == pytest.approx(4 * 14 / (14 + 8))
  sizes = dict(batch=1, max_len=16, num_kv_heads=2, head_dim=64)
  fp = attention.init_decode_state("softmax", **sizes).nbytes
  i8 = attention.init_decode_state("softmax", cache_dtype="int8", **sizes).nbytes
  assert fp / i8 == pytest.approx(3.76, abs=0.01)  # the figure in the docs, D = 64


# softmax and dot: the KV cache step's DotScore branch at two scales (flash decodes
# through softmax's own step: `tests.reference.decodes_as_softmax`)
@pytest.mark.parametrize("name", ["softmax", "dot"])
def test_int8_cache_blocks_equal_the_dequantised_cache(name):
  """A long int8 cache is read in blocks of positions (2304 = 3 x 768), each block
  dequantised where it is used: the result must equal attention over the whole
  dequantised cache, for a single token and for a chunk that straddles blocks."""
  from attention.core.kv_cache import position_block
  N, P = 2304, 2000   # capacity, positions prefilled
  assert position_block(N) == 768 and position_block(785) == 785
  B, Hq, Hkv, D = 1, 4, 2, 8
  q, k, v = jax.random.normal(jax.random.key(4), (3, B, N, Hq, D))
  k, v = k[:, :, :Hkv], v[:, :, :Hkv]
  st = attention.init_decode_state(name, batch=B, max_len=N, num_kv_heads=Hkv,
                                   head_dim=D, cache_dtype="int8")
  _, st = STEP(st, q[:, :P], k[:, :P], v[:, :P])
  deq = lambda x, s: jnp.swapaxes(attention.dequantize_int8(x, s), 1, 2)   # -> contract
  for T in (1, 7):   # positions P .. P + T - 1
    new = slice(P, P + T)
    out, st2 = STEP(st, q[:, new], k[:, new], v[:, new])
    kd, vd = deq(st2.k, st2.k_scale)[:, :P + T], deq(st2.v, st2.v_scale)[:, :P + T]
    ref = attention.get("dot" if name == "dot" else "softmax")(q[:, new], kd, vd,
                                                              causal=True)
    np.testing.assert_allclose(out, ref, atol=2e-5)


def test_quantize_roundtrip_bound():
  x = jax.random.normal(jax.random.PRNGKey(0), (4, 5, 64)) * 3
  qx, s = attention.quantize_int8(x)
  err = jnp.abs(attention.dequantize_int8(qx, s) - x)
  assert bool(jnp.all(err <= s[..., None] / 2 + 1e-7))
  zero_q, zero_s = attention.quantize_int8(jnp.zeros((2, 8)))
  assert bool(jnp.all(zero_q == 0)) and bool(jnp.all(zero_s == 0))


def test_overflow_raises_eagerly_and_poisons_under_jit():
  q, k, v = (jnp.asarray(x) for x in make_inputs(SHAPE, dtype=np.float32))
  state = attention.init_decode_state("softmax", batch=2, max_len=4, num_kv_heads=2,
                                      head_dim=8, v_head_dim=6)
  with pytest.raises(attention.AttentionError, match="overflow"):
    attention.decode_step(state, q[:, :5], k[:, :5], v[:, :5])  # statically too long
  step = jax.jit(attention.decode_step)
  out, state = step(state, q[:, :3], k[:, :3], v[:, :3])
  assert bool(jnp.all(jnp.isfinite(out)))
  with pytest.raises(attention.AttentionError, match="overflow"):
    attention.decode_step(state, q[:, 3:6], k[:, 3:6], v[:, 3:6])  # 3 + 3 > 4, eagerly
  out, _ = step(state, q[:, 3:6], k[:, 3:6], v[:, 3:6])  # under jit: poisoned, not silent
  assert bool(jnp.all(jnp.isnan(out)))


def test_decode_state_errors_are_specific():
  with pytest.raises(attention.AttentionError, match="cache_dtype"):
    attention.init_decode_state("softmax", batch=1, max_len=4, num_kv_heads=1, head_dim=4,
                                cache_dtype="int4")
  with pytest.raises(attention.AttentionError, match="valid names"):
    attention.init_decode_state("nope", batch=1, max_len=4, num_kv_heads=1, head_dim=4)


@pytest.mark.parametrize("cache", [None, "int8"])
def test_the_cache_is_updated_in_place_inside_a_decode_scan(cache):
  """The compiled scan of decode steps neither copies nor transposes the carried
  cache: each step writes its token in place and reads the cache once (a copy per
  step made a step at N=16384 ~4x slower on a CPU)."""
  B, N, H, D, S = 1, 96, 2, 8, 4
  st = attention.init_decode_state("softmax", batch=B, max_len=N, num_kv_heads=H,
                                   head_dim=D, cache_dtype=cache)

  def run(st, x):
    def body(st, x_t):
      out, st = attention.decode_step(st, x_t[:, None], x_t[:, None], x_t[:, None])
      return st, out
    return jax.lax.scan(body, st, jnp.moveaxis(x, 1, 0))

  x = jnp.ones((B, S, H, D))
  hlo = jax.jit(run, donate_argnums=0).lower(st, x).compile().as_text()
  shape = f"[{B},{H},{N},{D}]"
  bad = [l for l in hlo.splitlines()
         if "=" in l and shape in l.split("=", 1)[1][:40]
         and (" copy(" in l or " transpose(" in l)]
  assert not bad, bad


# ---- local (a rolling cache of the last w positions) and sparse (a KV cache under
# the pattern's mask) -------------------------------------------------------------------

# (variant, options, int8 too): the int8 cache once per kind of cache, the rolling one
# as it wraps and the pattern's KV cache (its values are quantised on write and
# dequantised on read whatever the window or pattern: two programs more per case)
WINDOWED = [("local", dict(window=3), True), ("local", dict(window=20), False),
            ("sparse", {}, False), ("sparse", dict(stride=3), False),
            ("sparse", dict(pattern="fixed", stride=4, c=2), True)]


@pytest.mark.parametrize("name, opts, int8", WINDOWED)
def test_local_and_sparse_decode_equal_their_causal_forward(name, opts, int8):
  """Token by token and in chunks, fp and (`int8`) int8: local's window wraps its
  rolling cache (w = 3 < T), and a window wider than the sequence caps it at max_len."""
  shape = (2, 13, 13, 4, 2, 8, 6)
  q, k, v = (jnp.asarray(x) for x in make_inputs(shape, seed=5, dtype=np.float32))
  ref = jax.jit(functools.partial(attention.get(name), causal=True, **opts))(q, k, v)
  # chunks of two sizes (6 and 1, each step shape compiled once per cache dtype): a
  # prefill, a token after a chunk, a chunk after a token, each past local's w = 3
  for chunks in ([1] * 13, [6, 1, 6]):
    out, st = run_decode(name, q, k, v, chunks=chunks, **opts)
    np.testing.assert_allclose(out, ref, atol=1e-5)
  assert st.capacity == (min(opts["window"], 13) if name == "local" else 13)
  if not int8:
    return
  out8, st8 = run_decode(name, q, k, v, chunks=[6, 1, 6], cache_dtype="int8", **opts)
  err = float(jnp.max(jnp.abs(out8 - ref)))
  assert st8.k.dtype == jnp.int8
  assert 0 < err <= float(attention.int8_output_error_bound(q, k, v)), err


def test_local_decode_state_is_the_window_and_a_capped_one_refuses_to_wrap():
  sizes = dict(batch=1, num_kv_heads=2, head_dim=8)
  st = attention.init_decode_state("local", max_len=4096, window=16, **sizes)
  assert st.k.shape == (1, 2, 16, 8)        # O(w) memory whatever max_len
  capped = attention.init_decode_state("local", max_len=4, window=16, **sizes)
  x = jnp.ones((1, 3, 2, 8))
  out, capped = attention.decode_step(capped, x, x, x, window=16)
  with pytest.raises(attention.AttentionError, match="max_len 4"):
    attention.decode_step(capped, x, x, x, window=16)    # 3 + 3 > 4 < w: would drop keys
  out, _ = jitted_step((("window", 16),))(capped, x, x, x)
  assert bool(jnp.all(jnp.isnan(out)))


def test_generation_and_beam_search_under_x64_as_without():
  """Generation (the KV cache's decode loop, sampling) and beam search run with
  jax_enable_x64 on and give the tokens they give with it off: Python ints and
  floats built in the loops become int64/float64 there, and a scan's carry must keep
  its type (a float64 score from the int64 step, a float64 jnp.zeros, were refused)."""
  from flax import nnx
  from models import ModelConfig, build, generate, translate
  tiny = dict(d_model=16, num_heads=2, d_ff=24, num_layers=1, max_len=12)
  lm = build(ModelConfig(vocab_size=11, num_kv_heads=1, **tiny), rngs=nnx.Rngs(0))
  s2s = build(ModelConfig(kind="encdec", vocab_size=5, **tiny), rngs=nnx.Rngs(1))
  prompt, src = jnp.array([[1, 2, 3], [4, 5, 6]]), jnp.array([[3, 4, 3, 0], [4, 4, 3, 2]])

  def both():
    toks = generate(lm, prompt, steps=5, key=jax.random.PRNGKey(0), mode="cache")
    beams, score = translate(s2s, src, max_len=4, beam_size=2)
    return np.asarray(toks), np.asarray(beams), np.asarray(score)

  plain = both()
  with jax.enable_x64(True):
    wide = both()
  for a, b in zip(plain, wide):
    np.testing.assert_array_equal(a, b)
  assert wide[2].dtype == np.float32
