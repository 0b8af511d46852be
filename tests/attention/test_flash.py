"""flash: gradients equal softmax's (custom VJP), and the blocking logic is right."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import attention
from tests.attention.test_exact import MASKS, SHAPES, make_inputs, make_mask


def loss(name, causal, mask, **kw):
  fn = attention.get(name)
  w = None

  def f(q, k, v):
    out = fn(q, k, v, causal=causal, mask=mask, **kw)
    # a fixed random projection so every output element gets a distinct cotangent
    nonlocal w
    if w is None:
      w = jnp.asarray(np.random.default_rng(9).normal(size=out.shape), out.dtype)
    return jnp.sum(out * w)
  return f


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("shape_name", list(SHAPES))
def test_flash_gradients_equal_softmax(shape_name):
  """Every mask kind (MASKS), flash's gradients and softmax's: one jitted program."""
  shape = SHAPES[shape_name]
  q, k, v = (jnp.asarray(x) for x in make_inputs(shape))
  cases = [(m, "causal" in m, make_mask(m, shape)) for m in MASKS]

  def grads(q, k, v):
    return [(jax.grad(loss("softmax", causal, mask), argnums=(0, 1, 2))(q, k, v),
             jax.grad(loss("flash", causal, mask, block_q=8, block_k=16),
                      argnums=(0, 1, 2))(q, k, v)) for _, causal, mask in cases]

  for (mask_kind, _, _), (g_ref, g) in zip(cases, jax.jit(grads)(q, k, v)):
    for a, b, what in zip(g, g_ref, "qkv"):
      np.testing.assert_allclose(a, b, atol=1e-10, err_msg=f"{mask_kind}: d{what}")
      assert np.all(np.isfinite(a))


@pytest.mark.usefixtures("x64")
def test_flash_check_grads():
  q, k, v = (jnp.asarray(x) for x in make_inputs((1, 5, 7, 2, 1, 4, 3)))
  mask = make_mask("padding", (1, 5, 7))
  f = jax.jit(lambda q, k, v: attention.get("flash")(q, k, v, causal=True, mask=mask,
                                                     block_q=8, block_k=8))
  check_grads(f, (q, k, v), order=1, modes=["rev"], atol=1e-6, rtol=1e-6)


def test_flash_bf16_gradients_close_to_fp32():
  q, k, v = (jnp.asarray(x, jnp.float32) for x in make_inputs(SHAPES["odd_blocks"]))
  f32 = jax.jit(jax.grad(loss("softmax", True, None), argnums=(0, 1, 2)))(q, k, v)
  b16 = jax.jit(jax.grad(loss("flash", True, None, block_q=8, block_k=16),
                         argnums=(0, 1, 2)))(
      *(x.astype(jnp.bfloat16) for x in (q, k, v)))
  for a, b in zip(b16, f32):
    assert a.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(a, np.float32), b, atol=0.1, rtol=0.05)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_default_blocks_on_a_longer_sequence(causal):
  """Several default-size tiles with padding: 1100 is no multiple of 512 or 1024."""
  q, k, v = make_inputs((1, 1100, 2, 2, 1, 16, 16), dtype=np.float32)
  out, ref = jax.jit(lambda q, k, v: (attention.get("flash")(q, k, v, causal=causal),
                                      attention.get("softmax")(q, k, v, causal=causal)))(
      q, k, v)                                         # one program
  np.testing.assert_allclose(out, ref, atol=2e-5)


def test_flash_never_builds_the_score_matrix():
  """The compiled forward+backward holds no (Tq, Tk)-sized temporary."""
  B, T, H, D = 1, 2048, 2, 16
  q = jnp.ones((B, T, H, D))
  f = jax.jit(jax.grad(lambda q: attention.get("flash")(q, q, q, causal=True,
                                                         block_q=128, block_k=128).sum()))
  temp = f.lower(q).compile().memory_analysis().temp_size_in_bytes
  dense = B * H * T * T * 4
  assert temp < dense / 8, (temp, dense)


@pytest.mark.usefixtures("x64")
def test_flash_one_slice_per_step_equals_softmax():
  """Long inputs run (batch, kv-head) slices one at a time (`lax.map`); forward and
  gradients must not change, whatever axes the mask has (padding + causal, shared
  (Tq, Tk), per head): the three in one jitted program."""
  import attention.flash as F
  one = dict(block_q=8, block_k=8, step_score_bytes=1)   # forces one slice per step
  shape = (2, 9, 11, 4, 2, 4, 3)  # B, Tq, Tk, Hq, Hkv (GQA), D, Dv
  B, Tq, Tk, Hq = shape[:4]
  dims = attention.core.common.Dims(*shape)
  assert F._slices_per_step(dims, 8, 8, 1) == 1 and F._slices_per_step(dims, 8, 8) == 4
  q, k, v = (jnp.asarray(x) for x in make_inputs(shape))
  rng = np.random.default_rng(3)
  masks = {"padding+causal": make_mask("padding", shape),
           "shared": rng.random((Tq, Tk)) < 0.7,
           "per_head": rng.random((B, Hq, Tq, Tk)) < 0.7}

  def run(q, k, v):            # one jitted program (eagerly, each op compiles alone)
    res = {}
    for mask_kind, mask in masks.items():
      causal = "causal" in mask_kind
      res[mask_kind] = (
          attention.get("softmax")(q, k, v, causal=causal, mask=mask),
          attention.get("flash")(q, k, v, causal=causal, mask=mask, **one),
          jax.grad(loss("softmax", causal, mask), argnums=(0, 1, 2))(q, k, v),
          jax.grad(loss("flash", causal, mask, **one), argnums=(0, 1, 2))(q, k, v))
    return res

  for mask_kind, (ref, out, g_ref, g) in jax.jit(run)(q, k, v).items():
    np.testing.assert_allclose(out, ref, atol=1e-12, err_msg=mask_kind)
    for a, b, what in zip(g, g_ref, "qkv"):
      np.testing.assert_allclose(a, b, atol=1e-10, err_msg=f"{mask_kind}: d{what}")


def test_on_a_gpu_flash_runs_the_pallas_kernels(monkeypatch):
  """`flash` hands over to flash_pallas when the backend is a GPU (here faked: the
  kernels run in interpret mode), passing on only power-of-two tiles of 16-128 rows
  (flash's CPU tiles of 512+ rows would overflow a GPU's shared memory)."""
  import attention.flash as fl
  import attention.flash_pallas as fp
  calls = []
  real = fp.flash_pallas

  def spy(*a, **kw):
    calls.append(kw)
    return real(*a, **kw)

  monkeypatch.setattr(fl, "_on_gpu", lambda: True)
  monkeypatch.setattr(fp, "flash_pallas", spy)
  rng = np.random.default_rng(0)
  q, k, v = (jnp.asarray(rng.normal(size=(1, 24, 2, 8)), jnp.float32) for _ in range(3))
  # jitted (eagerly, each op compiles alone); the second call only traced: its tiles
  out = jax.jit(lambda q, k, v: fl.flash(q, k, v, causal=True, block_q=16,
                                         block_k=24))(q, k, v)
  assert calls and calls[0]["block_q"] == 16 and calls[0]["block_k"] is None
  jax.eval_shape(lambda q, k, v: fl.flash(q, k, v, causal=True, block_q=512,
                                          block_k=128), q, k, v)
  assert calls[1]["block_q"] is None and calls[1]["block_k"] == 128
  np.testing.assert_allclose(out, attention.get("softmax")(q, k, v, causal=True), atol=1e-5)


def test_on_a_gpu_float64_stays_on_the_exact_tiled_path(monkeypatch, x64):
  """The Triton kernels are for 16/32-bit floats (float64 through them came out wrong
  on an H200): `flash` keeps float64 on its pure-JAX tiles, and flash_pallas's default
  is interpret mode for float64 even on a GPU."""
  import attention.flash as fl
  import attention.flash_pallas as fp
  monkeypatch.setattr(fl, "_on_gpu", lambda: True)
  monkeypatch.setattr(fp, "flash_pallas", lambda *a, **kw: pytest.fail("handed over"))
  q, k, v = (jnp.asarray(x) for x in make_inputs(SHAPES["gqa"]))
  mask = make_mask("padding", SHAPES["gqa"])
  out, ref = jax.jit(lambda q, k, v: (                 # one program
      fl.flash(q, k, v, causal=True, mask=mask, block_q=8, block_k=8),
      attention.get("softmax")(q, k, v, causal=True, mask=mask)))(q, k, v)
  assert out.dtype == jnp.float64
  np.testing.assert_allclose(out, ref, atol=1e-12)
  assert fp.default_interpret(jnp.float64, "gpu")
  assert not fp.default_interpret(jnp.float32, "gpu")
  assert not fp.default_interpret(jnp.bfloat16, "gpu")
  assert fp.default_interpret(jnp.float32, "cpu")


# ---- segment ids: tiles that share no segment are skipped ---------------------------

def packed_ids(layout, T):
  """(B, T) int32 ids from rows of (id, length) laid end to end (packing's layout)."""
  return np.stack([np.repeat([s for s, _ in row], [n for _, n in row])[:T]
                   for row in layout]).astype(np.int32)


def skip_rule(q_ids, k_ids, bq, bk, causal):
  """(tiles (i, j) the causal range visits, those of them whose id ranges [min, max]
  overlap in some batch row, those that share a segment), each an (nq, nk) bool array:
  the documented rule, in NumPy, from the ids alone (padded with the last id)."""
  Tq, Tk = q_ids.shape[1], k_ids.shape[1]
  nq, nk = -(-Tq // bq), -(-Tk // bk)
  pad = lambda x, n: np.pad(x, ((0, 0), (0, n - x.shape[1])), mode="edge")
  qt = pad(q_ids, nq * bq).reshape(len(q_ids), nq, bq)
  kt = pad(k_ids, nk * bk).reshape(len(k_ids), nk, bk)
  i, j = np.arange(nq)[:, None], np.arange(nk)[None, :]
  in_range = (j * bk <= i * bq + bq - 1 + (Tk - Tq)) if causal else np.ones((nq, nk), bool)
  meet = ((qt.max(-1)[:, :, None] >= kt.min(-1)[:, None, :])
          & (kt.max(-1)[:, None, :] >= qt.min(-1)[:, :, None]))
  share = np.zeros((len(q_ids), nq, nk), bool)
  for b in range(len(q_ids)):
    for a in range(nq):
      for c in range(nk):
        share[b, a, c] = bool(np.intersect1d(qt[b, a][:Tq], kt[b, c]).size)
  return in_range, in_range & meet, in_range & share


# two packed rows of 40: segments end to end (not on tile boundaries), trailing padding 0
SEG_ROWS = (((1, 9), (2, 13), (3, 10), (4, 8)), ((1, 6), (2, 19), (3, 7), (0, 8)))


@pytest.mark.parametrize("causal", [False, True])
def test_flash_skips_the_tiles_that_share_no_segment(causal):
  """Packed rows: the forward and backward passes compute exactly the tiles of the
  causal range whose id ranges overlap (counted in the loops' carries, `visited_tiles`:
  a pass that skipped nothing, or skipped a tile it needed, would count otherwise), which
  here are the tiles that share a segment, fewer than the range (17 of 25 tiles, 11 of
  the 15 causal ones; row 0 alone in its step: 11 of 25); and the output and gradients
  equal softmax's with the same ids (causal: one (batch, kv head) slice per step)."""
  from attention import flash as F
  ids = packed_ids(SEG_ROWS, 40)
  rng = np.random.default_rng(3)
  q, k, v = (jnp.asarray(rng.normal(size=(2, 40, h, 8)), jnp.float32) for h in (4, 2, 2))
  n = F.visited_tiles(q, k, v, causal=causal, q_seg=ids, block_q=8, block_k=8)
  in_range, meet, share = skip_rule(ids, ids, 8, 8, causal)
  assert n["forward"] == n["backward"] == meet.any(0).sum(), (n, meet.any(0).sum())
  assert np.array_equal(meet, share)       # non-decreasing ids: overlap == a shared segment
  assert n["forward"] < in_range.sum() and n["tiles"] == 25
  if not causal:                           # one row per step: its own tiles only
    nb = F.visited_tiles(q[:1], k[:1], v[:1], q_seg=ids[:1], block_q=8, block_k=8)
    assert nb["forward"] == nb["backward"] == meet[0].sum() < meet.any(0).sum(), nb
  # causal: one (batch, kv head) slice per step, the path long sequences take
  kw = dict(q_seg=jnp.asarray(ids), block_q=8, block_k=8,
            **(dict(step_score_bytes=1) if causal else {}))
  (val, grads), (ref, ref_grads) = jax.jit(lambda q, k, v: (     # one program
      jax.value_and_grad(loss("flash", causal, None, **kw), argnums=(0, 1, 2))(q, k, v),
      jax.value_and_grad(loss("softmax", causal, None, q_seg=jnp.asarray(ids)),
                         argnums=(0, 1, 2))(q, k, v)))(q, k, v)
  np.testing.assert_allclose(val, ref, rtol=1e-5)
  for g, r in zip(grads, ref_grads):
    np.testing.assert_allclose(g, r, atol=2e-5)
