"""The MNIST digit judge: a small CNN digit classifier that reads completed images.

  judge, meta = digit_judge.load(side=14)    # trained on demand, checksum-verified
  labels_N = digit_judge.predict(judge, imgs_NP, side=14)
  res = digit_judge.completion_accuracy(done_NP, imgs_NP, labels_N, side=14, given=98)

A completion model is judged by whether this digit classifier still reads the right
digit in its completions (top half given, bottom half generated), next to three
calibration figures from the same judge (`completion_accuracy`): the originals, the
top half with a blank bottom, and the top half with the bottom half of another test
image. (It is not `models.transformer.Classifier`, the ListOps sequence classifier.)

Resolution. The pixel models see MNIST resized to image_size² (pipeline.resize:
area-averaged, or nearest for sizes that do not divide 28) and, with config.shift, a
shifted MNIST. One judge is trained per (image_size, shift) on exactly those
images, at their own size, so it judges completions on the distribution it was trained
on rather than on blocky upsampled copies of it (and a 14×14 one trains 4× faster).

Storage. The weights live in the data directory, never in the repository:
  <data_dir>/classifier/mnist_<side>[_<shift>]/weights.msgpack   flax msgpack
                                              meta.json         recipe, accuracy, time
                                              SHA256SUMS        `sha256sum -c` format
(the folder keeps the name it had before this module was named `digit_judge`, so
that judges already trained stay valid; so does the result key
`classifier_test_accuracy`, which stored results use).
`load` verifies both checksums and the recipe; a missing, corrupt or outdated
judge is retrained (3 epochs: minutes on 2 CPU cores; meta.json records the
time and test accuracy) and saved again; a lock file makes concurrent loaders wait
for one trainer.
`python -m scripts.train_classifier` trains one explicitly and reports its accuracy.
"""
from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import json
import os
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx, serialization

FILES = ("weights.msgpack", "meta.json")


class JudgeError(RuntimeError):
  """A digit judge that cannot be loaded or trained; the message says which and why."""


@dataclasses.dataclass(frozen=True)
class Recipe:
  """How a digit judge is trained; a saved one with another recipe is retrained.

  epochs: passes over the train split (or `steps` if > 0: that many batches).
  train_examples: 0 = the whole train split, else its first n (tests).
  """
  epochs: int = 3
  steps: int = 0
  batch: int = 128
  lr: float = 2e-3
  seed: int = 0
  channels: tuple = (32, 64)
  hidden: int = 128
  train_examples: int = 0


RECIPE = Recipe()


class DigitJudge(nnx.Module):
  """conv3×3(c1)-relu-maxpool2, conv3×3(c2)-relu-maxpool2, dense(h)-relu, dense(10).

  __call__(x_BHW1 float32 in [0, 1], side×side) -> logits (B, 10) float32.
  """

  def __init__(self, recipe: Recipe, side: int, rngs: nnx.Rngs):
    c1, c2 = recipe.channels
    self.conv1 = nnx.Conv(1, c1, (3, 3), rngs=rngs)
    self.conv2 = nnx.Conv(c1, c2, (3, 3), rngs=rngs)
    self.fc1 = nnx.Linear(c2 * (side // 2 // 2) ** 2, recipe.hidden, rngs=rngs)
    self.fc2 = nnx.Linear(recipe.hidden, 10, rngs=rngs)

  def __call__(self, x_BHW1):
    pool = lambda x: nnx.max_pool(x, (2, 2), strides=(2, 2))
    x = pool(jax.nn.relu(self.conv1(x_BHW1)))
    x = pool(jax.nn.relu(self.conv2(x)))
    x = jax.nn.relu(self.fc1(x.reshape(x.shape[0], -1)))
    return self.fc2(x)


def to_input(imgs, side: int):
  """Pixel tokens (N, side²) or images (N, side, side), values 0..255, -> the judge's
  input (N, side, side, 1) float32 in [0, 1]."""
  x = np.asarray(imgs).reshape(-1, side, side)
  return (x.astype(np.float32) / 255.0)[..., None]


@nnx.jit
def _logits(model, x):
  return model(x)


def predict(model, imgs, side: int, batch: int = 500) -> np.ndarray:
  """Predicted digits (N,) int64 of pixel-token images (N, side²) in 0..255.

  Runs in chunks of one fixed shape (the last one zero-padded), so one compilation
  serves every N."""
  x = to_input(imgs, side)
  n = len(x)
  if n == 0:
    return np.zeros((0,), np.int64)
  batch = min(batch, n)
  x = np.concatenate([x, np.zeros((-n % batch,) + x.shape[1:], x.dtype)])
  out = [np.asarray(jnp.argmax(_logits(model, jnp.asarray(x[i:i + batch])), -1))
         for i in range(0, len(x), batch)]
  return np.concatenate(out)[:n].astype(np.int64)


def accuracy(model, imgs, labels, side: int) -> float:
  """Fraction of images (N, side²) classified as their label (N,)."""
  return float(np.mean(predict(model, imgs, side) == np.asarray(labels)))


# ---- training -----------------------------------------------------------------------

def _loss(model, x, y):
  return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()


@nnx.jit
def _train_step(model, opt, x, y):
  loss, grads = nnx.value_and_grad(_loss)(model, x, y)
  opt.update(model, grads)
  return loss


@functools.lru_cache(maxsize=8)
def _adamw(lr: float, steps: int):
  """AdamW, linear warmup then cosine decay to 0; one object per (lr, steps), so the
  jitted step (which keys its cache on the optimizer) compiles once for both."""
  return optax.adamw(optax.warmup_cosine_decay_schedule(
      0.0, lr, min(100, steps // 10 + 1), steps))


def train(train_x, train_y, test_x, test_y, *, side: int, recipe: Recipe | None = None,
          log=print):
  """Trains a DigitJudge on images (N, side²) 0..255 with labels (N,); -> (model, meta).

  AdamW with a cosine schedule, batches of a seeded permutation per epoch. meta holds
  the recipe, the test accuracy, the training wall and CPU seconds (on a shared
  machine the wall time includes other jobs' share) and where it ran.
  """
  r = recipe or RECIPE
  if r.train_examples:
    train_x, train_y = train_x[:r.train_examples], train_y[:r.train_examples]
  n = len(train_x)
  if n < r.batch:
    raise JudgeError(f"digit judge: {n} training images, fewer than a batch of "
                          f"{r.batch}")
  per_epoch = n // r.batch
  steps = r.steps or r.epochs * per_epoch
  if side < 4:
    raise JudgeError(f"digit judge: images of side {side} are too small (>= 4)")
  model = DigitJudge(r, side, nnx.Rngs(r.seed))
  opt = nnx.Optimizer(model, _adamw(r.lr, steps), wrt=nnx.Param)
  x_all = to_input(train_x, side)
  y_all = np.asarray(train_y, np.int32)
  t0, cpu0 = time.perf_counter(), time.process_time()
  losses = []
  for s in range(steps):
    e, i = divmod(s, per_epoch)
    if i == 0:
      perm = np.random.default_rng([r.seed, e]).permutation(n)
    rows = perm[i * r.batch:(i + 1) * r.batch]
    losses.append(float(_train_step(model, opt, jnp.asarray(x_all[rows]),
                                    jnp.asarray(y_all[rows]))))
    if (s + 1) % per_epoch == 0 or s + 1 == steps:
      log(f"digit judge: step {s + 1}/{steps}, train loss {np.mean(losses):.4f}, "
          f"{time.perf_counter() - t0:.0f} s")
      losses = []
  secs, cpu = time.perf_counter() - t0, time.process_time() - cpu0
  acc = accuracy(model, test_x, test_y, side)
  meta = {"recipe": _recipe_json(r), "side": side, "test_accuracy": acc,
          "test_images": int(len(test_x)), "train_images": n, "steps": steps,
          "train_seconds": secs, "train_cpu_seconds": cpu, "jax": jax.__version__,
          "device": jax.devices()[0].device_kind, "cpu_count": os.cpu_count(),
          "date": datetime.date.today().isoformat()}
  log(f"digit judge: test accuracy {acc:.4f} on {len(test_x)} images after "
      f"{steps} steps, {secs:.0f} s")
  return model, meta


def _recipe_json(r: Recipe) -> dict:
  return json.loads(json.dumps(dataclasses.asdict(r)))     # tuples as lists


# ---- storage ------------------------------------------------------------------------

def path(side: int, shift: str = "", data_dir=None) -> pathlib.Path:
  """The folder of the digit judge for (side, shift) under the data directory."""
  from data import fetch
  name = f"mnist_{side}" + (f"_{shift.replace(':', '-')}" if shift else "")
  return fetch.resolve_data_dir(data_dir) / "classifier" / name


def _sha256(p: pathlib.Path) -> str:
  return hashlib.sha256(p.read_bytes()).hexdigest()


def _write(p: pathlib.Path, data: bytes):
  tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
  tmp.write_bytes(data)
  os.replace(tmp, p)                # atomic: a reader never sees half a file


def save(model, meta: dict, folder) -> None:
  """Writes weights.msgpack and meta.json, then SHA256SUMS over both (last)."""
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  _write(folder / "weights.msgpack",
         serialization.msgpack_serialize(nnx.to_pure_dict(nnx.state(model, nnx.Param))))
  _write(folder / "meta.json", json.dumps(meta, indent=1).encode())
  sums = "".join(f"{_sha256(folder / f)}  {f}\n" for f in FILES)
  _write(folder / "SHA256SUMS", sums.encode())


def verify(folder) -> str | None:
  """None if the saved judge in `folder` is complete and matches its checksums;
  else why not (missing file, checksum mismatch)."""
  folder = pathlib.Path(folder)
  sums = folder / "SHA256SUMS"
  if not sums.is_file():
    return f"{sums} is missing"
  want = {}
  for line in sums.read_text().splitlines():
    h, _, f = line.partition("  ")
    want[f] = h
  for f in FILES:
    p = folder / f
    if not p.is_file():
      return f"{p} is missing"
    if f not in want:
      return f"{sums} has no checksum for {f}"
    got = _sha256(p)
    if got != want[f]:
      return f"checksum mismatch for {p}: expected {want[f]}, got {got}"
  return None


def _restore(folder: pathlib.Path, recipe: Recipe, side: int):
  model = DigitJudge(recipe, side, nnx.Rngs(0))
  state = nnx.state(model, nnx.Param)
  raw = serialization.msgpack_restore((folder / "weights.msgpack").read_bytes())
  nnx.replace_by_pure_dict(state, raw)
  nnx.update(model, state)
  return model


def mnist_arrays(side: int, shift: str = "", data_dir=None):
  """(train_x, train_y, test_x, test_y) exactly as the pixel models see them: pixel
  tokens (N, side²) int32 in 0..255 (resized, shifted) and labels (N,)."""
  import ml_collections
  from data import pipeline
  cfg = ml_collections.ConfigDict(dict(data_dir=str(data_dir or ""), image_size=int(side),
                                       shift=shift or "", seed=0))
  t = pipeline.Mnist(cfg)
  return t.train_x, t.train_y, t.test_x, t.test_y


def load(side: int = 28, *, shift: str = "", data_dir=None, recipe: Recipe | None = None,
         arrays=None, log=None):
  """(model, meta) of the digit judge for (side, shift), trained and saved on demand.

  A saved judge is used if its files match SHA256SUMS and it was trained with
  `recipe` (default RECIPE); otherwise the reason is printed (to stderr) and it is
  retrained and saved. arrays: (train_x, train_y, test_x, test_y) to train on instead
  of MNIST read from data_dir (tests). log: progress lines (default stderr).
  """
  from data import fetch
  r = recipe or RECIPE
  log = log or (lambda s: print(s, file=sys.stderr, flush=True))
  folder = path(side, shift, data_dir)
  with fetch.file_lock(folder.parent / f".{folder.name}.lock"):   # one trainer at a time
    return _load_locked(side, shift, folder, data_dir, r, arrays, log)


def _load_locked(side, shift, folder, data_dir, r, arrays, log):
  why = verify(folder)
  if why is None:
    meta = json.loads((folder / "meta.json").read_text())
    if meta.get("recipe") != _recipe_json(r) or meta.get("side") != side:
      why = f"{folder} was trained with another recipe or size"
    else:
      try:
        return _restore(folder, r, side), meta
      except Exception as e:     # noqa: BLE001 - any unreadable file means retrain
        why = f"{folder}/weights.msgpack does not restore ({type(e).__name__}: {e})"
  log(f"digit judge: {why}; training one for {side}x{side} MNIST"
      + (f" ({shift})" if shift else "") + f" into {folder}")
  train_x, train_y, test_x, test_y = arrays or mnist_arrays(side, shift, data_dir)
  model, meta = train(train_x, train_y, test_x, test_y, side=side, recipe=r, log=log)
  meta["shift"] = shift
  save(model, meta, folder)
  return model, meta


# ---- the completion metric ----------------------------------------------------------

def _stats(correct_NK) -> tuple[float, float]:
  """Accuracy and its standard error from per-image means: with one sample per image,
  sqrt(p (1 - p) / N), the binomial one; with K > 1 samples the images are the
  independent units (the K samples of one image are not independent)."""
  per_image = np.asarray(correct_NK, np.float64).reshape(len(correct_NK), -1).mean(1)
  n = len(per_image)
  return float(per_image.mean()), float(per_image.std() / np.sqrt(n)) if n else float("nan")


def baselines(originals_NP, *, given: int, seed: int = 0):
  """The calibration images: (blank_NP, other_NP, other_index_N).

  blank: the first `given` pixels of each original and 0 (background) after them.
  other: the first `given` pixels, then the rest of another image of the set, drawn
  uniformly among the other N - 1 (seeded; image i never gets its own bottom).
  """
  x = np.asarray(originals_NP)
  n = len(x)
  if n < 2:
    raise ValueError("completion metric: needs at least 2 images for the random-bottom "
                     f"baseline, got {n}")
  rng = np.random.default_rng(seed)
  other = (np.arange(n) + rng.integers(1, n, size=n)) % n   # never i itself
  blank = x.copy()
  blank[:, given:] = 0
  mixed = x.copy()
  mixed[:, given:] = x[other, given:]
  return blank, mixed, other


def completion_accuracy(completed, originals_NP, labels_N, *, side: int, given: int,
                        model=None, shift: str = "", data_dir=None, seed: int = 0) -> dict:
  """The completion metric and its calibration, in one dict.

  completed: (N, P) or (N, K, P) pixel tokens 0..255 (K completions per image), P =
    side²; the first `given` pixels (raster order) are the originals' own.
  originals_NP (N, P), labels_N (N,): the test images and their digits.
  model: a digit judge (default: `load(side, shift=shift, data_dir=data_dir)`).
  Returns accuracies in [0, 1] with standard errors (keys *_se) over N images:
    completion_accuracy   the completions, against the true label;
    original_accuracy     the originals;
    blank_accuracy        top half given, bottom half blank (0);
    random_bottom_accuracy top half given, bottom half of another test image;
  plus completion_lead_over_blank / _over_random (accuracy differences), n_images,
  samples_per_image and classifier_test_accuracy (the judge's own test accuracy).
  """
  P = side * side
  originals = np.asarray(originals_NP).reshape(-1, P)
  labels = np.asarray(labels_N).reshape(-1)
  done = np.asarray(completed)
  done = done.reshape(len(originals), -1, P)
  if len(labels) != len(originals):
    raise ValueError(f"completion metric: {len(originals)} images but {len(labels)} labels")
  if not 0 < given < P:
    raise ValueError(f"completion metric: given={given} pixels must be in (0, {P})")
  if not np.array_equal(done[:, :, :given], np.broadcast_to(
      originals[:, None, :given], done[:, :, :given].shape)):
    raise ValueError("completion metric: the completions' first `given` pixels differ "
                     "from the originals': they are not completions of these images")
  meta = {}
  if model is None:
    model, meta = load(side, shift=shift, data_dir=data_dir)
  blank, mixed, _ = baselines(originals, given=given, seed=seed)
  N, K = done.shape[:2]
  res = {}
  for key, imgs in (("completion", done.reshape(N * K, P)), ("original", originals),
                    ("blank", blank), ("random_bottom", mixed)):
    ok = (predict(model, imgs, side) == np.repeat(labels, len(imgs) // N)).reshape(N, -1)
    res[f"{key}_accuracy"], res[f"{key}_accuracy_se"] = _stats(ok)
  res["completion_lead_over_blank"] = res["completion_accuracy"] - res["blank_accuracy"]
  res["completion_lead_over_random"] = (res["completion_accuracy"]
                                        - res["random_bottom_accuracy"])
  res.update(n_images=int(N), samples_per_image=int(K))
  if "test_accuracy" in meta:
    res["classifier_test_accuracy"] = float(meta["test_accuracy"])
  return res
