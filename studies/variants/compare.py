"""Every attention variant on one task, under one budget: quality against cost
(`results/variants_<task>/`; the page: `studies.variants.page`).

For each variant it trains the task's preset config with `config.attention=<variant>`
through `trainer.train_and_evaluate` (the project's one training loop), then evaluates
the workdir with `eval.evaluate_workdir` (test split, the task metric, samples and
generation speed), and writes workdir/result.json. A workdir that already holds a
result.json of this config is not retrained (resumable); an interrupted one resumes
from its checkpoint, as train.py does; one trained under another config (the preset's
budget changed) is set aside as <workdir>.stale-<fingerprint> and trained afresh
(studies.core.sweep, the runner of every sweep). Each run trains in a child process of its
own (`python -m studies.variants.compare <job>`), so its peak memory is its own (a GPU
row's is the device's peak of its process) and a crash stops one row, not the study.

A variant the task cannot use (a decoder needs causal attention; an encoder-decoder
self-attention role needs padding masks, ...) is refused by the model config's own
validation; its row carries that message. Nothing is silently missing.

Every row records the run that trained and timed it (`run`: the command, its start,
the machine): speeds are compared only between rows of one run.

Per row: quality is the task metric on the test (or held-out) split; train steps/s
is the rate of training alone, over the log intervals after the first (which holds
the compilation) that hold no evaluation or checkpoint save; peak memory is the
device's peak bytes in use on a GPU and, on a CPU (where XLA keeps no such counter),
XLA's compiled memory plan (arguments + outputs + temporaries) of one
forward+backward step on a train batch; decode speed is eval.py's generation timing,
with the variant's decode state (mode=cache) where it has one, else recomputing the
prefix (mode=recompute).

This module is the sweep (rates, rows, seeds, the page's rows); what a row trains is
studies.variants.config, what a finished row measures studies.variants.measure, where
a run's page goes studies.variants.place, and the page itself studies.variants.page.
"""
from __future__ import annotations

import os
import sys
import time

from data import tasks
from studies.core import pages, protocol, runs, sweep
from studies.variants import measure
from studies.core.sweep import config_fingerprint, finished, fingerprints
# The parts of the study in modules of their own, named here too (the study's API):
# what a row trains (variants_config), what a finished row measures (variants_measure),
# where a run's page goes (variants_place).
from studies.variants.config import (EXACT, ROLE_NAMES, base_lr, with_lr, SKIP_ON_CPU, SKIP_QUADRATIC,
                                     TASKS, attention_notes, exact_roles, layer_notes, make_config, presets,
                                     refusal, skip_reason, why_not)
from studies.variants.measure import (DECODE, METRIC, SOLVED, STATUS_SHORT, TRAIN_METRIC,
                                      Pct, bleu_signature, curve, metric_label, quality,
                                      quality_str,
                                      solved_at, train_memory, validation_figure)
# the ledger (lr.json, seeds.json) and the rows kept without their workdirs
from studies.variants.ledger import (COST_FIELDS, _record, ledger_row, on_protocol,  # noqa: F401
                                     published, record_lr, record_seed, recorded_seeds,
                                     reporting)
from studies.variants.place import (OUT, SCRATCH, budget_overrides, budget_tag,
                                    committed_rows, is_committed_path, on_committed_page,
                                    out_dir, page_dir)

# The lr sweep (`--lr_sweep`): each chosen variant trains from seed 0 at every rate of
# its task's grid, the preset's rate times LR_FACTORS (half a decade either side); its
# row is then the run at the rate `runs.choose_lr` picks (the rule studies.recall.mqar
# uses too), and its extra seeds train at that rate. One procedure for every variant, so
# that no row hinges on a rate tuned for another variant (the presets' rates were set
# on softmax or linear).
LR_FACTORS = (0.3, 1.0, 3.0)
# Version 2's grid (studies/PROTOCOL.md rule 11: at least 4 rates, protocol.RateGrid):
# one step more above, where the version 1 sweeps' extensions most often went (their
# runs there are the same configs, so a ledger's runs count under either grid).
LR_FACTORS_V2 = (0.3, 1.0, 3.0, 9.0)
# A variant whose best rate is an end of the grid, better than the rate next to it
# beyond LR_TIE, might do better still beyond it: the sweep then adds the next rate out
# (x3 above, x0.3 below), at most LR_EXTEND times on each side.
LR_EXTEND = 2
# Differences of the task metric that one seed does not resolve (about the seed spread
# the pages measured): rates within it of the best tie in the lr sweep (each task's
# record: Study.lr_tie).
LR_TIE = {t: tasks.task(t).study.lr_tie for t in TASKS}



# ---- configs ------------------------------------------------------------------------


# ---- learning rates -------------------------------------------------------------------

def lr_grid(task, preset, overrides=None, version: int = 1) -> list[float]:
  """The rates of the lr sweep, smallest first: base_lr times LR_FACTORS (3 digits), or
  LR_FACTORS_V2 on a page of protocol `version` 2 or later."""
  b = base_lr(task, preset, overrides)
  factors = LR_FACTORS_V2 if version >= 2 else LR_FACTORS
  return sorted({b if f == 1.0 else float(f"{b * f:.3g}") for f in factors})


def lr_rule(task, preset, overrides=None, out=None):
  """The lr sweep's rule over this task's grid. A page (folder `out`) of protocol
  version 2 or later: protocol.RateGrid (4 rates at least, an end that is the best
  extends, ties within the task's protocol.TIES); otherwise sweep.LrRule (the one of
  every version 1 sweep): LR_EXTEND rates more past each end (x0.3 below, x3 above),
  ties within LR_TIE."""
  version = protocol.page_version(out) if out else 1
  grid = tuple(lr_grid(task, preset, overrides, version))
  if version >= 2:
    return protocol.RateGrid(grid, protocol.TIES[task], METRIC[task][2],
                             extend=LR_EXTEND)
  return sweep.LrRule(grid, LR_EXTEND, LR_TIE[task], METRIC[task][2])


def run_dir(root, variant, lr=None, base=None, seed=None) -> str:
  """The workdir of one run: <root>/<variant>[@lr<rate>][@seed<s>]; the rate is named
  only where it is not the preset's, the seed only where it is not the row's."""
  name = variant + ("" if lr is None or lr == base else f"@lr{lr:g}")
  return os.path.join(root, name + ("" if seed is None else f"@seed{seed}"))


def lr_choices(task, preset, out, overrides=None) -> dict:
  """{variant: {"grid": {rate: quality}, "chosen": rate or None}} from out/lr.json, the
  runs of this preset's ladder under this config (a sweep of another budget is not
  this page's); "chosen" is None until the sweep is complete (`lr_rule`)."""
  rule, base = lr_rule(task, preset, overrides, out), base_lr(task, preset, overrides)
  ladder = rule.ladder
  new = protocol.follows(protocol.page_version(out))
  by = {}
  for r in pages.read_json(os.path.join(out, "lr.json"), []):
    if r["preset"] != preset or r["task"] != task or r["lr"] not in ladder:
      continue
    want = fingerprints(make_config(task, preset, r["variant"],
                                    with_lr(overrides, r["lr"], base)))
    if r["config"] not in want:
      continue
    if new:     # the protocol's runs only; the rule sees their validation figures
      if protocol.follows(r.get("protocol")):
        by.setdefault(r["variant"], {})[r["lr"]] = protocol.Scores(r["validation"],
                                                                   r["quality"])
    else:       # a page before the protocol: its rates were chosen on the test figure
      by.setdefault(r["variant"], {})[r["lr"]] = protocol.Scores(r["quality"])
  return {v: {"grid": dict(sorted(protocol.Validation.of(q).items())),
              "chosen": protocol.select(rule, q)} for v, q in sorted(by.items())}


def by_rule(choices: dict) -> dict:
  """{variant: softmax's chosen rate} for the kernels of softmax attention (registry
  family "exact": sdpa, flash, flash_pallas, ring, fp8) that were not swept themselves:
  they compute softmax's function (up to rounding; fp8's up to its quantisation), so
  they share the rate softmax's sweep chose, by rule, rather than each sweeping a grid
  whose answer is softmax's. `choices`: lr_choices; {} until softmax's sweep is
  complete."""
  import attention
  ref = choices.get(EXACT, {}).get("chosen")
  if ref is None:
    return {}
  return {v: ref for v in attention.names() if v != EXACT and v not in choices
          and attention.variant(v).family == "exact"}


def chosen_lrs(task, preset, out, overrides=None) -> dict:
  """{variant: the rate its row runs at} for the variants whose lr sweep is complete,
  and for the unswept kernels of softmax attention, softmax's chosen rate (`by_rule`)."""
  ch = lr_choices(task, preset, out, overrides)
  return {**{v: c["chosen"] for v, c in ch.items() if c["chosen"] is not None},
          **by_rule(ch)}


# ---- one variant --------------------------------------------------------------------



def run_one(task: str, preset: str, variant: str, workdir: str,
            overrides: dict | None = None, run: dict | None = None,
            proto: bool = False) -> dict:
  """Trains (or resumes) and evaluates one variant; writes and returns workdir/result.json,
  with `run` (the record of the study's run that trains it) as its "run".

  A variant refused by the config validation, or skipped by the preset, gets
  `why_not`'s row (status 'refused' / 'skipped' and the reason); nothing is trained
  or written.
  """
  not_run = why_not(task, preset, variant, overrides)
  if not_run:
    return not_run

  def figures(config, workdir):
    res = {"variant": variant, "task": task, "preset": preset}
    if run:
      res["run"] = run
    res["train_seconds"] = runs.train_seconds(workdir)  # all segments of a resumed run
    res["steps_per_s"], evals, res["params"] = runs.rates(workdir)
    res["curve"] = curve(task, evals)
    res.update(solved_at(task, evals))
    res.update(measure.evaluate(task, variant, workdir, config, "test") if proto
               else measure.evaluate(task, variant, workdir, config))
    if proto:    # studies.core.protocol: the row reports test; the rule reads validation
      res.update(validation=validation_figure(task, workdir), protocol=protocol.RUNS)
    return res

  # its CPU time (sweep.train_run): training (of this segment, if resumed), evaluation,
  # memory estimate
  return sweep.train_run(make_config(task, preset, variant, overrides), workdir, figures)






def reevaluate(task, preset, variant, workdir, overrides=None) -> dict:
  """Runs the evaluation of a finished variant again (after a change to it), keeping
  its training measurements; returns the updated result.json."""
  res = finished(workdir)
  res.update(measure.evaluate(task, variant, workdir, make_config(task, preset, variant,
                                                            overrides)))
  return sweep.write_result(res, workdir)


def ensure(task, preset, variant, workdir, overrides=None, subprocess_run=True,
           run=None, proto=False) -> dict:
  """workdir/result.json if the variant finished there (it is never retrained), else
  `why_not`'s row if it is not to be trained, else runs it under the study's `run`
  record (in a subprocess of its own unless subprocess_run=False)."""
  path = os.path.join(workdir, "result.json")
  config = make_config(task, preset, variant, overrides)
  done = sweep.done_or_clear(workdir, config)
  if done:
    return done
  if not subprocess_run:
    return run_one(task, preset, variant, workdir, overrides, run, proto)  # asks why_not
  not_run = why_not(task, preset, variant, overrides)    # no process spawned for it
  if not_run:
    return not_run
  code, tail, secs = sweep.spawn("studies.variants.compare", dict(
      task=task, preset=preset, variant=variant, workdir=workdir, overrides=overrides,
      run=run, protocol=proto), os.path.join(workdir, "log.txt"))
  if code == 0 and os.path.exists(path):
    return pages.read_json(path)
  # a failure is a row too, but not a result: the next call tries again
  return {"variant": variant, "task": task, "preset": preset, "status": "failed",
          "reason": f"exit {code} after {secs:.0f} s: {tail} (full log: {workdir}/log.txt)"}


def child(job_json: str) -> dict:
  """The child process of `ensure` (one run): run_one of the job it was given."""
  return sweep.child(job_json, lambda j: run_one(
      j["task"], j["preset"], j["variant"], j["workdir"], j["overrides"], j["run"],
      *((True,) if j.get("protocol") else ())))


def lr_sweep(task, preset, variants, root, out, overrides=None, *, run, kept=None,
             log=print) -> None:
  """Trains each of `variants` at the rates `lr_rule` asks for, the grid and where its
  best rate is an end of it the rates beyond, that out/lr.json does not hold yet (seed
  0; the preset's rate is the row's own run, or the page's kept row), and records each
  there."""
  base, rule = base_lr(task, preset, overrides), lr_rule(task, preset, overrides, out)
  proto = on_protocol(out)
  kept = None if proto else kept      # a row from before the protocol chose on test
  for n in variants:
    if why_not(task, preset, n, overrides):
      continue                                  # refused or skipped: its row says so
    tried = set()
    while True:      # what is recorded (on this machine or another) is not trained again
      q = lr_choices(task, preset, out, overrides).get(n, {}).get("grid", {})
      lr = rule.next(q)
      if lr is None or lr in tried:             # complete, or a run that failed
        break
      tried.add(lr)
      ov, wd = with_lr(overrides, lr, base), run_dir(root, n, lr, base)
      r = (kept[n] if lr == base and kept and n in kept
           and finished(wd, make_config(task, preset, n, ov)) is None
           else ensure(task, preset, n, wd, ov, run=run, proto=proto))
      log(f"{n} lr {lr:g}: {r['status']} {quality_str(r)}")
      if r.get("status") == "ok":
        record_lr(out, r, lr)


def _train_variant(task, preset, n, root, out, overrides, *, run, seeds, sweep_lr,
                   ignore_page, log) -> dict | None:
  """One chosen variant's runs, in order: its learning-rate sweep (with `sweep_lr`), its
  row at the rate `chosen_lrs` picks (unless it finished here before, or the committed
  page keeps it, trained elsewhere), then its extra `seeds`. Returns the row's result
  where it ran now (a failure included, so that it is not run twice), else None."""
  import attention
  base = base_lr(task, preset, overrides)
  # softmax's kernels (family "exact") take softmax's chosen rate by rule (`by_rule`):
  # a sweep of theirs would re-measure softmax's answer
  if sweep_lr and not (attention.variant(n).family == "exact" and n != EXACT):
    lr_sweep(task, preset, [n], root, out, overrides, run=run,
             kept=published(task, preset, out, overrides), log=log)
  lrs = chosen_lrs(task, preset, out, overrides)
  lr = lrs.get(n)
  ov, wd = with_lr(overrides, lr, base), run_dir(root, n, lr, base)
  row = None
  if on_protocol(out):        # the rate's runs are not reported: the reporting seeds are
    if lr is None and not why_not(task, preset, n, overrides):
      return None             # the sweep is incomplete (a failed run): nothing to report
    kept = recorded_seeds(task, preset, n, out, ov)
    for s in reporting(task, preset):
      wd, ov_s = run_dir(root, n, lr, base, s), {**(ov or {}), "seed": s}
      if s in kept and finished(wd, make_config(task, preset, n, ov_s)) is None:
        log(f"{n} seed {s}: kept from {out}/seeds.json (trained {kept[s]['date']}; its "
            "workdir is not on this machine)")
        continue
      r = ensure(task, preset, n, wd, ov_s, run=run, proto=True)
      log(f"{n} seed {s}: {r['status']}")
      if r.get("status") == "ok":
        record_seed(out, r, s)
      if s == reporting(task, preset)[0]:       # the row: the first reporting seed's run
        row = r
    return row
  if (finished(wd, make_config(task, preset, n, ov)) is None
      and (ignore_page or n not in published(task, preset, out, overrides, lrs))):
    t = time.perf_counter()
    row = ensure(task, preset, n, wd, ov, run=run)
    log(f"{n}: {row['status']} {row.get('eval', {}).get(METRIC[task][0], '-')} "
        f"({time.perf_counter() - t:.0f} s)")
  for s in seeds:
    if s == int(make_config(task, preset, n, ov).seed):
      continue                                    # that run is the variant's row
    r = ensure(task, preset, n, run_dir(root, n, lr, base, s), {**(ov or {}), "seed": s},
               run=run)
    log(f"{n} seed {s}: {r['status']}")
    if r.get("status") == "ok":
      record_seed(out, r, s)
  return row


def study(task, preset, variants, root, out, overrides=None, *, command, page_only=False,
          reeval=False, ignore_page=False, seeds=(), sweep_lr=False, beside=None,
          log=print) -> list[dict]:
  """The rows of the page, one per registered variant: `variants` (names) trained
  and evaluated here, or kept (a finished workdir under `root`; else the committed
  page's row in `out`, trained elsewhere); with `page_only`, nothing is trained.
  The chosen variants train one after another, each whole (`_train_variant`): with
  `sweep_lr`, first at every rate of `lr_grid` (out/lr.json), then its row, and its
  extra `seeds` (out/seeds.json), at the rate `chosen_lrs` picks.
  Each run here is marked with this study's run record (the command, its start, the
  machine). beside: {variant: row} (`committed_rows`) that fill the rows neither run
  here nor kept in `out` (a page under workdirs/ shows the committed rows beside its
  own, marked, instead of "not run yet")."""
  import attention
  run = sweep.started(command, preset)
  if variants and not page_only:
    # the machine's speed as the run starts: the page compares times only within a run
    run["matmul_peak"] = sweep.gauge()
  base = base_lr(task, preset, overrides)
  now = {}             # variant by variant: a study cut short leaves whole rows
  for n in ([] if page_only else variants):
    now[n] = _train_variant(task, preset, n, root, out, overrides, run=run, seeds=seeds,
                            sweep_lr=sweep_lr, ignore_page=ignore_page, log=log)
  lrs = chosen_lrs(task, preset, out, overrides)
  kept = published(task, preset, out, overrides, lrs)
  ledger = {}                 # a protocol page's rows that ran on another machine
  if on_protocol(out):
    for n in lrs:
      r = ledger_row(task, preset, n, out, overrides, lrs[n])
      if r:
        ledger[n] = r
  results = []
  for n in attention.names():           # the page has a row for every variant
    ov, wd = with_lr(overrides, lrs.get(n), base), run_dir(root, n, lrs.get(n), base)
    if on_protocol(out):    # the row: the first reporting seed's run
      s = reporting(task, preset)[0]
      ov, wd = {**(ov or {}), "seed": s}, run_dir(root, n, lrs.get(n), base, s)
      if n in now:          # trained just now, or its seeds kept (its ledger row)
        results.append(now[n] or stored_row(task, preset, n, wd, ov, kept, beside, ledger,
                                            proto=True))
        continue
    ran_here = finished(wd, make_config(task, preset, n, ov)) is not None
    keep = n in kept and not ran_here and not ignore_page    # finished elsewhere
    if page_only or n not in variants or keep:
      results.append(stored_row(task, preset, n, wd, ov, kept, beside, ledger,
                                proto=on_protocol(out)))
      if keep and not page_only and n in variants:
        log(f"{n}: kept from {out}/results.json (trained {kept[n]['date']}; its workdir "
            "is not on this machine)")
      continue
    results.append(now.get(n) or (reevaluate(task, preset, n, wd, ov) if reeval and ran_here
                                  else ensure(task, preset, n, wd, ov, run=run)))
  return results


def stored_row(task, preset, variant, workdir, overrides=None, kept=None,
               beside=None, ledger=None, proto=False) -> dict:
  """workdir/result.json if the variant ran (on a protocol page, `proto`: a protocol
  run's only), else its row kept from the page
  (`published`), else its row from the page's ledger (`ledger`: {variant: ledger_row}),
  else its committed row (`beside`: committed_rows, marked as such),
  else a row saying why it did not run: the task refuses it, the preset skips it, or
  it has not been run yet."""
  res = finished(workdir, make_config(task, preset, variant, overrides))
  if res and proto and not protocol.follows(res.get("protocol")):
    res = None                # its figure is not the protocol's (a subset, no validation)
  if res:
    if os.path.exists(os.path.join(workdir, "metrics.jsonl")):
      # recomputed from the metrics: older results timed one process (or read a
      # resumed segment's clock from step 0), and the plotted metric may change
      rate, evals, _ = runs.rates(workdir)
      res.update(train_seconds=runs.train_seconds(workdir), steps_per_s=rate,
                 curve=curve(task, evals), **solved_at(task, evals))
    return res
  if kept and variant in kept:
    return kept[variant]
  if ledger and variant in ledger:
    return ledger[variant]
  if beside and variant in beside:
    return beside[variant]
  res = {"variant": variant, "task": task, "preset": preset}
  try:
    not_run = why_not(task, preset, variant, overrides)
  except RuntimeError as e:               # train.py does not know the task
    return dict(res, status="failed", reason=str(e))
  return not_run or dict(res, status="skipped", pending=True, reason="yet to be trained: "
                         f"`{train_command(task, preset, [variant])}` trains it")


def train_command(task, preset, variants) -> str:
  """The command that trains `variants` (names) on `task` under `preset`."""
  return (f"python -m scripts.compare_variants --task={task} --preset={preset} "
          f"--variants={','.join(variants)}")


if __name__ == "__main__":     # the per-variant child of `ensure`
  child(sys.argv[1])
