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

Causal mode (bottom-right aligned, as the contract says): a shard pair entirely
above the diagonal is skipped (`lax.cond`), and inside a visited pair flash skips and
masks by tiles. The work is not balanced: the device with the last queries visits
all P shard pairs, the first one visits one (striped or zig-zag layouts would even
it out; not done here).

Where the mesh comes from: `mesh=` if given, else the mesh in context
(`jax.set_mesh`, which train.py sets). With no mesh, or an axis of size 1, `ring` is
`flash` itself, so it is registered and usable on any single device. The batch axis
is split over the mesh's other axes (those of size > 1) when their product divides
B, else every device of a ring holds the whole batch.

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

@dataclasses.dataclass(frozen=True)
class _Ring:
  """Static facts of one ring call (hashable: it is a nondiff argument of the VJP).

  d: global sizes; dl: one device's sizes; batch: the mesh axes B is split over
  (None: not split); mask_b, mask_q, mask_k: whether the grouped mask has a B, Tq and
  (Tk axis (else 1), has_mask: whether there is a mask or segment ids (every tile is
  masked); pos_b, seg_b: whether ALiBi's positions, the segment ids have a B axis
  (else 1).
  """
  mesh: Any
  axis: str
  n: int
  batch: tuple | None
  d: C.Dims
  dl: C.Dims
  causal: bool
  scale: float
  bq: int
  bk: int
  has_mask: bool = False
  mask_b: bool = False
  mask_q: bool = False
  mask_k: bool = False
  pos_b: bool = False
  seg_b: bool = False

  # specs of the grouped layouts (see attention.core.common)
  @property
  def q_spec(self):      # (B, Hkv, G, Tq, ·)
    return P(self.batch, None, None, self.axis, None)

  @property
  def kv_spec(self):     # (B, Hkv, Tk, ·)
    return P(self.batch, None, self.axis, None)

  @property
  def lse_spec(self):    # (B, Hkv, G, Tq)
    return P(self.batch, None, None, self.axis)

  @property
  def mask_spec(self):   # (B|1, Hkv|1, G|1, Tq|1, Tk|1): Tk stays whole
    return P(self.batch if self.mask_b else None, None, None,
             self.axis if self.mask_q else None, None)

  @property
  def alibi_spec(self):  # (slopes (1, Hkv, G) whole, q_pos, k_pos (B|1, T) split on T)
    pos = P(self.batch if self.pos_b else None, self.axis)
    return (P(), pos, pos)

  @property
  def seg_spec(self):    # (q_seg (B|1, Tq), k_seg (B|1, Tk)) split on T
    ids = P(self.batch if self.seg_b else None, self.axis)
    return (ids, ids)

  def plan(self, off=None):
    return F.Plan(self.dl, self.causal, self.has_mask, self.bq, self.bk, off)

  def offset(self, me, src):
    """Causal offset of query shard `me` against key shard `src` in the whole sequence:
    key c of src is visible to query r of me when c <= r + offset."""
    return me * self.dl.Tq - src * self.dl.Tk + (self.d.Tk - self.d.Tq)

  def visible(self, me, src):
    """Whether any (query of me, key of src) pair is visible."""
    return self.offset(me, src) + self.dl.Tq - 1 >= 0

  def key_shard_mask(self, plan, mask_g, src):
    """This device's mask against key shard `src`, padded to the plan's tiles."""
    if mask_g is None:
      return None
    if self.mask_k:
      mask_g = jax.lax.dynamic_slice_in_dim(mask_g, src * self.dl.Tk, self.dl.Tk, axis=4)
    return plan.pad_mask(mask_g)

  def hop(self, *xs):
    """Every x moves one device along the ring: device p's goes to p + 1."""
    perm = [(i, (i + 1) % self.n) for i in range(self.n)]
    return tuple(jax.lax.ppermute(x, self.axis, perm) for x in xs)


# ---- one device's share, inside shard_map ---------------------------------------------

def _pad_alibi(plan, alibi):
  """A shard's ALiBi (slopes, q_pos, k_pos) with the positions padded to plan's tiles."""
  if alibi is None:
    return None
  sl, qpos, kpos = alibi
  return sl, C.pad_axis(qpos, 1, plan.Tq_p), C.pad_axis(kpos, 1, plan.Tk_p)


def _pad_seg(plan, seg):
  """A shard's segment ids (q_seg, k_seg) padded to plan's tiles (`common.pad_seg`)."""
  if seg is None:
    return None
  return C.pad_seg(seg[0], plan.Tq_p), C.pad_seg(seg[1], plan.Tk_p)


def _pad_extras(plan, alibi, seg):
  """Returns (al, sg, kpos, kseg): alibi and seg padded to plan's tiles (None where
  absent), then the key-side parts that travel round the ring with K/V, the padded
  ALiBi k_pos and k_seg shards (an int32 zero () where absent)."""
  al, sg = _pad_alibi(plan, alibi), _pad_seg(plan, seg)
  none = jnp.zeros((), jnp.int32)
  return (al, sg, none if al is None else al[2], none if sg is None else sg[1])


def _fwd_local(r: _Ring, qg, kh, vh, mask_g, alibi, seg):
  """qg (b, Hkv, G, tq, D), kh (b, Hkv, tk, D), vh (b, Hkv, tk, Dv) local shards
  (alibi: None or slopes and this device's q_pos, k_pos shards; seg: None or this
  device's q_seg, k_seg shards) -> out (b, Hkv, G, tq, Dv), lse (b, Hkv, G, tq) in the
  compute dtype."""
  plan0 = r.plan()
  f32 = C.compute_dtype(qg.dtype)
  qp = C.pad_axis(qg, 3, plan0.Tq_p)
  kp, vp = C.pad_axis(kh, 2, plan0.Tk_p), C.pad_axis(vh, 2, plan0.Tk_p)
  al, sg, kpos, kseg = _pad_extras(plan0, alibi, seg)
  me = jax.lax.axis_index(r.axis)
  rows = qp.shape[:4]

  def shard_pair(s, kb, vb, kposb, ksegb):
    src = (me - s) % r.n
    plan = r.plan(r.offset(me, src) if r.causal else None)
    ab = None if al is None else (al[0], al[1], kposb)
    sb = None if sg is None else (sg[0], ksegb)

    def visit():
      o, lse, _ = F.forward(plan, r.scale, qp, kb, vb, r.key_shard_mask(plan, mask_g, src),
                            ab, sb)
      return o.astype(f32), jnp.where(jnp.isinf(lse), C.NEG, lse).astype(f32)

    if not r.causal:
      return visit()
    skip = lambda: (jnp.zeros(rows + (r.d.Dv,), f32), jnp.full(rows, C.NEG, f32))
    return jax.lax.cond(r.visible(me, src), visit, skip)

  def merge(carry, o_s, lse_s):      # flash's online-softmax rule, a shard per block
    m, l, acc = carry
    m_new = jnp.maximum(m, lse_s)
    a, b = jnp.exp(m - m_new), jnp.exp(lse_s - m_new)
    return m_new, a * l + b, a[..., None] * acc + b[..., None] * o_s

  def step(s, c):
    kb, vb, kposb, ksegb, carry = c
    nxt = r.hop(kb, vb, kposb, ksegb)   # issued before the compute, so they can overlap
    return (*nxt, merge(carry, *shard_pair(s, kb, vb, kposb, ksegb)))

  init = (jnp.full(rows, C.NEG, f32), jnp.zeros(rows, f32),
          jnp.zeros(rows + (r.d.Dv,), f32))
  kb, vb, kposb, ksegb, carry = jax.lax.fori_loop(0, r.n - 1, step,
                                                  (kp, vp, kpos, kseg, init))
  m, l, acc = merge(carry, *shard_pair(r.n - 1, kb, vb, kposb, ksegb))
  seen = m > C.NEG / 2               # a row with no allowed key: zeros, lse = +inf
  out = jnp.where(seen[..., None], acc / jnp.where(seen, l, 1.0)[..., None], 0.0)
  lse = jnp.where(seen, m + jnp.log(jnp.where(seen, l, 1.0)), jnp.inf)
  tq = r.dl.Tq
  return out[:, :, :, :tq], lse[:, :, :, :tq]


def _bwd_local(r: _Ring, qg, kh, vh, mask_g, alibi, seg, out, lse, do):
  """Local shards plus out, lse, do (b, Hkv, G, tq, ·) -> dq, dk, dv of this device's
  shards, in the compute dtype."""
  plan0 = r.plan()
  f32 = C.compute_dtype(qg.dtype)
  Tq_p, Tk_p = plan0.Tq_p, plan0.Tk_p
  qp = C.pad_axis(qg, 3, Tq_p)
  kp, vp = C.pad_axis(kh, 2, Tk_p), C.pad_axis(vh, 2, Tk_p)
  outp, dop = C.pad_axis(out, 3, Tq_p), C.pad_axis(do, 3, Tq_p)
  lsep = C.pad_axis(lse, 3, Tq_p, jnp.inf)           # padded rows: probability 0
  al, sg, kpos, kseg = _pad_extras(plan0, alibi, seg)
  me = jax.lax.axis_index(r.axis)
  b, H, G = qg.shape[:3]
  zeros = (jnp.zeros((b, H, G, Tq_p, r.d.D), f32), jnp.zeros((b, H, Tk_p, r.d.D), f32),
           jnp.zeros((b, H, Tk_p, r.d.Dv), f32))

  def shard_pair(s, kb, vb, kposb, ksegb):
    src = (me - s) % r.n
    plan = r.plan(r.offset(me, src) if r.causal else None)
    ab = None if al is None else (al[0], al[1], kposb)
    sb = None if sg is None else (sg[0], ksegb)

    def visit():
      g = F.backward(plan, r.scale, qp, kb, vb, r.key_shard_mask(plan, mask_g, src),
                     outp, lsep, dop, ab, sb)
      return tuple(x.astype(f32) for x in g[:3])

    if not r.causal:
      return visit()
    return jax.lax.cond(r.visible(me, src), visit, lambda: zeros)

  def accumulate(s, kb, vb, kposb, ksegb, dq, dkb, dvb):
    dq_s, dk_s, dv_s = shard_pair(s, kb, vb, kposb, ksegb)
    return dq + dq_s, dkb + dk_s, dvb + dv_s

  def step(s, c):
    kb, vb, kposb, ksegb, dq, dkb, dvb = c
    nxt = r.hop(kb, vb, kposb, ksegb)
    dq, dkb, dvb = accumulate(s, kb, vb, kposb, ksegb, dq, dkb, dvb)
    return (*nxt, dq, *r.hop(dkb, dvb))        # each dK/dV travels with its shard

  kb, vb, kposb, ksegb, dq, dkb, dvb = jax.lax.fori_loop(
      0, r.n - 1, step, (kp, vp, kpos, kseg, *zeros))
  dq, dkb, dvb = accumulate(r.n - 1, kb, vb, kposb, ksegb, dq, dkb, dvb)
  dk, dv = r.hop(dkb, dvb)                      # the last hop brings them home
  return dq[:, :, :, :r.dl.Tq], dk[:, :, :r.dl.Tk], dv[:, :, :r.dl.Tk]


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


def ring(q, k, v, *, causal=False, mask=None, scale=None, block_q=None, block_k=None,
         mesh=None, axis=AXIS, positions=None, q_pos=None, k_pos=None, q_seg=None,
         k_seg=None, **kw):
  """Exact softmax attention with the sequence split over the mesh axis `axis`.

  q: (B, Tq, Hq, D), k: (B, Tk, Hkv, D), v: (B, Tk, Hkv, Dv), Hq % Hkv == 0; mask: bool
  broadcastable to (B, Hq, Tq, Tk); causal: bottom-right aligned (the contract).
  mesh: a jax.sharding.Mesh (or AbstractMesh) with an axis named `axis`; None: the
    mesh in context (`jax.set_mesh`). With no mesh, or `axis` of size 1 (or absent
    from the context mesh), this is `flash`.
  block_q, block_k: flash's tile sizes inside each device's shard.
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
  others = tuple(a for a in mesh.axis_names if a != axis and sizes[a] > 1)
  nb = math.prod(sizes[a] for a in others)
  batch = others if others and d.B % nb == 0 else None
  dl = C.Dims(d.B // nb if batch else d.B, d.Tq // n, d.Tk // n, d.Hq, d.Hkv, d.D, d.Dv)
  bq, bk = F.blocks(dl, block_q, block_k, causal)
  mask_g = C.group_mask(mask, d)
  r = _Ring(mesh=mesh, axis=axis, n=n, batch=batch, d=d, dl=dl, causal=bool(causal),
            scale=float(C.default_scale(d.D, scale)), bq=bq, bk=bk,
            has_mask=mask_g is not None or q_seg is not None,
            mask_b=mask_g is not None and mask_g.shape[0] != 1,
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
    family="exact", score=SCALED_DOT, kernel_options=("block_q", "block_k", "mesh", "axis"),
    summary="context-parallel flash: sequence shards on P devices of the mesh axis "
            "`seq`, K/V passed round a ring (shard_map + ppermute)",
    positions=P_.takes_qk("bias per tile; key positions travel round the ring with "
                          "their K/V shard"),
    segments="key ids travel round the ring with their K/V shard; each shard pair "
             "masked and its tiles skipped as flash's"))
