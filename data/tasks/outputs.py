"""What the evaluators of data/tasks/ share: a timer that leaves compilation out, a grid
of images as one PNG, and text samples from a prompt (the character and byte LMs).

Heavy imports (jax, models, matplotlib) are made inside the functions, so that
`import data.tasks` (the registry, read by config validation) stays light.
"""
from __future__ import annotations

import os
import time

import numpy as np


def timed(fn, *args, min_total=0.5, max_reps=5, **kw):
  """(result, seconds) of fn after one warm-up call with the same arguments: the best
  of repeated calls until min_total seconds or max_reps calls. A call of a few ms
  (the copy task's decode) timed once read 5x apart between identical code paths;
  a call longer than min_total is timed once, as before."""
  import jax
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


def text_samples(config, task, model, out, mode, key, **_):
  """4 samples of config.sample_len tokens (default 200, at most what model.max_len
  leaves) continuing config.prompt (task.encode; "" = from the start token), at
  config.temperature (default 0.8), to out/samples.txt (task.decode); the first is
  printed. Returns {"tokens_per_s"} of the timed generation."""
  import jax.numpy as jnp
  from models import generate
  prompt = task.encode(config.get("prompt", "\n"))[None].repeat(4, 0)
  steps = min(int(config.get("sample_len", 200)), model.cfg.max_len - prompt.shape[1])
  toks, dt = timed(generate, model, jnp.asarray(prompt), steps=steps, key=key, mode=mode,
                   temperature=float(config.get("temperature", 0.8)))
  texts = [task.decode(t) for t in np.asarray(toks)]
  with open(os.path.join(out, "samples.txt"), "w", encoding="utf-8") as f:
    f.write("\n\n-----\n\n".join(texts) + "\n")
  print(texts[0])
  return {"tokens_per_s": toks.shape[0] * steps / dt}
