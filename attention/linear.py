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

Shapes follow the contract (attention.common): q (B, Tq, Hq, D), k (B, Tk, Hkv, D),
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
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from attention import common as C
from attention import cost_model as cost_lib
from attention.decode import DecodeImpl
from attention.registry import Variant, register

FEATURE_MAPS = {
    "elu": lambda x: jax.nn.elu(x) + 1.0,
    "relu": jax.nn.relu,
    "identity": lambda x: x,
}
DEFAULT_CHUNK = 64


def feature_fn(feature_map):
  """The feature map φ for a name or a callable."""
  if callable(feature_map):
    return feature_map
  try:
    return FEATURE_MAPS[feature_map]
  except KeyError:
    raise C.AttentionError(f"linear attention: unknown feature_map {feature_map!r}; "
                           f"choose one of {sorted(FEATURE_MAPS)} or pass a callable") from None


def key_padding(mask, d: C.Dims, name: str, state: str = "(S, Z) sums"):
  """Returns a (B|1, Tk) bool key mask, or None; refuses masks that do not factor
  through `state` (named in the refusal)."""
  mask = C.check_mask(mask, d, name)
  if mask is None:
    return None
  if mask.shape[1] != 1 or mask.shape[2] != 1:
    C.refuse(name, f"a mask of shape {mask.shape}",
             "only key-padding masks broadcastable to (B, 1, 1, Tk) factor through the "
             f"{state}; a mask that depends on the query or the head does not")
  return mask[:, 0, 0, :]


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


def _normalise(num, den, eps):
  return num / (den + eps)[..., None]


def parallel(fq, fk, v, eps):
  """Non-causal: fq (B,H,G,Tq,F), fk (B,H,Tk,F), v (B,H,Tk,Dv) -> (B,H,G,Tq,Dv)."""
  S = jnp.einsum("bhkf,bhke->bhfe", fk, v)
  Z = jnp.sum(fk, axis=2)
  return _normalise(jnp.einsum("bhgqf,bhfe->bhgqe", fq, S),
                    jnp.einsum("bhgqf,bhf->bhgq", fq, Z), eps)


def chunked_causal(fq, fk, v, S0, Z0, eps, chunk):
  """Causal over aligned positions, starting from state (S0, Z0).

  fq (B,H,G,T,F), fk (B,H,T,F), v (B,H,T,Dv), S0 (B,H,F,Dv), Z0 (B,H,F).
  Returns out (B,H,G,T,Dv) and the final (S, Z). Query t sees keys <= t.
  """
  B, H, G, T, F = fq.shape
  Dv = v.shape[-1]
  C_ = min(chunk, T)
  n = -(-T // C_)
  pad = n * C_ - T
  if pad:  # padded keys have φ = 0 and v = 0: they change nothing
    fq = jnp.pad(fq, ((0, 0),) * 3 + ((0, pad), (0, 0)))
    fk = jnp.pad(fk, ((0, 0),) * 2 + ((0, pad), (0, 0)))
    v = jnp.pad(v, ((0, 0),) * 2 + ((0, pad), (0, 0)))
  fq_c = jnp.moveaxis(fq.reshape(B, H, G, n, C_, F), 3, 0)
  fk_c = jnp.moveaxis(fk.reshape(B, H, n, C_, F), 2, 0)
  v_c = jnp.moveaxis(v.reshape(B, H, n, C_, Dv), 2, 0)
  tril = jnp.tril(jnp.ones((C_, C_), bool))

  def step(carry, x):
    S, Z = carry
    q_, k_, v_ = x
    a = jnp.where(tril, jnp.einsum("bhgqf,bhkf->bhgqk", q_, k_), 0.0)
    num = jnp.einsum("bhgqk,bhke->bhgqe", a, v_) + jnp.einsum("bhgqf,bhfe->bhgqe", q_, S)
    den = jnp.sum(a, axis=-1) + jnp.einsum("bhgqf,bhf->bhgq", q_, Z)
    S = S + jnp.einsum("bhkf,bhke->bhfe", k_, v_)
    Z = Z + jnp.sum(k_, axis=2)
    return (S, Z), _normalise(num, den, eps)

  (S, Z), out = jax.lax.scan(step, (S0, Z0), (fq_c, fk_c, v_c))
  out = jnp.moveaxis(out, 0, 3).reshape(B, H, G, n * C_, Dv)[:, :, :, :T]
  return out, (S, Z)


def kernel_attention(fq, fk, v, d: C.Dims, *, causal, eps, chunk):
  """The three forms' dispatcher on feature-mapped inputs; handles Tq != Tk.

  Causal is bottom-right aligned: with Tk > Tq the first Tk - Tq keys form an
  initial state; with Tq > Tk the first Tq - Tk queries see no key (zeros).
  """
  if not causal:
    return parallel(fq, fk, v, eps)
  B, H, G, Tq, F = fq.shape
  S0 = jnp.zeros((B, H, F, d.Dv), fq.dtype)
  Z0 = jnp.zeros((B, H, F), fq.dtype)
  off = d.Tk - d.Tq
  if off > 0:
    S0 = jnp.einsum("bhkf,bhke->bhfe", fk[:, :, :off], v[:, :, :off])
    Z0 = jnp.sum(fk[:, :, :off], axis=2)
    fk, v = fk[:, :, off:], v[:, :, off:]
  elif off < 0:
    out, _ = chunked_causal(fq[:, :, :, -off:], fk, v, S0, Z0, eps, chunk)
    return jnp.pad(out, ((0, 0),) * 3 + ((-off, 0), (0, 0)))
  return chunked_causal(fq, fk, v, S0, Z0, eps, chunk)[0]


def linear(q, k, v, *, causal=False, mask=None, feature_map="elu", eps=1e-6,
           chunk_size=DEFAULT_CHUNK):
  """Linear attention (Katharopoulos et al. 2020) under the contract.

  q (B, Tq, Hq, D), k (B, Tk, Hkv, D), v (B, Tk, Hkv, Dv) -> (B, Tq, Hq, Dv), q's dtype.
  mask: key padding only, broadcastable to (B, 1, 1, Tk). causal: chunked prefix sums
  (chunk_size positions per chunk). feature_map: "elu" (elu + 1), "relu", "identity"
  or a callable. eps: added to the normaliser.
  """
  d, fq, fk, vh = _prep(q, k, v, mask, feature_map, "linear")
  out = kernel_attention(fq, fk, vh, d, causal=causal, eps=eps, chunk=chunk_size)
  return C.merge_heads_out(out).astype(q.dtype)


# ---- RNN form: the decode API ---------------------------------------------------

@dataclasses.dataclass(frozen=True)
class LinearState:
  """RNN state of linear attention: S (B, Hkv, F, Dv) and Z (B, Hkv, F), float32.

  Its size does not depend on how many tokens were decoded; `pos` counts them.
  """
  S: jax.Array
  Z: jax.Array
  pos: jax.Array
  name: str = dataclasses.field(metadata=dict(static=True), default="linear")

  @property
  def nbytes(self) -> int:
    return self.S.size * self.S.dtype.itemsize + self.Z.size * self.Z.dtype.itemsize


jax.tree_util.register_dataclass(LinearState, data_fields=["S", "Z", "pos"],
                                 meta_fields=["name"])


def init_linear_state(name, *, batch, num_kv_heads, head_dim, v_head_dim=None,
                      dtype=jnp.float32, feature_dim=None, max_len=None, **unused):
  """An empty (S, Z) state; feature_dim: φ's output size if it differs from head_dim."""
  del max_len, unused  # O(1) state: the capacity is unbounded
  F = head_dim if feature_dim is None else feature_dim
  Dv = head_dim if v_head_dim is None else v_head_dim
  ct = C.compute_dtype(dtype)
  return LinearState(jnp.zeros((batch, num_kv_heads, F, Dv), ct),
                     jnp.zeros((batch, num_kv_heads, F), ct), jnp.zeros((), jnp.int32), name)


def linear_step(state: LinearState, q_t, k_t, v_t, *, feature_map="elu", eps=1e-6,
                chunk_size=DEFAULT_CHUNK):
  """out, state = step(state, q_t, k_t, v_t): T >= 1 new tokens, causal among themselves."""
  d, fq, fk, vh = _prep(q_t, k_t, v_t, None, feature_map, "linear")
  out, (S, Z) = chunked_causal(fq, fk, vh, state.S, state.Z, eps, chunk_size)
  return (C.merge_heads_out(out).astype(q_t.dtype),
          dataclasses.replace(state, S=S, Z=Z, pos=state.pos + q_t.shape[1]))


LINEAR_STATE = DecodeImpl(init=init_linear_state, step=linear_step)


# ---- implied weights: the (Tq, Tk) matrix the variant applies to v, for heat maps ------

def normalised_weights(fq, fk, d: C.Dims, *, causal, eps):
  """φ(q)·φ(k) / (Σ_j φ(q)·φ(k_j) + eps) over the keys each query may see.

  fq: (B, Hkv, G, Tq, F), fk: (B, Hkv, Tk, F) (padding keys zeroed). Returns
  (B, Hq, Tq, Tk): the weights with out = weights @ v, the same eps in the
  denominator as the attention itself (shared by linear and performer).
  """
  s = jnp.einsum("bhgqf,bhkf->bhgqk", fq, fk)              # φ(q)·φ(k), >= 0 for φ >= 0
  if causal:
    s = jnp.where(C.causal_mask(d.Tq, d.Tk), s, 0.0)
  w = s / (jnp.sum(s, axis=-1, keepdims=True) + eps)
  B, Hkv, G, Tq, Tk = w.shape
  return w.reshape(B, Hkv * G, Tq, Tk)


def linear_weights(q, k, *, causal=False, mask=None, feature_map="elu", eps=1e-6,
                   chunk_size=DEFAULT_CHUNK):
  """(B, Hq, Tq, Tk) weights of `linear` (its record's `implied_weights`): q (B, Tq,
  Hq, D), k (B, Tk, Hkv, D), options as `linear`'s (chunk_size changes nothing)."""
  del chunk_size
  d, fq, fk, _ = _prep(q, k, k, mask, feature_map, "linear")
  return normalised_weights(fq, fk, d, causal=causal, eps=eps)


def kernel_cost(d: C.Dims, *, causal, mode, itemsize, F, chunk, feature_flops=0.0,
                feature_trans=0.0):
  """Cost of kernelised attention with F features (shared by linear and performer)."""
  BH, BHk = d.B * d.Hq, d.B * d.Hkv
  feat = (BH * d.Tq + BHk * d.Tk) * feature_flops
  trans = (BH * d.Tq + BHk * d.Tk) * feature_trans
  state = 2 * BHk * d.Tk * F * (d.Dv + 1)            # S and Z
  read = 2 * BH * d.Tq * F * (d.Dv + 1)              # φ(q)ᵀS and φ(q)ᵀZ
  intra = 2 * BH * d.Tq * min(chunk, d.Tq) * (F + d.Dv + 1) if causal else 0
  flops = feat + state + read + intra
  byt = cost_lib.io_bytes(d, itemsize)
  temp = 4 * (BHk * F * d.Dv + (BH * d.Tq + BHk * d.Tk) * F)
  if mode == "fwd":
    return cost_lib.Cost(flops, trans, byt, temp)
  if mode == "fwd_bwd":
    return cost_lib.Cost(3 * flops, 2 * trans, 3 * byt, 2 * temp)
  if mode == "decode":  # T new tokens against an O(1) state
    return cost_lib.Cost(2 * BH * d.Tq * F * (d.Dv + 1) * 2 + feat, trans,
                         4 * BHk * F * (d.Dv + 1) + byt, 0.0)
  raise ValueError(f"cost mode must be one of {cost_lib.MODES}, got {mode!r}")


def _cost(d, *, causal=False, mode="fwd", itemsize=4, chunk_size=DEFAULT_CHUNK, **kw):
  return kernel_cost(d, causal=causal, mode=mode, itemsize=itemsize, F=d.D, chunk=chunk_size,
                     feature_flops=2 * d.D)


register(Variant(
    name="linear", fn=linear, paper="Katharopoulos et al. 2020",
    time="O(N D Dv)", memory="O(N D + D Dv)", causal=True, masks="key padding",
    decode="(S, Z) state, O(1) per token", decode_impl=LINEAR_STATE, cost=_cost,
    family="efficient", implied_weights=linear_weights,
    summary="kernelised attention φ(q)ᵀΣφ(k)vᵀ, φ = elu+1; parallel, chunked causal, RNN"))
