"""Scaling out on JAX's own SPMD machinery: the device mesh, shardings, multi-host start.

One mesh with three named axes, built from the config (`--config.mesh.*`):

  data  the batch is split over it (plain data parallelism);
  fsdp  the batch is split over it too, and so are the parameters and the optimizer
        state (ZeRO-3 / FSDP): each array is split along its largest dimension that
        the fsdp size divides (arrays with no such dimension are replicated); XLA
        inserts the all-gathers before use and the reduce-scatters of the gradients;
  seq   the sequence (time) axis of the batch, and so of every activation, is split
        over it: context parallelism. `attention.ring` reads this mesh and passes K/V
        shards round the seq axis; other variants still compute the right thing,
        with whatever gathers XLA inserts.

The batch (B, T) is laid out as P(("data", "fsdp"), "seq"). Nothing here talks to
other devices itself: shardings go to `jax.device_put` and
`jax.lax.with_sharding_constraint`, and jit (GSPMD) partitions the program.

Multi-host: `initialize(config)` calls `jax.distributed.initialize` with the
coordinator address, process count and process id from `config.distributed` or the
ATTNLAB_COORDINATOR_ADDRESS / ATTNLAB_NUM_PROCESSES / ATTNLAB_PROCESS_ID environment,
and `config.distributed.heartbeat_timeout_s` (how long the others wait for a process
that died); CPU processes talk through gloo. The mesh then spans every process's
devices. Every process computes the same global batch (a pure function of (seed,
step)) and hands only its own rows to `jax.make_array_from_process_local_data`
(`put_batch`, `local_rows`). `python -m trainer.launch` starts such a job on one
machine (trainer/launch.py).
"""
from __future__ import annotations

import math
import os
import sys

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from attention.ring import current_mesh
from models import ConfigError

AXES = ("data", "fsdp", "seq")
BATCH = ("data", "fsdp")       # the mesh axes the batch axis is split over
ENV = {"coordinator_address": "ATTNLAB_COORDINATOR_ADDRESS",
       "num_processes": "ATTNLAB_NUM_PROCESSES",
       "process_id": "ATTNLAB_PROCESS_ID"}


HEARTBEAT_TIMEOUT_S = 100    # jax.distributed's own default


def _err(key, why):
  return ConfigError(f"config '{key}': {why}")


# ---- multi-host ------------------------------------------------------------------------

def distributed_args(config) -> dict | None:
  """The keyword arguments of `jax.distributed.initialize`, or None for one process.

  Args:
    config: a run config; each of coordinator_address, num_processes, process_id
      comes from config.distributed, else from its ATTNLAB_* environment variable;
      heartbeat_timeout_s (default 100) from config.distributed only.

  Raises ConfigError naming the key when they do not describe a valid process.
  """
  cfg = config.get("distributed") or {}
  addr = cfg.get("coordinator_address") or os.environ.get(ENV["coordinator_address"], "")
  got = {}
  for key, unset in (("num_processes", 0), ("process_id", -1)):
    v = cfg.get(key, unset)
    if v == unset and os.environ.get(ENV[key], "") != "":
      try:
        v = int(os.environ[ENV[key]])
      except ValueError:
        raise _err(f"distributed.{key}", f"${ENV[key]}={os.environ[ENV[key]]!r} is not "
                   "an int") from None
    got[key] = v
  num, pid = got["num_processes"], got["process_id"]
  if not addr and num in (0, 1):
    return None
  if not addr:
    raise _err("distributed.coordinator_address",
               f"{num} processes need the host:port of process 0 (or "
               f"${ENV['coordinator_address']})")
  if num < 1:
    raise _err("distributed.num_processes",
               f"a coordinator ({addr}) is set, so the number of processes must be given "
               f"(or ${ENV['num_processes']}), got {num}")
  if not 0 <= pid < num:
    raise _err("distributed.process_id",
               f"must be in [0, {num}) (or ${ENV['process_id']}), got {pid}")
  beat = cfg.get("heartbeat_timeout_s", HEARTBEAT_TIMEOUT_S)
  if isinstance(beat, bool) or not isinstance(beat, int) or beat < 1:
    raise _err("distributed.heartbeat_timeout_s",
               f"must be a whole number of seconds >= 1, got {beat!r}")
  return {"coordinator_address": addr, "num_processes": num, "process_id": pid,
          "heartbeat_timeout_seconds": beat}


def initialize(config) -> bool:
  """Joins the multi-process job the config describes; returns whether it is one.

  Args:
    config: the run's config; `config.distributed` (and the ATTNLAB_* environment,
      see `distributed_args`) says which job, `config.distributed.heartbeat_timeout_s`
      how many seconds without a heartbeat make a process count as lost (the others
      then end, with the coordinator's line naming it).

  Call it before anything touches a device. Does nothing for one process, or when
  this process has already joined. CPU processes use gloo collectives (jax's
  `jax_cpu_collectives_implementation`, set to gloo if it is "none").
  """
  args = distributed_args(config)
  if args is None:
    return False
  if not jax.distributed.is_initialized():
    if getattr(jax.config, "jax_cpu_collectives_implementation", "gloo") in (
        None, "", "none"):
      jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(**args)
    if args["num_processes"] > 1:
      sys.excepthook = _exit_at_once(sys.excepthook)
  return True


def _exit_at_once(hook):
  """sys.excepthook for a process of a multi-process job: the traceback as `hook`
  prints it, then exit status 1 at once (os._exit). A normal interpreter exit would
  first wait for the others in jax.distributed's shutdown, while they wait for this
  process in their next collective: the job would hang (minutes) instead of ending."""
  def excepthook(*exc):
    hook(*exc)
    leave(1)
  return excepthook


def leave(status: int) -> None:
  """Ends this process with `status` at once (after flushing stdout and stderr) if it
  is one of a multi-process job and status is not 0; otherwise returns. The launcher
  (or the scheduler) sees the status, and the others end by the heartbeat timeout.

  Args:
    status: the exit status; 0 returns (a clean exit waits for the others).
  """
  if status and "jax" in sys.modules and jax.distributed.is_initialized() \
      and jax.process_count() > 1:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def is_primary() -> bool:
  """Whether this is process 0, the one that writes logs and metrics."""
  return jax.process_index() == 0


# ---- the mesh --------------------------------------------------------------------------

def mesh_shape(mesh_cfg, n_devices: int) -> tuple[int, int, int]:
  """(data, fsdp, seq) for n_devices; data 0 or -1 takes the devices the others leave.

  Raises ConfigError naming the key when the product is not n_devices.
  """
  get = (lambda k, d: mesh_cfg.get(k, d)) if mesh_cfg is not None else (lambda k, d: d)
  sizes = {k: get(k, 0 if k == "data" else 1) for k in AXES}
  for k, v in sizes.items():
    ok = isinstance(v, int) and not isinstance(v, bool) and (
        v >= 1 or (k == "data" and v in (0, -1)))
    if not ok:
      also = " (or 0 / -1: all the devices the other axes leave)" if k == "data" else ""
      raise _err(f"mesh.{k}", f"must be a positive int{also}, got {v!r}")
  rest = sizes["fsdp"] * sizes["seq"]
  if sizes["data"] in (0, -1):
    if n_devices % rest:
      raise _err("mesh.fsdp", f"mesh.fsdp * mesh.seq = {rest} does not divide the "
                 f"{n_devices} devices")
    sizes["data"] = n_devices // rest
  if sizes["data"] * rest != n_devices:
    raise _err("mesh.data", f"mesh.data * mesh.fsdp * mesh.seq = {sizes['data']} * "
               f"{sizes['fsdp']} * {sizes['seq']} = {sizes['data'] * rest} must equal the "
               f"{n_devices} devices (set mesh.data=0 to use all that are left)")
  return sizes["data"], sizes["fsdp"], sizes["seq"]


def make_mesh(mesh_cfg=None, devices=None) -> Mesh:
  """The ("data", "fsdp", "seq") mesh over `devices` (default: every device of every
  process). Axes are Auto: jit's partitioner decides what is not constrained."""
  devices = jax.devices() if devices is None else list(devices)
  shape = mesh_shape(mesh_cfg, len(devices))
  from jax.experimental import mesh_utils
  return Mesh(mesh_utils.create_device_mesh(shape, devices), AXES)


def use_mesh(mesh):
  """Context manager that makes `mesh` current (`jax.set_mesh`, older `use_mesh`)."""
  setter = getattr(jax, "set_mesh", None) or getattr(jax.sharding, "use_mesh")
  return setter(mesh)


def batch_divisor(mesh) -> int:
  """How many ways the batch axis is split: data * fsdp."""
  return math.prod(dict(mesh.shape)[a] for a in BATCH)


# ---- shardings ------------------------------------------------------------------------

def param_spec(shape, fsdp: int) -> P:
  """FSDP rule: the largest dimension of `shape` that fsdp divides goes on 'fsdp' (the
  first such if tied); P() (replicated) when fsdp is 1 or no dimension qualifies."""
  dims = [i for i, n in enumerate(shape) if fsdp > 1 and n % fsdp == 0]
  if not dims:
    return P()
  i = max(dims, key=lambda i: (shape[i], -i))
  return P(*([None] * i), "fsdp")


def _fsdp_size(mesh) -> int:
  return dict(mesh.shape).get("fsdp", 1)


def state_shardings(tree, mesh):
  """NamedShardings for every array of `tree` (model or optimizer state) by `param_spec`;
  optimizer moments have their parameter's shape, so they follow the parameters."""
  f = _fsdp_size(mesh)
  return jax.tree.map(lambda x: NamedSharding(mesh, param_spec(np.shape(x), f)), tree)


def _put(x, sharding):
  """x (the same value on every process: parameters and optimizer state start from
  the config's seed) as a global array laid out by `sharding`, each process copying
  only its own devices' slices (`jax.make_array_from_callback`). Not
  `jax.device_put`: across processes it takes only host values and uncommitted
  arrays, and checks that every process holds the same value by gathering each
  array from all of them. PRNG key arrays go as their uint32 data."""
  if not isinstance(x, (jax.Array, np.ndarray)):
    return x
  if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
    return jax.random.wrap_key_data(_put(jax.random.key_data(x), sharding),
                                    impl=jax.random.key_impl(x))
  if isinstance(x, jax.Array) and not x.is_fully_addressable:
    return jax.device_put(x, sharding)         # already global: a reshard
  host = np.asarray(x)
  return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])


def shard(obj, mesh) -> None:
  """Moves an NNX object's state (model or nnx.Optimizer) onto `mesh`, in place.

  Args:
    obj: an NNX model or optimizer.
    mesh: the mesh (parallel.make_mesh) whose FSDP rule lays out each array.
  """
  from flax import nnx
  state = nnx.state(obj)
  if jax.process_count() > 1:
    nnx.update(obj, jax.tree.map(_put, state, state_shardings(state, mesh)))
  else:
    nnx.update(obj, jax.device_put(state, state_shardings(state, mesh)))


def constrain(obj) -> None:
  """Inside jit: keeps an NNX object's updated state on the FSDP layout of the mesh in
  context (`use_mesh`); outside a mesh it does nothing."""
  mesh = current_mesh()
  if mesh is None:
    return
  from flax import nnx
  f = _fsdp_size(mesh)
  state = nnx.state(obj)
  leaves, tree = jax.tree.flatten(state)
  leaves = [jax.lax.with_sharding_constraint(x, param_spec(x.shape, f)) for x in leaves]
  nnx.update(obj, jax.tree.unflatten(tree, leaves))


def gathered_call(fn, model, *args):
  """fn(model, *args) with the model's parameters all-gathered where they are used.

  ZeRO-3: inside jit, each nnx.Param is constrained to be replicated, so XLA inserts
  an all-gather in front of its uses (and reduces its gradient back onto the FSDP
  layout that `constrain` keeps). Without it the partitioner may instead reshard the
  activations to fit the split weights. The other state (dropout RNG counters)
  flows back into `model`. Without a mesh, or with fsdp = 1, it is fn(model, *args).
  """
  mesh = current_mesh()
  if mesh is None or _fsdp_size(mesh) == 1:
    return fn(model, *args)
  from flax import nnx
  graph, params, rest = nnx.split(model, nnx.Param, ...)
  params = jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, P()), params)
  full = nnx.merge(graph, params, rest)
  out = fn(full, *args)
  nnx.update(model, nnx.state(full, nnx.Not(nnx.Param)))
  return out


def batch_sharding(mesh, ndim: int = 2) -> NamedSharding:
  """Batch arrays (B, T, ...): B over ("data", "fsdp"), T over "seq"."""
  return NamedSharding(mesh, P(BATCH, "seq", *([None] * (ndim - 2))))


def local_rows(mesh, n_rows: int) -> slice | None:
  """The rows of a global batch of `n_rows` that this process's devices hold under
  `batch_sharding`: one contiguous slice, or None when they are not contiguous (a
  mesh whose device order interleaves the processes along the batch axis).

  Args:
    mesh: the training mesh (parallel.make_mesh).
    n_rows: the global batch size (a multiple of data * fsdp).
  """
  shape = (n_rows, dict(mesh.shape).get("seq", 1))
  spans = {(i[0].start or 0, n_rows if i[0].stop is None else i[0].stop)
           for i in batch_sharding(mesh).addressable_devices_indices_map(shape).values()}
  lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
  return slice(lo, hi) if sum(b - a for a, b in spans) == hi - lo else None


def put_batch(batch: dict, mesh) -> dict:
  """A dict of numpy arrays (the same global batch on every process) as global
  jax.Arrays laid out by `batch_sharding`.

  Each process passes only its own rows (`local_rows`) to
  `jax.make_array_from_process_local_data`, which copies each to its devices; with
  one process that is the whole batch. A mesh whose processes do not hold one
  contiguous block of rows each falls back to `jax.make_array_from_callback` over the
  global batch (the same arrays).

  Args:
    batch: {name: numpy array (B, T, ...)}, the global batch of this step.
    mesh: the training mesh.
  """
  out = {}
  for k, x in batch.items():
    x = np.asarray(x)
    sharding = batch_sharding(mesh, x.ndim)
    rows = local_rows(mesh, x.shape[0]) if jax.process_count() > 1 else slice(None)
    if rows is None:
      out[k] = jax.make_array_from_callback(x.shape, sharding, lambda idx, x=x: x[idx])
    else:
      out[k] = jax.make_array_from_process_local_data(sharding, x[rows], x.shape)
  return out
