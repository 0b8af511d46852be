"""`performer`: FAVOR+ (Choromanski et al. 2021), linear attention with positive
orthogonal random features that approximate the softmax kernel.

  φ(x) = exp(ω x' - |x'|²/2) / sqrt(m),   x' = x / D^(1/4),   ω: (m, D)

so that E[φ(q)ᵀφ(k)] = exp(qᵀk / sqrt(D)). The rows of ω are orthogonal in blocks of
D (QR of a Gaussian matrix) and rescaled to chi-distributed norms
(`orthogonal_features`). Everything after the feature map — the parallel form, the
chunked causal prefix sums, the (S, Z) decode state, key-padding masks and their
refusals — is the kernelised-attention library that `linear` uses too
(`attention.core.kernelised`, `attention.core.segments`).

Numerics: each query's features are divided by their own max before use (a per-row
factor that cancels between numerator and denominator), so exp never overflows on
the query side. Keys are not rescaled, because a per-key factor would not cancel
and a global one is unknown while decoding: exp(ω·k' - |k'|²/2) <= exp(|ω|²/2),
which is finite in float32 for head dims up to ~150 at the default ω norms.

Shapes: as the contract; `projection` (m, D) is an explicit argument (the models own
it as a fixed buffer); m = D·ln D features by default (`num_features`).

Positions: as `linear` (RoFormer's rotation of the m features in the numerator only;
ALiBi as a decay of the state); the per-query max rescaling still cancels, since a
decay multiplies numerator and normaliser alike.
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from attention.core import common as C
from attention.core import kernelised as K
from attention.core import positions as P
from attention.core.decode import DecodeImpl
from attention.core.registry import ParamSpec, Variant, register
from attention.core.segments import key_padding, refuse_decode_segments
from attention.core.common import unexpected


def num_features(D: int) -> int:
  """The paper's default number of random features, m = D ln D (at least D)."""
  return max(D, int(D * math.log(D))) if D > 1 else 1


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def orthogonal_features(key, m: int, D: int, dtype=jnp.float32):
  """(m, D) random features: orthogonal D-blocks with chi(D)-distributed row norms."""
  n = -(-m // D)
  kg, kn = jax.random.split(key)
  g = jax.random.normal(kg, (n, D, D), jnp.float32)
  qmat, _ = jnp.linalg.qr(g)  # batched: n independent orthogonal D x D blocks
  w = jnp.swapaxes(qmat, 1, 2).reshape(n * D, D)[:m]
  norms = jnp.linalg.norm(jax.random.normal(kn, (m, D), jnp.float32), axis=1)
  return (w * norms[:, None]).astype(dtype)


def favor_features(projection, *, is_query):
  """The positive random feature map φ for a (m, D) projection."""
  def phi(x):  # x (…, D) -> (…, m)
    D = x.shape[-1]
    if projection.shape[-1] != D:
      raise C.AttentionError(
          f"performer: projection has shape {projection.shape}, expected (m, {D})")
    xs = x * D ** -0.25
    logits = jnp.einsum("...d,md->...m", xs, projection.astype(x.dtype))
    logits = logits - 0.5 * jnp.sum(xs * xs, axis=-1, keepdims=True)
    if is_query:
      logits = logits - jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
    return jnp.exp(logits) / math.sqrt(projection.shape[0])
  return phi


def _features(q, k, v, mask, projection, name):
  d = C.check_qkv(q, k, v, name)
  kmask = key_padding(mask, d, name)
  ct = C.compute_dtype(q.dtype)
  P = jnp.asarray(projection)
  fq = favor_features(P, is_query=True)(C.split_heads_q(q, d).astype(ct))
  fk = favor_features(P, is_query=False)(C.kv_heads_first(k).astype(ct))
  if kmask is not None:
    fk = fk * kmask[:, None, :, None].astype(ct)
  return d, fq, fk, C.kv_heads_first(v).astype(ct)


def performer(q, k, v, *, causal=False, mask=None, projection, eps=1e-6,
              chunk_size=K.DEFAULT_CHUNK, positions=None, q_pos=None, k_pos=None,
              q_seg=None, k_seg=None, **kw):
  """FAVOR+ attention under the contract.

  q (B, Tq, Hq, D), k (B, Tk, Hkv, D), v (B, Tk, Hkv, Dv) -> (B, Tq, Hq, Dv), q's dtype.
  projection: (m, D) random features (see `orthogonal_features`). mask: key padding
  only. causal: chunked prefix sums as in `linear`. positions, q_pos, k_pos: as
  `linear` (rotation of the features in the numerator, or ALiBi's decay).
  q_seg (B|1, Tq), k_seg (B|1, Tk): segment ids, as `linear` (`attention.core.kernelised.positioned`): the
  (S, Z) state resets at each segment start of a packed row.
  """
  unexpected("performer", kw)
  if projection is None:
    raise C.AttentionError("performer needs projection=(m, D) random features; "
                           "make them with attention.performer.orthogonal_features")
  d, fq, fk, vh = _features(q, k, v, mask, projection, "performer")
  out = K.positioned(d, fq, fk, vh, "performer", causal=causal, eps=eps,
                     chunk=chunk_size, positions=positions, q_pos=q_pos, k_pos=k_pos,
                     q_seg=q_seg, k_seg=k_seg)
  return C.merge_heads_out(out).astype(q.dtype)


def performer_weights(q, k, *, causal=False, mask=None, projection, eps=1e-6,
                      chunk_size=K.DEFAULT_CHUNK, positions=None, q_pos=None,
                      k_pos=None, q_seg=None, k_seg=None):
  """(B, Hq, Tq, Tk) weights of `performer` (its record's `implied_weights`):
  φ(q)·φ(k) normalised with FAVOR+'s features; options as `performer`'s."""
  del chunk_size
  d, fq, fk, _ = _features(q, k, k, mask, projection, "performer")
  pos = P.prepare("performer", positions, d, q_pos, k_pos)
  return K.normalised_weights(fq, fk, d, causal=causal, eps=eps, pos=pos, q_seg=q_seg,
                              k_seg=k_seg, name="performer")


def _init_state(name, *, head_dim, projection=None, num_random_features=None, **kw):
  m = num_random_features or (projection.shape[0] if projection is not None
                              else num_features(head_dim))
  return K.init_linear_state(name, head_dim=head_dim, feature_dim=m, **kw)


def _step(state, q_t, k_t, v_t, *, projection, eps=1e-6, chunk_size=K.DEFAULT_CHUNK,
          q_seg=None, k_seg=None, **pos):
  refuse_decode_segments("performer", q_seg, k_seg)
  d, fq, fk, vh = _features(q_t, k_t, v_t, None, projection, "performer")
  out, state = K.kernel_step(state, d, fq, fk, vh, eps=eps, chunk=chunk_size, **pos)
  return C.merge_heads_out(out).astype(q_t.dtype), state


def _cost(d, *, causal=False, mode="fwd", itemsize=4, projection=None,
          chunk_size=K.DEFAULT_CHUNK, **kw):
  m = projection.shape[0] if projection is not None else num_features(d.D)
  return K.kernel_cost(d, causal=causal, mode=mode, itemsize=itemsize, F=m,
                       chunk=chunk_size, feature_flops=2 * d.D * m + 3 * d.D + 2 * m,
                       feature_trans=m)


register(Variant(
    name="performer", fn=performer, paper="Choromanski et al. 2021 (FAVOR+)",
    time="O(N m D)", memory="O(N m + m Dv)", causal=True, masks="key padding",
    decode="(S, Z) state, O(1) per token", decode_impl=DecodeImpl(_init_state, _step),
    cost=_cost, implied_weights=performer_weights,
    params={"projection": ParamSpec(
        lambda h, dh, L: (num_features(dh), dh),
        lambda key, s, dt: orthogonal_features(key, s[0], s[1], dt), trainable=False)},
    family="efficient",
    summary="softmax kernel approximated by positive orthogonal random features",
    positions=K.KERNEL_POSITIONS, segments=K.KERNEL_SEGMENTS))
