"""The one runner of the studies' sweeps: train.py runs over variants x learning rates
x seeds, resumable, each unit of runs in a child process of its own. Every sweep
(studies.variants.compare, studies.recall.mqar, and any later one) takes from here:

  identity   `config_fingerprint` (the config less the variant, the data dir, unused
             variants' options and `NEUTRAL` fields), `finished` (a workdir's
             result.json of this config), `set_aside` (a workdir trained under other
             settings is renamed, kept, and its run trains afresh)
  one run    `train_run`: train (or resume) in this process, then the study's
             measurements, the CPU seconds spent, result.json
  children   `spawn` starts one child (`python -m <study> <job json>`), `child` is its
             side (quiet logging, pinned to a core, its CPU time in the ledger),
             `execute` runs many, `jobs` at a time, each pinned to a core of its own
  ledgers    root/cpu_ledger.jsonl (each child's whole CPU time, start-up included),
             root/wall_ledger.jsonl (each invocation's wall time: `WallClock`),
             `ledger_totals` their sums
  rates      `lr_ladder` and `LrRule`: which rate a sweep trains next and which one
             it chooses for a variant's other runs, the one rule of every sweep

What a unit of a child is stays the study's: mqar runs a variant's runs in one child
(JAX's start-up paid once per variant); compare_variants one run per child, since its
GPU rows report the device's peak memory, which is a process's peak over all it ran.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import sys
import time

from studies.core import pages, protocol, runs

# ---- a run's identity ---------------------------------------------------------------

# Config fields added after rows were trained, at the value that reproduces what the
# code did before they existed ({key: neutral value}, a key at any depth of the config):
# left out of a fingerprint at that value, so that adding a field does not make every
# finished run of a sweep stale (retrained). Whoever adds a config field whose neutral
# value keeps the old behaviour adds it here. gated_layer: every row before issue 76
# trained the gated variants bare; `config_dict` also reads it as "bare" for a model whose
# variants get no piece from it (softmax: "published" changes nothing).
NEUTRAL = {"eval_seq_len": 0, "image_side": 0, "rope_base": 10000.0, "rope_fraction": 1.0,
           "packing": False, "short_conv": 0, "one_hot_max_vocab": 1024,
           "heartbeat_timeout_s": 100,
           # studies.core.protocol's held-out splits (0: mnist trains on all 60,000 images
           # and evaluates on test; shakespeare trains on all its training text)
           "mnist_validation": 0, "test_fraction": 0.0,
           "gated_layer": "bare",
           # MQAR training over a mixture of shapes (configs/mqar.py; "" = off)
           "train_mix": "",
           # a per-layer attention pattern (models/config.py; "" = every layer one)
           "layer_attention": "",
           # the tensor (head) axis of the mesh (configs/base.py mesh.tensor; 1 = none)
           "tensor": 1}


def config_dict(config) -> dict:
  """The config as the fingerprint sees it: all but the variant, the data dir and the
  options of variants the model does not use (in none of its attention roles)."""
  from models.config import ROLES
  d = json.loads(config.to_json_best_effort(sort_keys=True))
  d.pop("attention", None)
  d.pop("data_dir", None)
  used = {config.attention} | {config.model.get(r) for r in ROLES}
  if config.model.get("layer_attention"):       # a hybrid stack's variants too
    from models.config import parse_pattern
    used |= {n for n, _ in parse_pattern(config.model.layer_attention)}
  opts = d["model"].get("attention_options") or {}
  d["model"]["attention_options"] = {k: v for k, v in opts.items() if k in used}
  # the layer around a variant (model.gated_layer) changes only the variants whose
  # records list one (Variant.layer): for a model that gets no piece from it, it is
  # the neutral "bare" (the rows trained before it existed, all bare, keep theirs)
  if "gated_layer" in d["model"] and not _layer_pieces(config, used):
    d["model"]["gated_layer"] = NEUTRAL["gated_layer"]
  return d


def _layer_pieces(config, used) -> bool:
  """Whether the model's `gated_layer` gives any of the variants `used` (the model's
  `attention` where the config swaps none in) a layer piece; an unknown variant or value counts as one
  (the fingerprint keeps the field)."""
  import attention
  from models.config import layer_pieces
  names = {n for n in used if n} | {config.get("attention") or config.model.get("attention")}
  try:
    return any(layer_pieces(config.model.gated_layer, attention.variant(n).layer)
               for n in names if n)
  except (ValueError, attention.AttentionError):
    return True


def drop_neutral(d):
  """`d` less the `NEUTRAL` keys (at any depth) at their neutral value."""
  if isinstance(d, dict):
    return {k: drop_neutral(v) for k, v in d.items()
            if not (k in NEUTRAL and v == NEUTRAL[k])}
  return d


def config_fingerprint(config) -> str:
  """A short hash of everything in the config but the variant, the data dir and the
  options of variants the model does not use, less the fields at their `NEUTRAL`
  value: two rows with the same fingerprint were trained under the same budget and
  model."""
  return runs.fingerprint(drop_neutral(config_dict(config)))


def fingerprints(config) -> set[str]:
  """Every fingerprint a run of `config` may have recorded: `config_fingerprint`'s, and
  the hash with the neutral fields kept, which rows trained while those fields existed
  but before `NEUTRAL` recorded (the fingerprints of that time)."""
  return {config_fingerprint(config), runs.fingerprint(config_dict(config))}


def finished(workdir, config=None) -> dict | None:
  """workdir/result.json if the run finished there (status ok) under `config` (when
  given): a result of another config (the settings changed since: budget, model,
  options) is stale, and a refusal or skip an older script stored is not a result
  either. Results written before fingerprints were recorded count as this config's."""
  res = pages.read_json(os.path.join(workdir, "result.json"))
  if res and res.get("status") == "ok" and (
      config is None or res.get("config", config_fingerprint(config))
      in fingerprints(config)):
    return res
  return None


def trained_under(workdir) -> str | None:
  """The config fingerprint a workdir was trained under: its result.json's, else (a
  run stopped before its evaluation) that of the config train.py stored in
  workdir/config.json; None for a workdir with neither."""
  import ml_collections
  for name, get in (("result.json", lambda d: d.get("config")),
                    ("config.json", lambda d: config_fingerprint(
                        ml_collections.ConfigDict(d["config"])))):
    p = os.path.join(workdir, name)
    if os.path.exists(p):
      fp = get(pages.read_json(p))
      if fp:
        return fp
  return None


def set_aside(workdir, config) -> str | None:
  """Renames a workdir trained (or partly trained) under another config than `config`
  to <workdir>.stale-<its fingerprint>, kept, never deleted, so that the run trains
  afresh instead of resuming, or reusing, a run of another budget; returns the new
  path (runs.set_aside)."""
  old = trained_under(workdir)
  return runs.set_aside(workdir, old, old if old in fingerprints(config)
                        else config_fingerprint(config))


# ---- one run in this process ----------------------------------------------------------

def done_or_clear(workdir, config) -> dict | None:
  """workdir/result.json where the run finished there under `config` (it is never
  trained again); else None, with a workdir trained under other settings set aside,
  so that the run trains afresh there or resumes its own checkpoint."""
  done = finished(workdir, config)
  if done:
    return done
  set_aside(workdir, config)
  return None


def write_result(res: dict, workdir) -> dict:
  """Dates `res` and writes it as workdir/result.json; returns it."""
  res["date"] = pages.today()
  pages.write_json(os.path.join(workdir, "result.json"), res)
  return res


def train_run(config, workdir, measure) -> dict:
  """One run in this process: workdir/result.json where it finished under `config`
  (never trained again); else, with a workdir of other settings set aside, trains (or
  resumes from its checkpoint) `config` through train.py, and `measure(config,
  workdir)` gives the study's figures. The result adds the config's fingerprint and
  the CPU seconds (user + system) of this process from the training's start to the
  end of `measure`; it is written to workdir/result.json and returned."""
  done = done_or_clear(workdir, config)
  if done:
    return done
  import trainer
  cpu0 = runs.cpu_seconds()
  out = trainer.train_and_evaluate(config, workdir)
  # a run a signal stopped (SIGTERM: a stopped study, a device call's time limit) saved
  # its step and returned: never measured nor reported as finished (SystemExit)
  stopped = (out or {}).get("stopped_at_step")
  if stopped is not None:
    runs.require_finished(workdir, int(config.num_train_steps), int(stopped))
  res = dict(measure(config, workdir), config=config_fingerprint(config))
  res["cpu_seconds"] = runs.cpu_seconds() - cpu0
  return write_result(res, workdir)


# ---- child processes ------------------------------------------------------------------

def spawn(module: str, job: dict, log_path: str) -> tuple[int, str, float]:
  """Runs `python -m <module> <job as JSON>` in a child process of its own
  (runs.in_subprocess: its output to `log_path`); returns (exit status, last output
  line, seconds)."""
  return runs.in_subprocess([sys.executable, "-m", module, json.dumps(job)], log_path)


def child(job_json: str, work, ledger=None):
  """The side of a child process of `spawn`: `work(job)` of the job it was given, with
  absl's logging at warnings and, where the job names a core, pinned to it (before JAX
  starts its threads). `ledger(job)` -> (root, name): the process's whole CPU time
  (start-up included) goes to root/cpu_ledger.jsonl under name, also when the work
  fails or is stopped."""
  from absl import logging
  logging.set_verbosity(logging.WARNING)
  job = json.loads(job_json)
  if job.get("core") is not None:
    os.sched_setaffinity(0, {job["core"]})
  try:
    return work(job)
  finally:
    if ledger:
      record_cpu(*ledger(job), runs.cpu_seconds())


def execute(names, job_of, module: str, log_path_of, jobs: int = 1, log=print,
            after: dict | None = None) -> None:
  """One child process per name of `names` (`spawn`: module, job_of(name, core),
  log_path_of(name)), in that order, `jobs` at a time. With jobs > 1, each child is
  pinned to a core of its own where the OS allows it (a child on one core runs XLA on
  one thread: two such children trained 25% more MQAR runs per hour on 2 cores than
  one child on both, whose threads wait on each other in small models' steps).
  after: {name: the name of `names` whose child must have ended before it starts};
  a free core takes the first name in order whose wait is over, so that a core is
  not left idle behind a barrier while other work can start (its wait ends however
  that child ended). Stopped (Ctrl-C), it starts no other child and stops the running
  ones (they checkpoint); once the stop file exists (runs.stop_requested: `touch
  workdirs/STOP`), it starts no other child and lets the running ones finish."""
  import queue
  import threading
  from concurrent.futures import ThreadPoolExecutor
  jobs, after = max(1, int(jobs)), dict(after or {})
  cores = queue.Queue()
  usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
  for i in range(jobs):
    cores.put(usable[i % len(usable)] if jobs > 1 and usable else None)
  pending, ended, stop = list(names), set(), threading.Event()
  turn = threading.Condition()

  def take():
    """The next name whose wait is over (None once every name is taken or stopped)."""
    with turn:
      while pending and not stop.is_set() and not runs.stop_requested():
        for n in pending:
          wait_for = after.get(n)
          if wait_for is None or wait_for in ended or wait_for not in names:
            pending.remove(n)
            return n
        turn.wait()
      return None

  def worker():
    while (n := take()) is not None:
      core = cores.get()
      try:
        code, tail, secs = spawn(module, job_of(n, core), log_path_of(n))
      finally:
        cores.put(core)
        with turn:
          ended.add(n)
          turn.notify_all()
      log(f"{n}: exit {code} after {secs:.0f} s: {tail}")

  with ThreadPoolExecutor(jobs) as pool:
    try:
      for f in [pool.submit(worker) for _ in range(jobs)]:
        f.result()
    except BaseException:     # Ctrl-C reaches this thread only: start no other
      stop.set()              # child, and stop the running ones (they checkpoint),
      with turn:              # so that the pool's threads return
        turn.notify_all()
      runs.stop_children()
      raise


# ---- the ledgers ------------------------------------------------------------------------

CPU_LEDGER, WALL_LEDGER = "cpu_ledger.jsonl", "wall_ledger.jsonl"


def record_cpu(root, name, cpu: float) -> None:
  """Appends one process's CPU seconds to root/cpu_ledger.jsonl (its line: the
  variant's name, the seconds, the date)."""
  with open(os.path.join(root, CPU_LEDGER), "a") as f:
    f.write(json.dumps({"variant": name, "cpu_seconds": cpu,
                        "date": pages.today()}) + "\n")


class WallClock:
  """Records one invocation's wall time in root/wall_ledger.jsonl: a line every
  `every` seconds and one at its end, under one invocation id, so that a call killed
  outright (SIGKILL, a session's end: no `finally` runs) still counts up to its last
  line; `wall_seconds` keeps each invocation's largest figure. (A line at the end
  only, as before, lost every killed call: the MQAR page of 2026-11-27 summed 17.9
  minutes of a sweep that had run for hours.)"""

  def __init__(self, root: str, jobs: int, every: float = 60.0):
    import threading
    self.path = os.path.join(root, WALL_LEDGER)
    self.id = f"{os.getpid()}-{time.time_ns()}"
    self.jobs, self.t0, self.done = int(jobs), time.time(), threading.Event()
    self.thread = threading.Thread(target=self._beat, args=(every,), daemon=True)
    self.thread.start()

  def _beat(self, every):
    while not self.done.wait(every):
      self.write()

  def write(self):
    with open(self.path, "a") as f:
      f.write(json.dumps({"invocation": self.id, "wall_seconds": time.time() - self.t0,
                          "jobs": self.jobs, "date": pages.today()}) + "\n")

  def stop(self):
    self.done.set()
    self.thread.join()
    self.write()


def wall_seconds(lines: list[dict]) -> float:
  """The wall time of the ledger's lines: each invocation's largest figure, summed
  (lines without an invocation id, written once at a call's end, count as they are)."""
  last = {}
  for i, w in enumerate(lines):
    k = w.get("invocation", i)
    last[k] = max(last.get(k, 0.0), w["wall_seconds"])
  return sum(last.values())


def ledger_totals(root) -> dict:
  """What root's ledgers add up to: cpu_seconds (every child's), wall_seconds (every
  invocation's, `wall_seconds`), invocations, jobs (the most at once)."""
  read = lambda f: ([json.loads(l) for l in open(os.path.join(root, f))]
                    if os.path.exists(os.path.join(root, f)) else [])
  ledger, walls = read(CPU_LEDGER), read(WALL_LEDGER)
  return {"cpu_seconds": sum(l["cpu_seconds"] for l in ledger),
          "wall_seconds": wall_seconds(walls),
          "invocations": len({w.get("invocation", i) for i, w in enumerate(walls)}),
          "jobs": max([w["jobs"] for w in walls] or [1])}


GAUGE_N = 1024      # the run record's matmul gauge: a GAUGE_N-square float32 product


def gauge() -> dict:
  """How fast this machine is as a sweep starts (timing.matmul_peak): one host name
  has covered CPUs about 3x apart, and pages compare times only within a run."""
  from studies.core import timing
  return timing.matmul_peak(GAUGE_N)


def started(command: str, preset: str | None) -> dict:
  """The run record of a sweep's invocation (pages.run_record) with an id and its
  start time."""
  import uuid
  return dict(pages.run_record(command, preset), id=uuid.uuid4().hex[:12],
              started=datetime.datetime.now().isoformat(timespec="seconds"))


# ---- learning rates ---------------------------------------------------------------------

lr_ladder = protocol.lr_ladder     # the ladder lives with the protocol's rate rules


@dataclasses.dataclass(frozen=True)
class LrRule:
  """How every sweep picks a variant's learning rate, from {rate: validation figure}
  of the rates it trained (the selection seed, studies.core.protocol): it trains each rate
  of `grid`, then, while the best rate is an end of what ran and beats the rate next
  to it beyond `tie`, the next rate of
  the ladder out that way (up to `extend` a side); once nothing is left to train,
  the best quality wins, rates within `tie` of it tie, and a tie goes to the smallest
  rate (runs.next_lr, runs.choose_lr). `higher_better`: the quality's direction.
  The one place a sweep's selection protocol lives: `next` says what to train,
  `choose` what the other runs use."""
  grid: tuple
  extend: int = 0
  tie: float = 0.0
  higher_better: bool = True

  @property
  def ladder(self) -> list[float]:
    return lr_ladder(self.grid, self.extend)

  def next(self, validation) -> float | None:
    """The rate to train next, or None: the sweep is complete. validation: {rate:
    validation figure} (protocol.Validation: plain numbers only)."""
    v = protocol.Validation(validation)
    return runs.next_lr(dict(v), sorted(self.grid), self.ladder, self.tie,
                        self.higher_better)

  def rates(self, validation) -> list[float]:
    """The rates of the sweep so far, smallest first: the grid, the rates past it that
    ran, and the next one it needs."""
    nxt = self.next(validation)
    return sorted(set(self.grid) | set(validation) | ({nxt} if nxt is not None else set()))

  def choose(self, validation) -> float | None:
    """The chosen rate from {rate: validation figure} (protocol.Validation: a record
    holding a test figure is refused; protocol.select hands it the validation parts
    of a run's Scores); None while the sweep is incomplete (or no rate has a
    figure)."""
    v = protocol.Validation(validation)
    if self.next(v) is not None:
      return None
    return runs.choose_lr(dict(v), self.tie, self.higher_better)
