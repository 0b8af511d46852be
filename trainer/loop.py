"""train_and_evaluate(config, workdir): the training loop.

  * the config is validated before any data is read or anything compiles;
  * a workdir that holds a checkpoint resumes from it (a different model config is
    refused); the result equals an uninterrupted run on CPU;
  * orbax keeps the last `keep_checkpoints` checkpoints plus the best by eval loss;
  * SIGTERM / SIGINT, wherever they land, save the newest state, wait for the
    checkpoint to commit, stop the input thread and return (train.py: exit 0); in a
    multi-process job a signal to any process stops every process at the same step
    (jax's preemption sync point, `_Stop`), which saves one checkpoint there; a
    non-finite loss stops the run and keeps the last good checkpoint (checked on the
    device every step, read at each log, evaluation and checkpoint: trainer/step.py);
  * a checkpoint that cannot be read is set aside, the newest readable one resumes
    (trainer/checkpoint.py); a second run on a workdir in use is refused (its lock);
    a rerun of a finished workdir says so;
  * metrics go to stdout, `workdir/metrics.jsonl` and TensorBoard (`workdir/tb`), one
    record per step across resumes; the machine (backend, device kind and count) to
    the first record and `workdir/runtime.json`;
  * the host never waits for the device between logs: the step is one jitted
    function over donated state, batches are put on the devices `config.prefetch`
    steps ahead by a thread, metrics stay on the device until `log_every`;
  * float32 matmuls run at `config.matmul_precision`; compute in `config.dtype`
    (bfloat16: float32 parameters, softmax statistics and loss); blocks
    rematerialised per `config.remat`;
  * it runs on a ("data", "fsdp", "seq", "tensor") device mesh (`config.mesh`, trainer/parallel.py).
"""
from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import signal
import sys
import threading
import time

import jax
from flax import nnx

import attention
from data import pipeline, tasks
from trainer import parallel
from models import ModelConfig, flops_per_token, param_count
from trainer import checkpoint as ckpt
from trainer import progress
from trainer import step as steps
from trainer.config import TrainError, check_mesh, \
    matmul_precision, model_dict, need, validate
from trainer.metrics import Metrics, runtime_info


class _Stop:
  """Turns SIGTERM/SIGINT into a flag that the loop checks at each step boundary
  (`due`).

  One process: the handler only records the signal: Python runs it in the main
  thread between bytecodes, also while that thread waits in a host sync, and raising
  from it there would unwind through XLA's C++ frames. The loop then saves, waits for
  the save to commit and stops its threads before returning. A second signal changes
  nothing: the save in progress completes (kill -9 is the way to abandon it).

  Several processes (`multi`): they must stop at the same step, or the others would
  wait in that step's collectives for the one that left. jax.distributed's
  preemption service does that: its own SIGTERM handler (installed by
  `jax.distributed.initialize`, left in place here) posts the notice to the
  coordination service, every process learns of it, and
  `multihost_utils.reached_preemption_sync_point(step)`, called at every step
  boundary by every process, turns true at the same step everywhere (the largest
  step any process had reached, plus one). SIGINT is turned into a SIGTERM to this
  process, so that it takes the same path.

  Args:
    multi: whether this process is one of a multi-process job.
  """

  def __init__(self, multi: bool = False):
    self.signal = None
    self.old = {}
    self.multi = multi

  def __enter__(self):
    for s in (signal.SIGINT,) if self.multi else (signal.SIGTERM, signal.SIGINT):
      try:
        self.old[s] = signal.signal(s, self._handle)
      except ValueError:   # not the main thread: signals cannot be caught here
        pass
    return self

  def _handle(self, signum, frame):
    if self.multi:
      os.kill(os.getpid(), signal.SIGTERM)      # to jax's preemption notifier
    elif self.signal is None:
      self.signal = signum

  def due(self, step: int) -> bool:
    """Whether the loop stops at this step boundary; call it once at every boundary.

    Args:
      step: the step just reached (the same sequence on every process).
    """
    if self.multi and self.signal is None:
      from jax.experimental import multihost_utils
      try:
        if multihost_utils.reached_preemption_sync_point(step):
          self.signal = signal.SIGTERM
      except RuntimeError as e:     # the service off: jax_enable_preemption_service
        raise TrainError(f"a multi-process run needs jax's preemption service to stop "
                         f"all processes together on a signal ({e})") from None
    return self.signal is not None

  @property
  def name(self) -> str:
    return signal.Signals(self.signal).name

  def __exit__(self, *exc):
    for s, h in self.old.items():
      signal.signal(s, h)


class Interrupted(Exception):
  """Raised by Prefetch's `next` when its `interrupted()` turns true while it waits."""


class Prefetch:
  """Device batches of steps [start, stop), produced `depth` ahead by a thread.

  Each batch is task.train_batch(step) put on the mesh (parallel.put_batch), so the
  host-to-device copy overlaps the previous steps' compute. With n_rows (the global
  batch size) in a multi-process run, the task reads only this process's rows of
  each batch (task.rows = parallel.local_rows(mesh, n_rows)). depth 0: made on
  demand in the calling thread. An exception in the thread is raised by `next`;
  while `next` waits for a batch, `interrupted()` (e.g. a signal's flag) is checked
  every 0.1 s and raises Interrupted when true. `close` stops the thread and waits
  for it.
  """

  def __init__(self, task, mesh, start: int, stop: int, depth: int,
               interrupted=lambda: False, n_rows: int | None = None):
    if n_rows is not None and jax.process_count() > 1:
      # None where the processes' rows are no one block each: the whole batch is read
      task.rows = parallel.local_rows(mesh, n_rows)
    self.make = lambda s: parallel.put_batch(task.train_batch(s), mesh, n_rows)
    self.next_step, self.stop, self.interrupted = start, stop, interrupted
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
        if not self._put(item):
          jax.block_until_ready(item)   # closed: let its copy finish before dropping it
        s += 1
    except BaseException as e:    # handed to the consumer, raised there
      self._put((None, e))

  def _put(self, item) -> bool:
    """Puts item on the queue unless closed (a full queue never blocks a close)."""
    while not self.done.is_set():
      try:
        self.q.put(item, timeout=0.1)
        return True
      except queue.Full:
        pass
    return False

  def __next__(self):
    if self.q is None:
      s, b = self.next_step, self.make(self.next_step)
    else:
      while True:
        try:
          s, b = self.q.get(timeout=0.1)
          break
        except queue.Empty:
          if self.interrupted():
            raise Interrupted from None
      if s is None:
        raise b
    assert s == self.next_step, (s, self.next_step)
    self.next_step += 1
    return b

  def close(self, timeout: float = 30.0):
    """Stops the thread and waits for it to finish the batch it is making, then for
    the copies of the batches it made: a daemon thread that is still calling jaxlib
    when the interpreter exits aborts the process (`terminate called after throwing
    an instance of ''`, exit status 134). A batch still unmade after `timeout`
    seconds (a stalled read) is left behind, with one line that says so."""
    self.done.set()
    if self.q is None:
      return
    self.thread.join(timeout)
    if self.thread.is_alive():
      print(f"the input thread has not finished a batch in {timeout:g} s; "
            "leaving it", file=sys.stderr, flush=True)
    while True:
      try:
        jax.block_until_ready(self.q.get_nowait())
      except queue.Empty:
        break


def _mark(shard):
  """A copy of one device's shard of the step counter: an array that becomes ready
  when its step is done (the counter itself is donated to the next step).

  A device-to-same-device copy (`device_put(..., may_alias=False)`), not a jitted
  `step + 0`: a jitted function called on one device's shard inside the training
  mesh's context (`jax.set_mesh`) is refused for mixing devices on any mesh of more
  than one device.
  """
  return jax.device_put(shard, shard.sharding, may_alias=False)


class Progress:
  """A tqdm bar advanced as steps complete on the device, not as they are dispatched
  (asynchronous dispatch runs ahead of the device, then waits at the next sync).

  After a step is dispatched, at most every `every_s` seconds, the bar advances to
  the newest marker that is ready (`poll`: `jax.Array.is_ready` does not block) and a
  marker of this step is dispatched (a jitted copy of the step counter: one tiny
  computation, no transfer); `synced` advances it to a step known to be done (after
  a host sync).
  """

  def __init__(self, start: int, total: int, every_s: float = 0.1, **tqdm_kw):
    # a tqdm bar on a terminal; plain lines in a log file (trainer.progress)
    self.bar = progress.bar(total, "train", initial=start, unit="step", **tqdm_kw)
    self.done, self.every_s, self.t = start, every_s, -float("inf")
    self.pending = collections.deque()       # (step, marker), oldest first

  def dispatched(self, step: int, counter) -> None:
    """Step `step` was dispatched; `counter` is the device step counter it wrote.
    Every `every_s` seconds: polls, then marks (the other steps cost a clock read)."""
    now = time.perf_counter()
    if now - self.t >= self.every_s:
      self.poll()
      # this process's copy: a multi-host job's other processes run no marker
      self.pending.append((step, _mark(counter.addressable_data(0))))
      self.t = now

  def poll(self) -> None:
    while self.pending and self.pending[0][1].is_ready():
      self._advance(self.pending.popleft()[0])

  def synced(self, step: int) -> None:
    while self.pending and self.pending[0][0] <= step:
      self.pending.popleft()
    self._advance(step)

  def _advance(self, step: int) -> None:
    if step > self.done:
      self.bar.update(step - self.done)
      self.done = step

  def close(self):
    self.bar.close()


def train_and_evaluate(config, workdir: str) -> dict:
  """Trains config's model on config's task in workdir; returns the last metrics.

  Args:
    config: the run's config (configs/base.py documents each field).
    workdir: the directory of its checkpoints, metrics and config.json.

  Runs on the mesh of `config.mesh` over every device (of every process, after
  joining the multi-host job of `config.distributed`, if any), with float32 matmuls
  at config.matmul_precision. Holds the workdir's lock (process 0) while it runs.
  Stopped by SIGTERM/SIGINT it saves, then returns the metrics so far with
  "stopped_at_step"; on a finished workdir it says so and returns {}.
  """
  validate(config)                              # before any data or compilation
  parallel.initialize(config)                   # before anything touches a device
  mesh = parallel.make_mesh(config.get("mesh"))
  check_mesh(config, mesh)                      # the batch sizes split over the mesh
  multi = jax.process_count() > 1
  with _Stop(multi) as stop, _lock(workdir, multi):
    with parallel.use_mesh(mesh), matmul_precision(config.matmul_precision):
      return _train(config, workdir, mesh, stop)


@contextlib.contextmanager
def _lock(workdir, multi: bool):
  """The workdir's lock, held by process 0; in a multi-process job every process
  learns whether process 0 got it (a broadcast), so that a refused job ends in every
  process with one line, not with the others waiting for process 0."""
  lock, refused = None, None
  if parallel.is_primary():
    try:
      lock = ckpt.WorkdirLock(workdir).acquire()
    except TrainError as e:
      refused = e
  if multi:
    import numpy as np
    from jax.experimental import multihost_utils
    told = multihost_utils.broadcast_one_to_all(np.int32(refused is not None))
    if int(told) and refused is None:
      refused = TrainError(f"workdir {workdir} is in use: process 0 of this job was "
                           "refused its lock (its line says by whom)")
  if refused is not None:
    raise refused
  try:
    yield
  finally:
    if lock is not None:
      lock.release()


def _setup(config, workdir, mesh):
  """(task, mcfg, mngr, model, opt, start, changes) of a run, restored from the
  newest readable checkpoint if the workdir has one; changes: the settings that
  differ from the workdir's config.json (`ckpt.check_same_model`)."""
  primary = parallel.is_primary()
  task = pipeline.create(config)
  mcfg = ModelConfig.from_dict({**model_dict(config), **task.model_overrides})
  need(task.seq_len <= mcfg.max_len, "model.max_len",
       f"the {config.task} sequences have {task.seq_len} tokens, more than "
       f"model.max_len={mcfg.max_len}")
  # every sequence axis mesh.seq splits: those the config fixes, and the (target)
  # length the task has once read (its record's seq_key names it)
  rec = tasks.task(config.task)
  seq_lens = {**rec.lengths(config), rec.seq_key: task.seq_len}
  check_mesh(config, mesh, seq_lens)            # and so do the sequences
  parallel.check_tensor(mcfg, mesh)             # and the heads over mesh.tensor
  changes = ckpt.check_same_model(workdir, mcfg, config, write=primary)
  mngr = ckpt.checkpoint_manager(workdir, config)
  # created in their FSDP / tensor layout on the mesh (replicated on data and seq)
  model, opt = ckpt.make_state(config, mcfg, mesh, fresh=mngr.latest_step() is None)
  model.train()
  try:
    start = ckpt.restore_newest(mngr, model, opt, ckpt.saved_part(config)) or 0
  except BaseException:
    mngr.close()
    raise
  return task, mcfg, mngr, model, opt, start, changes


def attention_notes(mcfg, mesh) -> list[str]:
  """The notes of the model's attention variants that compute as another variant on
  `mesh` (`Variant.runs_as`: ring on 1 device = flash), sorted, without repeats."""
  return sorted({n for role in mcfg.roles for name in mcfg.role_variants(role)
                 if (n := attention.variant(name).note_on(mesh, mcfg.options_for(name)))})


def layer_record(mcfg) -> dict:
  """What the model's self-attention layers carry besides their variants, for the banner
  and runtime.json: "layer_pieces" (the pieces any layer got: short convolutions, norms,
  gates, attn_gate; comma-joined in layer order) and "attention_options" ({variant:
  its options}, e.g. softmax's sinks or local's window, for the variants in use); {}
  where neither applies, so that two runs that differ only there do not read alike."""
  pieces, opts = [], {}
  for role in mcfg.roles:
    if role == "cross_attention":
      continue
    for spec in mcfg.layer_specs(role):
      pieces += [p for p in spec.pieces if p not in pieces]
      if mcfg.options_for(spec.name):
        opts[spec.name] = mcfg.options_for(spec.name)
  return {**({"layer_pieces": ",".join(pieces)} if pieces else {}),
          **({"attention_options": opts} if opts else {})}


def _train(config, workdir, mesh, stop) -> dict:
  primary = parallel.is_primary()               # process 0 alone writes logs
  task, mcfg, mngr, model, opt, start, changes = _setup(config, workdir, mesh)
  n_steps = int(config.num_train_steps)
  if start >= n_steps:
    mngr.close()
    if primary:
      print(f"the run in {workdir} is complete: its newest checkpoint is of step "
            f"{start} (num_train_steps={n_steps}); nothing to train (raise "
            "--config.num_train_steps to train on, or use another --workdir)",
            flush=True)
    return {}
  if changes and primary:    # a resume under other settings: said, kept, and marked
    print(ckpt.record_changes(workdir, mcfg, config, changes, start), flush=True)
  part = ckpt.saved_part(config)
  metrics = Metrics(workdir, enabled=primary, start=start)
  counts = param_count(model)
  counts["trainable"] = int(sum(x.size for x in jax.tree.leaves(
      nnx.state(model, ckpt.trained_part(config)))))
  fl = flops_per_token(mcfg, task.seq_len, config.get("src_len"))
  rt = runtime_info()
  notes = attention_notes(mcfg, mesh)
  if mcfg.layer_attention:      # a hybrid stack: its pattern and every layer's variant
    rt["layer_attention"] = mcfg.layer_attention
    rt["decoder_layers"] = ",".join(s.name for s in mcfg.layer_specs("decoder_attention"))
  if notes:
    rt["attention_notes"] = notes
  layers = layer_record(mcfg)
  rt.update(layers)
  if primary:
    extra = "".join(f" {k}={v if isinstance(v, str) else json.dumps(v)}"
                    for k, v in layers.items())
    print(f"{config.task}: attention={mcfg.attention_label}{extra} "
          f"positions={mcfg.positions} heads={mcfg.num_heads} kv_heads={mcfg.kv_heads} "
          f"packing={'on' if config.get('packing') else 'off'} "
          f"params={counts['params']:,} "
          f"trainable={counts['trainable']:,} buffers={counts['buffers']:,} "
          f"forward GFLOP/token={fl['total'] / 1e9:.4g} dtype={mcfg.dtype} "
          f"remat={mcfg.remat} "
          f"{'resuming at step ' + str(start) if start else 'from scratch'} in {workdir} "
          f"on {rt['device_count']} x {rt['device_kind']} ({rt['backend']}, mesh "
          f"{dict(mesh.shape)}, matmul precision {config.matmul_precision})", flush=True)
    for n in notes:
      print(f"note: {n}", flush=True)
    with open(os.path.join(workdir, "runtime.json"), "w") as f:
      json.dump(rt, f, indent=1)
  if start == 0:
    metrics.write(0, params=counts["params"], trainable_params=counts["trainable"],
                  flops_per_token=fl["total"], **rt)
  else:
    metrics.write(start, resumed_at_step=start)   # steps_per_s restarts its clock here

  step_fn = steps.TrainStep(model, opt, start, deterministic=config.get("deterministic"))
  # several processes stop only together, at a step boundary (stop.due)
  batches = Prefetch(task, mesh, start, n_steps, int(config.prefetch),
                     interrupted=lambda: not stop.multi and stop.signal is not None,
                     n_rows=int(config.batch_size))
  last, bar = {}, None
  if config.progress and primary:
    bar = Progress(start, n_steps, dynamic_ncols=True, file=sys.stdout, mininterval=1.0)
  last_good = start if start else None         # the newest step saved
  t0 = t_log = time.perf_counter()
  c_log = time.thread_time()      # this thread's CPU: the loop's own host work
  s_log, loss_sum, loss_n = start, 0.0, 0

  def sync(step):
    """The one host sync: the mean loss since the last one, and the NaN check."""
    nonlocal loss_sum, loss_n
    info = step_fn.fetch()
    if info["bad_step"] >= 0:
      kept = (f"the last good checkpoint (step {last_good}) is kept in {workdir}"
              if last_good is not None else "no checkpoint had been saved yet")
      raise TrainError(f"non-finite training loss at step {info['bad_step']}; "
                       f"stopping; {kept}")
    loss_sum += info["loss"] * info["steps"] if info["steps"] else 0.0
    loss_n += info["steps"]
    if bar is not None:
      bar.synced(step)

  def save(step, ev=None):
    nonlocal last_good
    step_fn.write_back()
    ckpt.save(mngr, step, model, opt, ev, part)     # returns once committed
    last_good = step

  def stopped(step) -> str:
    """After a signal: saves the newest state unless saved; what happened, in words."""
    if step == start:
      return ("nothing new to save (" + (f"the newest checkpoint is of step {start}"
                                         if start else "no checkpoint yet") + ")")
    if last_good != step:
      sync(step)
      save(step)
    return f"saved a checkpoint of step {step}"

  try:
    step = start
    # A signal is acted on at the next step boundary (or while waiting for a batch),
    # whatever the loop was doing when it landed: a log step's host sync, an
    # evaluation, a save.
    while step < n_steps and not stop.due(step):
      try:
        batch = next(batches)
      except Interrupted:
        break
      step_fn(batch)
      step += 1
      if bar is not None:
        bar.dispatched(step, step_fn.carry["step"])
      end = step == n_steps
      log = step % config.log_every == 0 or end
      ev_now = step % config.eval_every == 0 or end
      save_now = step % config.checkpoint_every == 0 or end
      if log or ev_now or save_now:
        sync(step)
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
          bar.bar.set_postfix(loss=f"{last['train_loss']:.4f}", refresh=False)
      ev = None
      if ev_now:
        step_fn.write_back()
        ev = steps.evaluate(model, task, config, mesh, show=bar is not None)
        last.update(ev)
        metrics.write(step, **ev)
      if save_now:
        save(step, ev)
    if stop.signal is not None:
      what = stopped(step)
      if primary:
        print(f"signal {stop.name}: {what} in {workdir}; " + (
            "the run is complete" if step == n_steps else
            "run the same command again to resume"), flush=True)
      last["stopped_at_step"] = step
  finally:
    batches.close()
    if bar is not None:
      bar.close()
    metrics.close()
    mngr.close()
  return last
