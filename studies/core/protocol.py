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


# ---- the metric a verdict compares, and the interval it prints ------------------------

@dataclasses.dataclass(frozen=True)
class Metric:
  """What a verdict needs of the figure it compares: its direction, its format (a
  value's), and its bounds (None: unbounded on that side). A difference of a
  percentage is written in points (`diff_text`)."""
  higher_better: bool = True
  fmt: str = "{:.3g}"
  lo: float | None = None
  hi: float | None = None

  @property
  def bounded(self) -> bool:
    return self.lo is not None and self.hi is not None

  @property
  def best(self) -> float | None:
    """The metric's best bound, its ceiling (hi where higher is better, else lo)."""
    return self.hi if self.higher_better else self.lo

  def diff(self, x: float) -> str:
    return diff_text(x, self.fmt)


# The bounds of the metrics the pages judge, by the key their JSON holds them under
# (studies.variants.measure.METRIC; MQAR's "accuracy"): accuracies are fractions, BLEU
# is 0-100, a loss and bits/dim have no upper bound.
BOUNDS = {"token_accuracy": (0.0, 1.0), "accuracy": (0.0, 1.0), "bleu": (0.0, 100.0),
          "eval_loss": (0.0, None), "bits_per_dim": (0.0, None)}


def metric(key: str, higher_better: bool, fmt: str = "{:.3g}") -> Metric:
  """The Metric of a figure stored under `key` (BOUNDS; unbounded where not listed)."""
  lo, hi = BOUNDS.get(key, (None, None))
  return Metric(bool(higher_better), fmt, lo, hi)


def _pct_decimals(fmt) -> int | None:
  """The decimals of a percentage format ("{:.1%}" -> 1), None for any other."""
  import re
  m = re.search(r"\.(\d+)%", str(fmt))
  return int(m.group(1)) if m else None


def diff_text(x: float, fmt: str = "{:.3g}") -> str:
  """A signed difference in a page's words (− for minus): of a percentage metric (a
  format "{:.N%}"), in points, "+1.2 pts", never "+1.2%" (a difference of two
  percentages is not a percentage of anything); else in the metric's format."""
  d = _pct_decimals(fmt)
  if d is not None:
    while x and round(abs(x) * 100, d) == 0 and d < 6:     # a nonzero gap never reads 0
      d += 1
  s = f"{abs(x) * 100:.{d}f} pts" if d is not None else fmt.format(abs(x))
  return ("+" if x >= 0 else "−") + s


LEVEL = 0.95          # the intervals' coverage
RESAMPLES = 9999      # the bootstrap's resamples (a fixed generator: a page renders alike)


def bootstrap(a, b, level: float = LEVEL) -> tuple[float, float]:
  """The percentile bootstrap interval of mean(a) − mean(b), each side's seeds resampled
  apart (scipy.stats.bootstrap, method="percentile", a fixed generator). Each
  resampled difference is a difference of two means of values that were observed, so
  the interval never leaves the metric's range, nor passes what the seeds allow (a
  reference at the ceiling on every seed leaves an upper end of at most 0)."""
  import warnings

  import numpy as np
  from scipy import stats
  a, b = np.asarray(a, float), np.asarray(b, float)
  if a.std() == 0 and b.std() == 0:
    d = float(a.mean() - b.mean())
    return d, d
  with warnings.catch_warnings():     # a side of one value is a degenerate resample
    warnings.simplefilter("ignore")
    r = stats.bootstrap((a, b), lambda x, y, axis=-1: x.mean(axis) - y.mean(axis),
                        n_resamples=RESAMPLES, method="percentile",
                        confidence_level=level, rng=np.random.default_rng(0))
  lo, hi = float(r.confidence_interval.low), float(r.confidence_interval.high)
  d_lo, d_hi = float(a.min() - b.max()), float(a.max() - b.min())     # float rounding
  return max(lo, d_lo), min(hi, d_hi)


def interval(a, b, m: Metric | None) -> tuple[float, float]:
  """The interval of mean(a) − mean(b) a page prints: the bootstrap over seeds
  (`bootstrap`) for a bounded metric, whose Welch interval can run past the bounds
  (±100 points of an accuracy); Welch's for an unbounded one (a loss)."""
  if m is not None and m.bounded:
    return bootstrap(a, b)
  w = welch(a, b)
  return w.lo, w.hi


@dataclasses.dataclass(frozen=True)
class Verdict:
  """One comparison of a page: `word` (better, worse, unresolved, equal, few; version
  2: more seeds, unstable, did not train), the test (None where untested), the
  adjusted p (the raw p where `exploratory`), the seeds of each side."""
  word: str
  test: Welch | None
  p_adj: float | None
  n: tuple
  value: float | None = None     # the common value where equal; the spread bound where split
  ci: tuple | None = None        # the interval printed; None: `sample`'s, else the test's
  ceiling: bool = False          # equal, both at the metric's best bound on every seed
  values: tuple = ()             # the split side's seed values (more seeds, unstable)
  side: str = ""                 # which side is split: "row" or "reference"
  exploratory: bool = False      # outside the family: Welch's p unadjusted
  # (a's seeds, b's seeds, Metric) whose `interval` is printed, computed when first read
  # (a page reads few of its verdicts' intervals: a bootstrap each is not free)
  sample: tuple | None = dataclasses.field(default=None, compare=False, repr=False)

  @functools.cached_property
  def bounds(self) -> tuple | None:
    """(lo, hi) of the interval printed: `ci`, else `interval` of `sample`, else the
    test's (Welch); None untested."""
    if self.ci:
      return self.ci
    if self.sample:
      return interval(*self.sample)
    return (self.test.lo, self.test.hi) if self.test else None

  @property
  def lo(self) -> float | None:
    return self.bounds[0] if self.bounds else None

  @property
  def hi(self) -> float | None:
    return self.bounds[1] if self.bounds else None

  def flipped(self) -> "Verdict":
    """The same comparison read the other way round (b against a)."""
    t = self.test
    return dataclasses.replace(
        self, word={"better": "worse", "worse": "better"}.get(self.word, self.word),
        test=t and Welch(-t.diff, -t.hi, -t.lo, t.df, t.p), n=self.n[::-1],
        ci=self.ci and (-self.ci[1], -self.ci[0]),
        sample=self.sample and (self.sample[1], self.sample[0], self.sample[2]),
        side={"row": "reference", "reference": "row"}.get(self.side, self.side))

  def text(self, fmt: str = "{:.3g}") -> str:
    """The page's words: e.g. "better (Δ +0.40 [+0.21, +0.59], p_adj 0.004)"; a
    difference of a percentage in points (`diff_text`)."""
    if self.word == "few":
      return f"needs ≥ {MIN_SEEDS} seeds of both (seeds: {self.n[1]} and {self.n[0]})"
    if self.word == "equal":
      if self.ceiling:
        return f"at ceiling: cannot separate (both {fmt.format(self.value)} on every seed)"
      return f"equal on every seed ({fmt.format(self.value)})"
    if self.word in ("more seeds", "unstable"):
      vals = ", ".join(fmt.format(x) for x in self.values)
      spread = diff_text(max(self.values) - min(self.values), fmt).lstrip("+")
      bound = diff_text(self.value, fmt).lstrip("+")
      who = "the reference's" if self.side == "reference" else "its"
      return (f"more seeds before a verdict ({who} seeds {vals} spread {spread}, over "
              f"the bound {bound}: up to {MAX_SEEDS} seeds)" if self.word == "more seeds"
              else f"unstable: {who} {len(self.values)} seeds ({vals}) still spread "
                   f"{spread}, over the bound {bound}")
    if self.word == "did not train":
      return f"did not train (every rate within {CHANCE_FACTOR:g}× chance)"
    t = self.test
    d = lambda x: diff_text(x, fmt)
    p = (f"unadjusted p {self.p_adj:.2g}, exploratory" if self.exploratory
         else f"p_adj {self.p_adj:.2g}")
    return f"{self.word} (Δ {d(t.diff)} [{d(self.lo)}, {d(self.hi)}], {p})"


def verdicts(pairs: Mapping, higher_better: bool, alpha: float = ALPHA,
             metric: Metric | None = None) -> dict:
  """{key: Verdict} of every comparison of a family, {key: (seeds of a, seeds of b)} (a
  against b): Welch's test of each pair with MIN_SEEDS seeds or more on both sides
  whose values are not identical, Holm's correction over all of those, and better /
  worse (a against b, in the metric's direction) at adjusted p < alpha, else
  unresolved. Pairs of identical values on every seed are "equal" (`ceiling` where
  that value is the metric's best bound: no test could separate them); pairs with
  fewer seeds get no verdict ("few"). `metric`: the interval printed is `interval`'s
  (inside a bounded metric's range); None: Welch's."""
  out, tested = {}, {}
  for k, (a, b) in pairs.items():
    a, b = [float(x) for x in a], [float(x) for x in b]
    n = (len(a), len(b))
    if min(n) < MIN_SEEDS:
      out[k] = Verdict("few", None, None, n)
    elif len(set(a) | set(b)) == 1:
      out[k] = Verdict("equal", None, None, n, a[0],
                       ceiling=metric is not None and metric.best == a[0])
    else:
      tested[k] = (welch(a, b), n, None if metric is None else (a, b, metric))
  adj = dict(zip(tested, holm([t.p for t, _, _ in tested.values()])))
  for k, (t, n, sample) in tested.items():
    word = ("unresolved" if not adj[k] < alpha else
            "better" if (t.diff > 0) == higher_better else "worse")
    out[k] = Verdict(word, t, adj[k], n, sample=sample)
  return {k: out[k] for k in pairs}


def exploratory(pairs: Mapping, metric: Metric, alpha: float = ALPHA) -> dict:
  """{key: Verdict} of comparisons outside the family (version 2: the pairs between
  rows, "ahead of"): each its own test, Welch's p unadjusted, better / worse at p <
  alpha, marked `exploratory` (a page labels them so: with many pairs some pass by
  chance)."""
  return {k: dataclasses.replace(verdicts({k: ab}, metric.higher_better, alpha,
                                          metric)[k], exploratory=True)
          for k, ab in pairs.items()}


# ---- version 2: the family, the implementations, the power, the split rows ------------

def implementations(names, reference: str = "softmax") -> list[str]:
  """The names among `names` that implement the reference's function, from registry
  facts: family "exact" and the reference's score declared (fn is exactly
  softmax(score(q, k)) @ v up to float rounding: flash, sdpa, ring, flash_pallas,
  flash_mgpu). fp8, exact in family but declaring no score (its float8 rounding changes
  the function: lossy), is not one and stays a comparison. Their equality is the
  numerics tests' business, not a verdict's."""
  import attention
  known = set(attention.names())
  if reference not in known:
    return []
  score = attention.variant(reference).score
  out = []
  for n in names:
    if n == reference or n not in known:
      continue
    v = attention.variant(n)
    if v.family == "exact" and v.score is not None and v.score is score:
      out.append(n)
  return sorted(out)


def implementation_group(by: Mapping, reference: str = "softmax") -> tuple:
  """(the reference's implementations among by's rows, their largest difference from
  it): by: {variant: {seed: figure}}; the difference is the largest |row − reference|
  over the seeds both ran (seed for seed), else of the means; ([], None) where there
  are none or no reference."""
  impl = [v for v in implementations(by, reference) if by.get(v)]
  ref = by.get(reference)
  if not impl or not ref:
    return [], None
  worst = 0.0
  for v in impl:
    common = set(by[v]) & set(ref)
    gaps = ([abs(by[v][s] - ref[s]) for s in common] if common else
            [abs(sum(by[v].values()) / len(by[v]) - sum(ref.values()) / len(ref))])
    worst = max(worst, *gaps)
  return impl, worst


POWER = 0.80          # the power a column's detectable difference is stated at


def detectable(ref, n_row: int | None = None, m: int = 1, alpha: float = ALPHA,
               power: float = POWER) -> float | None:
  """The smallest difference a comparison of a row of `n_row` seeds (the reference's
  count where None) with the reference's seeds `ref` detects with probability `power`
  at the family's α: the strictest step of Holm's correction over `m` comparisons,
  α / m, two-sided. Both sides' spread taken as the reference's seed sd s:
  (t_{1 − α/(2m)}(ν) + t_{power}(ν)) · s · √(1/n_ref + 1/n_row), ν = n_ref + n_row − 2
  (the normal approximation of a two-sample test's power with t quantiles,
  scipy.stats.t.ppf). None where the reference has fewer than 2 seeds or no spread."""
  import statistics

  from scipy import stats
  ref = [float(x) for x in ref]
  n_row = len(ref) if n_row is None else int(n_row)
  if len(ref) < 2 or n_row < 1:
    return None
  s = statistics.stdev(ref)
  if s == 0:
    return None
  nu = len(ref) + n_row - 2
  q = float(stats.t.ppf(1 - alpha / (2 * max(1, m)), nu) + stats.t.ppf(power, nu))
  return q * s * math.sqrt(1 / len(ref) + 1 / n_row)


def at_ceiling(values, m: Metric) -> bool:
  """Whether every seed of `values` sits at the metric's best bound."""
  return m.best is not None and bool(values) and all(float(x) == m.best for x in values)


def power_text(ref, m: Metric, family: int, n_row: int | None = None,
               alpha: float = ALPHA, name: str = "softmax") -> str:
  """A column's power line: the smallest difference it could detect (`detectable`, at
  the family's α over `family` comparisons), or why it cannot say (the reference at
  the ceiling on every seed: a row also there cannot be separated; no spread)."""
  ref = [float(x) for x in ref]
  head = f"Power ({name}'s {len(ref)} seeds, a family of {family}): "
  if at_ceiling(ref, m):
    return (head + f"{name} is at the metric's ceiling ({m.fmt.format(m.best)}) on every "
            "seed: at ceiling: cannot separate a row that also reaches it, and there is "
            "no seed spread to size a detectable difference from.")
  d = detectable(ref, n_row, family, alpha)
  if d is None:
    return head + (f"{name} has no seed spread (or fewer than 2 seeds): the smallest "
                   "detectable difference cannot be sized from it.")
  if m.bounded and d > m.hi - m.lo:
    return (head + f"the smallest difference detectable at {POWER:.0%} power at α "
            f"{alpha:g}/{family} (Holm's strictest step) exceeds the metric's whole range "
            f"({diff_text(m.hi - m.lo, m.fmt).lstrip('+')}), from {name}'s seed sd "
            "(`studies.core.protocol.detectable`): these seeds cannot detect any "
            "difference, so no verdict of this column says the two are alike or apart.")
  return (head + f"the smallest difference detectable at {POWER:.0%} power at α "
          f"{alpha:g}/{family} (Holm's strictest step) is {diff_text(d, m.fmt).lstrip('+')}"
          f", from {name}'s seed sd (`studies.core.protocol.detectable`): a true difference that "
          "large is found 4 times in 5, a smaller one mostly not, so an unresolved "
          "verdict never says the two are alike.")


SPREAD = 0.10         # a seed range over this share of the metric's scale is a split row
MAX_SEEDS = 8         # the most seeds a split row runs before it reads "unstable"


def spread_bound(m: Metric, ref) -> float:
  """The widest seed range (max − min) of one row before it counts as split between
  modes: SPREAD of the metric's range for a bounded metric (10 points of an accuracy,
  10 BLEU), else SPREAD of the reference's mean (0.17 of a 1.7-nat loss)."""
  if m.bounded:
    return SPREAD * (m.hi - m.lo)
  ref = [float(x) for x in ref]
  return SPREAD * abs(sum(ref) / len(ref))


def is_split(values, bound: float) -> bool:
  """Whether seeds `values` spread wider than `bound` (`spread_bound`)."""
  values = [float(x) for x in values]
  return len(values) >= 2 and max(values) - min(values) > bound


def more_seeds(values, bound: float) -> int:
  """How many more seeds a row needs before a verdict: up to MAX_SEEDS where its seeds
  are split (`is_split`), else 0 (also 0 at MAX_SEEDS: it then reads "unstable")."""
  return max(0, MAX_SEEDS - len(values)) if is_split(values, bound) else 0


def primary_verdicts(columns: Mapping, m: Metric, reference: str = "softmax",
                     alpha: float = ALPHA, untrained=()) -> dict:
  """{(variant, column): Verdict} of version 2's family, from {column: {variant: [seed
  figures]}}: in each column, each variant against the reference, its implementations
  aside (`implementations`: a group under it, not comparisons). A side whose seeds
  are split (`spread_bound`) gives "more seeds" (fewer than MAX_SEEDS) or "unstable"
  instead of a test; a variant of `untrained` (every rate at chance:
  `RateGrid.trained`) reads "did not train". Holm's correction over the comparisons
  tested, and nothing else: pairs between rows are `exploratory`."""
  out, pairs, order = {}, {}, []
  for col, by in columns.items():
    if reference not in by:
      continue
    ref = [float(x) for x in by[reference]]
    impl = set(implementations(by, reference))
    bound = spread_bound(m, ref)
    for v, xs in by.items():
      if v == reference or v in impl:
        continue
      xs, k = [float(x) for x in xs], (v, col)
      n = (len(xs), len(ref))
      order.append(k)
      split = next(((side, s) for side, s in (("row", xs), ("reference", ref))
                    if len(s) >= MIN_SEEDS and is_split(s, bound)), None)
      if v in untrained:
        out[k] = Verdict("did not train", None, None, n, values=tuple(xs))
      elif split and min(n) >= MIN_SEEDS:
        side, s = split
        out[k] = Verdict("unstable" if len(s) >= MAX_SEEDS else "more seeds", None, None,
                         n, bound, values=tuple(s), side=side)
      else:
        pairs[k] = (xs, ref)
  out.update(verdicts(pairs, m.higher_better, alpha, m))
  return {k: out[k] for k in order}


# ---- version 2: rate grids with an interior optimum ----------------------------------

MIN_RATES = 4         # a grid's fewest rates
EXTEND = 2            # the most steps a grid extends past an end, per side
CHANCE_FACTOR = 2.0   # a row whose every rate stays within this factor of chance: untrained


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


# Each task's tie, written down (studies/PROTOCOL.md): `tie_threshold` of its reference's
# reporting seeds on the committed pages (2026-12-07). copy: softmax scored 100% on every
# seed, no spread, so version 1's tie (1 point) stands as the floor; Shakespeare and
# Multi30k: from their old-protocol seeds (0-2), until their re-runs measure them.
TIES = {"copy": 0.01, "listops": 0.0065, "mnist": 0.021, "mqar": 0.00037,
        "shakespeare": 0.017, "multi30k": 0.14}


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
  every rate of `grid` (at least MIN_RATES), then, while the chosen rate (the best,
  rates within `tie` of it tied, a tie to the smallest: runs.choose_lr) is an end of
  what ran, the next rate out that way (lr_ladder: a step of the end's ratio),
  up to `extend` a side, so the optimum is interior or the grid's limit is stated. A
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
    best, ran, ladder = runs.choose_lr(v, self.tie, self.higher_better), sorted(v), self.ladder
    for end, step in ((ran[-1], 1), (ran[0], -1)):
      if best == end and end in ladder and 0 <= ladder.index(end) + step < len(ladder):
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
