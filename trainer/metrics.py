"""What a run records: stdout lines, workdir/metrics.jsonl and TensorBoard events,
and the machine it ran on.

  m = Metrics(workdir); m.write(step, train_loss=..., steps_per_s=...); m.close()
  m = Metrics(workdir, start=s)   # a run (re)starting at step s: one record per step
  runtime_info()   # {"backend": "gpu", "device_kind": "NVIDIA H100 ...", ...}

One record per step. A run resumed at step s repeats the steps after s that the
interrupted run had logged past its last checkpoint; `Metrics(workdir, start=s)` moves
those records of metrics.jsonl to metrics_set_aside.jsonl (and a fresh run, s = 0,
all of them), and opens the TensorBoard writer with `purge_step`, which hides the
earlier events of those steps from TensorBoard.
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


SET_ASIDE = "metrics_set_aside.jsonl"


def keep_until(path: str, start: int) -> int:
  """Keeps in the jsonl file `path` the records a run starting at step `start` does
  not write again: those of earlier steps, and at `start` (> 0) all but its resume
  mark. The others (and lines that are not JSON, e.g. cut by a kill) are appended
  to metrics_set_aside.jsonl beside it, each with "set_aside_at_start": start; the
  file is replaced atomically. Returns how many records were set aside."""
  if not os.path.exists(path):
    return 0
  keep, drop = [], []
  for line in open(path):
    if not line.strip():
      continue
    try:
      rec = json.loads(line)
      ok = rec["step"] < start or (
          rec["step"] == start and start > 0 and "resumed_at_step" not in rec)
    except (ValueError, KeyError, TypeError):
      rec, ok = {"unparsed": line.rstrip("\n")}, False
    (keep if ok else drop).append(line if ok else json.dumps(
        {**rec, "set_aside_at_start": start}) + "\n")
  if drop:
    with open(os.path.join(os.path.dirname(path), SET_ASIDE), "a") as f:
      f.writelines(drop)
    with open(path + ".tmp", "w") as f:
      f.writelines(keep)
    os.replace(path + ".tmp", path)
  return len(drop)


class Metrics:
  """stdout lines, workdir/metrics.jsonl and TensorBoard (tensorboardX) events.

  start: the step a training run starts (or resumes) at: the records of later steps
  (all, at 0) are set aside first and TensorBoard hides its events of those steps
  (`keep_until`, `purge_step`); None (eval.py, scripts): append only.
  """

  def __init__(self, workdir, quiet=False, enabled=True, start: int | None = None):
    self.path = os.path.join(workdir, "metrics.jsonl")
    self.quiet = quiet
    self.enabled = enabled    # False on every process but 0 of a multi-host job
    self.tb = None
    if not enabled:
      return
    purge = None
    if start is not None:
      n = keep_until(self.path, start)
      if n:
        print(f"{self.path}: {n} records of an earlier run " + (
            f"after step {start} moved to {SET_ASIDE} (this run logs those steps again)"
            if start else f"moved to {SET_ASIDE} (it saved no checkpoint: this run "
            "starts over)"), flush=True)
      # TensorBoard hides earlier events of steps >= purge_step; the records at a
      # resumed run's start step were logged before its checkpoint and stay
      purge = start + 1 if start else 0
    try:
      from tensorboardX import SummaryWriter
      self.tb = SummaryWriter(os.path.join(workdir, "tb"), purge_step=purge)
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
