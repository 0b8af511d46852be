"""The evaluation protocol of the studies' verdicts (studies/PROTOCOL.md says why each
rule is there): one place, used by the one runner (studies.core.sweep) and every page that
tunes a rate or compares variants.

  splits     every task has a validation split, on which a rate is chosen, and a test
             split of its own, on which a page reports (each task's record says
             what they are, data/tasks/: `splits`; data/pipeline.py implements them,
             `data_overrides` gives a task's config the held-out parts it needs)
  selection  the selector sees validation figures only, by construction: a run's
             figures are a `Scores` (validation, test); `select` hands the rule a
             `Validation` (a {rate: figure} that refuses anything but plain numbers),
             built from the validation parts alone
  seeds      the runs that chose the rate are not the reported runs: SELECTION_SEEDS
             for the rate, `reporting_seeds(page)` (fresh seeds, disjoint by
             construction) at the chosen rate for the page's figures
  verdicts   `verdicts`: Welch's t-test per comparison, Holm-Bonferroni over a family,
             the difference with its interval (`interval`: a bootstrap over seeds,
             inside the metric's bounds, for a bounded `Metric`; Welch's elsewhere)
             and the adjusted p; better / worse at adjusted p < ALPHA, else
             unresolved; "equal on every seed" for identical values ("at ceiling:
             cannot separate" where both sit at the metric's best bound)
  version 2  the family is the primary comparisons alone (`primary_verdicts`: each
             variant against the exact reference, per column; pairs between rows are
             `exploratory`, unadjusted); the reference's implementations are a group
             (`implementations`, `implementation_group`), not comparisons; each column
             states its power (`detectable`); a row split between modes gets more
             seeds (`spread_bound`, MAX_SEEDS) before a verdict, else "unstable";
             rate grids (`RateGrid`): >= MIN_RATES rates, an edge winner extends the
             grid, a row at chance at every rate "did not train", the tie from the
             reference's seed noise (`tie_threshold`)
"""
from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping

from data import tasks

# The verdicts' statistics (studies.core.verdicts), re-exported: studies read them here.
from studies.core.verdicts import (  # noqa: F401
    ALPHA, MIN_SEEDS, CHANCE_FACTOR, holm, Welch, welch, Metric, BOUNDS, metric,
    _pct_decimals, diff_text, LEVEL, RESAMPLES, bootstrap, interval, Verdict, verdicts,
    exploratory, implementations, implementation_group, POWER, detectable, at_ceiling,
    power_text, SPREAD, MAX_SEEDS, spread_bound, is_split, more_seeds,
    primary_verdicts)

# The version of PROTOCOL.md a page re-run now follows (its protocol.json, the MQAR
# page's "protocol" record). Version 1's pages keep their verdicts and their Holm family
# (fixed before they ran) and are shown with version 2's presentation (`VERDICTS_OF`).
VERSION = 2
# The version a run records (the "protocol" of a seeds.json / lr.json entry and of a
# ledger's run, the workdirs' `_protocol1`): version 2 changed how verdicts are drawn
# and how far a rate grid reaches, not how one run trains or is evaluated, so a run
# trained under version 1 counts under version 2 (its page's rules decide what more
# it needs: more seeds, a rate past the grid).
RUNS = 1
DOC = "studies/PROTOCOL.md"

# ---- splits -----------------------------------------------------------------------------

# Where each task chooses (validation) and reports (test): its record's `splits`
# (data/tasks/; studies/PROTOCOL.md rule 1 tabulates them), data/pipeline.py's splits.
# The config a task needs to hold out its splits (its record's Study.data_overrides:
# fields whose neutral value, in studies.core.sweep.NEUTRAL, is the old behaviour: rows
# trained before keep their identity).
DATA_OVERRIDES = {n: dict(tasks.task(n).study.data_overrides) for n in tasks.names()
                  if tasks.task(n).study.data_overrides}


def data_overrides(task: str) -> dict:
  """The config overrides under which `task` holds out its validation and test splits."""
  return dict(DATA_OVERRIDES.get(task, {}))


# The layer around the gated variants (model.gated_layer) that a study's runs train, by
# the protocol version they follow: the one place a study reads it from (the variants
# pages: studies.variants.config.make_config; MQAR: studies.recall.mqar.make_config, by
# its preset's `protocol`). Before the protocol (0) the studies trained the bare
# operators, before issue 76 built the layers their papers use: those rows keep "bare",
# the field's neutral value in studies.core.sweep.NEUTRAL, and their identity. A re-run
# under the protocol trains every row afresh anyway, so it trains the layers the papers
# evaluate. (models.ModelConfig's own default, "published", is train.py's, never a
# study's.)
GATED_LAYERS = {0: "bare", 1: "published", 2: "published"}


def gated_layer(version: int) -> str:
  """The model.gated_layer of a study's runs under protocol `version` (GATED_LAYERS)."""
  if version not in GATED_LAYERS:
    raise ValueError(f"protocol version {version!r} names no gated layer; known: "
                     f"{sorted(GATED_LAYERS)}")
  return GATED_LAYERS[version]


def overrides(task: str) -> dict:
  """The config overrides of a variants page's runs under the protocol: the task's
  held-out splits (`data_overrides`) and, where its model has a decoder (the gated
  variants are causal only: not listops' classifier, where they cannot run and the
  runs stay as they were), the gated variants' layers under VERSION (`gated_layer`)."""
  import importlib
  ov = data_overrides(task)
  if importlib.import_module(f"configs.{task}").get_config().model.kind != "classifier":
    ov["model"] = {"gated_layer": gated_layer(VERSION)}
  return ov


def with_overrides(task: str, ov: dict | None) -> dict | None:
  """`ov` (a run's own overrides) over the protocol's (`overrides`), the model's
  fields merged; None where both are empty."""
  base = overrides(task)
  ov = dict(ov or {})
  if "model" in base or "model" in ov:
    ov["model"] = {**base.pop("model", {}), **ov.get("model", {})}
  return {**base, **ov} or None


def page_overrides(task: str, out: str) -> dict | None:
  """The config overrides the variants page in `out` trained its rows under: on a
  protocol page the protocol's (`with_overrides`), else none (the preset's config)."""
  return with_overrides(task, None) if follows(page_version(out)) else None


def follows(version) -> bool:
  """Whether a page (or a run) of protocol `version` follows the protocol at all (rates
  chosen on validation, fresh reporting seeds on test): every version from 1; 0 is the
  old protocol (rates chosen on test)."""
  return int(version or 0) >= 1


# ---- what a run measured, and what the selector may see -------------------------------

@dataclasses.dataclass(frozen=True)
class Scores:
  """One run's figure of the study's metric on each split."""
  validation: float | None
  test: float | None = None

  def to_json(self) -> dict:
    return {"validation": self.validation, "test": self.test}

  @classmethod
  def of(cls, d) -> "Scores":
    """From a Scores or a {"validation": .., "test": ..} record."""
    return d if isinstance(d, Scores) else cls(d.get("validation"), d.get("test"))


class Validation(Mapping):
  """{learning rate: validation figure}: the only input a rate selector takes. Its
  values must be plain numbers (or None: a failed run), so that a record holding a
  test figure (a dict, a Scores) cannot be passed to the selector by mistake."""

  def __init__(self, figures: Mapping = ()):
    d = dict(figures)
    for lr, q in d.items():
      if q is not None and (isinstance(q, bool) or not isinstance(q, (int, float))):
        raise TypeError(f"Validation: rate {lr}'s figure is {type(q).__name__}, not a "
                        "number: the selector takes validation figures only")
    self._d = {float(lr): (None if q is None else float(q)) for lr, q in d.items()}

  @classmethod
  def of(cls, runs: Mapping) -> "Validation":
    """The validation parts of {rate: Scores or {"validation": .., "test": ..}}."""
    return cls({lr: Scores.of(s).validation for lr, s in runs.items()})

  def __getitem__(self, k):
    return self._d[k]

  def __iter__(self):
    return iter(self._d)

  def __len__(self):
    return len(self._d)

  def __repr__(self):
    return f"Validation({self._d})"


def select(rule, runs: Mapping) -> float | None:
  """The rate `rule` (sweep.LrRule) chooses from {rate: Scores}: it is handed their
  validation figures only."""
  return rule.choose(Validation.of(runs))


# ---- seeds ------------------------------------------------------------------------------

SELECTION_SEEDS = (0,)
# Fresh seeds at the chosen rate, per page (results/<page>): 5 on the cheap pages, 3 on
# the expensive ones; (selection runs, reporting runs, estimated CPU-minutes of a
# re-run on 2 cores) for PROTOCOL.md's re-run list.
REPORTING = {
    "variants_copy": 5, "variants_listops": 5, "variants_mnist": 5, "variants_mqar": 5,
    "variants_copy_cpu_258": 3, "variants_shakespeare": 3, "variants_multi30k": 3,
    "variants_listops_cpu_long": 3,
}


def reporting_seeds(page: str) -> tuple[int, ...]:
  """The page's reporting seeds: REPORTING[page] seeds (3 for a page it does not
  list) after the last selection seed, so never one of SELECTION_SEEDS."""
  first = max(SELECTION_SEEDS) + 1
  return tuple(range(first, first + int(REPORTING.get(page, 3))))


# Each version's family of Holm's correction, in the words of a page's record.
CORRECTION = {1: "Welch's t-test, Holm-Bonferroni over the page",
              2: "Welch's t-test, Holm-Bonferroni over the primary comparisons (each "
                 "variant against the exact reference, per column); pairs between "
                 "rows exploratory, unadjusted"}


def record(page: str | None = None, version: int = VERSION) -> dict:
  """What a page's JSON records of the protocol it followed (`version`: 0, the old
  protocol, or a version of PROTOCOL.md)."""
  if not follows(version):
    return {"version": 0, "selected_on": "test",
            "selection_seeds": list(SELECTION_SEEDS),
            "reporting_seeds": "the selection run (seed 0) and the page's extra seeds",
            "correction": "none (2 standard errors per comparison)", "doc": DOC}
  return {"version": int(version), "selected_on": "validation",
          "selection_seeds": list(SELECTION_SEEDS),
          "reporting_seeds": list(reporting_seeds(page)) if page else [],
          "correction": CORRECTION[int(version)], "doc": DOC}


OLD_LINE = ("**Old protocol: not to be relied on.** This page's rates were chosen on the "
            "test metric and its verdicts come from 3 seeds (the selection run among "
            "them) against a plain 2-standard-error cut with no correction for the "
            "page's many comparisons; it has not been re-run under the [evaluation "
            "protocol](../../studies/PROTOCOL.md) (version {v}: rates chosen on "
            "validation, fresh seeds reported on test, Welch + Holm).")


def old_line() -> str:
  """The line at the top of a page not yet re-run under the protocol."""
  return OLD_LINE.format(v=VERSION)


# What a page under an earlier version than VERSION shows of the current one: its
# verdicts and their family stay those of its version (fixed before it ran, not
# narrowed after seeing them); its presentation is the current one.
PRESENTATION = ("shown with version {v}'s presentation: intervals that stay inside the "
                "metric's bounds, differences in points written \"pts\", the smallest "
                "difference each column could detect, columns at the metric's ceiling "
                "flagged, softmax's implementations shown as a group")


def new_line(rec: dict) -> str:
  """The line at the top of a page re-run under the protocol: the version its verdicts
  follow (and, for an earlier one, that they are shown with the current presentation)."""
  v = int(rec["version"])
  how = ("verdicts by Welch's t-test with Holm's correction over the page (version 1's "
         "family: every comparison it states, pairs of rows included)" if v == 1 else
         "verdicts by Welch's t-test with Holm's correction over the primary comparisons "
         "(each variant against the exact reference); pairs of rows exploratory")
  return (f"Follows the [evaluation protocol](../../studies/PROTOCOL.md) version "
          f"{v}: rates chosen on validation (seeds "
          f"{', '.join(map(str, rec['selection_seeds']))}), figures from the reporting "
          f"seeds {', '.join(map(str, rec['reporting_seeds']))} on the test split, "
          f"{how}." + (f" Its verdicts follow version {v}; "
                       + PRESENTATION.format(v=VERSION) + "." if v < VERSION else ""))


# ---- version 2: rate grids with an interior optimum ----------------------------------

MIN_RATES = 4         # a grid's fewest rates
EXTEND = 2            # the most steps a grid extends past an end, per side


def did_not_train(validation, chance: float, higher_better: bool = True) -> bool:
  """Whether every rate's figure of {rate: validation figure} stays within
  CHANCE_FACTOR of chance (higher is better: none above 2 × chance; a loss against
  chance's (the uniform guess's): none below chance / 2); a failed run (None) counts
  as not trained."""
  qs = [q for q in Validation(validation).values() if q is not None and math.isfinite(q)]
  if higher_better:
    return all(q <= CHANCE_FACTOR * chance for q in qs)
  return all(q >= chance / CHANCE_FACTOR for q in qs)


def tie_threshold(ref, floor: float = 0.0) -> float:
  """The tie of a task's rate choice from its reference's seed noise: √2 × the sample
  sd of the reference's reporting seeds `ref` (two single runs of one config differ by
  about that much from the seed alone, and each rate of a sweep is one run), at least
  `floor` (where the reference has no spread: the figure's resolution)."""
  import statistics
  ref = [float(x) for x in ref]
  s = statistics.stdev(ref) if len(ref) > 1 else 0.0
  return max(math.sqrt(2) * s, float(floor))


# Each task's tie, written down on its record (data/tasks/: Study.tie; the table of
# studies/PROTOCOL.md rule 11): `tie_threshold` of its reference's reporting seeds on the
# committed pages (2026-12-07). copy: softmax scored 100% on every seed, no spread, so
# version 1's tie (1 point) stands as the floor; Shakespeare and Multi30k: from their
# old-protocol seeds (0-2), until their re-runs measure them.
TIES = {n: tasks.task(n).study.tie for n in tasks.names()
        if tasks.task(n).study.tie is not None}


def lr_ladder(grid, extend: int = 0) -> list[float]:
  """Every rate an lr sweep of `grid` may train, smallest first: the grid and `extend`
  more beyond each of its ends, each a step of the end's own ratio further (3e-3
  after 1e-3 and 3e-3: 9e-3, then 0.027; 3 digits)."""
  g = sorted(grid)
  k = int(extend)
  if len(g) < 2 or not k:
    return g
  up, down = g[-1] / g[-2], g[0] / g[1]
  return sorted(set(g) | {float(f"{g[-1] * up ** i:.3g}") for i in range(1, k + 1)}
                | {float(f"{g[0] * down ** i:.3g}") for i in range(1, k + 1)})


@dataclasses.dataclass(frozen=True)
class RateGrid:
  """Version 2's rate choice from {rate: validation figure} of one selection seed:
  every rate of `grid` (at least MIN_RATES), then, while the best figure (before the
  tie rule) or the chosen rate (the best, rates within `tie` of it tied, a tie to the
  smallest: runs.choose_lr) is an end of what ran, the next rate out that way
  (lr_ladder: a step of the end's ratio), up to `extend` a side, so the optimum is
  interior or the grid's limit is stated (a best figure at an end that ties an inner
  rate is still a best at the edge: one seed cannot say the optimum is not past it). A
  row whose every rate stays within CHANCE_FACTOR of `chance` (None: not checked) did
  not train: its grid is not extended and its verdict reads "did not train"."""
  grid: tuple
  tie: float
  higher_better: bool = True
  chance: float | None = None
  extend: int = EXTEND

  def __post_init__(self):
    if len(set(self.grid)) < MIN_RATES:
      raise ValueError(f"RateGrid: {len(set(self.grid))} rates "
                       f"{sorted(set(self.grid))}; version 2 needs at least {MIN_RATES}")

  @property
  def ladder(self) -> list[float]:
    return lr_ladder(self.grid, self.extend)

  def trained(self, validation) -> bool:
    """Whether the row left chance at some rate (`did_not_train`; True where `chance`
    is None)."""
    return self.chance is None or not did_not_train(validation, self.chance,
                                                    self.higher_better)

  def next(self, validation) -> float | None:
    """The rate to train next, or None: the sweep is complete."""
    from studies.core import runs
    v = dict(Validation(validation))
    missing = [lr for lr in sorted(self.grid) if lr not in v]
    if missing:
      return missing[0]
    if not self.trained(v):
      return None
    ran, ladder = sorted(v), self.ladder
    sign = 1.0 if self.higher_better else -1.0
    ok = {lr: q for lr, q in v.items() if q is not None and math.isfinite(q)}
    best = {runs.choose_lr(v, self.tie, self.higher_better),
            max(ok, key=lambda lr: sign * ok[lr]) if ok else None}
    for end, step in ((ran[-1], 1), (ran[0], -1)):
      if end in best and end in ladder and 0 <= ladder.index(end) + step < len(ladder):
        return ladder[ladder.index(end) + step]
    return None

  def choose(self, validation) -> float | None:
    """The chosen rate; None while the sweep is incomplete (or no rate has a figure)."""
    from studies.core import runs
    v = Validation(validation)
    if self.next(v) is not None:
      return None
    return runs.choose_lr(dict(v), self.tie, self.higher_better)


# ---- a page's record ----------------------------------------------------------------

RECORD = "protocol.json"     # beside a variants page's results.json


def page_version(out: str) -> int:
  """The protocol version a variants page (folder `out`) follows: its protocol.json's,
  0 (before the protocol) where it has none."""
  import json
  import os
  p = os.path.join(out, RECORD)
  if not os.path.exists(p):
    return 0
  with open(p) as f:
    return int(json.load(f).get("version", 0))


def write_page_record(out: str, page: str, version: int | None = None) -> dict:
  """Writes out/protocol.json (`record` of `page`, a REPORTING key, at `version`, else
  the version out/ records, else 0) and returns it."""
  import os
  from studies.core import pages
  v = page_version(out) if version is None else int(version)
  rec = record(page, v)
  kept = pages.read_json(os.path.join(out, RECORD), {}) or {}
  if "before" in kept:     # what the page said before its re-run (recorded ahead of it)
    rec["before"] = kept["before"]
  pages.write_json(os.path.join(out, RECORD), rec)
  return rec


# What the pages that tune or compare outside the variant sweeps follow (their top line).
OTHER_PAGES = {
    "lora_mnist": "Protocol ([studies/PROTOCOL.md](../../studies/PROTOCOL.md), version "
                  "{v}): rule 1 followed (each learning rate is chosen on held-out "
                  "training images, and the figures are on the test split); rule 3 not "
                  "(the seeds that tuned are the seeds reported) and no verdict between "
                  "methods is drawn by rule 4: read gaps against the seed spread shown.",
    "positions": "Protocol ([studies/PROTOCOL.md](../../studies/PROTOCOL.md), version "
                 "{v}): no rate is tuned (every row at its preset's rate) and no verdict "
                 "between schemes rests on a test of seeds (one seed per row): its "
                 "comparisons are descriptive, not verdicts under the protocol.",
    "packing": "Protocol ([studies/PROTOCOL.md](../../studies/PROTOCOL.md), version "
               "{v}): no rate is tuned (both arms at the preset's rate); its "
               "within/outside-the-range verdict is the old 2-standard-error cut on a "
               "single comparison, not the protocol's Welch + Holm, and is not to be "
               "read as one.",
}


def other_line(page: str) -> str:
  """The protocol line of a page outside the variant sweeps (OTHER_PAGES)."""
  return OTHER_PAGES[page].format(v=VERSION)


def top_line(rec: dict) -> str:
  """The line at the top of a page: the protocol it follows, or the old-protocol
  warning."""
  return new_line(rec) if follows(rec.get("version")) else old_line()
