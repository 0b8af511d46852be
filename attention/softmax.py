"""The exact (softmax) family: scaled dot-product and the classic score functions.

Every variant here is `softmax(score(q, k)) @ v` with the contract's masks; only the
score differs. Scores are computed in float32 (float64 stays float64), so bf16
inputs get fp32 softmax statistics. Shapes follow `attention.common`.

  name       score(q, k)                          reference          parameters
  softmax    q.k / sqrt(D)                        Vaswani et al. 2017  -
  dot        q.k                                  Luong et al. 2015    -
  general    q^T W k                              Luong et al. 2015    w: (D, D) | (Hq, D, D)
  additive   v^T tanh(W_q q + W_k k)              Bahdanau et al. 2015 w_q, w_k: (D, A) | (Hq, D, A); v_a: (A,) | (Hq, A)
  cosine     beta * cos(q, k)                     Graves et al. 2014   beta: () | (Hq,)
  location   (W q)_j, a score per key position j  Luong et al. 2015    w: (D, L) | (Hq, D, L), L >= Tk

Every variant takes `scale` (default 1/sqrt(D) for softmax, 1 for the others: the
papers' definitions), which multiplies the score.

Positions (attention.positions): ALiBi is a bias added to every variant's scores
(after the scale). RoPE and 2D RoPE rotate q and k before the score, which makes
it depend on i - j only where the score is an inner product of q and k: softmax,
dot, and cosine (a rotation keeps the norms). general (qᵀWk between two rotations),
additive (tanh of a sum) and location (no key in the score) refuse them.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from attention import common as C
from attention import cost_model as cost_lib
from attention import positions as P
from attention.decode import KV_CACHE
from attention.registry import ParamSpec, Refused, Variant, register


def masked_softmax(logits, mask):
  """Numerically stable softmax over the last axis; a fully masked row gives zeros.

  logits: (..., Tq, Tk) float; mask: bool broadcastable to logits, or None.
  Returns probabilities in logits' dtype.
  """
  if mask is not None:
    logits = jnp.where(mask, logits, C.NEG)
  m = jnp.max(logits, axis=-1, keepdims=True)
  p = jnp.exp(logits - jax.lax.stop_gradient(m))
  if mask is not None:
    p = jnp.where(mask, p, 0.0)
  l = jnp.sum(p, axis=-1, keepdims=True)
  return p / jnp.where(l == 0, 1.0, l)


def score_attention(score_fn, q, k, v, *, causal=False, mask=None, name="softmax",
                    return_probs=False, dropout_rate=0.0, dropout_rng=None,
                    positions=None, q_pos=None, k_pos=None, **kw):
  """softmax(score_fn(q, k)) @ v under the contract; the core of the whole family.

  score_fn(qg, kg, dims, **kw) -> logits (B, Hkv, G, Tq, Tk) in the compute dtype, with
    qg: (B, Hkv, G, Tq, D), kg: (B, Hkv, Tk, D) already in the compute dtype.
  dropout_rate, dropout_rng: attention dropout; each probability is zeroed with
    probability dropout_rate and the rest scaled by 1 / (1 - rate) (inverted dropout,
    as in the Transformer's reference code). Off when the rate is 0 or no key is given.
  positions, q_pos (B|1, Tq), k_pos (B|1, Tk): a position scheme (attention.positions):
    rope/rope2d rotate q and k, alibi adds its bias to the logits.
  Returns out (B, Tq, Hq, Dv) in q.dtype, or probs (B, Hq, Tq, Tk) if return_probs.
  """
  d = C.check_qkv(q, k, v, name)
  mask = C.check_mask(mask, d, name)
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


def attend(score_fn, qg, kg, vg, d, mask_g, *, name="softmax", return_probs=False,
           dropout_rate=0.0, dropout_rng=None, bias_g=None, **kw):
  """`score_attention` on the grouped, heads-first layout (also the KV cache's path).

  qg: (B, Hkv, G, Tq, D), kg: (B, Hkv, Tk, D) in the compute dtype; vg: (B, Hkv, Tk,
  Dv); mask_g: None or bool broadcastable to (B, Hkv, G, Tq, Tk); bias_g: None or a
  float bias broadcastable to (B, Hkv, G, Tq, Tk) added to the logits (ALiBi).
  Returns (B, Hkv, G, Tq, Dv) in the compute dtype, or the probabilities
  (B, Hkv, G, Tq, Tk) if return_probs.
  """
  s = score_fn(qg, kg, d, **kw)
  p = masked_softmax(s if bias_g is None else s + bias_g, mask_g)
  if return_probs:
    return p
  if not 0.0 <= dropout_rate < 1.0:
    raise C.AttentionError(f"{name}: dropout_rate must be in [0, 1), got {dropout_rate}")
  if dropout_rate > 0.0 and dropout_rng is not None:
    keep = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, p.shape)
    p = jnp.where(keep, p / (1.0 - dropout_rate), 0.0)
  return jnp.einsum("bhgqk,bhkd->bhgqd", p, vg.astype(p.dtype))


# ---- score functions: (qg, kg, dims, **params) -> (B, Hkv, G, Tq, Tk) ----------

def _unexpected(name, kw):
  if kw:
    raise C.AttentionError(
        f"attention variant '{name}' got unexpected arguments: {sorted(kw)}")


def dot_scores(qg, kg, d, *, scale=None, _default_scale=1.0, _name="dot", **kw):
  """q.k * scale (Luong 'dot'; with scale=1/sqrt(D), Vaswani's scaled dot)."""
  _unexpected(_name, kw)
  s = _default_scale if scale is None else scale
  return jnp.einsum("bhgqd,bhkd->bhgqk", qg, kg) * s


def general_scores(qg, kg, d, *, w, scale=None, **kw):
  """q^T W k (Luong 'general'); w: (D, D) shared or (Hq, D, D) per head."""
  _unexpected("general", kw)
  W = C.per_head(w, d, 2).astype(qg.dtype)
  qw = jnp.einsum("bhgqd,hgde->bhgqe", qg, W)
  return jnp.einsum("bhgqe,bhke->bhgqk", qw, kg) * (1.0 if scale is None else scale)


def additive_scores(qg, kg, d, *, w_q, w_k, v_a, scale=None, **kw):
  """v_a^T tanh(W_q q + W_k k) (Bahdanau). Builds a (B, H, Tq, Tk, A) temporary."""
  _unexpected("additive", kw)
  Wq = C.per_head(w_q, d, 2).astype(qg.dtype)
  Wk = C.per_head(w_k, d, 2).astype(qg.dtype)
  va = C.per_head(v_a, d, 1).astype(qg.dtype)
  qa = jnp.einsum("bhgqd,hgda->bhgqa", qg, Wq)
  ka = jnp.einsum("bhkd,hgda->bhgka", kg, Wk)
  e = jnp.tanh(qa[..., :, None, :] + ka[..., None, :, :])
  s = jnp.einsum("bhgqka,hga->bhgqk", e, va)
  return s * (1.0 if scale is None else scale)


def cosine_scores(qg, kg, d, *, beta=1.0, scale=None, eps=1e-6, **kw):
  """beta * cos(q, k) (Graves' content-based addressing); beta: () or (Hq,)."""
  _unexpected("cosine", kw)
  qn = qg / jnp.maximum(jnp.linalg.norm(qg, axis=-1, keepdims=True), eps)
  kn = kg / jnp.maximum(jnp.linalg.norm(kg, axis=-1, keepdims=True), eps)
  b = C.per_head(beta, d, 0).astype(qg.dtype)[..., None, None]
  s = jnp.einsum("bhgqd,bhkd->bhgqk", qn, kn) * b
  return s * (1.0 if scale is None else scale)


def location_scores(qg, kg, d, *, w, scale=None, **kw):
  """(W q)_j: a score for each key position j < Tk from the query alone (Luong)."""
  _unexpected("location", kw)
  W = C.per_head(w, d, 2).astype(qg.dtype)
  if W.shape[-1] < d.Tk:
    raise C.AttentionError(
        f"location attention: w has {W.shape[-1]} positions but there are "
        f"{d.Tk} keys; build it with max_len >= Tk")
  s = jnp.einsum("bhgqd,hgdl->bhgql", qg, W[..., : d.Tk])
  return s * (1.0 if scale is None else scale)


def _scaled_dot_scores(qg, kg, d, *, scale=None, **kw):
  return dot_scores(qg, kg, d, scale=scale, _default_scale=1.0 / math.sqrt(d.D),
                    _name="softmax", **kw)


SCORES = {
    "softmax": _scaled_dot_scores,
    "dot": dot_scores,
    "general": general_scores,
    "additive": additive_scores,
    "cosine": cosine_scores,
    "location": location_scores,
}


# Variants that compute scaled-dot softmax attention by another algorithm.
SAME_AS_SOFTMAX = ("flash", "flash_pallas", "ring", "sdpa")


def scores_for(name):
  """The score function behind an exact-family variant name."""
  return SCORES["softmax" if name in SAME_AS_SOFTMAX else name]


def probabilities(q, k, *, name="softmax", causal=False, mask=None, **kw):
  """Attention probabilities (B, Hq, Tq, Tk) in float32 (or float64), for heat maps.
  kw: the variant's parameters and options, positions included.

  Works for every variant of the exact family (`softmax`, `dot`, `general`,
  `additive`, `cosine`, `location`); `flash`, `flash_pallas` and `ring` compute the same
  probabilities as `softmax`. Rows with no allowed key are all zeros.
  """
  if name not in SCORES and name not in SAME_AS_SOFTMAX:
    raise C.AttentionError(
        f"probabilities: variant {name!r} has no explicit probability matrix; "
        f"choose one of {sorted(SCORES) + list(SAME_AS_SOFTMAX)}")
  v = jnp.zeros(k.shape[:3] + (1,), q.dtype)
  return score_attention(scores_for(name), q, k, v, causal=causal, mask=mask,
                         name="softmax" if name in SAME_AS_SOFTMAX else name,
                         return_probs=True, **kw)


# ---- registration -----------------------------------------------------------

def _variant_fn(name):
  score_fn = SCORES[name]

  def fn(q, k, v, *, causal=False, mask=None, **kw):
    return score_attention(score_fn, q, k, v, causal=causal, mask=mask, name=name, **kw)

  fn.__name__ = name
  fn.__doc__ = (f"'{name}' attention under the contract (see attention.softmax).\n\n"
                f"Score: {score_fn.__doc__}")
  return fn


def _normal(stddev_fn):
  def init(key, shape, dtype):
    return jax.random.normal(key, shape, dtype) * stddev_fn(shape)
  return init


def _dense_cost(score_flops=lambda d, kw: 0.0, score_trans=lambda d, kw: 0.0,
                extra=lambda d, kw: 0.0, score_bytes=lambda d, kw: 0.0,
                extra_bytes=lambda d, kw: 0.0, qk=True):
  def cost(d, *, causal=False, mode="fwd", itemsize=4, **kw):
    del causal  # the naive path computes every pair, masked or not
    return cost_lib.dense(d, mode=mode, itemsize=itemsize, score_flops=score_flops(d, kw),
                          score_transcendentals=score_trans(d, kw),
                          extra_flops=extra(d, kw), score_bytes=score_bytes(d, kw),
                          extra_bytes=extra_bytes(d, kw), qk=qk)
  return cost


def _attn_dim(d, kw):
  w = kw.get("w_q")
  return w.shape[-1] if w is not None else kw.get("attn_dim", d.D)


_COMMON = dict(causal=True, masks="any", decode="KV cache (fp, int8 or fp8)",
               decode_impl=KV_CACHE, dropout=True)
# Which score functions RoPE makes relative, and why the others refuse it.
_ROTARY = dict(positions=P.takes_qk())


def _no_rotary(why):
  return dict(positions={"rope": Refused(why), "rope2d": Refused(why),
                         "alibi": P.TAKES_QK["alibi"]})
register(Variant(
    name="softmax", fn=_variant_fn("softmax"), paper="Vaswani et al. 2017",
    time="O(N² D)", memory="O(N²)", cost=_dense_cost(),
    family="exact",
    summary="scaled dot-product, the plain numerically stable reference", **_COMMON,
    **_ROTARY))
register(Variant(
    name="dot", fn=_variant_fn("dot"), paper="Luong et al. 2015",
    time="O(N² D)", memory="O(N²)", cost=_dense_cost(),
    family="score", summary="unscaled dot-product score q·k", **_COMMON, **_ROTARY))
register(Variant(
    name="general", fn=_variant_fn("general"), paper="Luong et al. 2015",
    time="O(N² D + N D²)", memory="O(N²)",
    # W read once; q W written and read back (fp32)
    cost=_dense_cost(extra=lambda d, kw: 2 * d.B * d.Hq * d.Tq * d.D * d.D,
                     extra_bytes=lambda d, kw: 4 * (d.Hq * d.D * d.D
                                                    + 2 * d.B * d.Hq * d.Tq * d.D)),
    params={"w": ParamSpec(lambda h, dh, L: (h, dh, dh),
                           lambda key, s, dt: jnp.broadcast_to(jnp.eye(s[-1], dtype=dt), s)
                           / math.sqrt(s[-1]))},
    family="score", summary="bilinear score qᵀWk", **_COMMON,
    **_no_rotary("rotating q and k by their positions gives qᵀR(-i) W R(j) k, which "
                 "depends on i and j, not on i - j, unless W commutes with every "
                 "rotation")))
register(Variant(
    name="additive", fn=_variant_fn("additive"), paper="Bahdanau et al. 2015",
    time="O(N² A + N D A)", memory="O(N² A)",
    cost=_dense_cost(
        score_flops=lambda d, kw: 3 * _attn_dim(d, kw),
        score_trans=lambda d, kw: _attn_dim(d, kw),
        extra=lambda d, kw: 2 * d.B * d.Hq * (d.Tq + d.Tk) * d.D * _attn_dim(d, kw),
        # the fp32 (Tq, Tk, A) tanh temporary is written once and read once
        score_bytes=lambda d, kw: 2 * 4 * _attn_dim(d, kw), qk=False),
    params={"w_q": ParamSpec(lambda h, dh, L: (h, dh, dh), _normal(lambda s: s[-2] ** -0.5)),
            "w_k": ParamSpec(lambda h, dh, L: (h, dh, dh), _normal(lambda s: s[-2] ** -0.5)),
            "v_a": ParamSpec(lambda h, dh, L: (h, dh), _normal(lambda s: s[-1] ** -0.5))},
    family="score", summary="MLP score vᵀtanh(W_q q + W_k k)", **_COMMON,
    **_no_rotary("the score tanh(W_q q + W_k k) is no inner product of q and k, so no "
                 "rotation of them makes it depend on i - j")))
register(Variant(
    name="cosine", fn=_variant_fn("cosine"), paper="Graves et al. 2014",
    time="O(N² D)", memory="O(N²)",
    # norms: q and k read again, normalised copies written and read (fp32)
    cost=_dense_cost(score_flops=lambda d, kw: 1.0,
                     extra=lambda d, kw: 4 * d.B * d.Hq * (d.Tq + d.Tk) * d.D,
                     extra_bytes=lambda d, kw: 4 * 3 * d.B * d.D
                     * (d.Hq * d.Tq + d.Hkv * d.Tk)),
    params={"beta": ParamSpec(lambda h, dh, L: (h,),
                              # beta = 8 makes cos in [-1, 1] about as sharp as a
                              # scaled dot of D=64 unit-variance vectors.
                              lambda key, s, dt: jnp.full(s, 8.0, dt))},
    family="score", summary="content-based score β·cos(q, k)", **_COMMON, **_ROTARY))
register(Variant(
    name="location", fn=_variant_fn("location"), paper="Luong et al. 2015",
    time="O(N L D)", memory="O(N²)",
    cost=_dense_cost(qk=False, extra=lambda d, kw: 2 * d.B * d.Hq * d.Tq * d.D * d.Tk),
    params={"w": ParamSpec(lambda h, dh, L: (h, dh, L), _normal(lambda s: s[-2] ** -0.5))},
    family="score", summary="location-based score softmax(W q) over key positions",
    **_COMMON,
    **_no_rotary("the score (W q)_j reads no key (a rotation of k changes nothing), and "
                 "its weights are already one per absolute key position")))
