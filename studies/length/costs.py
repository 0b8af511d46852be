"""What a training step of the length study costs, measured (issue 101 items 2 and 5):
CPU seconds per train step of each (row, length) cell at the study's shapes, interleaved
(studies.bench.train.Bare: trainer.TrainStep over batches already made, compiled and
warmed before any clock), with the matmul gauge (studies.core.timing.matmul_peak) before
and after.

  step costs   `measure(rows, lengths)`: every cell built and compiled first (its
               compile's CPU seconds recorded), then `rounds` rounds, each timing
               `steps` steps of every cell in turn, so that a slow phase of the shared
               machine falls on every cell alike. Per cell: CPU seconds a step (this
               process's, all its threads: a loaded host's waits do not count) per
               round, their median and spread (min, max), and wall seconds a step.
               The process pins itself to one core first (the runner's children run
               one a core), before JAX starts its threads.
  as the plan  rows flash, gated_deltanet and qwen3_next (one hybrid) at each length:
               results/lm_length/step_costs.json (`python -m scripts.lm_length
               --measure_steps`), which studies.length.plan reads
  cost run     every row of the preset at each length, >= 3 rounds: results/lm_length/
               cost_run.json (`--cost_run`), the page's interleaved cost table; each round
               also times the cell's decode (µs a token, batch 1, a state sized for the
               length: studies.length.evaluate.decode_us) beside its train step
"""
from __future__ import annotations

import os
import statistics
import time

from studies.core import pages
from studies.length.presets import OUT  # noqa: F401  (the cpu preset's page folder)

STEP_COSTS = "step_costs.json"
COST_RUN = "cost_run.json"
PLAN_ROWS = ("flash", "gated_deltanet", "qwen3_next")    # the rows the plan is fixed from


def pin_one_core(core: int | None = None) -> int | None:
  """Pins this process to one core (`core`, else its first allowed one) before JAX
  starts its threads, as the runner's children are; returns the core, None where the
  OS does not allow it."""
  if not hasattr(os, "sched_setaffinity"):
    return None
  core = min(os.sched_getaffinity(0)) if core is None else int(core)
  os.sched_setaffinity(0, {core})
  return core


def measure(preset, rows, lengths, *, rounds: int = 3, steps: int = 2, data_dir=None,
            log=print, on_round=None, decode: bool = False) -> dict:
  """{"cells": [...], "gauge": {"before", "after"}, ...}: each (row, length) cell's CPU
  seconds a train step over `rounds` interleaved rounds of `steps` steps; with
  `decode`, each round also times the cell's decode (µs a token)."""
  import jax
  from studies.bench.train import Bare
  from studies.core import timing
  from studies.length import presets
  gauge0 = timing.matmul_peak(1024)
  built = {}
  for n in rows:
    for L in lengths:
      c = presets.make_config(preset, n, L, preset.grid[1], 0, data_dir)
      cpu0, t0 = time.process_time(), time.perf_counter()
      built[(n, L)] = Bare(c, steps)
      log(f"{n} at {L}: built and compiled in {time.process_time() - cpu0:.1f} CPU-s")
      built[(n, L)].compile_cpu_s = time.process_time() - cpu0
      built[(n, L)].compile_wall_s = time.perf_counter() - t0
      if decode:         # an untrained model of the cell: a decode step's time is its shapes'
        import trainer
        built[(n, L)].model = trainer.make_model(c, trainer.validate(c))
  cpu = {k: [] for k in built}
  wall = {k: [] for k in built}
  dec = {k: [] for k in built}
  for r in range(rounds):
    for k, b in built.items():
      c0, t0 = time.process_time(), time.perf_counter()
      b.rates(1)
      cpu[k].append((time.process_time() - c0) / steps)
      wall[k].append((time.perf_counter() - t0) / steps)
      if decode:
        from studies.length.evaluate import decode_us
        dec[k].append(decode_us(b.model, k[1], runs=1))
    log(f"round {r + 1}/{rounds}: " + ", ".join(f"{n}@{L} {cpu[(n, L)][-1]:.2f}"
                                                 for n, L in built))
    if on_round:      # what the rounds so far measured, kept if a later one is cut off
      on_round(_record(preset, built, cpu, wall, r + 1, steps, gauge0, None, dec))
  return _record(preset, built, cpu, wall, rounds, steps, gauge0, timing.matmul_peak(1024),
                 dec)


def _record(preset, built, cpu, wall, rounds, steps, gauge0, gauge1, dec=None) -> dict:
  import jax
  cells = []
  for (n, L), b in built.items():
    cs = cpu[(n, L)]
    cell = {"row": n, "length": L, "batch": preset.batch(L),
            "tokens_per_step": preset.tokens_per_step,
            "cpu_s_per_step": statistics.median(cs), "cpu_s_rounds": cs,
            "spread": [min(cs), max(cs)],
            "wall_s_per_step": statistics.median(wall[(n, L)]),
            "compile_cpu_s": b.compile_cpu_s, "compile_wall_s": b.compile_wall_s}
    ds = (dec or {}).get((n, L))
    if ds:
      cell.update(decode_us_per_token=statistics.median(ds), decode_us_rounds=ds,
                  decode_spread=[min(ds), max(ds)])
    cells.append(cell)
  return {"cells": cells, "rounds": rounds, "steps_per_round": steps,
          "statistic": "median over rounds of this process's CPU seconds per step",
          "gauge": {"before": gauge0, "after": gauge1 or gauge0},
          "complete": gauge1 is not None,
          "threads": "one core (sched_setaffinity), as the runner's children",
          "jax": jax.__version__, "device": jax.devices()[0].device_kind,
          "date": pages.today()}


def merge(parts: list[dict]) -> dict:
  """One step-cost record from parts measured in processes of their own (each its
  lengths, rounds interleaved within it, its own gauge): the cells of all, the first
  part's fields, and each part's lengths, gauge and run under "parts"."""
  out = dict(parts[0], cells=[c for p in parts for c in p["cells"]])
  out["parts"] = [{"lengths": sorted({c["length"] for c in p["cells"]}),
                   "gauge": p["gauge"], "run": p.get("run"), "threads": p["threads"]}
                  for p in parts]
  out["complete"] = all(p.get("complete", True) for p in parts)
  return out


def write(res: dict, name: str, command: str, out: str = OUT) -> str:
  """Writes out/<name> with the run record of `command`; returns its path."""
  res = dict(res, run=pages.run_record(command))
  path = os.path.join(out, name)
  os.makedirs(out, exist_ok=True)
  pages.write_json(path, res)
  return path


def cell(costs: dict | None, row: str, length: int) -> dict | None:
  """The measured cell (row, length) of a step_costs / cost_run record, or None."""
  for c in (costs or {}).get("cells", []):
    if c["row"] == row and int(c["length"]) == int(length):
      return c
  return None
