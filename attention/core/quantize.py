"""The KV cache's storage formats, int8 and float8 e4m3, and their error bounds.

  q, s = quantize_int8(x)      x ≈ q * s[..., None]: int8, one float32 scale per vector
  q, s = quantize_fp8(x)       the same with float8_e4m3fn values
  x̂ = dequantize(q, s)         either format back to float
  int8_output_error_bound(q, k, v) / fp8_output_error_bound(q, k, v)

int8: symmetric absmax rounding over the last axis, s = absmax / 127, |x - x̂| <=
absmax / 254 per element: 4x fewer bytes for the values (3.76x with the scales at
D = 64). The resulting attention output error is bounded by `int8_output_error_bound`
and measured by `scripts/kv_int8_error.py`.

fp8 (float8 e4m3, the "fn" variant: no infinities, one NaN; 3 mantissa bits): the same
per-vector float32 scales, s = absmax / 448 (e4m3's largest finite value): x ≈
e4m3(x / s) * s, rounded to nearest even. Its error is relative, not absolute: |x -
x̂| <= 2^-4 |x| for |x / s| >= 2^-6 (e4m3's normal range) and <= 2^-10 s below it, so
a token's small elements keep their precision next to a large one, where int8 rounds
every element to the same grid of absmax / 127; for elements above absmax / 14 (most
of a Gaussian-like token) int8's grid is the finer, and its measured output error is
the lower (results/fp8). Same bytes as int8; bounded by `fp8_output_error_bound`;
measured beside int8 by `scripts/fp8_error.py`. `attention.fp8` rounds Q, K, V and P
with `round_e4m3`.
"""
from __future__ import annotations

import jax.numpy as jnp

from attention.core import common as C


def quantize_int8(x):
  """Symmetric absmax int8 over the last axis: x ≈ q * scale[..., None].

  x: (..., D) float. Returns q: (..., D) int8 and scale: (...) float32.
  Per element |x - q * scale| <= scale / 2 = absmax / 254.
  """
  x = x.astype(jnp.float32)
  scale = jnp.max(jnp.abs(x), axis=-1) / 127.0
  safe = jnp.where(scale == 0, 1.0, scale)
  q = jnp.clip(jnp.round(x / safe[..., None]), -127, 127).astype(jnp.int8)
  return q, scale


def dequantize(q, scale, dtype=jnp.float32):
  """q * scale[..., None] in dtype, for int8 and float8_e4m3fn values alike:
  (..., D) values, (...) float32 scales -> (..., D) dtype."""
  return (q.astype(jnp.float32) * scale[..., None]).astype(dtype)


def dequantize_int8(q, scale, dtype=jnp.float32):
  """Inverse of `quantize_int8`: (..., D) int8, (...) scale -> (..., D) dtype."""
  return dequantize(q, scale, dtype)


# float8 e4m3 (the "fn" variant: no infinities, one NaN): 3 mantissa bits, largest
# finite value 448, smallest normal 2^-6, smallest subnormal 2^-9.
E4M3_MAX = 448.0
# Half a unit in the last place, relative, for normal e4m3 numbers: 2^-4.
E4M3_EPS = 2.0 ** -4


def round_e4m3(x):
  """x (float) -> float8_e4m3fn, rounded to nearest even, saturating at ±448.

  The clip is what the hardware conversion (PTX cvt.rn.satfinite.e4m3x2.f32) does
  on overflow; a bare astype would turn values beyond 464 into NaN instead.
  """
  return jnp.clip(x, -E4M3_MAX, E4M3_MAX).astype(jnp.float8_e4m3fn)


def quantize_fp8(x):
  """float8 e4m3 with one float32 scale per vector of the last axis: x ≈ q * scale[..., None].

  x: (..., D) float. Returns q: (..., D) float8_e4m3fn and scale: (...) float32,
  scale = absmax / 448 (0 for an all-zero vector). Per element |x - q * scale| <=
  2^-4 |x| where |x| >= 2^-6 scale (e4m3's normal range), else <= 2^-10 scale.
  """
  x = x.astype(jnp.float32)
  scale = jnp.max(jnp.abs(x), axis=-1) / E4M3_MAX
  safe = jnp.where(scale == 0, 1.0, scale)
  return round_e4m3(x / safe[..., None]), scale


def dequantize_fp8(q, scale, dtype=jnp.float32):
  """Inverse of `quantize_fp8`: (..., D) float8_e4m3fn, (...) scale -> (..., D) dtype."""
  return dequantize(q, scale, dtype)


# A format's name -> (storage dtype, quantizer).
FORMATS = {"int8": (jnp.int8, quantize_int8), "fp8": (jnp.float8_e4m3fn, quantize_fp8),
           "float8_e4m3fn": (jnp.float8_e4m3fn, quantize_fp8)}


def format_of(dtype) -> str | None:
  """The `FORMATS` key of `dtype` (a format name or its storage dtype), None for None
  (a float cache in the K/V dtype); anything else is an AttentionError."""
  if dtype is None:
    return None
  for name, (dt, _) in FORMATS.items():
    if dtype == name or (not isinstance(dtype, str) and jnp.dtype(dtype) == jnp.dtype(dt)):
      return name
  raise C.AttentionError(
      f"cache_dtype must be None, 'int8' or 'fp8' (float8_e4m3fn), got {dtype!r}")


def quantizer(dtype):
  """The quantizer of a storage dtype (int8 or float8_e4m3fn): x -> (values, scales)."""
  return FORMATS[format_of(dtype)][1]


# ---- error bounds of attention over a quantized cache -----------------------------------

def _kv_output_error_bound(q, k, v, dk, dv, scale, name):
  """|Δout| bound of scaled-dot attention when each key element moves by at most dk
  and each value element by at most dv (both (B, Tk, Hkv, ·) arrays, broadcastable)."""
  d = C.check_qkv(q, k, v, name)
  sc = C.default_scale(d.D, scale)
  qa = jnp.abs(q.astype(jnp.float32))
  # a logit moves by at most eps = scale * sum_d |q_d| * max_j dk[j, d]
  dk_d = jnp.max(jnp.broadcast_to(dk, k.shape), axis=(0, 1, 2))   # (D,)
  eps = sc * jnp.max(jnp.sum(qa * dk_d, -1))
  # sum_j |p'_j - p_j| <= e^(2 eps) - 1, and <= 2 for any two probability vectors
  l1 = jnp.minimum(jnp.expm1(2 * eps), 2.0)
  return l1 * jnp.max(jnp.abs(v.astype(jnp.float32))) + jnp.max(dv)


def int8_output_error_bound(q, k, v, *, scale=None):
  """A rigorous bound on |out_int8 - out_fp| for scaled-dot attention.

  Rounding moves each key element by at most s_k/2 and each value element by at most
  s_v/2 (s = absmax/127 per token and head). A logit moves by at most
  eps = scale * sum_d |q_d| * max_j s_k[j]/2, so each probability changes by a factor
  within [e^-2eps, e^2eps], and |Δout| <= min(e^(2 eps) - 1, 2) * max|v| + max s_v / 2.
  q: (B, Tq, Hq, D), k: (B, Tk, Hkv, D), v: (B, Tk, Hkv, Dv). Returns a scalar.
  """
  _, sk = quantize_int8(k)
  _, sv = quantize_int8(v)
  return _kv_output_error_bound(q, k, v, jnp.max(sk) / 2, jnp.max(sv) / 2, scale,
                                "int8_output_error_bound")


def fp8_rounding_bound(x, scale):
  """Per-element bound on |x - dequantize_fp8(quantize_fp8(x))|: 2^-4 |x| in e4m3's
  normal range, 2^-10 scale below it (half the subnormal spacing 2^-9, in units of
  the scale). x: (..., D); scale: (...) as `quantize_fp8` returns it."""
  s = scale[..., None]
  return jnp.maximum(E4M3_EPS * jnp.abs(x.astype(jnp.float32)), 2.0 ** -10 * s)


def fp8_output_error_bound(q, k, v, *, scale=None):
  """A rigorous bound on |out_fp8 - out_fp| for scaled-dot attention over an fp8 cache.

  As `int8_output_error_bound`, with the per-element rounding bound of e4m3
  (`fp8_rounding_bound`): a logit moves by at most eps = scale * sum_d |q_d| *
  max_j |Δk_jd| and |Δout| <= min(e^(2 eps) - 1, 2) * max|v| + max |Δv|.
  q: (B, Tq, Hq, D), k: (B, Tk, Hkv, D), v: (B, Tk, Hkv, Dv). Returns a scalar.
  """
  dk = fp8_rounding_bound(k, quantize_fp8(k)[1])
  dv = fp8_rounding_bound(v, quantize_fp8(v)[1])
  return _kv_output_error_bound(q, k, v, dk, dv, scale, "fp8_output_error_bound")
