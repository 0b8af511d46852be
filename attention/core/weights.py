"""The attention weights every variant applies to its values, for heat maps.

  w_BHqk = attention.implied_weights(q, k, name=..., causal=..., mask=..., **kw)
  out == einsum("bhqk,bkhd->bqhd", w, v)      (v's heads repeated over each GQA group)

Every registered variant is linear in v for fixed q and k, so its output is some
(Tq, Tk) weight matrix per head applied to v. Which matrix, read from the variant's
registry record (so a variant registered anywhere is drawn with no edit here):
  * a record with `implied_weights` (linear, performer): that closed form, here their
    φ(q)·φ(k) / Σ_j φ(q)·φ(k_j) over the keys each query may see (the same eps in the
    denominator as the variant); they are not a softmax, and need not be sparse;
  * a record with `implied_weights` (retention, gla, deltanet): their closed forms,
    w_ij = q_i·(k_j ⊙ Π_{j<l≤i} α_l) for the diagonal gates (γ^(i-j) q_i·k_j for
    retention), tril(Q Kᵀ) (I + L)⁻¹ diag(β) for the delta rule; causal, not
    normalised (no sum to 1), and deltanet's are signed;
  * a record with a `score` (the exact family: softmax, dot, general, additive,
    cosine, location, and flash, flash_pallas, ring, sdpa, which declare softmax's
    scaled dot): `attention.probabilities`, the softmax of the scores (kernel options
    such as tile sizes ignored);
  * any other (local, sparse, reformer, linformer, fp8): the variant itself applied
    to one-hot values (v = the Tk×Tk identity), which by linearity gives exactly its
    weight matrix: the sliding window, the strided/fixed pattern, the LSH buckets and
    chunks (different per head and per input), linformer's projected mix of
    positions, fp8's rounded probabilities. This costs one call with Dv = Tk: meant
    for heat maps, not for long sequences.
"""
from __future__ import annotations

import inspect

import jax.numpy as jnp

from attention.core import common as C
from attention.core.registry import variant
from attention.core.scores import probabilities


def _probe_weights(fn, q, k, *, name, causal, mask, **kw):
  d = C.check_qkv(q, k, k, name)
  eye = jnp.eye(d.Tk, dtype=jnp.promote_types(q.dtype, jnp.float32))
  v = jnp.broadcast_to(eye[None, :, None, :], (d.B, d.Tk, d.Hkv, d.Tk))
  out = fn(q.astype(v.dtype), k.astype(v.dtype), v, causal=causal, mask=mask,
           **kw)                                             # (B, Tq, Hq, Tk)
  return out.transpose(0, 2, 1, 3)


def implied_weights(q, k, *, name: str, causal: bool = False, mask=None, v=None, **kw):
  """(B, Hq, Tq, Tk) float32 weights with out = weights @ v for variant `name`.

  q (B, Tq, Hq, D), k (B, Tk, Hkv, D); mask and causal as in the contract; kw: the
  variant's options, parameters and per-token inputs (as passed to the variant's
  function). Rows of the score and kernel variants sum to 1 (up to the kernel
  variants' eps; less with learned sinks, whose column of value zero is dropped), or
  are all zero where a query may see no key.
  v (B, Tk, Hkv, Dv): read only by a record whose `implied_weights` takes `v` (mla:
  its keys are up-projected from the latents it takes as v, and its weights apply to
  the per-head values v W_UV); the others ignore it.
  """
  rec = variant(name)               # an unknown name lists the valid ones
  if rec.implied_weights is not None:
    if "v" in inspect.signature(rec.implied_weights).parameters:
      kw["v"] = v
    return rec.implied_weights(q, k, causal=causal, mask=mask, **kw)
  if rec.score is not None:
    return probabilities(q, k, name=name, causal=causal, mask=mask, **kw)
  return _probe_weights(rec.fn, q, k, name=name, causal=causal, mask=mask, **kw)
