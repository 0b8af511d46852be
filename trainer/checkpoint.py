"""Checkpoints and the model of a workdir.

  mngr = checkpoint_manager(workdir, config)     # orbax: last k + best by eval_loss
  save(mngr, step, model, opt, metrics, part)    # part: what of the model is saved
  restore(mngr, step, model, opt, part)          # in place, onto the current layout
  step = restore_newest(mngr, model, opt, part)  # the newest readable one (or None)
  config, model, step = load_model(workdir)      # eval mode, newest readable checkpoint
  config, model, step = load_model("mnist14_linear")  # a shipped model (pretrained/)
  with WorkdirLock(workdir): ...                 # one writer per workdir

A workdir holds one model: `check_same_model` writes workdir/config.json on the first
run and refuses a later run of another model (execution fields, `EXECUTION_FIELDS`,
may change between runs: they change how the model computes, not its parameters).

A checkpoint that cannot be read (truncated array files after a full disk, a
half-copied workdir) is never deleted: `restore_newest` names it in one line, moves it
to workdir/unreadable_checkpoints/<step> and resumes from the newest readable one.
"""
from __future__ import annotations

import dataclasses
import datetime
import fcntl
import json
import logging
import os
import socket
import sys

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from flax import nnx

from trainer import parallel
from models import ModelConfig, build
from trainer import pretrained
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


def _why(e: BaseException, limit: int = 240) -> str:
  """The innermost cause of an exception chain in one line (orbax wraps tensorstore's
  OUT_OF_RANGE / NOT_FOUND under a message that only points at it)."""
  while e.__cause__ is not None or (e.__context__ is not None
                                    and not e.__suppress_context__):
    e = e.__cause__ or e.__context__
  msg = " ".join(str(e).split()) or type(e).__name__
  return msg if len(msg) <= limit else msg[:limit - 3] + "..."


UNREADABLE = "unreadable_checkpoints"


def restore_newest(mngr, model, opt, part=ALL, set_aside: bool = True) -> int | None:
  """Restores the newest checkpoint of mngr that can be read into model and opt, in
  place; returns its step, or None when there is no checkpoint.

  Each newer checkpoint that fails to read is named in one line on stderr (its step
  and the innermost error) and, with `set_aside` (a run that will write its steps
  again), moved to <workdir>/unreadable_checkpoints/<step>: kept for the user to look
  at, out of orbax's sight. If none can be read, a TrainError names the folder and
  nothing is moved. In a multi-process job an unreadable checkpoint is a TrainError
  at once: each process reads its own shards, so the processes could disagree on
  which one to fall back to.
  """
  folder = str(mngr.directory)
  bad, hook = [], sys.unraisablehook
  _quiet_failed_reads()        # a failed read's leftovers print during the restore
  for step in sorted(mngr.all_steps(), reverse=True):
    try:
      restore(mngr, step, model, opt, part)
    except Exception as e:  # noqa: BLE001 - any read failure: the step is unreadable
      bad.append((step, _why(e)))
    else:
      if not bad:
        sys.unraisablehook = hook      # nothing failed: nothing left to quiet
      break
    if jax.process_count() > 1:
      raise TrainError(f"checkpoint of step {step} in {folder} cannot be read "
                       f"({bad[-1][1]}); a multi-process job does not fall back: move "
                       f"{folder}/{step} aside and run again")
  else:
    if bad:
      raise TrainError(f"no checkpoint in {folder} can be read (steps "
                       f"{', '.join(str(s) for s, _ in bad)}; step {bad[0][0]}: "
                       f"{bad[0][1]}); nothing was moved; to start over, move "
                       f"{folder} away")
    sys.unraisablehook = hook
    return None
  for s, why in bad:
    where = "set aside as " + _set_aside(folder, s) if set_aside else "kept in place"
    print(f"checkpoint of step {s} in {folder} cannot be read ({why}); {where}; "
          f"using step {step}", file=sys.stderr, flush=True)
  if bad:
    mngr.reload()
  return int(step)


def _quiet_failed_reads():
  """Keeps the leftovers of a failed orbax restore from printing the error again,
  possibly at exit, once per array: its read coroutines, collected with their copy of
  the error ('Exception ignored in: <coroutine object _read_array_index_and_device_put
  ...>' and a TensorStore spec), and TensorStore's later answers to the event loop
  that the failed restore closed ('RuntimeError: Event loop is closed'). The error
  itself is named by restore_newest; other unraisable errors reach the previous hook.
  orbax's reading tasks, collected with the error unretrieved, are asyncio log records
  instead: `_drop_failed_deserialize` filters those.
  """
  old = sys.unraisablehook
  if getattr(old, "quiets_failed_reads", False):
    return

  def hook(u):
    name = getattr(getattr(u.object, "cr_code", None), "co_name", "")
    closed = (isinstance(u.exc_value, RuntimeError)
              and str(u.exc_value) == "Event loop is closed")
    if not (name.startswith("_read_array") or closed):
      old(u)
  hook.quiets_failed_reads = True
  sys.unraisablehook = hook
  logging.getLogger("asyncio").addFilter(_drop_failed_deserialize)


def _drop_failed_deserialize(record) -> bool:
  """asyncio's 'Task exception was never retrieved' for orbax's array-reading tasks
  of a failed restore (the same error once per array, logged when the task is
  collected, possibly at exit): dropped, as the coroutines above; any other record
  of the asyncio logger passes."""
  msg = record.getMessage()
  return not ("never retrieved" in msg and "async_deserialize" in msg)


def _set_aside(folder: str, step: int) -> str:
  """Moves folder/<step> to <workdir>/unreadable_checkpoints/<step>[.N]; the path."""
  dest_dir = os.path.join(os.path.dirname(folder), UNREADABLE)
  os.makedirs(dest_dir, exist_ok=True)
  dest, n = os.path.join(dest_dir, str(step)), 1
  while os.path.exists(dest):
    n += 1
    dest = os.path.join(dest_dir, f"{step}.{n}")
  os.rename(os.path.join(folder, str(step)), dest)
  return dest


def check_workdir(workdir):
  """Refuses a workdir that is a file (TrainError)."""
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise TrainError(f"workdir {workdir} is a file, not a directory: use another --workdir")


class WorkdirLock:
  """One train.py per workdir: an exclusive flock on workdir/.lock, held until
  `release` (or the `with` block's end); a second holder is refused with a TrainError
  naming the process, its host and since when it runs.

  flock is released by the kernel when its process dies, however it dies (kill -9
  included), so a killed run leaves no stale lock; the file stays, naming its last
  holder. Limits: on NFS (Linux clients since 2.6.12) flock is a lock of the server,
  seen by every host; some file systems (Lustre without its `flock` mount option,
  object-store FUSE mounts) refuse it: then a warning says that a second writer would
  not be refused, and the run goes on. A multi-process job locks in process 0 only.
  A run that created its workdir and is refused before writing anything to it (no
  data, a bad config) removes the workdir again on release: no empty workdir holding
  only a lock is left behind.
  """

  NAME = ".lock"

  def __init__(self, workdir):
    self.workdir, self.path, self.fd = workdir, os.path.join(workdir, self.NAME), None

  def acquire(self):
    check_workdir(self.workdir)
    self.created = not os.path.exists(self.workdir)
    os.makedirs(self.workdir, exist_ok=True)
    fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      holder = os.pread(fd, 4096, 0).decode(errors="replace")
      os.close(fd)
      raise TrainError(f"workdir {self.workdir} is in use by {self._describe(holder)}; "
                       "wait for that run to end (or stop it), or use another "
                       "--workdir") from None
    except OSError as e:          # the file system has no flock
      os.close(fd)
      print(f"warning: cannot lock {self.path} ({e.strerror}): a second train.py on "
            "this workdir would not be refused", file=sys.stderr, flush=True)
      return self
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    me = {"pid": os.getpid(), "host": socket.gethostname(), "since": now,
          "command": " ".join([os.path.basename(sys.argv[0] or "python")]
                              + sys.argv[1:])[:200]}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
    self.fd = fd
    return self

  @staticmethod
  def _describe(text: str) -> str:
    try:
      h = json.loads(text)
      return (f"process {h['pid']} on host {h['host']} since {h['since']} "
              f"({h['command']})")
    except (ValueError, KeyError, TypeError):   # it has not written its name yet
      return "another process (which has just started)"

  def release(self):
    if self.fd is not None:
      if self.created and os.listdir(self.workdir) == [self.NAME]:
        os.remove(self.path)          # while still held: nobody else holds this file
        os.rmdir(self.workdir)
      fcntl.flock(self.fd, fcntl.LOCK_UN)
      os.close(self.fd)
      self.fd = None

  __enter__ = acquire

  def __exit__(self, *exc):
    self.release()


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


def make_state(config, mcfg: ModelConfig, mesh=None, fresh: bool = True):
  """(model, opt): the model of `make_model` and its nnx.Optimizer, on `mesh` if given.

  A model built from its seed alone is created in its shardings
  (`parallel.init_sharded`: one jit whose outputs are laid out by the FSDP and
  tensor rules), so no device ever holds more than its share of the parameters and
  optimizer state. One that reads weights first (init_from on a fresh run, LoRA's
  base and adapters) is built whole, then sharded (`parallel.shard`). A mesh whose
  tensor axis does not split the heads is refused (`parallel.check_tensor`).
  """
  if mesh is not None:
    parallel.check_tensor(mcfg, mesh)
  tx, wrt = make_optimizer(config), trained_part(config)
  lora = config.get("lora")
  reads = bool((fresh and config.get("init_from")) or (lora and lora.rank))
  if mesh is not None and not reads:
    def make():
      model = make_model(config, mcfg, fresh)
      return model, nnx.Optimizer(model, tx, wrt=wrt)
    return parallel.init_sharded(make, mesh, mcfg.kv_heads)
  model = make_model(config, mcfg, fresh)
  if mesh is not None:
    parallel.shard(model, mesh, mcfg.kv_heads)
  opt = nnx.Optimizer(model, tx, wrt=wrt)
  if mesh is not None:
    parallel.shard(opt, mesh, mcfg.kv_heads)
  return model, opt


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
  """(config, model in eval mode, step) of a train.py workdir's checkpoint, or of a
  shipped pretrained model (trainer/pretrained.py): `workdir` may be a shipped model's
  folder or the bare name of one under pretrained/ (e.g. "mnist14_linear"), its
  checksum checked; its step is the one it was trained for.

  mesh: a parallel.make_mesh mesh to restore onto (parameters laid out by the FSDP
  and tensor rules of its axes, created there: `make_state`); None: the default
  device. Any mesh reads a checkpoint
  written on any other.
  """
  shipped = pretrained.find(workdir)
  if shipped is not None:
    return _load_shipped(shipped, step, mesh, config_overrides)
  path = os.path.join(workdir, "config.json")
  if not os.path.isdir(workdir):
    known = ", ".join(pretrained.names()) or "none"
    raise TrainError(f"workdir {workdir} is not a directory" if os.path.exists(workdir)
                     else f"workdir {workdir} does not exist (nor is it a shipped "
                     f"model's name; those in {pretrained.ROOT}: {known})")
  if not os.path.exists(path):
    raise TrainError(f"{path} not found: {workdir} is not a train.py workdir")
  try:
    saved = json.load(open(path))
  except ValueError as e:
    raise TrainError(f"{path} is not a train.py config record ({e!r})") from None
  config, mcfg = _saved_model(saved, path, config_overrides)
  mngr = checkpoint_manager(workdir, config)
  steps = mngr.all_steps()
  if not steps:
    raise TrainError(f"no checkpoint in {workdir}/checkpoints: the run saved none yet")
  if step is not None and step not in steps:
    raise TrainError(f"no checkpoint of step {step} in {workdir}/checkpoints; "
                     f"there are {sorted(steps)}")
  model, opt = make_state(config, mcfg, mesh, fresh=False)
  if step is None:                 # the newest readable one; a reader moves nothing
    step = restore_newest(mngr, model, opt, saved_part(config), set_aside=False)
  else:
    try:
      restore(mngr, step, model, opt, saved_part(config))
    except Exception as e:  # noqa: BLE001 - any read failure
      raise TrainError(f"checkpoint of step {step} in {workdir}/checkpoints cannot be "
                       f"read ({_why(e)})") from None
  mngr.close()
  model.eval()
  return config, model, int(step)


def _saved_model(saved: dict, path, overrides: dict):
  """(config, ModelConfig) of a config record ({"config", "model"}: workdir/config.json
  or a shipped model's pretrained.json), with config `overrides` and the execution
  fields applied."""
  import ml_collections
  try:
    config = ml_collections.ConfigDict(saved["config"])
    model = dict(saved["model"])
  except (KeyError, TypeError) as e:
    raise TrainError(f"{path} is not a train.py config record ({e!r})") from None
  config.update(overrides)
  model.pop("lora", None)
  return config, ModelConfig.from_dict({**model, **{
      k: config[k] for k in EXECUTION_FIELDS if config.get(k)}})


def _load_shipped(folder, step, mesh, overrides):
  """load_model of a shipped model's folder: the weights read and checksum-checked
  (trainer/pretrained.py), the model built from its record and filled."""
  meta, arrays = pretrained.read(folder)
  config, mcfg = _saved_model(meta, os.path.join(folder, pretrained.META), overrides)
  if step is not None and int(step) != int(meta["steps"]):
    raise TrainError(f"the shipped model {folder} holds step {meta['steps']} only, "
                     f"not {step}")
  model = make_model(config, mcfg, fresh=False)
  pretrained.fill(model, arrays, where=str(os.path.join(folder, pretrained.WEIGHTS)))
  if mesh is not None:
    parallel.shard(model, mesh)
  model.eval()
  return config, model, int(meta["steps"])


# Defaults of model fields added after a workdir was written (e.g. remat).
_DEFAULT = {f.name: f.default for f in dataclasses.fields(ModelConfig)}


def _recorded(mcfg: ModelConfig, config) -> dict:
  """What config.json records of a run: its model and its whole config."""
  mine = {"model": dataclasses.asdict(mcfg), "config": json.loads(config.to_json())}
  if config.get("lora"):     # adapters change the checkpoint's structure too
    mine["model"]["lora"] = config.lora.to_dict()
  mine["model"]["attention_options"] = {k: dict(v) for k, v in mcfg.attention_options.items()}
  return mine


def _flat(d, prefix=""):
  out = {}
  for k, v in d.items():
    if isinstance(v, dict) and v:
      out.update(_flat(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def _write_json(path: str, obj) -> None:
  """Writes obj as JSON to path atomically (a temporary file, then os.replace): the
  other processes of a multi-process job read config.json while process 0 writes
  it, and must see the whole old file or the whole new one, never a part.

  Args:
    path: the file to (re)write.
    obj: what json.dump writes (indented, keys sorted).
  """
  tmp = f"{path}.tmp.{os.getpid()}"
  with open(tmp, "w") as f:
    json.dump(obj, f, indent=1, sort_keys=True)
  os.replace(tmp, path)


def check_same_model(workdir, mcfg: ModelConfig, config, write=True) -> dict:
  """Writes workdir/config.json on a new workdir (if `write`); refuses a workdir made
  for another model (TrainError naming the first differing model field), and a
  workdir that is a file. Execution fields (EXECUTION_FIELDS: dtype, remat) and the
  rest of the config (learning rate, steps, ...) may differ: returns those changes,
  {dotted key: (recorded value, this run's value)} ({} when none), for
  `record_changes` to say and keep once the resumed step is known."""
  check_workdir(workdir)
  path = os.path.join(workdir, "config.json")
  mine = _recorded(mcfg, config)
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
    before = {**_flat(old.get("config", {})),
              **{f"model.{k}": old["model"].get(k) for k in EXECUTION_FIELDS}}
    now = {**_flat(mine["config"]),
           **{f"model.{k}": mine["model"].get(k) for k in EXECUTION_FIELDS}}
    return {k: (before.get(k), now.get(k)) for k in sorted(set(before) | set(now))
            if before.get(k) != now.get(k)}
  if write:
    os.makedirs(workdir, exist_ok=True)
    _write_json(path, mine)
  return {}


HISTORY = "config_history.jsonl"


def record_changes(workdir, mcfg: ModelConfig, config, changes: dict, step: int) -> str:
  """A run resumes at `step` under `changes` (check_same_model's): appends them to
  workdir/config_history.jsonl, rewrites config.json with this run's values, and marks
  what they invalidate (each eval.json under the workdir gets "stale": why, until
  eval.py writes it again). Returns the one line to print."""
  when = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
  with open(os.path.join(workdir, HISTORY), "a") as f:
    f.write(json.dumps({"step": step, "time": when,
                        "changes": {k: list(v) for k, v in changes.items()}}) + "\n")
  _write_json(os.path.join(workdir, "config.json"), _recorded(mcfg, config))
  stale = []
  for root, _, files in os.walk(workdir):
    if "eval.json" in files and root.count(os.sep) - workdir.rstrip(os.sep).count(os.sep) <= 2:
      p = os.path.join(root, "eval.json")
      try:
        ev = json.load(open(p))
      except (OSError, ValueError):
        continue
      ev["stale"] = (f"the run resumed at step {step} under changed settings "
                     f"({', '.join(changes)}); run eval.py again")
      with open(p, "w") as f:
        json.dump(ev, f, indent=1)
      stale.append(os.path.relpath(p, workdir))
  shown = [f"{k} {v[0]!r} -> {v[1]!r}" for k, v in list(changes.items())[:6]]
  more = f" and {len(changes) - 6} more" if len(changes) > 6 else ""
  return (f"resuming {workdir} at step {step} under changed settings: "
          f"{', '.join(shown)}{more} (kept in {HISTORY}; config.json now holds this "
          f"run's values" + (f"; marked stale: {', '.join(stale)}" if stale else "") + ")")


