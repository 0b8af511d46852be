"""Evaluation of a trained workdir: test metrics, samples, pictures and generation speed.

The library behind eval.py (`python eval.py --workdir=...` is a thin main over
`evaluate_workdir`):

  from trainer import evaluate
  res = evaluate.evaluate_workdir("workdirs/mnist")     # -> the dict of eval.json

It reads workdir/config.json (written by train.py), restores the latest (or the
chosen) checkpoint, and writes to workdir/eval/ (or `out`); `workdir` may also name
a shipped model (trainer/pretrained.py: `evaluate_workdir("mnist14_linear")`), whose
results go to workdirs/pretrained/<name>/ (or `out`), never into pretrained/:
  eval.json           eval_loss and the task metric on the test split where the run
                      holds one out, else on validation, saying so in one line
                      (`evaluate_workdir`'s split; eval.json always names it as
                      eval_split), over the whole split by default (`eval_batches`);
                      generation timings
Each task's evaluator (its registry record's `evaluator`, data/tasks/<name>.py)
writes its own outputs beside eval.json:
  mnist:   completions.png   rows of test images: original | occluded (top half
                             given) | k completions;  samples.png   unconditional
           completion_metric.npz  config.completion_images test images completed
                             once each, their labels and the given/hidden split; the
                             digit judge's accuracy on them and on three baselines
                             goes into eval.json (`completion_metric`)
  shakespeare, text: samples.txt   text continuing config.prompt
  multi30k: translations.txt source / reference / hypothesis, and BLEU in eval.json
           (on the test split, test_2016_flickr; training evaluates on validation)
  copy:    token accuracy on the copied half (teacher-forced and greedy-generated)
  listops: test accuracy of the classifier
  mqar:    accuracy on the queried values (token_accuracy)
Generation is timed after a warm-up call with the same shapes (compilation is not
counted): images/s for MNIST, tokens/s for text.

Length extrapolation (shakespeare): eval_seq_len=N (an override, eval.py
--eval_seq_len) evaluates on validation windows of N characters instead of the
training length; `evaluate_lengths(workdir, [L, 2L, 4L, 8L])` gives the eval metrics
at each length from one loaded model. Lengths past model.max_len are refused where no
position exists there (learned positions) or the attention has per-position
parameters (location, linformer): ModelConfig.check_length.
"""
from __future__ import annotations

import json
import os
import sys

import jax

from data import pipeline, tasks
from data.tasks import mnist as mnist_task
from data.tasks.outputs import grid_png, timed
from trainer import pretrained
from trainer.checkpoint import load_model
from trainer.config import TrainError, check_eval_length, matmul_precision
from trainer.metrics import runtime_info
from trainer.step import evaluate as split_metrics

load = load_model   # (config, model in eval mode, step) of a workdir


# The evaluators live with their tasks (data/tasks/<name>.py: each record's
# `evaluator`); the names that studies and tests read from here, kept as aliases
# (new code: data.tasks.mnist, data.tasks.outputs):
_timed = timed
eval_mnist = mnist_task.eval_images
completion_metric = mnist_task.completion_metric
NO_TEST = "no test split: this figure is validation"


def evaluate_lengths(workdir, lengths, *, step=None, **overrides) -> dict:
  """{T: the split's metrics (eval_loss, bits_per_char, eval_sequences) on the
  validation split cut into windows of T characters} for each T in `lengths`, from
  one load of a shakespeare workdir's checkpoint (`step`, default the latest).

  Every length is checked before any is evaluated (ConfigError from
  trainer.config.check_eval_length: a length past model.max_len that the model's
  positions or attention cannot reach). overrides: config fields, e.g. eval_batches=0
  (the whole split) or eval_batch_size (fewer windows per batch at long T)."""
  config, model, step = load(workdir, step, **overrides)
  configs = {}
  for T in lengths:
    c = config.copy_and_resolve_references()
    c.eval_seq_len = int(T)
    check_eval_length(c, model.cfg)
    configs[int(T)] = c
  out = {}
  with matmul_precision(config.get("matmul_precision")):
    for T, c in configs.items():
      res = split_metrics(model, pipeline.create(c), c)
      out[T] = {"step": step, "eval_seq_len": T,
                **{k: float(v) if isinstance(v, jax.Array) else v for k, v in res.items()}}
  return out


def evaluate_workdir(workdir, *, step=None, out=None, decode_mode="auto", seed=0,
                     eval_batches: int | None = 0, split: str | None = None,
                     **overrides) -> dict:
  """Runs everything above; returns the dict written to eval.json.

  step: the checkpoint (default the latest); out: the output folder (default
  workdir/eval). decode_mode: "cache", "recompute", or "auto" (the model's decode
  state where its decoder attention has one, else recompute: models.best_mode).
  eval_batches: how much of the test split eval_loss and the task metric cover:
    0 (default) the whole split, n its first n batches of eval_batch_size sequences
    (BLEU: its first n * eval_batch_size sentences), None the training config's own
    eval_batches and bleu_sentences (what training evaluated on validation).
    eval.json records the count as eval_sequences.
  overrides: config fields to change before evaluating (e.g. sample_len, or
    eval_seq_len: shakespeare's evaluation windows, see the module docstring).
  split: "validation" or "test" (studies.core.protocol: a study chooses on the one and
    reports on the other); None: the test split where the run holds one out (its
    task record's `has_test`: every task but a shakespeare run with test_fraction 0,
    or a text corpus with no test document), else validation, with one line saying
    so (NO_TEST). eval.json always records it as eval_split.
  """
  if split is not None:
    overrides["eval_split"] = split
  if eval_batches is not None:
    if int(eval_batches) < 0:
      raise TrainError(f"eval_batches must be >= 0 (0 = the whole test split), got "
                       f"{eval_batches}")
    overrides["eval_batches"] = int(eval_batches)
  shipped = pretrained.find(workdir)
  config, model, step = load(workdir, step, **overrides)
  if shipped is not None:      # its folder stays as shipped: no TensorBoard events there
    out, workdir = out or os.path.join("workdirs", "pretrained", shipped.name), None
  if eval_batches is not None and tasks.task(config.task).metric == "bleu":
    # BLEU on the same part of the split
    n = int(eval_batches) * int(config.eval_batch_size)
    config.bleu_sentences = n or sys.maxsize     # bleu(): at most the split's size
  check_eval_length(config, model.cfg)
  with matmul_precision(config.get("matmul_precision")):
    return _evaluate(config, model, step, workdir, out, decode_mode, seed)


def _evaluate(config, model, step, workdir, out, decode_mode, seed) -> dict:
  """workdir: where TensorBoard scalars go (None: nowhere); out: the output folder
  (None: workdir/eval)."""
  rec = tasks.task(config.task)
  if not config.get("eval_split"):     # training evaluated on validation
    with config.unlocked():
      config.eval_split = "test" if rec.has_test(config) else "validation"
    if config.eval_split == "validation":
      print(NO_TEST, flush=True)
  out = out or os.path.join(workdir, "eval")
  os.makedirs(out, exist_ok=True)
  task = pipeline.create(config)
  if decode_mode == "auto":
    from models import best_mode
    decode_mode = best_mode(model)
  res = {"step": step, "decode_mode": decode_mode, "device": jax.devices()[0].device_kind,
         **runtime_info(), **split_metrics(model, task, config)}
  res["eval_split"] = str(config.eval_split)
  if config.get("eval_seq_len"):
    res["eval_seq_len"] = int(config.eval_seq_len)
  model.eval()
  if rec.evaluator is not None:        # the task's samples, pictures, speed
    res.update(rec.evaluator(config, task, model, out, decode_mode,
                             jax.random.PRNGKey(seed), workdir=workdir, step=step))
  # split_metrics can return 0-d jax arrays (a count from a jitted step): plain floats
  res = {k: float(v) if isinstance(v, jax.Array) else v for k, v in res.items()}
  with open(os.path.join(out, "eval.json"), "w") as f:
    json.dump(res, f, indent=1)
  print(json.dumps(res, indent=1), flush=True)
  return res
