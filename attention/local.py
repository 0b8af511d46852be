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
Segments (packed rows, q_seg/k_seg): the window intersected with the segment mask,
the key ids gathered per block like the keys (O(N w)). The window is by index and
shift-invariant, so a packed segment sees, by offset, the keys it sees alone: with
Tq == Tk a packed row equals its segments run alone.
Sinks (option `sinks`, gpt-oss, whose sliding-window layers have them): a learned
logit per query head joins each window's softmax as a column of value zero,
out = sum_j exp(s_j) v_j / (exp(sink_h) + sum_j exp(s_j)); the rolling cache's steps
carry it the same way.
Decoding (causal only): a rolling KV cache of the last w positions, O(w) memory and
O(w D) work per token however long the sequence grows (Mistral's rolling buffer): slot
s holds the latest position p with p % w == s. A step of T new tokens attends to the
buffer and to the T new keys under the causal window, then writes the last min(T, w)
of them over the oldest slots. fp, int8 and fp8 storage as the exact family's cache.

Positions (attention.core.positions): RoPE rotates q and k (the rolling cache stores
rotated keys); ALiBi's bias is computed for the gathered (b, S) blocks from the
positions gathered with the keys, O(N w) like the scores (the rolling cache keeps each
slot's key position). The window itself is by index, as the contract's causality.
"""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from attention.core import common as C
from attention.core import kv_cache as KV
from attention.core import positions as P
from attention.core.decode import DecodeImpl
from attention.core.registry import Variant, register
from attention.core.scores import check_sinks, grouped_sink, masked_softmax
from attention.core.common import unexpected

from attention.core import cost_model as cost_lib

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


def local(q, k, v, *, causal=False, mask=None, window=DEFAULT_WINDOW, scale=None,
          positions=None, q_pos=None, k_pos=None, q_seg=None, k_seg=None, sinks=None,
          **kw):
  """Sliding-window attention under the contract (see the module docstring).

  q: (B, Tq, Hq, D), k: (B, Tk, Hkv, D), v: (B, Tk, Hkv, Dv).
  window: w, a positive int. causal=True: keys p - w < j <= p; causal=False:
    |j - p| <= w // 2, with p = i + (Tk - Tq) the aligned query position.
  mask: key-padding only, bool broadcastable to (B, Hq, 1, Tk); True = may attend.
  scale: multiplies q.k; default 1/sqrt(D).
  positions, q_pos (B|1, Tq), k_pos (B|1, Tk): rope/rope2d (q, k rotated) or alibi
    (a bias on the gathered blocks); see attention.core.positions.
  q_seg (B|1, Tq), k_seg (B|1, Tk): segment ids of packed rows (attention.core.common): a
    query sees the keys of its window in its own segment.
  sinks: None or False, or the learned sink logits (Hq,) (option sinks=True in a
    model): each window's softmax is over [its scores, the head's sink] with the sink's
    column dropped (gpt-oss's sliding-window layers carry one too).
  Returns (B, Tq, Hq, Dv) in q's dtype; a query with no allowed key gets zeros.
  Raises AttentionError for a dense (full Tq axis) mask, a bad window or an
  unexpected keyword.
  """
  unexpected(NAME, kw)
  d = C.check_qkv(q, k, v, NAME)
  mask = C.check_key_mask(mask, d, NAME, C.DENSE_MASK)
  q_seg, k_seg = C.check_segments(q_seg, k_seg, d, NAME)
  pos = P.prepare(NAME, positions, d, q_pos, k_pos)
  q, k = P.rotate_qk(pos, q, k)
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
  if pos is not None and pos.alibi:     # the blocks' own positions: (B|1, nq, b | S)
    qp = C.pad_axis(pos.q, 1, nq * b).reshape(-1, nq, b)
    kp = jnp.take(pos.k, flat, axis=1).reshape(-1, nq, S)
    logits = logits + P.block_bias(pos, d, qp, kp, ct)

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
  if q_seg is not None:                 # the blocks' own ids: (B|1, nq, b) and (B|1, nq, S)
    qs = jnp.pad(q_seg, ((0, 0), (0, pad)), mode="edge").reshape(-1, nq, b)
    ks = jnp.take(k_seg, flat, axis=1).reshape(-1, nq, S)
    allowed = allowed & (qs[..., :, None] == ks[..., None, :])[:, None, None]

  p = masked_softmax(logits, allowed,
                     grouped_sink(check_sinks(sinks, d, NAME), d, logits.ndim, ct))
  o = jnp.einsum("bhgnqs,bhnsd->bhgnqd", p, vb)
  o = o.reshape(d.B, d.Hkv, d.G, nq * b, d.Dv)[:, :, :, : d.Tq]
  return C.merge_heads_out(o).astype(q.dtype)


def _cost(d, *, causal=False, mode="fwd", itemsize=4, window=DEFAULT_WINDOW, **kw):
  """Cost of the blocked computation: every gathered (query, key) pair is computed.

  pairs = B * Hq * nq * b * S  (about 2 N w causal, 2 N w two-sided; O(N w)).
  mode="decode": Tq new tokens against the rolling cache of min(w, Tk) positions and
  themselves, whatever Tk.
  """
  if mode == "decode":      # T new tokens against the rolling cache of w positions
    return cost_lib.decode_kv(d._replace(Tk=min(_check_window(window), d.Tk) + d.Tq),
                              itemsize=itemsize)
  plan = Plan(d.Tq, d.Tk, window, causal)
  pairs = d.B * d.Hq * plan.nq * plan.b * plan.S
  gathered = 4 * d.B * d.Hkv * plan.nq * plan.S * (d.D + d.Dv)  # fp32 K/V blocks
  return cost_lib.gathered_pairs(d, name=NAME, mode=mode, itemsize=itemsize, pairs=pairs,
                                 kv_bytes=gathered)


def init_window_cache(name, *, batch, max_len, num_kv_heads, head_dim, v_head_dim=None,
                      dtype=jnp.float32, cache_dtype=None, window=DEFAULT_WINDOW,
                      positions=None, **unused) -> KV.KVCache:
  """An empty rolling cache of min(window, max_len) positions (a KV.KVCache whose slot s
  holds position p with p % capacity == s). max_len only caps it: the sequence may grow
  past the capacity, the oldest positions are overwritten."""
  del unused
  return KV.init_kv_cache(name, batch=batch, max_len=min(_check_window(window), max_len),
                          num_kv_heads=num_kv_heads, head_dim=head_dim,
                          v_head_dim=v_head_dim, dtype=dtype, cache_dtype=cache_dtype,
                          positions=positions)


def window_cache_bytes(name, *, batch, max_len, window=DEFAULT_WINDOW, **kw) -> int:
  """The bytes `init_window_cache` allocates: a KV cache of min(window, max_len)
  positions (`kv_cache_bytes`), so the same at any context past the window."""
  return KV.kv_cache_bytes(name, batch=batch, max_len=min(_check_window(window), max_len),
                           **kw)


def window_step(state: KV.KVCache, q_t, k_t, v_t, *, window=DEFAULT_WINDOW, scale=None,
                positions=None, q_pos=None, k_pos=None, sinks=None, **kw):
  """out, state = step(state, q_t, k_t, v_t): T >= 1 new tokens at positions state.pos
  .. state.pos + T - 1, each attending to the keys p - w < j <= p (causal `local`);
  positions, q_pos, k_pos: their position scheme and explicit positions (RoPE keys are
  stored rotated, ALiBi's key positions kept per slot); sinks: the sink logits (Hq,)
  or None, in every step's softmax as in the forward pass.

  q_t: (B, T, Hq, D), k_t: (B, T, Hkv, D), v_t: (B, T, Hkv, Dv). Returns out (B, T, Hq,
  Dv) in q_t's dtype and the state with the last min(T, capacity) keys written.
  """
  unexpected(NAME, kw)
  w, W, T = _check_window(window), state.capacity, q_t.shape[1]
  # a cache capped at max_len < w must not wrap: past max_len it would drop keys that
  # are still in the window (it raises, or poisons the output when traced)
  capped = W < w
  pos = KV.concrete(state.pos)
  if capped and pos is not None and pos + T > W:
    raise C.AttentionError(f"local decode: {pos} + {T} positions > the cache's max_len "
                           f"{W} (smaller than the window {w})")
  ct = C.compute_dtype(q_t.dtype)
  pos, q_t, k_t = KV.step_positions(state, positions, q_t, k_t, q_pos, k_pos)
  d = C.Dims(q_t.shape[0], T, W + T, q_t.shape[2], k_t.shape[2], q_t.shape[3],
             v_t.shape[3])
  # the new keys and values as the cache stores them (and attends to them)
  new_k, ks_new = KV.encode(state.k, state.k_scale, C.kv_heads_first(k_t))  # (B, Hkv, T, ·)
  new_v, vs_new = KV.encode(state.v, state.v_scale, C.kv_heads_first(v_t))
  k = jnp.concatenate([state.k, new_k], axis=2)                     # (B, Hkv, W + T, D)
  v = jnp.concatenate([state.v, new_v], axis=2)
  ks = vs = None
  if ks_new is not None:
    ks = jnp.concatenate([state.k_scale, ks_new], axis=2)
    vs = jnp.concatenate([state.v_scale, vs_new], axis=2)
  # the position each key holds: slot s of the buffer the latest p < pos, p % W == s
  # (negative: empty), then the new tokens
  slot = jnp.arange(W)
  held = state.pos - 1 - jnp.mod(state.pos - 1 - slot, W)
  kpos = jnp.concatenate([held, state.pos + jnp.arange(T)])          # (W + T,)
  qpos = state.pos + jnp.arange(T)                                    # (T,)
  rel = kpos[None, :] - qpos[:, None]
  mask = ((kpos >= 0)[None, :] & (rel <= 0) & (rel > -w))[None, None, None]
  qs = C.split_heads_q(q_t, d).astype(ct) * C.default_scale(d.D, scale)
  kp = None
  if state.k_pos is not None:     # ALiBi: each slot's key position, then the new keys'
    new_p = jnp.broadcast_to(pos.k, (state.k_pos.shape[0], T))
    kp = jnp.concatenate([state.k_pos, new_p], axis=1)               # (B, W + T)
  bias = KV.cache_bias(pos, dataclasses.replace(state, k_pos=kp), d, ct)
  o = KV.dot_attend(qs, k, ks, v, vs, mask, ct, bias,
                    grouped_sink(check_sinks(sinks, d, NAME), d, 5, ct))
  m = min(T, W)                                    # the newest m tokens fill m slots
  slots = jnp.mod(state.pos + T - m + jnp.arange(m), W)
  put = lambda buf, x: buf.at[:, :, slots].set(x[:, :, T - m:])
  new = dataclasses.replace(
      state, k=put(state.k, new_k), v=put(state.v, new_v),
      k_scale=None if ks_new is None else put(state.k_scale, ks_new),
      v_scale=None if vs_new is None else put(state.v_scale, vs_new), pos=state.pos + T,
      k_pos=None if kp is None else state.k_pos.at[:, slots].set(kp[:, W + T - m:]))
  out = C.merge_heads_out(o)
  if capped:
    out = jnp.where(state.pos + T <= W, out, jnp.nan)
  return out.astype(q_t.dtype), new


register(Variant(
    name=NAME, fn=local, paper="Parmar et al. 2018; Beltagy et al. 2020 (Longformer)",
    time="O(N w D)", memory="O(N w)", causal=True, masks="key padding",
    decode="rolling KV cache of the last w positions (fp, int8 or fp8), O(w) per token",
    decode_impl=DecodeImpl(init_window_cache, window_step, state_bytes=window_cache_bytes),
    cost=_cost, positional=True, params={"sinks": KV.SINKS},
    family="efficient",
    summary="sliding window of w keys (causal) or ±w/2 keys, blocked, never N×N",
    positions=P.takes_qk("bias on the gathered blocks, O(N w)"),
    segments="the window's keys in the query's own segment (ids gathered per block, "
             "O(N w))"))
