"""train.py from the command line with faults injected at chosen points, for the
fault tests (tests/trainer/test_faults.py): a signal that lands during a log step's host sync
or between log steps, an input thread busy inside jaxlib when the process exits, a
batch that takes as long as a test needs.

  ATTNLAB_FAULTS='{"signal_at_fetch": 1}' python tests/faulty_train.py --config=... --workdir=...

ATTNLAB_FAULTS, a JSON object, any of:
  signal_at_fetch: n     sends `signal` to this process inside the n-th host sync
                         (TrainStep.fetch, 1 = the first), before it reads the device
  signal_at_batch: s     sends `signal` while the input thread makes batch s (the
                         batch of the update from step s to step s + 1)
  signal: "SIGTERM"      (default) or "SIGINT"
  busy_after_signal: t   once the signal is sent, each batch put on the devices is
                         first preceded by t seconds of small transfers: the input
                         thread goes in and out of jaxlib's C++ code while the main
                         thread finishes (a daemon thread that takes the GIL back while
                         the interpreter exits aborts it: exit status 134)
  pause_at_batch: s      batch s waits until the file `resume_file` exists
  resume_file: path
Without ATTNLAB_FAULTS it is train.py.
"""
import json
import os
import runpy
import signal
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def install(faults: dict) -> None:
  from data import pipeline
  from trainer import parallel
  from trainer import step as steps
  sig = signal.Signals[faults.get("signal", "SIGTERM")]
  sent = []

  def send():
    sent.append(True)
    os.kill(os.getpid(), sig)

  if "signal_at_fetch" in faults:
    fetch, calls = steps.TrainStep.fetch, []

    def fetch_with_signal(self):
      calls.append(1)
      if len(calls) == faults["signal_at_fetch"]:
        send()          # delivered now: the handler runs before the sync below
      return fetch(self)
    steps.TrainStep.fetch = fetch_with_signal

  create = pipeline.create

  def create_with_faults(config):
    task = create(config)
    make = task.train_batch

    def train_batch(s):
      if s == faults.get("signal_at_batch"):
        send()
      if s == faults.get("pause_at_batch"):
        while not os.path.exists(faults["resume_file"]):
          time.sleep(0.02)
      return make(s)
    task.train_batch = train_batch
    return task
  pipeline.create = create_with_faults

  if "busy_after_signal" in faults:
    import jax
    import numpy as np
    put, x = parallel.put_batch, np.ones(64, np.float32)

    def put_busy(batch, mesh, *args, **kwargs):   # put_batch's own arguments after
      t = time.perf_counter() + faults["busy_after_signal"]
      while sent and time.perf_counter() < t:
        jax.device_put(x).block_until_ready()   # in and out of jaxlib's C++
      return put(batch, mesh, *args, **kwargs)
    parallel.put_batch = put_busy


if __name__ == "__main__":
  sys.path.insert(0, ROOT)
  faults = json.loads(os.environ.get("ATTNLAB_FAULTS") or "{}")
  if faults:
    install(faults)
  sys.argv[0] = os.path.join(ROOT, "train.py")
  runpy.run_path(sys.argv[0], run_name="__main__")
