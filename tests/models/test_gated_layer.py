"""The layer around a variant's operator as its paper builds it (issue 76): the pieces
its registry record lists (`Variant.layer`), on by default (`gated_layer="published"`),
off with "bare", one piece at a time with ",piece" / ",-piece"; every piece decodes as
it runs in parallel (the q/k/v convolutions' last K-1 inputs in the decode state) and
keeps a packed row's segments apart. Qiu et al. 2025's sigmoid gate (`attn_gate`,
issue 99) on softmax and local, with their learned sinks on, against a float64
reference of the whole layer. Tiny shapes, one compilation per variant."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention
from attention.core.registry import LAYER_PIECES
from models import ConfigError, ModelConfig, MultiHeadAttention, build, flops_per_token
from models.config import layer_pieces
from models.layers import HeadNorm, ShortConv

TINY = dict(vocab_size=11, d_model=16, num_heads=2, num_kv_heads=1, d_ff=24, num_layers=1,
            max_len=16)
# every variant whose paper builds a layer around it, from the registry
LAYERED = [n for n in attention.names() if attention.variant(n).layer]
# and GLA with its optional convolutions (flash-linear-attention's use_short_conv);
# gated attention (attn_gate) on softmax and on local with their sinks on (gpt-oss's
# and Qwen3-Next's layers): (name, gated_layer, attention_options)
CASES = ([(n, "published", {}) for n in LAYERED] + [("gla", "published,qkv_conv", {})]
         + [("softmax", "published,attn_gate", {"softmax": {"sinks": True}}),
            ("local", "bare,attn_gate", {"local": {"sinks": True, "window": 3}})])


def test_the_records_declare_their_papers_layers():
  assert {"retention", "gla", "deltanet", "gated_deltanet"} <= set(LAYERED)
  for n in LAYERED:
    assert set(attention.variant(n).layer) <= set(LAYER_PIECES)
  assert attention.variant("softmax").layer == ()


def test_published_bare_and_one_piece_at_a_time():
  """The modules a layer holds follow the record and the flag, never the name."""
  for n in LAYERED:
    pub = attention.variant(n).layer
    cfg = ModelConfig(**TINY, attention=n).validate()
    assert cfg.gated_layer == "published" and cfg.layer_pieces(n) == pub
    # the structure only: abstract models (nnx.eval_shape), nothing is computed
    attn = nnx.eval_shape(lambda: build(cfg, rngs=nnx.Rngs(0))).decoder.blocks[0].attn
    assert attn.layer == pub
    assert (attn.conv_q is not None) == ("qkv_conv" in pub)
    assert (attn.g is not None) == ("out_gate" in pub)
    assert (attn.out_norm is not None) == any(p in pub for p in ("rms_norm", "group_norm"))
    bare = nnx.eval_shape(lambda: build(cfg.replace(gated_layer="bare"),
                                        rngs=nnx.Rngs(0))).decoder.blocks[0].attn
    assert bare.layer == () and bare.conv_q is bare.g is bare.out_norm is None
    for p in pub:                                # each piece off by itself
      assert cfg.replace(gated_layer=f"published,-{p}").layer_pieces(n) == tuple(
          x for x in pub if x != p)
  assert layer_pieces("bare,out_gate,qkv_conv", ()) == ("qkv_conv", "out_gate")
  assert layer_pieces("published,qkv_conv", ("rms_norm", "out_gate")) == (
      "qkv_conv", "rms_norm", "out_gate")
  # a non-gated variant has no published pieces: "published" leaves it as it was
  assert ModelConfig(**TINY).validate().layer_pieces("softmax") == ()


@pytest.mark.parametrize("value, words", [
    ("paper", "must start with one of"),
    ("published,-gate", "unknown layer piece 'gate'"),
    ("bare,rms_norm,group_norm", "two output normalisations"),
    ("published,attn_gate", "both out_gate and attn_gate"),      # gla publishes out_gate
])
def test_a_bad_gated_layer_is_refused_naming_the_key(value, words):
  with pytest.raises(ConfigError, match=f"'gated_layer'.*{words}"):
    ModelConfig(**TINY, attention="gla", gated_layer=value).validate()


def test_an_encoder_refuses_the_causal_convolution():
  with pytest.raises(ConfigError, match="'gated_layer'.*causal.*encoder_attention"):
    ModelConfig(**TINY, kind="encdec", gated_layer="published,qkv_conv").validate()
  ModelConfig(**TINY, kind="encdec", gated_layer="published,out_gate").validate()


def test_attn_gate_is_one_flag_and_replaces_out_gate_by_name():
  """`gated_layer="published,attn_gate"` gives softmax Qiu et al.'s gate (a `g_attn`
  projection, no out_gate's `g`); on a variant whose paper publishes out_gate, the
  pair is refused and ",-out_gate,attn_gate" swaps one for the other."""
  cfg = ModelConfig(**TINY, gated_layer="published,attn_gate").validate()
  assert cfg.layer_pieces("softmax") == ("attn_gate",)
  attn = nnx.eval_shape(lambda: build(cfg, rngs=nnx.Rngs(0))).decoder.blocks[0].attn
  assert attn.g is None and attn.g_attn.kernel.shape == (16, 2 * 8)
  assert layer_pieces("published,-out_gate,attn_gate", attention.variant("gla").layer) == (
      "rms_norm", "attn_gate")


def _randomise(attn, key):
  """Taps, norm scales and biases away from their identity initialisation, and the
  sinks (zeros) to a logit per head."""
  for i, c in enumerate((attn.conv_q, attn.conv_k, attn.conv_v)):
    if c is not None:
      c.w.value = jax.random.normal(jax.random.fold_in(key, i), c.w.shape)
  if attn.out_norm is not None:
    n = attn.out_norm
    n.scale.value = 1 + jax.random.normal(jax.random.fold_in(key, 7), n.scale.shape)
    if n.bias is not None:
      n.bias.value = jax.random.normal(jax.random.fold_in(key, 8), n.bias.shape)
  if "sinks" in attn.param_names:
    attn.p_sinks.value = 2 * jax.random.normal(jax.random.fold_in(key, 9), attn.p_sinks.shape)


@pytest.mark.parametrize("name, spec, options", CASES,
                         ids=[f"{n}-{s}" + ("-sinks" if o else "") for n, s, o in CASES])
def test_every_piece_decodes_as_it_runs_and_keeps_packed_segments_apart(name, spec, options):
  """Through one attention layer with its pieces (random taps and norm parameters):
  token-by-token decoding (the variant's state and the convolutions' last 3 inputs)
  equals the parallel pass; a packed row of two segments (4 + 6 tokens, the second
  starting mid-tap) gives each segment what it gets alone; the bare layer differs."""
  cfg = ModelConfig(**TINY, attention=name, gated_layer=spec,
                    attention_options=options).validate()
  attn = MultiHeadAttention(cfg, name, nnx.Rngs(0), layer=cfg.layer_pieces(name))
  _randomise(attn, jax.random.key(1))
  T, D = 10, TINY["d_model"]
  x = jax.random.normal(jax.random.key(2), (2, T, D))
  seg = jnp.array([[1] * 4 + [2] * 6])

  bare = MultiHeadAttention(cfg, name, nnx.Rngs(0))

  @nnx.jit                      # one program for every check
  def run(attn, bare, x):
    full = attn(x, causal=True)

    def body(state, xt):
      o, state = attn.step(xt[:, None], state)
      return state, o[:, 0]

    _, seq = jax.lax.scan(body, attn.init_state(2, T), jnp.moveaxis(x, 1, 0))
    packed = attn(x, causal=True, q_seg=seg, k_seg=seg)
    # each segment alone, in one call: the first as the head of x[:, :6] (causal, as
    # the decode steps above check), the second as x[:, 4:]
    alone = attn(jnp.concatenate([x[:, :6], x[:, 4:]]), causal=True)
    alone = (alone[:2, :4], alone[2:])
    return full, jnp.moveaxis(seq, 0, 1), packed, alone, bare(x, causal=True)

  full, seq, packed, (a1, a2), bare_out = run(attn, bare, x)
  np.testing.assert_allclose(seq, full, atol=2e-5, rtol=2e-5)
  np.testing.assert_allclose(packed[:, :4], a1, atol=2e-5, rtol=2e-5)
  np.testing.assert_allclose(packed[:, 4:], a2, atol=2e-5, rtol=2e-5)
  if "qkv_conv" in attn.layer:                  # the decode state holds the taps' inputs
    st = attn.init_state(2, T)
    assert [h.shape for h in st["qkv_conv"]] == [(2, 3, 2 * 8), (2, 3, 8), (2, 3, 8)]
  assert not np.allclose(bare_out, full, atol=1e-3)


def test_the_norms_and_the_gate_compute_what_the_papers_write():
  """rms_norm: o / sqrt(mean o² + eps) * scale per head; group_norm: a LayerNorm of each
  head's channels with per-channel scale and bias; out_gate: norm(o) ⊙ silu(x W_g)."""
  o = jax.random.normal(jax.random.key(0), (2, 3, 2, 4)) * 3 + 1
  rms, grp = HeadNorm("rms_norm", 2, 4), HeadNorm("group_norm", 2, 4)
  np.testing.assert_allclose(rms(o), o / np.sqrt(np.mean(o ** 2, -1, keepdims=True) + 1e-5),
                             atol=1e-5)
  c = o - o.mean(-1, keepdims=True)
  np.testing.assert_allclose(grp(o), c / np.sqrt(np.mean(c ** 2, -1, keepdims=True) + 1e-5),
                             atol=1e-5)
  cfg = ModelConfig(**TINY, attention="retention").validate()
  attn = MultiHeadAttention(cfg, "retention", nnx.Rngs(0), layer=("group_norm", "out_gate"))
  x = jax.random.normal(jax.random.key(1), (2, 3, TINY["d_model"]))
  o8 = jax.random.normal(jax.random.key(3), (2, 3, 2, 8))       # 2 heads of 8

  @nnx.jit                      # one program: eagerly, every op would compile alone
  def f(attn, o8, x):
    gate = jax.nn.silu(attn.g(x)).reshape(2, 3, 2, 8)
    return attn._out(o8, x), attn.o((attn.out_norm(o8) * gate).reshape(2, 3, 16))

  got, want = f(attn, o8, x)
  np.testing.assert_allclose(got, want, atol=1e-6)


def test_the_flop_count_has_the_pieces():
  """flops_per_token adds the convolutions' taps, the gate's projection and product and
  the norm, per layer, to the bare layer's count."""
  cfg = ModelConfig(**TINY, attention="gated_deltanet").validate()
  diff = (flops_per_token(cfg, 8)["total"]
          - flops_per_token(cfg.replace(gated_layer="bare"), 8)["total"])
  H, K, Dh, D = 2, 1, 8, 16
  assert diff == 2 * 4 * (H * Dh + 2 * K * Dh) + 2 * D * H * Dh + H * Dh + 5 * H * Dh
  sm = ModelConfig(**TINY).validate()
  assert (flops_per_token(sm.replace(gated_layer="bare,attn_gate"), 8)["total"]
          - flops_per_token(sm, 8)["total"]) == 2 * D * H * Dh + H * Dh


def test_gated_attention_with_sinks_equals_the_float64_layer():
  """A softmax layer with Qiu et al.'s gate and learned sinks (GQA: 2 query heads, 1
  key/value head), causal, against the float64 NumPy layer from its own weights:
  q, k, v projections; per head softmax over [q·k/√Dh, sink_h] with the sink's column
  dropped; Y = attn ⊙ σ(x W_g + b_g), elementwise per head and channel; then the
  output projection."""
  cfg = ModelConfig(**TINY, gated_layer="bare,attn_gate",
                    attention_options={"softmax": {"sinks": True}}).validate()
  attn = MultiHeadAttention(cfg, "softmax", nnx.Rngs(0), layer=cfg.layer_pieces("softmax"))
  _randomise(attn, jax.random.key(1))
  Bx, T, H, K, Dh = 2, 6, 2, 1, 8
  x = jax.random.normal(jax.random.key(2), (Bx, T, TINY["d_model"]))
  got = nnx.jit(lambda a, x: a(x, causal=True))(attn, x)

  f64 = lambda a: np.asarray(a[...], np.float64)
  lin = lambda layer, h: np.asarray(h, np.float64) @ f64(layer.kernel) + f64(layer.bias)
  xs = np.asarray(x, np.float64)
  q = lin(attn.q, xs).reshape(Bx, T, H, Dh)
  k = np.repeat(lin(attn.k, xs).reshape(Bx, T, K, Dh), H // K, axis=2)
  v = np.repeat(lin(attn.v, xs).reshape(Bx, T, K, Dh), H // K, axis=2)
  s = np.einsum("bihd,bjhd->bhij", q, k) / np.sqrt(Dh)
  s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
  e = np.exp(s)
  den = np.exp(f64(attn.p_sinks))[None, :, None, None] + e.sum(-1, keepdims=True)
  o = np.einsum("bhij,bjhd->bihd", e / den, v)
  gate = 1 / (1 + np.exp(-lin(attn.g_attn, xs).reshape(Bx, T, H, Dh)))
  want = lin(attn.o, (o * gate).reshape(Bx, T, H * Dh))
  np.testing.assert_allclose(np.asarray(got), want, atol=2e-5, rtol=1e-5)
