"""Run bookkeeping: the one reader of a workdir's metrics.jsonl, training time and
rate from it, config fingerprints, setting stale runs aside, checking that a run
finished, and running one job in a subprocess of its own.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time


def read_metrics(workdir: str) -> list[dict]:
  """The records train.py wrote to workdir/metrics.jsonl, in order."""
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f if line.strip()]


def records_with(recs: list[dict], key: str) -> list[dict]:
  """The records that hold `key` (e.g. the train records: "train_loss")."""
  return [r for r in recs if key in r]


def timeline(recs: list[dict]) -> list[tuple[dict, float, int]]:
  """[(train record, wall seconds of training before it, segment index)] over every
  segment of a run. train.py's steps_per_s counts from the step a process started at
  (0, or the `resumed_at_step` record of a resume), so a record's time in its segment
  is (step - start) / steps_per_s; a segment starts where the ones before it ended
  (the steps an interrupted process ran past its last checkpoint are counted: that
  time was spent). A segment written before those records existed counts from its
  first train record."""
  out, offset, start, last, seg = [], 0.0, None, None, -1
  for r in recs:
    restart = "resumed_at_step" in r or "params" in r or (
        "steps_per_s" in r and last is not None and r["step"] <= last["step"])
    if restart:
      if last is not None:
        offset += (last["step"] - start) / last["steps_per_s"]
      last, seg = None, seg + 1
      start = r.get("resumed_at_step", 0 if "params" in r else None)
    if "steps_per_s" in r:
      if start is None:                 # an unmarked restart: from this record on
        start = r["step"]
      last = r
      out.append((r, offset + (r["step"] - start) / r["steps_per_s"], seg))
  return out


def busy_steps(workdir: str, recs: list[dict]) -> set:
  """Steps after whose train record the loop evaluated or saved a checkpoint (the
  eval records, and multiples of the run's checkpoint_every from workdir/config.json)."""
  busy = {r["step"] for r in recs if "eval_loss" in r}
  try:
    with open(os.path.join(workdir, "config.json")) as f:
      every = int(json.load(f)["config"]["checkpoint_every"])
  except (OSError, KeyError, ValueError, TypeError):
    return busy
  last = max((r["step"] for r in recs), default=0)
  return busy | set(range(every, last + 1, every))


def rates(workdir: str):
  """(training steps/s, [(step, training seconds, record)] of the evaluations, params)
  from workdir/metrics.jsonl.

  The steps/s is of training alone: over the log intervals of the last segment but
  its first (which holds the compilation), leaving out each interval that begins
  with an evaluation or a checkpoint save (`busy_steps`); where every interval does,
  it is over the whole segment, those included."""
  recs = read_metrics(workdir)
  tl = timeline(recs)
  params = next((r["params"] for r in recs if "params" in r), None)
  seg = [(r, t) for r, t, g in tl if g == tl[-1][2]] if tl else []
  busy = busy_steps(workdir, recs)
  pairs = list(zip(seg, seg[1:]))
  clean = [((a, ta), (b, tb)) for (a, ta), (b, tb) in pairs if a["step"] not in busy]
  steps = sum(b["step"] - a["step"] for (a, _), (b, _) in clean or pairs)
  secs = sum(tb - ta for (_, ta), (_, tb) in clean or pairs)
  rate = steps / secs if secs > 0 else None
  t_of = {r["step"]: t for r, t, _ in tl}           # a later segment's record wins
  evals = [(r["step"], t_of.get(r["step"]), r) for r in recs if "eval_loss" in r]
  return rate, evals, params


def train_seconds(workdir: str) -> float:
  """Wall seconds of training (compilation and in-loop evaluations included) over every
  segment of a run in workdir/metrics.jsonl (see `timeline`)."""
  tl = timeline(read_metrics(workdir))
  return tl[-1][1] if tl else 0.0


def require_finished(workdir: str, steps: int, step: int | None = None) -> int:
  """`step` (default: the step of workdir's latest checkpoint) if it is `steps`; else
  stops the study (SystemExit): a train.py run that ended early (e.g. on a signal) is
  never reported as finished."""
  if step is None:
    import ml_collections
    from trainer.checkpoint import checkpoint_manager
    with open(os.path.join(workdir, "config.json")) as f:
      config = ml_collections.ConfigDict(json.load(f)["config"])
    mngr = checkpoint_manager(workdir, config)
    step = mngr.latest_step()
    mngr.close()
  if step != steps:
    raise SystemExit(f"{workdir} stopped at step {step} of {steps}; run the same "
                     "command again to resume it")
  return int(step)


# ---- fingerprints and stale runs -------------------------------------------------------

def fingerprint(d: dict) -> str:
  """A short hash of a JSON-able dict (sorted keys): equal for equal settings."""
  return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


def set_aside(workdir: str, old: str | None, new: str) -> str | None:
  """Renames a workdir trained (or partly trained) under fingerprint `old` to
  <workdir>.stale-<old> when `new` differs, kept, never deleted, so that the run
  trains afresh instead of resuming or reusing a run of other settings (train.py
  refuses only another model, not another step count or learning rate); returns the
  new path, or None when nothing was moved."""
  if old is None or old == new:
    return None
  dest = f"{workdir}.stale-{old}"
  while os.path.exists(dest):
    dest += "+"
  os.rename(workdir, dest)
  print(f"{workdir}: trained under other settings; set aside as {dest}, training "
        "afresh", flush=True)
  return dest


# ---- a job in its own process ----------------------------------------------------------

_LIVE: set = set()      # the in_subprocess children running now (any thread's)

# A study stops at its next run boundary while this file exists (`touch workdirs/STOP`):
# it starts no other run and ends, the runs in flight finish first, so a session that
# must end loses nothing (killing a study mid-run loses that run where its workdir does
# not outlive the session). ATTNLAB_STOP_FILE names another file ("": none).
STOP_FILE = os.path.join("workdirs", "STOP")


class StopRequested(SystemExit):
  """The stop file exists: the study ends before its next run (exit status 3)."""

  def __init__(self, path: str):
    super().__init__(3)
    self.path = path

  def __str__(self):
    return (f"{self.path} exists: stopped before the next run (finished runs are kept; "
            "remove it and run the same command to go on)")


def stop_requested() -> bool:
  """Whether the stop file (STOP_FILE, or ATTNLAB_STOP_FILE) exists."""
  path = os.environ.get("ATTNLAB_STOP_FILE", STOP_FILE)
  return bool(path) and os.path.exists(path)


def check_stop() -> None:
  """Raises StopRequested where the stop file (STOP_FILE, or ATTNLAB_STOP_FILE) exists;
  a study calls it before each run."""
  if stop_requested():
    path = os.environ.get("ATTNLAB_STOP_FILE", STOP_FILE)
    print(StopRequested(path), flush=True)
    raise StopRequested(path)


def cpu_seconds() -> float:
  """User + system CPU seconds of this process so far, every thread (a run's CPU cost
  does not depend on what else shares the machine, unlike its wall time)."""
  import resource
  r = resource.getrusage(resource.RUSAGE_SELF)
  return r.ru_utime + r.ru_stime


# glibc's malloc gives each large block (XLA:CPU's buffers of a step, up to GiBs at
# long sequences) fresh pages from mmap, and the kernel faults them in 4 KiB at a time
# on every step: at ListOps' 2000 tokens half of softmax's step went to the kernel.
# This tunable (glibc >= 2.35; ignored elsewhere) makes malloc ask for transparent huge
# pages (madvise): a 2 MiB page per fault, not 4 KiB. Measured per preset, on and off:
# results/cpu_presets/ (scripts/preset_times.py). The Makefile exports it too.
HUGE_PAGES = "glibc.malloc.hugetlb"
# Huge pages make each fault cheaper, but the pages are still handed back and faulted
# in (and zeroed) again on every step: XLA:CPU's threads free a step's buffers into
# arenas that malloc trims, and large blocks are mmap'd and unmapped. A study's child
# is one training run in a process of its own, so it can keep its heap instead: one
# arena, no mmap'd blocks, no trimming, 256 MiB more on each growth (its resident
# memory stays at its high-water mark). What it saves per step, beside huge pages
# alone: results/cpu_presets ("Keeping the heap", `scripts.preset_times --heap`).
# Not for the test suite, which compiles more than it runs (no gain measured there).
KEEP_HEAP = {"glibc.malloc.arena_max": "1", "glibc.malloc.mmap_max": "0",
             "glibc.malloc.trim_threshold": str(64 << 30),
             "glibc.malloc.top_pad": str(256 << 20)}


# A study trains the same program many times (a variant's rates and seeds differ in
# values, not in shapes), each run in a fresh process that compiled it again: XLA's
# persistent compilation cache keeps each compiled program on disk, so a later run
# loads it instead (a listops cpu run's start-up and compile, 16 -> 10 CPU-seconds in
# a 25-step probe). The programs are the same either way; only the compile is saved.
# A user's JAX_COMPILATION_CACHE_DIR stands ("" turns it off, e.g. to finish a page
# whose earlier rows compiled every program, so that its rows' times stay alike).
COMPILE_CACHE = os.path.join("workdirs", "jax_cache")
CACHE_ENV = {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
             "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def child_env(huge_pages: bool | None = None, environ=None,
              keep_heap: bool | None = None) -> dict:
  """The environment of a study's child process: `environ` (default os.environ) with
  glibc.malloc.hugetlb and the KEEP_HEAP tunables set in GLIBC_TUNABLES, the other
  tunables kept. huge_pages None: on (=1) unless the environment sets it already (a
  user's choice stands); True / False: =1 / =0 whatever it says (an A/B measurement).
  keep_heap None: KEEP_HEAP's tunables, each unless the environment sets it; True:
  all of them, whatever it says; False: none of them (glibc's defaults). XLA's
  persistent compilation cache in COMPILE_CACHE unless the environment names its own
  JAX_COMPILATION_CACHE_DIR ("" = off)."""
  env = dict(os.environ if environ is None else environ)
  tun = dict(x.partition("=")[::2] for x in env.get("GLIBC_TUNABLES", "").split(":") if x)
  if huge_pages is not None or HUGE_PAGES not in tun:
    tun.pop(HUGE_PAGES, None)
    tun[HUGE_PAGES] = "0" if huge_pages is False else "1"
  for k, v in KEEP_HEAP.items():
    if keep_heap is False:
      tun.pop(k, None)
    elif keep_heap or k not in tun:
      tun[k] = v
  env["GLIBC_TUNABLES"] = ":".join(f"{k}={v}" for k, v in tun.items())
  if "JAX_COMPILATION_CACHE_DIR" not in env:
    env["JAX_COMPILATION_CACHE_DIR"] = os.path.abspath(COMPILE_CACHE)
  if env["JAX_COMPILATION_CACHE_DIR"]:
    for k, v in CACHE_ENV.items():
      env.setdefault(k, v)
  return env


def in_subprocess(cmd: list[str], log_path: str, huge_pages: bool | None = None,
                  keep_heap: bool | None = None) -> tuple[int, str, float]:
  """Runs `cmd` in a process of its own (so that its peak memory is its own, and a
  crash stops one job, not the study); streams its output to `log_path` (appended,
  line by line: `tail -f` follows a run). Returns (exit status, its last non-empty
  output line, seconds). Stopped here (KeyboardInterrupt, SystemExit), the child
  gets SIGTERM first (train.py then saves a checkpoint and stops) and is waited for;
  a study whose children run in worker threads stops them with `stop_children`.
  The child's environment: `child_env(huge_pages, keep_heap=keep_heap)`. While the
  stop file exists (`check_stop`) it starts nothing and raises StopRequested."""
  check_stop()
  t = time.perf_counter()
  os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
  last = "(no output)"
  with open(log_path, "a") as f:
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         bufsize=1, env=child_env(huge_pages, keep_heap=keep_heap))
    _LIVE.add(p)
    try:
      for line in p.stdout:
        f.write(line)
        f.flush()
        if line.strip():
          last = line.rstrip("\n")
      code = p.wait()
    except BaseException:
      p.terminate()
      p.wait()
      raise
    finally:
      _LIVE.discard(p)
  return code, last, time.perf_counter() - t


def stop_children(sig=signal.SIGTERM) -> int:
  """Sends `sig` to every in_subprocess child still running (a study stopped while
  worker threads wait on them: the signal reaches the main thread only); returns how
  many."""
  live = [p for p in list(_LIVE) if p.poll() is None]
  for p in live:
    p.send_signal(sig)
  return len(live)


def choose_lr(quality: dict, tie: float, higher_better: bool = True) -> float | None:
  """The learning rate of the best quality in {rate: quality}, the rule every lr sweep
  of the studies shares: rates within `tie` of the best tie (one seed cannot tell them
  apart), and a tie goes to the smallest rate (the likelier of the tied to train
  stably in another seed). A rate whose quality is None or not finite (a failed or
  diverged run) never wins; None when no rate has a quality."""
  import math
  ok = {lr: q for lr, q in quality.items() if q is not None and math.isfinite(q)}
  if not ok:
    return None
  sign = 1.0 if higher_better else -1.0
  best = max(sign * q for q in ok.values())
  return min(lr for lr, q in ok.items() if sign * q > best - tie)


def next_lr(quality: dict, grid, ladder, tie: float,
            higher_better: bool = True) -> float | None:
  """The rate an lr sweep trains next, the rule every sweep of the studies shares,
  given {rate: quality} of the rates it ran: the first rate of `grid` not run yet;
  else, where the best rate (`choose_lr`) is the largest (or smallest) one run and
  beats the rate next to it beyond `tie` (or that one failed), the next rate of
  `ladder` (every rate the sweep may train, sorted) out that way, for a rate past the
  end might do better still; else None: the sweep is complete."""
  import math
  q = quality
  missing = [lr for lr in grid if lr not in q]
  if missing:
    return missing[0]
  rates = sorted(q)
  if len(rates) < 2:
    return None
  best = choose_lr(q, tie, higher_better)
  sign = 1.0 if higher_better else -1.0
  for end, inner, step in ((rates[-1], rates[-2], 1), (rates[0], rates[1], -1)):
    if best == end and (q.get(inner) is None or not math.isfinite(q[inner])
                        or sign * (q[end] - q[inner]) > tie):
      i = ladder.index(end) + step
      if 0 <= i < len(ladder):
        return ladder[i]
  return None
