"""Reformer: locality-sensitive-hashing (LSH) attention with sorted, chunked buckets.

Kitaev, Kaiser & Levskaya 2020, "Reformer: The Efficient Transformer".

Definition (per batch element and head, N = Tq = Tk positions):

  rotations R: (n_hashes, D, n_buckets // 2) random (see `make_rotations`), or
               (Hkv, n_hashes, D, n_buckets // 2): one set per key/value head.
  hash, round r:  h_r(x) = argmax([x R_r ; -x R_r])  in [0, n_buckets)
  Queries and keys are hashed with the SAME rotations (the query heads of a GQA group
  use their kv head's rotations). In round r:
    * queries are stably sorted by (h_r(q_i), i), keys by (h_r(k_j), j);
    * both sorted sequences are cut into chunks of `chunk_size` consecutive entries
      (the last chunk may be short);
    * a query in query-chunk c may attend to the keys in key-chunks c and c - 1
      ("look one back"; chunk 0 looks back at nothing: no wrap-around);
    * further restricted by the key-padding mask and, if causal, key j <= query i;
    * self rule (as in the authors' implementation): the logit of the key at the
      query's own position is replaced by the constant SELF_LOGIT = -1e5, so a
      query attends to itself only when it has no other allowed key in that round;
    * o_r(i) = softmax over the allowed keys of (q_i . k_j * scale) times v_j, with
      lse_r(i) the log-sum-exp of those logits (-inf, i.e. no weight, if none allowed).
  Rounds are combined with o(i) = sum_r softmax_r(lse_r(i)) o_r(i), which equals one
  softmax over the union of the rounds' key sets with a key counted once per round it
  appears in. The paper's correction for such duplicates is NOT applied.
  A query with no allowed key in any round returns zeros.

Shared QK: the paper sets k_j = q_j / |q_j|, which makes h(k_j) = h(q_j), so query and
key chunks hold the same buckets. This function uses `k` as given (the contract) and
sorts queries and keys separately; pass k = q / |q| (or k = q) for the paper's
shared-QK attention. With unrelated q and k (or GQA, where a kv head's keys are not
any query head's queries) the definition above still holds exactly, but a query's
bucket-mates may fall outside its chunk window more often.

Arguments (keyword only, besides q, k, v, causal, mask):
  rotations:  see above; n_hashes >= 1, n_buckets = 2 * rotations.shape[-1] >= 2.
  chunk_size: entries per chunk (default 64, clipped to N).
  scale:      logit scale, default 1/sqrt(D).

Cost: hashing O(N D n_buckets n_hashes), sorting O(n_hashes N log N), attention
O(n_hashes N chunk_size (D + Dv)); memory O(n_hashes N chunk_size).

Dtypes: hashes, logits and softmax statistics in float32 for bf16/fp16/fp32 inputs
(float64 stays float64); the output is cast to q's dtype.

Positions (attention.core.positions): RoPE rotates q and k before they are hashed, so
a token's bucket depends on its position as well as its content (shared QK survives:
k = q / |q| rotated is the rotated q normalised); within a chunk the scores depend on
i - j as in softmax. ALiBi's bias is computed in each chunk from the positions sorted
with the queries and keys.

Segments (packed rows) are refused (see the record): the hash sort and its chunks run
over the whole row, so a query's candidate keys depend on the other segments' tokens.

Refused with `AttentionError`: segment ids; Tq != Tk; masks that vary along the query axis (only
key padding, broadcastable to (B, Hq, 1, Tk), is supported: it is gathered with the
key sort); ill-shaped rotations; chunk_size < 1.
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

NAME = "reformer"
SELF_LOGIT = -1e5
DEFAULT_CHUNK = 64
DEFAULT_N_HASHES = 2


def make_rotations(key, n_hashes: int, D: int, n_buckets: int, dtype=jnp.float32):
  """Random rotations (n_hashes, D, n_buckets // 2) with N(0, 1) entries."""
  if n_hashes < 1:
    raise C.AttentionError(f"{NAME}: n_hashes must be >= 1, got {n_hashes}")
  if n_buckets < 2 or n_buckets % 2:
    raise C.AttentionError(f"{NAME}: n_buckets must be even and >= 2, got {n_buckets}")
  return jax.random.normal(key, (n_hashes, D, n_buckets // 2), dtype)


def _rotations(rotations, d: C.Dims):
  """(Hkv|1, n_hashes, D, nb2), validated."""
  R = jnp.asarray(rotations)
  if R.ndim == 3:
    R = R[None]
  elif not (R.ndim == 4 and R.shape[0] == d.Hkv):
    raise C.AttentionError(
        f"attention variant '{NAME}': rotations must have shape (n_hashes, D, "
        f"n_buckets // 2) or (Hkv={d.Hkv}, n_hashes, D, n_buckets // 2); got {R.shape}")
  if R.shape[1] < 1 or R.shape[3] < 1 or R.shape[2] != d.D:
    raise C.AttentionError(
        f"attention variant '{NAME}': rotations {R.shape} need n_hashes >= 1, "
        f"n_buckets // 2 >= 1 and a D axis of {d.D}")
  return R


def _hash(x, R):
  """x: (B, Hkv, [G,] N, D), R: (Hkv|1, n, D, nb2) -> buckets (B, Hkv, [G,] n, N) int32."""
  if x.ndim == 5:
    xr = jnp.einsum("bhgtd,hrdc->bhgrtc", x, R)
  else:
    xr = jnp.einsum("bhtd,hrdc->bhrtc", x, R)
  return jnp.argmax(jnp.concatenate([xr, -xr], axis=-1), axis=-1).astype(jnp.int32)


def _sort(buckets, N, Np, nb):
  """Stable sort by (bucket, position); pads N -> Np with entries sorted last.

  buckets (..., N) -> perm (..., Np) int32 of positions in [0, Np).
  """
  pad = [(0, 0)] * (buckets.ndim - 1) + [(0, Np - N)]
  b = jnp.pad(buckets, pad, constant_values=nb)
  keyv = b * Np + jnp.arange(Np, dtype=jnp.int32)
  return jnp.argsort(keyv, axis=-1).astype(jnp.int32)


def _gather(x, perm):
  """x (..., Np, F) and perm (..., n, Np) (x without the round axis) -> (..., n, Np, F)."""
  x = jnp.broadcast_to(x[..., None, :, :], perm.shape + x.shape[-1:])
  return jnp.take_along_axis(x, perm[..., None], axis=-2)


def _look_one_back(x, fill):
  """(..., nc, c, F) -> (..., nc, 2c, F): each chunk's previous chunk, then itself."""
  prev = jnp.concatenate([jnp.full_like(x[..., :1, :, :], fill), x[..., :-1, :, :]],
                         axis=-3)
  return jnp.concatenate([prev, x], axis=-2)


def reformer(q, k, v, *, causal=False, mask=None, rotations, chunk_size=DEFAULT_CHUNK,
             scale=None, positions=None, q_pos=None, k_pos=None, q_seg=None, k_seg=None,
             **kw):
  """LSH attention under the contract (see the module docstring); segment ids are
  refused with the record's reason."""
  refuse_segments(NAME, q_seg, k_seg)
  unexpected(NAME, kw)
  d = C.check_qkv(q, k, v, NAME)
  mask = C.check_key_mask(mask, d, NAME)
  if d.Tq != d.Tk:
    C.refuse(NAME, f"Tq != Tk (got Tq={d.Tq}, Tk={d.Tk})",
             "LSH attention sorts queries and keys of one sequence into aligned chunks")
  if int(chunk_size) < 1:
    raise C.AttentionError(f"attention variant '{NAME}': chunk_size must be >= 1")
  at = P.prepare(NAME, positions, d, q_pos, k_pos)
  q, k = P.rotate_qk(at, q, k)
  R = _rotations(rotations, d)
  n, nb = R.shape[1], 2 * R.shape[3]
  N = d.Tq
  c = min(int(chunk_size), N)
  nc = -(-N // c)
  Np = nc * c
  ct = C.compute_dtype(q.dtype)
  s = C.default_scale(d.D, scale)
  B, Hkv = d.B, d.Hkv

  qg = C.split_heads_q(q, d).astype(ct)                 # (B, Hkv, G, N, D)
  kg = C.kv_heads_first(k).astype(ct)                   # (B, Hkv, N, D)
  vg = C.kv_heads_first(v).astype(ct)                   # (B, Hkv, N, Dv)
  Rc = R.astype(ct)
  perm_q = _sort(_hash(qg, Rc), N, Np, nb)              # (B, Hkv, G, n, Np)
  perm_k = _sort(_hash(kg, Rc), N, Np, nb)              # (B, Hkv, n, Np)

  padN = lambda x: jnp.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, Np - N), (0, 0)])
  pos = jnp.arange(Np, dtype=jnp.int32)
  valid = pos < N                                       # (Np,)
  if mask is not None:
    km = C.group_mask(mask, d)[..., 0, :]               # (B|1, Hkv|1, G|1, N)
    km = jnp.pad(km, [(0, 0)] * 3 + [(0, Np - N)], constant_values=False)
    valid = jnp.logical_and(valid, km)
  Gm = valid.shape[2] if valid.ndim == 4 else 1        # 1 or G (per-query-head mask)
  valid = jnp.broadcast_to(valid, (B, Hkv, Gm, Np))

  sq = _gather(padN(qg), perm_q)                        # (B, Hkv, G, n, Np, D)
  sk = _gather(padN(kg), perm_k)                        # (B, Hkv, n, Np, D)
  sv = _gather(padN(vg), perm_k)                        # (B, Hkv, n, Np, Dv)
  kpos = perm_k                                         # (B, Hkv, n, Np)
  kval = jnp.take_along_axis(
      jnp.broadcast_to(valid[:, :, :, None, :], (B, Hkv, Gm, n, Np)),
      jnp.broadcast_to(perm_k[:, :, None], (B, Hkv, Gm, n, Np)), axis=-1)

  ch = lambda x: x.reshape(x.shape[:-2] + (nc, c) + x.shape[-1:])  # (..., Np, F) -> chunks
  cq = ch(sq)                                           # (B, Hkv, G, n, nc, c, D)
  ck = _look_one_back(ch(sk), 0.0)                      # (B, Hkv, n, nc, 2c, D)
  cv = _look_one_back(ch(sv), 0.0)                      # (B, Hkv, n, nc, 2c, Dv)
  ckpos = _look_one_back(ch(kpos[..., None]), -1)[..., 0]        # (B, Hkv, n, nc, 2c)
  ckval = _look_one_back(ch(kval[..., None]), False)[..., 0]     # (B, Hkv, Gm, n, nc, 2c)
  cqpos = ch(perm_q[..., None])                         # (B, Hkv, G, n, nc, c, 1)

  logits = jnp.einsum("bhgrncd,bhrnkd->bhgrnck", cq, ck) * s
  if at is not None and at.alibi:    # explicit positions, sorted as the queries / keys
    sort = lambda p, perm: jnp.take_along_axis(
        jnp.broadcast_to(C.pad_axis(p, 1, Np).reshape(p.shape[:1] + (1,) * (perm.ndim - 2)
                                                      + (Np,)), perm.shape), perm, axis=-1)
    cq_p = ch(sort(at.q, perm_q)[..., None])[..., 0]             # (B, Hkv, G, n, nc, c)
    ck_p = _look_one_back(ch(sort(at.k, perm_k)[..., None]), 0)[..., 0]  # (.., n, nc, 2c)
    dist = jnp.abs(cq_p[..., :, None] - ck_p[:, :, None, ..., None, :]).astype(ct)
    logits = logits - P.grouped_slopes(at, d, ct)[:, :, None, None, None, None] * dist
  kp = ckpos[:, :, None, :, :, None, :]                 # (B, Hkv, 1, n, nc, 1, 2c)
  allowed = ckval[..., None, :]                         # (B, Hkv, Gm, n, nc, 1, 2c)
  if causal:
    allowed = jnp.logical_and(allowed, kp <= cqpos)
  logits = jnp.where(kp == cqpos, jnp.asarray(SELF_LOGIT, ct), logits)
  logits = jnp.where(allowed, logits, C.NEG)
  m = jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
  p = jnp.where(allowed, jnp.exp(logits - m), 0.0)
  l = jnp.sum(p, axis=-1, keepdims=True)
  o = jnp.einsum("bhgrnck,bhrnkd->bhgrncd", p, cv) / jnp.where(l == 0, 1.0, l)
  lse = jnp.where(l > 0, m + jnp.log(jnp.where(l > 0, l, 1.0)), C.NEG)[..., 0]

  # back to position order: (B, Hkv, G, n, Np, ·) -> (B, Hkv, G, n, N, ·)
  o = o.reshape(o.shape[:4] + (Np,) + o.shape[-1:])
  lse = lse.reshape(lse.shape[:4] + (Np,))
  inv = jnp.argsort(perm_q, axis=-1)
  o = jnp.take_along_axis(o, inv[..., None], axis=-2)[..., :N, :]
  lse = jnp.take_along_axis(lse, inv, axis=-1)[..., :N]
  # combine rounds: weights softmax_r(lse_r); rounds with no allowed key get weight 0
  w = jnp.exp(lse - jax.lax.stop_gradient(jnp.max(lse, axis=3, keepdims=True)))
  w = jnp.where(lse > C.NEG / 2, w, 0.0)
  wsum = jnp.sum(w, axis=3, keepdims=True)
  w = w / jnp.where(wsum == 0, 1.0, wsum)
  out = jnp.sum(w[..., None] * o, axis=3)               # (B, Hkv, G, N, Dv)
  return C.merge_heads_out(out).astype(q.dtype)


def _dims_kw(d: C.Dims, kw):
  R = kw.get("rotations")
  if R is not None:
    n, nb = R.shape[-3], 2 * R.shape[-1]
  else:
    n = kw.get("n_hashes", DEFAULT_N_HASHES)
    nb = kw.get("n_buckets", _default_buckets(d.Tq))
  c = min(int(kw.get("chunk_size", DEFAULT_CHUNK)), max(d.Tq, 1))
  return int(n), int(nb), c


def cost(d: C.Dims, *, causal=False, mode="fwd", itemsize=4, **kw) -> Cost:
  """Hashing + sorting (O(n N log N)) + chunked attention (O(n N 2c (D + Dv)))."""
  del causal  # the chunked path computes every in-window pair, masked or not
  n, nb, c = _dims_kw(d, kw)
  N = d.Tq
  nc = -(-N // c)
  Np = nc * c
  rows = d.B * (d.Hq + d.Hkv) * n                       # sequences hashed and sorted
  hash_flops = 2 * rows * N * d.D * (nb // 2) + rows * N * nb   # rotate + argmax
  sort_flops = rows * Np * max(1.0, math.log2(Np))
  pairs = d.B * d.Hq * n * Np * 2 * c
  attn = 2 * pairs * (d.D + d.Dv) + pairs * SOFTMAX_FLOPS_PER_SCORE
  combine = 4 * d.B * d.Hq * n * N * (d.Dv + 1)
  flops = hash_flops + sort_flops + attn + combine
  trans = pairs + 2 * d.B * d.Hq * n * N                # exp per pair, log + exp per round
  # sorted copies of q, k, v per round (fp32), written and read; per-round outputs.
  sorted_bytes = 4 * n * Np * d.B * (d.Hq * d.D + d.Hkv * (d.D + d.Dv))
  round_out = 4 * d.B * d.Hq * n * Np * (d.Dv + 1)
  byt = (io_bytes(d, itemsize) + 2 * sorted_bytes + 3 * round_out
         + NAIVE_SCORE_PASSES * 4 * pairs)
  temp = 2 * 4 * pairs + sorted_bytes + 2 * round_out
  if mode == "fwd":
    return Cost(flops, trans, byt, temp)
  if mode == "fwd_bwd":
    bwd = 2 * pairs * (2 * d.D + 2 * d.Dv) + 4 * pairs + 2 * combine
    return Cost(flops + bwd, trans, 3 * byt, 2 * temp)
  if mode == "decode":
    raise ValueError(f"cost mode 'decode': attention variant '{NAME}' cannot decode")
  raise ValueError(f"cost mode must be one of {MODES}, got {mode!r}")


def _default_buckets(max_len):
  """About one bucket per chunk (the paper's n_buckets ~ N / chunk_size), even, >= 2."""
  return max(2, 2 * math.ceil(max_len / (2 * DEFAULT_CHUNK)))


def _rot_shape(num_heads, head_dim, max_len):
  """(n_hashes=2, head_dim, n_buckets // 2), shared by all heads."""
  del num_heads
  return (DEFAULT_N_HASHES, head_dim, _default_buckets(max_len) // 2)


def _rot_init(key, shape, dtype):
  """N(0, 1) random rotations (models keep them fixed or redraw them)."""
  return jax.random.normal(key, shape, dtype)


register(Variant(
    name=NAME, fn=reformer, paper="Kitaev et al. 2020",
    time="O(N log N + N c D)", memory="O(N c)", causal=True, masks="key padding",
    decode=None, cost=cost,
    params={"rotations": ParamSpec(_rot_shape, _rot_init, trainable=False)}, cross=False,
    positional=True, content_routed=True, family="efficient",
    summary="LSH attention: hash-sort into buckets, attend within chunk and previous chunk",
    positions=P.takes_qk("bias in each chunk from the sorted positions") | {
        "rope": "q and k rotated before hashing (positions move buckets too)",
        "rope2d": "q and k rotated by (row, column) before hashing"},
    segments=Refused("the hash sort and its chunks run over the whole row: a masked "
                     "query would still lose chunk slots to other segments' tokens, so "
                     "a packed row would not equal its segments run alone")))
