"""The words of a variants page's seed table (studies.variants.seeds): a row's mean and
standard error, a verdict against another row in words, the rows it is ahead of, the
row of softmax's implementations, the line for rows whose seeds agree far closer than
softmax's, and the small joins of names. studies.variants.seeds re-exports them.
"""
from __future__ import annotations

import numpy as np

from studies.core import protocol

MIN_SEEDS = protocol.MIN_SEEDS


def mean_se(xs) -> tuple[float, float, int]:
  """(mean, standard error of the mean: sample sd / sqrt(n), nan for one value, n)."""
  xs = np.asarray(xs, float)
  return float(xs.mean()), (float(xs.std(ddof=1) / np.sqrt(len(xs))) if len(xs) > 1
                            else float("nan")), len(xs)


def against(verdicts: dict, v: str, ref: str, fmt: str, n: dict) -> str:
  """`v`'s verdict against `ref` in the page's words (`page_verdicts`' Verdict.text:
  better / worse at Holm-adjusted p < 0.05, else unresolved, with the difference, its
  95% interval and the adjusted p; "equal on every seed" for identical values; no
  verdict from fewer than MIN_SEEDS seeds of either). n: {variant: seeds}."""
  if v == ref:
    return "—"
  x = verdicts.get((v, ref))
  if x is None or x.word == "few":
    have = ", ".join(f"`{y}` {n.get(y, 0)}" for y in (ref, v))
    return f"needs ≥ {MIN_SEEDS} seeds of both (seeds: {have})"
  return x.text(fmt)


def ahead_of(verdicts: dict, v: str) -> list:
  """The seeded variants other than `v` and softmax that `v` beats in `page_verdicts`
  (pairs whose rates were chosen alike only)."""
  out = []
  for (a, b), x in verdicts.items():
    if "softmax" in (a, b) or v not in (a, b):
      continue
    if (a == v and x.word == "better") or (b == v and x.word == "worse"):
      out.append(b if a == v else a)
  return sorted(out)


def group_row(impl: list, worst: float, verdicts: dict, fmt: str, counts: dict,
              version: int) -> str:
  """The seed table's row of softmax's implementations (protocol.implementations): the
  largest difference of any of them from softmax (seed for seed), and under version 1
  the verdicts its family still holds for them, grouped by word (a display change:
  the family is unchanged); under version 2 none (their equality is the numerics
  tests' business, not a verdict's)."""
  same = "identical to softmax on every seed" if worst == 0 else (
      f"largest difference from softmax {protocol.diff_text(worst, fmt).lstrip('+')} "
      "(seed for seed)")
  if version < 2:
    by_word = {}
    for v in impl:
      w = against(verdicts, v, "softmax", fmt, counts)
      by_word.setdefault(w.split(" (")[0], []).append(f"`{v}`")
    cell = ("a group, not comparisons under version 2; version 1's family counts them: "
            + "; ".join(f"{w} ({', '.join(vs)})" for w, vs in by_word.items()))
  else:
    cell = "a group, not comparisons (their equality: the numerics tests)"
  return (f"| softmax's implementations: {_names(impl)} | {same} | — | — | {cell} | — |")


# A seeded row whose seeds spread (max − min) less than this fraction of softmax's gets
# a line saying that its seeds did reach its runs (issue 97: Shakespeare's old `local`
# rows, 1.8215, 1.8218 and 1.8218 nats/char where softmax's spread 0.023).
TIGHT = 0.1


def tight_lines(by: dict, fmt: str) -> list[str]:
  """["", one line] naming the seeded rows of `by` ({variant: {seed: figure}}) whose
  seeds spread less than TIGHT of softmax's, and why that is not a seed that failed to
  reach them: `seed_figures` takes a seed run only under its row's config with that
  seed alone changed, and config.seed draws both the initial parameters
  (trainer.checkpoint) and the training batches (data.pipeline); [] where none is."""
  spread = lambda q: max(q.values()) - min(q.values())
  if len(by.get("softmax", {})) < 2 or spread(by["softmax"]) <= 0:
    return []
  ref = spread(by["softmax"])
  tight = [v for v, q in sorted(by.items())
           if v != "softmax" and len(q) > 1 and spread(q) < TIGHT * ref]
  if not tight:
    return []
  names = ", ".join(f"`{v}` ({fmt.format(spread(by[v]))})" for v in tight)
  return ["", f"{names} spread{'s' if len(tight) == 1 else ''} less than a tenth of "
          f"softmax's {fmt.format(ref)} over {'its' if len(tight) == 1 else 'their'} "
          "seeds, though each seed run was trained under its row's config with the seed "
          "alone changed (another fingerprint), and the seed draws both the initial "
          "parameters and the order of the training batches: the runs agree, no seed "
          "failed to reach them."]


def _n(k: int, noun: str) -> str:
  return f"{k} {noun}" + ("" if k == 1 else "s")


def _names(vs) -> str:
  """`a`, `b`, `c`: variant names as the page sets them."""
  return ", ".join(f"`{v}`" for v in vs)
