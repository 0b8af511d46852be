"""Model tests: shapes, parameter counts, every variant in every role, causality,
config-time refusals, FLOPs against XLA, heads, and the LoRA hook.

Generation (cache vs recompute, beam search) lives in test_generate.py. Sizes are
tiny and most calls run eagerly: on 2 CPU cores compiling dominates.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention
from models import (AttentionWeights, ConfigError, MixtureHead, ModelConfig,
                    MultiHeadAttention, attention_weights, build, dense_layers,
                    flops_per_token, param_count, replace_dense, shift_right)
from models.heads import dmol_log_prob
from tests.reference import cpu_cost_analysis, jitted

TINY = dict(vocab_size=11, d_model=16, num_heads=2, d_ff=24, num_layers=1, max_len=16)
# Variant options that keep the efficient variants non-trivial at T = 8.
OPTS = {"local": {"window": 3}, "sparse": {"stride": 2}, "reformer": {"chunk_size": 4},
        "flash": {"block_q": 4, "block_k": 4}}


def cfg_of(**kw):
  return ModelConfig(**{**TINY, "attention_options": OPTS, **kw}).validate()




def test_lm_shapes_and_parameter_count():
  cfg = cfg_of(num_layers=2, num_kv_heads=1, d_ff=24)
  m = build(cfg, rngs=nnx.Rngs(0))
  y = jnp.arange(2 * 8).reshape(2, 8) % 11
  h, nll = jitted(m, lambda m, y: (m(shift_right(y, cfg.start_id)), m.nll(y)), y)
  assert h.shape == (2, 8, 16) and nll.shape == (2, 8)
  D, V, F, Dh, H, K, L = 16, 11, 24, 8, 2, 1, 2
  attn = D * H * Dh * 2 + D * K * Dh * 2 + (H + 2 * K) * Dh + D      # q, o, k, v + biases
  block = attn + (D * F + F + F * D + D) + 2 * 2 * D                  # + ffn + 2 LayerNorms
  expected = (V + 1) * D + L * block + D * V + V                      # embed (+start) + head
  assert param_count(m) == {"params": expected, "buffers": 0}


def test_encdec_shapes_and_shared_embedding():
  cfg = cfg_of(kind="encdec", num_layers=1, num_encoder_layers=2)
  m = build(cfg, rngs=nnx.Rngs(0))
  src = jnp.array([[3, 4, 5, 0, 0, 0], [5, 6, 7, 8, 9, 2]])
  tgt = jnp.array([[3, 4, 2, 0], [5, 6, 7, 2]])
  h, nll = jitted(m, lambda m, s, t: (m(s, shift_right(t, cfg.bos_id)), m.nll(s, t)),
                  src, tgt)
  assert h.shape == (2, 4, 16)
  assert nll.shape == (2, 4) and float(nll[0, 3]) == 0.0          # padding costs nothing
  assert m.src_embed is m.tgt_embed
  sep = build(cfg.replace(src_vocab_size=7, share_embeddings=False), rngs=nnx.Rngs(0))
  assert sep.src_embed is not sep.tgt_embed


# own_compute: ring is flash on this one device (test_ring checks it hands everything on)
@pytest.mark.parametrize("name", attention.native_names(own_compute=True))
def test_every_variant_in_every_role(name):
  """Each variant as decoder self-attention (if causal: a finite loss; through a pre-LN
  layer, changing inputs after t leaves outputs up to t bit-identical and moves the
  later ones, and changing inputs before t moves output t), and as encoder
  self-attention and cross-attention (if it supports Tq != Tk) of a padded
  encoder-decoder, unless it is causal only (an RNN: config validation refuses those
  roles).

  One compiled program per variant, kept small (compiling it is the cost): the LM's
  decoder runs once, on a batch of the two token rows' embeddings (their loss), a row
  h, h with its future changed and h with its past changed (rows never mix, so each
  computes what it computes alone); the encoder-decoder encodes its padded source
  once (the decoder reads that memory) and the unpadded one once, and its decoder runs
  only where the variant is the cross-attention (else it is softmax over softmax:
  nothing of the variant's). A content-routed variant (reformer) is differentiated
  too: its past outputs move with future inputs (where they hash), so the gradient of
  output t w.r.t. inputs after t, exactly zero, is its causality check; it is taken
  of a fixed random projection of output t (the plain sum of output t is identically
  zero under the final LayerNorm). Every variant's gradients, finite and not zero,
  are covered in make test by tests/attention/test_contract.py::test_gradients_finite
  (and a step trained through a model by test_variants_with_inputs_train_a_step_and_decode
  and test_every_positions_scheme_trains_a_step_and_steps_equal_the_parallel_pass)."""
  x = jnp.arange(16).reshape(2, 8) % 11
  v = attention.variant(name)
  h = jax.random.normal(jax.random.PRNGKey(0), (1, 8, 16))
  w = jax.random.normal(jax.random.PRNGKey(1), (16,))
  t = 4
  h2 = h.at[:, t + 1:].add(jax.random.normal(jax.random.PRNGKey(2), (1, 8 - t - 1, 16)))
  h3 = h.at[:, :t].add(jax.random.normal(jax.random.PRNGKey(3), (1, t, 16)))
  src = x.at[0, 6:].set(0)            # padded source
  lm = cfg_of(attention=name, pre_ln=True) if v.causal else None
  # causal only: an RNN over its own sequence, no encoder, no cross-attention
  ed = None if v.causal_only else cfg_of(
      kind="encdec", encoder_attention=name, decoder_attention="softmax",
      cross_attention=name if v.cross_attends else "softmax")

  models = {}
  if lm is not None:
    models["lm"] = build(lm, rngs=nnx.Rngs(1))
    models["lm"].eval()
  if ed is not None:
    models["ed"] = build(ed, rngs=nnx.Rngs(0))

  def f(models, x, h, h2, h3, src):
    res = {}
    if "lm" in models:
      m = models["lm"]
      rows = jnp.concatenate([m.embed(shift_right(x, m.cfg.start_id)), h, h2, h3])
      if v.content_routed:
        out, vjp = jax.vjp(lambda h: m.decoder(h, causal=True), rows)
        # the gradient of output t's probe (out[2, t] @ w) w.r.t. h (row 2)
        g = vjp(jnp.zeros_like(out).at[2, t].set(w))[0][2]
      else:
        out, g = m.decoder(rows, causal=True), None
      res["lm"] = (m.head.nll(out[:2], x), out[2:], g)
    if "ed" in models:
      m = models["ed"]
      mem, valid = m.encode(src)
      logp = (m.forward_logp(shift_right(x, m.cfg.bos_id), mem, valid)
              if v.cross_attends else mem)
      res["ed"] = (logp, mem, m.encode(src[:1, :6])[0])
    return res

  res = nnx.jit(f)(models, x, h, h2, h3, src)      # both roles: one compiled program
  assert ("lm" in res) == v.causal and ("ed" in res) != v.causal_only
  if v.causal:
    nll, (out, out2, out3), g = res["lm"]
    assert nll.shape == (2, 8) and np.isfinite(np.asarray(nll)).all()
    out, out2, out3 = map(np.asarray, (out, out2, out3))
    assert not np.allclose(out[t + 1:], out2[t + 1:])          # the future acts
    assert not np.allclose(out[t], out3[t], atol=1e-3), f"{name}: output t sees no past"
    if v.content_routed:
      # reformer gives no weight to a future key, but which past keys share a query's
      # chunk depends on where the future positions hash (one sort of all N), so
      # past outputs move with future inputs: the gradient is its check.
      g = np.asarray(g)
      assert np.all(g[t + 1:] == 0.0), f"{name} leaks the future (gradient)"
      assert np.abs(g[:t + 1]).max() > 1e-3, "the probe must see the past"
    else:
      # bit-identical on a CPU. On a GPU (an H200, 2026-11-26) past outputs moved by
      # up to 3.6e-7 (1-3 float32 ulps) for every variant, softmax included, while the
      # gradient was exactly zero: rounding of the GPU's kernels, not a leak, which
      # would move them by ~1 (the future inputs change by unit normals).
      past, past2 = out[:t + 1], out2[:t + 1]
      if jax.default_backend() == "cpu":
        np.testing.assert_array_equal(past, past2, err_msg=f"{name} leaks the future (values)")
      else:
        np.testing.assert_allclose(past, past2, rtol=0, atol=1e-5,
                                   err_msg=f"{name} leaks the future (values)")
  if v.causal_only:
    return
  out, mem, unpadded = res["ed"]
  assert out.shape == ((2, 8, 11) if v.cross_attends else (2, 8, 16))
  assert np.isfinite(np.asarray(out)).all()
  if not v.content_routed:   # LSH chunk boundaries move with the padded length
    # padding is invisible: the same source without its padding encodes the same
    np.testing.assert_allclose(mem[0, :6], unpadded[0], atol=1e-5)


@pytest.mark.parametrize("name", [n for n in attention.names() if attention.variant(n).inputs
                                  or attention.variant(n).causal_only])
def test_variants_with_inputs_train_a_step_and_decode(name):
  """A variant's per-token inputs (Variant.inputs, e.g. gla's gate logits) are
  projections of the layer input that the model owns (in_<name>, Linears that LoRA
  sees), are trained (nonzero gradients, the loss falls after one gradient step) and are
  fed to the decode step (token-by-token decoding equals the parallel forward pass)
  and to the recorded attention maps (the variant's closed-form weights, causal).
"""
  v = attention.variant(name)
  cfg = cfg_of(attention=name, num_kv_heads=1)
  m = build(cfg, rngs=nnx.Rngs(3))
  attn = m.decoder.blocks[0].attn
  paths = [p for p, _ in dense_layers(m)]
  for n, spec in v.inputs.items():
    assert ("decoder", "blocks", 0, "attn", "in_" + n, "up") in paths
    assert (("decoder", "blocks", 0, "attn", "in_" + n, "down") in paths) == bool(spec.rank)
    heads, width = v.input_shapes(1, 1, 2, 1, 8)[n][2:]
    assert getattr(attn, "in_" + n).up.kernel.shape[-1] == heads * width
  y = jnp.arange(16).reshape(2, 8) % 11

  x = jnp.concatenate([m.prefix(2), y[:, :7]], 1)

  @nnx.jit
  def train_and_decode(m, y, x):
    loss, grads = nnx.value_and_grad(lambda m: m.nll(y).mean())(m)
    # one plain gradient step (an optimizer's state would only add ops to compile)
    params = nnx.state(m, nnx.Param)
    nnx.update(m, jax.tree.map(lambda p, g: p - 0.05 * g, params, nnx.state(grads, nnx.Param)))
    m.eval()
    # one parallel pass of the stepped model, recording its maps (the call's output is
    # the layer's own): the loss after the step (x is y shifted right) and what the
    # decode steps must equal
    par, maps = attention_weights(lambda m, x: m.forward_logp(x), m, x)

    def body(state, i):
      lp, state = m.step_logp(jax.lax.dynamic_slice_in_dim(x, i, 1, axis=1), state, i)
      return state, lp[:, 0]

    _, seq = jax.lax.scan(body, m.init_state(2, 8), jnp.arange(8))
    gin = {n: grads["decoder"]["blocks"][0]["attn"]["in_" + n]["up"]["kernel"][...]
           for n in v.inputs}
    after = -jnp.take_along_axis(par, y[..., None], -1).mean()
    return loss, gin, after, par, seq.transpose(1, 0, 2), maps

  loss, gin, after, par, seq, maps = train_and_decode(m, y, x)
  w = maps[("decoder", "blocks", 0, "attn")][0]     # drawn with the projected inputs
  assert w.shape == (2, 2, 8, 8) and bool(jnp.all(jnp.isfinite(w)))
  assert float(jnp.abs(jnp.triu(w, 1)).max()) == 0 < float(jnp.abs(w).max())
  assert np.isfinite(float(loss)) and float(after) < float(loss)
  assert set(gin) == set(v.inputs)
  for g in gin.values():
    assert float(jnp.abs(g).max()) > 0
  np.testing.assert_allclose(seq, par, atol=2e-4)


@pytest.mark.parametrize("V", [7, 2000])      # one-hot matmul / gather (ONE_HOT_MAX_VOCAB)
def test_embedding_lookup_is_the_table_row_and_its_gradient_the_scatter_add(V):
  """embed_lookup equals jnp.take in both forms (float32 and bfloat16, exactly), its
  table gradient equals the gather's (repeated ids summed), and an id outside
  [0, V) reads NaN, a negative one too (take alone would wrap it around)."""
  from models.layers import ONE_HOT_MAX_VOCAB, embed_lookup
  assert (V <= ONE_HOT_MAX_VOCAB) == (V == 7)
  t = jax.random.normal(jax.random.key(0), (V, 8))
  ids = jnp.array([[0, V - 1, 3, 3, 3], [1, 0, 0, 0, 2]])
  w = jax.random.normal(jax.random.key(1), (2, 5, 8))

  @jax.jit                      # one program: eagerly, every op would compile alone
  def f(t, ids, w):
    got = {dt: (embed_lookup(t, ids, dt), jnp.take(t.astype(dt), ids, axis=0))
           for dt in ("float32", "bfloat16")}
    g = jax.grad(lambda t: jnp.sum(embed_lookup(t, ids, jnp.float32) * w))(t)
    ref = jax.grad(lambda t: jnp.sum(jnp.take(t, ids, axis=0) * w))(t)
    return got, g, ref, embed_lookup(t, jnp.array([V, -1, 1]), jnp.float32)

  got, g, ref, bad = f(t, ids, w)
  for dt, (lookup, take) in got.items():
    assert lookup.dtype == jnp.dtype(dt) and lookup.shape == (2, 5, 8)
    np.testing.assert_array_equal(lookup, take)
  np.testing.assert_allclose(g, ref, atol=1e-6)
  assert np.isnan(bad[:2]).all() and np.isfinite(bad[2]).all()


def test_pre_and_post_ln_differ_and_dropout_toggles():
  y = jnp.arange(8)[None] % 11
  nll = nnx.jit(lambda m, y: m.nll(y))
  post = build(cfg_of(dropout=0.5), rngs=nnx.Rngs(0))
  pre = build(cfg_of(dropout=0.5, pre_ln=True), rngs=nnx.Rngs(0))
  post.eval(), pre.eval()
  assert not np.allclose(nll(post, y), nll(pre, y))
  np.testing.assert_array_equal(nll(post, y), nll(post, y))   # eval: deterministic
  post.train()
  assert not np.allclose(nll(post, y), nll(post, y))   # train: fresh dropout masks


def test_attention_dropout_changes_probabilities_only_in_training():
  m = build(cfg_of(attention_dropout=0.5), rngs=nnx.Rngs(0))
  y = jnp.arange(8)[None] % 11
  nll = nnx.jit(lambda m, y: m.nll(y))
  m.eval()
  ref = nll(m, y)
  m.train()
  assert not np.allclose(nll(m, y), ref)
  m.eval()
  np.testing.assert_array_equal(nll(m, y), ref)


@pytest.mark.parametrize("name", ["softmax", "flash", "linear", "local"])
def test_an_attention_layer_records_the_weights_it_applies(name):
  """attention_weights: one layer (GQA, a key-padding mask, causal) records (B, H, T, S)
  weights that reproduce its output through its own v and o projections, and are the
  softmax probabilities for a score variant; the layer is left as it was."""
  cfg = cfg_of(num_heads=4, num_kv_heads=2, d_model=16)
  mha = MultiHeadAttention(cfg, name, nnx.Rngs(0))
  x = jax.random.normal(jax.random.key(1), (2, 8, 16))
  valid = jnp.arange(8)[None] < jnp.array([[8], [5]])
  call = lambda m, x: m(x, causal=True, kv_valid_BS=valid)
  out, maps = attention_weights(call, mha, x)
  (w,), = maps.values()
  assert list(maps) == [()] and w.shape == (2, 4, 8, 8) and w.dtype == jnp.float32
  v = jnp.repeat(mha._heads(x, mha.v, 2), 2, axis=2)               # (B, S, H, Dh)
  np.testing.assert_allclose(mha._out(jnp.einsum("bhts,bshd->bthd", w, v), x), out,
                             atol=1e-5)
  assert float(jnp.abs(jnp.triu(w, 1)).max()) < 1e-6                # causal
  assert float(jnp.abs(w[1, :, :, 5:]).max()) < 1e-6                # padding keys
  if name in ("softmax", "flash"):
    q, k = mha._heads(x, mha.q, 4), mha._heads(x, mha.k, 2)
    np.testing.assert_allclose(w, attention.probabilities(
        q, k, causal=True, mask=valid[:, None, None, :]), atol=1e-6)
  assert mha.record_weights is False and not hasattr(mha, "weights")
  np.testing.assert_array_equal(call(mha, x), out)                  # records nothing now


def test_attention_weights_of_a_whole_model_by_layer_path_jitted():
  """Every attention layer of an encoder-decoder, by layer path, under nnx.jit (the
  flag is static, the weights come out of the jitted call), beside the same forward
  pass without recording. Eagerly (each op a program of its own: ~10 CPU-s for this
  model) attention_weights is covered in make test by
  tests/models/test_models.py::test_an_attention_layer_records_the_weights_it_applies
  (the same capture, on one layer)."""
  cfg = cfg_of(kind="encdec", num_layers=2, num_encoder_layers=1, attention="local",
               cross_attention="softmax")
  m = build(cfg, rngs=nnx.Rngs(0))
  m.eval()
  src = jnp.array([[3, 4, 5, 6, 0, 0]])
  tgt = shift_right(jnp.array([[3, 4, 2, 0]]), cfg.bos_id)
  fwd = lambda m, s, t: m(s, t)
  (out, maps), plain = nnx.jit(lambda m, s, t: (attention_weights(fwd, m, s, t),
                                                fwd(m, s, t)))(m, src, tgt)
  assert list(maps) == [("decoder", "blocks", i, role) for i in (0, 1)
                        for role in ("attn", "cross")] + [("encoder", "blocks", 0, "attn")]
  assert all(len(ws) == 1 for ws in maps.values())                 # one call each
  assert maps[("decoder", "blocks", 1, "cross")][0].shape == (1, 2, 4, 6)
  assert maps[("encoder", "blocks", 0, "attn")][0].shape == (1, 2, 6, 6)
  cross = maps[("decoder", "blocks", 0, "cross")][0]
  np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-5)         # a softmax over keys
  assert float(cross[..., 4:].max()) < 1e-6                         # source padding
  np.testing.assert_allclose(out, plain, atol=1e-5)
  assert not nnx.state(m, AttentionWeights)                         # nothing stored


@pytest.mark.parametrize("kw, key, words", [
    (dict(attention="linformer"), "attention", "cannot be causal"),
    (dict(kind="encdec", cross_attention="reformer"), "cross_attention", "Tq == Tk"),
    (dict(kind="encdec", cross_attention="local"), "cross_attention",
     "position in its own"),
    (dict(attention="flash", attention_dropout=0.1), "attention_dropout", "never forms"),
    (dict(attention="nope"), "attention", "valid names are: additive"),
    (dict(kind="classifier", attention="gla"), "attention", "defined causally only"),
    (dict(kind="encdec", encoder_attention="softmax", cross_attention="deltanet"),
     "cross_attention", "Tq == Tk"),
    (dict(attention="gla", attention_options={"gla": {"gate": "scalar"}}),
     "attention_options.gla", "gate must be one of"),
    (dict(num_heads=2, num_kv_heads=3), "num_kv_heads", "not a multiple"),
    (dict(head="dmol"), "head", "8-bit pixels"),
    (dict(attention_options={"nope": {}}), "attention_options.nope", "unknown"),
    (dict(kind="encdec", encoder_attention="linformer", decoder_attention="softmax",
          attention_options={"linformer": {"k_proj": 0}}), "attention_options.linformer",
     "k_proj must be a positive integer"),
    (dict(attention="local", attention_options={"local": {"windw": 3}}),
     "attention_options.local", "no option 'windw'; did you mean window? (its options: "
     "scale, sinks, window)"),
    (dict(attention_options={"linformer": {"e": 1}}), "attention_options.linformer",
     "'e' is a parameter of attention variant 'linformer'"),
])
def test_config_refusals_name_the_key(kw, key, words):
  with pytest.raises(ConfigError) as e:
    cfg_of(**kw)
  assert f"'{key}'" in str(e.value) and words in str(e.value)


def test_linformer_k_proj_option_sets_its_projections_and_cost():
  """attention_options.linformer.k_proj is the projected length: the model's e and f
  get (k_proj, max_len) and the call does not see the option (the function takes its
  length from e); the FLOP count follows."""
  kw = dict(kind="encdec", encoder_attention="linformer", decoder_attention="softmax")
  small = cfg_of(**kw, attention_options={"linformer": {"k_proj": 4}})
  m = build(small, rngs=nnx.Rngs(0))
  attn = m.encoder.blocks[0].attn
  assert attn.p_e.shape == attn.p_f.shape == (4, TINY["max_len"])
  assert "k_proj" not in dict(attn.options)
  src, tgt = jnp.ones((1, 8), jnp.int32), jnp.ones((1, 8), jnp.int32)
  assert np.all(np.isfinite(jitted(m, lambda m, s, t: m.nll(s, t), src, tgt)))
  full = cfg_of(**kw)                                   # default: min(64, max_len) = 16
  assert flops_per_token(small, 8, 8)["total"] < flops_per_token(full, 8, 8)["total"]


def test_one_flop_count_per_function():
  """per_function: a causal exact attention is charged its visible pairs whichever
  kernel computes it (softmax computes all N², flash the causal half); an encoder's
  (not causal) and linear attention's counts do not change."""
  lm = lambda a: cfg_of(kind="lm", decoder_attention=a)
  fn = {a: flops_per_token(lm(a), 64, per_function=True)["total"]
        for a in ("softmax", "flash", "sdpa")}
  assert fn["softmax"] == fn["flash"] == fn["sdpa"]
  assert flops_per_token(lm("softmax"), 64)["total"] > fn["softmax"]
  assert flops_per_token(lm("linear"), 64, per_function=True) == flops_per_token(lm("linear"), 64)
  enc = cfg_of(kind="encdec", encoder_attention="softmax", decoder_attention="softmax")
  a, b = flops_per_token(enc, 8, 8), flops_per_token(enc, 8, 8, per_function=True)
  assert a["encoder"] == b["encoder"] and a["decoder"] > b["decoder"]


def test_from_dict_names_unknown_keys():
  with pytest.raises(ConfigError, match="unknown key.*'d_modle'"):
    ModelConfig.from_dict({"d_modle": 3})
  assert ModelConfig.from_dict({"d_model": 32, "num_heads": 4}).dh == 8


def test_fixed_buffers_are_not_parameters():
  m = build(cfg_of(attention="performer"), rngs=nnx.Rngs(0))
  counts = param_count(m)
  assert counts["buffers"] == attention.variant("performer").params["projection"].shape(
      2, 8, 16)[0] * 8
  general = build(cfg_of(attention="general"), rngs=nnx.Rngs(0))
  assert param_count(general)["params"] == param_count(build(
      cfg_of(), rngs=nnx.Rngs(0)))["params"] + 2 * 8 * 8


@pytest.mark.parametrize("kind, name", [("lm", "softmax"), ("lm", "linear"), ("lm", "gla"),
                                        ("encdec", "softmax"), ("classifier", "softmax")])
def test_flops_per_token_matches_xla(kind, name):
  cfg = ModelConfig(kind=kind, vocab_size=64, d_model=64, num_heads=4, num_kv_heads=2,
                    d_ff=128, num_layers=2, max_len=64, attention=name)
  m = build(cfg, rngs=nnx.Rngs(0))
  m.eval()
  g, s = nnx.split(m)
  y = jnp.ones((1, 64), jnp.int32)
  args = {"lm": (y,), "encdec": (y, y),
          "classifier": (y, jnp.zeros((1, 1), jnp.int32))}[kind]
  c = cpu_cost_analysis(lambda s: nnx.merge(g, s).nll(*args).sum(), s)
  ours = flops_per_token(cfg, 64)["total"] * 64
  assert abs(ours - c["flops"]) / c["flops"] < 0.08


def test_dmol_is_a_distribution_and_nll_matches_table():
  cfg = ModelConfig(vocab_size=256, d_model=8, num_heads=1, d_ff=8, num_layers=1,
                    head="dmol", max_len=8)
  head = MixtureHead(cfg, nnx.Rngs(0))
  h = 3 * jax.random.normal(jax.random.PRNGKey(0), (5, 8))
  y = jnp.array([0, 1, 127, 254, 255])

  def f(head, h, y):
    raw = dmol_log_prob(head.params(h)[:, None, :], jnp.arange(256))    # (5, 256)
    table = -jnp.take_along_axis(head.log_probs(h), y[:, None], 1)[:, 0]
    return (jax.nn.logsumexp(raw, -1), head.nll(h, y), table,
            jax.grad(lambda h: head.nll(h, y).sum())(h))

  total, nll, table, g = jitted(head, f, h, y)
  np.testing.assert_allclose(jnp.exp(total), 1.0, atol=1e-4)   # the 256 bins sum to one
  np.testing.assert_allclose(nll, table, atol=1e-4)
  assert np.isfinite(np.asarray(g)).all()


def test_pixel_model_bits_per_dim_at_init_is_near_uniform():
  cfg = ModelConfig(vocab_size=256, d_model=16, num_heads=2, d_ff=16, num_layers=1,
                    max_len=20, head="dmol")
  m = build(cfg, rngs=nnx.Rngs(0))
  m.eval()
  x = jax.random.randint(jax.random.PRNGKey(0), (2, 20), 0, 256)
  bpd = float(jitted(m, lambda m, x: m.nll(x).mean(), x) / math.log(2))
  assert 5.0 < bpd < 14.0           # uniform is 8 bits; an untrained mixture is near it


def test_lora_hook_wraps_any_dense_layer():
  m = build(cfg_of(num_layers=2), rngs=nnx.Rngs(0))
  m.eval()
  y = jnp.arange(8)[None] % 11
  nll = nnx.jit(lambda m, y: m.nll(y))
  ref = nll(m, y)
  paths = [p for p, _ in dense_layers(m)]
  assert ("decoder", "blocks", 1, "attn", "q") in paths
  assert ("decoder", "blocks", 0, "ffn", "fc2") in paths

  def to_lora(path, lin):
    new = nnx.LoRALinear(lin.in_features, lin.out_features, lora_rank=2,
                         rngs=nnx.Rngs(1))
    new.kernel[...] = lin.kernel[...]
    new.bias[...] = lin.bias[...]
    return new

  n = replace_dense(m, to_lora, lambda p: p[-1] in ("q", "v"))
  assert n == 4
  assert isinstance(m.decoder.blocks[1].attn.v, nnx.LoRALinear)
  np.testing.assert_allclose(nll(m, y), ref, atol=1e-6)     # B = 0: starts at the base


# ---- positions: every scheme trains, decodes as it runs in parallel, and refuses what
# it cannot reach ------------------------------------------------------------------------

@pytest.mark.parametrize("positions, name", [
    ("learned", "softmax"), ("none", "softmax"),
    ("rope", "softmax"), ("rope2d", "softmax"), ("alibi", "softmax"),
    ("rope", "linear"), ("rope2d", "linear"), ("alibi", "linear")])
def test_every_positions_scheme_trains_a_step_and_steps_equal_the_parallel_pass(
    positions, name):
  """One gradient step lowers the loss on its batch; teacher-forced step_logp, token
  by token through the decode state (KV cache or (S, Z)), equals forward_logp (rope2d:
  keys sit one pixel before their queries, in both paths)."""
  cfg = cfg_of(attention=name, positions=positions, image_side=3, num_kv_heads=1,
               pre_ln=True)
  m = build(cfg, rngs=nnx.Rngs(0))
  m.eval()
  x = jnp.concatenate([m.prefix(2), jnp.arange(2 * 9).reshape(2, 9) % 11], 1)

  def f(m, x):
    def loss(m):      # the nll of the targets x[:, 1:], from the same parallel pass
      par = m.forward_logp(x)
      return -jnp.take_along_axis(par[:, :-1], x[:, 1:, None], -1).mean(), par

    (l0, par), g = nnx.value_and_grad(loss, has_aux=True)(m)

    def body(state, i):
      lp, state = m.step_logp(jax.lax.dynamic_slice_in_dim(x, i, 1, axis=1), state, i)
      return state, lp[:, 0]

    _, seq = jax.lax.scan(body, m.init_state(2, 10), jnp.arange(10))
    # then the step (on the traced copy: the model outside is left as it was)
    params = nnx.state(m, nnx.Param)
    nnx.update(m, jax.tree.map(lambda p, gp: p - 0.05 * gp, params, nnx.state(g, nnx.Param)))
    return l0, loss(m)[0], par, seq.transpose(1, 0, 2)

  l0, l1, par, seq = jitted(m, f, x)
  assert np.isfinite(float(l0)) and float(l1) < float(l0)
  np.testing.assert_allclose(seq, par, atol=2e-5)


@pytest.mark.parametrize("positions", ["rope", "alibi"])
def test_encoder_decoder_positions_per_role(positions):
  """Encoder (non-causal, linear: ALiBi as a two-way decay) and decoder self-attention
  take the scheme, cross-attention none; a source moved to other absolute positions
  encodes the same, since rope and alibi see only offsets."""
  cfg = cfg_of(kind="encdec", positions=positions, attention="softmax",
               encoder_attention="linear")
  m = build(cfg, rngs=nnx.Rngs(0))
  m.eval()
  assert m.decoder.blocks[0].cross.positions is None
  assert m.decoder.blocks[0].attn.positions.kind == positions
  assert m.encoder.blocks[0].attn.positions.kind == positions
  src = jnp.array([[3, 4, 5, 6, 7, 8]])
  tgt = jnp.array([[3, 4, 2]])

  def f(m, src, tgt):     # one encoder pass: the source at 0..5 and moved to 17..22
    mem, valid = m.encode(jnp.concatenate([src, src]),
                          pos_BS=jnp.arange(6)[None] + jnp.array([[0], [17]]))
    logp = m.forward_logp(shift_right(tgt, cfg.bos_id), mem[:1], valid[:1])
    return logp, mem[:1], mem[1:]

  logp, mem, moved = jitted(m, f, src, tgt)
  assert logp.shape == (1, 3, 11) and np.isfinite(np.asarray(logp)).all()
  np.testing.assert_allclose(moved, mem, atol=2e-5)


def test_check_length_refuses_what_has_no_position_past_max_len():
  """Evaluating at 4x max_len: functions of the position run; a learned table, and
  variants with per-position parameters, refuse before anything is built."""
  for ok in (dict(positions="sinusoidal"), dict(positions="alibi", attention="sparse"),
             dict(positions="rope", attention="flash"), dict(positions="none")):
    assert cfg_of(**ok).check_length(64).max_len == TINY["max_len"]
  for bad, words in ((dict(positions="learned"), "one trained vector per position"),
                     (dict(attention="location"), "w has 16 positions"),
                     (dict(kind="encdec", encoder_attention="linformer",
                           decoder_attention="softmax"), "e has 16 columns")):
    with pytest.raises(ConfigError, match=words):
      cfg_of(**bad).check_length(64)
  m = build(cfg_of(positions="learned"), rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="max_len=16"):
    m(jnp.zeros((1, 20), jnp.int32))
  alibi = build(cfg_of(positions="alibi"), rngs=nnx.Rngs(0))
  assert np.isfinite(np.asarray(jitted(alibi, lambda m, y: m.nll(y),
                                       jnp.ones((1, 64), jnp.int32)))).all()


@pytest.mark.parametrize("kw, key, words", [
    (dict(positions="rope2d"), "image_side", "image width"),
    (dict(positions="rope", rope_fraction=0.1), "rope_fraction", "leaves 0 to rotate"),
    (dict(positions="rope", rope_base=1.0), "rope_base", "> 1"),
    (dict(positions="alibi", attention="linformer", kind="encdec",
          decoder_attention="softmax"), "positions", "no key position j"),
    (dict(positions="rope", attention="general"), "positions", "depends on i and j"),
])
def test_positions_config_refusals(kw, key, words):
  with pytest.raises(ConfigError) as e:
    cfg_of(**kw)
  assert f"'{key}'" in str(e.value) and words in str(e.value)


# ---- the short convolution on self-attention's input --------------------------------------

def test_short_conv_starts_as_the_plain_model_and_decodes_as_it_runs_in_parallel():
  """short_conv=3: at initialisation (identity taps) the model computes what it computes
  without the convolution; with trained-looking taps, teacher-forced step_logp through
  the decode state (the last K-1 inputs of each layer) equals forward_logp."""
  kw = dict(attention="linear", num_kv_heads=1, pre_ln=True, num_layers=2)
  m = build(cfg_of(short_conv=3, **kw), rngs=nnx.Rngs(0))
  plain = build(cfg_of(**kw), rngs=nnx.Rngs(0))
  x = jnp.concatenate([m.prefix(2), jnp.arange(2 * 7).reshape(2, 7) % 11], 1)

  @nnx.jit                      # one program, run at the identity taps and at random ones
  def f(plain, m, x):
    def body(state, i):
      lp, state = m.step_logp(jax.lax.dynamic_slice_in_dim(x, i, 1, axis=1), state, i)
      return state, lp[:, 0]
    _, seq = jax.lax.scan(body, m.init_state(2, 8), jnp.arange(8))
    return plain.forward_logp(x), m.forward_logp(x), seq.transpose(1, 0, 2)

  ref, par, _ = f(plain, m, x)
  np.testing.assert_allclose(par, ref, atol=1e-6)
  for i, b in enumerate(m.decoder.blocks):
    b.conv.w.value = jax.random.normal(jax.random.key(i), b.conv.w.shape)
  _, par, seq = f(plain, m, x)
  assert not np.allclose(par, ref, atol=1e-3)      # the taps act
  np.testing.assert_allclose(seq, par, atol=2e-5)
  # the FLOP count has the taps: 2 D K per token and layer
  assert flops_per_token(m.cfg, 8)["total"] - flops_per_token(plain.cfg, 8)["total"] == \
      2 * 16 * 3 * 2


def test_short_conv_taps_stay_inside_a_packed_segment_and_skip_padding():
  from models.layers import ShortConv
  conv = ShortConv(3, 4)
  conv.w.value = jax.random.normal(jax.random.key(0), (3, 4))
  h = jax.random.normal(jax.random.key(1), (1, 7, 4))
  seg = jnp.array([[0, 0, 0, 1, 1, 1, 1]])
  valid = jnp.array([[False, False, True, True, True, True, True]])    # left padding

  @nnx.jit                      # one program: eagerly, every op would compile alone
  def f(conv, h):
    return (conv(h, seg), conv(h[:, :3]), conv(h[:, 3:]), conv(h, valid_BT=valid),
            conv(h[:, 2:]))

  packed, first, second, padded, unpadded = f(conv, h)
  np.testing.assert_allclose(packed[:, :3], first, atol=1e-6)
  np.testing.assert_allclose(packed[:, 3:], second, atol=1e-6)
  np.testing.assert_allclose(padded[:, 2:], unpadded, atol=1e-6)
  with pytest.raises(ConfigError, match="'short_conv'.*decoder-only"):
    cfg_of(kind="encdec", short_conv=3)
  with pytest.raises(ConfigError, match="'short_conv'.*int >= 0"):
    cfg_of(short_conv=-1)


def test_the_one_hot_limit_is_a_model_setting_whose_default_is_the_constant():
  """A model's `one_hot_max_vocab` chooses the lookup (0: always a gather, the same
  rows), its default is models.layers.ONE_HOT_MAX_VOCAB, and it is a neutral field of
  the studies' fingerprints at that default (rows trained before it keep their
  identity)."""
  from models.layers import ONE_HOT_MAX_VOCAB, embed_lookup
  from studies.core.sweep import NEUTRAL
  assert ModelConfig().one_hot_max_vocab == ONE_HOT_MAX_VOCAB == NEUTRAL["one_hot_max_vocab"]
  t = jax.random.normal(jax.random.key(0), (7, 8))
  ids = jnp.array([[0, 6, 3, 3]])
  np.testing.assert_array_equal(embed_lookup(t, ids, jnp.float32, 0),
                                embed_lookup(t, ids, jnp.float32))
  with pytest.raises(ConfigError, match="one_hot_max_vocab"):
    ModelConfig(one_hot_max_vocab=-1).validate()
