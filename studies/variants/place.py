"""Where a variants-page run writes its page (studies.variants.compare): the committed
page under results/ for the preset's own budget over the variants that page holds,
else an untracked page under workdirs/; and the committed rows a scratch page shows
beside its own.
"""
from __future__ import annotations

import os

from studies.core import pages, runs

OUT = "results/variants_{task}"


def out_dir(task: str, preset: str) -> str:
  """The page of a task's preset: results/variants_<task> for the cpu preset (the one
  the README's summary table reads), results/variants_<task>_<preset> for the others,
  so that no preset's run overwrites another's page."""
  return OUT.format(task=task) + ("" if preset == "cpu" else f"_{preset}")


# ---- where a run's page goes: the committed one, or an untracked one ------------------

# The page of a run that is not the committed page's (a budget of its own, or variants
# the committed page does not hold): under workdirs/, which git ignores, so such a run
# leaves the tracked files as they were.
SCRATCH = "workdirs/pages/{task}_{preset}{tag}"


def budget_overrides(overrides=None, *, steps=None, eval_batches=None) -> dict | None:
  """The config overrides of a run's budget flags, None at the preset's own budget.

  overrides: a dict of config overrides (--overrides), or None; steps: the training
  steps of every run (num_train_steps), or None; eval_batches: the evaluation batches
  (eval_batches: those of the in-training evaluations; the row's final evaluation
  keeps its task's rule), or None."""
  ov = dict(overrides or {})
  for key, value in (("num_train_steps", steps), ("eval_batches", eval_batches)):
    if value is not None:
      if int(value) < 0 or (key == "num_train_steps" and int(value) < 1):
        raise ValueError(f"--{'steps' if key == 'num_train_steps' else key}={value}: must "
                         f"be {'>= 1' if key == 'num_train_steps' else '>= 0'}")
      ov[key] = int(value)
  return ov or None


def budget_tag(overrides=None) -> str:
  """A short name of a run's budget for its folders: "" at the preset's own budget, else
  "_steps<N>", "_eval<N>" and "_ov<hash>" of any other overrides (e.g. "_steps50")."""
  ov = dict(overrides or {})
  parts = []
  if "num_train_steps" in ov:
    parts.append(f"steps{ov.pop('num_train_steps')}")
  if "eval_batches" in ov:
    parts.append(f"eval{ov.pop('eval_batches')}")
  if ov:
    parts.append("ov" + runs.fingerprint(ov)[:6])
  return "".join("_" + p for p in parts)


def committed_rows(task: str, preset: str, page: str | None = None) -> dict:
  """{variant: row} of the finished rows of the committed page (`page`, default
  out_dir(task, preset)) for this task and preset, each marked `committed` (the page,
  its date and machine) so that a page showing it beside rows of another run says
  where it comes from. {} where there is no committed page."""
  page = page or out_dir(task, preset)
  rows = pages.read_json(os.path.join(page, "results.json"), [])
  out = {}
  for r in rows:
    if r.get("status") == "ok" and r.get("task") == task and r.get("preset") == preset:
      out[r["variant"]] = dict(r, committed={
          "page": page, "date": r.get("date"),
          "host": r.get("eval", {}).get("host") or "host not recorded"})
  return out


def on_committed_page(task: str, preset: str, variant: str) -> bool:
  """Whether the committed page has a row of `variant` that is not "yet to be trained"
  (trained, refused or skipped there)."""
  rows = pages.read_json(os.path.join(out_dir(task, preset), "results.json"), [])
  return any(r.get("variant") == variant and not r.get("pending") for r in rows)


def page_dir(task: str, preset: str, variants, overrides=None, page_only=False) -> str:
  """Where a run writes its page by default: the committed page (out_dir) when it
  runs the preset's own budget over variants that page holds (or only rewrites the
  page: `page_only`); else an untracked folder, SCRATCH (workdirs/pages/<task>_
  <preset>[_<budget_tag>]), so that a small run or a new variant never rewrites a
  committed page. variants: the chosen names; overrides: budget_overrides' dict."""
  if overrides or not (page_only or all(on_committed_page(task, preset, v)
                                        for v in variants)):
    return SCRATCH.format(task=task, preset=preset, tag=budget_tag(overrides))
  return out_dir(task, preset)


def is_committed_path(path: str) -> bool:
  """Whether `path` (relative to the repository root) lies under results/."""
  parts = os.path.normpath(path).split(os.sep)
  return parts[0] == "results"
