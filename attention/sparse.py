"""`sparse`: Sparse Transformer attention (Child et al. 2019), blockwise in O(N sqrt N).

Each query attends to the union of a local and a strided/summary set of keys (the
paper's "merged head" form of its two factorized patterns), with one softmax over
the union; scores are scaled dot products as in `softmax`. With stride l:

  pattern="strided"  (for data with a periodic structure, e.g. images)
    causal=True:  j <= i  and  (i - j < l  or  (i - j) % l == 0)
    causal=False: |i - j| < l  or  (i - j) % l == 0
  pattern="fixed"    (for text): c summary columns per block of l positions
    causal=False: j // l == i // l  or  j % l >= l - c
    causal=True:  the same, and j <= i

Stride default: l = ceil(sqrt(N)) when `stride` is None, which makes both patterns
O(N sqrt N). `c` (fixed only) defaults to 1 and must satisfy 1 <= c <= l.

Algorithm: positions are padded to nb * l (nb = ceil(N / l)) and cut into nb blocks
of l. Local part: strided attends its own block and the previous one (and the next
one when not causal) -- 2l or 3l keys per block, built by shifting the blocked K;
fixed attends its own block (l keys). Second part: strided queries of residue r
attend the "column" K[r::l] (nb keys, gathered by a transpose of the blocked K);
fixed queries attend the nb * c summary keys. Both parts' logits are concatenated
and normalised by one softmax; a key that is in both parts (strided: j == i; fixed:
summary keys of the query's own block) is masked out of the second part, so no key
counts twice. Scores are (B, Hkv, G, nb, l, 3l + nb) at most: never an N x N array.

Shapes: q (B, T, Hq, D), k (B, T, Hkv, D), v (B, T, Hkv, Dv), Hq % Hkv == 0. Tq must
equal Tk (the pattern is defined on one sequence); Tq != Tk is refused.
Dtypes: scores and softmax statistics in float32 for bf16/fp16/fp32 inputs (float64
stays float64); the output is in q's dtype.
Masks: key-padding only (broadcastable to (B, Hq, 1, T)); a mask with a full Tq axis
is refused with an AttentionError. A query with no allowed key returns zeros.
Segments (packed rows, q_seg/k_seg; pattern="strided" with a given stride only): both
parts' keys are masked to the query's own segment, the key ids blocked, shifted and
transposed as the keys. The strided pattern depends on i - j only, so with the same
stride a packed segment sees, by offset, the keys it sees alone. stride=None refuses
them: its ceil(sqrt(T)) is the whole row's length, not the segment's, so a packed
segment would get another pattern than alone. pattern="fixed" refuses them: its
blocks and summary columns sit at multiples of l in the row, so a segment's pattern
would depend on where it was packed.
Decoding (causal only): the exact family's KV cache (fp, int8 or fp8) of max_len
positions, each step attending to the cached keys its pattern allows, so one step
costs O(N D) like a softmax cache step (the pattern's O(sqrt N) keys are picked by a
mask over the cache). With stride=None the stride is ceil(sqrt(max_len)): the steps
equal the causal forward pass over max_len positions.

Positions (attention.core.positions): RoPE rotates q and k (the cache stores rotated keys);
ALiBi's bias is computed for both parts' gathered keys from their positions (blocked,
shifted and transposed exactly as the keys), O(N sqrt N) like the scores. The pattern
itself is by index, as the contract's causality.
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from attention.core import common as C
from attention.core import kv_cache as KV
from attention.core import positions as Pos
from attention.core.decode import DecodeImpl
from attention.core.registry import Variant, register
from attention.core.scores import masked_softmax
from attention.core.common import unexpected

from attention.core import cost_model as cost_lib

NAME = "sparse"
PATTERNS = ("strided", "fixed")
# Why pattern="fixed" refuses segment ids.
FIXED_SEGMENTS = ("its blocks and summary columns sit at multiples of the stride in the "
                  "row, so a segment's pattern would depend on where it was packed (a "
                  "packed row would not equal its segments run alone); use "
                  "pattern='strided', whose pattern depends on i - j only")

# Why the default stride (None) refuses segment ids.
DEFAULT_STRIDE_SEGMENTS = (
    "the default stride ceil(sqrt(T)) is the whole row's, so a packed segment would get "
    "another pattern than it gets alone; give the stride (e.g. "
    "--config.model.attention_options.sparse.stride=16)")


def default_stride(N: int) -> int:
  """ceil(sqrt(N)), at least 1."""
  return max(1, math.isqrt(max(N - 1, 0)) + 1) if N > 1 else 1


def _is_int(x):
  return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


class Plan:
  """Static geometry of one `sparse` call (shared by the function and its cost)."""

  def __init__(self, N: int, pattern: str, stride, c, causal: bool):
    if pattern not in PATTERNS:
      raise C.AttentionError(
          f"sparse attention: pattern must be one of {PATTERNS}, got {pattern!r}")
    if stride is None:
      stride = default_stride(N)
    if not _is_int(stride) or stride < 1:
      raise C.AttentionError(
          f"sparse attention: stride must be a positive int or None, got {stride!r}")
    l = int(stride)
    if pattern == "strided":
      if c is not None:
        raise C.AttentionError(
            "sparse attention: c (summary columns) applies only to pattern='fixed'")
      c = 0
    else:
      c = 1 if c is None else c
      if not _is_int(c) or not 1 <= c <= l:
        raise C.AttentionError(
            f"sparse attention: c must be an int with 1 <= c <= stride ({l}), got {c!r}")
    self.N, self.pattern, self.l, self.c, self.causal = N, pattern, l, int(c), causal
    self.nb = -(-N // l)
    self.Np = self.nb * l
    if pattern == "strided":
      self.S_local = (2 if causal else 3) * l
      self.S_second = self.nb
    else:
      self.S_local = l
      self.S_second = self.nb * self.c


def _shift(x, s, axis):
  """y[n] = x[n - s] along `axis` (s = +1 or -1), zero / False filled."""
  axis = axis % x.ndim
  widths = [(0, 0)] * x.ndim
  widths[axis] = (1, 0) if s > 0 else (0, 1)
  y = jnp.pad(x, widths)
  sl = [slice(None)] * x.ndim
  sl[axis] = slice(0, x.shape[axis]) if s > 0 else slice(1, None)
  return y[tuple(sl)]


def _neighbours(x, causal, block_axis, pos_axis):
  """Blocked x -> concat of (previous, own[, next]) blocks along pos_axis."""
  parts = [_shift(x, 1, block_axis), x]
  if not causal:
    parts.append(_shift(x, -1, block_axis))
  return jnp.concatenate(parts, axis=pos_axis)


def sparse(q, k, v, *, causal=False, mask=None, pattern="strided", stride=None, c=None,
           scale=None, positions=None, q_pos=None, k_pos=None, q_seg=None, k_seg=None,
           **kw):
  """Sparse Transformer attention under the contract (see the module docstring).

  q: (B, T, Hq, D), k: (B, T, Hkv, D), v: (B, T, Hkv, Dv) (Tq must equal Tk).
  pattern: "strided" or "fixed"; stride: l (default ceil(sqrt(T))); c: summary
    columns per block for "fixed" (default 1, 1 <= c <= l).
  mask: key-padding only, bool broadcastable to (B, Hq, 1, T); True = may attend.
  scale: multiplies q.k; default 1/sqrt(D).
  positions, q_pos (B|1, T), k_pos (B|1, T): rope/rope2d (q, k rotated) or alibi (a
    bias on the gathered keys); see attention.core.positions.
  q_seg, k_seg (B|1, T): segment ids of packed rows (attention.core.common), "strided" with a
    given stride only (stride=None refuses them):
    a query sees its pattern's keys in its own segment.
  Returns (B, T, Hq, Dv) in q's dtype; a query with no allowed key gets zeros.
  Raises AttentionError for Tq != Tk, a dense mask, bad pattern/stride/c, or an
  unexpected keyword.
  """
  unexpected(NAME, kw)
  d = C.check_qkv(q, k, v, NAME)
  if d.Tq != d.Tk:
    C.refuse(NAME, f"Tq != Tk (got Tq={d.Tq}, Tk={d.Tk})",
             "the sparse pattern is defined on one sequence, so queries and keys "
             "must have the same length")
  mask = C.check_key_mask(mask, d, NAME, C.DENSE_MASK)
  q_seg, k_seg = C.check_segments(q_seg, k_seg, d, NAME)
  at = Pos.prepare(NAME, positions, d, q_pos, k_pos)
  q, k = Pos.rotate_qk(at, q, k)
  P = Plan(d.Tq, pattern, stride, c, causal)
  if q_seg is not None and P.pattern != "strided":
    C.refuse(NAME, "segment ids with pattern='fixed'", FIXED_SEGMENTS)
  if q_seg is not None and stride is None:
    C.refuse(NAME, "segment ids with stride=None", DEFAULT_STRIDE_SEGMENTS)
  N, l, nb, Np = P.N, P.l, P.nb, P.Np
  ct = C.compute_dtype(q.dtype)
  pad = Np - N
  alibi = at is not None and at.alibi
  if alibi:                  # blocked explicit positions (B|1, nb, l)
    qp_b, kp_b = (C.pad_axis(p, 1, Np).reshape(-1, nb, l) for p in (at.q, at.k))
  if q_seg is not None:      # blocked segment ids (B|1, nb, l); padding is masked anyway
    qs_b, ks_b = (C.pad_axis(x, 1, Np).reshape(-1, nb, l) for x in (q_seg, k_seg))

  def blocked(x, n_lead):  # (…, N, F) -> (…, nb, l, F)
    if pad:
      x = jnp.pad(x, ((0, 0),) * n_lead + ((0, pad), (0, 0)))
    return x.reshape(x.shape[:n_lead] + (nb, l, x.shape[-1]))

  qb = blocked(C.split_heads_q(q, d).astype(ct), 3)        # (B, Hkv, G, nb, l, D)
  kb = blocked(C.kv_heads_first(k).astype(ct), 2)          # (B, Hkv, nb, l, D)
  vb = blocked(C.kv_heads_first(v).astype(ct), 2)          # (B, Hkv, nb, l, Dv)
  s = C.default_scale(d.D, scale)

  # Key-padding mask in blocked form (B|1, Hkv|1, G|1, nb, l), or None.
  km = None
  if mask is not None:
    mg = C.group_mask(mask, d)[:, :, :, 0, :]
    mg = jnp.broadcast_to(mg, mg.shape[:3] + (N,))
    if pad:
      mg = jnp.pad(mg, ((0, 0),) * 3 + ((0, pad),), constant_values=False)
    km = mg.reshape(mg.shape[:3] + (nb, l))

  pos = jnp.arange(Np).reshape(nb, l)                      # position of (block, row)
  qpos = pos[:, :, None]                                   # (nb, l, 1)
  blk = jnp.arange(nb)

  # ---- local part ----------------------------------------------------------
  if P.pattern == "strided":
    kl = _neighbours(kb, causal, 2, 3)                     # (B, Hkv, nb, S_local, D)
    vl = _neighbours(vb, causal, 2, 3)
    # true key positions: block n sees (n - 1) * l + s, s in [0, S_local)
    kpos = ((blk[:, None] - 1) * l + jnp.arange(P.S_local)[None, :])[:, None, :]
    loc_ok = (jnp.abs(qpos - kpos) < l) & (kpos >= 0) & (kpos < N)
    km_l = None if km is None else _neighbours(km, causal, -2, -1)
  else:
    kl, vl = kb, vb
    kpos = pos[:, None, :]
    loc_ok = kpos < N
    km_l = km
  if causal:
    loc_ok = loc_ok & (kpos <= qpos)
  loc_ok = loc_ok[None, None, None]                        # (1, 1, 1, nb, l, S_local)
  if km_l is not None:
    loc_ok = loc_ok & km_l[..., :, None, :]
  logit_l = jnp.einsum("bhgnrd,bhnsd->bhgnrs", qb, kl) * s
  if alibi:                  # the local keys' positions, gathered as the keys
    kpl = _neighbours(kp_b, causal, 1, 2) if P.pattern == "strided" else kp_b
    logit_l = logit_l + Pos.block_bias(at, d, qp_b, kpl, ct)
  if q_seg is not None:      # the local keys' ids, gathered as the keys (strided only)
    ksl = _neighbours(ks_b, causal, 1, 2)                  # (B|1, nb, S_local)
    loc_ok = loc_ok & (qs_b[..., :, None] == ksl[..., None, :])[:, None, None]

  # ---- strided columns / fixed summaries -----------------------------------
  if P.pattern == "strided":
    kc = jnp.swapaxes(kb, 2, 3)                            # (B, Hkv, l, nb, D): [r, m]
    vc = jnp.swapaxes(vb, 2, 3)
    logit_2 = jnp.einsum("bhgnrd,bhrmd->bhgnrm", qb, kc) * s
    if alibi:                # column m of residue r holds position kp_b[m, r]
      kpc = jnp.swapaxes(kp_b, 1, 2)                       # (B|1, l, nb)
      dist = jnp.abs(qp_b[..., None] - kpc[:, None])        # (B|1, nb, l, nb)
      logit_2 = logit_2 + Pos.bias_of_distance(at, d, dist, ct)
    m = blk[None, None, :]                                 # key block (1, 1, nb)
    n = blk[:, None, None]                                 # query block (nb, 1, 1)
    kp2 = m * l + jnp.arange(l)[None, :, None]             # (1, l, nb)
    ok2 = (kp2 < N) & ((m < n) if causal else (m != n))    # (nb, l, nb)
    ok2 = ok2[None, None, None]
    if q_seg is not None:    # column m of residue r holds id ks_b[m, r]
      ksc = jnp.swapaxes(ks_b, 1, 2)                       # (B|1, l, nb)
      ok2 = ok2 & (qs_b[..., None] == ksc[:, None])[:, None, None]
    if km is not None:
      ok2 = ok2 & jnp.swapaxes(km, -1, -2)[..., None, :, :]
    out_2 = lambda p: jnp.einsum("bhgnrm,bhrmd->bhgnrd", p, vc)
  else:
    cc = P.c
    ks = kb[:, :, :, l - cc:].reshape(d.B, d.Hkv, nb * cc, d.D)
    vs = vb[:, :, :, l - cc:].reshape(d.B, d.Hkv, nb * cc, d.Dv)
    logit_2 = jnp.einsum("bhgnrd,bhsd->bhgnrs", qb, ks) * s
    if alibi:                # the summary keys' positions
      ksp = kp_b[:, :, l - cc:].reshape(-1, 1, nb * cc)
      logit_2 = logit_2 + Pos.block_bias(at, d, qp_b, jnp.broadcast_to(
          ksp, (ksp.shape[0], nb, nb * cc)), ct)
    sm = jnp.repeat(blk, cc)                               # block of each summary key
    sp = sm * l + jnp.tile(jnp.arange(l - cc, l), nb)      # its position
    n = blk[:, None, None]
    ok2 = (sp < N)[None, None, :] & ((sm < n) if causal else (sm != n))  # (nb, 1, S2)
    ok2 = ok2[None, None, None]
    if km is not None:
      ok2 = ok2 & km[..., :, l - cc:].reshape(km.shape[:3] + (nb * cc,))[..., None, None, :]
    out_2 = lambda p: jnp.einsum("bhgnrs,bhsd->bhgnrd", p, vs)

  # ---- one softmax over the union --------------------------------------------
  lead = jnp.broadcast_shapes(loc_ok.shape[:-1], ok2.shape[:-1], logit_l.shape[:-1])
  ok = jnp.concatenate([jnp.broadcast_to(loc_ok, lead + loc_ok.shape[-1:]),
                        jnp.broadcast_to(ok2, lead + ok2.shape[-1:])], axis=-1)
  p = masked_softmax(jnp.concatenate([logit_l, logit_2], axis=-1), ok)
  o = (jnp.einsum("bhgnrs,bhnsd->bhgnrd", p[..., : P.S_local], vl)
       + out_2(p[..., P.S_local:]))
  o = o.reshape(d.B, d.Hkv, d.G, Np, d.Dv)[:, :, :, :N]
  return C.merge_heads_out(o).astype(q.dtype)


def _cost(d, *, causal=False, mode="fwd", itemsize=4, pattern="strided", stride=None,
          c=None, **kw):
  """Cost of the blockwise computation: every computed (query, key) pair counts.

  pairs = B * Hq * Np * (S_local + S_second); with l = sqrt(N): about 4 N sqrt(N)
  (strided, two-sided), 3 N sqrt(N) (strided causal), 2 N sqrt(N) (fixed, c = 1).
  mode="decode": a KV-cache step over all Tk cached positions (the mask picks the
  pattern's keys, the cache is read whole).
  """
  if mode == "decode":      # the whole KV cache is read, under the pattern's mask
    return cost_lib.decode_kv(d, itemsize=itemsize)
  P = Plan(d.Tq, pattern, stride, c, causal)
  pairs = d.B * d.Hq * P.Np * (P.S_local + P.S_second)
  copies = (P.S_local // P.l if pattern == "strided" else 1) + 1  # shifted K/V copies
  kv = 4 * d.B * d.Hkv * P.Np * (d.D + d.Dv) * copies
  return cost_lib.gathered_pairs(d, name=NAME, mode=mode, itemsize=itemsize, pairs=pairs,
                                 kv_bytes=kv)


def pattern_mask(i, j, P: Plan):
  """The causal pattern of `P` (see the module docstring): bool, True where query
  position i may attend key position j (broadcasting int arrays)."""
  l = P.l
  if P.pattern == "strided":
    near = (i - j < l) | ((i - j) % l == 0)
  else:
    near = (j // l == i // l) | (j % l >= l - P.c)
  return near & (j <= i)


def init_sparse_cache(name, *, batch, max_len, num_kv_heads, head_dim, v_head_dim=None,
                      dtype=jnp.float32, cache_dtype=None, pattern="strided",
                      stride=None, c=None, positions=None, **unused) -> KV.KVCache:
  """An empty KV cache of max_len positions (the pattern's options are checked here)."""
  del unused
  Plan(max_len, pattern, stride, c, True)
  return KV.init_kv_cache(name, batch=batch, max_len=max_len, num_kv_heads=num_kv_heads,
                          head_dim=head_dim, v_head_dim=v_head_dim, dtype=dtype,
                          cache_dtype=cache_dtype, positions=positions)


def sparse_step(state: KV.KVCache, q_t, k_t, v_t, *, pattern="strided", stride=None,
                c=None, scale=None, positions=None, q_pos=None, k_pos=None, **kw):
  """out, state = step(state, q_t, k_t, v_t): T >= 1 new tokens at positions state.pos
  .. state.pos + T - 1, each attending to the earlier and new keys its causal pattern
  allows. q_t: (B, T, Hq, D), k_t: (B, T, Hkv, D), v_t: (B, T, Hkv, Dv); out (B, T,
  Hq, Dv) in q_t's dtype. A capacity overflow raises (concrete state.pos) or gives NaN.
  """
  unexpected(NAME, kw)
  T, N = q_t.shape[1], state.capacity
  P = Plan(N, pattern, stride, c, True)
  pos, q_t, k_t = KV.step_positions(state, positions, q_t, k_t, q_pos, k_pos)
  new = KV.append(state, k_t, v_t, None if pos is None else pos.k)
  ct = C.compute_dtype(q_t.dtype)
  d = C.Dims(q_t.shape[0], T, N, q_t.shape[2], k_t.shape[2], q_t.shape[3], v_t.shape[3])
  mask = pattern_mask(state.pos + jnp.arange(T)[:, None], jnp.arange(N)[None, :], P)
  qs = C.split_heads_q(q_t, d).astype(ct) * C.default_scale(d.D, scale)
  o = KV.dot_attend(qs, new.k, new.k_scale, new.v, new.v_scale, mask[None, None, None],
                    ct, KV.cache_bias(pos, new, d, ct))
  out = jnp.where(state.pos + T <= N, C.merge_heads_out(o), jnp.nan)
  return out.astype(q_t.dtype), new


register(Variant(
    name=NAME, fn=sparse, paper="Child et al. 2019 (Sparse Transformer)",
    time="O(N √N D)", memory="O(N √N)", causal=True, masks="key padding",
    decode="KV cache (fp, int8 or fp8) under the pattern's mask, O(N) per token",
    decode_impl=DecodeImpl(init_sparse_cache, sparse_step),
    cost=_cost, cross=False, positional=True,
    family="efficient",
    summary="strided or fixed factorized pattern, local + column keys, one softmax",
    positions=Pos.takes_qk("bias on the gathered keys of both parts, O(N √N)"),
    segments="pattern='strided' with a given stride: both parts' keys masked to the "
             "query's segment (ids gathered as the keys); refused with stride=None (a "
             "row-wide default stride) and pattern='fixed' (row-aligned blocks)"))
