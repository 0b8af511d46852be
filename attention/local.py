"""`local`: sliding-window attention, computed block by block in O(N w).

Parmar et al. 2018 (Image Transformer, local attention) / Beltagy et al. 2020
(Longformer, sliding window). Each query sees only the keys within a window of
width `w` around its own position; everything else is exactly as in `softmax`
(scaled dot-product, one softmax over the allowed keys).

Definition (positions in the contract's bottom-right aligned coordinates: query i
sits at position p = i + (Tk - Tq), so with Tq == Tk, p == i):

  causal=True:  query p attends keys j with  p - w < j <= p     (w keys, itself included)
  causal=False: query p attends keys j with  |j - p| <= w // 2  (w + 1 keys for even w)

Keys outside [0, Tk) do not exist; a query with no key left (e.g. p < 0 when
Tq > Tk) returns zeros. `causal=True` is the one-sided window, not the two-sided
window intersected with causality.

Algorithm: queries are cut into blocks of `b = max(w, 16)` rows (fewer for short
inputs); block n needs only the contiguous key span [start_n, start_n + S) with
S = b + w - 1 (causal) or b + 2 (w // 2) (two-sided), gathered once per block from
K and V with static indices. Scores are (B, Hkv, G, n_blocks, b, S): O(N w) time
and memory, never an N x N array or mask. The window mask inside each block is
built from iotas in the graph (also O(N w)).

Shapes: q (B, Tq, Hq, D), k (B, Tk, Hkv, D), v (B, Tk, Hkv, Dv), Hq % Hkv == 0
(MHA, GQA, MQA: the G query heads of a group share the gathered K/V block).
Dtypes: scores and softmax statistics in float32 for bf16/fp16/fp32 inputs
(float64 stays float64); the output is in q's dtype.

Masks: key-padding masks only, i.e. masks broadcastable to (B, Hq, 1, Tk) (axis Tq
of size 1); they are sliced per block like K. A mask with a full Tq axis is refused
with an AttentionError (it is itself O(N^2); use `softmax` or `flash` for it).
Decoding is not provided (decode=None).
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from attention import common as C
from attention.registry import Variant, register
from attention.softmax import masked_softmax

from attention import cost_model as cost_lib

NAME = "local"
DEFAULT_WINDOW = 128
MIN_BLOCK = 16


def _check_window(window):
  if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
    raise C.AttentionError(
        f"local attention: window must be a positive int (number of keys), got {window!r}")
  return int(window)


class Plan:
  """Static geometry of one `local` call (shared by the function and its cost).

  L, R:   keys visible to the left / right of a query's own position.
  b:      query block size; nq: number of query blocks; S: keys gathered per block.
  starts: (nq,) first key index of each block's span (clipped into [0, Tk - S]).
  """

  def __init__(self, Tq: int, Tk: int, window: int, causal: bool):
    w = _check_window(window)
    self.window, self.causal = w, causal
    self.L, self.R = (w - 1, 0) if causal else (w // 2, w // 2)
    self.off = Tk - Tq
    self.b = max(1, min(max(w, MIN_BLOCK), Tq))
    self.nq = -(-Tq // self.b)
    self.S = min(self.b + self.L + self.R, Tk)
    raw = self.off + np.arange(self.nq) * self.b - self.L
    self.starts = np.clip(raw, 0, Tk - self.S).astype(np.int32)

  def key_index(self):
    """(nq, S) int32: the key positions gathered for each query block."""
    return self.starts[:, None] + np.arange(self.S, dtype=np.int32)[None, :]


def local(q, k, v, *, causal=False, mask=None, window=DEFAULT_WINDOW, scale=None, **kw):
  """Sliding-window attention under the contract (see the module docstring).

  q: (B, Tq, Hq, D), k: (B, Tk, Hkv, D), v: (B, Tk, Hkv, Dv).
  window: w, a positive int. causal=True: keys p - w < j <= p; causal=False:
    |j - p| <= w // 2, with p = i + (Tk - Tq) the aligned query position.
  mask: key-padding only, bool broadcastable to (B, Hq, 1, Tk); True = may attend.
  scale: multiplies q.k; default 1/sqrt(D).
  Returns (B, Tq, Hq, Dv) in q's dtype; a query with no allowed key gets zeros.
  Raises AttentionError for a dense (full Tq axis) mask, a bad window or an
  unexpected keyword.
  """
  if kw:
    raise C.AttentionError(
        f"attention variant '{NAME}' got unexpected arguments: {sorted(kw)}")
  d = C.check_qkv(q, k, v, NAME)
  mask = C.check_mask(mask, d, NAME)
  if mask is not None and mask.shape[2] != 1:
    C.refuse(NAME, f"a mask with a full Tq axis (shape {mask.shape})",
             "local supports key-padding masks only, broadcastable to (B, Hq, 1, Tk); "
             "a dense (Tq, Tk) mask is O(N^2) -- use 'softmax' or 'flash' for it")
  plan = Plan(d.Tq, d.Tk, window, causal)
  ct = C.compute_dtype(q.dtype)
  b, nq, S = plan.b, plan.nq, plan.S
  idx = plan.key_index()                                   # (nq, S) static

  qg = C.split_heads_q(q, d).astype(ct)                     # (B, Hkv, G, Tq, D)
  pad = nq * b - d.Tq
  if pad:
    qg = jnp.pad(qg, ((0, 0),) * 3 + ((0, pad), (0, 0)))
  qb = qg.reshape(d.B, d.Hkv, d.G, nq, b, d.D)
  flat = idx.reshape(-1)
  kb = jnp.take(C.kv_heads_first(k).astype(ct), flat, axis=2).reshape(
      d.B, d.Hkv, nq, S, d.D)
  vb = jnp.take(C.kv_heads_first(v).astype(ct), flat, axis=2).reshape(
      d.B, d.Hkv, nq, S, d.Dv)

  s = C.default_scale(d.D, scale)
  logits = jnp.einsum("bhgnqd,bhnsd->bhgnqs", qb, kb) * s

  # Window mask from iotas: (nq, b, S), O(N w).
  qpos = (plan.off + jnp.arange(nq)[:, None, None] * b
          + jnp.arange(b)[None, :, None])
  kpos = jnp.asarray(idx)[:, None, :]
  rel = kpos - qpos
  if causal:
    allowed = (rel <= 0) & (rel > -plan.window)
  else:
    allowed = jnp.abs(rel) <= plan.window // 2
  allowed = allowed[None, None, None]                      # (1, 1, 1, nq, b, S)
  if mask is not None:
    mg = C.group_mask(mask, d)[:, :, :, 0, :]              # (B|1, Hkv|1, G|1, Tk|1)
    if mg.shape[-1] == 1:
      km = mg[..., None, :]                                 # (…, 1, 1)
    else:
      km = jnp.take(mg, flat, axis=-1).reshape(mg.shape[:3] + (nq, S))
    allowed = allowed & km[..., :, None, :]

  p = masked_softmax(logits, allowed)
  o = jnp.einsum("bhgnqs,bhnsd->bhgnqd", p, vb)
  o = o.reshape(d.B, d.Hkv, d.G, nq * b, d.Dv)[:, :, :, : d.Tq]
  return C.merge_heads_out(o).astype(q.dtype)


def _cost(d, *, causal=False, mode="fwd", itemsize=4, window=DEFAULT_WINDOW, **kw):
  """Cost of the blocked computation: every gathered (query, key) pair is computed.

  pairs = B * Hq * nq * b * S  (about 2 N w causal, 2 N w two-sided; O(N w)).
  """
  plan = Plan(d.Tq, d.Tk, window, causal)
  pairs = d.B * d.Hq * plan.nq * plan.b * plan.S
  gathered = 4 * d.B * d.Hkv * plan.nq * plan.S * (d.D + d.Dv)  # fp32 K/V blocks
  return cost_lib.gathered_pairs(d, name=NAME, mode=mode, itemsize=itemsize, pairs=pairs,
                                 kv_bytes=gathered)


register(Variant(
    name=NAME, fn=local, paper="Parmar et al. 2018; Beltagy et al. 2020 (Longformer)",
    time="O(N w D)", memory="O(N w)", causal=True, masks="key padding", decode=None,
    cost=_cost,
    summary="sliding window of w keys (causal) or ±w/2 keys, blocked, never N×N"))
