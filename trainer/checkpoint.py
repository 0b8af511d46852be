"""Checkpoints and the model of a workdir.

  mngr = checkpoint_manager(workdir, config)     # orbax: last k + best by eval_loss
  save(mngr, step, model, opt, metrics, part)    # part: what of the model is saved
  restore(mngr, step, model, opt, part)          # in place, onto the current layout
  config, model, step = load_model(workdir)      # eval mode, latest checkpoint

A workdir holds one model: `check_same_model` writes workdir/config.json on the first
run and refuses a later run of another model (execution fields, `EXECUTION_FIELDS`,
may change between runs: they change how the model computes, not its parameters).
"""
from __future__ import annotations

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from flax import nnx

import parallel
from models import ModelConfig, build
from trainer.config import EXECUTION_FIELDS, TrainError, make_optimizer


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
  diff = sorted(f.name for f in dataclasses.fields(mcfg)
                if f.name not in EXECUTION_FIELDS
                and getattr(src.cfg, f.name) != getattr(mcfg, f.name))
  if diff:
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
  if not os.path.isdir(workdir):
    raise TrainError(f"workdir {workdir} is not a directory" if os.path.exists(workdir)
                     else f"workdir {workdir} does not exist")
  if not os.path.exists(path):
    raise TrainError(f"{path} not found: {workdir} is not a train.py workdir")
  try:
    saved = json.load(open(path))
    config = ml_collections.ConfigDict(saved["config"])
  except (ValueError, KeyError) as e:
    raise TrainError(f"{path} is not a train.py config record ({e!r})") from None
  config.update(config_overrides)
  saved["model"].pop("lora", None)
  mcfg = ModelConfig.from_dict({**saved["model"], **{
      k: config[k] for k in EXECUTION_FIELDS if config.get(k)}})
  model = make_model(config, mcfg, fresh=False)
  mngr = checkpoint_manager(workdir, config)
  steps = mngr.all_steps()
  step = mngr.latest_step() if step is None else step
  if step is None:
    raise TrainError(f"no checkpoint in {workdir}/checkpoints: the run saved none yet")
  if step not in steps:
    raise TrainError(f"no checkpoint of step {step} in {workdir}/checkpoints; "
                     f"there are {sorted(steps)}")
  if mesh is not None:
    parallel.shard(model, mesh)
  opt = nnx.Optimizer(model, make_optimizer(config), wrt=trained_part(config))
  if mesh is not None:
    parallel.shard(opt, mesh)
  restore(mngr, step, model, opt, saved_part(config))
  mngr.close()
  model.eval()
  return config, model, int(step)


# Defaults of model fields added after a workdir was written (e.g. remat).
_DEFAULT = {f.name: f.default for f in dataclasses.fields(ModelConfig)}


def check_same_model(workdir, mcfg: ModelConfig, config, write=True):
  """Writes workdir/config.json once (if `write`); refuses a workdir made for another
  model (TrainError naming the first differing model field), and a workdir that is a
  file. Execution fields (EXECUTION_FIELDS: dtype, remat) may differ."""
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise TrainError(f"workdir {workdir} is a file, not a directory: use another --workdir")
  path = os.path.join(workdir, "config.json")
  mine = {"model": dataclasses.asdict(mcfg), "config": json.loads(config.to_json())}
  if config.get("lora"):     # adapters change the checkpoint's structure too
    mine["model"]["lora"] = config.lora.to_dict()
  mine["model"]["attention_options"] = {k: dict(v) for k, v in mcfg.attention_options.items()}
  if os.path.exists(path):
    old = json.load(open(path))
    diff = sorted(k for k in set(old["model"]) | set(mine["model"])
                  if k not in EXECUTION_FIELDS
                  and old["model"].get(k, _DEFAULT.get(k)) != mine["model"].get(k))
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


