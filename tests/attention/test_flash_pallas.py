"""Tests of `flash_pallas` (Pallas FlashAttention) against a float64 NumPy reference
and against the `softmax` variant, forward and backward.

On CPU the kernels run in Pallas interpret mode, which is slow: shapes are tiny and
tiles are 16 so that every case still crosses tile boundaries (odd lengths, padding,
several tiles, causal skipping). Each case compiles one jitted forward+VJP.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import attention
from attention import flash_pallas as FP
from attention.core.common import AttentionError

BLK = dict(block_q=16, block_k=16)
flash_pallas = attention.get("flash_pallas")
softmax = attention.get("softmax")


@pytest.fixture(autouse=True)
def exact_matmuls():
  """float32 matmuls in full precision (on a GPU, XLA's default would be TF32)."""
  with jax.default_matmul_precision("highest"):
    yield


# ---- references --------------------------------------------------------------

def full_mask(B, Hq, Tq, Tk, causal, mask):
  allow = np.ones((B, Hq, Tq, Tk), bool)
  if mask is not None:
    m = np.asarray(mask)
    allow &= np.broadcast_to(m.reshape((1,) * (4 - m.ndim) + m.shape), allow.shape)
  if causal:
    allow &= np.arange(Tk)[None, :] <= np.arange(Tq)[:, None] + (Tk - Tq)
  return allow


def reference(q, k, v, *, causal=False, mask=None, scale=None):
  """float64 NumPy attention under the contract: (B, Tq, Hq, Dv)."""
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  B, Tq, Hq, D = q.shape
  Tk, Hkv = k.shape[1:3]
  G = Hq // Hkv
  k, v = np.repeat(k, G, axis=2), np.repeat(v, G, axis=2)  # head h uses kv head h // G
  s = np.einsum("bqhd,bkhd->bhqk", q, k) * (1 / np.sqrt(D) if scale is None else scale)
  allow = full_mask(B, Hq, Tq, Tk, causal, mask)
  s = np.where(allow, s, -np.inf)
  m = s.max(-1, keepdims=True)
  p = np.exp(s - np.where(np.isfinite(m), m, 0.0)) * allow
  l = p.sum(-1, keepdims=True)
  p = p / np.where(l == 0, 1.0, l)
  return np.einsum("bhqk,bkhd->bqhd", p, v)


def make(shape, dtype=jnp.float32, seed=0):
  B, Tq, Tk, Hq, Hkv, D, Dv = shape
  r = np.random.default_rng(seed)
  q = r.standard_normal((B, Tq, Hq, D))
  k = r.standard_normal((B, Tk, Hkv, D))
  v = r.standard_normal((B, Tk, Hkv, Dv))
  w = r.standard_normal((B, Tq, Hq, Dv))  # output cotangent
  return tuple(jnp.asarray(x, dtype) for x in (q, k, v, w))


@functools.lru_cache(maxsize=None)
def fwd_vjp(name, causal, **kw):
  """jit(q, k, v, mask, w) -> (out, (dq, dk, dv)) of variant `name`; cached per options."""
  fn = attention.get(name)

  @jax.jit
  def f(q, k, v, mask, w):
    out, vjp = jax.vjp(lambda q, k, v: fn(q, k, v, causal=causal, mask=mask, **kw), q, k, v)
    return out, vjp(w)
  return f


def run_both(q, k, v, w, *, causal, mask):
  out, grads = fwd_vjp("flash_pallas", causal, **BLK)(q, k, v, mask, w)
  ref_out, ref_grads = fwd_vjp("softmax", causal)(q, k, v, mask, w)
  return out, grads, ref_out, ref_grads


def assert_close(a, b, tol, what=""):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  assert a.shape == b.shape, (what, a.shape, b.shape)
  assert np.all(np.isfinite(a)), f"{what}: not finite"
  err = np.max(np.abs(a - b)) if a.size else 0.0
  assert err <= tol * max(1.0, np.max(np.abs(b)) if b.size else 0.0), f"{what}: max err {err}"


# ---- forward + backward, float32 ----------------------------------------------

#            (B, Tq, Tk, Hq, Hkv, D, Dv)
CASES = {
    "mha_odd_lengths_dv": ((2, 33, 37, 4, 4, 16, 8), False, None),
    "gqa_causal_tq_lt_tk_keypad": ((2, 21, 37, 4, 2, 16, 16), True, "key"),
    "mqa_causal_tq_gt_tk_dense": ((1, 38, 19, 4, 1, 8, 16), True, "dense"),
    "gqa_square_causal": ((1, 40, 40, 2, 1, 16, 16), True, None),
    "mha_dense_per_head": ((2, 17, 30, 2, 2, 8, 8), False, "dense_heads"),
}


def make_mask(kind, shape, seed=1):
  B, Tq, Tk, Hq = shape[:4]
  r = np.random.default_rng(seed)
  if kind is None:
    return None
  if kind == "key":  # (B, 1, 1, Tk) key padding; batch 1 has no valid key at all
    m = np.zeros((B, 1, 1, Tk), bool)
    m[0, ..., : Tk - 5] = True
    m[0, ..., 3] = False
    return jnp.asarray(m)
  if kind == "dense":  # (Tq, Tk) shared, with two fully masked rows
    m = r.random((Tq, Tk)) > 0.4
    m[[Tq - 1, Tq - 7]] = False
    return jnp.asarray(m)
  if kind == "dense_heads":  # (B, Hq, Tq, Tk), one fully masked row per head
    m = r.random((B, Hq, Tq, Tk)) > 0.5
    m[:, :, 4] = False
    return jnp.asarray(m)
  raise ValueError(kind)


@pytest.mark.parametrize("case", list(CASES))
def test_matches_reference_and_softmax(case):
  shape, causal, mask_kind = CASES[case]
  q, k, v, w = make(shape)
  mask = make_mask(mask_kind, shape)
  out, grads, ref_out, ref_grads = run_both(q, k, v, w, causal=causal, mask=mask)
  assert out.dtype == q.dtype and out.shape == shape[:2] + (shape[3], shape[6])
  assert_close(out, reference(q, k, v, causal=causal, mask=mask), 2e-5, "out vs numpy")
  assert_close(out, ref_out, 2e-5, "out vs softmax")
  for name, g, rg, x in zip("qkv", grads, ref_grads, (q, k, v)):
    assert g.dtype == x.dtype and g.shape == x.shape
    assert_close(g, rg, 5e-5, f"d{name}")

  # Rows with no allowed key: exact zeros, zero gradients, never NaN.
  B, Tq, Tk, Hq = shape[:4]
  empty = ~full_mask(B, Hq, Tq, Tk, causal, mask).any(-1)  # (B, Hq, Tq)
  empty = empty.transpose(0, 2, 1)  # (B, Tq, Hq)
  if empty.any():
    assert np.all(np.asarray(out)[empty] == 0)
    assert np.all(np.asarray(grads[0])[empty] == 0)


def test_mask_shapes_and_broadcasting():
  """Masks of rank < 4, a query-only mask (Tk axis 1) and a (Hq,1,Tk) mask."""
  shape = (2, 19, 23, 4, 2, 8, 8)
  q, k, v, _ = make(shape, seed=3)
  r = np.random.default_rng(4)
  masks = [
      jnp.asarray(r.random(23) > 0.3),                    # (Tk,) -> key path
      jnp.asarray(r.random((2, 1, 19, 1)) > 0.3),         # queries only -> dense path
      jnp.asarray(r.random((4, 1, 23)) > 0.3),            # per head key mask
  ]
  outs = jax.jit(lambda q, k, v, ms: [flash_pallas(q, k, v, mask=m, **BLK) for m in ms])(
      q, k, v, masks)                                    # one program for the three
  for m, out in zip(masks, outs):
    assert_close(out, reference(q, k, v, mask=m), 2e-5, f"mask {m.shape}")


def test_large_logits_do_not_overflow():
  shape, causal, mask_kind = CASES["gqa_causal_tq_lt_tk_keypad"]
  q, k, v, w = make(shape)
  q = q * 1e4
  mask = make_mask(mask_kind, shape)
  out, grads, ref_out, _ = run_both(q, k, v, w, causal=causal, mask=mask)
  # Near-ties of logits ~1e4 are decided by float32 rounding of q.k, so compare
  # against the same-precision softmax tightly and the float64 reference loosely.
  assert_close(out, ref_out, 1e-3, "large logits vs softmax")
  assert_close(out, reference(q, k, v, causal=causal, mask=mask), 5e-2, "vs numpy")
  for g in grads:
    assert np.all(np.isfinite(np.asarray(g)))


def test_bfloat16():
  shape = (1, 33, 37, 4, 2, 16, 16)
  q, k, v, w = make(shape, jnp.bfloat16, seed=5)
  mask = make_mask("key", (2,) + shape[1:])[:1]  # batch 0: valid keys, one hole
  out, grads, ref_out, ref_grads = run_both(q, k, v, w, causal=True, mask=mask)
  assert out.dtype == jnp.bfloat16
  assert_close(out, reference(q, k, v, causal=True, mask=mask), 1.5e-2, "bf16 out vs numpy")
  assert_close(out, ref_out, 1.5e-2, "bf16 out vs softmax")
  for name, g, rg in zip("qkv", grads, ref_grads):
    assert g.dtype == jnp.bfloat16
    assert_close(g, rg, 2e-2, f"bf16 d{name}")


def test_float64_and_check_grads(x64):
  """float64 (the `x64` fixture of conftest.py) runs in interpret mode: exact to
  ~1e-12, and numerical gradients agree."""
  shape = (1, 20, 13, 2, 1, 8, 4)
  q, k, v, _ = make(shape, jnp.float64, seed=6)
  m = np.ones((1, 1, 1, 13), bool)
  m[..., 2] = False
  mask = jnp.asarray(m)
  f = jax.jit(lambda q, k, v: flash_pallas(q, k, v, causal=True, mask=mask, **BLK))
  out = f(q, k, v)
  assert out.dtype == jnp.float64
  assert_close(out, reference(q, k, v, causal=True, mask=mask), 1e-12, "f64 out")
  check_grads(f, (q, k, v), order=1, modes=["rev"])


def test_vmap_and_jit_over_extra_axis():
  """vmap over an extra leading axis, forward and gradients; default tile sizes."""
  shape = (1, 24, 24, 2, 1, 8, 8)
  qs, ks, vs = [], [], []
  for s in range(3):
    q, k, v, _ = make(shape, seed=10 + s)
    qs.append(q), ks.append(k), vs.append(v)
  q, k, v = jnp.stack(qs), jnp.stack(ks), jnp.stack(vs)

  def out_and_grads(fn):
    def f(q, k, v):
      out, vjp = jax.vjp(lambda q, k, v: fn(q, k, v, causal=True), q, k, v)
      return out, vjp(jnp.cos(out))  # the gradients of sum(sin(out))
    return jax.jit(jax.vmap(f))

  out, grads = out_and_grads(flash_pallas)(q, k, v)
  _, ref_grads = out_and_grads(softmax)(q, k, v)
  for n in range(3):
    assert_close(out[n], reference(qs[n], ks[n], vs[n], causal=True), 2e-5, "vmap out")
  for g, rg in zip(grads, ref_grads):
    assert_close(g, rg, 5e-5, "vmap grads")


# ---- tile geometry: causal block skipping is exact ----------------------------

def _cfg(Tq, Tk, bq, bk, causal=True, mask_kind=None):
  return FP._Cfg(Tq=Tq, Tk=Tk, Tq_p=-(-Tq // bq) * bq, Tk_p=-(-Tk // bk) * bk, bq=bq,
                 bk=bk, G=1, causal=causal, mask_kind=mask_kind, mask_b=False,
                 mask_h=False, scale=1.0, interpret=True)


@pytest.mark.parametrize("Tq,Tk,bq,bk", [(40, 40, 16, 16), (21, 37, 16, 16),
                                         (38, 19, 16, 16), (50, 20, 16, 32),
                                         (5, 70, 32, 16)])
def test_tile_ranges_are_tight(Tq, Tk, bq, bk):
  c = _cfg(Tq, Tk, bq, bk)
  qpos = np.arange(c.Tq_p)[:, None]
  kpos = np.arange(c.Tk_p)[None, :]
  allow = (kpos <= qpos + c.off) & (kpos < Tk)  # padded query rows included
  tile = allow.reshape(c.nq, bq, c.nk, bk).transpose(0, 2, 1, 3)  # (nq, nk, bq, bk)
  some, every = tile.any((2, 3)), tile.all((2, 3))
  for i in range(c.nq):
    full, hi = (int(x) for x in FP._kv_range(c, jnp.int32(i)))
    visited = np.arange(c.nk) < hi
    assert np.array_equal(visited, np.arange(c.nk) <= max(np.flatnonzero(some[i]), default=-1))
    assert every[i, :full].all() and full <= hi
  for j in range(c.nk):
    lo, end = (int(x) for x in FP._q_range(c, jnp.int32(j)))
    assert lo == np.flatnonzero(some[:, j])[0]  # the last query row sees every key
    assert not some[:lo, j].any() and every[end:, j].all() and lo <= end <= c.nq


# ---- GPU: the kernels lower to Triton (checked on any machine) ------------------

def _lower_for_cuda(f, *args):
  """StableHLO text of `f` lowered for a CUDA GPU (an H100), from any host.

  Since jax 0.11 the Triton lowering reads the target GPU's compute capability;
  off a GPU it comes from an abstract device, as in ahead-of-time compilation.
  """
  lower = lambda: jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
  AbstractDevice = getattr(jax.sharding, "AbstractDevice", None)
  if AbstractDevice is None or jax.default_backend() == "gpu":    # older jax; a real GPU
    return lower()
  gpu = AbstractDevice(device_kind="NVIDIA H100", num_cores=None, platform="gpu")
  mesh = jax.sharding.AbstractMesh((1,), ("x",), abstract_device=gpu)
  with jax.sharding.use_abstract_mesh(mesh):
    return lower()


@pytest.mark.skipif(FP._pl_triton is None, reason="no Pallas Triton backend")
@pytest.mark.parametrize("dtype,causal,mask_kind", [
    (jnp.bfloat16, True, "key"), (jnp.float32, False, None),
    (jnp.float16, True, "dense")])
def test_lowers_to_triton(dtype, causal, mask_kind):
  """Forward and backward lower to 1 + 2 Triton kernels with interpret=False
  (odd lengths, GQA, a head dim that is not a power of two)."""
  shape = (2, 50, 70, 4, 2, 24, 40)
  q, k, v, _ = make(shape, dtype)
  mask = make_mask(mask_kind, shape)
  f = lambda q, k, v: flash_pallas(q, k, v, causal=causal, mask=mask, interpret=False)
  g = jax.grad(lambda q, k, v: jnp.sum(f(q, k, v).astype(jnp.float32)), argnums=(0, 1, 2))
  assert _lower_for_cuda(f, q, k, v).count("__gpu$xla.gpu.triton") == 1
  assert _lower_for_cuda(g, q, k, v).count("__gpu$xla.gpu.triton") == 3


@pytest.mark.skipif(FP._pl_triton is None, reason="no Pallas Triton backend")
def test_alibi_lowers_to_triton_with_its_positions_as_kernel_inputs():
  """ALiBi's positions enter each of the 3 kernels as int32 tiles (Triton-legal: 1-D
  power-of-two blocks) and the slopes as constants: still 1 + 2 Triton calls."""
  q, k, v, _ = make((2, 50, 70, 4, 2, 24, 24), jnp.bfloat16)
  pos = jnp.arange(70)[None] * 2
  f = lambda q, k, v: flash_pallas(q, k, v, causal=True, interpret=False,
                                   positions="alibi", q_pos=pos[:, 20:], k_pos=pos)
  g = jax.grad(lambda q, k, v: jnp.sum(f(q, k, v).astype(jnp.float32)), argnums=(0, 1, 2))
  assert _lower_for_cuda(f, q, k, v).count("__gpu$xla.gpu.triton") == 1
  assert _lower_for_cuda(g, q, k, v).count("__gpu$xla.gpu.triton") == 3


@pytest.mark.skipif(FP._pl_triton is None, reason="no Pallas Triton backend")
def test_full_attention_on_aligned_lengths_and_launch_parameters():
  """No mask, not causal, lengths a multiple of the tiles: nothing is ever masked
  (the benchmark's main case). Runs in interpret mode, lowers for CUDA, and passes
  num_warps / num_stages through to the Triton call."""
  q, k, v, _ = make((1, 64, 64, 2, 2, 16, 16), jnp.float32)
  out = jax.jit(lambda q, k, v: flash_pallas(q, k, v, block_q=32, block_k=32,
                                             interpret=True))(q, k, v)
  np.testing.assert_allclose(out, attention.get("softmax")(q, k, v), atol=2e-6)
  f = lambda q, k, v: flash_pallas(q, k, v, interpret=False, num_warps=2, num_stages=5)
  text = _lower_for_cuda(f, q, k, v)
  assert text.count("__gpu$xla.gpu.triton") == 1
  assert "num_stages = 5 : i32, num_warps = 2 : i32" in text
  # 16-row key tiles default to one stage: with 64-row query tiles and two stages the
  # dq kernel came out wrong on an H100 (dq off by up to 2.0 at head dim <= 16, bf16;
  # `python -m scripts.benchmark_gpu --tile_errors`, 2026-11-26), one stage matched
  # the interpreter there
  f = lambda q, k, v: flash_pallas(q, k, v, interpret=False, block_q=64, block_k=16)
  g = jax.grad(lambda q, k, v: jnp.sum(f(q, k, v)), argnums=(0, 1, 2))
  text = _lower_for_cuda(g, q, k, v)
  assert text.count("num_stages = 1 : i32, num_warps = 4 : i32") == 3, text[-2000:]


# ---- registry, errors, decode --------------------------------------------------

def test_registered():
  var = attention.variant("flash_pallas")
  assert var.fn is flash_pallas and var.causal and var.masks == "any"
  assert var.decode_impl is not None and var.memory == "O(N)"
  c = attention.cost("flash_pallas", batch=2, q_len=128, num_heads=4, head_dim=64,
                     causal=True, mode="fwd_bwd")
  f = attention.cost("flash", batch=2, q_len=128, num_heads=4, head_dim=64,
                     causal=True, mode="fwd_bwd")
  assert c.flops == f.flops and c.temp_bytes == f.temp_bytes


def test_errors():
  q, k, v, _ = make((1, 8, 8, 2, 2, 8, 8))
  with pytest.raises(AttentionError, match="power of two"):
    flash_pallas(q, k, v, block_q=24)
  with pytest.raises(AttentionError, match="power of two"):
    flash_pallas(q, k, v, block_k=8)
  with pytest.raises(AttentionError, match="bool"):
    flash_pallas(q, k, v, mask=jnp.ones((8, 8), jnp.int32))
  with pytest.raises(AttentionError, match="broadcastable"):
    flash_pallas(q, k, v, mask=jnp.ones((3, 8), bool))
  with pytest.raises(AttentionError, match="multiple"):
    flash_pallas(q, k[:, :, :1].repeat(3, 2), v[:, :, :1].repeat(3, 2))
  with pytest.raises(AttentionError, match="float"):
    flash_pallas(q.astype(jnp.int32), k, v)


def test_decode_matches_forward():
  q, k, v, _ = make((1, 9, 9, 2, 1, 8, 8), seed=7)

  def run(q, k, v):              # one jitted program (eagerly, each op compiles alone)
    st = attention.init_decode_state("flash_pallas", batch=1, max_len=16,
                                      num_kv_heads=1, head_dim=8)
    out, st = attention.decode_step(st, q[:, :5], k[:, :5], v[:, :5])
    out2, st = attention.decode_step(st, q[:, 5:], k[:, 5:], v[:, 5:])
    return out, out2, flash_pallas(q, k, v, causal=True, **BLK)

  out, out2, full = jax.jit(run)(q, k, v)
  assert_close(jnp.concatenate([out, out2], 1), full, 2e-5, "decode")


# ---- segment ids: per-tile masks, tiles that share no segment skipped ---------------

def test_segments_skip_tiles_in_every_kernel():
  """Packed rows (segments off the tile boundaries, trailing padding id 0), causal,
  GQA: each of the three kernels computes exactly the tiles of its causal range whose
  id ranges overlap (the kernels' own per-program counts, `visited_tiles`: per batch
  row and head: 4 x (6 + 8) of 4 x 2 x 10 causal tiles), which for packed rows are the
  tiles that share a segment, but for a tile that mixes a segment with the trailing
  padding; output and gradients equal softmax's with the same ids."""
  from tests.attention.test_flash import packed_ids, skip_rule
  ids = packed_ids((((1, 9), (2, 13), (3, 10), (4, 8), (5, 24)),
                    ((1, 6), (2, 19), (3, 7), (4, 20), (0, 12))), 64)
  q, k, v, w = make((2, 64, 64, 4, 2, 8, 8))
  n = FP.visited_tiles(q, k, v, causal=True, q_seg=ids, **BLK)
  in_range, meet, share = skip_rule(ids, ids, 16, 16, True)
  # row 1's last tile mixes segment 4 with the padding (ids [0, 4]): visited for every
  # earlier key tile though it shares no segment with them; the others are exact
  assert np.all(share <= meet) and np.array_equal(meet[0], share[0])
  assert (meet[1] & ~share[1]).sum() == 2
  want = 4 * meet.sum()
  assert n["forward"] == n["dkdv"] == n["dq"] == want < 4 * 2 * in_range.sum(), (n, want)
  assert n["tiles"] == 2 * 4 * 16
  seg = dict(q_seg=jnp.asarray(ids))
  def fwd_bwd(name, q, k, v, w, **kw):
    out, vjp = jax.vjp(lambda q, k, v: attention.get(name)(q, k, v, causal=True, **seg,
                                                           **kw), q, k, v)
    return out, vjp(w)
  (out, grads), (ref, ref_grads) = jax.jit(lambda *a: (   # one program
      fwd_bwd("flash_pallas", *a, **BLK), fwd_bwd("softmax", *a)))(q, k, v, w)
  assert_close(out, ref, 1e-5, "out")
  for x, y, what in zip(grads, ref_grads, ("dq", "dk", "dv")):
    assert_close(x, y, 2e-5, what)


@pytest.mark.skipif(FP._pl_triton is None, reason="no Pallas Triton backend")
def test_segments_lower_to_triton_with_the_tile_skip():
  """With segment ids (a cross case: both sides' ids) the kernels still lower to 1 + 2
  Triton calls, the ids as int32 tiles and the skip a branch in each tile loop."""
  q, k, v, _ = make((2, 50, 70, 4, 2, 24, 24), jnp.bfloat16)
  k_ids = jnp.asarray(np.repeat([1, 2, 3, 0], [20, 25, 15, 10])[None])
  f = lambda q, k, v: flash_pallas(q, k, v, causal=True, interpret=False,
                                   q_seg=k_ids[:, 20:], k_seg=k_ids)
  g = jax.grad(lambda q, k, v: jnp.sum(f(q, k, v).astype(jnp.float32)), argnums=(0, 1, 2))
  assert _lower_for_cuda(f, q, k, v).count("__gpu$xla.gpu.triton") == 1
  assert _lower_for_cuda(g, q, k, v).count("__gpu$xla.gpu.triton") == 3
