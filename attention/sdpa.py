"""sdpa: the vendor kernel, `jax.nn.dot_product_attention`, under the contract.

On an NVIDIA GPU with bf16/fp16 inputs JAX runs cuDNN's fused flash attention; on
other backends and dtypes, XLA's own implementation. Registered like any variant, so
`--config.attention=sdpa` compares a model against the vendor kernel by flag.

What this wrapper adds to jax.nn.dot_product_attention, which differs from the
contract in two places:
  * causal with Tq != Tk: JAX's `is_causal` is top-left aligned; the contract is
    bottom-right (query i sees keys j <= i + Tk - Tq, as in a KV-cache step). For
    Tq != Tk the causal mask is built here and passed as `mask`.
  * a query row with no allowed key: JAX returns the mean of V there (it fills
    masked logits with a large negative number); the contract returns zeros.
GQA/MQA go to JAX as they are (it groups Hq query heads over Hkv key/value heads
without repeating K and V).

Segments (packed rows, q_seg/k_seg): a (B|1, 1, Tq, Tk) mask (`common.segment_mask`)
joined with `mask` and passed as JAX's `mask`. jax.nn.dot_product_attention takes no
segment ids (its query/key_value_seq_lengths give one sequence per row), and with
cuDNN it turns a boolean mask into a dense additive bias: packed rows then run
cuDNN's masked kernel over the whole (Tq, Tk) with an O(N²) bias, no tile skipped
(cuDNN's own packed layout, ragged offsets, is not reachable through that API).

Positions: RoPE rotates q and k first (attention.core.positions); ALiBi goes to JAX's
`bias` argument, which takes a dense (B|1, Hq, Tq, Tk) array (in q's dtype): O(N²)
memory, like the XLA path's scores (cuDNN reads it as a dense bias too).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from attention.core import common as C
from attention.core import positions as P
from attention.core.kv_cache import KV_CACHE
from attention.core.registry import Variant, register, variant
from attention.core.scores import SCALED_DOT
from attention.core.common import unexpected

NAME = "sdpa"
# cuDNN's fused attention takes these; other dtypes go to XLA's implementation.
_CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)


def implementation(dtype, backend: str | None = None) -> str | None:
  """The `implementation=` handed to jax.nn.dot_product_attention: "cudnn" on a GPU
  for bf16/fp16, else "xla" (JAX's default choice would also try cuDNN; naming it
  makes a failure to use it an error instead of a silent fallback)."""
  backend = backend or jax.default_backend()
  if backend == "gpu" and jnp.dtype(dtype) in map(jnp.dtype, _CUDNN_DTYPES):
    return "cudnn"
  return "xla"


def sdpa(q, k, v, *, causal=False, mask=None, scale=None, impl=None, positions=None,
         q_pos=None, k_pos=None, q_seg=None, k_seg=None, **kw):
  """Exact softmax attention by jax.nn.dot_product_attention.

  q: (B, Tq, Hq, D), k: (B, Tk, Hkv, D), v: (B, Tk, Hkv, Dv) with Dv == D (a JAX
    requirement), Hq % Hkv == 0; float16/bfloat16/float32 (float64 is computed in
    float32 by XLA's implementation, so it is refused here).
  mask: bool broadcastable to (B, Hq, Tq, Tk), True = may attend.
  causal: bottom-right aligned.
  scale: logits multiplier, 1/sqrt(D) unless given.
  impl: override `implementation(q.dtype)` ("xla" or "cudnn").
  positions, q_pos (B|1, Tq), k_pos (B|1, Tk): rope/rope2d (q, k rotated) or alibi
    (a dense bias); see attention.core.positions.
  q_seg (B|1, Tq), k_seg (B|1, Tk): segment ids of packed rows (attention.core.common),
    joined with the mask (a dense (B|1, 1, Tq, Tk) one: see the module docstring).
  Returns (B, Tq, Hq, Dv) in q's dtype; rows with no allowed key are zeros.
  """
  unexpected(NAME, kw)
  q, k, v = jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)
  d = C.check_qkv(q, k, v, NAME)
  mask = C.check_mask(mask, d, NAME)
  mask = C.and_mask(mask, C.segment_mask(*C.check_segments(q_seg, k_seg, d, NAME)))
  if d.Dv != d.D:
    raise C.AttentionError(f"{NAME}: jax.nn.dot_product_attention needs the value head "
                           f"dim ({d.Dv}) to equal the query/key head dim ({d.D})")
  if q.dtype == jnp.float64:
    raise C.AttentionError(f"{NAME}: float64 is not supported by "
                           "jax.nn.dot_product_attention; use 'softmax'")
  pos = P.prepare(NAME, positions, d, q_pos, k_pos)
  q, k = P.rotate_qk(pos, q, k)
  k, v = k.astype(q.dtype), v.astype(q.dtype)
  bias = None
  if pos is not None and pos.alibi:
    bias = P.alibi_bias(P.slopes_for(pos.spec, d.Hq), pos.q, pos.k, q.dtype)
  full = mask
  top_left = causal and d.Tq == d.Tk         # JAX's is_causal is exactly the contract
  if causal and not top_left:
    cm = C.causal_mask(d.Tq, d.Tk)[None, None]
    full = cm if full is None else full & cm
  impl = impl or implementation(q.dtype)
  out = jax.nn.dot_product_attention(q, k, v, bias=bias, mask=full, is_causal=top_left,
                                     scale=C.default_scale(d.D, scale), implementation=impl)
  seen = full                                # the keys each query may see
  if top_left and mask is not None:          # with causal: a row may lose all of them
    seen = mask & C.causal_mask(d.Tq, d.Tk)[None, None]
  if seen is not None:                       # rows with nothing to attend to -> 0
    any_key = jnp.any(jnp.broadcast_to(seen, (d.B, seen.shape[1], d.Tq, d.Tk)), -1)
    out = jnp.where(jnp.moveaxis(any_key, 1, 2)[..., None], out, 0)
  return out.astype(q.dtype)


def _cost(d, *, causal=False, mode="fwd", itemsize=4, **kw):
  # XLA's implementation is the dense graph of `softmax`; cuDNN's is tiled, but its
  # arithmetic is the same and its memory O(N).
  return variant("softmax").cost(d, causal=causal, mode=mode, itemsize=itemsize)


register(Variant(
    name=NAME, fn=sdpa,
    refused_options={"sinks": (
        "jax.nn.dot_product_attention has no sink argument and returns no log-sum-"
        "exp to rescale by; its bias could carry a sink only as an extra key column"
        " of a dense (B, Hq, Tq, Tk + 1) bias, the O(N²) memory its fused kernel "
        "avoids (use flash or softmax with sinks)")},
    paper="Vaswani et al. 2017; vendor kernel (cuDNN flash attention)",
    time="O(N² D)", memory="O(N) with cuDNN, O(N²) with XLA", causal=True, masks="any",
    decode="KV cache (fp, int8 or fp8)", decode_impl=KV_CACHE, cost=_cost,
    family="exact", score=SCALED_DOT, kernel_options=("impl",),
    summary="jax.nn.dot_product_attention: cuDNN on a GPU (bf16/fp16), XLA elsewhere",
    positions=P.takes_qk("a dense (B, Hq, Tq, Tk) bias argument (JAX's `bias`)"),
    segments="a dense (B, 1, Tq, Tk) mask joined with `mask` (cuDNN: as a dense "
             "bias, no tile skipped)"))
