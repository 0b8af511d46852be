"""`flash_pallas`: FlashAttention as Pallas kernels, forward and backward.

Dao et al. 2022 (FlashAttention) with FlashAttention-2's loop order, written with
`jax.experimental.pallas` so that on a GPU it lowers to one Triton kernel per pass;
on any other backend (CPU in particular) the same kernels run with `interpret=True`.
The math is exactly `attention.flash` (online softmax, log-sum-exp residual,
bottom-right causal alignment, fully masked rows -> zeros); only the execution differs.

Kernels (the contract's layout is used as is, nothing is transposed):

  q, do, out: (B, Tq_p, Hq, ·)   k, v: (B, Tk_p, Hkv, ·)   lse, delta: (B, Hq, Tq_p)

  forward  grid (B, Hq, Tq_p / block_q). Each program holds one (block_q, D) query
           tile and loops (`lax.fori_loop`) over key/value tiles of block_k rows,
           keeping the running max `m`, running sum `l` and a (block_q, Dv) float32
           accumulator. Writes out (block_q, Dv) in q's dtype and the log-sum-exp
           (block_q,) in float32 (+inf for a row with no allowed key).
  dK, dV   grid (B, Hq, Tk_p / block_k). One key tile per program, looping over the
           query tiles that can see it; P is recomputed from lse. Writes float32
           dK, dV *per query head*; the wrapper sums the G query heads of a group.
  dQ       grid (B, Hq, Tq_p / block_q). One query tile per program, looping over
           key tiles like the forward pass.
  delta = rowsum(dO * O) is computed in plain JAX between the passes.

GQA/MQA: the BlockSpec index maps send query head h to key/value head h // G
(G = Hq // Hkv), so K and V are never repeated in memory.

Causal block skipping: the key loop of a query tile stops at the tile holding the
(bottom-right aligned) diagonal, and the query loop of a key tile starts at the
first query tile that sees it; the bounds depend on `pl.program_id`. Without a user
mask, tiles entirely below the diagonal run a second loop without any mask select.

Lengths that are not a multiple of the tile are zero-padded in the wrapper; the
true lengths are static, and padded keys are masked in the kernel (only the last
key tile pays for it). Masks: a key-padding mask (Tq axis 1, e.g. (B, 1, 1, Tk)) is
passed as an int8 (B|1, Hq|1, Tk_p) array and costs O(N); any other mask is
passed as an int8 (B|1, Hq|1, Tq_p, Tk_p) array sliced tile by tile.

Positions: RoPE rotates q and k before the kernels (attention.core.positions). ALiBi's
bias is computed in each kernel's tile loop from the tile's query and key positions,
passed as int32 (B|1, Tq_p) and (B|1, Tk_p) arrays (a (block_q,) or (block_k,) tile
each, or the whole row that the loop slices), and the program's head slope, a static
constant selected by `pl.program_id` (`_slope`): no (Tq, Tk) bias exists anywhere.

Segments (packed rows, q_seg/k_seg): the ids go to the kernels as int32 (B|1, Tq_p)
and (B|1, Tk_p) arrays (blocked like ALiBi's positions): every visited tile is masked
by its rows' and columns' ids, and a tile whose query and key id ranges [min, max]
are disjoint (so that they share no segment) is skipped, in all three kernels: a
`lax.cond` in the tile loop on the two tiles' min and max ids (an `scf.if` in Triton),
per program, i.e. per batch row and head. Packed rows have non-decreasing ids, for
which a disjoint range means exactly "no shared segment" (the trailing padding, id 0,
in a tile with a segment spans [0, s] and is visited); any ids are masked exactly.
Each kernel also writes how many tiles it computed (an int32 per program, `visited`)
for `visited_tiles`: tests/attention/test_flash_pallas.py counts them in interpret mode; what
a GPU run must confirm is that the Triton lowering keeps the branch (the skipped
tiles cost no time: the benchmark's packed rows) and the equality with `softmax`.

Dtypes: q, k, v any float dtype (float16/bfloat16/float32; float64 in interpret
mode; k and v are cast to q's dtype). Matmuls take the input dtype and accumulate
in float32; softmax statistics, lse and delta are float32 (float64 for float64
inputs). out is in q's dtype, dq/dk/dv in the dtypes of q/k/v.

Backends: `interpret=None` means interpret mode unless `jax.default_backend()` is
"gpu" and the inputs are not float64 (`default_interpret`): the Triton kernels are
built for 16- and 32-bit floats, and on an H200 (2026-11-26) float64 inputs with a
mask came out wrong through them, so float64 always takes the exact interpret path. With interpret=False the calls name `pallas.triton.CompilerParams`, which
selects Pallas' Triton lowering (JAX 0.10+ otherwise picks Mosaic GPU, which
these kernels do not target). Lowering for "cuda" is tested from a CPU host.

Triton constraints (GPU only): every tile loaded or stored must have a power-of-two
size and `tl.dot` needs every dimension >= 16, so block_q and block_k must be powers
of two >= 16 and the head dims are zero-padded to a power of two >= 16 (zeros change
neither q.k nor P@V; the padded output columns are sliced off).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

try:  # Triton backend of Pallas; only needed to lower for a GPU
  from jax.experimental.pallas import triton as _pl_triton
except ImportError:  # pragma: no cover
  _pl_triton = None

from attention.core import common as C
from attention.core import cost_model as cost_lib
from attention.core import positions as P
from attention.core.kv_cache import KV_CACHE
from attention.core.registry import Variant, register
from attention.core.scores import SCALED_DOT
from attention.core.common import unexpected

NAME = "flash_pallas"
# Tile sizes. GPU: 64 x 64 fits the registers/shared memory of one Triton program
# for head dims up to 128. Interpret mode executes every grid step and loop
# iteration as a separate XLA op, so bigger tiles (fewer steps) are faster there.
DEFAULT_BLOCK_GPU = 64
DEFAULT_BLOCK_INTERPRET = 128
MIN_BLOCK = 16

# A block dim that is squeezed out of the kernel's view of a ref.
_SQ = getattr(pl, "squeezed", None)


class _Cfg(NamedTuple):
  """Static description of one call (hashable: it is a custom_vjp nondiff arg)."""
  Tq: int        # true lengths
  Tk: int
  Tq_p: int      # padded lengths (multiples of the tiles)
  Tk_p: int
  bq: int
  bk: int
  G: int         # query heads per key/value head
  causal: bool
  mask_kind: str | None  # None, "key" (Tq axis 1) or "dense"
  mask_b: bool   # the mask has a real batch axis (else broadcast)
  mask_h: bool   # the mask has a real head axis (else broadcast)
  scale: float
  interpret: bool
  num_warps: int | None = None   # Triton launch parameters (GPU only; None: default)
  num_stages: int | None = None
  slopes: tuple | None = None    # ALiBi: one slope per query head (None: no bias)
  pos_b: bool = False            # ALiBi's positions have a real batch axis
  segments: bool = False         # segment ids are given (q_seg, k_seg)
  seg_b: bool = False            # they have a real batch axis

  @property
  def masked(self):
    """Whether every visited tile needs a mask (a user mask or segment ids)."""
    return bool(self.mask_kind) or self.segments

  @property
  def nq(self):
    return self.Tq_p // self.bq

  @property
  def nk(self):
    return self.Tk_p // self.bk

  @property
  def off(self):
    """Bottom-right alignment: query i sees keys j <= i + off."""
    return self.Tk - self.Tq

  @property
  def k_padded(self):
    return self.Tk_p != self.Tk


# ---- static geometry --------------------------------------------------------

def _next_pow2(x):
  return 1 << max(0, int(x) - 1).bit_length()


def _is_pow2(x):
  return isinstance(x, int) and x > 0 and (x & (x - 1)) == 0


def _block(T, want, name):
  """Tile size for length T: `want` (a power of two >= 16), shrunk for short T."""
  if not _is_pow2(want) or want < MIN_BLOCK:
    raise C.AttentionError(
        f"{NAME}: {name} must be a power of two >= {MIN_BLOCK} (a Triton "
        f"requirement), got {want!r}")
  return min(want, max(MIN_BLOCK, _next_pow2(T)))


def default_interpret(dtype, backend=None) -> bool:
  """What `interpret=None` means: interpret mode off a GPU, and for float64 inputs on
  one (the Triton kernels are for 16/32-bit floats; see the module docstring)."""
  backend = jax.default_backend() if backend is None else backend
  return backend != "gpu" or jnp.dtype(dtype) == jnp.float64


def _head_pad(D, interpret):
  """Head dim as the kernel sees it: padded to a power of two >= 16 on GPU."""
  return D if interpret else max(MIN_BLOCK, _next_pow2(D))


def _div(x, m):
  """x // m for a traced non-negative int32 x and a static int m (Triton-friendly)."""
  x = jnp.asarray(x, jnp.int32)
  return jax.lax.div(x, jnp.asarray(m, x.dtype))


def _cdiv_nonneg(x, m):
  """ceil(x / m) for a traced int, clipped below at 0 (no negative division)."""
  return _div(jnp.maximum(x + (m - 1), 0), m)


def _kv_range(c: _Cfg, i):
  """Key tiles for query tile i: [0, full) need no mask, [full, hi) do."""
  nk = c.nk
  if not c.causal:
    hi = jnp.int32(nk)
    full = 0 if c.masked else (nk - 1 if c.k_padded else nk)
    return jnp.int32(full), hi
  first_q = i * c.bq + c.off  # the block's first row sees keys <= first_q
  last_q = first_q + c.bq - 1
  hi = jnp.minimum(_cdiv_nonneg(last_q + 1, c.bk), nk)
  # tile j needs no causal mask iff j*bk + bk - 1 <= first_q
  full = jnp.minimum(_div(jnp.maximum(first_q + 1, 0), c.bk), hi)
  if c.masked:
    full = jnp.zeros_like(full)
  elif c.k_padded:
    full = jnp.minimum(full, nk - 1)
  return full, hi


def _q_range(c: _Cfg, j):
  """Query tiles for key tile j: [lo, end) need a mask, [end, nq) do not."""
  nq = c.nq
  if not c.causal:
    if c.masked:
      return jnp.int32(0), jnp.int32(nq)
    # only the last key tile holds padding: end = nq there, else 0 (arithmetic, since
    # Triton's lowering rejects a select between two constants)
    end = jnp.minimum(jnp.maximum(j - (c.nk - 2), 0), 1) * nq if c.k_padded else 0
    return jnp.int32(0), jnp.asarray(end, jnp.int32)
  # first tile whose last row sees key j*bk:  i*bq + bq - 1 + off >= j*bk
  lo = jnp.minimum(_cdiv_nonneg(j * c.bk - c.off - c.bq + 1, c.bq), nq)
  # first tile whose first row sees the whole key tile: i*bq + off >= j*bk + bk - 1
  end = jnp.clip(_cdiv_nonneg(j * c.bk + c.bk - 1 - c.off, c.bq), lo, nq)
  if c.masked:
    end = jnp.int32(nq)
  elif c.k_padded:
    end = jnp.where(j == c.nk - 1, nq, end)
  return lo, end


def _mask_tile(c: _Cfg, mask_ref, j):
  """The mask columns of key block j for a query-tile kernel: (bk,) key padding,
  (bq, bk) dense, or None without a mask."""
  if c.mask_kind == "key":
    return mask_ref[pl.ds(j * c.bk, c.bk)]
  if c.mask_kind == "dense":
    return mask_ref[:, pl.ds(j * c.bk, c.bk)]
  return None


def _allow(c: _Cfg, i, j, mtile, seg=None):
  """(bq, bk) bool: which (query, key) pairs of tiles (i, j) may attend.

  mtile: the mask tile already loaded, (bk,) int8 for a key mask, (bq, bk) int8
  for a dense one, or None; seg: None or the tiles' segment ids ((bq,), (bk,)) int32.
  """
  kpos = j * c.bk + jnp.arange(c.bk, dtype=jnp.int32)
  allow = None
  if c.causal:
    qpos = i * c.bq + jnp.arange(c.bq, dtype=jnp.int32)
    allow = kpos[None, :] <= qpos[:, None] + c.off
  if c.k_padded:
    ok = (kpos < c.Tk)[None, :]
    allow = ok if allow is None else allow & ok
  if mtile is not None:
    m = mtile != 0
    m = m[None, :] if m.ndim == 1 else m
    allow = m if allow is None else allow & m
  if seg is not None:
    same = seg[0][:, None] == seg[1][None, :]
    allow = same if allow is None else allow & same
  if allow is None:
    # nothing to mask (full attention, aligned lengths): the masked loop runs zero
    # times then, but it is still traced, so it needs an array
    return jnp.ones((c.bq, c.bk), bool)
  return jnp.broadcast_to(allow, (c.bq, c.bk))


# ---- kernels -----------------------------------------------------------------

def _acc_dtype(dtype):
  return C.compute_dtype(dtype)


def _mm(a, b, acc):
  """a (m, k) @ b (k, n) -> (m, n) in acc."""
  return jax.lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=acc)


def _mm_nt(a, b, acc):
  """a (m, k) @ b (n, k)^T -> (m, n) in acc."""
  return jax.lax.dot_general(a, b, (((1,), (1,)), ((), ())), preferred_element_type=acc)


def _mm_tn(a, b, acc):
  """a (k, m)^T @ b (k, n) -> (m, n) in acc."""
  return jax.lax.dot_general(a, b, (((0,), (0,)), ((), ())), preferred_element_type=acc)


def _split_mask(c, refs, n_out):
  """(inputs..., [q_pos, k_pos], [q_seg, k_seg], [mask], outputs..., [visited]) ->
  (inputs, (q_pos_ref, k_pos_ref) or None, (q_seg_ref, k_seg_ref) or None, mask_ref or
  None, outputs, visited_ref or None)."""
  n_out += c.segments
  ins, outs = list(refs[:-n_out]), list(refs[-n_out:])
  visited = outs.pop() if c.segments else None
  mask = ins.pop() if c.mask_kind else None
  seg = None
  if c.segments:
    seg, ins = (ins[-2], ins[-1]), ins[:-2]
  pos = None
  if c.slopes:
    pos, ins = (ins[-2], ins[-1]), ins[:-2]
  return tuple(ins), pos, seg, mask, tuple(outs), visited


def _range(x):
  return jnp.min(x), jnp.max(x)


def _tile_loop(seg, side, size, tile):
  """body(t, carry, masked) of a kernel's tile loop: tile(t, ids, carry, masked=masked),
  ids the other side's segment ids of tile t ((size,) int32, None without segments),
  skipped (carry returned, a `lax.cond`) when they and this program's own tile's ids
  have disjoint ranges. side: which of seg = (q_seg_ref, k_seg_ref) is this program's
  own tile (0: a query tile looping over key tiles; 1: a key tile over query tiles)."""
  if seg is None:
    return lambda t, carry, masked: tile(t, None, carry, masked=masked)
  lo, hi = _range(seg[side][...])

  def body(t, carry, masked):
    ids = seg[1 - side][pl.ds(t * size, size)]
    lo_t, hi_t = _range(ids)
    return jax.lax.cond((hi_t >= lo) & (lo_t <= hi),
                        functools.partial(tile, t, ids, masked=masked), lambda x: x, carry)
  return body


def _store_visited(ref, n):
  """Writes a program's tile count n over its (tile,) block of `visited` (or nothing)."""
  if ref is not None:
    ref[...] = jnp.full(ref.shape, n, ref.dtype)


def _slope(c: _Cfg, h, acc_t):
  """The ALiBi slope of query head h (a traced program id) in acc_t: a static constant
  picked by comparisons, so the kernels read no slope array (Hq selects of a scalar)."""
  out = jnp.zeros((), acc_t)
  for hh, m in enumerate(c.slopes):
    out = jnp.where(h == hh, jnp.asarray(m, acc_t), out)
  return out


def _bias(slope, qp, kp, acc_t):
  """ALiBi's (bq, bk) tile -slope |q_pos - k_pos| from the tile's positions."""
  return -slope * jnp.abs(qp[:, None] - kp[None, :]).astype(acc_t)


def _fwd_kernel(c: _Cfg, *refs):
  (q_ref, k_ref, v_ref), pos, seg, mask_ref, (o_ref, lse_ref), visited = \
      _split_mask(c, refs, 2)
  i = pl.program_id(2)
  acc_t = _acc_dtype(q_ref.dtype)
  q = q_ref[...]  # (bq, D)
  bq, bk, Dv = c.bq, c.bk, v_ref.shape[-1]
  if pos is not None:
    slope, qp = _slope(c, pl.program_id(1), acc_t), pos[0][...]   # qp: (bq,)
  qs = None if seg is None else seg[0][...]                       # (bq,)

  def tile(j, ks, carry, masked):
    m, l, acc, n = carry
    kj = k_ref[pl.ds(j * bk, bk), :]
    vj = v_ref[pl.ds(j * bk, bk), :]
    s = _mm_nt(q, kj, acc_t) * c.scale
    if pos is not None:
      s = s + _bias(slope, qp, pos[1][pl.ds(j * bk, bk)], acc_t)
    if masked:
      mtile = _mask_tile(c, mask_ref, j)
      s = jnp.where(_allow(c, i, j, mtile, None if seg is None else (qs, ks)), s, C.NEG)
    m_new = jnp.maximum(m, jnp.max(s, axis=1))
    p = jnp.exp(s - m_new[:, None])
    alpha = jnp.exp(m - m_new)
    l = alpha * l + jnp.sum(p, axis=1)
    acc = alpha[:, None] * acc + _mm(p.astype(vj.dtype), vj, acc_t)
    return m_new, l, acc, n + 1

  init = (jnp.full((bq,), C.NEG, acc_t), jnp.zeros((bq,), acc_t),
          jnp.zeros((bq, Dv), acc_t), jnp.int32(0))
  body = _tile_loop(seg, 0, bk, tile)
  full, hi = _kv_range(c, i)
  carry = jax.lax.fori_loop(0, full, functools.partial(body, masked=False), init)
  m, l, acc, n = jax.lax.fori_loop(full, hi, functools.partial(body, masked=True), carry)
  _store_visited(visited, n)
  # A row that saw no allowed key keeps m == NEG (its p were exp(NEG - NEG) = 1 on
  # masked entries): it returns zeros, and lse = +inf gives zero P in the backward.
  seen = m > C.NEG / 2
  l_safe = jnp.where(seen, l, 1.0)
  o_ref[...] = jnp.where(seen[:, None], acc / l_safe[:, None], 0.0).astype(o_ref.dtype)
  lse_ref[...] = jnp.where(seen, m + jnp.log(l_safe), jnp.inf).astype(lse_ref.dtype)


def _dkdv_kernel(c: _Cfg, *refs):
  (q_ref, k_ref, v_ref, do_ref, lse_ref, dl_ref), pos, seg, mask_ref, (dk_ref, dv_ref), \
      visited = _split_mask(c, refs, 2)
  j = pl.program_id(2)
  acc_t = _acc_dtype(q_ref.dtype)
  bq = c.bq
  kj = k_ref[...]  # (bk, D)
  vj = v_ref[...]  # (bk, Dv)
  mtile_key = mask_ref[...] if c.mask_kind == "key" else None  # (bk,)
  if pos is not None:
    slope, kp = _slope(c, pl.program_id(1), acc_t), pos[1][...]   # kp: (bk,)
  ks = None if seg is None else seg[1][...]                       # (bk,)

  def tile(i, qs, carry, masked):
    dk, dv, n = carry
    rows = pl.ds(i * bq, bq)
    qi = q_ref[rows, :]
    doi = do_ref[rows, :]
    lse = lse_ref[rows]
    delta = dl_ref[rows]
    s = _mm_nt(qi, kj, acc_t) * c.scale
    if pos is not None:
      s = s + _bias(slope, pos[0][rows], kp, acc_t)
    p = jnp.exp(s - lse[:, None])
    if masked:
      mtile = mask_ref[rows, :] if c.mask_kind == "dense" else mtile_key
      p = jnp.where(_allow(c, i, j, mtile, None if seg is None else (qs, ks)), p, 0.0)
    dv = dv + _mm_tn(p.astype(doi.dtype), doi, acc_t)
    dp = _mm_nt(doi, vj, acc_t)
    ds = p * (dp - delta[:, None]) * c.scale
    dk = dk + _mm_tn(ds.astype(qi.dtype), qi, acc_t)
    return dk, dv, n + 1

  init = (jnp.zeros(dk_ref.shape, acc_t), jnp.zeros(dv_ref.shape, acc_t), jnp.int32(0))
  body = _tile_loop(seg, 1, bq, tile)
  lo, end = _q_range(c, j)
  carry = jax.lax.fori_loop(lo, end, functools.partial(body, masked=True), init)
  dk, dv, n = jax.lax.fori_loop(end, c.nq, functools.partial(body, masked=False), carry)
  _store_visited(visited, n)
  dk_ref[...] = dk.astype(dk_ref.dtype)
  dv_ref[...] = dv.astype(dv_ref.dtype)


def _dq_kernel(c: _Cfg, *refs):
  (q_ref, k_ref, v_ref, do_ref, lse_ref, dl_ref), pos, seg, mask_ref, (dq_ref,), \
      visited = _split_mask(c, refs, 1)
  i = pl.program_id(2)
  acc_t = _acc_dtype(q_ref.dtype)
  bk = c.bk
  qi = q_ref[...]
  doi = do_ref[...]
  lse = lse_ref[...]
  delta = dl_ref[...]
  if pos is not None:
    slope, qp = _slope(c, pl.program_id(1), acc_t), pos[0][...]   # qp: (bq,)
  qs = None if seg is None else seg[0][...]                       # (bq,)

  def tile(j, ks, carry, masked):
    dq, n = carry
    kj = k_ref[pl.ds(j * bk, bk), :]
    vj = v_ref[pl.ds(j * bk, bk), :]
    s = _mm_nt(qi, kj, acc_t) * c.scale
    if pos is not None:
      s = s + _bias(slope, qp, pos[1][pl.ds(j * bk, bk)], acc_t)
    p = jnp.exp(s - lse[:, None])
    if masked:
      mtile = _mask_tile(c, mask_ref, j)
      p = jnp.where(_allow(c, i, j, mtile, None if seg is None else (qs, ks)), p, 0.0)
    dp = _mm_nt(doi, vj, acc_t)
    ds = p * (dp - delta[:, None]) * c.scale
    return dq + _mm(ds.astype(kj.dtype), kj, acc_t), n + 1

  body = _tile_loop(seg, 0, bk, tile)
  full, hi = _kv_range(c, i)
  carry = jax.lax.fori_loop(0, full, functools.partial(body, masked=False),
                            (jnp.zeros(dq_ref.shape, acc_t), jnp.int32(0)))
  dq, n = jax.lax.fori_loop(full, hi, functools.partial(body, masked=True), carry)
  dq_ref[...] = dq.astype(dq_ref.dtype)
  _store_visited(visited, n)


# ---- pallas_call wrappers ----------------------------------------------------

def _spec(block_shape, index_map):
  return pl.BlockSpec(tuple(_SQ if b is None else b for b in block_shape), index_map)


def _mask_spec(c: _Cfg, by_q_tile: bool):
  """BlockSpec of the int8 mask for a (b, h, tile) grid.

  by_q_tile: the grid's third axis walks query tiles (forward, dQ) rather than key
  tiles (dK/dV).
  """
  mb = (lambda b: b) if c.mask_b else (lambda b: 0)
  mh = (lambda h: h) if c.mask_h else (lambda h: 0)
  if c.mask_kind == "key":
    if by_q_tile:
      return _spec((None, None, c.Tk_p), lambda b, h, t: (mb(b), mh(h), 0))
    return _spec((None, None, c.bk), lambda b, h, t: (mb(b), mh(h), t))
  if by_q_tile:
    return _spec((None, None, c.bq, c.Tk_p), lambda b, h, t: (mb(b), mh(h), t, 0))
  return _spec((None, None, c.Tq_p, c.bk), lambda b, h, t: (mb(b), mh(h), 0, t))


def _compiler_params(c: _Cfg):
  """Triton parameters on GPU: naming them selects the Triton lowering (newer JAX
  versions otherwise default to Mosaic GPU, which these kernels do not target)."""
  if c.interpret:
    return None
  if _pl_triton is None:
    raise C.AttentionError(
        f"{NAME}: this JAX has no Pallas Triton backend; pass interpret=True")
  # one stage at 16-row key tiles: with two, Triton's dQ kernel came out wrong at
  # 64/16 tiles and head dims padded to 16 (dq off by up to 2.0 in bf16, H100,
  # 2026-11-26; results/benchmarks/gpu_runs.md), with one it matched the interpreter
  return _pl_triton.CompilerParams(
      num_warps=c.num_warps or (4 if c.bk <= 64 else 8),
      num_stages=c.num_stages or (1 if c.bk <= 16 else 2))


def _pos_specs(c: _Cfg, by_q_tile: bool):
  """BlockSpecs of ALiBi's int32 (B|1, Tq_p) and (B|1, Tk_p) positions for a (b, h,
  tile) grid: the tile's own block, the whole row of the other side (the loop slices
  it)."""
  pb = (lambda b: b) if c.pos_b else (lambda b: 0)
  if by_q_tile:
    return [_spec((None, c.bq), lambda b, h, t: (pb(b), t)),
            _spec((None, c.Tk_p), lambda b, h, t: (pb(b), 0))]
  return [_spec((None, c.Tq_p), lambda b, h, t: (pb(b), 0)),
          _spec((None, c.bk), lambda b, h, t: (pb(b), t))]


def _seg_specs(c: _Cfg, by_q_tile: bool):
  """BlockSpecs of the int32 (B|1, Tq_p) and (B|1, Tk_p) segment ids for a (b, h, tile)
  grid, laid out as ALiBi's positions (`_pos_specs`)."""
  return _pos_specs(c._replace(pos_b=c.seg_b), by_q_tile)


def _visited_spec(c: _Cfg, by_q_tile: bool, B: int, Hq: int):
  """(BlockSpec, shape) of the int32 tile counts (B, Hq, Tq_p or Tk_p): each program
  writes its count over its own tile's block (a power-of-two block, for Triton)."""
  b, T = (c.bq, c.Tq_p) if by_q_tile else (c.bk, c.Tk_p)
  return (_spec((None, None, b), lambda b_, h, t: (b_, h, t)),
          jax.ShapeDtypeStruct((B, Hq, T), jnp.int32))


def _call(c: _Cfg, kernel, grid, in_specs, out_specs, out_shape, args, mask, pos=None,
          seg=None):
  """One pallas_call; the optional inputs (ALiBi's positions, the segment ids, the
  mask) are appended in that order, and with segments the specs get theirs and the
  tile counts (see `_split_mask`)."""
  if c.slopes:
    args = args + tuple(pos)
  if c.segments:
    by_q = kernel is not _dkdv_kernel
    in_specs = list(in_specs)                # after the positions', before the mask's
    in_specs[len(args):len(args)] = _seg_specs(c, by_q)
    args = args + tuple(seg)
    vspec, vshape = _visited_spec(c, by_q, out_shape[0].shape[0], grid[1])
    out_specs, out_shape = list(out_specs) + [vspec], list(out_shape) + [vshape]
  if c.mask_kind:
    args = args + (mask,)
  return pl.pallas_call(
      functools.partial(kernel, c), grid=grid, in_specs=in_specs, out_specs=out_specs,
      out_shape=out_shape, interpret=c.interpret, compiler_params=_compiler_params(c),
      name=f"{NAME}_{kernel.__name__[1:-7]}",
  )(*args)


def _forward(c: _Cfg, q, k, v, mask, pos=None, seg=None):
  """Padded q (B,Tq_p,Hq,D), k (B,Tk_p,Hkv,D), v (B,Tk_p,Hkv,Dv) -> out, lse (B,Hq,Tq_p),
  visited (B, Hq, nq) int32 tiles computed per program (None without segments);
  pos: ALiBi's padded (q_pos, k_pos) when c.slopes; seg: the padded (q_seg, k_seg)
  when c.segments."""
  B, _, Hq, D = q.shape
  Dv = v.shape[-1]
  G = c.G
  in_specs = [
      _spec((None, c.bq, None, D), lambda b, h, i: (b, i, h, 0)),
      _spec((None, c.Tk_p, None, D), lambda b, h, i: (b, 0, h // G, 0)),
      _spec((None, c.Tk_p, None, Dv), lambda b, h, i: (b, 0, h // G, 0)),
  ]
  if c.slopes:
    in_specs += _pos_specs(c, by_q_tile=True)
  if c.mask_kind:
    in_specs.append(_mask_spec(c, by_q_tile=True))
  out_specs = [
      _spec((None, c.bq, None, Dv), lambda b, h, i: (b, i, h, 0)),
      _spec((None, None, c.bq), lambda b, h, i: (b, h, i)),
  ]
  out_shape = [jax.ShapeDtypeStruct((B, c.Tq_p, Hq, Dv), q.dtype),
               jax.ShapeDtypeStruct((B, Hq, c.Tq_p), _acc_dtype(q.dtype))]
  out, lse, *visited = _call(c, _fwd_kernel, (B, Hq, c.nq), in_specs, out_specs,
                             out_shape, (q, k, v), mask, pos, seg)
  return out, lse, visited[0][:, :, ::c.bq] if visited else None


def _backward(c: _Cfg, q, k, v, mask, out, lse, do, pos=None, seg=None):
  """dq, dk, dv for padded inputs; dq in float32-or-wider, dk/dv summed over groups;
  and the tiles computed per program, ((B, Hq, nk) by dK/dV, (B, Hq, nq) by dQ)
  int32 (None without segments)."""
  B, _, Hq, D = q.shape
  Hkv, Dv = k.shape[2], v.shape[-1]
  G = c.G
  acc_t = _acc_dtype(q.dtype)
  delta = jnp.einsum("bthd,bthd->bht", do.astype(acc_t), out.astype(acc_t))
  args = (q, k, v, do, lse, delta)

  # dK, dV: one key tile per program, per query head.
  in_specs = [
      _spec((None, c.Tq_p, None, D), lambda b, h, j: (b, 0, h, 0)),
      _spec((None, c.bk, None, D), lambda b, h, j: (b, j, h // G, 0)),
      _spec((None, c.bk, None, Dv), lambda b, h, j: (b, j, h // G, 0)),
      _spec((None, c.Tq_p, None, Dv), lambda b, h, j: (b, 0, h, 0)),
      _spec((None, None, c.Tq_p), lambda b, h, j: (b, h, 0)),
      _spec((None, None, c.Tq_p), lambda b, h, j: (b, h, 0)),
  ]
  if c.slopes:
    in_specs += _pos_specs(c, by_q_tile=False)
  if c.mask_kind:
    in_specs.append(_mask_spec(c, by_q_tile=False))
  out_specs = [_spec((None, c.bk, None, D), lambda b, h, j: (b, j, h, 0)),
               _spec((None, c.bk, None, Dv), lambda b, h, j: (b, j, h, 0))]
  out_shape = [jax.ShapeDtypeStruct((B, c.Tk_p, Hq, D), acc_t),
               jax.ShapeDtypeStruct((B, c.Tk_p, Hq, Dv), acc_t)]
  dk, dv, *vis_kv = _call(c, _dkdv_kernel, (B, Hq, c.nk), in_specs, out_specs,
                          out_shape, args, mask, pos, seg)
  # (B, Tk_p, Hq, ·) -> sum over the G query heads of each key/value head.
  dk = dk.reshape(B, c.Tk_p, Hkv, G, D).sum(3)
  dv = dv.reshape(B, c.Tk_p, Hkv, G, Dv).sum(3)

  # dQ: one query tile per program.
  in_specs = [
      _spec((None, c.bq, None, D), lambda b, h, i: (b, i, h, 0)),
      _spec((None, c.Tk_p, None, D), lambda b, h, i: (b, 0, h // G, 0)),
      _spec((None, c.Tk_p, None, Dv), lambda b, h, i: (b, 0, h // G, 0)),
      _spec((None, c.bq, None, Dv), lambda b, h, i: (b, i, h, 0)),
      _spec((None, None, c.bq), lambda b, h, i: (b, h, i)),
      _spec((None, None, c.bq), lambda b, h, i: (b, h, i)),
  ]
  if c.slopes:
    in_specs += _pos_specs(c, by_q_tile=True)
  if c.mask_kind:
    in_specs.append(_mask_spec(c, by_q_tile=True))
  out_specs = [_spec((None, c.bq, None, D), lambda b, h, i: (b, i, h, 0))]
  out_shape = [jax.ShapeDtypeStruct((B, c.Tq_p, Hq, D), acc_t)]
  dq, *vis_q = _call(c, _dq_kernel, (B, Hq, c.nq), in_specs, out_specs, out_shape, args,
                     mask, pos, seg)
  visited = (vis_kv[0][:, :, ::c.bk], vis_q[0][:, :, ::c.bq]) if c.segments else None
  return dq, dk, dv, visited


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _core(c, q, k, v, mask, pos, seg):
  return _forward(c, q, k, v, mask, pos, seg)[0]


def _core_fwd(c, q, k, v, mask, pos, seg):
  out, lse, _ = _forward(c, q, k, v, mask, pos, seg)
  return out, (q, k, v, mask, pos, seg, out, lse)


def _core_bwd(c, res, do):
  q, k, v, mask, pos, seg, out, lse = res
  dq, dk, dv, _ = _backward(c, q, k, v, mask, out, lse, do, pos, seg)
  return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None, None


_core.defvjp(_core_fwd, _core_bwd)


def _kernel_mask(mask, d: C.Dims, Tq_p, Tk_p):
  """Contract mask (B|1, Hq|1, Tq|1, Tk|1) bool -> (kind, int8 array, has_b, has_h).

  kind "key": (B|1, Hq|1, Tk_p) for masks whose Tq axis is 1;
  kind "dense": (B|1, Hq|1, Tq_p, Tk_p) otherwise. Padding is False (masked).
  """
  if mask is None:
    return None, None, False, False
  Bm, Hm, Tqm, _ = mask.shape
  mask = jnp.broadcast_to(mask, (Bm, Hm, Tqm, d.Tk)).astype(jnp.int8)
  if Tqm == 1:
    m = C.pad_axis(mask[:, :, 0, :], 2, Tk_p)
    kind = "key"
  else:
    m = C.pad_axis(C.pad_axis(mask, 2, Tq_p), 3, Tk_p)
    kind = "dense"
  return kind, m, Bm != 1, Hm != 1


def flash_pallas(q, k, v, *, causal=False, mask=None, scale=None, block_q=None,
                 block_k=None, interpret=None, num_warps=None, num_stages=None,
                 positions=None, q_pos=None, k_pos=None, q_seg=None, k_seg=None, **kw):
  """Exact softmax attention by Pallas FlashAttention kernels (custom VJP).

  q: (B, Tq, Hq, D), k: (B, Tk, Hkv, D), v: (B, Tk, Hkv, Dv), Hq % Hkv == 0, any
    float dtype (all three the same dtype is the fast path; k and v are cast to
    q's dtype otherwise).
  mask: bool broadcastable to (B, Hq, Tq, Tk), True = may attend. A mask whose Tq
    axis is 1 (key padding, (B, 1, 1, Tk)) costs O(N) memory; any other mask is
    passed to the kernels as an O(Tq * Tk) int8 array.
  causal: bottom-right aligned (query i sees keys j <= i + Tk - Tq).
  scale: logits multiplier, 1/sqrt(D) unless given.
  block_q, block_k: tile sizes, powers of two >= 16 (default 64 on GPU, 128 in
    interpret mode; shrunk to the next power of two of a short length).
  interpret: run the kernels in Pallas interpret mode; default (`default_interpret`):
    True unless JAX's default backend is a GPU, and True for float64 inputs.
  num_warps, num_stages: Triton launch parameters of every kernel (GPU only; default
    4 warps for block_k <= 64 else 8; 2 stages, 1 for block_k 16, where 2 made the
    dQ kernel wrong on an H100 at head dims padded to 16); `scripts/benchmark_gpu.py`
    tunes them with the block sizes.
  positions, q_pos (B|1, Tq), k_pos (B|1, Tk): rope/rope2d (q, k rotated first) or
    alibi (the bias computed in the kernels' tile loops); see attention.core.positions.
  q_seg (B|1, Tq), k_seg (B|1, Tk): segment ids of packed rows (attention.core.common):
    each tile masked by its ids, a tile whose query and key id ranges are disjoint
    skipped in every kernel (with non-decreasing ids, as packing lays them out: every
    tile that shares no segment).
  Returns (B, Tq, Hq, Dv) in q's dtype; rows with no allowed key are zeros and
  get zero gradients. Softmax statistics are float32 (float64 for float64 inputs).
  Raises AttentionError for bad shapes, masks or tile sizes.
  """
  unexpected(NAME, kw)
  c, args = _setup(q, k, v, causal, mask, scale, block_q, block_k, interpret, num_warps,
                   num_stages, positions, q_pos, k_pos, q_seg, k_seg)
  if c is None:   # nothing to attend to: the contract's zeros
    return args
  qp, kp, vp, m, apos, seg, d = args
  out = _core(c, qp, kp, vp, m, apos, seg)
  return out[:, : d.Tq, :, : d.Dv]


def _setup(q, k, v, causal, mask, scale, block_q, block_k, interpret, num_warps,
           num_stages, positions, q_pos, k_pos, q_seg, k_seg):
  """(cfg, (q, k, v padded, kernel mask, ALiBi's positions, segment ids, dims)) of one
  call, checked; (None, zeros) when Tq or Tk is 0."""
  d = C.check_qkv(q, k, v, NAME)
  mask = C.check_mask(mask, d, NAME)
  q_seg, k_seg = C.check_segments(q_seg, k_seg, d, NAME)
  pos = P.prepare(NAME, positions, d, q_pos, k_pos)
  q, k = P.rotate_qk(pos, q, k)
  for name, x in (("q", q), ("k", k), ("v", v)):
    if not jnp.issubdtype(x.dtype, jnp.floating):
      raise C.AttentionError(f"{NAME}: {name} must be a float array, got {x.dtype}")
  if interpret is None:
    interpret = default_interpret(jnp.result_type(q, k, v))
  interpret = bool(interpret)
  default_block = DEFAULT_BLOCK_INTERPRET if interpret else DEFAULT_BLOCK_GPU
  bq = _block(d.Tq, default_block if block_q is None else block_q, "block_q")
  bk = _block(d.Tk, default_block if block_k is None else block_k, "block_k")
  if d.Tq == 0 or d.Tk == 0:  # nothing to attend to: the contract's zeros
    return None, jnp.zeros((d.B, d.Tq, d.Hq, d.Dv), q.dtype)
  k = k.astype(q.dtype)
  v = v.astype(q.dtype)
  Tq_p, Tk_p = C.round_up(d.Tq, bq), C.round_up(d.Tk, bk)
  kind, m, mask_b, mask_h = _kernel_mask(mask, d, Tq_p, Tk_p)
  alibi = pos is not None and pos.alibi
  apos = None
  if alibi:     # both padded (zeros: padded rows are dropped, padded keys masked)
    Bp = max(pos.q.shape[0], pos.k.shape[0])
    apos = (jnp.broadcast_to(C.pad_axis(pos.q, 1, Tq_p), (Bp, Tq_p)),
            jnp.broadcast_to(C.pad_axis(pos.k, 1, Tk_p), (Bp, Tk_p)))
  seg = None
  if q_seg is not None:   # one batch size for both; padded with the last id (sorted)
    Bs = max(q_seg.shape[0], k_seg.shape[0])
    seg = (jnp.broadcast_to(C.pad_seg(q_seg, Tq_p), (Bs, Tq_p)),
           jnp.broadcast_to(C.pad_seg(k_seg, Tk_p), (Bs, Tk_p)))
  c = _Cfg(Tq=d.Tq, Tk=d.Tk, Tq_p=Tq_p, Tk_p=Tk_p, bq=bq, bk=bk, G=d.G, causal=bool(causal),
           mask_kind=kind, mask_b=mask_b, mask_h=mask_h,
           scale=float(C.default_scale(d.D, scale)), interpret=interpret,
           num_warps=num_warps, num_stages=num_stages,
           slopes=tuple(P.slopes_for(pos.spec, d.Hq).tolist()) if alibi else None,
           pos_b=alibi and apos[0].shape[0] != 1, segments=seg is not None,
           seg_b=seg is not None and seg[0].shape[0] != 1)
  Dp, Dvp = _head_pad(d.D, interpret), _head_pad(d.Dv, interpret)
  qp = C.pad_axis(C.pad_axis(q, 1, Tq_p), 3, Dp)
  kp = C.pad_axis(C.pad_axis(k, 1, Tk_p), 3, Dp)
  vp = C.pad_axis(C.pad_axis(v, 1, Tk_p), 3, Dvp)
  return c, (qp, kp, vp, m, apos, seg, d)


def visited_tiles(q, k, v, *, causal=False, mask=None, q_seg=None, k_seg=None,
                  block_q=None, block_k=None, interpret=None) -> dict:
  """{"forward", "dkdv", "dq": the (query tile, key tile) pairs each kernel computed,
  summed over its programs (what segment and causal skipping leave), "tiles": B * Hq
  * nq * nk}, from the kernels' own counts (`visited` outputs, written only with
  segment ids, which this needs). Arguments as `flash_pallas`."""
  c, args = _setup(q, k, v, causal, mask, None, block_q, block_k, interpret, None, None,
                   None, None, None, q_seg, k_seg)
  if c is None or not c.segments:
    raise C.AttentionError(f"{NAME}: visited_tiles counts tiles only with segment ids")
  qp, kp, vp, m, _, seg, d = args
  out, lse, n_fwd = _forward(c, qp, kp, vp, m, None, seg)
  *_, (n_kv, n_q) = _backward(c, qp, kp, vp, m, out, lse, jnp.ones_like(out), None, seg)
  return {"forward": int(n_fwd.sum()), "dkdv": int(n_kv.sum()), "dq": int(n_q.sum()),
          "tiles": d.B * d.Hq * c.nq * c.nk}


def _cost(d, *, causal=False, mode="fwd", itemsize=4, block_q=DEFAULT_BLOCK_GPU, **kw):
  """flash's tiled cost at the kernel's tiles; with segment ids an upper bound (the
  skipped tiles are not modelled: they depend on the segment lengths)."""
  return cost_lib.tiled(d, mode=mode, itemsize=itemsize, causal=causal,
                        block_q=min(block_q, max(MIN_BLOCK, _next_pow2(d.Tq))))


register(Variant(
    name=NAME, fn=flash_pallas,
    refused_options={"sinks": (
        "its Triton kernels start each row's running max and sum at -inf and 0 with"
        " no per-head logit to start them from (flash, its pure-JAX tiles, carries "
        "sinks exactly and keeps to them on a GPU when sinks are on)")},
    paper="Dao et al. 2022 (FlashAttention), Pallas kernel",
    time="O(N² D)", memory="O(N)", causal=True, masks="any",
    decode="KV cache (fp, int8 or fp8)", decode_impl=KV_CACHE, cost=_cost,
    family="exact", score=SCALED_DOT,
    kernel_options=("block_q", "block_k", "interpret", "num_warps", "num_stages"),
    summary="FlashAttention forward/backward as Pallas (Triton) kernels; "
            "interpret mode off-GPU",
    positions=P.takes_qk("bias computed in the kernels' tile loops from the tile's "
                         "positions"),
    segments="a per-tile mask from the tile's ids; a tile whose query and key id ranges "
             "are disjoint (no shared segment, for packed rows) skipped by a branch in "
             "every kernel (forward, dK/dV, dQ)"))
