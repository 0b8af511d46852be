"""`gated_deltanet`: the gated delta rule (Yang, Kautz & Hatamizadeh, "Gated Delta
Networks: Improving Mamba2 with Delta Rule", ICLR 2025).

  S_t = α_t (I - β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ,     o_t = S_tᵀ q_t

a decay α_t ∈ (0, 1] (Mamba-2's gate: forgets fast) on the delta rule's correction
(DeltaNet: writes precisely). q and k are L2-normalised as in `deltanet` (x / sqrt(|x|²
+ eps)), q is then scaled by `scale` (1/sqrt(D) by default). Per token and kv head, from
the layer input (the models project them, Variant.inputs):

  β_t = sigmoid(beta_logits)                       beta_logits  (B, T, Hkv, 1)
  α_t = exp(-softplus(decay_logits))               decay_logits (B, T, Hkv, 1)

The paper takes α_t = exp(-A_h softplus(x_t W_α + b_h)) as Mamba-2 does, with a learned
rate A_h per head; here A_h is folded into the logit's projection: A softplus(z) =
softplus(z + log A) where softplus(z) ≈ e^z (the slowly decaying regime), and = A z
(a rescaled projection) where z is large, so one softplus of a learned affine map spans
the same gates. The models' projection starts with its bias at the inverse softplus of
A·dt, A ~ U(1, 16), dt ~ logU(1e-3, 0.1) (Mamba-2's initial rates: `decay_bias_init`).
log α = -softplus(z) = log_sigmoid(-z), exact for any logit (α never rounds to 1 or 0
before its logarithm is taken).

Unrolled over a chunk entered with state S, with log gates la, their exact segment sums
Γ_ij = Π_{j<l≤i} α_l (j ≤ i, `gated.decay_matrix`), b_i = Σ_{start≤l≤i} la_l and
a_j = Σ_{j<l≤end} la_l (all sums of nonpositive terms over exactly their range, as in
attention.core.gated: no quotient of cumulative products):

  S_i = e^{b_i} S + Σ_{j≤i} Γ_ij k_j u_jᵀ,   u_i = β_i (v_i - α_i S_{i-1}ᵀ k_i)
  (I + L) U = diag(β) V - diag(β e^b) K S,   L_ij = β_i Γ_ij k_i·k_j  (j < i)
  O = diag(e^b) Q S + (tril(Q Kᵀ) ⊙ Γ) U,    S' = e^{b_end} S + (K ⊙ e^a)ᵀ U

Forms (form=):
  "chunked"  (default) the UT transform per chunk of C = chunk_size positions (a power
             of two): W = (I + L)⁻¹ diag(β e^b) K and Ũ = (I + L)⁻¹ diag(β) V, (I + L)⁻¹
             by blocked inversion (batched matmuls over halves, the diagonal blocks of
             BASE positions by forward substitution), then U = Ũ - W S, the chunk's
             output and next state: the products with the state run in `lax.scan` over
             the chunks, in blocks of about gated.BLOCK positions (rematerialised), as
             `deltanet`'s WY form.
  "parallel" the same over one chunk of all T positions (a T x T inverse).
  "scan"     the recurrence, token by token, in `lax.scan`.
No "assoc" form: the transitions α (I - β k kᵀ) are dense Dk x Dk matrices (as
deltanet's; refused).

Segment ids (packed rows): a log gate of RESET (-1e30) at each segment start, i.e. α = 0
exactly, which is a reset of this recurrence (S_t = β_t k_t v_tᵀ): every Γ across a start,
e^b after one and e^a before the chunk's last one are 0, in every form, with finite
gradients (attention.core.gated's convention). q_seg and k_seg must be one sequence in
contiguous runs, else the row is NaN. Masks: key padding only (a padded position has
β = 0, α = 1, k = 0: a no-op on the state). GQA: the state, α and β are the kv head's.
Causal only. q (B, T, Hq, D), k (B, T, Hkv, D), v (B, T, Hkv, Dv) -> (B, T, Hq, Dv) in
q's dtype; state and arithmetic in float32 (float64 for float64 inputs).

The operator only: the layer around it as the paper builds it (short convolutions and
SiLU on q, k, v; the per-head RMSNorm and the SiLU output gate) is the model's, read from
the record's `layer` (models/layers.py). Not built: its value heads twice as wide as its
key heads (expand_v = 2; our heads share one head_dim).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from attention import deltanet as DN
from attention.core import common as C
from attention.core import gated as G
from attention.core import positions as P
from attention.core.common import unexpected
from attention.core.registry import InputSpec, Variant, register

NAME = "gated_deltanet"
EPS = DN.EPS
CHUNK = 32    # as deltanet's: its C² terms dominate; 32 ran faster than 64 on a CPU
BASE = 8      # diagonal blocks inverted by forward substitution (`_inverse`)
# Mamba-2's initial decay rates (the models' bias of decay_logits, `decay_bias_init`)
A_RANGE, DT_RANGE, DT_FLOOR = (1.0, 16.0), (1e-3, 1e-1), 1e-4


def decay_bias_init(key, shape, dtype=jnp.float32):
  """The bias of the decay logits' projection (heads,) at the inverse softplus of
  A·dt, A ~ U(1, 16), dt ~ logU(1e-3, 0.1) floored at 1e-4 (Mamba-2's rates, with the
  paper's A folded in: module docstring): α = exp(-A dt) at x = 0."""
  ka, kd = jax.random.split(key)
  a = jax.random.uniform(ka, shape, jnp.float32, *A_RANGE)
  lo, hi = math.log(DT_RANGE[0]), math.log(DT_RANGE[1])
  dt = jnp.maximum(jnp.exp(jax.random.uniform(kd, shape, jnp.float32, lo, hi)), DT_FLOOR)
  rate = a * dt
  return (rate + jnp.log(-jnp.expm1(-rate))).astype(dtype)   # softplus⁻¹(rate)


# ---- (I + L)⁻¹ of a strictly lower triangular L --------------------------------------

def _diag_blocks(L, b):
  """(..., C, C) -> (..., C / b, b, b): the diagonal b x b blocks."""
  n = L.shape[-1] // b
  Lr = L.reshape(L.shape[:-2] + (n, b, n, b))
  return jnp.moveaxis(jnp.diagonal(Lr, axis1=-4, axis2=-2), -1, -3)


def _inverse(L):
  """(I + L)⁻¹ for L (..., C, C) strictly lower triangular, C a power of two: the
  diagonal blocks of BASE by forward substitution row by row, then blocked inversion
  bottom up ([[A, 0], [M, D]]⁻¹ = [[A⁻¹, 0], [-D⁻¹ M A⁻¹, D⁻¹]]): batched matmuls only,
  as deltanet's `_ut_inverse` (whose L it builds from K Kᵀ; here L is given)."""
  Cc = L.shape[-1]
  s = min(Cc, BASE)
  Lb = _diag_blocks(L, s)
  eye = jnp.eye(s, dtype=L.dtype)
  rows = []
  for i in range(s):
    x = jnp.broadcast_to(eye[i], Lb.shape[:-2] + (s,))
    for j in range(i):
      x = x - Lb[..., i, j, None] * rows[j]
    rows.append(x)
  inv = jnp.stack(rows, axis=-2)                          # (..., C / s, s, s)
  while s < Cc:
    M = _diag_blocks(L, 2 * s)[..., s:, :s]               # (..., C / 2s, s, s)
    ih = inv.reshape(inv.shape[:-3] + (Cc // (2 * s), 2, s, s))
    a_inv, d_inv = ih[..., 0, :, :], ih[..., 1, :, :]
    low = -jnp.einsum("...ij,...jl,...lm->...im", d_inv, M, a_inv)
    inv = jnp.concatenate([jnp.concatenate([a_inv, jnp.zeros_like(low)], -1),
                           jnp.concatenate([low, d_inv], -1)], -2)
    s *= 2
  return inv[..., 0, :, :]


# ---- the forms: (q, k, v, beta, la, S0, chunk) -> (out, S) --------------------------------
# q (B, H, G, T, Dk) scaled, k (B, H, T, Dk), v (B, H, T, Dv), beta (B, H, T), la (B, H, T)
# log gates <= 0 (RESET at a segment start, 0 at padding), S0 (B, H, Dk, Dv).

def _prepare(qc, kc, vc, bc, lc):
  """A chunk's state-free terms, batched over chunks: qc (..., G, C, Dk), kc (..., C, Dk),
  vc (..., C, Dv), bc, lc (..., C) -> W (..., C, Dk), Ũ (..., C, Dv), A (..., G, C, C),
  Q e^b (..., G, C, Dk), (K e^a)ᵀ (..., Dk, C), e^{b_end} (...,)."""
  gam = G.decay_matrix(lc[..., None])[..., 0]              # (..., C, C), 0 above
  kk = jnp.einsum("...id,...jd->...ij", kc, kc)
  L = jnp.tril(bc[..., :, None] * gam * kk, -1)
  b = jnp.cumsum(lc, axis=-1)                              # Σ_{start≤l≤i}
  after = G.sum_after(lc[..., None])[..., 0]               # Σ_{j<l≤end}
  eb = jnp.exp(b)
  inv = _inverse(L)
  WU = jnp.einsum("...ij,...jx->...ix", inv, bc[..., None] * jnp.concatenate(
      [kc * eb[..., None], vc], axis=-1))
  Dk = kc.shape[-1]
  A = jnp.einsum("...gid,...jd->...gij", qc, kc) * gam[..., None, :, :]
  return (WU[..., :Dk], WU[..., Dk:], A, qc * eb[..., None, :, None],
          jnp.swapaxes(kc * jnp.exp(after)[..., None], -1, -2), eb[..., -1])


def _chunks(qc, kc, vc, bc, lc, S0):
  """Consecutive chunks from S0: qc (B, H, n, G, C, Dk), kc (B, H, n, C, Dk), vc
  (B, H, n, C, Dv), bc, lc (B, H, n, C) -> out (B, H, n, G, C, Dv), final state. The
  scan over the n chunks does what needs the state, as two stacked products per chunk:
  [W; Q e^b] S, then [A; (K e^a)ᵀ] U (deltanet's layout)."""
  B, H, n, G_, Cc, Dk = qc.shape
  W, Ut, A, Qe, Ka, decay = _prepare(qc, kc, vc, bc, lc)
  WQ = jnp.concatenate([W, Qe.reshape(B, H, n, G_ * Cc, Dk)], axis=-2)
  AK = jnp.concatenate([A.reshape(B, H, n, G_ * Cc, Cc), Ka], axis=-2)

  def step(S, x):
    wq, ut, ak, dec = x
    ws = jnp.einsum("bhcd,bhde->bhce", wq, S)             # W S; Q e^b S
    u = ut - ws[..., :Cc, :]
    y = jnp.einsum("bhic,bhce->bhie", ak, u)              # A U; (K e^a)ᵀ U
    o = ws[..., Cc:, :] + y[..., :G_ * Cc, :]
    return dec[..., None, None] * S + y[..., G_ * Cc:, :], o.reshape(B, H, G_, Cc, -1)

  S, o = jax.lax.scan(step, S0, tuple(jnp.moveaxis(x, 2, 0) for x in (WQ, Ut, AK, decay)))
  return jnp.moveaxis(o, 0, 2), S


def gdn_chunked(q, k, v, beta, la, S0, chunk):
  """The chunked form (module docstring), blocks of about gated.BLOCK positions each
  rematerialised (`jax.checkpoint`) in an outer `lax.scan`."""
  B, H, G_, T, Dk = q.shape
  Dv = v.shape[-1]
  Cc = min(chunk, 1 << (T - 1).bit_length())
  n = -(-T // Cc)
  nblk = -(-n // max(1, G.BLOCK // Cc))
  per = -(-n // nblk)
  Tp = nblk * per * Cc
  # padded positions: β = 0, log gate 0, k = v = q = 0: no-ops, cropped
  q, k, v = (C.pad_axis(x, x.ndim - 2, Tp) for x in (q, k, v))
  beta, la = C.pad_axis(beta, 2, Tp), C.pad_axis(la, 2, Tp)
  qb = q.reshape(B, H, G_, nblk, per, Cc, Dk).transpose(3, 0, 1, 4, 2, 5, 6)
  kb, vb = (x.reshape(B, H, nblk, per, Cc, x.shape[-1]).transpose(2, 0, 1, 3, 4, 5)
            for x in (k, v))
  bb, lb = (x.reshape(B, H, nblk, per, Cc).transpose(2, 0, 1, 3, 4) for x in (beta, la))

  @jax.checkpoint
  def block(S, x):
    o, S = _chunks(*x, S)
    return S, o

  S, o = jax.lax.scan(block, S0, (qb, kb, vb, bb, lb), unroll=C.scan_unroll(nblk))
  o = o.transpose(1, 2, 4, 0, 3, 5, 6).reshape(B, H, G_, Tp, Dv)[:, :, :, :T]
  return o, S


def gdn_parallel(q, k, v, beta, la, S0, chunk=None):
  """One chunk of all T positions (padded to a power of two): the quadratic form."""
  del chunk
  T = q.shape[3]
  Tp = 1 << (T - 1).bit_length()
  q, k, v = (C.pad_axis(x, x.ndim - 2, Tp) for x in (q, k, v))
  beta, la = C.pad_axis(beta, 2, Tp), C.pad_axis(la, 2, Tp)
  o, S = _chunks(q[:, :, :, None].transpose(0, 1, 3, 2, 4, 5), k[:, :, None],
                 v[:, :, None], beta[:, :, None], la[:, :, None], S0)
  return o[:, :, 0, :, :T], S


def gdn_scan(q, k, v, beta, la, S0, chunk=None):
  """The recurrence one position per `lax.scan` step: S ← α S, then the delta rule."""
  del chunk

  def step(S, x):
    q_t, k_t, v_t, b_t, l_t = x
    S = jnp.exp(l_t)[..., None, None] * S
    u = b_t[..., None] * (v_t - jnp.einsum("bhd,bhde->bhe", k_t, S))
    S = S + k_t[..., :, None] * u[..., None, :]
    return S, jnp.einsum("bhgd,bhde->bhge", q_t, S)

  S, o = jax.lax.scan(step, S0, (jnp.moveaxis(q, 3, 0), jnp.moveaxis(k, 2, 0),
                                 jnp.moveaxis(v, 2, 0), jnp.moveaxis(beta, 2, 0),
                                 jnp.moveaxis(la, 2, 0)))
  return jnp.moveaxis(o, 0, 3), S


FORMS = {"chunked": gdn_chunked, "parallel": gdn_parallel, "scan": gdn_scan}


def _inputs(q, k, v, beta_logits, decay_logits, d, kmask, scale, eps, seg):
  """Normalised, grouped, scaled q; normalised k (0 at padding); v; β (B, Hkv, T) (0 at
  padding); log gates (B, Hkv, T) (0 at padding, RESET at a segment start)."""
  ct = C.compute_dtype(q.dtype)
  b = G.token_input(beta_logits, d, NAME, "beta_logits", (1,))
  a = G.token_input(decay_logits, d, NAME, "decay_logits", (1,))
  qg, kh, vh = G.grouped(DN.l2norm(q.astype(ct), eps), DN.l2norm(k.astype(ct), eps), v, d,
                         scale)
  beta = jax.nn.sigmoid(b[..., 0].astype(ct)).transpose(0, 2, 1)
  la = jax.nn.log_sigmoid(-a[..., 0].astype(ct)).transpose(0, 2, 1)   # -softplus
  if kmask is not None:
    keep = kmask[:, None, :]
    beta, la = jnp.where(keep, beta, 0.0), jnp.where(keep, la, 0.0)
    kh = jnp.where(keep[..., None], kh, 0.0)
  if seg is not None:
    la = jnp.where(seg.starts[:, None, :], G.RESET, la)
  return qg, kh, vh, beta, la


def gated_deltanet_with_state(q, k, v, *, causal=False, mask=None, scale=None,
                              beta_logits=None, decay_logits=None, form="chunked",
                              chunk_size=CHUNK, eps=EPS, state=None, q_seg=None,
                              k_seg=None):
  """`gated_deltanet` from `state` (B, Hkv, D, Dv) (None: zeros) -> (out (B, T, Hq, Dv)
  in q's dtype, final state (B, Hkv, D, Dv) float32 (float64 for float64))."""
  d, kmask = G.check_call(NAME, q, k, v, causal=causal, mask=mask, form=form,
                          chunk_size=chunk_size)
  if form not in FORMS:
    C.refuse(NAME, f"form={form!r}", "its transitions α (I - β k kᵀ) are dense Dk x Dk "
             f"matrices: an associative scan over them costs O(T Dk³); use one of "
             f"{tuple(FORMS)}")
  seg = G.segments(NAME, q_seg, k_seg, d)
  qg, kh, vh, beta, la = _inputs(q, k, v, beta_logits, decay_logits, d, kmask, scale, eps,
                                 seg)
  S0 = G.initial_state(state, d, kh.dtype)
  o, S = FORMS[form](qg, kh, vh, beta, la, S0, chunk_size)
  return G.finish(o, S, q.dtype, seg)


def gated_deltanet(q, k, v, *, causal=False, mask=None, scale=None, beta_logits=None,
                   decay_logits=None, form="chunked", chunk_size=CHUNK, eps=EPS,
                   positions=None, q_pos=None, k_pos=None, q_seg=None, k_seg=None, **kw):
  """Gated DeltaNet (Yang, Kautz & Hatamizadeh 2025) under the contract; causal only.

  q (B, T, Hq, D), k (B, T, Hkv, D), v (B, T, Hkv, Dv) -> (B, T, Hq, Dv), q's dtype.
  beta_logits (B, T, Hkv, 1): β = sigmoid; decay_logits (B, T, Hkv, 1): α =
  exp(-softplus). mask: key padding only, (B, 1, 1, T). form: "chunked" | "parallel" |
  "scan"; chunk_size: a power of two. eps: in the L2 normalisation of q and k.
  q_seg, k_seg (B|1, T): segment ids of a packed row (a reset at each start).
  """
  unexpected(NAME, kw)
  P.prepare(NAME, positions, C.check_qkv(q, k, v, NAME), q_pos, k_pos)  # refuses each
  return gated_deltanet_with_state(
      q, k, v, causal=causal, mask=mask, scale=scale, beta_logits=beta_logits,
      decay_logits=decay_logits, form=form, chunk_size=chunk_size, eps=eps, q_seg=q_seg,
      k_seg=k_seg)[0]


def implied_weights(q, k, *, causal=True, mask=None, scale=None, beta_logits=None,
                    decay_logits=None, form="chunked", chunk_size=CHUNK, eps=EPS,
                    q_seg=None, k_seg=None):
  """(B, Hq, T, T) float32 (float64 for float64) weights with out = w @ v from a zero
  state: w = (tril(Q Kᵀ) ⊙ Γ) (I + L)⁻¹ diag(β) (module docstring); signed, not
  normalised, 0 across segments and from padded keys."""
  d, kmask = G.check_call(NAME, q, k, k, causal=causal, mask=mask, form=form,
                          chunk_size=chunk_size)
  seg = G.segments(NAME, q_seg, k_seg, d)
  qg, kh, _, beta, la = _inputs(q, k, k, beta_logits, decay_logits, d, kmask, scale, eps,
                                seg)
  Tp = 1 << (d.Tk - 1).bit_length()       # padding (k = 0, β = 0) leaves the T x T block
  kp, bp, lp = C.pad_axis(kh, 2, Tp), C.pad_axis(beta, 2, Tp), C.pad_axis(la, 2, Tp)
  gam = G.decay_matrix(lp[..., None])[..., 0]
  L = jnp.tril(bp[..., :, None] * gam * jnp.einsum("bhid,bhjd->bhij", kp, kp), -1)
  inv = _inverse(L)[..., :d.Tk, :d.Tk]
  A = jnp.einsum("bhgid,bhjd->bhgij", qg, kh) * gam[:, :, None, :d.Tk, :d.Tk]
  w = jnp.einsum("bhgij,bhjl->bhgil", A, inv * beta[:, :, None, :])
  if seg is not None:
    w = G.poison(w, seg.ok)
  return w.reshape(d.B, d.Hq, d.Tq, d.Tk)


def _cost(d, *, causal=True, mode="fwd", itemsize=4, form="chunked", chunk_size=CHUNK,
          **kw):
  """deltanet's counts (the UT transform, W, Ũ, the state products) plus the decays:
  per chunk the (C, C) segment sums and their exps, Γ ⊙ (Q Kᵀ) and Γ ⊙ L, e^b and e^a;
  scan: 3 state products and the state's decay per position."""
  c = DN._cost(d, causal=causal, mode="fwd", itemsize=itemsize, form=form,
               chunk_size=chunk_size)
  BH, BHk, T, Dk, Dv = d.B * d.Hq, d.B * d.Hkv, d.Tk, d.D, d.Dv
  if form == "scan":
    flops, trans = c.flops + BHk * T * Dk * Dv, c.transcendentals + 2 * BHk * T
  else:
    Cc = min(T if form == "parallel" else chunk_size, 1 << max(T - 1, 1).bit_length())
    flops = (c.flops + T * Cc * (BH + 2 * BHk) + 2 * T * Dk * (BH + BHk)
             + BHk * T * Dk * Dv / Cc)
    trans = c.transcendentals + BHk * T * (Cc + 2) + BHk * T
  dec = G.state_decode_cost(d, itemsize, extra_flops=3 * BHk * d.Tq * Dk * Dv,
                            extra_trans=4 * BHk * d.Tq)
  temp = c.temp_bytes + (0 if form == "scan" else 4 * BHk * min(T, G.BLOCK) * Cc)  # Γ
  return G.finish_cost(d, mode, itemsize, flops, trans, 4 * BHk * Dk * Dv, temp, dec)


register(Variant(
    name=NAME, fn=gated_deltanet, paper="Yang, Kautz & Hatamizadeh 2025",
    time="O(N C (C + D) + N D Dv)", memory="O(N (D + Dv))", causal=True,
    masks="key padding", decode="S per kv head, O(D Dv) per token",
    decode_impl=G.decode_impl(gated_deltanet_with_state), cost=_cost, cross=False,
    causal_only=True, family="gated", forms=tuple(FORMS), implied_weights=implied_weights,
    positions=G.POSITIONS_REFUSED, layer=("qkv_conv", "qkv_silu", "rms_norm", "out_gate"),
    segments=("a state reset at each segment start in every form (chunked, parallel, "
              "scan): a decay of exactly 0 (log gate -1e30); q_seg and k_seg must agree "
              "and ids be contiguous runs, else the row is NaN. Decode: none (one "
              "sequence per row)"),
    inputs={"beta_logits": InputSpec(width=lambda head_dim: 1),
            "decay_logits": InputSpec(width=lambda head_dim: 1, bias_init=decay_bias_init)},
    summary="gated delta rule: S ← α (I − β k kᵀ) S + β k vᵀ, α = exp(−softplus(x W_α)), "
            "β = σ(x W_β), L2-normalised q, k; chunked (WY/UT), parallel, scan"))
