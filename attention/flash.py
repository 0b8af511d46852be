"""`flash`: tiled exact attention with an online softmax, in pure JAX.

Dao et al. 2022 (FlashAttention) / Rabe & Staats 2021. The (Tq, Tk) matrix is never
materialised, forward or backward: the forward pass loops over query blocks and,
inside, over key/value blocks, keeping a running max `m`, a running sum `l` and an
output accumulator; it saves only the log-sum-exp per query. A custom VJP recomputes
each block's probabilities from that log-sum-exp (FlashAttention-2's backward), so
training memory is O(N) beyond the inputs.

Why hand-written: `jax.nn.dot_product_attention(implementation='xla')` materialises
the (B, H, Tq, Tk) matrix; on a CPU that is memory-bound and on long sequences it
does not fit. Blocks of a few hundred rows stay in cache.

Causal block skipping: key blocks entirely above the (bottom-right aligned) diagonal
are never visited, and blocks entirely below it skip the mask select; only the
diagonal blocks pay for masking. GQA/MQA: the G query heads that share a K/V head
are stacked into one (G * block_q, D) matrix, so K and V are read once per group.
Lengths that are not a multiple of the block are padded and the padding masked.

Positions: RoPE rotates q and k before the tiles (attention.core.positions). ALiBi's bias
-m_h |i - j| is computed inside the tile loop, forward and backward, from the tile's
query and key positions and the slopes (`Plan.block_bias`): never an N x N array.

Sinks (option `sinks`, gpt-oss's learned logit per head in the softmax's denominator):
the online softmax starts each row from its head's sink, running max = sink and
running sum = 1, which is exactly a first key of logit `sink` and value zero; the
backward's tiles are unchanged (that column's value is zero), and the sink's own
gradient is -sum_i exp(sink - lse_i) (do_i . out_i) (`sink_grad`).

Segments (packed rows, q_seg/k_seg): each visited tile is masked by its own query and
key segment ids (`Plan.block_mask`, a (G * bq, bk) comparison: never an N x N array),
and a tile whose query and key id ranges [min, max] are disjoint (so that they share
no segment) is skipped, forward and backward: a `lax.cond` around the tile's work
(`SegTiles.meet`). Packed rows lay their segments end to end with non-decreasing ids,
where a disjoint range means exactly "no shared segment"; a tile that mixes the
trailing padding (id 0) with a segment spans [0, s] and is visited. Any ids are masked
exactly; unordered ones just skip less. One step of the loop covers several (batch,
kv-head) slices, so a tile is skipped only when it is disjoint in every batch row of
the step (under `vmap` the cond runs both branches: correct, nothing skipped).
`visited_tiles` counts the tiles the passes run (tests/attention/test_flash.py).
"""
from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from attention.core import common as C
from attention.core import cost_model as cost_lib
from attention.core import positions as P
from attention.core.kv_cache import KV_CACHE, SINKS
from attention.core.registry import Variant, register
from attention.core.scores import SCALED_DOT, check_sinks
from attention.core.common import unexpected

# Chosen on a 2-core x86 CPU at N = 4096, D = 64 (`scripts/benchmark.py` times the
# alternatives in its "flash tile choices" table): what matters there is that one
# step's fp32 score tile stays in the core's L2 while the matmuls stay large. So a
# step works on one (batch, kv-head) slice with G * block_q ~ 1024 query rows and
# 512 keys (a 2 MiB tile); only short sequences stack several slices into one step
# (`_slices_per_step`), up to STEP_SCORE_BYTES (the default of flash's
# `step_score_bytes` option). Stacking all 8 heads of a 512 x 512 step (8 MiB) spills L2.
# Causal mode uses 512-row query blocks: the key blocks above the diagonal are
# skipped per query block, so finer query blocks skip more (at N = 4096 a causal
# forward visits 36 of 64 tiles with 512-row blocks, 20 of 32 with 1024 rows).
DEFAULT_BLOCK_Q = 1024
DEFAULT_BLOCK_Q_CAUSAL = 512
DEFAULT_BLOCK_K = 512
# Score-tile bytes up to which several slices share one step (rows x block_k x 4 bytes
# over its slices); a single slice's tile may be larger.
STEP_SCORE_BYTES = 2 ** 20


def block_size(T, want):
  """A block size for length T: `want`, or T rounded up to 8 if T is smaller."""
  return min(want, C.round_up(T, 8))


def blocks(d: C.Dims, block_q=None, block_k=None, causal=False):
  """The (block_q, block_k) that `flash` uses for sizes `d` (defaults, or the asked ones)."""
  rows = DEFAULT_BLOCK_Q_CAUSAL if causal else DEFAULT_BLOCK_Q
  return (block_size(d.Tq, block_q or max(64, rows // d.G)),
          block_size(d.Tk, block_k or DEFAULT_BLOCK_K))


class SegTiles(NamedTuple):
  """Each tile's segment-id range, for skipping tiles that share no segment.

  q_min, q_max: (B|1, nq) int32, the min and max id of each query tile; k_min, k_max:
  (B|1, nk) of each key tile."""
  q_min: Any
  q_max: Any
  k_min: Any
  k_max: Any

  def meet(self, i, j):
    """() bool: whether query tile i and key tile j have overlapping id ranges in some
    batch row (else they share no segment and the tile is skipped)."""
    return jnp.any((self.q_max[:, i] >= self.k_min[:, j])
                   & (self.k_max[:, j] >= self.q_min[:, i]))


def when_meet(tiles: SegTiles | None, i, j, work, carry):
  """work(carry) if tiles i, j may share a segment (or there are no segments), else
  carry: the skip, a `lax.cond`, so a skipped tile costs no matmul."""
  if tiles is None:
    return work(carry)
  return jax.lax.cond(tiles.meet(i, j), work, lambda c: c, carry)


class Plan:
  """Geometry of one call: padded sizes, block counts and block masks.

  has_mask: a mask or segment ids apply, so every visited tile is masked.

  off: the causal offset, key j is visible to query i when j <= i + off. The default
    Tk - Tq is the contract's bottom-right alignment; `ring` passes, for each pair of
    a local query shard and a visiting key shard, their offset in the whole sequence
    (a traced int32 scalar: every use below is a jnp expression).
  """

  def __init__(self, d: C.Dims, causal, has_mask, bq, bk, off=None):
    self.d, self.causal, self.has_mask = d, causal, has_mask
    self.bq, self.bk = bq, bk
    self.Tq_p, self.Tk_p = C.round_up(d.Tq, bq), C.round_up(d.Tk, bk)
    self.nq, self.nk = self.Tq_p // bq, self.Tk_p // bk
    self.off = d.Tk - d.Tq if off is None else off
    self.k_padded = self.Tk_p != d.Tk

  # -- forward: which key blocks query block i visits --------------------------
  def kv_range(self, i):
    """(n_unmasked, n_total): key blocks [0, n_unmasked) need no mask, up to n_total."""
    if not self.causal:
      hi = self.nk
      full = 0 if (self.has_mask or self.k_padded) else self.nk
      return jnp.asarray(full), jnp.asarray(hi)
    first_q = i * self.bq + self.off
    last_q = first_q + self.bq - 1
    hi = jnp.clip(last_q // self.bk + 1, 0, self.nk)
    full = jnp.clip((first_q + 1) // self.bk, 0, hi)
    if self.has_mask:
      full = jnp.zeros_like(full)
    elif self.k_padded:
      full = jnp.minimum(full, self.nk - 1)
    return full, hi

  # -- backward: which query blocks see key block j -----------------------------
  def q_range(self, j):
    """(lo, n_masked_end): query blocks [lo, end) need a mask, [end, nq) do not."""
    if not self.causal:
      end = self.nq if (self.has_mask or self.k_padded) else 0
      return jnp.asarray(0), jnp.asarray(end)
    # first query block whose last row sees key j*bk: i*bq + bq - 1 + off >= j*bk
    lo = jnp.clip(-(-(j * self.bk - self.off - self.bq + 1) // self.bq), 0, self.nq)
    # first query block whose first row sees the whole block: i*bq + off >= j*bk + bk - 1
    end = jnp.clip(-(-(j * self.bk + self.bk - 1 - self.off) // self.bq), lo, self.nq)
    if self.has_mask or self.k_padded:
      end = jnp.asarray(self.nq)
    return lo, end

  def seg_tiles(self, seg) -> SegTiles | None:
    """The tiles' segment-id ranges from padded ids seg = (q_seg (B|1, Tq_p), k_seg
    (B|1, Tk_p)), or None without segments."""
    if seg is None:
      return None
    qs, ks = seg
    qt = qs.reshape(qs.shape[0], self.nq, self.bq)
    kt = ks.reshape(ks.shape[0], self.nk, self.bk)
    return SegTiles(qt.min(-1), qt.max(-1), kt.min(-1), kt.max(-1))

  def pad_mask(self, mask_g):
    """A grouped mask (B|1, Hkv|1, G|1, Tq|1, Tk|1) padded with False to Tq_p, Tk_p."""
    if mask_g is not None and mask_g.shape[3] != 1:
      mask_g = C.pad_axis(mask_g, 3, self.Tq_p, False)
    if mask_g is not None and mask_g.shape[4] != 1:
      mask_g = C.pad_axis(mask_g, 4, self.Tk_p, False)
    return mask_g

  def block_mask(self, mask_g, i, j, seg=None):
    """Bool mask broadcastable to (B, Hkv, G * bq, bk) for query block i, key block j;
    seg: None or the padded (q_seg (B|1, Tq_p), k_seg (B|1, Tk_p)) ids, compared for
    this tile's rows and columns only."""
    d, bq, bk = self.d, self.bq, self.bk
    qpos = i * bq + jnp.arange(bq)
    kpos = j * bk + jnp.arange(bk)
    allow = None
    if self.causal:
      allow = kpos[None, :] <= qpos[:, None] + self.off  # (bq, bk)
    if self.k_padded:
      kv_ok = jnp.broadcast_to(kpos[None, :] < d.Tk, (bq, bk))
      allow = kv_ok if allow is None else allow & kv_ok
    if allow is not None:
      allow = jnp.tile(allow, (d.G, 1))[None, None]  # (1, 1, G*bq, bk)
    if mask_g is not None:
      Bm, Hm, Gm, Tqm, Tkm = mask_g.shape
      m = mask_g
      if Tqm != 1:
        m = jax.lax.dynamic_slice_in_dim(m, i * bq, bq, axis=3)
      if Tkm != 1:
        m = jax.lax.dynamic_slice_in_dim(m, j * bk, bk, axis=4)
      m = jnp.broadcast_to(m, (Bm, Hm, d.G, bq, bk)).reshape(Bm, Hm, d.G * bq, bk)
      allow = m if allow is None else allow & m
    if seg is not None:
      qs = jax.lax.dynamic_slice_in_dim(seg[0], i * bq, bq, axis=1)     # (B|1, bq)
      ks = jax.lax.dynamic_slice_in_dim(seg[1], j * bk, bk, axis=1)     # (B|1, bk)
      same = jnp.tile(qs[:, :, None] == ks[:, None, :], (1, d.G, 1))[:, None]
      allow = same if allow is None else allow & same
    return allow

  def block_bias(self, alibi, i, j):
    """ALiBi's bias of query block i, key block j, (B|1, Hkv, G * bq, bk), or None.

    alibi: None or (slopes (B|1, Hkv, G) float, q_pos (B|1, Tq_p), k_pos (B|1, Tk_p)
    int32): -slope * |q_pos - k_pos| of the block's rows and columns only.
    """
    if alibi is None:
      return None
    sl, qp, kp = alibi
    qi = jax.lax.dynamic_slice_in_dim(qp, i * self.bq, self.bq, axis=1)   # (B|1, bq)
    kj = jax.lax.dynamic_slice_in_dim(kp, j * self.bk, self.bk, axis=1)   # (B|1, bk)
    dist = jnp.abs(qi[:, :, None] - kj[:, None, :]).astype(sl.dtype)
    b = -sl[..., None, None] * dist[:, None, None]            # (B|1, Hkv, G, bq, bk)
    return b.reshape(b.shape[0], self.d.Hkv, self.d.G * self.bq, self.bk)


def add_bias(s, bias):
  return s if bias is None else s + bias


def q_block(x, i, bq, G):
  """(B, Hkv, G, Tq_p, ·) -> block i as (B, Hkv, G * bq, ·)."""
  B, H, _, _, E = x.shape
  return jax.lax.dynamic_slice_in_dim(x, i * bq, bq, axis=3).reshape(B, H, G * bq, E)


def row_block(x, i, bq, G):
  """(B, Hkv, G, Tq_p) -> block i as (B, Hkv, G * bq)."""
  B, H = x.shape[:2]
  return jax.lax.dynamic_slice_in_dim(x, i * bq, bq, axis=3).reshape(B, H, G * bq)


def online_softmax_step(m, l, s, allow=None):
  """One key block of the online softmax: scores s (..., bq, bk) float32, masked to
  C.NEG where `allow` is False (before the exponent), against the running row max m
  and sum l (..., bq). Returns (m_new, p = exp(s - m_new), alpha = exp(m - m_new),
  l_new); the caller rescales its accumulator by alpha and adds p @ v."""
  if allow is not None:
    s = jnp.where(allow, s, C.NEG)
  m_new = jnp.maximum(m, jnp.max(s, axis=-1))
  p = jnp.exp(s - m_new[..., None])
  alpha = jnp.exp(m - m_new)
  return m_new, p, alpha, alpha * l + jnp.sum(p, axis=-1)


def forward(plan: Plan, scale, qg, kh, vh, mask_g, alibi=None, seg=None, sink=None):
  """The tiled forward pass on padded, grouped inputs (also `ring`'s per-shard step).

  qg (B, Hkv, G, Tq_p, D), kh (B, Hkv, Tk_p, D), vh (B, Hkv, Tk_p, Dv);
  mask_g: None or bool (B|1, Hkv|1, G|1, Tq_p|1, Tk_p|1) (see `Plan.pad_mask`);
  alibi: None or ALiBi's slopes and padded positions (see `Plan.block_bias`);
  seg: None or padded segment ids (q_seg (B|1, Tq_p), k_seg (B|1, Tk_p)) int32
  (`common.pad_seg`): tiles are masked by them and tiles that share no segment skipped.
  sink: None or the learned sink logits (B|1, Hkv, G) in the compute dtype: the online
  softmax starts each row from it (running max = sink, running sum = 1, an extra
  column of value zero), so out divides by exp(sink) + sum_j exp(s_j) exactly.
  Returns out (B, Hkv, G, Tq_p, Dv) and lse (B, Hkv, G, Tq_p), both in the compute
  dtype (float32 for bf16 inputs; a row that saw no allowed key has out 0, lse +inf,
  or the sink's logit with a sink),
  and the number of (query block, key block) tiles computed, int32 (counted in the
  loop's carry: what the skipping saved, `visited_tiles`).
  """
  d, bq, bk, G = plan.d, plan.bq, plan.bk, plan.d.G
  B, Hkv = d.B, d.Hkv
  f32 = C.compute_dtype(qg.dtype)

  # Scale q once, and lay K out as (…, D, Tk) once: both save a pass per block.
  qs = (qg * scale).astype(qg.dtype)
  kt = jnp.swapaxes(kh, 2, 3)

  tiles = plan.seg_tiles(seg)
  # each row's sink logit, as q_block lays out a block's rows (g * bq + r)
  sink_rows = (None if sink is None else
               jnp.broadcast_to(jnp.repeat(sink.astype(f32), bq, axis=2), (B, Hkv, G * bq)))

  def q_step(i):
    qi = q_block(qs, i, bq, G)

    def kv_step(j, carry, masked):
      return when_meet(tiles, i, j, functools.partial(tile, j, masked=masked), carry)

    def tile(j, carry, masked):
      m, l, acc, n = carry
      ktj = jax.lax.dynamic_slice_in_dim(kt, j * bk, bk, axis=3)
      vj = jax.lax.dynamic_slice_in_dim(vh, j * bk, bk, axis=2)
      s = jnp.einsum("bhqd,bhdk->bhqk", qi, ktj, preferred_element_type=f32)
      s = add_bias(s, plan.block_bias(alibi, i, j))
      m_new, p, alpha, l = online_softmax_step(
          m, l, s, plan.block_mask(mask_g, i, j, seg) if masked else None)
      pv = jnp.einsum("bhqk,bhkd->bhqd", p.astype(vh.dtype), vj, preferred_element_type=f32)
      return m_new, l, alpha[..., None] * acc + pv, n + 1

    m0, l0 = ((jnp.full((B, Hkv, G * bq), C.NEG, f32), jnp.zeros((B, Hkv, G * bq), f32))
              if sink is None else (sink_rows, jnp.ones((B, Hkv, G * bq), f32)))
    init = (m0, l0, jnp.zeros((B, Hkv, G * bq, d.Dv), f32), jnp.zeros((), jnp.int32))
    full, hi = plan.kv_range(i)
    carry = jax.lax.fori_loop(0, full, functools.partial(kv_step, masked=False), init)
    m, l, acc, n = jax.lax.fori_loop(full, hi, functools.partial(kv_step, masked=True),
                                     carry)
    # A row that saw no allowed key keeps m == NEG: it returns zeros, and its
    # log-sum-exp is +inf so the backward pass gives it zero probabilities. With a
    # sink, l >= exp(sink - m) > 0 and such a row's acc is 0: out 0, lse the sink's.
    if sink is None:
      seen = m > C.NEG / 2
      out = jnp.where(seen[..., None], acc / jnp.where(seen, l, 1.0)[..., None], 0.0)
      lse = jnp.where(seen, m + jnp.log(jnp.where(seen, l, 1.0)), jnp.inf)
    else:
      out, lse = acc / l[..., None], m + jnp.log(l)
    return out.reshape(B, Hkv, G, bq, d.Dv), lse.reshape(B, Hkv, G, bq), n

  out, lse, n = jax.lax.map(q_step, jnp.arange(plan.nq))
  # (nq, B, Hkv, G, bq, ·) -> (B, Hkv, G, Tq_p, ·)
  out = jnp.moveaxis(out, 0, 3).reshape(B, Hkv, G, plan.Tq_p, d.Dv)
  lse = jnp.moveaxis(lse, 0, 3).reshape(B, Hkv, G, plan.Tq_p)
  return out, lse, jnp.sum(n)


def backward(plan: Plan, scale, qg, kh, vh, mask_g, out, lse, do, alibi=None, seg=None):
  """FlashAttention-2 backward: key blocks outside, query blocks inside, dQ accumulated.

  Inputs as in `forward`, plus its out and lse (for `ring`, those of the whole
  sequence, which make this shard's probabilities exact) and do (B, Hkv, G, Tq_p, Dv).
  Returns dq (B, Hkv, G, Tq_p, D), dk (B, Hkv, Tk_p, D), dv (B, Hkv, Tk_p, Dv) in the
  compute dtype, and the number of tiles computed (int32), as `forward` counts them.
  """
  d, bq, bk, G = plan.d, plan.bq, plan.bk, plan.d.G
  B, Hkv = d.B, d.Hkv
  f32 = C.compute_dtype(qg.dtype)
  delta = jnp.sum(do.astype(f32) * out.astype(f32), axis=-1)  # (B, Hkv, G, Tq_p)
  qs = (qg * scale).astype(qg.dtype)
  kt = jnp.swapaxes(kh, 2, 3)
  vt = jnp.swapaxes(vh, 2, 3)
  tiles = plan.seg_tiles(seg)

  def kv_step(dq, j):
    kj = jax.lax.dynamic_slice_in_dim(kh, j * bk, bk, axis=2)
    ktj = jax.lax.dynamic_slice_in_dim(kt, j * bk, bk, axis=3)
    vtj = jax.lax.dynamic_slice_in_dim(vt, j * bk, bk, axis=3)

    def q_step(i, carry, masked):
      return when_meet(tiles, i, j, functools.partial(tile, i, masked=masked), carry)

    def tile(i, carry, masked):
      dq, dk, dv, n = carry
      qi = q_block(qs, i, bq, G)
      doi = q_block(do, i, bq, G)
      s = jnp.einsum("bhqd,bhdk->bhqk", qi, ktj, preferred_element_type=f32)
      s = add_bias(s, plan.block_bias(alibi, i, j))
      p = jnp.exp(s - row_block(lse, i, bq, G)[..., None])
      allow = plan.block_mask(mask_g, i, j, seg) if masked else None
      if allow is not None:
        p = jnp.where(allow, p, 0.0)
      dv = dv + jnp.einsum("bhqk,bhqd->bhkd", p.astype(do.dtype), doi,
                           preferred_element_type=f32)
      dp = jnp.einsum("bhqd,bhdk->bhqk", doi, vtj, preferred_element_type=f32)
      ds = p * (dp - row_block(delta, i, bq, G)[..., None])
      # with qs = q * scale: dK = dS^T qs and dQ = scale * dS K.
      dk = dk + jnp.einsum("bhqk,bhqd->bhkd", ds.astype(qg.dtype), qi,
                           preferred_element_type=f32)
      dqi = jnp.einsum("bhqk,bhkd->bhqd", ds.astype(kh.dtype), kj,
                       preferred_element_type=f32) * scale
      cur = jax.lax.dynamic_slice_in_dim(dq, i * bq, bq, axis=3)
      dq = jax.lax.dynamic_update_slice_in_dim(
          dq, cur + dqi.reshape(B, Hkv, G, bq, d.D), i * bq, axis=3)
      return dq, dk, dv, n + 1

    lo, end = plan.q_range(j)
    init = (dq, jnp.zeros((B, Hkv, bk, d.D), f32), jnp.zeros((B, Hkv, bk, d.Dv), f32),
            jnp.zeros((), jnp.int32))
    carry = jax.lax.fori_loop(lo, end, functools.partial(q_step, masked=True), init)
    dq, dk, dv, n = jax.lax.fori_loop(end, plan.nq,
                                      functools.partial(q_step, masked=False), carry)
    return dq, (dk, dv, n)

  dq0 = jnp.zeros((B, Hkv, G, plan.Tq_p, d.D), f32)
  dq, (dk, dv, n) = jax.lax.scan(kv_step, dq0, jnp.arange(plan.nk))
  dk = jnp.moveaxis(dk, 0, 2).reshape(B, Hkv, plan.Tk_p, d.D)
  dv = jnp.moveaxis(dv, 0, 2).reshape(B, Hkv, plan.Tk_p, d.Dv)
  return dq, dk, dv, jnp.sum(n)


def sink_grad(sink, out, lse, do):
  """d loss / d sink of the sink logits (B|1, Hkv, G), from the forward's out and lse
  (B, Hkv, G, Tq_p(, Dv)) and do: the sink's column has probability exp(sink - lse)
  and value zero, so d out_i / d sink = -exp(sink - lse_i) out_i, and the gradient
  is -sum_i exp(sink - lse_i) (do_i . out_i), summed to sink's shape."""
  f32 = lse.dtype
  delta = jnp.sum(do.astype(f32) * out.astype(f32), axis=-1)
  g = -jnp.sum(jnp.exp(sink.astype(f32)[..., None] - lse) * delta, axis=-1)
  return jnp.sum(g, axis=0, keepdims=True) if sink.shape[0] == 1 else g


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _flash_core(plan, scale, qg, kh, vh, mask_g, alibi=None, seg=None, sink=None):
  return forward(plan, scale, qg, kh, vh, mask_g, alibi, seg, sink)[0]


def _core_fwd(plan, scale, qg, kh, vh, mask_g, alibi=None, seg=None, sink=None):
  out, lse, _ = forward(plan, scale, qg, kh, vh, mask_g, alibi, seg, sink)
  return out, (qg, kh, vh, mask_g, alibi, seg, sink, out, lse)


def _core_bwd(plan, scale, res, do):
  qg, kh, vh, mask_g, alibi, seg, sink, out, lse = res
  # The sink's column has value zero: dS of the keys is unchanged (its dP is 0 and
  # delta = do . out counts it), so the tiles' backward is the same; only lse has it.
  dq, dk, dv, _ = backward(plan, scale, qg, kh, vh, mask_g, out, lse, do, alibi, seg)
  dsink = None if sink is None else sink_grad(sink, out, lse, do).astype(sink.dtype)
  return (dq.astype(qg.dtype), dk.astype(kh.dtype), dv.astype(vh.dtype), None, None,
          None, dsink)


_flash_core.defvjp(_core_fwd, _core_bwd)


def _slices_per_step(d: C.Dims, bq, bk, step_score_bytes=None):
  """How many of the B * Hkv (batch, kv-head) slices one step processes together.

  The largest divisor of B * Hkv whose score tiles (c * G * bq * bk fp32) fit in
  `step_score_bytes` (default `STEP_SCORE_BYTES`), at least 1: long sequences go one
  slice at a time, short ones (and decode) keep every slice in one batched step.
  """
  budget = STEP_SCORE_BYTES if step_score_bytes is None else int(step_score_bytes)
  n = d.B * d.Hkv
  c = max(1, min(n, budget // (4 * d.G * bq * bk)))
  while n % c:
    c -= 1
  return c


def _sliced_core(plan, scale, qg, kh, vh, mask_g, c, alibi=None, seg=None, sink=None):
  """`_flash_core` over the (B, Hkv) slices, c at a time, with `lax.map`.

  Each map step is one `_flash_core` call on (c, 1, G, ...) inputs, so forward and
  backward (the map's transpose) both run slice group by slice group. A mask with a
  batch or head axis is broadcast to (B, Hkv) and split with the inputs; one
  without (causal padding, a shared (Tq, Tk) mask) is passed whole. ALiBi's slopes
  and positions are split with the slices (each slice's batch row and kv head), and
  so are the segment ids and the sink logits.
  """
  d = plan.d
  B, Hkv, n = d.B, d.Hkv, d.B * d.Hkv // c
  sub = Plan(d._replace(B=c, Hq=d.G, Hkv=1), plan.causal, plan.has_mask, plan.bq,
             plan.bk)
  split = lambda x: x.reshape(n, c, 1, *x.shape[2:])
  xs = (split(qg), split(kh), split(vh))
  per_slice = mask_g is not None and (mask_g.shape[0] != 1 or mask_g.shape[1] != 1)
  if per_slice:
    xs += (split(jnp.broadcast_to(mask_g, (B, Hkv) + mask_g.shape[2:])),)
  per = lambda p: jnp.broadcast_to(p[:, None], (B, Hkv, p.shape[-1])).reshape(
      n, c, p.shape[-1])
  if alibi is not None:
    sl, qp, kp = alibi
    xs += ((split(jnp.broadcast_to(sl, (B, Hkv, d.G))), per(qp), per(kp)),)
  if seg is not None:
    xs += ((per(seg[0]), per(seg[1])),)
  if sink is not None:
    xs += (split(jnp.broadcast_to(sink, (B, Hkv, d.G))),)

  def step(x):
    x = list(x)
    sk = x.pop() if sink is not None else None
    s = x.pop() if seg is not None else None
    a = x.pop() if alibi is not None else None
    m = x[3] if per_slice else mask_g
    return _flash_core(sub, scale, x[0], x[1], x[2], m, a, s, sk)

  out = jax.lax.map(step, xs)
  return out.reshape(B, Hkv, *out.shape[3:])


def _on_gpu() -> bool:
  """Whether `flash` hands over to the Pallas kernels (the default backend is a GPU)."""
  return jax.default_backend() == "gpu"


def flash(q, k, v, *, causal=False, mask=None, scale=None, block_q=None, block_k=None,
          step_score_bytes=None, positions=None, q_pos=None, k_pos=None, q_seg=None,
          k_seg=None, sinks=None, **kw):
  """Exact softmax attention, tiled; same result as `softmax` under the contract.

  q: (B, Tq, Hq, D), k: (B, Tk, Hkv, D), v: (B, Tk, Hkv, Dv); mask: bool broadcastable
  to (B, Hq, Tq, Tk) (a key-padding mask (B, 1, 1, Tk) keeps memory O(N); a dense
  (Tq, Tk) mask is the caller's O(N²)); causal: bottom-right aligned.
  block_q, block_k: tile sizes (default (512 if causal else 1024) // G, at least 64,
  and 512; shrunk for short inputs). Long inputs are processed one (batch, kv-head) slice at a time.
  step_score_bytes: a static int, the score-tile bytes up to which several (batch,
  kv-head) slices share one step (default `STEP_SCORE_BYTES`, 1 MiB: see the comment
  above it); 1 forces one slice per step. `scripts/benchmark.py` varies it. Not used
  on a GPU.
  positions, q_pos (B|1, Tq), k_pos (B|1, Tk): rope/rope2d (q, k rotated) or alibi
  (bias computed per tile); see attention.core.positions.
  q_seg (B|1, Tq), k_seg (B|1, Tk): segment ids of packed rows (attention.core.common):
  each tile masked by its own ids, a tile whose id ranges are disjoint skipped (forward
  and backward; with non-decreasing ids, as packing lays them out, that is every tile
  that shares no segment).
  sinks: None or False, or the learned sink logits (Hq,) (its option sinks=True makes
  the models create them): carried exactly by the online softmax, which starts each
  row from its head's sink (`forward`); its gradient from the saved lse (`sink_grad`).
  Returns (B, Tq, Hq, Dv) in q's dtype; fully masked rows are zeros.

  On a GPU this pure-JAX tiling (a CPU/TPU algorithm: XLA runs each tile as separate
  kernels) is 7x slower than plain softmax, so there `flash` runs the Pallas kernels
  of `flash_pallas` (same contract, same result to rounding), with block_q/block_k
  passed on only when they are powers of two from 16 to 128 (else the kernel's own
  tiles: this path's CPU tiles of 512-2048 rows would overflow a GPU's shared memory).
  float64 inputs stay on this path on a GPU too: the Triton kernels are for 16/32-bit
  floats (float64 through them came out wrong on an H200, 2026-11-26). With sinks it
  stays on this path too: the Pallas kernels carry no sink (flash_pallas refuses it).
  """
  unexpected("flash", kw)
  if _on_gpu() and jnp.result_type(q, k, v) != jnp.float64 and sinks in (None, False):
    from attention.flash_pallas import flash_pallas
    ok = lambda b: b if b is not None and 16 <= b <= 128 and b & (b - 1) == 0 else None
    return flash_pallas(q, k, v, causal=causal, mask=mask, scale=scale,
                        block_q=ok(block_q), block_k=ok(block_k), positions=positions,
                        q_pos=q_pos, k_pos=k_pos, q_seg=q_seg, k_seg=k_seg)
  d = C.check_qkv(q, k, v, "flash")
  mask = C.check_mask(mask, d, "flash")
  seg = C.check_segments(q_seg, k_seg, d, "flash")
  pos = P.prepare("flash", positions, d, q_pos, k_pos)
  q, k = P.rotate_qk(pos, q, k)
  return tiled(q, k, v, d, causal=causal, mask=mask, scale=scale, block_q=block_q,
               block_k=block_k, step_score_bytes=step_score_bytes, pos=pos, seg=seg,
               sinks=check_sinks(sinks, d, "flash"))


def alibi_args(pos, d: C.Dims, Tq_p: int, Tk_p: int, dtype):
  """`Plan.block_bias`'s argument from a call's positions (None without ALiBi): the
  slopes (1, Hkv, G) in `dtype` and the positions padded to the tiles."""
  if pos is None or not pos.alibi:
    return None
  sl = jnp.asarray(P.slopes_for(pos.spec, d.Hq), dtype).reshape(1, d.Hkv, d.G)
  return sl, C.pad_axis(pos.q, 1, Tq_p), C.pad_axis(pos.k, 1, Tk_p)


def _setup(q, k, v, d: C.Dims, causal, mask, scale, block_q, block_k, pos, seg):
  """(plan, scale, qg, kh, vh, mask_g, alibi, seg): the tiled passes' padded, grouped
  arguments for checked inputs; seg: (q_seg, k_seg) checked ids or (None, None)."""
  bq, bk = blocks(d, block_q, block_k, causal)
  has_seg = seg is not None and seg[0] is not None
  plan = Plan(d, causal, mask is not None or has_seg, bq, bk)
  qg = C.pad_axis(C.split_heads_q(q, d), 3, plan.Tq_p)
  kh = C.pad_axis(C.kv_heads_first(k), 2, plan.Tk_p)
  vh = C.pad_axis(C.kv_heads_first(v), 2, plan.Tk_p)
  mask_g = plan.pad_mask(C.group_mask(mask, d))
  alibi = alibi_args(pos, d, plan.Tq_p, plan.Tk_p, C.compute_dtype(q.dtype))
  seg = (C.pad_seg(seg[0], plan.Tq_p), C.pad_seg(seg[1], plan.Tk_p)) if has_seg else None
  return plan, C.default_scale(d.D, scale), qg, kh, vh, mask_g, alibi, seg


def tiled(q, k, v, d: C.Dims, *, causal, mask, scale, block_q, block_k,
          step_score_bytes=None, pos=None, seg=None, sinks=None):
  """`flash` on checked inputs (q, k already rotated for RoPE), `pos` the call's
  positions (only ALiBi's are read), seg the checked (q_seg, k_seg) or None, sinks
  None or the checked sink logits (Hq,): the pure-JAX tiles, whatever the backend."""
  plan, scale, qg, kh, vh, mask_g, alibi, seg = _setup(q, k, v, d, causal, mask, scale,
                                                       block_q, block_k, pos, seg)
  sink = (None if sinks is None else
          sinks.astype(C.compute_dtype(q.dtype)).reshape(1, d.Hkv, d.G))
  c = _slices_per_step(d, plan.bq, plan.bk, step_score_bytes)
  if c == d.B * d.Hkv:
    out = _flash_core(plan, scale, qg, kh, vh, mask_g, alibi, seg, sink)
  else:
    out = _sliced_core(plan, scale, qg, kh, vh, mask_g, c, alibi, seg, sink)
  return C.merge_heads_out(out[:, :, :, : d.Tq]).astype(q.dtype)


def visited_tiles(q, k, v, *, causal=False, mask=None, q_seg=None, k_seg=None,
                  block_q=None, block_k=None) -> dict:
  """{"forward", "backward": the (query block, key block) tiles each pass computes,
  "tiles": nq * nk}: one call of flash's tiled passes (all (batch, kv-head) slices in
  one step, as short inputs run), the loop iterations counted in their carries, so
  that a test sees what segment and causal skipping save. Arguments as `flash`."""
  d = C.check_qkv(q, k, v, "flash")
  seg = C.check_segments(q_seg, k_seg, d, "flash")
  plan, scale, qg, kh, vh, mask_g, _, seg = _setup(
      q, k, v, d, causal, C.check_mask(mask, d, "flash"), None, block_q, block_k, None, seg)

  @jax.jit
  def counts(qg, kh, vh, mask_g, seg):
    out, lse, n_fwd = forward(plan, scale, qg, kh, vh, mask_g, None, seg)
    *_, n_bwd = backward(plan, scale, qg, kh, vh, mask_g, out, lse, jnp.ones_like(out),
                         None, seg)
    return n_fwd, n_bwd

  n_fwd, n_bwd = counts(qg, kh, vh, mask_g, seg)
  return {"forward": int(n_fwd), "backward": int(n_bwd), "tiles": plan.nq * plan.nk}


# flash's options that choose how it computes softmax attention, not what.
KERNEL_OPTIONS = ("block_q", "block_k", "step_score_bytes")


def flash_cost(d, *, causal=False, mode="fwd", itemsize=4, block_q=None, **kw):
  """The tiled passes' cost (`cost_model.tiled`) without segment ids: with them it is
  an upper bound (the tiles skipped for sharing no segment are not modelled; how many
  depends on the segment lengths, which the cost model does not see)."""
  return cost_lib.tiled(d, mode=mode, itemsize=itemsize, causal=causal,
                        block_q=blocks(d, block_q, causal=causal)[0])


register(Variant(
    name="flash", fn=flash, paper="Dao et al. 2022 (FlashAttention)",
    time="O(N² D)", memory="O(N)", causal=True, masks="any",
    decode="KV cache (fp, int8 or fp8)", decode_impl=KV_CACHE, cost=flash_cost,
    family="exact", score=SCALED_DOT, kernel_options=KERNEL_OPTIONS,
    params={"sinks": SINKS},
    summary="tiled online-softmax attention in pure JAX, custom VJP",
    positions=P.takes_qk("bias computed per tile from the tile's positions"),
    segments="a per-tile mask from the tile's ids; a tile whose query and key id ranges "
             "are disjoint (no shared segment, for packed rows) skipped, forward and "
             "backward"))
