"""attnlab's attention library: pure functions behind one registry.

  import attention
  attention.names()            # sorted registered variant names
  attention.get(name)          # -> fn(q, k, v, *, causal=False, mask=None, **variant_kwargs)
  attention.variant(name)      # -> Variant record: supports, params, cost, decode
  attention.cost(name, ...)    # -> Cost(flops, transcendentals, bytes, temp_bytes)
  attention.init_decode_state(name, ...) / attention.decode_step(state, q_t, k_t, v_t)
  attention.probabilities(q, k, name=...)  # (B, Hq, Tq, Tk) softmax of a score variant
  attention.implied_weights(q, k, name=...)  # (B, Hq, Tq, Tk) weights of any variant
  with attention.registered(Variant(...)): ...  # a variant of your own, for a while
  attention.positions          # RoPE, 2D RoPE, ALiBi: fn(..., positions=, q_pos=, k_pos=)

The contract (shapes, masks, causality) is documented in `attention.common`, and how
to add a variant in `attention/README.md`. Each variant module registers itself on
import; the list below is the registry's single line per module.

Modules below the variants: `common` (the contract's checks and layouts), `registry`,
`scores` (the softmax core and the dot-product scores), `decode` (the decode
protocol), `kv_cache` (the KV cache), `quantize` (int8/e4m3 formats and their error
bounds), `cost_model`, `weights` (implied weights for heat maps).
"""
from attention.common import AttentionError, Dims, check_qkv, check_mask, causal_mask
from attention.registry import (InputSpec, ParamSpec, Refused, Variant, get, names,
                                register, registered, unregister, variant)
from attention import positions
from attention.positions import Positions
from attention.decode import DecodeImpl, decode_step, init_decode_state
from attention.kv_cache import KV_CACHE, KVCache
from attention.quantize import (dequantize_fp8, dequantize_int8, fp8_output_error_bound,
                                int8_output_error_bound, quantize_fp8, quantize_int8)
from attention.scores import DOT, SCALED_DOT, DotScore
from attention.cost_model import Cost
from attention.softmax import probabilities
from attention.weights import implied_weights

# One line per variant module: importing it registers its variants.
from attention import softmax as _softmax  # softmax dot general additive cosine location
from attention import flash as _flash  # flash
from attention import flash_pallas as _flash_pallas  # flash_pallas
from attention import ring as _ring  # ring
from attention import linear as _linear  # linear
from attention import performer as _performer  # performer
from attention import local as _local  # local
from attention import sparse as _sparse  # sparse
from attention import linformer as _linformer  # linformer
from attention import reformer as _reformer  # reformer
from attention import sdpa as _sdpa  # sdpa
from attention import fp8 as _fp8  # fp8
from attention import retention as _retention  # retention
from attention import gla as _gla  # gla
from attention import deltanet as _deltanet  # deltanet


def cost(name, *, batch, q_len, num_heads, head_dim, kv_len=None, num_kv_heads=None,
         v_head_dim=None, causal=False, mode="fwd", itemsize=4, **kw) -> Cost:
  """FLOPs, transcendentals, bytes moved and temporaries of one call of `name`.

  mode: "fwd", "fwd_bwd", or "decode" (q_len new tokens against a kv_len cache).
  itemsize: bytes per input element (4 for fp32, 2 for bf16).
  kw: variant options that change the cost (e.g. block_q for flash, w_q for additive).
  """
  d = Dims(batch, q_len, q_len if kv_len is None else kv_len, num_heads,
           num_heads if num_kv_heads is None else num_kv_heads, head_dim,
           head_dim if v_head_dim is None else v_head_dim)
  return variant(name).cost(d, causal=causal, mode=mode, itemsize=itemsize, **kw)


__all__ = ["AttentionError", "Cost", "DOT", "DecodeImpl", "Dims", "DotScore", "InputSpec",
           "KVCache", "KV_CACHE", "ParamSpec", "Positions", "Refused", "SCALED_DOT", "Variant",
           "causal_mask", "check_mask", "check_qkv", "cost", "decode_step",
           "dequantize_fp8", "dequantize_int8", "fp8_output_error_bound", "get",
           "implied_weights", "init_decode_state", "int8_output_error_bound", "names",
           "positions", "probabilities", "quantize_fp8", "quantize_int8", "register",
           "registered", "unregister", "variant"]
