"""Parameter counts, forward FLOPs per token and the model's decode-state bytes
(`decode_state_bytes`: every layer's state, at a given length), from the config and
the cost model.

FLOPs count multiply-adds as 2: every Linear (projections, FFN, output head, the
projections to a variant's per-token inputs), the short convolution's taps, the layer
pieces around a self-attention (`_layer_flops`: q/k/v convolutions, output gate and
norm), plus each
layer's attention as
`attention.cost` reports it for that variant, sequence length and options, plus the
token embedding where it is a one-hot matmul (2 V D per token, vocabularies up to the
model's `one_hot_max_vocab`, by default `models.layers.ONE_HOT_MAX_VOCAB`; a gather is not counted). LayerNorm, activations,
residual adds, RoPE's rotation and ALiBi's bias are left out (O(D) per token, or one
add per score, under 1% at the sizes used here); tests compare the total with XLA's
own count of the compiled forward pass.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

import attention
from attention.core.cost_model import visible_pairs
from models.config import ModelConfig
from models.layers import Buffer


def param_count(model: nnx.Module) -> dict[str, int]:
  """{'params': trained values, 'buffers': fixed random arrays} of an NNX model."""
  def size(kind):
    return int(sum(x.size for x in jax.tree.leaves(nnx.state(model, kind))))
  return {"params": size(nnx.Param), "buffers": size(Buffer)}


# Families whose attention is a function of every visible (query, key) pair: their
# kernels differ in how many masked pairs they also compute (a dense causal softmax
# computes all N², flash the visible half), not in the function.
PAIRWISE_FAMILIES = ("exact", "score")


def _attn_flops(cfg: ModelConfig, name: str, q_len: int, kv_len: int, causal: bool,
                per_function: bool = False) -> float:
  """Forward FLOPs of one attention call (batch 1) of `name` inside this model: what its
  kernel computes (`attention.cost`), or with per_function, for the pairwise families,
  the function's own count: the unmasked cost times the fraction of visible pairs, the
  same for every kernel of the function (MFU's numerator)."""
  v = attention.variant(name)
  shapes, kw = v.param_shapes(cfg.num_heads, cfg.dh, cfg.max_len, cfg.options_for(name))
  for pname, shape in shapes.items():    # the cost reads parameter shapes only
    kw.setdefault(pname, jax.ShapeDtypeStruct(shape, jnp.float32))
  cost = lambda c: attention.cost(name, batch=1, q_len=q_len, kv_len=kv_len,
                                  num_heads=cfg.num_heads, num_kv_heads=cfg.kv_heads,
                                  head_dim=cfg.dh, causal=c, mode="fwd", **kw).flops
  if per_function and v.family in PAIRWISE_FAMILIES:
    return cost(False) * visible_pairs(q_len, kv_len, causal) / (q_len * kv_len)
  return cost(causal)


def _input_flops(cfg: ModelConfig, name: str) -> float:
  """FLOPs per token of the projections to variant `name`'s per-token inputs."""
  total = 0.0
  v = attention.variant(name)
  for n, (_, _, heads, width) in v.input_shapes(1, 1, cfg.num_heads, cfg.kv_heads, cfg.dh,
                                                cfg.options_for(name)).items():
    rank = v.inputs[n].rank
    total += 2 * (cfg.d_model * rank + rank * heads * width if rank
                  else cfg.d_model * heads * width)
  return total


def _layer_flops(cfg: ModelConfig, name: str, pieces=None) -> float:
  """FLOPs per token of the layer pieces around a self-attention of variant `name`
  (`pieces`, default ModelConfig.layer_pieces): the q/k/v convolutions' taps, the output
  gate's (or the attention gate's) projection and product, the output normalisation
  (about 5 per channel)."""
  from models.layers import QKV_CONV_TAPS
  pieces = cfg.layer_pieces(name) if pieces is None else pieces
  H, K, Dh, D = cfg.num_heads, cfg.kv_heads, cfg.dh, cfg.d_model
  total = 0.0
  if "qkv_conv" in pieces:
    dk, dv = attention.variant(name).kv_dims(Dh, cfg.options_for(name))
    total += 2 * QKV_CONV_TAPS * (H * Dh + K * (dk + dv))
  if "out_gate" in pieces or "attn_gate" in pieces:     # one of them (never both)
    total += 2 * D * H * Dh + H * Dh
  if "rms_norm" in pieces or "group_norm" in pieces:
    total += 5 * H * Dh
  return total


def _embed_flops(vocab: int, D: int, one_hot_max: int) -> float:
  """One token's embedding lookup: a one-hot matmul up to the model's
  one_hot_max_vocab, else a gather (not counted)."""
  return 2.0 * vocab * D if vocab <= one_hot_max else 0.0


def flops_per_token(cfg: ModelConfig, seq_len: int, src_len: int | None = None,
                    per_function: bool = False) -> dict:
  """Forward FLOPs per token for sequences of `seq_len` (targets) and `src_len` (sources).

  per_function: charge each pairwise attention (`PAIRWISE_FAMILIES`) the function's
  count, its visible pairs only, whichever kernel computes it (MFU's numerator);
  otherwise what the kernel computes (XLA's count of the compiled program).

  Returns {'decoder': per target token, 'encoder': per source token (0 for an LM),
  'attention': the attention share of both, 'total': FLOPs of one (src, tgt) pair
  divided by seq_len}.
  """
  D, H, K, Dh, F = cfg.d_model, cfg.num_heads, cfg.kv_heads, cfg.dh, cfg.d_ff

  def kv_width(role):      # k + v projection widths per kv head (Variant.kv_widths)
    name = cfg.attention_for(role)
    return sum(attention.variant(name).kv_dims(Dh, cfg.options_for(name)))

  role = "encoder_attention" if cfg.kind == "classifier" else "decoder_attention"
  ffn = 4 * D * F
  head = 2 * D * (3 * cfg.num_mixtures if cfg.head == "dmol" else cfg.vocab_size)
  # a classifier's one stack is a (non-causal) encoder; its head runs once per sequence
  # each layer of the stack (a layer_attention pattern gives each its own variant)
  dec_attn_all = dec_layers = 0.0
  specs = cfg.layer_specs(role)
  for spec in specs:
    name = spec.name
    attn = _attn_flops(cfg, name, seq_len, seq_len, cfg.kind != "classifier",
                       per_function) / seq_len + _input_flops(cfg, name)
    qkvo = 2 * D * (2 * H * Dh + K * sum(attention.variant(name).kv_dims(
        Dh, cfg.options_for(name))))
    dec_attn_all += attn
    dec_layers += qkvo + _layer_flops(cfg, name, spec.pieces)   # with the projections
  if cfg.kind == "classifier":
    head /= seq_len
  conv = 2 * D * cfg.short_conv             # the depthwise taps (kind "lm" only)
  src_vocab = cfg.src_vocab_size or cfg.vocab_size
  dec = (dec_layers + dec_attn_all + len(specs) * (ffn + conv) + head
         + _embed_flops(src_vocab if cfg.kind == "classifier" else cfg.input_vocab, D,
                        cfg.one_hot_max_vocab))
  enc = enc_attn = cross_attn = 0.0
  if cfg.kind == "encdec":
    S = src_len or seq_len
    enc_attn = (_attn_flops(cfg, cfg.attention_for("encoder_attention"), S, S, False) / S
                + _input_flops(cfg, cfg.attention_for("encoder_attention")))
    cross_kv = 2 * D * K * kv_width("cross_attention")   # per source token and layer
    enc_qkvo = 2 * D * (2 * H * Dh + K * kv_width("encoder_attention"))
    enc_qkvo += _layer_flops(cfg, cfg.attention_for("encoder_attention"))
    enc = (cfg.encoder_layers * (enc_qkvo + ffn + enc_attn) + cfg.num_layers * cross_kv
           + _embed_flops(src_vocab, D, cfg.one_hot_max_vocab))
    cross_attn = (_attn_flops(cfg, cfg.attention_for("cross_attention"), seq_len, S,
                              False) / seq_len
                  + _input_flops(cfg, cfg.attention_for("cross_attention")))
    dec += cfg.num_layers * (2 * D * 2 * H * Dh + cross_attn)
    total = dec + enc * S / seq_len
    attn = (dec_attn_all + cfg.num_layers * cross_attn
            + cfg.encoder_layers * enc_attn * S / seq_len)
  else:
    total, attn = dec, dec_attn_all
  return {"decoder": dec, "encoder": enc, "attention": attn, "total": total}


def _variant_state_bytes(cfg: ModelConfig, spec, batch: int, length: int,
                         cache_dtype) -> int:
  """The bytes of one layer's variant decode state (`MultiHeadAttention.init_state`'s
  arguments): the variant's formula (`attention.decode_state_bytes`) where its decode
  hooks give one, else its init traced abstractly (`jax.eval_shape`: nothing built)."""
  v = attention.variant(spec.name)
  if v.decode_impl is None:
    raise ValueError(f"attention variant '{spec.name}' has no decode state; variants "
                     "that decode: " + ", ".join(
                         n for n in attention.names()
                         if attention.variant(n).decode_impl is not None))
  shapes, kw = v.param_shapes(cfg.num_heads, cfg.dh, cfg.max_len,
                              cfg.options_for(spec.name))
  params = {p: jax.ShapeDtypeStruct(s, jnp.float32) for p, s in shapes.items()}
  if spec.positions is not None:
    kw.update(positions=spec.positions, num_heads=cfg.num_heads)
  if cache_dtype is not None:
    kw["cache_dtype"] = cache_dtype
  dk, dv = v.kv_dims(cfg.dh, cfg.options_for(spec.name))
  args = dict(batch=batch, max_len=length, num_kv_heads=cfg.kv_heads, head_dim=dk,
              v_head_dim=dv, dtype=jnp.dtype(cfg.dtype), **kw)
  if v.decode_impl.state_bytes is not None:
    return attention.decode_state_bytes(spec.name, **args, **params)
  st = jax.eval_shape(lambda p: attention.init_decode_state(spec.name, **args, **p), params)
  return attention.state_nbytes(st)


def decode_state_bytes(cfg: ModelConfig, length: int, *, batch: int = 1,
                       cache_dtype=None, src_len: int | None = None,
                       per_layer: bool = False):
  """Bytes of the whole model's decode state (`model.init_state(batch, length, ...)`:
  the sum of its arrays' nbytes) for `batch` sequences of up to `length` positions,
  summed over the decoder's layers, each by its own variant (a `layer_attention`
  pattern: a softmax layer's KV cache beside a gated layer's fixed state):
    the variant's state   `attention.decode_state_bytes` (its `DecodeImpl.state_bytes`
                          formula; a variant without one, e.g. the gated family's
                          fixed state, by its init's shapes traced abstractly)
    qkv_conv              the last QKV_CONV_TAPS - 1 projected q, k and v of a layer
                          with that piece: (taps - 1)(H Dh + K (Dk + Dv)) elements
    short_conv            the last short_conv - 1 layer inputs: (taps - 1) D elements
    encdec                per layer the cross-attention's keys and values of src_len
                          source positions (src_len required), and the source mask
  in the model's compute dtype (cfg.dtype), a quantised KV cache (`cache_dtype`) in its
  own. Pieces without state (norms, gates) add nothing. Beside `attention.
  decode_state_bytes`, which counts one layer's variant state alone.

  Returns the total int, or with per_layer a tuple of each decoder layer's bytes (the
  encdec source mask, shared by the layers, is then left out). Raises ValueError for a
  classifier (no decoder) or a layer whose variant has no decode state."""
  from models.layers import QKV_CONV_TAPS
  if cfg.kind == "classifier":
    raise ValueError("a classifier has no decoder, so no decode state")
  if cfg.kind == "encdec" and src_len is None:
    raise ValueError("an encoder-decoder's decode state holds the source's cross-"
                     "attention keys and values: give src_len")
  item = jnp.dtype(cfg.dtype).itemsize
  H, K, Dh, D = cfg.num_heads, cfg.kv_heads, cfg.dh, cfg.d_model
  out = []
  for spec in cfg.layer_specs("decoder_attention"):
    n = _variant_state_bytes(cfg, spec, batch, length, cache_dtype)
    dk, dv = attention.variant(spec.name).kv_dims(Dh, cfg.options_for(spec.name))
    if "qkv_conv" in spec.pieces:
      n += batch * (QKV_CONV_TAPS - 1) * (H * Dh + K * (dk + dv)) * item
    if cfg.short_conv:
      n += batch * (cfg.short_conv - 1) * D * item
    if cfg.kind == "encdec":
      cname = cfg.attention_for("cross_attention")
      cdk, cdv = attention.variant(cname).kv_dims(Dh, cfg.options_for(cname))
      n += batch * src_len * K * (cdk + cdv) * item
    out.append(int(n))
  if per_layer:
    return tuple(out)
  return sum(out) + (batch * src_len if cfg.kind == "encdec" else 0)   # the bool mask
