"""train_and_evaluate(config, workdir): the training loop.

  * the config is validated before any data is read or anything compiles;
  * a workdir that holds a checkpoint resumes from it (a different model config is
    refused); the result equals an uninterrupted run on CPU;
  * orbax keeps the last `keep_checkpoints` checkpoints plus the best by eval loss;
  * SIGTERM / SIGINT save a checkpoint, then stop; a non-finite loss stops the run
    and keeps the last good checkpoint (checked on the device every step, read at
    each log, evaluation and checkpoint: trainer/step.py);
  * metrics go to stdout, `workdir/metrics.jsonl` and TensorBoard (`workdir/tb`);
    the machine (backend, device kind and count) to the first record and
    `workdir/runtime.json`;
  * the host never waits for the device between logs: the step is one jitted
    function over donated state, batches are put on the devices `config.prefetch`
    steps ahead by a thread, metrics stay on the device until `log_every`;
  * float32 matmuls run at `config.matmul_precision`; compute in `config.dtype`
    (bfloat16: float32 parameters, softmax statistics and loss); blocks
    rematerialised per `config.remat`;
  * it runs on a ("data", "fsdp", "seq") device mesh (`config.mesh`, parallel.py).
"""
from __future__ import annotations

import json
import os
import queue
import signal
import sys
import threading
import time

import jax
from flax import nnx

import input_pipeline
import parallel
from models import ModelConfig, flops_per_token, param_count
from trainer import checkpoint as ckpt
from trainer import step as steps
from trainer.config import SEQ_KEY, TrainError, check_mesh, make_optimizer, \
    matmul_precision, model_dict, need, validate
from trainer.metrics import Metrics, runtime_info


class _Stop:
  """Turns SIGTERM/SIGINT into a flag the loop checks after each step."""

  def __init__(self):
    self.signal = None
    self.old = {}

  def __enter__(self):
    for s in (signal.SIGTERM, signal.SIGINT):
      try:
        self.old[s] = signal.signal(s, self._handle)
      except ValueError:   # not the main thread: signals cannot be caught here
        pass
    return self

  def _handle(self, signum, frame):
    self.signal = signum

  def __exit__(self, *exc):
    for s, h in self.old.items():
      signal.signal(s, h)


class Prefetch:
  """Device batches of steps [start, stop), produced `depth` ahead by a thread.

  Each batch is task.train_batch(step) put on the mesh (parallel.put_batch), so the
  host-to-device copy overlaps the previous steps' compute. depth 0: made on demand
  in the calling thread. An exception in the thread is raised by `next`.
  """

  def __init__(self, task, mesh, start: int, stop: int, depth: int):
    self.make = lambda s: parallel.put_batch(task.train_batch(s), mesh)
    self.next_step, self.stop = start, stop
    self.q = None
    self.done = threading.Event()
    if depth > 0:
      self.q = queue.Queue(maxsize=depth)
      self.thread = threading.Thread(target=self._fill, args=(start,), daemon=True)
      self.thread.start()

  def _fill(self, s):
    try:
      while s < self.stop and not self.done.is_set():
        item = (s, self.make(s))
        while not self.done.is_set():
          try:
            self.q.put(item, timeout=0.1)
            break
          except queue.Full:
            pass
        s += 1
    except BaseException as e:    # handed to the consumer, raised there
      self.q.put((None, e))

  def __next__(self):
    if self.q is None:
      s, b = self.next_step, self.make(self.next_step)
    else:
      s, b = self.q.get()
      if s is None:
        raise b
    assert s == self.next_step, (s, self.next_step)
    self.next_step += 1
    return b

  def close(self):
    self.done.set()


def train_and_evaluate(config, workdir: str) -> dict:
  """Trains config's model on config's task in workdir; returns the last metrics.

  Runs on the mesh of `config.mesh` over every device (of every process, after
  joining the multi-host job of `config.distributed`, if any), with float32 matmuls
  at config.matmul_precision.
  """
  validate(config)                              # before any data or compilation
  parallel.initialize(config)                   # before anything touches a device
  mesh = parallel.make_mesh(config.get("mesh"))
  check_mesh(config, mesh)                      # the batch sizes split over the mesh
  with parallel.use_mesh(mesh), matmul_precision(config.matmul_precision):
    return _train(config, workdir, mesh)


def _setup(config, workdir, mesh):
  """(task, mcfg, mngr, model, opt, start) of a run, restored if the workdir has a
  checkpoint."""
  primary = parallel.is_primary()
  task = input_pipeline.create(config)
  mcfg = ModelConfig.from_dict({**model_dict(config), **task.model_overrides})
  need(task.seq_len <= mcfg.max_len, "model.max_len",
       f"the {config.task} sequences have {task.seq_len} tokens, more than "
       f"model.max_len={mcfg.max_len}")
  seq_lens = {SEQ_KEY.get(config.task, "seq_len"): task.seq_len}
  if mcfg.kind == "encdec":
    seq_lens["src_len"] = int(config.src_len)
  check_mesh(config, mesh, seq_lens)            # and so do the sequences
  ckpt.check_same_model(workdir, mcfg, config, write=primary)
  mngr = ckpt.checkpoint_manager(workdir, config)
  model = ckpt.make_model(config, mcfg, fresh=mngr.latest_step() is None)
  model.train()
  parallel.shard(model, mesh)                   # FSDP layout (replicated without fsdp)
  opt = nnx.Optimizer(model, make_optimizer(config), wrt=ckpt.trained_part(config))
  parallel.shard(opt, mesh)
  start = 0
  if mngr.latest_step() is not None:
    start = int(mngr.latest_step())
    ckpt.restore(mngr, start, model, opt, ckpt.saved_part(config))
  return task, mcfg, mngr, model, opt, start


def _train(config, workdir, mesh) -> dict:
  primary = parallel.is_primary()               # process 0 alone writes logs
  task, mcfg, mngr, model, opt, start = _setup(config, workdir, mesh)
  part = ckpt.saved_part(config)
  metrics = Metrics(workdir, enabled=primary)
  counts = param_count(model)
  counts["trainable"] = int(sum(x.size for x in jax.tree.leaves(
      nnx.state(model, ckpt.trained_part(config)))))
  fl = flops_per_token(mcfg, task.seq_len, config.get("src_len"))
  rt = runtime_info()
  if primary:
    print(f"{config.task}: attention={mcfg.attention} params={counts['params']:,} "
          f"trainable={counts['trainable']:,} buffers={counts['buffers']:,} "
          f"forward GFLOP/token={fl['total'] / 1e9:.4g} dtype={mcfg.dtype} "
          f"remat={mcfg.remat} "
          f"{'resuming at step ' + str(start) if start else 'from scratch'} in {workdir} "
          f"on {rt['device_count']} x {rt['device_kind']} ({rt['backend']}, mesh "
          f"{dict(mesh.shape)}, matmul precision {config.matmul_precision})", flush=True)
    with open(os.path.join(workdir, "runtime.json"), "w") as f:
      json.dump(rt, f, indent=1)
  if start == 0:
    metrics.write(0, params=counts["params"], trainable_params=counts["trainable"],
                  flops_per_token=fl["total"], **rt)
  elif start < config.num_train_steps:
    metrics.write(start, resumed_at_step=start)   # steps_per_s restarts its clock here

  step_fn = steps.TrainStep(model, opt, start, deterministic=config.get("deterministic"))
  batches = Prefetch(task, mesh, start, config.num_train_steps, int(config.prefetch))
  last, bar = {}, None
  if config.progress and primary and start < config.num_train_steps:
    from tqdm import tqdm
    bar = tqdm(total=config.num_train_steps, initial=start, unit="step", dynamic_ncols=True,
               file=sys.stdout, mininterval=1.0)
  last_good = start if start else None
  t0 = t_log = time.perf_counter()
  c_log = time.thread_time()      # this thread's CPU: the loop's own host work
  s_log, loss_sum, loss_n = start, 0.0, 0

  def check(info):
    if info["bad_step"] >= 0:
      kept = (f"the last good checkpoint (step {last_good}) is kept in {workdir}"
              if last_good is not None else "no checkpoint had been saved yet")
      raise TrainError(f"non-finite training loss at step {info['bad_step']}; "
                       f"stopping; {kept}")

  try:
    with _Stop() as stop:
      step = start
      while step < config.num_train_steps:
        step_fn(next(batches))
        step += 1
        if bar is not None:
          bar.update(1)
        end = step == config.num_train_steps
        log = step % config.log_every == 0 or end
        ev_now = step % config.eval_every == 0 or end
        save_now = step % config.checkpoint_every == 0 or end or stop.signal is not None
        if log or ev_now or save_now:
          info = step_fn.fetch()                  # the one host sync
          check(info)
          loss_sum += info["loss"] * info["steps"] if info["steps"] else 0.0
          loss_n += info["steps"]
        if log and loss_n:
          now, cpu = time.perf_counter(), time.thread_time()
          last = {"train_loss": loss_sum / loss_n,
                  "steps_per_s": (step - start) / (now - t0),
                  "recent_steps_per_s": (step - s_log) / (now - t_log),
                  # the Python loop's CPU per step (dispatch, bookkeeping, the log
                  # itself): the host cost that competes with a CPU backend's compute
                  "host_cpu_ms_per_step": (cpu - c_log) / (step - s_log) * 1e3}
          t_log, c_log, s_log, loss_sum, loss_n = now, cpu, step, 0.0, 0
          metrics.write(step, **last)
          if bar is not None:
            bar.set_postfix(loss=f"{last['train_loss']:.4f}", refresh=False)
        ev = None
        if ev_now or save_now:
          step_fn.write_back()
        if ev_now:
          ev = steps.evaluate(model, task, config, mesh)
          last.update(ev)
          metrics.write(step, **ev)
        if save_now:
          ckpt.save(mngr, step, model, opt, ev, part)
          last_good = step
        if stop.signal is not None:
          print(f"signal {stop.signal}: saved a checkpoint at step {step} in {workdir}; "
                "run the same command again to resume", flush=True)
          break
  finally:
    batches.close()
    if bar is not None:
      bar.close()
    metrics.close()
    mngr.close()
  return last
