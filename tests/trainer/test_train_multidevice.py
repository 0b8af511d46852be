"""train.py itself on 4 simulated host devices, as a multi-GPU user runs it: the
progress bar on (its per-step markers are dispatched inside the training mesh),
parameters sharded over fsdp and the batch over data × fsdp, an evaluation and a
checkpoint, then a resume of that checkpoint on another mesh (data only).

A subprocess: the device count is fixed when the backend starts. The multi-device
numerics (losses equal to one device's) are tests/trainer/test_scale.py's; this file checks
that the command a user types runs to the end on several devices.

Marked slow (`make test-all`): two train.py processes, ~20 CPU-s. `make test` keeps
training on meshes of several devices through tests/trainer/test_multiprocess.py (FSDP
over 4 devices in one process and in two, its checkpoints restored across them).
"""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# a one-layer model 16 wide on copies of 3 symbols: the cost is the process start and
# the compilations, not the steps
TINY = ["--config=configs/copy.py", "--config.attention=softmax", "--config.copy_len=3",
        "--config.model.d_model=16", "--config.model.num_heads=2", "--config.model.d_ff=32",
        "--config.model.num_layers=1", "--config.model.max_len=8", "--config.batch_size=8",
        "--config.eval_batch_size=8", "--config.eval_batches=1", "--config.log_every=1",
        "--config.warmup_steps=1", "--config.progress=True"]


def train(workdir, steps, **mesh):
  env = {**os.environ, "JAX_PLATFORMS": "cpu",
         "XLA_FLAGS": " ".join(filter(None, [os.environ.get("XLA_FLAGS", ""),
                                             "--xla_force_host_platform_device_count=4"]))}
  args = [sys.executable, "train.py", *TINY, f"--workdir={workdir}",
          f"--config.num_train_steps={steps}", f"--config.eval_every={steps}",
          f"--config.checkpoint_every={steps}",
          *(f"--config.mesh.{k}={v}" for k, v in mesh.items())]
  p = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert p.returncode == 0, f"train.py exited {p.returncode}:\n{p.stdout[-3000:]}\n" \
                            f"{p.stderr[-5000:]}"
  return p.stdout


@pytest.mark.slow
def test_train_py_on_four_devices_with_progress_then_resumed_on_another_mesh(tmp_path):
  wd = str(tmp_path / "run")
  out = train(wd, 3, data=2, fsdp=2)
  assert "on 4 x cpu" in out and "'data': 2, 'fsdp': 2" in out, out
  # the banner's key settings; off a terminal, plain progress lines (no \r), eval too
  assert "attention=softmax positions=sinusoidal heads=2 kv_heads=2 packing=off" in out
  assert "\r" not in out and "\ntrain: 3/3 (100%)" in out, out
  assert "\neval: 1/1 (100%)" in out and "step 3: eval_loss=" in out, out
  # the checkpoint of the sharded run restores on a mesh of another shape
  out = train(wd, 5, data=4, fsdp=1)
  assert "resuming at step 3" in out and "'data': 4, 'fsdp': 1" in out, out
  assert "train: 5/5" in out and "step 5: eval_loss=" in out, out
  with open(os.path.join(wd, "runtime.json")) as f:
    assert json.load(f)["device_count"] == 4
