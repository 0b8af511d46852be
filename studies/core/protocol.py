"""The evaluation protocol of the studies' verdicts (studies/PROTOCOL.md says why each
rule is there): one place, used by the one runner (studies.core.sweep) and every page that
tunes a rate or compares variants.

  splits     every task has a validation split, on which a rate is chosen, and a test
             split of its own, on which a page reports (`SPLITS`; data/pipeline.py
             implements them, `data_overrides` gives a task's config the held-out
             parts it needs)
  selection  the selector sees validation figures only, by construction: a run's
             figures are a `Scores` (validation, test); `select` hands the rule a
             `Validation` (a {rate: figure} that refuses anything but plain numbers),
             built from the validation parts alone
  seeds      the runs that chose the rate are not the reported runs: SELECTION_SEEDS
             for the rate, `reporting_seeds(page)` (fresh seeds, disjoint by
             construction) at the chosen rate for the page's figures
  verdicts   `verdicts`: Welch's t-test per comparison, Holm-Bonferroni over all the
             comparisons of a page, the difference with its 95% interval
             (Welch-Satterthwaite df) and the adjusted p; better / worse at adjusted
             p < ALPHA, else unresolved; "equal on every seed" for identical values
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

VERSION = 1
DOC = "studies/PROTOCOL.md"
ALPHA = 0.05
MIN_SEEDS = 3        # the fewest seeds of each side a verdict is given from

# ---- splits -----------------------------------------------------------------------------

# Where each task chooses (validation) and reports (test): data/pipeline.py's splits.
SPLITS = {
    "copy": ("its own generator stream (seed, 2^31 - 1), the one every in-training "
             "evaluation used", "a generator stream of its own (TEST_STREAM), the same "
             "for every training seed"),
    "mqar": ("as copy", "as copy"),
    "listops": ("its validation split", "its test split"),
    "mnist": ("the last 5,000 training images, held out (mnist_validation=5000)",
              "the 10,000 test images"),
    "multi30k": ("val2016", "test2016"),
    "shakespeare": ("its validation split (unchanged)", "the last 5% of the training "
                    "characters, held out (test_fraction=0.05)"),
}

# The config a task needs to hold out its splits (fields whose neutral value, in
# studies.core.sweep.NEUTRAL, is the old behaviour: rows trained before keep their
# identity).
DATA_OVERRIDES = {"mnist": {"mnist_validation": 5000},
                  "shakespeare": {"test_fraction": 0.05}}


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
GATED_LAYERS = {0: "bare", VERSION: "published"}


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
  return with_overrides(task, None) if page_version(out) == VERSION else None


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


def record(page: str | None = None, version: int = VERSION) -> dict:
  """What a page's JSON records of the protocol it followed."""
  if version != VERSION:
    return {"version": 0, "selected_on": "test",
            "selection_seeds": list(SELECTION_SEEDS),
            "reporting_seeds": "the selection run (seed 0) and the page's extra seeds",
            "correction": "none (2 standard errors per comparison)", "doc": DOC}
  return {"version": VERSION, "selected_on": "validation",
          "selection_seeds": list(SELECTION_SEEDS),
          "reporting_seeds": list(reporting_seeds(page)) if page else [],
          "correction": "Welch's t-test, Holm-Bonferroni over the page", "doc": DOC}


OLD_LINE = ("**Old protocol: not to be relied on.** This page's rates were chosen on the "
            "test metric and its verdicts come from 3 seeds (the selection run among "
            "them) against a plain 2-standard-error cut with no correction for the "
            "page's many comparisons; it has not been re-run under the [evaluation "
            "protocol](../../studies/PROTOCOL.md) (version {v}: rates chosen on "
            "validation, fresh seeds reported on test, Welch + Holm).")


def old_line() -> str:
  """The line at the top of a page not yet re-run under the protocol."""
  return OLD_LINE.format(v=VERSION)


def new_line(rec: dict) -> str:
  """The line at the top of a page re-run under the protocol."""
  return (f"Follows the [evaluation protocol](../../studies/PROTOCOL.md) version "
          f"{rec['version']}: rates chosen on validation (seeds "
          f"{', '.join(map(str, rec['selection_seeds']))}), figures from the reporting "
          f"seeds {', '.join(map(str, rec['reporting_seeds']))} on the test split, "
          "verdicts by Welch's t-test with Holm's correction over the page.")


# ---- verdicts -------------------------------------------------------------------------

def holm(ps) -> list[float]:
  """Holm-Bonferroni adjusted p-values, in the order given: sorted ascending, the i-th
  smallest (from 0) is multiplied by (m - i), made non-decreasing along that order,
  capped at 1."""
  ps = [float(p) for p in ps]
  m = len(ps)
  out = [1.0] * m
  running = 0.0
  for i, k in enumerate(sorted(range(m), key=lambda j: ps[j])):
    running = max(running, min(1.0, (m - i) * ps[k]))
    out[k] = running
  return out


@dataclasses.dataclass(frozen=True)
class Welch:
  """a - b of two samples: the difference of means, its 95% interval, Welch's df and
  the two-sided p."""
  diff: float
  lo: float
  hi: float
  df: float
  p: float


def welch(a, b) -> Welch:
  """Welch's t-test of mean(a) - mean(b) (scipy.stats.ttest_ind, equal_var=False) and
  the 95% interval of the difference on Welch-Satterthwaite's df. Two samples of no
  spread: the difference is exact (p 0 where they differ, 1 where not)."""
  import numpy as np
  from scipy import stats
  a, b = np.asarray(a, float), np.asarray(b, float)
  d = float(a.mean() - b.mean())
  va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
  se2 = va + vb
  if se2 == 0:
    return Welch(d, d, d, math.inf, 0.0 if d != 0 else 1.0)
  df = se2 ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
  import warnings
  with warnings.catch_warnings():     # scipy warns of nearly equal samples: its p stands
    warnings.simplefilter("ignore", RuntimeWarning)
    p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
  h = float(stats.t.ppf(0.975, df)) * math.sqrt(se2)
  return Welch(d, d - h, d + h, float(df), p)


@dataclasses.dataclass(frozen=True)
class Verdict:
  """One comparison of a page: `word` (better, worse, unresolved, equal, few),
  the test (None for equal and few), the adjusted p, the seeds of each side."""
  word: str
  test: Welch | None
  p_adj: float | None
  n: tuple
  value: float | None = None     # the common value where equal

  def flipped(self) -> "Verdict":
    """The same comparison read the other way round (b against a)."""
    t = self.test
    return Verdict({"better": "worse", "worse": "better"}.get(self.word, self.word),
                   t and Welch(-t.diff, -t.hi, -t.lo, t.df, t.p), self.p_adj,
                   self.n[::-1], self.value)

  def text(self, fmt: str = "{:.3g}") -> str:
    """The page's words: e.g. "better (Δ +0.40 [+0.21, +0.59], p_adj 0.004)"."""
    if self.word == "few":
      return f"needs ≥ {MIN_SEEDS} seeds of both (seeds: {self.n[1]} and {self.n[0]})"
    if self.word == "equal":
      return f"equal on every seed ({fmt.format(self.value)})"
    t = self.test
    sign = lambda x: ("+" if x >= 0 else "−") + fmt.format(abs(x))
    return (f"{self.word} (Δ {sign(t.diff)} [{sign(t.lo)}, {sign(t.hi)}], "
            f"p_adj {self.p_adj:.2g})")


def verdicts(pairs: Mapping, higher_better: bool, alpha: float = ALPHA) -> dict:
  """{key: Verdict} of every comparison of a page, {key: (seeds of a, seeds of b)} (a
  against b): Welch's test of each pair with MIN_SEEDS seeds or more on both sides
  whose values are not identical, Holm's correction over all of those, and better /
  worse (a against b, in the metric's direction) at adjusted p < alpha, else
  unresolved. Pairs of identical values on every seed are "equal"; pairs with fewer
  seeds get no verdict ("few")."""
  out, tested = {}, {}
  for k, (a, b) in pairs.items():
    a, b = [float(x) for x in a], [float(x) for x in b]
    n = (len(a), len(b))
    if min(n) < MIN_SEEDS:
      out[k] = Verdict("few", None, None, n)
    elif len(set(a) | set(b)) == 1:
      out[k] = Verdict("equal", None, None, n, a[0])
    else:
      tested[k] = (welch(a, b), n)
  adj = dict(zip(tested, holm([t.p for t, _ in tested.values()])))
  for k, (t, n) in tested.items():
    word = ("unresolved" if not adj[k] < alpha else
            "better" if (t.diff > 0) == higher_better else "worse")
    out[k] = Verdict(word, t, adj[k], n)
  return out


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
  return new_line(rec) if rec.get("version") == VERSION else old_line()
