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

This module is the protocol only: a variant's record carries its hooks
(`Variant.decode_impl = DecodeImpl(init, step)`), and the state names its variant
(a static `name` field), so `decode_step` finds the step again. The implementations:
  attention.core.kv_cache   `KV_CACHE`: a fixed-capacity KV cache (fp, int8 or fp8) for
                       every variant whose record declares its score function
                       (`Variant.score`): the exact family and the classic scores
  attention.linear     `LINEAR_STATE`: the (S, Z) state of kernelised attention
                       (also performer's), O(1) per token
  attention.local      a rolling cache of the last w positions
  attention.sparse     the KV cache under the pattern's mask
  attention.fp8        the KV cache, attended through fp8's own rounding
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from attention.core import common as C
from attention.core.registry import names, variant


class DecodeImpl(NamedTuple):
  """A variant's decode hooks.

  init(name, *, batch, max_len, num_kv_heads, head_dim, v_head_dim, dtype, **kw) -> state
  step(state, q_t, k_t, v_t, **kw) -> (out_t, state)
  needs: the `Variant` fields the hooks read from the record (e.g. the KV cache reads
    "score"); `attention.register` refuses a record that leaves one of them unset.
  state_bytes(name, *, batch, max_len, num_kv_heads, head_dim, v_head_dim, dtype, **kw)
    -> int: the bytes `init` allocates (the sum of the state's arrays' nbytes) under
    the same arguments, by formula, never by building it: the cost model of what a
    decode state holds (`decode_state_bytes`; results/kv_cache/ checks it against
    the arrays). None: the variant does not say.
  """
  init: Any
  step: Any
  needs: tuple[str, ...] = ()
  state_bytes: Any = None


def _impl(name):
  v = variant(name)
  if v.decode_impl is None:
    raise C.AttentionError(
        f"attention variant '{name}' has no decode state; variants that decode: "
        + ", ".join(n for n in names() if variant(n).decode_impl is not None))
  return v.decode_impl


def init_decode_state(name, *, batch, max_len, num_kv_heads, head_dim, v_head_dim=None,
                      dtype=jnp.float32, **kw):
  """The empty decode state of variant `name` (a pytree usable in lax.scan).

  batch, max_len: batch size and capacity in positions (ignored by O(1)-state variants).
  num_kv_heads, head_dim, v_head_dim: K/V sizes; dtype: the K/V dtype.
  kw: variant options, e.g. cache_dtype="int8" for the exact family.
  """
  return _impl(name).init(name, batch=batch, max_len=max_len, num_kv_heads=num_kv_heads,
                          head_dim=head_dim, v_head_dim=v_head_dim, dtype=dtype, **kw)


def decode_state_bytes(name, *, batch, max_len, num_kv_heads, head_dim, v_head_dim=None,
                       dtype=jnp.float32, **kw) -> int:
  """Bytes of the decode state `init_decode_state` would build with these arguments
  (the sum of its arrays' nbytes), from the variant's formula (`DecodeImpl.
  state_bytes`), without allocating it. Raises AttentionError for a variant whose
  decode hooks give no formula."""
  impl = _impl(name)
  if impl.state_bytes is None:
    raise C.AttentionError(f"attention variant '{name}': its decode state declares no "
                           "state_bytes formula (DecodeImpl.state_bytes)")
  return int(impl.state_bytes(name, batch=batch, max_len=max_len, num_kv_heads=num_kv_heads,
                              head_dim=head_dim, v_head_dim=v_head_dim, dtype=dtype, **kw))


def state_nbytes(state) -> int:
  """The bytes a decode state holds: the sum of its arrays' nbytes (any pytree)."""
  return int(sum(x.size * jnp.dtype(x.dtype).itemsize for x in jax.tree.leaves(state)))


def decode_step(state, q_t, k_t, v_t, **kw):
  """out_t, state = decode_step(state, q_t, k_t, v_t, **variant_kwargs).

  q_t: (B, T, Hq, D); k_t: (B, T, Hkv, D); v_t: (B, T, Hkv, Dv).
  out_t: (B, T, Hq, Dv) in q_t's dtype: the same as the causal forward pass would
  give at these positions.
  """
  return _impl(state.name).step(state, q_t, k_t, v_t, **kw)


def decode_tokens(state, q, k, v, per_token=None, **kw):
  """(out, state): T tokens decoded one at a time (`decode_step` with T = 1 each, in
  `lax.scan`), as generation does.

  q (B, T, Hq, D), k (B, T, Hkv, D), v (B, T, Hkv, Dv); per_token: {name: (B, T, ...)}
  keyword arguments sliced per token (a variant's per-token inputs, `Variant.inputs`);
  kw: passed to every step as they are. out: (B, T, Hq, Dv) in q's dtype.
  """
  def body(s, x):
    qt, kt, vt, it = jax.tree.map(lambda a: a[:, None], x)
    out, s = decode_step(s, qt, kt, vt, **kw, **it)
    return s, out[:, 0]

  xs = jax.tree.map(lambda a: jnp.moveaxis(a, 1, 0), (q, k, v, per_token or {}))
  state, outs = jax.lax.scan(body, state, xs)
  return jnp.moveaxis(outs, 0, 1), state
