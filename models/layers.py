"""Transformer layers in Flax NNX, composed from the attention registry.

Shapes: B batch, T query positions, S key/value positions, D d_model, H query heads,
K key/value heads, Dh head size, F FFN width. Activations are in the config's compute
dtype; parameters are float32.

No code here names an attention variant: `MultiHeadAttention` looks its function up
with `attention.get(name)`, creates the parameters the `Variant` record asks for
(trainable ones as `nnx.Param`, fixed random ones as `Buffer`) and the projections of
the layer input to its per-token inputs (`Variant.inputs`, e.g. gla's gate logits:
`InputProjection`s held as in_<name>), and passes them, with the config's options for
that variant, to every call and decode step.

Every projection is an `nnx.Linear` held under a stable attribute name (q, k, v, o
in attention, in_<input>.up and .down for a variant's inputs; fc1, fc2 in the FFN).
`dense_layers` lists them by path and `replace_dense` swaps any of them for another
module (e.g. `nnx.LoRALinear`), which is the hook the LoRA code uses.

Attention maps are a model feature: `attention_weights(fn, model, ...)` runs a forward
pass with every attention layer recording the weights it applies to its values
(`AttentionWeights`, sown while the layer's `record_weights` is on), and returns them
by layer path.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
from flax import nnx

import attention
from attention.core.registry import OUTPUT_NORMS
from models.config import ModelConfig


class Buffer(nnx.Variable):
  """A fixed, non-trained array (performer's random projection, reformer's rotations).

  Optimisers built over `nnx.Param` never see it; it is saved with the model state.
  """


class AttentionWeights(nnx.Intermediate):
  """The weights (B, H, T, S) float32 an attention layer applied to its values
  (`attention.implied_weights`: out = weights @ v per head), one array per call,
  sown by `MultiHeadAttention.attend_kv` while the layer's `record_weights` is True.
  Never part of a checkpoint: `nnx.capture` collects them (see `attention_weights`)."""


def dense(d_in: int, d_out: int, cfg: ModelConfig, rngs: nnx.Rngs, *, bias=True,
          scale: float = 1.0, bias_init=jax.nn.initializers.zeros) -> nnx.Linear:
  """A Linear layer (x: (..., d_in) -> (..., d_out)) with Xavier-uniform weights."""
  init = jax.nn.initializers.variance_scaling(scale, "fan_avg", "uniform")
  return nnx.Linear(d_in, d_out, use_bias=bias, kernel_init=init, bias_init=bias_init,
                    dtype=jnp.dtype(cfg.dtype), rngs=rngs)


class InputProjection(nnx.Module):
  """A per-token input a variant declares (`attention.InputSpec`), projected from the
  layer input: x (B, T, D) -> (B, T, heads, width), through `down` (D -> rank, no bias)
  when the spec has a rank, then `up` (-> heads * width)."""

  def __init__(self, spec, d_model: int, shape: tuple, cfg: ModelConfig, rngs: nnx.Rngs):
    self.shape = tuple(shape)                       # (heads, width)
    self.down = (dense(d_model, spec.rank, cfg, rngs, bias=False, scale=spec.scale)
                 if spec.rank else None)
    self.up = dense(spec.rank or d_model, self.shape[0] * self.shape[1], cfg, rngs,
                    bias=spec.bias_init is not None, scale=spec.scale,
                    bias_init=spec.bias_init or jax.nn.initializers.zeros)

  def __call__(self, x_BTD):
    h = x_BTD if self.down is None else self.down(x_BTD)
    return self.up(h).reshape(x_BTD.shape[:2] + self.shape)


def dense_layers(model: nnx.Module) -> Iterator[tuple[tuple, nnx.Linear]]:
  """Yields (path, layer) for every nnx.Linear in `model`, e.g. (('blocks', 0, 'attn', 'q'), ...)."""
  for path, m in nnx.iter_graph(model):
    if isinstance(m, nnx.Linear):
      yield tuple(path), m


def replace_dense(model: nnx.Module, fn: Callable[[tuple, nnx.Linear], nnx.Module],
                  select: Callable[[tuple], bool] = lambda path: True) -> int:
  """Replaces each selected nnx.Linear by fn(path, layer), in place; returns how many.

  `select(path)` sees the path tuple, e.g. ('decoder', 'blocks', 0, 'attn', 'q'). The
  replacement must map (..., in) -> (..., out) like the layer it replaces.
  """
  todo = [(p, m) for p, m in dense_layers(model) if select(p)]
  for path, layer in todo:
    parent = model
    for key in path[:-1]:
      parent = parent[key] if isinstance(key, int) else getattr(parent, key)
    new = fn(path, layer)
    if isinstance(path[-1], int):
      parent[path[-1]] = new
    else:
      setattr(parent, path[-1], new)
  return len(todo)


def sinusoid(pos_T, d: int, dtype=jnp.float32):
  """Vaswani et al.'s fixed positions: pos_T (..., T) int -> (..., T, d)."""
  half = d // 2
  freq = jnp.exp(-math.log(10000.0) * jnp.arange(half, dtype=jnp.float32) / half)
  ang = pos_T[..., None].astype(jnp.float32) * freq
  pe = jnp.concatenate([jnp.sin(ang), jnp.cos(ang)], axis=-1)
  if d % 2:
    pe = jnp.pad(pe, [(0, 0)] * (pe.ndim - 1) + [(0, 1)])
  return pe.astype(dtype)


def token_positions(T: int, pos0=0, pos_BT=None):
  """The explicit positions (B|1, T) int32 of T tokens: pos_BT if given (packed rows
  restart them per segment), else pos0 + arange(T)."""
  if pos_BT is not None:
    return jnp.asarray(pos_BT, jnp.int32)
  return (pos0 + jnp.arange(T, dtype=jnp.int32))[None]


# Vocabularies up to this size are looked up as one_hot(ids) @ table instead of a
# gather. The gather's gradient is a scatter-add of every token's row into the table,
# which on a GPU serialises on the rows many tokens share: an MNIST batch (16 x 784
# pixels, most of them 0) spent 50 of its 72 ms step in that one scatter (profiler
# trace, H100, 2026-11-26). The one-hot form turns both directions into matmuls, at
# 2 V D FLOPs per token each way: <= 1024 keeps that under ~3% of any preset's step;
# a larger vocabulary (multi30k's 8000) has far fewer repeats per row and keeps the
# gather. The default of a model's `one_hot_max_vocab` (models/config.py).
ONE_HOT_MAX_VOCAB = 1024


def embed_lookup(table_VD, ids_BT, dtype, one_hot_max: int = ONE_HOT_MAX_VOCAB):
  """The rows ids_BT (any int shape) of table_VD (V, D), as dtype: a one-hot matmul for
  V <= one_hot_max (a model's `one_hot_max_vocab`, by default ONE_HOT_MAX_VOCAB; 0: always
  a gather) (exact: each output is one row times 1.0, summed in float32
  at the highest precision), else `jnp.take`. Either way an id outside [0, V) reads a
  NaN row, never a zero or wrapped-around one."""
  V = table_VD.shape[0]
  table = table_VD.astype(dtype)
  if V > one_hot_max:
    x = jnp.take(table, ids_BT, axis=0, mode="fill", fill_value=jnp.nan)
  else:
    oh = jax.nn.one_hot(ids_BT, V, dtype=dtype)
    x = jnp.einsum("...v,vd->...d", oh, table, precision=jax.lax.Precision.HIGHEST,
                   preferred_element_type=jnp.float32).astype(dtype)
  ok = (ids_BT >= 0) & (ids_BT < V)     # take's fill would wrap a negative id around
  return jnp.where(ok[..., None], x, jnp.nan)


class Embedder(nnx.Module):
  """Token embedding * sqrt(D) plus fixed or learned positions (cfg.positions
  "sinusoidal" or "learned"; nothing for the schemes that act in attention), then
  dropout.

  __call__(ids_BT, pos0=0, pos_BT=None) -> (B, T, D): the tokens at positions pos_BT
    (B|1, T) int, default pos0 + arange(T) (`token_positions`). A learned table has
    max_len rows: positions pos0 + T > max_len with a static pos0 are refused here; a
    traced position past it reads NaN (nnx.Embed's out-of-range fill), never a wrong
    row.
  attend(h_BTD) -> (B, T, vocab): the transposed embedding (tied output).
  """

  def __init__(self, vocab: int, cfg: ModelConfig, rngs: nnx.Rngs):
    self.d = cfg.d_model
    self.dtype = jnp.dtype(cfg.dtype)
    self.max_len = cfg.max_len
    self.tok = nnx.Embed(vocab, cfg.d_model, dtype=self.dtype, rngs=rngs,
                         embedding_init=jax.nn.initializers.normal(cfg.d_model ** -0.5))
    self.pos = (nnx.Embed(cfg.max_len, cfg.d_model, dtype=self.dtype, rngs=rngs,
                          embedding_init=jax.nn.initializers.normal(0.02))
                if cfg.positions == "learned" else None)
    self.additive = cfg.positions in ("sinusoidal", "learned")
    self.drop = nnx.Dropout(cfg.dropout, rngs=rngs)
    self.one_hot_max = cfg.one_hot_max_vocab

  def __call__(self, ids_BT, pos0=0, pos_BT=None):
    T = ids_BT.shape[1]
    x = embed_lookup(self.tok.embedding[...], ids_BT, self.dtype,
                     self.one_hot_max) * math.sqrt(self.d)
    if self.pos is not None:
      if pos_BT is None and isinstance(pos0, int) and pos0 + T > self.max_len:
        raise ValueError(f"learned positions: positions {pos0}..{pos0 + T - 1} run past "
                         f"the table's model.max_len={self.max_len} rows")
      x = x + self.pos(token_positions(T, pos0, pos_BT))
    elif self.additive:
      x = x + sinusoid(token_positions(T, pos0, pos_BT), self.d, self.dtype)
    return self.drop(x)

  def attend(self, h_BTD):
    return self.tok.attend(h_BTD)


# The layer around a variant's operator as its paper builds it (`layer` of
# MultiHeadAttention: the pieces ModelConfig.layer_pieces reads from the record's
# `Variant.layer` and the model's `gated_layer`; attention.core.registry.LAYER_PIECES
# says each piece and whose paper uses it).
QKV_CONV_TAPS = 4     # the q/k/v convolutions' kernel (DeltaNet's, Gated DeltaNet's, GLA's)
NORM_EPS = 1e-5       # the output normalisations' epsilon (flash-linear-attention's layers)


class HeadNorm(nnx.Module):
  """Normalisation of each head's output o (B, T, H, Dv) over its Dv channels, in
  float32, returned in o's dtype:
    "rms_norm"    o / sqrt(mean(o²) + eps) * scale, scale (Dv,) shared by the heads
                  (GLA, DeltaNet, Gated DeltaNet as flash-linear-attention builds them)
    "group_norm"  (o - mean) / sqrt(var + eps) * scale + bias, scale and bias (H, Dv):
                  GroupNorm with one group per head (RetNet), per position.
  """

  def __init__(self, kind: str, H: int, Dv: int):
    if kind not in OUTPUT_NORMS:
      raise ValueError(f"HeadNorm: kind must be one of {OUTPUT_NORMS}, got {kind!r}")
    self.kind = kind
    shape = (Dv,) if kind == "rms_norm" else (H, Dv)
    self.scale = nnx.Param(jnp.ones(shape, jnp.float32))
    self.bias = nnx.Param(jnp.zeros(shape, jnp.float32)) if kind == "group_norm" else None

  def __call__(self, o_BTHD):
    x = o_BTHD.astype(jnp.float32)
    if self.bias is not None:
      x = x - jnp.mean(x, axis=-1, keepdims=True)
    x = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + NORM_EPS)
    x = x * self.scale[...]
    if self.bias is not None:
      x = x + self.bias[...]
    return x.astype(o_BTHD.dtype)


class MultiHeadAttention(nnx.Module):
  """Multi-head attention (self or cross, MHA/GQA/MQA) over a registered variant.

  __call__(x_BTD, kv_BSD=None, *, causal=False, kv_valid_BS=None, q_pos=None,
           k_pos=None, q_seg=None, k_seg=None) -> (B, T, D)
    kv_BSD: the sequence to attend to (None: x itself, i.e. self-attention).
    kv_valid_BS: bool, False at padding keys (a key-padding mask).
    q_seg (B|1, T), k_seg (B|1, S) int: segment ids of packed rows (a query attends
    only keys of its own segment; attention.core.common), passed to the variant only when
    given, so that a variant refusing them still runs unpacked.
    q_pos (B|1, T), k_pos (B|1, S) int: the positions of queries and keys, which the
    variant reads when this layer has a position scheme (`positions`: self-attention
    under rope, rope2d or alibi; cross-attention never has one).
  init_state(batch, max_len, cache_dtype) / step(x_BTD, state, q_pos, k_pos):
    incremental self-attention through the variant's decode state (KV cache or
    (S, Z)), the new tokens at positions q_pos, k_pos.
  project_kv(kv_BSD) and attend_kv(x_BTD, k, v, kv_valid_BS): cross-attention with
    keys and values computed once per source.
  record_weights: while True (toggled like train()/eval(), through
    `model.set_attributes(record_weights=...)` or `attention_weights`), every call of
    attend_kv (each forward pass; a cross-attention also while decoding) sows the
    weights it applied to v as `AttentionWeights` (B, H, T, S), computed from the
    same q, k, mask and options (dropout, a training-time perturbation, is not in
    them). A self-attention decode `step` records nothing.
  layer: the pieces of the layer around the operator (ModelConfig.layer_pieces; a
    self-attention's, () for cross-attention), each optional and independent:
      qkv_conv   q, k, v = ShortConv(QKV_CONV_TAPS) of their projections (conv_q,
                 conv_k, conv_v, depthwise, causal, identity at initialisation; a packed
                 row's taps stay in their segment, padding reads as zero); its decode
                 state is the last K-1 projected inputs of each: the state is then
                 {"attn": the variant's, "qkv_conv": (q, k, v histories)}
      qkv_silu   SiLU on q, k, v before the operator (after the convolutions)
      rms_norm | group_norm   `HeadNorm` of each head's output (out_norm)
      out_gate   o = norm(attn) ⊙ silu(x W_g) (g: D -> H·Dh) before the projection o
      attn_gate  o = norm(attn) ⊙ σ(x W_a) (g_attn: D -> H·Dh, with a bias like every
                 projection here), elementwise and head-specific, before the projection
                 o (Qiu et al. 2025's gated attention, at their G1 position); never
                 beside out_gate (models.config.layer_pieces refuses the pair)
  """

  def __init__(self, cfg: ModelConfig, name: str, rngs: nnx.Rngs, positions=None,
               layer: tuple[str, ...] = ()):
    self.name = name
    self.positions = positions      # attention.core.positions.Positions (static) or None
    variant = attention.variant(name)
    shapes, opts = variant.param_shapes(cfg.num_heads, cfg.dh, cfg.max_len,
                                        cfg.options_for(name))
    # Static attributes live in the graphdef, which must be hashable: no dicts.
    self.options = tuple(sorted(opts.items()))
    self.H, self.K, self.Dh = cfg.num_heads, cfg.kv_heads, cfg.dh
    # the widths of the k and v the variant consumes (Variant.kv_widths: head_dim
    # unless it says otherwise, e.g. mla's rope key and latent)
    self.Dk, self.Dv = variant.kv_dims(self.Dh, cfg.options_for(name))
    D = cfg.d_model
    self.q = dense(D, self.H * self.Dh, cfg, rngs)
    self.k = dense(D, self.K * self.Dk, cfg, rngs)
    self.v = dense(D, self.K * self.Dv, cfg, rngs)
    self.o = dense(self.H * self.Dh, D, cfg, rngs)
    # the parameters its options call for (a switched one, e.g. `sinks`, only while
    # its option is on: `Variant.param_shapes`), passed by name to every call
    self.param_names = tuple(shapes)
    for pname, shape in shapes.items():
      spec = variant.params[pname]
      value = spec.init(rngs.params(), shape, jnp.float32)
      setattr(self, "p_" + pname, (nnx.Param if spec.trainable else Buffer)(value))
    # per-token inputs of the variant (Variant.inputs): one projection of x each, as
    # in_<name>, passed by name to every call and decode step (`_inputs`)
    self.input_names = tuple(variant.inputs)
    for iname, shape in variant.input_shapes(1, 1, self.H, self.K, self.Dh,
                                             cfg.options_for(name)).items():
      setattr(self, "in_" + iname,
              InputProjection(variant.inputs[iname], D, shape[2:], cfg, rngs))
    # the layer around the operator (the `layer` pieces; class docstring)
    self.layer = tuple(layer)
    convs = "qkv_conv" in self.layer
    self.conv_q = ShortConv(QKV_CONV_TAPS, self.H * self.Dh) if convs else None
    self.conv_k = ShortConv(QKV_CONV_TAPS, self.K * self.Dk) if convs else None
    self.conv_v = ShortConv(QKV_CONV_TAPS, self.K * self.Dv) if convs else None
    norm = [p for p in self.layer if p in OUTPUT_NORMS]
    self.out_norm = HeadNorm(norm[0], self.H, self.Dh) if norm else None
    self.g = dense(D, self.H * self.Dh, cfg, rngs) if "out_gate" in self.layer else None
    self.g_attn = (dense(D, self.H * self.Dh, cfg, rngs) if "attn_gate" in self.layer
                   else None)
    self.attn_dropout = cfg.attention_dropout
    self.rngs = rngs["dropout"].fork() if cfg.attention_dropout > 0 else None
    self.deterministic = False  # toggled by model.train() / model.eval()
    self.record_weights = False  # toggled by attention_weights (or set_attributes)

  def _kwargs(self, q_pos=None, k_pos=None):
    """The variant's call options and parameters, and this layer's positions."""
    kw = dict(self.options)
    for pname in self.param_names:
      kw[pname] = getattr(self, "p_" + pname)[...]
    if self.positions is not None:
      kw.update(positions=self.positions, q_pos=q_pos, k_pos=k_pos)
    return kw

  def _inputs(self, x_BTD):
    """{name: (B, T, heads, width)}: the variant's per-token inputs, projected from x."""
    return {n: getattr(self, "in_" + n)(x_BTD) for n in self.input_names}

  def _heads(self, x, layer, n, width=None):
    return layer(x).reshape(x.shape[:2] + (n, width or self.Dh))

  def _out(self, o_BTHD, x_BTD):
    """The output projection of the operator's o (B, T, H, Dh), after the layer's
    output normalisation and gate (x_BTD: the layer input the gate reads)."""
    if self.out_norm is not None:
      o_BTHD = self.out_norm(o_BTHD)
    if self.g is not None:
      o_BTHD = o_BTHD * jax.nn.silu(self._heads(x_BTD, self.g, self.H)).astype(o_BTHD.dtype)
    if self.g_attn is not None:
      o_BTHD = o_BTHD * jax.nn.sigmoid(
          self._heads(x_BTD, self.g_attn, self.H)).astype(o_BTHD.dtype)
    return self.o(o_BTHD.reshape(o_BTHD.shape[:2] + (self.H * self.Dh,)))

  def _convs(self):
    return (self.conv_q, self.conv_k, self.conv_v)

  def _qkv(self, x_BTD, seg=None, valid_BT=None, hist=None):
    """Self-attention's q (B, T, H, Dh), k (B, T, K, Dk), v (B, T, K, Dv) with the
    layer's input pieces (qkv_conv over segments `seg` (B|1, T) and valid positions
    `valid_BT`, or after the decode histories `hist`; qkv_silu), and the new histories
    (None without the convolutions)."""
    hs = [self.q(x_BTD), self.k(x_BTD), self.v(x_BTD)]
    new = None
    if self.conv_q is not None:
      if hist is None:
        hs = [c(h, seg, valid_BT) for c, h in zip(self._convs(), hs)]
      else:
        hs, new = zip(*[c.step(h, s) for c, h, s in zip(self._convs(), hs, hist)])
        hs, new = list(hs), tuple(new)
    if "qkv_silu" in self.layer:
      hs = [jax.nn.silu(h) for h in hs]
    shape = lambda n, w: x_BTD.shape[:2] + (n, w)
    return (hs[0].reshape(shape(self.H, self.Dh)), hs[1].reshape(shape(self.K, self.Dk)),
            hs[2].reshape(shape(self.K, self.Dv)), new)

  def attend_kv(self, x_BTD, k, v, *, causal=False, kv_valid_BS=None, q_pos=None,
                k_pos=None, q_seg=None, k_seg=None):
    """Attention of x's queries to given keys (B, S, K, Dh) and values; -> (B, T, D)."""
    q = self._heads(x_BTD, self.q, self.H)
    return self._attend(x_BTD, q, k, v, causal=causal, kv_valid_BS=kv_valid_BS,
                        q_pos=q_pos, k_pos=k_pos, q_seg=q_seg, k_seg=k_seg)

  def _attend(self, x_BTD, q, k, v, *, causal=False, kv_valid_BS=None, q_pos=None,
              k_pos=None, q_seg=None, k_seg=None):
    """The variant on q (B, T, H, Dh), k, v, then the layer's output pieces and the
    output projection; -> (B, T, D)."""
    mask = None if kv_valid_BS is None else kv_valid_BS[:, None, None, :]
    kw = {**self._kwargs(q_pos, k_pos), **self._inputs(x_BTD)}
    if q_seg is not None or k_seg is not None:
      kw.update(q_seg=q_seg, k_seg=k_seg)
    if self.record_weights:
      w = attention.implied_weights(q, k, name=self.name, causal=causal, mask=mask, v=v,
                                    **kw)
      self.sow(AttentionWeights, "weights", w.astype(jnp.float32))
    if self.attn_dropout > 0 and not self.deterministic:
      kw.update(dropout_rate=self.attn_dropout, dropout_rng=self.rngs())
    fn = attention.get(self.name)
    return self._out(fn(q, k, v, causal=causal, mask=mask, **kw), x_BTD)

  def project_kv(self, kv_BSD):
    """Keys and values of a sequence: (B, S, K, Dk) and (B, S, K, Dv) arrays (Dh
    each unless the variant's record declares other widths, `Variant.kv_widths`)."""
    return (self._heads(kv_BSD, self.k, self.K, self.Dk),
            self._heads(kv_BSD, self.v, self.K, self.Dv))

  def __call__(self, x_BTD, kv_BSD=None, *, causal=False, kv_valid_BS=None, q_pos=None,
               k_pos=None, q_seg=None, k_seg=None):
    if self.layer and kv_BSD is None:       # self-attention with the layer's pieces
      q, k, v, _ = self._qkv(x_BTD, q_seg if q_seg is not None else k_seg, kv_valid_BS)
      return self._attend(x_BTD, q, k, v, causal=causal, kv_valid_BS=kv_valid_BS,
                          q_pos=q_pos, k_pos=k_pos, q_seg=q_seg, k_seg=k_seg)
    k, v = self.project_kv(x_BTD if kv_BSD is None else kv_BSD)
    return self.attend_kv(x_BTD, k, v, causal=causal, kv_valid_BS=kv_valid_BS,
                          q_pos=q_pos, k_pos=k_pos, q_seg=q_seg, k_seg=k_seg)

  def init_state(self, batch: int, max_len: int, cache_dtype=None, dtype=jnp.float32):
    """The variant's empty decode state for `batch` sequences of up to `max_len`."""
    kw = {k: v for k, v in self._kwargs().items() if k not in ("q_pos", "k_pos")}
    if self.positions is not None:
      kw["num_heads"] = self.H       # an ALiBi (S, Z) state is one per query head
    if cache_dtype is not None:
      kw["cache_dtype"] = cache_dtype
    s = attention.init_decode_state(
        self.name, batch=batch, max_len=max_len, num_kv_heads=self.K, head_dim=self.Dk,
        v_head_dim=self.Dv, dtype=dtype, **kw)
    if self.conv_q is None:
      return s
    return {"attn": s, "qkv_conv": tuple(c.init_state(batch, dtype) for c in self._convs())}

  def step(self, x_BTD, state, q_pos=None, k_pos=None):
    """Self-attention of T new tokens (at positions q_pos, k_pos (B|1, T)) to the
    cached prefix and themselves."""
    convs = self.conv_q is not None
    q, k, v, hist = self._qkv(x_BTD, hist=state["qkv_conv"] if convs else None)
    o, s = attention.decode_step(state["attn"] if convs else state, q, k, v,
                                 **self._kwargs(q_pos, k_pos), **self._inputs(x_BTD))
    return self._out(o, x_BTD), ({"attn": s, "qkv_conv": hist} if convs else s)


def attention_weights(fn: Callable, model: nnx.Module, *args,
                      **kwargs) -> tuple[Any, dict[tuple, tuple[jax.Array, ...]]]:
  """(fn(model, *args, **kwargs), maps): fn run with every attention layer of `model`
  recording the weights it applies to its values.

  maps: {path of a MultiHeadAttention in model, e.g. ('decoder', 'blocks', 0, 'attn'):
  a tuple with one (B, H, T, S) float32 array per call of that layer during fn, in
  call order}, sorted by path; layers that were not called are absent. Each array is
  `attention.implied_weights` of that call: softmax probabilities for the score
  variants, the normalised kernel products of linear and performer, the closed forms
  of the gated family (retention, gla, deltanet), and the window,
  pattern or buckets of the others, with out = weights @ v. Works eagerly and under
  nnx.jit; the model is left as it was (record_weights off again, nothing stored).
  Call model.eval() first to leave dropout out of the forward pass.

    _, maps = attention_weights(lambda m, x: m(x), model, ids_BT)
  """
  model.set_attributes(record_weights=True, raise_if_not_found=False)
  try:
    out, state = nnx.capture(fn, AttentionWeights)(model, *args, **kwargs)
  finally:
    model.set_attributes(record_weights=False, raise_if_not_found=False)
  maps = {tuple(path[:-1]): tuple(var.get_value())
          for path, var in nnx.to_flat_state(state)}
  order = lambda path: [(0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in path]
  return out, dict(sorted(maps.items(), key=lambda kv: order(kv[0])))


class ShortConv(nnx.Module):
  """Depthwise causal convolution over time, K taps: y_t = sum_{j<K} w_j * h_{t-j}
  (elementwise in the D channels), on a self-attention's input (cfg.short_conv).

  Why: a 2-layer softmax model finds recall (an induction head: layer 1 writes each
  token's predecessor into it, layer 2 matches on it) only after a plateau whose length
  varies from seed to seed; a short convolution hands every position its predecessors
  directly. The recurrent and gated models of the field carry one for that reason
  (H3's shift SSM, Fu et al. 2023; Zoology's BaseConv and Based, Arora et al. 2023/24;
  Mamba; GLA and DeltaNet in flash-linear-attention). Hand-written (a few lines)
  rather than nnx.Conv, because decoding carries the last K-1 inputs as state and
  packed rows must not reach across segments.

  w (K, D) starts as the identity (w_0 = 1, the other taps 0): a model with it computes
  at initialisation exactly what it computes without it.
  __call__(h_BTD, seg_BT=None, valid_BT=None) -> (B, T, D): taps before the sequence's
    start, at invalid (padding) positions or in another packed segment read zero.
  step(h_BTD, hist_BKD) -> (y_BTD, new hist_BKD): T new positions after the K-1 kept
    inputs (zeros at the start); decoding position by position equals __call__.
  """

  def __init__(self, taps: int, d: int):
    self.w = nnx.Param(jnp.zeros((taps, d), jnp.float32).at[0].set(1.0))

  def _taps(self, full_BSD, T, mask_BTK=None):
    K = self.w.shape[0]
    w = self.w.value.astype(full_BSD.dtype)
    y = 0
    for j in range(K):          # K is small (3-4): K shifted multiply-adds
      x = full_BSD[:, K - 1 - j:K - 1 - j + T]
      y = y + w[j] * (x if mask_BTK is None else x * mask_BTK[..., j:j + 1])
    return y

  def __call__(self, h_BTD, seg_BT=None, valid_BT=None):
    K, T = self.w.shape[0], h_BTD.shape[1]
    if valid_BT is not None:
      h_BTD = h_BTD * valid_BT[..., None].astype(h_BTD.dtype)
    full = jnp.pad(h_BTD, ((0, 0), (K - 1, 0), (0, 0)))
    mask = None
    if seg_BT is not None:      # tap j of position t reads t-j: same segment only
      seg = jnp.pad(seg_BT, ((0, 0), (K - 1, 0)), constant_values=-1)
      mask = jnp.stack([seg[:, K - 1 - j:K - 1 - j + T] == seg_BT for j in range(K)],
                       -1).astype(h_BTD.dtype)
    return self._taps(full, T, mask)

  def init_state(self, batch: int, dtype=jnp.float32):
    return jnp.zeros((batch, self.w.shape[0] - 1, self.w.shape[1]), dtype)

  def step(self, h_BTD, hist_BKD):
    K, T = self.w.shape[0], h_BTD.shape[1]
    full = jnp.concatenate([hist_BKD.astype(h_BTD.dtype), h_BTD], axis=1)
    return self._taps(full, T), full[:, full.shape[1] - (K - 1):].astype(hist_BKD.dtype)


class FeedForward(nnx.Module):
  """x -> fc2(dropout(act(fc1(x)))): (..., D) -> (..., D) through width F."""

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
    self.fc1 = dense(cfg.d_model, cfg.d_ff, cfg, rngs)
    self.fc2 = dense(cfg.d_ff, cfg.d_model, cfg, rngs)
    self.act = jax.nn.relu if cfg.activation == "relu" else jax.nn.gelu
    self.drop = nnx.Dropout(cfg.dropout, rngs=rngs)

  def __call__(self, x):
    return self.fc2(self.drop(self.act(self.fc1(x))))


class Block(nnx.Module):
  """One Transformer layer: self-attention, optional cross-attention, FFN.

  Each sublayer is residual with dropout; post-LN (x = LN(x + f(x)), Vaswani et al.)
  by default, pre-LN (x = x + f(LN(x))) with cfg.pre_ln.
  __call__(x_BTD, *, causal, valid_BT=None, mem_BSD=None, mem_valid_BS=None,
           q_pos=None, k_pos=None, seg_BT=None, mem_seg_BS=None) -> (B, T, D)
  step(x_BTD, state, cross_kv=None, mem_valid_BS=None, q_pos=None, k_pos=None)
    -> (B, T, D), state
  q_pos, k_pos: the self-attention's query and key positions (B|1, T); the
  cross-attention takes none (models/config.py).
  seg_BT (B|1, T), mem_seg_BS (B|1, S) int: segment ids of packed rows: x's tokens
  attend only their own segment in self-attention, and memory tokens of the same id
  in cross-attention (a packed pair's source and target share their id).
  spec: the layer's `models.config.LayerSpec` (variant, layer pieces, positions) when
  a `layer_attention` pattern sets it; None: self_attn with the config's pieces and
  positions.
  """

  def __init__(self, cfg: ModelConfig, self_attn: str, rngs: nnx.Rngs,
               cross_attn: str | None = None, spec=None):
    self.pre_ln = cfg.pre_ln
    if spec is None:              # this layer's models.config.LayerSpec (default: the
      spec = (self_attn, cfg.layer_pieces(self_attn), cfg.position_spec)   # config's)
    self.attn = MultiHeadAttention(cfg, spec[0], rngs, spec[2], layer=spec[1])
    self.conv = ShortConv(cfg.short_conv, cfg.d_model) if cfg.short_conv else None
    self.ln1 = nnx.LayerNorm(cfg.d_model, rngs=rngs)
    self.cross = MultiHeadAttention(cfg, cross_attn, rngs) if cross_attn else None
    self.ln2 = nnx.LayerNorm(cfg.d_model, rngs=rngs) if cross_attn else None
    self.ffn = FeedForward(cfg, rngs)
    self.ln3 = nnx.LayerNorm(cfg.d_model, rngs=rngs)
    self.drop = nnx.Dropout(cfg.dropout, rngs=rngs)

  def _sub(self, x, ln, f):
    if self.pre_ln:
      return x + self.drop(f(ln(x)))
    return ln(x + self.drop(f(x)))

  def __call__(self, x, *, causal, valid_BT=None, mem_BSD=None, mem_valid_BS=None,
               q_pos=None, k_pos=None, seg_BT=None, mem_seg_BS=None):
    def self_attn(h):
      if self.conv is not None:
        h = self.conv(h, seg_BT, valid_BT)
      return self.attn(h, causal=causal, kv_valid_BS=valid_BT, q_pos=q_pos, k_pos=k_pos,
                       q_seg=seg_BT, k_seg=seg_BT)

    x = self._sub(x, self.ln1, self_attn)
    if self.cross is not None:
      x = self._sub(x, self.ln2,
                    lambda h: self.cross(h, mem_BSD, kv_valid_BS=mem_valid_BS,
                                         q_seg=seg_BT, k_seg=mem_seg_BS))
    return self._sub(x, self.ln3, self.ffn)

  def step(self, x, state, cross_kv=None, mem_valid_BS=None, q_pos=None, k_pos=None):
    new = {}

    def self_attn(h):
      s = state
      if self.conv is not None:     # the state: {"attn": the layer's, "conv": K-1 inputs}
        h, new["conv"] = self.conv.step(h, state["conv"])
        s = state["attn"]
      out, new["attn"] = self.attn.step(h, s, q_pos, k_pos)
      return out

    x = self._sub(x, self.ln1, self_attn)
    if self.cross is not None:
      k, v = cross_kv
      x = self._sub(x, self.ln2,
                    lambda h: self.cross.attend_kv(h, k, v, kv_valid_BS=mem_valid_BS))
    return self._sub(x, self.ln3, self.ffn), (new if self.conv is not None else new["attn"])

  def init_state(self, batch, max_len, cache_dtype=None, dtype=jnp.float32):
    """The decode state: self-attention's, with the short convolution's last inputs."""
    s = self.attn.init_state(batch, max_len, cache_dtype, dtype)
    return s if self.conv is None else {"attn": s, "conv": self.conv.init_state(batch, dtype)}
