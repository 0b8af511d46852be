"""Per-device memory of a model's training state and training step on meshes of 1, 2,
4 and 8 devices along each axis: `results/scale_memory/` and the table in
docs/scaling.md (`python -m scripts.scale_memory`).

For each mesh it compiles, without running, the two programs a run starts with and
reads XLA's per-device memory plan (`studies.timing.memory_plan`):

  init  the initialiser of the parameters and optimizer state, one jit whose outputs
        carry their shardings (`trainer.parallel.sharded_init`, what training runs):
        its outputs are the state each device holds;
  step  the jitted training step (`trainer.step`) on that state and one batch of
        the config: arguments (state shards, batch shard) + outputs not aliased to
        them (the state is donated) + temporaries.

The model is the config's (`trainer.config.model_dict`; a task's overrides are not
applied, so a config's model fields must be complete, as Shakespeare's are); the batch
is a language model's {"y", "w"} (B, T) of batch_size x seq_len. Needs the devices:
the script simulates 8 on the CPU.
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from trainer import parallel
from studies.core import pages, timing

AXES = ("data", "fsdp", "seq", "tensor")
DEVICES = (1, 2, 4, 8)
MiB = 2 ** 20


def load_config(spec: str):
  """The config of `spec`, "configs/<name>.py[:preset]" (as train.py's --config)."""
  import importlib
  path, _, preset = spec.partition(":")
  module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
  return module.get_config(preset)


def mesh_for(axis: str, n: int, devices=None):
  """The mesh of n devices (the first n) with `axis` of size n and every other 1."""
  devices = jax.devices()[:n] if devices is None else devices
  cfg = {a: (n if a == axis else 1) for a in AXES}
  return parallel.make_mesh(cfg, devices)


def _total(plan: dict) -> int:
  """Bytes a device holds at once: arguments + outputs not aliased to them + temps."""
  return (plan["argument_bytes"] + plan["output_bytes"] - plan["alias_bytes"]
          + plan["temp_bytes"])


def programs(config, mesh, seq_len: int | None = None, step: bool = True):
  """(init, step, batch): the compiled initialiser and training step of `config` on
  `mesh`, and the batch's abstract arrays (compiled, not run). seq_len: the tokens of
  a training sequence (None: config.seq_len); step: False leaves the step out (None).

  Raises ConfigError (one line, naming the key) for a mesh the config does not split
  over (batch, sequence, heads)."""
  from models import ModelConfig
  from trainer import checkpoint as ckpt
  from trainer import step as steps
  from trainer.config import check_mesh, model_dict
  mcfg = ModelConfig.from_dict(model_dict(config))
  T, B = int(seq_len or config.seq_len), int(config.batch_size)
  check_mesh(config, mesh, {"seq_len": T})
  parallel.check_tensor(mcfg, mesh)

  def make():
    model, opt = ckpt.make_state(config, mcfg)
    return model, opt

  graph, init, shardings = parallel.sharded_init(make, mesh, mcfg.kv_heads)
  abstract = nnx.split(nnx.eval_shape(make))[1]
  leaves, treedef = jax.tree.flatten(abstract)
  state = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s)
           for x, s in zip(leaves, jax.tree.leaves(shardings))]
  bs = parallel.batch_sharding(mesh)
  batch = {"y": jax.ShapeDtypeStruct((B, T), jnp.int32, sharding=bs),
           "w": jax.ShapeDtypeStruct((B, T), jnp.float32, sharding=bs)}
  fn = steps._compiled(graph, treedef, False)
  with parallel.use_mesh(mesh):
    return (init.lower().compile(),
            fn.lower(state, batch, steps.new_carry(0)).compile() if step else None, batch)


def plan(config, mesh, seq_len: int | None = None, step: bool = True) -> dict:
  """{"init": memory plan, "init_total", and with `step` "step": memory plan,
  "step_total"} per device (bytes) of `config` on `mesh` (`programs`)."""
  init, compiled, _ = programs(config, mesh, seq_len, step)
  out = {"init": timing.memory_plan(init)}
  out["init_total"] = _total(out["init"])
  if compiled is not None:
    out["step"] = timing.memory_plan(compiled)
    out["step_total"] = _total(out["step"])
  return out


def measure(config, command, axes=AXES, devices=DEVICES, step: bool = False,
            log=print) -> dict:
  """{"plans": {axis: {n: plan or {"refused": the one-line reason}}}, "params", ...}
  of `config` on each mesh of n devices along each axis (the 1-device mesh, the same
  for every axis, once); step: the training step's plans too (its compilation is
  most of the time: minutes per mesh for the Shakespeare gpu preset on 2 CPU cores)."""
  from models import ConfigError, ModelConfig, param_count
  from trainer.config import model_dict
  if jax.device_count() < max(devices):
    raise RuntimeError(f"scale_memory needs {max(devices)} devices, jax sees "
                       f"{jax.device_count()}: set XLA_FLAGS=--xla_force_host_platform_"
                       f"device_count={max(devices)} before jax starts")
  plans = {}
  for axis in axes:
    plans[axis] = {}
    for n in devices:
      if n == 1 and axis != axes[0]:
        plans[axis][n] = plans[axes[0]][n]
        continue
      try:
        p = plan(config, mesh_for(axis, n), step=step)
        log(f"{axis}={n}: {_cell(p)} MiB per device")
      except ConfigError as e:
        p = {"refused": str(e)}
        log(f"{axis}={n}: refused: {e}")
      plans[axis][n] = p
  mcfg = ModelConfig.from_dict(model_dict(config))
  from models import build
  params = param_count(nnx.eval_shape(lambda: build(mcfg, rngs=nnx.Rngs(0))))["params"]
  return dict(run=pages.run_record(command, None, simulated_devices=jax.device_count()),
              model=dict(d_model=mcfg.d_model, num_heads=mcfg.num_heads,
                         num_layers=mcfg.num_layers, d_ff=mcfg.d_ff,
                         attention=mcfg.attention, params=int(params)),
              batch=[int(config.batch_size), int(config.seq_len)], step=bool(step),
              axes=list(axes), devices=list(devices), plans=plans)


def _cell(p) -> str:
  if "refused" in p:
    return "refused"
  state = p["init"]["output_bytes"]
  if "step_total" not in p:
    return f"{state / MiB:.1f}"
  return f"{state / MiB:.1f} / {p['step_total'] / MiB:.1f}"


def table(r: dict) -> list[str]:
  """The markdown table of `measure`'s record: a row per axis, a column per device
  count, each cell 'state / step' (or 'state' alone) MiB per device; refused meshes
  say so."""
  plans = {a: {int(n): p for n, p in d.items()} for a, d in r["plans"].items()}
  rows = [[f"`{a}`"] + [_cell(plans[a][n]) for n in r["devices"]] for a in r["axes"]]
  lines = pages.table(["axis"] + [f"{n} device{'s' if n > 1 else ''}"
                                  for n in r["devices"]], rows)
  why = sorted({p["refused"] for d in plans.values() for p in d.values()
                if "refused" in p})
  if why:
    lines += ["", "Refused: " + "; ".join(why) + "."]
  return lines


BEGIN, END = "<!-- scale_memory: begin -->", "<!-- scale_memory: end -->"


def page(r: dict) -> list[str]:
  """The text of results/scale_memory/README.md below its title (and the block of
  docs/scaling.md)."""
  m, (B, T) = r["model"], r["batch"]
  return [
      pages.header(r["run"]) + f" {r['run']['simulated_devices']} simulated CPU devices; "
      "the page (and the table in docs/scaling.md) is rewritten from `memory.json` by "
      "`python -m scripts.scale_memory --page_only`.",
      "",
      f"Per-device memory (MiB) of the model ({m['num_layers']} layers, d_model "
      f"{m['d_model']}, {m['num_heads']} heads, d_ff {m['d_ff']}, {m['attention']}, "
      f"{m['params']:,} parameters, AdamW, float32)"
      + (f" and of its training step on a batch of {B} x {T}," if r.get("step") else
         ",") + f" on meshes of 1, 2, 4 and 8 devices along one axis (the others 1). "
      + ("Each cell is 'state / step': the outputs in XLA's `memory_analysis()` of the "
         "compiled initialiser (the parameters and optimizer state a device holds) and "
         "the plan of the compiled training step (arguments + outputs not aliased to "
         "them + temporaries), compiled and not run." if r.get("step") else
         "Each cell is the state a device holds: the outputs in XLA's "
         "`memory_analysis()` of the compiled initialiser (the parameters and AdamW "
         "moments on that device), compiled and not run; the training step's "
         "plans (`--step`) are left out here: minutes of compilation per mesh on 2 "
         "CPU cores."),
      "", *table(r)]


def write(r: dict, out: str, doc: str | None = None) -> None:
  """memory.json and README.md of `out` from `measure`'s record; with `doc`, the
  block between BEGIN and END of that markdown file is replaced by the same page."""
  pages.write_json(os.path.join(out, "memory.json"), r)
  body = page(r)
  with open(os.path.join(out, "README.md"), "w") as f:
    f.write("\n".join(["# Memory per device over each mesh axis", "", *body, ""]))
  if doc is not None:
    with open(doc) as f:
      text = f.read()
    with open(doc, "w") as f:
      f.write(pages.splice(text, BEGIN, END, "\n".join(body)))
