"""Hybrid stacks (`ModelConfig.layer_attention`): a per-layer attention pattern.

The variants are picked from their registry records (`pick`), never by name: a layer
whose decode state is a KV cache that grows with the context, one whose state is a
window (flat past its size), and one whose state is fixed (a recurrence, with the q/k/v
convolutions' taps beside it). Each pair of them trains a step and decodes token by
token as its parallel pass computes, with the model-level decode-state count equal to
the state's arrays; one stack of all three packs pairs as it computes them apart and
restores onto other meshes (tests/multidevice.py). Tiny models, one compiled program
per test.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention
from attention.core.kv_cache import KV_CACHE
from models import ConfigError, ModelConfig, build, count, shift_right
from models.config import parse_pattern
from tests import multidevice
from tests.reference import jitted

TINY = dict(vocab_size=11, d_model=16, num_heads=2, num_kv_heads=1, d_ff=24,
            max_len=16, pre_ln=True)
OPTS = {"local": {"window": 3}, "sparse": {"stride": 2}, "flash": {"block_q": 4, "block_k": 4}}


def _flat(name) -> bool:
  """Whether `name`'s decode state holds as many bytes at 64 positions as at 128."""
  kw = dict(batch=1, num_kv_heads=1, head_dim=8, **OPTS.get(name, {}))
  try:
    size = [attention.state_nbytes(jax.eval_shape(
        lambda L=L: attention.init_decode_state(name, max_len=L, **kw))) for L in (64, 128)]
  except (attention.AttentionError, TypeError):
    return False
  return size[0] == size[1]


# decode implementations, as record facts
KINDS = {
    "kv cache": lambda v: v.decode_impl is KV_CACHE and v.family == "exact",
    "window": lambda v: v.positional and not v.causal_only and _flat(v.name),
    "fixed state": lambda v: v.causal_only and "qkv_conv" in v.layer,
}


def pick(kind: str) -> str:
  """The first registered variant of decode implementation `kind` that runs here
  (no device of its own, computes as itself, no kernel options: the plainest program
  to compile), decodes, is causal and takes segments."""
  for n in attention.names():
    v = attention.variant(n)
    if (v.device is None and v.runs_as is None and not v.kernel_options
        and v.decode_impl is not None and v.causal and v.takes_segments
        and KINDS[kind](v)):
      return n
  raise LookupError(f"no registered variant of kind {kind!r}")


# each beside the KV cache (the pairs); the window beside the fixed state sits in
# the three-layer stack of the packed and mesh tests below
PAIRS = [(k, "kv cache") for k in KINDS if k != "kv cache"]


def lm(pattern, **kw):
  return ModelConfig(**{**TINY, "attention_options": OPTS, "layer_attention": pattern,
                        "num_layers": len(parse_pattern(pattern)), **kw}).validate()


@pytest.mark.parametrize("kinds", PAIRS, ids=["+".join(p) for p in PAIRS])
def test_a_pair_trains_a_step_and_decodes_as_its_parallel_pass(kinds):
  """Layers of two decode implementations (GQA, rope where the variant takes it): the
  training gradient reaches both layers' attention; step_logp token by token through
  each layer's own state equals forward_logp; the model's decode-state count (models.count) equals the
  nbytes of the state init_state builds, and is the sum of the pure stacks' layers."""
  a, b = (pick(k) for k in kinds)
  cfg = lm(f"{a},{b}", positions="rope")
  assert [s.name for s in cfg.layer_specs("decoder_attention")] == [a, b]
  m = build(cfg, rngs=nnx.Rngs(0))
  m.eval()
  x = jnp.concatenate([m.prefix(2), jnp.arange(2 * 8).reshape(2, 8) % 11], 1)

  def f(m, x):
    def loss(m):      # the nll of the targets x[:, 1:], from the same parallel pass
      par = m.forward_logp(x[:, :-1])
      return -jnp.take_along_axis(par, x[:, 1:, None], -1).mean(), par

    (l0, par), g = nnx.value_and_grad(loss, has_aux=True)(m)

    def body(state, i):
      lp, state = m.step_logp(jax.lax.dynamic_slice_in_dim(x, i, 1, axis=1), state, i)
      return state, lp[:, 0]

    _, seq = jax.lax.scan(body, m.init_state(2, 8), jnp.arange(8))
    norms = [sum(jnp.sum(jnp.square(v)) for v in jax.tree.leaves(
        nnx.state(g, nnx.Param)["decoder"]["blocks"][i]["attn"])) for i in range(2)]
    return l0, jnp.stack(norms), par, seq.transpose(1, 0, 2)

  l0, norms, par, seq = jitted(m, f, x)
  assert np.isfinite(float(l0)) and np.all(np.isfinite(norms)) and np.all(norms > 0)
  np.testing.assert_allclose(seq, par, atol=2e-5)
  state = jax.eval_shape(lambda: m.init_state(2, 10))
  assert count.decode_state_bytes(cfg, 10, batch=2) == attention.state_nbytes(state)
  # rope changes neither count: the pure stacks take none (a recurrence refuses it)
  pure = [count.decode_state_bytes(lm(f"{n},{n}"), 10, batch=2, per_layer=True)[0]
          for n in (a, b)]
  assert count.decode_state_bytes(cfg, 10, batch=2, per_layer=True) == tuple(pure)
  flops = [count.flops_per_token(lm(f"{n},{n}"), 10)["total"] for n in (a, b)]
  assert count.flops_per_token(cfg, 10)["total"] == pytest.approx(sum(flops) / 2)


def test_a_packed_hybrid_decoder_computes_each_pair_as_alone_and_decodes_so():
  """An encoder-decoder whose decoder stacks the three decode implementations: two
  (source, target) pairs packed in one row (segment ids, positions restarting per
  pair) give each target token the nll it gets with its pair alone in a padded row,
  and the decoder's step_logp through its three states (and the cross-attention's
  keys) equals its parallel pass on those rows."""
  names = [pick(k) for k in KINDS]
  cfg = ModelConfig(**{**TINY, "kind": "encdec", "attention_options": OPTS,
                       "layer_attention": ",".join(names), "num_layers": 3,
                       "num_encoder_layers": 1, "positions": "rope"}).validate()
  m = build(cfg, rngs=nnx.Rngs(1))
  m.eval()
  src = [[5, 6, 7], [8, 9, 4, 3]]
  tgt = [[3, 4, 5, 2], [6, 7, 2]]
  row = lambda parts: jnp.array([sum(parts, [])], jnp.int32)
  seg = lambda parts: row([[i + 1] * len(p) for i, p in enumerate(parts)])
  pos = lambda parts: row([list(range(len(p))) for p in parts])
  pad = lambda rows, n: jnp.array([r + [0] * (n - len(r)) for r in rows], jnp.int32)

  def f(m):
    packed = m.nll(row(src), row(tgt), src_seg=seg(src), src_pos=pos(src),
                   y_seg=seg(tgt), y_pos=pos(tgt))
    memory, valid = m.encode(pad(src, 7))
    ids_in = shift_right(pad(tgt, 7), cfg.bos_id)
    par = m.forward_logp(ids_in, memory, valid)     # the padded rows' one parallel pass
    apart = -jnp.take_along_axis(par, pad(tgt, 7)[..., None], -1)[..., 0]

    def body(state, i):
      lp, state = m.step_logp(jax.lax.dynamic_slice_in_dim(ids_in, i, 1, axis=1), state, i)
      return state, lp[:, 0]

    _, seq = jax.lax.scan(body, m.init_state(2, 7, memory, valid), jnp.arange(7))
    return packed, apart, par, seq.transpose(1, 0, 2)

  packed, apart, par, seq = jitted(m, f)
  n0, n1 = len(tgt[0]), len(tgt[1])
  np.testing.assert_allclose(packed[0, :n0], apart[0, :n0], atol=2e-5)
  np.testing.assert_allclose(packed[0, n0:], apart[1, :n1], atol=2e-5)
  for b, n in enumerate((n0, n1)):      # the real inputs: the start token and n - 1
    np.testing.assert_allclose(seq[b, :n], par[b, :n], atol=2e-5)


@pytest.mark.slow   # an 8-device subprocess that trains and restores (as test_scale's)
def test_a_hybrid_checkpoint_restores_onto_other_meshes(tmp_path):
  """The three decode implementations in one stack train a step on a 4 x 2 (data x
  fsdp) mesh of simulated devices; the checkpoint restores onto 4 (fsdp) devices and
  onto 1, equal (decoding as the forward pass: the pair tests above)."""
  names = [pick(k) for k in KINDS]
  res = multidevice.run("hybrid", timeout=600, root=str(tmp_path),
                        layer_attention=",".join(names),
                        options={n: OPTS[n] for n in names if n in OPTS})
  assert res["layers"] == names
  assert [int(s) for s in res["losses"]] == [1]
  assert {t: r["devices"] for t, r in res["restores"].items()} == {"fsdp4": 4, "1": 1}
  for target, r in res["restores"].items():
    assert r["step"] == 1 and r["max_abs_diff"] == 0.0, (target, r)


def test_an_empty_pattern_is_the_model_of_before_and_a_pattern_of_one_the_same():
  cfg = ModelConfig(**TINY, num_layers=2).validate()
  same = cfg.replace(layer_attention="softmax")
  assert cfg.layer_specs("decoder_attention") == same.layer_specs("decoder_attention")
  a, b = (nnx.state(nnx.eval_shape(lambda c=c: build(c, rngs=nnx.Rngs(0))), nnx.Param)
          for c in (cfg, same))
  assert jax.tree.structure(a) == jax.tree.structure(b)
  assert [x.shape for x in jax.tree.leaves(a)] == [x.shape for x in jax.tree.leaves(b)]


def test_entry_pieces_repeat_and_positions_per_layer():
  """`*n` repeats an entry, the pattern repeats over num_layers, "+piece" / "-piece"
  change one entry's layer (gated_layer read against each layer's record), and a
  recurrent layer runs without a rotary scheme the others take."""
  fixed, kv = pick("fixed state"), pick("kv cache")
  published = attention.variant(fixed).layer
  cfg = lm(f"{fixed}*2,{kv}+out_gate", positions="rope").replace(num_layers=6)
  specs = cfg.layer_specs("decoder_attention")
  assert [s.name for s in specs] == [fixed, fixed, kv] * 2
  assert [s.pieces for s in specs[:3]] == [published, published, ("out_gate",)]
  assert [s.positions is not None for s in specs[:3]] == [False, False, True]
  less = cfg.replace(layer_attention=f"{fixed}-qkv_conv,{kv}", num_layers=2)
  assert "qkv_conv" not in less.layer_specs("decoder_attention")[0].pieces
  assert cfg.role_variants("decoder_attention") == (fixed, kv)


def _no_rope_not_recurrent():
  """A causal variant that refuses rope and neither runs as a recurrence nor brings
  its own positions (such a layer may not silently go without them)."""
  return next(n for n in attention.names()
              if (v := attention.variant(n)).causal and v.position_refusal("rope")
              and not v.causal_only and not v.own_positions)


@pytest.mark.parametrize("kw, words", [
    (dict(layer_attention="softmax*3"), "does not divide num_layers=2"),
    (dict(layer_attention="softmax,nosuch"), "unknown attention variant 'nosuch'; variants: "),
    (dict(layer_attention="softmax*0,softmax"), "with n >= 1"),
    (dict(layer_attention="softmax+nosuch,softmax"), "unknown layer piece 'nosuch'"),
    (dict(layer_attention="softmax,softmax", decoder_attention="linear"), "set one"),
    (dict(layer_attention="softmax,softmax", kind="classifier"), "no decoder"),
    (dict(layer_attention="NOROPE,softmax", positions="rope"), "does not take positions"),
])
def test_pattern_refusals_are_one_line_naming_the_key(kw, words):
  if "NOROPE" in kw.get("layer_attention", ""):
    kw = dict(kw, layer_attention=kw["layer_attention"].replace(
        "NOROPE", _no_rope_not_recurrent()))
  with pytest.raises(ConfigError, match="layer_attention|positions") as e:
    ModelConfig(**{**TINY, "num_layers": 2, **kw}).validate()
  assert words in str(e.value) and "\n" not in str(e.value)


def test_lora_wraps_every_layer_of_a_hybrid_and_the_gate_by_name():
  """LoRA's targets reach each layer's projections whatever its variant, and a layer
  piece's own projection (attn_gate's g_attn) by its name, on the softmax layer only."""
  from models import dense_layers
  from models.lora import apply_lora
  fixed, kv = pick("fixed state"), pick("kv cache")

  def make():           # traced abstractly (nnx.eval_shape): nothing is computed
    m = build(lm(f"{fixed},{kv}+attn_gate"), rngs=nnx.Rngs(0))
    apply_lora(m, rank=2, targets="q,k,v,o", rngs=nnx.Rngs(1))
    apply_lora(m, rank=2, targets="g_attn", rngs=nnx.Rngs(1))
    return m

  m = nnx.eval_shape(make)
  wrapped = [p for p, d in dense_layers(m) if isinstance(d, nnx.LoRALinear)]
  assert sorted({p[2] for p in wrapped}) == [0, 1] and len(wrapped) == 9
  assert [p[2] for p in wrapped if p[-1] == "g_attn"] == [1]


def test_the_architecture_presets_validate_and_a_one_variant_swap_is_refused():
  """configs/shakespeare.py's gpt_oss and qwen3_next are hybrid stacks (sinks and
  attn_gate where they say); train.py's --config.attention, which swaps every layer,
  is refused beside a pattern instead of being silently ignored."""
  from configs import shakespeare, text
  from trainer.config import validate
  for module in (shakespeare, text):       # both LM configs carry the two presets
    gpt, qwen = (validate(module.get_config(p)) for p in ("gpt_oss", "qwen3_next"))
    assert [s.name for s in gpt.layer_specs("decoder_attention")] == ["local", "softmax"] * 2
    assert gpt.options_for("local") == {"window": 128, "sinks": True} and gpt.kv_heads == 2
    specs = qwen.layer_specs("decoder_attention")
    assert [s.name for s in specs] == ["gated_deltanet"] * 3 + ["softmax"]
    assert "attn_gate" in specs[3].pieces and specs[3].positions is not None
    assert "attn_gate" not in specs[0].pieces and specs[0].positions is None
  c = shakespeare.get_config("qwen3_next")
  c.attention = "flash"
  with pytest.raises(ConfigError, match="'attention': swaps the variant of every layer"):
    validate(c)
