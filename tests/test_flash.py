"""flash: gradients equal softmax's (custom VJP), and the blocking logic is right."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import attention
from tests.test_exact import MASKS, SHAPES, make_inputs, make_mask


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
@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("shape_name", list(SHAPES))
def test_flash_gradients_equal_softmax(shape_name, mask_kind):
  shape = SHAPES[shape_name]
  q, k, v = (jnp.asarray(x) for x in make_inputs(shape))
  mask = make_mask(mask_kind, shape)
  causal = "causal" in mask_kind
  g_ref = jax.jit(jax.grad(loss("softmax", causal, mask), argnums=(0, 1, 2)))(q, k, v)
  g = jax.jit(jax.grad(loss("flash", causal, mask, block_q=8, block_k=16),
                       argnums=(0, 1, 2)))(q, k, v)
  for a, b, what in zip(g, g_ref, "qkv"):
    np.testing.assert_allclose(a, b, atol=1e-10, err_msg=f"d{what}")
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
  out = jax.jit(lambda q, k, v: attention.get("flash")(q, k, v, causal=causal))(q, k, v)
  ref = attention.get("softmax")(q, k, v, causal=causal)
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
@pytest.mark.parametrize("mask_kind", ["padding+causal", "shared", "per_head"])
def test_flash_one_slice_per_step_equals_softmax(mask_kind):
  """Long inputs run (batch, kv-head) slices one at a time (`lax.map`); forward and
  gradients must not change, whatever axes the mask has."""
  import attention.flash as F
  one = dict(block_q=8, block_k=8, step_score_bytes=1)   # forces one slice per step
  shape = (2, 9, 11, 4, 2, 4, 3)  # B, Tq, Tk, Hq, Hkv (GQA), D, Dv
  B, Tq, Tk, Hq = shape[:4]
  dims = attention.common.Dims(*shape)
  assert F._slices_per_step(dims, 8, 8, 1) == 1 and F._slices_per_step(dims, 8, 8) == 4
  q, k, v = (jnp.asarray(x) for x in make_inputs(shape))
  rng = np.random.default_rng(3)
  mask = {"padding+causal": make_mask("padding", shape),
          "shared": rng.random((Tq, Tk)) < 0.7,
          "per_head": rng.random((B, Hq, Tq, Tk)) < 0.7}[mask_kind]
  causal = "causal" in mask_kind
  ref = attention.get("softmax")(q, k, v, causal=causal, mask=mask)
  out = attention.get("flash")(q, k, v, causal=causal, mask=mask, **one)
  np.testing.assert_allclose(out, ref, atol=1e-12)
  g_ref = jax.grad(loss("softmax", causal, mask), argnums=(0, 1, 2))(q, k, v)
  g = jax.grad(loss("flash", causal, mask, **one), argnums=(0, 1, 2))(q, k, v)
  for a, b, what in zip(g, g_ref, "qkv"):
    np.testing.assert_allclose(a, b, atol=1e-10, err_msg=f"d{what}")


def test_on_a_gpu_flash_runs_the_pallas_kernels(monkeypatch):
  """`flash` hands over to flash_pallas when the backend is a GPU (here faked: the
  kernels run in interpret mode), passing on only power-of-two tiles."""
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
  out = fl.flash(q, k, v, causal=True, block_q=16, block_k=24)
  assert calls and calls[0]["block_q"] == 16 and calls[0]["block_k"] is None
  np.testing.assert_allclose(out, attention.get("softmax")(q, k, v, causal=True), atol=1e-5)
