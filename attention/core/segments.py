"""Segment ids and key padding as the state variants honour them: what `linear`,
`performer` and the gated family (attention.core.gated: retention, gla, deltanet,
gated_deltanet) share.

A state variant (one state per batch row, written by every key) honours a key-padding
mask by writing nothing for a padded key, and the segment ids of a packed row by
resetting its state where a segment starts; a decode step takes no ids (its state is
one sequence per row).

  key_padding             the (B|1, Tk) key mask of a call, refusing any other mask
  Segments, segment_runs  a packed row's segment starts and runs, and whether its ids
                          are contiguous runs (what a reset can honour)
  poison                  NaN on the rows whose ids or positions a form cannot honour
  refuse_decode_segments  the decode steps' refusal of segment ids
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from attention.core import common as C


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


class Segments(NamedTuple):
  """A packed row's segments as the reset forms use them (`segment_runs`).

  starts (B|1, T) bool: a segment starts here (its id differs from the previous
  token's; position 0 is never one: it continues the initial state, empty in a
  forward pass); runs (B|1, T) int32: the number of starts up to each position;
  ok (B|1,) bool: the row's ids are what a reset can honour (see `segment_runs`).
  """
  starts: jax.Array
  runs: jax.Array
  ok: jax.Array


def segment_runs(name, q_seg, k_seg, d: C.Dims) -> Segments | None:
  """`Segments` of the ids of a packed row (Tq == Tk), or None if none are given.

  A state reset honours the segment mask (query i attends key j only if their ids are
  equal) when the queries' and keys' ids are one sequence (q_seg == k_seg, or one side
  given) laid out in contiguous runs (no id recurs after another: sequences end to end,
  padding one more run); then a run is a segment. `ok` is False for a row that breaks
  it (it has more runs than distinct ids, or q_seg != k_seg somewhere): the reset forms
  return NaN there, as ALiBi's decay does for positions out of order, rather than
  silently attend otherwise than the mask. O(T log T) (a sort of the ids per row).
  """
  qs, ks = C.check_segments(q_seg, k_seg, d, name)
  if qs is None:
    return None
  starts = jnp.concatenate([jnp.zeros_like(ks[:, :1], bool), ks[:, 1:] != ks[:, :-1]], 1)
  runs = jnp.cumsum(starts, axis=1, dtype=jnp.int32)
  srt = jnp.sort(ks, axis=1)
  ok = jnp.sum(srt[:, 1:] != srt[:, :-1], axis=1, dtype=jnp.int32) == runs[:, -1]
  return Segments(starts, runs, ok & jnp.all(qs == ks, axis=1))


def poison(out, ok):
  """out (B, ...) with the rows where ok (B|1,) is False set to NaN."""
  return jnp.where(ok.reshape(ok.shape + (1,) * (out.ndim - 1)), out, jnp.nan)


def refuse_decode_segments(name, q_seg, k_seg):
  """Raises AttentionError if segment ids reach a decode step (linear, performer and
  the gated family: their state is one sequence per batch row)."""
  if q_seg is not None or k_seg is not None:
    C.refuse(name, "segment ids (q_seg/k_seg) in a decode step",
             "a decode state holds one sequence per batch row, so there is no segment "
             "to reset within it; start a new sequence from a fresh init_decode_state "
             "(the forward pass takes the ids of packed rows)")
