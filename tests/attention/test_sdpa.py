"""sdpa (jax.nn.dot_product_attention) under the contract, against the float64
reference: masks, bottom-right causal with Tq != Tk, empty rows -> 0, GQA/MQA, bf16,
gradients. (Its KV-cache decode is checked by tests/attention/test_contract.py.)"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from attention import sdpa as sdpa_mod
from tests import reference
from tests.attention.test_exact import MASKS, make_inputs, make_mask

SHAPES = {  # B, Tq, Tk, Hq, Hkv, D, Dv (JAX needs Dv == D)
    "mha": (2, 6, 6, 2, 2, 8, 8),
    "gqa_tq<tk": (1, 5, 9, 4, 2, 8, 8),
    "mqa_tq>tk": (2, 7, 4, 3, 1, 8, 8),
}


def test_matches_the_reference():
  """Every shape of SHAPES under every mask kind of MASKS: the 12 calls in one jitted
  program (one compile instead of 12 eager runs)."""
  cases = {}
  for shape_name, shape in SHAPES.items():
    for mask_kind in MASKS:
      q, k, v = make_inputs(shape, dtype=np.float32)
      cases[shape_name, mask_kind] = (q, k, v, make_mask(mask_kind, shape))
  outs = jax.jit(lambda cases: {
      key: attention.get("sdpa")(q, k, v, causal="causal" in key[1], mask=mask)
      for key, (q, k, v, mask) in cases.items()})(cases)
  for (shape_name, mask_kind), (q, k, v, mask) in cases.items():
    shape, causal, at = SHAPES[shape_name], "causal" in mask_kind, (shape_name, mask_kind)
    out = np.asarray(outs[shape_name, mask_kind])
    ref = reference.attention("softmax", q, k, v, causal=causal, mask=mask)
    np.testing.assert_allclose(out, ref, atol=2e-6, rtol=2e-6, err_msg=str(at))
    if mask is not None:
      assert np.all(out[:, 0] == 0.0), at
    if causal and shape[1] > shape[2]:    # bottom-right: the first Tq - Tk rows see nothing
      assert np.all(out[:, :shape[1] - shape[2]] == 0.0), at


def test_bf16_and_gradients():
  shape = SHAPES["gqa_tq<tk"]
  q, k, v = make_inputs(shape, dtype=np.float32)
  f = attention.get("sdpa")
  loss = lambda name, *qkv: jax.grad(lambda q, k, v: jnp.sum(
      jnp.sin(attention.get(name)(q, k, v, causal=True))), argnums=(0, 1, 2))(*qkv)
  out, g, g_ref = jax.jit(lambda q, k, v: (       # one program
      f(*(x.astype(jnp.bfloat16) for x in (q, k, v)), causal=True),
      loss("sdpa", q, k, v), loss("softmax", q, k, v)))(q, k, v)
  assert out.dtype == jnp.bfloat16
  ref = reference.attention("softmax", q, k, v, causal=True)
  np.testing.assert_allclose(np.asarray(out, np.float32), ref, atol=3e-2)
  for a, b in zip(g, g_ref):
    np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.usefixtures("x64")
def test_refusals_name_the_reason():
  q = jnp.ones((1, 4, 2, 8))
  with pytest.raises(attention.AttentionError, match="value head dim"):
    attention.get("sdpa")(q, q, jnp.ones((1, 4, 2, 4)))
  with pytest.raises(attention.AttentionError, match="float64"):
    attention.get("sdpa")(*(np.ones((1, 4, 2, 8)),) * 3)


def test_implementation_is_cudnn_only_on_a_gpu_in_half_precision():
  assert sdpa_mod.implementation(jnp.bfloat16, "gpu") == "cudnn"
  assert sdpa_mod.implementation(jnp.float16, "gpu") == "cudnn"
  assert sdpa_mod.implementation(jnp.float32, "gpu") == "xla"
  assert sdpa_mod.implementation(jnp.bfloat16, "cpu") == "xla"
