"""The seed report's LoRA study on MNIST, reproduced: `results/lora_mnist/`.

  python -m scripts.lora_mnist --preset=full    # the study, about 15 min on 2 CPU cores
  python -m scripts.lora_mnist --preset=smoke   # a small subset, about a minute (tests)

What it does (report section 2; every number of the page comes from this one run):
  1. trains the base MLP 784-64-64-10 (55,050 parameters) on MNIST, one per seed;
  2. calibrates the three shifts of `data/shifts.py` (quantized, rotated, inverted):
     each has one strength parameter, chosen on a grid (then bisected)
     so that the base models' mean test accuracy on the shifted test set equals the
     report's (85.58%, 12.38%, 5.52%); the report does not give its transforms;
  3. on each shifted training set: full fine-tuning of all 55,050 parameters;
     LoRA fine-tuning (adapters on all three layers, r * 1050 trainable values, the
     base and its biases frozen) for every rank; and "LoRA from scratch" (the
     report's "Full Training with LoRA": a frozen random base plus adapters);
  4. writes results.json (every per-seed number), README.md (tables next to the
     report's, mean ± std over seeds), accuracy_vs_rank.png, calibration.png and
     shifts.png.

The MLP is an nnx.Module of three nnx.Linear layers; the adapters are the project's
LoRA (`models.lora.apply_lora`, i.e. nnx.LoRALinear with alpha / r scaling). Each
configuration trains all its seeds at once (jax.vmap over seeds, lax.scan over
steps), so a whole run is one compiled call.

`--study=pixel` (or `all`) adds the pixel-Transformer part: see `pixel_study`.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import json
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from data import shifts
from models.lora import apply_lora, lora_count

OUT = "results/lora_mnist"
SHIFTS = ("quantized", "rotated", "inverted")
LAYERS = "l1,l2,l3"              # LoRA targets: all three Linear layers of the MLP

# The seed report's numbers (../shared/seeds/004_*.txt, section 2), in percent.
REPORT = {
    "base_clean": 93.2,
    "base": {"quantized": 85.58, "rotated": 12.38, "inverted": 5.52},
    "full_ft": {"quantized": 93.57, "rotated": 91.97, "inverted": 76.41},
    "lora_ft": {1: (91.20, 37.53, 16.23), 2: (91.30, 49.01, 17.92),
                4: (91.42, 69.10, 16.32), 8: (91.39, 77.49, 32.19),
                16: (91.72, 86.95, 62.26), 32: (92.31, 89.50, 68.06),
                64: (93.19, 90.41, 71.88)},
    "lora_scratch": {1: (23.50, 25.91, 22.21), 2: (37.48, 43.96, 45.81),
                     4: (64.87, 62.60, 69.67), 8: (77.96, 82.39, 83.11),
                     16: (88.2, 86.76, 87.38), 32: (90.13, 90.62, 90.25),
                     64: (91.66, 91.85, 86.01)},
}

# Each shift's strength parameter: the calibration grid, in scan order (from the
# mildest shift on); the first crossing of the target accuracy is taken.
GRIDS = {"quantized": ("threshold", 0.5, 0.99),
         "rotated": ("degrees", 0.0, 180.0),
         "inverted": ("strength", 1.0, 0.5)}


@dataclasses.dataclass(frozen=True)
class Preset:
  seeds: int            # independent seeds (base model, adapters init, data order)
  ranks: tuple          # LoRA ranks
  n_train: int          # training images used (first n of the 60k)
  n_test: int           # test images used (first n of the 10k)
  base_epochs: int      # epochs of the base model on plain MNIST
  ft_epochs: int        # epochs of full and LoRA fine-tuning on a shifted set
  scratch_epochs: int   # epochs of LoRA from scratch (same budget as the base)
  grid: int             # calibration grid points per shift
  batch: int = 64       # minibatch size, all runs
  lr: float = 7e-4      # Adam peak lr, base and full fine-tuning (base -> ~93.2%)
  lora_lr: float = 4e-3  # Adam peak lr for the adapters
  lora_alpha: float = 8.0   # adapter output scale alpha / r


PRESETS = {
    "smoke": Preset(seeds=2, ranks=(1, 8), n_train=4096, n_test=1024, base_epochs=4,
                    ft_epochs=8, scratch_epochs=4, grid=7, lr=3e-3, lora_lr=1e-2),
    "full": Preset(seeds=5, ranks=(1, 2, 4, 8, 16, 32, 64), n_train=60000,
                   n_test=10000, base_epochs=1, ft_epochs=1, scratch_epochs=1, grid=61),
}


class MLP(nnx.Module):
  """The report's base model: 784-64-64-10 with ReLU, 55,050 parameters.

  x: float32 (B, 784) pixels in [0, 1] -> logits float32 (B, 10)."""

  def __init__(self, *, rngs: nnx.Rngs):
    self.l1 = nnx.Linear(784, 64, rngs=rngs)
    self.l2 = nnx.Linear(64, 64, rngs=rngs)
    self.l3 = nnx.Linear(64, 10, rngs=rngs)

  def __call__(self, x_BP):
    return self.l3(jax.nn.relu(self.l2(jax.nn.relu(self.l1(x_BP)))))


def _stack(states):
  return jax.tree.map(lambda *xs: jnp.stack(xs), *states)


def _unstack(state, i):
  return jax.tree.map(lambda x: x[i], state)


def _logits(graphdef, train, frozen, x_BP):
  return nnx.merge(graphdef, train, frozen)(x_BP)


@functools.partial(jax.jit, static_argnames=("graphdef", "lr", "batch", "epochs"))
def _fit(train, frozen, x_NP, y_N, keys, *, graphdef, lr, batch, epochs):
  """Adam on `train` (leading seed axis S) for `epochs` shuffled epochs, vmapped over
  seeds; one compile per (structure, lr, batch, epochs), shared by every shift.
  The lr warms up linearly over the first 10% of the steps, then decays (cosine)."""
  B, n = batch, x_NP.shape[0]
  total = epochs * (n // B)
  tx = optax.adam(optax.warmup_cosine_decay_schedule(0.0, lr, max(1, total // 10), total))

  def one(p, frozen, key):
    def loss(p, idx):
      logits = _logits(graphdef, p, frozen, x_NP[idx])
      return optax.softmax_cross_entropy_with_integer_labels(logits, y_N[idx]).mean()

    def step(carry, idx):
      p, o = carry
      l, g = jax.value_and_grad(loss)(p, idx)
      u, o = tx.update(g, o, p)
      return (optax.apply_updates(p, u), o), l

    def epoch(carry, k):
      order = jax.random.permutation(k, n)[: n // B * B].reshape(-1, B)
      carry, ls = jax.lax.scan(step, carry, order)
      return carry, ls.mean()

    (p, _), losses = jax.lax.scan(epoch, (p, tx.init(p)), jax.random.split(key, epochs))
    return p, losses

  return jax.vmap(one)(train, frozen, keys)


@functools.partial(jax.jit, static_argnames="graphdef")
def _accuracy(train, frozen, x_NP, y_N, *, graphdef):
  return jax.vmap(lambda p, f: (_logits(graphdef, p, f, x_NP).argmax(-1) == y_N).mean())(
      train, frozen)


class Trainer:
  """Training and evaluation of one model structure, all seeds at once (vmap).

  models: one nnx module per seed, same structure; `wrt` filters what trains
  (nnx.Param for full training, nnx.LoRAParam for adapters); Adam at `lr`."""

  def __init__(self, models, wrt, lr, batch):
    self.graphdef, *_ = nnx.split(models[0], wrt, ...)
    parts = [nnx.split(m, wrt, ...)[1:] for m in models]
    self.train = _stack([p[0] for p in parts])
    self.frozen = _stack([p[1] for p in parts])
    self.lr, self.batch = float(lr), int(batch)

  def fit(self, x_NP, y_N, key, epochs):
    """Trains every seed's copy for `epochs` epochs on x float32 (N, 784), y int (N,);
    returns the per-epoch mean losses float32 (S, epochs)."""
    keys = jax.random.split(key, jax.tree.leaves(self.train)[0].shape[0])
    self.train, losses = _fit(self.train, self.frozen, x_NP, y_N, keys,
                              graphdef=self.graphdef, lr=self.lr, batch=self.batch,
                              epochs=int(epochs))
    return np.asarray(losses)

  def accuracy(self, x_NP, y_N) -> np.ndarray:
    """Test accuracy per seed, float (S,) in [0, 1]."""
    return np.asarray(_accuracy(self.train, self.frozen, x_NP, y_N,
                                graphdef=self.graphdef), np.float64)

  def states(self):
    """Each seed's full model state (trained and frozen parts merged)."""
    S = jax.tree.leaves(self.train)[0].shape[0]
    return [nnx.state(nnx.merge(self.graphdef, _unstack(self.train, i),
                                _unstack(self.frozen, i))) for i in range(S)]


def _flat(x_N28):
  """uint8 (0..255) or float ([0, 1]) images (N, 28, 28) -> float32 (N, 784) in [0, 1]."""
  return jnp.asarray(shifts.to_unit(x_N28).reshape(len(x_N28), 784))


def calibrate(trainer, name, x_test_N28, y_test, target, points, refine=8):
  """Strength of shift `name` whose mean base accuracy (over seeds) equals target.

  Scans the grid in order (mildest first) for the first pair of neighbours whose
  accuracies lie on either side of the target (the curve need not be monotone: the
  full negative of an image can score below a half-inverted one) and bisects between
  them `refine` times. If the grid never crosses the target, the closest grid value
  is taken and `reached` is False. Returns (param, reached, grid, mean accuracy on
  the grid)."""
  _, lo, hi = GRIDS[name]
  grid = np.linspace(lo, hi, points)
  y = jnp.asarray(y_test)

  def acc(g):
    return trainer.accuracy(_flat(shifts.apply(name, x_test_N28, g)), y).mean()

  curve = np.array([acc(g) for g in grid])
  above = curve > target
  flips = np.nonzero(above[1:] != above[:-1])[0]
  if len(flips) == 0:
    return float(grid[np.argmin(abs(curve - target))]), False, grid, curve
  i = flips[0]
  a, b = grid[i], grid[i + 1]           # (acc(a) > target) != (acc(b) > target)
  side = above[i]
  for _ in range(refine):
    m = (a + b) / 2
    a, b = (m, b) if (acc(m) > target) == side else (a, m)
  return float(min((a, b), key=lambda g: abs(acc(g) - target))), True, grid, curve


def mlp_study(preset: Preset, arrays, log=print) -> dict:
  """Runs the whole MLP study; returns the results dict (accuracies in [0, 1]).

  arrays: (x_train uint8 (N, 28, 28), y_train, x_test uint8 (M, 28, 28), y_test)."""
  p = preset
  xtr, ytr, xte, yte = arrays
  xtr, ytr, xte, yte = xtr[:p.n_train], ytr[:p.n_train], xte[:p.n_test], yte[:p.n_test]
  ytr_j, yte_j = jnp.asarray(ytr), jnp.asarray(yte)
  seeds = list(range(p.seeds))
  key = jax.random.key(0)
  res = {"runs": [], "calibration": {}}
  t0 = time.perf_counter()

  def record(kind, shift, rank, tr, acc, acc0, secs, losses):
    res["runs"].append({"kind": kind, "shift": shift, "rank": rank,
                        "trainable": tr, "acc": acc.tolist(),
                        "acc_start": None if acc0 is None else acc0.tolist(),
                        "seconds": secs, "final_loss": losses[:, -1].tolist()})
    log(f"{kind:12s} {shift:9s} r={rank:<3d} trainable={tr:6d} "
        f"acc={100 * acc.mean():6.2f}±{100 * acc.std():.2f}  {secs:5.1f}s")

  # 1. the base models
  t = time.perf_counter()
  base = Trainer([MLP(rngs=nnx.Rngs(s)) for s in seeds], nnx.Param, p.lr, p.batch)
  n_params = int(sum(x.size for x in jax.tree.leaves(nnx.state(MLP(rngs=nnx.Rngs(0))))))
  losses = base.fit(_flat(xtr), ytr_j, jax.random.fold_in(key, 0), p.base_epochs)
  acc = base.accuracy(_flat(xte), yte_j)
  record("base", "clean", 0, n_params, acc, None, time.perf_counter() - t, losses)
  base_states = base.states()

  for si, name in enumerate(SHIFTS):
    # 2. calibration of the shift on the base models
    target = REPORT["base"][name] / 100
    param, reached, grid, curve = calibrate(base, name, xte, yte, target, p.grid)
    xtr_s, xte_s = _flat(shifts.apply(name, xtr, param)), _flat(shifts.apply(name, xte, param))
    acc = base.accuracy(xte_s, yte_j)
    res["calibration"][name] = {"param_name": GRIDS[name][0], "param": param,
                                "grid": grid.tolist(), "curve": curve.tolist(),
                                "target": target, "reached": reached, "base_acc": acc.tolist()}
    log(f"calibrated {name}: {GRIDS[name][0]} = {param:.4f}, base accuracy "
        f"{100 * acc.mean():.2f}±{100 * acc.std():.2f} (target {100 * target:.2f})")
    k = jax.random.fold_in(key, 1 + si)

    # 3a. full fine-tuning from each seed's base
    t = time.perf_counter()
    models = [MLP(rngs=nnx.Rngs(s)) for s in seeds]
    for m, st in zip(models, base_states):
      nnx.update(m, st)
    ft = Trainer(models, nnx.Param, p.lr, p.batch)
    losses = ft.fit(xtr_s, ytr_j, jax.random.fold_in(k, 0), p.ft_epochs)
    record("full_ft", name, 0, n_params, ft.accuracy(xte_s, yte_j), None,
           time.perf_counter() - t, losses)

    # 3b. LoRA fine-tuning and LoRA from scratch, every rank
    for kind, start, epochs in (("lora_ft", base_states, p.ft_epochs),
                                ("lora_scratch", None, p.scratch_epochs)):
      for r in p.ranks:
        t = time.perf_counter()
        models = [MLP(rngs=nnx.Rngs(s)) for s in seeds]
        for i, m in enumerate(models):
          if start is not None:
            nnx.update(m, start[i])
          apply_lora(m, rank=r, targets=LAYERS, alpha=p.lora_alpha,
                     rngs=nnx.Rngs(1000 + i))
        tr = lora_count(models[0])
        lt = Trainer(models, nnx.LoRAParam, p.lora_lr, p.batch)
        acc0 = lt.accuracy(xte_s, yte_j)
        losses = lt.fit(xtr_s, ytr_j, jax.random.fold_in(k, r if kind == "lora_ft"
                                                          else 1000 + r), epochs)
        record(kind, name, r, tr, lt.accuracy(xte_s, yte_j), acc0,
               time.perf_counter() - t, losses)
  res["seconds"] = time.perf_counter() - t0
  res["params"] = n_params
  return res


# ---- the page ------------------------------------------------------------------------

def _pm(accs):
  a = 100 * np.asarray(accs)
  return f"{a.mean():.2f} ± {a.std():.2f}"


def _runs(res, kind):
  return {(r["shift"], r["rank"]): r for r in res["runs"] if r["kind"] == kind}


def plot_ranks(res, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  ft, sc, full = _runs(res, "lora_ft"), _runs(res, "lora_scratch"), _runs(res, "full_ft")
  ranks = sorted({r for _, r in ft})
  fig, axes = plt.subplots(1, 3, figsize=(10, 3.8), sharey=True)
  for j, (ax, name) in enumerate(zip(axes, SHIFTS)):
    for runs, rep, label, c in ((ft, REPORT["lora_ft"], "LoRA fine-tuning", "C0"),
                                (sc, REPORT["lora_scratch"], "LoRA from scratch", "C1")):
      a = np.array([100 * np.asarray(runs[(name, r)]["acc"]) for r in ranks])
      ax.errorbar(ranks, a.mean(1), yerr=a.std(1), marker="o", ms=3, color=c,
                  capsize=2, label=f"{label} (ours)")
      ax.plot(ranks, [rep[r][j] for r in ranks], "x--", color=c, alpha=0.6,
              label=f"{label} (report)")
    ax.axhline(100 * np.mean(full[(name, 0)]["acc"]), color="k", lw=1,
               label="full fine-tuning (ours)")
    ax.axhline(REPORT["full_ft"][name], color="k", ls=":", lw=1,
               label="full fine-tuning (report)")
    ax.axhline(100 * np.mean(res["calibration"][name]["base_acc"]), color="gray",
               lw=1, ls="-.", label="base, no tuning")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ranks, [str(r) for r in ranks])
    ax.set_title(f"{name} MNIST", fontsize=10)
    ax.set_xlabel("rank r")
    ax.grid(alpha=0.3)
  axes[0].set_ylabel("test accuracy (%)")
  h, l = axes[0].get_legend_handles_labels()
  fig.legend(h, l, loc="lower center", ncol=4, fontsize=7, frameon=False)
  fig.tight_layout(rect=(0, 0.14, 1, 1))
  fig.savefig(path, dpi=80)
  plt.close(fig)


def plot_calibration(res, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 3, figsize=(10, 2.8), sharey=True)
  for ax, name in zip(axes, SHIFTS):
    c = res["calibration"][name]
    ax.plot(c["grid"], 100 * np.asarray(c["curve"]), ".-", ms=3)
    ax.axhline(100 * c["target"], color="C3", ls="--", lw=1, label="report's base acc.")
    ax.axvline(c["param"], color="k", lw=1, label=f"chosen {c['param']:.3f}")
    ax.set_xlabel(f"{name}: {c['param_name']}")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
  axes[0].set_ylabel("base accuracy (%)")
  fig.tight_layout()
  fig.savefig(path, dpi=80)
  plt.close(fig)


def plot_shifts(res, x_test_N28, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  imgs = x_test_N28[:4]
  rows = [("MNIST", imgs.astype(np.float32) / 255)] + [
      (n, shifts.apply(n, imgs, res["calibration"][n]["param"])) for n in SHIFTS]
  fig, axes = plt.subplots(len(imgs), len(rows), figsize=(len(rows) * 1.1, len(imgs) * 1.1))
  for j, (n, x) in enumerate(rows):
    for i in range(len(imgs)):
      axes[i, j].imshow(x[i], cmap="gray", vmin=0, vmax=1)
      axes[i, j].axis("off")
    axes[0, j].set_title(n, fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=80)
  plt.close(fig)


def mlp_section(res) -> str:
  P = res["preset"]
  cal, ft, sc = res["calibration"], _runs(res, "lora_ft"), _runs(res, "lora_scratch")
  full = _runs(res, "full_ft")
  base = res["runs"][0]
  ranks = sorted({r for _, r in ft})
  lines = [
      "## The report's study: MLP 784-64-64-10 on shifted MNIST",
      "",
      f"Base model: {res['params']:,} parameters, {P['base_epochs']} epoch(s) of Adam "
      f"(lr {P['lr']}, batch {P['batch']}) on {P['n_train']:,} MNIST training images. "
      f"Test accuracy on {P['n_test']:,} clean test images: **{_pm(base['acc'])}%** "
      f"(report: about {REPORT['base_clean']}%). Every cell is mean ± std over "
      f"{P['seeds']} seeds (each seed trains its own base model, adapters and data order).",
      "",
      "### Calibrated shifts",
      "",
      "The report gives the base model's accuracy on each shifted test set but not the "
      "transforms. Each shift in `data/shifts.py` has one strength parameter, chosen so "
      "that the base models' mean accuracy equals the report's: the first crossing on a "
      f"{P['grid']}-point grid (mildest shift first), refined by bisection "
      "(`calibration.png`).",
      "",
      "| shift | transform | parameter | base accuracy (ours) | report |",
      "|---|---|---|---|---|"]
  what = {"quantized": "1-bit: pixel > threshold",
          "rotated": "rotation about the centre, bilinear",
          "inverted": "x → (1−s)·x + s·(1−x)"}
  for n in SHIFTS:
    c = cal[n]
    miss = "" if c["reached"] else " (target not reached on the grid: closest)"
    lines.append(f"| {n} | {what[n]} | {c['param_name']} = {c['param']:.3f}{miss} | "
                 f"{_pm(c['base_acc'])} | {REPORT['base'][n]:.2f} |")
  lines += ["", "![the shifts](shifts.png) ![calibration](calibration.png)", "",
            "### Fine-tuning (test accuracy %, ours | report)", "",
            "| method | r | trainable | " + " | ".join(SHIFTS) + " |",
            "|---|---|---|---|---|---|",
            "| base, no tuning | – | 0 | " + " | ".join(
                f"{_pm(cal[n]['base_acc'])} \\| {REPORT['base'][n]:.2f}" for n in SHIFTS)
            + " |",
            f"| full fine-tuning | – | {res['params']:,} | " + " | ".join(
                f"{_pm(full[(n, 0)]['acc'])} \\| {REPORT['full_ft'][n]:.2f}"
                for n in SHIFTS) + " |"]
  for r in ranks:
    lines.append(f"| LoRA fine-tuning | {r} | {ft[(SHIFTS[0], r)]['trainable']:,} | "
                 + " | ".join(f"{_pm(ft[(n, r)]['acc'])} \\| "
                              f"{REPORT['lora_ft'][r][j]:.2f}"
                              for j, n in enumerate(SHIFTS)) + " |")
  lines += ["", "### LoRA from scratch (frozen random base + adapters; test accuracy %, "
            "ours | report)", "",
            "| r | trainable | " + " | ".join(SHIFTS) + " |", "|---|---|---|---|---|"]
  for r in ranks:
    lines.append(f"| {r} | {sc[(SHIFTS[0], r)]['trainable']:,} | "
                 + " | ".join(f"{_pm(sc[(n, r)]['acc'])} \\| "
                              f"{REPORT['lora_scratch'][r][j]:.2f}"
                              for j, n in enumerate(SHIFTS)) + " |")
  start = max(abs(np.asarray(ft[k]["acc_start"]) -
                  np.asarray(cal[k[0]]["base_acc"])).max() for k in ft)
  secs = {k: sum(r["seconds"] for r in res["runs"] if r["kind"] == k)
          for k in ("base", "full_ft", "lora_ft", "lora_scratch")}
  lines += ["", "![accuracy vs rank](accuracy_vs_rank.png)", "", reading(res), "",
            "### Training settings", "",
            f"- Epochs: base {P['base_epochs']}; full fine-tuning and LoRA fine-tuning "
            f"{P['ft_epochs']} on the shifted training set; LoRA from scratch "
            f"{P['scratch_epochs']} (the base model's budget). Adam, batch "
            f"{P['batch']}, cross-entropy, peak lr {P['lr']} for all-parameter "
            f"training and {P['lora_lr']} for adapters, linear warmup over 10% of the "
            "steps then cosine decay. The report states none of these. The base lr was "
            "chosen so that the base model lands at the report's 93.2%; the adapters' lr "
            "by hand from {1e-3, 4e-3, 1e-2} on held-out training images, never on the "
            "test set (`--holdout` makes the last 10k training images the test set).",
            f"- LoRA: `models.lora.apply_lora` (nnx.LoRALinear) on all three layers, "
            f"A ~ N(0, 1/fan_in), B = 0, update scaled by alpha/r with alpha = "
            f"{P['lora_alpha']:g}; biases frozen, so r · 1050 values train. LoRA "
            "fine-tuning starts exactly at the base model: before the first step, the "
            "adapted models' test accuracy differs from the base models' by at most "
            f"{100 * start:g} points over all {len(ft)} configurations.",
            f"- Wall time of this run: {res['seconds'] / 60:.1f} min in total (base "
            f"{secs['base']:.0f} s, full fine-tuning {secs['full_ft']:.0f} s, LoRA "
            f"fine-tuning {secs['lora_ft']:.0f} s, LoRA from scratch "
            f"{secs['lora_scratch']:.0f} s, calibration the rest), all seeds of a "
            "configuration trained at once (vmap).",
            ""]
  return "\n".join(lines)


def reading(res) -> str:
  """What the tables say, with every figure taken from `res`."""
  cal, ft, sc = res["calibration"], _runs(res, "lora_ft"), _runs(res, "lora_scratch")
  full = {n: np.mean(_runs(res, "full_ft")[(n, 0)]["acc"]) for n in SHIFTS}
  ranks = sorted({r for _, r in ft})
  clean = np.mean(res["runs"][0]["acc"])

  def first_rank(runs, n, frac):
    ok = [r for r in ranks if np.mean(runs[(n, r)]["acc"]) >= frac * full[n]]
    return f"r = {ok[0]}" if ok else f"no r ≤ {ranks[-1]}"

  fails = [(n, r, a) for (n, r), run in ft.items() for a in run["acc"] if a < 0.2]
  text = ["### Reading the tables", "",
          "- Rank needed to reach 95% of full fine-tuning's accuracy: "
          + "; ".join(f"{n}: LoRA fine-tuning {first_rank(ft, n, 0.95)}, from scratch "
                      f"{first_rank(sc, n, 0.95)}" for n in SHIFTS) + ".",
          f"- Quantized: the calibrated 1-bit threshold ({cal['quantized']['param']:.3f}) "
          "keeps only the brightest stroke cores, so information is lost: full "
          f"fine-tuning reaches {100 * full['quantized']:.2f}%, below the clean "
          f"{100 * clean:.2f}% (the report's fine-tuning recovered it, so its quantizer "
          "was probably milder; it is not stated)."]
  if fails:
    text.append(
        f"- {len(fails)} of {sum(len(run['acc']) for run in ft.values())} LoRA "
        "fine-tuning runs ended below 20% test accuracy (" + ", ".join(
            f"{n} r={r}: {100 * a:.1f}%" for n, r, a in fails) + "), the level of "
        "predicting one class for every image; these seeds make the large std cells. "
        "Our reading, not checked unit by unit: with the base and its biases frozen, "
        "the adapters cannot bring back first-layer ReLUs that a large early step "
        "silenced on the shifted inputs.")
  return "\n".join(text)


def write_page(out):
  """README.md of `out` from its mlp.json (and pixel.json if that study ran)."""
  res = json.load(open(os.path.join(out, "mlp.json")))
  head = [
      "# LoRA on MNIST: the seed report's study, reproduced",
      "",
      f"Written by `python -m scripts.lora_mnist --preset={res['preset_name']}` on "
      f"{res['date']}: {res['machine']}, jax {res['jax']}. Every number below comes "
      "from that run (`mlp.json` holds each seed's)."
      + (" **Held-out run: 'test' accuracies are on the last 10k training images.**"
         if res.get("holdout") else ""),
      ""]
  body = [mlp_section(res)]
  pix = os.path.join(out, "pixel.json")
  if os.path.exists(pix):
    body.append(pixel_section(json.load(open(pix))))
  with open(os.path.join(out, "README.md"), "w") as f:
    f.write("\n".join(head + body))


def _machine():
  return f"{platform.machine()} CPU, {os.cpu_count()} cores, {jax.devices()[0].platform}"


def load_mnist(data_dir=None):
  from data import mnist_arrays
  xtr, ytr = mnist_arrays("train", data_dir)
  xte, yte = mnist_arrays("test", data_dir)
  return xtr, ytr, xte, yte


def run_mlp(preset_name, out, arrays=None, preset=None, data_dir=None, holdout=False):
  """The MLP study under a preset, written to `out`; returns the results dict.

  holdout: train on the first 50k training images and test on the last 10k (for
  choosing hyperparameters without the test set)."""
  preset = preset or PRESETS[preset_name]
  arrays = arrays if arrays is not None else load_mnist(data_dir)
  if holdout:
    xtr, ytr = arrays[:2]
    arrays = (xtr[:-10000], ytr[:-10000], xtr[-10000:], ytr[-10000:])
  res = mlp_study(preset, arrays)
  res.update(preset_name=preset_name, preset=dataclasses.asdict(preset), holdout=holdout,
             date=datetime.date.today().isoformat(), machine=_machine(),
             jax=jax.__version__)
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, "mlp.json"), "w") as f:
    json.dump(res, f, indent=1)
  plot_ranks(res, os.path.join(out, "accuracy_vs_rank.png"))
  plot_calibration(res, os.path.join(out, "calibration.png"))
  plot_shifts(res, arrays[2], os.path.join(out, "shifts.png"))
  write_page(out)
  return res


# ---- beyond the report: LoRA on the pixel Transformer ---------------------------------

@dataclasses.dataclass(frozen=True)
class PixelPreset:
  base_steps: int       # steps of the base pixel model on plain MNIST
  ft_steps: int         # steps of full fine-tuning and of LoRA on Inverted MNIST
  eval_batches: int     # test batches of 100 images for every bits/dim figure
  overrides: tuple = ()  # extra config fields (name, value) on top of configs/mnist.py
  rank: int = 8         # LoRA rank on the attention projections q, k, v, o
  ft_lr: float = 1e-3   # peak lr of full fine-tuning (base: configs/mnist.py's 2e-3)
  lora_lr: float = 4e-3  # peak lr of the adapters (higher, as in the MLP study)


PIXEL_PRESETS = {
    "smoke": PixelPreset(base_steps=6, ft_steps=4, eval_batches=1, overrides=(
        ("image_size", 7), ("model.d_model", 16), ("model.d_ff", 32),
        ("model.num_layers", 1), ("model.num_heads", 2), ("model.max_len", 49),
        ("batch_size", 4), ("eval_batch_size", 20), ("warmup_steps", 2))),
    "full": PixelPreset(base_steps=400, ft_steps=200, eval_batches=10),
}


def _pixel_config(pp: PixelPreset, data_dir, **fields):
  from configs import mnist
  c = mnist.get_config()
  for k, v in pp.overrides:
    if k.startswith("model."):
      c.model[k[6:]] = v
    else:
      c[k] = v
  c.progress = False
  c.data_dir = data_dir or ""
  c.eval_batches = pp.eval_batches
  for k, v in fields.items():
    if k.startswith("lora."):
      c.lora[k[5:]] = v
    else:
      c[k] = v
  return c


def _bits(workdir, config, shift):
  """Test bits/dim of a workdir's latest checkpoint on (shifted) MNIST."""
  import input_pipeline
  import train
  _, model, _ = train.load_model(workdir)
  cfg = config.copy_and_resolve_references()
  cfg.shift = shift
  return train.evaluate(model, input_pipeline.create(cfg), cfg)["bits_per_dim"]


def _require_finished(workdir, steps):
  """Stops the script if a train.py run ended early (e.g. on a signal), so that a
  partial run is never reported."""
  import train
  step = train.load_model(workdir)[2]
  if step != steps:
    raise SystemExit(f"{workdir} stopped at step {step} of {steps}; run the same "
                     "command again to resume it")


def _records(workdir):
  return [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"))]


def pixel_study(pp: PixelPreset, workroot, data_dir=None, log=print) -> dict:
  """Base pixel LM on MNIST, then Inverted MNIST by full fine-tuning vs LoRA r=8 on
  the attention projections (q, k, v, o), all through train.train_and_evaluate.

  A finished base in workroot/base is reused; the fine-tuning runs start afresh."""
  import shutil
  import train
  base_dir = os.path.join(workroot, "base")
  base_cfg = _pixel_config(pp, data_dir, num_train_steps=pp.base_steps)
  reused = os.path.exists(os.path.join(base_dir, "checkpoints", str(pp.base_steps)))
  t = time.perf_counter()
  train.train_and_evaluate(base_cfg, base_dir)
  _require_finished(base_dir, pp.base_steps)
  res = {"base": {"seconds": time.perf_counter() - t, "steps": pp.base_steps,
                  "reused": reused,
                  "params": _records(base_dir)[0]["params"],
                  "clean": _bits(base_dir, base_cfg, ""),
                  "inverted": _bits(base_dir, base_cfg, "inverted")}}
  log(f"pixel base: {res['base']}")
  runs = {"full_ft": dict(init_from=base_dir, learning_rate=pp.ft_lr),
          "lora": {"lora.rank": pp.rank, "lora.targets": "q,k,v,o",
                   "lora.base_workdir": base_dir, "learning_rate": pp.lora_lr}}
  for name, extra in runs.items():
    wd = os.path.join(workroot, name)
    shutil.rmtree(wd, ignore_errors=True)
    cfg = _pixel_config(pp, data_dir, num_train_steps=pp.ft_steps, shift="inverted",
                        warmup_steps=min(20, pp.ft_steps // 4),
                        eval_every=pp.ft_steps, checkpoint_every=pp.ft_steps, **extra)
    t = time.perf_counter()
    train.train_and_evaluate(cfg, wd)
    secs = time.perf_counter() - t
    _require_finished(wd, pp.ft_steps)
    recs = _records(wd)
    first = next(r for r in recs if "params" in r)
    curve = [(r["step"], r["train_loss"]) for r in recs if "train_loss" in r]
    res[name] = {"seconds": secs, "steps": pp.ft_steps, "params": first["params"],
                 "trainable": first["trainable_params"],
                 "steps_per_s": [r for r in recs if "steps_per_s" in r][-1]["steps_per_s"],
                 "inverted": _bits(wd, cfg, "inverted"), "clean": _bits(wd, cfg, ""),
                 "curve": curve}
    log(f"pixel {name}: " + str({k: v for k, v in res[name].items() if k != "curve"}))
  c = _pixel_config(pp, data_dir)
  res["model"] = {k: c.model[k] for k in ("attention", "num_layers", "d_model",
                                          "num_heads", "d_ff", "head")}
  res["config"] = {"image_size": c.image_size, "batch_size": c.batch_size,
                   "base_lr": c.learning_rate, "optimizer": c.optimizer,
                   "eval_images": pp.eval_batches * c.eval_batch_size}
  res["preset"] = dataclasses.asdict(pp)
  return res


def plot_pixel(res, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(4.5, 3))
  for name, label in (("full_ft", "full fine-tuning"),
                      ("lora", f"LoRA r={res['preset']['rank']} on q,k,v,o")):
    s, l = zip(*res[name]["curve"])
    ax.plot(s, np.asarray(l) / np.log(2), ".-", ms=3, label=label)
  ax.axhline(res["base"]["inverted"], color="gray", ls="--", lw=1, label="base, no tuning")
  ax.set_xlabel("fine-tuning step")
  ax.set_ylabel("train bits/dim (Inverted MNIST)")
  ax.legend(fontsize=7)
  ax.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=80)
  plt.close(fig)


def pixel_section(res) -> str:
  m, c, b = res["model"], res["config"], res["base"]
  full, lora = res["full_ft"], res["lora"]
  rows = []
  for name, r in (("full fine-tuning", full),
                  (f"LoRA r={res['preset']['rank']} on q, k, v, o", lora)):
    rows.append(f"| {name} | {r['trainable']:,} / {r['params']:,} "
                f"({100 * r['trainable'] / r['params']:.2f}%) | {b['inverted']:.4f} | "
                f"**{r['inverted']:.4f}** | {r['clean']:.4f} | {r['steps']} | "
                f"{r['seconds']:.0f} s ({r['steps_per_s']:.2f} steps/s) |")
  return "\n".join([
      "",
      "## Beyond the report: LoRA on the pixel Transformer (Inverted MNIST)",
      "",
      f"The image-completion model of `configs/mnist.py` ({m['attention']} attention, "
      f"{m['num_layers']} layers, d_model {m['d_model']}, {m['num_heads']} heads, d_ff "
      f"{m['d_ff']}, {m['head']} head, {c['image_size']}×{c['image_size']} pixels), trained "
      f"by `train.py` on plain MNIST for {b['steps']} steps (batch {c['batch_size']}, "
      f"{c['optimizer']}, lr {c['base_lr']}; "
      + ("reused from an earlier run of the script" if b.get("reused") else
         f"{b['seconds']:.0f} s") + "), then adapted to "
      f"Inverted MNIST (the full negative, `--config.shift=inverted`) for "
      f"{full['steps']} steps each (same schedule; peak lr {res['preset']['ft_lr']} for "
      f"full fine-tuning, {res['preset']['lora_lr']} for the adapters): full "
      "fine-tuning (`--config.init_from`) against LoRA on the attention projections "
      f"(`--config.lora.rank={res['preset']['rank']} --config.lora.targets=q,k,v,o "
      "--config.lora.base_workdir`). Test bits/dim on the first "
      f"{c['eval_images']:,} test images. Base model on clean MNIST: {b['clean']:.4f} "
      "bits/dim.",
      "",
      "| fine-tuning | trainable / total params | bits/dim before (inverted) | after "
      "(inverted) | after, on clean MNIST | steps | wall time |",
      "|---|---|---|---|---|---|---|",
      *rows,
      "",
      "LoRA leaves the base weights untouched: removing the adapters gives back the base "
      f"model's {b['clean']:.4f} bits/dim on clean MNIST exactly, while full fine-tuning "
      "overwrites it (the column 'after, on clean MNIST').",
      "",
      "![fine-tuning curves](pixel_curves.png)",
      ""])


def run_pixel(preset_name, out, workroot, data_dir=None):
  """The pixel-Transformer part under a preset; writes out/pixel.json and the page."""
  res = pixel_study(PIXEL_PRESETS[preset_name], workroot, data_dir)
  res.update(preset_name=preset_name, date=datetime.date.today().isoformat(),
             machine=_machine(), jax=jax.__version__)
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, "pixel.json"), "w") as f:
    json.dump(res, f, indent=1)
  plot_pixel(res, os.path.join(out, "pixel_curves.png"))
  if os.path.exists(os.path.join(out, "mlp.json")):
    write_page(out)
  return res


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--preset", choices=sorted(PRESETS), default="full")
  ap.add_argument("--out", default=OUT, help="results folder")
  ap.add_argument("--data_dir", default=None, help="default: $ATTNLAB_DATA_DIR or .data")
  ap.add_argument("--holdout", action="store_true",
                  help="test on the last 10k training images (hyperparameter choice)")
  ap.add_argument("--study", choices=("all", "mlp", "pixel"), default="all",
                  help="the report's MLP study, the pixel-Transformer part, or both")
  ap.add_argument("--workdir", default="workdirs/lora_mnist",
                  help="train.py workdirs of the pixel part (a finished base is reused)")
  ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                  help="override a Preset field, e.g. --set lora_lr=0.05")
  a = ap.parse_args(argv)
  preset = PRESETS[a.preset]
  for kv in a.set:
    k, _, v = kv.partition("=")
    fields = {f.name: f for f in dataclasses.fields(Preset)}
    if k not in fields:
      raise SystemExit(f"--set {kv}: unknown field {k!r}; valid: {sorted(fields)}")
    cur = getattr(preset, k)
    val = tuple(int(x) for x in v.split(",")) if isinstance(cur, tuple) else type(cur)(v)
    preset = dataclasses.replace(preset, **{k: val})
  if a.study in ("all", "mlp"):
    run_mlp(a.preset, a.out, preset=preset, data_dir=a.data_dir, holdout=a.holdout)
  if a.study in ("all", "pixel"):
    run_pixel(a.preset, a.out, os.path.join(a.workdir, a.preset), data_dir=a.data_dir)


if __name__ == "__main__":
  main()
