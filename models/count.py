"""Parameter counts and forward FLOPs per token, from the config and the cost model.

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


def _layer_flops(cfg: ModelConfig, name: str) -> float:
  """FLOPs per token of the layer pieces around a self-attention of variant `name`
  (ModelConfig.layer_pieces): the q/k/v convolutions' taps, the output gate's (or the
  attention gate's) projection and product, the output normalisation (about 5 per channel)."""
  from models.layers import QKV_CONV_TAPS
  pieces = cfg.layer_pieces(name)
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
  qkvo = 2 * D * (2 * H * Dh + K * kv_width(role))
  ffn = 4 * D * F
  head = 2 * D * (3 * cfg.num_mixtures if cfg.head == "dmol" else cfg.vocab_size)
  # a classifier's one stack is a (non-causal) encoder; its head runs once per sequence
  dec_attn = _attn_flops(cfg, cfg.attention_for(role), seq_len, seq_len,
                         cfg.kind != "classifier", per_function) / seq_len
  dec_attn += _input_flops(cfg, cfg.attention_for(role))
  layer = _layer_flops(cfg, cfg.attention_for(role))   # counted with the projections
  if cfg.kind == "classifier":
    head /= seq_len
  conv = 2 * D * cfg.short_conv             # the depthwise taps (kind "lm" only)
  src_vocab = cfg.src_vocab_size or cfg.vocab_size
  dec = (cfg.num_layers * (qkvo + layer + ffn + conv + dec_attn) + head
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
    attn = cfg.num_layers * (dec_attn + cross_attn) + cfg.encoder_layers * enc_attn * S / seq_len
  else:
    total, attn = dec, cfg.num_layers * dec_attn
  return {"decoder": dec, "encoder": enc, "attention": attn, "total": total}
