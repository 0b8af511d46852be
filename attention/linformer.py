"""Linformer: low-rank attention by projecting keys and values along the length axis.

Wang et al. 2020, "Linformer: Self-Attention with Linear Complexity".

Definition (per batch element and head; shapes follow `attention.core.common`):

  E, F:   (k_proj, L) parameters with L >= Tk; only the first Tk columns are used,
          exactly as a model built with max_len = L uses them on a shorter input.
  K' = E[:, :Tk] K      (k_proj, D)      V' = F[:, :Tk] V      (k_proj, Dv)
  out = softmax(Q K'^T * scale) V'         scale = 1/sqrt(D) unless given

Arguments (keyword only, besides the contract's q, k, v, causal, mask):
  e, f:   (k_proj, L) shared by every head (the paper's "headwise/key-value sharing"
          minus the E = F tie, which a caller gets by passing the same array twice),
          or (Hkv, k_proj, L): one projection per key/value head (all query heads of a
          GQA group use their kv head's projection). e and f must have the same k_proj.
  scale:  multiplies the logits; default 1/sqrt(D).

Cost: O(Tk k_proj (D + Dv)) for the projections plus O(Tq k_proj (D + Dv)) for the
attention: linear in N for a fixed k_proj. Memory O(N k_proj).

Dtypes: the projections, logits and softmax run in float32 for bf16/fp16/fp32 inputs
(float64 stays float64); the output is cast to q's dtype.

Masks:
  * causal=True is refused: every projected key mixes all Tk positions, including
    future ones, so causality cannot be expressed.
  * Key-padding masks (Tq axis of size 1, i.e. broadcastable to (B, Hq, 1, Tk)) are
    honoured by zeroing the masked keys and values BEFORE the projection: a masked
    position contributes nothing to K' or V'. (This is not the same as removing the
    position from an exact softmax; the k_proj projected "slots" are always attended.)
    A query whose every key is masked gets K' = V' = 0 and so an output of exactly 0.
    A per-query-head mask (Hq axis of size Hq) is supported; the projection then runs
    once per query head.
  * A mask with a real Tq axis (a different key set per query) is refused.

Positions: rope, rope2d and alibi are refused (see the record): each projected key
E[p] K mixes every key position, so there is no key position j for a rotation to be
relative to, or for a bias -m |i - j| to measure.

Segments (packed rows) are refused (see the record): E K mixes the keys of every
segment into each projected slot, so no mask after the projection can keep a query to
its own segment, and a mask before it (zeroing other segments' keys per query) would
need one projection per segment, O(N² k).

Refused with `AttentionError`: causal=True; masks that vary along Tq; segment ids; projections with
fewer than Tk columns (L < Tk); mismatched/ill-shaped e, f.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from attention.core import common as C
from attention.core import positions as P
from attention.core.cost_model import (MODES, NAIVE_SCORE_PASSES, SOFTMAX_FLOPS_PER_SCORE, Cost,
                            io_bytes)
from attention.core.registry import ParamSpec, Refused, Variant, refuse_segments, register
from attention.core.common import unexpected

NAME = "linformer"
# Default projected length: the paper's k = 64..256 range, clipped to max_len.
DEFAULT_K_PROJ = 64


def _projection(p, pname, d: C.Dims):
  """e or f as (Hkv|1, k_proj, Tk) in the grouped layout (no G axis yet)."""
  p = jnp.asarray(p)
  if p.ndim == 2:
    p = p[None]
  elif p.ndim == 3:
    if p.shape[0] != d.Hkv:
      raise C.AttentionError(
          f"attention variant '{NAME}': per-head {pname} must have a leading axis of "
          f"Hkv={d.Hkv} (one projection per key/value head); got shape {p.shape}")
  else:
    raise C.AttentionError(
        f"attention variant '{NAME}': {pname} must have shape (k_proj, L) or "
        f"(Hkv, k_proj, L); got shape {p.shape}")
  if p.shape[-1] < d.Tk:
    raise C.AttentionError(
        f"attention variant '{NAME}': {pname} has {p.shape[-1]} columns but there are "
        f"{d.Tk} keys; build it with max_len >= Tk")
  return p[..., : d.Tk]


def linformer(q, k, v, *, causal=False, mask=None, e, f, scale=None, positions=None,
              q_pos=None, k_pos=None, q_seg=None, k_seg=None, **kw):
  """Linformer attention under the contract (see the module docstring); any position
  scheme, and segment ids, are refused with their reason (the record's)."""
  refuse_segments(NAME, q_seg, k_seg)
  unexpected(NAME, kw)
  d = C.check_qkv(q, k, v, NAME)
  mask = C.check_key_mask(mask, d, NAME, "the keys are projected along their length "
                          "before any query sees them")
  P.prepare(NAME, positions, d, q_pos, k_pos)      # refuses every scheme
  if causal:
    C.refuse(NAME, "causal=True",
             "the length projection mixes every key position, including future ones, "
             "into each projected key/value")
  E = _projection(e, "e", d)
  F = _projection(f, "f", d)
  if E.shape[-2] != F.shape[-2]:
    raise C.AttentionError(
        f"attention variant '{NAME}': e and f project to different lengths "
        f"({E.shape[-2]} vs {F.shape[-2]})")
  ct = C.compute_dtype(q.dtype)
  s = C.default_scale(d.D, scale)
  E, F = E.astype(ct), F.astype(ct)
  qg = C.split_heads_q(q, d).astype(ct)                 # (B, Hkv, G, Tq, D)
  kg = C.kv_heads_first(k).astype(ct)[:, :, None]       # (B, Hkv, 1, Tk, D)
  vg = C.kv_heads_first(v).astype(ct)[:, :, None]       # (B, Hkv, 1, Tk, Dv)
  if mask is not None:
    keep = C.group_mask(mask, d)[..., 0, :, None]       # (B|1, Hkv|1, G|1, Tk, 1)
    kg = jnp.where(keep, kg, 0.0)
    vg = jnp.where(keep, vg, 0.0)
  Eg, Fg = E[:, None], F[:, None]                       # (Hkv|1, 1, k_proj, Tk)
  kp = jnp.einsum("hgpt,bhgtd->bhgpd", Eg, kg)          # (B, Hkv, G|1, k_proj, D)
  vp = jnp.einsum("hgpt,bhgtd->bhgpd", Fg, vg)          # (B, Hkv, G|1, k_proj, Dv)
  logits = jnp.einsum("bhgqd,bhgpd->bhgqp", qg, kp) * s
  m = jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
  p = jnp.exp(logits - m)
  p = p / jnp.sum(p, axis=-1, keepdims=True)
  o = jnp.einsum("bhgqp,bhgpd->bhgqd", p, vp)
  return C.merge_heads_out(o).astype(q.dtype)


def _k_proj(d: C.Dims, kw) -> int:
  e = kw.get("e")
  if e is not None:
    return int(e.shape[-2])
  return int(kw.get("k_proj", min(DEFAULT_K_PROJ, d.Tk)))


def cost(d: C.Dims, *, causal=False, mode="fwd", itemsize=4, **kw) -> Cost:
  """Projections O(B Hkv Tk k (D + Dv)) plus a dense (Tq, k_proj) attention."""
  del causal  # refused by the function; the cost is that of the non-causal call
  kp = _k_proj(d, kw)
  pairs = d.B * d.Hq * d.Tq * kp
  proj = 2 * d.B * d.Hkv * kp * d.Tk * (d.D + d.Dv)
  flops = proj + 2 * pairs * (d.D + d.Dv) + pairs * SOFTMAX_FLOPS_PER_SCORE
  trans = pairs
  kv_proj = 4 * d.B * d.Hkv * kp * (d.D + d.Dv)             # K', V' in fp32
  params = 4 * 2 * kp * d.Tk
  byt = (io_bytes(d, itemsize) + params + 2 * kv_proj
         + NAIVE_SCORE_PASSES * 4 * pairs)
  temp = 2 * 4 * pairs + kv_proj
  if mode == "fwd":
    return Cost(flops, trans, byt, temp)
  if mode == "fwd_bwd":
    bwd = 2 * proj + 2 * pairs * (2 * d.D + 2 * d.Dv) + 4 * pairs
    return Cost(flops + bwd, trans, 3 * byt, 2 * temp)
  if mode == "decode":
    raise ValueError(f"cost mode 'decode': attention variant '{NAME}' cannot decode "
                     "(the projection needs the whole sequence)")
  raise ValueError(f"cost mode must be one of {MODES}, got {mode!r}")


def _proj_shape(num_heads, head_dim, max_len, k_proj=DEFAULT_K_PROJ):
  """Shared (min(k_proj, max_len), max_len) projection; k_proj is the model option
  attention_options.linformer.k_proj (default 64)."""
  del num_heads, head_dim
  if isinstance(k_proj, bool) or not isinstance(k_proj, int) or k_proj < 1:
    raise C.AttentionError(
        f"attention variant '{NAME}': option k_proj must be a positive integer (the "
        f"projected length), got {k_proj!r}")
  return (min(k_proj, max_len), max_len)


def _proj_init(key, shape, dtype):
  """N(0, 1/k_proj): each projected position is an average-scale mix of the keys."""
  return jax.random.normal(key, shape, dtype) / math.sqrt(shape[-2])


register(Variant(
    name=NAME, fn=linformer, paper="Wang et al. 2020",
    time="O(N k D)", memory="O(N k)", causal=False, masks="key padding", decode=None,
    cost=cost,
    params={"e": ParamSpec(_proj_shape, _proj_init, options=("k_proj",)),
            "f": ParamSpec(_proj_shape, _proj_init, options=("k_proj",))},
    family="efficient",
    summary="low-rank: keys and values projected along the length to k_proj slots",
    positions={
        "rope": Refused("each projected key E[p]·K mixes the rotated keys of every "
                        "position, so a score no longer depends on i - j: the rotation is "
                        "averaged away"),
        "rope2d": Refused("each projected key E[p]·K mixes every (row, column), so no "
                          "score depends on the 2D offset: the rotation is averaged away"),
        "alibi": Refused("the k_proj projected slots mix every key position: there is no "
                         "key position j for the bias -m |i - j| to measure")},
    segments=Refused("the length projection E·K mixes the keys of every segment into each "
                     "of the k_proj slots, so no mask after it keeps a query to its own "
                     "segment (a projection per segment would cost O(N² k))")))
