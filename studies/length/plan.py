"""The length study's plan, fixed from measured step costs before its first reported
run (issue 101 item 2): how many runs each row trains, what each costs, and whether the
six named rows fit the budget at every length (if not, 256 is dropped before any row).

  runs of a row   the rate sweep at select_at (the grid's rates + EXTENSION_ALLOWANCE
                  for rule 11's extensions), the reporting seeds at every length, and,
                  for the check rows, 3 more runs at the check length (the carried rate
                  and its two neighbours, seed 0)
  CPU of a run    steps x the measured CPU seconds a step (results/lm_length/
                  step_costs.json: the median over rounds, one core) + the overhead:
                  the start-up and compilation (the measured build, counted
                  OVERHEAD_COMPILES times: the train step, the evaluation, the memory
                  plan) + the evaluation's forward passes (2 splits x eval batches, each
                  EVAL_STEP_FRACTION of a train step)
  unmeasured rows the costliest measured row at that length (conservative)
"""
from __future__ import annotations

import math

from studies.length import costs as costs_lib

BUDGET_CPU_MIN = 2000.0        # issue 101
MIN_TOKENS = 3_000_000         # training bytes a run, at least
EXTENSION_ALLOWANCE = 1        # rule 11's extensions budgeted per row (0-4 may run)
OVERHEAD_COMPILES = 3          # builds of a run: train step, evaluation, memory plan
EVAL_STEP_FRACTION = 1 / 3     # a forward pass against a train step (fwd + bwd ~ 3x)
CHECK_RUNS = 3                 # the carried rate and its two neighbours


def steps_for(tokens_per_step: int, multiple: int = 16) -> int:
  """The fewest steps of `tokens_per_step` reaching MIN_TOKENS, rounded up to
  `multiple` (so that the log and checkpoint intervals divide it)."""
  n = math.ceil(MIN_TOKENS / tokens_per_step)
  return int(math.ceil(n / multiple) * multiple)


def step_cpu(step_costs: dict, row: str, length: int) -> tuple[float, float, bool]:
  """(CPU s a step, CPU s of one build, measured) of (row, length): its measured cell,
  else the costliest measured row at that length (measured False)."""
  c = costs_lib.cell(step_costs, row, length)
  if c:
    return c["cpu_s_per_step"], c["compile_cpu_s"], True
  at = [x for x in step_costs["cells"] if int(x["length"]) == int(length)]
  if not at:
    raise ValueError(f"no step cost measured at length {length}")
  worst = max(at, key=lambda x: x["cpu_s_per_step"])
  return worst["cpu_s_per_step"], worst["compile_cpu_s"], False


def run_cpu_s(p, step_costs: dict, row: str, length: int) -> float:
  """CPU seconds of one run of `row` at `length` (the module docstring)."""
  step, build, _ = step_cpu(step_costs, row, length)
  evals = 2 * max(1, p.eval_tokens // p.tokens_per_step)
  return p.steps * step + OVERHEAD_COMPILES * build + evals * EVAL_STEP_FRACTION * step


def row_runs(p, row: str, lengths) -> dict:
  """{length: runs} of one row: the sweep at select_at, the seeds, the check."""
  from studies.length import presets
  out = {L: len(presets.SEEDS) for L in lengths}
  out[p.select_at] = out.get(p.select_at, 0) + len(p.grid) + EXTENSION_ALLOWANCE
  L, rows = p.check
  if row in rows and L in lengths:
    out[L] += CHECK_RUNS
  return out


def plan(p, step_costs: dict, lengths=None, rows=None) -> dict:
  """The plan's arithmetic: per row, per length, runs x CPU-minutes a run; the named
  rows' total; the rows past the named ones that fit what the budget leaves."""
  from studies.length import presets
  lengths = list(lengths or p.lengths)
  rows = list(rows or p.rows)
  per = {}
  for r in rows:
    n = row_runs(p, r, lengths)
    per[r] = {str(L): {"runs": n[L], "cpu_min_per_run": run_cpu_s(p, step_costs, r, L) / 60,
                       "measured": step_cpu(step_costs, r, L)[2]} for L in lengths}
    for L in lengths:
      c = per[r][str(L)]
      c["cpu_min"] = c["runs"] * c["cpu_min_per_run"]
  total = lambda rs: sum(c["cpu_min"] for r in rs for c in per[r].values())
  named = rows[:presets.NAMED]
  left = BUDGET_CPU_MIN - total(named)
  extra = []
  for r in rows[presets.NAMED:]:
    if total([r]) <= left:
      extra.append(r)
      left -= total([r])
    else:
      break
  return {"lengths": lengths, "steps": p.steps, "tokens_per_step": p.tokens_per_step,
          "tokens_per_run": p.tokens_per_run, "rows": per,
          "named_cpu_min": total(named), "fits": total(named) <= BUDGET_CPU_MIN,
          "extra_rows": extra, "planned_cpu_min": total(named + extra),
          "budget_cpu_min": BUDGET_CPU_MIN,
          "assumptions": {"extension_allowance": EXTENSION_ALLOWANCE,
                          "overhead_compiles": OVERHEAD_COMPILES,
                          "eval_step_fraction": EVAL_STEP_FRACTION,
                          "check_runs": CHECK_RUNS}}


def candidates(p) -> list[int]:
  """Every length the preset was planned at: its lengths and those it dropped."""
  return sorted(set(p.lengths) | {int(L) for L, _ in p.dropped})


def fix(p, step_costs: dict) -> dict:
  """The plan at every candidate length, and, where the named rows do not fit the
  budget, without the shortest (issue 101: 256 goes before any row): {"all": the plan
  at every candidate length, "chosen": the plan kept, "dropped": [lengths]}."""
  Ls = candidates(p)
  full = plan(p, step_costs, Ls)
  if full["fits"]:
    return {"all": full, "chosen": full, "dropped": []}
  short = plan(p, step_costs, Ls[1:])
  return {"all": full, "chosen": short, "dropped": [Ls[0]]}
