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
