"""Count-based floors of the length study: what an n-gram model of a run's own training
bytes scores on the bytes a run is scored on (`python -m scripts.lm_length --floors`).

Why: a gap between two rows is only about attention at a length once the exact
reference has learned more than local byte statistics. If flash scores no better than
a 2-gram of the same 3M bytes, the study is in early training, where the row whose
layer finds local statistics first wins (a short convolution does at once), and its
verdicts are about learning speed at that budget. The floor says which, by rule
(studies.length.results.reading, the decision page's "what would change this answer").

The model: interpolated Witten-Bell smoothing (Witten & Bell 1991; the interpolated
form of Chen & Goodman 1999, sec. 2.6), orders 1 to `ORDERS[-1]`, over byte windows:
  P_n(w | h) = (c(h w) + T(h) P_{n-1}(w | h')) / (c(h) + T(h)),  P_0 = 1/256,
where c counts the n-grams of the training windows (every byte of one real, weight
> 0, inside one window), T(h) is the number of distinct bytes seen after h, and h' is
h without its first byte; a context h never seen gives P_{n-1}. A byte whose window
holds fewer than n - 1 bytes before it is scored by the highest order its window
allows: the context ends at the window's start, as the models' does.
Hand-written (numpy, seconds for 3M bytes) because the maintained libraries are the
wrong size: nltk.lm counts in Python dicts (minutes to hours at 3M bytes), KenLM needs
a C++ build this machine's CI lacks.

Training bytes: the run's own batches (task.train_batch(step) for each of the preset's
steps, at the run's length, batch and seed): the same 3,014,656 bytes a reporting
seed's run trains on. Scored: the run's test bytes (the first eval_tokens of the test
split, in windows of the length), split into recall positions and the rest as the
runs are (studies.length.evaluate.split_sums, data.recall_mask with the preset's n).
"""
from __future__ import annotations

import os

import numpy as np

from studies.core import pages

ORDERS = (1, 2, 3, 4, 5, 6)
FLOORS = "floors.json"
VOCAB = 256


def _grams(y_BT, real_BT, n: int):
  """(codes, ok) of the n-grams ending at each t >= n - 1 of every row: codes int64
  (B, T - n + 1), base VOCAB; ok: every byte of the n-gram real."""
  B, T = y_BT.shape
  codes = np.zeros((B, T - n + 1), np.int64)
  ok = np.ones((B, T - n + 1), bool)
  for j in range(n):
    codes = codes * VOCAB + y_BT[:, j:T - n + 1 + j]
    ok &= real_BT[:, j:T - n + 1 + j]
  return codes, ok


def fit(batches, orders=ORDERS) -> dict:
  """Counts of the training windows: {n: (grams, counts, contexts, context counts,
  distinct followers)}, each sorted by code. batches: iterable of {"y": int (B, T),
  "w": float (B, T)} (bytes 0..255; weight 0: padding, never counted)."""
  codes = {n: [] for n in orders}
  for b in batches:
    y, real = np.asarray(b["y"], np.int64), np.asarray(b["w"]) > 0
    for n in orders:
      c, ok = _grams(y, real, n)
      codes[n].append(c[ok])
  tables = {}
  for n in orders:
    u, cnt = np.unique(np.concatenate(codes[n]), return_counts=True)
    hu, first = np.unique(u // VOCAB, return_index=True)
    tables[n] = (u, cnt, hu, np.add.reduceat(cnt, first), np.diff(np.append(first, len(u))))
  return tables


def _lookup(keys, values, q):
  """values at the positions of q in sorted keys; 0 where q is absent."""
  i = np.minimum(np.searchsorted(keys, q), len(keys) - 1)
  return np.where(keys[i] == q, values[i], 0)


def probs(tables: dict, y_BT) -> dict:
  """{n: P_n of each byte of y_BT given its window's bytes before it, float64 (B, T)}
  for every order fitted (a byte with fewer than n - 1 bytes before it: P_{t+1})."""
  y = np.asarray(y_BT, np.int64)
  p = np.full(y.shape, 1.0 / VOCAB)
  out = {}
  for n in sorted(tables):
    u, cnt, hu, hc, ht = tables[n]
    g, _ = _grams(y, np.ones(y.shape, bool), n)
    h = g // VOCAB
    c_hw, c_h, t_h = _lookup(u, cnt, g), _lookup(hu, hc, h), _lookup(hu, ht, h)
    lower = p[:, n - 1:]
    p = p.copy()
    p[:, n - 1:] = np.where(c_h > 0, (c_hw + t_h * lower) / np.maximum(c_h + t_h, 1), lower)
    out[n] = p
  return out


def score(tables: dict, batches, recall_n: int) -> dict:
  """{n: studies.length.evaluate.from_sums} of each order over `batches` (the scored
  bytes: weight > 0), the recall positions by data.recall_mask(y, recall_n)."""
  from data.recall import recall_mask
  from studies.length.evaluate import add_sums, from_sums, split_sums
  sums = {n: None for n in tables}
  for b in batches:
    y, w = np.asarray(b["y"]), np.asarray(b["w"], np.float32)
    mask = recall_mask(y, recall_n)
    for n, p in probs(tables, y).items():
      sums[n] = add_sums(sums[n], split_sums(-np.log(p), w, mask))
  return {n: from_sums(s) for n, s in sums.items()}


def measure(p, lengths=None, seeds=None, data_dir=None, log=print) -> dict:
  """{"cells": {length: {seed: {n: from_sums}}}, "orders", "seeds", "tokens_per_run"}:
  each reporting seed's floors at each length (the reference's run config: the bytes
  do not depend on the row)."""
  from data import pipeline
  from studies.length import presets, runner
  seeds = list(seeds or presets.SEEDS)
  out = {}
  for L in lengths or p.lengths:
    for s in seeds:
      c = presets.make_config(p, runner.REFERENCE, L, p.grid[0], s, data_dir)
      task = pipeline.create(c)
      tables = fit(task.train_batch(i) for i in range(int(c.num_train_steps)))
      tc = c.copy_and_resolve_references()
      tc.eval_split = "test"
      test = pipeline.create(tc)
      k = int(tc.eval_batches)
      batches = (b for i, b in enumerate(test.eval_batches()) if i < k)
      out.setdefault(str(L), {})[str(s)] = {str(n): v for n, v in
                                            score(tables, batches, p.recall_n).items()}
      best = min(out[str(L)][str(s)].values(), key=lambda v: v["bits_per_byte"])
      log(f"floors at {L:,}, seed {s}: best {best['bits_per_byte']:.3f} bits/byte")
  return {"preset": p.name, "orders": list(ORDERS), "seeds": seeds,
          "tokens_per_run": p.tokens_per_run, "recall_n": p.recall_n, "cells": out}


def summary(f: dict | None, L) -> dict | None:
  """{n: {"bits", "recall", "rest", "lo", "hi"}} at length L: the seeds' mean of each
  order's bits/byte (total, recall positions, the rest) and the range of the total;
  None where the floors were not measured at L."""
  by = ((f or {}).get("cells") or {}).get(str(L))
  if not by:
    return None
  out = {}
  for n in map(str, f["orders"]):
    xs = [v[n] for v in by.values()]
    mean = lambda k: float(np.mean([x[k] for x in xs if x[k] is not None]))
    out[int(n)] = {"bits": mean("bits_per_byte"), "recall": mean("recall_bits"),
                   "rest": mean("rest_bits"), "seeds": len(xs),
                   "lo": min(x["bits_per_byte"] for x in xs),
                   "hi": max(x["bits_per_byte"] for x in xs)}
  return out


def place(f: dict | None, L, bits: float) -> tuple | None:
  """(k, best n, best bits) for a model's test bits/byte at L: k the highest order whose
  floor it beats (0: not even the 1-gram's), the best order's floor beside it; None
  where there are no floors at L."""
  s = summary(f, L)
  if not s:
    return None
  k = max([n for n, v in s.items() if bits < v["bits"]], default=0)
  best = min(s, key=lambda n: s[n]["bits"])
  return k, best, s[best]["bits"]


def path_of(out: str) -> str:
  return os.path.join(out, FLOORS)


def beats(k: int) -> str:
  """Where a figure falls among the floors, in words, from place's k."""
  if k == 0:
    return "beats no floor, not even the 1-gram's"
  return f"beats the {k}-gram floor" + ("" if k == ORDERS[-1] else f", not the {k + 1}-gram's")


def floor_lines(d: dict) -> list[str]:
  """The page's section: each order's floor at each length (the seeds' mean, range, and
  its recall / rest parts), then where each row's test figure falls among them."""
  f = d.get("floors")
  out = ["## Floors: n-gram models of each run's own training bytes", ""]
  if not f:
    return out + [f"Not measured yet: `python -m scripts.lm_length --preset={d['preset']} "
                  "--floors` (seconds)."]
  run = f.get("run") or {}
  out += [f"`{run.get('command', 'python -m scripts.lm_length --floors')}` on "
          f"{run.get('date', '?')}: an interpolated Witten-Bell n-gram (studies/length/"
          f"floors.py) counted over the {f['tokens_per_run']:,} bytes each reporting seed's "
          "run trains on at that length, scored on the same test bytes as the runs (context "
          "cut at each window's start, as theirs is); the seeds' mean, their range, and the "
          f"recall / rest parts (n = {f['recall_n']}). A model that has learned more than "
          "local byte statistics scores below every floor.", ""]
  Ls = [L for L in map(str, d["lengths"]) if summary(f, L)]
  rows = []
  for n in f["orders"]:
    row = [f"{n}-gram"]
    for L in Ls:
      v = summary(f, L)[n]
      row.append(f"{v['bits']:.3f} ({v['lo']:.3f}–{v['hi']:.3f}); {v['recall']:.3f} / "
                 f"{v['rest']:.3f}")
    rows.append(row)
  out += pages.table(["floor"] + [f"{int(L):,}: bits/byte (range); recall / rest"
                                  for L in Ls], rows)
  for L in Ls:
    at = [(r, d["cells"][r][L]["test"]) for r in d["rows"]
          if "test" in d["cells"].get(r, {}).get(L, {})]
    if at:
      out += ["", f"At {int(L):,}: " + "; ".join(
          f"`{r}` ({x:.3f}) {beats(place(f, L, x)[0])}" for r, x in at) + "."]
  return out
