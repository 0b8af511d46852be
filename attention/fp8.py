"""`fp8`: attention with Q, K, V and P rounded to float8 e4m3, emulated with casts.

FlashAttention-3's FP8 forward pass (Shah et al. 2024, §3.3), with its two devices
against quantization error as options:

  granularity  how many elements share one float32 scale s = absmax / 448:
    "token"    one per (batch, position, head) row of D elements (default): the 1 x D
               tiles of fine-grained FP8 recipes, the layout of the fp8 KV cache.
    "block"    FA3's block quantization: one per (batch, head, tile of block_q query
               rows) for Q and per (batch, kv head, tile of block_k key rows) for K and V.
    "tensor"   one per (batch, head) for each of Q, K and V: the per-tensor baseline.
  hadamard     incoherent processing: Q and K are multiplied along D by M = diag(σ) H /
               sqrt(D'), H the Walsh-Hadamard matrix of order D' (D rounded up to a
               power of two, q and k zero-padded), σ random signs drawn from
               `hadamard_seed`, computed by the fast Walsh-Hadamard transform in
               O(D log D). M is orthogonal, so (QM)(KM)ᵀ = QKᵀ in exact arithmetic,
               while an outlier channel is spread over all D' channels before rounding.

Algorithm (tiles of block_q x block_k, flash's online softmax and causal block skipping):
  1. q, k (rotated if hadamard) and v are quantized: x8 = e4m3(x / s), s in float32.
  2. For each key tile: S = (q8 · k8ᵀ) s_q s_k scale, accumulated in float32
     (`preferred_element_type`); running max m; P = exp(S - m).
  3. P is rounded to e4m3 and P·V is one FP8 matmul with float32 accumulation:
     block, tensor: as FA3 (hopper/softmax.h), P8 = e4m3(2^8 P), so that P uses
       [0, 256] of e4m3's range instead of [0, 1], and the tile's V scale and 2^-8
       multiply the product: acc += (P8 · v8) s_v / 2^8;
     token: V's per-token scales cannot be factored out of the product, so they
       multiply P's columns before rounding, with one scale per row and tile:
       W = P s_v, s_p = max_j W / 448, acc += (e4m3(W / s_p) · v8) s_p.
  4. The row sum l accumulates the unrounded float32 P, as in FA3; out = acc / l.
The `quantize` option ("qkvp" by default) names the operands that are rounded, so
that an error study can attribute the error to each.

Causality and masks. A scale shared by several positions lets one position's
magnitude change another's rounding: with "block" or "tensor", a future or masked
key would change a visible output. So those two granularities refuse causal=True
and masks; "token" honours the whole contract (causal, any mask, GQA, a row with no
allowed key returns zeros), bit for bit: no position's rounding depends on another's.

Segments (packed rows, q_seg/k_seg): with "token" scales each tile is masked by its
rows' and columns' ids (flash's `Plan.block_mask`, never an N x N array; no tile is
skipped: fp8 is an emulation for error studies), the backward is flash's, which skips
them. "block" and "tensor" refuse them: a scale shared across segments would make one
segment's rounding depend on another's magnitudes. With "token" scales a packed
segment equals it alone up to P's rounding: P's scale is per row and key tile, and a
segment's keys fall into other tiles packed than alone (equal when one tile holds
them both ways, as in the contract tests).

Emulation. Off GPUs the e4m3 values are made by casts (`round_e4m3`: round to
nearest even, saturating at ±448, as PTX cvt.rn.satfinite does) and the matmuls take
float8 operands with float32 results, which XLA:CPU computes in float32: each
product of two e4m3 numbers is exact there, the sums are float32 sums (tested
against numpy float8 casts in tests/attention/test_fp8.py). The values can differ from an FP8
kernel on Hopper in these places:
  * accumulation: Hopper's FP8 tensor cores keep about 14 bits of the running sum
    (DeepSeek-V3 report, §3.3.2), not float32's 24; sums of long dot products
    (D, and block_k keys in P·V) lose more low bits there than here;
  * exp: FA3 computes exp2 with the hardware approximation; a P within an ulp or
    two of an e4m3 rounding midpoint can round the other way;
  * tiles and order: P is relative to the running max of the tiles seen so far, so
    the tile sizes (FA3's are chosen per head dim) change which P are rounded how;
    the order of float32 additions differs too;
  * FA3 writes its output in bf16; here the output is float32 (cast to q's dtype).
On a GPU the same code runs with real FP8 matmuls (XLA lowers float8 dots to cuBLASLt
FP8 GEMMs where it can); it is an emulation of the algorithm, not a fused kernel.

Backward pass. FA3's FP8 path is forward-only. Here the gradients are those of exact
attention at the unquantized inputs (flash's backward pass, recomputing its forward):
a straight-through estimator for every rounding step and for the rotation, which
leaves QKᵀ unchanged. Training through `fp8` therefore sees FP8 values in the forward
pass and float32 gradients.

Decoding: the KV cache (cache_dtype None, "int8" or "fp8"); each step runs this
function on the cache's positions with a position mask, so it equals the causal
forward pass when both use the same key tiles (block_k).

Positions: RoPE rotates q and k before they are quantized (rounding sees the rotated
values, as it would in a kernel that applies RoPE in its prologue); ALiBi's bias is
added per tile to the float32 scores (flash's `Plan.block_bias`), never rounded, and
kept by the exact backward pass.
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from attention.core import common as C
from attention.core import cost_model as cost_lib
from attention import flash as flash_lib
from attention.core import kv_cache as KV
from attention.core import positions as P
from attention.core import quantize as Q
from attention.core.decode import DecodeImpl
from attention.core.registry import Variant, register
from attention.core.common import unexpected

GRANULARITIES = ("token", "block", "tensor")
OPERANDS = "qkvp"
# FA3's tiles are 128 query rows by 128-176 keys at head dims 64-128; 128 x 128 here.
DEFAULT_BLOCK = 128
# FA3's offset for FP8: P = exp2(x - (max - 8)) lies in [0, 256] (hopper/softmax.h).
P_OFFSET = 256.0


# ---- incoherent processing ----------------------------------------------------

def fwht(x):
  """Unnormalised fast Walsh-Hadamard transform along the last axis: x H.

  x: (..., n) with n a power of two. H is Sylvester's Hadamard matrix (symmetric,
  H H = n I); n log2 n additions.
  """
  n = x.shape[-1]
  if n & (n - 1):
    raise C.AttentionError(f"fwht: length {n} is not a power of two")
  lead, h = x.shape[:-1], 1
  while h < n:
    y = x.reshape(*lead, n // (2 * h), 2, h)
    a, b = y[..., 0, :], y[..., 1, :]
    x = jnp.stack([a + b, a - b], axis=-2).reshape(*lead, n)
    h *= 2
  return x


def hadamard_size(D: int) -> int:
  """D' = the power of two >= D that the rotation works in."""
  return 1 << max(0, (D - 1).bit_length())


def hadamard_signs(D: int, seed: int = 0, dtype=jnp.float32):
  """The random ±1 diagonal σ of the rotation, (D',), from `seed`."""
  return jax.random.rademacher(jax.random.key(seed), (hadamard_size(D),), dtype)


def rotate(x, seed: int = 0):
  """x M with M = diag(σ) H / sqrt(D'): (..., D) -> (..., D') (x zero-padded to D').

  M is orthogonal (M Mᵀ = I), so rotate(q) · rotate(k) = q · k in exact arithmetic.
  Computed in float32 (float64 stays float64).
  """
  n, dt = hadamard_size(x.shape[-1]), C.compute_dtype(x.dtype)
  x = C.pad_axis(x.astype(dt), x.ndim - 1, n)
  return fwht(x * hadamard_signs(n, seed, dt)) / math.sqrt(n)


# ---- quantization ---------------------------------------------------------------

def row_scales(absmax, granularity: str, block: int):
  """Per-row scales (..., T) from per-row absmax (..., T), T a multiple of `block`.

  token: absmax / 448 per row; block: the max over each run of `block` rows; tensor:
  the max over all T rows. A zero scale (all-zero group) becomes 1, so that x / s is
  finite and x8 * s is still exactly 0.
  """
  if granularity == "block":
    T = absmax.shape[-1]
    a = jnp.max(absmax.reshape(*absmax.shape[:-1], T // block, block), -1, keepdims=True)
    absmax = jnp.broadcast_to(a, a.shape[:-1] + (block,)).reshape(absmax.shape)
  elif granularity == "tensor":
    absmax = jnp.broadcast_to(jnp.max(absmax, -1, keepdims=True), absmax.shape)
  s = absmax / Q.E4M3_MAX
  return jnp.where(s == 0, 1.0, s)


def quantize(x, granularity: str = "token", block: int = DEFAULT_BLOCK):
  """x (..., T, E) float -> (x8 float8_e4m3fn (..., T, E), s float32 (..., T)).

  One scale per row, per `block` rows or per (..., ) slice (see `row_scales`);
  T must be a multiple of `block` for "block". x ≈ x8 * s[..., None].
  """
  x = x.astype(jnp.float32)
  s = row_scales(jnp.max(jnp.abs(x), -1), granularity, block)
  return Q.round_e4m3(x / s[..., None]), s


class Opts(NamedTuple):
  """The static options of one call (hashable: the custom VJP's nondiff argument)."""
  causal: bool
  scale: float
  granularity: str
  hadamard: bool
  seed: int
  bq: int
  bk: int
  quantize: str
  slopes: tuple | None = None    # ALiBi's per query head slopes (None: no bias)


def _alibi(o: Opts, apos, d: C.Dims, Tq_p, Tk_p):
  """flash's block_bias argument from ALiBi's (q_pos, k_pos), or None."""
  if o.slopes is None:
    return None
  sl = jnp.asarray(o.slopes, jnp.float32).reshape(1, d.Hkv, d.G)
  return sl, C.pad_axis(apos[0], 1, Tq_p), C.pad_axis(apos[1], 1, Tk_p)


def _forward(o: Opts, q, k, v, mask, apos=None, seg=None):
  """The FP8 forward pass under the contract's layout; returns (B, Tq, Hq, Dv) float32.
  apos: ALiBi's (q_pos (B|1, Tq), k_pos (B|1, Tk)) when o.slopes; seg: None or the
  segment ids (q_seg (B|1, Tq), k_seg (B|1, Tk))."""
  d = C.Dims(*q.shape[:2], k.shape[1], q.shape[2], k.shape[2], q.shape[3], v.shape[3])
  B, Hkv, G = d.B, d.Hkv, d.G
  f32 = jnp.float32
  plan = flash_lib.Plan(d, o.causal, mask is not None or seg is not None, o.bq, o.bk)
  if seg is not None:
    seg = C.pad_seg(seg[0], plan.Tq_p), C.pad_seg(seg[1], plan.Tk_p)
  qg = C.pad_axis(C.split_heads_q(q, d).astype(f32), 3, plan.Tq_p)   # (B, Hkv, G, Tq_p, D)
  kh = C.pad_axis(C.kv_heads_first(k).astype(f32), 2, plan.Tk_p)     # (B, Hkv, Tk_p, D)
  vh = C.pad_axis(C.kv_heads_first(v).astype(f32), 2, plan.Tk_p)     # (B, Hkv, Tk_p, Dv)
  if o.hadamard:
    qg, kh = rotate(qg, o.seed), rotate(kh, o.seed)
  mask_g = plan.pad_mask(C.group_mask(mask, d))
  alibi = _alibi(o, apos, d, plan.Tq_p, plan.Tk_p)

  def quant(x, op, block):
    if op in o.quantize:
      return quantize(x, o.granularity, block)
    return x, jnp.ones(x.shape[:-1], f32)

  q8, sq = quant(qg, "q", o.bq)
  k8, sk = quant(kh, "k", o.bk)
  v8, sv = quant(vh, "v", o.bk)
  round_p = "p" in o.quantize
  # With one V scale per key tile, P is rounded as FA3 does; per-token V scales are
  # folded into P instead.
  tile_v = o.granularity != "token"
  sq = sq * o.scale

  def q_step(i):
    qi = flash_lib.q_block(q8, i, o.bq, G)              # (B, Hkv, G * bq, D)
    sqi = flash_lib.row_block(sq, i, o.bq, G)[..., None]

    def kv_step(j, carry, masked):
      m, l, acc = carry
      kj = jax.lax.dynamic_slice_in_dim(k8, j * o.bk, o.bk, axis=2)
      vj = jax.lax.dynamic_slice_in_dim(v8, j * o.bk, o.bk, axis=2)
      skj = jax.lax.dynamic_slice_in_dim(sk, j * o.bk, o.bk, axis=2)[:, :, None, :]
      svj = jax.lax.dynamic_slice_in_dim(sv, j * o.bk, o.bk, axis=2)
      s = jnp.einsum("bhqd,bhkd->bhqk", qi, kj, preferred_element_type=f32) * sqi * skj
      s = flash_lib.add_bias(s, plan.block_bias(alibi, i, j))
      m_new, p, alpha, l = flash_lib.online_softmax_step(
          m, l, s, plan.block_mask(mask_g, i, j, seg) if masked else None)
      if tile_v:
        # FA3: P8 = e4m3(2^8 P), the tile's V scale and 2^-8 applied to the product.
        p8 = Q.round_e4m3(p * P_OFFSET) if round_p else p
        pv = jnp.einsum("bhqk,bhkd->bhqd", p8, vj, preferred_element_type=f32)
        pv = pv * (svj[:, :, :1, None] / (P_OFFSET if round_p else 1.0))
      else:
        w = p * svj[:, :, None, :]                        # V's per-key scales into P
        if round_p:
          sp = jnp.max(w, axis=-1, keepdims=True) / Q.E4M3_MAX
          sp = jnp.where(sp == 0, 1.0, sp)
          pv = jnp.einsum("bhqk,bhkd->bhqd", Q.round_e4m3(w / sp), vj,
                          preferred_element_type=f32) * sp
        else:
          pv = jnp.einsum("bhqk,bhkd->bhqd", w, vj, preferred_element_type=f32)
      return m_new, l, alpha[..., None] * acc + pv

    init = (jnp.full((B, Hkv, G * o.bq), C.NEG, f32), jnp.zeros((B, Hkv, G * o.bq), f32),
            jnp.zeros((B, Hkv, G * o.bq, d.Dv), f32))
    full, hi = plan.kv_range(i)
    carry = jax.lax.fori_loop(0, full, functools.partial(kv_step, masked=False), init)
    m, l, acc = jax.lax.fori_loop(full, hi, functools.partial(kv_step, masked=True), carry)
    # A row that saw no allowed key keeps m == NEG and returns zeros.
    seen = m > C.NEG / 2
    out = jnp.where(seen[..., None], acc / jnp.where(seen, l, 1.0)[..., None], 0.0)
    return out.reshape(B, Hkv, G, o.bq, d.Dv)

  out = jax.lax.map(q_step, jnp.arange(plan.nq))         # (nq, B, Hkv, G, bq, Dv)
  out = jnp.moveaxis(out, 0, 3).reshape(B, Hkv, G, plan.Tq_p, d.Dv)
  return C.merge_heads_out(out[:, :, :, : d.Tq])


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _fp8_core(o: Opts, q, k, v, mask, apos, seg):
  return _forward(o, q, k, v, mask, apos, seg)


def _core_fwd(o, q, k, v, mask, apos, seg):
  return _forward(o, q, k, v, mask, apos, seg), (q, k, v, mask, apos, seg)


def _core_bwd(o, res, dout):
  """Straight-through: the gradient of exact attention at the unquantized inputs."""
  q, k, v, mask, apos, seg = res
  pos = {} if o.slopes is None else dict(
      positions=P.make("alibi", slopes=o.slopes), q_pos=apos[0], k_pos=apos[1])
  if seg is not None:
    pos.update(q_seg=seg[0], k_seg=seg[1])
  exact = lambda q, k, v: flash_lib.flash(q, k, v, causal=o.causal, mask=mask,
                                          scale=o.scale, **pos)
  _, vjp = jax.vjp(exact, q, k, v)
  return (*vjp(dout.astype(q.dtype)), None, None, None)


_fp8_core.defvjp(_core_fwd, _core_bwd)


# Why "block" and "tensor" scales refuse segment ids.
_SHARED_SCALES_SEG = ("a scale shared by several positions spans segments, so one "
                      "segment's magnitudes change another's rounding and a packed row "
                      "would not equal its segments run alone; use granularity='token'")


def blocks(d: C.Dims, block_q=None, block_k=None):
  """The (block_q, block_k) tiles `fp8` uses for sizes `d` (default 128, shrunk for
  short inputs to the length rounded up to 8)."""
  return (flash_lib.block_size(d.Tq, block_q or DEFAULT_BLOCK),
          flash_lib.block_size(d.Tk, block_k or DEFAULT_BLOCK))


def fp8(q, k, v, *, causal=False, mask=None, scale=None, granularity="token",
        hadamard=False, hadamard_seed=0, block_q=None, block_k=None, quantize="qkvp",
        positions=None, q_pos=None, k_pos=None, q_seg=None, k_seg=None, **kw):
  """Softmax attention with Q, K, V and P in float8 e4m3 (see the module docstring).

  q: (B, Tq, Hq, D), k: (B, Tk, Hkv, D), v: (B, Tk, Hkv, Dv), any float dtype; mask:
  bool broadcastable to (B, Hq, Tq, Tk); causal: bottom-right aligned.
  granularity: "token" (default), "block" or "tensor": which elements share a scale;
    "block" and "tensor" refuse causal=True and masks.
  hadamard: rotate q and k by a random-signed Hadamard transform along D (incoherent
    processing); hadamard_seed: the seed of its signs.
  block_q, block_k: the tiles (default 128; "block"'s scale groups are these tiles).
  quantize: the operands rounded to e4m3, a subset of "qkvp" (default all four).
  positions, q_pos (B|1, Tq), k_pos (B|1, Tk): rope/rope2d (q, k rotated, then
    quantized) or alibi (a float32 bias per tile); see attention.core.positions.
  q_seg (B|1, Tq), k_seg (B|1, Tk): segment ids of packed rows (attention.core.common), a
    per-tile mask; "token" granularity only.
  Returns (B, Tq, Hq, Dv) in q's dtype; fully masked rows are zeros. Gradients are
  exact attention's at the unquantized inputs (straight-through).
  """
  name = "fp8"
  unexpected(name, kw)
  d = C.check_qkv(q, k, v, name)
  mask = C.check_mask(mask, d, name)
  seg = C.check_segments(q_seg, k_seg, d, name)
  if granularity not in GRANULARITIES:
    raise C.AttentionError(
        f"{name}: granularity must be one of {GRANULARITIES}, got {granularity!r}")
  if not isinstance(quantize, str) or set(quantize) - set(OPERANDS):
    raise C.AttentionError(
        f"{name}: quantize must be a subset of {OPERANDS!r} (the operands rounded to "
        f"e4m3), got {quantize!r}")
  if granularity != "token" and seg[0] is not None:
    C.refuse(name, f"segment ids with granularity={granularity!r}", _SHARED_SCALES_SEG)
  if granularity != "token" and (causal or mask is not None):
    C.refuse(name, f"{'causal=True' if causal else 'a mask'} with granularity="
             f"{granularity!r}", "a scale shared by several positions lets a future or "
             "masked key change the rounding, and so the output, of a visible one; use "
             "granularity='token'")
  pos = P.prepare(name, positions, d, q_pos, k_pos)
  q, k = P.rotate_qk(pos, q, k)
  alibi = pos is not None and pos.alibi
  bq, bk = blocks(d, block_q, block_k)
  o = Opts(bool(causal), float(C.default_scale(d.D, scale)), granularity, bool(hadamard),
           int(hadamard_seed), bq, bk, "".join(sorted(set(quantize))),
           tuple(P.slopes_for(pos.spec, d.Hq).tolist()) if alibi else None)
  return _fp8_core(o, q, k, v, mask, (pos.q, pos.k) if alibi else None,
                   seg if seg[0] is not None else None).astype(q.dtype)


# ---- decoding ---------------------------------------------------------------------

def _decode_step(state: KV.KVCache, q_t, k_t, v_t, *, positions=None, q_pos=None,
                 k_pos=None, **kw):
  """Appends T tokens to the KV cache; the T queries attend through `fp8` to the
  cache's positions <= their own (a position mask, so granularity must be "token").
  RoPE keys are stored rotated; ALiBi reads the cache's kept key positions.
  A capacity overflow raises when state.pos is concrete, else the output is NaN."""
  T, N = q_t.shape[1], state.capacity
  pos, q_t, k_t = KV.step_positions(state, positions, q_t, k_t, q_pos, k_pos)
  new = KV.append(state, k_t, v_t, None if pos is None else pos.k)
  if pos is not None and pos.alibi:
    kw.update(positions=pos.spec, q_pos=pos.q, k_pos=new.k_pos)
  kd = jnp.swapaxes(KV.read(new.k, new.k_scale, jnp.float32), 1, 2)   # (B, N, Hkv, D)
  vd = jnp.swapaxes(KV.read(new.v, new.v_scale, jnp.float32), 1, 2)
  seen = jnp.arange(N)[None, :] <= state.pos + jnp.arange(T)[:, None]   # (T, N)
  out = fp8(q_t, kd, vd, mask=seen[None, None], **kw)
  return jnp.where(state.pos + T <= N, out, jnp.nan).astype(q_t.dtype), new


# ---- cost ---------------------------------------------------------------------------

# Elementwise work per quantized element (absmax, divide, round) and per rounded
# probability (multiply, round, and the row max of the token path).
QUANT_FLOPS = 3
P_ROUND_FLOPS = 3


def _cost(d, *, causal=False, mode="fwd", itemsize=4, hadamard=False, block_q=None,
          quantize="qkvp", **kw):
  """Tiled FP8 forward: flash's compute over the visible tiles (at the rotated D'),
  plus the quantization passes; backward (mode "fwd_bwd"): flash's, recomputing."""
  Dq = hadamard_size(d.D) if hadamard else d.D
  pairs = d.B * d.Hq * cost_lib.visible_pairs(d.Tq, d.Tk, causal)
  rows_q, rows_k = d.B * d.Hq * d.Tq, d.B * d.Hkv * d.Tk
  n_q, n_k, n_v = rows_q * Dq, rows_k * Dq, rows_k * d.Dv
  rot = (rows_q + rows_k) * Dq * max(1, int(math.log2(Dq))) if hadamard else 0
  flops = (2 * pairs * (Dq + d.Dv) + pairs * (cost_lib.SOFTMAX_FLOPS_PER_SCORE
                                              + P_ROUND_FLOPS * ("p" in quantize))
           + QUANT_FLOPS * (n_q + n_k + n_v) + rot)
  nq = -(-d.Tq // blocks(d, block_q)[0])
  # a pass reads q, k, v and writes their e4m3 copies and float32 row scales; the
  # tiles read q8 once and k8, v8 once per query tile; the output is written once.
  fp8_bytes = n_q + n_k + n_v + 4 * (rows_q + 2 * rows_k)
  byt = (itemsize * (n_q + n_k + n_v) + fp8_bytes + n_q + nq * (n_k + n_v)
         + itemsize * rows_q * d.Dv)
  temp = fp8_bytes + 4 * rows_q * (d.Dv + 2)
  fwd = cost_lib.Cost(flops, pairs, byt, temp)
  if mode == "fwd":
    return fwd
  if mode == "fwd_bwd":
    return fwd + cost_lib.tiled(d, mode="fwd_bwd", itemsize=itemsize, causal=causal,
                                block_q=flash_lib.blocks(d, causal=causal)[0])
  if mode == "decode":
    # a step re-quantizes the cache it attends to: Tk positions of K and V
    return cost_lib.decode_kv(d, itemsize=itemsize) + cost_lib.Cost(
        QUANT_FLOPS * (n_q + n_k + n_v) + rot, 0, fp8_bytes, fp8_bytes)
  raise ValueError(f"cost mode must be one of {cost_lib.MODES}, got {mode!r}")


register(Variant(
    name="fp8", fn=fp8,
    refused_options={"sinks": (
        "its kernel rounds each tile's probabilities to e4m3 against a running "
        "maximum that starts at the first key, with no sink column, and its decode "
        "step likewise (use flash or softmax with sinks)")},
    paper="Shah et al. 2024 (FlashAttention-3), FP8 path",
    time="O(N² D)", memory="O(N)", causal=True, masks="any",
    decode="KV cache (fp, int8 or fp8)", decode_impl=DecodeImpl(KV.init_kv_cache,
                                                                _decode_step),
    cost=_cost,
    family="exact",
    summary="Q, K, V and P in float8 e4m3 (emulated by casts), per-token/block/tensor "
            "scales, optional Hadamard incoherent processing; exact backward",
    positions=P.takes_qk("float32 bias per tile, not rounded"),
    segments="granularity='token': a per-tile mask from the tile's ids (no tile "
             "skipped forward; flash's backward skips them); 'block' and 'tensor' "
             "refuse them (a shared scale spans segments)"))
