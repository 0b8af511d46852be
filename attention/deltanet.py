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
  "chunked"   (default) per chunk of C positions (a power of two), the UT transform:
              W = (I + L)⁻¹ diag(β) K and Ũ = (I + L)⁻¹ diag(β) V, the inverse of the unit
              lower triangular I + L by blocked inversion (batched matmuls) over
              diagonal blocks of BASE positions inverted row by row;
              a chunk entered with state S has U = Ũ - W S, outputs Q S + tril(Q Kᵀ) U and
              leaves S' = S + Kᵀ U = (I - Kᵀ W) S + Kᵀ Ũ (the WY form of the product of
              its I - β k kᵀ). W, Ũ and tril(Q Kᵀ) are batched over all chunks; the
              products with the state ([W; Q] S, then [A; Kᵀ] U: two per chunk) run
              in `lax.scan` over the chunks.
  "parallel"  the same over one chunk of all T positions (a T x T inverse).
  "scan"      the recurrence, token by token, in `lax.scan`.
There is no "assoc" form: the transitions I - β k kᵀ are dense Dk x Dk matrices, whose
associative scan would cost O(T Dk³) and O(T Dk²) memory; it is refused.

Masks: key padding only, (B, 1, 1, T): β = 0 at a padded position. Causal only (an RNN).
Segment ids (packed rows, attention.core.gated): the state resets at each segment start, as
S_t = (I - β_t k_t k_tᵀ)(c_t S_{t-1}) + β_t k_t v_tᵀ with c_t = 0 at a start (the gate of
Gated DeltaNet, 0 or 1 here, applied as a mask): the scan zeroes S; the chunked and
parallel forms mask L and tril(Q Kᵀ) to pairs of one segment (each segment's own UT
transform), cut the entering state off the positions after a start (in W and in Q S),
and write only the chunk's last segment into the next state.
The operator only. DeltaNet's layer around it (Yang et al. 2024: short causal
convolutions on q, k, v, SiLU before the L2 norm, an RMSNorm of each head's output) is
the model's, from the record's `layer` = ("qkv_conv", "qkv_silu", "rms_norm")
(models/layers.py; `gated_layer=bare` leaves it out).
q (B, T, Hq, D), k (B, T, Hkv, D), v (B, T, Hkv, Dv) -> (B, T, Hq, Dv), q's dtype; state
and arithmetic in float32 (float64 for float64).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from attention.core import common as C
from attention.core import gated as G
from attention.core.registry import InputSpec, Variant, register
from attention.core import positions as P
from attention.core.common import unexpected

NAME = "deltanet"
EPS = 1e-6
# positions per chunk: its C² terms ((I + L)⁻¹, W and Ũ) weigh more than the gated
# ones' do; 32 ran faster than 64 on a CPU at T = 4096 (results/gated)
CHUNK = 32
BASE = 8      # the blocked inversion's base blocks, inverted row by row (`_base_inverse`)


def l2norm(x, eps=EPS):
  """x / sqrt(|x|² + eps) over the last axis (a zero vector stays zero)."""
  return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + eps)


def _ut_inverse(k, beta, rc=None):
  """(I + L)⁻¹ per chunk, L = strictly-lower(diag(β) K Kᵀ), by blocked inversion, bottom
  up: a block of 2s positions [[A, 0], [M, D]] (A, D: its halves' blocks, M = diag(β)
  K_2 K_1ᵀ) has the inverse [[A⁻¹, 0], [-D⁻¹ M A⁻¹, D⁻¹]] (as LAPACK's trtri): batched
  matmuls only, where a triangular solve's backward pass was 10x its forward on a CPU.

  k (..., C, Dk), beta (..., C), C a power of two -> (..., C, C) unit lower triangular.
  rc: None or segment runs broadcastable to (..., C): L_ij = 0 across runs (block
  diagonal: each segment's own transform).
  """
  Cc = k.shape[-2]
  s = min(Cc, BASE)
  inv = _base_inverse(k, beta, rc, s)                       # the s x s blocks
  while s < Cc:
    kh = k.reshape(k.shape[:-2] + (Cc // (2 * s), 2, s, k.shape[-1]))
    bh = beta.reshape(beta.shape[:-1] + (Cc // (2 * s), 2, s))
    M = bh[..., 1, :, None] * jnp.einsum("...id,...jd->...ij", kh[..., 1, :, :],
                                         kh[..., 0, :, :])
    if rc is not None:
      rh = rc.reshape(rc.shape[:-1] + (Cc // (2 * s), 2, s))
      M = jnp.where(rh[..., 1, :, None] == rh[..., 0, None, :], M, 0.0)
    ih = inv.reshape(inv.shape[:-3] + (Cc // (2 * s), 2, s, s))
    a_inv, d_inv = ih[..., 0, :, :], ih[..., 1, :, :]
    low = -jnp.einsum("...ij,...jl,...lm->...im", d_inv, M, a_inv)
    inv = jnp.concatenate([jnp.concatenate([a_inv, jnp.zeros_like(low)], -1),
                           jnp.concatenate([low, d_inv], -1)], -2)
    s *= 2
  return inv[..., 0, :, :]


def _base_inverse(k, beta, rc, b):
  """(I + L)⁻¹ of the diagonal b x b blocks (b <= BASE), by forward substitution row by
  row (X_i = e_i - Σ_{j<i} L_ij X_j): elementwise work on (..., C / b, b) rows, where
  the first levels of the blocked inversion were batches of 1 x 1 and 2 x 2 matmuls.
  k (..., C, Dk), beta (..., C), rc as `_ut_inverse` -> (..., C / b, b, b)."""
  Cc = k.shape[-2]
  kb = k.reshape(k.shape[:-2] + (Cc // b, b, k.shape[-1]))
  L = beta.reshape(beta.shape[:-1] + (Cc // b, b))[..., :, None] * jnp.einsum(
      "...id,...jd->...ij", kb, kb)                       # (..., C / b, b, b), used i > j
  if rc is not None:
    rb = rc.reshape(rc.shape[:-1] + (Cc // b, b))
    L = jnp.where(rb[..., :, None] == rb[..., None, :], L, 0.0)
  eye = jnp.eye(b, dtype=k.dtype)
  rows = []
  for i in range(b):
    x = jnp.broadcast_to(eye[i], L.shape[:-2] + (b,))
    for j in range(i):
      x = x - L[..., i, j, None] * rows[j]
    rows.append(x)
  return jnp.stack(rows, axis=-2)


def _ut(k, beta, x, rc=None):
  """(I + L)⁻¹ diag(β) x per chunk: k (..., C, Dk), beta (..., C), x (..., C, X)."""
  return jnp.einsum("...ij,...jx->...ix", _ut_inverse(k, beta, rc), beta[..., None] * x)


def _chunks(qc, kc, vc, bc, S0, sg=None):
  """Consecutive chunks from state S0: qc (B, H, n, G, C, Dk), kc (B, H, n, C, Dk),
  vc (B, H, n, C, Dv), bc (B, H, n, C) -> out (B, H, n, G, C, Dv), final state.

  W, Ũ and A = tril(Q Kᵀ) for all n chunks at once; the scan over the chunks does what
  needs the state: U = Ũ - W S, O = Q S + A U, S' = S + Kᵀ U, as two products per chunk:
  [W; Q] S, then [A; Kᵀ] U (the operands stacked beforehand, batched over the chunks;
  four products per step were slower on a CPU).

  sg: None, or segments (runs, cont), each (B|1, 1, n, C): the positions' segment runs,
  and whether a position's run is the one the chunk's entering state belongs to (no
  segment started in the chunk up to it). Then L and A are masked to pairs of one run,
  a position outside the state's run sees the state neither in its correction
  (W = (I + L)⁻¹ diag(β c) K, c = cont) nor in its output (O = diag(c) Q S + A U), and
  the chunk leaves S' = c_last S + Kᵀ diag(last run) U: a reset at each start."""
  B, H, n, G_, Cc, Dk = qc.shape
  A = jnp.tril(jnp.einsum("bhngid,bhnjd->bhngij", qc, kc))          # j <= i
  if sg is None:
    WU = _ut(kc, bc, jnp.concatenate([kc, vc], axis=-1))
    kl = kc
  else:
    rc, cont = sg
    kw = jnp.where(cont[..., None], kc, 0.0)
    WU = _ut(kc, bc, jnp.concatenate([kw, vc], axis=-1), rc)
    same = (rc[..., :, None] == rc[..., None, :])[:, :, :, None]       # (B|1, 1, n, 1, C, C)
    A = jnp.where(same, A, 0.0)
    kl = jnp.where((rc == rc[..., -1:])[..., None], kc, 0.0)          # the last run's keys
  WQ = jnp.concatenate([WU[..., :Dk], qc.reshape(B, H, n, G_ * Cc, Dk)], axis=-2)
  AK = jnp.concatenate([A.reshape(B, H, n, G_ * Cc, Cc), jnp.swapaxes(kl, -1, -2)], axis=-2)
  xs = (WQ, WU[..., Dk:], AK) + (() if sg is None else (cont[:, :, :, None, :, None],
                                                        cont[..., -1]))

  def step(S, x):
    wq, ut, ak = x[:3]
    ws = jnp.einsum("bhcd,bhde->bhce", wq, S)            # (B, H, C + G C, Dv): W S; Q S
    u = ut - ws[..., :Cc, :]
    y = jnp.einsum("bhic,bhce->bhie", ak, u)              # (B, H, G C + Dk, Dv): A U; Kᵀ U
    qs = ws[..., Cc:, :].reshape(B, H, G_, Cc, -1)
    if sg is not None:
      qs = jnp.where(x[3], qs, 0.0)
      S = jnp.where(x[4][..., None, None], S, 0.0)
    return S + y[..., G_ * Cc:, :], qs + y[..., :G_ * Cc, :].reshape(qs.shape)

  S, o = jax.lax.scan(step, S0, tuple(jnp.moveaxis(x, 2, 0) for x in xs))
  return jnp.moveaxis(o, 0, 2), S


def chunk_runs(seg, Tp, shape):
  """(runs, cont) of `_chunks` for segments `seg` (linear.Segments, (B|1, T)) padded to
  Tp positions (the padding joins the last run) and cut as `shape` = (..., n, C) of
  consecutive chunks: cont = the run is the one entering the chunk (of the previous
  chunk's last position; the first's: runs[:, 0], that of the initial state)."""
  runs = seg.runs
  r = jnp.pad(runs, ((0, 0), (0, Tp - runs.shape[1])), mode="edge")
  rc = r.reshape((r.shape[0],) + shape)
  ends = rc[..., -1].reshape(r.shape[0], -1)                     # each chunk's last run
  prev = jnp.concatenate([runs[:, :1], ends[:, :-1]], axis=1).reshape(rc.shape[:-1])
  return rc, rc == prev[..., None]


def delta_chunked(q, k, v, beta, S0, chunk, seg=None):
  """q (B, H, G, T, Dk), k (B, H, T, Dk), v (B, H, T, Dv), beta (B, H, T), S0 (B, H, Dk, Dv)
  -> out (B, H, G, T, Dv), final state. See the module docstring; the chunks run in
  blocks of about gated.BLOCK positions as in `gated.diag_chunked` (rematerialised).
  seg: None or the call's `linear.Segments` (a reset at each segment start)."""
  B, H, G_, T, Dk = q.shape
  Dv = v.shape[-1]
  Cc = min(chunk, 1 << (T - 1).bit_length())                       # a power of two
  n = -(-T // Cc)
  nblk = -(-n // max(1, G.BLOCK // Cc))
  per = -(-n // nblk)                                               # chunks per block
  Tp = nblk * per * Cc
  # padded positions: β = 0 and k = v = q = 0: they change nothing and are cropped
  q, k, v = (C.pad_axis(x, x.ndim - 2, Tp) for x in (q, k, v))
  beta = C.pad_axis(beta, 2, Tp)
  qb = q.reshape(B, H, G_, nblk, per, Cc, Dk).transpose(3, 0, 1, 4, 2, 5, 6)
  kb, vb = (x.reshape(B, H, nblk, per, Cc, x.shape[-1]).transpose(2, 0, 1, 3, 4, 5)
            for x in (k, v))
  bb = beta.reshape(B, H, nblk, per, Cc).transpose(2, 0, 1, 3, 4)
  sb = None
  if seg is not None:   # (nblk, B|1, 1, per, C) each
    sb = tuple(x.transpose(1, 0, 2, 3)[:, :, None] for x in chunk_runs(seg, Tp, (nblk, per, Cc)))

  @jax.checkpoint
  def block(S, x):
    o, S = _chunks(*x[:4], S, x[4])
    return S, o

  S, o = jax.lax.scan(block, S0, (qb, kb, vb, bb, sb),             # (nblk, B, H, per, G, C, Dv)
                      unroll=C.scan_unroll(nblk))
  o = o.transpose(1, 2, 4, 0, 3, 5, 6).reshape(B, H, G_, Tp, Dv)[:, :, :, :T]
  return o, S


def delta_parallel(q, k, v, beta, S0, chunk=None, seg=None):
  """One chunk of all T positions (padded to a power of two): the quadratic form."""
  del chunk
  T = q.shape[3]
  Tp = 1 << (T - 1).bit_length()                   # padded: β = 0, k = v = q = 0
  q, k, v = (C.pad_axis(x, x.ndim - 2, Tp) for x in (q, k, v))
  sg = None if seg is None else tuple(x[:, None] for x in chunk_runs(seg, Tp, (1, Tp)))
  o, S = _chunks(q[:, :, :, None].transpose(0, 1, 3, 2, 4, 5), k[:, :, None], v[:, :, None],
                 C.pad_axis(beta, 2, Tp)[:, :, None], S0, sg)
  return o[:, :, 0, :, :T], S


def delta_scan(q, k, v, beta, S0, chunk=None, seg=None):
  """The delta rule one position per `lax.scan` step (S zeroed at a segment start)."""
  del chunk
  st = None if seg is None else jnp.moveaxis(seg.starts, 1, 0)   # (T, B|1)

  def step(S, x):
    q_t, k_t, v_t, b_t, s_t = x
    if seg is not None:
      S = jnp.where(s_t[:, None, None, None], 0.0, S)
    u = b_t[..., None] * (v_t - jnp.einsum("bhd,bhde->bhe", k_t, S))
    S = S + k_t[..., :, None] * u[..., None, :]
    return S, jnp.einsum("bhgd,bhde->bhge", q_t, S)

  S, o = jax.lax.scan(step, S0, (jnp.moveaxis(q, 3, 0), jnp.moveaxis(k, 2, 0),
                                 jnp.moveaxis(v, 2, 0), jnp.moveaxis(beta, 2, 0), st))
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
                        form="chunked", chunk_size=CHUNK, eps=EPS, state=None, q_seg=None,
                        k_seg=None):
  """`deltanet` from `state` (B, Hkv, D, Dv) (None: zeros) -> (out, final state)."""
  d, kmask = G.check_call(NAME, q, k, v, causal=causal, mask=mask, form=form,
                          chunk_size=chunk_size)
  if form not in FORMS:
    C.refuse(NAME, f"form={form!r}", "the delta rule's transitions I - β k kᵀ are dense "
             "Dk x Dk matrices: an associative scan over them costs O(T Dk³); use "
             f"one of {tuple(FORMS)}")
  qg, kh, vh, beta = _inputs(q, k, v, beta_logits, d, kmask, scale, eps)
  S0 = G.initial_state(state, d, kh.dtype)
  seg = G.segments(NAME, q_seg, k_seg, d)
  o, S = FORMS[form](qg, kh, vh, beta, S0, chunk_size, seg)
  return G.finish(o, S, q.dtype, seg)


def deltanet(q, k, v, *, causal=False, mask=None, scale=None, beta_logits=None,
             form="chunked", chunk_size=CHUNK, eps=EPS,
             positions=None, q_pos=None, k_pos=None, q_seg=None, k_seg=None, **kw):
  """DeltaNet (Schlag et al. 2021; Yang et al. 2024) under the contract; causal only.

  q (B, T, Hq, D), k (B, T, Hkv, D), v (B, T, Hkv, Dv) -> (B, T, Hq, Dv), q's dtype.
  beta_logits: (B, T, Hkv, 1), β = sigmoid. mask: key padding only, (B, 1, 1, T).
  form: "chunked" | "parallel" | "scan". eps: in the L2 normalisation of q and k.
  q_seg, k_seg (B|1, T): segment ids of a packed row: the state resets at each segment
  start (module docstring).
  """
  unexpected(NAME, kw)
  P.prepare(NAME, positions, C.check_qkv(q, k, v, NAME), q_pos, k_pos)  # refuses each
  return deltanet_with_state(q, k, v, causal=causal, mask=mask, scale=scale,
                             beta_logits=beta_logits, form=form, chunk_size=chunk_size,
                             eps=eps, q_seg=q_seg, k_seg=k_seg)[0]


def implied_weights(q, k, *, causal=True, mask=None, scale=None, beta_logits=None,
                    form="chunked", chunk_size=CHUNK, eps=EPS, q_seg=None, k_seg=None):
  """(B, Hq, T, T) weights with out = w @ v: w = tril(Q Kᵀ) (I + L)⁻¹ diag(β), from the
  unrolled form (module docstring); signed, and not normalised."""
  d, kmask = G.check_call(NAME, q, k, k, causal=causal, mask=mask, form=form,
                          chunk_size=chunk_size)
  qg, kh, _, beta = _inputs(q, k, k, beta_logits, d, kmask, scale, eps)
  Tp = 1 << (d.Tk - 1).bit_length()        # padding (k = 0, β = 0) leaves the T x T block
  seg = G.segments(NAME, q_seg, k_seg, d)
  rc = None if seg is None else jnp.pad(seg.runs, ((0, 0), (0, Tp - d.Tk)), mode="edge")
  inv = _ut_inverse(C.pad_axis(kh, 2, Tp), C.pad_axis(beta, 2, Tp),
                    None if rc is None else rc[:, None])[..., :d.Tk, :d.Tk]
  A = jnp.tril(jnp.einsum("bhgid,bhjd->bhgij", qg, kh))
  if seg is not None:
    A = jnp.where((seg.runs[:, :, None] == seg.runs[:, None, :])[:, None, None], A, 0.0)
  w = jnp.einsum("bhgij,bhjl->bhgil", A, inv * beta[:, :, None, :])
  if seg is not None:
    w = G.poison(w, seg.ok)
  return w.reshape(d.B, d.Hq, d.Tq, d.Tk)


def _cost(d, *, causal=True, mode="fwd", itemsize=4, form="chunked", chunk_size=CHUNK,
          **kw):
  """Chunked (and parallel: one chunk of T): per chunk the blocked inverse (its K Kᵀ
  blocks and products), W and Ũ, tril(Q Kᵀ), and per position the scan's W S, Q S,
  A U and Kᵀ U; scan: 3 state products per position."""
  BH, BHk, T, Dk, Dv = d.B * d.Hq, d.B * d.Hkv, d.Tk, d.D, d.Dv
  if form == "scan":
    flops = 2 * T * Dk * Dv * (BH + 2 * BHk)
    temp = 4 * BHk * T * Dk * Dv
  else:
    Cc = min(T if form == "parallel" else chunk_size, 1 << max(T - 1, 1).bit_length())
    per_kv = (Cc - 1) * Dk + 2 * Cc * Cc / 3 + 2 * Cc * (Dk + Dv) + 4 * Dk * Dv
    per_q = 2 * Cc * (Dk + Dv) + 2 * Dk * Dv
    flops = T * (BHk * per_kv + BH * per_q)
    temp = G.chunked_temp(d, 1, Cc) + 4 * BHk * min(T, G.BLOCK) * (Cc + Dk + Dv)
  trans = BHk * T + (BH + BHk) * T                     # sigmoid; the norms' rsqrt
  dec = G.state_decode_cost(d, itemsize, extra_flops=2 * BHk * d.Tq * Dk * Dv,
                            extra_trans=2 * BHk * d.Tq)
  return G.finish_cost(d, mode, itemsize, flops, trans, 4 * BHk * Dk * Dv, temp, dec)


register(Variant(
    name=NAME, fn=deltanet, paper="Schlag et al. 2021; Yang et al. 2024",
    time="O(N C (C + D) + N D Dv)", memory="O(N (D + Dv))", causal=True,
    masks="key padding", decode="S per kv head, O(D Dv) per token",
    decode_impl=G.decode_impl(deltanet_with_state), cost=_cost, cross=False,
    causal_only=True, family="gated", forms=tuple(FORMS), implied_weights=implied_weights,
    positions=G.POSITIONS_REFUSED, segments=G.SEGMENTS,
    inputs={"beta_logits": InputSpec(width=lambda head_dim: 1)},
    layer=("qkv_conv", "qkv_silu", "rms_norm"),
    summary="delta rule: S ← (I − β k kᵀ) S + β k vᵀ, β = σ(x W_β), L2-normalised q, k; "
            "chunked (WY/UT transform), parallel, scan"))
