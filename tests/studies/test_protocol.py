"""studies.core.protocol (studies/PROTOCOL.md): the selector sees validation figures only,
the reporting seeds are not the selection seeds, Welch's test with Holm's correction
gives the page's verdicts, and the data's validation and test splits are apart."""
import json
import math
import os
import random

import numpy as np
import pytest

from studies.core import protocol, sweep


def test_holm_worked_by_hand():
  # sorted: 0.005 x4 = 0.02, 0.01 x3 = 0.03, 0.03 x2 = 0.06, 0.04 x1 = 0.04 -> 0.06
  # (never below the one before it)
  assert protocol.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
  assert protocol.holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])     # capped at 1
  assert protocol.holm([0.02]) == [0.02] and protocol.holm([]) == []


def test_welch_against_the_textbook_formula():
  a, b = [1, 2, 3, 4, 5], [2, 4, 6, 8, 10]
  w = protocol.welch(a, b)
  va, vb = 2.5 / 5, 10 / 5                       # sample variances / n
  df = (va + vb) ** 2 / (va ** 2 / 4 + vb ** 2 / 4)
  from scipy import stats
  h = stats.t.ppf(0.975, df) * math.sqrt(va + vb)
  assert (w.diff, w.df) == pytest.approx((-3.0, df))
  assert (w.lo, w.hi) == pytest.approx((-3 - h, -3 + h))
  t = -3 / math.sqrt(va + vb)
  assert w.p == pytest.approx(2 * stats.t.sf(abs(t), df))


def test_verdicts_find_a_large_difference_and_leave_equal_means_unresolved():
  """17 comparisons at once (a page's count): a true difference of 10 sd stays
  'better' after Holm's correction; 16 pairs of equal means stay unresolved."""
  rng = np.random.default_rng(0)
  ref = rng.normal(0, 1, 5)
  pairs = {"big": (rng.normal(10, 1, 5), ref)}
  pairs.update({f"null{i}": (rng.normal(0, 1, 5), ref) for i in range(16)})
  v = protocol.verdicts(pairs, higher_better=True)
  assert v["big"].word == "better" and v["big"].p_adj < 0.05
  assert all(v[f"null{i}"].word == "unresolved" for i in range(16))
  assert protocol.verdicts(pairs, higher_better=False)["big"].word == "worse"
  # the adjusted p is Holm's over the 17 tests
  ps = [protocol.welch(*pairs[k]).p for k in pairs]
  assert [v[k].p_adj for k in pairs] == pytest.approx(protocol.holm(ps))
  assert v["big"].text("{:.2f}").startswith("better (Δ +")


def test_a_difference_that_passes_alone_is_unresolved_after_correction():
  """p = 0.02 alone is 'better'; among 17 comparisons its Holm-adjusted p is >= 0.05."""
  a, b = [1.0, 1.1, 1.2, 1.05, 1.15], [0.95, 1.0, 1.05, 1.0, 0.9]
  alone = protocol.verdicts({"x": (a, b)}, True)["x"]
  assert alone.test.p < 0.05 and alone.word == "better"
  many = {"x": (a, b), **{f"n{i}": ([1, 2, 3], [1, 2, 3.1]) for i in range(16)}}
  v = protocol.verdicts(many, True)["x"]
  assert v.p_adj >= 0.05 and v.word == "unresolved"


def test_equal_and_too_few_seeds():
  v = protocol.verdicts({"eq": ([1.0] * 5, [1.0] * 5), "few": ([1, 2], [3, 4, 5]),
                         "exact": ([0.9] * 3, [1.0] * 3)}, True)
  assert v["eq"].word == "equal" and v["eq"].text("{:.2%}") == "equal on every seed (100.00%)"
  assert v["few"].word == "few" and v["few"].text().startswith("needs ≥ 3 seeds")
  assert v["exact"].word == "worse"            # no spread, every seed apart


def test_the_selector_never_sees_a_test_metric():
  """LrRule takes {rate: validation figure}: a record holding a test figure is refused,
  and whatever the test figures are, protocol.select chooses the same rate."""
  rule = sweep.LrRule((1e-3, 3e-3, 1e-2), extend=0, tie=0.01)
  val = {1e-3: 0.5, 3e-3: 0.8, 1e-2: 0.7}
  runs = {lr: protocol.Scores(q, None) for lr, q in val.items()}
  chosen = protocol.select(rule, runs)
  assert chosen == 3e-3
  rnd = random.Random(0)
  for _ in range(50):
    noisy = {lr: {"validation": s.validation, "test": rnd.random()} for lr, s in runs.items()}
    assert protocol.select(rule, noisy) == chosen
  with pytest.raises(TypeError, match="validation figures only"):
    rule.choose({lr: {"validation": q, "test": q} for lr, q in val.items()})
  with pytest.raises(TypeError):
    rule.next(runs)


def test_reporting_seeds_are_fresh_and_enough():
  for page, n in protocol.REPORTING.items():
    seeds = protocol.reporting_seeds(page)
    assert len(seeds) == n and not set(seeds) & set(protocol.SELECTION_SEEDS)
  cheap = ("variants_copy", "variants_listops", "variants_mnist", "variants_mqar")
  assert all(protocol.REPORTING[p] >= 5 for p in cheap)
  assert all(n >= 3 for n in protocol.REPORTING.values())


def test_the_new_config_fields_keep_old_rows_identity():
  """mnist_validation and test_fraction at their defaults leave a fingerprint as it was;
  the protocol's values change it (a run under the protocol is another run)."""
  from studies.variants import compare as cv
  for task, ov in protocol.DATA_OVERRIDES.items():
    base = sweep.config_fingerprint(cv.make_config(task, "cpu", "softmax"))
    neutral = {k: sweep.NEUTRAL[k] for k in ov}
    assert sweep.config_fingerprint(cv.make_config(task, "cpu", "softmax", neutral)) == base
    assert sweep.config_fingerprint(cv.make_config(task, "cpu", "softmax", ov)) != base


def test_a_rerun_trains_the_gated_variants_with_their_papers_layers():
  """Under the protocol a page with a decoder trains the gated variants with their
  papers' layers, merged with a run's own model overrides; ListOps (a classifier,
  which they cannot fill) keeps its runs' configs as they were; the pages not yet
  re-run keep their bare rows."""
  from studies.variants import compare as cv
  assert protocol.overrides("listops") == {} and protocol.with_overrides("listops", {}) is None
  ov = protocol.with_overrides("mnist", {"model": {"num_layers": 1}, "num_train_steps": 5})
  assert ov == {"mnist_validation": 5000, "num_train_steps": 5,
                "model": {"gated_layer": protocol.gated_layer(protocol.VERSION),
                          "num_layers": 1}}
  c = cv.make_config("copy", "cpu", "gla", protocol.with_overrides("copy", None))
  assert c.model.gated_layer == "published" and not cv.layer_notes(c)
  soft = lambda ov: sweep.config_fingerprint(cv.make_config("copy", "cpu", "softmax", ov))
  assert soft(protocol.with_overrides("copy", None)) == soft(None)   # no layer: as before
  assert cv.make_config("copy", "cpu", "gla").model.gated_layer == "bare"


def _copy_config(**kw):
  import ml_collections
  return ml_collections.ConfigDict(dict(dict(task="copy", seed=0, copy_len=4, batch_size=2,
                                             eval_batches=2, eval_batch_size=3), **kw))


def test_copy_validation_is_unchanged_and_test_is_a_stream_of_its_own():
  from data import pipeline
  val = [b["y"] for b in pipeline.Copy(_copy_config()).eval_batches()]
  rng = np.random.default_rng([0, 2 ** 31 - 1])         # the stream before the protocol
  assert np.array_equal(val[0], pipeline.Copy(_copy_config())._batch(rng, 3)["y"])
  test = [b["y"] for b in pipeline.Copy(_copy_config(eval_split="test")).eval_batches()]
  test1 = [b["y"] for b in pipeline.Copy(_copy_config(eval_split="test", seed=1))
           .eval_batches()]
  assert not np.array_equal(val[0], test[0])
  assert all(np.array_equal(x, y) for x, y in zip(test, test1))   # every seed's one test
  train = pipeline.Copy(_copy_config()).train_batch(0)["y"]
  assert not np.array_equal(train[:2], test[0][:2])
  with pytest.raises(ValueError, match="eval_split"):
    list(pipeline.Copy(_copy_config(eval_split="val")).eval_batches())


def test_a_rerun_page_names_each_verdict_the_protocol_changed_once(tmp_path, monkeypatch):
  """compare_variants --record_before keeps the page's old verdicts in protocol.json
  (kept when --protocol marks the page again); the page then lists each variant whose
  verdict against softmax moved, and none still short of seeds."""
  from studies.variants import seeds as vs
  out = str(tmp_path / "variants_listops")
  os.makedirs(out)
  protocol.write_page_record(out, "variants_listops", protocol.VERSION)
  rec = json.load(open(os.path.join(out, protocol.RECORD)))
  rec["before"] = {"rev": "abc1234", "verdicts": {"linear": "unresolved", "dot":
                                                  "unresolved", "cosine": "unresolved"}}
  json.dump(rec, open(os.path.join(out, protocol.RECORD), "w"))
  protocol.write_page_record(out, "variants_listops", protocol.VERSION)   # marked again
  assert json.load(open(os.path.join(out, protocol.RECORD)))["before"] == rec["before"]
  # recorded ahead of the re-run, it outlives a rewrite of the page still at version 0
  # (make pages), which once dropped it
  old = str(tmp_path / "variants_copy")
  os.makedirs(old)
  json.dump({"version": 0, "before": rec["before"]}, open(os.path.join(old, protocol.RECORD), "w"))
  protocol.write_page_record(old, "variants_copy")
  kept = json.load(open(os.path.join(old, protocol.RECORD)))
  assert kept["version"] == 0 and kept["before"] == rec["before"]
  monkeypatch.setattr(vs, "words_against_softmax", lambda *a, **k: {
      "linear": "worse", "dot": "few", "cosine": "unresolved", "local": "better"})
  text = "\n".join(vs.changed_lines("listops", "cpu", [], out))
  assert "## What the protocol changed" in text and "commit `abc1234`" in text
  assert "- `linear`: unresolved before, worse now." in text
  assert "`dot`" not in text and "`cosine`" not in text and "`local`" not in text
  monkeypatch.setattr(vs, "words_against_softmax", lambda *a, **k: {"cosine": "unresolved"})
  assert vs.changed_lines("listops", "cpu", [], out) == []


def test_a_page_partway_through_its_rerun_calls_its_verdicts_provisional(tmp_path, monkeypatch):
  from studies.variants import seeds as vs
  out = str(tmp_path / "variants_listops")
  os.makedirs(out)
  protocol.write_page_record(out, "variants_listops", protocol.VERSION)
  base = vs.base_lr("listops", "cpu")
  monkeypatch.setattr(vs, "chosen_lrs", lambda *a, **k: {"softmax": base, "linear": base})
  fp = lambda v, s: min(vs.fingerprints(vs.make_config("listops", "cpu", v, {"seed": s})))
  seeds = protocol.reporting_seeds("variants_listops")
  json.dump([{"variant": v, "task": "listops", "preset": "cpu", "seed": s,
              "quality": q + 0.001 * s, "config": fp(v, s), "protocol": protocol.VERSION}
             for v, q in (("softmax", 0.35), ("linear", 0.34)) for s in seeds],
            open(os.path.join(out, "seeds.json"), "w"))
  row = lambda v: {"variant": v, "task": "listops", "preset": "cpu", "status": "ok",
                   "eval": {"accuracy": 0.35}}
  done = [row("softmax"), row("linear")]
  assert "Provisional" not in "\n".join(vs.seed_spread("listops", "cpu", done, out))
  text = "\n".join(vs.seed_spread("listops", "cpu", done + [
      {"variant": "dot", "status": "skipped", "pending": True}], out))
  assert "**Provisional until the page is complete:** 1 variant (`dot`)" in text


def test_a_column_label_names_the_split_its_figures_come_from(tmp_path):
  """Shakespeare's rows were measured on its validation split before the protocol and
  on its held-out test split under it: the label says which, read from the page's
  protocol.json (the decision page's columns too); a task whose label names no split,
  or the one it always reported on, keeps it."""
  from studies.choose import sources as S
  from studies.variants.measure import METRIC, metric_label
  assert metric_label("shakespeare", 0) == "val loss (nats/char)"
  assert metric_label("shakespeare", protocol.VERSION) == "test loss (nats/char)"
  for task in METRIC:
    if task != "shakespeare":
      assert metric_label(task, protocol.VERSION) == metric_label(task, 0)
  src = next(s for s in S.SOURCES if s.key == "shakespeare")
  assert S.label(src, str(tmp_path)) == "val loss (nats/char)"     # no record: version 0
  protocol.write_page_record(str(tmp_path / src.page), src.page, protocol.VERSION)
  assert S.label(src, str(tmp_path)) == "test loss (nats/char)"


# ---- version 2 (studies/PROTOCOL.md): synthetic seeds ------------------------------------

ACC = protocol.Metric(True, "{:.1%}", 0.0, 1.0)


def test_v2_family_is_the_primary_comparisons_only():
  """Each variant against the reference, per column, is the family: its size (Holm's m)
  does not grow with the pairs of rows, which are exploratory and unadjusted; the
  reference's implementations (flash, ring: registry facts) are no comparison, fp8
  (lossy) is one."""
  rng = np.random.default_rng(1)
  col = {"softmax": [0.80, 0.82, 0.81, 0.79, 0.80],
         "flash": [0.80, 0.82, 0.81, 0.79, 0.80], "ring": [0.80, 0.82, 0.81, 0.79, 0.80],
         "fp8": [0.80, 0.81, 0.81, 0.79, 0.80],
         **{f"v{i}": list(rng.uniform(0.75, 0.85, 5)) for i in range(6)}}
  ver = protocol.primary_verdicts({"a": col, "b": col}, ACC)
  assert set(ver) == {(v, c) for c in "ab" for v in ["fp8"] + [f"v{i}" for i in range(6)]}
  assert protocol.implementations(col) == ["flash", "ring"]
  # Holm over exactly these 14 tests (fp8 differs on some seed: tested)
  keys = [k for k, x in ver.items() if x.test is not None]
  ps = [ver[k].test.p for k in keys]
  assert [ver[k].p_adj for k in keys] == pytest.approx(protocol.holm(ps))
  assert len(keys) == 14
  # the pairs: each its own unadjusted test, labelled exploratory
  ex = protocol.exploratory({("v0", "v1"): (col["v0"], col["v1"])}, ACC)[("v0", "v1")]
  assert ex.exploratory and ex.p_adj == ex.test.p and "exploratory" in ex.text("{:.1%}")
  group, worst = protocol.implementation_group(
      {v: dict(enumerate(xs)) for v, xs in col.items()})
  assert group == ["flash", "ring"] and worst == 0.0


def test_v2_a_bounded_interval_never_passes_the_bound():
  """Welch's interval of a row far below a reference at 100% on every seed runs past
  the metric's bounds (both ends); the bootstrap over seeds stays inside them, and
  its upper end is at most 0 where the reference sits at the ceiling."""
  row, ref = [0.05, 0.40, 0.95], [1.0, 1.0, 1.0]
  w = protocol.welch(row, ref)
  assert w.lo < -1.0                                     # Welch: past −100 points
  lo, hi = protocol.interval(row, ref, ACC)
  assert -1.0 <= lo <= hi <= 0.0
  v = protocol.verdicts({"x": (row, ref)}, True, metric=ACC)["x"]
  assert (v.lo, v.hi) == (lo, hi) and v.test.lo == w.lo      # the test keeps Welch's
  assert "pts" in v.text("{:.1%}") and "%" not in v.text("{:.1%}").split("(Δ")[1]
  a, b = [0.1, 0.5, 0.9, 0.2], [0.3, 0.95, 0.6]                # neither at a bound
  lo, hi = protocol.interval(a, b, ACC)
  assert -1.0 <= lo <= hi <= 1.0 and lo >= min(a) - max(b) and hi <= max(a) - min(b)
  assert protocol.diff_text(-0.945, "{:.1%}") == "−94.5 pts"
  assert protocol.diff_text(0.00002, "{:.2%}") == "+0.002 pts"  # never a nonzero 0.00


def test_v2_a_ceiling_column_reads_cannot_separate():
  ceil = protocol.verdicts({"x": ([1.0] * 5, [1.0] * 5)}, True, metric=ACC)["x"]
  assert ceil.word == "equal" and ceil.ceiling
  assert ceil.text("{:.1%}").startswith("at ceiling: cannot separate")
  low = protocol.verdicts({"x": ([0.5] * 5, [0.5] * 5)}, True, metric=ACC)["x"]
  assert not low.ceiling and low.text("{:.1%}").startswith("equal on every seed")
  line = protocol.power_text([1.0] * 5, ACC, 16)
  assert "at ceiling: cannot separate" in line


def test_v2_power_line_from_the_reference_spread():
  """The detectable difference: (t_{1-α/2m} + t_0.8) · s · √(2/n) on 2n − 2 df; it grows
  with the family, and a reference with no spread gives none."""
  from scipy import stats
  ref = [0.80, 0.82, 0.81, 0.79, 0.83]
  s = np.std(ref, ddof=1)
  want = (stats.t.ppf(1 - 0.05 / 2 / 16, 8) + stats.t.ppf(0.8, 8)) * s * math.sqrt(2 / 5)
  assert protocol.detectable(ref, m=16) == pytest.approx(want)
  assert protocol.detectable(ref, m=136) > protocol.detectable(ref, m=16)
  assert protocol.detectable([0.5] * 5) is None
  assert "pts" in protocol.power_text(ref, ACC, 16)
  # gated_ablation's gla bare (35.8 / 83.5 / 41.9%): more than the whole 100 points
  wide = protocol.power_text([0.358, 0.835, 0.419], ACC, 22)
  assert "exceeds the metric's whole range" in wide and "cannot detect any" in wide
  assert "167" not in wide


def test_v2_a_bimodal_row_asks_for_more_seeds_then_reads_unstable():
  """gated_ablation's gla bare (35.8 / 83.5 / 41.9%): its seeds spread past the bound
  (10 points of an accuracy), so it gets more seeds (up to MAX_SEEDS) before any
  verdict; still split at MAX_SEEDS, it reads "unstable" with its seed values."""
  ref = [0.99, 0.985, 0.99]
  bound = protocol.spread_bound(ACC, ref)
  assert bound == pytest.approx(0.10)
  split = [0.358, 0.835, 0.419]
  assert protocol.more_seeds(split, bound) == protocol.MAX_SEEDS - 3
  v = protocol.primary_verdicts({"c": {"softmax": ref, "gla": split}}, ACC)[("gla", "c")]
  assert v.word == "more seeds" and v.test is None and "35.8%" in v.text("{:.1%}")
  eight = split + [0.36, 0.84, 0.40, 0.83, 0.37]
  v = protocol.primary_verdicts({"c": {"softmax": ref, "gla": eight}}, ACC)[("gla", "c")]
  assert v.word == "unstable" and v.text("{:.1%}").startswith("unstable: its 8 seeds")
  assert protocol.more_seeds(eight, bound) == 0
  # a split reference holds every comparison against it
  v = protocol.primary_verdicts({"c": {"softmax": split, "x": ref}}, ACC)[("x", "c")]
  assert v.word == "more seeds" and v.side == "reference"
  tight = [0.97, 0.975, 0.98]
  v = protocol.primary_verdicts({"c": {"softmax": ref, "x": tight}}, ACC)[("x", "c")]
  assert v.word in ("worse", "unresolved") and v.test is not None


def test_v2_an_edge_winner_extends_the_grid():
  """Zoology's gated_deltanet at width 128 (1.7 -> 5.4 -> 88.5%, rising at the top
  rate): under version 2 the grid has 4 rates at least, and a winner at an end adds
  the next rate out, up to EXTEND times a side; an interior winner completes it."""
  with pytest.raises(ValueError, match="at least 4"):
    protocol.RateGrid((3e-4, 1e-3, 3e-3), tie=0.01)
  g = protocol.RateGrid((1e-4, 3e-4, 1e-3, 3e-3), tie=0.01)
  val = {1e-4: 0.01, 3e-4: 0.017, 1e-3: 0.054, 3e-3: 0.885}
  nxt = g.next(val)
  assert nxt == pytest.approx(9e-3) and g.choose(val) is None
  val[nxt] = 0.95
  assert g.next(val) == pytest.approx(0.027)                    # still at the edge
  val[g.next(val)] = 0.96
  assert g.next(val) is None and g.choose(val) == pytest.approx(0.027)   # twice: done
  inner = {1e-4: 0.2, 3e-4: 0.5, 1e-3: 0.9, 3e-3: 0.6}
  assert g.next(inner) is None and g.choose(inner) == 1e-3
  low = protocol.RateGrid((1e-4, 3e-4, 1e-3, 3e-3), tie=0.01)
  assert low.next({1e-4: 0.9, 3e-4: 0.5, 1e-3: 0.3, 3e-3: 0.2}) == pytest.approx(3.33e-5)


def test_v2_a_row_that_never_left_chance_did_not_train():
  """Zoology's gla (0.7-1.1% at every rate, chance 0.78%): every rate within 2x chance
  reads "did not train", not "worse", and its grid is not extended."""
  chance = 1 / 128
  g = protocol.RateGrid((1e-4, 3e-4, 1e-3, 3e-3), tie=0.01, chance=chance)
  val = {1e-4: 0.007, 3e-4: 0.009, 1e-3: 0.011, 3e-3: 0.008}
  assert protocol.did_not_train(val, chance) and not g.trained(val)
  assert g.next(val) is None
  assert not protocol.did_not_train({**val, 3e-3: 0.05}, chance)
  ref = [0.999, 0.998, 0.999]
  v = protocol.primary_verdicts({"c": {"softmax": ref, "gla": [0.008, 0.007, 0.009]}},
                                ACC, untrained={"gla"})[("gla", "c")]
  assert v.word == "did not train" and v.text().startswith("did not train")


def test_v2_tie_threshold_from_the_reference_seed_noise():
  ref = [1.70, 1.72, 1.74]
  assert protocol.tie_threshold(ref) == pytest.approx(math.sqrt(2) * 0.02)
  assert protocol.tie_threshold([1.0] * 3, floor=0.01) == 0.01


def test_versions_and_the_page_lines():
  """A page of version 1 follows the protocol and says its verdicts are version 1's
  shown with the current presentation; a run of version 1 counts under version 2."""
  assert protocol.VERSION == 2 and protocol.follows(protocol.RUNS)
  assert protocol.follows(1) and protocol.follows(2) and not protocol.follows(0)
  line = protocol.top_line(protocol.record("variants_copy", 1))
  assert "version 1" in line and "Its verdicts follow version 1" in line and "pts" in line
  line2 = protocol.top_line(protocol.record("variants_copy", 2))
  assert "version 2" in line2 and "primary comparisons" in line2
  assert protocol.top_line(protocol.record(None, 0)).startswith("**Old protocol")


def test_v2_on_a_variants_page_the_pairs_leave_the_family():
  """variants_seeds.page_verdicts at version 2: against softmax the primary family
  alone (flash, an implementation, is no comparison; its group row gives the largest
  difference), the pairs exploratory; at version 1 the same seeds keep the one family
  of every comparison."""
  from studies.variants import seeds as vs
  by = {"softmax": [0.80, 0.82, 0.81], "flash": [0.80, 0.82, 0.81],
        "a": [0.70, 0.71, 0.72], "b": [0.60, 0.62, 0.61], "c": [0.79, 0.80, 0.83]}
  by = {v: dict(enumerate(q)) for v, q in by.items()}
  v2 = vs.page_verdicts(by, True, metric=ACC, version=2)
  assert {k for k, x in v2.items() if not x.exploratory} == {
      ("a", "softmax"), ("b", "softmax"), ("c", "softmax")}
  assert all(x.exploratory for k, x in v2.items() if "softmax" not in k)
  fam = [x.test.p for x in v2.values() if not x.exploratory and x.test]
  assert sorted(x.p_adj for x in v2.values() if not x.exploratory) == \
      pytest.approx(sorted(protocol.holm(fam)))
  v1 = vs.page_verdicts(by, True, metric=ACC, version=1)
  assert ("flash", "softmax") in v1 and not any(x.exploratory for x in v1.values())
  assert v1[("a", "softmax")].p_adj > v2[("a", "softmax")].p_adj     # a larger family
  row = vs.group_row(["flash"], 0.0, v1, "{:.1%}", {}, 1)
  assert "identical to softmax on every seed" in row and "version 1's family" in row
  assert "not comparisons" in vs.group_row(["flash"], 0.004, v2, "{:.1%}", {}, 2)


def test_v2_a_best_figure_at_an_end_extends_even_when_the_tie_picks_inside():
  """Shakespeare's deltanet (lower is better): its best validation figure is at the top
  rate, 0.007 nats better than 3e-3, within the tie (0.017), so the tie rule chooses
  3e-3; the grid still adds 0.027, and once that is worse the choice stays 3e-3."""
  g = protocol.RateGrid((3e-4, 1e-3, 3e-3, 9e-3), tie=0.017, higher_better=False)
  val = {3e-4: 2.074, 1e-3: 1.904, 3e-3: 1.844, 9e-3: 1.837}
  assert g.next(val) == pytest.approx(0.027) and g.choose(val) is None
  val[0.027] = 1.95
  assert g.next(val) is None and g.choose(val) == pytest.approx(3e-3)
