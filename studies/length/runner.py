"""The length study's runner (`python -m scripts.lm_length --preset=cpu`): which runs are
due, in the issue's order, trained one child process each through the project's
training loop (studies.core.sweep: spawn, child, train_run), every finished run added to
the committed ledger (studies.length.ledger) at once; resumable from that ledger alone.

Order (`due`), row by row in the preset's order (flash first):
  1. the rate sweep at select_at, seed 0 (protocol.SELECTION_SEEDS): the grid's rates,
     then rule 11's extensions (protocol.RateGrid); a row's extension and choice wait
     for the tie, which is flash's reporting seeds' (presets.Preset.tie_of): flash's
     own choice is made under the provisional tie, declared before its noise exists
  2. at the chosen rate, the reporting seeds (protocol.reporting_seeds: 1, 2, 3) at
     select_at, then at the other lengths, longest first; a (row, length) whose seeds
     (or flash's) spread past protocol.spread_bound one more each time, up to
     protocol.MAX_SEEDS (rule 10, `seeds_for`)
  3. for the check rows, seed 0 at the check length at the carried rate and its two
     neighbours on the rate ladder
A row none of whose rates leaves chance (RateGrid.trained) runs no seeds: "did not
train". `rate_state` is what the page reads of each row's sweep; a row whose sweep is
incomplete is never reported.
"""
from __future__ import annotations

import os
import sys

from studies.core import protocol, runs, sweep
from studies.length import ledger, presets

REFERENCE = "flash"


def _selection(p, got: dict, row: str) -> dict:
  """{rate: validation figure} of `row`'s selection runs (seed 0 at select_at)."""
  s0 = protocol.SELECTION_SEEDS[0]
  return {lr: e.get("validation") for (r, L, lr, s), e in got.items()
          if r == row and L == p.select_at and s == s0}


def rate_state(p, got: dict, row: str) -> dict:
  """Where `row`'s rate sweep stands: {"grid": {rate: validation}, "tie": the tie its
  choice uses (None: not fixed yet), "tie_from": "provisional" / "flash's seeds",
  "next": the rate it trains next (None: none), "chosen": the chosen rate (None: the
  sweep is incomplete), "trained": whether some rate left chance}."""
  grid = _selection(p, got, row)
  tie, source = tie_for(p, got, row)
  rule = p.rule(tie if tie is not None else p.provisional_tie)
  nxt = rule.next(grid)
  waits = nxt is not None and nxt not in p.grid and tie is None
  chosen = rule.choose(grid) if tie is not None else None
  return {"grid": dict(sorted(grid.items())), "tie": tie, "tie_from": source,
          "next": nxt, "waits_for_tie": waits, "chosen": chosen,
          "trained": rule.trained(grid) if grid else True,
          "ladder": rule.ladder}


def tie_for(p, got: dict, row: str) -> tuple:
  """(tie, where it comes from) of `row`'s rate choice: flash's own under the
  provisional tie; every other row's from flash's reporting seeds' validation figures
  at select_at once they all ran, else (None, "waits for flash's seeds")."""
  if row == REFERENCE:
    return p.provisional_tie, "provisional (Shakespeare's tie in bits)"
  ref = reference_seeds(p, got)
  if len(ref) < len(presets.SEEDS):
    return None, "waits for flash's seeds"
  return p.tie_of(ref), "flash's seeds"


def reference_seeds(p, got: dict) -> list[float]:
  """The validation figures of flash's reporting seeds at select_at (at its chosen rate;
  [] while flash's sweep is incomplete)."""
  grid = _selection(p, got, REFERENCE)
  chosen = p.rule(p.provisional_tie).choose(grid)
  if chosen is None:
    return []
  return [got[(REFERENCE, p.select_at, chosen, s)]["validation"] for s in presets.SEEDS
          if (REFERENCE, p.select_at, chosen, s) in got]


def neighbours(ladder, lr) -> list[float]:
  """The rates next to `lr` on the ladder (one below, one above, where they exist)."""
  lad = sorted(ladder)
  if lr not in lad:
    return []
  i = lad.index(lr)
  return [lad[j] for j in (i - 1, i + 1) if 0 <= j < len(lad)]


def due(p, got: dict, rows=None, lengths=None) -> list[dict]:
  """The runs due now, in order ({row, length, lr, seed}), none of them in `got` (the
  ledger's runs, ledger.runs_of): first every row's runs at the selection length (its
  rate sweep, then its seeds), in row order, then every row's seeds at the other
  lengths (longest first), then the carried-rate checks. So the selection length's
  answer (every row judged against flash there) is complete before the longer
  lengths' runs take the cores, and a row's verdict at one length never waits behind
  another row's checks."""
  rows = [r for r in p.rows if (r in p.rows[:p.trained] if rows is None else r in rows)]
  lengths = [L for L in p.lengths if lengths is None or L in lengths]
  s0 = protocol.SELECTION_SEEDS[0]
  out, later, checks = [], [], []
  for r in rows:
    st = rate_state(p, got, r)
    if st["next"] is not None:
      # the grid's rates are independent of each other: all of them due at once;
      # an extension (past the grid) one at a time, once the tie is fixed
      missing = [lr for lr in sorted(p.grid) if lr not in st["grid"]]
      if missing or not st["waits_for_tie"]:
        out += [dict(row=r, length=p.select_at, lr=lr, seed=s0)
                for lr in (missing or [st["next"]])]
      continue
    if st["chosen"] is None or not st["trained"]:
      continue
    lr = st["chosen"]
    order = [p.select_at] + sorted((L for L in lengths if L != p.select_at), reverse=True)
    want = [dict(row=r, length=L, lr=lr, seed=s) for L in order if L in lengths
            for s in seeds_for(p, got, r, L, lr)]
    new = lambda ws: [w for w in ws if (w["row"], w["length"], w["lr"], w["seed"]) not in got]
    out += new([w for w in want if w["length"] == p.select_at])
    later += new([w for w in want if w["length"] != p.select_at])
    L, check_rows = p.check
    if r in check_rows and L in lengths:
      checks += new([dict(row=r, length=L, lr=x, seed=s0)
                     for x in sorted([lr] + neighbours(st["ladder"], lr))])
  return out + later + checks


def test_figures(got: dict, row: str, length: int, lr) -> list[float]:
  """The test bits/byte of `row`'s seeds at `length` and rate `lr` (the reporting seeds
  and any more rule 10 added), in seed order."""
  return [got[(row, length, lr, s)]["test"]["bits_per_byte"]
          for s in range(presets.SEEDS[0], presets.SEEDS[0] + protocol.MAX_SEEDS)
          if (row, length, lr, s) in got]


def seeds_for(p, got: dict, row: str, length: int, lr) -> list[int]:
  """The seeds `row` runs at `length`: the reporting seeds, and while its seeds (or
  flash's) spread wider than protocol.spread_bound, one more, up to protocol.MAX_SEEDS
  (rule 10: a split row gets more seeds before a verdict)."""
  seeds = list(presets.SEEDS)
  mine = test_figures(got, row, length, lr)
  fl = rate_state(p, got, REFERENCE)["chosen"] if row != REFERENCE else lr
  ref = test_figures(got, REFERENCE, length, fl) if fl is not None else []
  if len(mine) < len(seeds) or len(ref) < len(presets.SEEDS):
    return seeds
  bound = protocol.spread_bound(presets.METRIC, ref)
  if protocol.is_split(mine, bound) and len(mine) < protocol.MAX_SEEDS:
    seeds.append(seeds[0] + len(mine))
  return seeds


def run_name(run: dict) -> str:
  return f"{run['row']}@L{run['length']}@lr{run['lr']:g}@seed{run['seed']}"


def add_curves(path: str, root: str) -> list[str]:
  """Gives each run entry without a training curve the one its workdir's metrics.jsonl
  holds (studies.length.evaluate.train_curve: what `measure` records for runs after
  it was added), under the ledger's lock; returns the runs given one. Entries whose
  workdir is not here keep none."""
  from studies.length import evaluate
  done = []

  def change(d):
    for e in d["runs"]:
      wd = os.path.join(root, e.get("preset", ""), run_name(e))
      if "curve" not in e and os.path.exists(os.path.join(wd, "metrics.jsonl")):
        e["curve"] = evaluate.train_curve(wd)
        done.append(os.path.basename(wd))
  ledger._update(path, change)
  return done


# ---- one run, in its child process ------------------------------------------------------

def work(job: dict) -> dict:
  """Trains (or resumes) one run and measures it (studies.length.evaluate); the result
  goes to workdir/result.json and to the ledger."""
  from studies.length import evaluate
  p = presets.preset(job["preset"])
  c = presets.make_config(p, job["row"], job["length"], job["lr"], job["seed"],
                          job.get("data_dir"))
  pid = job.get("process") or ledger.process_id()
  try:
    res = sweep.train_run(c, job["workdir"], lambda config, wd: dict(
        status="ok", preset=p.name, row=job["row"], length=int(job["length"]),
        lr=float(job["lr"]), seed=int(job["seed"]), protocol=protocol.RUNS,
        **evaluate.measure(wd, config, p.recall_n)))
    res = dict(res, config=presets.fingerprint(c, p))
    ledger.record_run(job["ledger"], res, pid, ledger.host())
    return res
  finally:
    ledger.record_process(job["ledger"], job["root"], pid, job["row"],
                          runs.cpu_seconds(), ledger.host())


def launch(p, batch: list, *, root: str, path: str, jobs: int, data_dir=None,
           log=print) -> None:
  """Each run of `batch` in a child process of its own (sweep.execute: `jobs` at a
  time, one core each)."""
  by = {run_name(r): r for r in batch}

  def job_of(name, core):
    r = by[name]
    return dict(r, preset=p.name, workdir=os.path.join(root, p.name, name), root=root,
                ledger=path, data_dir=data_dir, core=core)
  os.makedirs(os.path.join(root, p.name), exist_ok=True)
  sweep.execute(list(by), job_of, "studies.length.runner",
                lambda n: os.path.join(root, p.name, n + ".log"), jobs=jobs, log=log)


def study(p, *, rows=None, lengths=None, jobs: int = 1, root: str, out: str,
          data_dir=None, launcher=launch, log=print) -> int:
  """Trains every due run, `jobs` at a time, until none is due (or a run fails twice:
  it is not tried again in this call); returns how many were launched."""
  path = ledger.path_of(p.name, out)
  tried, n = set(), 0
  clock = ledger.LedgerClock(root, jobs, path) if launcher is launch else None
  try:
    while True:
      runs.check_stop()
      todo = [r for r in due(p, ledger.runs_of(path, p.name), rows, lengths)
              if run_name(r) not in tried]
      if not todo:
        return n
      # every run due now, `jobs` at a time: a free core takes the next at once, so a
      # short run beside a long one (1,024 beside 4,096) leaves no core idle behind it;
      # what the finished runs make due (a next rate, the other rows' seeds) is read
      # when these are done, and the stop file stops it at the next child
      batch = todo
      tried |= {run_name(r) for r in batch}
      n += len(batch)
      launcher(p, batch, root=os.path.abspath(root), path=path, jobs=jobs,
               data_dir=data_dir, log=log)
  finally:
    if clock:
      clock.stop()


if __name__ == "__main__":     # one run's child process (`launch`)
  sweep.child(sys.argv[1], work)
