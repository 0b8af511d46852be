"""Trains a model under an ml_collections config: the project's one training entry point.

  python train.py --config=configs/mnist.py --workdir=workdirs/mnist \
      --config.attention=softmax --config.num_train_steps=200

`train_and_evaluate(config, workdir)` is the testable core (Flax-examples style):
  * the config is validated before any data is read or anything compiles;
  * a workdir that holds a checkpoint resumes from it (a different model config is
    refused); the result equals an uninterrupted run on CPU;
  * orbax keeps the last `keep_checkpoints` checkpoints plus the best by eval loss;
  * SIGTERM / SIGINT save a checkpoint, then stop; a non-finite loss stops the run
    and keeps the last good checkpoint;
  * metrics go to stdout, `workdir/metrics.jsonl` (one JSON object per record) and
    TensorBoard event files in `workdir/tb`;
  * it runs on a ("data", "fsdp", "seq") device mesh (`config.mesh`, parallel.py): the
    batch split over data and fsdp, parameters and optimizer state over fsdp, the
    sequence over seq; `config.distributed` (or ATTNLAB_* env) joins a multi-host job,
    where only process 0 writes logs and metrics.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import signal
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import nnx

import input_pipeline
import parallel
from models import ConfigError, ModelConfig, build, param_count, flops_per_token
from models.transformer import shift_right

OPTIMIZERS = ("adamw", "radam")
# The config key that sets each task's (target) sequence length, named in errors.
SEQ_KEY = {"mnist": "image_size", "tfds": "tfds_name", "shakespeare": "seq_len",
           "copy": "copy_len", "multi30k": "tgt_len"}
SCHEDULES = ("cosine", "constant")


class TrainError(RuntimeError):
  """A run that cannot start or continue; the message says why and what is kept."""


# ---- configuration -----------------------------------------------------------------

def _need(ok, key, why):
  if not ok:
    raise ConfigError(f"config '{key}': {why}")


def _positive_int(config, key, allow_zero=False):
  v = config.get(key)
  ok = isinstance(v, int) and not isinstance(v, bool) and (v >= 0 if allow_zero else v > 0)
  _need(ok, key, f"must be a {'non-negative' if allow_zero else 'positive'} int, got {v!r}")


def model_dict(config) -> dict:
  """The model section with the top-level `attention` swap applied."""
  d = config.model.to_dict()
  if config.get("attention"):
    d["attention"] = config.attention
  return d


def validate(config) -> ModelConfig:
  """Checks every field that can be checked without data; returns the ModelConfig.

  Raises ConfigError naming the key: unknown task or variant (listing valid ones),
  wrong types, a sequence longer than model.max_len, a variant the task cannot use.
  """
  _need(config.task in input_pipeline.TASKS, "task",
        f"unknown task {config.task!r}; valid: {sorted(input_pipeline.TASKS)}")
  for key in ("num_train_steps", "batch_size", "eval_batch_size", "log_every",
              "eval_every", "checkpoint_every", "keep_checkpoints", "grad_accum_steps"):
    _positive_int(config, key)
  _positive_int(config, "warmup_steps", allow_zero=True)
  _positive_int(config, "eval_batches", allow_zero=True)
  _need(config.optimizer in OPTIMIZERS, "optimizer", f"must be one of {OPTIMIZERS}")
  _need(config.schedule in SCHEDULES, "schedule", f"must be one of {SCHEDULES}")
  _need(isinstance(config.learning_rate, float) and config.learning_rate > 0,
        "learning_rate", f"must be a positive float, got {config.learning_rate!r}")
  lora = config.get("lora")
  _need(not (config.get("init_from") and lora and lora.rank), "init_from",
        "with lora.rank > 0 the starting weights are the frozen base: set "
        "lora.base_workdir instead")
  if config.get("shift"):
    from data import shifts
    try:
      shifts.parse(config.shift)
    except ValueError as e:
      raise ConfigError(f"config 'shift': {e}") from None
  mcfg = ModelConfig.from_dict(model_dict(config))
  want = {"mnist": lambda: config.get("image_size", 28) ** 2,
          "tfds": lambda: 0,    # known once the images are read (checked in create)
          "shakespeare": lambda: config.seq_len,
          "copy": lambda: 2 * config.copy_len + 2,
          "multi30k": lambda: max(config.src_len, config.tgt_len)}[config.task]()
  key = "src_len/tgt_len" if config.task == "multi30k" else SEQ_KEY[config.task]
  _need(want <= mcfg.max_len, key,
        f"sequences of {want} tokens exceed model.max_len={mcfg.max_len}")
  _need((config.task == "multi30k") == (mcfg.kind == "encdec"), "model.kind",
        f"task {config.task} needs kind={'encdec' if config.task == 'multi30k' else 'lm'}")
  parallel.distributed_args(config)      # the distributed.* keys describe one process
  return mcfg


def check_mesh(config, mesh, seq_lens: dict | None = None) -> None:
  """Checks that the batches split evenly over `mesh`; ConfigError names the key.

  seq_lens: {config key: length} of the sequence axes that mesh.seq splits (known once
  the task is read).
  """
  n = parallel.batch_divisor(mesh)
  for key in ("batch_size", "eval_batch_size"):
    _need(config[key] % n == 0, key,
          f"{config[key]} sequences do not split over mesh data * fsdp = {n} devices; "
          f"use a multiple of {n}")
  seq = dict(mesh.shape)["seq"]
  for key, length in (seq_lens or {}).items():
    _need(length % seq == 0, key,
          f"sequences of {length} tokens do not split over mesh.seq = {seq} devices")


def make_optimizer(config) -> optax.GradientTransformation:
  """Warmup then cosine or constant; AdamW or RAdam; clipping; accumulation."""
  steps = max(1, config.num_train_steps // config.grad_accum_steps)
  warm = min(config.warmup_steps, steps)
  lr = config.learning_rate
  if config.schedule == "cosine":
    # optax counts the warmup inside decay_steps, which must exceed it
    sched = optax.warmup_cosine_decay_schedule(0.0, lr, warm, max(steps, warm + 1),
                                               end_value=0.0)
  else:
    sched = optax.join_schedules(
        [optax.linear_schedule(0.0, lr, max(warm, 1)), optax.constant_schedule(lr)], [warm])
  if config.optimizer == "adamw":
    opt = optax.adamw(sched, b1=config.b1, b2=config.b2, weight_decay=config.weight_decay)
  else:
    opt = optax.chain(optax.radam(sched, b1=config.b1, b2=config.b2),
                      optax.add_decayed_weights(-config.weight_decay * lr)
                      if config.weight_decay else optax.identity())
  tx = optax.chain(optax.clip_by_global_norm(config.grad_clip), opt) if config.grad_clip \
      else opt
  if config.grad_accum_steps > 1:
    tx = optax.MultiSteps(tx, every_k_schedule=config.grad_accum_steps)
  return tx


# ---- the model's loss and evaluation -------------------------------------------------

def loss_fn(model, batch):
  """Weighted mean NLL (nats per counted token) and the weight total."""
  if "src" in batch:
    nll = model.nll(batch["src"], batch["y"])
  else:
    nll = model.nll(batch["y"])
  w = batch["w"]
  return jnp.sum(nll * w) / jnp.maximum(jnp.sum(w), 1.0), jnp.sum(w)


@nnx.jit
def train_step(model, opt, batch):
  # gradients only for what the optimizer trains (LoRA: the adapters)
  diff = nnx.DiffState(0, opt.wrt)
  # with fsdp, the parameters are all-gathered where they are used (ZeRO-3)
  sharded_loss = lambda model, batch: parallel.gathered_call(loss_fn, model, batch)
  (loss, _), grads = nnx.value_and_grad(sharded_loss, argnums=diff, has_aux=True)(model,
                                                                                  batch)
  opt.update(model, grads)
  parallel.constrain(model)     # the updated state keeps its FSDP layout on the mesh
  parallel.constrain(opt)
  return loss


@functools.partial(nnx.jit, static_argnames="exact")
def eval_step(model, batch, exact=False):
  """Summed NLL and weight; with exact, also sequences whose every counted token is
  the argmax of the teacher-forced prediction (the copy task's accuracy)."""
  loss, wsum = loss_fn(model, batch)
  if not exact:
    return loss * wsum, wsum, 0, batch["y"].shape[0]
  h = model(shift_right(batch["y"], model.cfg.start_id))
  pred = jnp.argmax(model.head.log_probs(h), -1)
  ok = jnp.all((pred == batch["y"]) | (batch["w"] == 0), axis=-1)
  return loss * wsum, wsum, jnp.sum(ok), ok.shape[0]


def evaluate(model, task, config, mesh=None) -> dict:
  """eval_loss (nats/token) plus the task metric on the task's eval batches; with a
  mesh, each batch is split over it like the training batches."""
  model.eval()
  tot = wt = good = n = 0.0
  for batch in task.eval_batches():
    batch = (parallel.put_batch(batch, mesh) if mesh is not None
             else {k: jnp.asarray(v) for k, v in batch.items()})
    l, w, ok, b = eval_step(model, batch, exact=task.metric == "accuracy")
    tot, wt, good, n = tot + float(l), wt + float(w), good + float(ok), n + b
  model.train()
  out = {"eval_loss": tot / max(wt, 1.0), "eval_sequences": int(n)}
  if task.metric in ("bits_per_dim", "bits_per_char"):
    out[task.metric] = out["eval_loss"] / math.log(2)
  elif task.metric == "accuracy":
    out["accuracy"] = good / max(n, 1)
  elif task.metric == "bleu":
    out["bleu"] = bleu(model, task, config)
  return out


def bleu(model, task, config) -> float:
  """Corpus BLEU (sacrebleu) of beam/greedy translations of validation sentences."""
  import sacrebleu
  from models.generate import translate
  src, _, refs = task.splits[task.eval_split]
  n = min(len(src), int(config.get("bleu_sentences", 256)))
  B = int(config.eval_batch_size)
  hyps = []
  for i in range(0, n, B):
    chunk = src[i:i + B]
    toks, _ = translate(model, chunk, max_len=int(config.tgt_len),
                        beam_size=int(config.get("beam_size", 0)),
                        alpha=float(config.get("length_penalty", 0.6)))
    hyps += [task.detokenize(t) for t in np.asarray(toks)]
  return float(sacrebleu.corpus_bleu(hyps, [refs[:n]]).score)


# ---- checkpoints ---------------------------------------------------------------------

def _to_saveable(tree):
  """Pure dict with PRNG key arrays as raw uint32 data (orbax stores plain arrays)."""
  return jax.tree.map(
      lambda x: jax.random.key_data(x)
      if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x, tree)


def _from_saveable(tree, like):
  return jax.tree.map(
      lambda x, l: jax.random.wrap_key_data(x, impl=jax.random.key_impl(l))
      if hasattr(l, "dtype") and jnp.issubdtype(l.dtype, jax.dtypes.prng_key) else x,
      tree, like)


def checkpoint_manager(workdir, config) -> ocp.CheckpointManager:
  keep = ocp.checkpoint_managers.AnyPreservationPolicy([
      ocp.checkpoint_managers.LatestN(int(config.keep_checkpoints)),
      ocp.checkpoint_managers.BestN(get_metric_fn=lambda m: m["eval_loss"], reverse=True,
                                    n=1, keep_checkpoints_without_metrics=False)])
  opts = ocp.CheckpointManagerOptions(preservation_policy=keep, create=True,
                                      enable_async_checkpointing=False)
  return ocp.CheckpointManager(os.path.join(os.path.abspath(workdir), "checkpoints"),
                               options=opts)


# What a checkpoint holds of the model: everything, or (adapters-only LoRA runs)
# everything except the frozen base parameters, which stay in the base workdir.
ALL = nnx.Everything()
NOT_BASE = nnx.Not(nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam)))


def saved_part(config):
  lora = config.get("lora")
  return NOT_BASE if lora and lora.rank and lora.adapters_only else ALL


def _state(model, opt, part=ALL):
  return {"model": nnx.to_pure_dict(nnx.state(model, part)),
          "opt": nnx.to_pure_dict(nnx.state(opt))}


def save(mngr, step, model, opt, metrics=None, part=ALL):
  mngr.save(step, args=ocp.args.StandardSave(_to_saveable(_state(model, opt, part))),
            metrics=metrics)
  mngr.wait_until_finished()


def restore(mngr, step, model, opt, part=ALL):
  """Loads checkpoint `step` into model (the `part` it holds) and opt, in place.

  The arrays are read straight onto the devices and shardings that model and opt have
  now, whatever mesh wrote the checkpoint (orbax reads each device's slice).
  """
  like = _state(model, opt, part)
  target = jax.tree.map(ocp.utils.to_shape_dtype_struct, _to_saveable(like))
  got = mngr.restore(step, args=ocp.args.StandardRestore(target))
  got = _from_saveable({k: got[k] for k in like}, like)
  for name, obj, filt in (("model", model, part), ("opt", opt, ALL)):
    state = nnx.state(obj, filt)
    nnx.replace_by_pure_dict(state, got[name])
    nnx.update(obj, state)


def make_model(config, mcfg: ModelConfig, fresh: bool = True):
  """The model of a run, built from mcfg; then, if `fresh` (no checkpoint of its own
  yet) and config.init_from is set, that workdir's weights (full fine-tuning); then,
  with config.lora.rank > 0, the frozen base of config.lora.base_workdir (always: an
  adapters-only checkpoint needs it) and LoRA adapters on config.lora.targets."""
  model = build(mcfg, rngs=nnx.Rngs(params=config.seed, dropout=config.seed + 1))
  if fresh and config.get("init_from"):
    _load_weights(model, config.init_from, mcfg, "init_from")
  lora = config.get("lora")
  if lora and lora.rank:
    from models.lora import apply_lora
    if lora.base_workdir:
      _load_weights(model, lora.base_workdir, mcfg, "lora.base_workdir")
    apply_lora(model, rank=int(lora.rank), targets=lora.targets,
               alpha=float(lora.alpha) or None, rngs=nnx.Rngs(config.seed + 2))
  return model


def _load_weights(model, workdir, mcfg, key):
  """Copies the latest weights (Params and Buffers) of train.py run `workdir` into
  model, in place; refuses a workdir of a different model, naming config `key`."""
  _, src, _ = load_model(workdir)
  if src.cfg != mcfg:
    diff = sorted(f.name for f in dataclasses.fields(mcfg)
                  if getattr(src.cfg, f.name) != getattr(mcfg, f.name))
    raise TrainError(f"{key} {workdir} holds a different model than this config builds "
                     f"(differing model fields: {diff}); it needs the same model")
  nnx.update(model, nnx.state(src, nnx.Not(nnx.RngState)))


def trained_part(config):
  """The variables the optimizer updates: the adapters in LoRA runs, else all Params."""
  lora = config.get("lora")
  return nnx.LoRAParam if lora and lora.rank else nnx.Param


def load_model(workdir: str, step: int | None = None, mesh=None, **config_overrides):
  """(config, model in eval mode, step) of a train.py workdir's checkpoint.

  mesh: a parallel.make_mesh mesh to restore onto (parameters laid out by the FSDP
  rule of its fsdp axis); None: the default device. Any mesh reads a checkpoint
  written on any other.
  """
  import ml_collections
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path} not found: is {workdir} a train.py workdir?")
  saved = json.load(open(path))
  config = ml_collections.ConfigDict(saved["config"])
  config.update(config_overrides)
  saved["model"].pop("lora", None)
  model = make_model(config, ModelConfig.from_dict(saved["model"]), fresh=False)
  mngr = checkpoint_manager(workdir, config)
  step = mngr.latest_step() if step is None else step
  if step is None:
    raise FileNotFoundError(f"no checkpoint in {workdir}/checkpoints")
  if mesh is not None:
    parallel.shard(model, mesh)
  opt = nnx.Optimizer(model, make_optimizer(config), wrt=trained_part(config))
  if mesh is not None:
    parallel.shard(opt, mesh)
  restore(mngr, step, model, opt, saved_part(config))
  mngr.close()
  model.eval()
  return config, model, int(step)


def _check_same_model(workdir, mcfg: ModelConfig, config, write=True):
  """Writes workdir/config.json once (if `write`); refuses a workdir made for another
  model."""
  path = os.path.join(workdir, "config.json")
  mine = {"model": dataclasses.asdict(mcfg), "config": json.loads(config.to_json())}
  if config.get("lora"):     # adapters change the checkpoint's structure too
    mine["model"]["lora"] = config.lora.to_dict()
  mine["model"]["attention_options"] = {k: dict(v) for k, v in mcfg.attention_options.items()}
  if os.path.exists(path):
    old = json.load(open(path))
    diff = sorted(k for k in set(old["model"]) | set(mine["model"])
                  if old["model"].get(k) != mine["model"].get(k))
    if diff:
      k = diff[0]
      raise TrainError(
          f"workdir {workdir} holds a run of a different model (model.{k} was "
          f"{old['model'].get(k)!r}, now {mine['model'].get(k)!r}; differing keys: "
          f"{diff}); nothing was changed there: use another --workdir")
  elif write:
    os.makedirs(workdir, exist_ok=True)
    with open(path, "w") as f:
      json.dump(mine, f, indent=1, sort_keys=True)


# ---- metrics --------------------------------------------------------------------------

class Metrics:
  """stdout lines, workdir/metrics.jsonl and TensorBoard (tensorboardX) events."""

  def __init__(self, workdir, quiet=False, enabled=True):
    self.path = os.path.join(workdir, "metrics.jsonl")
    self.quiet = quiet
    self.enabled = enabled    # False on every process but 0 of a multi-host job
    self.tb = None
    if not enabled:
      return
    try:
      from tensorboardX import SummaryWriter
      self.tb = SummaryWriter(os.path.join(workdir, "tb"))
    except ImportError:  # pragma: no cover - tensorboardX is in requirements.txt
      self.tb = None

  def write(self, step, **kv):
    if not self.enabled:
      return
    rec = {"step": int(step), **{k: float(v) if isinstance(v, (float, np.floating,
                                                                 jax.Array)) else v
                                 for k, v in kv.items()}}
    with open(self.path, "a") as f:
      f.write(json.dumps(rec) + "\n")
    if self.tb is not None:
      for k, v in rec.items():
        if k != "step" and isinstance(v, (int, float)):
          self.tb.add_scalar(k, v, step)
      self.tb.flush()
    if not self.quiet:
      print(f"step {step}: " + ", ".join(
          f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in kv.items()),
          flush=True)

  def close(self):
    if self.tb is not None:
      self.tb.close()


# ---- the loop ------------------------------------------------------------------------

class _Stop:
  """Turns SIGTERM/SIGINT into a flag the loop checks after each step."""

  def __init__(self):
    self.signal = None
    self.old = {}

  def __enter__(self):
    for s in (signal.SIGTERM, signal.SIGINT):
      try:
        self.old[s] = signal.signal(s, self._handle)
      except ValueError:   # not the main thread: signals cannot be caught here
        pass
    return self

  def _handle(self, signum, frame):
    self.signal = signum

  def __exit__(self, *exc):
    for s, h in self.old.items():
      signal.signal(s, h)


def train_and_evaluate(config, workdir: str) -> dict:
  """Trains config's model on config's task in workdir; returns the last metrics.

  Runs on the mesh of `config.mesh` over every device (of every process, after
  joining the multi-host job of `config.distributed`, if any).
  """
  mcfg = validate(config)                       # before any data or compilation
  parallel.initialize(config)                   # before anything touches a device
  mesh = parallel.make_mesh(config.get("mesh"))
  check_mesh(config, mesh)                      # the batch sizes split over the mesh
  with parallel.use_mesh(mesh):
    return _train(config, workdir, mesh)


def _train(config, workdir, mesh) -> dict:
  primary = parallel.is_primary()               # process 0 alone writes logs
  task = input_pipeline.create(config)
  mcfg = ModelConfig.from_dict({**model_dict(config), **task.model_overrides})
  _need(task.seq_len <= mcfg.max_len, "model.max_len",
        f"the {config.task} sequences have {task.seq_len} tokens, more than "
        f"model.max_len={mcfg.max_len}")
  seq_lens = {SEQ_KEY.get(config.task, "seq_len"): task.seq_len}
  if mcfg.kind == "encdec":
    seq_lens["src_len"] = int(config.src_len)
  check_mesh(config, mesh, seq_lens)            # and so do the sequences
  _check_same_model(workdir, mcfg, config, write=primary)
  mngr = checkpoint_manager(workdir, config)
  model = make_model(config, mcfg, fresh=mngr.latest_step() is None)
  model.train()
  parallel.shard(model, mesh)                   # FSDP layout (replicated without fsdp)
  opt = nnx.Optimizer(model, make_optimizer(config), wrt=trained_part(config))
  parallel.shard(opt, mesh)
  part = saved_part(config)
  start = 0
  if mngr.latest_step() is not None:
    start = int(mngr.latest_step())
    restore(mngr, start, model, opt, part)
  metrics = Metrics(workdir, enabled=primary)
  counts = param_count(model)
  counts["trainable"] = int(sum(x.size for x in jax.tree.leaves(
      nnx.state(model, trained_part(config)))))
  T = task.seq_len
  fl = flops_per_token(mcfg, T, config.get("src_len"))
  if primary:
    print(f"{config.task}: attention={mcfg.attention} params={counts['params']:,} "
          f"trainable={counts['trainable']:,} "
          f"buffers={counts['buffers']:,} forward GFLOP/token={fl['total'] / 1e9:.4g} "
          f"{'resuming at step ' + str(start) if start else 'from scratch'} in {workdir} "
          f"on mesh {dict(mesh.shape)}", flush=True)
  if start == 0:
    metrics.write(0, params=counts["params"], trainable_params=counts["trainable"],
                  flops_per_token=fl["total"])

  last = {}
  losses = []
  bar = None
  if config.progress and primary and start < config.num_train_steps:
    from tqdm import tqdm
    bar = tqdm(total=config.num_train_steps, initial=start, unit="step", dynamic_ncols=True,
               file=sys.stdout, mininterval=1.0)
  last_good = start if start else None
  t0, s0 = time.perf_counter(), start
  try:
    with _Stop() as stop:
      step = start
      while step < config.num_train_steps:
        batch = parallel.put_batch(task.train_batch(step), mesh)
        loss = float(train_step(model, opt, batch))
        if not math.isfinite(loss):
          kept = (f"the last good checkpoint (step {last_good}) is kept in {workdir}"
                  if last_good is not None else "no checkpoint had been saved yet")
          raise TrainError(f"non-finite training loss ({loss}) at step {step}; stopping; "
                           f"{kept}")
        losses.append(loss)
        step += 1
        if bar is not None:
          bar.update(1)
          bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
        if step % config.log_every == 0 or step == config.num_train_steps:
          last = {"train_loss": float(np.mean(losses)),
                  "steps_per_s": (step - s0) / (time.perf_counter() - t0)}
          metrics.write(step, **last)
          losses = []
        ev = None
        if step % config.eval_every == 0 or step == config.num_train_steps:
          ev = evaluate(model, task, config, mesh)
          last.update(ev)
          metrics.write(step, **ev)
        if (step % config.checkpoint_every == 0 or step == config.num_train_steps
            or stop.signal is not None):
          save(mngr, step, model, opt, ev, part)
          last_good = step
        if stop.signal is not None:
          print(f"signal {stop.signal}: saved a checkpoint at step {step} in {workdir}; "
                "run the same command again to resume", flush=True)
          break
  finally:
    if bar is not None:
      bar.close()
    metrics.close()
    mngr.close()
  return last


def main(argv):
  from absl import flags, logging
  del argv
  logging.set_verbosity(logging.WARNING)   # orbax logs every save at INFO
  cfg = flags.FLAGS.config
  train_and_evaluate(cfg, flags.FLAGS.workdir)


if __name__ == "__main__":
  from absl import app, flags
  from ml_collections import config_flags
  config_flags.DEFINE_config_file("config", None, "ml_collections config file",
                                  lock_config=True)
  flags.DEFINE_string("workdir", None, "directory for checkpoints and metrics")
  flags.mark_flags_as_required(["config", "workdir"])
  app.run(main)
