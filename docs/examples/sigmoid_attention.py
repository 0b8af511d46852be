"""Sigmoid attention: the template for a variant that is NOT softmax(score) @ v.

Ramapuram et al. 2024, "Theory, Analysis, and Best Practices for Sigmoid
Self-Attention":

  out_i = sum_{j allowed} sigmoid(q_i . k_j * scale + b) v_j,   b = -log(n)

Each weight is a sigmoid of its own score: there is no normaliser over the keys, so
this is not `softmax(score) @ v` and it must not declare `score=` on its record (the
KV cache, `attention.probabilities` and the contract's `fn == softmax(score) @ v`
check would then compute softmax of its logits). A variant of that other kind
(softmax of a new score: a scaled cosine, a bilinear form, ...) needs only a score
function and `decode_impl=KV_CACHE` (attention/README.md); this file is what every
other variant writes: its function under the contract, its decode step and its record.
tests/attention/test_sigmoid_example.py registers it for a while
(`attention.registered(record())`) and runs the contract's checks on it.

b = -log(n) is an OPTION fixed before the call (`max_len`, the n of the configured
maximum length, or `bias`, b itself), never -log(Tk) of the keys at hand. The
contract requires an output row not to depend on the number of keys beyond those it
sees: a causal query must get the same output when later keys exist (Tq < Tk, a
decode step against a cache of any length, a prefill), a packed segment the same as
when run alone at its own length, and a decode step must equal the forward pass,
which sees all T keys while the step has seen t of them. With b = -log(Tk) every one
of those would differ (the test shows `check_causality` failing for it).

A variant that also needs a per-token quantity computed from the layer input (a
gate, a write strength) declares it on its record, `inputs={"gate":
InputSpec(width=..., heads="q")}`, and takes it as a keyword argument (required or
not): the models pass it on every call, one row per query, and the contract hands each
call the rows of its own queries (attention/README.md, "Per-token inputs").
tests/attention/test_sigmoid_example.py registers one (softmax with a sigmoid output
gate, cross-attending) and runs the contract's checks on it.

Use it as a template: copy the file into attention/<name>.py and call
`register(record())` at its bottom to make a variant of the library (then it runs
the whole contract, tests/attention/test_contract.py, and `make table` lists it).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from attention.core import common as C
from attention.core import cost_model as cost_lib
from attention.core import kv_cache as KV
from attention.core import positions as P
from attention.core.common import unexpected
from attention.core.decode import DecodeImpl
from attention.core.registry import Variant

NAME = "sigmoid"
# The paper's n of b = -log(n): the sequence length the model is configured for.
DEFAULT_MAX_LEN = 1024


def sigmoid_bias(max_len: int, bias: float | None = None) -> float:
  """b of sigmoid(q.k * scale + b): `bias` if given, else -log(max_len).

  max_len: the configured maximum sequence length n (an option, not the number of
    keys of a call: see the module docstring); bias: an explicit b, or None."""
  if bias is not None:
    return float(bias)
  if int(max_len) < 1:
    raise C.AttentionError(f"attention variant '{NAME}': max_len={max_len} must be >= 1 "
                           "(b = -log(max_len))")
  return -math.log(int(max_len))


def grouped_weights(qg, kg, d: C.Dims, mask_g, bias_g, *, scale, b):
  """sigmoid(qg . kg * scale + b + bias_g), zero where mask_g is False.

  qg (B, Hkv, G, Tq, D), kg (B, Hkv, Tk, D) in the compute dtype (the grouped layout
  of attention.core.common: GQA never copies K); d: the call's Dims; mask_g: None or
  bool broadcastable to (B, Hkv, G, Tq, Tk); bias_g: None or a float bias of that
  shape (ALiBi); scale: None (1/sqrt(D)) or a float; b: the fixed bias (sigmoid_bias).
  Returns (B, Hkv, G, Tq, Tk) in the compute dtype. A masked pair gets weight 0
  exactly, so a row with no allowed key is zeros (the contract's empty-row rule)."""
  s = jnp.einsum("bhgqd,bhkd->bhgqk", qg, kg) * C.default_scale(d.D, scale) + b
  if bias_g is not None:
    s = s + bias_g
  w = jax.nn.sigmoid(s)
  return w if mask_g is None else jnp.where(mask_g, w, 0.0)


def _prepared(q, k, v, *, causal, mask, positions, q_pos, k_pos, q_seg, k_seg,
              max_len, bias):
  """The contract's checks and inputs of one call: (Dims, qg, kg, grouped mask, ALiBi
  bias or None, b, compute dtype)."""
  d = C.check_qkv(q, k, v, NAME)                      # shapes, GQA (Hq % Hkv == 0)
  mask = C.check_mask(mask, d, NAME)                  # bool, broadcastable
  q_seg, k_seg = C.check_segments(q_seg, k_seg, d, NAME)
  mask = C.and_mask(mask, C.segment_mask(q_seg, k_seg))
  pos = P.prepare(NAME, positions, d, q_pos, k_pos)   # refuses what the record refuses
  q, k = P.rotate_qk(pos, q, k)                       # rope, rope2d
  ct = C.compute_dtype(q.dtype)
  alibi = P.grouped_bias(pos, d, ct) if pos is not None and pos.alibi else None
  return (d, C.split_heads_q(q, d).astype(ct), C.kv_heads_first(k).astype(ct),
          C.combined_mask(mask, d, causal), alibi, sigmoid_bias(max_len, bias), ct)


def sigmoid_attention(q, k, v, *, causal=False, mask=None, scale=None, bias=None,
                      max_len=DEFAULT_MAX_LEN, positions=None, q_pos=None, k_pos=None,
                      q_seg=None, k_seg=None, **kw):
  """Sigmoid attention under the contract (attention.core.common).

  q (B, Tq, Hq, D), k (B, Tk, Hkv, D), v (B, Tk, Hkv, Dv) -> (B, Tq, Hq, Dv) in q's
  dtype. causal: bottom-right aligned; mask: bool, True = may attend, broadcastable
  to (B, Hq, Tq, Tk). scale: multiplies q.k (default 1/sqrt(D)). bias: b itself, or
  None for -log(max_len); max_len: the paper's n, the configured maximum length
  (fixed: never the number of keys of the call). positions, q_pos, k_pos: rope,
  rope2d (q and k rotated) or alibi (a bias before the sigmoid). q_seg, k_seg:
  segment ids of packed rows (a mask). Anything else (attention dropout, an unknown
  option) is an AttentionError naming the variant (`unexpected`)."""
  unexpected(NAME, kw)
  d, qg, kg, mask_g, alibi, b, ct = _prepared(
      q, k, v, causal=causal, mask=mask, positions=positions, q_pos=q_pos, k_pos=k_pos,
      q_seg=q_seg, k_seg=k_seg, max_len=max_len, bias=bias)
  w = grouped_weights(qg, kg, d, mask_g, alibi, scale=scale, b=b)
  o = jnp.einsum("bhgqk,bhkd->bhgqd", w, C.kv_heads_first(v).astype(ct))
  return C.merge_heads_out(o).astype(q.dtype)


def sigmoid_weights(q, k, *, causal=False, mask=None, scale=None, bias=None,
                    max_len=DEFAULT_MAX_LEN, positions=None, q_pos=None, k_pos=None,
                    q_seg=None, k_seg=None):
  """(B, Hq, Tq, Tk) float32 (or float64) weights with out = weights @ v: the closed
  form of the record's `implied_weights` (heat maps), with sigmoid_attention's
  arguments. Rows do not sum to 1: nothing normalises them."""
  d, qg, kg, mask_g, alibi, b, _ = _prepared(
      q, k, k, causal=causal, mask=mask, positions=positions, q_pos=q_pos, k_pos=k_pos,
      q_seg=q_seg, k_seg=k_seg, max_len=max_len, bias=bias)
  w = grouped_weights(qg, kg, d, mask_g, alibi, scale=scale, b=b)
  w = jnp.broadcast_to(w, (d.B, d.Hkv, d.G, d.Tq, d.Tk))
  return w.reshape(d.B, d.Hq, d.Tq, d.Tk)


# ---- its decode step ---------------------------------------------------------------
# The state is the KV cache (attention.core.kv_cache: fp, int8 or fp8 storage, RoPE keys
# stored rotated, ALiBi's key positions kept), read out with sigmoid weights. Not a
# running sum: sum_j sigmoid(q.k_j + b) v_j cannot be accumulated before the query is
# known, because sigmoid(q.k) does not factor as phi(q).psi(k) (linear attention's
# kernel trick, whose (S, Z) state is O(1)); so, like softmax, a step reads every
# cached key, O(N D). Unlike softmax there is no normaliser: the readout is a plain
# sum, with no running maximum or denominator to carry between blocks.

def sigmoid_step(state: KV.KVCache, q_t, k_t, v_t, *, scale=None, bias=None,
                 max_len=DEFAULT_MAX_LEN, positions=None, q_pos=None, k_pos=None, **kw):
  """Appends T new tokens to the cache and attends their queries to every cached
  position up to their own (a chunked prefill when T > 1).

  state: the KVCache of `init_decode_state(NAME, ...)`; q_t (B, T, Hq, D), k_t
  (B, T, Hkv, D), v_t (B, T, Hkv, Dv); scale, bias, max_len: as sigmoid_attention's
  (the same fixed b at every step: that is why a step equals the forward pass);
  positions, q_pos, k_pos: the new tokens' scheme and absolute positions (default:
  the cache's length onwards). Returns (out (B, T, Hq, Dv) in q_t's dtype, the new
  state); past the capacity the output is NaN (an error when not traced)."""
  unexpected(NAME, kw)
  T, N = q_t.shape[1], state.capacity
  pos, q_t, k_t = KV.step_positions(state, positions, q_t, k_t, q_pos, k_pos)
  new = KV.append(state, k_t, v_t, None if pos is None else pos.k)
  ct = C.compute_dtype(q_t.dtype)
  d = C.Dims(q_t.shape[0], T, N, q_t.shape[2], new.k.shape[1], q_t.shape[3],
             new.v.shape[3])
  seen = jnp.arange(N)[None, :] <= state.pos + jnp.arange(T)[:, None]   # (T, N)
  w = grouped_weights(C.split_heads_q(q_t, d).astype(ct), KV.read(new.k, new.k_scale, ct),
                      d, seen[None, None, None], KV.cache_bias(pos, new, d, ct),
                      scale=scale, b=sigmoid_bias(max_len, bias))
  o = jnp.einsum("bhgqk,bhkd->bhgqd", w, KV.read(new.v, new.v_scale, ct))
  out = jnp.where(state.pos + T <= N, C.merge_heads_out(o), jnp.nan)
  return out.astype(q_t.dtype), new


# init and state_bytes are the KV cache's own (its layout, capacity and bytes).
SIGMOID_DECODE = DecodeImpl(init=KV.init_kv_cache, step=sigmoid_step,
                            state_bytes=KV.kv_cache_bytes)


def sigmoid_cost(d: C.Dims, *, causal=False, mode="fwd", itemsize=4, **kw):
  """An attention.core.cost_model.Cost of one call: the dense path's (the (Tq, Tk)
  weights materialised, causal or not; one exp per score, as softmax's); decode: the
  KV cache's read. kw: its options (they change nothing here)."""
  del causal, kw
  return cost_lib.dense(d, mode=mode, itemsize=itemsize)


def record(name: str = NAME) -> Variant:
  """Its registry record: the facts the contract, the models and the docs read
  (attention/README.md's table). name: the name to register it under."""
  if name != NAME:
    raise ValueError(f"the sigmoid example's functions name themselves {NAME!r} in their "
                     f"errors; register it as {NAME!r}, not {name!r}")
  return Variant(
      name=NAME, fn=sigmoid_attention, paper="Ramapuram et al. 2024",
      time="O(N² D)", memory="O(N²)", cost=sigmoid_cost,
      causal=True, masks="any", cross=True, dropout=False,
      decode="KV cache, sigmoid readout (fp, int8 or fp8)", decode_impl=SIGMOID_DECODE,
      # not softmax of a score: no `score=` (the KV cache's softmax step and
      # attention.probabilities would be wrong for it); its weights in closed form
      score=None, implied_weights=sigmoid_weights,
      family="score",
      summary="sigmoid(q·k/√d + b) @ v, b = -log(max_len): no normaliser over the keys",
      positions=P.takes_qk("bias on the scores, before the sigmoid"),
      segments="a mask: query and key share a segment")
