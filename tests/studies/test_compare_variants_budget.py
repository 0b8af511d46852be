"""scripts/compare_variants.py's budget flags (--steps, --eval_batches, --overrides) and
where its page goes: a small run, or one of a variant the committed page does not hold,
writes under workdirs/ (ignored by git) and shows the committed rows beside its own,
marked, never rewriting results/. Nothing trains here: the runs are stand-ins
(`compare_variants.ensure` replaced), so each test costs the page, not training."""
import dataclasses
import json
import os
import pathlib
import shutil
import subprocess

import pytest

import attention
from scripts import compare_variants as script
from studies.core import sweep
from studies.variants import compare as cv

ROOT = pathlib.Path(cv.__file__).resolve().parents[2]
COMMITTED = "results/variants_copy"
GAUGE = {"n": sweep.GAUGE_N, "flop_per_s": 1e10, "statistic": "median", "runs": 3,
         "dtype": "float32"}


@pytest.fixture
def repo(tmp_path, monkeypatch):
  """A working directory holding a copy of the committed copy page's results.json, where
  every run is a stand-in: a finished row of the variant under the run's config."""
  page = tmp_path / COMMITTED
  page.mkdir(parents=True)
  shutil.copy(ROOT / COMMITTED / "results.json", page / "results.json")
  monkeypatch.chdir(tmp_path)
  committed = json.loads((page / "results.json").read_text())
  template = next(r for r in committed if r["variant"] == "softmax" and r["status"] == "ok")
  ran = []

  def ensure(task, preset, variant, workdir, overrides=None, run=None, **kw):
    ran.append((variant, workdir, overrides))
    return dict(template, variant=variant, run=run, date="2031-01-01",
                config=cv.config_fingerprint(cv.make_config(task, preset, variant,
                                                            overrides)))

  monkeypatch.setattr(cv, "ensure", ensure)
  monkeypatch.setattr(sweep, "gauge", lambda: dict(GAUGE))
  return tmp_path, committed, ran


def _rows(path) -> dict:
  return {r["variant"]: r for r in json.loads(pathlib.Path(path).read_text())}


def test_steps_run_writes_under_workdirs_beside_the_committed_rows(repo):
  tmp, committed, ran = repo
  before = (tmp / COMMITTED / "results.json").read_bytes()
  script.main(["--task=copy", "--variants=linear", "--steps=2", "--eval_batches=1"])
  out = tmp / "workdirs" / "pages" / "copy_cpu_steps2_eval1"
  assert [(v, w) for v, w, _ in ran] == [("linear", "workdirs/variants_copy_cpu_steps2_eval1/linear")]
  assert ran[0][2] == {"num_train_steps": 2, "eval_batches": 1}
  assert (tmp / COMMITTED / "results.json").read_bytes() == before     # untouched
  assert not (tmp / COMMITTED / "README.md").exists()
  assert not (tmp / "results" / "README.md").exists()
  rows = _rows(out / "results.json")
  assert "committed" not in rows["linear"] and rows["linear"]["date"] == "2031-01-01"
  ok = {r["variant"] for r in committed if r["status"] == "ok"} - {"linear"}
  for v in ok:           # the committed rows beside this run's, marked, not "not run yet"
    assert rows[v]["committed"]["page"] == COMMITTED and not rows[v].get("pending"), v
  page = (out / "README.md").read_text()
  assert "| `softmax` (committed) |" in page and "| `linear` |" in page
  assert "Rows marked (committed) are not this run's" in page
  assert "not this page's (eval_batches=1, num_train_steps=2)" in page
  assert not any("not run yet" in l for l in page.splitlines()
                 if any(f"`{v}`" in l for v in ok))


def test_a_new_variant_at_the_presets_budget_goes_under_workdirs_too(repo):
  tmp, committed, ran = repo
  mine = dataclasses.replace(attention.variant("softmax"), name="my_variant")
  with attention.registered(mine):
    assert cv.page_dir("copy", "cpu", ["my_variant"]) == "workdirs/pages/copy_cpu"
    assert cv.page_dir("copy", "cpu", ["softmax"]) == COMMITTED       # a committed row
    assert cv.page_dir("copy", "cpu", ["my_variant"], page_only=True) == COMMITTED
    script.main(["--task=copy", "--variants=my_variant"])
  rows = _rows(tmp / "workdirs" / "pages" / "copy_cpu" / "results.json")
  assert "committed" not in rows["my_variant"] and rows["softmax"]["committed"]
  page = (tmp / "workdirs" / "pages" / "copy_cpu" / "README.md").read_text()
  assert "| `my_variant` |" in page and "| `softmax` (committed) |" in page
  assert not (tmp / COMMITTED / "README.md").exists()


def test_results_refuse_a_budget_flag_and_bad_budgets_are_one_line(repo, capsys):
  for argv, words in (
      (["--out=results/variants_copy", "--steps=5"], "--out=results/variants_copy: "
       "results/ holds the preset's own budget"),
      (["--steps=0"], "--steps=0: must be >= 1"),
      (["--overrides={bad"], "Expecting property name")):
    with pytest.raises(SystemExit):
      script.main(["--task=copy", "--variants=softmax", *argv])
    assert words in capsys.readouterr().err
  assert repo[2] == []                                     # nothing ran


def test_the_scratch_pages_are_ignored_by_git():
  """What a budget run writes (its page, its workdirs) is under workdirs/, which git
  ignores: `git status` stays clean by construction."""
  tag = cv.budget_tag(cv.budget_overrides({"batch_size": 8}, steps=50))
  assert tag.startswith("_steps50_ov")
  for path in (cv.SCRATCH.format(task="copy", preset="cpu", tag=tag) + "/README.md",
               f"workdirs/variants_copy_cpu{tag}/softmax/result.json"):
    assert subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 0, path
