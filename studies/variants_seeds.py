"""The seed spread of a variants page (studies.variants_page): the rows trained again
from other seeds (seeds.json beside the page, `--seeds`), their mean ± standard error,
and the verdicts against softmax and between rows (`against`: beyond 2 standard
errors of the difference, from MIN_SEEDS seeds of each side), with what the page can
and cannot tell apart at its budget (`separation`).
"""
from __future__ import annotations

import os

import numpy as np

from studies import pages
from studies.compare_variants import (METRIC, base_lr, chosen_lrs, fingerprints,
                                      make_config, quality, with_lr)


# The fewest seeds of each side that a verdict (better, worse, unresolved, equal) is
# given from (issue 40: "3 seeds, mean ± standard error"). Two seeds give a standard
# error from one degree of freedom: two seeds of multi30k's gla that agreed to 0.1 BLEU
# made a 2.4-point gap read as "worse" beyond 20 standard errors (2026-11-27).
MIN_SEEDS = 3


def mean_se(xs) -> tuple[float, float, int]:
  """(mean, standard error of the mean: sample sd / sqrt(n), nan for one value, n)."""
  xs = np.asarray(xs, float)
  return float(xs.mean()), (float(xs.std(ddof=1) / np.sqrt(len(xs))) if len(xs) > 1
                            else float("nan")), len(xs)


def against(stats: dict, v: str, ref: str, higher_better: bool, fmt: str) -> str:
  """`v`'s verdict against `ref` from {variant: (mean, se, n)} (mean_se): better /
  worse beyond two standard errors of the difference, else unresolved, with the
  difference ± its se; "equal on every seed" when both scored one value on all their
  seeds (the copy page's rows at 100%: "unresolved (Δ +0.00% ± 0.00%)" read as if
  something were in doubt). No verdict from fewer than MIN_SEEDS seeds of either."""
  if v == ref:
    return "—"
  if ref not in stats or min(stats[v][2], stats[ref][2]) < MIN_SEEDS:
    have = ", ".join(f"`{x}` {stats[x][2] if x in stats else 0}" for x in (ref, v))
    return f"needs ≥ {MIN_SEEDS} seeds of both (seeds: {have})"
  d = stats[v][0] - stats[ref][0]
  se = float(np.hypot(stats[v][1], stats[ref][1]))
  if d == 0 and se == 0:
    return f"equal on every seed ({fmt.format(stats[v][0])})"
  word = ("unresolved" if abs(d) <= 2 * se else
          "better" if (d > 0) == higher_better else "worse")
  return f"{word} (Δ {'+' if d >= 0 else '−'}{fmt.format(abs(d))} ± {fmt.format(se)})"


def seed_spread(task, preset, results, out, overrides=None) -> list:
  """Page lines: per variant with extra-seed runs in out/seeds.json (of this preset,
  under the config its row was trained with, at its chosen rate), its metric per
  seed, mean and range."""
  rows = {r["variant"]: r for r in results if r.get("status") == "ok"}
  lrs = chosen_lrs(task, preset, out, overrides)
  base = base_lr(task, preset, overrides)
  by = {}
  for s in pages.read_json(os.path.join(out, "seeds.json"), []):
    r0 = rows.get(s["variant"])
    if s["preset"] != preset or s["task"] != task or r0 is None:
      continue
    ov = with_lr(overrides, lrs.get(s["variant"]), base)
    want = fingerprints(make_config(task, preset, s["variant"],
                                    {**(ov or {}), "seed": s["seed"]}))
    if s["config"] in want:
      seed0 = int(make_config(task, preset, s["variant"], overrides).seed)
      by.setdefault(s["variant"], {seed0: quality(r0)})        # the row's own run
      by[s["variant"]][s["seed"]] = s["quality"]
  if not by:
    return []
  fmt = METRIC[task][3]
  lines = ["## Seed spread", "",
           "The same variant trained again from other seeds (initialisation, data order, "
           "dropout), by `--seeds`: a gap between two rows smaller than this spread is "
           "not evidence that one variant is better. Against softmax: the difference of "
           "the means and its standard error (the two variants' seed runs taken as "
           "independent samples); `better` or `worse` only beyond 2 standard errors, "
           "else `unresolved` (`equal on every seed` where both scored one value on all "
           f"their seeds); no verdict from fewer than {MIN_SEEDS} seeds of either "
           "(two seeds that happen to agree give a standard error near 0). Ahead of: "
           "the other seeded rows, softmax aside, that "
           "this row beats by the same test (pairs whose rates were chosen alike "
           "only); the test is about 5% likely to pass by chance for two variants "
           "that do not differ, and a page with many pairs will hold some such.", "",
           f"| variant | {METRIC[task][1]} per seed | mean ± s.e. | max − min "
           "| against softmax | ahead of |", "|---|---|---|---|---|---|"]
  stats = {v: mean_se([q[k] for k in sorted(q)]) for v, q in by.items()}
  unlike = unlike_softmax(rows, lrs, base)
  for v, q in sorted(by.items()):
    vals = [q[k] for k in sorted(q)]
    m, se, _ = stats[v]
    word = (against(stats, v, 'softmax', METRIC[task][2], fmt) if "softmax" in rows
            else "— (`softmax` has no row on this page)")
    if v in unlike and word.startswith(("better", "worse", "unresolved")):
      word = "not like for like, " + unlike[v] + " (" + word.split("(", 1)[1]
    ahead = ", ".join(f"`{w}`" for w in ahead_of(stats, v, METRIC[task][2], lrs, base))
    lines.append(f"| `{v}` | " + ", ".join(f"{fmt.format(q[k])} ({k})" for k in sorted(q))
                 + f" | {fmt.format(m)} ± {fmt.format(se)} | "
                 f"{fmt.format(max(vals) - min(vals))} | {word} | {ahead or '—'} |")
  return lines + [""] + separation(rows, by, stats, task, unlike)


def rates_alike(v: str, w: str, lrs: dict, base: float) -> bool:
  """Whether `v`'s and `w`'s rates were chosen alike, so a gap between them compares
  the variants, not the rates: both out of the lr sweep (or sharing softmax's rate by
  rule; `lrs`, chosen_lrs: {variant: rate}), both at the preset's rate `base`, or both
  at one rate."""
  swept = {x: lr for x, lr in lrs.items() if lr is not None}
  return (v in swept) == (w in swept) or swept.get(v, base) == swept.get(w, base)


def ahead_of(stats: dict, v: str, higher_better: bool, lrs: dict, base: float) -> list:
  """The seeded variants other than `v` and softmax that `v` beats beyond two standard
  errors of the difference (`against`), among those whose rate was chosen like `v`'s
  (`rates_alike`)."""
  return [w for w in sorted(stats) if w not in (v, "softmax")
          and rates_alike(v, w, lrs, base)
          and against(stats, v, w, higher_better, "{}").startswith("better")]


def unlike_softmax(rows: dict, lrs: dict, base: float) -> dict:
  """{variant: why} for the rows whose rate was not chosen like softmax's
  (`rates_alike`): one of the two came out of the lr sweep, the other runs at the
  preset's rate, so a gap between them mixes the variant with the rate."""
  if "softmax" not in rows or not any(lr is not None for lr in lrs.values()):
    return {}
  why = ("at the preset's rate, softmax at its swept one"
         if lrs.get("softmax") is not None else "swept, softmax at the preset's rate")
  return {v: why for v in rows
          if v != "softmax" and not rates_alike(v, "softmax", lrs, base)}


def _n(k: int, noun: str) -> str:
  return f"{k} {noun}" + ("" if k == 1 else "s")


def _names(vs) -> str:
  """`a`, `b`, `c`: variant names as the page sets them."""
  return ", ".join(f"`{v}`" for v in vs)


def separation(rows: dict, by: dict, stats: dict, task: str,
               unlike: dict | None = None) -> list[str]:
  """What the page can tell apart at its budget, from its own rows and seeds: the
  seeded variants that differ from softmax beyond 2 standard errors, those that scored
  softmax's value on every seed (`against`: equal), and the rows of one seed, whose
  gaps to softmax are set beside the widest seed range measured; the rows in `unlike`
  (unlike_softmax) are named apart and not judged."""
  fmt, hi = METRIC[task][3], METRIC[task][2]
  if "softmax" not in stats or not np.isfinite(stats["softmax"][1]):
    return []
  unlike = {v: w for v, w in (unlike or {}).items() if quality(rows[v]) is not None}
  seeded = [v for v in by if v != "softmax" and v not in unlike]
  few = sorted(v for v in seeded if min(stats[v][2], stats["softmax"][2]) < MIN_SEEDS)
  words = {v: against(stats, v, "softmax", hi, fmt) for v in seeded if v not in few}
  sep = sorted(v for v, w in words.items() if w.startswith(("better", "worse")))
  same = sorted(v for v, w in words.items() if w.startswith("equal"))
  single = sorted(v for v in rows if v not in by and v not in unlike
                  and quality(rows[v]) is not None)
  spread = max(max(q.values()) - min(q.values()) for q in by.values())
  s = "**What this page tells apart at this budget.** " + (
      ", ".join(f"`{v}` ({words[v].split(' ')[0]})" for v in sep)
      + f" against softmax, beyond 2 standard errors ({_n(len(words), 'variant')} "
      "seeded beside softmax)." if sep else
      f"None of the {_n(len(words), 'variant')} seeded beside softmax differs from it "
      "beyond 2 standard errors." if len(words) > 1 else
      f"`{next(iter(words))}`, seeded beside softmax, does not differ "
      "from it beyond 2 standard errors." if words else
      "" if few else "Only softmax ran several seeds.")
  if few:
    s += ((" " if words else "")
          + f"Not judged yet, with fewer than {MIN_SEEDS} seeds of softmax or their own: "
          + ", ".join(f"`{v}` ({stats[v][2]})" for v in few)
          + f" (softmax: {stats['softmax'][2]}).")
  if same:
    s += (f" {_names(same)} scored what softmax scored on every seed "
          f"({fmt.format(stats['softmax'][0])}): at this budget the task does not tell "
          + ("it" if len(same) == 1 else "them") + " from softmax.")
  if single:
    gaps = {v: abs(quality(rows[v]) - stats["softmax"][0]) for v in single}
    over = [v for v in single if gaps[v] > spread]
    lo, up = fmt.format(min(gaps.values())), fmt.format(max(gaps.values()))
    if len(single) == 1:
      s += (f" The other row, {_names(single)}, ran one seed, so its gap to softmax's "
            f"mean ({lo}) is not resolved")
      cmp = ("larger than that gap: at this budget the page cannot rank it" if not over
             else "smaller than that gap: seeds of that row would tell whether it differs")
    else:
      s += (f" The other {len(single)} rows ({_names(single)}) ran one seed, so none of "
            f"their gaps to softmax's mean ({lo} to {up}) is resolved")
      cmp = ("larger than every one of those gaps: at this budget the page cannot rank "
             "them" if not over else
             f"smaller than the gap of {_names(over)}: seeds of that row would tell "
             "whether it differs" if len(over) == 1 else
             f"smaller than the gaps of {_names(over)}: seeds of those rows would tell "
             "whether they differ")
    s += ("; the widest spread between seeds of one variant here is "
          f"{fmt.format(spread)}, {cmp}.")
  if unlike:
    s += (f" Not judged: {', '.join(f'`{v}`' for v in sorted(unlike))} (" +
          next(iter(unlike.values())) + "): a gap between rows whose rates were chosen "
          "differently mixes the variant with the rate.")
  return [s, ""]
