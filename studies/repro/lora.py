"""The seed report's LoRA study on MNIST, redone: `results/lora_mnist/` (its page:
`studies.repro.lora_page`).

The study (report section 2):
  1. trains the base MLP 784-64-64-10 (55,050 parameters) on MNIST, one per seed;
  2. calibrates the three shifts of `data/shifts.py` (quantized, rotated, inverted):
     each has one strength parameter, chosen on a grid (then bisected) so that the
     base models' mean test accuracy on the shifted test set equals the report's
     (85.58%, 12.38%, 5.52%); the report does not give its transforms;
  3. on each shifted training set: full fine-tuning of all 55,050 parameters;
     LoRA fine-tuning (adapters on all three layers, r * 1050 trainable values, the
     base and its biases frozen) for every rank; and "LoRA from scratch" (the
     report's "Full Training with LoRA": a frozen random base plus adapters).
Every method's learning rate is chosen by one procedure (`tune`): on held-out
training images, the best of one grid by mean held-out accuracy.

The MLP is an nnx.Module of three nnx.Linear layers; the adapters are the project's
LoRA (`models.lora.apply_lora`, i.e. nnx.LoRALinear with alpha / r scaling). Each
configuration trains all its seeds at once (jax.vmap over seeds, lax.scan over
steps), so a whole run is one compiled call.

`pixel_study` adds LoRA on the pixel Transformer (Inverted MNIST), through train.py.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from data import shifts
from models.lora import apply_lora, lora_count
from studies.core import runs
from studies.core.references import LORA_REPORT as REPORT

SHIFTS = ("quantized", "rotated", "inverted")
LAYERS = "l1,l2,l3"              # LoRA targets: all three Linear layers of the MLP
METHODS = ("full_ft", "lora_ft", "lora_scratch")
LR_FIELD = {"full_ft": "ft_lr", "lora_ft": "lora_lr", "lora_scratch": "scratch_lr"}
# The one grid every method's learning rate is chosen from (`tune`).
LR_GRID = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)

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
  lr: float = 7e-4      # Adam peak lr of the base model (lands it at the report's 93.2%)
  ft_lr: float = 7e-4   # Adam peak lr of full fine-tuning (`tune`)
  lora_lr: float = 4e-3  # ... of LoRA fine-tuning (`tune`)
  scratch_lr: float = 4e-3  # ... of LoRA from scratch (`tune`)
  lora_alpha: float = 8.0   # adapter output scale alpha / r


# The presets of this study, in one place. The full preset's fine-tuning learning
# rates are `tune`'s choices (results/lora_mnist/tuning.json).
PRESETS = {
    "smoke": Preset(seeds=2, ranks=(1, 8), n_train=4096, n_test=1024, base_epochs=4,
                    ft_epochs=8, scratch_epochs=4, grid=7, lr=3e-3, ft_lr=3e-3,
                    lora_lr=1e-2, scratch_lr=1e-2),
    "full": Preset(seeds=5, ranks=(1, 2, 4, 8, 16, 32, 64), n_train=60000,
                   n_test=10000, base_epochs=1, ft_epochs=1, scratch_epochs=1, grid=61,
                   ft_lr=1e-2, lora_lr=1e-2, scratch_lr=1e-2),
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


def holdout(arrays):
  """The training images split for choosing hyperparameters without the test set:
  train on the first 50k training images, test on the last 10k."""
  xtr, ytr = arrays[:2]
  return xtr[:-10000], ytr[:-10000], xtr[-10000:], ytr[-10000:]


class Setup:
  """What every method starts from: the base models (one per seed) trained on the
  first n_train training images, and each shift calibrated on the first n_test test
  images: the shifted training and test sets, and the calibration record."""

  def __init__(self, p: Preset, arrays, log=print):
    xtr, ytr, xte, yte = arrays
    xtr, ytr, xte, yte = xtr[:p.n_train], ytr[:p.n_train], xte[:p.n_test], yte[:p.n_test]
    self.p, self.ytr, self.yte = p, jnp.asarray(ytr), jnp.asarray(yte)
    self.key = jax.random.key(0)
    t = time.perf_counter()
    self.base = Trainer([MLP(rngs=nnx.Rngs(s)) for s in range(p.seeds)], nnx.Param, p.lr,
                        p.batch)
    self.n_params = int(sum(x.size for x in jax.tree.leaves(nnx.state(MLP(rngs=nnx.Rngs(0))))))
    losses = self.base.fit(_flat(xtr), self.ytr, jax.random.fold_in(self.key, 0),
                           p.base_epochs)
    self.base_run = dict(acc=self.base.accuracy(_flat(xte), self.yte),
                         secs=time.perf_counter() - t, losses=losses)
    self.states = self.base.states()
    self.data, self.calibration = {}, {}
    for name in SHIFTS:
      target = REPORT["base"][name] / 100
      param, reached, grid, curve = calibrate(self.base, name, xte, yte, target, p.grid)
      xtr_s = _flat(shifts.apply(name, xtr, param))
      xte_s = _flat(shifts.apply(name, xte, param))
      acc = self.base.accuracy(xte_s, self.yte)
      self.data[name] = (xtr_s, xte_s)
      self.calibration[name] = {"param_name": GRIDS[name][0], "param": param,
                                "grid": grid.tolist(), "curve": curve.tolist(),
                                "target": target, "reached": reached,
                                "base_acc": acc.tolist()}
      log(f"calibrated {name}: {GRIDS[name][0]} = {param:.4f}, base accuracy "
          f"{100 * acc.mean():.2f}±{100 * acc.std():.2f} (target {100 * target:.2f})")

  def method(self, kind, shift, rank, lr):
    """One method on one shift (all seeds at once): (accuracy per seed, accuracy
    before the first step or None, trainable values, losses (S, epochs), seconds)."""
    p, (xtr_s, xte_s) = self.p, self.data[shift]
    k = jax.random.fold_in(self.key, 1 + SHIFTS.index(shift))
    t = time.perf_counter()
    models = [MLP(rngs=nnx.Rngs(s)) for s in range(p.seeds)]
    if kind != "lora_scratch":
      for m, st in zip(models, self.states):
        nnx.update(m, st)
    if kind == "full_ft":
      tr, acc0 = self.n_params, None
      trainer = Trainer(models, nnx.Param, lr, p.batch)
      losses = trainer.fit(xtr_s, self.ytr, jax.random.fold_in(k, 0), p.ft_epochs)
    else:
      for i, m in enumerate(models):
        apply_lora(m, rank=rank, targets=LAYERS, alpha=p.lora_alpha,
                   rngs=nnx.Rngs(1000 + i))
      tr = lora_count(models[0])
      trainer = Trainer(models, nnx.LoRAParam, lr, p.batch)
      acc0 = trainer.accuracy(xte_s, self.yte)
      scratch = kind == "lora_scratch"
      losses = trainer.fit(xtr_s, self.ytr, jax.random.fold_in(k, 1000 + rank if scratch
                                                                else rank),
                           p.scratch_epochs if scratch else p.ft_epochs)
    return (trainer.accuracy(xte_s, self.yte), acc0, tr, losses, time.perf_counter() - t)

  def cases(self, kind):
    """The (shift, rank) cases of a method (rank 0: full fine-tuning)."""
    return [(s, r) for s in SHIFTS for r in ((0,) if kind == "full_ft" else self.p.ranks)]


def mlp_study(preset: Preset, arrays, log=print) -> dict:
  """Runs the whole MLP study at the preset's learning rates; returns the results
  dict (accuracies in [0, 1]).

  arrays: (x_train uint8 (N, 28, 28), y_train, x_test uint8 (M, 28, 28), y_test)."""
  t0 = time.perf_counter()
  st = Setup(preset, arrays, log)
  res = {"runs": [], "calibration": st.calibration}

  def record(kind, shift, rank, acc, acc0, tr, losses, secs):
    res["runs"].append({"kind": kind, "shift": shift, "rank": rank,
                        "trainable": tr, "acc": acc.tolist(),
                        "acc_start": None if acc0 is None else acc0.tolist(),
                        "seconds": secs, "final_loss": losses[:, -1].tolist()})
    log(f"{kind:12s} {shift:9s} r={rank:<3d} trainable={tr:6d} "
        f"acc={100 * acc.mean():6.2f}±{100 * acc.std():.2f}  {secs:5.1f}s")

  b = st.base_run
  record("base", "clean", 0, b["acc"], None, st.n_params, b["losses"], b["secs"])
  for shift in SHIFTS:
    for kind in METHODS:
      for s, r in st.cases(kind):
        if s == shift:
          record(kind, s, r, *st.method(kind, s, r, getattr(preset, LR_FIELD[kind])))
  res["seconds"] = time.perf_counter() - t0
  res["params"] = st.n_params
  return res


def tune(preset: Preset, arrays, grid=LR_GRID, log=print) -> dict:
  """The one procedure that chooses every method's learning rate: on the held-out
  split (`holdout`: the base models and the shift calibrations made there as in the
  study), each method is trained at every lr of `grid` on every shift (and rank);
  the lr with the highest mean held-out accuracy over those cases is chosen.
  Returns {"grid", "scores": {method: {lr: mean accuracy}}, "chosen": {method: lr}}."""
  t0 = time.perf_counter()
  st = Setup(preset, holdout(arrays), log)
  scores = {}
  for kind in METHODS:
    for lr in grid:
      accs = [st.method(kind, s, r, lr)[0].mean() for s, r in st.cases(kind)]
      scores.setdefault(kind, {})[str(lr)] = float(np.mean(accs))
      log(f"tune {kind:12s} lr {lr:g}: mean held-out accuracy {100 * np.mean(accs):.2f}%")
  chosen = {k: float(max(v, key=v.get)) for k, v in scores.items()}
  return {"grid": list(grid), "scores": scores, "chosen": chosen,
          "seconds": time.perf_counter() - t0}


def load_mnist(data_dir=None):
  from data import mnist_arrays
  xtr, ytr = mnist_arrays("train", data_dir)
  xte, yte = mnist_arrays("test", data_dir)
  return xtr, ytr, xte, yte


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


# The presets of the pixel part, in one place.
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
  from data import pipeline
  import trainer
  _, model, _ = trainer.load_model(workdir)
  cfg = config.copy_and_resolve_references()
  cfg.shift = shift
  return trainer.evaluate_model(model, pipeline.create(cfg), cfg)["bits_per_dim"]


def pixel_study(pp: PixelPreset, workroot, data_dir=None, log=print) -> dict:
  """Base pixel LM on MNIST, then Inverted MNIST by full fine-tuning vs LoRA r=8 on
  the attention projections (q, k, v, o), all through trainer.train_and_evaluate.

  A finished base in workroot/base is reused; the fine-tuning runs start afresh."""
  import trainer
  base_dir = os.path.join(workroot, "base")
  base_cfg = _pixel_config(pp, data_dir, num_train_steps=pp.base_steps)
  reused = os.path.exists(os.path.join(base_dir, "checkpoints", str(pp.base_steps)))
  t = time.perf_counter()
  trainer.train_and_evaluate(base_cfg, base_dir)
  runs.require_finished(base_dir, pp.base_steps)
  res = {"base": {"seconds": time.perf_counter() - t, "steps": pp.base_steps,
                  "reused": reused,
                  "params": runs.read_metrics(base_dir)[0]["params"],
                  "clean": _bits(base_dir, base_cfg, ""),
                  "inverted": _bits(base_dir, base_cfg, "inverted")}}
  log(f"pixel base: {res['base']}")
  jobs = {"full_ft": dict(init_from=base_dir, learning_rate=pp.ft_lr),
          "lora": {"lora.rank": pp.rank, "lora.targets": "q,k,v,o",
                   "lora.base_workdir": base_dir, "learning_rate": pp.lora_lr}}
  for name, extra in jobs.items():
    wd = os.path.join(workroot, name)
    shutil.rmtree(wd, ignore_errors=True)
    cfg = _pixel_config(pp, data_dir, num_train_steps=pp.ft_steps, shift="inverted",
                        warmup_steps=min(20, pp.ft_steps // 4),
                        eval_every=pp.ft_steps, checkpoint_every=pp.ft_steps, **extra)
    t = time.perf_counter()
    trainer.train_and_evaluate(cfg, wd)
    secs = time.perf_counter() - t
    runs.require_finished(wd, pp.ft_steps)
    recs = runs.read_metrics(wd)
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


