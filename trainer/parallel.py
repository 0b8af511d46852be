"""Scaling out on JAX's own SPMD machinery: the device mesh, shardings, multi-host start.

One mesh with four named axes, built from the config (`--config.mesh.*`):

  data  the batch is split over it (plain data parallelism);
  fsdp  the batch is split over it too, and so are the parameters and the optimizer
        state (ZeRO-3 / FSDP): each array is split along its largest dimension that
        the fsdp size divides (arrays with no such dimension are replicated); XLA
        inserts the all-gathers before use and the reduce-scatters of the gradients;
  seq   the sequence (time) axis of the batch, and so of every activation, is split
        over it: context parallelism. `attention.ring` reads this mesh and passes K/V
        shards round the seq axis; other variants still compute the right thing,
        with whatever gathers XLA inserts.
  tensor  the heads are split over it (Megatron-style tensor parallelism): the q, k,
        v (and out-gate) projections by their output columns, the output projection
        o by its input rows, the FFN's fc1 by columns and fc2 by rows
        (`param_spec`'s TENSOR_COLUMNS / TENSOR_ROWS, read from each parameter's
        path); k and v only when the tensor size divides the KV heads (GQA/MQA with
        fewer KV heads than tensor devices keeps them whole on every device).
        Nothing in the model names the axis: XLA propagates the head split from the
        weights to the activations.

Parameters and optimizer state are created in their shardings (`init_sharded`: the
initialiser is one jit whose outputs are laid out by these rules), so no device ever
holds more than its share, also at start-up.

The batch (B, T) is laid out as P(("data", "fsdp"), "seq"). Nothing here talks to
other devices itself: shardings go to `jax.device_put` and
`jax.lax.with_sharding_constraint`, and jit (GSPMD) partitions the program.

Multi-host: `initialize(config)` calls `jax.distributed.initialize` with the
coordinator address, process count and process id from `config.distributed` or the
ATTNLAB_COORDINATOR_ADDRESS / ATTNLAB_NUM_PROCESSES / ATTNLAB_PROCESS_ID environment,
and `config.distributed.heartbeat_timeout_s` (how long the others wait for a process
that died); CPU processes talk through gloo. The mesh then spans every process's
devices. Each process reads only its own rows of each train batch (`local_rows`, set
as data.pipeline.Task.rows by the training loop: the step's global example indices
are a pure function of (seed, step), so the processes agree without talking) and
hands them to `jax.make_array_from_process_local_data` (`put_batch`); so do the eval
batches (data.pipeline.Task.eval_rows, set by trainer.step.evaluate). `python -m
trainer.launch` starts such a job on one machine (trainer/launch.py).
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

AXES = ("data", "fsdp", "seq", "tensor")
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

def mesh_shape(mesh_cfg, n_devices: int) -> tuple[int, int, int, int]:
  """(data, fsdp, seq, tensor) for n_devices; data 0 or -1 takes the devices the others
  leave.

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
  rest = sizes["fsdp"] * sizes["seq"] * sizes["tensor"]
  if sizes["data"] in (0, -1):
    if n_devices % rest:
      raise _err("mesh.fsdp", f"mesh.fsdp * mesh.seq * mesh.tensor = {rest} does not "
                 f"divide the {n_devices} devices")
    sizes["data"] = n_devices // rest
  if sizes["data"] * rest != n_devices:
    raise _err("mesh.data", f"mesh.data * mesh.fsdp * mesh.seq * mesh.tensor = "
               f"{sizes['data']} * {sizes['fsdp']} * {sizes['seq']} * {sizes['tensor']} "
               f"= {sizes['data'] * rest} must equal the {n_devices} devices (set "
               "mesh.data=0 to use all that are left)")
  return tuple(sizes[k] for k in AXES)


def make_mesh(mesh_cfg=None, devices=None) -> Mesh:
  """The ("data", "fsdp", "seq", "tensor") mesh over `devices` (default: every device
  of every process). Axes are Auto: jit's partitioner decides what is not constrained."""
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

# Megatron's split of the projections over 'tensor', by the module that holds the
# nnx.Linear (models/layers.py's attribute names): column-parallel layers split their
# kernel (in, out) and bias (out,) on the output, row-parallel ones their kernel on the
# input (the bias, added after the sum over devices, stays whole).
TENSOR_COLUMNS = ("q", "k", "v", "g", "fc1")      # attention's q, k, v, out gate; FFN in
TENSOR_ROWS = ("o", "fc2")                        # attention's output; FFN out
KV = ("k", "v")                                   # split only as far as the KV heads go


def tensor_dim(path, shape, tensor: int, kv_heads: int = 0) -> int | None:
  """The dimension of a parameter (or optimizer moment) that 'tensor' splits, or None.

  Args:
    path: its path in the state, e.g. ('decoder', 'blocks', 0, 'attn', 'q', 'kernel')
      or the optimizer's ('opt_state', 0, 'mu', 'decoder', ..., 'kernel'): the last two
      entries name the layer and the array.
    shape: its shape.
    tensor: the size of the mesh's tensor axis.
    kv_heads: the model's KV heads; k and v split only when tensor divides them
      (0: unknown, kept whole).
  """
  names = [str(getattr(k, "key", getattr(k, "name", k))) for k in path]
  names = [n for n in names if n != "value"]
  if tensor <= 1 or len(names) < 2:
    return None
  layer, leaf = names[-2], names[-1]
  if layer in KV and (not kv_heads or kv_heads % tensor):
    return None
  if leaf == "kernel" and len(shape) == 2:
    dim = 1 if layer in TENSOR_COLUMNS else 0 if layer in TENSOR_ROWS else None
  elif leaf == "bias" and len(shape) == 1 and layer in TENSOR_COLUMNS:
    dim = 0
  else:
    dim = None
  return dim if dim is not None and shape[dim] % tensor == 0 else None


def param_spec(shape, fsdp: int, path=(), tensor: int = 1, kv_heads: int = 0) -> P:
  """The layout of a parameter (or optimizer moment) of `shape` at `path`.

  Tensor rule first (`tensor_dim`: Megatron's split of the projections); then FSDP:
  the largest other dimension that fsdp divides goes on 'fsdp' (the first such if
  tied). P() (replicated) when neither applies.
  """
  spec = [None] * len(shape)
  t = tensor_dim(path, shape, tensor, kv_heads)
  if t is not None:
    spec[t] = "tensor"
  dims = [i for i, n in enumerate(shape) if fsdp > 1 and n % fsdp == 0 and i != t]
  if dims:
    spec[max(dims, key=lambda i: (shape[i], -i))] = "fsdp"
  while spec and spec[-1] is None:
    spec.pop()
  return P(*spec)


def _fsdp_size(mesh) -> int:
  return dict(mesh.shape).get("fsdp", 1)


def _tensor_size(mesh) -> int:
  return dict(mesh.shape).get("tensor", 1)


def kv_heads(obj) -> int:
  """The KV heads of an NNX model (its ModelConfig `cfg`), 0 if it has none."""
  cfg = getattr(obj, "cfg", None)
  return int(getattr(cfg, "kv_heads", 0) or 0)


def state_shardings(tree, mesh, kv: int = 0):
  """NamedShardings for every array of `tree` (model or optimizer state, or their
  abstract shapes) by `param_spec`; optimizer moments have their parameter's shape and
  the same path ending, so they follow the parameters.

  Args:
    tree: an nnx.State (or any pytree whose paths end in the layer and array names).
    mesh: the mesh whose fsdp and tensor axes lay them out.
    kv: the model's KV heads (`kv_heads`; 0: k and v are not split over tensor).
  """
  f, t = _fsdp_size(mesh), _tensor_size(mesh)
  return jax.tree_util.tree_map_with_path(
      lambda path, x: NamedSharding(mesh, param_spec(np.shape(x), f, path, t, kv)), tree)


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


def shard(obj, mesh, kv: int | None = None) -> None:
  """Moves an NNX object's state (model or nnx.Optimizer) onto `mesh`, in place.

  For objects that exist whole already (a model read from a shipped file, LoRA's
  base); a run's fresh state is created in place by `init_sharded` instead.

  Args:
    obj: an NNX model or optimizer.
    mesh: the mesh (parallel.make_mesh) whose FSDP and tensor rules lay out each array.
    kv: the model's KV heads (None: `kv_heads(obj)`, the model's own).
  """
  from flax import nnx
  state = nnx.state(obj)
  shardings = state_shardings(state, mesh, kv_heads(obj) if kv is None else kv)
  if jax.process_count() > 1:
    nnx.update(obj, jax.tree.map(_put, state, shardings))
  else:
    nnx.update(obj, jax.device_put(state, shardings))


def sharded_init(make, mesh, kv: int = 0):
  """(graph, init, shardings): `make` as one jitted function whose outputs are laid
  out on `mesh`, so that each device creates only its own shards of every array.

  Args:
    make: () -> an NNX object (or tuple of them, e.g. (model, optimizer)), a pure
      function of nothing (its seeds inside): it is traced twice, once for the shapes
      (`nnx.eval_shape`, no memory), once for the jitted initialiser.
    mesh: the mesh whose rules (`state_shardings`) lay out the state.
    kv: the model's KV heads (`kv_heads`).

  init() returns the state (an nnx.State); nnx.merge(graph, init()) is the object.
  `init.lower().compile().memory_analysis()` is XLA's per-device plan of it.
  """
  from flax import nnx
  graph, abstract = nnx.split(nnx.eval_shape(make))
  shardings = state_shardings(abstract, mesh, kv)
  init = jax.jit(lambda: nnx.split(make())[1], out_shardings=shardings)
  return graph, init, shardings


def init_sharded(make, mesh, kv: int = 0):
  """`make()` created directly in its shardings on `mesh` (`sharded_init`): parameters
  and optimizer state are never whole on one device. The values are `make()`'s.
  """
  from flax import nnx
  graph, init, _ = sharded_init(make, mesh, kv)
  with use_mesh(mesh):
    state = init()
  return nnx.merge(graph, state)


def constrain(obj, kv: int | None = None) -> None:
  """Inside jit: keeps an NNX object's updated state on the FSDP and tensor layout of
  the mesh in context (`use_mesh`); outside a mesh it does nothing.

  kv: the model's KV heads (None: `kv_heads(obj)`; pass the model's for its optimizer).
  """
  mesh = current_mesh()
  if mesh is None:
    return
  from flax import nnx
  f, t = _fsdp_size(mesh), _tensor_size(mesh)
  kv = kv_heads(obj) if kv is None else kv
  state = nnx.state(obj)
  leaves, tree = jax.tree_util.tree_flatten_with_path(state)
  leaves = [jax.lax.with_sharding_constraint(x, param_spec(x.shape, f, p, t, kv))
            for p, x in leaves]
  nnx.update(obj, jax.tree.unflatten(tree, leaves))


def _without_fsdp(spec: P) -> P:
  return P(*(None if a == "fsdp" else a for a in spec))


def gathered_call(fn, model, *args):
  """fn(model, *args) with the model's parameters all-gathered over fsdp where they
  are used.

  ZeRO-3: inside jit, each nnx.Param is constrained to its layout without the fsdp
  axis (replicated, or split over tensor only), so XLA inserts an all-gather in front
  of its uses (and reduces its gradient back onto the FSDP layout that `constrain`
  keeps). Without it the partitioner may instead reshard the activations to fit the
  split weights. The other state (dropout RNG counters) flows back into `model`.
  Without a mesh, or with fsdp = tensor = 1, it is fn(model, *args).
  """
  mesh = current_mesh()
  if mesh is None or (_fsdp_size(mesh) == 1 and _tensor_size(mesh) == 1):
    return fn(model, *args)
  from flax import nnx
  f, t, kv = _fsdp_size(mesh), _tensor_size(mesh), kv_heads(model)
  graph, params, rest = nnx.split(model, nnx.Param, ...)
  params = jax.tree_util.tree_map_with_path(
      lambda p, x: jax.lax.with_sharding_constraint(
          x, _without_fsdp(param_spec(x.shape, f, p, t, kv))), params)
  full = nnx.merge(graph, params, rest)
  out = fn(full, *args)
  nnx.update(model, nnx.state(full, nnx.Not(nnx.Param)))
  return out


def check_tensor(mcfg, mesh) -> None:
  """Refuses, in one line naming 'mesh.tensor', a tensor axis that does not split the
  model's heads: it must divide num_heads and d_ff, and either divide num_kv_heads
  (k, v split) or be a multiple of it (k, v kept whole on every device).

  Args:
    mcfg: the ModelConfig.
    mesh: the mesh (or an AbstractMesh).
  """
  t = _tensor_size(mesh)
  if t == 1:
    return
  H, K = mcfg.num_heads, mcfg.kv_heads
  why = (f"num_heads={H} is not a multiple of it" if H % t else
         f"num_kv_heads={K} is neither a multiple nor a divisor of it" if K % t and t % K
         else f"d_ff={mcfg.d_ff} is not a multiple of it" if mcfg.d_ff % t else None)
  if why:
    raise _err("mesh.tensor", f"{t} devices split the heads, but {why}")


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


def put_batch(batch: dict, mesh, n_rows: int | None = None) -> dict:
  """A dict of numpy arrays (the global batch, or this process's rows of it) as
  global jax.Arrays laid out by `batch_sharding`.

  Each process passes only its own rows (`local_rows`) to
  `jax.make_array_from_process_local_data`, which copies each to its devices; with
  one process that is the whole batch. An array of fewer than n_rows rows is this
  process's rows alone (what a task read with `task.rows = local_rows(mesh, n_rows)`)
  and is passed as it is; a whole batch is cut here. A mesh whose processes do not
  hold one contiguous block of rows each falls back to `jax.make_array_from_callback`
  over the global batch (the same arrays).

  Args:
    batch: {name: numpy array (B, T, ...)}, the global batch of this step, or its
      rows local_rows(mesh, n_rows).
    mesh: the training mesh.
    n_rows: the global batch's rows (None: each array's, the whole batch).
  """
  out = {}
  for k, x in batch.items():
    x = np.asarray(x)
    sharding = batch_sharding(mesh, x.ndim)
    if n_rows is not None and x.shape[0] != n_rows:     # read by this process alone
      out[k] = jax.make_array_from_process_local_data(sharding, x,
                                                      (n_rows,) + x.shape[1:])
      continue
    rows = local_rows(mesh, x.shape[0]) if jax.process_count() > 1 else slice(None)
    if rows is None:
      out[k] = jax.make_array_from_callback(x.shape, sharding, lambda idx, x=x: x[idx])
    else:
      out[k] = jax.make_array_from_process_local_data(sharding, x[rows], x.shape)
  return out
