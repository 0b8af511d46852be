"""studies.variants.compare and studies.variants.page on a tiny copy config (2 steps):
a finished variant is never retrained, a variant the task cannot use and one the
preset skips each get a row that says why, rows of different runs say whose speed is
whose, and the pages and the README summary are written from the results."""
import json
import os

import pytest

import trainer
import attention
from studies.core import protocol, sweep
from studies.variants import compare as cv, page as vp, summary as vsum
from studies.variants import seeds as sp

# one xdist worker runs this module (`--dist loadgroup`): its module-scoped fixtures
# are built once, not once per worker
pytestmark = pytest.mark.xdist_group("studies_compare_variants")

TINY = {"num_train_steps": 2, "batch_size": 4, "eval_batch_size": 4, "eval_batches": 1,
        "eval_every": 2, "log_every": 1, "checkpoint_every": 2, "warmup_steps": 1,
        "copy_len": 2, "model": {"d_model": 8, "num_heads": 2, "d_ff": 16,
                                 "num_layers": 1, "dropout": 0.1}}   # dropout: an RNG in the
# traced memory estimate


def study(out, root, variants, overrides=TINY, **kw):
  """The study and its page, as scripts/compare_variants.py runs them."""
  rows = cv.study("copy", "cpu", variants, str(root), str(out), overrides,
                  command="python -m scripts.compare_variants --task=copy (test)",
                  log=lambda s: None, **kw)
  vp.write_page("copy", "cpu", rows, str(out), overrides, "the command that ran")
  return rows


@pytest.fixture(scope="module", autouse=True)
def small_gauge():
  """Every study run here measures the run record's matmul gauge (sweep.gauge) at 128,
  not GAUGE_N = 1024: 8 products of 2 GFLOP each per study call were most of several
  tests' CPU time; the tests check that the gauge is recorded, not the machine's speed."""
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(sweep, "GAUGE_N", 128)
    yield


@pytest.fixture(scope="module")
def results(tmp_path_factory):
  root = tmp_path_factory.mktemp("variants")
  out = {v: cv.ensure("copy", "cpu", v, str(root / v), TINY, subprocess_run=False)
         for v in ("softmax", "linformer", "flash_pallas")}
  return root, out


def trained_alike(monkeypatch, root, row):
  """Every run from here on trains and evaluates as the fixture's softmax row did (its
  metrics and config stand in for train.py's, its evaluation for eval.py's), at no
  cost: the tests of the sweep's plan need runs, not training, which the fixture
  covers for real. Runs still go through ensure and sweep.train_run."""
  import shutil

  def fake_train(config, workdir):
    os.makedirs(workdir, exist_ok=True)
    for f in ("metrics.jsonl", "config.json"):
      shutil.copy(root / "softmax" / f, workdir)

  monkeypatch.setattr(trainer, "train_and_evaluate", fake_train)
  keep = ("status", "eval", "decode_mode", "peak_bytes", "memory_kind", "jax", "device")
  monkeypatch.setattr(cv.measure, "evaluate", lambda task, v, wd, c: {
      k: row[k] for k in keep if k in row})


def test_rows_trained_refused_skipped(results):
  root, r = results
  ok = r["softmax"]
  assert ok["status"] == "ok" and ok["params"] > 0 and ok["steps_per_s"] > 0
  assert 0.0 <= ok["eval"]["token_accuracy"] <= 1.0
  assert ok["eval"]["tokens_per_s"] > 0 and ok["decode_mode"] == "cache"
  assert ok["peak_bytes"] > 0 and ok["curve"] and ok["curve"][-1][0] == 2
  assert r["linformer"]["status"] == "refused"
  assert "cannot be causal" in r["linformer"]["reason"]      # the config's own message
  assert r["flash_pallas"]["status"] == "skipped"
  assert "interpret" in r["flash_pallas"]["reason"]
  assert not os.path.exists(root / "linformer" / "checkpoints")   # nothing trained


def test_finished_variant_is_not_retrained(results, monkeypatch):
  root, r = results

  def boom(*a, **k):
    raise AssertionError("a finished variant was trained again")

  monkeypatch.setattr(trainer, "train_and_evaluate", boom)
  again = cv.ensure("copy", "cpu", "softmax", str(root / "softmax"), TINY,
                    subprocess_run=False)
  assert again == json.loads(json.dumps(r["softmax"]))


def test_a_finished_row_on_the_page_is_kept_when_its_workdir_is_gone(results, tmp_path,
                                                                     monkeypatch):
  _, r = results
  out = tmp_path / "page"
  vp.write_page("copy", "cpu", [r["softmax"]], str(out), TINY)

  def boom(*a, **k):
    raise AssertionError("a variant finished on the page was trained again")

  monkeypatch.setattr(trainer, "train_and_evaluate", boom)
  study(out, tmp_path / "another_machine", ["softmax"])
  rows = {r["variant"]: r for r in json.load(open(out / "results.json"))}
  assert rows["linear"]["status"] == "skipped"          # a row for every variant
  row = rows["softmax"]
  assert row["eval"] == json.loads(json.dumps(r["softmax"]["eval"]))
  assert row["date"] == r["softmax"]["date"]
  assert "| `softmax` |" in (out / "README.md").read_text()
  # a row trained under another budget is not the preset's: it is trained again
  assert cv.published("copy", "cpu", str(out), dict(TINY, num_train_steps=3)) == {}
  assert set(cv.published("copy", "cpu", str(out), TINY)) == {"softmax"}
  # --ignore_page trains the chosen variants again; the other rows stay on the page
  trained = []
  monkeypatch.setattr(cv, "ensure", lambda task, preset, v, *a, run=None, **k:
                      trained.append(v) or dict(r["softmax"], variant=v, run=run))
  study(out, tmp_path / "another_machine", ["softmax"], ignore_page=True)
  assert trained == ["softmax"]
  study(out, tmp_path / "another_machine", ["linear"], ignore_page=True)
  assert trained == ["softmax", "linear"]
  rows = {r["variant"]: r for r in json.load(open(out / "results.json"))}
  assert {v for v, r in rows.items() if r["status"] == "ok"} == {"softmax", "linear"}
  # linear was timed by this run, softmax by the one before: the page names the
  # command that ran, and each row's speed cells say which run timed them
  page = (out / "README.md").read_text()
  assert "Written by `the command that ran`" in page
  assert rows["linear"]["run"]["id"] != rows["softmax"]["run"]["id"]
  gauge = rows["linear"]["run"]["matmul_peak"]          # measured as the run started
  assert gauge["n"] == sweep.GAUGE_N and gauge["flop_per_s"] > 1e8
  assert "| `softmax` | " in page and "(A) |" in page and "(B) |" in page
  assert "compared only between rows of one run" in page


def test_page_and_summary(results, tmp_path):
  _, r = results
  rows = list(r.values())
  out = tmp_path / "results" / "variants_copy"
  vp.write_page("copy", "cpu", rows, str(out), TINY)
  page = (out / "README.md").read_text()
  for v in r:
    assert f"| `{v}` |" in page                                 # a row for every variant
  assert "cannot do this task: model config 'attention'" in page
  assert "not run: skipped by the cpu preset" in page
  assert (out / "quality_vs_time.png").stat().st_size > 1000
  readme = tmp_path / "README.md"
  readme.write_text(f"top\n{vsum.README_BEGIN}\nold\n{vsum.README_END}\nbottom\n")
  vsum.update_readme(str(readme), str(tmp_path / "results"))
  text = readme.read_text()
  assert "old" not in text and text.startswith("top\n") and text.endswith("bottom\n")
  assert "| `linformer` | cannot |" in text and "| `additive` | not run |" in text
  with pytest.raises(ValueError, match="no marker"):
    readme.write_text("no markers")
    vsum.update_readme(str(readme), str(tmp_path / "results"))


def test_bleu_signature_names_one_reference_and_the_tokenizer():
  sig = cv.bleu_signature()
  assert "nrefs:1" in sig and "tok:13a" in sig and "version:" in sig


def _fake(task, variant, ev):
  return {"variant": variant, "task": task, "preset": "cpu", "status": "ok", "eval": ev,
          "steps_per_s": 1.0, "params": 10, "curve": [(1, 1.0, 2.0)], "train_seconds": 1.0,
          "date": "2026-01-01", "device": "cpu", "decode_mode": "cache"}


def _listops_page(tmp_path, preset, rows) -> str:
  """The listops page of `rows` over a tiny draw of the data (8 test sequences)."""
  tiny = {"data_dir": str(tmp_path), "listops": {"num_train": 20, "num_val": 8,
          "num_test": 8, "min_length": 20, "max_length": 60}}
  vp.write_page("listops", preset, rows, str(tmp_path / "out"), tiny)
  return (tmp_path / "out" / "README.md").read_text()


def test_listops_page_sets_lra_beside_ours_and_the_constant_baseline(tmp_path):
  rows = [{**_fake("listops", "softmax", {"accuracy": 0.37}), "curve": [(1, 1.0, 0.40)]},
          {"variant": "linear", "task": "listops", "preset": "cpu", "status": "skipped",
           "reason": "not run yet"}]
  page = _listops_page(tmp_path, "cpu", rows)
  assert "| `softmax` | 37.0% | 36.37% (Transformer) |" in page
  assert "| `linear` | not run | 16.13% (Linear Trans.) |" in page
  assert "A constant answer" in page and "on our 8 test sequences" in page
  # the curves (validation) against the table (test): 40% against 37%
  assert "runs 3.0 points above test accuracy" in page
  # the label counts are kept beside the page: it is rewritten without the data
  labels = json.load(open(tmp_path / "out" / "labels.json"))
  assert sum(labels["test"]) == 8 and labels["listops"]["num_test"] == 8


def test_listops_page_without_softmax_sets_the_weak_rows_against_the_constant_answer(
    tmp_path):
  """The cpu_long preset (LRA's lengths) runs no quadratic variant: LRA's weak rows are
  then set against the constant answer, and the lines say what differs from LRA."""
  rows = [{**_fake("listops", "linear", {"accuracy": 0.30}), "preset": "cpu_long"},
          {"variant": "softmax", "task": "listops", "preset": "cpu_long",
           "status": "skipped", "reason": cv.skip_reason("cpu_long", "softmax")}]
  (tmp_path / "variants_listops").mkdir()      # the cpu preset's page beside it
  (tmp_path / "variants_listops" / "results.json").write_text(json.dumps(
      [_fake("listops", "linear", {"accuracy": 0.344})]))
  page = _listops_page(tmp_path, "cpu_long", rows)
  assert "at the `cpu` preset's lengths (33..127 tokens" in page and "`linear` 34.4%." in page
  assert "| `softmax` | not run | 36.37% (Transformer) |" in page
  assert "at this preset's lengths (21..59 tokens) they score 30.0% to 30.0%, " in page
  assert "points or more against the constant answer (`softmax` is not run in this preset)" in page
  # over 8 test sequences one standard error is 16 points: 30% is not told apart
  assert "`linear` within 2 standard errors of the constant answer" in page
  assert "What differs from LRA's setup: sequences of 21..59 tokens here" in page


def test_cpu_long_skips_the_quadratic_variants_only_and_pages_go_by_preset():
  quadratic = [n for n in attention.names() if cv.skip_reason("cpu_long", n)]
  assert {"softmax", "flash", "sdpa", "dot", "additive", "location"} <= set(quadratic)
  assert not {"linear", "local", "sparse", "performer", "linformer",
              "reformer"} & set(quadratic)
  assert "O(N² D)" in cv.skip_reason("cpu_long", "softmax")
  assert cv.skip_reason("cpu", "softmax") is None
  # Pallas in interpret mode is skipped by every CPU preset, not by the gpu one
  assert "cpu_258 preset" in cv.skip_reason("cpu_258", "flash_pallas")
  assert "interpret" in cv.skip_reason("cpu_long", "flash_pallas")
  assert cv.skip_reason("gpu", "flash_pallas") is None
  assert cv.out_dir("listops", "cpu") == "results/variants_listops"
  assert cv.out_dir("listops", "cpu_long") == "results/variants_listops_cpu_long"


def test_the_script_names_a_tasks_presets_for_an_unknown_one(capsys):
  from scripts import compare_variants as script
  with pytest.raises(SystemExit):
    script.main(["--task=copy", "--preset=cpu_long"])
  from configs import copy
  assert (f"configs/copy.py has no preset 'cpu_long'; valid: "
          f"{', '.join(sorted(copy.PRESETS))}") in capsys.readouterr().err


@pytest.mark.parametrize("task, batches", [("listops", 0), ("mnist", 0), ("copy", None)])
def test_the_row_is_evaluated_on_the_whole_test_split_where_its_page_says_so(
    monkeypatch, task, batches):
  """listops and mnist pages state their metric over the whole test split; a preset
  that evaluates a subset during training (cpu_long: 8 batches) must not shrink it."""
  from trainer import evaluate as evaluation
  seen = {}
  monkeypatch.setattr(evaluation, "evaluate_workdir",
                      lambda wd, **kw: seen.update(kw) or {"decode_mode": "cache"})
  monkeypatch.setattr(cv.measure, "train_memory", lambda wd, c: {})
  cv.measure.evaluate(task, "linear", "wd", cv.make_config(task, "cpu", "linear"))
  assert seen["eval_batches"] == batches


def test_mnist_page_has_the_completion_metric_and_its_baselines(tmp_path):
  ev = {"bits_per_dim": 2.5, "completion_accuracy": 0.5, "completion_accuracy_se": 0.02,
        "blank_accuracy": 0.45, "random_bottom_accuracy": 0.3,
        "completion_lead_over_blank": 0.05, "n_images": 500,
        "classifier_test_accuracy": 0.98, "completion_images_per_s": 100.0}
  ev.update(original_accuracy=0.99, original_accuracy_se=0.005, blank_accuracy_se=0.02,
            random_bottom_accuracy_se=0.02)
  vp.write_page("mnist", "cpu", [_fake("mnist", "softmax", ev)], str(tmp_path))
  page = (tmp_path / "README.md").read_text()
  assert "| `softmax` | 2.500 |" in page
  assert ("| `softmax` | 50.0 ± 2.0% | 99.0 ± 0.5% | 45.0 ± 2.0% | 30.0 ± 2.0% | "
          "+5.0 ± 2.8 | unresolved |") in page
  assert "first 500 test images" in page and "98.00% test accuracy" in page


def test_rows_of_two_runs_say_which_speed_is_whose(tmp_path):
  ev = {"token_accuracy": 1.0, "accuracy": 1.0, "generated_token_accuracy": 1.0,
        "tokens_per_s": 10.0}
  run = {"command": "python -m scripts.compare_variants --task=copy --variants=softmax",
         "started": "2026-11-25T10:00:00", "id": "a1", "host": "AMD EPYC, 2 cores",
         "backend": "cpu",
         "jax_version": "0.11.2", "date": "2026-11-25",
         "matmul_peak": {"flop_per_s": 61.4e9, "n": 1024, "dtype": "float32",
                         "runs": 7, "statistic": "median"}}
  rows = [dict(_fake("copy", "softmax", dict(ev, host="AMD EPYC, 2 cores")), run=run),
          _fake("copy", "linear", ev)]
  vp.write_page("copy", "cpu", rows, str(tmp_path))
  page = (tmp_path / "README.md").read_text()
  assert ("(A) `python -m scripts.compare_variants --task=copy --variants=softmax`, "
          "started 2026-11-25 10:00:00, AMD EPYC, 2 cores") in page
  # the machine's speed as the run started, and what that gauge is
  assert "jax 0.11.2, matmul gauge 61 GFLOP/s" in page
  assert "(the median of 7 calls of a 1024 × 1024 float32 matmul as it started" in page
  assert "(B) a run of the study on 2026-01-01 whose command was not recorded" in page
  assert "| `softmax` | 100.00% | 1.00 (A) |" in page and "10 tok/s (cache) (A)" in page
  assert "| `linear` | 100.00% | 1.00 (B) |" in page and "10 tok/s (cache) (B)" in page
  # the plot's lines carry the letters too: their times compare only within one run
  assert list(vp.run_marks(rows).values()) == ["A", "B"]
  assert "Times of lines with different letters do not compare" in page
  vp.write_page("copy", "cpu", rows[:1], str(tmp_path))
  page = (tmp_path / "README.md").read_text()
  assert "- the rows' run: `python -m scripts" in page and "(A)" not in page
  assert vp.run_marks(rows[:1]) == {} and "different letters" not in page


def test_a_page_of_more_runs_than_letters_marks_them_all(tmp_path):
  """copy cpu_258 grew to 9 runs (one command per variant); the 9th once had no letter."""
  assert [vp.run_letter(i) for i in (0, 7, 8, 25, 26, 27, 51, 701, 702)] == [
      "A", "H", "I", "Z", "AA", "AB", "AZ", "ZZ", "AAA"]
  ev = {"token_accuracy": 1.0, "accuracy": 1.0, "generated_token_accuracy": 1.0,
        "tokens_per_s": 10.0}
  # variants whose row is the bare name (a gated layer's row adds "(bare operator)")
  names = [n for n in attention.names()
           if n != "linformer" and not attention.variant(n).layer][:10]
  rows = [dict(_fake("copy", v, ev), date=f"2026-01-{i + 1:02d}")   # 10 runs: one a day
          for i, v in enumerate(names)]
  vp.write_page("copy", "cpu", rows, str(tmp_path))
  page = (tmp_path / "README.md").read_text()
  assert "(J) a run of the study on 2026-01-10" in page
  assert f"| `{names[9]}` | 100.00% | 1.00 (J) |" in page


def test_encoder_decoder_keeps_exact_softmax_only_in_roles_a_variant_cannot_fill(
    tmp_path):
  """Issue: the variants go in the self-attention roles; cross-attention stays exact
  unless the variant can do it. sparse and reformer (one sequence only) and local (a
  window by the query's position) run with softmax cross-attention, linformer (never
  causal) with a softmax decoder."""
  roles = {v: cv.exact_roles(cv.make_config("multi30k", "cpu", v))
           for v in ("softmax", "linear", "sparse", "reformer", "linformer", "local")}
  assert roles == {"softmax": [], "linear": [], "sparse": ["cross-attention"],
                   "reformer": ["cross-attention"], "local": ["cross-attention"],
                   "linformer": ["decoder self-attention"]}
  for v in roles:
    assert cv.refusal(cv.make_config("multi30k", "cpu", v)) is None
  assert cv.exact_roles(cv.make_config("copy", "cpu", "sparse")) == []
  assert cv.refusal(cv.make_config("copy", "cpu", "linformer"))     # a decoder-only LM
  assert vp.row({"variant": "sparse", "status": "skipped", "reason": "r"}, "",
                ["cross-attention"]).startswith("| `sparse` (cross-attention: softmax) |")
  d = tmp_path / "variants_multi30k"
  d.mkdir()
  (d / "results.json").write_text(json.dumps(
      [_fake("multi30k", v, {"bleu": 20.0}) for v in ("softmax", "sparse")]))
  table = vsum.summary_table(str(tmp_path))
  assert "| `sparse` | 20.0 * |" in table and "| `softmax` | 20.0 |" in table
  assert "\\* with exact softmax in the roles" in table
  # a variant with seeds on its page: the mean of its seed table, not its row's run
  fp = lambda s: min(sp.fingerprints(sp.make_config("multi30k", "cpu", "softmax",
                                                    {"seed": s})))
  (d / "seeds.json").write_text(json.dumps(
      [{"variant": "softmax", "task": "multi30k", "preset": "cpu", "seed": s,
        "quality": q, "config": fp(s)} for s, q in ((1, 21.0), (2, 25.0))]))
  table = vsum.summary_table(str(tmp_path))
  assert "| `softmax` | 22.0, mean of 3 seeds |" in table, table


def test_fingerprint_sees_the_options_of_the_variants_in_use_only():
  fp = lambda v, **opts: cv.config_fingerprint(cv.make_config(
      "multi30k", "cpu", v, {"model": {"attention_options": opts}} if opts else None))
  assert fp("softmax", local={"window": 4}) == fp("softmax")     # local is not used
  assert fp("local", local={"window": 4}) != fp("local")
  assert fp("sparse", softmax={"scale": 1.0}) != fp("sparse")   # softmax: cross-attention
  c = cv.make_config("multi30k", "cpu", "local")
  assert dict(c.model.attention_options["local"]) == {"window": 16}   # < 64 tokens


def _preset_options():
  """{(variant, options as sorted items)} of every task's presets (the configs')."""
  seen = set()
  for task in cv.TASKS:
    for preset in cv.presets(task):
      opts = cv.make_config(task, preset, "softmax").model.attention_options
      for name, o in opts.items():
        seen.add((name, tuple(sorted(o.to_dict().items()))))
  return sorted(seen)


@pytest.mark.parametrize("name, options", _preset_options())
def test_every_preset_option_reaches_its_variant(name, options):
  """Each variant option a preset sets is one the variant takes: the parameter shape
  takes its shape options and the function the rest (linformer's k_proj once reached
  the function as an unknown argument, and the multi30k row failed at its first step)."""
  import jax
  import jax.numpy as jnp
  import attention
  v = attention.variant(name)
  H, D, T = 2, 4, 32
  shapes, kw = v.param_shapes(H, D, T, dict(options))
  for i, (p, shape) in enumerate(shapes.items()):
    kw[p] = v.params[p].init(jax.random.PRNGKey(i), shape, jnp.float32)
  q, k, val = (jax.random.normal(jax.random.PRNGKey(9 + i), (1, T, H, D)) for i in range(3))
  params = {p: kw.pop(p) for p in shapes}
  # one compiled program (eagerly, reformer's many small ops compiled one by one: ~3 CPU-s)
  out = jax.jit(lambda q, k, val, params: v.fn(q, k, val, causal=v.causal, **kw, **params))(
      q, k, val, params)
  assert out.shape == (1, T, H, D) and bool(jnp.all(jnp.isfinite(out)))


def test_seeds_train_other_seeds_and_the_page_shows_their_spread(results, tmp_path,
                                                                 monkeypatch):
  """--seeds trains the chosen variants again from other seeds, once (a finished seed
  run is kept), and the page shows each seed's metric beside the row's own (seed 0)."""
  root, r = results
  real = cv.ensure
  monkeypatch.setattr(cv, "ensure", lambda *a, **k: real(*a, **k, subprocess_run=False))
  trained_alike(monkeypatch, root, r["softmax"])
  out = tmp_path / "page"
  study(out, root, ["softmax"], seeds=[0, 1])
  (run,) = json.load(open(out / "seeds.json"))          # seed 0 is the row itself
  assert run["variant"] == "softmax" and run["seed"] == 1 and run["quality"] is not None
  assert os.path.exists(root / "softmax@seed1" / "result.json")
  page = (out / "README.md").read_text()
  q0 = r["softmax"]["eval"]["token_accuracy"]
  assert "## Seed spread" in page and f"{q0:.2%} (0), {run['quality']:.2%} (1)" in page
  assert "**What this page tells apart at this budget.** Only softmax ran several seeds." \
      in page

  def boom(*a, **k):
    raise AssertionError("a finished seed run was trained again")

  monkeypatch.setattr(trainer, "train_and_evaluate", boom)
  study(out, root, ["softmax"], seeds=[0, 1])
  assert "| — |" in (out / "README.md").read_text()     # softmax against itself
  # under another budget the seed run is not this page's: the spread is not shown
  assert sp.seed_spread("copy", "cpu", [r["softmax"]], str(out),
                        dict(TINY, num_train_steps=3)) == []


def test_a_page_without_softmax_says_so_in_the_seed_table(tmp_path):
  """ListOps cpu_long skips softmax (quadratic at 2000 tokens): its seeded rows read
  that softmax has no row there, not that softmax needs more seeds."""
  row = {"variant": "linear", "task": "copy", "preset": "cpu", "status": "ok",
         "eval": {"token_accuracy": 0.5}}
  seeds = [{"variant": "linear", "task": "copy", "preset": "cpu", "seed": s,
            "quality": q, "config": cv.config_fingerprint(
                cv.make_config("copy", "cpu", "linear", {**TINY, "seed": s}))}
           for s, q in ((1, 0.6), (2, 0.55))]
  (tmp_path / "seeds.json").write_text(json.dumps(seeds))
  lines = sp.seed_spread("copy", "cpu", [row], str(tmp_path), TINY)
  (line,) = [x for x in lines if x.startswith("| `linear`")]
  assert "50.00% (0), 60.00% (1), 55.00% (2)" in line
  assert "— (`softmax` has no row on this page)" in line and "needs" not in line


def test_a_variant_is_better_or_worse_than_softmax_only_at_a_corrected_p_below_5_percent():
  """Welch's test with Holm's correction over the table (studies.core.protocol.verdicts),
  and only from 3 seeds of each: two seeds that agree (e, 0.1 apart, 2.4 below softmax:
  multi30k's gla on 2026-11-27) would read 'worse' by a test of one degree of freedom."""
  by = {"softmax": {0: 1.0, 1: 1.2, 2: 1.1}, "a": {0: 1.5, 1: 1.6, 2: 1.4},
        "b": {0: 1.05, 1: 1.25, 2: 1.15}, "c": {0: 0.5}, "e": {0: 0.5, 1: 0.51}}
  assert sp.mean_se([1.0, 1.2, 1.1]) == pytest.approx((1.1, 0.1 / 3 ** 0.5, 3))
  f, n = "{:.3f}", {v: len(q) for v, q in by.items()}
  low = sp.page_verdicts(by, False)
  assert sp.against(low, "a", "softmax", f, n).startswith("worse (Δ +0.400 [+0.")
  assert "p_adj" in sp.against(low, "a", "softmax", f, n)
  assert sp.against(sp.page_verdicts(by, True), "a", "softmax", f, n).startswith("better")
  assert sp.against(low, "b", "softmax", f, n).startswith("unresolved (Δ +0.050")
  assert sp.against(low, "c", "softmax", f, n).startswith("needs ≥ 3 seeds")
  assert sp.against(low, "e", "softmax", f, n) == \
      "needs ≥ 3 seeds of both (seeds: `softmax` 3, `e` 2)"
  assert sp.against(low, "a", "x", f, n) == \
      "needs ≥ 3 seeds of both (seeds: `x` 0, `a` 3)"          # x: no seeds at all
  assert sp.against(low, "softmax", "softmax", f, n) == "—"


def test_a_gap_beyond_two_standard_errors_is_unresolved_after_the_pages_correction():
  """The old cut called 'a' worse (its gap is 2.6 standard errors); Welch's p of 0.06 on
  3 seeds, corrected over the page's comparisons, leaves it unresolved."""
  by = {"softmax": {0: 1.0, 1: 1.2, 2: 1.1}, "a": {0: 1.2, 1: 1.35, 2: 1.3},
        "b": {0: 1.0, 1: 1.2, 2: 1.15}, "c": {0: 1.1, 1: 1.0, 2: 1.2}}
  v = sp.page_verdicts(by, True)
  assert v[("a", "softmax")].word == "unresolved" and v[("a", "softmax")].p_adj >= 0.05
  stats = {x: sp.mean_se(list(q.values())) for x, q in by.items()}
  d = stats["a"][0] - stats["softmax"][0]
  assert d > 2 * (stats["a"][1] ** 2 + stats["softmax"][1] ** 2) ** 0.5   # the old cut


def test_rows_equal_to_softmax_on_every_seed_are_called_equal_not_unresolved():
  """The copy page read 'unresolved (Δ +0.00% ± 0.00%)' for rows at 100% on every seed,
  as if something were in doubt; they are named as equal, and the page says the task
  does not tell them from softmax."""
  by = {"softmax": {0: 1.0, 1: 1.0, 2: 1.0}, "a": {0: 1.0, 1: 1.0, 2: 1.0},
        "b": {0: 1.0, 1: 1.0, 2: 1.0}, "c": {0: 0.5, 1: 0.52, 2: 0.49},
        "d": {0: 0.99, 1: 0.99, 2: 0.99}}
  stats = {v: sp.mean_se(list(q.values())) for v, q in by.items()}
  f, v = "{:.2%}", sp.page_verdicts(by, True)
  assert sp.against(v, "a", "softmax", f, {}) == "equal on every seed (100.00%)"
  assert sp.against(v, "d", "softmax", f, {}).startswith("worse")  # constant, lower
  row = lambda v: {"variant": v, "task": "copy", "status": "ok",
                   "eval": {"token_accuracy": by[v][0]}}
  text = sp.separation({v: row(v) for v in by}, by, stats, "copy")[0]
  assert "`c` (worse), `d` (worse) against softmax" in text
  assert "`a`, `b` scored what softmax scored on every seed (100.00%)" in text
  assert "does not tell them from softmax" in text


def test_ahead_of_names_the_rows_a_row_beats_alike_only():
  """The seed table's "ahead of": the other seeded rows (softmax aside) a row beats at a
  Holm-adjusted p < 0.05; a pair whose rates were chosen unlike is not judged."""
  by = {"softmax": [1.0, 1.01, 0.99], "a": [0.99, 1.0, 0.98], "b": [0.90, 0.91, 0.89],
        "c": [0.97, 1.01, 0.93], "d": [0.50, 0.51, 0.49], "e": [0.10, 0.11]}
  by = {v: dict(enumerate(q)) for v, q in by.items()}
  lrs = {"softmax": 1e-3, "a": 1e-3, "b": 3e-3, "c": 1e-3}        # d: preset's rate
  v = sp.page_verdicts(by, True, lrs, 2e-3)
  assert sp.ahead_of(v, "a") == ["b"]              # c: unresolved
  assert sp.ahead_of(v, "b") == []
  assert sp.ahead_of(sp.page_verdicts(by, False, lrs, 2e-3), "b") == ["a"]  # lower wins
  assert sp.ahead_of(sp.page_verdicts(by, True, {}, 2e-3), "a") == ["b", "d"]  # alike
  alike = sp.page_verdicts(by, True, {}, 2e-3)
  assert ("a", "softmax") in v and ("a", "d") not in v         # unlike pairs: untested
  assert alike[("a", "e")].word == "few"                       # e: 2 seeds, no verdict


def test_a_row_whose_rate_was_chosen_unlike_softmaxs_is_not_judged_against_it():
  """Swept rows against a swept softmax, and unswept rows against an unswept one, are
  judged; a row at the preset's rate against a swept softmax (or the reverse) is
  named apart: its gap mixes the variant with the rate (on mnist the sweep moved
  softmax's rate 3x, and an unswept row read 'worse' by 0.044 bits/dim)."""
  row = lambda v, q: {"variant": v, "task": "mnist", "status": "ok",
                      "eval": {"bits_per_dim": q}}
  rows = {v: row(v, q) for v, q in (("softmax", 2.26), ("a", 2.31), ("b", 2.20),
                                    ("c", 2.25))}
  swept = {"softmax": 9e-3, "b": 9e-3, "c": None}        # c: sweep incomplete
  assert sp.unlike_softmax(rows, swept, 3e-3) == {
      v: "at the preset's rate, softmax at its swept one" for v in ("a", "c")}
  assert sp.unlike_softmax(rows, {"b": 9e-3}, 3e-3) == {
      "b": "swept, softmax at the preset's rate"}
  assert sp.unlike_softmax(rows, {}, 3e-3) == {}
  # softmax's sweep chose the preset's rate: the unswept rows share its config
  assert sp.unlike_softmax(rows, dict(swept, softmax=3e-3), 3e-3) == {}
  by = {"softmax": {0: 2.26, 1: 2.27, 2: 2.26}, "a": {0: 2.31, 1: 2.32, 2: 2.31},
        "b": {0: 2.20, 1: 2.21, 2: 2.20}}
  stats = {v: sp.mean_se(list(q.values())) for v, q in by.items()}
  (text, _) = sp.separation(rows, by, stats, "mnist",
                            sp.unlike_softmax(rows, swept, 3e-3))
  assert "`b` (better) against softmax" in text and "(1 variant seeded" in text
  assert "`a` (" not in text and "Not judged: `a`, `c` (at the preset's rate" in text
  assert "other" not in text                   # c, the one single-seed row, is unlike


def test_the_child_process_trains_in_the_workdir_it_was_given(tmp_path, monkeypatch):
  """ensure's child gets its workdir and its run record: a seed run (softmax@seed1)
  once ran in the row's workdir (softmax) and overwrote the row's result."""
  seen = {}

  def fake(cmd, log_path):
    seen["cmd"] = cmd
    return 1, "boom", 0.1

  monkeypatch.setattr(cv.runs, "in_subprocess", fake)
  wd = tmp_path / "softmax@seed1"
  run = {"command": "c", "started": "s"}
  assert cv.ensure("copy", "cpu", "softmax", str(wd), {"seed": 1}, run=run)["status"] == "failed"
  assert seen["cmd"][1:3] == ["-m", "studies.variants.compare"]
  got = {}
  monkeypatch.setattr(cv, "run_one", lambda *a: got.update(args=a))
  cv.child(seen["cmd"][3])
  assert got["args"] == ("copy", "cpu", "softmax", str(wd), {"seed": 1}, run)


def test_a_stored_refusal_is_not_a_result(tmp_path):
  """Refusals and skips are derived from the code at each run, never read back from a
  workdir: an older script stored them there, and a stale reason stayed on the page (and
  a variant that gained support would never have been trained)."""
  stale = {"status": "refused", "reason": "an old reason", "variant": "x"}
  for v in ("flash_pallas", "softmax"):
    (tmp_path / v).mkdir()
    (tmp_path / v / "result.json").write_text(json.dumps(stale))
  r = cv.ensure("copy", "cpu", "flash_pallas", str(tmp_path / "flash_pallas"), TINY)
  assert r["status"] == "skipped" and "interpret" in r["reason"]
  r = cv.stored_row("copy", "cpu", "softmax", str(tmp_path / "softmax"), TINY)
  assert r["status"] == "skipped" and r["reason"].startswith("yet to be trained")


def test_rows_yet_to_train_name_the_command_that_trains_them(tmp_path):
  """A row not trained yet names its own command in results.json; the page gives it a
  short cell and one command under the table for all such rows."""
  r = cv.stored_row("copy", "cpu", "softmax", str(tmp_path / "softmax"), TINY)
  assert r["status"] == "skipped" and r["pending"]
  assert "--task=copy --preset=cpu --variants=softmax`" in r["reason"]
  out = tmp_path / "page"
  vp.write_page("copy", "cpu", [r, dict(r, variant="linear")], str(out), TINY)
  page = (out / "README.md").read_text()
  assert "| `softmax` | not run yet (the command is under the table) |" in page
  assert ("Not trained yet: `softmax`, `linear`. `python -m scripts.compare_variants "
          "--task=copy --preset=cpu --variants=softmax,linear` trains them") in page
  # a page under the protocol names the protocol's command (its sweep and fresh seeds)
  protocol.write_page_record(str(out), "variants_copy", protocol.VERSION)
  vp.write_page("copy", "cpu", [r, dict(r, variant="linear")], str(out), TINY)
  page = (out / "README.md").read_text()
  assert ("`python -m scripts.compare_variants --task=copy --preset=cpu "
          "--variants=softmax,linear --protocol` trains them, one after another (with the "
          "protocol's rate sweep and reporting seeds)") in page


def test_a_run_of_another_budget_is_set_aside_not_reused_or_resumed(results, tmp_path,
                                                                     monkeypatch):
  """A preset whose budget changed (steps, learning rate) trains every variant afresh:
  the old result is not the new config's row, and resuming its checkpoint would mix
  two schedules (train.py refuses only another model). The old workdir is kept."""
  import shutil
  root, r = results
  seen = []

  def fake_train(config, workdir):
    seen.append((config.num_train_steps, os.path.exists(workdir)))
    raise RuntimeError("stop here")

  monkeypatch.setattr(trainer, "train_and_evaluate", fake_train)
  longer = {**TINY, "num_train_steps": 3}
  for partial in (False, True):           # finished, and stopped before its evaluation
    wd = tmp_path / f"softmax{int(partial)}"
    shutil.copytree(root / "softmax", wd)
    if partial:
      os.remove(wd / "result.json")
    with pytest.raises(RuntimeError, match="stop here"):
      cv.ensure("copy", "cpu", "softmax", str(wd), longer, subprocess_run=False)
    stale = wd.parent / f"{wd.name}.stale-{r['softmax']['config']}"
    assert seen[-1] == (3, False) and (stale / "config.json").exists()
    assert any((stale / "checkpoints").iterdir())             # nothing lost
  # the same config, stopped before its evaluation: resumed in place, not set aside
  wd = tmp_path / "same"
  shutil.copytree(root / "softmax", wd)
  os.remove(wd / "result.json")
  with pytest.raises(RuntimeError, match="stop here"):
    cv.ensure("copy", "cpu", "softmax", str(wd), TINY, subprocess_run=False)
  assert seen[-1] == (2, True) and not list(tmp_path.glob("same.stale-*"))


def test_copy_page_says_when_each_variant_solved_the_task(results, tmp_path):
  evals = [(100, 4.0, {"accuracy": 0.2}), (200, 8.0, {"accuracy": 0.995}),
           (300, 12.0, {"accuracy": 1.0})]
  assert cv.solved_at("copy", evals) == {"solved_at": [200, 8.0]}
  assert cv.solved_at("copy", evals[:1]) == {"solved_at": None}
  assert cv.solved_at("shakespeare", evals) == {}
  _, r = results
  fast = dict(r["softmax"], solved_at=[200, 8.0])
  slow = dict(r["softmax"], variant="linear", solved_at=None)
  vp.write_page("copy", "cpu", [fast, slow], str(tmp_path))
  page = (tmp_path / "README.md").read_text()
  steps = cv.make_config("copy", "cpu", "softmax").num_train_steps
  assert "| 200 (8.0 s) |" in page and f"| not within {steps} steps |" in page


def test_lr_sweep_picks_one_rate_per_variant_and_its_row_and_seeds_run_there(
    results, tmp_path, monkeypatch):
  """--lr_sweep trains each chosen variant at every rate of the grid (the preset's rate
  is its row's own run), records them in out/lr.json, and the row and its --seeds then
  run at the rate the shared rule picks; the page states the grid and the choice."""
  root, r = results
  real = cv.ensure
  monkeypatch.setattr(cv, "ensure", lambda *a, **k: real(*a, **k, subprocess_run=False))
  trained_alike(monkeypatch, root, r["softmax"])
  out = tmp_path / "page"
  grid = cv.lr_grid("copy", "cpu", TINY)
  base = cv.base_lr("copy", "cpu", TINY)
  assert len(grid) == 3 and grid[1] == base and grid[0] < base < grid[2]
  study(out, root, ["softmax"], sweep_lr=True)
  swept = json.load(open(out / "lr.json"))
  assert sorted(s["lr"] for s in swept) == grid
  assert all(os.path.exists(cv.run_dir(str(root), "softmax", lr, base) + "/result.json")
             for lr in grid)
  assert cv.run_dir(str(root), "softmax", base, base) == str(root / "softmax")
  # make the largest rate the clear best: the sweep asks for the next rate out, and
  # where that one does worse, the row and the seeds move to the largest
  for s in swept:
    s["quality"] = 1.0 if s["lr"] == grid[2] else 0.0
  (out / "lr.json").write_text(json.dumps(swept))
  assert cv.chosen_lrs("copy", "cpu", str(out), TINY) == {}      # incomplete
  lad = cv.lr_rule("copy", "cpu", TINY).ladder
  beyond = lad[lad.index(grid[2]) + 1]
  fp = cv.config_fingerprint(cv.make_config("copy", "cpu", "softmax",
                                            {**TINY, "learning_rate": beyond}))
  swept.append(dict(swept[-1], lr=beyond, quality=0.5, config=fp))
  (out / "lr.json").write_text(json.dumps(swept))
  # softmax's kernels (family "exact") share its chosen rate by rule; no other family
  import attention
  kernels = {v for v in attention.names()
             if attention.variant(v).family == "exact" and v != "softmax"}
  assert kernels and "linear" not in kernels
  assert cv.chosen_lrs("copy", "cpu", str(out), TINY) == {
      "softmax": grid[2], **{v: grid[2] for v in kernels}}
  rows = study(out, root, ["softmax"], seeds=[1])
  (row,) = [x for x in rows if x["variant"] == "softmax"]
  hi = cv.make_config("copy", "cpu", "softmax", {**TINY, "learning_rate": grid[2]})
  assert row["config"] == cv.config_fingerprint(hi) != r["softmax"]["config"]
  assert os.path.exists(cv.run_dir(str(root), "softmax", grid[2], base, 1) + "/result.json")
  page = (out / "README.md").read_text()
  assert "## Learning rates" in page and f"| {grid[2]:g} |" in page
  assert f"lr {beyond:g}" in page and "50.00%" in page
  assert "**100.00%**" in page and "and the learning rate of the rows" in page
  assert "## Seed spread" in page          # the seed at the chosen rate is the row's
  # the sweep's run at the chosen rate (set to 100% above) and the row's own run share
  # config and seed: where they differ, the page says so instead of leaving two numbers
  q = cv.METRIC["copy"][3].format(cv.quality(row))
  assert q != "100.00%" and f"`softmax` ({q} in its row, 100.00% in the sweep)" in page
  assert "Trained twice" not in "\n".join(vp.lr_lines(
      "copy", "cpu", str(out), TINY, [dict(row, eval={"token_accuracy": 1.0})]))
  # a trained row outside the sweep is named, and its gaps to swept rows flagged
  lines = "\n".join(vp.lr_lines("copy", "cpu", str(out), TINY,
                                [row, dict(row, variant="linear")]))
  assert "Not swept, at the preset's rate: `linear`." in lines
  assert "not a like-for-like comparison" in lines
  assert "softmax's own sweep chose" not in lines    # softmax chose grid[2], not the base
  lines = "\n".join(vp.lr_lines("copy", "cpu", str(out), TINY,
                                [row, dict(row, variant="sdpa")]))
  assert f"Not swept, at softmax's chosen rate ({grid[2]:g}) by rule: `sdpa`" in lines
  assert "Not swept, at the preset's rate" not in lines
  # every run the page reads is in its CPU time, each once
  assert "other rates of the lr sweep" in page and "extra seeds" in page
  # (each run's CPU seconds, not the page's rounded minutes: 3 tiny runs on a warm
  # compilation cache can sum under 0.05 CPU-minutes and print as 0.0)
  assert "(3 runs)" in page
  assert all(s["cpu_seconds"] > 0 for s in json.load(open(out / "lr.json")))
  # the task's rule (sweep.LrRule: tests/studies/test_sweep.py) over its grid and ladder
  rule = cv.lr_rule("copy", "cpu", TINY)
  assert len(rule.ladder) == 3 + 2 * cv.LR_EXTEND and set(grid) <= set(rule.ladder)
  assert (rule.grid, rule.tie, rule.higher_better) == (tuple(grid), cv.LR_TIE["copy"], True)
  assert not cv.lr_rule("mnist", "cpu").higher_better      # bits/dim: lower is better


def test_a_version_2_page_sweeps_a_4_rate_grid_by_protocol_rate_grid(tmp_path):
  """Rule 11 of PROTOCOL.md version 2 reaches the variants' sweep: a page marked version
  2 sweeps 4 rates (the preset's x0.3 to x9) under protocol.RateGrid with the task's
  tie; a version 1 page keeps its 3-rate grid and sweep.LrRule."""
  protocol.write_page_record(str(tmp_path), "variants_shakespeare", 2)
  rule = cv.lr_rule("shakespeare", "cpu", None, str(tmp_path))
  assert isinstance(rule, protocol.RateGrid) and rule.tie == protocol.TIES["shakespeare"]
  assert rule.grid == (3e-4, 1e-3, 3e-3, 9e-3) and not rule.higher_better
  protocol.write_page_record(str(tmp_path), "variants_shakespeare", 1)
  v1 = cv.lr_rule("shakespeare", "cpu", None, str(tmp_path))
  assert isinstance(v1, sweep.LrRule) and v1.grid == (3e-4, 1e-3, 3e-3)


def test_each_variant_runs_whole_before_the_next_and_a_failed_row_runs_once(
    tmp_path, monkeypatch):
  """A study over several variants trains them one after another, each whole (its lr
  sweep, its row, its seeds), so that a study stopped part way leaves whole rows; a
  row that failed is reported, not trained a second time for the page."""
  calls = []
  monkeypatch.setattr(cv, "lr_sweep", lambda task, preset, names, *a, **k:
                      calls.append(("sweep", *names)))

  def ensure(task, preset, n, workdir, overrides=None, **k):
    calls.append(("seed" if "@seed" in workdir else "row", n))
    return {"variant": n, "task": task, "preset": preset, "status": "failed",
            "reason": "test"}
  monkeypatch.setattr(cv, "ensure", ensure)
  rows = cv.study("copy", "cpu", ["linear", "softmax"], str(tmp_path / "wd"),
                  str(tmp_path / "page"), TINY, command="(test)", seeds=[1],
                  sweep_lr=True, log=lambda s: None)
  assert calls == [("sweep", "linear"), ("row", "linear"), ("seed", "linear"),
                   ("sweep", "softmax"), ("row", "softmax"), ("seed", "softmax")]
  by = {r["variant"]: r for r in rows}
  assert by["linear"]["status"] == by["softmax"]["status"] == "failed"


def test_single_seed_rows_are_named_and_counted_in_the_right_number():
  """The copy page once read 'The other 1 rows ran one seed'; the rows of one seed are
  named, and the ones whose gap to softmax exceeds the widest seed spread too."""
  row = lambda v, q: {"variant": v, "task": "mnist", "status": "ok",
                      "eval": {"bits_per_dim": q}}
  by = {"softmax": {0: 2.26, 1: 2.28}, "a": {0: 2.30, 1: 2.31}}
  stats = {v: sp.mean_se(list(q.values())) for v, q in by.items()}
  qs = {"softmax": 2.26, "a": 2.30, "b": 2.275, "c": 2.40}
  text = lambda vs: sp.separation({v: row(v, qs[v]) for v in vs}, by, stats,
                                  "mnist")[0]
  one = text(("softmax", "a", "b"))
  assert "The other row, `b`, ran one seed, so its gap" in one
  assert "larger than that gap: at this budget the page cannot rank it." in one
  assert "rows" not in one
  far = text(("softmax", "a", "c"))
  assert "smaller than that gap: seeds of that row would tell whether it differs." in far
  both = text(("softmax", "a", "b", "c"))
  assert "The other 2 rows (`b`, `c`) ran one seed, so none of their gaps" in both
  assert "smaller than the gap of `c`: seeds of that row would tell" in both


def test_rows_of_two_seeds_are_named_not_judged():
  """A row of 2 seeds (or a softmax of 2) gets no verdict: the page names it with its
  seed count instead of counting it among the rows that do not differ."""
  row = lambda v, q: {"variant": v, "task": "mnist", "status": "ok",
                      "eval": {"bits_per_dim": q}}
  by = {"softmax": {0: 2.26, 1: 2.28, 2: 2.27}, "a": {0: 2.40, 1: 2.41},
        "b": {0: 2.30, 1: 2.33, 2: 2.31}}
  stats = {v: sp.mean_se(list(q.values())) for v, q in by.items()}
  rows = {v: row(v, q[0]) for v, q in by.items()}
  (text, _) = sp.separation(rows, by, stats, "mnist")
  assert "`b` (worse) against softmax, at a Holm-adjusted p < 0.05 (1 variant seeded" in text
  assert "Not judged yet, with fewer than 3 seeds of softmax or their own: `a` (2) " \
      "(softmax: 3)." in text and "`a` (worse)" not in text
  del by["b"], rows["b"]
  (text, _) = sp.separation(rows, by, {v: stats[v] for v in by}, "mnist")
  assert text == ("**What this page tells apart at this budget.** Not judged yet, with "
                  "fewer than 3 seeds of softmax or their own: `a` (2) (softmax: 3).")


def test_a_copy_accuracy_short_of_one_never_prints_as_100_percent():
  f = cv.METRIC["copy"][3]
  assert f.format(1.0) == "100.00%" and f.format(0.5) == "50.00%"
  assert f.format(0.999969482421875) == "99.997%"      # one token in 32,768 wrong
  assert f.format(0.99994) == "99.99%"
  assert f.format(1 - 1 / 262144) == "99.9996%"
  assert f.format(0.0) == "0.00%" and f.format(3.05e-5) == "0.003%"  # a gap, not none


def test_under_the_protocol_the_rate_table_reads_validation_and_kernels_are_not_swept(
    tmp_path, monkeypatch):
  """A protocol page's lr table says its figures are validation ones and drops the
  "trained twice" note (its rows are reporting seeds' runs, not seed 0's); softmax's
  kernels (family "exact") take softmax's rate by rule, never a sweep of their own."""
  from studies.core import protocol
  out = str(tmp_path / "page")
  os.makedirs(out)
  protocol.write_page_record(out, "variants_listops", protocol.VERSION)
  monkeypatch.setattr(vp, "lr_choices", lambda *a, **k: {
      "softmax": {"grid": {3e-4: 0.37, 1e-3: 0.384, 3e-3: 0.384}, "chosen": 1e-3}})
  row = {"variant": "softmax", "task": "listops", "status": "ok", "eval": {"accuracy": 0.35}}
  text = "\n".join(vp.lr_lines("listops", "cpu", out, None, [row]))
  assert "the rate of the best accuracy on the validation split" in text
  assert "Trained twice" not in text and "best test accuracy" not in text
  swept = []
  monkeypatch.setattr(cv, "lr_sweep", lambda task, preset, names, *a, **k: swept.extend(names))
  monkeypatch.setattr(cv, "ensure", lambda *a, **k: {"status": "ok"})
  monkeypatch.setattr(cv, "finished", lambda *a, **k: None)
  kernels = [v for v in attention.names()
             if attention.variant(v).family == "exact" and v != "softmax"]
  for n in ["softmax", "linear"] + kernels:
    cv._train_variant("listops", "cpu", n, str(tmp_path / "root"), str(tmp_path / "x"),
                      None, run={}, seeds=(), sweep_lr=True, ignore_page=True,
                      log=lambda s: None)
  assert swept == ["softmax", "linear"]


def test_a_protocol_study_keeps_the_reporting_runs_its_page_records(tmp_path, monkeypatch):
  """Resumed where its workdirs are gone (a fresh clone), a protocol study trains only
  the reporting seeds that out/seeds.json does not hold under the config it would train;
  the row is the first reporting seed's run, never a later one's."""
  from studies.core import protocol
  out = str(tmp_path / "variants_listops")
  os.makedirs(out)
  protocol.write_page_record(out, "variants_listops", protocol.VERSION)
  base = cv.base_lr("listops", "cpu")
  monkeypatch.setattr(cv, "chosen_lrs", lambda *a, **k: {"linear": base})
  seeds = protocol.reporting_seeds("variants_listops")
  fp = lambda s: cv.config_fingerprint(cv.make_config("listops", "cpu", "linear",
                                                      {"seed": s}))
  entry = lambda s, config: {"variant": "linear", "task": "listops", "preset": "cpu",
                             "seed": s, "quality": 0.3, "config": config, "date": "d",
                             "protocol": protocol.VERSION}
  json.dump([entry(seeds[0], fp(seeds[0])), entry(seeds[1], "another config")],
            open(os.path.join(out, "seeds.json"), "w"))
  trained = []
  monkeypatch.setattr(cv, "ensure", lambda task, preset, n, wd, ov, **k: trained.append(
      ov["seed"]) or {"status": "failed"})
  row = cv._train_variant("listops", "cpu", "linear", str(tmp_path / "root"), out, None,
                          run={}, seeds=(), sweep_lr=False, ignore_page=True,
                          log=lambda s: None)
  assert trained == list(seeds[1:]) and row is None


def test_cpu_line_of_a_protocol_page_counts_its_own_runs_once(tmp_path, monkeypatch):
  """A protocol page's CPU line: its selection runs at every rate and its reporting
  seeds, once each (a row is its first reporting seed's run); the runs of the page
  before the protocol, still in its lr.json and seeds.json, are not counted."""
  vs = sp
  out = str(tmp_path / "variants_copy")
  os.makedirs(out)
  protocol.write_page_record(out, "variants_copy", protocol.VERSION)
  ov = protocol.with_overrides("copy", None)
  base = vs.base_lr("copy", "cpu")
  monkeypatch.setattr(vp, "chosen_lrs", lambda *a, **k: {"linear": base})
  fp = lambda extra: min(vs.fingerprints(vs.make_config("copy", "cpu", "linear",
                                                        {**ov, **extra})))
  seeds = [{"variant": "linear", "task": "copy", "preset": "cpu", "seed": s,
            "config": fp({"seed": s}), "cpu_seconds": 60.0, "protocol": protocol.VERSION}
           for s in protocol.reporting_seeds("variants_copy")]
  seeds += [{"variant": "linear", "task": "copy", "preset": "cpu", "seed": s,
             "config": fp({"seed": s}), "cpu_seconds": 6000.0} for s in (1, 2)]
  lrs = [{"variant": "linear", "task": "copy", "preset": "cpu", "lr": lr,
          "config": fp({"learning_rate": lr} if lr != base else {}),
          "cpu_seconds": 120.0, "protocol": protocol.VERSION} for lr in (base, base / 3)]
  lrs += [{"variant": "linear", "task": "copy", "preset": "cpu", "lr": base / 3,
           "config": fp({"learning_rate": base / 3}), "cpu_seconds": 6000.0}]
  json.dump(seeds, open(os.path.join(out, "seeds.json"), "w"))
  json.dump(lrs, open(os.path.join(out, "lr.json"), "w"))
  row = dict(seeds[0], status="ok", protocol=protocol.VERSION)
  line = vp.cpu_line("copy", "cpu", [row], out, ov)
  assert line.startswith("- CPU time of this page's runs: 9.0 CPU-min ("), line
  assert "selection runs of the lr sweep 4.0 (2 runs)" in line
  assert "reporting seeds 5.0 (5 runs)" in line and "rows" not in line


def test_a_verdict_says_what_differs_besides_the_attention():
  """mnist's mla read 'better' with 35% more parameters and a RoPE of its own beside
  softmax's sinusoidal positions, and the page did not say so: a row whose parameter
  count is more than 1% off softmax's, or which brings its own position signal, says
  what differs (from its params and the registry) beside its verdict."""
  row = lambda v, p: {"variant": v, "status": "ok", "params": p}
  rows = {v: row(v, p) for v, p in (("softmax", 1000), ("linear", 1000),
                                    ("cosine", 1005), ("gla", 1200), ("mla", 1350),
                                    ("deltanet", 1004))}
  d = sp.what_differs(rows)
  assert set(d) == {"gla", "mla", "deltanet"}        # cosine: +0.5%, within SIZE_TOL
  # issue 103: the layer pieces softmax's row lacks are named in the short form too
  # (mnist's deltanet read "better (+2% parameters)" without its q/k/v convolution),
  # and even where the parameters are within SIZE_TOL
  assert d["gla"][0] == "+20% parameters, rms_norm, out_gate"
  assert d["deltanet"][0] == "qkv_conv, qkv_silu, rms_norm"
  assert "`qkv_conv`" in d["deltanet"][1] and "parameters" not in d["deltanet"][1]
  assert "1,200 parameters against softmax's 1,000 (+20%: its inputs `gate_logits`" in d["gla"][1]
  assert "layer pieces `rms_norm`, `out_gate`" in d["gla"][1]      # the record's layer
  assert d["mla"][0] == "+35% parameters, own position signal"
  assert "parameters `w_uk`, `w_uv`" in d["mla"][1] and "decoupled RoPE" in d["mla"][1]
  bare = sp.what_differs(rows, pieces=lambda v: ())                # gated_layer=bare
  assert "layer pieces" not in bare["gla"][1] and bare["gla"][0] == "+20% parameters"
  assert "deltanet" not in bare
  assert sp.what_differs({"mla": row("mla", 1350)}) == {
      "mla": ("own position signal", "a position signal of its own (" +
              attention.variant("mla").own_positions + ") on top of the model's")}
  words = {"gla": "better (Δ ...)", "mla": "unresolved (Δ ...)", "linear": "worse (Δ ...)"}
  (line, _) = sp.differs_line(d, words)
  assert line.startswith("**Not like for like besides the attention.** `gla` (better): ")
  assert "`mla`" not in line and "`linear`" not in line            # unresolved; alike
  assert sp.differs_line(d, {"mla": "unresolved (Δ ...)"}) == []


def test_a_row_whose_seeds_agree_far_closer_than_softmaxs_says_the_seed_reached_it():
  """Issue 97: Shakespeare's old `local` seeds (1.8215, 1.8218, 1.8218 against
  softmax's 0.023 spread) look like a seed that never reached the runs; the seed table
  says in one line that each ran under its own seed (init and batches), and names
  only the rows below a tenth of softmax's spread."""
  by = {"softmax": {0: 1.8392, 1: 1.8331, 2: 1.8166},
        "local": {0: 1.82153, 1: 1.82182, 2: 1.82177},
        "sparse": {0: 1.8148, 1: 1.8197, 2: 1.8131}}
  blank, line = sp.tight_lines(by, "{:.3f}")
  assert blank == "" and line.startswith("`local` (0.000) spreads less than a tenth of "
                                         "softmax's 0.023 over its seeds"), line
  assert "sparse" not in line and "no seed failed to reach them" in line
  assert sp.tight_lines({k: by[k] for k in ("softmax", "sparse")}, "{:.3f}") == []
  assert sp.tight_lines({"local": by["local"]}, "{:.3f}") == []
  # (the committed page no longer shows those seeds: local re-ran under version 2, its
  # seeds 1.748, 1.765, 1.747 spread like softmax's)


def test_a_protocol_row_whose_run_only_the_ledger_holds_is_on_the_page(tmp_path,
                                                                        monkeypatch):
  """A protocol re-run carried out over several sessions on other machines: the first
  reporting seed's workdir is gone and the committed page is the one from before the
  protocol. The row comes from seeds.json, not "not run yet": its whole row where the
  ledger kept it (record_seed keeps it), else its quality from the entry and its cost
  cells from the variant's old row (same model and steps), marked, with no curve."""
  from studies.variants import ledger
  out = str(tmp_path / "variants_listops")
  os.makedirs(out)
  protocol.write_page_record(out, "variants_listops", protocol.VERSION)
  base = cv.base_lr("listops", "cpu")
  monkeypatch.setattr(cv, "chosen_lrs", lambda *a, **k: {"linear": base})
  s = protocol.reporting_seeds("variants_listops")[0]
  fp = cv.config_fingerprint(cv.make_config("listops", "cpu", "linear", {"seed": s}))
  old = {"variant": "linear", "task": "listops", "preset": "cpu", "status": "ok",
         "config": "old", "date": "2026-11-01", "steps_per_s": 3.5, "params": 123,
         "peak_bytes": 2 ** 20, "run": {"id": "r0", "host": "h"}, "sample": "text",
         "curve": [[10, 1.0, 0.2]], "eval": {"accuracy": 0.2, "eval_sequences": 9}}
  json.dump([old], open(os.path.join(out, "results.json"), "w"))
  entry = {"variant": "linear", "task": "listops", "preset": "cpu", "seed": s,
           "quality": 0.31, "validation": 0.3, "config": fp, "date": "2026-11-30",
           "host": "other", "cpu_seconds": 60.0, "protocol": protocol.VERSION}
  json.dump([entry], open(os.path.join(out, "seeds.json"), "w"))
  rows = lambda: {r["variant"]: r for r in cv.study(
      "listops", "cpu", [], str(tmp_path / "root"), out, command="c", page_only=True)}
  r = rows()["linear"]
  assert r["status"] == "ok" and r["eval"]["accuracy"] == 0.31 and r["validation"] == 0.3
  assert (r["steps_per_s"], r["params"], r["run"]["id"], r["curve"]) == (3.5, 123, "r0", [])
  assert r["ledger"]["cost_from"] == {"date": "2026-11-01", "config": "old"}
  assert "sample" not in r and "(ledger)" in vp.row(r)
  assert "`linear` that entry holds the quality" in ledger.ledger_lines([r])[1]
  assert rows()["softmax"].get("pending")          # no entry: still to be trained
  # a run recorded now keeps its whole row (less its text sample) in the entry
  res = dict(old, config=fp, date="2026-12-07", eval={"accuracy": 0.33},
             validation=0.32, protocol=protocol.VERSION, steps_per_s=4.0)
  cv.record_seed(out, res, s)
  (kept,) = json.load(open(os.path.join(out, "seeds.json")))
  assert kept["row"]["steps_per_s"] == 4.0 and "sample" not in kept["row"]
  r = rows()["linear"]
  assert (r["eval"]["accuracy"], r["steps_per_s"]) == (0.33, 4.0)
  assert "cost_from" not in r["ledger"] and "entry holds the quality" not in \
      ledger.ledger_lines([r])[1]


def test_a_protocol_row_whose_seeds_the_ledger_kept_is_not_trained_again(tmp_path,
                                                                          monkeypatch):
  """A resumed protocol study whose reporting seeds are all in seeds.json: the row is the
  ledger's, never a fresh run of the first reporting seed outside the protocol (which
  once retrained deltanet's seed 1, evaluated on a subset, with no validation figure); a
  non-protocol result.json in that seed's workdir is not taken for the row either."""
  out = str(tmp_path / "variants_listops")
  os.makedirs(out)
  protocol.write_page_record(out, "variants_listops", protocol.VERSION)
  base = cv.base_lr("listops", "cpu")
  monkeypatch.setattr(cv, "chosen_lrs", lambda *a, **k: {"linear": base})
  s = protocol.reporting_seeds("variants_listops")[0]
  fp = cv.config_fingerprint(cv.make_config("listops", "cpu", "linear", {"seed": s}))
  row = {"variant": "linear", "task": "listops", "preset": "cpu", "status": "ok",
         "config": fp, "eval": {"accuracy": 0.31}, "validation": 0.3, "params": 1,
         "protocol": protocol.VERSION}
  json.dump([{"variant": "linear", "task": "listops", "preset": "cpu", "seed": s,
              "quality": 0.31, "validation": 0.3, "config": fp, "date": "d", "host": "h",
              "protocol": protocol.VERSION, "row": row}],
            open(os.path.join(out, "seeds.json"), "w"))
  root = str(tmp_path / "root")
  wd = cv.run_dir(root, "linear", base, base, s)
  os.makedirs(wd)
  monkeypatch.setattr(cv, "finished", lambda w, c=None: (
      dict(row, eval={"accuracy": 0.9}, protocol=None) if w == wd else None))
  monkeypatch.setattr(cv, "_train_variant", lambda *a, **k: None)   # seeds all kept
  trained = []
  monkeypatch.setattr(cv, "ensure", lambda *a, **k: trained.append(a) or {"status": "ok"})
  got = {r["variant"]: r for r in cv.study("listops", "cpu", ["linear"], root, out,
                                           command="c")}
  assert trained == []
  assert got["linear"]["eval"]["accuracy"] == 0.31 and got["linear"]["ledger"]
