"""Linformer and Reformer (LSH) attention against float64 NumPy references of their
own definitions (see the module docstrings), plus refusals, gradients, jit and vmap.

The references are written independently of attention/: heads are expanded per query
head, Reformer's attention pattern is built as a dense (N, N) boolean matrix from the
ranks of a NumPy lexsort, and softmax is the textbook one.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention.linformer  # noqa: F401  (registers 'linformer')
import attention.reformer  # noqa: F401  (registers 'reformer')
from attention.core import registry
from attention.core.common import AttentionError, Dims
from attention.reformer import make_rotations
from tests import reference

linformer = registry.get("linformer")
reformer = registry.get("reformer")
# Eager mode compiles every op separately (slow on CPU): tests call jitted versions.
linformer_jit = jax.jit(linformer)
reformer_jit = jax.jit(reformer, static_argnames=("causal", "chunk_size"))


def make_inputs(shape, seed=0, dtype=np.float64):
  B, Tq, Tk, Hq, Hkv, D, Dv = shape
  rng = np.random.default_rng(seed)
  return (rng.normal(size=(B, Tq, Hq, D)).astype(dtype),
          rng.normal(size=(B, Tk, Hkv, D)).astype(dtype),
          rng.normal(size=(B, Tk, Hkv, Dv)).astype(dtype))


def key_padding(kind, B, Hq, Tk, seed=1):
  """None, (B, 1, 1, Tk) with batch 0 fully padded, or a per-query-head (B, Hq, 1, Tk)."""
  if kind == "none":
    return None
  rng = np.random.default_rng(seed)
  if kind == "padding":
    m = rng.random((B, 1, 1, Tk)) < 0.7
    m[0] = False          # a sequence with no key at all -> zeros
    m[-1, ..., :2] = True
    return m
  m = rng.random((B, Hq, 1, Tk)) < 0.6
  m[..., 0] = True
  return m


def softmax_rows(s, allowed):
  """Masked softmax with -inf; returns (p, lse); empty rows give p = 0, lse = -inf."""
  s = np.where(allowed, s, -np.inf)
  m = s.max(-1, keepdims=True)
  m = np.where(np.isfinite(m), m, 0.0)
  p = np.where(allowed, np.exp(s - m), 0.0)
  l = p.sum(-1, keepdims=True)
  with np.errstate(divide="ignore"):
    lse = np.where(l > 0, m + np.log(np.where(l > 0, l, 1.0)), -np.inf)[..., 0]
  return np.divide(p, l, out=np.zeros_like(p), where=l > 0), lse


# ---- Linformer ------------------------------------------------------------------

def linformer_ref(q, k, v, e, f, mask=None, scale=None):
  B, Tq, Hq, D = q.shape
  Tk, Hkv = k.shape[1], k.shape[2]
  G = Hq // Hkv
  scale = 1 / np.sqrt(D) if scale is None else scale
  keep = np.ones((B, Hq, 1, Tk), bool) if mask is None else np.broadcast_to(mask, (B, Hq, 1, Tk))
  out = np.zeros((B, Tq, Hq, v.shape[-1]))
  for b in range(B):
    for h in range(Hq):
      E = (e[h // G] if e.ndim == 3 else e)[:, :Tk]
      F = (f[h // G] if f.ndim == 3 else f)[:, :Tk]
      km = keep[b, h, 0][:, None]
      kp = E @ (k[b, :, h // G] * km)
      vp = F @ (v[b, :, h // G] * km)
      p, _ = softmax_rows(q[b, :, h] @ kp.T * scale, np.ones((Tq, kp.shape[0]), bool))
      out[b, :, h] = p @ vp
  return out


LIN_SHAPES = {  # B, Tq, Tk, Hq, Hkv, D, Dv
    "mha": (2, 6, 6, 2, 2, 8, 8),
    "gqa_cross_dv": (2, 5, 9, 4, 2, 8, 5),
    "mqa": (2, 7, 4, 3, 1, 4, 6),
}


def lin_params(shape, per_head, k_proj=3, extra=2, seed=3):
  B, Tq, Tk, Hq, Hkv, D, Dv = shape
  rng = np.random.default_rng(seed)
  s = ((Hkv,) if per_head else ()) + (k_proj, Tk + extra)
  return rng.normal(size=s) / np.sqrt(k_proj), rng.normal(size=s) / np.sqrt(k_proj)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("shape_name", list(LIN_SHAPES))
def test_linformer_matches_reference(shape_name):
  """Every key mask (none, padding, per head) with e, f shared and per kv head: the six
  cases of a shape in one compiled program."""
  shape = LIN_SHAPES[shape_name]
  q, k, v = make_inputs(shape)
  combos = [(mask_kind, per_head) for per_head in (False, True)
            for mask_kind in ("none", "padding", "per_head")]
  params = {per_head: lin_params(shape, per_head) for per_head in (False, True)}
  masks = {kind: key_padding(kind, shape[0], shape[3], shape[2])
           for kind in ("none", "padding", "per_head")}
  outs = jax.jit(lambda q, k, v, params, masks: [
      linformer(q, k, v, e=params[per_head][0], f=params[per_head][1], mask=masks[kind])
      for kind, per_head in combos])(q, k, v, params, masks)
  for (mask_kind, per_head), out in zip(combos, outs, strict=True):
    msg = f"mask={mask_kind} per_head={per_head}"
    e, f = params[per_head]
    ref = linformer_ref(q, k, v, e, f, masks[mask_kind])
    assert out.shape == ref.shape and out.dtype == jnp.float64, msg
    np.testing.assert_allclose(np.asarray(out), ref, atol=1e-12, rtol=1e-10, err_msg=msg)
    if mask_kind == "padding":  # batch 0 has no key at all: exact zeros
      assert np.all(np.asarray(out)[0] == 0.0), msg


@pytest.mark.usefixtures("x64")
def test_linformer_scale_and_param_spec():
  shape = LIN_SHAPES["gqa_cross_dv"]
  q, k, v = make_inputs(shape)
  spec = registry.variant("linformer").params
  e = spec["e"].init(jax.random.PRNGKey(0), spec["e"].shape(4, 8, 16), jnp.float64)
  f = spec["f"].init(jax.random.PRNGKey(1), spec["f"].shape(4, 8, 16), jnp.float64)
  assert e.shape == (16, 16)  # k_proj = min(64, max_len)
  out = linformer_jit(q, k, v, e=e, f=f, scale=0.3)
  np.testing.assert_allclose(np.asarray(out),
                             linformer_ref(q, k, v, np.asarray(e), np.asarray(f), scale=0.3),
                             atol=1e-12)


def test_linformer_refusals():
  q = jnp.ones((1, 4, 2, 8))
  e = jnp.ones((3, 6))
  with pytest.raises(AttentionError, match="does not support causal.*future"):
    linformer(q, q, q, e=e, f=e, causal=True)
  with pytest.raises(AttentionError, match="vary along the query axis"):
    linformer(q, q, q, e=e, f=e, mask=jnp.ones((1, 1, 4, 4), bool))
  with pytest.raises(AttentionError, match="max_len >= Tk"):
    linformer(q, q, q, e=jnp.ones((3, 3)), f=jnp.ones((3, 3)))
  with pytest.raises(AttentionError, match="Hkv=2"):
    linformer(q, q, q, e=jnp.ones((3, 3, 6)), f=jnp.ones((3, 3, 6)))
  with pytest.raises(AttentionError, match="different lengths"):
    linformer(q, q, q, e=e, f=jnp.ones((2, 6)))
  with pytest.raises(AttentionError, match="unexpected arguments"):
    linformer(q, q, q, e=e, f=e, window=2)


def _lin_jnp(q, k, v, e, f, keep):
  """Dense jnp version of the definition (MHA, shared e/f) for gradient checks."""
  kp = jnp.einsum("pt,bthd->bphd", e[:, :k.shape[1]], k * keep)
  vp = jnp.einsum("pt,bthd->bphd", f[:, :k.shape[1]], v * keep)
  s = jnp.einsum("bqhd,bphd->bhqp", q, kp) / np.sqrt(q.shape[-1])
  return jnp.einsum("bhqp,bphd->bqhd", jax.nn.softmax(s, -1), vp)


@pytest.mark.usefixtures("x64")
def test_linformer_gradients_match_jnp_reference():
  shape = LIN_SHAPES["mha"]
  q, k, v = make_inputs(shape)
  e, f = lin_params(shape, False)
  mask = key_padding("padding", 2, 2, 6)
  mask[0] = True
  keep = jnp.asarray(mask[:, 0, 0, :, None, None], jnp.float64)
  loss = lambda fn: lambda *a: jnp.sum(jnp.sin(fn(*a)))
  ours = jax.jit(jax.grad(loss(lambda q, k, v, e, f: linformer(q, k, v, e=e, f=f, mask=mask)),
                  argnums=(0, 1, 2, 3, 4)))(q, k, v, e, f)
  ref = jax.jit(jax.grad(loss(lambda q, k, v, e, f: _lin_jnp(q, k, v, e, f, keep)),
                 argnums=(0, 1, 2, 3, 4)))(q, k, v, e, f)
  for a, b in zip(ours, ref):
    assert np.all(np.isfinite(np.asarray(a)))
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-10)


# ---- Reformer -------------------------------------------------------------------

def lsh_hash(x, R):
  """x (N, D), R (n, D, nb2) -> (n, N) buckets argmax([xR, -xR])."""
  xr = np.einsum("td,rdc->rtc", x, R)
  return np.argmax(np.concatenate([xr, -xr], -1), -1)


def chunk_of(buckets, c):
  """Chunk index of each position after a stable sort by (bucket, position)."""
  N = buckets.shape[0]
  order = np.lexsort((np.arange(N), buckets))
  rank = np.empty(N, int)
  rank[order] = np.arange(N)
  return rank // c


def reformer_ref(q, k, v, R, chunk_size, causal=False, mask=None, scale=None,
                 return_pattern=False):
  B, N, Hq, D = q.shape
  Hkv = k.shape[2]
  G = Hq // Hkv
  c = min(chunk_size, N)
  scale = 1 / np.sqrt(D) if scale is None else scale
  keep = np.ones((B, Hq, 1, N), bool) if mask is None else np.broadcast_to(mask, (B, Hq, 1, N))
  out = np.zeros((B, N, Hq, v.shape[-1]))
  i, j = np.arange(N)[:, None], np.arange(N)[None, :]
  patterns = []
  for b in range(B):
    for h in range(Hq):
      Rh = R[h // G] if R.ndim == 4 else R
      qh, kh, vh = q[b, :, h], k[b, :, h // G], v[b, :, h // G]
      bq, bk = lsh_hash(qh, Rh), lsh_hash(kh, Rh)
      outs, lses = [], []
      for r in range(Rh.shape[0]):
        cq, ck = chunk_of(bq[r], c)[:, None], chunk_of(bk[r], c)[None, :]
        allowed = ((ck == cq) | (ck == cq - 1)) & keep[b, h, 0][None, :]
        if causal:
          allowed &= j <= i
        patterns.append(allowed)
        s = qh @ kh.T * scale
        s = np.where(i == j, -1e5, s)  # the self rule: a fixed, very low logit
        p, lse = softmax_rows(s, allowed)
        outs.append(p @ vh)
        lses.append(lse)
      lses = np.stack(lses)                  # (n, N)
      M = lses.max(0)
      w = np.where(np.isfinite(lses), np.exp(lses - np.where(np.isfinite(M), M, 0.0)), 0.0)
      ws = w.sum(0)
      w = np.divide(w, ws, out=np.zeros_like(w), where=ws > 0)
      out[b, :, h] = np.einsum("rt,rtd->td", w, np.stack(outs))
  return (out, patterns) if return_pattern else out


RF_SHAPES = {  # B, N, N, Hq, Hkv, D, Dv
    "mha": (2, 13, 13, 2, 2, 8, 6),
    "gqa": (1, 11, 11, 4, 2, 4, 4),
}
RF_CASES = [  # shape, n_hashes, n_buckets, chunk, causal, mask, shared qk, per-head R
    ("mha", 1, 4, 4, False, "none", False, False),
    ("mha", 1, 4, 3, True, "none", True, False),
    ("mha", 2, 6, 4, True, "padding", True, False),
    ("gqa", 2, 4, 3, True, "per_head", False, False),
    ("gqa", 3, 2, 4, False, "padding", False, True),
]


@pytest.mark.usefixtures("x64")
def test_reformer_matches_reference():
  """Every case of RF_CASES, in one compiled program."""
  cases = []
  for shape_name, n, nb, c, causal, mask_kind, shared, per_head in RF_CASES:
    shape = RF_SHAPES[shape_name]
    q, k, v = make_inputs(shape)
    if shared:
      k = q / np.linalg.norm(q, axis=-1, keepdims=True)  # the paper's shared QK
    Hkv, D = shape[4], shape[5]
    R = np.asarray(make_rotations(jax.random.PRNGKey(7), n, D, nb, jnp.float64))
    if per_head:
      R = np.stack([np.asarray(make_rotations(jax.random.PRNGKey(8 + h), n, D, nb,
                                              jnp.float64)) for h in range(Hkv)])
    cases.append(((q, k, v, R, key_padding(mask_kind, shape[0], shape[3], shape[2])),
                  (c, causal)))
  outs = jax.jit(lambda args: [
      reformer(q, k, v, rotations=R, chunk_size=c, causal=causal, mask=mask)
      for (q, k, v, R, mask), (c, causal) in zip(args, (s for _, s in cases))])(
      [a for a, _ in cases])
  for case, ((q, k, v, R, mask), (c, causal)), out in zip(RF_CASES, cases, outs, strict=True):
    shape, mask_kind, msg = RF_SHAPES[case[0]], case[5], "-".join(map(str, case))
    ref, patterns = reformer_ref(q, k, v, R, c, causal, mask, return_pattern=True)
    out = np.asarray(out)
    assert out.shape == ref.shape and out.dtype == np.float64, msg
    np.testing.assert_allclose(out, ref, atol=1e-12, rtol=1e-10, err_msg=msg)
    # the test is not vacuous: the LSH pattern is sparse but not empty
    density = np.mean([p.mean() for p in patterns])
    assert 0.05 < density < 0.9, msg
    if mask_kind == "padding" and shape[0] > 1:  # batch 0 has no key: exact zeros
      assert np.all(out[0] == 0.0), msg
    if causal and mask_kind == "none":  # position 0 sees only itself: self fallback
      np.testing.assert_allclose(out[:, 0], np.repeat(v[:, 0], shape[3] // shape[4], 1),
                                 atol=1e-12, err_msg=msg)


@pytest.mark.usefixtures("x64")
def test_reformer_one_chunk_is_full_softmax_without_self():
  shape = RF_SHAPES["mha"]
  q, k, v = make_inputs(shape)
  N = shape[1]
  R = make_rotations(jax.random.PRNGKey(0), 2, shape[5], 4, jnp.float64)
  out = reformer_jit(q, k, v, rotations=R, chunk_size=N + 5)
  ref = reference.attention("softmax", q, k, v, mask=~np.eye(N, dtype=bool))
  np.testing.assert_allclose(np.asarray(out), ref, atol=1e-12)


def test_reformer_determinism_and_rotation_dependence():
  q, k, v = make_inputs((1, 16, 16, 2, 2, 8, 8), dtype=np.float32)
  f = lambda key: np.asarray(reformer_jit(q, k, v, chunk_size=4,
                                          rotations=make_rotations(key, 2, 8, 8)))
  a, b, c = f(jax.random.PRNGKey(1)), f(jax.random.PRNGKey(1)), f(jax.random.PRNGKey(2))
  np.testing.assert_array_equal(a, b)
  assert np.max(np.abs(a - c)) > 1e-3


def test_reformer_refusals():
  q = jnp.ones((1, 4, 2, 8))
  R = make_rotations(jax.random.PRNGKey(0), 1, 8, 4)
  with pytest.raises(AttentionError, match="Tq != Tk"):
    reformer(q, jnp.ones((1, 5, 2, 8)), jnp.ones((1, 5, 2, 8)), rotations=R)
  with pytest.raises(AttentionError, match="vary along the query axis"):
    reformer(q, q, q, rotations=R, mask=jnp.ones((4, 4), bool))
  with pytest.raises(AttentionError, match="D axis of 8"):
    reformer(q, q, q, rotations=jnp.ones((1, 4, 2)))
  with pytest.raises(AttentionError, match="Hkv=2"):
    reformer(q, q, q, rotations=jnp.ones((3, 1, 8, 2)))
  with pytest.raises(AttentionError, match="chunk_size"):
    reformer(q, q, q, rotations=R, chunk_size=0)
  with pytest.raises(AttentionError, match="n_buckets"):
    make_rotations(jax.random.PRNGKey(0), 1, 8, 3)
  with pytest.raises(AttentionError, match="n_hashes"):
    make_rotations(jax.random.PRNGKey(0), 0, 8, 4)


def test_reformer_gradients_finite_and_bf16():
  q, k, v = make_inputs((2, 12, 12, 2, 1, 8, 8), dtype=np.float32)
  R = make_rotations(jax.random.PRNGKey(0), 2, 8, 4)
  mask = key_padding("padding", 2, 2, 12)
  g = jax.jit(jax.grad(lambda q, k, v: jnp.sum(reformer(q, k, v, rotations=R, chunk_size=4,
                                                causal=True, mask=mask) ** 2),
               argnums=(0, 1, 2)))(q, k, v)
  for x in g:
    assert np.all(np.isfinite(np.asarray(x)))
  assert np.all(np.asarray(g[2])[0] == 0.0)  # padded sequence: no gradient to v
  qb, kb, vb = (jnp.asarray(x, jnp.bfloat16) for x in (q, k, v))
  ob = reformer_jit(qb, kb, vb, rotations=R, chunk_size=4)
  assert ob.dtype == jnp.bfloat16 and np.all(np.isfinite(np.asarray(ob, np.float32)))


def test_jit_and_vmap():
  # the determinism test's shapes and options, so that reformer_jit is already compiled
  q, k, v = make_inputs((1, 16, 16, 2, 2, 8, 8), dtype=np.float32)
  qs, ks, vs = (np.stack([x, x[:, ::-1]]) for x in (q, k, v))   # a leading vmap axis
  e = np.random.default_rng(0).normal(size=(3, 16)).astype(np.float32)
  R = make_rotations(jax.random.PRNGKey(1), 2, 8, 8)
  for fn, one in ((functools.partial(linformer, e=e, f=e),
                   functools.partial(linformer_jit, e=e, f=e)),
                  (functools.partial(reformer, rotations=R, chunk_size=4),
                   functools.partial(reformer_jit, rotations=R, chunk_size=4))):
    each = np.stack([np.asarray(one(a, b, c)) for a, b, c in zip(qs, ks, vs)])
    np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(fn))(qs, ks, vs)), each,
                               atol=1e-5)


@pytest.mark.parametrize("name", ["linformer", "reformer"])
def test_registry_record_and_cost(name):
  var = registry.variant(name)
  assert var.masks == "key padding" and var.decode is None and var.paper
  assert var.causal == (name == "reformer")
  d1, d2 = Dims(2, 1024, 1024, 4, 2, 64, 64), Dims(2, 2048, 2048, 4, 2, 64, 64)
  c1, c2 = var.cost(d1), var.cost(d2)
  assert all(x > 0 for x in (c1.flops, c1.transcendentals, c1.bytes, c1.temp_bytes))
  assert 1.9 < c2.flops / c1.flops < 2.3          # ~linear (N log N for the sort)
  assert var.cost(d1, mode="fwd_bwd").flops > c1.flops
  with pytest.raises(ValueError, match="mode"):
    var.cost(d1, mode="decode")
  with pytest.raises(ValueError, match="mode"):
    var.cost(d1, mode="train")
