"""The kernelised-attention library of `linear` and `performer`: attention of
feature-mapped queries and keys, φ(q), φ(k) (each variant brings its own φ),

  out_i = φ(q_i)ᵀ S / (φ(q_i)ᵀ Z + eps),   S = Σ_j φ(k_j) v_jᵀ,   Z = Σ_j φ(k_j)

in three forms that compute the same thing:

  parallel  non-causal: S and Z once, then one matmul per query.
  chunked   causal: the sequence is cut into chunks of C positions; inside a chunk
            the masked quadratic form (C x C), between chunks a running (S, Z)
            carried by `lax.scan`, or every chunk at once from cumulative sums of the
            chunks' states (`chunk_parallel`). Memory O(N·D + D·Dv); no (T, D, Dv)
            tensor.
  RNN       decode: state (S, Z), S_i = S_{i-1} + φ(k_i) v_iᵀ, Z_i = Z_{i-1} + φ(k_i);
            `kernel_step` costs O(D·Dv) whatever the number of previous tokens.

Shapes: φ(q) grouped (B, Hkv, G, Tq, F), φ(k) (B, Hkv, Tk, F), v (B, Hkv, Tk, Dv)
(attention.core.common's layouts); GQA shares (S, Z) across the query heads of a group.
A query with no allowed key gets S = Z = 0 and returns zeros.

Positions (attention.core.positions), in all three forms:
  rope, rope2d  RoFormer's form (Su et al. 2021, §3.3): the numerator's features are
            rotated, Σ_j (R_i φ(q_i))ᵀ(R_j φ(k_j)) v_j, the normaliser's not,
            Σ_j φ(q_i)ᵀφ(k_j) (a rotation would make it signed). S sums R_j φ(k_j) v_jᵀ,
            Z the unrotated φ(k_j): the decode state rotates φ(k) once, at write time.
  alibi     ALiBi's logit bias -m (i - j) multiplies exp(score) by e^(-m (i - j)); the
            analogue here multiplies each term φ(q_i)·φ(k_j), numerator and normaliser,
            by it, which is a per-head decay of the state: S_i = e^(-m (p_i - p_{i-1}))
            S_{i-1} + φ(k_i) v_iᵀ, and Z likewise (per query head, so a GQA group's
            heads keep one state each). Chunked: e^(-m (p_i - p_j)) inside a chunk, the
            carried state decayed to each query. Non-causal (self-attention, Tq == Tk):
            the symmetric e^(-m |p_i - p_j|) as a forward plus a backward scan. The
            positions must be in sequence order (see `kernel_attention`).

Segment ids (q_seg, k_seg: packed rows, `attention.core.common`), in all forms but decode:
  self-attention of a packed row (Tq == Tk, one side given or the same array twice):
            (S, Z), numerator and normaliser, restart at each segment start. Causal:
            inside a chunk the quadratic form is masked to pairs of one segment, a query
            reads the carried state only if no segment started in its chunk before it,
            and a chunk writes only its last segment's keys, keeping the state only if
            no segment started in it. Non-causal: the forward and backward scans (as
            ALiBi's) with these resets, in place of the parallel form. With ALiBi the
            positions may restart at a start (no decay is taken across one). The ids
            must be contiguous runs (`attention.core.segments.segment_runs`): a row that
            is not is NaN.
  otherwise (cross-attention, or two arrays of ids): the segment mask on the implied
            weights (`normalised_weights`), exact for any ids, O(Tq Tk).
  decode    refused: a decode state is one sequence per row
            (`attention.core.segments.refuse_decode_segments`).
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from attention.core import common as C
from attention.core import cost_model as cost_lib
from attention.core import positions as P
from attention.core.segments import poison, segment_runs

DEFAULT_CHUNK = 64   # positions per chunk of the causal form (linear's and performer's chunk_size)
# The causal form without decay or segment resets (linear's kernel option
# `chunk_parallel`): True, every chunk at once (`_chunk_parallel`); False, a scan over
# the chunks; None (the default), every chunk at once on a GPU only. On 2 CPU cores the scan's fwd+bwd ran 1.4x faster at the
# MNIST model's shapes (`python scripts/gpu_probe.py kernel scan|parallel`,
# 2026-11-27: one chunk's work stays in cache). On an H200 the parallel form's bare
# bf16 train step of the paper's MNIST model at batch 16 ran 162.4 steps/s against
# the scan's 107.3 (medians of 4 rounds, `python scripts/gpu_probe.py form
# parallel|scan`, jax 0.11.2, 2026-11-28, results/benchmarks/gpu_runs.md): 1.51x.
def chunk_parallel(choice: bool | None = None) -> bool:
  """Whether causal_terms takes the chunkwise-parallel form: `choice` (linear's
  `chunk_parallel` option), or where it is None, whether the backend is a GPU."""
  return jax.default_backend() == "gpu" if choice is None else bool(choice)

# ---- positions: RoPE in RoFormer's form, ALiBi as a decay of the state -------------

class Features(NamedTuple):
  """Feature-mapped queries and keys.

  fq (B, H, G, Tq, F), fk (B, H, Tk, F): φ(q), φ(k), which the normaliser uses.
  rq, rk: the same shapes, which the numerator uses: φ rotated by RoPE (RoFormer's
  form for linear attention, §3.3), else fq and fk themselves.
  """
  fq: jax.Array
  fk: jax.Array
  rq: jax.Array
  rk: jax.Array

  @property
  def rotated(self) -> bool:
    return self.rq is not self.fq

  def apply(self, on_q, on_k) -> "Features":
    """on_q to fq and rq, on_k to fk and rk (computed once when not rotated)."""
    fq, fk = on_q(self.fq), on_k(self.fk)
    if not self.rotated:
      return Features(fq, fk, fq, fk)
    return Features(fq, fk, on_q(self.rq), on_k(self.rk))


class Decay(NamedTuple):
  """ALiBi as a decay: every term φ(q_i)·φ(k_j) (numerator and normaliser) times
  e^(-m (p_i - p_j)), the factor that ALiBi's logit bias -m (p_i - p_j) is on exp.

  m: (H, G) float slopes (per query head); qp (B|1, Tq), kp (B|1, Tk) int32 positions.
  """
  m: jax.Array
  qp: jax.Array
  kp: jax.Array


def features(fq, fk, pos: P.Pos | None) -> Features:
  """`Features` of φ(q), φ(k) under the call's positions (rotated for RoPE)."""
  if pos is None or not pos.rotary:
    return Features(fq, fk, fq, fk)
  return Features(fq, fk, P.rotate(fq, pos.q, pos.spec, 3), P.rotate(fk, pos.k, pos.spec, 2))


def decay(pos: P.Pos | None, d: C.Dims, dtype) -> Decay | None:
  """The ALiBi decay of a call's positions, or None."""
  if pos is None or not pos.alibi:
    return None
  m = jnp.asarray(P.slopes_for(pos.spec, d.Hq), dtype).reshape(d.Hkv, d.G)
  return Decay(m, pos.q, pos.k)


def _gain(m, dp):
  """e^(-m dp): m (H, G), dp (B|1, *rest) int -> (B|1, H, G, *rest)."""
  dp = dp[:, None, None].astype(m.dtype)
  return jnp.exp(-m.reshape((1,) + m.shape + (1,) * (dp.ndim - 3)) * dp)


def _absorb(S, Z, ref, rk, fk, v, kp, m, seg=None):
  """The state after keys rk, fk (B, H, C, F), values v (B, H, C, Dv) at positions
  kp (B|1, C), from S, Z referenced at position ref (B|1,).
  Without decay (m None): S (B, H, F, Dv) + Σ_j rk_j v_jᵀ, Z (B, H, F) + Σ_j fk_j.
  With it, per query head, S (B, H, G, F, Dv), Z (B, H, G, F), everything decayed to
  the last key's position p = kp[-1]: S' = e^(-m (p - ref)) S + Σ_j e^(-m (p - kp_j))
  rk_j v_jᵀ. seg: None, or (keep (B|1,) bool: no segment starts in the chunk, last
  (B|1, C) bool: the key is in the chunk's last segment): the state is kept only if
  keep, and only the last segment's keys are written (a reset at each start).
  Returns (S, Z, ref)."""
  if seg is not None:
    keep, lastseg = seg
    on = lastseg[:, None, :, None]
    rk, fk = jnp.where(on, rk, 0.0), jnp.where(on, fk, 0.0)
    if m is None:
      S = jnp.where(keep[:, None, None, None], S, 0.0)
      Z = jnp.where(keep[:, None, None], Z, 0.0)
  if m is None:
    return S + jnp.einsum("bhkf,bhke->bhfe", rk, v), Z + jnp.sum(fk, axis=2), ref
  last = kp[:, -1]
  if seg is None:
    w = _gain(m, last[:, None] - kp)                              # (B|1, H, G, C)
    a = _gain(m, last - ref)                                      # (B|1, H, G)
  else:   # gains within the last segment only (positions restart at a start)
    w = _gain(m, jnp.where(lastseg, last[:, None] - kp, 0))
    a = jnp.where(keep[:, None, None], _gain(m, jnp.where(keep, last - ref, 0)), 0.0)
  return (a[..., None, None] * S + jnp.einsum("bhgk,bhkf,bhke->bhgfe", w, rk, v),
          a[..., None] * Z + jnp.einsum("bhgk,bhkf->bhgf", w, fk), last)


def _chunk_terms(S, Z, ref, x: Features, v, qp, kp, m, tril, seg=None):
  """(numerator (B, H, G, C, Dv), normaliser (B, H, G, C)) of one chunk's queries
  against the state and the chunk's keys j <= i (x: the chunk's Features).

  seg: None, or the chunk's (cont (B|1, C) bool: the query's segment is the state's,
  i.e. no segment starts in the chunk up to it; runs (B|1, C) int32: segment runs):
  a query reads the state only if cont, and the chunk's keys of its own run only."""
  if seg is not None:
    cont, rc = seg
    tril = tril & (rc[:, :, None] == rc[:, None, :])                  # (B|1, C, C)
    tril5 = tril[:, None, None]
    read = lambda t: jnp.where(cont[:, None, None, :, None], t, 0.0)
  else:
    tril5, read = tril, lambda t: t
  a = jnp.einsum("bhgqf,bhkf->bhgqk", x.rq, x.rk)                # (B, H, G, C, C)
  ad = jnp.einsum("bhgqf,bhkf->bhgqk", x.fq, x.fk) if x.rotated else a
  if m is None:
    a = jnp.where(tril5, a, 0.0)
    ad = jnp.where(tril5, ad, 0.0) if x.rotated else a
    num = (jnp.einsum("bhgqk,bhke->bhgqe", a, v)
           + read(jnp.einsum("bhgqf,bhfe->bhgqe", x.rq, S)))
    den = jnp.sum(ad, axis=-1)
    zq = jnp.einsum("bhgqf,bhf->bhgq", x.fq, Z)
    return num, den + (zq if seg is None else read(zq[..., None])[..., 0])
  dp = qp[:, :, None] - kp[:, None, :]
  if seg is None:
    w = jnp.where(tril, _gain(m, dp), 0.0)
    g = _gain(m, qp - ref[:, None])                               # (B|1, H, G, C)
  else:   # no decay across a segment start (positions restart there): no e^(+m...)
    w = jnp.where(tril5, _gain(m, jnp.where(tril, dp, 0)), 0.0)
    dq = jnp.where(cont, qp - ref[:, None], 0)
    g = jnp.where(cont[:, None, None], _gain(m, dq), 0.0)
  num = (jnp.einsum("bhgqk,bhke->bhgqe", a * w, v)
         + g[..., None] * jnp.einsum("bhgqf,bhgfe->bhgqe", x.rq, S))
  den = jnp.sum(ad * w, axis=-1) + g * jnp.einsum("bhgqf,bhgf->bhgq", x.fq, Z)
  return num, den


def causal_terms(x: Features, v, S0, Z0, ref0, chunk, m=None, qp=None, kp=None, runs=None,
                 parallel: bool | None = None):
  """Causal over aligned positions (query t sees keys <= t), from the state (S0, Z0)
  referenced at ref0: the numerator and normaliser before they are divided.

  x: Features with Tq == Tk == T; v (B, H, T, Dv); S0, Z0 as `_absorb` takes them
  (one per kv head, or per query head with a decay); m: None or (H, G) slopes with
  positions qp, kp (B|1, T); runs: None or (B|1, T) int32 segment runs (`Segments`),
  the state S0 being run runs[:, 0]'s: (S, Z) reset where a run starts, also inside a
  chunk (a query reads the carried state only if no run started in its chunk before
  it; a chunk writes only its last run's keys, and keeps the state only if no run
  started in it).
  Chunks of `chunk` positions: the masked quadratic form inside a chunk, the carried
  state between chunks (`lax.scan`): memory O(T F + F Dv), no (T, F, Dv) tensor; or,
  without decay and resets where `chunk_parallel(parallel)`, every chunk at once from the
  cumulative sums of the chunks' states (`_chunk_parallel`, memory O(T/C · F · Dv)).
  Returns num (B, H, G, T, Dv), den (B, H, G, T) and the final (S, Z, ref).
  """
  B, H, G, T, F = x.fq.shape
  C_ = min(chunk, T)
  n = -(-T // C_)
  pad = n * C_ - T

  def blocks(a, t_axis):       # (..., T, ·) -> (n, ..., C_, ·), zero padded
    a = jnp.pad(a, [(0, 0)] * t_axis + [(0, pad)] + [(0, 0)] * (a.ndim - t_axis - 1))
    a = a.reshape(a.shape[:t_axis] + (n, C_) + a.shape[t_axis + 1:])
    return jnp.moveaxis(a, t_axis, 0)

  xb = x.apply(lambda a: blocks(a, 3), lambda a: blocks(a, 2))
  feats = (xb.fq, xb.fk) + ((xb.rq, xb.rk) if x.rotated else ())
  if m is not None:     # padded keys repeat the last position: they decay nothing
    Bp = max(qp.shape[0], kp.shape[0], ref0.shape[0])
    edge = lambda p: jnp.moveaxis(jnp.pad(jnp.broadcast_to(p, (Bp, T)), ((0, 0), (0, pad)),
                                          mode="edge").reshape(Bp, n, C_), 1, 0)
    ps, ref0 = (edge(qp), edge(kp)), jnp.broadcast_to(ref0, (Bp,))
  else:
    ps = (jnp.zeros((n, 1, C_), jnp.int32),) * 2
  tril = jnp.tril(jnp.ones((C_, C_), bool))
  def unblock(a):     # (n, B, H, G, C_, ·) -> (B, H, G, T, ·)
    return jnp.moveaxis(a, 0, 3).reshape(B, H, G, n * C_, *a.shape[5:])[:, :, :, :T]

  if m is None and runs is None and chunk_parallel(parallel):
    num, den, state = _chunk_parallel(xb, blocks(v, 2), S0, Z0, ref0, tril)
    return unblock(num), unblock(den), state
  sg = None
  if runs is not None:  # padded keys (zero features) join the last run
    rb = jnp.moveaxis(jnp.pad(runs, ((0, 0), (0, pad)), mode="edge")
                      .reshape(runs.shape[0], n, C_), 1, 0)           # (n, B|1, C)
    prev = jnp.concatenate([runs[None, :, 0], rb[:-1, :, -1]], axis=0)  # the state's run
    sg = (rb == prev[:, :, None], rb)

  def step(carry, c):
    S, Z, ref = carry
    f, vc, (qpc, kpc), sc = c
    xc = Features(*f) if x.rotated else Features(f[0], f[1], f[0], f[1])
    if sc is None:
      num, den = _chunk_terms(S, Z, ref, xc, vc, qpc, kpc, m, tril)
      return _absorb(S, Z, ref, xc.rk, xc.fk, vc, kpc, m), (num, den)
    cont, rc = sc
    num, den = _chunk_terms(S, Z, ref, xc, vc, qpc, kpc, m, tril, (cont, rc))
    return (_absorb(S, Z, ref, xc.rk, xc.fk, vc, kpc, m, (cont[:, -1], rc == rc[:, -1:])),
            (num, den))

  (S, Z, ref), (num, den) = jax.lax.scan(step, (S0, Z0, ref0),
                                         (feats, blocks(v, 2), ps, sg),
                                         unroll=C.scan_unroll(n))
  return unblock(num), unblock(den), (S, Z, ref)


def _chunk_parallel(xb: Features, vb, S0, Z0, ref0, tril):
  """`causal_terms` without decay or segment resets, with no loop over the chunks:
  the state entering chunk c is S0 + Σ_{c' < c} (chunk c''s keys' sum), an exclusive
  cumulative sum over the chunk axis, and every chunk's terms are then one batched
  matmul (the chunkwise-parallel form of flash-linear-attention's kernels). A scan
  over n chunks launches a few small kernels per chunk and per layer, which bound
  linear's train step on an H100 (2949 device ops per step, busy 10 of its 10.1 ms,
  2026-11-27); here their number does not grow with n. Memory: the n entering states,
  O(T/C · F · Dv), no more than the features' O(T F) while Dv <= C.

  The chunks are folded into the batch axis, so that the chunk terms are the scan
  body's own matmuls at a batch of n·B: a first version that vmapped them over the
  chunk axis crashed XLA's GPU algebraic simplifier when compiling the MNIST model's
  bf16 train step (a transpose of a 5-D dot, jax 0.11.2, H100, 2026-11-27).

  xb: the chunked Features (fq (n, B, H, G, C, F), fk (n, B, H, C, F), ...); vb
  (n, B, H, C, Dv). Returns num (n, B, H, G, C, Dv), den (n, B, H, G, C), chunk by
  chunk as the scan stacks them, and the final (S, Z, ref)."""
  n, B = xb.fq.shape[:2]
  dS = jnp.einsum("nbhkf,nbhke->nbhfe", xb.rk, vb)         # each chunk's own sum
  dZ = jnp.sum(xb.fk, axis=3)
  cS, cZ = jnp.cumsum(dS, axis=0), jnp.cumsum(dZ, axis=0)
  S_in = S0 + jnp.concatenate([jnp.zeros_like(cS[:1]), cS[:-1]], axis=0)
  Z_in = Z0 + jnp.concatenate([jnp.zeros_like(cZ[:1]), cZ[:-1]], axis=0)
  fold = lambda a: a.reshape((n * B,) + a.shape[2:])       # (n, B, ...) -> (n·B, ...)
  num, den = _chunk_terms(fold(S_in), fold(Z_in), ref0, xb.apply(fold, fold), fold(vb),
                          None, None, None, tril)
  unfold = lambda a: a.reshape((n, B) + a.shape[1:])
  return unfold(num), unfold(den), (S0 + cS[-1], Z0 + cZ[-1], ref0)


def _normalise(num, den, eps):
  return num / (den + eps)[..., None]


def _empty_state(x: Features, Dv, dk: Decay | None):
  """Zero (S, Z): one per kv head (shared by a GQA group), or per query head (decayed)."""
  B, H, G, _, F = x.fq.shape
  heads = (B, H) if dk is None else (B, H, G)
  return jnp.zeros(heads + (F, Dv), x.fq.dtype), jnp.zeros(heads + (F,), x.fq.dtype)


def _ordered(dk: Decay, off: int, causal: bool, starts=None):
  """(B|1,) bool: the positions meet the decay's requirement (see `kernel_attention`);
  starts: None or (B|1, T) bool segment starts, where positions may restart."""
  kp, qp = dk.kp, dk.qp
  rise = kp[:, 1:] >= kp[:, :-1]
  ok = jnp.all(rise if starts is None else rise | starts[:, 1:], axis=-1)
  Tq, Tk = qp.shape[1], kp.shape[1]
  i = jnp.arange(Tq)
  j = i + off                                   # the last key query i sees (causal)
  seen = (j >= 0) & (j < Tk)
  ok &= jnp.all(jnp.where(seen, qp >= jnp.take(kp, jnp.clip(j, 0, Tk - 1), axis=1), True),
                axis=-1)
  if not causal:                                # and the first key after it
    nxt = (j + 1 < Tk)
    if starts is not None:                      # ... in its own segment
      nxt = nxt & ~jnp.take(starts, jnp.clip(j + 1, 0, Tk - 1), axis=1)
    ok &= jnp.all(jnp.where(nxt, qp <= jnp.take(kp, jnp.clip(j + 1, 0, Tk - 1), axis=1),
                            True), axis=-1)
  return ok

def kernel_attention(x: Features, v, d: C.Dims, *, causal, eps, chunk, dk=None, seg=None,
                     parallel=None):
  """The forms' dispatcher on feature-mapped inputs; handles Tq != Tk and the decay.

  x: Features (fq (B, H, G, Tq, F), fk (B, H, Tk, F) and their rotated rq, rk);
  v (B, H, Tk, Dv); dk: None or ALiBi's Decay; seg: None or the `Segments` of a
  packed row (Tq == Tk): (S, Z) reset at each segment start, in the causal scan and in
  both scans of the non-causal form (which then replaces the parallel one); rows whose
  ids a reset cannot honour are NaN. parallel: the causal form's `chunk_parallel`
  (`causal_terms`). Returns (B, H, G, Tq, Dv).

  Causal is bottom-right aligned: with Tk > Tq the first Tk - Tq keys form an
  initial state; with Tq > Tk the first Tq - Tk queries see no key (zeros).
  Non-causal without decay: the parallel form (S and Z once). Non-causal with decay
  (ALiBi's symmetric e^(-m |p_i - p_j|), Tq == Tk): a causal scan forward, one
  backward (the sequence reversed, positions negated) and the diagonal, counted
  twice, once removed.
  The decay holds for positions in sequence order: key positions non-decreasing, and
  each query at or after the keys before it (and, non-causal, before the ones after
  it), as in any sequence, packed or decoded; rows that break it return NaN.
  """
  if not causal and dk is None and seg is None:               # the parallel form
    S = jnp.einsum("bhkf,bhke->bhfe", x.rk, v)
    Z = jnp.sum(x.fk, axis=2)
    return _normalise(jnp.einsum("bhgqf,bhfe->bhgqe", x.rq, S),
                      jnp.einsum("bhgqf,bhf->bhgq", x.fq, Z), eps)
  S0, Z0 = _empty_state(x, d.Dv, dk)
  m = None if dk is None else dk.m
  qp = None if dk is None else dk.qp
  kp = None if dk is None else dk.kp
  ref0 = jnp.zeros((1,), jnp.int32) if dk is None else kp[:, 0]
  off = d.Tk - d.Tq
  runs = None if seg is None else seg.runs
  if runs is not None and off:
    raise C.AttentionError(f"segment resets need Tq == Tk, got {d.Tq} and {d.Tk}")
  if not causal:
    num, den = _bidirectional(x, v, S0, Z0, dk, chunk, runs)
  elif off >= 0:
    if off:
      S0, Z0, ref0 = _absorb(S0, Z0, ref0, x.rk[:, :, :off], x.fk[:, :, :off],
                             v[:, :, :off], None if kp is None else kp[:, :off], m)
    y = x.apply(lambda a: a, lambda a: a[:, :, off:])
    num, den, _ = causal_terms(y, v[:, :, off:], S0, Z0, ref0, chunk, m, qp,
                               None if kp is None else kp[:, off:], runs, parallel)
  else:
    y = x.apply(lambda a: a[:, :, :, -off:], lambda a: a)
    num, den, _ = causal_terms(y, v, S0, Z0, ref0, chunk, m,
                               None if qp is None else qp[:, -off:], kp, parallel=parallel)
    pad = ((0, 0),) * 3 + ((-off, 0),)
    num, den = jnp.pad(num, pad + ((0, 0),)), jnp.pad(den, pad)
  out = _normalise(num, den, eps)
  if dk is not None:
    out = poison(out, _ordered(dk, off, causal, None if seg is None else seg.starts))
  return out if seg is None else poison(out, seg.ok)


def _bidirectional(x: Features, v, S0, Z0, dk: Decay | None, chunk, runs=None):
  """Numerator and normaliser of attention over all keys (Tq == Tk), weighted by
  e^(-m |p_i - p_j|) (ALiBi's Decay) or not, within segment runs (B|1, T) or not:
  forward scan + backward scan - the diagonal."""
  flip = jnp.flip
  m, fwd, bwd = None, (jnp.zeros((1,), jnp.int32),), (jnp.zeros((1,), jnp.int32),)
  if dk is not None:
    qpr, kpr = -flip(dk.qp, 1), -flip(dk.kp, 1)
    m, fwd, bwd = dk.m, (dk.kp[:, 0], dk.qp, dk.kp), (kpr[:, 0], qpr, kpr)
  rr = None if runs is None else flip(runs, 1)
  num_f, den_f, _ = causal_terms(x, v, S0, Z0, fwd[0], chunk, m, *fwd[1:], runs=runs)
  xr = x.apply(lambda a: flip(a, 3), lambda a: flip(a, 2))
  num_b, den_b, _ = causal_terms(xr, flip(v, 2), S0, Z0, bwd[0], chunk, m, *bwd[1:],
                                 runs=rr)
  g = 1.0 if dk is None else _gain(dk.m, jnp.abs(dk.qp - dk.kp))  # (B|1, H, G, T)
  diag = lambda a, b: jnp.sum(a * b[:, :, None], axis=-1) * g     # q_i . k_i, decayed
  num = num_f + flip(num_b, 3) - diag(x.rq, x.rk)[..., None] * v[:, :, None]
  den = den_f + flip(den_b, 3) - diag(x.fq, x.fk)
  return num, den

def positioned(d, fq, fk, vh, name, *, causal, eps, chunk, positions=None, q_pos=None,
               k_pos=None, q_seg=None, k_seg=None, parallel=None):
  """`kernel_attention` of φ(q) (B, H, G, Tq, F), φ(k) (B, H, Tk, F), v under a call's
  positions and segment ids (linear's and performer's common tail). Returns
  (B, H, G, Tq, Dv).

  Segment ids (`attention.core.common`: query i attends key j only if their ids are equal):
  self-attention of a packed row (Tq == Tk, one side given, or the same array for both)
  resets (S, Z) at each segment start in the O(N) forms (`segment_runs`: ids in
  contiguous runs, else NaN rows); anything else (cross-attention, two arrays of ids)
  is the segment mask on the implied weights, exact for any ids but O(Tq Tk): a
  query's keys of its own segment are not a prefix or a run of the keys. parallel:
  the causal form's `chunk_parallel` (None: on a GPU only).
  """
  pos = P.prepare(name, positions, d, q_pos, k_pos)
  if pos is not None and pos.alibi and not causal and d.Tq != d.Tk:
    C.refuse(name, "positions='alibi' without causal=True when Tq != Tk",
             "the bidirectional decay e^(-m |i - j|) is a forward and a backward scan "
             "over one sequence; queries and keys of different lengths have no common "
             "order to scan")
  one_row = d.Tq == d.Tk and (q_seg is None or k_seg is None or q_seg is k_seg)
  if (q_seg is not None or k_seg is not None) and not one_row:
    qs, ks = C.check_segments(q_seg, k_seg, d, name)
    w = grouped_weights(fq, fk, d, causal=causal, eps=eps, pos=pos,
                        mask=C.segment_mask(qs, ks)[:, :, None])
    return jnp.einsum("bhgqk,bhke->bhgqe", w, vh)
  return kernel_attention(features(fq, fk, pos), vh, d, causal=causal, eps=eps,
                          chunk=chunk, dk=decay(pos, d, fq.dtype),
                          seg=segment_runs(name, q_seg, k_seg, d), parallel=parallel)


# ---- RNN form: the decode API ---------------------------------------------------

@dataclasses.dataclass(frozen=True)
class LinearState:
  """RNN state of linear attention: S (B, Hkv, F, Dv) and Z (B, Hkv, F), float32;
  with ALiBi, one per query head, S (B, Hkv, G, F, Dv) and Z (B, Hkv, G, F), decayed to
  the last key's position ref (B,) int32 (None without ALiBi).

  Its size does not depend on how many tokens were decoded; `pos` counts them.
  """
  S: jax.Array
  Z: jax.Array
  pos: jax.Array
  name: str = dataclasses.field(metadata=dict(static=True), default="linear")
  ref: jax.Array | None = None

  @property
  def nbytes(self) -> int:
    return self.S.size * self.S.dtype.itemsize + self.Z.size * self.Z.dtype.itemsize


jax.tree_util.register_dataclass(LinearState, data_fields=["S", "Z", "pos", "ref"],
                                 meta_fields=["name"])


def init_linear_state(name, *, batch, num_kv_heads, head_dim, v_head_dim=None,
                      dtype=jnp.float32, feature_dim=None, max_len=None, positions=None,
                      num_heads=None, **unused):
  """An empty (S, Z) state; feature_dim: φ's output size if it differs from head_dim.
  With ALiBi `positions`, num_heads (query heads) sizes the per-head states."""
  del max_len, unused  # O(1) state: the capacity is unbounded
  F = head_dim if feature_dim is None else feature_dim
  Dv = head_dim if v_head_dim is None else v_head_dim
  ct = C.compute_dtype(dtype)
  if positions is not None:
    P.refuse_unless_taken(name, P.as_spec(positions).kind)
  if positions is None or P.as_spec(positions).kind != "alibi":
    return LinearState(jnp.zeros((batch, num_kv_heads, F, Dv), ct),
                       jnp.zeros((batch, num_kv_heads, F), ct), jnp.zeros((), jnp.int32),
                       name)
  if not num_heads:
    raise C.AttentionError(f"{name}: an ALiBi decode state has one (S, Z) per query head; "
                           "pass num_heads= to init_decode_state")
  G = num_heads // num_kv_heads
  return LinearState(jnp.zeros((batch, num_kv_heads, G, F, Dv), ct),
                     jnp.zeros((batch, num_kv_heads, G, F), ct), jnp.zeros((), jnp.int32),
                     name, jnp.zeros((batch,), jnp.int32))


def kernel_step(state: LinearState, d: C.Dims, fq, fk, vh, *, eps, chunk, positions=None,
                q_pos=None, k_pos=None, parallel=None):
  """The RNN form: T new tokens (causal among themselves) through the state, at
  positions q_pos, k_pos (default: state.pos onwards). Returns (B, H, G, T, Dv) and
  the new state. linear's and performer's decode step."""
  pos = P.prepare(state.name, positions, d, q_pos, k_pos, offset=state.pos)
  dk = decay(pos, d, fq.dtype)
  if (dk is None) != (state.ref is None):
    raise C.AttentionError(
        f"{state.name} decode: the state was made {'with' if state.ref is not None else 'without'}"
        f" ALiBi positions but the step is {'without' if dk is None else 'with'}; make "
        "it with init_decode_state(..., positions=<the step's spec>, num_heads=Hq)")
  x = features(fq, fk, pos)
  if dk is None:
    ref0 = jnp.zeros((1,), jnp.int32)
  else:    # an empty state decays from the first new key's position
    ref0 = jnp.where(state.pos == 0, dk.kp[:, 0], state.ref)
  num, den, (S, Z, ref) = causal_terms(x, vh, state.S, state.Z, ref0, chunk,
                                       *(() if dk is None else (dk.m, dk.qp, dk.kp)),
                                       parallel=parallel)
  out = _normalise(num, den, eps)
  if dk is None:
    ref = None
  else:    # the new keys continue the sequence: ordered after the state's last key
    kp = jnp.broadcast_to(dk.kp, (ref0.shape[0], dk.kp.shape[1]))
    keys = Decay(dk.m, dk.qp, jnp.concatenate([ref0[:, None], kp], axis=1))
    ok = _ordered(keys, 1, True)
    out = jnp.where(ok[:, None, None, None, None], out, jnp.nan)
    ref = jnp.broadcast_to(ref, (state.S.shape[0],))
  return out, dataclasses.replace(state, S=S, Z=Z, ref=ref, pos=state.pos + fq.shape[3])


# ---- implied weights: the (Tq, Tk) matrix the variant applies to v, for heat maps ------

def normalised_weights(fq, fk, d: C.Dims, *, causal, eps, pos: P.Pos | None = None,
                       q_seg=None, k_seg=None, name="linear"):
  """φ(q)·φ(k) / (Σ_j φ(q)·φ(k_j) + eps) over the keys each query may see.

  fq: (B, Hkv, G, Tq, F), fk: (B, Hkv, Tk, F) (padding keys zeroed); pos: the call's
  prepared positions (`attention.core.positions.prepare`) or None. With RoPE the
  numerator's features are rotated (RoFormer's form), so weights can be negative;
  with ALiBi every term carries its decay e^(-m |i - j|); with segment ids q_seg
  (B|1, Tq), k_seg (B|1, Tk), only keys of the query's segment. Returns (B, Hq, Tq,
  Tk): the weights with out = weights @ v, the same eps in the denominator as the
  attention itself (shared by linear and performer).
  """
  sm = C.segment_mask(*C.check_segments(q_seg, k_seg, d, name))
  w = grouped_weights(fq, fk, d, causal=causal, eps=eps, pos=pos,
                      mask=None if sm is None else sm[:, :, None])
  B, Hkv, G, Tq, Tk = w.shape
  return w.reshape(B, Hkv * G, Tq, Tk)


def grouped_weights(fq, fk, d: C.Dims, *, causal, eps, pos: P.Pos | None = None,
                    mask=None):
  """`normalised_weights` on the grouped layout, (B, Hkv, G, Tq, Tk); mask: None or
  bool broadcastable to it (the keys each query may see, besides causal)."""
  x = features(fq, fk, pos)
  num = jnp.einsum("bhgqf,bhkf->bhgqk", x.rq, x.rk)        # rotated with RoPE
  s = num if not x.rotated else jnp.einsum("bhgqf,bhkf->bhgqk", fq, fk)   # φ(q)·φ(k)
  if pos is not None and pos.alibi:
    g = _gain(decay(pos, d, fq.dtype).m, jnp.abs(pos.q[:, :, None] - pos.k[:, None]))
    num, s = num * g, s * g
  if causal:
    mask = C.and_mask(mask, C.causal_mask(d.Tq, d.Tk))
  if mask is not None:
    s = jnp.where(mask, s, 0.0)
    num = jnp.where(mask, num, 0.0)
  return num / (jnp.sum(s, axis=-1, keepdims=True) + eps)


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


# How linear attention and performer take positions (their records say so).
KERNEL_POSITIONS = {
    "rope": "φ(q), φ(k) rotated in the numerator only (RoFormer's form), every form",
    "rope2d": "φ(q), φ(k) rotated by (row, column) in the numerator only, every form",
    "alibi": "e^(-m (i - j)) on every term: a per-head decay of the (S, Z) state"}

# How linear attention and performer honour segment ids (their records say so).
KERNEL_SEGMENTS = (
    "a state reset: self-attention of a packed row (Tq == Tk; one side given, or the "
    "same array twice) restarts (S, Z), numerator and normaliser, at each segment start: "
    "causal, inside and between the chunks of the scan; non-causal, in a forward and a "
    "backward scan (in place of the parallel form); ids must be contiguous runs (a row "
    "where an id recurs after another, or q_seg != k_seg, is NaN); otherwise "
    "(cross-attention, two arrays) the segment mask on the implied weights, O(Tq Tk). "
    "Decode: none (one sequence per row)")
