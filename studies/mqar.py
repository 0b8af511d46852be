"""Multi-query associative recall (Zoology's MQAR) for every attention variant: accuracy
on the queried values against model width, per panel of (tokens, key-value pairs)
(`results/variants_mqar/`; the data: data/mqar.py, the config: configs/mqar.py).

The study runs in three stages, each a list of runs (`Run`), every run a train.py
training of configs/mqar.py:<preset> with the cell's width, tokens and pairs, the
variant, a learning rate and a seed:
  lr      every trained variant at one cell (`lr_cell`), each rate of `lrs`, seed 0;
          its rate is the one with the best final accuracy (`choose_lr`; a tie goes
          to the smaller rate), the same procedure for every variant;
  grid    every trained variant at every (width, panel) at its chosen rate, seed 0
          (the lr stage's winning run is the grid's run at lr_cell: the same config);
  seeds   the `seeded` variants (the cpu preset: every trained one) at the
          `seed_cells` with the other `seeds`, so that their mean ± standard error
          decides "better" and "worse" there.
A variant the decoder cannot use is not trained: its row quotes the config's own
refusal (compare_variants.refusal, train.validate's message). A variant that
computes softmax attention by another kernel (`SAME_MATH`) is represented by softmax
and the page says so and why.

Resumable: each run's workdir under `root` holds result.json once it finished (it is
never trained again); an interrupted run resumes from its checkpoint; a workdir
trained under other settings is set aside (compare_variants.set_aside). The runs of
one variant go to one child process (`python -m studies.mqar`), so a crash stops one
variant, not the study, and the process start (importing JAX) is paid once per
variant, not per run. Each run's CPU seconds (user + system, its process's share)
are in its result; each child's whole CPU time (start-up included) goes to
root/cpu_ledger.jsonl, whose sum is the page's total; each `study` call's wall time
goes to root/wall_ledger.jsonl.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import sys
import time

from studies import compare_variants as cv, pages, plots, runs

OUT = "results/variants_mqar"
ROOT = "workdirs/variants_mqar_{preset}"

# Variants that compute softmax attention exactly, by another kernel or precision: the
# same function of the same parameters, so their MQAR accuracy is softmax's up to
# rounding; softmax's rows stand for them (to spend the CPU budget on variants that
# differ). Their equality to softmax is what tests/test_contract.py checks.
SAME_MATH = {
    "sdpa": "jax.nn.dot_product_attention: softmax attention by XLA's kernel",
    "flash": "blockwise softmax with an online normaliser (FlashAttention's algorithm)",
    "flash_pallas": "the same in a Pallas kernel (off a GPU: interpret mode, a "
                    "correctness path orders of magnitude slower)",
    "ring": "softmax with keys and values passed around a ring of devices (one CPU "
            "device here: plain softmax)",
    "fp8": "softmax with float8 matmul inputs (rounding only)",
}
REFERENCE = "softmax"

# Each preset: the grid and the procedure.
#   widths      model widths (d_model; MLP 2 x d_model)
#   panels      (tokens, pairs, steps) of each panel: Zoology's Figure 2 grows tokens
#               and pairs together (4, 8, 16, 64 pairs at 64, 128, 256, 512 tokens);
#               steps: the training steps of every run of the panel
#   heads       attention heads at every width (Zoology's attention: one head)
#   lrs         the learning-rate grid, tried at lr_cell = (width, tokens, pairs)
#   lr_extend   rates past each end of the grid the sweep may add (`lr_rates`): the
#               cpu preset's grid, centred on softmax's rate, left 12 of 14 variants'
#               best rate at its top end (2026-11-25)
#   seeds       of the seeded variants at the seed_cells: (width, tokens, pairs), or
#               (width, tokens, pairs, variants) for a cell seeded for those only, or
#               (width, tokens, pairs, variants, seeds) with seeds of its own
PRESETS = {
    # ~60 minutes on 2 cores with --jobs=2 (results/variants_mqar/ states the total).
    # configs/mqar.py:cpu gives every model a short causal convolution (why: its
    # docstring); with it softmax learnt recall by step 750-1125 at widths 32 and 64
    # in every seed tried, so 1500 steps for both panels. The lr cell is the
    # 8-pair panel at width 32, where the rate matters (at width 64 with 4 pairs most
    # variants reach 100% at two rates or three, and a tie settles nothing).
    "cpu": dict(widths=(16, 32, 64), panels=((64, 4, 1500), (64, 8, 1500)), heads=1,
                lrs=(3e-4, 1e-3, 3e-3), lr_extend=2, lr_cell=(32, 64, 8), seeds=(0, 1, 2),
                # every trained variant, 3 seeds at the 8-pair cells of widths 32 and 64
                seeded=("softmax", "linear", "retention", "gla", "deltanet", "additive",
                        "cosine", "dot", "general", "local", "location", "performer",
                        "reformer", "sparse"),
                seed_cells=((32, 64, 8), (64, 64, 8))),
    # the tests' smoke: seconds
    "smoke": dict(widths=(16,), panels=((16, 2, 2),), heads=1, lrs=(1e-2,),
                  lr_cell=(16, 16, 2), seeds=(0,), seeded=("softmax",),
                  seed_cells=((16, 16, 2),)),
}


@dataclasses.dataclass(frozen=True)
class Run:
  """One training: variant at (width, tokens, pairs) with a learning rate and a seed."""
  variant: str
  width: int
  length: int
  pairs: int
  lr: float
  seed: int = 0

  @property
  def name(self) -> str:
    """Its workdir's name under the study's root."""
    return (f"{self.variant}/w{self.width}_t{self.length}_p{self.pairs}_lr{self.lr:g}"
            f"_s{self.seed}")

  @property
  def cell(self) -> tuple:
    return (self.variant, self.width, self.length, self.pairs)


# ---- configs ------------------------------------------------------------------------

def make_config(preset: str, run: Run, overrides: dict | None = None):
  """configs/mqar.py:cpu at the run's cell: width D (the preset's heads, MLP 2D), T
  tokens with P pairs, the learning rate, the seed and the variant; `overrides`
  (dotted keys: the tests' shorter runs) last."""
  from configs import mqar as cfg
  p = PRESETS[preset]
  c = cfg.get_config("cpu")
  c.progress = False
  c.mqar.seq_len = c.model.max_len = run.length
  c.mqar.num_pairs = run.pairs
  c.model.d_model, c.model.d_ff = run.width, 2 * run.width
  c.model.num_heads = int(p["heads"])
  c.learning_rate, c.seed, c.attention = float(run.lr), int(run.seed), run.variant
  steps = panel_steps(p, run.length, run.pairs)
  c.num_train_steps = c.checkpoint_every = steps
  c.eval_every = max(1, steps // 2)
  for k, v in (overrides or {}).items():
    node = c
    *path, leaf = k.split(".")
    for part in path:
      node = node[part]
    node[leaf] = v
  return c


def panel_steps(p: dict, length: int, pairs: int) -> int:
  """The training steps of the panel of (length, pairs) in settings `p`; a cell outside
  the panels (the lr cell may be one) takes the first panel's."""
  for t, P, steps in p["panels"]:
    if (t, P) == (length, pairs):
      return int(steps)
  return int(p["panels"][0][2])


def variants(preset: str) -> dict:
  """{registered variant: how the study treats it}: "train", or ("same", why) for a
  SAME_MATH variant, or ("refused", the config's message)."""
  import attention
  p = PRESETS[preset]
  out = {}
  for n in attention.names():
    if n in SAME_MATH:
      out[n] = ("same", SAME_MATH[n])
      continue
    why = cv.refusal(make_config(preset, Run(n, p["widths"][0], *p["panels"][0][:2],
                                             p["lrs"][0])))
    out[n] = ("refused", why) if why else "train"
  return out


# ---- the plan -------------------------------------------------------------------------

def lr_ladder(p: dict) -> list[float]:
  """Every rate the lr stage of settings `p` may train, smallest first: the grid `lrs`
  and `lr_extend` more beyond each of its ends, each a step of the end's own ratio
  further (3e-3 after 1e-3 and 3e-3: 9e-3, then 0.027; 3 digits)."""
  g = sorted(p["lrs"])
  k = int(p.get("lr_extend", 0))
  if len(g) < 2 or not k:
    return g
  up, down = g[-1] / g[-2], g[0] / g[1]
  return sorted(set(g) | {float(f"{g[-1] * up ** i:.3g}") for i in range(1, k + 1)}
                | {float(f"{g[0] * down ** i:.3g}") for i in range(1, k + 1)})


def _lr_quality(p: dict, results: list[dict], variant: str) -> dict:
  """{rate: final accuracy} of `variant`'s finished lr-stage runs on the ladder of `p`."""
  ladder = lr_ladder(p)
  return {r["lr"]: r["accuracy"] for r in results if r["variant"] == variant
          and r.get("stage") == "lr" and r.get("status") == "ok" and r["lr"] in ladder}


def lr_rates(p: dict, results: list[dict], variant: str) -> list[float]:
  """The rates of `variant`'s lr stage so far, smallest first: the grid, the rates
  past it that ran, and the next one the sweep needs (`runs.next_lr`, the rule of
  compare_variants' sweeps too: past an end of the grid while the best rate is that
  end and beats the rate next to it beyond MIN_EFFECT, up to `lr_extend` a side)."""
  q = _lr_quality(p, results, variant)
  nxt = runs.next_lr(q, sorted(p["lrs"]), lr_ladder(p), MIN_EFFECT)
  return sorted(set(p["lrs"]) | set(q) | ({nxt} if nxt is not None else set()))


def lr_runs(p: dict, names, results: list[dict] = ()) -> list[Run]:
  """The lr stage of settings `p` (a PRESETS entry, or the page's copy of one) for
  `names`, as far as `results` (the finished runs) make it (`lr_rates`)."""
  w, t, P = p["lr_cell"]
  return [Run(n, w, t, P, lr) for n in names for lr in lr_rates(p, list(results), n)]


def choose_lr(p: dict, results: list[dict], variant: str) -> float | None:
  """The learning rate of `variant`'s best final accuracy in the lr stage of settings
  `p`; rates within MIN_EFFECT (1 point) of the best tie, and a tie goes to the
  smallest rate (one seed's 100.0% against 99.5% is no evidence for the larger rate,
  and the larger one is the likelier to stall in another seed: softmax at width 32, 8
  pairs, rate 3e-3 reached 100% in seed 0 and 25% in seed 1). None while any run of
  its lr stage (`lr_rates`) is missing."""
  q = _lr_quality(p, results, variant)
  if set(lr_rates(p, results, variant)) - set(q):
    return None
  return runs.choose_lr(q, MIN_EFFECT)


def grid_runs(p: dict, lrs: dict) -> list[Run]:
  """Every (width, panel) of settings `p` for each variant of `lrs` ({variant: rate})."""
  return [Run(n, w, t, P, lr) for n, lr in lrs.items()
          for t, P, _ in p["panels"] for w in p["widths"]]


def seed_cells(p: dict, variant: str) -> list[tuple]:
  """The (width, tokens, pairs) at which `variant` gets other seeds, each once."""
  out = []
  for c in p["seed_cells"]:
    if variant in p["seeded"] and (len(c) == 3 or variant in c[3]) and \
        tuple(c[:3]) not in out:
      out.append(tuple(c[:3]))
  return out


def cell_seeds(p: dict, variant: str, cell: tuple) -> list[int]:
  """The seeds of `variant` at a seed cell: the preset's, and those of every entry
  of the cell that names them."""
  seeds = set()
  for c in p["seed_cells"]:
    if tuple(c[:3]) == tuple(cell) and (len(c) == 3 or variant in c[3]):
      seeds |= set(c[4] if len(c) > 4 else p["seeds"])
  return sorted(seeds)


def seed_runs(p: dict, lrs: dict) -> list[Run]:
  """The other seeds of the seeded variants of `lrs` at their seed cells."""
  return [Run(n, w, t, P, lrs[n], s) for n in p["seeded"] if n in lrs
          for (w, t, P) in seed_cells(p, n) for s in cell_seeds(p, n, (w, t, P)) if s != 0]


# ---- one run, and a child process's runs ----------------------------------------------

def finished(workdir: str, config) -> dict | None:
  """workdir/result.json if the run finished there under `config`, else None."""
  res = pages.read_json(os.path.join(workdir, "result.json"))
  if res and res.get("status") == "ok" and res.get("config") == cv.config_fingerprint(
      config):
    return res
  return None


def run_one(preset: str, run: Run, stage: str, root: str, overrides=None) -> dict:
  """Trains (or resumes) one run in this process; writes and returns its result.json:
  the final held-out accuracy on the queried values, the loss, the CPU seconds of
  this process spent on it, the training wall seconds and rate."""
  import train
  config = make_config(preset, run, overrides)
  wd = os.path.join(root, run.name)
  done = finished(wd, config)
  if done:
    return done
  cv.set_aside(wd, config)
  t0 = runs.cpu_seconds()
  train.train_and_evaluate(config, wd)
  cpu = runs.cpu_seconds() - t0
  recs = runs.read_metrics(wd)
  evals = [r for r in recs if "token_accuracy" in r]
  # a run stopped (a signal) before its first evaluation has none: its checkpoint's
  # step then says how far it got (it was an IndexError)
  runs.require_finished(wd, int(config.num_train_steps),
                        evals[-1]["step"] if evals else None)
  last = evals[-1]
  res = dict(dataclasses.asdict(run), stage=stage, status="ok",
             pairs=int(config.mqar.num_pairs), vocab=int(config.mqar.vocab_size),
             steps=int(config.num_train_steps), accuracy=float(last["token_accuracy"]),
             eval_loss=float(last["eval_loss"]),
             curve=[(r["step"], r["token_accuracy"]) for r in recs
                    if "token_accuracy" in r],
             cpu_seconds=cpu, train_seconds=runs.train_seconds(wd),
             steps_per_s=runs.rates(wd)[0], config=cv.config_fingerprint(config),
             date=pages.today())
  pages.write_json(os.path.join(wd, "result.json"), res)
  return res


PARTS = ("first", "rest")     # a variant's plan in two parts (`variant_plan`)


def variant_plan(p: dict, variant: str, results: list[dict], stages,
                 part: str = "") -> list:
  """[(run, stage)] of one variant, in order: the lr stage; once its rate is chosen
  (`results` hold every lr run), the grid at the first length, the extra seeds
  (part "first"), then the grid at the other panels (part "rest"; "": both). The
  study runs every variant's first part before any rest, so that a sweep stopped
  early has whole cells of every variant at the first panel."""
  todo = [(r, "lr") for r in lr_runs(p, [variant], results)] if "lr" in stages else []
  lr = choose_lr(p, results, variant)
  if lr is None:
    return todo
  grid = grid_runs(p, {variant: lr}) if "grid" in stages else []
  first = [r for r in grid if (r.length, r.pairs) == tuple(p["panels"][0][:2])]
  seeds = seed_runs(p, {variant: lr}) if "seeds" in stages else []
  head = todo + [(r, "grid") for r in first] + [(r, "seeds") for r in seeds]
  tail = [(r, "grid") for r in grid if r not in first]
  return {"first": head, "rest": tail, "": head + tail}[part]


def _unfinished(preset, variant, root, stages, overrides, part="") -> list:
  results = collect(preset, root, overrides, variant)
  return [(r, s) for r, s in variant_plan(PRESETS[preset], variant, results, stages, part)
          if not finished(os.path.join(root, r.name), make_config(preset, r, overrides))]


def run_variant(preset: str, variant: str, root: str, stages, overrides=None,
                log=print, part: str = "") -> None:
  """Every unfinished run of (a part of) one variant's plan, in this process (the lr
  stage first: its results choose the rate of the rest)."""
  while True:
    todo = _unfinished(preset, variant, root, stages, overrides, part)
    if not todo:
      return
    run, stage = todo[0]
    t = time.perf_counter()
    res = run_one(preset, run, stage, root, overrides)
    log(f"{run.name}: {res['accuracy']:.3f} ({time.perf_counter() - t:.0f} s)")


def child(job_json: str) -> None:
  """A child process: run_variant of its job; its CPU time (user + system since the
  process started, JAX's start-up included) goes to root/cpu_ledger.jsonl, also when
  it fails or is stopped."""
  from absl import logging
  logging.set_verbosity(logging.WARNING)
  j = json.loads(job_json)
  if j.get("core") is not None:      # before JAX starts its threads (`execute`)
    os.sched_setaffinity(0, {j["core"]})
  try:
    run_variant(j["preset"], j["variant"], j["root"], j["stages"], j["overrides"],
                log=lambda s: print(s, flush=True), part=j.get("part", ""))
  finally:
    _ledger(j["root"], j["variant"], runs.cpu_seconds())


def _ledger(root, variant, cpu):
  with open(os.path.join(root, "cpu_ledger.jsonl"), "a") as f:
    f.write(json.dumps({"variant": variant, "cpu_seconds": cpu,
                        "date": pages.today()}) + "\n")


def execute(preset: str, names: list[str], root: str, stages, overrides=None,
            subprocess_run=True, jobs: int = 1, log=print, part: str = "") -> None:
  """Runs the unfinished runs of (a part of) each variant's plan, the variants of
  `names` in that order: one child process per variant, `jobs` of them at a time (or
  all in this process). With jobs > 1, each child is pinned to a core of its own where
  the OS allows it (a child on one core runs XLA on one thread: two such children
  trained 25% more runs per hour on 2 cores than one child on both, whose threads
  wait on each other in these small models' steps)."""
  left = [n for n in names if _unfinished(preset, n, root, stages, overrides, part)]
  if not subprocess_run:
    for n in left:
      t0 = runs.cpu_seconds()
      run_variant(preset, n, root, stages, overrides, log, part)
      _ledger(root, n, runs.cpu_seconds() - t0)
    return

  import queue
  cores = queue.Queue()
  usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
  for i in range(max(1, int(jobs))):
    cores.put(usable[i % len(usable)] if int(jobs) > 1 and usable else None)

  def spawn(n):
    core = cores.get()
    job = dict(preset=preset, root=root, overrides=overrides, variant=n,
               stages=list(stages), part=part, core=core)
    try:
      code, tail, secs = runs.in_subprocess(
          [sys.executable, "-m", "studies.mqar", json.dumps(job)],
          os.path.join(root, n, "log.txt"))
    finally:
      cores.put(core)
    log(f"{n}: exit {code} after {secs:.0f} s: {tail}")

  from concurrent.futures import ThreadPoolExecutor
  with ThreadPoolExecutor(max(1, int(jobs))) as pool:
    try:
      list(pool.map(spawn, left))
    except BaseException:     # Ctrl-C reaches this thread only: start no other
      pool.shutdown(wait=False, cancel_futures=True)   # variant, and stop the children
      runs.stop_children()    # (they checkpoint), so that the pool's threads return
      raise


def collect(preset: str, root: str, overrides=None, variant=None) -> list[dict]:
  """Every finished result.json under `root` of this preset's settings (of one
  variant, if given)."""
  out = []
  names = [variant] if variant else sorted(os.listdir(root)) if os.path.isdir(root) else []
  for n in names:
    d = os.path.join(root, n)
    for m in sorted(os.listdir(d)) if os.path.isdir(d) else []:
      res = pages.read_json(os.path.join(d, m, "result.json"))
      if res and res.get("status") == "ok" and "pairs" in res and \
          res["config"] == cv.config_fingerprint(make_config(preset, run_of(res), overrides)):
        out.append(res)
  return out


def run_of(res: dict) -> Run:
  """The Run of a result (or of any dict with Run's fields)."""
  return Run(res["variant"], res["width"], res["length"], res["pairs"], res["lr"],
             res["seed"])


def study(preset: str, root: str, *, names=None, stages=("lr", "grid", "seeds"),
          overrides=None, subprocess_run=True, jobs: int = 1, log=print) -> dict:
  """Runs the plan of every trained variant (what finished is kept), the seeded ones
  first, and returns the page's data: the variants' treatment, the chosen rates,
  every result, the CPU ledger."""
  treat = variants(preset)
  p = PRESETS[preset]
  trained = [n for n, t in treat.items() if t == "train" and (not names or n in names)]
  order = list(p["seeded"])
  trained.sort(key=lambda n: (order.index(n) if n in order else len(order), n))
  os.makedirs(root, exist_ok=True)
  # how fast this machine is as the sweep starts: one host name has covered CPUs about
  # 3x apart (softmax's run at width 32, 8 pairs, lr 1e-3, seed 0: 56 CPU-s on
  # 2026-11-27's machine, 16-22 on 2026-11-28's)
  from studies import timing
  gauge = timing.matmul_peak(cv.GAUGE_N)
  clock = _WallClock(root, jobs)
  try:
    for part in PARTS:
      execute(preset, trained, root, stages, overrides, subprocess_run, jobs, log, part)
  finally:
    clock.stop()
  return dict(page_data(preset, root, overrides, treat), matmul_peak=gauge)


class _WallClock:
  """Records one `study` call's wall time in root/wall_ledger.jsonl: a line every
  `every` seconds and one at its end, under one invocation id, so that a call killed
  outright (SIGKILL, a session's end: no `finally` runs) still counts up to its last
  line; `page_data` keeps each invocation's largest figure. (A line at the end only,
  as before, lost every killed call: the page of 2026-11-27 summed 17.9 minutes of a
  sweep that had run for hours.)"""

  def __init__(self, root: str, jobs: int, every: float = 60.0):
    import threading
    self.path = os.path.join(root, "wall_ledger.jsonl")
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


TARGET_WALL_S = 3600   # issue 40: the whole sweep within 60 minutes on 2 cores


def time_verdict(data: dict) -> str:
  """The sentence that judges the sweep's time against TARGET_WALL_S: by the wall time
  of one invocation where the ledger holds exactly one and the plan is complete (a
  sweep resumed over several invocations has no wall time of the whole, one cut short
  is not the whole), else missed where its CPU-time floor is over the target, else not
  judged; with the machine's matmul gauge where it was read."""
  from studies import timing
  wall, jobs = data.get("wall_seconds"), max(1, int(data.get("jobs", 1)))
  gauge = data.get("matmul_peak")
  on = (" on this machine (its matmul gauge as the sweep started: "
        f"{timing.peak_text(gauge)}; one host name has covered "
        "machines about 3x apart in this sweep's speed)" if gauge else " on this machine")
  target = TARGET_WALL_S / 60
  whole = data.get("results") and not missing_cells(data)
  if wall and whole and data.get("invocations") == 1:
    met = "met" if wall <= TARGET_WALL_S else "missed"
    return (f"Target ({target:.0f} minutes of wall time on 2 cores): {met}{on}, one "
            f"uninterrupted invocation with {jobs} run(s) at once took "
            f"{wall / 60:.1f} minutes.")
  if data["cpu_seconds"] / 2 > TARGET_WALL_S:          # 2 cores do it no faster
    return (f"Target ({target:.0f} minutes of wall time on 2 cores): missed{on}, by its "
            "CPU-time floor.")
  return (f"Target ({target:.0f} minutes of wall time on 2 cores): not judged{on}: no "
          "one invocation ran the whole plan.")


def wall_seconds(lines: list[dict]) -> float:
  """The wall time of the ledger's lines: each invocation's largest figure, summed
  (lines without an invocation id, written once at a call's end, count as they are)."""
  last = {}
  for i, w in enumerate(lines):
    k = w.get("invocation", i)
    last[k] = max(last.get(k, 0.0), w["wall_seconds"])
  return sum(last.values())


def page_data(preset: str, root: str, overrides=None, treat=None) -> dict:
  """What the page is written from (results.json): no training. treat: `variants`'
  answer, if known."""
  results = collect(preset, root, overrides)
  treat = treat or variants(preset)
  lrs = {n: choose_lr(PRESETS[preset], results, n) for n, t in treat.items()
         if t == "train"}
  read = lambda f: ([json.loads(l) for l in open(os.path.join(root, f))]
                    if os.path.exists(os.path.join(root, f)) else [])
  ledger, walls = read("cpu_ledger.jsonl"), read("wall_ledger.jsonl")
  p = PRESETS[preset]
  return {"preset": preset, "settings": json.loads(json.dumps(p)),
          "treatment": {n: (t if isinstance(t, str) else list(t)) for n, t in treat.items()},
          "lrs": lrs, "results": sorted(results, key=lambda r: (
              r["variant"], r["length"], r["width"], r["lr"], r["seed"])),
          "cpu_seconds": sum(l["cpu_seconds"] for l in ledger),
          "wall_seconds": wall_seconds(walls),
          "invocations": len({w.get("invocation", i) for i, w in enumerate(walls)}),
          "jobs": max([w["jobs"] for w in walls] or [1]),
          "config": _config_words(preset, overrides)}


def _config_words(preset, overrides) -> dict:
  c = make_config(preset, Run(REFERENCE, PRESETS[preset]["widths"][0],
                              *PRESETS[preset]["panels"][0][:2], 1e-3), overrides)
  return {"vocab_size": int(c.mqar.vocab_size), "power_a": float(c.mqar.power_a),
          "batch_size": int(c.batch_size), "steps": int(c.num_train_steps),
          "warmup_steps": int(c.warmup_steps), "schedule": c.schedule,
          "weight_decay": float(c.weight_decay), "num_layers": int(c.model.num_layers),
          "num_heads": int(c.model.num_heads), "positions": c.model.positions,
          "short_conv": int(c.model.get("short_conv", 0)),
          "eval_sequences": int(c.eval_batches) * int(c.eval_batch_size),
          "attention_options": c.model.attention_options.to_dict()}


# ---- statistics -------------------------------------------------------------------------

def cell_stats(results: list[dict], lrs: dict) -> dict:
  """{(variant, width, tokens, pairs): (mean, standard error or None, seeds)} of the
  final accuracies at each variant's chosen rate; the standard error (sample sd /
  sqrt(n)) needs two seeds or more."""
  acc = {}
  for r in results:
    if lrs.get(r["variant"]) is not None and r["lr"] == lrs[r["variant"]]:
      acc.setdefault(run_of(r).cell, {})[r["seed"]] = r["accuracy"]
  out = {}
  for k, by_seed in acc.items():
    xs = list(by_seed.values())
    n = len(xs)
    mean = sum(xs) / n
    se = (math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1) / n) if n > 1 else None)
    out[k] = (mean, se, n)
  return out


MIN_EFFECT = 0.01    # differences below 1 point are "tied", whatever their standard error


def verdict(a, b) -> tuple[str, float | None, float | None]:
  """(word, difference a - b, its standard error) of two cells' (mean, se, n):
  "better"/"worse" when |a - b| > 2 standard errors of the difference and at least
  MIN_EFFECT; "tied" when beyond 2 standard errors but below MIN_EFFECT (two cells at
  the ceiling: seeds of 99.9% and 100.0% have standard errors near 0, and a 0.1-point
  gap is not a finding), and when the difference stays within MIN_EFFECT 2 standard
  errors either side (every seed of both near 100%); "unresolved" otherwise or without
  standard errors for both (one seed)."""
  d = a[0] - b[0]
  if a[1] is None or b[1] is None:
    return "unresolved", d, None
  se = math.sqrt(a[1] ** 2 + b[1] ** 2)
  if abs(d) + 2 * se < MIN_EFFECT:    # within 1 point even 2 standard errors out
    return "tied", d, se
  if se > 0 and abs(d) > 2 * se or se == 0 and d != 0:
    return ("tied" if abs(d) < MIN_EFFECT else "better" if d > 0 else "worse"), d, se
  return "unresolved", d, se


# ---- the page ----------------------------------------------------------------------------

ZOOLOGY = ("Arora, Eyuboglu et al., 'Zoology: Measuring and Improving Recall in Efficient "
           "Language Models', ICLR 2024, arXiv:2312.04927")
ZOOLOGY_RESULT = (
    "Their Figure 2 plots MQAR accuracy against model dimension (64 to 512), one panel "
    "per sequence length (64, 128, 256, 512 tokens with 4, 8, 16, 64 key-value pairs), "
    "for 2-layer models with attention and with gated-convolution or recurrent mixers "
    "(H3, Hyena, RWKV, BaseConv). Attention solves the task at every width and length; "
    "the gated convolutions need a model dimension that grows with the sequence length "
    "and the number of pairs, and fall short of attention at the longer lengths and "
    "smaller widths.")


def _panels(p) -> list[tuple]:
  """(tokens, pairs) of each panel."""
  return [tuple(x[:2]) for x in p["panels"]]


def _col(w, t, P) -> str:
  return f"w{w} · {t} tok, {P} pairs"


def plot(data: dict, path: str) -> None:
  """Accuracy against width, one panel per (tokens, pairs), one line per trained variant
  (mean over seeds with ± 1 standard error bars where there are seeds)."""
  import attention
  stats = cell_stats(data["results"], data["lrs"])
  p = data["settings"]
  panels, widths = _panels(p), p["widths"]
  trained = [n for n, t in data["treatment"].items() if t == "train"]
  plt = plots.pyplot()
  fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels) + 1.9, 3.7),
                           dpi=100, sharey=True, squeeze=False)
  fam_color = {"exact": "black", "score": "tab:blue", "efficient": "tab:orange",
               "gated": "tab:green"}
  styles = ("-", "--", ":", "-.")
  marks = "os^vDPX*"
  seen = {}
  for ax, (t, P) in zip(axes[0], panels):
    for n in trained:
      fam = attention.variant(n).family
      i = seen.setdefault(n, sum(1 for m in seen if attention.variant(m).family == fam))
      pts = [(w, stats[(n, w, t, P)]) for w in widths if (n, w, t, P) in stats]
      if not pts:
        continue
      color = fam_color.get(fam, "grey")
      ax.errorbar([w for w, _ in pts], [s[0] for _, s in pts],
                  yerr=[s[1] or 0.0 for _, s in pts], color=color,
                  ls=styles[i % 4], marker=marks[i % len(marks)], ms=4,
                  lw=1.8 if n == REFERENCE else 1.1, capsize=2, label=n)
      for w, _ in pts:          # each seed's run, where there are several: MQAR is
        xs = seed_values(data, n, w, t, P)  # learnt in a jump, some seeds do not
        if len(xs) > 1:
          ax.scatter([w * 1.04 ** (i - 1)] * len(xs), xs, s=9, color=color, alpha=0.45,
                     marker=marks[i % len(marks)], linewidths=0)
    ax.set_xscale("log", base=2)
    ax.set_xlim(widths[0] / 1.25, widths[-1] * 1.25)
    ax.set_xticks(widths, [str(w) for w in widths])
    if not ax.lines:
      ax.text(0.5, 0.5, "not run yet", ha="center", transform=ax.transAxes, color="0.4")
    ax.minorticks_off()
    ax.axhline(1 / P, color="0.5", ls=":", lw=1)
    ax.text(widths[-1] * 1.2, 1 / P - 0.01, f"1/{P}: a guess among the pairs' values",
            fontsize=7, color="0.4", va="top", ha="right")
    ax.set_title(f"{t} tokens, {P} pairs", fontsize=10)
    ax.set_xlabel("model width (d_model)", fontsize=9)
    ax.set_ylim(0, 1.04)
    ax.grid(alpha=0.3)
  axes[0][0].set_ylabel("accuracy on the queried values", fontsize=9)
  handles, labels = axes[0][0].get_legend_handles_labels()
  fig.legend(handles, labels, loc="center right", fontsize=7.5, frameon=False)
  fig.suptitle("MQAR: accuracy against width (2 layers; softmax stands for "
               "sdpa, flash, flash_pallas, ring, fp8)", fontsize=10)
  fig.tight_layout(rect=(0, 0, 1 - 1.6 / fig.get_figwidth(), 1))
  plots.save(fig, path)


def seed_values(data, variant, w, t, P) -> list[float]:
  """Each seed's final accuracy of a cell at the variant's chosen rate."""
  lr = data["lrs"].get(variant)
  return [r["accuracy"] for r in data["results"] if lr is not None and r["lr"] == lr
          and run_of(r).cell == (variant, w, t, P)]


def recalled(data, variant, w, t, P) -> str:
  """'k of n': the seeds of a cell whose final accuracy reaches SOLVED (recall is
  learnt in a jump, so a cell's seeds are mostly near 100% or near chance, and this
  count reads more directly than their mean)."""
  xs = seed_values(data, variant, w, t, P)
  return f"{sum(x >= SOLVED for x in xs)} of {len(xs)}"


def _pct(m) -> str:
  mean, se, n = m
  return f"{mean:.1%}" + (f" ± {se:.1%} ({n})" if se is not None else "")


def write_page(data: dict, out: str, run: dict) -> None:
  """out/README.md, out/results.json (data + the run record) and out/mqar.png."""
  os.makedirs(out, exist_ok=True)
  pages.write_json(os.path.join(out, "results.json"), dict(data, run=run))
  plot(data, os.path.join(out, "mqar.png"))
  pages.write_text(os.path.join(out, "README.md"), page_lines(data, run))


def _ladder_words(p) -> str:
  """'x3 above, x0.3 below' for the ladder's steps past the grid's ends."""
  g = sorted(p["lrs"])
  return f"x{g[-1] / g[-2]:.3g} above, x{g[0] / g[1]:.3g} below"


def _steps_words(p) -> str:
  """'1500 steps at 4 pairs, 3000 at 8' (or one number when the panels agree)."""
  steps = [int(x[2]) for x in p["panels"]]
  if len(set(steps)) == 1:
    return f"{steps[0]} steps"
  return f"{steps[0]} steps at {p['panels'][0][1]} pairs, " + ", ".join(
      f"{x[2]} at {x[1]}" for x in p["panels"][1:])


def _seed_cell_words(p) -> str:
  out = []
  for c in p["seed_cells"]:
    who = "" if len(c) == 3 else f" ({', '.join(c[3])} only)"
    if len(c) > 4:
      who = f" (seeds {', '.join(map(str, c[4]))} for {', '.join(c[3])})"
    out.append(f"({c[0]}, {c[1]}, {c[2]}){who}")
  return ", ".join(out)


def page_lines(data: dict, run: dict) -> list[str]:
  p, c = data["settings"], data["config"]
  stats = cell_stats(data["results"], data["lrs"])
  treat, lrs = data["treatment"], data["lrs"]
  trained = [n for n, t in treat.items() if t == "train"]
  panels = _panels(p)
  L = ["# Multi-query associative recall (Zoology's MQAR): every variant", "",
       pages.header(run), ""]
  wall, jobs = data.get("wall_seconds"), max(1, int(data.get("jobs", 1)))
  L += [f"Total CPU time of the sweep: {data['cpu_seconds'] / 60:.1f} CPU-minutes (user "
        "+ system, every child process from its start; "
        f"{sum(r['cpu_seconds'] for r in data['results']) / 60:.1f} of them in the "
        f"{len(data['results'])} finished runs themselves)"
        + (f"; {wall / 60:.1f} minutes of wall time recorded by the sweep's "
           f"invocations (up to {jobs} variants trained at once; invocations that "
           "overlapped are counted twice, ones killed before a record are missing)"
           if wall else "")
        + f". With {jobs} run(s) at once the sweep needs at least "
        f"{data['cpu_seconds'] / 60 / jobs:.0f} minutes of wall time (its CPU time over "
        f"{jobs}). " + time_verdict(data), ""]
  by = {}
  for r in data["results"]:
    by[r.get("stage", "grid")] = by.get(r.get("stage", "grid"), 0.0) + r["cpu_seconds"]
  if by:
    L += ["CPU time of the runs by stage: " + ", ".join(
        f"{s} {by[s] / 60:.1f} CPU-minutes" for s in ("lr", "grid", "seeds") if s in by)
        + " (the lr stage's winning run is also the grid's run at its cell).", ""]
  L += ["![accuracy against width](mqar.png)", "",
        f"**What Zoology shows** ({ZOOLOGY}): {ZOOLOGY_RESULT}", ""]
  L += ["## Setup", "",
        f"- Data: `data/mqar.py` (Zoology §3 and their generator): vocabulary "
        f"{c['vocab_size']} (keys from the lower half, values from the upper), panels of "
        + ", ".join(f"{t} tokens with {P} pairs" for t, P in panels)
        + f", queries placed by Zoology's power law (a = {c['power_a']}); fresh "
        f"sequences every step; accuracy = share of the {c['eval_sequences']} held-out "
        "sequences' queried values predicted exactly (argmax), after the last step. "
        "A model that answers with one of the sequence's P values at random scores "
        "1/P (the dotted line); one that recalls, 100%.",
        f"- Model: {c['num_layers']}-layer decoder (pre-LN), {c['num_heads']} attention "
        f"head(s) at every width, {c['positions']} positions, MLP width 2 x d_model"
        + (f", a depthwise causal convolution of {c['short_conv']} taps on each "
           "attention layer's input (`model.short_conv`; configs/mqar.py says why)"
           if c.get("short_conv") else "")
        + f"; widths {', '.join(map(str, p['widths']))}.",
        f"- Training: {_steps_words(p)} of {c['batch_size']} sequences, AdamW "
        f"(weight decay {c['weight_decay']}), {c['warmup_steps']} warmup steps then "
        f"{c['schedule']}; variant options {json.dumps(c['attention_options'])}.",
        f"- Learning rate, one procedure for every variant: each of "
        f"{', '.join(f'{x:g}' for x in p['lrs'])} at width {p['lr_cell'][0]}, "
        f"{p['lr_cell'][1]} tokens and {p['lr_cell'][2]} pairs, seed 0; the best final "
        "accuracy wins (rates within 1 point of the best tie, and a tie goes to the "
        "smallest rate) and is used across the whole grid"
        + (f". Where the best is an end of the rates run and beats the rate next to it "
           f"by more than 1 point, the next rate out ({_ladder_words(p)}) is run too, up "
           f"to {p['lr_extend']} a side (studies.runs.next_lr, the rule of the other "
           "variant pages)" if p.get("lr_extend") else "") + ".",
        f"- Seeds: {', '.join(map(str, p['seeds']))} for "
        f"{', '.join(p['seeded'])} at (width, tokens, pairs) {_seed_cell_words(p)}: "
        "mean ± standard error (sample sd / sqrt(n), the count in brackets); elsewhere "
        "one seed. 'Better' or 'worse' needs a difference over 2 standard errors of the "
        "difference; everything else is unresolved.", ""]
  L += ["**What differs from Zoology's setup.** Their vocabulary is 8192 (here "
        f"{c['vocab_size']}, so that the output layer does not dominate a CPU step); "
        "their widths are 64-512 and their panels grow the length and the pairs together "
        "(64-512 tokens, 4-64 pairs); here the widths are "
        f"{p['widths'][0]}-{p['widths'][-1]} and the panels "
        + ", ".join(f"{t} tokens with {P} pairs" for t, P in panels)
        + " (more pairs in the same length: the recall load grows at the cost of the "
        "shortest sequences); they train 64 epochs of 100 000 sequences with batch 512 "
        f"at the short lengths (here {_steps_words(p)} of {c['batch_size']}: "
        + " and ".join(f"{x[2] * c['batch_size']:,}" for x in p["panels"])
        + " sequences); they sweep 4 learning rates "
        "(1e-4 to 1e-2) per point and keep the best (here "
        f"{len(p['lrs'])}" + (f" to {len(lr_ladder(p))}" if p.get("lr_extend") else "")
        + " at one cell per variant); their models have no MLP in that "
        "figure and attention has learned positions, the other mixers none (here an MLP "
        f"and {c['positions']} positions for every variant)"
        + ("; their attention has no convolution beside it (their BaseConv and Based "
           "have short ones), here every variant has the same "
           f"{c['short_conv']}-tap convolution, so a row measures the variant's recall "
           "with the previous-token step given, not how soon it grows a previous-token "
           "head" if c.get("short_conv") else "")
        + "; their query region is "
        "filler with the answer as the label only, here the answer follows its key in "
        "the token stream (data/mqar.py). Their mixers are gated convolutions and "
        "RNNs; the rows here are this project's attention variants.", ""]
  # the learning rates
  w0, t0, P0 = p["lr_cell"]
  L += ["## Learning rates", "",
        f"Final accuracy at width {w0}, {t0} tokens, {P0} pairs, seed 0, per rate; the "
        "chosen one in bold.", ""]
  needed = {n: lr_rates(p, data["results"], n) for n in trained}
  cols = sorted(set(p["lrs"]).union(*needed.values()))
  head = ["variant"] + [f"lr {x:g}" for x in cols]
  rows = []
  for n in trained:
    cells = []
    for x in cols:
      r = next((r for r in data["results"] if r["variant"] == n and r["stage"] == "lr"
                and r["lr"] == x), None)
      s = f"{r['accuracy']:.1%}" if r else "not run" if x in needed[n] else "–"
      cells.append(f"**{s}**" if lrs.get(n) == x else s)
    rows.append([f"`{n}`"] + cells)
  L += pages.table(head, rows) + [""]
  if len(cols) > len(p["lrs"]):
    L += ["'–': a rate past the grid that the variant's sweep did not need (its best "
          "rate was not that end of the grid, or did not beat the rate next to it by "
          "more than 1 point).", ""]
  # the grid
  L += ["## Accuracy on the queried values", "",
        "At each variant's chosen rate; mean ± standard error (seeds) where there are "
        "seeds, else seed 0; '-' = not run yet.", ""]
  head = ["variant", "lr"] + [_col(w, t, P) for t, P in panels for w in p["widths"]]
  rows = []
  for n, t in treat.items():
    if t != "train":
      kind, why = t
      label = (f"represented by softmax: {why}" if kind == "same"
               else f"cannot: {why}")
      rows.append([f"`{n}`", "", label.replace("|", "\\|")] + [""] * (len(head) - 3))
      continue
    rows.append([f"`{n}`", f"{lrs[n]:g}" if lrs.get(n) else "-"] +
                [_pct(stats[(n, w, tt, P)]) if (n, w, tt, P) in stats else "-"
                 for tt, P in panels for w in p["widths"]])
  L += pages.table(head, rows) + [""]
  L += verdict_lines(data, stats)
  L += reading_lines(data, stats)
  missing = missing_cells(data)
  L += ["## Missing", ""]
  L += ([f"- {m}" for m in missing] if missing else ["Every run of the plan finished."])
  L += ["", "Rewrite this page from results.json: `python -m scripts.mqar --page_only`; "
        "run or resume the sweep (finished runs are kept, interrupted ones resume): "
        "`python -m scripts.mqar --jobs=2`, then `python -m scripts.mqar "
        "--collect` for the page of what finished."]
  return L


def verdict_lines(data, stats) -> list[str]:
  """Each seeded variant against softmax at each of its seed cells, and where the
  softmax-linear gap closes with width."""
  p = data["settings"]
  cells = list(dict.fromkeys(tuple(c[:3]) for c in p["seed_cells"]))
  L = ["## Against softmax, at the seeded cells", "",
       "Difference in accuracy (variant - softmax) ± its standard error; "
       "better/worse only beyond 2 standard errors and 1 point (beyond 2 standard errors "
       "but below 1 point, or within 1 point even 2 standard errors out: tied).", ""]
  head = ["variant"] + [_col(*c) for c in cells]
  rows = []
  for n in p["seeded"]:
    if n == REFERENCE:
      continue
    row = []
    for w, t, P in cells:
      a, b = stats.get((n, w, t, P)), stats.get((REFERENCE, w, t, P))
      if not a or not b:
        row.append("-")
        continue
      word, d, se = verdict(a, b)
      row.append(f"{d:+.1%}" + (f" ± {se:.1%}" if se is not None else "") + f": {word}")
    rows.append([f"`{n}`"] + row)
  L += pages.table(head, rows) + [""]
  # softmax against linear, panel by panel, width by width
  for t, P in _panels(p):
    words = []
    for w in p["widths"]:
      a, b = stats.get((REFERENCE, w, t, P)), stats.get(("linear", w, t, P))
      if not a or not b:
        continue
      word, d, se = verdict(a, b)
      how = (f"softmax {word}, {d:+.1%} ± {se:.1%}" if se is not None else
             f"{d:+.1%}, one seed each: unresolved")
      words.append(f"width {w}: softmax {_pct(a)}, linear {_pct(b)} ({how}"
                   + (f"; seeds reaching {SOLVED:.0%}: softmax "
                      f"{recalled(data, REFERENCE, w, t, P)}, linear "
                      f"{recalled(data, 'linear', w, t, P)}" if se is not None else "")
                   + ")")
    if words:
      L += [f"Softmax against linear at {t} tokens, {P} pairs: " + "; ".join(words) + ".",
            ""]
  return L


SOLVED = 0.9     # a cell "solves" MQAR at this accuracy on the queried values


def reading_lines(data, stats) -> list[str]:
  """What the figures say against Zoology's, from the figures alone."""
  if not stats:
    return []
  p = data["settings"]
  L = ["## Reading", ""]
  for t, P in _panels(p):
    solved = {}
    for (n, w, tt, PP), m in stats.items():
      if (tt, PP) == (t, P) and m[0] >= SOLVED:
        solved[n] = min(solved.get(n, w), w)
    ran = sorted({n for (n, w, tt, PP) in stats if (tt, PP) == (t, P)})
    if not ran:
      continue
    by = sorted(solved.items(), key=lambda kv: (kv[1], kv[0]))

    def lost(n, w0):        # wider cells of a solved variant that are not solved
      out = [f"{m[0]:.1%} at width {w}" for (nn, w, tt, PP), m in sorted(stats.items())
             if (nn, tt, PP) == (n, t, P) and w > w0 and m[0] < SOLVED]
      return f" (but {', '.join(out)})" if out else ""

    L += [f"At {t} tokens with {P} pairs, {len(solved)} of the {len(ran)} variants run "
          f"reach {SOLVED:.0%} at some width"
          + (": " + ", ".join(f"`{n}` from width {w}{lost(n, w)}" for n, w in by)
             if by else "")
          + ((". Not there at any width run: " + ", ".join(
              f"`{n}`" for n in ran if n not in solved)) if len(solved) < len(ran) else "")
          + ".", ""]
  falls = width_drops(stats)
  if falls:
    wide = sorted({n for (n, *_), m in stats.items() if m[1] is not None and m[1] > 0.1})
    L += ["Accuracy falls with width, by more than "
          f"{DROP * 100:.0f} points from a narrower width of the same panel, for "
          + "; ".join(f"`{n}` ({t} tokens, {P} pairs: {a:.1%} at width {w0}, {b:.1%} at "
                      f"width {w1})" for n, t, P, w0, a, w1, b in falls)
          + ". Zoology tunes the rate at every point of its grid; here each variant's "
          "one rate is chosen at one cell (width "
          f"{p['lr_cell'][0]}, {p['lr_cell'][1]} tokens, {p['lr_cell'][2]} pairs) and "
          "used at every width, and a rate that suits one width can be too high or too "
          "low for another. A second cause is the spread between seeds: cells off the "
          "seeded ones have one seed"
          + (", and at the seeded cells the standard error of "
             + ", ".join(f"`{n}`" for n in wide) + " exceeds 10 points" if wide else "")
          + ". Neither is tested here: read these cells as a limit of the one-rate, "
          "one-seed procedure, not as evidence that width hurts recall.", ""]
  s = [m[0] for (n, w, t, P), m in stats.items() if n == REFERENCE]
  if s and max(s) < SOLVED:
    L += [f"At this budget softmax does not solve MQAR at any cell (its best: "
          f"{max(s):.1%}); Zoology's attention solves it at every width after 64 epochs "
          "of 100 000 sequences, and its qualitative result is not reproduced here.", ""]
  lrs = {n: x for n, x in data["lrs"].items() if x is not None}
  ladder = lr_ladder(p)           # the grid where the sweep does not go past it
  edge = sorted(n for n, x in lrs.items() if x in (ladder[0], ladder[-1]))
  if edge:
    what = ("of the grid" if len(ladder) == len(p["lrs"]) else
            f"of the rates the sweep may run ({ladder[0]:g} to {ladder[-1]:g})")
    L += [f"The chosen rate lies at an end {what} for {len(edge)} of the {len(lrs)} "
          f"variants whose rate is chosen ({', '.join(f'`{n}`' for n in edge)}): the "
          "sweep does not bracket their best rate, and a rate beyond it might do better.",
          ""]
  return L


# A fall of accuracy with width (one variant, one panel) that the page names
DROP = 0.2


def width_drops(stats: dict) -> list[tuple]:
  """(variant, tokens, pairs, narrower width, its accuracy, wider width, its accuracy)
  for each wider cell whose accuracy is more than DROP below the best narrower cell of
  the same variant and panel (`stats`: cell_stats)."""
  out = []
  for (n, w1, t, P), m in sorted(stats.items()):
    below = [(mm[0], w) for (nn, w, tt, PP), mm in stats.items()
             if (nn, tt, PP) == (n, t, P) and w < w1]
    if below and max(below)[0] - m[0] > DROP:
      a, w0 = max(below)
      out.append((n, t, P, w0, a, w1, m[0]))
  return out


def missing_cells(data) -> list[str]:
  """The runs of the plan that have no finished result, one line per variant."""
  p = data["settings"]
  have = {(r["variant"], r["width"], r["length"], r["pairs"], r["lr"], r["seed"])
          for r in data["results"]}
  out = []
  for n, t in data["treatment"].items():
    if t != "train":
      continue
    lost = lambda rs: [r for r in rs if (r.variant, r.width, r.length, r.pairs, r.lr,
                                         r.seed) not in have]
    parts = []
    lr_left = lost(lr_runs(p, [n], data["results"]))
    if lr_left:
      parts.append("lr stage at " + ", ".join(f"{r.lr:g}" for r in lr_left))
    lr = data["lrs"].get(n)
    if lr is None:
      parts.append("the whole grid (its rate is not chosen yet)"
                   + (" and its seeds" if n in p["seeded"] else ""))
    else:
      cells = lost(grid_runs(p, {n: lr}))
      if cells:
        parts.append("grid at " + ", ".join(f"w{r.width}/{r.length}/{r.pairs}p"
                                            for r in cells))
      seeds = lost(seed_runs(p, {n: lr}))
      if seeds:
        parts.append("seeds at " + ", ".join(f"w{r.width}/{r.length}/{r.pairs}p s{r.seed}"
                                              for r in seeds))
    if parts:
      out.append(f"`{n}`: " + "; ".join(parts))
  return out


if __name__ == "__main__":     # a child process of `execute`
  child(sys.argv[1])
