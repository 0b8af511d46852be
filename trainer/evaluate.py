"""Evaluation of a trained workdir: test metrics, samples, pictures and generation speed.

The library behind eval.py (`python eval.py --workdir=...` is a thin main over
`evaluate_workdir`):

  from trainer import evaluate
  res = evaluate.evaluate_workdir("workdirs/mnist")     # -> the dict of eval.json

It reads workdir/config.json (written by train.py), restores the latest (or the
chosen) checkpoint, and writes to workdir/eval/ (or `out`); `workdir` may also name
a shipped model (trainer/pretrained.py: `evaluate_workdir("mnist14_linear")`), whose
results go to workdirs/pretrained/<name>/ (or `out`), never into pretrained/:
  eval.json           eval_loss and the task metric on the test split (the whole
                      split by default: `eval_batches`), generation timings
  mnist:   completions.png   rows of test images: original | occluded (top half
                             given) | k completions;  samples.png   unconditional
           completion_metric.npz  config.completion_images test images completed
                             once each, their labels and the given/hidden split; the
                             digit judge's accuracy on them and on three baselines
                             goes into eval.json (`completion_metric`)
  shakespeare: samples.txt   text continuing config.prompt
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
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from data import pipeline
from models import generate
from trainer import pretrained
from trainer.checkpoint import load_model
from trainer.config import TrainError, check_eval_length, matmul_precision
from trainer.metrics import runtime_info
from trainer.step import evaluate as split_metrics

load = load_model   # (config, model in eval mode, step) of a workdir


def _timed(fn, *args, min_total=0.5, max_reps=5, **kw):
  """(result, seconds) of fn after one warm-up call with the same arguments: the best
  of repeated calls until min_total seconds or max_reps calls. A call of a few ms
  (the copy task's decode) timed once read 5x apart between identical code paths;
  a call longer than min_total is timed once, as before."""
  jax.block_until_ready(fn(*args, **kw))
  best, total, reps = float("inf"), 0.0, 0
  while reps < max_reps and (reps == 0 or total < min_total):
    t = time.perf_counter()
    out = jax.block_until_ready(fn(*args, **kw))
    dt = time.perf_counter() - t
    best, total, reps = min(best, dt), total + dt, reps + 1
  return out, best


def grid_png(path, rows, side, gap=2, scale=3, gap_ink=96):
  """Saves rows of images (lists of (side*side,) uint8 arrays, 255 = full ink) as one
  PNG, ink dark on white, each pixel drawn as a scale x scale block, the images apart
  by `gap` pixels of mid-grey ink `gap_ink` (lighter than a digit, darker than the
  light grey 40 of an occluded half: the gaps were full ink, black bars as heavy as
  the digits)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  n_r, n_c = len(rows), max(len(r) for r in rows)
  canvas = np.full((n_r * (side + gap) + gap, n_c * (side + gap) + gap), gap_ink, np.uint8)
  for i, r in enumerate(rows):
    for j, img in enumerate(r):
      y, x = gap + i * (side + gap), gap + j * (side + gap)
      canvas[y:y + side, x:x + side] = np.asarray(img, np.uint8).reshape(side, side)
  canvas = np.kron(canvas, np.ones((scale, scale), np.uint8))
  plt.imsave(path, 255 - canvas, cmap="gray", vmin=0, vmax=255)   # ink dark on white


def completion_metric(config, task, model, out, mode, key, workdir=None, step=None):
  """Judges completions with the digit judge (trainer/digit_judge.py).

  The first config.completion_images test images (default 500; 0 skips the metric,
  which needs the classifier, trained on demand) have their top half
  (side²//2 pixels, raster order) given and the rest sampled once each; the classifier
  reads them against the true labels, beside its accuracy on the originals, on the
  top half over a blank bottom and over the bottom of another test image. Writes
  out/completion_metric.npz (completed (N, side²) uint8, originals, labels (N,),
  index (N,) into the test split, given (the number of given pixels), side, hidden_mask
  (side, side) bool: True where generated) so the figure can be re-checked with another
  classifier, and the figures to workdir/tb as TensorBoard scalars at `step`.
  Returns the figures (keys as in digit_judge.completion_accuracy, plus
  judged_completion_seconds: their generation time, compilation included).
  """
  from trainer import digit_judge
  side = task.side
  n = min(int(config.get("completion_images", 500)), len(task.test_x))
  imgs, labels = task.test_x[:n], task.test_y[:n]
  P = side * side // 2                                   # the top half is given
  t = time.perf_counter()
  done = np.asarray(jax.block_until_ready(generate(
      model, jnp.asarray(imgs[:, :P]), steps=side * side - P,
      key=jax.random.fold_in(key, 2), mode=mode,
      temperature=float(config.get("temperature", 1.0)))))
  dt = time.perf_counter() - t
  res = digit_judge.completion_accuracy(done, imgs, labels, side=side, given=P,
                                       shift=config.get("shift", ""),
                                       data_dir=config.data_dir or None)
  res["judged_completion_seconds"] = dt
  hidden = np.zeros(side * side, bool)
  hidden[P:] = True
  np.savez_compressed(os.path.join(out, "completion_metric.npz"),
                      completed=done.astype(np.uint8), originals=imgs.astype(np.uint8),
                      labels=np.asarray(labels), index=np.arange(n), given=P, side=side,
                      hidden_mask=hidden.reshape(side, side))
  if workdir is not None and step is not None:
    from tensorboardX import SummaryWriter
    with SummaryWriter(os.path.join(workdir, "tb")) as tb:
      for k, v in res.items():
        if k.endswith("accuracy") or k.startswith("completion_lead"):
          tb.add_scalar(f"completion/{k}", v, step)
  return res


def eval_mnist(config, task, model, out, mode, key):
  side = task.side
  n, k = int(config.get("num_images", 8)), int(config.get("num_samples", 4))
  imgs = task.test_x[:n]
  P = side * side // 2                                   # the top half is given
  prompt = jnp.repeat(jnp.asarray(imgs[:, :P]), k, axis=0)
  T = float(config.get("temperature", 1.0))
  done, dt = _timed(generate, model, prompt, steps=side * side - P, key=key, mode=mode,
                    temperature=T)
  done = np.asarray(done).reshape(n, k, -1)
  occluded = imgs.copy()
  occluded[:, P:] = 40                                   # the hidden half, light grey
  scale = max(3, 84 // side)                             # 14×14 drawn as big as 28×28
  grid_png(os.path.join(out, "completions.png"),
           [[imgs[i], occluded[i]] + list(done[i]) for i in range(n)], side, scale=scale)
  unc, dt_u = _timed(generate, model, jnp.zeros((n, 0), jnp.int32), steps=side * side,
                     key=jax.random.fold_in(key, 1), mode=mode, temperature=T)
  grid_png(os.path.join(out, "samples.png"), [list(np.asarray(unc))], side, scale=scale)
  return {"completion_images_per_s": n * k / dt, "sample_images_per_s": n / dt_u,
          "completion_batch": n * k, "completion_seconds": dt}


def eval_text(config, task, model, out, mode, key):
  prompt = task.encode(config.get("prompt", "\n"))[None].repeat(4, 0)
  steps = min(int(config.get("sample_len", 200)), model.cfg.max_len - prompt.shape[1])
  toks, dt = _timed(generate, model, jnp.asarray(prompt), steps=steps, key=key, mode=mode,
                    temperature=float(config.get("temperature", 0.8)))
  texts = [task.decode(t) for t in np.asarray(toks)]
  with open(os.path.join(out, "samples.txt"), "w") as f:
    f.write("\n\n-----\n\n".join(texts) + "\n")
  print(texts[0])
  return {"tokens_per_s": toks.shape[0] * steps / dt}


def eval_translation(config, task, model, out, mode, key):
  from models.generate import translate
  src, _, refs = task.splits[task.eval_split]
  (toks, _), dt = _timed(translate, model, src[:16], max_len=int(config.tgt_len),
                         beam_size=int(config.get("beam_size", 0)), mode=mode)
  with open(os.path.join(out, "translations.txt"), "w") as f:
    for s, r, h in zip(src[:16], refs[:16], np.asarray(toks)):
      f.write(f"src: {task.detokenize(s)}\nref: {r}\nhyp: {task.detokenize(h)}\n\n")
  return {"sentences_per_s": 16 / dt}


def eval_copy(config, task, model, out, mode, key):
  """Token accuracy on the copied half, teacher-forced and as a greedy generated copy
  (prompt: the separator, the n symbols and the second separator), and its speed."""
  from models.transformer import shift_right
  n = int(config.copy_len)
  logp = nnx.jit(lambda m, ids: m.forward_logp(ids))
  hit = tot = ghit = 0.0
  for i, b in enumerate(task.eval_batches()):
    y, w = b["y"], b["w"] > 0                       # w: the copied half (as targets)
    ids_in = shift_right(jnp.asarray(y), model.cfg.start_id)
    pred = np.asarray(jnp.argmax(logp(model, ids_in), -1))
    hit, tot = hit + float(np.sum((pred == y) & w)), tot + float(np.sum(w))
    prompt = jnp.asarray(y[:, :n + 2])
    if i == 0:      # timed (after a warm-up call) on the first batch
      gen, dt = _timed(generate, model, prompt, steps=n, key=key, mode=mode,
                       temperature=0.0)
      speed = y.shape[0] * n / dt
    else:
      gen = generate(model, prompt, steps=n, key=key, mode=mode, temperature=0.0)
    ghit += float(np.sum(np.asarray(gen)[:, -n:] == y[:, n + 2:]))
  return {"token_accuracy": hit / max(tot, 1.0),
          "generated_token_accuracy": ghit / max(tot, 1.0), "tokens_per_s": speed}


EVALS = {"mnist": eval_mnist, "tfds": None, "shakespeare": eval_text, "copy": eval_copy,
         "multi30k": eval_translation,
         "listops": None,     # split_metrics already gives its accuracy
         "mqar": None}        # and the accuracy on the queried values


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
    reports on the other); None: the test split of multi30k and listops, the split
    training evaluated on for the others (what eval.py has always reported).
    eval.json records it as eval_split.
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
  if eval_batches is not None and config.task == "multi30k":   # BLEU on the same part
    n = int(eval_batches) * int(config.eval_batch_size)
    config.bleu_sentences = n or sys.maxsize     # bleu(): at most the split's size
  check_eval_length(config, model.cfg)
  with matmul_precision(config.get("matmul_precision")):
    return _evaluate(config, model, step, workdir, out, decode_mode, seed)


def _evaluate(config, model, step, workdir, out, decode_mode, seed) -> dict:
  """workdir: where TensorBoard scalars go (None: nowhere); out: the output folder
  (None: workdir/eval)."""
  if config.task in ("multi30k", "listops") and not config.get("eval_split"):
    config.eval_split = "test"          # (multi30k: test_2016_flickr); training used val
  out = out or os.path.join(workdir, "eval")
  os.makedirs(out, exist_ok=True)
  task = pipeline.create(config)
  if decode_mode == "auto":
    from models import best_mode
    decode_mode = best_mode(model)
  res = {"step": step, "decode_mode": decode_mode, "device": jax.devices()[0].device_kind,
         **runtime_info(), **split_metrics(model, task, config)}
  if config.get("eval_split"):
    res["eval_split"] = str(config.eval_split)
  if config.get("eval_seq_len"):
    res["eval_seq_len"] = int(config.eval_seq_len)
  model.eval()
  gen = EVALS[config.task]
  if gen is not None:
    res.update(gen(config, task, model, out, decode_mode, jax.random.PRNGKey(seed)))
  if config.task == "mnist" and int(config.get("completion_images", 500)) > 0:
    res.update(completion_metric(config, task, model, out, decode_mode,
                                 jax.random.PRNGKey(seed), workdir, step))
  # split_metrics can return 0-d jax arrays (a count from a jitted step): plain floats
  res = {k: float(v) if isinstance(v, jax.Array) else v for k, v in res.items()}
  with open(os.path.join(out, "eval.json"), "w") as f:
    json.dump(res, f, indent=1)
  print(json.dumps(res, indent=1), flush=True)
  return res
