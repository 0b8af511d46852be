"""The KV cache: the decode state of every variant that declares its score function.

  # The learned attention sink (gpt-oss; Xiao et al. 2024, StreamingLLM): one logit per
# query head in the softmax's denominator, out_i = sum_j exp(s_ij) v_j / (exp(sink_h)
# + sum_j exp(s_ij)), a column of the softmax whose value is zero. The ParamSpec of the
# variants whose softmax, and so whose KV-cache step, carries it (softmax, flash, local):
# it exists only under their option sinks=True (`ParamSpec.when`), initialised to 0
# (an empty key of logit 0 beside the real ones; HF transformers' GptOss draws it
# N(0, 0.02), the reference gpt-oss ships trained values only).
SINKS = ParamSpec(lambda h, dh, L: (h,), lambda key, s, dt: jnp.zeros(s, dt), when="sinks")


KV_CACHE = DecodeImpl(init_kv_cache, kv_cache_step, needs=("score",))

A variant whose record says `decode_impl=KV_CACHE` decodes with it, and declares
`score` (the scores it applies softmax to; `attention.core.scores.SCALED_DOT` for a kernel
that computes softmax attention by another algorithm) and `kernel_options` (options
that choose how it computes, not what: tiles, a mesh; a cache step drops them). The
step reads both from the record, so a variant registered anywhere, with any score
function, decodes without an edit here.

The state is a fixed-capacity cache updated in place with `lax.dynamic_update_slice`;
one step costs O(N * D) for capacity N. The cache is stored head-major,
(B, Hkv, N, D), so each head's keys and values are one contiguous block that a step
reads without first transposing the whole cache (as the contract's (B, N, Hkv, D)
layout required). With cache_dtype="int8" or "fp8" keys and values are stored in
that format with one float32 scale per (batch, position, head) (`attention.core.quantize`:
the formats, their error bounds and bytes). A dot-product score (`DotScore`) over a
quantized cache is computed block by block of positions, each block dequantised where
it is used, so no float copy of the cache is materialised; another score function
reads the dequantised cache.

Writing past the capacity cannot raise under `jit`; it poisons the output with
NaN instead of silently overwriting the cache (and raises when not traced).
`local`, `sparse` and `fp8` build their own steps from `append`, `encode`, `read`
and `dot_attend`.

Positions (attention.core.positions): a step takes positions=, q_pos=, k_pos= (the new
tokens' absolute positions; default: the cache's length onwards). RoPE keys are
stored rotated (by their position, at write time) and each new query is rotated by
its own; for ALiBi the cache also stores each key's position, k_pos (B, N) int32,
and the bias is computed from them.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from attention.core import common as C
from attention.core import positions as P
from attention.core import quantize as Q
from attention.core.decode import DecodeImpl
from attention.core.registry import ParamSpec, variant
from attention.core.scores import DotScore, attend, check_sinks, grouped_sink, masked_softmax
from attention.core.common import unexpected


@dataclasses.dataclass(frozen=True)
class KVCache:
  """Fixed-capacity KV cache, head-major.

  k: (B, Hkv, N, D) in dtype, int8 or float8_e4m3fn;  v: (B, Hkv, N, Dv) likewise.
  k_scale, v_scale: (B, Hkv, N) float32 for quantized (int8, fp8) caches, else None.
  pos: int32 scalar, the number of positions written.
  name: the variant (static), whose record decides the score function.
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


def init_kv_cache(name, *, batch, max_len, num_kv_heads, head_dim, v_head_dim=None,
                  dtype=jnp.float32, cache_dtype=None, positions=None,
                  **unused) -> KVCache:
  """An empty KV cache for `name` (see module docstring for the layout).

  cache_dtype: None (float, in dtype), "int8" or "fp8" (alias "float8_e4m3fn").
  positions: the steps' position scheme; with ALiBi the cache keeps each key's position.
  unused: the variant's other options (its step takes them).
  """
  del unused
  Dv = head_dim if v_head_dim is None else v_head_dim
  fmt = Q.format_of(cache_dtype)
  store = dtype if fmt is None else Q.FORMATS[fmt][0]
  k = jnp.zeros((batch, num_kv_heads, max_len, head_dim), store)
  v = jnp.zeros((batch, num_kv_heads, max_len, Dv), store)
  scale = None if fmt is None else jnp.zeros((batch, num_kv_heads, max_len), jnp.float32)
  k_pos = (jnp.zeros((batch, max_len), jnp.int32)
           if positions is not None and P.as_spec(positions).kind == "alibi" else None)
  return KVCache(k, v, scale, scale, jnp.zeros((), jnp.int32), name, k_pos)


def kv_cache_bytes(name=None, *, batch, max_len, num_kv_heads, head_dim, v_head_dim=None,
                   dtype=jnp.float32, cache_dtype=None, positions=None, **unused) -> int:
  """The bytes `init_kv_cache` allocates under the same arguments, by formula:
  B Hkv N (D + Dv) elements in the storage dtype (dtype, int8 or float8: 1 byte), two
  (B, Hkv, N) float32 scales for a quantized cache, the int32 length, and (B, N)
  int32 key positions under ALiBi. Per cached position and layer: Hkv (D + Dv) s
  (+ 8 Hkv for the scales, + 4 for ALiBi's positions), per batch row."""
  del name, unused
  Dv = head_dim if v_head_dim is None else v_head_dim
  fmt = Q.format_of(cache_dtype)
  item = jnp.dtype(dtype if fmt is None else Q.FORMATS[fmt][0]).itemsize
  n = batch * num_kv_heads * max_len * (head_dim + Dv) * item + 4
  if fmt is not None:
    n += 2 * 4 * batch * num_kv_heads * max_len
  if positions is not None and P.as_spec(positions).kind == "alibi":
    n += 4 * batch * max_len
  return n


def encode(buf, scale, new):
  """`new` (B, H, T, D) as a cache with storage `buf` (and `scale`, None for a float
  cache) holds it: (values in buf's dtype, float32 scales (B, H, T) or None)."""
  if scale is None:
    return new.astype(buf.dtype), None
  return Q.quantizer(buf.dtype)(new)


def _write(buf, scale, new, pos):
  """Writes `new` (B, T, H, D) at positions [pos:pos+T] of the head-major buffer
  (B, H, N, D); quantizes when the cache is int8 or fp8."""
  qn, sn = encode(buf, scale, C.kv_heads_first(new))
  # `_in_dim` builds the other axes' zero indices in pos's dtype: literal zeros beside
  # an int32 pos are int64 under jax_enable_x64, and mixed index types are refused.
  buf = jax.lax.dynamic_update_slice_in_dim(buf, qn, pos, axis=2)
  if scale is None:
    return buf, None
  return buf, jax.lax.dynamic_update_slice_in_dim(scale, sn, pos, axis=2)


def read(buf, scale, dtype):
  """A cache buffer (B, H, N, D) (with its scales, or None) as floats in dtype."""
  return buf.astype(dtype) if scale is None else Q.dequantize(buf, scale, dtype)


def position_block(N):
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


def dot_attend(qs, k, ks, v, vs, mask, ct, bias=None, sink=None):
  """softmax(qs . k + bias) @ v over a head-major cache, float or quantized (int8, fp8).

  qs: (B, Hkv, G, T, D) scaled queries in ct; k: (B, Hkv, N, D), v: (B, Hkv, N, Dv);
  ks, vs: (B, Hkv, N) scales or None; mask: bool broadcastable to (B, Hkv, G, T, N);
  bias: None or float broadcastable to (B, Hkv, G, T, N) (ALiBi); sink: None or the
  sink logits broadcastable to (B, Hkv, G, T, 1) (`scores.grouped_sink`), in the
  softmax's denominator.
  Returns (B, Hkv, G, T, Dv) in ct.
  """
  add = (lambda s: s) if bias is None else (lambda s: s + bias)
  B, Hkv, G, T, _ = qs.shape
  N, Dv = k.shape[2], v.shape[-1]
  if ks is None:   # float cache: one pass over each of K and V, no copies
    s = _scores(qs, k.astype(ct))
    p = masked_softmax(add(s), mask, sink)
    return jnp.einsum("bhgtn,bhnd->bhgtd", p, v.astype(ct))
  bn = position_block(N)
  blk = lambda x, j: jax.lax.dynamic_slice_in_dim(x, j * bn, bn, axis=2)

  def scores(j):   # (B, Hkv, G, T, bn): dequantised block by block
    return (_scores(qs, blk(k, j).astype(ct))
            * blk(ks, j)[:, :, None, None, :])
  s = jax.lax.map(scores, jnp.arange(N // bn))          # (nb, B, Hkv, G, T, bn)
  s = jnp.moveaxis(s, 0, 4).reshape(B, Hkv, G, T, N)
  pw = masked_softmax(add(s), mask, sink) * vs[:, :, None, None, :]   # v's scale folded into p

  def out(acc, j):
    pj = jax.lax.dynamic_slice_in_dim(pw, j * bn, bn, axis=4)
    return acc + jnp.einsum("bhgtn,bhnd->bhgtd", pj, blk(v, j).astype(ct)), None
  return jax.lax.scan(out, jnp.zeros((B, Hkv, G, T, Dv), ct), jnp.arange(N // bn))[0]


def concrete(x):
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
  pos = concrete(state.pos)
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
    kp = jax.lax.dynamic_update_slice_in_dim(kp, new, state.pos, axis=1)
  return dataclasses.replace(state, k=k, v=v, k_scale=ks, v_scale=vs, pos=state.pos + T,
                             k_pos=kp)


def kv_cache_step(state: KVCache, q_t, k_t, v_t, *, positions=None, q_pos=None,
                  k_pos=None, **kw):
  """Appends T tokens to the cache and attends the T queries to positions <= their own
  (with RoPE the keys are stored rotated; with ALiBi, biased by the kept k_pos).

  q_t: (B, T, Hq, D), k_t: (B, T, Hkv, D), v_t: (B, T, Hkv, Dv); positions, q_pos,
  k_pos: see the module docstring (q_pos, k_pos (B|1, T) int); kw: the variant's
  options and parameters (its `kernel_options` are dropped: a step is one row of
  scores per query, with nothing to tile and no sequence to split), the learned sink
  logits `sinks` (Hq,) among them where the variant takes them. Returns
  (out (B, T, Hq, Dv) in q_t's dtype, the new state).
  """
  rec = variant(state.name)
  score = rec.score
  if score is None:
    raise C.AttentionError(
        f"attention variant '{state.name}' decodes with the KV cache's step but its "
        "record declares no score function (Variant.score) to attend with")
  kw = {a: b for a, b in kw.items() if a not in rec.kernel_options}
  sinks = kw.pop("sinks", None)
  T, N = q_t.shape[1], state.capacity
  pos, q_t, k_t = step_positions(state, positions, q_t, k_t, q_pos, k_pos)
  new = append(state, k_t, v_t, None if pos is None else pos.k)
  k, ks, v, vs = new.k, new.k_scale, new.v, new.v_scale
  ct = C.compute_dtype(q_t.dtype)
  d = C.Dims(q_t.shape[0], T, N, q_t.shape[2], k.shape[1], q_t.shape[3], v.shape[3])
  bias = cache_bias(pos, new, d, ct)
  qg = C.split_heads_q(q_t, d).astype(ct)
  mask = (jnp.arange(N)[None, :] <= state.pos + jnp.arange(T)[:, None])[None, None, None]
  if isinstance(score, DotScore):
    unexpected(state.name, {a: b for a, b in kw.items() if a != "scale"})
    o = dot_attend(qg * score.scale(d.D, kw.get("scale")), k, ks, v, vs, mask, ct, bias,
                   grouped_sink(check_sinks(sinks, d, state.name), d, 5, ct))
  else:   # another score function: its own path on the dequantised cache
    o = attend(score, qg, read(k, ks, ct), read(v, vs, ct), d, mask, name=state.name,
               bias_g=bias, sinks=sinks, **kw)
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


# The learned attention sink (gpt-oss; Xiao et al. 2024, StreamingLLM): one logit per
# query head in the softmax's denominator, out_i = sum_j exp(s_ij) v_j / (exp(sink_h)
# + sum_j exp(s_ij)), a column of the softmax whose value is zero. The ParamSpec of the
# variants whose softmax, and so whose KV-cache step, carries it (softmax, flash, local):
# it exists only under their option sinks=True (`ParamSpec.when`), initialised to 0
# (an empty key of logit 0 beside the real ones; HF transformers' GptOss draws it
# N(0, 0.02), the reference gpt-oss ships trained values only).
SINKS = ParamSpec(lambda h, dh, L: (h,), lambda key, s, dt: jnp.zeros(s, dt), when="sinks")


KV_CACHE = DecodeImpl(init=init_kv_cache, step=kv_cache_step, needs=("score",),
                      state_bytes=kv_cache_bytes)
