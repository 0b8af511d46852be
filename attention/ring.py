"""`ring`: context-parallel exact attention, the sequence split over a mesh axis.

Liu, Zaharia & Abbeel 2023 (Ring Attention with Blockwise Transformers). With P
devices on the mesh axis `axis` (default "seq"), Q, K and V are split along the
sequence into P contiguous shards, one per device (`shard_map`). Each device keeps
its query shard and runs `flash`'s tiled forward pass (attention/flash.py) against one
K/V shard at a time, while the K/V shards travel round the ring (`lax.ppermute`,
device p sends to p + 1): after P steps every query has met every key. A device
holds its own shards, the visiting K/V shard and the one in flight: memory is
O(N / P) per device, and no device ever sees the whole sequence.

Combining the shards: each step gives the shard pair's normalised output o_s and
log-sum-exp lse_s; they are merged by flash's online-softmax rule with a whole shard
as the block (a running max m, sum l and accumulator acc):
  m' = max(m, lse_s),   a = e^(m - m'),   b = e^(lse_s - m'),
  l' = a l + b,         acc' = a acc + b o_s,
and at the end out = acc / l, lse = m + log l.

Backward (a custom VJP): a second ring. The K/V shards travel again, each with its
dK/dV accumulator; every device adds its query shard's contribution, computed by
flash's backward pass from the saved lse of the whole sequence (so the probabilities
are exact), and keeps its own dQ. After the P steps one last hop brings each dK/dV
home. The residuals are the local shards, out and lse: O(N / P) per device.

Causal mode (bottom-right aligned, as the contract says): a chunk pair entirely
above the diagonal is skipped (`lax.cond`), and inside a visited pair flash skips and
masks by tiles. With P contiguous shards the work is unbalanced (the device with the
last queries visits all P shard pairs, the first one visits one), so causal rings use
the zig-zag layout (`layout="zigzag"`, the default; that of ring-flash-attention and
Llama 3's context parallelism, as Brandon et al. 2023's striped layout a balanced
one): the sequence is cut into 2P chunks and device p
computes the queries of chunks p and 2P - 1 - p against the K/V of the same two chunks
of every device, so each device computes 2(P - 1) full chunk pairs with the others'
K/V and, with its own, two diagonal pairs and one full one: the same work everywhere
(`device_work` counts the tiles from this schedule). The shards arrive contiguous
(the model's layout) and are moved into the zig-zag layout inside the ring, and the
outputs back, by two ppermutes of half a shard each way. `layout="contiguous"` keeps
the unbalanced ring; lengths not divisible into 2P chunks fall back to it.

Where the mesh comes from: `mesh=` if given, else the mesh in context
(`jax.set_mesh`, which train.py sets). With no mesh, or an axis of size 1, `ring` is
`flash` itself, so it is registered and usable on any single device. The batch axis
is split over the mesh's other axes (those of size > 1) when their product divides
B, else every device of a ring holds the whole batch; a 'tensor' axis (trainer/
parallel.py) that divides the KV heads splits the heads instead.

Masks: any mask. A mask with a Tq axis is split with the queries; its Tk axis stays
whole on every device and each step slices the visiting shard's columns (a key
padding mask costs O(N), a dense (Tq, Tk) mask O(N^2 / P) per device).
Tq and Tk must be multiples of P (refused otherwise).

Segments (packed rows, q_seg/k_seg): the query ids are split with the queries and the
key ids travel round the ring with their K/V shard (as ALiBi's key positions do), so
each shard pair's tiles are masked, and skipped when they share no segment, by flash
(`flash.forward`/`backward`'s `seg`), forward and backward: O(N / P) per device.

Positions: RoPE rotates q and k before they are split (attention.core.positions). For
ALiBi the query positions are split with the queries and the key positions travel
round the ring with their K/V shard, so each shard pair's tiles compute their bias
from their own positions (flash's `Plan.block_bias`), forward and backward.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from attention.core import common as C
from attention import flash as F
from attention.core import positions as P_
from attention.core.kv_cache import KV_CACHE
from attention.core.registry import Variant, register
from attention.core.scores import SCALED_DOT
from attention.core.common import unexpected

AXIS = "seq"   # the default mesh axis the sequence is split over


# ---- jax version shims (jax 0.10 and 0.11 have jax.shard_map; older ones not) -------

def shard_map(f, *, mesh, in_specs, out_specs):
  """`jax.shard_map`, or `jax.experimental.shard_map.shard_map` on older jax.

  The replication check is off: the ring's loop carries start replicated (zeros) and
  become device-varying after the first step, which the checker cannot type.
  """
  if hasattr(jax, "shard_map"):
    return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                         check_vma=False)
  from jax.experimental.shard_map import shard_map as legacy   # pragma: no cover
  return legacy(f, mesh, in_specs=in_specs, out_specs=out_specs, check_rep=False)


def current_mesh():
  """The mesh in context (`jax.set_mesh`; an AbstractMesh while tracing), or None."""
  get = getattr(jax.sharding, "get_abstract_mesh", None)
  m = get() if get is not None else None
  return m if m is not None and tuple(m.axis_names) else None


# ---- the static description of one call --------------------------------------------

LAYOUTS = ("zigzag", "contiguous")


@dataclasses.dataclass(frozen=True)
class _Ring:
  """Static facts of one ring call (hashable: it is a nondiff argument of the VJP).

  d: global sizes; dl: one device's sizes; dc: one chunk's sizes (dl split into m
  chunks: m = 2 under the zig-zag layout, else 1); batch: the mesh axes B is split over
  (None: not split); heads: the mesh axis the KV heads are split over (None: not
  split); mask_b, mask_h, mask_q, mask_k: whether the grouped mask has a B, Hkv, Tq and Tk
  axis (else 1), has_mask: whether there is a mask or segment ids (every tile is masked);
  pos_b, seg_b: whether ALiBi's positions, the segment ids have a B axis (else 1).
  """
  mesh: Any
  axis: str
  n: int
  batch: tuple | None
  d: C.Dims
  dl: C.Dims
  dc: C.Dims
  m: int
  causal: bool
  scale: float
  bq: int
  bk: int
  heads: str | None = None
  has_mask: bool = False
  mask_b: bool = False
  mask_h: bool = False
  mask_q: bool = False
  mask_k: bool = False
  pos_b: bool = False
  seg_b: bool = False

  # specs of the grouped layouts (see attention.core.common)
  @property
  def q_spec(self):      # (B, Hkv, G, Tq, ·)
    return P(self.batch, self.heads, None, self.axis, None)

  @property
  def kv_spec(self):     # (B, Hkv, Tk, ·)
    return P(self.batch, self.heads, self.axis, None)

  @property
  def lse_spec(self):    # (B, Hkv, G, Tq)
    return P(self.batch, self.heads, None, self.axis)

  @property
  def mask_spec(self):   # (B|1, Hkv|1, G|1, Tq|1, Tk|1): Tk stays whole
    return P(self.batch if self.mask_b else None, self.heads if self.mask_h else None,
             None,
             self.axis if self.mask_q else None, None)

  @property
  def alibi_spec(self):  # (slopes (1, Hkv, G) whole, q_pos, k_pos (B|1, T) split on T)
    pos = P(self.batch if self.pos_b else None, self.axis)
    return (P(None, self.heads, None), pos, pos)

  @property
  def seg_spec(self):    # (q_seg (B|1, Tq), k_seg (B|1, Tk)) split on T
    ids = P(self.batch if self.seg_b else None, self.axis)
    return (ids, ids)

  def plan(self, off=None):
    return F.Plan(self.dc, self.causal, self.has_mask, self.bq, self.bk, off)

  def chunk(self, p, h):
    """The index in the whole sequence (of n * m chunks) of device p's chunk h (ints or
    traced): p when contiguous; p and 2n - 1 - p under the zig-zag layout."""
    if isinstance(h, int):
      return p if h == 0 else 2 * self.n - 1 - p
    return jnp.where(h == 0, p, 2 * self.n - 1 - p)

  def pairs(self, body, carry):
    """carry after body(hq, hk, carry) for each (query chunk, key chunk) pair of a shard
    pair: one call when m = 1, else a fori_loop over the m * m pairs (one compiled
    copy of flash's kernel, its chunks sliced by the traced hq, hk)."""
    if self.m == 1:
      return body(0, 0, carry)
    return jax.lax.fori_loop(0, self.m * self.m,
                             lambda c, x: body(c // self.m, c % self.m, x), carry)

  def offset(self, a, b):
    """Causal offset of query chunk `a` against key chunk `b` in the whole sequence:
    key c of b is visible to query r of a when c <= r + offset."""
    return a * self.dc.Tq - b * self.dc.Tk + (self.d.Tk - self.d.Tq)

  def visible(self, a, b):
    """Whether any (query of chunk a, key of chunk b) pair is visible."""
    return self.offset(a, b) + self.dc.Tq - 1 >= 0

  def key_chunk_mask(self, plan, mask_g, hq, b):
    """This device's mask for its query chunk hq against key chunk `b`, padded to the
    plan's tiles."""
    if mask_g is None:
      return None
    if self.mask_q:
      tq = self.dc.Tq
      mask_g = jax.lax.dynamic_slice_in_dim(mask_g, hq * tq, tq, axis=3)
    if self.mask_k:
      mask_g = jax.lax.dynamic_slice_in_dim(mask_g, b * self.dc.Tk, self.dc.Tk, axis=4)
    return plan.pad_mask(mask_g)

  def hop(self, *xs):
    """Every x moves one device along the ring: device p's goes to p + 1."""
    perm = [(i, (i + 1) % self.n) for i in range(self.n)]
    return tuple(jax.lax.ppermute(x, self.axis, perm) for x in xs)

  # -- the zig-zag layout: device p holds chunks p and 2n - 1 - p of 2n -------------
  def _perms(self):
    """The two permutations that move each device's contiguous halves (chunks 2d and
    2d + 1 of device d) to the devices that hold them under the zig-zag layout."""
    n = self.n
    dest = lambda c: c if c < n else 2 * n - 1 - c
    return ([(d, dest(2 * d)) for d in range(n)],
            [(d, dest(2 * d + 1)) for d in range(n)])

  def to_zigzag(self, x, axis):
    """A device's contiguous shard of x (its T axis `axis`) -> its zig-zag shard
    [chunk p, chunk 2n - 1 - p]: two ppermutes of half a shard each. The identity
    when m = 1."""
    if self.m == 1 or x is None:
      return x
    h0, h1 = jnp.split(x, 2, axis=axis)
    p0, p1 = self._perms()
    r0, r1 = jax.lax.ppermute(h0, self.axis, p0), jax.lax.ppermute(h1, self.axis, p1)
    # an even device received its first chunk by p0, an odd one by p1
    even = jax.lax.axis_index(self.axis) % 2 == 0
    return jnp.concatenate([jnp.where(even, r0, r1), jnp.where(even, r1, r0)], axis=axis)

  def from_zigzag(self, y, axis):
    """The inverse of `to_zigzag`."""
    if self.m == 1:
      return y
    s0, s1 = jnp.split(y, 2, axis=axis)
    even = jax.lax.axis_index(self.axis) % 2 == 0
    inv = lambda perm: [(b, a) for a, b in perm]
    p0, p1 = self._perms()
    h0 = jax.lax.ppermute(jnp.where(even, s0, s1), self.axis, inv(p0))
    h1 = jax.lax.ppermute(jnp.where(even, s1, s0), self.axis, inv(p1))
    return jnp.concatenate([h0, h1], axis=axis)


def device_work(n: int, Tq: int, Tk: int, causal: bool = True, layout: str = "zigzag",
                block_q: int | None = None, block_k: int | None = None) -> list[int]:
  """The (block_q x block_k) tiles each of the n devices of a ring computes in the
  forward pass: the chunk pairs the ring visits (`_Ring.visible`, the predicate of its
  `lax.cond`) and, inside each, the key tiles flash's plan visits per query tile
  (`Plan.kv_range`). Pure Python, from the ring's own schedule; the backward pass
  visits the same tiles.

  Args:
    n: devices on the seq axis; Tq, Tk: the global lengths.
    causal: bottom-right aligned causal attention (else every tile).
    layout: "zigzag" or "contiguous", as `ring`'s argument.
    block_q, block_k: the tile sizes (None: flash's defaults for the chunk).
  """
  r = _make_ring(None, "seq", n, None, None, C.Dims(1, Tq, Tk, 1, 1, 1, 1), causal,
                 layout, block_q, block_k, 1.0)
  out = []
  for me in range(n):
    tiles = 0
    for src in range(n):
      for hq in range(r.m):
        for hk in range(r.m):
          a, b = r.chunk(me, hq), r.chunk(src, hk)
          if causal and not r.visible(a, b):
            continue
          plan = r.plan(r.offset(a, b) if causal else None)
          tiles += sum(int(plan.kv_range(i)[1]) for i in range(plan.nq))
    out.append(tiles)
  return out


# ---- one device's share, inside shard_map ---------------------------------------------

def _chunks(r, x, axis, size, value=0):
  """A device's shard of x (T axis `axis`, in the ring's layout) with each of its m
  chunks padded to `size`: the chunks at [h * size, (h + 1) * size)."""
  if r.m == 1:
    return C.pad_axis(x, axis, size, value)
  return jnp.concatenate([C.pad_axis(p, axis, size, value)
                          for p in jnp.split(x, r.m, axis=axis)], axis=axis)


def _part(x, h, size, axis):
  """Chunk h (an int or traced; padded length `size`) of x along `axis`."""
  return jax.lax.dynamic_slice_in_dim(x, h * size, size, axis=axis)


def _add_part(x, h, size, axis, y):
  """x with y added to its chunk h (of padded length `size`) along `axis`."""
  return jax.lax.dynamic_update_slice_in_dim(x, _part(x, h, size, axis) + y, h * size,
                                             axis=axis)


def _unchunk(r, x, axis, size, keep):
  """The inverse of `_chunks`: the first `keep` rows of each of the m padded chunks."""
  parts = [jax.lax.slice_in_dim(x, h * size, h * size + keep, axis=axis)
           for h in range(r.m)]
  return parts[0] if r.m == 1 else jnp.concatenate(parts, axis=axis)


def _seg_chunks(r, ids, size):
  """Segment ids (B|1, T) with each chunk padded by repeating its last id."""
  parts = jnp.split(ids, r.m, axis=1) if r.m > 1 else [ids]
  return jnp.concatenate([C.pad_seg(p, size) for p in parts], axis=1)


def _prepare(r, plan0, mask_g, alibi, seg):
  """The mask, ALiBi and segment ids in the ring's layout, their T axes chunked and
  padded to plan0's tiles; returns (mask_g, al, sg, kpos, kseg) where kpos and kseg
  travel round the ring with K/V (an int32 zero () where absent)."""
  if mask_g is not None and r.mask_q:
    mask_g = r.to_zigzag(mask_g, 3)
  al = sg = None
  none = jnp.zeros((), jnp.int32)
  if alibi is not None:
    sl, qpos, kpos = alibi
    al = (sl, _chunks(r, r.to_zigzag(qpos, 1), 1, plan0.Tq_p),
          _chunks(r, r.to_zigzag(kpos, 1), 1, plan0.Tk_p))
  if seg is not None:
    sg = (_seg_chunks(r, r.to_zigzag(seg[0], 1), plan0.Tq_p),
          _seg_chunks(r, r.to_zigzag(seg[1], 1), plan0.Tk_p))
  return (mask_g, al, sg, none if al is None else al[2], none if sg is None else sg[1])


def _pair_extras(plan0, al, sg, kposb, ksegb, hq, hk):
  """ALiBi and segment ids of query chunk hq and visiting key chunk hk."""
  ab = None if al is None else (al[0], _part(al[1], hq, plan0.Tq_p, 1),
                                _part(kposb, hk, plan0.Tk_p, 1))
  sb = None if sg is None else (_part(sg[0], hq, plan0.Tq_p, 1),
                                _part(ksegb, hk, plan0.Tk_p, 1))
  return ab, sb


def _fwd_local(r: _Ring, qg, kh, vh, mask_g, alibi, seg):
  """qg (b, Hkv, G, tq, D), kh (b, Hkv, tk, D), vh (b, Hkv, tk, Dv) local shards
  (alibi: None or slopes and this device's q_pos, k_pos shards; seg: None or this
  device's q_seg, k_seg shards) -> out (b, Hkv, G, tq, Dv), lse (b, Hkv, G, tq) in the
  compute dtype, in the contiguous layout of the inputs."""
  plan0 = r.plan()
  f32 = C.compute_dtype(qg.dtype)
  Tq_p, Tk_p = plan0.Tq_p, plan0.Tk_p
  qp = _chunks(r, r.to_zigzag(qg, 3), 3, Tq_p)
  kp = _chunks(r, r.to_zigzag(kh, 2), 2, Tk_p)
  vp = _chunks(r, r.to_zigzag(vh, 2), 2, Tk_p)
  mask_g, al, sg, kpos, kseg = _prepare(r, plan0, mask_g, alibi, seg)
  me = jax.lax.axis_index(r.axis)
  rows = qp.shape[:3] + (Tq_p,)

  def chunk_pair(src, hq, hk, kb, vb, kposb, ksegb):
    a, b = r.chunk(me, hq), r.chunk(src, hk)
    plan = r.plan(r.offset(a, b) if r.causal else None)
    ab, sb = _pair_extras(plan0, al, sg, kposb, ksegb, hq, hk)

    def visit():
      o, lse, _ = F.forward(plan, r.scale, _part(qp, hq, Tq_p, 3), _part(kb, hk, Tk_p, 2),
                            _part(vb, hk, Tk_p, 2), r.key_chunk_mask(plan, mask_g, hq, b),
                            ab, sb)
      return o.astype(f32), jnp.where(jnp.isinf(lse), C.NEG, lse).astype(f32)

    if not r.causal:
      return visit()
    skip = lambda: (jnp.zeros(rows + (r.d.Dv,), f32), jnp.full(rows, C.NEG, f32))
    return jax.lax.cond(r.visible(a, b), visit, skip)

  def merge(carry, o_s, lse_s):      # flash's online-softmax rule, a chunk per block
    m, l, acc = carry
    m_new = jnp.maximum(m, lse_s)
    a, b = jnp.exp(m - m_new), jnp.exp(lse_s - m_new)
    return m_new, a * l + b, a[..., None] * acc + b[..., None] * o_s

  def shard_pair(s, kb, vb, kposb, ksegb, carry):
    """carry (running max, sum, accumulator of this device's m query chunks, each
    padded to Tq_p) after the visiting shard's chunks."""
    src = (me - s) % r.n

    def body(hq, hk, carry):
      new = merge(tuple(_part(x, hq, Tq_p, 3) for x in carry),
                  *chunk_pair(src, hq, hk, kb, vb, kposb, ksegb))
      return tuple(jax.lax.dynamic_update_slice_in_dim(x, y, hq * Tq_p, axis=3)
                   for x, y in zip(carry, new))
    return r.pairs(body, carry)

  def step(s, c):
    kb, vb, kposb, ksegb, carry = c
    nxt = r.hop(kb, vb, kposb, ksegb)   # issued before the compute, so they can overlap
    return (*nxt, shard_pair(s, kb, vb, kposb, ksegb, carry))

  rows_m = rows[:3] + (r.m * Tq_p,)
  init = (jnp.full(rows_m, C.NEG, f32), jnp.zeros(rows_m, f32),
          jnp.zeros(rows_m + (r.d.Dv,), f32))
  kb, vb, kposb, ksegb, carry = jax.lax.fori_loop(0, r.n - 1, step,
                                                  (kp, vp, kpos, kseg, init))
  m, l, acc = shard_pair(r.n - 1, kb, vb, kposb, ksegb, carry)
  seen = m > C.NEG / 2               # a row with no allowed key: zeros, lse = +inf
  out = jnp.where(seen[..., None], acc / jnp.where(seen, l, 1.0)[..., None], 0.0)
  lse = jnp.where(seen, m + jnp.log(jnp.where(seen, l, 1.0)), jnp.inf)
  return (r.from_zigzag(_unchunk(r, out, 3, Tq_p, r.dc.Tq), 3),
          r.from_zigzag(_unchunk(r, lse, 3, Tq_p, r.dc.Tq), 3))


def _bwd_local(r: _Ring, qg, kh, vh, mask_g, alibi, seg, out, lse, do):
  """Local shards plus out, lse, do (b, Hkv, G, tq, ·) -> dq, dk, dv of this device's
  shards, in the compute dtype, in the contiguous layout of the inputs."""
  plan0 = r.plan()
  f32 = C.compute_dtype(qg.dtype)
  Tq_p, Tk_p = plan0.Tq_p, plan0.Tk_p
  qp = _chunks(r, r.to_zigzag(qg, 3), 3, Tq_p)
  kp = _chunks(r, r.to_zigzag(kh, 2), 2, Tk_p)
  vp = _chunks(r, r.to_zigzag(vh, 2), 2, Tk_p)
  outp = _chunks(r, r.to_zigzag(out, 3), 3, Tq_p)
  dop = _chunks(r, r.to_zigzag(do, 3), 3, Tq_p)
  lsep = _chunks(r, r.to_zigzag(lse, 3), 3, Tq_p, jnp.inf)   # padded rows: probability 0
  mask_g, al, sg, kpos, kseg = _prepare(r, plan0, mask_g, alibi, seg)
  me = jax.lax.axis_index(r.axis)
  b_, H, G = qg.shape[:3]
  zq = jnp.zeros((b_, H, G, Tq_p, r.d.D), f32)
  zk = (jnp.zeros((b_, H, Tk_p, r.d.D), f32), jnp.zeros((b_, H, Tk_p, r.d.Dv), f32))

  def chunk_pair(src, hq, hk, kb, vb, kposb, ksegb):
    a, b = r.chunk(me, hq), r.chunk(src, hk)
    plan = r.plan(r.offset(a, b) if r.causal else None)
    ab, sb = _pair_extras(plan0, al, sg, kposb, ksegb, hq, hk)
    part_q = lambda x: _part(x, hq, Tq_p, 3)

    def visit():
      g = F.backward(plan, r.scale, part_q(qp), _part(kb, hk, Tk_p, 2),
                     _part(vb, hk, Tk_p, 2), r.key_chunk_mask(plan, mask_g, hq, b),
                     part_q(outp), part_q(lsep), part_q(dop), ab, sb)
      return tuple(x.astype(f32) for x in g[:3])

    if not r.causal:
      return visit()
    return jax.lax.cond(r.visible(a, b), visit, lambda: (zq, *zk))

  def accumulate(s, kb, vb, kposb, ksegb, dq, dkb, dvb):
    src = (me - s) % r.n

    def body(hq, hk, c):
      dq, dkb, dvb = c
      dq_s, dk_s, dv_s = chunk_pair(src, hq, hk, kb, vb, kposb, ksegb)
      return (_add_part(dq, hq, Tq_p, 3, dq_s), _add_part(dkb, hk, Tk_p, 2, dk_s),
              _add_part(dvb, hk, Tk_p, 2, dv_s))
    return r.pairs(body, (dq, dkb, dvb))

  def step(s, c):
    kb, vb, kposb, ksegb, dq, dkb, dvb = c
    nxt = r.hop(kb, vb, kposb, ksegb)
    dq, dkb, dvb = accumulate(s, kb, vb, kposb, ksegb, dq, dkb, dvb)
    return (*nxt, dq, *r.hop(dkb, dvb))        # each dK/dV travels with its shard

  zeros = (jnp.zeros_like(qp, f32), jnp.zeros(kp.shape, f32), jnp.zeros(vp.shape, f32))
  kb, vb, kposb, ksegb, dq, dkb, dvb = jax.lax.fori_loop(
      0, r.n - 1, step, (kp, vp, kpos, kseg, *zeros))
  dq, dkb, dvb = accumulate(r.n - 1, kb, vb, kposb, ksegb, dq, dkb, dvb)
  dk, dv = r.hop(dkb, dvb)                      # the last hop brings them home
  return (r.from_zigzag(_unchunk(r, dq, 3, Tq_p, r.dc.Tq), 3),
          r.from_zigzag(_unchunk(r, dk, 2, Tk_p, r.dc.Tk), 2),
          r.from_zigzag(_unchunk(r, dv, 2, Tk_p, r.dc.Tk), 2))


# ---- the global function: custom VJP over two shard_maps -----------------------------

def _mapped(r: _Ring, local, n_extra, out_specs, mask_g, alibi, seg):
  """shard_map of local(r, qg, kh, vh, mask_g, alibi, seg, *extra) over r's mesh; the
  mask, ALiBi's arrays and the segment ids are optional (None is not mapped), and the
  `n_extra` trailing arguments are laid out like qg. Returns f(qg, kh, vh, mask_g,
  alibi, seg, *extra)."""
  given = (mask_g is not None, alibi is not None, seg is not None)
  specs = ((r.q_spec, r.kv_spec, r.kv_spec)
           + tuple(s for s, g in zip((r.mask_spec, r.alibi_spec, r.seg_spec), given) if g)
           + (r.q_spec, r.lse_spec, r.q_spec)[:n_extra])

  def f(q, k, v, *rest):
    rest = list(rest)
    opt = [rest.pop(0) if g else None for g in given]
    return local(r, q, k, v, *opt, *rest)

  mapped = shard_map(f, mesh=r.mesh, in_specs=specs, out_specs=out_specs)
  return lambda q, k, v, m, a, s, *e: mapped(
      q, k, v, *(x for x in (m, a, s) if x is not None), *e)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _ring_core(r, qg, kh, vh, mask_g, alibi, seg):
  return _core_fwd(r, qg, kh, vh, mask_g, alibi, seg)[0]


def _core_fwd(r, qg, kh, vh, mask_g, alibi, seg):
  out, lse = _mapped(r, _fwd_local, 0, (r.q_spec, r.lse_spec), mask_g, alibi, seg)(
      qg, kh, vh, mask_g, alibi, seg)
  return out, (qg, kh, vh, mask_g, alibi, seg, out, lse)


def _core_bwd(r, res, do):
  qg, kh, vh, mask_g, alibi, seg, out, lse = res
  dq, dk, dv = _mapped(r, _bwd_local, 3, (r.q_spec, r.kv_spec, r.kv_spec), mask_g,
                       alibi, seg)(qg, kh, vh, mask_g, alibi, seg, out, lse, do)
  return (dq.astype(qg.dtype), dk.astype(kh.dtype), dv.astype(vh.dtype), None, None,
          None)


_ring_core.defvjp(_core_fwd, _core_bwd)


def _make_ring(mesh, axis, n, sizes, names, d, causal, layout, block_q, block_k, scale,
               **flags) -> _Ring:
  """The _Ring of a call: the batch split over the mesh's other axes of size > 1 when
  their product divides B (a 'tensor' axis that divides Hkv splits the heads instead),
  and the zig-zag layout when causal, asked for and both lengths split into 2n chunks."""
  sizes = sizes or {}
  heads = "tensor" if sizes.get("tensor", 1) > 1 and d.Hkv % sizes["tensor"] == 0 \
      and axis != "tensor" else None
  others = tuple(a for a in (names or ()) if a not in (axis, heads) and sizes[a] > 1)
  nb = math.prod(sizes[a] for a in others)
  batch = others if others and d.B % nb == 0 else None
  nh = sizes[heads] if heads else 1
  m = 2 if causal and layout == "zigzag" and d.Tq % (2 * n) == 0 and d.Tk % (2 * n) == 0 \
      else 1
  dl = C.Dims(d.B // nb if batch else d.B, d.Tq // n, d.Tk // n, d.Hq // nh, d.Hkv // nh,
              d.D, d.Dv)
  dc = dl._replace(Tq=dl.Tq // m, Tk=dl.Tk // m)
  bq, bk = F.blocks(dc, block_q, block_k, causal)
  return _Ring(mesh=mesh, axis=axis, n=n, batch=batch, d=d, dl=dl, dc=dc, m=m,
               causal=bool(causal), scale=scale, bq=bq, bk=bk, heads=heads, **flags)


def ring(q, k, v, *, causal=False, mask=None, scale=None, block_q=None, block_k=None,
         mesh=None, axis=AXIS, layout="zigzag", positions=None, q_pos=None, k_pos=None,
         q_seg=None, k_seg=None, **kw):
  """Exact softmax attention with the sequence split over the mesh axis `axis`.

  q: (B, Tq, Hq, D), k: (B, Tk, Hkv, D), v: (B, Tk, Hkv, Dv), Hq % Hkv == 0; mask: bool
  broadcastable to (B, Hq, Tq, Tk); causal: bottom-right aligned (the contract).
  mesh: a jax.sharding.Mesh (or AbstractMesh) with an axis named `axis`; None: the
    mesh in context (`jax.set_mesh`). With no mesh, or `axis` of size 1 (or absent
    from the context mesh), this is `flash`.
  block_q, block_k: flash's tile sizes inside each device's shard (each chunk of it).
  layout: "zigzag" (default): in causal mode, when both lengths are multiples of 2P,
    the sequence is cut into 2P chunks and device p computes the queries of chunks p
    and 2P - 1 - p, so every device does the same causal work (its shards are moved
    into that layout and back inside the ring, two half-shard ppermutes each way);
    "contiguous": device p holds the p-th of P contiguous shards (the last does P
    shard pairs, the first one). Non-causal attention is always contiguous.
  positions, q_pos (B|1, Tq), k_pos (B|1, Tk): rope/rope2d (q, k rotated before the
    split) or alibi (positions split and passed round with the shards).
  q_seg (B|1, Tq), k_seg (B|1, Tk): segment ids of packed rows (attention.core.common):
    the query ids split with the queries, the key ids passed round with the shards.
  Returns (B, Tq, Hq, Dv) in q's dtype, laid out like q (sequence split over `axis`);
  fully masked rows are zeros. Tq and Tk must be multiples of the axis size.
  """
  unexpected("ring", kw)
  d = C.check_qkv(q, k, v, "ring")
  mask = C.check_mask(mask, d, "ring")
  q_seg, k_seg = C.check_segments(q_seg, k_seg, d, "ring")
  pos = P_.prepare("ring", positions, d, q_pos, k_pos)
  q, k = P_.rotate_qk(pos, q, k)
  explicit = mesh is not None
  mesh = mesh if explicit else current_mesh()
  sizes = dict(mesh.shape) if mesh is not None else {}
  if explicit and axis not in sizes:
    C.refuse("ring", f"mesh axis '{axis}'",
             f"the mesh given has axes {tuple(sizes)}; pass axis= one of them")
  n = sizes.get(axis, 1)
  if n == 1:
    return F.flash(q, k, v, causal=causal, mask=mask, scale=scale, block_q=block_q,
                   block_k=block_k, q_seg=q_seg, k_seg=k_seg, **P_.alibi_kwargs(pos))
  if d.Tq % n or d.Tk % n:
    C.refuse("ring", f"Tq={d.Tq}, Tk={d.Tk} over {n} devices",
             f"the sequence is split into {n} equal shards over mesh axis '{axis}', so "
             f"both lengths must be multiples of {n}")
  if layout not in LAYOUTS:
    C.refuse("ring", f"layout={layout!r}", f"it is one of {LAYOUTS}")
  mask_g = C.group_mask(mask, d)
  r = _make_ring(mesh, axis, n, sizes, mesh.axis_names, d, causal, layout, block_q,
                 block_k, float(C.default_scale(d.D, scale)),
                 has_mask=mask_g is not None or q_seg is not None,
                 mask_b=mask_g is not None and mask_g.shape[0] != 1,
                 mask_h=mask_g is not None and mask_g.shape[1] != 1,
                 mask_q=mask_g is not None and mask_g.shape[3] != 1,
                 mask_k=mask_g is not None and mask_g.shape[4] != 1,
                 pos_b=pos is not None and max(pos.q.shape[0], pos.k.shape[0]) != 1,
                 seg_b=q_seg is not None and max(q_seg.shape[0], k_seg.shape[0]) != 1)
  alibi = None
  if pos is not None and pos.alibi:    # one batch size for both, for the specs
    Bp = d.B if r.pos_b else 1
    alibi = (jnp.asarray(P_.slopes_for(pos.spec, d.Hq), C.compute_dtype(q.dtype)).reshape(
        1, d.Hkv, d.G), jnp.broadcast_to(pos.q, (Bp, d.Tq)),
             jnp.broadcast_to(pos.k, (Bp, d.Tk)))
  seg = None
  if q_seg is not None:                # one batch size for both, for the specs
    Bs = d.B if r.seg_b else 1
    seg = (jnp.broadcast_to(q_seg, (Bs, d.Tq)), jnp.broadcast_to(k_seg, (Bs, d.Tk)))
  out = _ring_core(r, C.split_heads_q(q, d), C.kv_heads_first(k), C.kv_heads_first(v),
                   mask_g, alibi, seg)
  return C.merge_heads_out(out).astype(q.dtype)


def runs_as(mesh, *, axis=AXIS, **unused) -> str | None:
  """The note for a ring that, on `mesh` (None: no mesh), has one device to split the
  sequence over: it is then `flash`, and a result named `ring` measured flash."""
  n = dict(mesh.shape).get(axis, 1) if mesh is not None else 1
  if n > 1:
    return None
  return (f"ring on 1 device = flash: the mesh has no axis '{axis}' of size > 1 to split "
          f"the sequence over (e.g. --config.mesh.seq=N), so ring runs flash's kernel")


register(Variant(
    name="ring", fn=ring,
    refused_options={"sinks": (
        "its shards' partial softmaxes are merged by their log-sum-exps with no "
        "sink term (the sink belongs once to the whole row, not to each shard), not "
        "built (flash, its single-device computation, takes sinks)")},
    runs_as=runs_as, paper="Liu et al. 2023 (Ring Attention)",
    time="O(N² D / P) per device", memory="O(N / P) per device", causal=True,
    masks="any", decode="KV cache (fp, int8 or fp8)", decode_impl=KV_CACHE,
    # the same FLOPs as flash in total (each of the P devices does about 1/P of them),
    # plus P - 1 hops of a K/V shard forward, P - 1 of K/V and P of dK/dV backward
    cost=F.flash_cost,
    family="exact", score=SCALED_DOT,
    kernel_options=("block_q", "block_k", "mesh", "axis", "layout"),
    summary="context-parallel flash: sequence shards on P devices of the mesh axis "
            "`seq`, K/V passed round a ring (shard_map + ppermute)",
    positions=P_.takes_qk("bias per tile; key positions travel round the ring with "
                          "their K/V shard"),
    segments="key ids travel round the ring with their K/V shard; each shard pair "
             "masked and its tiles skipped as flash's"))
