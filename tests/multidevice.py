"""The multi-device halves of tests/trainer/test_scale.py, run in a subprocess with 8 CPU devices.

  XLA_FLAGS=--xla_force_host_platform_device_count=8 \
      python -m tests.multidevice JOB ARGS_JSON

JOB is `train`, `ring`, `hybrid` or `init`; the result is one JSON object on the last stdout line.
`run(job, **args)` starts it from a test (the device count is fixed when the backend
starts, so the 8 devices need a process of their own). The tests assert; this file
only measures.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICES = 8


def run(job: str, timeout: int = 300, **args) -> dict:
  """Runs `job` in a fresh process with 8 simulated CPU devices; returns its JSON."""
  env = dict(os.environ)
  env["JAX_PLATFORMS"] = "cpu"     # simulated devices are CPU devices, on a GPU host too
  env["XLA_FLAGS"] = " ".join(filter(None, [
      env.get("XLA_FLAGS", ""), f"--xla_force_host_platform_device_count={DEVICES}"]))
  env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH", "")]))
  r = subprocess.run([sys.executable, "-m", "tests.multidevice", job, json.dumps(args)],
                     cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
  if r.returncode != 0:
    raise RuntimeError(f"tests.multidevice {job} failed ({r.returncode}):\n"
                       f"{r.stdout[-3000:]}\n{r.stderr[-5000:]}")
  return json.loads(r.stdout.strip().splitlines()[-1])


# ---- training on several meshes ------------------------------------------------------

def tiny_copy(**kw):
  """The copy task on a one-layer d_model 16 model, 5 steps, softmax attention, dropout
  on (its masks must not depend on the mesh either); mesh_<axis>=n sets config.mesh."""
  from configs import copy as copy_cfg
  c = copy_cfg.get_config()
  c.model.update(dict(d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=8,
                      dropout=0.1))
  c.update(dict(copy_len=3, num_train_steps=5, batch_size=8, eval_batch_size=8,
                eval_batches=1, eval_every=5, log_every=1, checkpoint_every=5,
                warmup_steps=1, schedule="constant", progress=False, attention="softmax",
                # float32 matmuls in full: on a GPU host the one-device run of
                # test_scale runs there (TF32 by default) against these CPU devices
                matmul_precision="highest"))
  for k, v in kw.items():
    if k.startswith("mesh_"):
      c.mesh[k[5:]] = v
    else:
      c[k] = v
  return c


def losses(workdir) -> dict:
  """{step: train_loss} of a workdir's metrics.jsonl."""
  recs = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"))]
  return {r["step"]: r["train_loss"] for r in recs if "train_loss" in r}


def flat_state(model) -> dict:
  """{path: numpy array} of a model's whole state."""
  import jax
  import numpy as np
  from flax import nnx
  leaves = jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(nnx.state(model)))[0]
  out = {}
  for p, x in leaves:
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      x = jax.random.key_data(x)
    out[jax.tree_util.keystr(p)] = np.asarray(x)
  return out


# config changes of each run; with seq > 1 attention is ring (context parallel)
MESHES = {"data8": dict(mesh_data=8), "data4_fsdp2": dict(mesh_data=4, mesh_fsdp=2),
          "data2_fsdp2_seq2": dict(mesh_data=2, mesh_fsdp=2, mesh_seq=2,
                                   attention="ring"),
          # the heads over tensor (Megatron), with FSDP and data, and with ring
          "data2_fsdp2_tensor2": dict(mesh_data=2, mesh_fsdp=2, mesh_tensor=2),
          "fsdp2_seq2_tensor2": dict(mesh_data=1, mesh_fsdp=2, mesh_seq=2, mesh_tensor=2,
                                     attention="ring")}


def job_train(root: str, one_device_workdir: str) -> dict:
  """Trains tiny_copy on each of MESHES, then restores the checkpoints of the run on
  one device (`one_device_workdir`), of the 4x2 run and of the data x fsdp x tensor
  run onto meshes of 1, 4 and 8 devices (trainer.load_model(mesh=...), the path a
  resumed run takes too)."""
  import jax
  import numpy as np
  from trainer import parallel
  import trainer
  out = {"devices": jax.device_count(), "losses": {}, "restores": {}}
  for name, mesh in MESHES.items():
    trainer.train_and_evaluate(tiny_copy(**mesh), os.path.join(root, name))
    out["losses"][name] = losses(os.path.join(root, name))

  devs = jax.devices()
  targets = {"1": parallel.make_mesh(None, devs[:1]),
             "fsdp4": parallel.make_mesh({"data": 1, "fsdp": 4}, devs[:4]),
             "data8": parallel.make_mesh({"data": 8}, devs),
             "data4_fsdp2": parallel.make_mesh({"data": 4, "fsdp": 2}, devs),
             "fsdp4_tensor2": parallel.make_mesh({"data": 1, "fsdp": 4, "tensor": 2},
                                                 devs)}
  sources = {"1dev": one_device_workdir, "4x2": os.path.join(root, "data4_fsdp2"),
             "2x2x2t": os.path.join(root, "data2_fsdp2_tensor2")}
  for src, wd in sources.items():
    ref = None
    for tname, mesh in targets.items():
      _, model, step = trainer.load_model(wd, mesh=mesh)
      state = flat_state(model)
      kernel = model.decoder.blocks[0].ffn.fc1.kernel[...]        # (16, 32)
      o = model.decoder.blocks[0].attn.o.kernel[...]              # (16, 16)
      if ref is None:
        ref = state
        if src == "4x2":
          np.savez(os.path.join(root, "restored_4x2.npz"), **state)
      out["restores"][f"{src}->{tname}"] = {
          "step": step,
          "max_abs_diff": max(float(np.max(np.abs(state[k].astype(np.float64)
                                                  - ref[k].astype(np.float64))))
                              for k in ref),
          "devices": len(kernel.sharding.device_set),
          "fc1_kernel_spec": str(kernel.sharding.spec),
          "o_kernel_spec": str(o.sharding.spec)}
  return out


# ---- ring attention over 4 and 8 devices ------------------------------------------------

# (name, seq devices, batch devices, (B, Tq, Tk, Hq, Hkv, D, Dv), causal, mask, kwargs);
# the causal cases run on ring's default zig-zag layout (the contiguous one is the
# non-causal case's)
RING_CASES = [
    ("causal_gqa_4x2", 4, 2, (2, 32, 32, 4, 2, 8, 8), True, None,
     dict(block_q=4, block_k=4)),
    ("causal_cross_mqa_padding_8", 8, 1, (1, 16, 32, 2, 1, 8, 4), True, "padding", {}),
    ("dense_mask_4x2", 4, 2, (2, 32, 32, 2, 2, 8, 8), False, "dense", dict(block_k=4)),
    # ALiBi: query positions split with the queries (a batch axis, split over data),
    # key positions passed round the ring with their shard
    # and segment ids of both sides (packed rows: segments across the shard boundaries,
    # trailing padding id 0), the key ids travelling round the ring with their shard
    ("alibi_segments_causal_cross_4x2", 4, 2, (2, 16, 32, 4, 2, 8, 8), True, "padding",
     dict(block_q=4, block_k=4, positions="alibi", segments=True)),
    # causal self-attention, MQA, Dv != D, the default tiles (capped at a chunk's 4 rows)
    ("causal_mqa_dv_4x2", 4, 2, (2, 32, 32, 4, 1, 8, 4), True, None, {}),
]
# the cases of `make test` (tests/attention/test_ring.py); the others run in
# `make test-all`: every fact of theirs is one of these cases' but the seq axis of 8
RING_FAST = ("dense_mask_4x2", "alibi_segments_causal_cross_4x2", "causal_mqa_dv_4x2")


def job_ring(cases=None, checks: bool = True) -> dict:
  """ring's output and gradients minus softmax's (float32), on each of RING_CASES (or
  those named in `cases`); with `checks`, also the per-device memory and the refusals."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax.sharding import Mesh
  import attention
  from trainer import parallel
  out = {"devices": jax.device_count(), "cases": {}}
  devs = jax.devices()
  for name, n, nb, (B, Tq, Tk, Hq, Hkv, D, Dv), causal, mask_kind, kw in RING_CASES:
    if cases is not None and name not in cases:
      continue
    rng = np.random.default_rng(0)
    q, k, v, w = (jnp.asarray(rng.normal(size=s), jnp.float32) for s in
                  [(B, Tq, Hq, D), (B, Tk, Hkv, D), (B, Tk, Hkv, Dv), (B, Tq, Hq, Dv)])
    kw, common = dict(kw), {}          # positions go to ring and to the reference alike
    if "positions" in kw:
      common = dict(positions=kw.pop("positions"),
                    q_pos=jnp.asarray(rng.integers(0, 99, size=(B, Tq))),
                    k_pos=jnp.asarray(rng.integers(0, 99, size=(1, Tk))))
    if kw.pop("segments", False):      # (id, length) rows of Tq = 16 and Tk = 32
      ids = lambda rows: jnp.asarray(np.stack([np.repeat(*zip(*r)) for r in rows]))
      common.update(q_seg=ids([((1, 3), (2, 6), (3, 5), (0, 2)), ((1, 7), (2, 6), (0, 3))]),
                    k_seg=ids([((1, 5), (2, 14), (3, 9), (0, 4)),
                               ((1, 12), (2, 17), (0, 3))]))
    mask = None
    if mask_kind == "padding":
      mask = jnp.asarray(np.arange(Tk)[None, None, None, :] < Tk - 5)
    elif mask_kind == "dense":      # with rows that see no key at all
      m = rng.random((B, Hq, Tq, Tk)) > 0.6
      m[:, :, 3] = False
      mask = jnp.asarray(m)

    def both(name, **kw):      # (output, gradients of a weighted sum), one compile
      fn = attention.get(name)
      kw = {**kw, **common}
      loss = lambda q, k, v: jnp.sum(fn(q, k, v, causal=causal, mask=mask, **kw) * w)
      return jax.jit(lambda q, k, v: (fn(q, k, v, causal=causal, mask=mask, **kw),
                                      jax.grad(loss, argnums=(0, 1, 2))(q, k, v)))

    mesh = Mesh(np.array(devs[:n * nb]).reshape(nb, n), ("data", "seq"))
    with parallel.use_mesh(mesh):
      o, g = both("ring", **kw)(q, k, v)
    o_ref, g_ref = both("softmax")(q, k, v)        # one device, no mesh
    out["cases"][name] = {
        "out": float(jnp.max(jnp.abs(o - o_ref))),
        **{f"d{x}": float(jnp.max(jnp.abs(a - b))) for x, a, b in zip("qkv", g, g_ref)},
        "out_scale": float(jnp.max(jnp.abs(o_ref))),
        "out_spec": str(o.sharding.spec), "out_devices": len(o.sharding.device_set)}
  if not checks:
    return out
  # per-device memory of fwd + bwd (compiled, not run) on 1 and on 8 devices
  from jax.sharding import NamedSharding, PartitionSpec as P
  out["memory"] = {}
  for n in (1, 8):
    mesh = Mesh(np.array(devs[:n]), ("seq",))
    spec = NamedSharding(mesh, P(None, "seq"))
    x = jax.ShapeDtypeStruct((1, 4096, 2, 16), jnp.float32, sharding=spec)
    ring = attention.get("ring")
    grad = jax.jit(jax.grad(lambda q, k, v: ring(q, k, v, causal=True, block_q=64,
                                                  block_k=64).sum(), argnums=(0, 1, 2)),
                   out_shardings=(spec,) * 3)
    with parallel.use_mesh(mesh):
      m = grad.lower(x, x, x).compile().memory_analysis()
    out["memory"][n] = (m.argument_size_in_bytes + m.output_size_in_bytes
                        + m.temp_size_in_bytes)
  # refusals: lengths that do not split, an explicit mesh without the axis
  errors = {}
  mesh = Mesh(np.array(devs[:4]), ("seq",))
  q = jnp.ones((1, 6, 2, 8))
  for what, call in [
      ("indivisible", lambda: attention.get("ring")(q, q, q, mesh=mesh)),
      ("no_axis", lambda: attention.get("ring")(q, q, q, mesh=mesh, axis="context"))]:
    try:
      call()
      errors[what] = None
    except attention.AttentionError as e:
      errors[what] = str(e)
  out["errors"] = errors
  return out


# ---- a hybrid stack (model.layer_attention) restored onto other meshes ------------------

def job_hybrid(root: str, layer_attention: str, options: dict) -> dict:
  """tiny_copy with one decoder layer per entry of `layer_attention` (GQA, rope where a
  layer takes it) trains a step on a 4 x 2 (data x fsdp) mesh; its checkpoint is
  restored onto 4 (fsdp) devices and onto 1, each compared with the first restore."""
  import jax
  import numpy as np
  from models.config import parse_pattern
  from trainer import parallel
  import trainer
  c = tiny_copy(mesh_data=4, mesh_fsdp=2, num_train_steps=1, eval_every=1,
                checkpoint_every=1, attention="")    # the pattern sets the layers
  c.model.update(dict(layer_attention=layer_attention, num_kv_heads=1, positions="rope",
                      num_layers=len(parse_pattern(layer_attention))))
  c.model.attention_options = options
  wd = os.path.join(root, "hybrid")
  trainer.train_and_evaluate(c, wd)
  devs = jax.devices()
  out = {"losses": losses(wd), "restores": {}}
  ref = None
  for tname, mesh in {"fsdp4": parallel.make_mesh({"data": 1, "fsdp": 4}, devs[:4]),
                      "1": parallel.make_mesh(None, devs[:1])}.items():
    _, model, step = trainer.load_model(wd, mesh=mesh)
    out["layers"] = [s.name for s in model.cfg.layer_specs("decoder_attention")]
    state = flat_state(model)
    ref = ref or state
    kernel = model.decoder.blocks[0].ffn.fc1.kernel[...]
    out["restores"][tname] = {
        "step": step, "devices": len(kernel.sharding.device_set),
        "max_abs_diff": max(float(np.max(np.abs(state[k].astype(np.float64)
                                                - ref[k].astype(np.float64))))
                            for k in ref)}
  return out


# ---- sharded initialisation ------------------------------------------------------------

def wide_copy(**kw):
  """tiny_copy with every weight dimension a multiple of 8 (d_model 64, 4 heads, d_ff
  256, 2 layers), so that fsdp = 8 splits every array: 0.41 M parameters, 1.2 MB of
  parameters and AdamW moments."""
  c = tiny_copy(**kw)
  c.model.update(dict(d_model=64, num_heads=4, d_ff=256, num_layers=2))
  c.update(dict(num_train_steps=3, eval_every=3, checkpoint_every=3))
  return c


def _old_state(config, mesh):
  """The state as it was made before sharded initialisation: built whole on the
  default device, then moved onto the mesh (parallel.shard)."""
  from flax import nnx
  from models import ModelConfig
  from trainer import checkpoint as ckpt, parallel
  from trainer.config import make_optimizer, model_dict
  mcfg = ModelConfig.from_dict(model_dict(config))
  model = ckpt.make_model(config, mcfg)
  parallel.shard(model, mesh, mcfg.kv_heads)
  opt = nnx.Optimizer(model, make_optimizer(config), wrt=nnx.Param)
  parallel.shard(opt, mesh, mcfg.kv_heads)
  return model, opt


def job_init(root: str, train: bool = False) -> dict:
  """wide_copy's initialiser compiled on 1 device and on fsdp = 8 (XLA's per-device
  memory plans), and the state it makes on fsdp = 8 against the state made whole and
  then sharded (the path before sharded initialisation). With `train` (slow): the
  compiled training step on both (studies.bench.scale_memory.plan) and 3 training steps on
  fsdp = 8 both ways."""
  import jax
  import numpy as np
  from flax import nnx
  from models import ModelConfig
  from studies.bench import scale_memory
  from studies.core import timing
  from trainer import checkpoint as ckpt, parallel
  from trainer.config import model_dict
  import trainer
  out = {"devices": jax.device_count(), "init": {}}
  cfg = wide_copy()
  mcfg = ModelConfig.from_dict(model_dict(cfg))
  make = lambda: ckpt.make_state(cfg, mcfg)
  for name, n in (("1", 1), ("fsdp8", 8)):
    mesh = scale_memory.mesh_for("fsdp", n)
    graph, init, _ = parallel.sharded_init(make, mesh, mcfg.kv_heads)
    with parallel.use_mesh(mesh):
      compiled = init.lower().compile()
      out["init"][name] = timing.memory_plan(compiled)
    if n == 8:
      new = nnx.merge(graph, compiled())
  old = _old_state(cfg, mesh)
  a, b = (jax.tree.leaves(nnx.state(x)) for x in (new, old))
  key = lambda x: jax.random.key_data(x) if jax.dtypes.issubdtype(
      x.dtype, jax.dtypes.prng_key) else x
  out["state_max_abs_diff"] = max(float(np.max(np.abs(np.asarray(key(x), np.float64)
                                                      - np.asarray(key(y), np.float64))))
                                  for x, y in zip(a, b, strict=True))
  out["state_leaves"] = len(a)
  kernel = new[0].decoder.blocks[0].ffn.fc1.kernel[...]
  out["fc1_kernel"] = {"spec": str(kernel.sharding.spec),
                       "shard_shape": list(kernel.addressable_shards[0].data.shape)}
  if not train:
    return out
  out["plans"] = {name: scale_memory.plan(cfg, scale_memory.mesh_for("fsdp", n),
                                          seq_len=2 * cfg.copy_len + 2)
                  for name, n in (("1", 1), ("fsdp8", 8))}
  out["losses"] = {}
  for how in ("sharded_init", "whole_then_shard"):
    if how == "whole_then_shard":      # the path before sharded initialisation
      ckpt.make_state = lambda config, mcfg, mesh=None, fresh=True: _old_state(config,
                                                                              mesh)
    wd = os.path.join(root, how)
    trainer.train_and_evaluate(wide_copy(mesh_fsdp=8), wd)
    out["losses"][how] = losses(wd)
  return out


if __name__ == "__main__":
  job, args = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
  result = {"train": job_train, "ring": job_ring, "hybrid": job_hybrid,
            "init": job_init}[job](**args)
  print(json.dumps(result))
