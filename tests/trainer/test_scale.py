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
    (None, 8, (8, 1, 1)),                                  # default: all on data
    ({"data": 0, "fsdp": 2}, 8, (4, 2, 1)),
    ({"data": -1, "fsdp": 2, "seq": 2}, 8, (2, 2, 2)),
    ({"data": 2, "fsdp": 2, "seq": 2}, 8, (2, 2, 2)),
    ({"data": 0}, 1, (1, 1, 1)),
])
def test_mesh_shape_from_config(cfg, n, want):
  assert parallel.mesh_shape(cfg, n) == want


@pytest.mark.parametrize("cfg, key, words", [
    ({"data": 3}, "mesh.data", "must equal the 8 devices"),
    ({"data": 0, "fsdp": 3}, "mesh.fsdp", "does not divide the 8 devices"),
    ({"data": 0, "seq": 0}, "mesh.seq", "positive int"),
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
  mesh = jax.sharding.AbstractMesh((4, 2, 4), parallel.AXES)    # no devices needed
  ok = dict(batch_size=16, eval_batch_size=8)
  trainer.check_mesh(multidevice.tiny_copy(**ok), mesh, {"copy_len": 8})   # these split
  cfg = multidevice.tiny_copy(**{**ok, **change})
  with pytest.raises(ConfigError) as e:
    trainer.check_mesh(cfg, mesh, seq_lens)
  assert f"'{key}'" in str(e.value) and words in str(e.value)


def test_a_mesh_larger_than_the_devices_is_refused_before_anything_runs(tmp_path):
  cfg = multidevice.tiny_copy(mesh_fsdp=2)                        # 1 device here
  with pytest.raises(ConfigError, match="'mesh.fsdp': mesh.fsdp \\* mesh.seq = 2 does not "
                                        "divide the 1 devices"):
    trainer.train_and_evaluate(cfg, str(tmp_path))
  assert not os.path.exists(tmp_path / "checkpoints")


# ---- training and checkpoints on several meshes ------------------------------------

@pytest.mark.slow   # 31-35 s of a 2-core CI run, the suite's costliest test (make test-all):
#                     the mesh, FSDP and batch-split rules above and ring attention over 4
#                     and 8 devices (test_ring) stay in `make test`
def test_training_on_1_8_4x2_2x2x2_devices_same_losses_and_checkpoints_move(tmp_path):
  """5 steps of the copy task on 1 device (here), and in an 8-device subprocess on
  8 (data), 4 x 2 (data x fsdp) and 2 x 2 x 2 (data x fsdp x seq, with ring attention
  instead of softmax): the same losses within 1e-5. Checkpoints written on 1 device
  and on 4x2 restore onto meshes of 1, 4 (fsdp) and 8 devices, and the 4x2 one onto
  this 1-device process, all equal, each laid out by its mesh's FSDP rule."""
  one = str(tmp_path / "one")
  trainer.train_and_evaluate(multidevice.tiny_copy(), one)
  ref = multidevice.losses(one)
  assert sorted(ref) == [1, 2, 3, 4, 5]
  res = multidevice.run("train", root=str(tmp_path), one_device_workdir=one)
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
  for src in ("1dev", "4x2"):
    assert specs[f"{src}->1"] == (1, str(P()))
    assert specs[f"{src}->fsdp4"] == (4, str(P(None, "fsdp")))
    assert specs[f"{src}->data8"] == (8, str(P()))
    assert specs[f"{src}->data4_fsdp2"] == (8, str(P(None, "fsdp")))
  # 8 devices -> this 1-device process: eval.py's path
  _, model, step = trainer.load_model(str(tmp_path / "data4_fsdp2"))
  there = np.load(tmp_path / "restored_4x2.npz")
  here = multidevice.flat_state(model)
  assert step == 5 and set(here) == set(there.files)
  for k in here:
    np.testing.assert_array_equal(here[k], there[k], err_msg=k)
