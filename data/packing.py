"""Packing variable-length examples into fixed-length rows with segment ids.

Padded batches spend compute on padding (Multi30k's length-bucketed batches: about a
quarter of the computed tokens, results/packing). Packing lays several examples end to
end in one row of fixed length, as the Flax WMT and LM1B examples do; each token
carries its example's segment id (1, 2, ... within the row; 0 = padding, a segment of
its own) and its position within the example (restarting at 0 per segment), so that
attention (`attention.core.common`: q_seg, k_seg), positions and losses see each example
as if it were alone.

  rows = first_fit_decreasing(lens_NC, cap_C, window=1024)   # which examples per row
  cols = place(x_NL, rows, L)     # {"x": (R, L), "seg": (R, L), "pos": (R, L)}

An example has C streams packed side by side (Multi30k: its source and its target,
C = 2, so that example i's source and target segments have the same id in their rows
and the decoder's cross-attention can match them; ListOps: C = 1). It fits a row when
every stream fits.

Why first-fit decreasing over windows, hand-written: no library the project uses packs
(tf.data's bucketing and seqio's packing need TensorFlow; Flax's examples pack greedily
in stream order, which leaves ~9% of Multi30k's 64-token rows as padding, results/
packing). Sorting a window of consecutive examples by length, longest first, then
putting each into the first open row with room (Johnson's FFD: within 11/9 of the
fewest rows) leaves ~4%. The window keeps the packing local to the epoch's order
(a row holds examples that are close in the shuffled order, never the whole epoch's
longest ones together) and the cost linear in the epoch: O(N * window / 4) row
checks, vectorised over the open rows (~0.3 s for Multi30k's 29k examples).
"""
from __future__ import annotations

import numpy as np


def first_fit_decreasing(lens_NC, cap_C, window: int = 1024,
                         max_segments: int = 0) -> list[np.ndarray]:
  """Rows of example indices: each window of `window` consecutive examples, longest
  first (by total length over streams; ties keep their order), each put into the first
  row of its window where every stream fits (cap_C tokens), or a new row.

  lens_NC: (N, C) int lengths (N examples, C streams); an example longer than a cap
    in any stream is an error (truncate it first). cap_C: (C,) row lengths.
  max_segments: at most this many examples per row (0: no limit), e.g. a classifier's
    label slots per row.
  Returns a list of int64 arrays (the examples of each row, in packing order),
  rows of each window in the order they were opened; every example in exactly one row.
  """
  lens = np.asarray(lens_NC, np.int64)
  if lens.ndim == 1:
    lens = lens[:, None]
  cap = np.asarray(cap_C, np.int64).reshape(-1)
  if lens.shape[1] != cap.shape[0]:
    raise ValueError(f"lens_NC has {lens.shape[1]} streams but cap_C has {cap.shape[0]}")
  too_long = np.nonzero(np.any(lens > cap, axis=1))[0]
  if len(too_long):
    i = int(too_long[0])
    raise ValueError(f"example {i} has lengths {lens[i].tolist()}, longer than a row "
                     f"({cap.tolist()}): truncate examples to the row length first")
  if window < 1:
    raise ValueError(f"window must be a positive number of examples, got {window}")
  rows = []
  for s in range(0, len(lens), window):
    idx = np.arange(s, min(s + window, len(lens)))
    order = idx[np.argsort(-lens[idx].sum(1), kind="stable")]
    used = np.zeros((len(order), len(cap)), np.int64)       # at most one row each
    count = np.zeros(len(order), np.int64)
    members: list[list[int]] = []
    for i in order:
      n = len(members)
      ok = np.all(used[:n] + lens[i] <= cap, axis=1)
      if max_segments:
        ok &= count[:n] < max_segments
      j = int(np.argmax(ok)) if n and ok.any() else n
      if j == n:
        members.append([])
      used[j] += lens[i]
      count[j] += 1
      members[j].append(int(i))
    rows += [np.asarray(m, np.int64) for m in members]
  return rows


def place(x_NL, rows: list[np.ndarray], L: int, num_rows: int | None = None) -> dict:
  """Examples laid end to end in rows of L tokens.

  x_NL: (N, L0) int examples, left-aligned and padded with 0 (a token id 0 is padding:
    an example's length is its count of nonzero ids up to the last one).
  rows: the examples of each row (`first_fit_decreasing`); their lengths fit L.
  num_rows: rows of the output (default len(rows)); rows past len(rows) are all
    padding (seg 0), rows past num_rows are an error.
  Returns {"x": (R, L) x's dtype, "seg": (R, L) int32 (1, 2, ... per row, 0 at padding),
  "pos": (R, L) int32 (0, 1, ... within each example, 0 at padding)}.
  """
  R = len(rows) if num_rows is None else int(num_rows)
  if len(rows) > R:
    raise ValueError(f"{len(rows)} rows do not fit num_rows={R}")
  x = np.zeros((R, L), x_NL.dtype)
  seg = np.zeros((R, L), np.int32)
  pos = np.zeros((R, L), np.int32)
  lens = lengths(x_NL)
  for r, members in enumerate(rows):
    t = 0
    for k, i in enumerate(members):
      n = int(lens[i])
      if t + n > L:
        raise ValueError(f"row {r}: its examples need more than L={L} tokens")
      x[r, t:t + n] = x_NL[i, :n]
      seg[r, t:t + n] = k + 1
      pos[r, t:t + n] = np.arange(n)
      t += n
  return {"x": x, "seg": seg, "pos": pos}


def lengths(x_NL) -> np.ndarray:
  """(N,) int64: tokens of each left-aligned, 0-padded example (up to its last
  nonzero id, so an inner id 0 would count)."""
  nz = np.asarray(x_NL) != 0
  L = nz.shape[1]
  last = L - np.argmax(nz[:, ::-1], axis=1)
  return np.where(nz.any(1), last, 0).astype(np.int64)


def padding_fraction(seg_BT_list) -> float:
  """Share of the computed tokens that are padding (segment id 0), over arrays of
  segment ids or of token ids (0 = padding) of any shapes."""
  tot = sum(int(np.size(s)) for s in seg_BT_list)
  pad = sum(int(np.sum(np.asarray(s) == 0)) for s in seg_BT_list)
  return pad / max(tot, 1)
