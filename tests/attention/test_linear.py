"""linear (three forms) and performer against float64 references of their definitions."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import attention
from attention import performer as perf
from tests.reference import expand, favor

SHAPES = {  # B, Tq, Tk, Hq, Hkv, D, Dv
    "gqa_dv": (2, 13, 13, 4, 2, 8, 5),
    "tq<tk": (1, 7, 11, 2, 1, 4, 4),
    "tq>tk": (1, 11, 7, 2, 2, 4, 4),
}
PHI = {"elu": lambda x: np.where(x > 0, x + 1, np.exp(x)), "relu": lambda x: np.maximum(x, 0)}


def inputs(shape, seed=0, dtype=np.float64):
  B, Tq, Tk, Hq, Hkv, D, Dv = shape
  r = np.random.default_rng(seed)
  return (r.normal(size=(B, Tq, Hq, D)).astype(dtype), r.normal(size=(B, Tk, Hkv, D)).astype(dtype),
          r.normal(size=(B, Tk, Hkv, Dv)).astype(dtype))


def kernel_reference(fq, fk, v, causal, kmask=None, eps=1e-6, allowed=None):
  """out_i = Σ_j a_ij v_j / (Σ_j a_ij + eps), a_ij = φ(q_i)·φ(k_j), over allowed j
  (causal, kmask (B, Tk) and allowed (B, Tq, Tk))."""
  Hq = fq.shape[2]
  fk, v = expand(fk, Hq), expand(v, Hq)
  a = np.einsum("bihf,bjhf->bhij", fq, fk)
  Tq, Tk = a.shape[-2:]
  if causal:
    a = a * (np.arange(Tk)[None, :] <= np.arange(Tq)[:, None] + Tk - Tq)
  if kmask is not None:
    a = a * kmask[:, None, None, :]
  if allowed is not None:
    a = a * allowed[:, None]
  return np.einsum("bhij,bjhd->bihd", a, v) / (a.sum(-1).transpose(0, 2, 1)[..., None] + eps)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("fm", ["elu", "relu"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape_name", list(SHAPES))
def test_linear_matches_reference(shape_name, causal, fm):
  q, k, v = inputs(SHAPES[shape_name])
  B, Tk = q.shape[0], k.shape[1]
  kmask = np.ones((B, Tk), bool)
  kmask[0, -2:] = False
  out = attention.get("linear")(q, k, v, causal=causal, feature_map=fm, chunk_size=4,
                                mask=kmask[:, None, None, :])
  ref = kernel_reference(PHI[fm](q), PHI[fm](k), v, causal, kmask)
  np.testing.assert_allclose(out, ref, atol=1e-12)


@pytest.mark.usefixtures("x64")
def test_fully_masked_batch_and_unseen_queries_give_zeros():
  q, k, v = inputs(SHAPES["tq>tk"])
  out = np.asarray(attention.get("linear")(q, k, v, causal=True))
  assert np.all(out[:, :4] == 0)  # Tq - Tk = 4 queries see no key
  out = np.asarray(attention.get("linear")(q, k, v, mask=np.zeros((1, 1, 1, 7), bool)))
  assert np.all(out == 0) and np.all(np.isfinite(out))


@pytest.mark.usefixtures("x64")
def test_parallel_chunked_and_rnn_forms_agree():
  q, k, v = inputs((2, 13, 13, 2, 2, 4, 3))
  f = attention.get("linear")
  ref = f(q, k, v, causal=True, chunk_size=13)  # one chunk: the masked quadratic form
  for c in (1, 4, 5, 64):
    np.testing.assert_allclose(f(q, k, v, causal=True, chunk_size=c), ref, atol=1e-12)
  # the non-causal parallel form is the last row of the causal form
  last = f(q, k, v)[:, -1]
  np.testing.assert_allclose(last, ref[:, -1], atol=1e-12)


@pytest.mark.usefixtures("x64")
def test_the_gpu_unrolled_chunk_scan_is_the_same_function(monkeypatch):
  """On a GPU the chunk scan is unrolled (attention.core.common.scan_unroll, against the
  host sync of every loop trip there): forced here, output and gradients equal the
  scan's."""
  from attention.core import common
  q, k, v = (jnp.asarray(x) for x in inputs((2, 13, 13, 2, 2, 4, 3)))
  g = lambda q, k, v: jax.value_and_grad(lambda q, k, v: jnp.sum(jnp.sin(
      attention.get("linear")(q, k, v, causal=True, chunk_size=4))), (0, 1, 2))(q, k, v)
  ref = g(q, k, v)
  monkeypatch.setattr(common, "scan_unroll", lambda n: n)
  assert common.scan_unroll(4) == 4
  for a, b in zip(jax.tree.leaves(g(q, k, v)), jax.tree.leaves(ref)):
    np.testing.assert_allclose(a, b, atol=1e-12)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("shape_name, kw", [
    ("gqa_dv", {"chunk_size": 4, "mask": True}), ("gqa_dv", {"chunk_size": 3, "positions": "rope"}),
    ("tq<tk", {"chunk_size": 4, "mask": True}), ("tq>tk", {"chunk_size": 3, "positions": "rope"})])
def test_the_chunk_parallel_form_is_the_scan_function(shape_name, kw):
  """Causal linear with every chunk at once (the GPU's form, the `chunk_parallel` option)
  equals the chunk scan, output and gradients: GQA and Dv != D, Tq < Tk (an initial
  state) and Tq > Tk (queries with no key), a key-padding mask, RoPE (rotated
  numerator features), chunks that divide T or not; with Tq == Tk, a decode prefill's
  new state, continued by one more token."""
  from attention import linear as lin
  q, k, v = (jnp.asarray(x) for x in inputs(SHAPES[shape_name]))
  if kw.pop("mask", False):
    kmask = np.ones((q.shape[0], k.shape[1]), bool)
    kmask[0, -2:] = False
    kw["mask"] = kmask[:, None, None, :]

  def forms(q, k, v, parallel):
    kw1 = dict(kw, chunk_parallel=parallel)
    out, pull = jax.vjp(lambda q, k, v: attention.get("linear")(q, k, v, causal=True, **kw1),
                        q, k, v)
    res = [out, pull(jnp.cos(out))]
    if q.shape[1] == k.shape[1]:    # a prefill of all but the last token, then one step
      st = lin.init_linear_state("linear", batch=q.shape[0], num_kv_heads=k.shape[2],
                                 head_dim=q.shape[3], v_head_dim=v.shape[3], dtype=q.dtype)
      kw2 = {key: val for key, val in kw1.items() if key != "mask"}
      pre, st = lin.linear_step(st, q[:, :-1], k[:, :-1], v[:, :-1], **kw2)
      res += [pre, st.S, st.Z, lin.linear_step(st, q[:, -1:], k[:, -1:], v[:, -1:], **kw2)[0]]
    return res

  assert lin.chunk_parallel() == (jax.default_backend() == "gpu")   # the default: GPUs only
  assert lin.chunk_parallel(True) and not lin.chunk_parallel(False)
  assert "chunk_parallel" in attention.variant("linear").kernel_options
  ref = jax.jit(functools.partial(forms, parallel=False))(q, k, v)
  new = jax.jit(functools.partial(forms, parallel=True))(q, k, v)
  for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(ref), strict=True):
    np.testing.assert_allclose(a, b, atol=1e-12)


def test_scan_unroll_is_one_off_gpus():
  from attention.core import common
  assert jax.default_backend() != "gpu" or common.scan_unroll(100) == common.MAX_GPU_UNROLL
  assert jax.default_backend() == "gpu" or common.scan_unroll(13) == 1


def test_linear_refuses_masks_that_do_not_factor():
  q, k, v = inputs(SHAPES["gqa_dv"], dtype=np.float32)
  with pytest.raises(attention.AttentionError, match="key-padding"):
    attention.get("linear")(q, k, v, mask=np.ones((13, 13), bool))
  with pytest.raises(attention.AttentionError, match="elu"):
    attention.get("linear")(q, k, v, feature_map="softplus")


@pytest.mark.usefixtures("x64")
def test_linear_gradients():
  q, k, v = (jnp.asarray(x) for x in inputs((1, 6, 6, 2, 1, 3, 2)))
  f = jax.jit(lambda q, k, v: attention.get("linear")(q, k, v, causal=True, chunk_size=4))
  check_grads(f, (q, k, v), order=1, modes=["rev"], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("parallel, share", [(False, 16), (True, 8)])
def test_causal_chunked_memory_is_linear(parallel, share):
  """No (T, D, Dv) tensor: each token added costs far less than D·Dv floats of
  temporaries. Measured as the growth from T = 4096 to 8192, so that the constant the
  GPU's unrolled chunk scan adds (32 trips' intermediates: 10.6 MB at T = 4096 on an
  H100, 2026-11-26) is not counted as per-token memory. The scan: about 0.8 MB per
  1k tokens on the CPU, rolled or unrolled as the GPU runs it (checked once by hand:
  compiling the unrolled form here costs 6 s of the suite), under 1/16 of a (T, D, Dv)
  float32 tensor (16.8 MB). Every chunk at once (the `chunk_parallel` option, the GPU's
  form): the chunks' entering states, T/64 · D · Dv floats each, 1.0 MB per 1k tokens
  on the CPU (2026-11-27), under 1/8."""
  T, D = 4096, 64
  f = jax.jit(lambda q: attention.get("linear")(q, q, q, causal=True, chunk_parallel=parallel))
  temp = [f.lower(jnp.ones((1, t, 1, D))).compile().memory_analysis().temp_size_in_bytes
          for t in (T, 2 * T)]
  assert temp[1] - temp[0] < T * D * D * 4 / share, temp


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("causal", [False, True])
def test_performer_is_exact_kernel_attention_with_its_features(causal):
  q, k, v = inputs(SHAPES["gqa_dv"])
  P = np.asarray(perf.orthogonal_features(jax.random.PRNGKey(0), 20, 8, jnp.float64))
  kmask = np.ones((2, 13), bool)
  kmask[1, :3] = False
  out = attention.get("performer")(q, k, v, causal=causal, projection=P, chunk_size=4,
                                   mask=kmask[:, None, None, :])
  ref = kernel_reference(favor(q, P, True), favor(k, P, False), v, causal, kmask)
  np.testing.assert_allclose(out, ref, atol=1e-10)


def test_performer_approximates_softmax_and_is_deterministic():
  q, k, v = (0.5 * x for x in inputs((1, 64, 64, 1, 1, 16, 16), dtype=np.float32))
  exact = attention.get("softmax")(q, k, v)
  P1 = perf.orthogonal_features(jax.random.PRNGKey(0), 4096, 16)
  out = attention.get("performer")(q, k, v, projection=P1)
  assert float(jnp.abs(out - exact).max()) < 0.05
  again = attention.get("performer")(q, k, v, projection=perf.orthogonal_features(
      jax.random.PRNGKey(0), 4096, 16))
  assert bool(jnp.all(out == again))
  other = attention.get("performer")(q, k, v, projection=perf.orthogonal_features(
      jax.random.PRNGKey(1), 4096, 16))
  assert not bool(jnp.all(out == other))
  rows = np.asarray(P1[:16])  # one orthogonal block
  gram = rows @ rows.T
  np.testing.assert_allclose(gram - np.diag(np.diag(gram)), 0, atol=1e-3)


@pytest.mark.parametrize("name", ["linear", "performer"])
def test_jit_and_vmap(name):
  q, k, v = inputs(SHAPES["gqa_dv"], dtype=np.float32)
  kw = {"projection": perf.orthogonal_features(jax.random.PRNGKey(0), 16, 8)} \
      if name == "performer" else {}
  f = lambda q, k, v: attention.get(name)(q, k, v, causal=True, **kw)
  eager = f(q, k, v)
  np.testing.assert_allclose(jax.jit(f)(q, k, v), eager, atol=1e-5)
  both = jax.jit(jax.vmap(f))(*(np.stack([x, x]) for x in (q, k, v)))
  np.testing.assert_allclose(both[1], eager, atol=1e-5)


# Packed rows (B = 2, T = 13; chunks of 4): starts at a chunk boundary (4) and at 8 (a
# masked key: the reset wins), inside chunks (2, 10, 11), a one-token segment and a
# masked padding segment (id 0) at the end.
SEG = np.array([[1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3],
                [5, 5, 7, 7, 7, 7, 7, 7, 7, 7, 9, 0, 0]])
SEG_KMASK = np.ones(SEG.shape, bool)
SEG_KMASK[0, 8] = SEG_KMASK[1, 5] = False
SEG_KMASK[1, 11:] = False
SEG_CASES = [("linear", True, None), ("linear", False, None), ("linear", True, "alibi"),
             ("linear", False, "alibi"), ("performer", True, None),
             ("performer", False, None)]


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("name, causal, positions", SEG_CASES)
def test_segment_ids_equal_each_segment_alone(name, causal, positions):
  """A packed batch and each of its segments run alone (a row each, key padding past its
  end) in ONE call: outputs and gradients w.r.t. q, k, v equal at float64 rounding
  ((S, Z) reset at each start: the causal chunked scan, the non-causal forward and
  backward scans; with ALiBi, positions restart per segment); they equal the float64
  definition (the segment mask on φ(q)·φ(k), numerator and normaliser); and passing
  the ids as two arrays (the segment mask on the implied weights, O(T²)) agrees."""
  from tests.reference import from_alone, segments_alone, to_alone
  B, T, Hq, Hkv, D, Dv = 2, 13, 4, 2, 4, 3
  q, k, v = inputs((B, T, T, Hq, Hkv, D, Dv), seed=3)
  take, real = segments_alone(SEG)
  R = np.random.default_rng(9).normal(size=(B, T, Hq, Dv))
  both = lambda x, a: np.concatenate([x, a])
  args = [both(x, to_alone(x, take, real)) for x in (q, k, v, R)]
  seg = both(SEG, np.where(real, 1, 0))
  kmask = both(SEG_KMASK, to_alone(SEG_KMASK, take, real) & real)
  restart = np.concatenate([np.zeros((B, 1), int), (SEG[:, 1:] != SEG[:, :-1])], 1)
  pos = np.arange(T) - np.maximum.accumulate(np.where(restart, np.arange(T), 0), axis=1)
  pos = both(pos, np.broadcast_to(np.arange(T), real.shape))
  kw = dict(causal=causal, mask=kmask[:, None, None, :], chunk_size=4)
  if positions:
    kw.update(positions=positions, q_pos=pos, k_pos=pos)
  if name == "performer":
    kw["projection"] = P = np.asarray(perf.orthogonal_features(jax.random.PRNGKey(0), 6, D,
                                                               jnp.float64))
  fn = attention.get(name)

  @jax.jit
  def run(q, k, v, R):
    def loss(q, k, v):
      o = fn(q, k, v, q_seg=seg, **kw)
      return jnp.sum(o * R), o
    grads, out = jax.grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)
    return out, grads, fn(q, k, v, q_seg=seg, k_seg=seg + 0, **kw)

  out, grads, quadratic = run(*args)
  split = lambda x: (np.asarray(x[:B]), from_alone(x[B:], take, real, B))
  got, alone = split(out)
  np.testing.assert_allclose(got, alone, atol=1e-12)
  np.testing.assert_allclose(quadratic, out, atol=1e-12)
  for g in grads:
    np.testing.assert_allclose(*split(g), atol=1e-11)
  if not positions:
    phi = (lambda x, query: favor(x, P, query)) if name == "performer" else \
        (lambda x, query: PHI["elu"](x))
    allowed = SEG[:, :, None] == SEG[:, None, :]
    np.testing.assert_allclose(got, kernel_reference(phi(q, True), phi(k, False), v, causal,
                                                     SEG_KMASK, allowed=allowed), atol=1e-12)


@pytest.mark.usefixtures("x64")
def test_segment_ids_in_cross_attention_and_refusals():
  """Cross-attention (Tq != Tk) with ids on both sides: the segment mask on the implied
  weights, equal to the float64 definition and to `implied_weights` @ v; ids that a
  reset cannot honour (an id recurring after another) give a NaN row; a decode step
  (one sequence per row) refuses ids."""
  q, k, v = inputs((2, 7, 11, 2, 1, 4, 4), seed=5)
  qs = np.array([[1, 1, 2, 2, 2, 3, 0], [4, 4, 4, 4, 6, 6, 6]])
  ks = np.array([[1, 1, 1, 2, 2, 2, 2, 3, 0, 0, 0], [6, 6, 6, 4, 4, 4, 4, 4, 4, 5, 5]])
  f = jax.jit(lambda q, k, v, qs, ks: (
      attention.get("linear")(q, k, v, q_seg=qs, k_seg=ks),
      attention.implied_weights(q, k, name="linear", q_seg=qs, k_seg=ks)))
  out, w = f(q, k, v, qs, ks)
  allowed = qs[:, :, None] == ks[:, None, :]
  np.testing.assert_allclose(out, kernel_reference(PHI["elu"](q), PHI["elu"](k), v, False,
                                                   allowed=allowed), atol=1e-12)
  np.testing.assert_allclose(np.einsum("bhqk,bkhd->bqhd", w, expand(v, 2)), out, atol=1e-12)
  sq = np.array([[1, 1, 2, 2, 1, 1, 1], [1, 1, 2, 2, 3, 3, 3]])   # row 0: id 1 recurs
  out = attention.get("linear")(q, k[:, :7], v[:, :7], causal=True, q_seg=sq)
  assert np.all(np.isnan(out[0])) and np.all(np.isfinite(out[1]))
  st = attention.init_decode_state("linear", batch=2, max_len=None, num_kv_heads=1,
                                   head_dim=4)
  with pytest.raises(attention.AttentionError, match="segment ids.*one sequence per batch row"):
    attention.decode_step(st, q[:, :1], k[:, :1], v[:, :1], q_seg=qs[:, :1])
