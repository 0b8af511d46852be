"""The attention weights every variant applies to its values, for heat maps.

  w_BHqk = attention.implied_weights(q, k, name=..., causal=..., mask=..., **kw)
  out == einsum("bhqk,bkhd->bqhd", w, v)      (v's heads repeated over each GQA group)

Every registered variant is linear in v for fixed q and k, so its output is some
(Tq, Tk) weight matrix per head applied to v. Which matrix:
  * exact family (softmax, dot, general, additive, cosine, location, flash,
    flash_pallas, ring): `attention.probabilities`, the softmax of the scores;
  * linear and performer: their implied weights φ(q)·φ(k) / Σ_j φ(q)·φ(k_j) over the
    keys each query may see (the same eps in the denominator as the variant), from the
    variants' own feature maps; they are not a softmax, and need not be sparse;
  * local, sparse, reformer, linformer: the variant itself applied to one-hot values
    (v = the Tk×Tk identity), which by linearity gives exactly its weight matrix:
    the sliding window, the strided/fixed pattern, the LSH buckets and chunks
    (different per head and per input), linformer's projected mix of positions.
    This costs one call with Dv = Tk: meant for heat maps, not for long sequences;
  * retention, gla, deltanet: their closed forms (`implied_weights` in each module):
    w_ij = q_i·(k_j ⊙ Π_{j<l≤i} α_l) for the gated ones (γ^(i-j) q_i·k_j for retention),
    tril(Q Kᵀ) (I + L)⁻¹ diag(β) for the delta rule; causal, not normalised (no sum to
    1), and deltanet's are signed.
"""
from __future__ import annotations

import jax.numpy as jnp

from attention import common as C
from attention import deltanet as dn
from attention import gla
from attention import linear as lin
from attention import retention as ret
from attention import performer as perf
from attention import softmax as sm
from attention.registry import get

EXACT = tuple(sm.SCORES) + tuple(sm.SAME_AS_SOFTMAX)
KERNEL = ("linear", "performer")
CLOSED_FORM = {"retention": ret.implied_weights, "gla": gla.implied_weights,
               "deltanet": dn.implied_weights}


def _kernel_weights(q, k, *, name, causal, mask, eps=1e-6, feature_map="elu",
                    projection=None, **unused):
  d = C.check_qkv(q, k, k, name)
  if name == "linear":
    _, fq, fk, _ = lin._prep(q, k, k, mask, feature_map, name)
  else:
    _, fq, fk, _ = perf._features(q, k, k, mask, projection, name)
  s = jnp.einsum("bhgqf,bhkf->bhgqk", fq, fk)              # φ(q)·φ(k), >= 0
  if causal:
    s = jnp.where(C.causal_mask(d.Tq, d.Tk), s, 0.0)
  w = s / (jnp.sum(s, axis=-1, keepdims=True) + eps)
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
  variant's options, parameters and per-token inputs (as passed to the variant's
  function). Rows of the exact and kernel variants sum to 1 (up to the kernel
  variants' eps), or are all zero where a query may see no key.
  """
  get(name)                         # an unknown name lists the valid ones
  if name in sm.SAME_AS_SOFTMAX:     # their options are tilings; only the scale counts
    kw = {a: b for a, b in kw.items() if a == "scale"}
    name = "softmax"
  if name in EXACT:
    kw = {a: b for a, b in kw.items() if a not in ("dropout_rate", "dropout_rng")}
    return sm.probabilities(q, k, name=name, causal=causal, mask=mask, **kw)
  if name in KERNEL:
    return _kernel_weights(q, k, name=name, causal=causal, mask=mask, **kw)
  if name in CLOSED_FORM:
    w = CLOSED_FORM[name](q, k, causal=causal, mask=mask, **kw)
    return w.astype(jnp.promote_types(q.dtype, jnp.float32))
  return _probe_weights(q, k, name=name, causal=causal, mask=mask, **kw)
