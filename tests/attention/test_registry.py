"""The registry: names, records refused at registration, dropout, the tables of
docs/variants.md, and variants registered for a while (`attention.registered`).

The contract of every registered variant (its record's facts, shapes, masks,
causality, refusals, decoding, gradients) is tests/attention/test_contract.py; the variants
that the tests below register for themselves pass its checks too: a new exact kernel
and a new score function decode with the KV cache and draw maps with no edit to the
library.
"""
import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from attention.core import registry
from attention.core.scores import score_attention
from tests.attention.test_contract import (check_decode, check_params_and_options, check_record,
                                 check_score_and_family, check_shapes)
from tests.attention.test_decode import run_decode
from tests.attention.test_exact import make_inputs


def test_names_sorted_and_complete():
  names = attention.names()
  assert names == sorted(names)
  for n in ["softmax", "dot", "general", "additive", "cosine", "location", "flash",
            "flash_pallas"]:
    assert n in names


def test_unknown_name_lists_every_valid_one():
  with pytest.raises(attention.AttentionError) as e:
    attention.get("sofmax")
  for n in attention.names():
    assert n in str(e.value)


def test_duplicate_registration_is_an_error():
  with pytest.raises(ValueError, match="twice"):
    registry.register(attention.variant("softmax"))


def test_input_specs_give_the_shapes_the_models_project_to():
  """Variant.inputs: per-token inputs (B, T, Hkv|Hq, width), their width set by options;
  a bad spec or a causal-only variant that is not causal is refused at registration."""
  import dataclasses
  gla = attention.variant("gla")
  assert gla.input_shapes(2, 5, 4, 2, 8) == {"gate_logits": (2, 5, 2, 8)}
  assert gla.input_shapes(2, 5, 4, 2, 8, {"gate": "ssd"}) == {"gate_logits": (2, 5, 2, 1)}
  assert gla.inputs["gate_logits"].rank == 16 and gla.causal_only and not gla.cross
  spec = attention.InputSpec(width=lambda head_dim: 3, heads="q")
  assert spec.shape(1, 7, 4, 2, 8) == (1, 7, 4, 3)
  with pytest.raises(ValueError, match="heads='k'"):
    attention.InputSpec(width=lambda head_dim: 1, heads="k")
  v = dataclasses.replace(attention.variant("linformer"), name="acausal", causal_only=True)
  with pytest.raises(ValueError, match="causal_only=True needs causal=True"):
    registry.register(v)


def test_a_variant_without_a_family_is_refused():
  v = dataclasses.replace(attention.variant("softmax"), name="nofamily", family="")
  with pytest.raises(ValueError, match="family=''.*efficient.*exact.*score"):
    registry.register(v)
  assert "nofamily" not in attention.names()


def test_location_needs_enough_positions():
  q = jnp.ones((1, 4, 2, 8))
  with pytest.raises(attention.AttentionError, match="max_len"):
    attention.get("location")(q, q, q, w=jnp.ones((8, 3)))


def test_docs_variant_tables_are_current():
  """docs/variants.md's tables are written by studies/variants/table.py from the registry."""
  import pathlib

  import studies
  from studies.variants.table import PAGE, positions_table, segments_table, table
  page = (pathlib.Path(studies.__file__).resolve().parent.parent / PAGE).read_text(
      encoding="utf-8")
  assert table() in page, f"{PAGE}: the variant table is stale: run `make table`"
  assert positions_table() in page, f"{PAGE}: the positions table is stale: run `make table`"
  assert segments_table() in page, f"{PAGE}: the segments table is stale: run `make table`"


def _params_for(name, H, D, L, key=jax.random.PRNGKey(0)):
  return {p: s.init(key, s.shape(H, D, L), jnp.float32)
          for p, s in attention.variant(name).params.items() if s.when is None}


def test_dropout_flag_lists_the_shared_core():
  """Every variant that claims dropout runs the one core that implements it."""
  from attention.softmax import SCORES
  assert {n for n in attention.names() if attention.variant(n).dropout} == set(SCORES)


@pytest.mark.parametrize("name", ["general"])
def test_attention_dropout_is_unbiased(name):
  """Inverted dropout on the probabilities: off without a key, mean-preserving with one.
  (One jitted program; inputs from NumPy's generator: eager calls compile a program
  per op.)"""
  rng = np.random.default_rng(1)
  q, k, v = (jnp.asarray(rng.standard_normal((1, 5, 2, 8), np.float32)) for _ in range(3))
  p = _params_for(name, 2, 8, 5)
  fn = attention.get(name)
  ref, no_key, outs = jax.jit(lambda keys: (
      fn(q, k, v, **p), fn(q, k, v, dropout_rate=0.5, **p),
      jax.vmap(lambda key: fn(q, k, v, dropout_rate=0.5, dropout_rng=key, **p))(keys)))(
          jax.random.split(jax.random.PRNGKey(2), 2000))
  np.testing.assert_array_equal(no_key, ref)                             # no key: off
  assert not np.allclose(outs[0], ref)
  np.testing.assert_allclose(outs.mean(0), ref, atol=0.1)


# ---- variants registered by a test: one file of the user's, no edit to the library ----

def wrapped_softmax(q, k, v, *, causal=False, mask=None, scale=None, block_q=None):
  """A new "kernel" for softmax attention (here softmax itself) with a tiling option.

  q (B, Tq, Hq, D), k (B, Tk, Hkv, D), v (B, Tk, Hkv, Dv) -> (B, Tq, Hq, Dv)."""
  if block_q is not None and block_q < 1:
    raise attention.AttentionError(f"wrapped_softmax: block_q={block_q} must be >= 1")
  return score_attention(attention.SCALED_DOT, q, k, v, causal=causal, mask=mask,
                         name="wrapped_softmax", scale=scale)


def sig2_scores(qg, kg, d, *, scale=None):
  """4 sigmoid(q.k * scale): a bounded score (a new user's "sig2"), grouped layout."""
  s = jnp.einsum("bhgqd,bhkd->bhgqk", qg, kg)
  return 4.0 * jax.nn.sigmoid(s * (1.0 / math.sqrt(d.D) if scale is None else scale))


def sig2(q, k, v, *, causal=False, mask=None, **kw):
  """softmax(4 sigmoid(q.k / sqrt(D))) @ v under the contract."""
  return score_attention(sig2_scores, q, k, v, causal=causal, mask=mask, name="sig2", **kw)


def new_variant(name, fn, family, **facts):
  return attention.Variant(
      name=name, fn=fn, paper="a test", time="O(N² D)", memory="O(N²)", causal=True,
      masks="any", decode="KV cache (fp, int8 or fp8)", decode_impl=attention.KV_CACHE,
      cost=attention.variant("softmax").cost, family=family, summary="registered by a test",
      **facts)


NEW = {
    "wrapped_softmax": lambda: new_variant(
        "wrapped_softmax", wrapped_softmax, "exact", score=attention.SCALED_DOT,
        kernel_options=("block_q",)),
    "sig2": lambda: new_variant("sig2", sig2, "score", score=sig2_scores),
}


@pytest.mark.parametrize("name, opts", [("wrapped_softmax", dict(block_q=4)), ("sig2", {})])
def test_a_variant_registered_outside_the_library_decodes_and_draws_maps(name, opts):
  """With one record (no edit to kv_cache, softmax or weights) it passes the contract
  (tests/attention/test_contract.py: its record, shapes, score and family, and the KV cache
  decodes it token by token and after a prefill, its kernel options dropped, equal to
  its causal forward pass); the int8 cache decodes it within its bound, and its maps
  are the softmax of its scores. Removed again when the block ends."""
  with attention.registered(NEW[name]()):
    assert name in attention.names()
    check_record(name)
    check_params_and_options(name)
    check_shapes(name)
    check_score_and_family(name)
    assert isinstance(check_decode(name, **opts), attention.KVCache)
    q, k, v = (jnp.asarray(x) for x in make_inputs((2, 9, 9, 4, 2, 8, 6), seed=7,
                                                  dtype=np.float32))
    ref, w, p, softmax_p = jax.jit(lambda q, k, v: (     # one program, not op by op
        attention.get(name)(q, k, v, causal=True, **opts),
        attention.implied_weights(q, k, name=name, causal=True, **opts),
        attention.probabilities(q, k, name=name, causal=True, **opts),
        attention.probabilities(q, k, causal=True)))(q, k, v)
    out8, _ = run_decode(name, q, k, v, chunks=[4, 1, 3, 1], cache_dtype="int8", **opts)
    assert 0 < np.abs(np.asarray(out8) - np.asarray(ref)).max() < 0.05
    np.testing.assert_array_equal(w, p)
    if name == "wrapped_softmax":      # the softmax probabilities themselves
      np.testing.assert_allclose(w, softmax_p, atol=1e-6)
    vh = np.repeat(np.asarray(v), 2, axis=2)     # weights @ v reproduces the output
    np.testing.assert_allclose(np.einsum("bhqk,bkhd->bqhd", np.asarray(w, np.float64), vh),
                               ref, atol=1e-5)
  assert name not in attention.names()


def test_a_kv_cache_variant_must_declare_its_score():
  """The KV cache reads Variant.score: a record without one is refused when it is
  registered, naming the field, not with a KeyError at the first decode step."""
  v = dataclasses.replace(NEW["sig2"](), score=None)
  with pytest.raises(ValueError, match="sig2.*Variant.score"):
    registry.register(v)
  assert "sig2" not in attention.names()
  with pytest.raises(ValueError, match="kernel_options"):
    registry.register(dataclasses.replace(NEW["sig2"](), kernel_options="block_q"))


def test_registered_removes_its_variants_even_when_the_block_fails():
  with pytest.raises(RuntimeError, match="inside"):
    with attention.registered(NEW["sig2"](), NEW["wrapped_softmax"]()):
      assert {"sig2", "wrapped_softmax"} <= set(attention.names())
      raise RuntimeError("inside")
  assert not {"sig2", "wrapped_softmax"} & set(attention.names())
  with pytest.raises(ValueError, match="twice"):    # a built-in name stays taken
    with attention.registered(dataclasses.replace(NEW["sig2"](), name="softmax")):
      pass
  assert attention.variant("softmax").fn is not sig2
  rec = registry.register(NEW["sig2"]())
  assert attention.unregister("sig2") is rec and "sig2" not in attention.names()
  with pytest.raises(attention.AttentionError, match="valid names"):
    attention.unregister("sig2")


def test_a_variant_that_runs_as_another_says_so_in_the_banner_notes():
  """ring with no mesh, or a mesh without a 'seq' axis of size > 1, is flash: its
  record's note says so (the trainer prints it and records it in runtime.json, so that
  a row named ring says what it measured); on a ring of 2 devices, or for a variant
  without `runs_as`, there is no note."""
  import jax
  from models import ModelConfig
  from trainer.loop import attention_notes
  ring = attention.variant("ring")
  assert ring.note_on(None).startswith("ring on 1 device = flash")
  mesh = jax.sharding.AbstractMesh((1, 2), ("data", "seq"))
  assert ring.note_on(mesh) is None
  assert "axis 'data'" in ring.note_on(mesh, {"axis": "data"})
  assert attention.variant("softmax").note_on(None) is None
  cfg = ModelConfig(kind="encdec", vocab_size=5, d_model=8, num_heads=2, d_ff=8,
                    num_layers=1, attention="ring", cross_attention="softmax")
  assert attention_notes(cfg, None) == [ring.note_on(None)]   # two roles, one note
  assert attention_notes(cfg, mesh) == []


def test_the_banner_records_layer_pieces_and_options_beside_the_variant():
  """Softmax with sinks, or a hybrid whose softmax layer has attn_gate, printed the same
  banner as plain softmax: the pieces and options each layer got are recorded."""
  from models import ModelConfig
  from trainer.loop import layer_record
  tiny = dict(kind="lm", vocab_size=5, d_model=8, num_heads=2, d_ff=8, num_layers=2)
  assert layer_record(ModelConfig(**tiny)) == {}
  sinks = ModelConfig(**tiny, attention_options={"softmax": {"sinks": True}})
  assert layer_record(sinks) == {"attention_options": {"softmax": {"sinks": True}}}
  hyb = ModelConfig(**tiny, layer_attention="gated_deltanet,softmax+attn_gate")
  assert layer_record(hyb) == {"layer_pieces": ",".join(
      attention.variant("gated_deltanet").layer + ("attn_gate",))}
