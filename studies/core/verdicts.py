"""The statistics of studies.core.protocol's verdicts (studies/PROTOCOL.md): Welch's
t-test and Holm's correction, the metric a verdict compares and the interval it prints
(a bootstrap over seeds inside a bounded metric's range), the Verdict record, and
version 2's family of primary comparisons, softmax's implementations as a group, the
power line and the split rows. studies.core.protocol re-exports every name here, so a
study reads them as `protocol.<name>`; the rules that say what runs (splits, seeds,
versions, rate grids, a page's record) stay there.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping

ALPHA = 0.05
MIN_SEEDS = 3        # the fewest seeds of each side a verdict is given from
CHANCE_FACTOR = 2.0   # a row whose every rate stays within this factor of chance: untrained


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


def bootstrap_mean(a, level: float = LEVEL) -> tuple[float, float]:
  """The percentile bootstrap interval of mean(a) over its seeds (scipy.stats.bootstrap,
  as `bootstrap`): a mean of observed values, so inside [min(a), max(a)] and the
  metric's range. One value, or equal values: that value at both ends."""
  import numpy as np
  from scipy import stats
  a = np.asarray(a, float)
  if a.size < 2 or a.std() == 0:
    return float(a.mean()), float(a.mean())
  r = stats.bootstrap((a,), lambda x, axis=-1: x.mean(axis), n_resamples=RESAMPLES,
                      method="percentile", confidence_level=level,
                      rng=np.random.default_rng(0))
  lo, hi = float(r.confidence_interval.low), float(r.confidence_interval.high)
  return max(lo, float(a.min())), min(hi, float(a.max()))


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
