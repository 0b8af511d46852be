"""The softmax core shared by every score-based variant, its KV cache and the windows.

  p  = masked_softmax(logits, mask)                 # a fully masked row gives zeros
  o  = attend(score, qg, kg, vg, d, mask_g, **kw)   # softmax(score(q, k)) @ v, grouped
  SCALED_DOT, DOT                                   # the dot-product scores
  out = score_attention(score, q, k, v, **kw)       # the same under the contract
  p  = probabilities(q, k, name=...)                # (B, Hq, Tq, Tk) of a score variant

A *score function* has the signature

  score(qg, kg, d, **params) -> logits (B, Hkv, G, Tq, Tk) in the compute dtype

with qg (B, Hkv, G, Tq, D) and kg (B, Hkv, Tk, D) already in the compute dtype
(`attention.core.common`'s grouped layout) and d the call's `Dims`. A variant that is
softmax(score(q, k)) @ v declares its score on its registry record (`Variant.score`):
the KV cache, the attention maps and the contract tests then use it, whoever
registered it. `DotScore` marks the scores that are a scaled dot product: the KV cache
computes those block by block over a quantized cache without dequantising it whole.

This module imports only the core (`common`, `positions`, `registry`), so that the
variants (`softmax`, `local`, `sparse`), the KV cache (`kv_cache`) and the heat maps
(`weights`) share it without importing each other or any variant.
"""
from __future__ import annotations

import dataclasses
import inspect
import math

import jax
import jax.numpy as jnp

from attention.core import common as C
from attention.core import positions as P
from attention.core.registry import names, variant


def masked_softmax(logits, mask, sink=None):
  """Numerically stable softmax over the last axis; a fully masked row gives zeros.

  logits: (..., Tq, Tk) float; mask: bool broadcastable to logits, or None.
  sink: None, or a logit per row broadcastable to (..., Tq, 1) (a learned attention
  sink, gpt-oss; Xiao et al. 2024): the softmax is over [logits, sink] and the sink's
  column is dropped, p_j = exp(s_j) / (exp(sink) + sum_k exp(s_k)), so a row's
  probabilities sum to less than 1 (a fully masked row still gives zeros).
  Returns probabilities in logits' dtype.
  """
  if mask is not None:
    logits = jnp.where(mask, logits, C.NEG)
  m = jnp.max(logits, axis=-1, keepdims=True)
  if sink is not None:
    sink = sink.astype(logits.dtype)
    m = jnp.maximum(m, sink)
  m = jax.lax.stop_gradient(m)
  p = jnp.exp(logits - m)
  if mask is not None:
    p = jnp.where(mask, p, 0.0)
  l = jnp.sum(p, axis=-1, keepdims=True)
  if sink is not None:
    return p / (l + jnp.exp(sink - m))
  return p / jnp.where(l == 0, 1.0, l)


def check_sinks(sinks, d, name):
  """A variant's `sinks` argument -> None (off) or the learned sink logits (Hq,) as an
  array. sinks: False or None (off), or a float array (Hq,) (one logit per query head;
  the models create it as the parameter `sinks` when the option is on). True, the
  config's switch, is refused here: the function needs the logits themselves."""
  if sinks is None or sinks is False:
    return None
  if sinks is True:
    raise C.AttentionError(
        f"{name}: sinks=True switches the learned sink logits on in a model config; a "
        "direct call passes them, sinks=<(Hq,) float array> (the models create it as "
        "the parameter 'sinks')")
  sinks = jnp.asarray(sinks)
  if sinks.shape != (d.Hq,) or not jnp.issubdtype(sinks.dtype, jnp.floating):
    raise C.AttentionError(f"{name}: sinks must be a float array of shape (Hq,) = "
                           f"({d.Hq},), one logit per query head, got {sinks.dtype} "
                           f"{sinks.shape}")
  return sinks


def grouped_sink(sinks, d, ndim, dtype):
  """The sink logits (Hq,) (or None) laid out for the grouped layout's rows: (1, Hkv,
  G, 1, ..., 1) with `ndim` axes in all, in dtype, broadcastable to (B, Hkv, G, ...,
  Tq, 1) (query head h = kv head h // G, member h % G, as `common.split_heads_q`)."""
  if sinks is None:
    return None
  return sinks.astype(dtype).reshape((1, d.Hkv, d.G) + (1,) * (ndim - 3))


def attend(score_fn, qg, kg, vg, d, mask_g, *, name="softmax", return_probs=False,
           dropout_rate=0.0, dropout_rng=None, bias_g=None, sinks=None, **kw):
  """softmax(score_fn(qg, kg, d, **kw) + bias_g) @ vg on the grouped, heads-first layout.

  qg: (B, Hkv, G, Tq, D), kg: (B, Hkv, Tk, D) in the compute dtype; vg: (B, Hkv, Tk,
  Dv); mask_g: None or bool broadcastable to (B, Hkv, G, Tq, Tk); bias_g: None or a
  float bias broadcastable to (B, Hkv, G, Tq, Tk) added to the logits (ALiBi).
  sinks: None or the learned sink logits (Hq,) (`check_sinks`), in the softmax's
  denominator of each query head (`masked_softmax`).
  dropout_rate, dropout_rng: attention dropout; each probability is zeroed with
    probability dropout_rate and the rest scaled by 1 / (1 - rate) (inverted dropout,
    as in the Transformer's reference code). Off when the rate is 0 or no key is given.
  Returns (B, Hkv, G, Tq, Dv) in the compute dtype, or the probabilities
  (B, Hkv, G, Tq, Tk) if return_probs.
  """
  s = score_fn(qg, kg, d, **kw)
  p = masked_softmax(s if bias_g is None else s + bias_g, mask_g,
                     grouped_sink(check_sinks(sinks, d, name), d, s.ndim, s.dtype))
  if return_probs:
    return p
  if not 0.0 <= dropout_rate < 1.0:
    raise C.AttentionError(f"{name}: dropout_rate must be in [0, 1), got {dropout_rate}")
  if dropout_rate > 0.0 and dropout_rng is not None:
    keep = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, p.shape)
    p = jnp.where(keep, p / (1.0 - dropout_rate), 0.0)
  return jnp.einsum("bhgqk,bhkd->bhgqd", p, vg.astype(p.dtype))


@dataclasses.dataclass(frozen=True)
class DotScore:
  """The score q·k * scale; scale defaults to `default_scale` (None: 1/sqrt(D)).

  A score function (see the module docstring) that also says what it is, so that the
  KV cache can take its fast path (`attention.core.kv_cache.dot_attend`) for any variant
  whose record declares it. `name` is the variant named in its error messages.
  """
  default_scale: float | None
  name: str

  def scale(self, D: int, scale=None) -> float:
    """The multiplier of q·k for head dim D: `scale` if given, else the default."""
    if scale is not None:
      return scale
    return 1.0 / math.sqrt(D) if self.default_scale is None else self.default_scale

  def __call__(self, qg, kg, d, *, scale=None, **kw):
    C.unexpected(self.name, kw)
    return jnp.einsum("bhgqd,bhkd->bhgqk", qg, kg) * self.scale(d.D, scale)


# Vaswani et al.'s scaled dot product, q·k / sqrt(D): the score of `softmax`, and of
# every kernel that computes the same attention by another algorithm (flash, ring, ...),
# which declare it on their records.
SCALED_DOT = DotScore(None, "softmax")
# Luong et al.'s unscaled dot product, q·k.
DOT = DotScore(1.0, "dot")


def score_attention(score_fn, q, k, v, *, causal=False, mask=None, name="softmax",
                    return_probs=False, dropout_rate=0.0, dropout_rng=None,
                    positions=None, q_pos=None, k_pos=None, q_seg=None, k_seg=None,
                    **kw):
  """softmax(score_fn(q, k)) @ v under the contract; the core of the whole family.

  score_fn(qg, kg, dims, **kw) -> logits (B, Hkv, G, Tq, Tk) in the compute dtype, with
    qg: (B, Hkv, G, Tq, D), kg: (B, Hkv, Tk, D) already in the compute dtype.
  dropout_rate, dropout_rng: attention dropout; each probability is zeroed with
    probability dropout_rate and the rest scaled by 1 / (1 - rate) (inverted dropout,
    as in the Transformer's reference code). Off when the rate is 0 or no key is given.
  positions, q_pos (B|1, Tq), k_pos (B|1, Tk): a position scheme (attention.core.positions):
    rope/rope2d rotate q and k, alibi adds its bias to the logits.
  q_seg (B|1, Tq), k_seg (B|1, Tk): segment ids of packed rows (attention.core.common),
    applied as a mask: a query attends only keys of its own segment.
    A score function that reads key positions (location) takes k_seg too, so that
    they restart per segment.
  sinks (in kw): None or False, or the learned sink logits (Hq,): each query head's
    softmax is over [its scores, sinks[h]] with the sink's column dropped (gpt-oss;
    `masked_softmax`). softmax declares it (its option sinks).
  Returns out (B, Tq, Hq, Dv) in q.dtype, or probs (B, Hq, Tq, Tk) if return_probs.
  """
  d = C.check_qkv(q, k, v, name)
  mask = C.check_mask(mask, d, name)
  q_seg, k_seg = C.check_segments(q_seg, k_seg, d, name)
  mask = C.and_mask(mask, C.segment_mask(q_seg, k_seg))
  if k_seg is not None and "k_seg" in inspect.signature(score_fn).parameters:
    kw["k_seg"] = k_seg
  pos = P.prepare(name, positions, d, q_pos, k_pos)
  q, k = P.rotate_qk(pos, q, k)
  ct = C.compute_dtype(q.dtype)
  o = attend(score_fn, C.split_heads_q(q, d).astype(ct), C.kv_heads_first(k).astype(ct),
             C.kv_heads_first(v), d, C.combined_mask(mask, d, causal), name=name,
             return_probs=return_probs, dropout_rate=dropout_rate,
             dropout_rng=dropout_rng,
             bias_g=P.grouped_bias(pos, d, ct) if pos is not None and pos.alibi else None,
             **kw)
  if return_probs:
    return o.reshape(d.B, d.Hq, d.Tq, d.Tk)
  return C.merge_heads_out(o).astype(q.dtype)


def probabilities(q, k, *, name="softmax", causal=False, mask=None, **kw):
  """Attention probabilities (B, Hq, Tq, Tk) in float32 (or float64), for heat maps.
  kw: the variant's parameters and options, positions included.

  Works for every variant whose record declares its score function (`Variant.score`):
  the exact family (`softmax`, `dot`, `general`, `additive`, `cosine`, `location`), and
  `flash`, `flash_pallas`, `ring` and `sdpa`, which compute the same probabilities as
  `softmax` (their kernel options are ignored). Rows with no allowed key are all zeros.
  kw: the variant's options and parameters; dropout arguments are ignored.
  """
  rec = variant(name)
  if rec.score is None:
    raise C.AttentionError(
        f"probabilities: variant {name!r} declares no score function, so it has no "
        "explicit probability matrix (attention.implied_weights gives its weights); "
        "choose one of " + ", ".join(n for n in names() if variant(n).score is not None))
  drop = rec.kernel_options + ("dropout_rate", "dropout_rng")
  kw = {a: b for a, b in kw.items() if a not in drop}
  v = jnp.zeros(k.shape[:3] + (1,), q.dtype)
  return score_attention(rec.score, q, k, v, causal=causal, mask=mask, name=name,
                         return_probs=True, **kw)
