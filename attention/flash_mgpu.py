"""`flash_mgpu`: FlashAttention for Hopper (sm90) in Pallas' Mosaic GPU dialect.

FlashAttention-3's design (Shah et al. 2024) written with `jax.experimental.pallas.
mosaic_gpu`: warpgroup matrix multiplies (wgmma) on operands in swizzled shared memory,
tiles brought in by the bulk tensor copy engine (TMA), and warp specialisation. Every
kernel runs three warpgroups per program: two compute warpgroups, each owning one tile
of rows, and one memory warpgroup that streams the other operand's tiles through a ring
of `stages` shared-memory slots (a `ready` barrier per slot, which the copy completes,
and a `free` barrier, on which both compute warpgroups arrive when done with it).

  q, do, out: (B, Tq_p, Hq, D)   k, v: (B, Tk_p, Hkv, D)   lse, delta: (B, Hq, Tq_p)

  forward  grid (Hq, Tq_p / 2·block_q, B). Each compute warpgroup holds a (block_q, D)
           query tile and runs the online softmax over the key/value tiles. Softmax
           runs in base 2 (scores scaled by scale·log2 e once, so that exp is one
           `exp2`); the residual is lse₂ = m₂ + log₂ l per row, float32. The two
           compute warpgroups alternate through a two-arrival `sched` barrier (the
           "ping-pong" of FlashAttention-3): while one runs its softmax, the other's
           wgmma runs.
  dQ       grid (Hq, Tq_p / 2·block_q, B): a query tile per compute warpgroup (q, dO,
           lse, delta in shared memory); K, V streamed; dQ += dS K.
  dK, dV   grid (Hq, Tk_p / 2·block_k, B): a key tile per compute warpgroup (K, V in
           shared memory); q, dO, lse and delta streamed; dV += Pᵀ dO, dK += dSᵀ Q,
           written per query head and summed over the G heads of a group in float32
           by the wrapper.
  delta = rowsum(dO ∘ O) in float32 is computed in plain JAX between the passes.

Causal (bottom-right aligned, query i sees keys j <= i + Tk - Tq, for Tq <= Tk) and the
padded key tail are the only masks: a compute warpgroup splits its loop into the tiles
that need no mask, the tiles on the diagonal (or holding padded keys), and the tiles it
never needs. The memory warpgroup streams the union of both compute warpgroups'
tiles, so a warpgroup that needs fewer still takes part in every step of the
ring (it waits for the tile, to keep its barrier phases in step, and frees it);
that is also what stops it from freeing a slot twice before its partner used it.

What it adds to jax's `pallas/ops/gpu/attention_mgpu.py` (same dialect, which this
was written after reading): the causal backward (jax's raises NotImplementedError),
bfloat16 (jax's shared-memory buffers are float16 only), the contract's scale,
bottom-right causal alignment for Tq != Tk, lengths that are not a multiple of the
tiles (padded; padded keys masked), head dims that are not a multiple of 64 (zero-
padded), and the contract's checks and refusals. Its tiling (64-row wgmma tiles,
(8, 64) tiles with a 128-byte swizzle) follows the dialect's rules.

Refused by name: masks other than causal, segment ids, ALiBi (RoPE rotates q and k
first), float64, and jax_enable_x64 in interpret mode (the interpreter hangs under
it; on a GPU the kernels are traced with x64 off, so their indices stay int32).
Causal with Tq > Tk: the first Tq - Tk rows see no key and are zeros; the kernels
run on the others. Inputs of any other float dtype compute in `dtype` (bfloat16
unless given; float16 allowed): float32 inputs are rounded to it, and the output
comes back in q's dtype.

Backends: on a Hopper GPU the kernels compile with Mosaic GPU. Elsewhere (the CPU) they
run in Mosaic GPU's interpret mode (`plgpu.InterpretGPUParams`: shared memory, barriers,
TMA and the warpgroups simulated), which is exact but slow: for tests on tiny shapes.
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from attention.core import common as C
from attention.core import cost_model as cost_lib
from attention.core import positions as P
from attention.core.common import unexpected
from attention.core.kv_cache import KV_CACHE
from attention.core.registry import Refused, Variant, register
from attention.core.scores import SCALED_DOT

# Pallas and its Mosaic GPU dialect, imported at the first call (`_load`): the import
# takes about 0.35 s, which every process that imports `attention` would pay.
pl = plgpu = None


def _load():
  global pl, plgpu
  if plgpu is None:
    from jax.experimental import pallas
    from jax.experimental.pallas import mosaic_gpu
    pl, plgpu = pallas, mosaic_gpu

NAME = "flash_mgpu"
LOG2E = math.log2(math.e)
WGMMA_ROWS = 64          # one warpgroup's wgmma tile height
LANE = 64                # head dims padded to a multiple of this (the 128-byte swizzle)
DEFAULT_BLOCK_Q = 64     # query rows per compute warpgroup (2 per program)
DEFAULT_BLOCK_K = 128    # key rows per streamed tile (forward and dQ)
DEFAULT_STAGES = 2       # shared-memory ring slots
COMPUTE_WGS = 2
DTYPES = ("bfloat16", "float16")
COMPUTE_REGISTERS, MEMORY_REGISTERS = 232, 40


class _Cfg(NamedTuple):
  """Static description of one call (a custom_vjp nondiff argument: hashable)."""
  Tq: int          # true lengths
  Tk: int
  Tq_p: int        # padded: multiples of 2·bq and of bk (and 2·bk for dK/dV)
  Tk_p: int
  bq: int
  bk: int
  stages: int
  G: int
  causal: bool
  scale: float
  interpret: bool


def default_interpret() -> bool:
  """Interpret mode unless the default backend is a GPU."""
  return jax.default_backend() != "gpu"


def _kernel(body, **kw):
  """plgpu.kernel with the launch shape every kernel here uses (two compute warpgroups
  and a memory warpgroup) and approximate exp2 on the GPU, traced with jax_enable_x64
  off whatever the caller's setting: its loop counters, tile and slot indices are then
  int32 (under x64 a Python int bound makes a fori_loop's counter int64, which meets
  the int32 grid indices: a TypeError). Its operands and results have explicit dtypes
  (16-bit tiles, float32 residuals), the same either way. (Interpret mode under x64
  is refused by `flash_mgpu`: the interpreter's threads hang at barriers there.)"""
  interp = kw.pop("interpret")
  call = plgpu.kernel(body, num_threads=COMPUTE_WGS + 1, thread_name="wg",
                      compiler_params=plgpu.CompilerParams(approx_math=True),
                      interpret=plgpu.InterpretGPUParams() if interp else None, **kw)

  def run(*args):
    with jax.enable_x64(False):
      return call(*args)
  return run


def _smem(shape, dtype):
  """A shared-memory tile in wgmma's swizzled layout."""
  return plgpu.SMEM(shape, dtype, transforms=(plgpu.TilingTransform((8, LANE)),
                                              plgpu.SwizzleTransform(128)))


def _acc(shape):
  return plgpu.layout_cast(jnp.zeros(shape, jnp.float32), plgpu.Layout.WGMMA)


def _mma(c, *terms, during=None, stage=None):
  """[acc + a @ b for (acc, a, b, shape) in terms] by wgmma, issued together and
  awaited once; acc None starts from zero. `during()` runs after the issue, while the
  tensor cores work. On the GPU an accumulator is fed to wgmma in place
  (`ACC.init`); Mosaic GPU's interpreter has no rule for that form, so in interpret
  mode each product starts from zero and is added after: the same sums."""
  inplace = not c.interpret

  def issue(*refs):
    for ref, (_, a, b, _) in zip(refs, terms):
      plgpu.wgmma(ref, a, b)
    if during is not None:
      during()
    return None if inplace else [r[...] for r in refs]

  if inplace:
    inits = tuple(plgpu.ACC.init(_acc(sh) if acc is None else acc)
                  for acc, _, _, sh in terms)
    out = pl.run_state(lambda refs: issue(*refs))(inits)
    return list(out)
  # The interpreter also reads a wgmma's A only from shared memory: a register operand
  # (P, dS) goes through this warpgroup's staging tile (`stage`, interpret mode only).
  ts = []
  for acc, a, b, sh in terms:
    if isinstance(a, jax.Array):
      stage[...] = a
      plgpu.commit_smem()
      a = stage
    ts.append((acc, a, b, sh))
  prods = pl.run_scoped(lambda *refs: _issue_all(refs, ts, during),
                        *(plgpu.ACC(sh, jnp.float32) for _, _, _, sh in ts))
  return [p if acc is None else acc + p for (acc, *_), p in zip(terms, prods)]


def _issue_all(refs, terms, during):
  for ref, (_, a, b, _) in zip(refs, terms):
    plgpu.wgmma(ref, a, b)
  if during is not None:
    during()
  return [r[...] for r in refs]


def _staging(c, rows, cols, dtype) -> tuple:
  """Interpret mode only: a (rows, cols) shared-memory tile per compute warpgroup
  through which `_mma` hands a register operand to wgmma."""
  return (_smem((COMPUTE_WGS, rows, cols), dtype),) if c.interpret else ()


def _at(stage, wg):
  return stage[0].at[wg] if stage else None


def _bcast(x, shape, dim):
  """A row (dim 0) or column (dim 1) vector broadcast over a (rows, cols) tile."""
  return lax.broadcast_in_dim(x, shape, [dim])


def _iota(shape, dim):
  return plgpu.broadcasted_iota(jnp.int32, shape, dim, layout=plgpu.Layout.WGMMA)


def _visible(c, rows, cols):
  """Which (query row, key column) pairs of a tile may attend (causal, key tail)."""
  ok = None
  if c.causal:
    ok = cols <= rows + (c.Tk - c.Tq)
  if c.Tk_p != c.Tk:
    tail = cols < c.Tk
    ok = tail if ok is None else ok & tail
  return ok


def _kv_steps(c, row_end, bk):
  """The key tiles that the rows below `row_end` need (a traced int32)."""
  if not c.causal:
    return c.Tk_p // bk
  return pl.cdiv(jnp.minimum(row_end + (c.Tk - c.Tq), c.Tk), jnp.array(bk, jnp.int32))


def _max(a, b):
  """max of two loop bounds, a Python int when both are (a traced constant closed over
  by a `run_state` region fails Mosaic GPU's lowering)."""
  return max(a, b) if isinstance(a, int) and isinstance(b, int) else jnp.maximum(a, b)


def _full_steps(c, row0, bk):
  """The key tiles that every row of the tile starting at row0 sees whole: no mask."""
  clean = c.Tk // bk                  # tiles with no padded key
  if not c.causal:
    return clean
  return jnp.minimum(lax.div(row0 + (c.Tk - c.Tq) + 1, jnp.array(bk, jnp.int32)), jnp.array(clean, jnp.int32))


def _produce(lo, hi, S, load, frees):
  """The memory warpgroup: steps lo .. hi-1 through a ring of S shared-memory slots
  (step i in slot (i - lo) % S). `load(i, slot)` issues step i's copies (each
  completes its slot's `ready` barrier); before a slot is refilled, and at the end for
  the last S steps, every barrier in `frees` (both compute warpgroups arrive on each)
  is awaited, so that each phase of every barrier is observed."""
  plgpu.set_max_registers(MEMORY_REGISTERS, action="decrease")
  for i in range(S):
    pl.when(lo + i < hi)(functools.partial(load, lo + i, i))

  def release(i):
    slot = lax.rem(i - lo, jnp.array(S, jnp.int32))
    for bar in frees:
      plgpu.barrier_wait(bar.at[slot])
    return slot

  @pl.loop(lo + S, hi)
  def _(i):
    load(i, release(i))

  @pl.loop(_max(hi - S, lo), hi)
  def _(i):
    release(i)


def _stream_kv(hi, S, bk, refs, tiles, ready, free, b, hk):
  """The memory warpgroup of the forward and dQ kernels: K and V tiles 0 .. hi-1 of
  batch row b, key/value head hk, through `_produce`'s ring."""
  def load(j, slot):
    sl = (b, pl.ds(j * bk, bk), hk)
    for ref, tile, bar in zip(refs, tiles, ready):
      plgpu.copy_gmem_to_smem(ref.at[sl], tile.at[slot], bar.at[slot])
  _produce(0, hi, S, load, free)


# ---------------------------------------------------------------------------- forward

def _forward(c: _Cfg, q, k, v):
  """(out (B, Tq_p, Hq, D) in q's dtype, lse₂ (B, Hq, Tq_p) float32)."""
  B, _, Hq, D = q.shape
  dtype, bq, bk = q.dtype, c.bq, c.bk
  S = min(c.stages, c.Tk_p // bk)
  s2 = c.scale * LOG2E

  def body(q_ref, k_ref, v_ref, o_ref, lse_ref, smem, bars):
    qo_s, k_s, v_s, lse_s, *stage = smem
    q_ready, k_ready, v_ready, k_free, v_free, sched = bars
    b, h, t = lax.axis_index("b"), lax.axis_index("h"), lax.axis_index("q")
    wg = lax.axis_index("wg")
    hk = lax.div(h, jnp.array(c.G, jnp.int32))
    hi_cta = _kv_steps(c, (t + 1) * (2 * bq), bk)

    def sync():                     # the ping-pong of the two compute warpgroups
      plgpu.barrier_arrive(sched)
      plgpu.barrier_wait(sched)

    @pl.when(wg < COMPUTE_WGS)
    def _compute():
      plgpu.set_max_registers(COMPUTE_REGISTERS, action="increase")
      row0 = t * (2 * bq) + wg * bq
      qs = qo_s.at[wg]
      plgpu.copy_gmem_to_smem(q_ref.at[b, pl.ds(row0, bq), h], qs, q_ready.at[wg])
      plgpu.barrier_wait(q_ready.at[wg])
      hi = _kv_steps(c, row0 + bq, bk)
      full = _full_steps(c, row0, bk)
      m = plgpu.layout_cast(jnp.full((bq,), -jnp.inf, jnp.float32),
                            plgpu.Layout.WGMMA.reduce(1))
      l = plgpu.layout_cast(jnp.zeros((bq,), jnp.float32), plgpu.Layout.WGMMA.reduce(1))
      acc = _acc((bq, D))
      plgpu.barrier_wait(k_ready.at[0])     # hi >= 1: every row sees a key
      pl.when(wg == 1)(sync)

      def step(j, carry, masked):
        acc, m, l = carry
        slot = lax.rem(j, jnp.array(S, jnp.int32))

        def qk(ref):
          plgpu.wgmma(ref, qs, k_s.at[slot].transpose((1, 0)))
          sync()
          return ref[...]
        s = pl.run_scoped(qk, plgpu.ACC((bq, bk), jnp.float32))
        plgpu.barrier_arrive(k_free.at[slot])
        s = s * s2
        if masked:
          ok = _visible(c, _iota((bq, bk), 0) + row0, _iota((bq, bk), 1) + j * bk)
          s = jnp.where(ok, s, -jnp.inf)
        m_new = jnp.maximum(m, s.max(axis=1))
        alpha = jnp.exp2(m - m_new)
        p = jnp.exp2(s - _bcast(m_new, s.shape, 0))
        acc = acc * _bcast(alpha, acc.shape, 0)
        l = l * alpha + p.sum(axis=1)
        p16 = p.astype(dtype)
        acc, l, m_new, p16 = lax.optimization_barrier((acc, l, m_new, p16))
        plgpu.barrier_arrive(sched)          # softmax done: the other may use the cores
        plgpu.barrier_wait(v_ready.at[slot])
        plgpu.barrier_wait(sched)

        nxt = j + 1
        nxt_slot = lax.rem(nxt, jnp.array(S, jnp.int32))

        def wait_next_k():                   # while P·V runs
          @pl.when(nxt < hi)
          def _():
            plgpu.barrier_wait(k_ready.at[nxt_slot])
        [acc] = _mma(c, (acc, p16, v_s.at[slot], (bq, D)), during=wait_next_k,
                     stage=_at(stage, wg))
        plgpu.barrier_arrive(v_free.at[slot])
        return acc, m_new, l

      def skip(j, _):                        # a tile the partner needs, not this one
        slot = lax.rem(j, jnp.array(S, jnp.int32))
        plgpu.barrier_wait(k_ready.at[slot])
        plgpu.barrier_arrive(k_free.at[slot])
        sync()
        plgpu.barrier_wait(v_ready.at[slot])
        plgpu.barrier_arrive(v_free.at[slot])
        sync()

      carry = (acc, m, l)
      carry = lax.fori_loop(0, full, functools.partial(step, masked=False), carry)
      if c.causal or c.Tk_p != c.Tk:
        carry = lax.fori_loop(full, hi, functools.partial(step, masked=True), carry)
      if c.causal:
        # the first skipped K was not waited for inside the last step (nxt < hi)
        lax.fori_loop(hi, hi_cta, skip, None)
      pl.when(wg == 0)(sync)
      acc, m, l = carry
      acc = acc * _bcast(1.0 / l, acc.shape, 0)
      qs[...] = acc.astype(dtype)
      lse_s.at[wg][...] = m + jnp.log2(l)
      plgpu.commit_smem()
      plgpu.copy_smem_to_gmem(qs, o_ref.at[b, pl.ds(row0, bq), h])
      plgpu.copy_smem_to_gmem(lse_s.at[wg], lse_ref.at[b, h, pl.ds(row0, bq)])
      plgpu.wait_smem_to_gmem(0)

    pl.when(wg == COMPUTE_WGS)(functools.partial(
        _stream_kv, hi_cta, S, bk, (k_ref, v_ref), (k_s, v_s), (k_ready, v_ready),
        (k_free, v_free), b, hk))

  out_type = (jax.ShapeDtypeStruct(q.shape, dtype),
              jax.ShapeDtypeStruct((B, Hq, c.Tq_p), jnp.float32))
  scratch = (_smem((COMPUTE_WGS, bq, D), dtype), _smem((S, bk, D), dtype),
             _smem((S, bk, D), dtype), plgpu.SMEM((COMPUTE_WGS, bq), jnp.float32),
             *_staging(c, bq, bk, dtype)), (
             plgpu.Barrier(num_barriers=COMPUTE_WGS),
             plgpu.Barrier(num_barriers=S), plgpu.Barrier(num_barriers=S),
             plgpu.Barrier(num_arrivals=COMPUTE_WGS, num_barriers=S),
             plgpu.Barrier(num_arrivals=COMPUTE_WGS, num_barriers=S),
             plgpu.Barrier(num_arrivals=COMPUTE_WGS))
  return _kernel(body, out_type=out_type, scratch_types=scratch,
                 grid=(Hq, c.Tq_p // (2 * bq), B), grid_names=("h", "q", "b"),
                 interpret=c.interpret)(q, k, v)


# ---------------------------------------------------------------------------- dQ

def _dq(c: _Cfg, q, k, v, do, lse, delta):
  """dQ (B, Tq_p, Hq, D) in q's dtype."""
  B, _, Hq, D = q.shape
  dtype, bq, bk = q.dtype, c.bq, c.bk
  S = min(c.stages, c.Tk_p // bk)
  s2 = c.scale * LOG2E

  def body(q_ref, k_ref, v_ref, do_ref, lse_ref, dl_ref, dq_ref, smem, bars):
    q_s, do_s, lse_s, dl_s, k_s, v_s, *stage = smem
    in_ready, k_ready, v_ready, k_free, v_free = bars
    b, h, t = lax.axis_index("b"), lax.axis_index("h"), lax.axis_index("q")
    wg = lax.axis_index("wg")
    hk = lax.div(h, jnp.array(c.G, jnp.int32))
    hi_cta = _kv_steps(c, (t + 1) * (2 * bq), bk)

    @pl.when(wg < COMPUTE_WGS)
    def _compute():
      plgpu.set_max_registers(COMPUTE_REGISTERS, action="increase")
      row0 = t * (2 * bq) + wg * bq
      rows = pl.ds(row0, bq)
      qs, dos = q_s.at[wg], do_s.at[wg]
      bars = [in_ready.at[wg * 4 + i] for i in range(4)]
      plgpu.copy_gmem_to_smem(q_ref.at[b, rows, h], qs, bars[0])
      plgpu.copy_gmem_to_smem(do_ref.at[b, rows, h], dos, bars[1])
      plgpu.copy_gmem_to_smem(lse_ref.at[b, h, rows], lse_s.at[wg], bars[2])
      plgpu.copy_gmem_to_smem(dl_ref.at[b, h, rows], dl_s.at[wg], bars[3])
      for bar in bars:
        plgpu.barrier_wait(bar)
      lse = plgpu.load(lse_s.at[wg], layout=plgpu.Layout.WGMMA.reduce(1))
      dl = plgpu.load(dl_s.at[wg], layout=plgpu.Layout.WGMMA.reduce(1))
      hi = _kv_steps(c, row0 + bq, bk)
      full = _full_steps(c, row0, bk)

      def step(j, dq, masked):
        slot = lax.rem(j, jnp.array(S, jnp.int32))
        plgpu.barrier_wait(k_ready.at[slot])
        plgpu.barrier_wait(v_ready.at[slot])

        s, dp = _mma(c, (None, qs, k_s.at[slot].transpose((1, 0)), (bq, bk)),
                     (None, dos, v_s.at[slot].transpose((1, 0)), (bq, bk)))
        plgpu.barrier_arrive(v_free.at[slot])
        p = jnp.exp2(s * s2 - _bcast(lse, s.shape, 0))
        if masked:
          ok = _visible(c, _iota((bq, bk), 0) + row0, _iota((bq, bk), 1) + j * bk)
          p = jnp.where(ok, p, 0.0)
        ds = p * (dp - _bcast(dl, dp.shape, 0))

        [dq] = _mma(c, (dq, ds.astype(dtype), k_s.at[slot], (bq, D)), stage=_at(stage, wg))
        plgpu.barrier_arrive(k_free.at[slot])
        return dq

      def skip(j, _):
        slot = lax.rem(j, jnp.array(S, jnp.int32))
        plgpu.barrier_wait(k_ready.at[slot])
        plgpu.barrier_wait(v_ready.at[slot])
        plgpu.barrier_arrive(v_free.at[slot])
        plgpu.barrier_arrive(k_free.at[slot])

      dq = _acc((bq, D))
      dq = lax.fori_loop(0, full, functools.partial(step, masked=False), dq)
      if c.causal or c.Tk_p != c.Tk:
        dq = lax.fori_loop(full, hi, functools.partial(step, masked=True), dq)
      if c.causal:
        lax.fori_loop(hi, hi_cta, skip, None)
      qs[...] = (dq * c.scale).astype(dtype)
      plgpu.commit_smem()
      plgpu.copy_smem_to_gmem(qs, dq_ref.at[b, rows, h])
      plgpu.wait_smem_to_gmem(0)

    pl.when(wg == COMPUTE_WGS)(functools.partial(
        _stream_kv, hi_cta, S, bk, (k_ref, v_ref), (k_s, v_s), (k_ready, v_ready),
        (k_free, v_free), b, hk))

  scratch = (_smem((COMPUTE_WGS, bq, D), dtype), _smem((COMPUTE_WGS, bq, D), dtype),
             plgpu.SMEM((COMPUTE_WGS, bq), jnp.float32),
             plgpu.SMEM((COMPUTE_WGS, bq), jnp.float32),
             _smem((S, bk, D), dtype), _smem((S, bk, D), dtype),
             *_staging(c, bq, bk, dtype)), (
             plgpu.Barrier(num_barriers=COMPUTE_WGS * 4),
             plgpu.Barrier(num_barriers=S), plgpu.Barrier(num_barriers=S),
             plgpu.Barrier(num_arrivals=COMPUTE_WGS, num_barriers=S),
             plgpu.Barrier(num_arrivals=COMPUTE_WGS, num_barriers=S))
  return _kernel(body, out_type=jax.ShapeDtypeStruct(q.shape, dtype),
                 scratch_types=scratch, grid=(Hq, c.Tq_p // (2 * bq), B),
                 grid_names=("h", "q", "b"), interpret=c.interpret)(
                     q, k, v, do, lse, delta)


# ---------------------------------------------------------------------------- dK, dV

def _dkv(c: _Cfg, q, k, v, do, lse, delta):
  """(dK, dV) per query head, (B, Tk_p, Hq, D) each in k's dtype."""
  B, _, Hq, D = q.shape
  dtype, bq, bk = q.dtype, c.bq, c.bq      # key tiles of the query tile's height
  nq = c.Tq_p // bq
  S = min(c.stages, nq)
  s2 = c.scale * LOG2E
  off = c.Tk - c.Tq

  def first_q(col0):
    """The first query tile with a row that sees key col0 (causal), and the first
    whose every row sees every key of the tile at col0."""
    lo = jnp.maximum(lax.div(jnp.maximum(col0 - off, 0), jnp.array(bq, jnp.int32)), 0)
    clean = pl.cdiv(jnp.maximum(col0 + bk - 1 - off, 0), jnp.array(bq, jnp.int32))
    return lo, jnp.minimum(clean, jnp.array(nq, jnp.int32))

  def body(q_ref, k_ref, v_ref, do_ref, lse_ref, dl_ref, dk_ref, dv_ref, smem, bars):
    k_s, v_s, q_s, do_s, lse_s, dl_s, *stage = smem
    (kv_ready, q_ready, do_ready, lse_ready, dl_ready,
     q_free, do_free, lse_free, dl_free) = bars
    b, h, t = lax.axis_index("b"), lax.axis_index("h"), lax.axis_index("k")
    wg = lax.axis_index("wg")
    hk = lax.div(h, jnp.array(c.G, jnp.int32))
    lo_cta = first_q(t * (2 * bk))[0] if c.causal else 0

    @pl.when(wg < COMPUTE_WGS)
    def _compute():
      plgpu.set_max_registers(COMPUTE_REGISTERS, action="increase")
      col0 = t * (2 * bk) + wg * bk
      cols = pl.ds(col0, bk)
      ks, vs = k_s.at[wg], v_s.at[wg]
      plgpu.copy_gmem_to_smem(k_ref.at[b, cols, hk], ks, kv_ready.at[wg * 2])
      plgpu.copy_gmem_to_smem(v_ref.at[b, cols, hk], vs, kv_ready.at[wg * 2 + 1])
      plgpu.barrier_wait(kv_ready.at[wg * 2])
      plgpu.barrier_wait(kv_ready.at[wg * 2 + 1])
      if c.causal:
        lo, clean = first_q(col0)
      else:
        lo, clean = 0, 0

      def wait(slot):
        for bar in (q_ready, do_ready, lse_ready, dl_ready):
          plgpu.barrier_wait(bar.at[slot])

      def free(slot):
        for bar in (q_free, do_free, lse_free, dl_free):
          plgpu.barrier_arrive(bar.at[slot])

      def step(i, carry, masked):
        dk, dv = carry
        slot = lax.rem(i - lo_cta, jnp.array(S, jnp.int32))
        wait(slot)

        [sT] = _mma(c, (None, ks, q_s.at[slot].transpose((1, 0)), (bk, bq)))
        lse = plgpu.load(lse_s.at[slot], layout=plgpu.Layout.WGMMA.reduce(0))
        pT = jnp.exp2(sT * s2 - _bcast(lse, sT.shape, 1))
        if masked:
          ok = _visible(c, _iota((bk, bq), 1) + i * bq, _iota((bk, bq), 0) + col0)
          pT = jnp.where(ok, pT, 0.0)

        dv, dpT = _mma(c, (dv, pT.astype(dtype), do_s.at[slot], (bk, D)),
                       (None, vs, do_s.at[slot].transpose((1, 0)), (bk, bq)),
                       stage=_at(stage, wg))
        dl = plgpu.load(dl_s.at[slot], layout=plgpu.Layout.WGMMA.reduce(0))
        dsT = pT * (dpT - _bcast(dl, dpT.shape, 1))

        [dk] = _mma(c, (dk, dsT.astype(dtype), q_s.at[slot], (bk, D)), stage=_at(stage, wg))
        free(slot)
        return dk, dv

      def skip(i, _):
        slot = lax.rem(i - lo_cta, jnp.array(S, jnp.int32))
        wait(slot)
        free(slot)

      carry = (_acc((bk, D)), _acc((bk, D)))
      if c.causal:
        lax.fori_loop(lo_cta, lo, skip, None)
        carry = lax.fori_loop(lo, clean, functools.partial(step, masked=True), carry)
        carry = lax.fori_loop(clean, nq, functools.partial(step, masked=False), carry)
      else:
        carry = lax.fori_loop(0, nq, functools.partial(step, masked=False), carry)
      dk, dv = carry
      ks[...] = (dk * c.scale).astype(dtype)
      vs[...] = dv.astype(dtype)
      plgpu.commit_smem()
      plgpu.copy_smem_to_gmem(ks, dk_ref.at[b, cols, h])
      plgpu.copy_smem_to_gmem(vs, dv_ref.at[b, cols, h])
      plgpu.wait_smem_to_gmem(0)

    @pl.when(wg == COMPUTE_WGS)
    def _memory():
      def load(i, slot):
        rows = pl.ds(i * bq, bq)
        plgpu.copy_gmem_to_smem(q_ref.at[b, rows, h], q_s.at[slot], q_ready.at[slot])
        plgpu.copy_gmem_to_smem(do_ref.at[b, rows, h], do_s.at[slot], do_ready.at[slot])
        plgpu.copy_gmem_to_smem(lse_ref.at[b, h, rows], lse_s.at[slot], lse_ready.at[slot])
        plgpu.copy_gmem_to_smem(dl_ref.at[b, h, rows], dl_s.at[slot], dl_ready.at[slot])
      _produce(lo_cta, nq, S, load, (q_free, do_free, lse_free, dl_free))

  per_head = jax.ShapeDtypeStruct((B, c.Tk_p, Hq, D), dtype)
  ring = lambda n=1: plgpu.Barrier(num_arrivals=n, num_barriers=S)
  scratch = (_smem((COMPUTE_WGS, bk, D), dtype), _smem((COMPUTE_WGS, bk, D), dtype),
             _smem((S, bq, D), dtype), _smem((S, bq, D), dtype),
             plgpu.SMEM((S, bq), jnp.float32), plgpu.SMEM((S, bq), jnp.float32),
             *_staging(c, bk, bq, dtype)), (
             plgpu.Barrier(num_barriers=COMPUTE_WGS * 2),
             ring(), ring(), ring(), ring(),
             ring(COMPUTE_WGS), ring(COMPUTE_WGS), ring(COMPUTE_WGS), ring(COMPUTE_WGS))
  return _kernel(body, out_type=(per_head, per_head), scratch_types=scratch,
                 grid=(Hq, c.Tk_p // (2 * bk), B), grid_names=("h", "k", "b"),
                 interpret=c.interpret)(q, k, v, do, lse, delta)


# ---------------------------------------------------------------------------- the call

@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _core(c: _Cfg, q, k, v):
  return _forward(c, q, k, v)[0]


def _core_fwd(c, q, k, v):
  out, lse = _forward(c, q, k, v)
  return out, (q, k, v, out, lse)


def _core_bwd(c, res, do):
  q, k, v, out, lse = res
  do = do.astype(q.dtype)
  delta = jnp.einsum("bthd,bthd->bht", out.astype(jnp.float32), do.astype(jnp.float32))
  dq = _dq(c, q, k, v, do, lse, delta)
  dk, dv = _dkv(c, q, k, v, do, lse, delta)
  if c.G > 1:      # per query head -> per key/value head, summed in float32
    B, Tk_p, Hq, D = dk.shape
    group = lambda x: x.reshape(B, Tk_p, Hq // c.G, c.G, D).astype(jnp.float32).sum(3)
    dk, dv = group(dk).astype(k.dtype), group(dv).astype(v.dtype)
  return dq, dk, dv


_core.defvjp(_core_fwd, _core_bwd)


def _compute_dtype(dtype, requested=None):
  """The 16-bit dtype the kernels compute in for inputs of `dtype`: `requested`, else
  the input's own if it is bfloat16/float16, else bfloat16."""
  if requested is not None:
    if jnp.dtype(requested).name not in DTYPES:
      raise C.AttentionError(f"{NAME}: compute_dtype must be one of {', '.join(DTYPES)}, "
                             f"got {jnp.dtype(requested).name}")
    return jnp.dtype(requested)
  return jnp.dtype(dtype) if jnp.dtype(dtype).name in DTYPES else jnp.dtype(jnp.bfloat16)


def flash_mgpu(q, k, v, *, causal=False, mask=None, scale=None, block_q=None, block_k=None,
               stages=None, compute_dtype=None, interpret=None, positions=None, q_pos=None,
               k_pos=None, q_seg=None, k_seg=None, **kw):
  """Exact softmax attention by Mosaic GPU (Hopper) FlashAttention kernels (custom VJP).

  q: (B, Tq, Hq, D), k: (B, Tk, Hkv, D), v: (B, Tk, Hkv, Dv), Hq % Hkv == 0, float16,
    bfloat16 or float32 (computed in `compute_dtype`: the input's if 16-bit, else
    bfloat16; float32 inputs are rounded to it). float64 is refused, and so is
    jax_enable_x64 in interpret mode.
  causal: bottom-right aligned; with Tq > Tk the first Tq - Tk rows see no key and
    are zeros (the kernels run on the other rows).
  mask, q_seg/k_seg, positions='alibi': refused (see the module docstring); rope and
    rope2d rotate q and k first.
  scale: logits multiplier, 1/sqrt(D) unless given.
  block_q: query rows per compute warpgroup (a multiple of 64; default 64, so 128 per
    program); block_k: key rows per streamed tile of the forward and dQ kernels (a
    multiple of 64, default 128); stages: shared-memory ring slots (>= 2, default 2).
    The dK/dV kernel uses block_q for its key tiles too.
  interpret: run the kernels in Mosaic GPU interpret mode; default True unless JAX's
    default backend is a GPU.
  Returns (B, Tq, Hq, Dv) in q's dtype. Raises AttentionError for what it refuses.
  """
  unexpected(NAME, kw)
  _load()
  d = C.check_qkv(q, k, v, NAME)
  if mask is not None:
    C.refuse(NAME, "masks", "its kernels mask only causally and the padded key tail; "
             "use flash_pallas or sdpa for a mask")
  if q_seg is not None or k_seg is not None:
    C.refuse(NAME, "segment ids", NO_SEGMENTS)
  pos = P.prepare(NAME, positions, d, q_pos, k_pos)
  q, k = P.rotate_qk(pos, q, k)
  for name, x in (("q", q), ("k", k), ("v", v)):
    if not jnp.issubdtype(x.dtype, jnp.floating):
      raise C.AttentionError(f"{NAME}: {name} must be a float array, got {x.dtype}")
    if x.dtype == jnp.float64:
      raise C.AttentionError(f"{NAME}: float64 is not supported (the kernels compute in "
                             f"{' or '.join(DTYPES)}); use 'softmax' for float64")
  interpret = default_interpret() if interpret is None else bool(interpret)
  if interpret and jax.config.jax_enable_x64:
    raise C.AttentionError(
        f"{NAME}: jax_enable_x64 is on, under which Mosaic GPU's interpreter (the "
        "kernels off a GPU) waits forever at its barriers; turn x64 off around this "
        "call, or use flash_pallas or softmax")
  out_dtype = q.dtype
  if d.Tq == 0 or d.Tk == 0:
    return jnp.zeros((d.B, d.Tq, d.Hq, d.Dv), out_dtype)
  if causal and d.Tq > d.Tk:   # the first Tq - Tk rows see no key: the contract's zeros
    lead = d.Tq - d.Tk
    rest = flash_mgpu(q[:, lead:], k, v, causal=True, scale=C.default_scale(d.D, scale),
                      block_q=block_q, block_k=block_k, stages=stages,
                      compute_dtype=compute_dtype, interpret=interpret)
    return jnp.concatenate([jnp.zeros((d.B, lead, d.Hq, d.Dv), out_dtype), rest], axis=1)
  cd = _compute_dtype(q.dtype, compute_dtype)
  bq = _tile(block_q, DEFAULT_BLOCK_Q, "block_q")
  bk = _tile(block_k, DEFAULT_BLOCK_K, "block_k")
  stages = DEFAULT_STAGES if stages is None else int(stages)
  if stages < 2:
    raise C.AttentionError(f"{NAME}: stages must be >= 2, got {stages}")
  Tq_p = C.round_up(d.Tq, 2 * bq)
  Tk_p = C.round_up(d.Tk, math.lcm(bk, 2 * bq))
  Dp = C.round_up(max(d.D, d.Dv), LANE)
  c = _Cfg(Tq=d.Tq, Tk=d.Tk, Tq_p=Tq_p, Tk_p=Tk_p, bq=bq, bk=bk, stages=stages, G=d.G,
           causal=bool(causal), scale=float(C.default_scale(d.D, scale)),
           interpret=interpret)
  pad = lambda x, T: C.pad_axis(C.pad_axis(x.astype(cd), 1, T), 3, Dp)
  out = _core(c, pad(q, Tq_p), pad(k, Tk_p), pad(v, Tk_p))
  return out[:, :d.Tq, :, :d.Dv].astype(out_dtype)


def _tile(x, default, what):
  x = default if x is None else int(x)
  if x < WGMMA_ROWS or x % WGMMA_ROWS:
    raise C.AttentionError(f"{NAME}: {what} must be a positive multiple of {WGMMA_ROWS}, "
                           f"got {x}")
  return x


NO_SEGMENTS = ("its kernels mask only causally and the padded key tail; flash_pallas "
               "skips the tiles of other segments")


def _cost(d, *, causal=False, mode="fwd", itemsize=2, block_q=DEFAULT_BLOCK_Q, **kw):
  """flash's tiled cost: a program holds 2·block_q query rows."""
  return cost_lib.tiled(d, mode=mode, itemsize=itemsize, causal=causal, block_q=2 * block_q)


register(Variant(
    name=NAME, fn=flash_mgpu,
    refused_options={"sinks": (
        "its Hopper kernels start each row's running max and sum at -inf and 0 with"
        " no per-head logit to start them from (flash carries sinks exactly)")},
    paper="Shah et al. 2024 (FlashAttention-3), Pallas Mosaic GPU kernel for Hopper",
    time="O(N² D)", memory="O(N)", causal=True, masks="none",
    decode="KV cache (fp, int8 or fp8)", decode_impl=KV_CACHE, cost=_cost,
    family="exact", score=SCALED_DOT,
    kernel_options=("block_q", "block_k", "stages", "interpret"),
    summary="FlashAttention-3-style forward/backward in Pallas' Mosaic GPU dialect "
            "(wgmma, TMA, warp specialisation), bf16/fp16; interpret mode off-GPU",
    positions=P.takes_qk(Refused("the kernels take no bias; flash_pallas computes "
                                 "ALiBi's in its tile loops")),
    segments=Refused(NO_SEGMENTS), device="gpu"))
