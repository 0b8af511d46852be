"""MNIST image completion of "Transformers are RNNs" (Katharopoulos et al., ICML 2020),
reproduced: `results/mnist_completion/`.

It trains (or, where a workdir already holds the finished run, reuses) a softmax and
a linear-attention pixel Transformer with identical settings through
`trainer.train_and_evaluate`, then measures, in this one run:
  * test bits/dim of each model;
  * generation images/s at one batch size for softmax without a cache (the full
    forward pass per pixel, the paper's baseline), softmax with its KV cache, softmax
    with the int8 KV cache, and linear attention in its RNN form;
  * occluded completions (top half given) and unconditional samples (PNG grids), and
    the digit classifier's reading of the completions (studies.core.completion);
  * forward and forward+backward time of causal softmax, flash and linear attention
    against sequence length, with log-log slopes (the student report's figure (a)/(b));
and writes results.json and the PNGs; studies.repro.mnist_page writes README.md
from them. Every number on the page comes from the run that wrote it; the paper's and
the student report's numbers are quoted (studies.core.references).
"""
from __future__ import annotations

import dataclasses
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from studies.core import pages, plots, references as refs, runs, timing

OUT = "results/mnist_completion"
PAPER = refs.PAPER_MNIST
STUDENT_100_IMAGES_S = refs.STUDENT_100_IMAGES_S


@dataclasses.dataclass(frozen=True)
class Preset:
  model: tuple          # configs/mnist.py model fields to override, (name, value) pairs
  steps: int            # training steps per model (batch `batch`)
  batch: int            # training batch
  lr: float             # peak learning rate
  optimizer: str        # radam (the paper's) | adamw
  schedule: str         # constant (the paper's) | cosine
  warmup: int           # linear warmup steps
  image_size: int       # side of the (resized) image; 28 is MNIST's own
  eval_batches: int     # test batches of 100 images for bits/dim (0 = all 10,000)
  gen_batch: int        # images per generation call, the same for every decode mode
  lengths: tuple        # sequence lengths of the attention timing
  softmax_max_len: int  # longest length timed for plain softmax (its T² scores)
  what: str             # one line for the page
  completion_images: int = 0  # test images completed and read by the digit classifier
                              # (eval.completion_metric); 0 = not measured


# The presets of this study, in one place.
PRESETS = {
    "smoke": Preset(
        model=(("d_model", 16), ("num_heads", 2), ("d_ff", 32), ("num_layers", 1),
               ("max_len", 49)),
        steps=8, batch=4, lr=2e-3, optimizer="adamw", schedule="cosine", warmup=2,
        image_size=7, eval_batches=1, gen_batch=2, lengths=(64, 128),
        softmax_max_len=128, what="a tiny model on 7×7 images: a test of the pipeline"),
    "cpu": Preset(
        model=(("d_model", 64), ("num_heads", 4), ("d_ff", 256), ("num_layers", 2)),
        steps=800, batch=16, lr=2e-3, optimizer="adamw", schedule="cosine",
        warmup=50, image_size=28, eval_batches=20, gen_batch=4,
        lengths=(256, 512, 1024, 2048, 4096, 8192, 16384), softmax_max_len=8192,
        what="a pipeline check, not a reproduction of the paper's quality: the "
             "demo's small model (2 layers, d_model 64) at 28×28 for 800 steps, 0.085% "
             "of the paper's steps, which fit in well under an hour on 2 CPU cores with "
             "softmax at 784 pixels",
        completion_images=500),
    "paper": Preset(
        model=(("d_model", 256), ("num_heads", 8), ("d_ff", 1024), ("num_layers", 8)),
        steps=250 * 60000 // 16, batch=16, lr=1e-4, optimizer="radam",
        schedule="constant", warmup=0, image_size=28, eval_batches=0, gen_batch=100,
        lengths=(256, 512, 1024, 2048, 4096, 8192, 16384), softmax_max_len=16384,
        what="the paper's model and schedule: 8 layers, 8 heads × 32, FFN 1024, "
             "RAdam 1e-4, batch 16, 250 epochs", completion_images=1000),
}
MODELS = ("softmax", "linear")


def config_for(preset: Preset, attention: str, data_dir=None):
  """configs/mnist.py with the preset applied and `attention` everywhere."""
  from configs import mnist
  c = mnist.get_config()
  for k, v in preset.model:
    c.model[k] = v
  c.attention = attention
  c.update(dict(num_train_steps=preset.steps, batch_size=preset.batch,
                learning_rate=preset.lr, optimizer=preset.optimizer,
                schedule=preset.schedule, warmup_steps=preset.warmup,
                image_size=preset.image_size, eval_batches=2,
                eval_every=preset.steps if preset.steps < 100 else preset.steps // 4,
                checkpoint_every=max(1, min(preset.steps // 4, 5000)),
                log_every=max(1, min(50, preset.steps // 4)), progress=False,
                data_dir=data_dir or ""))
  return c


# ---- generation ----------------------------------------------------------------------

def generation(models, task, preset, key) -> tuple[dict, dict]:
  """images/s of the four decode modes at batch gen_batch, and the PNG rows."""
  from models.generate import generate
  side = task.side
  n, P = preset.gen_batch, side * side // 2
  imgs = np.asarray(task.test_x[:n])
  prompt = jnp.asarray(imgs[:, :P])
  modes = {"softmax, no cache (recompute)": ("softmax", dict(mode="recompute")),
           "softmax, KV cache": ("softmax", dict(mode="cache")),
           "softmax, int8 KV cache": ("softmax", dict(mode="cache", cache_dtype="int8")),
           "linear, RNN form": ("linear", dict(mode="cache"))}
  speed, rows = {}, {}
  for label, (name, kw) in modes.items():
    _, dt = timing.timed(lambda: generate(models[name], jnp.zeros((n, 0), jnp.int32),
                                          steps=side * side, key=key, **kw))
    speed[label] = {"images_per_s": n / dt, "seconds": dt, "images": n}
  for name in MODELS:
    done = np.asarray(generate(models[name], prompt, steps=side * side - P, key=key))
    occluded = imgs.copy()
    occluded[:, P:] = 40
    rows[name] = [[imgs[i], occluded[i], done[i]] for i in range(n)]
    rows[name + "_samples"] = np.asarray(generate(
        models[name], jnp.zeros((n, 0), jnp.int32), steps=side * side,
        key=jax.random.fold_in(key, 1)))
  return speed, rows


# ---- attention time against sequence length ------------------------------------------

def scaling(lengths, softmax_max_len, *, B=1, H=4, D=32, repeats=3) -> dict:
  """Median seconds of causal attention forward, and forward+backward, per variant
  (softmax, flash, linear) and length, float32 (B, T, H, D) inputs on this device."""
  import attention
  out = {}
  for name in ("softmax", "flash", "linear"):
    fn = attention.get(name)
    fwd = jax.jit(lambda q, k, v, fn=fn: fn(q, k, v, causal=True))
    bwd = jax.jit(jax.grad(lambda q, k, v, fn=fn: fn(q, k, v, causal=True).sum(),
                           argnums=(0, 1, 2)))
    for T in lengths:
      if name == "softmax" and T > softmax_max_len:
        continue
      q, k, v = jax.random.normal(jax.random.key(T), (3, B, T, H, D), jnp.float32)
      for kind, f in (("forward", fwd), ("forward+backward", bwd)):
        _, s = timing.timed(lambda: f(q, k, v), repeats)
        out.setdefault(name, {}).setdefault(kind, {})[T] = s
  return out


def slope(times: dict, min_len=1024) -> float:
  """Least-squares slope of log(time) against log(length), lengths >= min_len (the
  short ones are dominated by fixed overheads), or over all lengths if fewer than
  two are that long; nan with fewer than two points."""
  from studies.core.timing import slope as fit
  p = fit(times, lo=min_len)
  return fit(times) if np.isnan(p) else p


def plot_scaling(sc, path):
  plt = plots.pyplot()
  fig, axes = plt.subplots(1, 2, figsize=(8, 3.2), sharey=True)
  for ax, kind in zip(axes, ("forward", "forward+backward")):
    for name, c in zip(("softmax", "flash", "linear"), ("C3", "C1", "C0")):
      d = sc[name][kind]
      Ts = sorted(int(T) for T in d)
      ax.loglog(Ts, [d[T] if T in d else d[str(T)] for T in Ts], "o-", ms=3, color=c,
                label=f"{name} (slope {slope(d):.2f})")
    ax.set_title(kind, fontsize=10)
    ax.set_xlabel("sequence length")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
  axes[0].set_ylabel("seconds (causal, median)")
  fig.tight_layout()
  plots.save(fig, path, dpi=80)


# ---- the run (its page: studies.repro.mnist_page) ----------------------------------

def run(preset_name, out, workroot, data_dir=None, preset=None, log=print,
        command=None) -> dict:
  """Trains (or reuses) both models, measures everything, writes `out` (results.json
  and the PNGs; the page: reproduce_mnist_page.write_page); returns the results."""
  from trainer import evaluate as ev
  from data import pipeline
  import trainer
  p = preset or PRESETS[preset_name]
  t0 = time.perf_counter()
  res = {"preset_name": preset_name, "preset": dataclasses.asdict(p),
         "run": pages.run_record(command or f"python -m scripts.reproduce_mnist "
                                 f"--preset={preset_name}", preset_name), "models": {}}
  models = {}
  for name in MODELS:
    cfg = config_for(p, name, data_dir)
    wd = os.path.join(workroot, name)
    t = time.perf_counter()
    last = trainer.train_and_evaluate(cfg, wd)
    secs = time.perf_counter() - t
    recs = runs.read_metrics(wd)
    speed = [r["steps_per_s"] for r in runs.records_with(recs, "steps_per_s")]
    _, models[name], step = trainer.load_model(wd)
    runs.require_finished(wd, p.steps, step)   # never report a partial run
    ecfg = cfg.copy_and_resolve_references()
    ecfg.eval_batches = p.eval_batches
    task = pipeline.create(ecfg)
    m = trainer.evaluate_model(models[name], task, ecfg)
    models[name].eval()
    res["models"][name] = {
        "bits_per_dim": m["bits_per_dim"], "eval_images": m["eval_sequences"],
        "params": recs[0].get("params"), "steps": step,
        "train_seconds_this_run": secs, "trained_now": bool(last),
        "steps_per_s": speed[-1] if speed else None,
        "final_train_loss": [r["train_loss"] for r in recs if "train_loss" in r][-1]}
    if p.completion_images:
      ecfg.completion_images = p.completion_images
      evdir = os.path.join(wd, "eval")
      os.makedirs(evdir, exist_ok=True)
      res["models"][name]["completion"] = ev.completion_metric(
          ecfg, task, models[name], evdir, "cache", jax.random.key(1), wd, step)
    log(f"{name}: {res['models'][name]}")
  speed, rows = generation(models, task, p, jax.random.key(0))
  res["generation"] = speed
  log(f"generation: {speed}")
  os.makedirs(out, exist_ok=True)
  side = task.side
  for name in MODELS:
    ev.grid_png(os.path.join(out, f"completions_{name}.png"), rows[name], side)
    ev.grid_png(os.path.join(out, f"samples_{name}.png"), [list(rows[name + "_samples"])],
                side)
  res["scaling"] = scaling(p.lengths, p.softmax_max_len)
  res["slopes"] = {n: {k: slope(d) for k, d in v.items()} for n, v in res["scaling"].items()}
  plot_scaling(res["scaling"], os.path.join(out, "scaling.png"))
  res["seconds"] = time.perf_counter() - t0
  pages.write_json(os.path.join(out, "results.json"), res)
  return res


# ---- the shipped models (pretrained/): the illustration and like-for-like speed ----------

SHIPPED = ("mnist14_linear", "mnist14_softmax")
# The generation speeds compared, (shipped model's attention, decode mode) each.
SHIPPED_MODES = {"linear, RNN form": ("linear", "cache"),
                 "softmax, KV cache": ("softmax", "cache"),
                 "softmax, no cache (recompute)": ("softmax", "recompute")}
META_KEYS = ("steps", "num_train_steps", "train_wall_seconds", "test_bits_per_dim",
             "test_images", "params", "command", "commit", "date", "sha256")


def shipped_run(out, names=None, *, completion_images=500, gen_batch=16, rounds=3,
                workroot="workdirs/pretrained", data_dir=None, seed=0, command=None,
                log=print) -> dict:
  """Measures the shipped models (trainer/pretrained.py) and writes out/shipped.json
  and the PNGs: each model's completions of the first `completion_images` test images
  read by the digit judge (eval.completion_metric, once each), eval.py's completion and
  sample pictures (`shipped_completions_<attention>.png`, `shipped_samples_...`), and
  the generation speed of `gen_batch` unconditional images per call, for each of
  SHIPPED_MODES, timed in `rounds` interleaved rounds (studies.core.timing.interleaved,
  the median; compilation not counted). names: default those of SHIPPED that are shipped
  (a mode whose attention has none is timed on `retyped`). Returns shipped.json's dict."""
  import shutil

  from data import pipeline
  import trainer
  from models.generate import generate
  from trainer import evaluate as ev, pretrained
  res = {"run": pages.run_record(command or "python -m scripts.reproduce_mnist --shipped",
                                 "shipped"),
         "gen_batch": gen_batch, "rounds": rounds, "models": {}}
  models, key = {}, jax.random.key(seed)
  names = names or [n for n in SHIPPED if pretrained.find(n)]
  if not names:
    raise FileNotFoundError(f"none of the shipped models {SHIPPED} is in {pretrained.ROOT}")
  for name in names:
    config, model, step = trainer.load_model(name)
    meta = pages.read_json(str(pretrained.find(name) / pretrained.META))
    config.completion_images = completion_images
    config.data_dir = data_dir or config.data_dir
    task = pipeline.create(config)
    wd = os.path.join(workroot, name)
    os.makedirs(wd, exist_ok=True)
    comp = ev.completion_metric(config, task, model, wd, "cache", key)
    ev.eval_mnist(config, task, model, wd, "cache", key)      # eval.py's pictures
    att = model.cfg.attention
    for f in ("completions", "samples"):
      shutil.copy(os.path.join(wd, f + ".png"), os.path.join(out, f"shipped_{f}_{att}.png"))
    res["models"][name] = {"attention": att, **{k: meta.get(k) for k in META_KEYS},
                           "num_layers": model.cfg.num_layers, "d_model": model.cfg.d_model,
                           "completion": comp, "num_images": int(config.num_images),
                           "num_samples": int(config.num_samples)}
    models[att] = model
    log(f"{name}: {res['models'][name]}")
  side, first = task.side, names[0]
  res["stand_ins"] = {}
  for att, _ in SHIPPED_MODES.values():
    if att not in models:       # no shipped model of it: the first one's weights under it
      models[att] = retyped(models[res["models"][first]["attention"]], att)
      res["stand_ins"][att] = first
  z = jnp.zeros((gen_batch, 0), jnp.int32)
  fns = {label: (lambda m=models[att], mode=mode: generate(m, z, steps=side * side,
                                                             key=key, mode=mode))
         for label, (att, mode) in SHIPPED_MODES.items()}
  secs = timing.interleaved(fns, {k: () for k in fns}, rounds)
  res["side"] = side
  res["generation"] = {k: {"images_per_s": gen_batch / s, "seconds": s}
                       for k, s in secs.items()}
  log(f"generation: {res['generation']}")
  pages.write_json(os.path.join(out, "shipped.json"), res)
  return res


def retyped(model, attention: str):
  """The same weights under another attention variant, in eval mode: a stand-in for
  timing only (a generation step's cost does not depend on the weights' values), for
  variants whose parameters are the same as model's (softmax and linear)."""
  from flax import nnx

  from models import build
  m = build(dataclasses.replace(model.cfg, attention=attention), rngs=nnx.Rngs(0))
  nnx.update(m, nnx.state(model, nnx.Not(nnx.RngState)))
  m.eval()
  return m
