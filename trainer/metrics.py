"""What a run records: stdout lines, workdir/metrics.jsonl and TensorBoard events,
and the machine it ran on.

  m = Metrics(workdir); m.write(step, train_loss=..., steps_per_s=...); m.close()
  runtime_info()   # {"backend": "gpu", "device_kind": "NVIDIA H100 ...", ...}
"""
from __future__ import annotations

import json
import os
import platform

import jax
import numpy as np


def host_cpu() -> str:
  """The host's CPU model ('AMD EPYC', 'Intel(R) Xeon(R) ...'), as /proc/cpuinfo
  names it, else what `platform` knows."""
  try:
    for line in open("/proc/cpuinfo"):
      if line.startswith("model name"):
        return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def runtime_info() -> dict:
  """The backend, device kind and counts, the host CPU and the jax version of this
  process: every run records them (train.py's first metrics record and
  workdir/runtime.json, eval.py's eval.json), so that a figure always says where it
  was measured (two 2-core CPU machines of one workplace differ ~2x in speed)."""
  d = jax.devices()[0]
  return {"backend": jax.default_backend(), "device_kind": d.device_kind,
          "host": f"{host_cpu()}, {os.cpu_count()} cores",
          "device_count": jax.device_count(), "local_device_count": jax.local_device_count(),
          "process_count": jax.process_count(), "jax_version": jax.__version__,
          "matmul_precision": str(jax.config.jax_default_matmul_precision or "default")}


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
