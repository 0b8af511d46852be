"""`linear`: Katharopoulos et al. 2020, "Transformers are RNNs", in its three forms.

With a feature map φ (default elu(x) + 1), attention becomes

  out_i = φ(q_i)ᵀ S / (φ(q_i)ᵀ Z + eps),   S = Σ_j φ(k_j) v_jᵀ,   Z = Σ_j φ(k_j)

where the sums run over all keys (non-causal, O(N) by associativity) or over
j <= i (causal). Three forms compute the same thing:

  parallel  non-causal: S and Z once, then one matmul per query.
  chunked   causal: the sequence is cut into chunks of C positions; inside a chunk
            the masked quadratic form (C x C), between chunks a running (S, Z)
            carried by `lax.scan`. Memory O(N·D + D·Dv); no (T, D, Dv) tensor.
  RNN       decode: state (S, Z), S_i = S_{i-1} + φ(k_i) v_iᵀ, Z_i = Z_{i-1} + φ(k_i);
            `decode_step` costs O(D·Dv) whatever the number of previous tokens.

Shapes follow the contract (attention.core.common): q (B, Tq, Hq, D), k (B, Tk, Hkv, D),
v (B, Tk, Hkv, Dv) -> (B, Tq, Hq, Dv) in q's dtype; computation in float32 (float64
for float64). GQA shares (S, Z) across the query heads of a group.

Masks: only key-padding masks can be honoured (they zero φ(k_j)): a mask
broadcastable to (B, 1, 1, Tk). A mask that depends on the query or on the head
does not factor through S and Z and is refused. A query with no allowed key gets
S = Z = 0 and returns zeros. `eps` keeps the normaliser away from 0 (φ >= 0, so
the denominator is >= eps > 0).

`feature_map` is a name in FEATURE_MAPS ("elu", "relu", "identity") or a callable
x (…, D) -> (…, D'); `performer` plugs in positive random features through it.
Note: "identity" and "relu" can make the normaliser ~0 or negative (identity); eps
then only prevents a division by zero, it does not make the result meaningful.

Positions (rope, rope2d: RoFormer's rotation of the numerator's features; alibi: a
per-head decay of the state) and segment ids (a state reset at each segment start of a
packed row; none in decode), in all three forms, are the kernelised-attention library's,
which `performer` shares: attention.core.kernelised says how.
"""
from __future__ import annotations

import jax

from attention.core import common as C
from attention.core import positions as P
from attention.core.decode import DecodeImpl
from attention.core.kernelised import (DEFAULT_CHUNK, KERNEL_POSITIONS, KERNEL_SEGMENTS,
                                       LinearState, init_linear_state,
                                       kernel_cost, kernel_step, normalised_weights,
                                       positioned)
from attention.core.registry import Variant, register
from attention.core.segments import key_padding, refuse_decode_segments
from attention.core.common import unexpected

FEATURE_MAPS = {
    "elu": lambda x: jax.nn.elu(x) + 1.0,
    "relu": jax.nn.relu,
    "identity": lambda x: x,
}


def feature_fn(feature_map):
  """The feature map φ for a name or a callable."""
  if callable(feature_map):
    return feature_map
  try:
    return FEATURE_MAPS[feature_map]
  except KeyError:
    raise C.AttentionError(f"linear attention: unknown feature_map {feature_map!r}; "
                           f"choose one of {sorted(FEATURE_MAPS)} or pass a callable") from None


def _prep(q, k, v, mask, feature_map, name):
  """φ(q) grouped (B, Hkv, G, Tq, D'), φ(k) (B, Hkv, Tk, D') with padding zeroed, v."""
  d = C.check_qkv(q, k, v, name)
  kmask = key_padding(mask, d, name)
  phi = feature_fn(feature_map)
  ct = C.compute_dtype(q.dtype)
  fq = phi(C.split_heads_q(q, d).astype(ct))
  fk = phi(C.kv_heads_first(k).astype(ct))
  if kmask is not None:
    fk = fk * kmask[:, None, :, None].astype(ct)
  return d, fq, fk, C.kv_heads_first(v).astype(ct)


def linear(q, k, v, *, causal=False, mask=None, feature_map="elu", eps=1e-6,
           chunk_size=DEFAULT_CHUNK, positions=None, q_pos=None, k_pos=None, q_seg=None,
           k_seg=None, chunk_parallel: bool | None = None, **kw):
  """Linear attention (Katharopoulos et al. 2020) under the contract.

  q (B, Tq, Hq, D), k (B, Tk, Hkv, D), v (B, Tk, Hkv, Dv) -> (B, Tq, Hq, Dv), q's dtype.
  mask: key padding only, broadcastable to (B, 1, 1, Tk). causal: chunked prefix sums
  (chunk_size positions per chunk). feature_map: "elu" (elu + 1), "relu", "identity"
  or a callable. eps: added to the normaliser.
  positions, q_pos (B|1, Tq), k_pos (B|1, Tk): rope/rope2d rotate φ(q), φ(k) in the
  numerator only (RoFormer's form); alibi decays the state (see the module docstring).
  q_seg (B|1, Tq), k_seg (B|1, Tk): segment ids of a packed row (see `positioned`).
  chunk_parallel: a kernel option, how the causal form without decay or resets runs
  (the same function): True, every chunk at once; False, a scan over the chunks; None
  (the default), every chunk at once on a GPU only (see the note at
  attention.core.kernelised.DEFAULT_CHUNK).
  """
  unexpected("linear", kw)
  d, fq, fk, vh = _prep(q, k, v, mask, feature_map, "linear")
  out = positioned(d, fq, fk, vh, "linear", causal=causal, eps=eps, chunk=chunk_size,
                   positions=positions, q_pos=q_pos, k_pos=k_pos, q_seg=q_seg, k_seg=k_seg,
                   parallel=chunk_parallel)
  return C.merge_heads_out(out).astype(q.dtype)


def linear_step(state: LinearState, q_t, k_t, v_t, *, feature_map="elu", eps=1e-6,
                chunk_size=DEFAULT_CHUNK, q_seg=None, k_seg=None, chunk_parallel=None, **pos):
  """out, state = step(state, q_t, k_t, v_t): T >= 1 new tokens, causal among themselves;
  pos: positions, q_pos, k_pos of the new tokens (see `kernel_step`). No segment ids:
  one sequence per row (`refuse_decode_segments`)."""
  refuse_decode_segments("linear", q_seg, k_seg)
  d, fq, fk, vh = _prep(q_t, k_t, v_t, None, feature_map, "linear")
  out, state = kernel_step(state, d, fq, fk, vh, eps=eps, chunk=chunk_size,
                           parallel=chunk_parallel, **pos)
  return C.merge_heads_out(out).astype(q_t.dtype), state


LINEAR_STATE = DecodeImpl(init=init_linear_state, step=linear_step)


def linear_weights(q, k, *, causal=False, mask=None, feature_map="elu", eps=1e-6,
                   chunk_size=DEFAULT_CHUNK, positions=None, q_pos=None, k_pos=None,
                   q_seg=None, k_seg=None, chunk_parallel=None):
  """(B, Hq, Tq, Tk) weights of `linear` (its record's `implied_weights`): q (B, Tq,
  Hq, D), k (B, Tk, Hkv, D), options as `linear`'s (chunk_size and chunk_parallel
  change nothing)."""
  del chunk_size, chunk_parallel
  d, fq, fk, _ = _prep(q, k, k, mask, feature_map, "linear")
  pos = P.prepare("linear", positions, d, q_pos, k_pos)
  return normalised_weights(fq, fk, d, causal=causal, eps=eps, pos=pos, q_seg=q_seg,
                            k_seg=k_seg)


def _cost(d, *, causal=False, mode="fwd", itemsize=4, chunk_size=DEFAULT_CHUNK, **kw):
  return kernel_cost(d, causal=causal, mode=mode, itemsize=itemsize, F=d.D, chunk=chunk_size,
                     feature_flops=2 * d.D)


register(Variant(
    name="linear", fn=linear, paper="Katharopoulos et al. 2020",
    time="O(N D Dv)", memory="O(N D + D Dv)", causal=True, masks="key padding",
    decode="(S, Z) state, O(1) per token", decode_impl=LINEAR_STATE, cost=_cost,
    family="efficient", implied_weights=linear_weights, kernel_options=("chunk_parallel",),
    summary="kernelised attention φ(q)ᵀΣφ(k)vᵀ, φ = elu+1; parallel, chunked causal, RNN",
    positions=KERNEL_POSITIONS, segments=KERNEL_SEGMENTS))
