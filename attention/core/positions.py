"""Position schemes that act inside attention: RoPE (1D and 2D) and ALiBi.

The contract (attention.core.common) carries positions as explicit per-token integers:

  fn(q, k, v, *, positions=spec, q_pos=None, k_pos=None, ...)
    positions: a `Positions` spec (static, hashable), or its kind as a str.
    q_pos: (B|1, Tq) int, the position of each query; k_pos: (B|1, Tk), of each key.
    Default: q_pos = arange(Tq) + (Tk - Tq), k_pos = arange(Tk), the contract's
    bottom-right alignment (a decode step's queries are the last Tq keys).

Explicit positions, not aranges: a packed row restarts them at every segment, a
decode step passes the absolute positions of its new tokens, a batch of prompts of
different lengths may offset each row, and a pixel model's keys may sit elsewhere than
its queries. No variant assumes positions are 0, 1, 2, ...; a scheme's math reads only
q_pos and k_pos.

  rope    Su et al. 2021 (RoFormer). Each of the first R = 2P dims of a head is paired
          and rotated by the angle pos * θ_t, θ_t = base^(-t / P), t = 0..P-1, so that
          rot(q, i) · rot(k, j) depends on i - j only. Half-split pairing (dim t with
          dim t + P), as GPT-NeoX and LLaMA in HF transformers, not RoFormer's
          interleaved (2t, 2t + 1): the two are the same model up to a fixed
          permutation of each head's dims, which the q and k projections learn, and
          halves are two contiguous slices (the tiled and Pallas kernels never need a
          strided gather, and checkpoints in the NeoX/LLaMA layout load as they are).
          `fraction` < 1 rotates only the first R = 2 * floor(fraction * D / 2) dims
          (GPT-NeoX's rotary_pct), the rest pass through.
  rope2d  axial 2D RoPE for images (Heo et al. 2024, "Rotary Position Embedding for
          Vision Transformer", RoPE-Axial): position p is pixel (row, col) = (p // side,
          p % side) of a side-wide raster (floor division: p = -1 is (-1, side - 1), the
          slot before the image). The first P/2 pairs are rotated by the row, the last
          P/2 by the column, each half with frequencies θ_t = base^(-t / (P/2)); so
          scores depend on (Δrow, Δcol) only. P must be even (R a multiple of 4).
  alibi   Press et al. 2022 (ALiBi). A bias -m_h * |i - j| on the logits of head h,
          with the paper's geometric slopes (`alibi_slopes`). On a causal row
          (j <= i) this is the paper's -m_h (i - j); without causality the symmetric
          |i - j| (as in the bidirectional uses, e.g. MosaicBERT), so that a key far
          in the future is not favoured. Slopes are per query head, so GQA groups
          share K/V but not slopes.

Shapes: x (…, T, …, F) with T at `t_axis`; pos (B|1, T); angles (B|1, T, P) float32.
The rotation computes in float32 (float64 stays float64) and returns x's dtype.
"""
from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from attention.core import common as C
from attention.core.registry import POSITION_SCHEMES, variant

ROTARY = ("rope", "rope2d")
DEFAULT_BASE = 10000.0


class Positions(NamedTuple):
  """Static description of an in-attention position scheme (hashable: it may be a
  static argument of a jit or of a custom VJP).

  kind: "rope", "rope2d" or "alibi".
  base: rotary base (RoFormer's 10000); rope, rope2d.
  fraction: share of each head's dims that is rotated, in (0, 1]; rope, rope2d.
  side: the image width in pixels; rope2d.
  slopes: per query head ALiBi slopes; None: the paper's `alibi_slopes(Hq)`.
  """
  kind: str
  base: float = DEFAULT_BASE
  fraction: float = 1.0
  side: int = 0
  slopes: tuple | None = None

  @property
  def rotary(self) -> bool:
    return self.kind in ROTARY


def make(kind: str, *, base=DEFAULT_BASE, fraction=1.0, side=0, slopes=None) -> Positions:
  """A validated `Positions`; AttentionError names the bad field."""
  if kind not in POSITION_SCHEMES:
    raise C.AttentionError(f"positions: kind must be one of {POSITION_SCHEMES}, "
                           f"got {kind!r}")
  if not (isinstance(base, (int, float)) and base > 1):
    raise C.AttentionError(f"positions: the rotary base must be a number > 1, got {base!r}")
  if not (isinstance(fraction, (int, float)) and 0 < fraction <= 1):
    raise C.AttentionError(f"positions: the rotary fraction must be in (0, 1], "
                           f"got {fraction!r}")
  if kind == "rope2d" and not (isinstance(side, (int, np.integer)) and side > 0):
    raise C.AttentionError(f"positions 'rope2d': side (the image width in pixels) must be "
                           f"a positive int, got {side!r}")
  if slopes is not None:
    slopes = tuple(float(s) for s in slopes)
  return Positions(kind, float(base), float(fraction), int(side), slopes)


def as_spec(positions) -> Positions:
  """A `Positions` from a spec or a kind name (with the defaults)."""
  if isinstance(positions, Positions):
    return make(*positions[:1], base=positions.base, fraction=positions.fraction,
                side=positions.side, slopes=positions.slopes)
  if isinstance(positions, str):
    return make(positions)
  raise C.AttentionError(f"positions must be a attention.core.positions.Positions or one of "
                         f"{POSITION_SCHEMES}, got {positions!r}")


# ---- ALiBi ----------------------------------------------------------------------

def alibi_slopes(n: int) -> tuple:
  """Press et al.'s head slopes for n heads (their reference code's rule).

  n a power of two: m_h = 2^(-8h/n), h = 1..n (8 heads: 1/2, 1/4, ..., 1/256).
  Otherwise, with p the largest power of two below n: the p slopes of p heads, then
  every other slope of 2p heads (2^(-8(2h-1)/(2p)), h = 1..n-p), which interleave them.
  """
  if n < 1:
    raise C.AttentionError(f"alibi_slopes: need at least one head, got {n}")

  def pow2(m):
    return [2.0 ** (-8.0 * h / m) for h in range(1, m + 1)]

  if n & (n - 1) == 0:
    return tuple(pow2(n))
  p = 1 << (n.bit_length() - 1)
  return tuple(pow2(p) + pow2(2 * p)[0::2][: n - p])


def slopes_for(spec: Positions, Hq: int) -> np.ndarray:
  """(Hq,) float64 slopes of `spec` (its own, or the paper's for Hq heads)."""
  s = spec.slopes if spec.slopes is not None else alibi_slopes(Hq)
  if len(s) != Hq:
    raise C.AttentionError(f"positions 'alibi': {len(s)} slopes for {Hq} query heads")
  return np.asarray(s, np.float64)


def alibi_bias(slopes_H, q_pos, k_pos, dtype=jnp.float32):
  """-m_h |i - j|: slopes (H,), q_pos (B|1, Tq), k_pos (B|1, Tk) int -> (B|1, H, Tq, Tk)
  in `dtype` (the scores' compute dtype)."""
  dist = jnp.abs(q_pos[:, :, None] - k_pos[:, None, :]).astype(dtype)
  return -jnp.asarray(slopes_H, dtype)[None, :, None, None] * dist[:, None]


def grouped_slopes(pos: "Pos", d: C.Dims, dtype=jnp.float32):
  """The slopes in the grouped layout, (Hkv, G) in `dtype`."""
  return jnp.asarray(slopes_for(pos.spec, d.Hq), dtype).reshape(d.Hkv, d.G)


def bias_of_distance(pos: "Pos", d: C.Dims, dist, dtype=jnp.float32):
  """-m_h * dist in the grouped layout: dist (B|1, *rest) int -> (B|1, Hkv, G, *rest)."""
  dist = dist[:, None, None].astype(dtype)
  m = grouped_slopes(pos, d, dtype)
  return -m.reshape((1, d.Hkv, d.G) + (1,) * (dist.ndim - 3)) * dist


def grouped_bias(pos: "Pos", d: C.Dims, dtype=jnp.float32):
  """The ALiBi bias in the grouped layout, (B|1, Hkv, G, Tq, Tk) in `dtype`."""
  return bias_of_distance(pos, d, jnp.abs(pos.q[:, :, None] - pos.k[:, None, :]), dtype)


def block_bias(pos: "Pos", d: C.Dims, qp, kp, dtype=jnp.float32):
  """ALiBi's bias (B|1, Hkv, G, n, b, S) of blocked query positions qp (B|1, n, b)
  against each block's keys' positions kp (B|1, n, S) (local's and sparse's blocks)."""
  return bias_of_distance(pos, d, jnp.abs(qp[..., :, None] - kp[..., None, :]), dtype)


# ---- rotary ---------------------------------------------------------------------

def rotary_pairs(spec: Positions, D: int) -> int:
  """P, the number of rotated pairs of a D-dim head (R = 2P dims rotated)."""
  P = int(spec.fraction * D) // 2
  if spec.kind == "rope2d":
    P -= P % 2
  if P < (2 if spec.kind == "rope2d" else 1):
    raise C.AttentionError(
        f"positions '{spec.kind}': fraction {spec.fraction} of {D} dims leaves "
        f"{2 * P} to rotate; need at least {4 if spec.kind == 'rope2d' else 2} "
        f"({'a pair for the row and one for the column' if spec.kind == 'rope2d' else 'one pair'})")
  return P


def frequencies(spec: Positions, D: int) -> np.ndarray:
  """θ of the P rotated pairs, (P,) float64: base^(-t/P) (rope); for rope2d the row
  half then the column half, each base^(-t/(P/2))."""
  P = rotary_pairs(spec, D)
  n = P // 2 if spec.kind == "rope2d" else P
  theta = spec.base ** (-np.arange(n) / n)
  return np.concatenate([theta, theta]) if spec.kind == "rope2d" else theta


def angles(spec: Positions, pos, D: int, dtype=jnp.float32):
  """Rotation angles (B|1, T, P) in `dtype` of positions pos (B|1, T) int.

  float32 for float32 (and narrower) inputs, as in every RoPE implementation: an angle
  p θ_0 = p carries float32's relative rounding, ~1e-7 p radians (5e-4 at p = 4096)."""
  theta = jnp.asarray(frequencies(spec, D), dtype)
  if spec.kind == "rope2d":
    P = theta.shape[0]
    row = jnp.floor_divide(pos, spec.side).astype(dtype)
    col = jnp.mod(pos, spec.side).astype(dtype)
    coord = jnp.concatenate([jnp.broadcast_to(row[..., None], pos.shape + (P // 2,)),
                             jnp.broadcast_to(col[..., None], pos.shape + (P // 2,))], -1)
    return coord * theta
  return pos.astype(dtype)[..., None] * theta


def rotate(x, pos, spec: Positions, t_axis: int):
  """x rotated by positions pos (B|1, T): the first 2P dims of x's last axis,
  half-split pairs (t, t + P). x has its batch on axis 0 and T on `t_axis`.

  Computed as x * [cos, cos] + [x2, x1] * [-sin, sin] over whole rows (as GPT-NeoX's
  rotate_half), which XLA fuses into one pass forward and one backward; rotating the
  two halves apart and concatenating them was several times slower on a CPU."""
  F, ct = x.shape[-1], C.compute_dtype(x.dtype)
  ang = angles(spec, pos, F, ct)                              # (B|1, T, P)
  P = ang.shape[-1]
  shape = (ang.shape[0],) + (1,) * (t_axis - 1) + (ang.shape[1],) \
      + (1,) * (x.ndim - t_axis - 2) + (2 * P,)
  cos, sin = jnp.cos(ang), jnp.sin(ang)
  cos2 = jnp.concatenate([cos, cos], -1).reshape(shape)
  sin2 = jnp.concatenate([-sin, sin], -1).reshape(shape)
  xr = x.astype(ct) if 2 * P == F else x[..., :2 * P].astype(ct)
  y = xr * cos2 + jnp.concatenate([xr[..., P:], xr[..., :P]], -1) * sin2
  if 2 * P < F:                                               # partial rotary
    y = jnp.concatenate([y, x[..., 2 * P:].astype(ct)], -1)
  return y.astype(x.dtype)


# ---- the call: validation, defaults, refusals ---------------------------------------

class Pos(NamedTuple):
  """Positions of one call: the spec and the (B|1, T) int32 positions of q and k."""
  spec: Positions
  q: object
  k: object

  @property
  def rotary(self) -> bool:
    return self.spec.rotary

  @property
  def alibi(self) -> bool:
    return self.spec.kind == "alibi"


def check_positions(x, B, T, what, name):
  """Explicit positions `x` ((B|1, T) or (T,), integers) as (B|1, T) int32; an
  AttentionError naming variant `name` and argument `what` otherwise."""
  x = jnp.asarray(x)
  if x.ndim == 1:
    x = x[None]
  if x.ndim != 2 or x.shape[0] not in (1, B) or x.shape[1] != T:
    raise C.AttentionError(f"{name}: {what} must have shape (B|1, T) = ({B}|1, {T}), "
                           f"got {x.shape}")
  if not jnp.issubdtype(x.dtype, jnp.integer):
    raise C.AttentionError(f"{name}: {what} must be integer positions, got {x.dtype}")
  return x.astype(jnp.int32)


def refuse_unless_taken(name: str, kind: str):
  """Raises the contract's refusal if variant `name` does not take scheme `kind`."""
  why = variant(name).position_refusal(kind)
  if why is not None:
    C.refuse(name, f"positions={kind!r}", why)


def prepare(name: str, positions, d: C.Dims, q_pos=None, k_pos=None, offset=None):
  """The positions of one call of variant `name`, or None without a scheme.

  Refuses a scheme the variant's record does not take (AttentionError naming the
  variant, the scheme and the reason), positions without a scheme, and badly shaped
  positions. offset: where the queries start when q_pos is not given (default
  Tk - Tq, bottom-right; a decode step passes the cache's length), and k_pos then
  starts at offset - (Tk - Tq).
  """
  if positions is None:
    if q_pos is not None or k_pos is not None:
      raise C.AttentionError(f"{name}: q_pos / k_pos were given without positions=; "
                             f"name the scheme ({', '.join(POSITION_SCHEMES)})")
    return None
  spec = as_spec(positions)
  refuse_unless_taken(name, spec.kind)
  off = d.Tk - d.Tq if offset is None else offset
  if q_pos is None:
    q_pos = off + jnp.arange(d.Tq, dtype=jnp.int32)[None]
  if k_pos is None:
    k_pos = off - (d.Tk - d.Tq) + jnp.arange(d.Tk, dtype=jnp.int32)[None]
  return Pos(spec, check_positions(q_pos, d.B, d.Tq, "q_pos", name),
             check_positions(k_pos, d.B, d.Tk, "k_pos", name))


def rotate_qk(pos: Pos | None, q, k):
  """q (B, Tq, Hq, D), k (B, Tk, Hkv, D) rotated by their positions if the scheme is
  rotary; unchanged otherwise (the exact family's way of taking rope and rope2d)."""
  if pos is None or not pos.rotary:
    return q, k
  return rotate(q, pos.q, pos.spec, 1), rotate(k, pos.k, pos.spec, 1)


def alibi_kwargs(pos: Pos | None) -> dict:
  """The positions arguments that hand a call's ALiBi on to another variant's function
  (after rotate_qk, a rotary scheme has nothing left to hand on)."""
  if pos is None or not pos.alibi:
    return {}
  return dict(positions=pos.spec, q_pos=pos.q, k_pos=pos.k)


# How the variants that apply a scheme to q and k (or to their scores) say so on their
# records; shared so that the README's table reads the same for all of them.
TAKES_QK = {"rope": "q and k rotated before the scores",
            "rope2d": "q and k rotated by (row, column) before the scores",
            "alibi": "bias on the scores"}


def takes_qk(alibi: str = TAKES_QK["alibi"]) -> dict:
  """A record's `positions` for a variant that rotates q, k and biases its scores."""
  return {**TAKES_QK, "alibi": alibi}
