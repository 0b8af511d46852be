"""`deltanet`: linear attention with the delta rule (Schlag et al. 2021), chunked by the
WY/UT representation of Yang et al. 2024.

  S_t = S_{t-1} + β_t k_t (v_t - S_{t-1}ᵀ k_t)ᵀ = (I - β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ
  o_t = S_tᵀ q_t

The state is corrected toward v_t for key k_t (by a fraction β_t) instead of added to.
q and k are L2-normalised (x / sqrt(|x|² + eps)), so each I - β k kᵀ has eigenvalues in
[1 - β, 1] and the state cannot blow up; q is then scaled by `scale` (1/sqrt(D) by
default). β_t = sigmoid(`beta_logits`), (B, T, Hkv, 1), per token and kv head, computed
from the layer input (the models: x W_β, Variant.inputs["beta_logits"]). β = 0 leaves
the state unchanged. Under GQA, β and the state are the kv head's; the G query heads of a
group read the same state.

Unrolled: S_t = Σ_{j≤t} k_j u_jᵀ with pseudo-values u_j = β_j (v_j - S_{j-1}ᵀ k_j), i.e.
(I + L) U = diag(β) (V - K S0) with L = strictly-lower(diag(β) K Kᵀ), and O = Q S0 +
tril(Q Kᵀ) U. Forms (form=):
  "chunked"   (default) per chunk of C positions, the UT transform: W = (I + L)⁻¹ diag(β) K
              and Ũ = (I + L)⁻¹ diag(β) V by one batched triangular solve for all chunks;
              a chunk entered with state S has U = Ũ - W S, so it leaves S' = (I - Kᵀ W) S
              + Kᵀ Ũ (the WY form of the product of its I - β k kᵀ) and outputs
              tril(Q Kᵀ) Ũ + (Q - tril(Q Kᵀ) W) S. Only S' = P S + R runs in `lax.scan`
              (one Dk x Dk by Dk x Dv matmul per chunk); everything else is batched.
  "parallel"  the same over one chunk of T positions (a T x T triangular solve).
  "scan"      the recurrence, token by token (the decode step at T = 1).
There is no "assoc" form: the transitions I - β k kᵀ are dense Dk x Dk matrices, whose
associative scan would cost O(T Dk³) and O(T Dk²) memory; it is refused.

Masks: key padding only, (B, 1, 1, T): β = 0 at a padded position. Causal only (an RNN).
The operator only: DeltaNet layers' short convolutions and output norm are the model's.
q (B, T, Hq, D), k (B, T, Hkv, D), v (B, T, Hkv, Dv) -> (B, T, Hq, Dv), q's dtype; state
and arithmetic in float32 (float64 for float64).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular

from attention import common as C
from attention import gated as G
from attention.registry import InputSpec, Variant, register

NAME = "deltanet"
EPS = 1e-6


def l2norm(x, eps=EPS):
  """x / sqrt(|x|² + eps) over the last axis (a zero vector stays zero)."""
  return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + eps)


def _ut(k, beta, x):
  """(I + L)⁻¹ diag(β) x per chunk, L = strictly-lower(diag(β) K Kᵀ).

  k (..., C, Dk), beta (..., C), x (..., C, X) -> (..., C, X).
  """
  Cc = k.shape[-2]
  L = jnp.tril(jnp.einsum("...id,...jd->...ij", k, k), -1) * beta[..., :, None]
  return solve_triangular(L + jnp.eye(Cc, dtype=k.dtype), beta[..., None] * x, lower=True,
                          unit_diagonal=True)


def delta_chunked(q, k, v, beta, S0, chunk):
  """q (B, H, G, T, Dk), k (B, H, T, Dk), v (B, H, T, Dv), beta (B, H, T), S0 (B, H, Dk, Dv)
  -> out (B, H, G, T, Dv), final state. See the module docstring."""
  B, H, G_, T, Dk = q.shape
  Dv = v.shape[-1]
  Cc = min(chunk, T)
  n = -(-T // Cc)
  # padded positions: β = 0 and k = v = q = 0: they change nothing and are cropped
  q, k, v = (C.pad_axis(x, x.ndim - 2, n * Cc) for x in (q, k, v))
  beta = C.pad_axis(beta, 2, n * Cc)
  qc = q.reshape(B, H, G_, n, Cc, Dk).transpose(0, 1, 3, 2, 4, 5)    # (B, H, n, G, C, Dk)
  kc, vc = k.reshape(B, H, n, Cc, Dk), v.reshape(B, H, n, Cc, Dv)
  WU = _ut(kc, beta.reshape(B, H, n, Cc), jnp.concatenate([kc, vc], axis=-1))
  W, U = WU[..., :Dk], WU[..., Dk:]
  A = jnp.tril(jnp.einsum("bhngid,bhnjd->bhngij", qc, kc))          # j <= i
  P = jnp.eye(Dk, dtype=k.dtype) - jnp.einsum("bhncd,bhnce->bhnde", kc, W)
  R = jnp.einsum("bhncd,bhnce->bhnde", kc, U)

  def step(S, x):
    p, r = x
    return jnp.einsum("bhde,bhef->bhdf", p, S) + r, S

  S, S_in = jax.lax.scan(step, S0, (jnp.moveaxis(P, 2, 0), jnp.moveaxis(R, 2, 0)))
  S_in = jnp.moveaxis(S_in, 0, 2)                                   # (B, H, n, Dk, Dv)
  qe = qc - jnp.einsum("bhngij,bhnjd->bhngid", A, W)
  o = (jnp.einsum("bhngij,bhnje->bhngie", A, U)
       + jnp.einsum("bhngid,bhnde->bhngie", qe, S_in))
  o = o.transpose(0, 1, 3, 2, 4, 5).reshape(B, H, G_, n * Cc, Dv)[:, :, :, :T]
  return o, S


def delta_parallel(q, k, v, beta, S0, chunk=None):
  """One chunk of all T positions: the quadratic form with a T x T triangular solve."""
  del chunk
  return delta_chunked(q, k, v, beta, S0, q.shape[3])


def delta_scan(q, k, v, beta, S0, chunk=None):
  """The delta rule one position per `lax.scan` step."""
  del chunk

  def step(S, x):
    q_t, k_t, v_t, b_t = x
    u = b_t[..., None] * (v_t - jnp.einsum("bhd,bhde->bhe", k_t, S))
    S = S + k_t[..., :, None] * u[..., None, :]
    return S, jnp.einsum("bhgd,bhde->bhge", q_t, S)

  S, o = jax.lax.scan(step, S0, (jnp.moveaxis(q, 3, 0), jnp.moveaxis(k, 2, 0),
                                 jnp.moveaxis(v, 2, 0), jnp.moveaxis(beta, 2, 0)))
  return jnp.moveaxis(o, 0, 3), S


FORMS = {"chunked": delta_chunked, "parallel": delta_parallel, "scan": delta_scan}


def _inputs(q, k, v, beta_logits, d, kmask, scale, eps):
  """Normalised, grouped, scaled q; normalised k; v; β (B, Hkv, T), 0 at padding."""
  ct = C.compute_dtype(q.dtype)
  b = G.token_input(beta_logits, d, NAME, "beta_logits", (1,))
  qg, kh, vh = G.grouped(l2norm(q.astype(ct), eps), l2norm(k.astype(ct), eps), v, d, scale)
  beta = jax.nn.sigmoid(b[..., 0].astype(ct)).transpose(0, 2, 1)
  if kmask is not None:
    beta = jnp.where(kmask[:, None, :], beta, 0.0)
  return qg, kh, vh, beta


def deltanet_with_state(q, k, v, *, causal=False, mask=None, scale=None, beta_logits=None,
                        form="chunked", chunk_size=G.DEFAULT_CHUNK, eps=EPS, state=None):
  """`deltanet` from `state` (B, Hkv, D, Dv) (None: zeros) -> (out, final state)."""
  d, kmask = G.check_call(NAME, q, k, v, causal=causal, mask=mask, form=form,
                          chunk_size=chunk_size)
  if form not in FORMS:
    C.refuse(NAME, f"form={form!r}", "the delta rule's transitions I - β k kᵀ are dense "
             "Dk x Dk matrices: an associative scan over them costs O(T Dk³); use "
             f"one of {tuple(FORMS)}")
  qg, kh, vh, beta = _inputs(q, k, v, beta_logits, d, kmask, scale, eps)
  S0 = G.initial_state(state, d, kh.dtype)
  o, S = FORMS[form](qg, kh, vh, beta, S0, chunk_size)
  return C.merge_heads_out(o).astype(q.dtype), S


def deltanet(q, k, v, *, causal=False, mask=None, scale=None, beta_logits=None,
             form="chunked", chunk_size=G.DEFAULT_CHUNK, eps=EPS):
  """DeltaNet (Schlag et al. 2021; Yang et al. 2024) under the contract; causal only.

  q (B, T, Hq, D), k (B, T, Hkv, D), v (B, T, Hkv, Dv) -> (B, T, Hq, Dv), q's dtype.
  beta_logits: (B, T, Hkv, 1), β = sigmoid. mask: key padding only, (B, 1, 1, T).
  form: "chunked" | "parallel" | "scan". eps: in the L2 normalisation of q and k.
  """
  return deltanet_with_state(q, k, v, causal=causal, mask=mask, scale=scale,
                             beta_logits=beta_logits, form=form, chunk_size=chunk_size,
                             eps=eps)[0]


def implied_weights(q, k, *, causal=True, mask=None, scale=None, beta_logits=None,
                    form="chunked", chunk_size=G.DEFAULT_CHUNK, eps=EPS):
  """(B, Hq, T, T) weights with out = w @ v: w = tril(Q Kᵀ) (I + L)⁻¹ diag(β), from the
  unrolled form (module docstring); signed, and not normalised."""
  d, kmask = G.check_call(NAME, q, k, k, causal=causal, mask=mask, form=form,
                          chunk_size=chunk_size)
  qg, kh, _, beta = _inputs(q, k, k, beta_logits, d, kmask, scale, eps)
  eye = jnp.broadcast_to(jnp.eye(d.Tk, dtype=kh.dtype), beta.shape + (d.Tk,))
  A = jnp.tril(jnp.einsum("bhgid,bhjd->bhgij", qg, kh))
  w = jnp.einsum("bhgij,bhjl->bhgil", A, _ut(kh, beta, eye))
  return w.reshape(d.B, d.Hq, d.Tq, d.Tk)


def _cost(d, *, causal=True, mode="fwd", itemsize=4, form="chunked",
          chunk_size=G.DEFAULT_CHUNK, **kw):
  """Chunked (and parallel, one chunk of T): per chunk K Kᵀ, the triangular solve for W
  and Ũ, Q Kᵀ, Kᵀ W, Kᵀ Ũ, A W, A Ũ, Q' S and the scan's P S; scan: 3 state matmuls
  per position."""
  BH, BHk, T, Dk, Dv = d.B * d.Hq, d.B * d.Hkv, d.Tk, d.D, d.Dv
  if form == "scan":
    flops = 2 * T * Dk * Dv * (BH + 2 * BHk)
    temp = 4 * BHk * T * Dk * Dv
  else:
    Cc = T if form == "parallel" else min(chunk_size, T)
    per_kv = 2 * T * (Cc * Dk + Cc * (Dk + Dv) / 2 + Dk * Dk + Dk * Dv + Dk * Dk * Dv / Cc)
    per_q = 2 * T * (Cc * Dk + Cc * Dk + Cc * Dv + Dk * Dv)
    flops = BHk * per_kv + BH * per_q
    temp = 4 * (BHk * -(-T // Cc) * (Dk * Dk + 2 * Dk * Dv) + BH * T * Cc)
  trans = 2 * BHk * T + (BH + BHk) * T                 # sigmoid; the norms' rsqrt
  dec = G.state_decode_cost(d, itemsize, extra_flops=2 * BHk * d.Tq * Dk * Dv,
                            extra_trans=2 * BHk * d.Tq)
  return G.finish_cost(d, mode, itemsize, flops, trans, 4 * BHk * Dk * Dv, temp, dec)


register(Variant(
    name=NAME, fn=deltanet, paper="Schlag et al. 2021; Yang et al. 2024",
    time="O(N C D + N D² Dv / C)", memory="O(N D + N D² / C)", causal=True,
    masks="key padding", decode="S per kv head, O(D Dv) per token",
    decode_impl=G.decode_impl(deltanet_with_state), cost=_cost, cross=False,
    causal_only=True, family="gated",
    inputs={"beta_logits": InputSpec(width=lambda head_dim: 1)},
    summary="delta rule: S ← (I − β k kᵀ) S + β k vᵀ, β = σ(x W_β), L2-normalised q, k; "
            "chunked (WY/UT transform), parallel, scan"))
