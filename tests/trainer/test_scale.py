"""Scaling out: the mesh from config, FSDP layouts, multi-host settings, and training
and checkpoints on meshes of 1, 4 and 8 devices (ring attention: tests/attention/test_ring.py).

The multi-device checks run in one subprocess each with 8 simulated CPU devices
(tests/multidevice.py); what runs here sees the one device of the test process.
"""
import os

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from trainer import parallel
import trainer
from models import ConfigError
from tests import multidevice

TOL = 1e-5


# ---- the mesh, the FSDP rule and the distributed settings ------------------------------

@pytest.mark.parametrize("cfg, n, want", [
    (None, 8, (8, 1, 1, 1)),                               # default: all on data
    ({"data": 0, "fsdp": 2}, 8, (4, 2, 1, 1)),
    ({"data": -1, "fsdp": 2, "seq": 2}, 8, (2, 2, 2, 1)),
    ({"data": 2, "fsdp": 2, "seq": 2}, 8, (2, 2, 2, 1)),
    ({"data": 0, "tensor": 2, "fsdp": 2}, 8, (2, 2, 1, 2)),
    ({"data": 0}, 1, (1, 1, 1, 1)),
])
def test_mesh_shape_from_config(cfg, n, want):
  assert parallel.mesh_shape(cfg, n) == want


@pytest.mark.parametrize("cfg, key, words", [
    ({"data": 3}, "mesh.data", "must equal the 8 devices"),
    ({"data": 0, "fsdp": 3}, "mesh.fsdp", "does not divide the 8 devices"),
    ({"data": 0, "seq": 0}, "mesh.seq", "positive int"),
    ({"data": 0, "tensor": 3}, "mesh.fsdp", "mesh.tensor = 3 does not divide"),
    ({"data": -2}, "mesh.data", "positive int"),
])
def test_bad_mesh_names_the_key(cfg, key, words):
  with pytest.raises(ConfigError) as e:
    parallel.mesh_shape(cfg, 8)
  assert f"'{key}'" in str(e.value) and words in str(e.value)


@pytest.mark.parametrize("shape, fsdp, spec", [
    ((16, 32), 2, P(None, "fsdp")),        # the largest dimension
    ((32, 32), 4, P("fsdp")),              # ties: the first
    ((48, 32), 32, P(None, "fsdp")),       # the largest that fsdp divides
    ((3, 5), 2, P()),                      # none divides: replicated
    ((), 2, P()),                          # scalars (step counts, RNG keys)
    ((64, 16), 1, P()),                    # no fsdp axis
])
def test_fsdp_rule(shape, fsdp, spec):
  assert parallel.param_spec(shape, fsdp) == spec


A = ("decoder", "blocks", 0, "attn")
F = ("decoder", "blocks", 0, "ffn")


@pytest.mark.parametrize("path, shape, fsdp, tensor, kv, spec", [
    (A + ("q", "kernel"), (64, 64), 1, 4, 4, P(None, "tensor")),      # column-parallel
    (A + ("q", "bias"), (64,), 1, 4, 4, P("tensor")),
    (A + ("o", "kernel"), (64, 64), 1, 4, 4, P("tensor")),            # row-parallel
    (A + ("o", "bias"), (64,), 1, 4, 4, P()),               # added after the sum
    (F + ("fc1", "kernel"), (64, 256), 2, 4, 4, P("fsdp", "tensor")),   # fsdp: the other
    (F + ("fc2", "kernel"), (256, 64), 2, 4, 4, P("tensor", "fsdp")),
    (A + ("k", "kernel"), (64, 32), 1, 4, 2, P()),       # 2 KV heads over 4: kept whole
    (A + ("v", "kernel"), (64, 32), 1, 2, 2, P(None, "tensor")),      # 2 over 2: split
    (A + ("k", "kernel"), (64, 32), 1, 2, 0, P()),       # KV heads unknown: whole
    (("opt_state", 0, "mu") + A + ("q", "kernel"), (64, 64), 2, 4, 4,  # moments follow
     P("fsdp", "tensor")),
    (("embed", "embedding"), (64, 64), 2, 4, 4, P("fsdp")),           # not a projection
    (A + ("q", "kernel"), (64, 64), 2, 1, 4, P("fsdp")),              # no tensor axis
])
def test_tensor_rule_megatron_split_by_parameter_path(path, shape, fsdp, tensor, kv,
                                                       spec):
  assert parallel.param_spec(shape, fsdp, path, tensor, kv) == spec


@pytest.mark.parametrize("heads, kv, d_ff, tensor, words", [
    (6, 6, 64, 4, "num_heads=6 is not a multiple of it"),
    (8, 4, 64, 8, None),                                           # KV whole: allowed
    (12, 3, 64, 2, "num_kv_heads=3 is neither a multiple nor a divisor of it"),
    (8, 8, 36, 8, "d_ff=36 is not a multiple of it"),
    (4, 2, 64, 4, None),
])
def test_tensor_axis_must_split_the_heads(heads, kv, d_ff, tensor, words):
  from models import ModelConfig
  mesh = jax.sharding.AbstractMesh((1, 1, 1, tensor), parallel.AXES)
  mcfg = ModelConfig(num_heads=heads, num_kv_heads=kv, d_model=8 * heads, d_ff=d_ff)
  if words is None:
    parallel.check_tensor(mcfg, mesh)
    return
  with pytest.raises(ConfigError, match=f"'mesh.tensor': {tensor} devices split the "
                     f"heads, but {words}"):
    parallel.check_tensor(mcfg, mesh)


def test_distributed_settings_from_config_or_env(monkeypatch):
  from configs import base
  c = base.get_config()
  for var in parallel.ENV.values():
    monkeypatch.delenv(var, raising=False)
  assert parallel.distributed_args(c) is None                    # one process
  monkeypatch.setenv("ATTNLAB_COORDINATOR_ADDRESS", "10.0.0.1:1234")
  monkeypatch.setenv("ATTNLAB_NUM_PROCESSES", "2")
  monkeypatch.setenv("ATTNLAB_PROCESS_ID", "1")
  assert parallel.distributed_args(c) == {"coordinator_address": "10.0.0.1:1234",
                                          "num_processes": 2, "process_id": 1,
                                          "heartbeat_timeout_seconds": 100}
  c.distributed.process_id = 0                                   # the flag wins
  assert parallel.distributed_args(c)["process_id"] == 0
  c.distributed.heartbeat_timeout_s = 5
  assert parallel.distributed_args(c)["heartbeat_timeout_seconds"] == 5
  c.distributed.heartbeat_timeout_s = 0
  with pytest.raises(ConfigError, match=r"'distributed.heartbeat_timeout_s': must be a "
                     "whole number of seconds >= 1, got 0"):
    parallel.distributed_args(c)
  c.distributed.heartbeat_timeout_s = 100
  c.distributed.process_id = 2
  with pytest.raises(ConfigError, match=r"'distributed.process_id': must be in \[0, 2\)"):
    parallel.distributed_args(c)
  monkeypatch.delenv("ATTNLAB_COORDINATOR_ADDRESS")
  c.distributed.process_id = 0
  with pytest.raises(ConfigError, match="'distributed.coordinator_address'"):
    parallel.distributed_args(c)


@pytest.mark.parametrize("change, seq_lens, key, words", [
    (dict(batch_size=12), {}, "batch_size", "12 sequences do not split over mesh data"),
    (dict(eval_batch_size=4), {}, "eval_batch_size", "use a multiple of 8"),
    ({}, {"copy_len": 6}, "copy_len", "6 tokens do not split over mesh.seq = 4"),
])
def test_batches_must_split_over_the_mesh(change, seq_lens, key, words):
  mesh = jax.sharding.AbstractMesh((4, 2, 4, 1), parallel.AXES)  # no devices needed
  ok = dict(batch_size=16, eval_batch_size=8)
  trainer.check_mesh(multidevice.tiny_copy(**ok), mesh, {"copy_len": 8})   # these split
  cfg = multidevice.tiny_copy(**{**ok, **change})
  with pytest.raises(ConfigError) as e:
    trainer.check_mesh(cfg, mesh, seq_lens)
  assert f"'{key}'" in str(e.value) and words in str(e.value)


def test_a_mesh_larger_than_the_devices_is_refused_before_anything_runs(tmp_path):
  cfg = multidevice.tiny_copy(mesh_fsdp=2)                        # 1 device here
  with pytest.raises(ConfigError, match="'mesh.fsdp': mesh.fsdp \\* mesh.seq \\* "
                                        "mesh.tensor = 2 does not divide the 1 devices"):
    trainer.train_and_evaluate(cfg, str(tmp_path))
  assert not os.path.exists(tmp_path / "checkpoints")


# ---- training and checkpoints on several meshes ------------------------------------

@pytest.mark.slow   # 31-35 s of a 2-core CI run before the two tensor meshes (make test-all):
#                     the mesh, FSDP and batch-split rules above and ring attention over 4
#                     and 8 devices (test_ring) stay in `make test`
def test_training_on_1_8_4x2_2x2x2_devices_same_losses_and_checkpoints_move(tmp_path):
  """5 steps of the copy task on 1 device (here), and in an 8-device subprocess on
  8 (data), 4 x 2 (data x fsdp), 2 x 2 x 2 (data x fsdp x seq, with ring attention
  instead of softmax), 2 x 2 x 2 (data x fsdp x tensor) and 2 x 2 x 2 (fsdp x seq x
  tensor, ring): the same losses within 1e-5. Checkpoints written on 1 device, on 4x2
  and on data x fsdp x tensor restore onto meshes of 1, 4 (fsdp), 8 (data, data x
  fsdp, fsdp x tensor) devices, and the 4x2 one onto this 1-device process, all
  equal, each laid out by its mesh's FSDP and tensor rules."""
  one = str(tmp_path / "one")
  trainer.train_and_evaluate(multidevice.tiny_copy(), one)
  ref = multidevice.losses(one)
  assert sorted(ref) == [1, 2, 3, 4, 5]
  res = multidevice.run("train", timeout=1800, root=str(tmp_path),
                        one_device_workdir=one)
  assert res["devices"] == 8
  for name, got in res["losses"].items():
    got = {int(s): l for s, l in got.items()}
    assert sorted(got) == [1, 2, 3, 4, 5], (name, got)
    np.testing.assert_allclose([got[s] for s in ref], [ref[s] for s in ref], atol=TOL,
                               rtol=0, err_msg=name)
  assert set(res["losses"]) == set(multidevice.MESHES)
  for move, r in res["restores"].items():
    assert r["step"] == 5 and r["max_abs_diff"] == 0.0, (move, r)
  specs = {m: (r["devices"], r["fc1_kernel_spec"]) for m, r in res["restores"].items()}
  for src in ("1dev", "4x2", "2x2x2t"):
    assert specs[f"{src}->1"] == (1, str(P()))
    assert specs[f"{src}->fsdp4"] == (4, str(P(None, "fsdp")))
    assert specs[f"{src}->data8"] == (8, str(P()))
    assert specs[f"{src}->data4_fsdp2"] == (8, str(P(None, "fsdp")))
    # fc1 (16, 32): columns over tensor, rows over fsdp; o (16, 16): rows over tensor
    assert specs[f"{src}->fsdp4_tensor2"] == (8, str(P("fsdp", "tensor")))
    assert res["restores"][f"{src}->fsdp4_tensor2"]["o_kernel_spec"] == str(
        P("tensor", "fsdp"))
  # 8 devices -> this 1-device process: eval.py's path
  _, model, step = trainer.load_model(str(tmp_path / "data4_fsdp2"))
  there = np.load(tmp_path / "restored_4x2.npz")
  here = multidevice.flat_state(model)
  assert step == 5 and set(here) == set(there.files)
  for k in here:
    np.testing.assert_array_equal(here[k], there[k], err_msg=k)


# ---- sharded initialisation ------------------------------------------------------------

INIT_SLACK = 1.25    # per-device init memory on 8 devices <= 1.25 / 8 of one device's


def test_state_is_created_in_its_shardings_an_eighth_per_device_on_fsdp_8(tmp_path):
  """The initialiser of parameters and AdamW state is one jit whose outputs carry their
  FSDP shardings: XLA's compiled plan of it on fsdp = 8 holds at most 1.25 / 8 of the
  one-device plan per device (its outputs, the state a device keeps, and its
  temporaries, the random bits), and nothing replicated beyond the scalars; the values
  are those of the model built whole then sharded (the path before), exactly."""
  res = multidevice.run("init", root=str(tmp_path))
  one, eight = res["init"]["1"], res["init"]["fsdp8"]
  assert one["argument_bytes"] == eight["argument_bytes"] == 0
  assert one["output_bytes"] > 1_200_000            # 0.41 M float32 parameters x 3
  for part in ("output_bytes", "temp_bytes"):
    assert eight[part] <= INIT_SLACK * one[part] / 8, (part, one, eight)
  # the whole state over 8, plus the few replicated scalars (steps, RNG keys, counts):
  # within 1% of an eighth (0.7% here)
  assert eight["output_bytes"] <= 1.01 * one["output_bytes"] / 8, (one, eight)
  assert res["state_max_abs_diff"] == 0.0 and res["state_leaves"] > 20, res
  assert res["fc1_kernel"] == {"spec": str(P(None, "fsdp")), "shard_shape": [64, 32]}


@pytest.mark.slow   # ~60 CPU-s: two training steps compiled, two 3-step runs
def test_a_model_larger_than_a_device_share_trains_on_8_as_before(tmp_path):
  """fsdp = 8: the compiled training step needs less memory per device than the
  model's parameters and AdamW moments take whole (so a device too small for the state
  alone trains it over 8), and 3 steps from the sharded initialisation give the losses
  of the state built whole then sharded, to 1e-6."""
  res = multidevice.run("init", timeout=1200, root=str(tmp_path), train=True)
  whole = res["init"]["1"]["output_bytes"]           # params + AdamW moments + scalars
  step8 = res["plans"]["fsdp8"]["step_total"]
  assert step8 < 0.9 * whole, (step8, whole)
  assert res["plans"]["fsdp8"]["init"]["output_bytes"] <= 1.01 * whole / 8
  assert res["plans"]["1"]["step_total"] > 1.5 * whole    # one device: twice the state
  got, ref = res["losses"]["sharded_init"], res["losses"]["whole_then_shard"]
  assert sorted(got) == ["1", "2", "3"], got
  np.testing.assert_allclose([got[s] for s in sorted(got)], [ref[s] for s in sorted(got)],
                             atol=1e-6, rtol=0)
