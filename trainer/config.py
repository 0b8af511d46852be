"""What a training config must satisfy, checked before any data is read or anything
compiles, and the optimizer it describes.

  mcfg = validate(config)        # ModelConfig, or ConfigError naming the key and why
  tx = make_optimizer(config)    # optax: warmup + cosine/constant, AdamW/RAdam, clipping

Top-level fields that change how the model runs but not what it is (so a run may
resume under another value): `attention` swaps the variant of every layer,
`dtype` the compute dtype, `remat` the rematerialisation; `model_dict` applies them.
"""
from __future__ import annotations

import difflib
import functools

import optax

from data import tasks
from trainer import parallel
from models import ConfigError, ModelConfig

OPTIMIZERS = ("adamw", "radam")
SCHEDULES = ("cosine", "constant")
# jax_default_matmul_precision for float32 matmuls. On a CPU all three are true
# float32. On an NVIDIA GPU (Ampere and newer) "default" is TF32 (10-bit mantissa
# inputs, float32 accumulation: ~1e-3 relative error per product, much faster),
# "high" is TF32 or 3-pass bfloat16 (XLA's choice), "highest" true float32. On a TPU:
# 1, 3 and 6 bfloat16 passes. bfloat16 compute (config.dtype) is not affected.
PRECISIONS = ("default", "high", "highest")


def matmul_precision(name: str):
  """A context manager applying config.matmul_precision: "default" leaves JAX's
  setting as it is (the backend's default, unless the process chose otherwise, as
  the test suite does); "high" / "highest" set it for the block."""
  import contextlib
  import jax
  if name in (None, "", "default"):
    return contextlib.nullcontext()
  return jax.default_matmul_precision(name)
REMATS = ("none", "block", "full")
DTYPES = ("float32", "bfloat16")
# Model fields that change the computation but not the parameters: a workdir may be
# resumed, or its weights loaded, under other values.
EXECUTION_FIELDS = ("dtype", "remat")


class TrainError(RuntimeError):
  """A run that cannot start or continue; the message says why and what is kept."""


def need(ok, key, why):
  """Raises ConfigError("config 'key': why") unless ok."""
  if not ok:
    raise ConfigError(f"config '{key}': {why}")


def _positive_int(config, key, allow_zero=False):
  v = config.get(key)
  ok = isinstance(v, int) and not isinstance(v, bool) and (v >= 0 if allow_zero else v > 0)
  need(ok, key, f"must be a {'non-negative' if allow_zero else 'positive'} int, got {v!r}")


def _keys(d, prefix=""):
  """Dotted names of every field of a (nested) ConfigDict / dict."""
  for k, v in d.items():
    name = prefix + k
    yield name
    if hasattr(v, "items"):
      yield from _keys(v, name + ".")


def closest_keys(config, key: str, n: int = 3) -> list[str]:
  """The valid dotted config keys nearest to `key` (for 'unknown field' errors): by
  the whole dotted name, then by the last component (`model.dmodel` -> model.d_model)."""
  keys = list(_keys(config))
  near = difflib.get_close_matches(key, keys, n=n, cutoff=0.5)
  leaf = key.rsplit(".", 1)[-1]
  for k in keys:
    if k.rsplit(".", 1)[-1] in difflib.get_close_matches(leaf, [k.rsplit(".", 1)[-1]],
                                                          cutoff=0.75):
      near.append(k)
  return list(dict.fromkeys(near))[:n]


def model_dict(config) -> dict:
  """The model section with the top-level attention / dtype / remat swaps applied, and
  the fields the task fills from its own config (its record's `model_fields`: e.g. for
  rope2d on MNIST an unset model.image_side taken from config.image_size)."""
  d = config.model.to_dict()
  for key in ("attention", "dtype", "remat"):
    if config.get(key):
      d[key] = config[key]
  rec = _record(config)
  if rec.model_fields is not None:
    d.update(rec.model_fields(config, d))
  return d


def _record(config) -> tasks.TaskRecord:
  """The registry record of config.task; ConfigError naming 'task' (and the valid
  names) for an unknown one."""
  try:
    return tasks.task(config.task)
  except tasks.UnknownTask as e:
    raise ConfigError(f"config 'task': {e}") from None


def validate(config) -> ModelConfig:
  """Checks every field that can be checked without data; returns the ModelConfig.

  Raises ConfigError naming the key: unknown task or variant (listing valid ones),
  wrong types, a sequence longer than model.max_len, a variant the task cannot use.
  What is checked of the task is its registry record's (data/tasks/): its sequence
  lengths, its own checks, the model kind it needs.
  """
  rec = _record(config)
  for key in ("num_train_steps", "batch_size", "eval_batch_size", "log_every",
              "eval_every", "checkpoint_every", "keep_checkpoints", "grad_accum_steps"):
    _positive_int(config, key)
  _positive_int(config, "warmup_steps", allow_zero=True)
  _positive_int(config, "eval_batches", allow_zero=True)
  _positive_int(config, "prefetch", allow_zero=True)
  need(config.optimizer in OPTIMIZERS, "optimizer", f"must be one of {OPTIMIZERS}")
  need(config.schedule in SCHEDULES, "schedule", f"must be one of {SCHEDULES}")
  need(isinstance(config.learning_rate, float) and config.learning_rate > 0,
       "learning_rate", f"must be a positive float, got {config.learning_rate!r}")
  need(config.matmul_precision in PRECISIONS, "matmul_precision",
       f"must be one of {PRECISIONS}, got {config.matmul_precision!r}")
  need(config.dtype in ("",) + DTYPES, "dtype",
       f"must be one of {DTYPES} (or '' for model.dtype), got {config.dtype!r}")
  need(config.remat in ("",) + REMATS, "remat",
       f"must be one of {REMATS} (or '' for model.remat), got {config.remat!r}")
  lora = config.get("lora")
  need(not (config.get("init_from") and lora and lora.rank), "init_from",
       "with lora.rank > 0 the starting weights are the frozen base: set "
       "lora.base_workdir instead")
  if config.get("shift"):
    from data import shifts
    try:
      shifts.parse(config.shift)
    except ValueError as e:
      raise ConfigError(f"config 'shift': {e}") from None
  mcfg = ModelConfig.from_dict(model_dict(config))
  need(not (config.get("attention") and mcfg.layer_attention and mcfg.kind == "lm"),
       "attention", f"swaps the variant of every layer, but model.layer_attention="
       f"{mcfg.layer_attention!r} sets each decoder layer's; change the pattern, or "
       "set --config.model.layer_attention='' to swap them all")
  # the lengths the config alone fixes (a task whose length is known once its data is
  # read has none here: the loop checks it then)
  for key, want in rec.lengths(config).items():
    need(want <= mcfg.max_len, key,
         f"sequences of {want} tokens exceed model.max_len={mcfg.max_len}")
  if rec.check is not None:
    rec.check(config, mcfg)
  check_eval_length(config, mcfg)
  check_packing(config, mcfg)
  need(mcfg.kind == rec.kind, "model.kind", f"task {config.task} needs kind={rec.kind}")
  parallel.distributed_args(config)      # the distributed.* keys describe one process
  return mcfg


def check_eval_length(config, mcfg: ModelConfig) -> None:
  """Checks config.eval_seq_len (evaluation windows of another length than training's,
  e.g. 2L, 4L, 8L for length extrapolation) against the task and the model: only the
  windows of a task whose record says `free_eval_length` have a free length, and beyond
  model.max_len the positions and the attention variants must exist there
  (ModelConfig.check_length: not learned positions, not location or linformer).
  ConfigError names the key."""
  if not config.get("eval_seq_len"):
    return
  free = [n for n in tasks.names() if tasks.task(n).free_eval_length]
  need(_record(config).free_eval_length, "eval_seq_len",
       f"only the windows of the {', '.join(free)} tasks have a free length, not "
       f"{config.task}'s")
  _positive_int(config, "eval_seq_len")
  mcfg.check_length(int(config.eval_seq_len))


def check_packing(config, mcfg: ModelConfig) -> None:
  """config.packing (packed train rows with segment ids, data.pipeline) needs a task
  that packs (`Task.no_packing` says why one does not) and an attention variant in
  every layer that takes segment ids (`ModelConfig.check_segments`: the registry's
  `Variant.takes_segments`). ConfigError names the key and the reason."""
  if not config.get("packing"):
    return
  need(isinstance(config.packing, bool), "packing",
       f"must be True or False, got {config.packing!r}")
  why = _record(config).pipeline.no_packing
  need(why is None, "packing", f"the {config.task} task does not pack: {why}")
  mcfg.check_segments("packing")


def check_mesh(config, mesh, seq_lens: dict | None = None) -> None:
  """Checks that the batches split evenly over `mesh`; ConfigError names the key.

  seq_lens: {config key: length} of the sequence axes that mesh.seq splits (known once
  the task is read).
  """
  n = parallel.batch_divisor(mesh)
  for key in ("batch_size", "eval_batch_size"):
    need(config[key] % n == 0, key,
         f"{config[key]} sequences do not split over mesh data * fsdp = {n} devices; "
         f"use a multiple of {n}")
  seq = dict(mesh.shape)["seq"]
  for key, length in (seq_lens or {}).items():
    need(length % seq == 0, key,
         f"sequences of {length} tokens do not split over mesh.seq = {seq} devices")


def make_optimizer(config) -> optax.GradientTransformation:
  """Warmup then cosine or constant; AdamW or RAdam; clipping; accumulation.

  The same hyperparameters give the same (pure) transformation object: it is a
  static part of the optimizer's graph, so that a second run in one process (a
  resume, a benchmark's or a test's repeated run) finds trainer.step's compiled
  step in its cache instead of compiling it again (optax builds new closures on
  every call, which never compare equal).
  """
  return _optimizer(**{k: config[k] for k in _OPT_KEYS})


_OPT_KEYS = ("num_train_steps", "grad_accum_steps", "warmup_steps", "learning_rate",
             "schedule", "optimizer", "b1", "b2", "weight_decay", "grad_clip")


@functools.lru_cache(maxsize=32)
def _optimizer(*, num_train_steps, grad_accum_steps, warmup_steps, learning_rate,
               schedule, optimizer, b1, b2, weight_decay, grad_clip):
  steps = max(1, num_train_steps // grad_accum_steps)
  warm = min(warmup_steps, steps)
  lr = learning_rate
  if schedule == "cosine":
    # optax counts the warmup inside decay_steps, which must exceed it
    sched = optax.warmup_cosine_decay_schedule(0.0, lr, warm, max(steps, warm + 1),
                                               end_value=0.0)
  else:
    sched = optax.join_schedules(
        [optax.linear_schedule(0.0, lr, max(warm, 1)), optax.constant_schedule(lr)], [warm])
  if optimizer == "adamw":
    opt = optax.adamw(sched, b1=b1, b2=b2, weight_decay=weight_decay)
  else:
    opt = optax.chain(optax.radam(sched, b1=b1, b2=b2),
                      optax.add_decayed_weights(-weight_decay * lr)
                      if weight_decay else optax.identity())
  tx = optax.chain(optax.clip_by_global_norm(grad_clip), opt) if grad_clip else opt
  if grad_accum_steps > 1:
    tx = optax.MultiSteps(tx, every_k_schedule=grad_accum_steps)
  return tx
