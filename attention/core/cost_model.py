"""Cost model: FLOPs, transcendentals, bytes moved and temporary memory of a call.

The accounting follows the JHU slides' tables (seeds/003):
  naive attention: O(b n^2 d) compute, O(b n d + b m n^2) IO (m = heads); the
  projections, when a model adds them, bring the O(b n d^2) compute and d^2 IO.
  flash attention: the same compute, but only O(N) extra memory and IO
  O(b n d * n/block_q), because the n x n matrix never leaves the chip/cache.

Conventions (checked against XLA's `compiled.cost_analysis()` in tests):
  * a multiply-add is 2 FLOPs; exp/tanh/log count as transcendentals, not FLOPs;
  * every elementwise op on the (Tq, Tk) score matrix counts 1 FLOP per element
    (`SOFTMAX_FLOPS_PER_SCORE` of them for a masked, max-subtracted softmax);
  * bytes are main-memory traffic: inputs read, outputs written, and for the naive
    path the fp32 score matrix written once and read once per softmax pass.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from attention.core.common import Dims

# max, subtract, sum, normalise, scale: elementwise ops per score of a softmax.
SOFTMAX_FLOPS_PER_SCORE = 5
# fp32 accesses per score of the naive path: the slides' b*m*n^2 IO term. XLA's own
# count for the compiled naive graph (logits written; read by max, exp, sum and
# normalise fusions; probabilities written and read by P@V) is about 12 on CPU,
# which is what this constant reproduces (tests/attention/test_cost.py checks it).
NAIVE_SCORE_PASSES = 12
MODES = ("fwd", "fwd_bwd", "decode")


@dataclasses.dataclass(frozen=True)
class Cost:
  """flops: floating-point ops; transcendentals: exp/tanh/log count;
  bytes: main-memory bytes moved; temp_bytes: peak temporaries beyond in/out."""
  flops: float
  transcendentals: float
  bytes: float
  temp_bytes: float

  def __add__(self, other: "Cost") -> "Cost":
    return Cost(*(a + b for a, b in zip(dataclasses.astuple(self),
                                        dataclasses.astuple(other))))


def visible_pairs(Tq: int, Tk: int, causal: bool) -> int:
  """Number of (query, key) pairs a causal (bottom-right) or full mask allows."""
  if not causal:
    return Tq * Tk
  i = np.arange(Tq)
  return int(np.clip(i + (Tk - Tq) + 1, 0, Tk).sum())


def io_bytes(d: Dims, itemsize: int) -> float:
  """Reading q, k, v and writing out once."""
  return itemsize * (d.B * d.Tq * d.Hq * (d.D + d.Dv) + d.B * d.Tk * d.Hkv * (d.D + d.Dv))


def dense(d: Dims, *, mode: str, itemsize: int, score_flops: float = 0.0,
          score_transcendentals: float = 0.0, extra_flops: float = 0.0,
          score_bytes: float = 0.0, extra_bytes: float = 0.0, qk: bool = True) -> Cost:
  """Naive path that materialises the full (Tq, Tk) matrix (causal or not).

  score_flops / score_transcendentals: extra work per (q, k) pair of a score function.
  extra_flops: work independent of Tk (e.g. projecting q through W).
  score_bytes: extra bytes moved per pair (e.g. additive's (Tq, Tk, A) temporary).
  extra_bytes: bytes independent of Tk (parameters, projected or normalised q/k).
  qk: False when the score does not use q.k (location-based scores).
  """
  pairs = d.B * d.Hq * d.Tq * d.Tk
  mm = 2 * pairs * ((d.D if qk else 0) + d.Dv)
  flops = mm + pairs * (SOFTMAX_FLOPS_PER_SCORE + score_flops) + extra_flops
  trans = pairs * (1 + score_transcendentals)
  byt = io_bytes(d, itemsize) + (NAIVE_SCORE_PASSES * 4 + score_bytes) * pairs + extra_bytes
  temp = (2 * 4 + score_bytes / 2) * pairs
  if mode == "fwd":
    return Cost(flops, trans, byt, temp)
  if mode == "fwd_bwd":
    # backward: dV = P^T dO, dP = dO V^T, dS -> dQ, dK; softmax-backward ~4 ops per pair.
    bwd = 2 * pairs * (2 * (d.D if qk else 0) + 2 * d.Dv) + pairs * (4 + 2 * score_flops)
    return Cost(flops + bwd + extra_flops, trans, 3 * byt, temp * 2)
  if mode == "decode":
    return decode_kv(d, itemsize=itemsize)
  raise ValueError(f"cost mode must be one of {MODES}, got {mode!r}")


def tiled(d: Dims, *, mode: str, itemsize: int, causal: bool, block_q: int) -> Cost:
  """Flash: the same matmuls over visible blocks only, O(N) temporaries.

  Each q block streams all of K and V once: IO = q + out + n_q_blocks * (k + v).
  """
  pairs = d.B * d.Hq * visible_pairs(d.Tq, d.Tk, causal)
  nq = -(-d.Tq // block_q)
  mm = 2 * pairs * (d.D + d.Dv)
  flops = mm + pairs * SOFTMAX_FLOPS_PER_SCORE
  kv = d.B * d.Tk * d.Hkv * (d.D + d.Dv) * itemsize
  byt = io_bytes(d, itemsize) + (nq - 1) * kv
  # out accumulator, row max, row sum, log-sum-exp: fp32, O(N).
  temp = 4 * d.B * d.Hq * d.Tq * (d.Dv + 3)
  if mode == "fwd":
    return Cost(flops, pairs, byt, temp)
  if mode == "fwd_bwd":
    # recompute S, then dV, dP, dQ, dK: 2.5x the forward matmuls at D == Dv.
    bwd = 2 * pairs * (3 * d.D + 2 * d.Dv) + pairs * 4
    return Cost(flops + bwd, 2 * pairs, 3 * byt, temp + 4 * d.B * d.Hq * d.Tq * d.D)
  if mode == "decode":
    return decode_kv(d, itemsize=itemsize)
  raise ValueError(f"cost mode must be one of {MODES}, got {mode!r}")


def decode_kv(d: Dims, *, itemsize: int, cache_itemsize: float | None = None) -> Cost:
  """One decode step of Tq new tokens against a KV cache of Tk positions.

  The slides' per-token cost: O(b n d) compute and O(b m n + b n d) IO; the cache
  read dominates. cache_itemsize: bytes per cached element (1 for int8 + scales).
  """
  c = itemsize if cache_itemsize is None else cache_itemsize
  pairs = d.B * d.Hq * d.Tq * d.Tk
  flops = 2 * pairs * (d.D + d.Dv) + pairs * SOFTMAX_FLOPS_PER_SCORE
  byt = (c * d.B * d.Tk * d.Hkv * (d.D + d.Dv)
         + itemsize * d.B * d.Tq * d.Hq * (d.D + d.Dv) + 4 * pairs)
  return Cost(flops, pairs, byt, 4 * pairs)


def gathered_pairs(d: Dims, *, name: str, mode: str, itemsize: int, pairs: float,
                   kv_bytes: float) -> Cost:
  """Cost of a blocked variant that computes `pairs` (query, key) scores from K/V
  blocks it first gathers (kv_bytes of fp32 copies): local and sparse.

  Forward: 2 (D + Dv) + softmax FLOPs per pair, one exp per pair, the inputs and
  outputs plus the gathered blocks written and read, and NAIVE_SCORE_PASSES fp32
  passes over the scores. Backward: 2 (2 D + 2 Dv) + 4 FLOPs per pair, 3x the bytes.
  Decode steps are the variants' own (local: a rolling cache; sparse: a KV cache).
  """
  flops = 2 * pairs * (d.D + d.Dv) + SOFTMAX_FLOPS_PER_SCORE * pairs
  byt = io_bytes(d, itemsize) + 2 * kv_bytes + NAIVE_SCORE_PASSES * 4 * pairs
  temp = 2 * 4 * pairs + kv_bytes
  if mode == "fwd":
    return Cost(flops, pairs, byt, temp)
  if mode == "fwd_bwd":
    bwd = 2 * pairs * (2 * d.D + 2 * d.Dv) + 4 * pairs
    return Cost(flops + bwd, pairs, 3 * byt, 2 * temp)
  raise ValueError(f"cost mode for '{name}' must be one of {MODES}, got {mode!r}")
