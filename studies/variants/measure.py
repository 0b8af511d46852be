"""What one finished row of a variants page measures (studies.variants.compare): the
task's metric (`METRIC`) on the test split, and on validation for the protocol's
selection (`validation_figure`); the training memory; the quality-vs-time curve and,
where the task records one, the step it is solved at. Every task's facts are its
record's (data/tasks/, `TaskRecord.study`); the tables here are read from them.
"""
from __future__ import annotations

import math
import os

from data import tasks
from studies.variants.config import TASKS


class Pct(str):
  """The format string "{:.2%}" (a str, so code that reads the format still can),
  except that a fraction short of 1 never prints as 100.00%, nor a nonzero one as
  0.00%: it gets the decimals (up to 6) that show it apart (a copy seed with one wrong
  token in 32,768 once read '100.00%' beside exact ones, and its row 'Δ −0.00% ± 0.00%'
  against them)."""

  def format(self, x: float) -> str:
    for d in range(2, 7):
      s = f"{x:.{d}%}"
      if not ((x < 1 and s.startswith("100.")) or (x != 0 and s.strip("-0.%") == "")):
        return s
    return s


def _study(name: str):
  """What the studies know of task `name`: its record's Study (data/tasks/)."""
  return tasks.task(name).study


# Each task with a variants page (config.TASKS): its quality metric: (key in eval.json,
# label, higher is better, format).
METRIC = {n: _study(n).metric[:3] + ((Pct if _study(n).exact_percent else str)(
    _study(n).metric[3]),) for n in TASKS}
# Where a label names the split it was measured on, what it reads under the protocol
# (studies/PROTOCOL.md, version >= 1: every row reported on the test split)
TEST_LABEL = {n: _study(n).test_label for n in TASKS if _study(n).test_label}


def metric_label(task: str, version: int = 0) -> str:
  """The column label of `task`'s quality metric on a page following protocol
  `version` (studies.core.protocol.page_version; 0: before the protocol, where
  Shakespeare's rows were measured on its validation split: Study.test_label)."""
  return TEST_LABEL.get(task, METRIC[task][1]) if version >= 1 else METRIC[task][1]


# The metric as train.py records it during training (for the quality-vs-time curve).
TRAIN_METRIC = {n: _study(n).train_metric for n in TASKS}
# (key in eval.json, unit) of the generation speed; (None, ""): none (a classifier).
DECODE = {n: _study(n).decode for n in TASKS}


# A row that has no result, in one word (the summary table, the listops LRA table).
STATUS_SHORT = {"refused": "cannot", "skipped": "not run", "failed": "failed"}


def train_memory(workdir, config) -> dict:
  """Peak memory of training: the GPU's peak bytes in use, or (CPU) XLA's compiled
  memory plan of one forward+backward on a train batch."""
  import jax
  dev = jax.devices()[0]
  stats = dev.memory_stats() if hasattr(dev, "memory_stats") else None
  if stats and stats.get("peak_bytes_in_use"):
    return {"peak_bytes": int(stats["peak_bytes_in_use"]), "memory_kind": "device peak"}
  import jax.numpy as jnp
  from flax import nnx
  from data import pipeline
  import trainer
  _, model, _ = trainer.load_model(workdir)
  model.train()
  task = pipeline.create(config)
  batch = {k: jnp.asarray(v) for k, v in task.train_batch(0).items()}
  gdef, params, rest = nnx.split(model, nnx.Param, ...)

  def fwd_bwd(params, rest, batch):
    # nnx.value_and_grad, not jax's: dropout advances the RNG count inside the trace
    m = nnx.merge(gdef, params, rest)
    return nnx.value_and_grad(lambda m: trainer.loss_fn(m, batch)[0])(m)

  ma = jax.jit(fwd_bwd).lower(params, rest, batch).compile().memory_analysis()
  total = (ma.argument_size_in_bytes + ma.output_size_in_bytes + ma.temp_size_in_bytes
           - ma.alias_size_in_bytes)
  return {"peak_bytes": int(total), "memory_kind": "XLA plan, fwd+bwd"}


def curve(task, evals) -> list:
  """[(step, training seconds, the task's in-training metric)] from runs.rates' evals."""
  key = TRAIN_METRIC[task]
  return [(s, sec, r.get(key)) for s, sec, r in evals if key in r]


# A task counts as solved at the first in-training evaluation whose key reaches the
# threshold, where its record says so (Study.solved: the copy task's, and why).
SOLVED = {n: _study(n).solved for n in TASKS if _study(n).solved}


def solved_at(task, evals) -> dict:
  """{"solved_at": [step, training seconds] of the first eval with SOLVED[task]'s
  metric at or over its threshold, or None} for a task in SOLVED, else {}."""
  if task not in SOLVED:
    return {}
  key, at = SOLVED[task]
  hit = next(([s, sec] for s, sec, r in evals if r.get(key, -1) >= at), None)
  return {"solved_at": hit}


def validation_figure(task, workdir) -> float:
  """The task metric of a trained workdir on its validation split (the whole split;
  no sampling, completions or timing): what the protocol's rate selection reads."""
  from trainer import evaluate as evaluation
  over = dict(_study(task).validation_overrides)
  ev = evaluation.evaluate_workdir(workdir, split="validation", eval_batches=0,
                                   out=os.path.join(workdir, "eval_validation"), **over)
  return float(ev[METRIC[task][0]])


def evaluate(task, variant, workdir, config, split=None) -> dict:
  """eval.py's evaluation of a trained workdir, plus the training memory."""
  import jax
  from trainer import evaluate as evaluation
  # the preset's own eval_batches, unless the task's record says otherwise (the whole
  # test split where a preset evaluates a subset during training; its sample's length)
  over = {"eval_batches": None, **_study(task).test_overrides(config)}
  # the variant's decode state where its decoder role has one, else recompute
  ev = evaluation.evaluate_workdir(workdir, decode_mode="auto", split=split, **over)
  res = dict(status="ok", eval=ev, decode_mode=ev["decode_mode"],
             **train_memory(workdir, config))
  sections = _study(task).sections
  if "bleu_signature" in sections:
    res["bleu_signature"] = bleu_signature()
  if "samples" in sections:
    res["sample"] = open(os.path.join(workdir, "eval", "samples.txt")).read() \
        .split("\n\n-----\n\n")[0]
  res["jax"] = jax.__version__
  res["device"] = jax.devices()[0].device_kind
  return res


def bleu_signature() -> str:
  """sacreBLEU's signature of the BLEU that trainer.step.bleu computes (corpus_bleu with
  one reference and the defaults). sacreBLEU states the number of references only after
  a scoring call, hence the one-sentence corpus."""
  import sacrebleu
  b = sacrebleu.BLEU()
  b.corpus_score(["a"], [["a"]])
  return str(b.get_signature())


def quality(res) -> float | None:
  if res.get("status") != "ok":
    return None
  return res["eval"].get(METRIC[res["task"]][0])


def quality_str(res) -> str:
  q = quality(res)
  if q is None:
    return "-"
  s = METRIC[res["task"]][3].format(q)
  if _study(res["task"]).in_bits:
    s += f" ({q / math.log(2):.3f} {_study(res['task']).in_bits})"
  return s
