"""Longer training, exploratory (`python -m scripts.lm_length --longer`): the rows whose
gap the floors put in doubt, trained on FACTOR times the cpu preset's bytes at its
selection length, at the rates the cpu preset chose (carried: no sweep), seed 1 first.

Why: at the cpu preset's 3M bytes a run, flash scores between the 2-gram and 3-gram
floors of its own bytes (studies.length.floors): the gap there may be one of learning
speed. The same rows with FACTOR x the bytes say whether the reference leaves the
floors and whether the gap holds, shrinks or turns. Exploratory: one seed (more as
time allows), rates carried rather than chosen (a longer run may prefer a lower one),
outside the family; the cpu page reports it beside its own figures, never as a verdict.

The preset `cpu_x4` (studies.length.presets) is the cpu preset with FACTOR x its steps
at its selection length alone; its runs go to results/lm_length/cpu_x4/cpu_x4_runs.json
through the study's runner (one child process a run, resumable from its checkpoints
and the ledger), and its floors to results/lm_length/cpu_x4/floors.json.
"""
from __future__ import annotations

import os

from studies.core import pages
from studies.length import floors, ledger, presets, runner

NAME = "cpu_x4"
ROWS = ("flash", "gated_deltanet", "flash_gdn_layer")   # the reference, the row the floors
                                                        # question, its control
SEEDS = (1, 2, 3)                                       # seed-major: every row's 1 first


def carried(cpu_got: dict) -> dict:
  """{row: the cpu preset's chosen rate} for ROWS whose sweep is complete there."""
  cpu = presets.preset("cpu")
  out = {}
  for r in ROWS:
    lr = runner.rate_state(cpu, cpu_got, r)["chosen"]
    if lr is not None:
      out[r] = lr
  return out


def due(cpu_got: dict, got: dict, seeds=SEEDS[:1]) -> list[dict]:
  """The longer runs not in `got` (cpu_x4's ledger), seed-major: every row's seed 1,
  then every row's seed 2, ..., for the `seeds` asked; a row whose cpu rate is not
  chosen yet waits."""
  p, rates = presets.preset(NAME), carried(cpu_got)
  return [dict(row=r, length=p.select_at, lr=rates[r], seed=s) for s in seeds for r in ROWS
          if r in rates and (r, p.select_at, rates[r], s) not in got]


def paths(out: str = presets.OUT) -> tuple:
  """(cpu ledger, cpu_x4 ledger, cpu_x4's folder) under the cpu page's folder `out`."""
  folder = os.path.join(out, presets.folder_of(NAME))
  return (ledger.path_of("cpu", out), ledger.path_of(NAME, folder), folder)


def run(root: str, out: str = presets.OUT, seeds=SEEDS[:1], data_dir=None, log=print,
        launcher=runner.launch) -> int:
  """Trains the due longer runs one at a time (the stop file stops it between runs);
  returns how many ran."""
  from studies.core import runs
  cpu_path, path, folder = paths(out)
  os.makedirs(folder, exist_ok=True)
  n = 0
  while True:
    runs.check_stop()
    todo = due(ledger.runs_of(cpu_path, "cpu"), ledger.runs_of(path, NAME), seeds)
    if not todo:
      return n
    launcher(presets.preset(NAME), todo[:1], root=os.path.abspath(root), path=path, jobs=1,
             data_dir=data_dir, log=log)
    n += 1
    if not ledger.runs_of(path, NAME).get(tuple(todo[0][k] for k in
                                                ("row", "length", "lr", "seed"))):
      return n                      # it failed: its log says why; not tried again here


def summary(out: str = presets.OUT) -> dict:
  """{"rows": {row: {"lr", "seeds": {seed: test bits/byte}, "test", "recall_bits",
  "rest_bits", "late_drop"}}, "floors": cpu_x4's floors (or None), "steps",
  "tokens_per_run", "select_at"} from the committed cpu_x4 ledger."""
  from studies.length import results
  cpu_path, path, folder = paths(out)
  p, got = presets.preset(NAME), ledger.runs_of(path, NAME)
  rates = carried(ledger.runs_of(cpu_path, "cpu"))
  rows = {}
  for r, lr in rates.items():
    es = {s: got[(r, p.select_at, lr, s)] for s in SEEDS if (r, p.select_at, lr, s) in got}
    if es:
      mean = lambda k: sum(e["test"][k] for e in es.values()) / len(es)
      rows[r] = {"lr": lr, "seeds": {str(s): e["test"]["bits_per_byte"] for s, e in es.items()},
                 "test": mean("bits_per_byte"), "recall_bits": mean("recall_bits"),
                 "rest_bits": mean("rest_bits"),
                 "late_drop": results._mean([results.late_drop(e.get("curve"), p.steps)
                                             for e in es.values()])}
  f = pages.read_json(floors.path_of(folder))
  return {"rows": rows, "floors": f if f and f.get("preset") == NAME else None,
          "steps": p.steps, "tokens_per_run": p.tokens_per_run, "select_at": p.select_at,
          "runs": len(got), "cpu_seconds": ledger.totals(path).get("cpu_seconds", 0)}


def lines(d: dict) -> list[str]:
  """The cpu page's section: each longer row beside its figure at the cpu preset's
  bytes (the same seeds), its place among the floors of its own bytes, and the gap to
  flash at both budgets; written by rule, exploratory."""
  x = d.get("longer") or {}
  L, base = str(d["select_at"]), d["tokens_per_run"]
  out = [f"## Longer training (exploratory): {x.get('tokens_per_run', 0):,} bytes a run "
         f"at {int(L):,}", ""]
  cmd = "python -m scripts.lm_length --longer"
  if not x.get("rows"):
    return out + [f"Not run yet: `{cmd}` ({', '.join(f'`{r}`' for r in ROWS)}, "
                  f"{x.get('steps', 0):,} steps, the rates chosen here carried)."]
  out += [f"`{cmd}`: {', '.join(f'`{r}`' for r in ROWS)} with {x['steps']:,} steps "
          f"({x['tokens_per_run'] // base}x this page's bytes) at the rates chosen here "
          "(carried, not re-chosen: a longer run may prefer a lower rate), the same seeds "
          "as this page's columns; one seed is a figure, not a verdict. Spent: "
          f"{x.get('cpu_seconds', 0) / 60:,.0f} CPU-minutes over {x.get('runs', 0)} runs "
          f"({presets.folder_of(NAME)}/{NAME}_runs.json), counted in issue 101's budget "
          "beside this page's own.", ""]
  rows, gaps = [], {}
  ref = x["rows"].get(runner.REFERENCE)
  for r, v in x["rows"].items():
    seeds = sorted(v["seeds"], key=int)
    c = d["cells"].get(r, {}).get(L, {}).get("seeds", {})
    short = [c[s]["test"] for s in seeds if s in c]
    s_mean = sum(short) / len(short) if len(short) == len(seeds) else None
    at = floors.place(x.get("floors"), L, v["test"])
    rows.append([f"`{r}`", f"{v['lr']:g}", ", ".join(seeds),
                 "–" if s_mean is None else f"{s_mean:.3f}", f"{v['test']:.3f}",
                 "–" if v["late_drop"] is None else f"{v['late_drop']:+.3f}",
                 floors.beats(at[0]) if at else "floors not measured"])
    if ref and r != runner.REFERENCE and s_mean is not None:
      f_short = [d["cells"][runner.REFERENCE][L]["seeds"].get(s, {}).get("test")
                 for s in seeds]
      if None not in f_short and set(seeds) <= set(ref["seeds"]):
        gaps[r] = (s_mean - sum(f_short) / len(f_short),
                   v["test"] - sum(ref["seeds"][s] for s in seeds) / len(seeds), seeds)
  out += pages.table(["row", "rate (carried)", "seeds", f"{base:,} bytes (same seeds)",
                      f"{x['tokens_per_run']:,} bytes", "fell over the last quarter",
                      "among the floors of its bytes"], rows)
  for r, (a, b, seeds) in gaps.items():
    turn = ("turns" if a * b < 0 else "shrinks" if abs(b) < abs(a) else "grows")
    out += ["", f"`{r}`'s gap to flash (seed{'s' * (len(seeds) > 1)} {', '.join(seeds)}) "
            f"{turn} with {x['tokens_per_run'] // base}x the bytes: {a:+.3f} → {b:+.3f} "
            "bits/byte (exploratory)."]
  for c, of in presets.controls().items():     # the layer's share of the row's gap
    if c in gaps and of in gaps and gaps[of][0] and gaps[of][1]:
      a, b = gaps[c][0] / gaps[of][0], gaps[c][1] / gaps[of][1]
      out += ["", f"`{c}` (flash inside `{of}`'s layer) carries {b:.0%} of `{of}`'s gap to "
              f"flash with {x['tokens_per_run'] // base}x the bytes, against {a:.0%} at "
              f"{base:,} (the same seeds; exploratory)."]
  return out
