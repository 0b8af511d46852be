"""The registry and the contract's error messages."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from attention import registry


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


@pytest.mark.parametrize("name", attention.names())
def test_every_variant_record_is_complete(name):
  v = attention.variant(name)
  assert v.name == name and callable(v.fn) and callable(v.cost)
  assert v.paper and v.time and v.memory and v.summary
  assert v.masks in ("any", "key padding", "none")
  assert (v.decode is None) == (v.decode_impl is None)
  assert v.family in registry.FAMILIES


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
  import dataclasses
  v = dataclasses.replace(attention.variant("softmax"), name="nofamily", family="")
  with pytest.raises(ValueError, match="family=''.*efficient.*exact.*score"):
    registry.register(v)
  assert "nofamily" not in attention.names()


@pytest.mark.parametrize("name", [n for n in attention.names()
                                  if attention.variant(n).family == "exact"])
def test_the_exact_family_computes_softmax_attention(name):
  """The "exact" family's claim (results pages group by it): the same function as
  softmax, up to the variant's precision (fp8 rounds Q, K, V and P to e4m3)."""
  q, k, v = jax.random.normal(jax.random.key(3), (3, 1, 16, 2, 8))
  ref = attention.get("softmax")(q, k, v, causal=True)
  out = attention.get(name)(q, k, v, causal=True)
  tol = 0.15 if name == "fp8" else 1e-4
  np.testing.assert_allclose(out, ref, atol=tol, rtol=0)


BAD = [
    ((1, 4, 2, 8), (1, 4, 3, 8), (1, 4, 3, 8), "multiple of key/value heads"),
    ((1, 4, 2, 8), (1, 4, 2, 4), (1, 4, 2, 8), "head dim"),
    ((1, 4, 2, 8), (1, 5, 2, 8), (1, 4, 2, 8), "positions"),
    ((2, 4, 2, 8), (1, 4, 2, 8), (1, 4, 2, 8), "batch"),
    ((4, 2, 8), (1, 4, 2, 8), (1, 4, 2, 8), "rank 4"),
]


@pytest.mark.parametrize("name", ["softmax", "flash"])
@pytest.mark.parametrize("qs,ks,vs,msg", BAD)
def test_bad_shapes_say_what_is_wrong(name, qs, ks, vs, msg):
  with pytest.raises(attention.AttentionError, match=msg):
    attention.get(name)(jnp.ones(qs), jnp.ones(ks), jnp.ones(vs))


@pytest.mark.parametrize("name", ["softmax", "flash"])
def test_bad_masks_say_what_is_wrong(name):
  q = jnp.ones((2, 4, 2, 8))
  with pytest.raises(attention.AttentionError, match="bool"):
    attention.get(name)(q, q, q, mask=jnp.ones((4, 4)))
  with pytest.raises(attention.AttentionError, match="axis Tk"):
    attention.get(name)(q, q, q, mask=jnp.ones((2, 1, 1, 5), bool))


def test_unexpected_variant_argument_is_refused():
  q = jnp.ones((1, 4, 2, 8))
  with pytest.raises(attention.AttentionError, match="unexpected arguments"):
    attention.get("softmax")(q, q, q, window=3)


def test_location_needs_enough_positions():
  q = jnp.ones((1, 4, 2, 8))
  with pytest.raises(attention.AttentionError, match="max_len"):
    attention.get("location")(q, q, q, w=jnp.ones((8, 3)))


def test_readme_variant_table_is_current():
  """The README's table is written by scripts/variant_table.py from the registry."""
  from scripts.variant_table import table
  readme = open("README.md", encoding="utf-8").read()
  assert table() in readme, "README variant table is stale: run `make table`"


def _params_for(name, H, D, L, key=jax.random.PRNGKey(0)):
  return {p: s.init(key, s.shape(H, D, L), jnp.float32)
          for p, s in attention.variant(name).params.items()}


@pytest.mark.parametrize("name", attention.names())
def test_cross_flag_matches_behaviour(name):
  """Variant.cross says whether Tq != Tk works; the models rely on it at config time."""
  v = attention.variant(name)
  q, k = jnp.ones((1, 4, 2, 8)), jnp.ones((1, 6, 2, 8))
  p = _params_for(name, 2, 8, 8)
  call = lambda: jax.eval_shape(lambda q, k: v.fn(q, k, k, **p), q, k)   # traced, not run
  if v.cross:
    assert call().shape == (1, 4, 2, 8)
  else:
    with pytest.raises(attention.AttentionError, match="Tq != Tk"):
      call()
  # a query's keys chosen by its position (windows, patterns, chunks): no cross-attention
  assert v.positional == (name in ("local", "sparse", "reformer"))
  assert v.cross_attends == (v.cross and not v.positional)


def test_dropout_flag_lists_the_shared_core():
  """Every variant that claims dropout runs the one core that implements it."""
  from attention.softmax import SCORES
  assert {n for n in attention.names() if attention.variant(n).dropout} == set(SCORES)


@pytest.mark.parametrize("name", ["general"])
def test_attention_dropout_is_unbiased(name):
  """Inverted dropout on the probabilities: off without a key, mean-preserving with one."""
  kq, kk, kv = jax.random.split(jax.random.PRNGKey(1), 3)
  q = jax.random.normal(kq, (1, 5, 2, 8))
  k = jax.random.normal(kk, (1, 5, 2, 8))
  v = jax.random.normal(kv, (1, 5, 2, 8))
  p = _params_for(name, 2, 8, 5)
  fn = attention.get(name)
  ref = fn(q, k, v, **p)
  np.testing.assert_array_equal(fn(q, k, v, dropout_rate=0.5, **p), ref)   # no key: off
  outs = jax.jit(jax.vmap(lambda key: fn(q, k, v, dropout_rate=0.5, dropout_rng=key, **p)))(
      jax.random.split(jax.random.PRNGKey(2), 2000))
  assert not np.allclose(outs[0], ref)
  np.testing.assert_allclose(outs.mean(0), ref, atol=0.1)
