"""attnlab's attention library: pure functions behind one registry.

  import attention
  attention.names()            # sorted registered variant names
  attention.native_names()     # those whose kernels run compiled on this backend
  attention.native_names(own_compute=True)  # less those that compute as another here (ring)
  attention.get(name)          # -> fn(q, k, v, *, causal=False, mask=None, **variant_kwargs)
  attention.variant(name)      # -> Variant record: supports, params, cost, decode
  attention.cost(name, ...)    # -> Cost(flops, transcendentals, bytes, temp_bytes)
  attention.init_decode_state(name, ...) / attention.decode_step(state, q_t, k_t, v_t)
  attention.decode_state_bytes(name, ...)  # its bytes by formula (== state_nbytes(state))
  attention.probabilities(q, k, name=...)  # (B, Hq, Tq, Tk) softmax of a score variant
  attention.implied_weights(q, k, name=...)  # (B, Hq, Tq, Tk) weights of any variant
  with attention.registered(Variant(...)): ...  # a variant of your own, for a while
  attention.core.positions          # RoPE, 2D RoPE, ALiBi: fn(..., positions=, q_pos=, k_pos=)

The contract (shapes, masks, causality) is documented in `attention.core.common`, and
how to add a variant in `attention/README.md`: a variant is one module beside
`attention/core/` (the machinery: contract checks, registry, decode and KV cache,
quantisers, positions, cost model, the exact and gated families' libraries) that
registers itself on import; this package imports every such module, so a new file is
all a new variant needs.
"""
from attention.core.common import AttentionError, Dims, check_qkv, check_mask, causal_mask
from attention.core.registry import (InputSpec, ParamSpec, Refused, Variant, get, names,
                                     native_names, register, registered, unregister,
                                     variant)
from attention.core import positions
from attention.core.positions import Positions
from attention.core.decode import (DecodeImpl, decode_state_bytes, decode_step,
                                   init_decode_state, state_nbytes)
from attention.core.kv_cache import KV_CACHE, KVCache
from attention.core.quantize import (dequantize_fp8, dequantize_int8,
                                     fp8_output_error_bound, int8_output_error_bound,
                                     quantize_fp8, quantize_int8)
from attention.core.scores import DOT, SCALED_DOT, DotScore, probabilities
from attention.core.cost_model import Cost
from attention.core.weights import implied_weights

# Every module beside core/ is a variant module: importing it registers its variants.
def _import_variants() -> None:
  import importlib
  import pkgutil
  for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if not m.ispkg and not m.name.startswith("_"):
      importlib.import_module(f"{__name__}.{m.name}")


_import_variants()


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
           "causal_mask", "check_mask", "check_qkv", "cost", "decode_state_bytes", "decode_step",
           "dequantize_fp8", "dequantize_int8", "fp8_output_error_bound", "get",
           "implied_weights", "init_decode_state", "int8_output_error_bound", "names", "native_names",
           "positions", "probabilities", "quantize_fp8", "quantize_int8", "register",
           "registered", "state_nbytes", "unregister", "variant"]
