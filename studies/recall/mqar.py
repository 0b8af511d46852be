"""Multi-query associative recall (Zoology's MQAR) for every attention variant: accuracy
on the queried values against model width, per panel of (tokens, key-value pairs)
(`results/variants_mqar/`; the data: data/mqar.py, the config: configs/mqar.py).

The study runs in three stages, each a list of runs (`Run`), every run a train.py
training of configs/mqar.py:<preset> with the cell's width, tokens and pairs, the
variant, a learning rate and a seed:
  lr      every trained variant at one cell (`lr_cell`), each rate of `lrs`, seed 0
          (the protocol's selection seed); its rate is the one with the best final
          accuracy on the validation stream (`choose_lr`; a tie goes to the smaller
          rate), the same procedure for every variant;
  grid    every trained variant at every (width, panel) at its chosen rate, seed
          `grid_seed` (under studies.core.protocol the first reporting seed, so no
          reported run chose the rate; before it seed 0, the lr stage's winning run);
  seeds   the `seeded` variants (the cpu preset: every trained one) at the
          `seed_cells` with the other `seeds` (the protocol's reporting seeds), whose
          test accuracies decide "better" and "worse" there (Welch + Holm).
A variant the decoder cannot use is not trained: its row quotes the config's own
refusal (compare_variants.refusal, trainer.validate's message). A variant that
computes softmax attention by another kernel (`same_math`) is represented by softmax
and the page says so and why.

Resumable: each run's workdir under `root` holds result.json once it finished (it is
never trained again); an interrupted run resumes from its checkpoint; a workdir
trained under other settings is set aside (studies.core.sweep, the runner of every sweep).
The runs of one variant go to one child process (`python -m studies.recall.mqar`), so a
crash stops one variant, not the study, and the process start (importing JAX) is paid once
per variant, not per run. Each run's CPU seconds (user + system, its process's share)
are in its result; each child's whole CPU time (start-up included) goes to
root/cpu_ledger.jsonl, whose sum is the page's total; each `study` call's wall time
goes to root/wall_ledger.jsonl.

Resumable across sessions (a fresh clone has no workdirs/): a preset with `ledger`
(cpu, zoology_cpu, zoology_gpu, gated_ablation) also keeps studies.recall.ledger's
committed ledger, results/variants_mqar/<preset>_runs.json: each run is added the moment
it finishes (by its child process, under a lock), a run there under the same config
fingerprint is never planned again, workdir or not, and `collect` / `page_data` read it
with the finished workdirs, so the page (its CPU and wall totals included) needs the
ledger alone. `ledger` arguments: True (the preset's own), a path, or None (none).

This module runs and measures (the page's data: `study`, `page_data`, results.json);
what each stage trains is studies.recall.plan's, the presets studies.recall.presets', the
ledger studies.recall.ledger's, and the page studies.recall.page's (the zoology presets':
studies.recall.zoology_page's), from that data alone.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

from studies.core import pages, protocol, runs, sweep
from studies.recall import ledger as mqar_ledger
from studies.variants import compare as cv

OUT = "results/variants_mqar"   # the recall study's front page: Zoology's grid (zoology_cpu)
# The other presets' pages: the small cpu grid (64 tokens, widths 16-64, every variant;
# archived, results/archive/), the GPU grid apart so that neither overwrites the CPU one.
OUTS = {"cpu": "results/archive/variants_mqar_short",
        "zoology_gpu": "results/variants_mqar_gpu",
        "memory_cpu": "results/mqar_memory"}     # studies.recall.memory_page's
ROOT = "workdirs/variants_mqar_{preset}"   # + "_protocol<v>" for a preset under one


def out_of(preset: str) -> str:
  """The page folder of a preset (OUTS, else OUT): the ledger of every preset stays
  in OUT (studies.recall.ledger)."""
  return OUTS.get(preset, OUT)


def root_of(preset: str) -> str:
  """The default workdir root of a preset: a root of its own under the protocol, so
  that no run from before it (no test figure, chosen alike) is taken as finished."""
  v = PRESETS[preset].get("protocol")
  return ROOT.format(preset=preset) + (f"_protocol{v}" if v else "")

REFERENCE = "softmax"


def same_math() -> dict[str, str]:
  """{variant: its registry summary} of the variants that compute softmax attention
  exactly, by another kernel or precision (the registry's family "exact" less the
  reference): the same function of the same parameters, so their MQAR accuracy is
  softmax's up to rounding; softmax's rows stand for them (to spend the CPU budget on
  variants that differ). Their equality to softmax is what tests/attention/test_contract.py
  checks."""
  import attention
  return {n: attention.variant(n).summary for n in attention.names()
          if attention.variant(n).family == "exact" and n != REFERENCE}

from studies.recall.presets import PRESETS  # noqa: E402 (the grid and procedure of each)
# The plan (its runs, stages, rates), named here too (the study's API).
from studies.recall.plan import (MIN_EFFECT, Run, cell_seeds, choose_lr, grid_runs,  # noqa
                               grid_seed, lr_cell_of, lr_cells, lr_rates, lr_rule,
                               lr_runs, rate_at, seed_cells, seed_runs)



# ---- configs ------------------------------------------------------------------------

def make_config(preset: str, run: Run, overrides: dict | None = None):
  """configs/mqar.py:cpu at the run's cell: width D (the preset's heads, MLP 2D), T
  tokens with P pairs, the learning rate, the seed and the variant; `overrides`
  (dotted keys: the tests' shorter runs) last."""
  from configs import mqar as cfg
  p = PRESETS[preset]
  c = cfg.get_config("cpu")
  c.progress = False
  # the layer the preset's protocol version says (0: the bare operators of the rows
  # trained before it), set once
  c.model.gated_layer = protocol.gated_layer(p.get("protocol", 0))
  if "vocab" in p:
    c.mqar.vocab_size = c.model.vocab_size = int(p["vocab"])
  if "options" in p:
    c.model.attention_options = p["options"]
  c.mqar.seq_len = c.model.max_len = run.length
  c.mqar.num_pairs = run.pairs
  c.model.d_model, c.model.d_ff = run.width, 2 * run.width
  c.model.num_heads = int(p["heads"])
  c.learning_rate, c.seed, c.attention = float(run.lr), int(run.seed), run.variant
  if p.get("rows"):          # a row's model (its hooks module: hybrids, windows)
    hooks(p).apply_row(c, preset, run)
  steps = panel_steps(p, run.length, run.pairs)
  c.num_train_steps = c.checkpoint_every = steps
  if p.get("checkpoint"):
    c.checkpoint_every = min(steps, int(p["checkpoint"]))
  batch = panel_batch(p, run.length, run.pairs)
  if batch:
    c.batch_size = batch
  c.mqar.train_mix = panel_mix(p, run.length, run.pairs)
  c.schedule = p.get("schedule", c.schedule)
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
  for t, P, steps, *_ in p["panels"]:
    if (t, P) == (length, pairs):
      return int(steps)
  return int(p["panels"][0][2])


def panel_batch(p: dict, length: int, pairs: int) -> int | None:
  """The batch size of the panel of (length, pairs) in settings `p` where the panel
  names one (its 4th field), else None: configs/mqar.py:cpu's."""
  for x in p["panels"]:
    if tuple(x[:2]) == (length, pairs) and len(x) > 3:
      return int(x[3])
  return None


def panel_mix(p: dict, length: int, pairs: int) -> str:
  """The training mixture (config mqar.train_mix, "T:P,..") of the panel of (length,
  pairs) in settings `p`: its entry (tokens, pairs, mixture) of the preset's
  `train_mix`, else "" (the panel's own sequences alone)."""
  for t, P, mix in p.get("train_mix", ()):
    if (t, P) == (length, pairs):
      return str(mix)
  return ""


def variants(preset: str) -> dict:
  """{registered variant: how the study treats it}: "train", or ("same", why) for a
  `same_math` variant, or ("refused", the config's message), or ("left out", why)
  for a variant outside a preset's `variants`."""
  import attention
  p = PRESETS[preset]
  out = {}
  same = same_math()
  for n in attention.names():
    config = make_config(preset, Run(n, p["widths"][0], *p["panels"][0][:2], p["lrs"][0]))
    if n in same:      # and what it would compute here (ring on 1 device = flash)
      out[n] = ("same", "; ".join([same[n]] + cv.attention_notes(config)))
      continue
    why = cv.refusal(config)
    if not why and p.get("variants") and n not in p["variants"]:
      out[n] = ("left out", "not in this preset's grid")
      continue
    out[n] = ("refused", why) if why else "train"
  return out


# ---- the plan -------------------------------------------------------------------------

# ---- one run, and a child process's runs ----------------------------------------------

def run_one(preset: str, run: Run, stage: str, root: str, overrides=None) -> dict:
  """Trains (or resumes) one run in this process (sweep.train_run); writes and returns
  its result.json: the final held-out accuracy on the queried values, the loss, the
  CPU seconds of this process spent on it, the training wall seconds and rate."""

  def measure(config, wd):
    recs = runs.read_metrics(wd)
    evals = [r for r in recs if "token_accuracy" in r]
    # a run stopped (a signal) before its first evaluation has none: its checkpoint's
    # step then says how far it got (it was an IndexError)
    runs.require_finished(wd, int(config.num_train_steps),
                          evals[-1]["step"] if evals else None)
    last = evals[-1]
    test = {}
    if PRESETS[preset].get("protocol"):    # the reported figure: the test stream's
      from trainer import evaluate
      ev = evaluate.evaluate_workdir(wd, split="test", eval_batches=None,
                                     out=os.path.join(wd, "eval_test"))
      test = {"test_accuracy": float(ev["token_accuracy"]),
              "protocol": int(PRESETS[preset]["protocol"])}
      if PRESETS[preset].get("hooks"):     # e.g. a row decoded through a quantised cache
        test.update(hooks(PRESETS[preset]).extra_figures(preset, run, wd))
    return dict(dataclasses.asdict(run), stage=stage, status="ok", **test,
                pairs=int(config.mqar.num_pairs), vocab=int(config.mqar.vocab_size),
                steps=int(config.num_train_steps), accuracy=float(last["token_accuracy"]),
                eval_loss=float(last["eval_loss"]),
                curve=[(r["step"], r["token_accuracy"]) for r in evals],
                train_seconds=runs.train_seconds(wd), steps_per_s=runs.rates(wd)[0])

  return sweep.train_run(make_config(preset, run, overrides), os.path.join(root, run.name),
                         measure)


def hooks(p: dict):
  """The module a preset names under "hooks" (e.g. studies.recall.memory): it builds
  the preset's rows (`apply_row`), plans them (`row_plan`) and adds figures to a
  finished run (`extra_figures`). Imported by name, so the runner depends on no study
  built on it."""
  import importlib
  if not p.get("hooks"):
    raise ValueError(f"an MQAR preset with rows names its hooks module; {sorted(p)} has none")
  return importlib.import_module(p["hooks"])


PARTS = ("first", "rest")     # a variant's plan in two parts (`variant_plan`)


def variant_plan(p: dict, variant: str, results: list[dict], stages,
                 part: str = "") -> list:
  """[(run, stage)] of one variant, in order: the lr stage; once its rate is chosen
  (`results` hold every lr run), the grid at the first length, the extra seeds
  (part "first"), then the grid at the other panels (part "rest"; "": both). The
  study runs every variant's first part before any rest, so that a sweep stopped
  early has whole cells of every variant at the first panel."""
  if p.get("rows"):          # a row of its hooks module: protocol v2's own plan
    return hooks(p).row_plan(p, variant, results, stages, part)
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


def _unfinished(preset, variant, root, stages, overrides, part="", ledger=True) -> list:
  """[(run, stage)] of the variant's plan with neither a finished workdir nor an entry
  of its config in the ledger."""
  # a row's plan may read another row's runs (studies.recall.memory: rate_of)
  results = collect(preset, root, overrides,
                    None if PRESETS[preset].get("rows") else variant, ledger)
  done = {run_of(r) for r in results}
  return [(r, s) for r, s in variant_plan(PRESETS[preset], variant, results, stages, part)
          if r not in done and not sweep.finished(os.path.join(root, r.name),
                                                  make_config(preset, r, overrides))]


def run_variant(preset: str, variant: str, root: str, stages, overrides=None,
                log=print, part: str = "", ledger=True, process: str | None = None) -> None:
  """Every unfinished run of (a part of) one variant's plan, in this process (the lr
  stage first: its results choose the rate of the rest); each finished run goes to
  the ledger (if any) at once, under `process`."""
  ledger = mqar_ledger.path_of(preset, ledger)
  where = mqar_ledger.host() if ledger else None
  while True:
    todo = _unfinished(preset, variant, root, stages, overrides, part, ledger)
    if not todo:
      return
    run, stage = todo[0]
    runs.check_stop()                   # `touch workdirs/STOP`: end at a run boundary
    t = time.perf_counter()
    res = run_one(preset, run, stage, root, overrides)
    if ledger:
      mqar_ledger.record_run(ledger, res, process, where)
    log(f"{run.name}: {res['accuracy']:.3f} ({time.perf_counter() - t:.0f} s)")


def child(job_json: str) -> None:
  """A child process of `execute`: run_variant of its job (sweep.child: its CPU time,
  start-up included, goes to root/cpu_ledger.jsonl, also when it fails or is
  stopped; and, with the process's id, to the job's ledger where it names one)."""
  path = json.loads(job_json).get("ledger")
  pid = mqar_ledger.process_id() if path else None
  work = lambda j: run_variant(
      j["preset"], j["variant"], j["root"], j["stages"], j["overrides"],
      log=lambda s: print(s, flush=True), part=j.get("part", ""), ledger=path,
      process=pid)
  if not path:
    sweep.child(job_json, work, ledger=lambda j: (j["root"], j["variant"]))
    return

  def counted(j):
    try:
      return work(j)
    finally:
      mqar_ledger.record_process(path, j["root"], pid, j["variant"], runs.cpu_seconds(),
                                 mqar_ledger.host())
  sweep.child(job_json, counted)


def execute(preset: str, names: list[str], root: str, stages, overrides=None,
            subprocess_run=True, jobs: int = 1, log=print, parts=("",),
            ledger=True) -> None:
  """Runs the unfinished runs of each of `parts` (PARTS, or "" for the whole) of each
  variant's plan: every variant's first part, in the order of `names`, before any
  later part. One child process per (variant, part), `jobs` at a time, each pinned to
  a core of its own (sweep.execute); a variant's later part starts once its earlier
  one has ended (its rate is chosen there), and a core with no first part left to
  start takes a later part rather than wait for every first part to end. Or all in
  this process, part by part."""
  ledger = mqar_ledger.path_of(preset, ledger)
  left = [(n, part) for part in parts for n in names
          if _unfinished(preset, n, root, stages, overrides, part, ledger)]
  if not subprocess_run:
    for n, part in left:
      if not _unfinished(preset, n, root, stages, overrides, part, ledger):
        continue           # a later part the earlier one's runs left nothing to do
      t0, pid = runs.cpu_seconds(), mqar_ledger.process_id() if ledger else None
      run_variant(preset, n, root, stages, overrides, log, part, ledger, pid)
      if ledger:
        mqar_ledger.record_process(ledger, root, pid, n, runs.cpu_seconds() - t0,
                                   mqar_ledger.host())
      else:
        sweep.record_cpu(root, n, runs.cpu_seconds() - t0)
    return
  key = lambda n, part: f"{n}:{part}" if part else n
  split = {key(n, part): (n, part) for n, part in left}
  earlier = {key(n, part): key(n, parts[parts.index(part) - 1])
             for n, part in left if parts.index(part) > 0}
  sweep.execute(list(split), lambda k, core: dict(
      preset=preset, root=root, overrides=overrides, variant=split[k][0],
      stages=list(stages), part=split[k][1], core=core,
      **({"ledger": ledger} if ledger else {})), "studies.recall.mqar",
      lambda k: os.path.join(root, split[k][0], "log.txt"), jobs, log, after=earlier)


def collect(preset: str, root: str, overrides=None, variant=None,
            ledger=True) -> list[dict]:
  """Every finished run of this preset's settings (of one variant, if given): the
  ledger's entries (as their result.json: mqar_ledger.result_of), those of the ledgers
  of the presets it `reuse`s whose config is this preset's, and the finished
  result.json files under `root` of runs the ledgers lack."""
  ours = lambda res: res.get("status") == "ok" and "pairs" in res and res.get(
      "config") in sweep.fingerprints(make_config(preset, run_of(res), overrides))
  paths = [mqar_ledger.path_of(preset, ledger)] + [   # and the ledgers it reuses
      mqar_ledger.path_of(q) for q in PRESETS[preset].get("reuse", ()) if ledger]
  out, have = [], set()
  for e in (e for path in paths for e in mqar_ledger.read(path)["runs"]):
    if (not variant or e["variant"] == variant) and ours(e) and run_of(e) not in have:
      out.append(mqar_ledger.result_of(e))
      have.add(run_of(e))
  names = [variant] if variant else sorted(os.listdir(root)) if os.path.isdir(root) else []
  for n in names:
    d = os.path.join(root, n)
    for m in sorted(os.listdir(d)) if os.path.isdir(d) else []:
      try:
        res = pages.read_json(os.path.join(d, m, "result.json"))
      except ValueError:       # being written this moment: not finished yet
        continue
      if res and ours(res) and run_of(res) not in have:
        out.append(res)
  return out


def backfill(preset: str, root: str, overrides=None, ledger=True) -> int:
  """Adds every finished result.json under `root` (runs finished before the ledger, or
  by code without it) to the preset's ledger (mqar_ledger.backfill); returns how many
  runs it added."""
  path = mqar_ledger.path_of(preset, ledger)
  if not path:
    raise ValueError(f"preset {preset!r} keeps no ledger (and none was named)")
  return mqar_ledger.backfill(root, path, collect(preset, root, overrides, ledger=None),
                             lambda r: run_of(r).name)


def run_of(res: dict) -> Run:
  """The Run of a result (or of any dict with Run's fields)."""
  return Run(res["variant"], res["width"], res["length"], res["pairs"], res["lr"],
             res["seed"])


def study(preset: str, root: str, *, names=None, stages=("lr", "grid", "seeds"),
          overrides=None, subprocess_run=True, jobs: int = 1, log=print,
          ledger=True) -> dict:
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
  gauge = sweep.gauge()
  ledger = mqar_ledger.path_of(preset, ledger)
  clock = (mqar_ledger.LedgerClock(root, jobs, ledger) if ledger
           else sweep.WallClock(root, jobs))
  try:
    execute(preset, trained, root, stages, overrides, subprocess_run, jobs, log, PARTS,
            ledger)
  finally:
    clock.stop()
  return dict(page_data(preset, root, overrides, treat, ledger), matmul_peak=gauge)


def page_data(preset: str, root: str, overrides=None, treat=None, ledger=True) -> dict:
  """What the page is written from (results.json): no training. treat: `variants`'
  answer, if known. With a ledger, its runs and totals (the workdirs' finished runs
  added); without, root's."""
  ledger = mqar_ledger.path_of(preset, ledger)
  results = collect(preset, root, overrides, ledger=ledger)
  totals = (dict(mqar_ledger.totals(ledger), cpu_counted=mqar_ledger.counted(),
                 ledger=os.path.relpath(ledger)) if ledger else sweep.ledger_totals(root))
  treat = treat or variants(preset)
  lrs = {n: choose_lr(PRESETS[preset], results, n) for n, t in treat.items()
         if t == "train"}
  p = PRESETS[preset]
  return {"preset": preset, "settings": json.loads(json.dumps(p)),
          "protocol": protocol.record("variants_mqar", p.get("protocol", 0)),
          "treatment": {n: (t if isinstance(t, str) else list(t)) for n, t in treat.items()},
          "lrs": lrs, "results": sorted(results, key=lambda r: (
              r["variant"], r["length"], r["width"], r["lr"], r["seed"])),
          **totals, "config": _config_words(preset, overrides)}


def _config_words(preset, overrides) -> dict:
  c = make_config(preset, Run(REFERENCE, PRESETS[preset]["widths"][0],
                              *PRESETS[preset]["panels"][0][:2], 1e-3), overrides)
  return {"vocab_size": int(c.mqar.vocab_size), "power_a": float(c.mqar.power_a),
          "batch_size": int(c.batch_size), "steps": int(c.num_train_steps),
          "warmup_steps": int(c.warmup_steps), "schedule": c.schedule,
          "weight_decay": float(c.weight_decay), "num_layers": int(c.model.num_layers),
          "num_heads": int(c.model.num_heads), "positions": c.model.positions,
          "short_conv": int(c.model.get("short_conv", 0)),
          "gated_layer": c.model.get("gated_layer", "bare"),
          "eval_sequences": int(c.eval_batches) * int(c.eval_batch_size),
          "attention_options": c.model.attention_options.to_dict()}


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
      widths = list(dict.fromkeys(r.width for r in lr_left))
      parts.append("lr stage at " + "; ".join(
          (f"w{w}: " if len(widths) > 1 or p.get("lr_cells") else "")
          + ", ".join(f"{r.lr:g}" for r in lr_left if r.width == w) for w in widths))
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
