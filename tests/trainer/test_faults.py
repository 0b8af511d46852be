"""The faults a long run meets, tried from the command line as a user meets them:
train.py (through tests/faulty_train.py, which injects the fault at a chosen point) on
the tiny copy task with the input thread on (prefetch 2). What follows a fault (the
resumed run, the rerun) runs in this process, the same computation, to keep the tests
cheap, and so do the refusals (a TrainError, which train.py prints as one line with
exit status 1: trainer.cli.user_errors, tests/trainer/test_cli.py); the command lines
share one persistent compilation cache.

  * SIGTERM / SIGINT during a log step's host sync or between log steps: the step it
    names is saved, exit 0, no abort, no traceback; the resumed run equals an
    uninterrupted one; a rerun of the finished workdir says it is complete;
  * a second writer on a workdir in use: refused in one line naming the first, which
    it leaves alone;
  * kill -9 between checkpoints (of that first writer), then a rerun: no stale lock,
    every step logged once in metrics.jsonl and in TensorBoard;
  * a damaged newest checkpoint: one line, set aside, the previous one resumes; none
    readable: one line naming the folder, nothing moved.

Each command line costs ~4.5 CPU-s of imports before the run's own work: a command
line is started only where the fault needs another process (a signal's handling and
exit status, a lock held by another process, a kill -9); the second writer is refused
by the run the kill -9 then ends (one command line for both).
"""
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import trainer
from configs import copy as copy_cfg

# one xdist worker runs this module (`--dist loadgroup`): its module-scoped fixtures
# are built once, not once per worker
pytestmark = pytest.mark.xdist_group("faults")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = 8
# the tiny model of tests/trainer/test_train.py; logs at 3 and 6, checkpoints at 4 and 8
TINY = dict(copy_len=3, batch_size=4, eval_batch_size=4, eval_batches=1,
            num_train_steps=STEPS, log_every=3, checkpoint_every=4, eval_every=100,
            warmup_steps=1, progress=False, prefetch=2, matmul_precision="highest")
MODEL = dict(d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=8)


def flags(**kw):
  over = {**TINY, **kw}
  return ([f"--config.{k}={v}" for k, v in over.items()]
          + [f"--config.model.{k}={v}" for k, v in MODEL.items()])


def command(workdir, **kw):
  return [sys.executable, os.path.join(ROOT, "tests", "faulty_train.py"),
          "--config=configs/copy.py", f"--workdir={workdir}", *flags(**kw)]


CACHE = {}


def environ(faults=None):
  # ROOT before the caller's own path, not instead of it: a GPU machine's wheels
  # installed with --target live on PYTHONPATH (the H100 run of 2026-11-26 failed every
  # command line here without them)
  path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH", "")]))
  return {**os.environ, "PYTHONPATH": path, "ATTNLAB_FAULTS": json.dumps(faults or {}),
          **CACHE}


@pytest.fixture(scope="module", autouse=True)
def compilation_cache(tmp_path_factory):
  """One persistent compilation cache for this module's command lines: each compiles
  the tiny step once (about half of a run's CPU time on 2 cores)."""
  CACHE.update(JAX_COMPILATION_CACHE_DIR=str(tmp_path_factory.mktemp("jax_cache")),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
  yield
  CACHE.clear()


def run(workdir, faults=None, **kw):
  return subprocess.run(command(workdir, **kw), cwd=ROOT, env=environ(faults),
                        capture_output=True, text=True, timeout=300)


def start(workdir, faults=None, **kw):
  return subprocess.Popen(command(workdir, **kw), cwd=ROOT, env=environ(faults),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(proc, prefix):
  """Reads proc's stdout until a line starting with prefix; the lines read."""
  lines = []
  for line in proc.stdout:
    lines.append(line)
    if line.startswith(prefix):
      return lines
  raise AssertionError(f"no line {prefix!r}; stdout: {''.join(lines)}; "
                       f"stderr: {proc.stderr.read()}")


def clean(r):
  """No abort, no traceback, no warning of a lost write."""
  for bad in ("Traceback", "terminate called", "Fatal Python error", "Exception ignored"):
    assert bad not in r.stderr, r.stderr


def records(workdir, name="metrics.jsonl"):
  return [json.loads(l) for l in open(os.path.join(workdir, name))]


def train_steps(workdir):
  return [r["step"] for r in records(workdir) if "train_loss" in r]


def checkpoints(workdir):
  return sorted(int(s) for s in os.listdir(os.path.join(workdir, "checkpoints")))


def params_of(workdir, step):
  import orbax.checkpoint as ocp
  with ocp.CheckpointManager(os.path.join(workdir, "checkpoints")) as m:
    return m.restore(step, args=ocp.args.StandardRestore())["model"]


def tiny_config():
  c = copy_cfg.get_config()
  c.update(TINY)
  c.model.update(MODEL)
  return c


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
  """The parameters after STEPS steps of an uninterrupted run (in this process: the
  same computation at the same precision and XLA flags as the command line's)."""
  wd = str(tmp_path_factory.mktemp("uninterrupted"))
  trainer.train_and_evaluate(tiny_config(), wd)
  return params_of(wd, STEPS)


@pytest.mark.parametrize("where, faults, saved", [
    # inside the first host sync (the log of step 3, not a checkpoint step)
    ("at_a_log_sync", {"signal_at_fetch": 1}, {3}),
    # from the input thread while it makes batch 5 (the update to step 6), which then
    # keeps it going in and out of jaxlib for 3 s: the main thread is 2 batches
    # behind, between log steps
    ("between_logs", {"signal_at_batch": 5, "signal": "SIGINT",
                      "busy_after_signal": 3}, {3, 4, 5}),
])
def test_a_signal_saves_the_step_it_names_then_exits_0(where, faults, saved, tmp_path,
                                                       uninterrupted, capsys):
  wd = str(tmp_path)
  r = run(wd, faults)
  assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
  clean(r)
  said = [l for l in r.stdout.splitlines() if l.startswith("signal ")]
  assert len(said) == 1, r.stdout
  step = checkpoints(wd)[-1]           # the newest checkpoint is the one it names
  assert step in saved and f"saved a checkpoint of step {step} " in said[0], (said, step)
  assert "run the same command again to resume" in said[0]

  trainer.train_and_evaluate(tiny_config(), wd)   # resumes: as if there was no signal
  assert f"resuming at step {step} " in capsys.readouterr().out
  import jax
  for a, b in zip(jax.tree.leaves(params_of(wd, STEPS)), jax.tree.leaves(uninterrupted)):
    np.testing.assert_array_equal(a, b)
  assert train_steps(wd) == [3, 6, 8]                  # each step logged once
  assert [r["resumed_at_step"] for r in records(wd) if "resumed_at_step" in r] == [step]

  if where == "at_a_log_sync":         # a rerun of the finished workdir says so
    before = open(os.path.join(wd, "metrics.jsonl")).read()
    assert trainer.train_and_evaluate(tiny_config(), wd) == {}
    assert capsys.readouterr().out.splitlines() == [
        f"the run in {wd} is complete: its newest checkpoint is of step {STEPS} "
        f"(num_train_steps={STEPS}); nothing to train (raise "
        "--config.num_train_steps to train on, or use another --workdir)"]
    assert open(os.path.join(wd, "metrics.jsonl")).read() == before


def test_a_second_writer_is_refused_then_kill_9_and_a_rerun_logs_every_step_once(
    tmp_path, capsys):
  """A run paused after logging step 6 (checkpoint 4) holds its workdir: a second
  writer is refused in one line naming it and writes nothing. Then kill -9: the rerun
  is not blocked by the dead run's lock, resumes at 4 and logs 5..8 once each in
  metrics.jsonl (the dead run's 5 and 6 set aside) and in TensorBoard (purge_step
  hides its events)."""
  wd = str(tmp_path)
  # batch 6 (the update to step 7) never comes: the run waits after logging step 6
  p = start(wd, {"pause_at_batch": 6, "resume_file": str(tmp_path / "never")}, log_every=1)
  try:
    wait_for(p, "step 6:")            # it holds the lock, waiting for batch 6
    before = open(os.path.join(wd, "metrics.jsonl")).read()
    # the second writer in this process: its refusal is a TrainError, which train.py
    # prints as one line and exit status 1 (trainer.cli.user_errors, test_cli.py)
    with pytest.raises(trainer.TrainError) as e:
      trainer.train_and_evaluate(tiny_config(), wd)
    msg = str(e.value)
    assert msg.splitlines() == [msg] and msg.startswith(
        f"workdir {wd} is in use by process {p.pid} on host "), msg
    assert " since 20" in msg and f"(train.py --config=configs/copy.py --workdir={wd} " in msg
    assert open(os.path.join(wd, "metrics.jsonl")).read() == before
    p.send_signal(signal.SIGKILL)
  finally:
    p.kill()
    p.wait()
  assert train_steps(wd) == [1, 2, 3, 4, 5, 6] and checkpoints(wd) == [4]
  dead = {r["step"]: r["train_loss"] for r in records(wd) if "train_loss" in r}

  cfg = tiny_config()
  cfg.log_every = 1
  trainer.train_and_evaluate(cfg, wd)               # the dead run's flock died with it
  assert "resuming at step 4 " in capsys.readouterr().out
  assert train_steps(wd) == list(range(1, STEPS + 1))
  assert [x["step"] for x in records(wd) if "resumed_at_step" in x] == [4]
  aside = records(wd, "metrics_set_aside.jsonl")
  assert [(x["step"], x["set_aside_at_start"]) for x in aside if "train_loss" in x] == [
      (5, 4), (6, 4)]
  assert [x["train_loss"] for x in aside if "train_loss" in x] == [dead[5], dead[6]]

  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
  tb = EventAccumulator(os.path.join(wd, "tb"))
  tb.Reload()
  events = tb.Scalars("train_loss")
  steps = [e.step for e in events]
  # The rerun's steps 5..8 once each: purge_step hid the dead run's 5 and 6. Its
  # earlier events are there only if its event writer had flushed them before the
  # kill -9 (from a fresh clone, it once had not): no later step of a dead run shows.
  assert steps[-4:] == list(range(5, STEPS + 1)) and steps == sorted(set(steps)), steps
  assert set(steps) <= set(range(1, STEPS + 1))
  jsonl = {x["step"]: x["train_loss"] for x in records(wd) if "train_loss" in x}
  np.testing.assert_allclose([e.value for e in events], [jsonl[s] for s in steps],
                             rtol=1e-6)


def truncate(workdir, step):
  """Halves the data files of checkpoint `step` (its OCDBT `d/` folders: the
  process's and the merged one, which holds a tiny model's small arrays inline)."""
  for d, _, files in os.walk(os.path.join(workdir, "checkpoints", str(step), "default")):
    if os.path.basename(d) == "d":
      for f in files:
        path = os.path.join(d, f)
        os.truncate(path, os.path.getsize(path) // 2)


def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, capsys):
  wd = str(tmp_path)
  trainer.train_and_evaluate(tiny_config(), wd)         # checkpoints 4 and 8
  assert checkpoints(wd) == [4, 8]
  truncate(wd, 8)                                     # a full disk's half-written files
  capsys.readouterr()
  # the rerun in this process (train.py is this call; a command line would add only
  # its imports): one line on stderr, then it resumes from step 4
  trainer.train_and_evaluate(tiny_config(), wd)
  out = capsys.readouterr()
  line = out.err.strip()
  aside = os.path.join(wd, "unreadable_checkpoints", "8")
  assert len(line.splitlines()) == 1 and line.startswith(
      f"checkpoint of step 8 in {wd}/checkpoints cannot be read (")
  assert line.endswith(f"); set aside as {aside}; using step 4"), line
  assert "resuming at step 4" in out.out
  assert os.path.isdir(aside) and checkpoints(wd) == [4, 8]   # 8 trained again

  truncate(wd, 8)                  # a reader (eval.py) takes 4 and moves nothing
  assert trainer.load_model(wd)[2] == 4
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and err.startswith(
      f"checkpoint of step 8 in {wd}/checkpoints cannot be read (")
  assert err.endswith("); kept in place; using step 4\n") and checkpoints(wd) == [4, 8]
  truncate(wd, 4)                                     # now none can be read
  # in this process: a refusal is a TrainError, which train.py prints as one line and
  # exit status 1 (trainer.cli.user_errors, tests/trainer/test_cli.py)
  with pytest.raises(trainer.TrainError) as e:
    trainer.train_and_evaluate(tiny_config(), wd)
  msg = str(e.value)
  assert msg.splitlines() == [msg] and msg.startswith(
      f"no checkpoint in {wd}/checkpoints can be read (steps 8, 4; step 8: "), msg
  assert msg.endswith(f"to start over, move {wd}/checkpoints away"), msg
  assert checkpoints(wd) == [4, 8] and os.listdir(os.path.dirname(aside)) == ["8"]
