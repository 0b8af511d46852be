"""mnist: MNIST as raster-order pixel sequences (image_size² tokens in 0..255), a pixel
LM scored in bits per dimension; eval.py completes occluded test images, samples
unconditionally and has the digit judge read the completions (trainer/digit_judge.py).
"""
from __future__ import annotations

import os
import time

import numpy as np

from data import pipeline
from data.tasks.outputs import grid_png, timed
from data.tasks.registry import Study, TaskRecord, register


def _side(config) -> int:
  return int(config.get("image_size", 28))


def _check(config, mcfg) -> None:
  """rope2d rotates by the pixel's row and column: model.image_side must be the width
  of the images (0 follows them: `_model_fields`)."""
  if mcfg.positions == "rope2d" and mcfg.image_side != _side(config):
    from models import ConfigError
    raise ConfigError(f"config 'model.image_side': {mcfg.image_side} pixels per row, but "
                      f"the images are {_side(config)} wide (image_size); leave it 0 to "
                      "follow them")


def _model_fields(config, model: dict) -> dict:
  """rope2d with model.image_side unset (0): the images' width."""
  if model.get("positions") == "rope2d" and not model.get("image_side"):
    return {"image_side": _side(config)}
  return {}


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
  import jax
  import jax.numpy as jnp
  from models import generate
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


def eval_images(config, task, model, out, mode, key, **_):
  """completions.png: config.num_images (8) test images, each as original | occluded
  (top half given) | config.num_samples (4) completions; samples.png: as many
  unconditional samples. Returns their speed (images/s, generation timed after a
  warm-up call)."""
  import jax
  import jax.numpy as jnp
  from models import generate
  side = task.side
  n, k = int(config.get("num_images", 8)), int(config.get("num_samples", 4))
  imgs = task.test_x[:n]
  P = side * side // 2                                   # the top half is given
  prompt = jnp.repeat(jnp.asarray(imgs[:, :P]), k, axis=0)
  T = float(config.get("temperature", 1.0))
  done, dt = timed(generate, model, prompt, steps=side * side - P, key=key, mode=mode,
                   temperature=T)
  done = np.asarray(done).reshape(n, k, -1)
  occluded = imgs.copy()
  occluded[:, P:] = 40                                   # the hidden half, light grey
  scale = max(3, 84 // side)                             # 14×14 drawn as big as 28×28
  grid_png(os.path.join(out, "completions.png"),
           [[imgs[i], occluded[i]] + list(done[i]) for i in range(n)], side, scale=scale)
  unc, dt_u = timed(generate, model, jnp.zeros((n, 0), jnp.int32), steps=side * side,
                    key=jax.random.fold_in(key, 1), mode=mode, temperature=T)
  grid_png(os.path.join(out, "samples.png"), [list(np.asarray(unc))], side, scale=scale)
  return {"completion_images_per_s": n * k / dt, "sample_images_per_s": n / dt_u,
          "completion_batch": n * k, "completion_seconds": dt}


def evaluate(config, task, model, out, mode, key, *, workdir=None, step=None):
  """eval_images, then the digit judge's completion metric unless
  config.completion_images is 0."""
  res = eval_images(config, task, model, out, mode, key)
  if int(config.get("completion_images", 500)) > 0:
    res.update(completion_metric(config, task, model, out, mode, key, workdir, step))
  return res


TASK = register(TaskRecord(
    name="mnist",
    pipeline=pipeline.Mnist,
    metric="bits_per_dim", label="bits/dim",
    splits={"train": "MNIST's 60,000 training images, less the last mnist_validation",
            "validation": "the last mnist_validation training images, held out (0, "
                          "the default: the test images)",
            "test": "the 10,000 test images"},
    seq_key="image_size",
    lengths=lambda c: {"image_size": _side(c) ** 2},
    check=_check, model_fields=_model_fields,
    evaluator=evaluate,
    datasets=("mnist",),
    smoke=lambda folder: dict(image_size=4, completion_images=0, num_images=2,
                              num_samples=2),
    study=Study(
        metric=("bits_per_dim", "test bits/dim", False, "{:.3f}"),
        validation_label="bits/dim",
        train_metric="bits_per_dim",
        decode=("completion_images_per_s", "img/s"),
        validation_overrides={"completion_images": 0},
        test_overrides=lambda c: {"eval_batches": 0},   # the whole test split
        sections=("completion",),
        config_keys=("image_size",),
        presets=("cpu",), order=3,
        lr_tie=0.005,
        tie=0.021,
        data_overrides={"mnist_validation": 5000},
        timing={"cpu": (50, 150, 25)})))
