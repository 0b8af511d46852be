"""docs/examples/sigmoid_attention.py, the guide's template for a variant that is not
softmax(score) @ v, registered for a while (`attention.registered`) and run through the
contract's checks (tests/attention/test_contract.py, wherever it sits), decode == forward under
positions included; against a float64 NumPy reference of the paper's definition; and
b = -log(Tk) of the keys at hand, which the contract refuses (it must be a fixed option).
"""
import dataclasses
import importlib
import importlib.util
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from tests import reference


def _root() -> pathlib.Path:
  for p in pathlib.Path(__file__).resolve().parents:
    if (p / "docs" / "examples").is_dir() and (p / "attention").is_dir():
      return p
  raise AssertionError("no repository root with docs/examples above " + __file__)


def _load(path: pathlib.Path):
  spec = importlib.util.spec_from_file_location("docs_examples_" + path.stem, path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def _test_module(stem):
  """tests/attention/<stem>.py as a module, or tests/<stem>.py before the tests moved."""
  for name in (f"tests.attention.{stem}", f"tests.{stem}"):
    try:
      return importlib.import_module(name)
    except ModuleNotFoundError as e:
      if e.name != name:
        raise
  raise AssertionError(f"no tests/attention/{stem}.py nor tests/{stem}.py")


S = _load(_root() / "docs" / "examples" / "sigmoid_attention.py")
TC = _test_module("test_contract")
NAME = S.NAME


@pytest.fixture
def sigmoid():
  """The example registered for the test's duration (removed again after it)."""
  assert NAME not in attention.names(), "the example is an example: not in the library"
  with attention.registered(S.record()):
    yield attention.variant(NAME)
  assert NAME not in attention.names()


def test_record_shapes_refusals_and_gradients(sigmoid):
  TC.check_record(NAME)
  TC.check_params_and_options(NAME)
  assert set(sigmoid.options) == {"bias", "max_len", "scale"}
  assert sigmoid.score is None and sigmoid.implied_weights is not None
  TC.check_shapes(NAME)
  TC.test_refusals(NAME)
  TC.test_gradients_finite(NAME)


def test_masks_causality_and_segments(sigmoid):
  TC.test_masks_and_empty_rows(NAME)
  TC.check_causality(NAME)
  TC.test_segments(NAME)
  TC.test_segments_with_default_options(NAME)


@pytest.mark.parametrize("positions", [None, "rope", "alibi"])
def test_decode_equals_forward(sigmoid, positions):
  """Token by token and after a prefill, with the KV cache as its state and the
  sigmoid readout; under RoPE (keys stored rotated) and ALiBi (key positions kept)."""
  kw = {} if positions is None else dict(positions=positions)
  state = TC.check_decode(NAME, **kw)
  assert isinstance(state, attention.KVCache)
  assert attention.decode_state_bytes(NAME, batch=2, max_len=8, num_kv_heads=2,
                                      head_dim=8, **kw) == attention.state_nbytes(state)
  if positions is None:               # test_decode_equals_forward_under_x64's check
    with jax.enable_x64(True):
      TC.check_decode(NAME, after_prefill=False)


def _reference(q, k, v, *, causal, mask, b, scale=None, bias=None):
  """float64: sum_j allowed_ij sigmoid(q_i.k_j * scale + b + bias_ij) v_j, heads
  expanded by repetition (no grouped layout)."""
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  B, Tq, Hq, D = q.shape
  k, v = reference.expand(k, Hq), reference.expand(v, Hq)
  s = np.einsum("bihd,bjhd->bhij", q, k) * (1 / math.sqrt(D) if scale is None else scale) + b
  if bias is not None:
    s = s + bias
  w = np.where(reference.allowed(B, Hq, Tq, k.shape[1], causal, mask), 1 / (1 + np.exp(-s)), 0)
  return np.einsum("bhij,bjhd->bihd", w, v)


@pytest.mark.usefixtures("x64")
def test_it_is_the_papers_definition_and_its_weights_apply_to_v(sigmoid):
  """float64, GQA, Tq < Tk causal with a key-padding mask, ALiBi at random positions;
  b = -log(max_len) by default, or `bias`; implied_weights @ v is the output."""
  rng = np.random.default_rng(0)
  q, k, v = (rng.standard_normal(s) for s in ((2, 5, 4, 8), (2, 9, 2, 8), (2, 9, 2, 6)))
  mask = np.ones((2, 1, 1, 9), bool)
  mask[0, ..., 6:] = False
  qp, kp = rng.integers(0, 40, (2, 5)), rng.integers(0, 40, (1, 9))
  fn = sigmoid.fn
  out, out_b, w, out_w = jax.jit(lambda q, k, v: (      # one program, not op by op
      fn(q, k, v, causal=True, mask=mask, max_len=64, positions="alibi", q_pos=qp,
         k_pos=kp),
      fn(q, k, v, bias=-1.5, scale=0.3),
      attention.implied_weights(q, k, name=NAME, causal=True, mask=mask),
      fn(q, k, v, causal=True, mask=mask)))(q, k, v)
  ref = _reference(q, k, v, causal=True, mask=mask, b=-math.log(64),
                   bias=reference.alibi_bias(4, qp, kp))
  np.testing.assert_allclose(out, ref, atol=1e-12)
  np.testing.assert_allclose(out_b,
                             _reference(q, k, v, causal=False, mask=None, b=-1.5, scale=0.3),
                             atol=1e-12)
  np.testing.assert_allclose(np.einsum("bhqk,bkhd->bqhd", w, reference.expand(v, 4)),
                             out_w, atol=1e-12)
  with pytest.raises(attention.AttentionError, match="'sigmoid'.*max_len=0"):
    fn(q, k, v, max_len=0)


def keys_count_bias(q, k, v, **kw):
  """The paper's b = -log(n) taken as -log(Tk), the number of keys of the call: what the
  contract refuses (an output row would depend on keys it does not see)."""
  return S.sigmoid_attention(q, k, v, bias=-math.log(k.shape[1]), **kw)


def test_b_from_the_number_of_keys_breaks_causality_and_decoding():
  """With b = -log(Tk) a causal query's output changes when the keys after it are
  dropped (Tq > Tk, the contract's bottom-right check) and a decode step (which sees
  t keys) differs from the forward pass (which sees T): hence a fixed option."""
  rec = dataclasses.replace(S.record(), fn=keys_count_bias)
  with attention.registered(rec):
    with pytest.raises(AssertionError, match="bottom-right aligned"):
      TC.check_causality(NAME)
    q, k, v = TC.make_qkv(NAME)
    state = attention.init_decode_state(NAME, batch=2, max_len=8, num_kv_heads=2,
                                        head_dim=8)
    step, _ = attention.decode_step(state, q[:, :5], k[:, :5], v[:, :5],
                                    bias=-math.log(5))
    full = keys_count_bias(q, k, v, causal=True)
    assert np.abs(np.asarray(step) - np.asarray(full[:, :5])).max() > 1e-3


def test_the_position_tests_pick_it_by_its_facts(sigmoid):
  """tests/attention/test_positions.py reads its record: no score, so not softmax's reference;
  implied weights, so fn == weights @ v under each scheme it takes (float64)."""
  tp = _test_module("test_positions")
  assert NAME not in tp.softmax_of_score("alibi") and NAME in tp.with_implied_weights("alibi")
  assert "implied weights" in tp.position_reference(NAME)
  with jax.enable_x64(True):
    for scheme in tp.SCHEMES:
      tp.test_implied_weights_under_every_scheme(NAME, scheme)


# ---- a per-token input: softmax with a sigmoid output gate ---------------------------
# What a user writes from this template for a variant that needs a quantity computed
# from the layer input (Variant.inputs): here a gate per query head and value channel,
# out = (softmax(q.k / sqrt(D)) @ v) ⊙ sigmoid(gate). Its gate is a required keyword (no
# default), it cross-attends (cross=True) and its refusal of a gate that does not match
# v names the gate, not a "dim": the contract asks none of those of it.
GATED = "gated_softmax"


def gated_softmax(q, k, v, *, gate, causal=False, mask=None, scale=None, q_seg=None,
                  k_seg=None, **kw):
  """q (B, Tq, Hq, D), k (B, Tk, Hkv, D), v (B, Tk, Hkv, Dv), gate (B, Tq, Hq, Dv) ->
  (B, Tq, Hq, Dv) in q's dtype: softmax attention, each output channel multiplied by
  sigmoid of its gate logit (float32)."""
  C = attention.core.common
  C.unexpected(GATED, kw)
  d = C.check_qkv(q, k, v, GATED)
  if tuple(gate.shape) != (d.B, d.Tq, d.Hq, d.Dv):
    raise attention.AttentionError(
        f"attention variant '{GATED}': gate {tuple(gate.shape)} must be (B, Tq, Hq, Dv) "
        f"of q and v, {(d.B, d.Tq, d.Hq, d.Dv)}")
  o = attention.softmax.score_attention(attention.SCALED_DOT, q, k, v, name=GATED,
                                        causal=causal, mask=mask, scale=scale,
                                        q_seg=q_seg, k_seg=k_seg)
  return (o.astype(jnp.float32) * jax.nn.sigmoid(gate.astype(jnp.float32))).astype(q.dtype)


def gated_record() -> attention.Variant:
  softmax = attention.variant("softmax")
  return attention.Variant(
      name=GATED, fn=gated_softmax, paper="a test", time="O(N² D)", memory="O(N²)",
      cost=softmax.cost, causal=True, masks="any", cross=True, dropout=False,
      decode=None, family="score", summary="softmax attention ⊙ sigmoid(gate)",
      inputs={"gate": attention.InputSpec(width=lambda head_dim: head_dim, heads="q")},
      segments="a mask: query and key share a segment")


def test_a_variant_with_a_per_token_input_passes_the_contract():
  """Registered for a while, the gated softmax passes the contract's checks: its
  per-token gate rows follow their queries when Tq < Tk and Tq > Tk (bottom-right
  aligned causal: the chunk of the last 3 queries gets the last 3 gate rows), a
  request with bad shapes still gets its gate (a required keyword), and its refusal of
  v's Dv != D names the gate. It moves with its gate (the gate is used, not dropped)."""
  with attention.registered(gated_record()):
    TC.check_record(GATED)
    TC.check_params_and_options(GATED)
    TC.check_shapes(GATED)
    TC.test_refusals(GATED)
    TC.check_causality(GATED)
    q, k, v = TC.make_qkv(GATED)
    gate = jnp.zeros(q.shape[:3] + (v.shape[-1],))
    np.testing.assert_allclose(gated_softmax(q, k, v, gate=gate),
                               0.5 * attention.get("softmax")(q, k, v), atol=1e-6)
  assert GATED not in attention.names()


@pytest.mark.slow
def test_a_variant_with_a_per_token_input_passes_the_other_checks():
  """The rest of the contract on the gated softmax: masks and empty rows, segments
  (its gate rows packed and cut with their queries, cross included) and gradients."""
  with attention.registered(gated_record()):
    TC.test_masks_and_empty_rows(GATED)
    TC.test_segments(GATED)
    TC.test_gradients_finite(GATED)
