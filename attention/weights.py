"""The attention weights every variant applies to its values, for heat maps.

  w_BHqk = attention.implied_weights(q, k, name=..., causal=..., mask=..., **kw)
  out == einsum("bhqk,bkhd->bqhd", w, v)      (v's heads repeated over each GQA group)

Every registered variant is linear in v for fixed q and k, so its output is some
(Tq, Tk) weight matrix per head applied to v. Which matrix:
  * exact family (softmax, dot, general, additive, cosine, location, flash,
    flash_pallas, ring): `attention.probabilities`, the softmax of the scores;
  * linear and performer: their implied weights φ(q)·φ(k) / Σ_j φ(q)·φ(k_j) over the
    keys each query may see (the same eps in the denominator as the variant), from the
    variants' own feature maps; they are not a softmax, and need not be sparse (with
    RoPE the numerator's features are rotated, so weights can be negative; with ALiBi
    every term carries its decay e^(-m |i - j|));
  * local, sparse, reformer, linformer: the variant itself applied to one-hot values
    (v = the Tk×Tk identity), which by linearity gives exactly its weight matrix:
    the sliding window, the strided/fixed pattern, the LSH buckets and chunks
    (different per head and per input), linformer's projected mix of positions.
    This costs one call with Dv = Tk: meant for heat maps, not for long sequences.
"""
from __future__ import annotations

import jax.numpy as jnp

from attention import common as C
from attention import linear as lin
from attention import positions as P
from attention import performer as perf
from attention import softmax as sm
from attention.registry import get

EXACT = tuple(sm.SCORES) + tuple(sm.SAME_AS_SOFTMAX)
KERNEL = ("linear", "performer")


def _kernel_weights(q, k, *, name, causal, mask, eps=1e-6, feature_map="elu",
                    projection=None, positions=None, q_pos=None, k_pos=None, **unused):
  d = C.check_qkv(q, k, k, name)
  if name == "linear":
    _, fq, fk, _ = lin._prep(q, k, k, mask, feature_map, name)
  else:
    _, fq, fk, _ = perf._features(q, k, k, mask, projection, name)
  pos = P.prepare(name, positions, d, q_pos, k_pos)
  x = lin.features(fq, fk, pos)
  num = jnp.einsum("bhgqf,bhkf->bhgqk", x.rq, x.rk)         # rotated with RoPE
  s = jnp.einsum("bhgqf,bhkf->bhgqk", fq, fk)              # φ(q)·φ(k), >= 0
  if pos is not None and pos.alibi:
    g = lin._gain(lin.decay(pos, d, fq.dtype).m, jnp.abs(pos.q[:, :, None] - pos.k[:, None]))
    num, s = num * g, s * g
  if causal:
    s = jnp.where(C.causal_mask(d.Tq, d.Tk), s, 0.0)
    num = jnp.where(C.causal_mask(d.Tq, d.Tk), num, 0.0)
  w = num / (jnp.sum(s, axis=-1, keepdims=True) + eps)
  B, Hkv, G, Tq, Tk = w.shape
  return w.reshape(B, Hkv * G, Tq, Tk)


def _probe_weights(q, k, *, name, causal, mask, **kw):
  d = C.check_qkv(q, k, k, name)
  eye = jnp.eye(d.Tk, dtype=jnp.promote_types(q.dtype, jnp.float32))
  v = jnp.broadcast_to(eye[None, :, None, :], (d.B, d.Tk, d.Hkv, d.Tk))
  out = get(name)(q.astype(v.dtype), k.astype(v.dtype), v, causal=causal, mask=mask,
                  **kw)                                      # (B, Tq, Hq, Tk)
  return out.transpose(0, 2, 1, 3)


def implied_weights(q, k, *, name: str, causal: bool = False, mask=None, **kw):
  """(B, Hq, Tq, Tk) float32 weights with out = weights @ v for variant `name`.

  q (B, Tq, Hq, D), k (B, Tk, Hkv, D); mask and causal as in the contract; kw: the
  variant's options and parameters (as passed to the variant's function). Rows of
  the exact and kernel variants sum to 1 (up to the kernel variants' eps), or are all
  zero where a query may see no key.
  """
  get(name)                         # an unknown name lists the valid ones
  if name in sm.SAME_AS_SOFTMAX:     # their options are tilings; the scale and positions
    kw = {a: b for a, b in kw.items() if a in ("scale", "positions", "q_pos", "k_pos")}
    name = "softmax"
  if name in EXACT:
    kw = {a: b for a, b in kw.items() if a not in ("dropout_rate", "dropout_rng")}
    return sm.probabilities(q, k, name=name, causal=causal, mask=mask, **kw)
  if name in KERNEL:
    return _kernel_weights(q, k, name=name, causal=causal, mask=mask, **kw)
  return _probe_weights(q, k, name=name, causal=causal, mask=mask, **kw)
