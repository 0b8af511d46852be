"""Shared pieces of the attention contract: shape checks, masks, GQA grouping.

Layout (the contract of every registered variant, same as `jax.nn.dot_product_attention`):

  q: (B, Tq, Hq, D)   k: (B, Tk, Hkv, D)   v: (B, Tk, Hkv, Dv)   Hq % Hkv == 0
  mask: bool, True = may attend, broadcastable to (B, Hq, Tq, Tk)
  causal: bottom-right aligned, query i sees key j <= i + (Tk - Tq)
  out: (B, Tq, Hq, Dv) in q's dtype; a row with no allowed key is all zeros.
  parameters: keyword arguments, declared as ParamSpecs (shape from the model's sizes).
  per-token inputs: keyword arguments (B, T, Hkv or Hq, width) that a variant computes
    from the layer input x (a gate, a write strength), declared as InputSpecs
    (`Variant.inputs`): the models project x to each and pass it by name to the
    function and to its decode step.
  positions: None or an in-attention scheme, "rope" | "rope2d" | "alibi" (a str or an
    attention.core.positions.Positions spec: kind, rotary base and fraction, image side,
    slopes), with q_pos (B|1, Tq) and k_pos (B|1, Tk) int: each token's explicit
    position (default arange(Tq) + Tk - Tq, arange(Tk)). Explicit, not an implicit
    arange: packed rows restart them per segment, a decode step passes its tokens'
    absolute positions. `Variant.positions` says how a variant takes each scheme or
    why it refuses it (`attention.core.positions.prepare` raises the refusal); causality and
    masks stay by index, positions only feed the scheme's math.
  segments: q_seg (B|1, Tq) and k_seg (B|1, Tk) int, the segment id of each token of a
    packed row (several sequences laid end to end): query i attends key j only where
    q_seg[i] == k_seg[j], on top of `causal` and `mask` (`check_segments`,
    `segment_mask`). Padding is a segment of its own (id 0 by the pipeline's
    convention); its outputs are the caller's to ignore. Given for one side only in
    self-attention (Tq == Tk), the other side is the same. `Variant.segments` says how
    a variant honours them (a mask, skipped tiles, a state reset) or why it refuses.

Internally the exact family works on the grouped layout (B, Hkv, G, T, ·) with
G = Hq // Hkv, so that GQA/MQA never copies K or V.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

# Finite stand-in for -inf in logits: exp(NEG - m) == 0 in fp32 for any sane m,
# and it never produces inf - inf = NaN.
NEG = -1e30


class AttentionError(ValueError):
  """A request the variant cannot honour (bad shapes, unsupported mask/causal)."""


class Dims(NamedTuple):
  """Static sizes of one attention call."""
  B: int
  Tq: int
  Tk: int
  Hq: int
  Hkv: int
  D: int
  Dv: int

  @property
  def G(self) -> int:
    """Query heads per key/value head (1: MHA, Hq: MQA)."""
    return self.Hq // self.Hkv


def check_qkv(q, k, v, name: str = "attention") -> Dims:
  """Validates the contract's shapes; returns the sizes. Raises AttentionError."""
  if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
    raise AttentionError(
        f"{name}: q, k, v must be rank 4 (B, T, H, D); got shapes "
        f"{q.shape}, {k.shape}, {v.shape}")
  B, Tq, Hq, D = q.shape
  Bk, Tk, Hkv, Dk = k.shape
  Bv, Tv, Hv, Dv = v.shape
  if not (B == Bk == Bv):
    raise AttentionError(f"{name}: batch sizes differ: q {B}, k {Bk}, v {Bv}")
  if Tk != Tv:
    raise AttentionError(f"{name}: k has {Tk} positions but v has {Tv}")
  if Hkv != Hv:
    raise AttentionError(f"{name}: k has {Hkv} heads but v has {Hv}")
  if Dk != D:
    raise AttentionError(f"{name}: q head dim {D} != k head dim {Dk}")
  if Hkv == 0 or Hq % Hkv:
    raise AttentionError(
        f"{name}: query heads ({Hq}) must be a multiple of key/value heads ({Hkv})")
  return Dims(B, Tq, Tk, Hq, Hkv, D, Dv)


def default_scale(D: int, scale: float | None) -> float:
  """The contract's scale: 1/sqrt(D) unless given."""
  return 1.0 / math.sqrt(D) if scale is None else scale


def check_mask(mask, dims: Dims, name: str = "attention"):
  """Returns `mask` as a bool array of rank 4 broadcastable to (B, Hq, Tq, Tk)."""
  if mask is None:
    return None
  mask = jnp.asarray(mask)
  if mask.dtype != jnp.bool_:
    raise AttentionError(
        f"{name}: mask must be bool (True = may attend), got dtype {mask.dtype}")
  if mask.ndim > 4:
    raise AttentionError(f"{name}: mask has rank {mask.ndim} > 4")
  mask = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
  target = (dims.B, dims.Hq, dims.Tq, dims.Tk)
  for got, want, axis in zip(mask.shape, target, "B Hq Tq Tk".split()):
    if got not in (1, want):
      raise AttentionError(
          f"{name}: mask shape {mask.shape} is not broadcastable to "
          f"(B, Hq, Tq, Tk) = {target}: axis {axis} has {got}, expected 1 or {want}")
  return mask


# check_key_mask's reason for the block-sparse variants (local, sparse).
DENSE_MASK = "a dense (Tq, Tk) mask is O(N^2) -- use 'softmax' or 'flash' for it"


def check_key_mask(mask, dims: Dims, name: str, why: str = ""):
  """check_mask for a variant that takes key-padding masks only: returns a bool array
  of rank 4 broadcastable to (B, Hq, 1, Tk), or None; refuses a mask that varies along
  the query axis, with the variant's reason `why` (if any) after the rule."""
  mask = check_mask(mask, dims, name)
  if mask is not None and mask.shape[2] != 1:
    refuse(name, f"masks that vary along the query axis (got shape {mask.shape})",
           "it takes key-padding masks only, broadcastable to (B, Hq, 1, Tk)"
           + (f"; {why}" if why else ""))
  return mask


def check_segments(q_seg, k_seg, dims: Dims, name: str = "attention"):
  """(q_seg (B|1, Tq), k_seg (B|1, Tk)) int32, or (None, None) if neither is given.

  One side alone is taken for both when Tq == Tk (self-attention of a packed row);
  otherwise both are needed. Raises AttentionError on a bad shape or dtype."""
  if q_seg is None and k_seg is None:
    return None, None
  if q_seg is None or k_seg is None:
    if dims.Tq != dims.Tk:
      raise AttentionError(
          f"{name}: segment ids given for the {'keys' if q_seg is None else 'queries'} "
          f"only, but Tq={dims.Tq} != Tk={dims.Tk}: pass both q_seg and k_seg")
    q_seg = k_seg if q_seg is None else q_seg
    k_seg = q_seg if k_seg is None else k_seg
  out = []
  for s, T, side in ((q_seg, dims.Tq, "q_seg"), (k_seg, dims.Tk, "k_seg")):
    s = jnp.asarray(s)
    if not jnp.issubdtype(s.dtype, jnp.integer):
      raise AttentionError(f"{name}: {side} must be integer segment ids, got dtype {s.dtype}")
    if s.ndim != 2 or s.shape[0] not in (1, dims.B) or s.shape[1] != T:
      raise AttentionError(f"{name}: {side} has shape {s.shape}; expected (B|1, {T}) "
                           f"with B={dims.B}")
    out.append(s.astype(jnp.int32))
  return tuple(out)


def segment_mask(q_seg, k_seg):
  """(B|1, 1, Tq, Tk) bool, True where query and key share a segment; None if no ids."""
  if q_seg is None:
    return None
  return (q_seg[:, :, None] == k_seg[:, None, :])[:, None]


def segment_positions(seg):
  """(B|1, T) int32: each token's index within its segment, a segment being a run of
  equal ids (packed rows lay segments end to end): 0 at every id change.
  seg: (B|1, T) int segment ids."""
  T = seg.shape[-1]
  j = jnp.arange(T, dtype=jnp.int32)
  starts = jnp.concatenate([jnp.ones(seg.shape[:-1] + (1,), bool),
                            seg[..., 1:] != seg[..., :-1]], axis=-1)
  return j - jax.lax.cummax(jnp.where(starts, j, 0), axis=seg.ndim - 1)


def and_mask(a, b):
  """The conjunction of two masks, either of which may be None (all True)."""
  if a is None:
    return b
  return a if b is None else jnp.logical_and(a, b)


def causal_mask(Tq: int, Tk: int, q_offset=0):
  """(Tq, Tk) bool, bottom-right aligned: query i sees key j <= i + (Tk - Tq) + q_offset."""
  qi = jnp.arange(Tq)[:, None] + (Tk - Tq) + q_offset
  kj = jnp.arange(Tk)[None, :]
  return kj <= qi


def group_mask(mask, dims: Dims):
  """(B|1, Hq|1, Tq|1, Tk|1) mask -> (B|1, Hkv|1, G|1, Tq|1, Tk|1) for the grouped layout."""
  if mask is None:
    return None
  if mask.shape[1] == 1:
    return mask[:, :, None]
  return mask.reshape(mask.shape[0], dims.Hkv, dims.G, *mask.shape[2:])


def combined_mask(mask, dims: Dims, causal: bool):
  """The grouped (…, Tq, Tk) mask that a dense variant applies, or None if all-True."""
  m = group_mask(mask, dims)
  if causal:
    c = causal_mask(dims.Tq, dims.Tk)[None, None, None]
    m = c if m is None else jnp.logical_and(m, c)
  return m


def split_heads_q(q, dims: Dims):
  """(B, Tq, Hq, D) -> (B, Hkv, G, Tq, D)."""
  B, Tq, _, D = q.shape
  return q.reshape(B, Tq, dims.Hkv, dims.G, D).transpose(0, 2, 3, 1, 4)


def merge_heads_out(o):
  """(B, Hkv, G, Tq, Dv) -> (B, Tq, Hq, Dv)."""
  B, Hkv, G, Tq, Dv = o.shape
  return o.transpose(0, 3, 1, 2, 4).reshape(B, Tq, Hkv * G, Dv)


def kv_heads_first(x):
  """(B, Tk, Hkv, D) -> (B, Hkv, Tk, D)."""
  return x.transpose(0, 2, 1, 3)


def compute_dtype(dtype):
  """Softmax statistics are kept in at least float32 (float64 stays float64)."""
  return jnp.promote_types(dtype, jnp.float32)


def round_up(x: int, m: int) -> int:
  """The smallest multiple of m that is >= x."""
  return -(-x // m) * m


# XLA:GPU runs a loop's control on the host and syncs with the device once per trip
# (jax-ml/jax#2491): a chunk scan of a dozen trips per layer, forwards and backwards,
# made linear's MNIST train step host-bound on an H100 (52 of 65 ms of the dispatching
# thread's CPU per step, 2026-11-26). On a GPU such scans are unrolled; on a CPU a trip
# costs nothing and unrolling would only lengthen compilation.
MAX_GPU_UNROLL = 32


def scan_unroll(n: int) -> int:
  """`lax.scan`'s unroll for a scan of n trips over chunks: min(n, MAX_GPU_UNROLL)
  when JAX's default backend is a GPU, else 1 (numerically the same either way)."""
  return min(n, MAX_GPU_UNROLL) if jax.default_backend() == "gpu" else 1


def pad_axis(x, axis: int, size: int, value=0):
  """x padded at the end of `axis` to `size` with `value` (the tiled kernels' padding)."""
  pad = size - x.shape[axis]
  if pad == 0:
    return x
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, pad)
  return jnp.pad(x, widths, constant_values=value)


def pad_seg(s, T_p):
  """Segment ids (B|1, T) padded to T_p by repeating the last id (the tiled kernels'
  padding: the order stays non-decreasing; padded keys are masked by the kernel's
  plan, padded queries dropped)."""
  return s if s.shape[1] == T_p else jnp.pad(s, ((0, 0), (0, T_p - s.shape[1])), mode="edge")


def refuse(name: str, what: str, why: str):
  """Raises the uniform error for a request a variant cannot honour."""
  raise AttentionError(f"attention variant '{name}' does not support {what}: {why}")


def unexpected(name, kw):
  """Raises the uniform error for options a variant does not take (none if kw is empty):
  attention dropout (dropout_rate=, dropout_rng=) is refused as such, anything else as
  an unexpected argument. Every variant's function ends its keyword arguments in **kw
  and calls this, so that a request it cannot honour is an AttentionError naming it."""
  if not kw:
    return
  drop = sorted(a for a in kw if a in ("dropout_rate", "dropout_rng"))
  if drop:
    refuse(name, f"attention dropout ({', '.join(drop)})",
             "it never forms the attention probabilities to drop (its record says "
             "dropout=False)")
  raise AttentionError(f"attention variant '{name}' got unexpected arguments: {sorted(kw)}")


def per_head(p, dims: Dims, trailing: int):
  """Broadcasts a per-head parameter to the grouped layout.

  `p` has either `trailing` dims (shared by all heads) or 1 + `trailing` dims with
  a leading Hq axis. Returns an array of shape (Hkv|1, G|1, *trailing_shape) that
  broadcasts against (B, Hkv, G, ...) after a leading batch axis is added.
  """
  p = jnp.asarray(p)
  if p.ndim == trailing:
    return p.reshape((1, 1) + p.shape)
  if p.ndim == trailing + 1 and p.shape[0] == dims.Hq:
    return p.reshape((dims.Hkv, dims.G) + p.shape[1:])
  raise AttentionError(
      f"parameter of shape {p.shape}: expected {trailing} dims (shared by heads) "
      f"or a leading axis of Hq={dims.Hq}")

