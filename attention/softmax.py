"""The exact (softmax) family: scaled dot-product and the classic score functions.

Every variant here is `softmax(score(q, k)) @ v` with the contract's masks; only the
score differs. Scores are computed in float32 (float64 stays float64), so bf16
inputs get fp32 softmax statistics. Shapes follow `attention.core.common`.

  name       score(q, k)                          reference          parameters
  softmax    q.k / sqrt(D)                        Vaswani et al. 2017  -
  dot        q.k                                  Luong et al. 2015    -
  general    q^T W k                              Luong et al. 2015    w: (D, D) | (Hq, D, D)
  additive   v^T tanh(W_q q + W_k k)              Bahdanau et al. 2015 w_q, w_k: (D, A) | (Hq, D, A); v_a: (A,) | (Hq, A)
  cosine     beta * cos(q, k)                     Graves et al. 2014   beta: () | (Hq,)
  location   (W q)_j, a score per key position j  Luong et al. 2015    w: (D, L) | (Hq, D, L), L >= Tk

Every variant takes `scale` (default 1/sqrt(D) for softmax, 1 for the others: the
papers' definitions), which multiplies the score.

Sinks: softmax's option `sinks` (default False) adds a learned logit per query head to
the softmax's denominator (gpt-oss; Xiao et al. 2024 for why a head needs somewhere to
put weight it does not want to put on a key): out_i = sum_j exp(s_ij) v_j /
(exp(sink_h) + sum_j exp(s_ij)). The models create the (Hq,) parameter `sinks`
(`attention.core.kv_cache.SINKS`) when the option is on and pass it as `sinks=`; the
KV cache's step carries it.

Positions (attention.core.positions): ALiBi is a bias added to every variant's scores
(after the scale). RoPE and 2D RoPE rotate q and k before the score, which makes
it depend on i - j only where the score is an inner product of q and k: softmax,
dot, and cosine (a rotation keeps the norms). general (qᵀWk between two rotations),
additive (tanh of a sum) and location (no key in the score) refuse them.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from attention.core import common as C
from attention.core import cost_model as cost_lib
from attention.core import positions as P
from attention.core.kv_cache import KV_CACHE, SINKS
from attention.core.registry import ParamSpec, Refused, Variant, register
from attention.core.scores import DOT, SCALED_DOT, probabilities, score_attention
from attention.core.common import unexpected


# ---- score functions: (qg, kg, dims, **params) -> (B, Hkv, G, Tq, Tk) ----------

def general_scores(qg, kg, d, *, w, scale=None, **kw):
  """q^T W k (Luong 'general'); w: (D, D) shared or (Hq, D, D) per head."""
  unexpected("general", kw)
  W = C.per_head(w, d, 2).astype(qg.dtype)
  qw = jnp.einsum("bhgqd,hgde->bhgqe", qg, W)
  return jnp.einsum("bhgqe,bhke->bhgqk", qw, kg) * (1.0 if scale is None else scale)


def additive_scores(qg, kg, d, *, w_q, w_k, v_a, scale=None, **kw):
  """v_a^T tanh(W_q q + W_k k) (Bahdanau).

  The (B, H, Tq, Tk, A) tanh temporary is summed against v_a where it is made (one
  fused loop, not a stored array and a contraction), and the backward pass makes it
  again (jax.checkpoint) instead of keeping the forward's: less memory (no stored
  temporary between the passes) and, on a CPU, less time than writing it and reading
  it back. qg: (B, Hkv, G, Tq, D), kg: (B, Hkv, Tk, D) -> (B, Hkv, G, Tq, Tk)."""
  unexpected("additive", kw)
  Wq = C.per_head(w_q, d, 2).astype(qg.dtype)
  Wk = C.per_head(w_k, d, 2).astype(qg.dtype)
  va = C.per_head(v_a, d, 1).astype(qg.dtype)
  qa = jnp.einsum("bhgqd,hgda->bhgqa", qg, Wq)
  ka = jnp.einsum("bhkd,hgda->bhgka", kg, Wk)
  s = jax.checkpoint(_tanh_sum)(qa, ka, va)
  return s * (1.0 if scale is None else scale)


def _tanh_sum(qa, ka, va):
  """sum_a va[a] tanh(qa[q, a] + ka[k, a]): qa (B, H, G, Tq, A), ka (B, H, G, Tk, A),
  va (H, G, A) -> (B, H, G, Tq, Tk)."""
  e = jnp.tanh(qa[..., :, None, :] + ka[..., None, :, :])
  return jnp.sum(e * va[:, :, None, None, :], axis=-1)


def cosine_scores(qg, kg, d, *, beta=1.0, scale=None, eps=1e-6, **kw):
  """beta * cos(q, k) (Graves' content-based addressing); beta: () or (Hq,)."""
  unexpected("cosine", kw)
  qn = qg / jnp.maximum(jnp.linalg.norm(qg, axis=-1, keepdims=True), eps)
  kn = kg / jnp.maximum(jnp.linalg.norm(kg, axis=-1, keepdims=True), eps)
  b = C.per_head(beta, d, 0).astype(qg.dtype)[..., None, None]
  s = jnp.einsum("bhgqd,bhkd->bhgqk", qn, kn) * b
  return s * (1.0 if scale is None else scale)


def location_scores(qg, kg, d, *, w, scale=None, k_seg=None, **kw):
  """(W q)_j: a score for each key position j < Tk from the query alone (Luong).

  k_seg: None or (B|1, Tk) segment ids of packed keys: key j then takes W's column
  of its position in its own segment (`common.segment_positions`), as if its segment
  were run alone."""
  unexpected("location", kw)
  W = C.per_head(w, d, 2).astype(qg.dtype)
  if W.shape[-1] < d.Tk:
    raise C.AttentionError(
        f"location attention: w has {W.shape[-1]} positions but there are "
        f"{d.Tk} keys; build it with max_len >= Tk")
  s = jnp.einsum("bhgqd,hgdl->bhgql", qg, W[..., : d.Tk])
  if k_seg is not None:            # column j -> its position in its segment
    at = C.segment_positions(k_seg)[:, None, None, None, :]          # (B|1, 1, 1, 1, Tk)
    s = jnp.take_along_axis(s, jnp.broadcast_to(at, s.shape), axis=-1)
  return s * (1.0 if scale is None else scale)


SCORES = {
    "softmax": SCALED_DOT,   # q.k / sqrt(D)
    "dot": DOT,              # q.k
    "general": general_scores,
    "additive": additive_scores,
    "cosine": cosine_scores,
    "location": location_scores,
}


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
    # the naive path computes every pair, masked or not; only the bytes of a score
    # whose fused kernel takes no mask depend on it (score_bytes sees kw["causal"])
    return cost_lib.dense(d, mode=mode, itemsize=itemsize, score_flops=score_flops(d, kw),
                          score_transcendentals=score_trans(d, kw),
                          extra_flops=extra(d, kw),
                          score_bytes=score_bytes(d, dict(kw, causal=causal)),
                          extra_bytes=extra_bytes(d, kw), qk=qk)
  return cost


def _attn_dim(d, kw):
  w = kw.get("w_q")
  return w.shape[-1] if w is not None else kw.get("attn_dim", d.D)


_COMMON = dict(causal=True, masks="any", decode="KV cache (fp, int8 or fp8)",
               decode_impl=KV_CACHE, dropout=True,
               segments="a mask: query and key share a segment")
# Which score functions RoPE makes relative, and why the others refuse it.
_ROTARY = dict(positions=P.takes_qk())


def _no_rotary(why):
  return dict(positions={"rope": Refused(why), "rope2d": Refused(why),
                         "alibi": P.TAKES_QK["alibi"]})
register(Variant(
    name="softmax", fn=_variant_fn("softmax"), score=SCORES["softmax"],
    paper="Vaswani et al. 2017",
    time="O(N² D)", memory="O(N²)", cost=_dense_cost(),
    family="exact", params={"sinks": SINKS},
    summary="scaled dot-product, the plain numerically stable reference", **_COMMON,
    **_ROTARY))
register(Variant(
    name="dot", fn=_variant_fn("dot"), score=SCORES["dot"],
    paper="Luong et al. 2015",
    time="O(N² D)", memory="O(N²)", cost=_dense_cost(),
    family="score", summary="unscaled dot-product score q·k", **_COMMON, **_ROTARY))
register(Variant(
    name="general", fn=_variant_fn("general"), score=SCORES["general"],
    paper="Luong et al. 2015",
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
    name="additive", fn=_variant_fn("additive"), score=SCORES["additive"],
    paper="Bahdanau et al. 2015",
    time="O(N² A + N D A)", memory="O(N² A)",
    cost=_dense_cost(
        score_flops=lambda d, kw: 3 * _attn_dim(d, kw),
        score_trans=lambda d, kw: _attn_dim(d, kw),
        extra=lambda d, kw: 2 * d.B * d.Hq * (d.Tq + d.Tk) * d.D * _attn_dim(d, kw),
        # the (Tq, Tk, A) tanh temporary is summed over A where it is made (one fused
        # loop, `_tanh_sum`): no bytes of its own; the backward makes it again. That
        # fused loop takes no mask, so XLA:CPU applies a causal one in passes of its
        # own over the fp32 (Tq, Tk) scores: 3 reads and writes a pair
        score_bytes=lambda d, kw: 3 * 2 * 4 if kw["causal"] else 0.0, qk=False),
    params={"w_q": ParamSpec(lambda h, dh, L: (h, dh, dh), _normal(lambda s: s[-2] ** -0.5)),
            "w_k": ParamSpec(lambda h, dh, L: (h, dh, dh), _normal(lambda s: s[-2] ** -0.5)),
            "v_a": ParamSpec(lambda h, dh, L: (h, dh), _normal(lambda s: s[-1] ** -0.5))},
    family="score", summary="MLP score vᵀtanh(W_q q + W_k k)", **_COMMON,
    **_no_rotary("the score tanh(W_q q + W_k k) is no inner product of q and k, so no "
                 "rotation of them makes it depend on i - j")))
register(Variant(
    name="cosine", fn=_variant_fn("cosine"), score=SCORES["cosine"],
    paper="Graves et al. 2014",
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
    name="location", fn=_variant_fn("location"), score=SCORES["location"],
    paper="Luong et al. 2015",
    time="O(N L D)", memory="O(N²)",
    cost=_dense_cost(qk=False, extra=lambda d, kw: 2 * d.B * d.Hq * d.Tq * d.D * d.Tk),
    params={"w": ParamSpec(lambda h, dh, L: (h, dh, L), _normal(lambda s: s[-2] ** -0.5))},
    family="score", summary="location-based score softmax(W q) over key positions",
    **{**_COMMON, "segments": "a mask, and each key scored by W's column of its position "
                              "in its own segment (positions restart per segment)"},
    **_no_rotary("the score (W q)_j reads no key (a rotation of k changes nothing), and "
                 "its weights are already one per absolute key position")))
