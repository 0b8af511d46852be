"""One decode API for every variant that can generate token by token.

  state = init_decode_state(name, batch=B, max_len=N, num_kv_heads=Hkv,
                            head_dim=D, v_head_dim=Dv, dtype=...,
                            cache_dtype=None|"int8"|"fp8")
  out, state = decode_step(state, q_t, k_t, v_t, **variant_kwargs)

q_t: (B, T, Hq, D), k_t: (B, T, Hkv, D), v_t: (B, T, Hkv, Dv); usually T = 1, and
T > 1 is a chunked prefill (the new tokens attend causally among themselves).
out: (B, T, Hq, Dv) in q_t's dtype. The state is a pytree: `decode_step` works
inside `jax.jit` and `jax.lax.scan`, and its cost does not grow with the steps
already taken beyond the attention itself.

The exact family's state is a fixed-capacity KV cache updated in place with
`lax.dynamic_update_slice`; one step costs O(N * D) for capacity N. The cache is
stored head-major, (B, Hkv, N, D), so each head's keys and values are one
contiguous block that a step reads without first transposing the whole cache (as
the contract's (B, N, Hkv, D) layout required). Scaled-dot scores of an int8 (or
fp8) cache are computed block by block of positions, each block dequantised where
it is used, so no float copy of the cache is materialised. With
cache_dtype="int8" keys and values are stored as int8 with one float32 scale per
(batch, position, head): symmetric absmax rounding, |x - x̂| <= absmax / 254 per
element, 4x fewer bytes for the values (3.76x with the scales at D = 64). The
resulting output error is bounded by `int8_output_error_bound` and measured by
`scripts/kv_int8_error.py`.

cache_dtype="fp8" (or "float8_e4m3fn") stores them as float8 e4m3 with the same
per-(batch, position, head) float32 scales, s = absmax / 448 (e4m3's largest finite
value): x ≈ e4m3(x / s) * s, rounded to nearest even. Its error is relative, not
absolute: |x - x̂| <= 2^-4 |x| for |x / s| >= 2^-6 (e4m3's normal range) and <=
2^-10 s below it, so a token's small elements keep their precision next to a large one,
where int8 rounds every element to the same grid of absmax / 127; for elements above
absmax / 14 (most of a Gaussian-like token) int8's grid is the finer, and its
measured output error is the lower (results/fp8). Same bytes as int8;
bounded by `fp8_output_error_bound`; measured beside int8 by `scripts/fp8_error.py`.

Writing past the capacity cannot raise under `jit`; it poisons the output with
NaN instead of silently overwriting the cache (and raises when not traced).

Positions (attention.positions): a step takes positions=, q_pos=, k_pos= (the new
tokens' absolute positions; default: the cache's length onwards). RoPE keys are
stored rotated (by their position, at write time) and each new query is rotated by
its own; for ALiBi the cache also stores each key's position, k_pos (B, N) int32,
and the bias is computed from them.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from attention import common as C
from attention import positions as P
from attention.registry import variant


class DecodeImpl(NamedTuple):
  """A variant's decode hooks: init(**sizes) -> state; step(state, q, k, v, **kw)."""
  init: Any
  step: Any


@dataclasses.dataclass(frozen=True)
class KVCache:
  """Fixed-capacity KV cache of the exact family, head-major.

  k: (B, Hkv, N, D) in dtype, int8 or float8_e4m3fn;  v: (B, Hkv, N, Dv) likewise.
  k_scale, v_scale: (B, Hkv, N) float32 for quantized (int8, fp8) caches, else None.
  pos: int32 scalar, the number of positions written.
  name: the variant (static), which decides the score function.
  k_pos: (B, N) int32 position of each key (kept for ALiBi's bias), else None.
  """
  k: jax.Array
  v: jax.Array
  k_scale: jax.Array | None
  v_scale: jax.Array | None
  pos: jax.Array
  name: str = dataclasses.field(metadata=dict(static=True), default="softmax")
  k_pos: jax.Array | None = None

  @property
  def capacity(self) -> int:
    return self.k.shape[2]

  @property
  def nbytes(self) -> int:
    """Bytes held by the cache (keys, values and scales)."""
    return sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(
        (self.k, self.v, self.k_scale, self.v_scale)))


jax.tree_util.register_dataclass(
    KVCache, data_fields=["k", "v", "k_scale", "v_scale", "pos", "k_pos"],
    meta_fields=["name"])


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


def dequantize_int8(q, scale, dtype=jnp.float32):
  """Inverse of `quantize_int8`: (..., D) int8, (...) scale -> (..., D) dtype."""
  return (q.astype(jnp.float32) * scale[..., None]).astype(dtype)


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
  return (q.astype(jnp.float32) * scale[..., None]).astype(dtype)


# cache_dtype -> (storage dtype, quantizer); None is a float cache in the K/V dtype.
CACHE_DTYPES = {"int8": (jnp.int8, quantize_int8), "fp8": (jnp.float8_e4m3fn, quantize_fp8),
                "float8_e4m3fn": (jnp.float8_e4m3fn, quantize_fp8)}


def _cache_kind(cache_dtype):
  """The CACHE_DTYPES key of `cache_dtype` (a name or a dtype), or None for a float cache."""
  if cache_dtype is None:
    return None
  for name, (dt, _) in CACHE_DTYPES.items():
    if cache_dtype == name or (not isinstance(cache_dtype, str)
                               and jnp.dtype(cache_dtype) == jnp.dtype(dt)):
      return name
  raise C.AttentionError(
      f"cache_dtype must be None, 'int8' or 'fp8' (float8_e4m3fn), got {cache_dtype!r}")


def init_kv_cache(name, *, batch, max_len, num_kv_heads, head_dim, v_head_dim=None,
                  dtype=jnp.float32, cache_dtype=None, positions=None,
                  **unused) -> KVCache:
  """An empty KV cache for `name` (see module docstring for the layout); with ALiBi
  `positions` it keeps each key's position too."""
  del unused
  Dv = head_dim if v_head_dim is None else v_head_dim
  kind = _cache_kind(cache_dtype)
  store = dtype if kind is None else CACHE_DTYPES[kind][0]
  k = jnp.zeros((batch, num_kv_heads, max_len, head_dim), store)
  v = jnp.zeros((batch, num_kv_heads, max_len, Dv), store)
  scale = None if kind is None else jnp.zeros((batch, num_kv_heads, max_len), jnp.float32)
  k_pos = (jnp.zeros((batch, max_len), jnp.int32)
           if positions is not None and P.as_spec(positions).kind == "alibi" else None)
  return KVCache(k, v, scale, scale, jnp.zeros((), jnp.int32), name, k_pos)


def _quantizer(dtype):
  """The quantizer of a quantized cache's storage dtype (int8 or float8_e4m3fn)."""
  return quantize_int8 if dtype == jnp.int8 else quantize_fp8


def encode(buf, scale, new):
  """`new` (B, H, T, D) as a cache with storage `buf` (and `scale`, None for a float
  cache) holds it: (values in buf's dtype, float32 scales (B, H, T) or None)."""
  if scale is None:
    return new.astype(buf.dtype), None
  return _quantizer(buf.dtype)(new)


def _write(buf, scale, new, pos):
  """Writes `new` (B, T, H, D) at positions [pos:pos+T] of the head-major buffer
  (B, H, N, D); quantizes when the cache is int8 or fp8."""
  qn, sn = encode(buf, scale, C.kv_heads_first(new))
  buf = jax.lax.dynamic_update_slice(buf, qn, (0, 0, pos, 0))
  if scale is None:
    return buf, None
  return buf, jax.lax.dynamic_update_slice(scale, sn, (0, 0, pos))


def _read(buf, scale, dtype):
  return buf.astype(dtype) if scale is None else dequantize_int8(buf, scale, dtype)


def _position_block(N):
  """Positions per block of a quantized cache's scaled-dot step: the largest divisor of
  N in [256, 1024] (a (Hkv, 1024, D) float block stays in L2), else N."""
  for b in range(min(N, 1024), 255, -1):
    if N % b == 0:
      return b
  return N


def _scores(qs, k):
  """qs . k: (B, Hkv, G, T, D) x (B, Hkv, N, D) -> (B, Hkv, G, T, N), computed as
  k . qs (the cache's N rows times the G*T queries) and the small result transposed:
  XLA's CPU dot wants the contracted axis of its right operand major, so `qs . k`
  made a transposed copy of the whole cache on every decode step."""
  return jnp.moveaxis(jnp.einsum("bhnd,bhgtd->bhngt", k, qs), 2, -1)


def _dot_attend(qs, k, ks, v, vs, mask, ct, bias=None):
  """softmax(qs . k + bias) @ v over a head-major cache, float or quantized (int8, fp8).

  qs: (B, Hkv, G, T, D) scaled queries in ct; k: (B, Hkv, N, D), v: (B, Hkv, N, Dv);
  ks, vs: (B, Hkv, N) scales or None; mask: bool broadcastable to (B, Hkv, G, T, N);
  bias: None or float broadcastable to (B, Hkv, G, T, N) (ALiBi).
  Returns (B, Hkv, G, T, Dv) in ct.
  """
  from attention.softmax import masked_softmax
  add = (lambda s: s) if bias is None else (lambda s: s + bias)
  B, Hkv, G, T, _ = qs.shape
  N, Dv = k.shape[2], v.shape[-1]
  if ks is None:   # float cache: one pass over each of K and V, no copies
    s = _scores(qs, k.astype(ct))
    p = masked_softmax(add(s), mask)
    return jnp.einsum("bhgtn,bhnd->bhgtd", p, v.astype(ct))
  bn = _position_block(N)
  blk = lambda x, j: jax.lax.dynamic_slice_in_dim(x, j * bn, bn, axis=2)

  def scores(j):   # (B, Hkv, G, T, bn): dequantised block by block
    return (_scores(qs, blk(k, j).astype(ct))
            * blk(ks, j)[:, :, None, None, :])
  s = jax.lax.map(scores, jnp.arange(N // bn))          # (nb, B, Hkv, G, T, bn)
  s = jnp.moveaxis(s, 0, 4).reshape(B, Hkv, G, T, N)
  pw = masked_softmax(add(s), mask) * vs[:, :, None, None, :]   # v's scale folded into p

  def out(acc, j):
    pj = jax.lax.dynamic_slice_in_dim(pw, j * bn, bn, axis=4)
    return acc + jnp.einsum("bhgtn,bhnd->bhgtd", pj, blk(v, j).astype(ct)), None
  return jax.lax.scan(out, jnp.zeros((B, Hkv, G, T, Dv), ct), jnp.arange(N // bn))[0]


def _concrete(x):
  """int(x) when x is a concrete value, None under tracing."""
  try:
    return int(x)
  except (jax.errors.ConcretizationTypeError, jax.errors.TracerIntegerConversionError):
    return None


def append(state: KVCache, k_t, v_t, k_pos=None) -> KVCache:
  """The cache with T = k_t.shape[1] more positions written at state.pos (the write
  of `kv_cache_step`, for decode steps that attend by other means, e.g. `fp8`);
  k_pos (B|1, T) int32: the new keys' positions, kept if the cache keeps them.

  Raises AttentionError when the positions exceed the capacity and state.pos is
  concrete; under tracing the caller must poison its output (pos + T > capacity).
  """
  T, N = k_t.shape[1], state.capacity
  pos = _concrete(state.pos)
  if T > N or (pos is not None and pos + T > N):
    raise C.AttentionError(
        f"KV cache overflow: {pos if pos is not None else '(traced)'} + {T} positions "
        f"> capacity {N}")
  k, ks = _write(state.k, state.k_scale, k_t, state.pos)
  v, vs = _write(state.v, state.v_scale, v_t, state.pos)
  # The barrier keeps each write a standalone in-place update of the buffer a decode
  # loop carries: fused into the cache's readers, XLA recomputed the written cache
  # into fresh buffers (several full copies of it per step).
  k, ks, v, vs = jax.lax.optimization_barrier((k, ks, v, vs))
  kp = state.k_pos
  if kp is not None:
    new = jnp.broadcast_to(jnp.asarray(k_pos, jnp.int32), (kp.shape[0], T))
    kp = jax.lax.dynamic_update_slice(kp, new, (0, state.pos))
  return dataclasses.replace(state, k=k, v=v, k_scale=ks, v_scale=vs, pos=state.pos + T,
                             k_pos=kp)


def kv_cache_step(state: KVCache, q_t, k_t, v_t, *, positions=None, q_pos=None,
                  k_pos=None, **kw):
  """Appends T tokens to the cache and attends the T queries to positions <= their own
  (with RoPE the keys are stored rotated; with ALiBi, biased by the kept k_pos)."""
  from attention.softmax import SAME_AS_SOFTMAX, attend, scores_for
  DOT_SCORES = ("softmax", "dot") + SAME_AS_SOFTMAX
  if state.name in SAME_AS_SOFTMAX:
    # A cache step is one row of scores per query: tiling options have nothing to
    # tile, and ring's mesh options nothing to split.
    for opt in ("block_q", "block_k", "interpret", "num_warps", "num_stages", "mesh", "axis",
                "impl"):
      kw.pop(opt, None)
  T, N = q_t.shape[1], state.capacity
  pos, q_t, k_t = step_positions(state, positions, q_t, k_t, q_pos, k_pos)
  new = append(state, k_t, v_t, None if pos is None else pos.k)
  k, ks, v, vs = new.k, new.k_scale, new.v, new.v_scale
  ct = C.compute_dtype(q_t.dtype)
  d = C.Dims(q_t.shape[0], T, N, q_t.shape[2], k.shape[1], q_t.shape[3], v.shape[3])
  bias = cache_bias(pos, new, d, ct)
  qg = C.split_heads_q(q_t, d).astype(ct)
  mask = (jnp.arange(N)[None, :] <= state.pos + jnp.arange(T)[:, None])[None, None, None]
  if state.name in DOT_SCORES and set(kw) <= {"scale"}:
    default = 1.0 if state.name == "dot" else 1.0 / math.sqrt(d.D)
    scale = default if kw.get("scale") is None else kw["scale"]
    o = _dot_attend(qg * scale, k, ks, v, vs, mask, ct, bias)
  else:   # another score function (or options): its own path on the dequantised cache
    o = attend(scores_for(state.name), qg, _read(k, ks, ct), _read(v, vs, ct), d, mask,
               name=state.name, bias_g=bias, **kw)
  out = C.merge_heads_out(o)
  out = jnp.where(state.pos + T <= N, out, jnp.nan).astype(q_t.dtype)
  return out, new


def step_positions(state, positions, q_t, k_t, q_pos=None, k_pos=None):
  """(Pos or None, q_t, k_t) of a cache step of T new tokens: their positions
  (default: state.pos onwards), and q_t, k_t rotated by them for RoPE. Refuses, like
  the forward pass, a scheme the variant does not take; a cache made without ALiBi
  positions cannot serve an ALiBi step."""
  d = C.Dims(q_t.shape[0], q_t.shape[1], k_t.shape[1], q_t.shape[2], k_t.shape[2],
             q_t.shape[3], q_t.shape[3])
  pos = P.prepare(state.name, positions, d, q_pos, k_pos, offset=state.pos)
  alibi = pos is not None and pos.alibi
  if alibi != (getattr(state, "k_pos", None) is not None):
    raise C.AttentionError(
        f"{state.name} decode: " + (
            "an ALiBi step needs a cache that keeps key positions; make it with "
            "init_decode_state(..., positions=<the same spec>)" if alibi else
            "this cache keeps ALiBi's key positions: pass the same positions= to every "
            "step"))
  q_t, k_t = P.rotate_qk(pos, q_t, k_t)
  return pos, q_t, k_t


def cache_bias(pos, state, d, ct):
  """The ALiBi bias (B|1, Hkv, G, T, N) of T new queries against a cache's kept key
  positions state.k_pos (B, N), or None without ALiBi."""
  if pos is None or not pos.alibi:
    return None
  return P.grouped_bias(pos._replace(k=state.k_pos), d, ct)


KV_CACHE = DecodeImpl(init=init_kv_cache, step=kv_cache_step)


def _impl(name):
  v = variant(name)
  if v.decode_impl is None:
    raise C.AttentionError(
        f"attention variant '{name}' has no decode state; variants that decode: "
        + ", ".join(n for n in _decoders()))
  return v.decode_impl


def _decoders():
  from attention.registry import names
  return [n for n in names() if variant(n).decode_impl is not None]


def init_decode_state(name, *, batch, max_len, num_kv_heads, head_dim, v_head_dim=None,
                      dtype=jnp.float32, **kw):
  """The empty decode state of variant `name` (a pytree usable in lax.scan).

  batch, max_len: batch size and capacity in positions (ignored by O(1)-state variants).
  num_kv_heads, head_dim, v_head_dim: K/V sizes; dtype: the K/V dtype.
  kw: variant options, e.g. cache_dtype="int8" for the exact family.
  """
  return _impl(name).init(name, batch=batch, max_len=max_len, num_kv_heads=num_kv_heads,
                          head_dim=head_dim, v_head_dim=v_head_dim, dtype=dtype, **kw)


def decode_step(state, q_t, k_t, v_t, **kw):
  """out_t, state = decode_step(state, q_t, k_t, v_t, **variant_kwargs).

  q_t: (B, T, Hq, D); k_t: (B, T, Hkv, D); v_t: (B, T, Hkv, Dv).
  out_t: (B, T, Hq, Dv) in q_t's dtype: the same as the causal forward pass would
  give at these positions.
  """
  return _impl(state.name).step(state, q_t, k_t, v_t, **kw)


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
