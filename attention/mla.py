"""`mla`: multi-head latent attention (DeepSeek-AI 2024, DeepSeek-V2, arXiv 2405.04434,
section 2.1): keys and values are up-projected from one cached latent per token, and
the position signal rides on a small decoupled RoPE key shared by the heads.

The paper's equations (section 2.1.2-2.1.3; h_t the layer input, n_h heads of d_h):

  c_t   = W_DKV h_t                    (d_c)          the cached latent
  k^C_{t,i} = W_UK_i c_t,  v^C_{t,i} = W_UV_i c_t    (d_h each, per head i)
  q^R_{t,i} = RoPE(W_QR h_t)_i         (d_r per head)
  k^R_t     = RoPE(W_KR h_t)           (d_r, shared by the heads; cached)
  q_{t,i} = [q^C_{t,i}; q^R_{t,i}],  k_{j,i} = [k^C_{j,i}; k^R_j]
  o_{t,i} = sum_j softmax_j(q_{t,i} . k_{j,i} / sqrt(d_h + d_r)) v^C_{j,i}

How it meets the contract fn(q, k, v): the record's `kv_widths` fact says that the k
and v it consumes are not per-head keys and values but what it caches per token:

  q        (B, Tq, Hq, d_h)   the content query q^C (the model's q projection; the
                              paper's low-rank W_DQ W_UQ is the model's business)
  k        (B, Tk, Hkv, d_r)  the decoupled RoPE key k^R before rotation (the model's
                              k projection is W_KR: kv_widths gives it width d_r)
  v        (B, Tk, Hkv, d_c)  the latent c (the model's v projection is W_DKV, width d_c)
  q_rope   (B, Tq, Hq, d_r)   the decoupled RoPE query q^R before rotation: a per-token
                              input (`Variant.inputs`, an InputSpec of heads="q"), since
                              the model's generic projections give one q only
  w_uk, w_uv (Hq, d_c, d_h)   parameters (ParamSpecs; latent_dim = d_c sets their shape)
  out      (B, Tq, Hq, d_h)   in q's dtype

Why a record fact (`kv_widths`) for k and v rather than per-token inputs: the latent
and the rope key are the key side of attention, the positions a mask hides, the
inputs whose later positions causality must not see, and what the decode state keeps;
as k and v they get all of the contract's checks on keys and values (masks, causality,
packed segments, gradients) and the models' key/value projections (cross-attention's
source, the decode cache) with no branch on a name. q^R is a query-side quantity like
gla's gate logits, so it is an InputSpec.

Defaults follow the paper's ratios: d_c = 4 d_h (DeepSeek-V2: 512 = 4 x 128) and d_r =
d_h / 2 (64 for 128), options `latent_dim` and `rope_dim`; scale 1/sqrt(d_h + d_r).

GQA: MLA has no key/value heads; num_kv_heads is the number of latent groups. Each of
Hkv groups has its own latent c and rope key k^R, shared by its Hq/Hkv query heads;
Hkv = 1 is the paper's MLA (one latent per token for all heads), Hkv = Hq gives every
head its own latent. The contract's check that GQA equals MHA with repeated key/value
heads holds by construction (W_UK, W_UV are per query head). Cache per token and
layer: Hkv (d_c + d_r) elements, so set num_kv_heads=1 for the paper's savings.

Forms: the function is the training (parallel) form, which materialises K^C = c W_UK
and V^C = c W_UV per head and runs one masked softmax, as the paper trains. The
decode step (`mla_step`) is the absorbed form: it caches ONLY (c, k^R) per token,
(B, Hkv, N, d_c) and (B, Hkv, N, d_r), and never forms per-head K or V: W_UK is
absorbed into the query (q~ = W_UK_i^T q^C, width d_c: q~ . c = q^C . k^C) and W_UV
into the output (o = W_UV_i^T (sum_j p_j c_j)). Decode equals the forward pass to
float32 rounding (tests/attention/test_contract.py, tests/attention/test_mla.py).

Positions: only the decoupled RoPE, always on, at the tokens' positions q_pos (B|1,
Tq), k_pos (B|1, Tk) (default: the contract's bottom-right aligned indices; a decode
step continues from its cache's length), base `rope_base`. The layer position schemes
are refused by name (`Variant.positions`): "rope" would rotate the content keys, which
makes W_UK position-dependent, so it could not be absorbed and the cache would need
per-head keys (the paper's reason for decoupling, section 2.1.3); rope2d and ALiBi are
not in the paper and would be a second position signal beside the decoupled RoPE.
A model uses positions="none" (or an additive scheme) with mla.

Masks: any (dense); a row with no allowed key is zeros. Segments (q_seg, k_seg):
joined to the mask; the RoPE is relative (q_pos - k_pos), so a packed segment gets
what it gets alone. Cross-attention: refused (Tq != Tk), since its decoupled RoPE
scores a query's position against a key's in one sequence. Attention dropout:
refused (never formed in the absorbed decode). Cache: float (the K/V dtype);
cache_dtype int8/fp8 is refused.
"""
from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from attention.core import common as C
from attention.core import cost_model as cost_lib
from attention.core import kv_cache as KV
from attention.core import positions as P
from attention.core.common import unexpected
from attention.core.decode import DecodeImpl
from attention.core.registry import InputSpec, ParamSpec, Refused, Variant, register
from attention.core.scores import masked_softmax

NAME = "mla"
LATENT_RATIO = 4          # d_c = 4 d_h: DeepSeek-V2's 512 for d_h = 128
DEFAULT_BASE = 10000.0

WHY_ROPE = ("mla rotates only its own decoupled parts (q_rope and the shared rope key k, "
            "always, by the tokens' positions); RoPE on the content keys would make W_UK "
            "position-dependent, so it could not be absorbed into the query and the cache "
            "would hold per-head keys (DeepSeek-V2, section 2.1.3); use positions='none'")
WHY_OTHER = ("mla's position signal is its decoupled RoPE (not in the paper, this would "
             "be a second one); use positions='none'")


def latent_width(head_dim: int, latent_dim: int | None = None) -> int:
  """d_c: `latent_dim`, default LATENT_RATIO * head_dim (the paper's ratio)."""
  d_c = LATENT_RATIO * head_dim if latent_dim is None else latent_dim
  if not (isinstance(d_c, int) and d_c > 0):
    raise C.AttentionError(f"{NAME}: latent_dim must be a positive int, got {latent_dim!r}")
  return d_c


def rope_width(head_dim: int, rope_dim: int | None = None) -> int:
  """d_r: `rope_dim`, default head_dim / 2 rounded down to even (at least 2)."""
  d_r = max(2, (head_dim // 2) // 2 * 2) if rope_dim is None else rope_dim
  if not (isinstance(d_r, int) and d_r > 0 and d_r % 2 == 0):
    raise C.AttentionError(f"{NAME}: rope_dim must be a positive even int (RoPE rotates "
                           f"pairs), got {rope_dim!r}")
  return d_r


def kv_widths(head_dim: int, rope_dim: int | None = None,
              latent_dim: int | None = None) -> tuple[int, int]:
  """(d_r, d_c): the widths of the k (rope key) and v (latent) mla consumes per group."""
  return rope_width(head_dim, rope_dim), latent_width(head_dim, latent_dim)


def _up_shape(num_heads, head_dim, max_len, latent_dim=None):
  return (num_heads, latent_width(head_dim, latent_dim), head_dim)


def _up_init(key, shape, dtype):
  """N(0, 1/d_c): a unit-variance latent gives unit-variance keys and values."""
  return jax.random.normal(key, shape, dtype) / math.sqrt(shape[1])


# ---- checks shared by the forward pass, the decode step and the weights ----------------

def _refuse_positions(positions):
  if positions is not None:
    kind = P.as_spec(positions).kind
    C.refuse(NAME, f"positions={kind!r}", WHY_ROPE if kind == "rope" else WHY_OTHER)


def _check(q, k, v, w_uk, w_uv, q_rope, rope_dim, name=NAME):
  """Validates the shapes (q (B, Tq, Hq, d_h), k (B, Tk, Hkv, d_r), v (B, Tk, Hkv, d_c),
  w_uk, w_uv (Hq, d_c, d_h), q_rope (B, Tq, Hq, d_r)); returns Dims (D = d_h, Dv = d_c)
  and d_r. Raises AttentionError naming the axis."""
  if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
    raise C.AttentionError(f"{name}: q, k, v must be rank 4 (B, T, H, D); got shapes "
                           f"{q.shape}, {k.shape}, {v.shape}")
  B, Tq, Hq, Dh = q.shape
  if not (B == k.shape[0] == v.shape[0]):
    raise C.AttentionError(f"{name}: batch sizes differ: q {B}, k {k.shape[0]}, "
                           f"v {v.shape[0]}")
  Tk, Hkv, d_r = k.shape[1:]
  if v.shape[1] != Tk:
    raise C.AttentionError(f"{name}: k has {Tk} positions but v has {v.shape[1]}")
  if v.shape[2] != Hkv:
    raise C.AttentionError(f"{name}: k has {Hkv} heads but v has {v.shape[2]}")
  if Hkv == 0 or Hq % Hkv:
    raise C.AttentionError(f"{name}: query heads ({Hq}) must be a multiple of key/value "
                           f"heads (latent groups, {Hkv})")
  want_r = rope_width(Dh, rope_dim)
  if d_r != want_r:
    raise C.AttentionError(f"{name}: k (the rope key) head dim {d_r} != rope_dim {want_r}")
  d_c = v.shape[3]
  for pname, w in (("w_uk", w_uk), ("w_uv", w_uv)):
    if w is None:
      raise C.AttentionError(f"{name}: missing parameter {pname} (Hq, d_c, d_h)")
    if w.ndim != 3 or w.shape[1] != d_c:
      raise C.AttentionError(f"{name}: v (the latent) head dim {d_c} != {pname}'s latent "
                             f"dim (shape {w.shape}, expected (Hq, {d_c}, d_h))")
    if w.shape[0] != Hq:
      raise C.AttentionError(f"{name}: {pname} has {w.shape[0]} heads for {Hq} query heads")
  if w_uk.shape[2] != Dh:
    raise C.AttentionError(f"{name}: q head dim {Dh} != w_uk's {w_uk.shape[2]}")
  if q_rope is None:
    raise C.AttentionError(f"{name}: missing per-token input q_rope (B, Tq, Hq, {d_r}), "
                           "the decoupled RoPE query")
  if q_rope.shape != (B, Tq, Hq, d_r):
    raise C.AttentionError(f"{name}: q_rope has shape {q_rope.shape}; expected "
                           f"(B, Tq, Hq, d_r) = {(B, Tq, Hq, d_r)}")
  return C.Dims(B, Tq, Tk, Hq, Hkv, Dh, d_c), d_r


def _rope_positions(d, q_pos, k_pos, offset):
  """(q_pos, k_pos) (B|1, T) int32 of the decoupled RoPE: given, or the queries from
  `offset` on and the keys from offset - (Tk - Tq) on."""
  if q_pos is None:
    q_pos = offset + jnp.arange(d.Tq, dtype=jnp.int32)[None]
  if k_pos is None:
    k_pos = offset - (d.Tk - d.Tq) + jnp.arange(d.Tk, dtype=jnp.int32)[None]
  return (P.check_positions(q_pos, d.B, d.Tq, "q_pos", NAME),
          P.check_positions(k_pos, d.B, d.Tk, "k_pos", NAME))


def _rotate(x, pos, base):
  return P.rotate(x, pos, P.make("rope", base=base), 1)


def _grouped_w(w, d):
  """(Hq, d_c, d_h) -> (Hkv, G, d_c, d_h)."""
  return w.reshape(d.Hkv, d.G, *w.shape[1:])


def _logits(q, k, v, w_uk, q_rope, d, d_r, scale, ct):
  """Scaled logits (B, Hkv, G, Tq, Tk) of the training form: K^C = c W_UK per head,
  materialised, then [q^C; q^R] . [k^C; k^R] (k and q_rope already rotated)."""
  qg = C.split_heads_q(q, d).astype(ct)                           # (B, Hkv, G, Tq, d_h)
  c = C.kv_heads_first(v).astype(ct)                              # (B, Hkv, Tk, d_c)
  kc = jnp.einsum("bhkc,hgcd->bhgkd", c, _grouped_w(w_uk, d).astype(ct))
  s = jnp.einsum("bhgqd,bhgkd->bhgqk", qg, kc)
  s = s + jnp.einsum("bhgqr,bhkr->bhgqk", C.split_heads_q(q_rope, d).astype(ct),
                     C.kv_heads_first(k).astype(ct))
  return s * C.default_scale(d.D + d_r, scale)


def _mask(mask, q_seg, k_seg, d, causal):
  mask = C.check_mask(mask, d, NAME)
  q_seg, k_seg = C.check_segments(q_seg, k_seg, d, NAME)
  return C.combined_mask(C.and_mask(mask, C.segment_mask(q_seg, k_seg)), d, causal)


def _prepared(q, k, v, w_uk, w_uv, q_rope, rope_dim, rope_base, positions, q_pos, k_pos):
  _refuse_positions(positions)
  d, d_r = _check(q, k, v, w_uk, w_uv, q_rope, rope_dim)
  if d.Tq != d.Tk:
    C.refuse(NAME, f"Tq != Tk (Tq={d.Tq}, Tk={d.Tk}: cross-attention)",
             "its decoupled RoPE scores a query's position against a key's in one "
             "sequence (its record says cross=False)")
  qp, kp = _rope_positions(d, q_pos, k_pos, d.Tk - d.Tq)
  return d, d_r, _rotate(q_rope, qp, rope_base), _rotate(k, kp, rope_base)


def mla(q, k, v, *, causal=False, mask=None, w_uk=None, w_uv=None, q_rope=None,
        rope_dim=None, rope_base=DEFAULT_BASE, scale=None, positions=None, q_pos=None,
        k_pos=None, q_seg=None, k_seg=None, **kw):
  """Multi-head latent attention, training (parallel, materialised) form.

  q (B, T, Hq, d_h) content queries; k (B, T, Hkv, d_r) the decoupled rope keys; v (B,
  T, Hkv, d_c) the latents (Hkv latent groups; 1 in the paper); q_rope (B, T, Hq, d_r)
  the decoupled rope queries; w_uk, w_uv (Hq, d_c, d_h). rope_dim: d_r (default d_h
  / 2, checked against k); rope_base: the decoupled RoPE's base; scale: default
  1/sqrt(d_h + d_r). q_pos, k_pos (B|1, T) int: the RoPE positions (default 0..T-1).
  Returns (B, T, Hq, d_h) in q's dtype; scores and softmax in float32 (float64 stays).
  """
  unexpected(NAME, kw)
  d, d_r, qr, kr = _prepared(q, k, v, w_uk, w_uv, q_rope, rope_dim, rope_base,
                             positions, q_pos, k_pos)
  ct = C.compute_dtype(q.dtype)
  p = masked_softmax(_logits(q, kr, v, w_uk, qr, d, d_r, scale, ct),
                     _mask(mask, q_seg, k_seg, d, causal))
  c = C.kv_heads_first(v).astype(ct)
  vc = jnp.einsum("bhkc,hgcd->bhgkd", c, _grouped_w(w_uv, d).astype(ct))
  o = jnp.einsum("bhgqk,bhgkd->bhgqd", p, vc)
  return C.merge_heads_out(o).astype(q.dtype)


def mla_weights(q, k, *, v=None, causal=False, mask=None, w_uk=None, w_uv=None,
                q_rope=None, rope_dim=None, rope_base=DEFAULT_BASE, scale=None,
                positions=None, q_pos=None, k_pos=None, q_seg=None, k_seg=None, **kw):
  """The attention probabilities (B, Hq, Tq, Tk) float32 of `mla`: out = p @ V^C per
  head, V^C = v W_UV (the per-head values, not the latent v itself). Needs v, the
  latents, since the keys are computed from them."""
  unexpected(NAME, kw)
  if v is None:
    raise C.AttentionError(f"{NAME}: its weights need v (the latents its keys are "
                           "up-projected from): implied_weights(q, k, v=v, ...)")
  d, d_r, qr, kr = _prepared(q, k, v, w_uk, w_uv, q_rope, rope_dim, rope_base,
                             positions, q_pos, k_pos)
  ct = C.compute_dtype(q.dtype)
  p = masked_softmax(_logits(q, kr, v, w_uk, qr, d, d_r, scale, ct),
                     _mask(mask, q_seg, k_seg, d, causal))
  return p.reshape(d.B, d.Hq, d.Tq, d.Tk).astype(jnp.float32)


# ---- decoding: the latent cache and the absorbed step ------------------------------------

@dataclasses.dataclass(frozen=True)
class LatentCache:
  """mla's decode state: per token only the latent and the (rotated) rope key.

  latent: (B, Hkv, N, d_c) and k_rope: (B, Hkv, N, d_r) in the K/V dtype, head-major;
  pos: int32 scalar, the positions written; name: the variant (static).
  """
  latent: jax.Array
  k_rope: jax.Array
  pos: jax.Array
  name: str = dataclasses.field(metadata=dict(static=True), default=NAME)

  @property
  def capacity(self) -> int:
    return self.latent.shape[2]


jax.tree_util.register_dataclass(LatentCache, data_fields=["latent", "k_rope", "pos"],
                                 meta_fields=["name"])


def _refuse_cache_dtype(cache_dtype):
  if cache_dtype is not None:
    C.refuse(NAME, f"cache_dtype={cache_dtype!r}",
             "its latent cache is kept in the K/V dtype (float)")


def init_latent_cache(name, *, batch, max_len, num_kv_heads, head_dim, v_head_dim=None,
                      dtype=jnp.float32, cache_dtype=None, positions=None, **unused):
  """An empty `LatentCache` of max_len positions. head_dim: the rope key's width d_r
  (the k mla consumes), v_head_dim: the latent's d_c (its v); Hkv = num_kv_heads
  latent groups. The models pass both from the record's `kv_widths`."""
  del unused
  _refuse_positions(positions)
  _refuse_cache_dtype(cache_dtype)
  d_c = head_dim if v_head_dim is None else v_head_dim
  return LatentCache(jnp.zeros((batch, num_kv_heads, max_len, d_c), dtype),
                     jnp.zeros((batch, num_kv_heads, max_len, head_dim), dtype),
                     jnp.zeros((), jnp.int32), name)


def latent_cache_bytes(name, *, batch, max_len, num_kv_heads, head_dim, v_head_dim=None,
                       dtype=jnp.float32, cache_dtype=None, **unused) -> int:
  """The bytes `init_latent_cache` allocates: B Hkv N (d_c + d_r) elements of dtype and
  the int32 length. Per cached position and layer: Hkv (d_c + d_r) itemsize."""
  del name, unused
  _refuse_cache_dtype(cache_dtype)
  d_c = head_dim if v_head_dim is None else v_head_dim
  return batch * num_kv_heads * max_len * (d_c + head_dim) * jnp.dtype(dtype).itemsize + 4


def mla_step(state: LatentCache, q_t, k_t, v_t, *, w_uk=None, w_uv=None, q_rope=None,
             rope_dim=None, rope_base=DEFAULT_BASE, scale=None, positions=None, q_pos=None,
             k_pos=None, **kw):
  """out, state = mla_step(state, q_t, k_t, v_t, w_uk=, w_uv=, q_rope=): T >= 1 new
  tokens (a chunked prefill if T > 1, causal among themselves) in the absorbed form.

  q_t (B, T, Hq, d_h), k_t (B, T, Hkv, d_r) rope keys, v_t (B, T, Hkv, d_c) latents,
  q_rope (B, T, Hq, d_r); q_pos, k_pos (B|1, T): the RoPE positions (default the
  cache's length on). Writes (c, rotated k^R) only; scores are (W_UK^T q^C) . c +
  q^R . k^R over the cache and the output W_UV^T (p @ c): no per-head K or V is
  formed. Returns (out (B, T, Hq, d_h) in q_t's dtype, the new state); past the
  capacity the output is NaN (raises when the length is concrete).
  """
  unexpected(NAME, kw)
  _refuse_positions(positions)
  d, d_r = _check(q_t, k_t, v_t, w_uk, w_uv, q_rope, rope_dim)
  T, N = d.Tq, state.capacity
  if state.latent.shape[-1] != d.Dv or state.k_rope.shape[-1] != d_r:
    raise C.AttentionError(f"{NAME} decode: the cache holds latents of {state.latent.shape[-1]}"
                           f" and rope keys of {state.k_rope.shape[-1]}, the step got "
                           f"{d.Dv} and {d_r}")
  pos = KV.concrete(state.pos)
  if T > N or (pos is not None and pos + T > N):
    raise C.AttentionError(f"{NAME} decode: {pos if pos is not None else '(traced)'} + {T}"
                           f" positions > capacity {N}")
  qp, kp = _rope_positions(d, q_pos, k_pos, state.pos)
  qr, kr = _rotate(q_rope, qp, rope_base), _rotate(k_t, kp, rope_base)
  write = lambda buf, x: jax.lax.dynamic_update_slice_in_dim(
      buf, C.kv_heads_first(x).astype(buf.dtype), state.pos, axis=2)
  latent, k_rope = jax.lax.optimization_barrier((write(state.latent, v_t),
                                                 write(state.k_rope, kr)))
  ct = C.compute_dtype(q_t.dtype)
  dn = d._replace(Tk=N)
  q_abs = jnp.einsum("bhgtd,hgcd->bhgtc", C.split_heads_q(q_t, dn).astype(ct),
                     _grouped_w(w_uk, dn).astype(ct))             # W_UK absorbed: (.., d_c)
  s = (jnp.einsum("bhgtc,bhnc->bhgtn", q_abs, latent.astype(ct))
       + jnp.einsum("bhgtr,bhnr->bhgtn", C.split_heads_q(qr, dn).astype(ct),
                    k_rope.astype(ct))) * C.default_scale(d.D + d_r, scale)
  mask = (jnp.arange(N)[None, :] <= state.pos + jnp.arange(T)[:, None])[None, None, None]
  p = masked_softmax(s, mask)
  o_lat = jnp.einsum("bhgtn,bhnc->bhgtc", p, latent.astype(ct))  # (B, Hkv, G, T, d_c)
  o = jnp.einsum("bhgtc,hgcd->bhgtd", o_lat, _grouped_w(w_uv, dn).astype(ct))  # W_UV
  out = jnp.where(state.pos + T <= N, C.merge_heads_out(o), jnp.nan).astype(q_t.dtype)
  return out, dataclasses.replace(state, latent=latent, k_rope=k_rope, pos=state.pos + T)


# ---- cost --------------------------------------------------------------------------------

def _cost(d, *, causal=False, mode="fwd", itemsize=4, w_uk=None, latent_dim=None,
          rope_dim=None, **kw):
  """Cost of one call. d.D = d_h (q and out), d.Hkv = latent groups; d_c from w_uk's
  shape or latent_dim (default 4 d_h), d_r from rope_dim (default d_h / 2).

  fwd / fwd_bwd: the materialised form, `cost_model.dense` on keys of width d_h + d_r
  plus the up-projections K^C, V^C: 2 B Tk Hq d_c 2 d_h FLOPs (3x for fwd_bwd).
  decode: the absorbed form over a cache of Tk positions: per new token and head the
  absorption 2 d_c d_h, scores 2 Tk (d_c + d_r), p @ c 2 Tk d_c, the output 2 d_c d_h;
  bytes: the cache read once (B Tk Hkv (d_c + d_r) itemsize) plus q, q_rope and out.
  """
  d_c = int(w_uk.shape[1]) if w_uk is not None else latent_width(d.D, latent_dim)
  d_r = rope_width(d.D, rope_dim)
  if mode == "decode":
    pairs = d.B * d.Hq * d.Tq * d.Tk
    rows = d.B * d.Hq * d.Tq
    flops = (2 * rows * d_c * (d.D + d.Dv) + 2 * pairs * (2 * d_c + d_r)
             + cost_lib.SOFTMAX_FLOPS_PER_SCORE * pairs)
    byt = (itemsize * d.B * d.Tk * d.Hkv * (d_c + d_r)
           + itemsize * rows * (d.D + d_r + d.Dv) + 4 * pairs
           + 4 * 2 * d.Hq * d_c * d.D)
    return cost_lib.Cost(flops, pairs, byt, 4 * pairs + 4 * rows * d_c)
  up = 2 * d.B * d.Tk * d.Hq * d_c * (d.D + d.Dv)
  base = cost_lib.dense(d._replace(D=d.D + d_r), mode=mode, itemsize=itemsize,
                        extra_flops=up if mode == "fwd" else 3 * up / 2,
                        extra_bytes=4 * 2 * d.Hq * d_c * d.D)
  return base


register(Variant(
    name=NAME, fn=mla, paper="DeepSeek-AI 2024 (DeepSeek-V2)", time="O(N² (D + d_r) + N H d_c D)",
    memory="O(N²)", causal=True, masks="any",
    decode="latent cache: (c, k^R) = d_c + d_r per token and latent group, absorbed W_UK/W_UV",
    decode_impl=DecodeImpl(init_latent_cache, mla_step, state_bytes=latent_cache_bytes),
    cost=_cost, cross=False, family="efficient",
    params={"w_uk": ParamSpec(_up_shape, _up_init, options=("latent_dim",)),
            "w_uv": ParamSpec(_up_shape, _up_init, options=("latent_dim",))},
    inputs={"q_rope": InputSpec(width=rope_width, heads="q", options=("rope_dim",))},
    kv_widths=kv_widths, implied_weights=mla_weights,
    own_positions="its decoupled RoPE: q_rope and a shared key of d_r = d_h / 2, rotated "
                  "by the tokens' positions",
    summary="keys and values up-projected from a cached latent (d_c) plus a shared "
            "decoupled RoPE key (d_r); decodes with W_UK, W_UV absorbed",
    positions={"rope": Refused(WHY_ROPE), "rope2d": Refused(WHY_OTHER),
               "alibi": Refused(WHY_OTHER)},
    segments="joined to the mask; its decoupled RoPE is relative, so a packed segment "
             "gets what it gets alone"))
