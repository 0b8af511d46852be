"""`local` (sliding window) and `sparse` (Child et al. 2019) against dense references.

The references build each variant's boolean (Tq, Tk) pattern with NumPy index
arithmetic, written from the definitions in the module docstrings and independent
of the blocked implementations, and run a textbook float64 masked softmax.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
import attention.local  # noqa: F401  (registers 'local')
import attention.sparse  # noqa: F401  (registers 'sparse')
from attention import AttentionError
from tests import reference

local_fn = attention.local.local
sparse_fn = attention.sparse.sparse


# ---- independent dense patterns -----------------------------------------------

def local_pattern(Tq, Tk, w, causal):
  """(Tq, Tk) bool: p = i + Tk - Tq; causal p - w < j <= p, else |j - p| <= w // 2."""
  p = np.arange(Tq)[:, None] + (Tk - Tq)
  j = np.arange(Tk)[None, :]
  if causal:
    return (j <= p) & (j > p - w)
  return np.abs(j - p) <= w // 2


def sparse_pattern(N, pattern, l, c, causal):
  """(N, N) bool of Child et al.'s strided / fixed pattern (merged heads)."""
  i = np.arange(N)[:, None]
  j = np.arange(N)[None, :]
  if pattern == "strided":
    if causal:
      a = (j <= i) & (((i - j) < l) | ((i - j) % l == 0))
    else:
      a = (np.abs(i - j) < l) | ((i - j) % l == 0)
  else:
    a = (j // l == i // l) | (j % l >= l - c)
    if causal:
      a &= j <= i
  return a


def dense_ref(q, k, v, pattern, mask):
  """float64 masked softmax attention with allowed = pattern & mask."""
  B, Tq, Hq, _ = q.shape
  allowed = np.broadcast_to(pattern, (B, Hq) + pattern.shape)
  if mask is not None:
    allowed = allowed & np.broadcast_to(mask, allowed.shape)
  return reference.attention("softmax", q, k, v, mask=allowed)


def make_inputs(shape, seed=0):
  B, Tq, Tk, Hq, Hkv, D, Dv = shape
  rng = np.random.default_rng(seed)
  return (rng.normal(size=(B, Tq, Hq, D)), rng.normal(size=(B, Tk, Hkv, D)),
          rng.normal(size=(B, Tk, Hkv, Dv)))


def make_key_mask(shape, seed=1):
  """(B, Hq, 1, Tk) key-padding mask: random holes, padded tail, and head 0 of
  batch 0 fully masked (its rows must come back as exact zeros)."""
  B, Tq, Tk, Hq = shape[:4]
  rng = np.random.default_rng(seed)
  m = rng.random((B, Hq, 1, Tk)) < 0.8
  m[..., -3:] = False
  m[0, 0] = False
  return m


# ---- local ----------------------------------------------------------------------

LOCAL_SHAPES = {  # B, Tq, Tk, Hq, Hkv, D, Dv
    "mha_odd": (2, 37, 37, 2, 2, 8, 8),
    "gqa": (1, 45, 45, 4, 2, 8, 6),
    "mqa_tq<tk": (2, 21, 50, 3, 1, 8, 8),
    "tq>tk": (1, 40, 23, 2, 1, 4, 4),
}


# (shape, window, causal, masked): each compile costs ~0.5 s on 2 cores, so the
# full product runs for one shape and the others take the combinations that matter.
FF, FT, TF, TT = (False, False), (False, True), (True, False), (True, True)
LOCAL_CASES = ([("mha_odd", 6) + cm for cm in (FF, FT, TF, TT)]
               + [("mha_odd", 1) + cm for cm in (FT, TT)]
               + [("mha_odd", 17) + cm for cm in (FF, TT)]
               + [("gqa", 6) + cm for cm in (FT, TF)]
               + [("mqa_tq<tk", 17) + cm for cm in (FT, TT)]
               + [("tq>tk", 6) + cm for cm in (FF, TT)])


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("shape_name", list(LOCAL_SHAPES))
def test_local_matches_dense_reference(shape_name):
  """The shape's cases of LOCAL_CASES (window, causal, masked) in one compiled program
  (one program per case cost ~40% more CPU)."""
  shape = LOCAL_SHAPES[shape_name]
  cases = [c[1:] for c in LOCAL_CASES if c[0] == shape_name]
  q, k, v = make_inputs(shape)
  key_mask = make_key_mask(shape)
  outs = jax.jit(lambda q, k, v, key_mask: [
      local_fn(q, k, v, mask=key_mask if masked else None, window=window, causal=causal)
      for window, causal, masked in cases])(q, k, v, key_mask)
  for (window, causal, masked), out in zip(cases, outs, strict=True):
    out, msg = np.asarray(out), f"window={window} causal={causal} masked={masked}"
    mask = key_mask if masked else None
    ref = dense_ref(q, k, v, local_pattern(shape[1], shape[2], window, causal), mask)
    assert out.shape == ref.shape and out.dtype == np.float64, msg
    np.testing.assert_allclose(out, ref, atol=1e-10, rtol=1e-10, err_msg=msg)
    if masked:
      assert np.all(out[0, :, 0] == 0.0), msg


# ---- sparse ---------------------------------------------------------------------

SPARSE_CASES = {  # name: (shape, pattern, stride, c)
    "strided_default_stride_odd": ((2, 37, 37, 2, 2, 8, 8), "strided", None, None),
    "strided_gqa_multiple": ((1, 20, 20, 4, 2, 8, 6), "strided", 5, None),
    "fixed_default": ((2, 37, 37, 2, 1, 8, 8), "fixed", None, None),
    "fixed_gqa_c3": ((1, 29, 29, 4, 2, 8, 6), "fixed", 6, 3),
    "fixed_mqa_c_eq_l": ((1, 12, 12, 3, 1, 4, 4), "fixed", 4, 4),
}
SPARSE_RUNS = ([(c,) + cm for c in SPARSE_CASES for cm in (FT, TT)]
               + [(c,) + cm for c in ("strided_default_stride_odd", "fixed_default")
                  for cm in (FF, TF)])


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("case", list(SPARSE_CASES))
def test_sparse_matches_dense_reference(case):
  """The case's (causal, masked) runs of SPARSE_RUNS in one compiled program."""
  shape, pattern, stride, c = SPARSE_CASES[case]
  runs = [r[1:] for r in SPARSE_RUNS if r[0] == case]
  N = shape[1]
  q, k, v = make_inputs(shape)
  key_mask = make_key_mask(shape)
  outs = jax.jit(lambda q, k, v, key_mask: [
      sparse_fn(q, k, v, mask=key_mask if masked else None, pattern=pattern, stride=stride,
                c=c, causal=causal) for causal, masked in runs])(q, k, v, key_mask)
  l = attention.sparse.default_stride(N) if stride is None else stride
  for (causal, masked), out in zip(runs, outs, strict=True):
    out, msg = np.asarray(out), f"causal={causal} masked={masked}"
    mask = key_mask if masked else None
    ref = dense_ref(q, k, v, sparse_pattern(N, pattern, l, c or 1, causal), mask)
    assert out.shape == ref.shape and out.dtype == np.float64, msg
    np.testing.assert_allclose(out, ref, atol=1e-10, rtol=1e-10, err_msg=msg)
    if masked:
      assert np.all(out[0, :, 0] == 0.0), msg


def test_sparse_default_stride_is_ceil_sqrt():
  assert [attention.sparse.default_stride(n) for n in (1, 2, 4, 5, 16, 17, 2048)] == \
      [1, 2, 2, 3, 4, 5, 46]


# ---- bf16 -------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["local", "sparse_strided", "sparse_fixed"])
def test_bf16_inputs_fp32_statistics(name):
  shape = (2, 33, 33, 4, 2, 16, 16)
  q, k, v = (x.astype(jnp.bfloat16) for x in map(jnp.asarray, make_inputs(shape)))
  mask = make_key_mask(shape)
  if name == "local":
    kw, pat = dict(window=9, causal=True), local_pattern(33, 33, 9, True)
    fn = local_fn
  else:
    p = name.split("_")[1]
    kw, pat = dict(pattern=p, stride=6), sparse_pattern(33, p, 6, 1, False)
    fn = sparse_fn
  out = jax.jit(functools.partial(fn, **kw))(q, k, v, mask=jnp.asarray(mask))
  assert out.dtype == jnp.bfloat16
  ref = dense_ref(*(np.asarray(x.astype(jnp.float32)) for x in (q, k, v)), pat, mask)
  out = np.asarray(out.astype(jnp.float32))
  assert np.all(np.isfinite(out)) and np.all(out[0, :, 0] == 0.0)
  np.testing.assert_allclose(out, ref, atol=3e-2, rtol=3e-2)


# ---- gradients ------------------------------------------------------------------

def jnp_dense(q, k, v, allowed):
  """Dense masked softmax attention in jnp (for jax.grad); allowed (B, Hq, Tq, Tk)."""
  Hq = q.shape[2]
  k = jnp.repeat(k, Hq // k.shape[2], axis=2)
  v = jnp.repeat(v, Hq // v.shape[2], axis=2)
  s = jnp.einsum("bihd,bjhd->bhij", q, k) / np.sqrt(q.shape[-1])
  s = jnp.where(allowed, s, -1e30)
  p = jnp.where(allowed, jnp.exp(s - jax.lax.stop_gradient(s.max(-1, keepdims=True))), 0.0)
  l = p.sum(-1, keepdims=True)
  p = p / jnp.where(l == 0, 1.0, l)
  return jnp.einsum("bhij,bjhd->bihd", p, v)


GRAD_CASES = {
    "local_causal": (local_fn, dict(window=5, causal=True), (2, 37, 37, 4, 2, 4, 4),
                     lambda T: local_pattern(T, T, 5, True)),
    "local_two_sided": (local_fn, dict(window=6), (1, 37, 37, 2, 1, 4, 4),
                        lambda T: local_pattern(T, T, 6, False)),
    "sparse_strided": (sparse_fn, dict(pattern="strided", stride=5, causal=True),
                       (2, 23, 23, 4, 2, 4, 4), lambda T: sparse_pattern(T, "strided", 5, 1, True)),
    "sparse_fixed": (sparse_fn, dict(pattern="fixed", stride=5, c=2),
                     (1, 23, 23, 2, 1, 4, 4), lambda T: sparse_pattern(T, "fixed", 5, 2, False)),
}


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("case", list(GRAD_CASES))
def test_gradients_match_dense_jnp_reference(case):
  fn, kw, shape, pattern = GRAD_CASES[case]
  q, k, v = map(jnp.asarray, make_inputs(shape))
  mask = jnp.asarray(make_key_mask(shape))
  B, T, _, Hq = shape[:4]
  allowed = jnp.asarray(pattern(T))[None, None] & mask
  ct = jnp.asarray(np.random.default_rng(3).normal(size=(B, T, Hq, shape[-1])))

  def loss(f):
    return lambda q, k, v: jnp.sum(f(q, k, v) * ct)

  g = jax.jit(jax.grad(loss(lambda q, k, v: fn(q, k, v, mask=mask, **kw)),
                       argnums=(0, 1, 2)))(q, k, v)
  g_ref = jax.jit(jax.grad(loss(lambda q, k, v: jnp_dense(q, k, v, allowed)),
                           argnums=(0, 1, 2)))(q, k, v)
  for a, b in zip(g, g_ref):
    assert np.all(np.isfinite(np.asarray(a)))
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-9, rtol=1e-9)


# ---- refusals -----------------------------------------------------------------------

def _qkv(B=1, T=12, H=2, D=4, Tk=None):
  q = jnp.ones((B, T, H, D))
  kv = jnp.ones((B, T if Tk is None else Tk, H, D))
  return q, kv, kv


@pytest.mark.parametrize("fn", [local_fn, sparse_fn], ids=["local", "sparse"])
def test_dense_masks_are_refused(fn):
  q, k, v = _qkv()
  with pytest.raises(AttentionError, match="key-padding masks only"):
    fn(q, k, v, mask=jnp.ones((1, 1, 12, 12), bool))
  with pytest.raises(AttentionError, match="key-padding masks only"):
    fn(q, k, v, mask=jnp.ones((12, 12), bool))
  with pytest.raises(AttentionError, match="bool"):
    fn(q, k, v, mask=jnp.ones((1, 1, 1, 12)))
  with pytest.raises(AttentionError, match="unexpected arguments"):
    fn(q, k, v, block_q=4)
  # key-padding masks of every broadcastable form are accepted
  for m in [jnp.ones((12,), bool), jnp.ones((1, 2, 1, 12), bool), jnp.ones((1, 1, 1, 1), bool)]:
    assert jax.eval_shape(lambda q, k, v: fn(q, k, v, mask=m), q, k, v).shape == (1, 12, 2, 4)


@pytest.mark.parametrize("window", [0, -3, 2.5, True, "8"])
def test_local_bad_window(window):
  q, k, v = _qkv()
  with pytest.raises(AttentionError, match="window must be a positive int"):
    local_fn(q, k, v, window=window)


@pytest.mark.parametrize("kw,msg", [
    (dict(pattern="axial"), "pattern must be one of"),
    (dict(stride=0), "stride must be a positive int"),
    (dict(stride=3.0), "stride must be a positive int"),
    (dict(pattern="strided", c=1), "applies only to pattern='fixed'"),
    (dict(pattern="fixed", stride=4, c=5), "1 <= c <= stride"),
    (dict(pattern="fixed", stride=4, c=0), "1 <= c <= stride"),
])
def test_sparse_bad_kwargs(kw, msg):
  q, k, v = _qkv()
  with pytest.raises(AttentionError, match=msg):
    sparse_fn(q, k, v, **kw)


def test_sparse_fixed_refuses_segment_ids():
  """pattern='fixed' sits its blocks at multiples of the stride in the row, so it
  refuses segment ids (the contract checks 'strided', which takes them)."""
  q, k, v = _qkv()
  with pytest.raises(AttentionError, match="pattern='fixed'.*multiples of the stride"):
    sparse_fn(q, k, v, pattern="fixed", q_seg=np.ones((1, q.shape[1]), np.int32))


def test_sparse_refuses_different_lengths():
  q, k, v = _qkv(Tk=16)
  with pytest.raises(AttentionError, match="Tq != Tk"):
    sparse_fn(q, k, v)


def test_registry_records():
  for name, time in [("local", "O(N w D)"), ("sparse", "O(N √N D)")]:
    rec = attention.variant(name)
    assert rec.masks == "key padding" and rec.causal and rec.decode_impl is not None
    assert rec.time == time and rec.paper and rec.summary
  # a decode step: sparse reads its whole cache, local its window whatever the context
  d = lambda Tk: attention.Dims(1, 1, Tk, 2, 2, 8, 8)
  local, sparse = attention.variant("local"), attention.variant("sparse")
  assert sparse.cost(d(4096), mode="decode").flops == 4 * sparse.cost(d(1024),
                                                                      mode="decode").flops
  assert local.cost(d(4096), mode="decode", window=64) == local.cost(d(1024), mode="decode",
                                                                     window=64)
  assert local.cost(d(4096), mode="decode", window=64).flops < sparse.cost(
      d(1024), mode="decode").flops
  with pytest.raises(ValueError, match="mode"):
    rec.cost(d(8), mode="train")


# ---- jit, vmap ----------------------------------------------------------------------

@pytest.mark.parametrize("fn,kw", [(local_fn, dict(window=4, causal=True)),
                                   (sparse_fn, dict(pattern="fixed", stride=4, c=2))],
                         ids=["local", "sparse"])
def test_jit_and_vmap_agree_with_eager(fn, kw):
  rng = np.random.default_rng(0)
  q, k, v = (jnp.asarray(rng.normal(size=(3, 2, 19, 2, 4)), jnp.float32) for _ in range(3))
  one = jax.jit(functools.partial(fn, **kw))
  each = jnp.stack([one(q[i], k[i], v[i]) for i in range(3)])
  vm = jax.jit(jax.vmap(functools.partial(fn, **kw)))(q, k, v)
  np.testing.assert_allclose(np.asarray(vm), np.asarray(each), atol=1e-5, rtol=1e-5)


# ---- structure: no N x N intermediate, cost is sub-quadratic ------------------------

@pytest.mark.parametrize("fn,kw", [
    (local_fn, dict(window=32)),
    (sparse_fn, dict(pattern="strided")),
    (sparse_fn, dict(pattern="fixed", causal=True)),
], ids=["local", "strided", "fixed_causal"])
def test_no_quadratic_temporary(fn, kw):
  """Compiled (not run) forward: temporaries far below one fp32 N x N matrix, and
  growing like N (local) or N sqrt N (sparse), not N^2, when N quadruples."""
  def temp(N):
    q = jax.ShapeDtypeStruct((1, N, 1, 16), jnp.float32)
    m = jax.ShapeDtypeStruct((1, 1, 1, N), jnp.bool_)
    f = jax.jit(lambda q, k, v, m: fn(q, k, v, mask=m, **kw))
    return f.lower(q, q, q, m).compile().memory_analysis().temp_size_in_bytes
  N = 16384
  small, big = temp(N // 4), temp(N)
  assert big < N * N * 4 / 8, big
  assert big / small < (4.5 if fn is local_fn else 9.5), (small, big)  # N^2 would be 16


def test_cost_scales_subquadratically():
  def pairs(name, T, **kw):
    return attention.cost(name, batch=1, q_len=T, num_heads=1, head_dim=16, **kw).transcendentals
  assert pairs("local", 8192, window=64) / pairs("local", 4096, window=64) == pytest.approx(2, rel=0.01)
  r = pairs("sparse", 16384) / pairs("sparse", 4096)
  assert r == pytest.approx(8, rel=0.05)  # (4N)^1.5 / N^1.5
  assert pairs("sparse", 4096) < 4096 ** 2 / 10
