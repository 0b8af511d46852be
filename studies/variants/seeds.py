"""The seed spread of a variants page (studies.variants.page): the rows trained again
from other seeds (seeds.json beside the page: the protocol's reporting seeds, or, on a
page not re-run under it, `--seeds` beside seed 0's row), their mean ± standard error,
and the verdicts against softmax and between rows (`page_verdicts`: Welch's test with
Holm's correction over the family of the page's protocol version, studies.core.protocol,
from MIN_SEEDS seeds of each side), softmax's implementations as a group under it, the
power line, with what the page can and cannot tell apart at its budget
(`separation`).
"""
from __future__ import annotations

import os

import numpy as np

from studies.core import pages, protocol
from studies.variants.compare import (METRIC, metric_label, base_lr, chosen_lrs, fingerprints,
                                      make_config, out_dir, quality, with_lr)


# The fewest seeds of each side that a verdict (better, worse, unresolved, equal) is
# given from (issue 40: "3 seeds, mean ± standard error"). Two seeds give a standard
# error from one degree of freedom: two seeds of multi30k's gla that agreed to 0.1 BLEU
# made a 2.4-point gap read as "worse" beyond 20 standard errors (2026-11-27).
MIN_SEEDS = protocol.MIN_SEEDS

# the table's words (studies.variants.words), read here as seeds.<name>
from studies.variants.words import (  # noqa: E402,F401
    TIGHT, _n, _names, against, ahead_of, group_row, mean_se, tight_lines)


def task_metric(task: str) -> protocol.Metric:
  """The protocol's Metric of a task's figure (its bounds, direction and format)."""
  key, _, hi, fmt = METRIC[task]
  return protocol.metric(key, hi, fmt)


def page_verdicts(by: dict, higher_better: bool, lrs: dict | None = None,
                  base: float | None = None, unlike: dict | None = None,
                  metric: protocol.Metric | None = None, version: int = 1) -> dict:
  """{(v, w): protocol.Verdict of v against w} of every comparison the seed table makes,
  from {variant: {seed: figure}}: each seeded variant against softmax (those in
  `unlike` aside), and each pair of other seeded variants whose rates were chosen alike
  (`rates_alike`; every pair where `lrs` is None), v before w by name; Welch's test
  per pair (studies.core.protocol: the one place). The family of Holm's correction is the
  page's protocol `version`'s: version 1 (and a page before the protocol), all of
  them; version 2, the comparisons against softmax alone, softmax's implementations
  aside (protocol.primary_verdicts), the pairs exploratory (protocol.exploratory,
  unadjusted). metric: the intervals' bounds and the ceiling (task_metric); None: an
  unbounded metric of direction `higher_better`."""
  m = metric or protocol.Metric(higher_better)
  vals = {v: [q[k] for k in sorted(q)] for v, q in by.items()}
  pairs = {}
  if "softmax" in vals:
    pairs.update({(v, "softmax"): (vals[v], vals["softmax"]) for v in sorted(vals)
                  if v != "softmax" and v not in (unlike or {})})
  others = sorted(v for v in vals if v != "softmax")
  for i, v in enumerate(others):
    for w in others[i + 1:]:
      if lrs is None or rates_alike(v, w, lrs, base):
        pairs[(v, w)] = (vals[v], vals[w])
  if version < 2:
    return protocol.verdicts(pairs, higher_better, metric=m)
  main = protocol.primary_verdicts(
      {"": {v: xs for v, xs in vals.items() if v not in (unlike or {})}}, m)
  out = {(v, "softmax"): x for (v, _), x in main.items()}
  out.update(protocol.exploratory({k: ab for k, ab in pairs.items()
                                   if "softmax" not in k}, m))
  return out


def words_against_softmax(task, preset, results, out, overrides=None) -> dict:
  """{variant: its verdict word against softmax} ("better", "worse", "unresolved",
  "equal", "few") of the page in `out` as its seed table states them (`seed_spread`'s
  figures and `page_verdicts`); {} where the page has no seeds or no softmax row."""
  got = seed_verdicts(task, preset, results, out, overrides)
  return {v: x.word for (v, w), x in got.items() if w == "softmax"}


def record_before(task, preset, out, rev: str) -> dict:
  """Writes out/protocol.json's "before": {"rev", "verdicts": `words_against_softmax`
  of the page's JSON as committed at git revision `rev`} (the page before its re-run
  under the protocol: read from git, never from the working tree). Returns it."""
  import subprocess
  import tempfile
  with tempfile.TemporaryDirectory() as tmp:
    for f in ("results.json", "seeds.json", "lr.json", protocol.RECORD):
      r = subprocess.run(["git", "show", f"{rev}:{out}/{f}"], capture_output=True,
                         text=True)
      if r.returncode == 0:
        with open(os.path.join(tmp, f), "w") as fh:
          fh.write(r.stdout)
    old = pages.read_json(os.path.join(tmp, "results.json"))
    if old is None:
      raise SystemExit(f"--record_before: git has no {out}/results.json at {rev}")
    words = words_against_softmax(task, preset, old, tmp)
  rec = pages.read_json(os.path.join(out, protocol.RECORD), {}) or {}
  rec["before"] = {"rev": rev, "verdicts": words}
  pages.write_json(os.path.join(out, protocol.RECORD), rec)
  return rec["before"]


def changed_lines(task, preset, results, out, overrides=None) -> list:
  """Page lines (a protocol page): each variant whose verdict against softmax differs
  from what the page said before it was re-run (out/protocol.json "before", written
  by `compare_variants --record_before`), once, with what changed and why."""
  before = (pages.read_json(os.path.join(out, protocol.RECORD), {}) or {}).get("before")
  if not before or not protocol.follows(protocol.page_version(out)):
    return []
  now = words_against_softmax(task, preset, results, out, overrides)
  diff = {v: (before["verdicts"][v], w) for v, w in sorted(now.items())
          if v in before["verdicts"] and before["verdicts"][v] != w
          and "few" not in (w, before["verdicts"][v])}     # a row still short of seeds
  if not diff:
    return []
  n = len(protocol.reporting_seeds(os.path.basename(out_dir(task, preset))))
  return ["## What the protocol changed", "",
          f"Verdicts against softmax that differ from the page before its re-run (commit "
          f"`{before['rev']}`: rates chosen on the test figure, seeds 0-2 with the "
          "selection run among them, the same Welch test and Holm correction): the "
          f"rate is now chosen on validation and the verdict rests on the {n} fresh "
          "reporting seeds, so a verdict can move either way.", ""] + [
      f"- `{v}`: {a} before, {b} now." for v, (a, b) in diff.items()] + [""]


def seed_figures(task, preset, results, out, overrides=None) -> dict:
  """{variant: {seed: figure}} of the seed table (`seed_spread`): on a protocol page the
  reporting seeds' runs in out/seeds.json under the config its row was trained with,
  at its chosen rate; on an older page the row's own run (its seed) and its `--seeds`
  runs."""
  rows = {r["variant"]: r for r in results if r.get("status") == "ok"}
  lrs = chosen_lrs(task, preset, out, overrides)
  base = base_lr(task, preset, overrides)
  by = {}
  new = protocol.follows(protocol.page_version(out))
  reporting = protocol.reporting_seeds(os.path.basename(out_dir(task, preset))) \
      if new else ()
  for s in pages.read_json(os.path.join(out, "seeds.json"), []):
    r0 = rows.get(s["variant"])
    if s["preset"] != preset or s["task"] != task or r0 is None:
      continue
    ov = with_lr(overrides, lrs.get(s["variant"]), base)
    want = fingerprints(make_config(task, preset, s["variant"],
                                    {**(ov or {}), "seed": s["seed"]}))
    if s["config"] not in want:
      continue
    if new:     # the protocol's reporting runs only (the row's own run among them)
      if protocol.follows(s.get("protocol")) and s["seed"] in reporting:
        by.setdefault(s["variant"], {})[s["seed"]] = s["quality"]
      continue
    seed0 = int(make_config(task, preset, s["variant"], overrides).seed)
    by.setdefault(s["variant"], {seed0: quality(r0)})        # the row's own run
    by[s["variant"]][s["seed"]] = s["quality"]
  return by


def seed_verdicts(task, preset, results, out, overrides=None, by=None) -> dict:
  """The verdicts of the page's seed table (`page_verdicts` of `seed_figures`: one
  Holm family per page), for a section that cites them; {} where it has no seeds.
  by: `seed_figures`' result where the caller has it."""
  by = seed_figures(task, preset, results, out, overrides) if by is None else by
  if not by:
    return {}
  rows = {r["variant"]: r for r in results if r.get("status") == "ok"}
  lrs, base = chosen_lrs(task, preset, out, overrides), base_lr(task, preset, overrides)
  return page_verdicts(by, METRIC[task][2], lrs, base, unlike_softmax(rows, lrs, base),
                       task_metric(task), family_version(out))


def family_version(out: str) -> int:
  """The protocol version whose family the page in `out` is judged by: its own, and
  version 1's for a page before the protocol (its old seeds recomputed with Welch +
  Holm over every comparison, as version 1 states)."""
  return max(1, protocol.page_version(out))


def seed_spread(task, preset, results, out, overrides=None) -> list:
  """Page lines: per variant with extra-seed runs in out/seeds.json (of this preset,
  under the config its row was trained with, at its chosen rate), its metric per
  seed, mean and range, and its verdicts (`seed_verdicts`); softmax first, its
  implementations (protocol.implementations) as one group under it with their largest
  difference from it; the power line (protocol.power_text)."""
  rows = {r["variant"]: r for r in results if r.get("status") == "ok"}
  lrs = chosen_lrs(task, preset, out, overrides)
  base = base_lr(task, preset, overrides)
  new = protocol.follows(protocol.page_version(out))
  version = family_version(out)
  reporting = protocol.reporting_seeds(os.path.basename(out_dir(task, preset))) \
      if new else ()
  by = seed_figures(task, preset, results, out, overrides)
  if not by:
    return []
  fmt, m = METRIC[task][3], task_metric(task)
  which = ("The same variant trained from the page's reporting seeds "
           f"({', '.join(map(str, reporting))}; none of them chose its rate) at its "
           "chosen rate, each evaluated on the test split" if new else
           "Old-protocol data: the same variant trained again from other seeds "
           "(initialisation, data order, dropout), by `--seeds`, beside seed 0's run, "
           "the one that chose its rate on the test metric")
  family = ("Welch's p adjusted by Holm's method over every comparison of this table "
            "(against softmax and ahead of: version 1's family, fixed before the page "
            "ran)" if version < 2 else
            "Welch's p adjusted by Holm's method over the comparisons against softmax "
            "alone (version 2's family; softmax's implementations are a group, not "
            "comparisons)")
  ahead_words = ("the other seeded rows, softmax aside, that this row beats by the same "
                 "test (pairs whose rates were chosen alike only)" if version < 2 else
                 "the other seeded rows, softmax aside, that this row beats by Welch's p "
                 f"< {protocol.ALPHA} unadjusted (pairs whose rates were chosen alike "
                 "only): exploratory, outside the family, some pass by chance")
  interval = ("a bootstrap over seeds, which stays inside the metric's bounds; per "
              "comparison, not adjusted" if m.bounded else
              "Welch; per comparison, not adjusted")
  lines = ["## Seed spread", "",
           f"{which}: a gap between two rows smaller than this spread is "
           "not evidence that one variant is better. Against softmax: the difference of "
           f"the means with its 95% interval ({interval})"
           + (", in points (pts)" if protocol._pct_decimals(fmt) is not None else "")
           + ", the two variants' seed runs taken as independent samples, and "
           f"{family}; `better` or `worse` only at an adjusted p below {protocol.ALPHA}, "
           "else `unresolved` (`equal on every seed` where both scored one value on all "
           "their seeds, `at ceiling: cannot separate` where that value is the metric's "
           f"best); no verdict from fewer than {MIN_SEEDS} seeds of either. Ahead of: "
           f"{ahead_words}. See [the protocol](../../studies/PROTOCOL.md).", "",
           f"| variant | {metric_label(task, protocol.page_version(out))} per seed | "
           "mean ± s.e. | max − min "
           f"| against softmax | ahead of{'' if version < 2 else ' (exploratory)'} |",
           "|---|---|---|---|---|---|"]
  stats = {v: mean_se([q[k] for k in sorted(q)]) for v, q in by.items()}
  unlike = unlike_softmax(rows, lrs, base)
  verdicts = seed_verdicts(task, preset, results, out, overrides, by)
  counts = {v: len(q) for v, q in by.items()}
  diff = page_differs(task, preset, rows, overrides)
  impl, worst = protocol.implementation_group(by) if "softmax" in rows else ([], None)
  words = {}                  # {variant: its verdict against softmax}, for differs_line
  order = sorted(by, key=lambda v: (v != "softmax", v))
  for v in order:
    if v in impl:
      continue
    q = by[v]
    vals = [q[k] for k in sorted(q)]
    mean, se, _ = stats[v]
    word = (against(verdicts, v, 'softmax', fmt, counts) if "softmax" in rows
            else "— (`softmax` has no row on this page)")
    if v in unlike:
      word = "not like for like, " + unlike[v]
    elif v != "softmax" and "softmax" in rows:
      words[v] = word
    if v in words and v in diff and word.startswith(("better", "worse")):
      word += f"; {diff[v][0]}"
    ahead = ", ".join(f"`{w}`" for w in ahead_of(verdicts, v))
    lines.append(f"| `{v}` | " + ", ".join(f"{fmt.format(q[k])} ({k})" for k in sorted(q))
                 + f" | {fmt.format(mean)} ± {fmt.format(se)} | "
                 f"{fmt.format(max(vals) - min(vals))} | {word} | {ahead or '—'} |")
    if v == "softmax" and impl:
      lines.append(group_row(impl, worst, verdicts, fmt, counts, version))
  if "softmax" in by and "softmax" in rows:
    tested = sum(x.test is not None and not x.exploratory for x in verdicts.values())
    lines += ["", protocol.power_text(list(by["softmax"].values()), m, max(1, tested),
                                      name="softmax")]
  lines += tight_lines(by, fmt)
  pending = sorted(r["variant"] for r in results if r.get("pending"))
  if new and pending:    # Holm's correction grows with the comparisons still to come
    lines += ["", f"**Provisional until the page is complete:** {_n(len(pending), 'variant')} "
              f"({_names(pending)}) still to run will add comparisons to Holm's correction, "
              "which can move an adjusted p across 0.05 either way."]
  return (lines + [""] + separation(rows, by, stats, task, unlike, verdicts, impl)
          + differs_line(diff, words))


def rates_alike(v: str, w: str, lrs: dict, base: float) -> bool:
  """Whether `v`'s and `w`'s rates were chosen alike, so a gap between them compares
  the variants, not the rates: both out of the lr sweep (or sharing softmax's rate by
  rule; `lrs`, chosen_lrs: {variant: rate}), both at the preset's rate `base`, or both
  at one rate."""
  swept = {x: lr for x, lr in lrs.items() if lr is not None}
  return (v in swept) == (w in swept) or swept.get(v, base) == swept.get(w, base)


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


# A parameter count within 1% of the reference's is the same model size (cosine's
# learned temperature adds 8 parameters to 118,494 on mnist).
SIZE_TOL = 0.01


def what_differs(rows: dict, ref: str = "softmax", pieces=None) -> dict:
  """{variant: (short, long)}: what differs between a row's model and the reference
  row's besides the attention function, for the rows where something does, from the
  rows' `params` and the registry: a parameter count more than SIZE_TOL away from the
  reference's (what adds them: the variant's own parameters and per-token inputs
  (`Variant.params`, `inputs`) and the layer pieces its model got), the layer pieces
  its model got (its paper's short convolutions, norms and gates, which softmax's row
  does not have: named whatever they add in parameters) and a position signal of its
  own (`Variant.own_positions`, e.g. mla's decoupled RoPE). A verdict of such a row
  compares all of that, not the attention at equal size; the page says so beside it.
  rows: {variant: row}; pieces: variant -> the layer pieces its model got (models.config
  `layer`); None: the record's `layer` (the default, gated_layer="published")."""
  import attention
  r0 = rows.get(ref)
  p0 = (r0 or {}).get("params")
  ref_lay = set(pieces(ref) if pieces and ref in attention.names() else ())
  out = {}
  for v, r in rows.items():
    if v == ref or v not in attention.names():
      continue
    rec = attention.variant(v)
    short, long = [], []
    p = r.get("params")
    lay = tuple(k for k in (pieces(v) if pieces else rec.layer) if k not in ref_lay)
    if p and p0 and abs(p - p0) > SIZE_TOL * p0:
      own = ([f"parameters {', '.join(f'`{k}`' for k, x in rec.params.items()
                                                 if x.trainable and x.when is None)}"]
             if any(x.trainable and x.when is None for x in rec.params.values()) else [])
      own += [f"inputs {', '.join(f'`{k}`' for k in rec.inputs)}"] if rec.inputs else []
      own += [f"layer pieces {', '.join(f'`{k}`' for k in lay)}"] if lay else []
      short.append(f"{(p - p0) / p0:+.0%} parameters")
      long.append(f"{p:,} parameters against {ref}'s {p0:,} ({(p - p0) / p0:+.0%}"
                  + (f": its {'; '.join(own)}" if own else "") + ")")
    elif lay:
      long.append(f"the layer pieces {', '.join(f'`{k}`' for k in lay)} (its paper's "
                  f"layer; {ref}'s row has none of them)")
    if lay:
      short.append(", ".join(lay))
    if rec.own_positions:
      short.append("own position signal")
      long.append(f"a position signal of its own ({rec.own_positions}) on top of the "
                  "model's")
    if short:
      out[v] = (", ".join(short), " and ".join(long))
  return out


def page_differs(task, preset, rows: dict, overrides=None) -> dict:
  """`what_differs` of a page's rows against softmax, with the layer pieces each
  variant's model got under the page's config (its overrides)."""
  import attention
  from models.config import layer_pieces
  pieces = lambda v: layer_pieces(make_config(task, preset, v, overrides).model.gated_layer,
                                  attention.variant(v).layer)
  return what_differs(rows, "softmax", pieces)


def differs_line(diff: dict, words: dict) -> list[str]:
  """Page lines: what differs besides the attention (diff: `page_differs`) for the rows
  the page judges better or worse than softmax (words: {variant: verdict text}); []
  where none of them differs."""
  hit = [v for v in sorted(words) if v in diff and words[v].startswith(("better", "worse"))]
  if not hit:
    return []
  return ["**Not like for like besides the attention.** " + "; ".join(
      f"`{v}` ({words[v].split(' ')[0]}): {diff[v][1]}" for v in hit)
      + f". {'Its verdict compares that whole model' if len(hit) == 1 else 'Each of these verdicts compares the whole model'}"
      " with softmax's at the preset's width, not the attention alone at equal size "
      "under one position signal.", ""]


def separation(rows: dict, by: dict, stats: dict, task: str,
               unlike: dict | None = None, verdicts: dict | None = None,
               impl=()) -> list[str]:
  """What the page can tell apart at its budget, from its own rows and seeds: the
  seeded variants that differ from softmax (Holm-adjusted p < 0.05), those it leaves
  unresolved (never read as "no difference": the power line sizes what it could
  detect), those that scored softmax's value on every seed (`against`: equal, or at
  the ceiling), and the rows of one seed, whose gaps to softmax are set beside the
  widest seed range measured; the rows in `unlike` (unlike_softmax) are named apart
  and not judged, softmax's implementations (`impl`) are the group of the table."""
  fmt, hi = METRIC[task][3], METRIC[task][2]
  if "softmax" not in stats or not np.isfinite(stats["softmax"][1]):
    return []
  unlike = {v: w for v, w in (unlike or {}).items() if quality(rows[v]) is not None}
  seeded = [v for v in by if v != "softmax" and v not in unlike and v not in impl]
  few = sorted(v for v in seeded if min(stats[v][2], stats["softmax"][2]) < MIN_SEEDS)
  if verdicts is None:
    verdicts = page_verdicts(by, hi, None, None, unlike)
  words = {v: against(verdicts, v, "softmax", fmt, {}) for v in seeded if v not in few}
  sep = sorted(v for v, w in words.items() if w.startswith(("better", "worse")))
  same = sorted(v for v in words if verdicts[(v, "softmax")].word == "equal")
  ceiling = any(verdicts[(v, "softmax")].ceiling for v in same)
  other = sorted(v for v in words if v not in sep and v not in same)
  single = sorted(v for v in rows if v not in by and v not in unlike and v not in impl
                  and quality(rows[v]) is not None)
  spread = max(max(q.values()) - min(q.values()) for q in by.values())
  s = "**What this page tells apart at this budget.** " + (
      ", ".join(f"`{v}` ({words[v].split(' ')[0]})" for v in sep)
      + f" against softmax, at a Holm-adjusted p < {protocol.ALPHA} "
      f"({_n(len(words), 'variant')} seeded beside softmax)." if sep else
      f"None of the {_n(len(words), 'variant')} seeded beside softmax is told apart "
      f"from it at a Holm-adjusted p < {protocol.ALPHA}." if len(words) > 1 else
      f"`{next(iter(words))}`, seeded beside softmax, is not told apart "
      f"from it at a Holm-adjusted p < {protocol.ALPHA}." if words else
      "" if few else "Only softmax ran several seeds.")
  if other:
    s += (f" {_names(other)}: unresolved or waiting on seeds, which says the page "
          "cannot tell, not that "
          + ("it is" if len(other) == 1 else "they are")
          + " alike: a difference smaller than the power line's could be there.")
  if few:
    s += ((" " if words else "")
          + f"Not judged yet, with fewer than {MIN_SEEDS} seeds of softmax or their own: "
          + ", ".join(f"`{v}` ({stats[v][2]})" for v in few)
          + f" (softmax: {stats['softmax'][2]}).")
  if same:
    s += (f" {_names(same)} scored what softmax scored on every seed "
          f"({fmt.format(stats['softmax'][0])})" + (
              ", the metric's ceiling: at ceiling, the task cannot separate "
              + ("it" if len(same) == 1 else "them") + " from softmax." if ceiling else
              ": at this budget the task does not tell "
              + ("it" if len(same) == 1 else "them") + " from softmax."))
  if impl:
    s += (f" Softmax's implementations ({_names(impl)}) are shown as one group under "
          "it, not judged as variants.")
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
