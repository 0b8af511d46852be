"""`retention`: Sun et al. 2023 (RetNet), retention with a fixed decay γ per head.

  S_t = γ_h S_{t-1} + k_t v_tᵀ,   o_t = S_tᵀ q_t      i.e.   o_i = Σ_{j≤i} γ_h^(i-j) (q_i·k_j) v_j

with q scaled by `scale` (1/sqrt(D) by default, as RetNet's QKᵀ/sqrt(d)). γ_h = 1 - 2^(-5-h)
for kv head h = 0 .. Hkv-1 (RetNet's multi-scale schedule) unless `gamma` is given: one
float for every head, or Hkv of them (a tuple), each in (0, 1]. γ = 1 is linear attention
with identity features and no normaliser. Under GQA the decay is the kv head's (it acts
on the state); the G query heads of a group read the same decayed state.

The operator only: the output here is not normalised. RetNet's layer around it (§2.2:
Y = GroupNorm_h(heads), MSR(X) = (swish(X W_G) ⊙ Y) W_O; the GroupNorm is why its
parallel form may rescale the decay matrix freely) is the model's, from the record's
`layer` = ("group_norm", "out_gate") (models/layers.py; `gated_layer=bare` leaves it
out). Not built: its xPos rotation of q and k (the gated family takes no rotary
positions) and its value heads twice as wide as its key heads (our heads share one
head_dim: the layer's q, k and v widths are the model's).

Forms, numerics, masks and decoding: attention.core.gated (form="chunked" by default, also
"parallel", "scan" and "assoc"; any chunk_size). Shapes follow the contract:
q (B, T, Hq, D), k (B, T, Hkv, D), v (B, T, Hkv, Dv) -> (B, T, Hq, Dv) in q's dtype.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from attention.core import common as C
from attention.core import gated as G
from attention.core.registry import Variant, register
from attention.core import positions as P
from attention.core.common import unexpected

NAME = "retention"


def default_gamma(num_heads: int) -> np.ndarray:
  """RetNet's decays 1 - 2^(-5-h), h = 0 .. num_heads-1 (float64)."""
  return 1.0 - 2.0 ** (-5.0 - np.arange(num_heads))


def decays(num_kv_heads: int, gamma=None) -> np.ndarray:
  """(num_kv_heads,) float64 decays of the option `gamma` (None: RetNet's schedule, a
  float for every head, or one per head): the record's `decay`."""
  g = default_gamma(num_kv_heads) if gamma is None else np.asarray(gamma, np.float64)
  return np.broadcast_to(g, (num_kv_heads,)).copy()


def log_gamma(gamma, d: C.Dims, dtype):
  """(1, 1, Hkv, 1) log decays from `gamma` (None, a float or Hkv floats in (0, 1]),
  taken in float64 when gamma is concrete (a traced gamma is used as it is)."""
  try:
    g = default_gamma(d.Hkv) if gamma is None else np.asarray(gamma, np.float64)
  except jax.errors.TracerArrayConversionError:
    g = None
  if g is None:
    lg = jnp.log(jnp.asarray(gamma, dtype))
  else:
    if g.ndim > 1 or (g.ndim == 1 and g.shape[0] != d.Hkv):
      raise C.AttentionError(f"{NAME}: gamma has shape {g.shape}; give one float or one "
                             f"per key/value head ({d.Hkv})")
    if not np.all((g > 0) & (g <= 1)):
      raise C.AttentionError(f"{NAME}: gamma must lie in (0, 1], got {gamma!r}")
    lg = jnp.asarray(np.log1p(g - 1.0), dtype)   # exact near 1
  return jnp.broadcast_to(lg, (d.Hkv,)).reshape(1, 1, -1, 1)


def retention_with_state(q, k, v, *, causal=False, mask=None, scale=None, gamma=None,
                         form="chunked", chunk_size=G.DEFAULT_CHUNK, state=None, q_seg=None,
                         k_seg=None):
  """`retention` from `state` (B, Hkv, D, Dv) (None: zeros) -> (out, final state)."""
  d, kmask = G.check_call(NAME, q, k, v, causal=causal, mask=mask, form=form,
                          chunk_size=chunk_size)
  la = log_gamma(gamma, d, C.compute_dtype(q.dtype))
  return G.diag_gated(NAME, q, k, v, la, d, kmask, scale=scale, form=form,
                      chunk_size=chunk_size, state=state,
                      seg=G.segments(NAME, q_seg, k_seg, d))


def retention(q, k, v, *, causal=False, mask=None, scale=None, gamma=None, form="chunked",
              chunk_size=G.DEFAULT_CHUNK,
              positions=None, q_pos=None, k_pos=None, q_seg=None, k_seg=None, **kw):
  """Retention (Sun et al. 2023) under the contract; causal only.

  q (B, T, Hq, D), k (B, T, Hkv, D), v (B, T, Hkv, Dv) -> (B, T, Hq, Dv), q's dtype.
  mask: key padding only, (B, 1, 1, T). gamma: None (RetNet's 1 - 2^(-5-h)), a float or
  Hkv floats in (0, 1]. form: "chunked" | "parallel" | "scan" | "assoc".
  q_seg, k_seg (B|1, T): segment ids of a packed row: the state resets at each segment
  start (attention.core.gated).
  """
  unexpected(NAME, kw)
  P.prepare(NAME, positions, C.check_qkv(q, k, v, NAME), q_pos, k_pos)  # refuses each
  return retention_with_state(q, k, v, causal=causal, mask=mask, scale=scale, gamma=gamma,
                              form=form, chunk_size=chunk_size, q_seg=q_seg, k_seg=k_seg)[0]


def implied_weights(q, k, *, causal=True, mask=None, scale=None, gamma=None,
                    form="chunked", chunk_size=G.DEFAULT_CHUNK, q_seg=None, k_seg=None):
  """(B, Hq, T, T) weights, w_ij = γ^(i-j) q_i·k_j (j ≤ i): out = w @ v. form and
  chunk_size do not change them."""
  d, kmask = G.check_call(NAME, q, k, k, causal=causal, mask=mask, form=form,
                          chunk_size=chunk_size)
  return G.diag_implied_weights(q, k, log_gamma(gamma, d, C.compute_dtype(q.dtype)), d,
                                kmask, scale, G.segments(NAME, q_seg, k_seg, d))


def _cost(d, *, causal=True, mode="fwd", itemsize=4, form="chunked",
          chunk_size=G.DEFAULT_CHUNK, **kw):
  return G.diag_cost(d, mode=mode, itemsize=itemsize, F=1, form=form, chunk=chunk_size,
                     fixed=True)


register(Variant(
    name=NAME, fn=retention, paper="Sun et al. 2023", time="O(N C D + N D Dv)",
    memory="O(N (D + Dv))", causal=True, masks="key padding",
    decode="S per kv head, O(D Dv) per token",
    decode_impl=G.decode_impl(retention_with_state), cost=_cost, cross=False,
    causal_only=True, family="gated", forms=G.FORMS, implied_weights=implied_weights,
    positions=G.POSITIONS_REFUSED, segments=G.SEGMENTS, layer=("group_norm", "out_gate"),
    decay=decays,
    summary="RetNet retention: S ← γ_h S + k vᵀ, fixed decay per head, no normaliser; "
            "chunked, parallel, scan, associative scan"))
