"""Linear attention with decay, gates or the delta rule: what `retention`, `gla` and
`deltanet` share (the "gated" family).

Each keeps one state S (Dk x Dv) per key/value head, written by every key and read by
every query, with no normaliser; q is scaled by `scale` (1/sqrt(Dk) by default):

  diagonal gates   S_t = diag(α_t) S_{t-1} + k_t v_tᵀ               (retention, gla)
  delta rule       S_t = (I - β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ    (deltanet)
  output           o_t = S_tᵀ q_t

α_t ∈ (0, 1]^Dk is retention's fixed γ_h, gla's data-dependent gate, or one scalar per
head (gla's gate="ssd", Mamba-2's structure). With α ≡ 1 both rules reduce to linear
attention with identity features and no denominator, o_i = Σ_{j≤i} (q_i·k_j) v_j; our
`linear` is another function (φ = elu + 1 and a normaliser). Unrolled, diagonal gates
give o_i = Σ_{j≤i} w_ij v_j with the implied weights

  w_ij = Σ_d q_id k_jd Π_{j<l≤i} α_ld          (`diag_weights`; not a softmax, no sum to 1)

Forms (`form=`), one function, each from an initial state S0 to the final state:
  "chunked"   (default) chunks of C = chunk_size positions (a power of two): inside a
              chunk the quadratic form, between chunks the state, carried by `lax.scan`
              over blocks of BLOCK positions (whole chunks): a block is computed batched
              over its chunks from the state the last one left (the state entering each
              of its chunks in closed form), so its arrays stay in cache and the time
              per position does not grow with T; the backward pass recomputes a block
              (`jax.checkpoint`). O(T C (Dk + Dv) + T Dk Dv) time, O(T (Dk + Dv) +
              (T / BLOCK) Dk Dv) memory. The training form.
  "parallel"  the (T, T) weights, then w @ v: O(T² Dk) time and memory (diagonal gates
              form a (T, T, Dk) decay tensor). Short sequences, and the reference.
  "scan"      the recurrence, token by token, in `lax.scan`: O(T Dk Dv) work in T
              sequential steps.
  "assoc"     diagonal gates only: `lax.associative_scan` over (log gate, k vᵀ) pairs,
              whose composition (a, X)∘(b, Y) = (a + b, e^b X + Y) is associative:
              O(log T) depth, O(T Dk Dv) memory (every state is formed).

Numerics. Gates enter as log α ≤ 0. Every product of gates Π_{j<l≤i} α_l is the exp of a
sum of log gates over exactly (j, i], accumulated as a cumulative sum of nonpositive
terms from j or from i (never a quotient of cumulative products, nor a difference of two
long cumulative sums, whose rounding grows with the sequence): no factor exceeds 1, so
nothing overflows, and what underflows is below float32's smallest normal, i.e. 0 beside
any other term. The chunked form factors a query's and a key's decays only through a
point m between them: w_ij = (q_i ⊙ Π_{m<l≤i} α_l)·(k_j ⊙ Π_{j<l≤m} α_l), j ≤ m < i,
both factors ≤ 1. Between chunks m is the chunk boundary; inside a chunk with diagonal
gates the pairs are split by halving (the second half's queries against the first half's
keys through the midpoint, as one batched matmul, then each half again) down to blocks
of INTRA_BASE positions, whose pairs take the exact decays (segment sums, as
`decay_matrix`); scalar gates use the exact (C, C) decay matrix (Mamba-2's segment sums, as
0/1 matmuls: sums of terms of one sign). State and arithmetic are float32 (float64
for float64 inputs) whatever the input dtype; the output is in q's dtype.

Segment ids (q_seg, k_seg: packed rows, `attention.core.common`): the state resets where a
segment starts, in every form. For the diagonal gates a reset is a gate of exactly 0: the
log gate at a segment start is RESET (-1e30, finite: the 0/1 matmuls that sum log gates
would turn -inf into NaN as 0·(-inf)), so every product of gates across a start is
e^(≤ -1e30) = 0 exactly, and everything above applies unchanged: a chunk's queries after a
start read nothing of the carried state, its keys before a start write nothing to the next
one, the decays never exceed 1 and their gradients are 0 (not NaN) across a start. The
delta rule's is a mask (attention.deltanet). Queries and keys share one sequence of ids
(q_seg == k_seg, or one side given) in contiguous runs
(`attention.core.segments.segment_runs`); a row that breaks it is NaN. From a given `state` the first segment continues it. Decoding takes no
ids: a decode state is one sequence per batch row.

Causal only: these are RNNs over one sequence. causal=False and Tq != Tk are refused.
Masks: key padding only, (B, 1, 1, T): a padded position is a no-op on the state (gate
1 and k = 0; the delta rule's β = 0); its query still reads the state.
GQA: the state, the gates and β belong to the kv head they act on; the G query heads of
a group read the same state.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from attention.core import common as C
from attention.core import cost_model as cost_lib
from attention.core.decode import DecodeImpl
from attention.core.registry import Refused
from attention.core.segments import (Segments, key_padding, poison, refuse_decode_segments,
                                     segment_runs)


# How the gated family answers the in-attention position schemes (Variant.positions):
# refused, each with its reason, until a form is built and tested.
POSITIONS_REFUSED = {
    "rope": Refused("not built: rotating q and k before they enter the state would hold "
                    "(q_i.k_j would depend on i - j) in every form, but it is not "
                    "implemented or tested for the gated family; use positions=none "
                    "(the decay or gate already orders the tokens)"),
    "rope2d": Refused("not built (as rope): the gated family takes no rotary positions"),
    "alibi": Refused("the state never forms the (i, j) scores a bias is added to; "
                     "linear's ALiBi is a decay of its state, which retention's gamma "
                     "and gla's gate already are; not combined with them here"),
}

# How the gated family honours segment ids (Variant.segments), and the log gate of a reset.
SEGMENTS = ("a state reset at each segment start in every form (parallel, chunked: inside "
            "and between chunks, scan, assoc): a gate of exactly 0 (log gate -1e30) for "
            "retention and gla, the state and the chunk's UT transform masked for deltanet; "
            "q_seg and k_seg must agree (one sequence: an RNN) and ids be contiguous runs, "
            "else the row is NaN. Decode: none (one sequence per row)")
RESET = -1e30

FORMS = ("chunked", "parallel", "scan", "assoc")
DEFAULT_CHUNK = 32    # positions per chunk (32 ran faster than 64 on a CPU for each gate)
BLOCK = 256           # positions per step of the chunked form's outer scan
INTRA_BASE = 4        # the diagonal gates' chunks: exact decays inside blocks of 4 (`_intra_base`)


# ---- checks shared by the three variants ------------------------------------------------

def check_call(name, q, k, v, *, causal, mask, form, chunk_size):
  """Validates a call of a gated variant; returns (Dims, key mask (B|1, T) bool or None)."""
  d = C.check_qkv(q, k, v, name)
  if d.Tq != d.Tk:
    C.refuse(name, f"Tq != Tk ({d.Tq} queries, {d.Tk} keys)",
             "it is an RNN over one sequence (the output at t reads the state after keys "
             "0..t of the same sequence), so there is no cross-attention")
  if not causal:
    C.refuse(name, "causal=False",
             "it is defined causally (the output at t reads the state after keys 0..t); "
             "pass causal=True")
  if form not in FORMS:
    raise C.AttentionError(f"{name}: unknown form {form!r}; choose one of {FORMS}")
  if not (isinstance(chunk_size, int) and chunk_size > 0 and not chunk_size & (chunk_size - 1)):
    raise C.AttentionError(f"{name}: chunk_size must be a power of two (a chunk is split by "
                           f"halving, see attention.core.gated), got {chunk_size!r}")
  return d, key_padding(mask, d, name, state="recurrent state")


def segments(name, q_seg, k_seg, d: C.Dims) -> Segments | None:
  """The `Segments` (starts, runs, ok) of a call's ids (B|1, T), or None without ids."""
  return segment_runs(name, q_seg, k_seg, d)


def token_input(x, d: C.Dims, name: str, arg: str, widths: tuple[int, ...]):
  """A per-token input (B, T, Hkv, w), w in `widths`: checked, or a specific error."""
  want = f"({d.B}, {d.Tk}, {d.Hkv}, {' or '.join(map(str, widths))})"
  if x is None:
    raise C.AttentionError(
        f"{name} needs {arg}=(B, T, Hkv, w) = {want}, computed from the layer input: the "
        f"models project it (Variant.inputs['{arg}']); a direct call passes it")
  x = jnp.asarray(x)
  if x.ndim != 4 or x.shape[:3] != (d.B, d.Tk, d.Hkv) or x.shape[3] not in widths:
    raise C.AttentionError(f"{name}: {arg} has shape {x.shape}; expected {want}")
  return x


def grouped(q, k, v, d: C.Dims, scale):
  """Scaled q (B, Hkv, G, T, Dk), k (B, Hkv, T, Dk), v (B, Hkv, T, Dv) in the compute dtype."""
  ct = C.compute_dtype(q.dtype)
  q, k, v = (jnp.asarray(x, ct) for x in (q, k, v))
  return (C.split_heads_q(q, d) * C.default_scale(d.D, scale), C.kv_heads_first(k),
          C.kv_heads_first(v))


def initial_state(state, d: C.Dims, ct):
  """The state to start from: given (B, Hkv, Dk, Dv), or zeros."""
  if state is None:
    return jnp.zeros((d.B, d.Hkv, d.D, d.Dv), ct)
  return jnp.asarray(state).astype(ct)


# ---- sums of log gates over exact ranges ------------------------------------------------

def sum_after(la):
  """(..., T, F) -> (..., T, F): Σ_{l>j} la_l along T, accumulated from the end."""
  shifted = jnp.concatenate([la[..., 1:, :], jnp.zeros_like(la[..., :1, :])], axis=-2)
  return jax.lax.cumsum(shifted, axis=la.ndim - 2, reverse=True)


def segsum(la):
  """(..., T, F) -> (..., T, T, F): s[i, j] = Σ_{j<l≤i} la_l for j < i, 0 elsewhere,
  each a cumulative sum down column j (Mamba-2's segment sum)."""
  T = la.shape[-2]
  below = (jnp.arange(T)[:, None] > jnp.arange(T)[None, :])[:, :, None]
  x = jnp.where(below, la[..., :, None, :], 0.0)          # x[i, j] = la_i for i > j
  return jnp.cumsum(x, axis=-3)


def decay_matrix(la):
  """(..., T, F) log gates -> (..., T, T, F): Π_{j<l≤i} α_l for j ≤ i, 0 for j > i."""
  T = la.shape[-2]
  tril = jnp.tril(jnp.ones((T, T), bool))[:, :, None]
  return jnp.where(tril, jnp.exp(segsum(la)), 0.0)        # segsum is 0 where masked


def diag_weights(q, k, la):
  """The implied weights w_ij = Σ_d q_id k_jd Π_{j<l≤i} α_ld, 0 for j > i.

  q (..., G, T, Dk), k (..., T, Dk), la (..., T, F), F = 1 (scalar gate) or Dk
  -> (..., G, T, T).
  """
  dm = decay_matrix(la)
  if la.shape[-1] == 1:
    return jnp.einsum("...gid,...jd->...gij", q, k) * dm[..., None, :, :, 0]
  return jnp.einsum("...gid,...jd,...ijd->...gij", q, k, dm)


# ---- the diagonal-gated forms: (q, k, v, la, S0, chunk) -> (out, S) ---------------------
# q (B, H, G, T, Dk), k (B, H, T, Dk), v (B, H, T, Dv), la (B, H, T, F) log gates <= 0,
# S0 (B, H, Dk, Dv); out (B, H, G, T, Dv), S the state after position T - 1.

def _decayed(S, la):
  """diag(exp(la)) S for la (B, H, F) and S (B, H, Dk, Dv)."""
  return jnp.exp(la)[..., None] * S


def diag_parallel(q, k, v, la, S0, chunk=None):
  """The quadratic form over the whole sequence (see module docstring)."""
  del chunk
  b = jnp.cumsum(la, axis=-2)                             # Σ_{l≤i}: decay of S0 at i
  o = (jnp.einsum("bhgij,bhje->bhgie", diag_weights(q, k, la), v)
       + jnp.einsum("bhgid,bhde->bhgie", q * jnp.exp(b)[:, :, None], S0))
  S = _decayed(S0, b[..., -1, :]) + jnp.einsum("bhjd,bhje->bhde",
                                               k * jnp.exp(sum_after(la)), v)
  return o, S


def _ones(pattern, *sizes):
  """A 0/1 float32 constant of `sizes` that is 1 where `pattern(*index arrays)` holds
  (NumPy: the compiled program holds it, it does not build it)."""
  return pattern(*np.indices(sizes)).astype(np.float32)


def _sums(mat, x, spec):
  """Sums of log gates selected by a 0/1 matrix, as one matmul: every term has the same
  sign, so nothing cancels; at full float32 precision (no TF32 or bf16 passes)."""
  return jnp.einsum(spec, mat.astype(x.dtype), x, precision=jax.lax.Precision.HIGHEST)


def _halves(x, s):
  """(..., C, X) -> (..., C / 2s, 2, s, X): blocks of 2s positions, split in halves."""
  return x.reshape(x.shape[:-2] + (x.shape[-2] // (2 * s), 2, s, x.shape[-1]))


def _join(first, second):
  """Inverse of `_halves` on the two halves (..., nb, s, X) -> (..., C, X)."""
  x = jnp.stack([first, second], axis=-3)
  return x.reshape(x.shape[:-4] + (-1, x.shape[-1]))


def _intra(q, k, v, la):
  """Σ_{j≤i} (q_i·(k_j ⊙ Π_{j<l≤i} α_l)) v_j inside chunks of C (a power of two), by
  halving, bottom up; and the chunk's sums of log gates.

  q (..., G, C, Dk), k (..., C, Dk), v (..., C, Dv), la (..., C, F) -> out
  (..., G, C, Dv), b (..., C, F) = Σ_{start≤l≤i} la_l, after (..., C, F) = Σ_{j<l≤end} la_l.
  Level s: blocks of 2s positions, whose second half's queries meet the first half's
  keys through the midpoint m: (q_i ⊙ e^{P_i}) · (k_j ⊙ e^{A_j}) with P_i = Σ_{m<l≤i}
  and A_j = Σ_{j<l≤m}, the prefix and suffix sums inside the halves (of s positions),
  built from the level below by adding one half's total: sums of log gates of one sign.
  """
  Cc = q.shape[-2]
  s = min(Cc, INTRA_BASE)
  o, P, A = _intra_base(q, k, v, la, s)         # blocks of s: P, A inside them
  while s < Cc:
    Ph, Ah = _halves(P, s), _halves(A, s)
    qh = q.reshape(q.shape[:-2] + (Cc // (2 * s), 2, s, q.shape[-1]))
    ql = qh[..., 1, :, :] * jnp.exp(Ph[..., None, :, 1, :, :])
    ku = _halves(k, s)[..., 0, :, :] * jnp.exp(Ah[..., 0, :, :])
    lower = jnp.einsum("...gbij,...bje->...gbie", jnp.einsum("...gbid,...bjd->...gbij", ql, ku),
                       _halves(v, s)[..., 0, :, :])
    o = o + _join(jnp.zeros_like(lower), lower).reshape(o.shape)
    P = _join(Ph[..., 0, :, :], Ph[..., 1, :, :] + Ph[..., 0, -1:, :])
    A = _join(Ah[..., 0, :, :] + Ph[..., 1, -1:, :], Ah[..., 1, :, :])
    s *= 2
  return o, P, A


def _intra_base(q, k, v, la, b):
  """`_intra`'s first levels at once: inside blocks of b positions, the exact (b, b, F)
  decays Π_{j<l≤i} α_l (segment sums down each column, of one sign: `decay_matrix`),
  as many exps per position as the log2 b halving levels they replace ((b - 1) / 2 F
  against log2(b) F), in a few large elementwise ops instead of batches of 1 x 1 and
  2 x 2 matmuls. q (..., G, C, Dk), k (..., C, Dk), v (..., C, Dv), la (..., C, F)
  -> out (..., G, C, Dv), P = Σ_{start<l≤i} la_l and A = Σ_{j<l≤end} la_l inside blocks."""
  Cc = q.shape[-2]
  blocks = lambda x: x.reshape(x.shape[:-2] + (Cc // b, b, x.shape[-1]))
  lb = blocks(la)
  w = jnp.einsum("...gnid,...njd,...nijd->...gnij", blocks(q), blocks(k), decay_matrix(lb))
  o = jnp.einsum("...gnij,...nje->...gnie", w, blocks(v))
  P = jnp.cumsum(lb, axis=-2)
  return (o.reshape(q.shape[:-1] + v.shape[-1:]), P.reshape(la.shape),
          sum_after(lb).reshape(la.shape))


def _intra_scalar(q, k, v, la):
  """`_intra` for scalar gates (F = 1): the exact (C, C) decay matrix, exp of segment
  sums (Mamba-2's segsum, as one 0/1 matmul), times q kᵀ: dense matmuls, no halving."""
  Cc = q.shape[-2]
  seg = _sums(_ones(lambda i, j, l: (j < l) & (l <= i), Cc, Cc, Cc), la, "ijl,...lf->...ijf")
  tril = jnp.arange(Cc)[:, None] >= jnp.arange(Cc)[None, :]
  dm = jnp.where(tril, jnp.exp(seg[..., 0]), 0.0)          # (..., C, C)
  a = jnp.einsum("...gid,...jd->...gij", q, k) * dm[..., None, :, :]
  b = _sums(_ones(lambda i, l: l <= i, Cc, Cc), la, "il,...lf->...if")
  after = _sums(_ones(lambda j, l: l > j, Cc, Cc), la, "jl,...lf->...jf")
  return jnp.einsum("...gij,...je->...gie", a, v), b, after


def _decay_sum(w, x):
  """Σ_m w[n, m] ⊙ x[m]: w (..., N, M, F) decays (F = 1 or Dk), x (..., M, Dk, Dv)."""
  if w.shape[-1] == 1:
    return jnp.einsum("...nm,...mde->...nde", w[..., 0], x)
  return jnp.einsum("...nmd,...mde->...nde", w, x)


def _chunks(qc, kc, vc, lc, S0):
  """Consecutive chunks from state S0: qc (B, H, n, G, C, Dk), kc (B, H, n, C, Dk),
  vc (B, H, n, C, Dv), lc (B, H, n, C, F) -> out (B, H, n, G, C, Dv), final state.

  The state entering chunk c is e^{Σ_{l<c} tot_l} S0 + Σ_{m<c} e^{Σ_{m<l<c} tot_l} ΔS_m
  (tot: a chunk's summed log gates; ΔS_m = Σ_j (k_j ⊙ e^{after_j}) v_jᵀ its own writes),
  all n of them at once: n is a few chunks (a block), so this costs n² Dk Dv.
  """
  n = lc.shape[2]
  o, b, after = (_intra if lc.shape[-1] > 1 else _intra_scalar)(qc, kc, vc, lc)
  tot = b[..., -1, :]                                        # (B, H, n, F)
  dS = jnp.einsum("bhncd,bhnce->bhnde", kc * jnp.exp(after), vc)
  entry = _sums(_ones(lambda c, l: l < c, n, n), tot, "cl,...lf->...cf")
  between = jnp.where(_ones(lambda c, m: m < c, n, n)[:, :, None] > 0,
                      jnp.exp(_sums(_ones(lambda c, m, l: (m < l) & (l < c), n, n, n), tot,
                                    "cml,...lf->...cmf")), 0.0)
  S_in = _decayed(S0[:, :, None], entry) + _decay_sum(between, dS)   # (B, H, n, Dk, Dv)
  o = o + jnp.einsum("bhngcd,bhnde->bhngce", qc * jnp.exp(b)[:, :, :, None], S_in)
  last = jnp.exp(_sums(_ones(lambda m, l: l > m, n, n), tot, "ml,...lf->...mf"))
  S = _decayed(S0, jnp.sum(tot, axis=2)) + _decay_sum(last[:, :, None], dS)[:, :, 0]
  return o, S


def diag_chunked(q, k, v, la, S0, chunk):
  """The chunked form: intra-chunk quadratic, inter-chunk state by `lax.scan`.

  The scan runs over blocks of about BLOCK positions (whole chunks), each computed
  batched over its chunks from the state the previous block left: a block's arrays
  stay in cache, so the time per position does not grow with T (all chunks at once
  made every pass over q, k, v and the gates a pass over main memory).
  """
  B, H, G, T, Dk = q.shape
  Dv = v.shape[-1]
  Cc = min(chunk, 1 << (T - 1).bit_length())       # a power of two
  n = -(-T // Cc)
  nblk = -(-n // max(1, BLOCK // Cc))
  per = -(-n // nblk)                           # chunks per block
  Tp = nblk * per * Cc
  # padded positions: gate 1, k = v = q = 0: they change nothing and are cropped
  q, k, v, la = (C.pad_axis(x, x.ndim - 2, Tp) for x in (q, k, v, la))
  qb = q.reshape(B, H, G, nblk, per, Cc, Dk).transpose(3, 0, 1, 4, 2, 5, 6)
  kb, vb, lb = (x.reshape(B, H, nblk, per, Cc, x.shape[-1]).transpose(2, 0, 1, 3, 4, 5)
                for x in (k, v, la))

  # rematerialised: the backward pass recomputes a block's intermediates from its
  # inputs instead of storing them for every block: fewer passes over main memory, and
  # faster forward and backward passes on a CPU
  @jax.checkpoint
  def block(S, x):
    o, S = _chunks(*x, S)
    return S, o

  S, o = jax.lax.scan(block, S0, (qb, kb, vb, lb),    # o (nblk, B, H, per, G, C, Dv)
                      unroll=C.scan_unroll(nblk))
  o = o.transpose(1, 2, 4, 0, 3, 5, 6).reshape(B, H, G, Tp, Dv)[:, :, :, :T]
  return o, S


def diag_scan(q, k, v, la, S0, chunk=None):
  """The recurrence, one position per `lax.scan` step."""
  del chunk

  def step(S, x):
    q_t, k_t, v_t, a_t = x
    S = _decayed(S, a_t) + k_t[..., :, None] * v_t[..., None, :]
    return S, jnp.einsum("bhgd,bhde->bhge", q_t, S)

  S, o = jax.lax.scan(step, S0, (jnp.moveaxis(q, 3, 0), jnp.moveaxis(k, 2, 0),
                                 jnp.moveaxis(v, 2, 0), jnp.moveaxis(la, 2, 0)))
  return jnp.moveaxis(o, 0, 3), S


def diag_assoc(q, k, v, la, S0, chunk=None):
  """`lax.associative_scan` over (log gate, k vᵀ): every state S_t at once."""
  del chunk
  X = k[..., :, None] * v[..., None, :]                  # (B, H, T, Dk, Dv)
  X = X.at[:, :, 0].add(_decayed(S0, la[:, :, 0]))

  def combine(x, y):
    (a, X1), (b, Y) = x, y
    return a + b, jnp.exp(b)[..., None] * X1 + Y

  _, Ss = jax.lax.associative_scan(combine, (la, X), axis=2)
  return jnp.einsum("bhgtd,bhtde->bhgte", q, Ss), Ss[:, :, -1]


DIAG_FORMS = {"chunked": diag_chunked, "parallel": diag_parallel, "scan": diag_scan,
              "assoc": diag_assoc}


def diag_inputs(q, k, v, log_a, d: C.Dims, kmask, scale, seg: Segments | None = None):
  """Grouped, scaled q, k (zero at padding), v, and log gates (B, Hkv, T, F) (0 at
  padding, RESET at a segment start, which wins over padding: a padded start still
  resets).

  log_a: broadcastable to (B, T, Hkv, F), F = 1 or Dk, values <= 0.
  """
  qg, kh, vh = grouped(q, k, v, d, scale)
  F = log_a.shape[-1]
  la = C.kv_heads_first(jnp.broadcast_to(log_a.astype(kh.dtype), (d.B, d.Tk, d.Hkv, F)))
  if kmask is not None:
    keep = kmask[:, None, :, None]
    la, kh = jnp.where(keep, la, 0.0), jnp.where(keep, kh, 0.0)
  if seg is not None:
    la = jnp.where(seg.starts[:, None, :, None], RESET, la)
  return qg, kh, vh, la


def diag_gated(name, q, k, v, log_a, d: C.Dims, kmask, *, scale, form, chunk_size, state,
               seg: Segments | None = None):
  """Diagonal-gated linear attention under the contract, after `check_call`.

  q (B, T, Hq, Dk), k (B, T, Hkv, Dk), v (B, T, Hkv, Dv); log_a broadcastable to
  (B, T, Hkv, F), F = 1 or Dk; state (B, Hkv, Dk, Dv) or None (zeros); seg: the
  `Segments` of the call's ids or None.
  Returns out (B, T, Hq, Dv) in q's dtype and the final state (B, Hkv, Dk, Dv) float32.
  """
  qg, kh, vh, la = diag_inputs(q, k, v, log_a, d, kmask, scale, seg)
  S0 = initial_state(state, d, kh.dtype)
  o, S = DIAG_FORMS[form](qg, kh, vh, la, S0, chunk_size)
  return finish(o, S, q.dtype, seg)


def finish(o, S, dtype, seg: Segments | None):
  """(out (B, T, Hq, Dv) in dtype, S) from the grouped o; rows whose segment ids a reset
  cannot honour (seg.ok False) are NaN in both."""
  if seg is not None:
    o, S = poison(o, seg.ok), poison(S, seg.ok)
  return C.merge_heads_out(o).astype(dtype), S


def diag_implied_weights(q, k, log_a, d: C.Dims, kmask, scale, seg: Segments | None = None):
  """(B, Hq, T, T) weights w with out = w @ v (v's heads repeated over each group)."""
  qg, kh, _, la = diag_inputs(q, k, k, log_a, d, kmask, scale, seg)
  w = diag_weights(qg, kh, la)
  if seg is not None:
    w = poison(w, seg.ok)
  return w.reshape(d.B, d.Hq, d.Tq, d.Tk)


# ---- the decode state: S per kv head, O(Dk Dv) whatever the tokens decoded ----------------

@dataclasses.dataclass(frozen=True)
class RecurrentState:
  """S (B, Hkv, Dk, Dv) float32 (float64 for float64), pos: tokens decoded (int32)."""
  S: jax.Array
  pos: jax.Array
  name: str = dataclasses.field(metadata=dict(static=True), default="gla")

  @property
  def nbytes(self) -> int:
    return self.S.size * self.S.dtype.itemsize


jax.tree_util.register_dataclass(RecurrentState, data_fields=["S", "pos"], meta_fields=["name"])


def init_state(name, *, batch, num_kv_heads, head_dim, v_head_dim=None, dtype=jnp.float32,
               max_len=None, cache_dtype=None, **options):
  """An empty state; max_len and the variant options (passed by the models) do not
  change it: its size is O(Dk Dv) per kv head, unbounded in tokens."""
  del max_len, options
  if cache_dtype is not None:
    C.refuse(name, f"cache_dtype={cache_dtype!r}", "it keeps a float32 state of "
             "O(Dk Dv) per kv head, not a KV cache to quantise")
  Dv = head_dim if v_head_dim is None else v_head_dim
  return RecurrentState(jnp.zeros((batch, num_kv_heads, head_dim, Dv), C.compute_dtype(dtype)),
                        jnp.zeros((), jnp.int32), name)


def decode_impl(core):
  """DecodeImpl over core(q, k, v, causal=True, state=S, **kw) -> (out, S): each step
  runs the variant's form (`form=`) on T >= 1 new tokens from the state; no segment
  ids (one sequence per row: `refuse_decode_segments`)."""
  def step(state, q_t, k_t, v_t, q_seg=None, k_seg=None, **kw):
    refuse_decode_segments(state.name, q_seg, k_seg)
    out, S = core(q_t, k_t, v_t, causal=True, state=state.S, **kw)
    return out, dataclasses.replace(state, S=S.astype(state.S.dtype),
                                    pos=state.pos + q_t.shape[1])
  return DecodeImpl(init=init_state, step=step)


# ---- cost ---------------------------------------------------------------------------------

def finish_cost(d, mode, itemsize, flops, trans, state_bytes, temp, decode):
  """The Cost of `mode` from the forward's counts (backward: 2x the forward's work, as
  `linear.kernel_cost`) or the decode step's Cost."""
  byt = cost_lib.io_bytes(d, itemsize) + state_bytes
  if mode == "fwd":
    return cost_lib.Cost(flops, trans, byt, temp)
  if mode == "fwd_bwd":
    return cost_lib.Cost(3 * flops, 2 * trans, 3 * byt, 2 * temp)
  if mode == "decode":
    return decode
  raise ValueError(f"cost mode must be one of {cost_lib.MODES}, got {mode!r}")


def state_decode_cost(d: C.Dims, itemsize, extra_flops=0.0, extra_trans=0.0):
  """T = Tq new tokens against an O(Dk Dv) state: write it, read it, per token."""
  BH, BHk = d.B * d.Hq, d.B * d.Hkv
  flops = 2 * d.Tq * d.D * d.Dv * (BH + 2 * BHk) + extra_flops
  new = cost_lib.io_bytes(d._replace(Tk=d.Tq), itemsize)   # the T new tokens, not the context
  return cost_lib.Cost(flops, extra_trans, new + 2 * 4 * BHk * d.D * d.Dv, 0.0)


def chunked_temp(d: C.Dims, F, Cc):
  """Temporary bytes of a chunked form: its blocked copies of q, k, v and the gates, the
  state kept per block for the backward pass, one block's (C, C) scores and states."""
  BH, BHk, T = d.B * d.Hq, d.B * d.Hkv, d.Tk
  blocks = -(-T // BLOCK)
  return 4 * (BH * T * d.D + BHk * T * (d.D + d.Dv + F) + BHk * blocks * d.D * d.Dv
              + BH * min(T, BLOCK) * Cc + BHk * (min(T, BLOCK) // Cc + 1) * d.D * d.Dv)


def diag_cost(d: C.Dims, *, mode, itemsize, F, form, chunk, fixed=False):
  """Cost of diagonal-gated linear attention with gates of width F (1 or Dk) by `form`.

  Matmuls count 2 FLOPs per multiply-add: the intra-chunk pairs (half of C x C with the
  halving of diagonal gates, all of it with scalar ones), the state's reads and writes,
  the decays; an exp per gate factor is a transcendental. fixed: the gates are
  constants (retention), so their sums and exps are computed once, when compiling.
  """
  BH, BHk, T, Dk, Dv = d.B * d.Hq, d.B * d.Hkv, d.Tk, d.D, d.Dv
  rw = 2 * T * Dk * Dv * (BH + BHk)                          # q·S and k vᵀ
  if form == "parallel":
    pairs = BH * T * T
    flops = 2 * pairs * (Dk + Dv) + pairs * (F > 1) * 2 * Dk + BHk * T * T * F
    trans, temp = BHk * T * T * F, 4 * (pairs + BHk * T * T * F)
  elif form in ("scan", "assoc"):
    levels = max(1, (T - 1).bit_length()) if form == "assoc" else 1
    flops = rw + 2 * BHk * T * Dk * Dv * levels
    trans = BHk * T * F * levels
    temp = 4 * BHk * T * Dk * Dv * (1 if form == "scan" else 2)
  else:
    Cc = min(chunk, 1 << max(T - 1, 1).bit_length())
    levels = (Cc - 1).bit_length()
    if F > 1:   # halving: the pairs i >= j only, and e^P, e^A per level
      flops = rw + BH * T * Cc * (Dk + Dv) + 2 * BH * T * Dk * levels
      trans = BHk * T * F * (levels + 2)
    else:       # the dense (C, C) decay matrix and its segment sums (0/1 matmuls)
      flops = rw + 2 * BH * T * Cc * (Dk + Dv + 1) + 2 * BHk * T * Cc * (Cc + 2) * (not fixed)
      trans = BHk * T * (Cc + 2) * (not fixed)
    flops += 2 * BHk * T * Dk * Dv / Cc                    # the states between chunks
    temp = chunked_temp(d, F, Cc)
  dec = state_decode_cost(d, itemsize, extra_trans=BHk * d.Tq * F)
  return finish_cost(d, mode, itemsize, flops, trans, 4 * BHk * Dk * Dv, temp, dec)
