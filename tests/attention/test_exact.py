"""The exact family against the float64 NumPy reference, under the whole contract.

flash_pallas has its own file (interpret mode on CPU is slow, so it uses its own
small shapes); everything else of the exact family is checked here.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from tests import reference

EXACT = ["softmax", "dot", "general", "additive", "cosine", "location", "flash"]
# Small blocks make the test shapes cross flash's block boundaries.
KW = {"flash": dict(block_q=8, block_k=16)}

SHAPES = {  # B, Tq, Tk, Hq, Hkv, D, Dv
    "mha": (2, 6, 6, 2, 2, 8, 8),
    "gqa": (1, 5, 9, 4, 2, 8, 8),
    "mqa_dv_tq>tk": (2, 7, 4, 3, 1, 8, 5),
    "odd_blocks": (1, 37, 53, 2, 1, 4, 6),
}
MASKS = ["none", "causal", "padding", "padding+causal"]


def make_inputs(shape, seed=0, dtype=np.float64):
  B, Tq, Tk, Hq, Hkv, D, Dv = shape
  rng = np.random.default_rng(seed)
  q = rng.normal(size=(B, Tq, Hq, D))
  k = rng.normal(size=(B, Tk, Hkv, D))
  v = rng.normal(size=(B, Tk, Hkv, Dv))
  return q.astype(dtype), k.astype(dtype), v.astype(dtype)


def make_mask(kind, shape, seed=1):
  """None, or a (B, 1, Tq, Tk) mask with a fully masked query row (and a batch's
  last key masked), so that the 'no allowed key -> zeros' rule is exercised."""
  B, Tq, Tk = shape[:3]
  if "padding" not in kind:
    return None
  rng = np.random.default_rng(seed)
  m = rng.random((B, 1, Tq, Tk)) < 0.7
  m[:, :, 0, :] = False       # a row with nothing to attend to
  m[0, :, :, -1] = False      # padding at the end of a sequence
  return m


def make_params(name, shape, seed=2, dtype=np.float64):
  """Random explicit parameters from the variant's ParamSpec shapes."""
  Hq, D, Tk = shape[3], shape[5], shape[2]
  rng = np.random.default_rng(seed)
  out = {}
  for pname, spec in attention.variant(name).params.items():
    if spec.when is not None:        # switched on by an option (sinks): off here
      continue
    s = spec.shape(Hq, D, Tk + 3)
    out[pname] = (rng.normal(size=s) * 0.5 + (1.0 if pname == "beta" else 0.0)).astype(dtype)
  return out


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("name", EXACT)
def test_matches_numpy_reference(name):
  """Every shape of SHAPES under every mask kind of MASKS (rows with no allowed key
  exactly zero; with Tq = 7 > Tk = 4, causal, the first 3 queries see no key): the 16
  cases of a variant in one jitted program (one compile instead of 16 eager runs, each
  op compiled alone)."""
  cases, refs = {}, {}
  for shape_name in SHAPES:
    for mask_kind in MASKS:
      shape = SHAPES[shape_name]
      q, k, v = make_inputs(shape)
      mask = make_mask(mask_kind, shape)
      params = make_params(name, shape)
      causal = "causal" in mask_kind
      cases[shape_name, mask_kind] = (q, k, v, mask, params)
      refs[shape_name, mask_kind] = reference.attention(name, q, k, v, causal=causal,
                                                        mask=mask, params=params)
  fn = attention.get(name)
  outs = jax.jit(lambda cases: {
      key: fn(q, k, v, causal="causal" in key[1], mask=mask, **params,
              **KW.get(name, {}))
      for key, (q, k, v, mask, params) in cases.items()})(cases)
  for (shape_name, mask_kind), ref in refs.items():
    out, at = outs[shape_name, mask_kind], f"{name}, {shape_name}, {mask_kind}"
    assert out.shape == ref.shape and out.dtype == jnp.float64, at
    np.testing.assert_allclose(np.asarray(out), ref, atol=1e-10, rtol=1e-10, err_msg=at)
    if "padding" in mask_kind:  # rows with nothing to attend to are exactly zero
      assert np.all(np.asarray(out)[:, 0] == 0.0), at
  # (formerly its own test, the same call) Tq = 7 > Tk = 4, causal: zero first rows
  out = np.asarray(outs["mqa_dv_tq>tk", "causal"])
  assert np.all(out[:, :3] == 0.0) and np.all(np.isfinite(out))


@pytest.mark.parametrize("name", ["softmax", "dot", "general", "flash"])
def test_very_large_logits_do_not_overflow(name):
  shape = SHAPES["gqa"]
  q, k, v = make_inputs(shape, dtype=np.float32)
  q = q * 1e4  # logits ~1e4-1e5: a naive exp overflows
  params = make_params(name, shape, dtype=np.float32)
  out = np.asarray(jax.jit(lambda q, k, v: attention.get(name)(    # one program
      q, k, v, causal=True, **params, **KW.get(name, {})))(q, k, v))
  assert np.all(np.isfinite(out))
  ref = reference.attention(name, q, k, v, causal=True, params=params)
  np.testing.assert_allclose(out, ref, atol=1e-4)


@pytest.mark.parametrize("name", EXACT)
def test_bf16_inputs(name):
  shape = SHAPES["odd_blocks"]
  q, k, v = (jnp.asarray(x, jnp.bfloat16) for x in make_inputs(shape, dtype=np.float32))
  params = make_params(name, shape, dtype=np.float32)
  mask = make_mask("padding", shape)
  out = jax.jit(lambda q, k, v: attention.get(name)(                 # one program
      q, k, v, causal=True, mask=mask, **params, **KW.get(name, {})))(q, k, v)
  assert out.dtype == jnp.bfloat16
  ref = reference.attention(name, *(np.asarray(x, np.float64) for x in (q, k, v)),
                            causal=True, mask=mask, params=params)
  np.testing.assert_allclose(np.asarray(out, np.float64), ref, atol=3e-2)


@pytest.mark.parametrize("name", EXACT)
def test_jit_and_vmap(name):
  shape = SHAPES["gqa"]
  q, k, v = make_inputs(shape, dtype=np.float32)
  mask = make_mask("padding", shape)
  params = make_params(name, shape, dtype=np.float32)
  f = functools.partial(attention.get(name), causal=True, **params, **KW.get(name, {}))
  eager, jf = f(q, k, v, mask=mask), jax.jit(f)
  np.testing.assert_allclose(jf(q, k, v, mask=mask), eager, atol=1e-6)
  # vmap over an extra leading axis: two independent problems at once (jitted: an
  # eager vmap compiles each op alone; the second problem against jf, compiled once)
  qs, ks, vs = (np.stack([x, x[..., ::-1]]) for x in (q, k, v))
  batched = jax.jit(jax.vmap(lambda a, b, c: f(a, b, c, mask=mask)))(qs, ks, vs)
  np.testing.assert_allclose(batched[0], eager, atol=1e-6)
  np.testing.assert_allclose(batched[1], jf(qs[1], ks[1], vs[1], mask=mask), atol=1e-6)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("name", ["softmax", "general", "cosine", "location"])
def test_probabilities_are_the_softmax_of_the_scores(name):
  shape = SHAPES["gqa"]
  q, k, _ = make_inputs(shape)
  params = make_params(name, shape)
  mask = make_mask("padding", shape)
  p = np.asarray(attention.probabilities(q, k, name=name, causal=True, mask=mask, **params))
  B, Tq, Tk, Hq = shape[:4]
  assert p.shape == (B, Hq, Tq, Tk)
  # each row is the reference attention applied to one-hot values
  eye = np.broadcast_to(np.eye(Tk)[None, :, None, :], (B, Tk, shape[4], Tk))
  ref = reference.attention(name, q, k, eye, causal=True, mask=mask, params=params)
  np.testing.assert_allclose(p, ref.transpose(0, 2, 1, 3), atol=1e-12)
  sums = p.sum(-1)
  assert np.allclose(sums[:, :, 1:], 1.0) and np.all(sums[:, :, 0] == 0.0)


def test_segment_positions_restart_at_every_id_change():
  """common.segment_positions, which location reads for packed keys: each token's
  index within its run of equal ids (padding id 0 a run of its own), per row."""
  from attention.core.common import segment_positions
  ids = np.array([[1, 1, 1, 2, 2, 3, 0, 0], [5, 5, 5, 5, 5, 7, 7, 7]])
  np.testing.assert_array_equal(segment_positions(jnp.asarray(ids)),
                                [[0, 1, 2, 0, 1, 0, 0, 1], [0, 1, 2, 3, 4, 0, 1, 2]])
