"""What an MQAR preset's plan costs on this CPU, measured before its first run: short
runs of a few variants at each candidate (width, tokens, pairs) under one core,
extrapolated to CPU-seconds per full run, and the projected total of the preset's plan
against its budget (results/variants_mqar/costs.json; the zoology_cpu preset's grid is
chosen from it: studies/recall/presets.py says how).

  python -m scripts.mqar --preset=zoology_cpu --measure_costs     # on one core

One probe run is what `mqar.run_one` does for a real run (training, the in-training
evaluations at half-way and the end, the test evaluation under the protocol) with
`steps` training steps; its CPU seconds (user + system, compilation included) less
`steps` x its CPU-seconds per step is the run's fixed cost, and a full run of S steps
costs fixed + S x per step. The per-step CPU is the training steps/s (studies.core.runs.
rates: compilation and evaluations left out) times the run's CPU/wall ratio.
"""
from __future__ import annotations

import os
import time

from studies.core import pages, runs
from studies.recall import mqar

OUT = os.path.join(mqar.OUT, "costs.json")
BUDGET_CPU_MINUTES = 720     # issue 78: <= 6 hours of wall time on 2 cores, --jobs=2
PROBE_STEPS = 40
PROBE_VARIANTS = ("softmax", "linear")


def candidates(p: dict) -> tuple[list[tuple], list[int]]:
  """The panels (tokens, pairs, steps[, batch]) and widths a probe of settings `p`
  measures: `p["probe"]`'s where the preset names candidates wider than its grid,
  else the grid's own."""
  c = p.get("probe") or {}
  return [tuple(x) for x in c.get("panels", p["panels"])], list(c.get("widths", p["widths"]))


def probe_one(preset: str, run: mqar.Run, steps: int, root: str) -> dict:
  """One probe run (`steps` steps of `run` in this process, through mqar.run_one) ->
  {variant, width, length, pairs, batch, probe_steps, probe_cpu_seconds,
  steps_per_s, cpu_per_step, fixed_cpu_seconds}: seconds are floats, CPU-seconds of
  this process."""
  over = {"num_train_steps": steps, "checkpoint_every": steps,
          "eval_every": max(1, steps // 2), "log_every": max(1, steps // 10)}
  res = mqar.run_one(preset, run, "probe", root, over)    # kept where it finished
  # CPU per wall second of the training (a core shared with other work gives the
  # process less than 1): turns the steps/s of the wall clock into CPU per step
  ratio = min(1.0, res["cpu_seconds"] / res["train_seconds"]) if res["train_seconds"] else 1.0
  per_step = ratio / res["steps_per_s"]
  return {"variant": run.variant, "width": run.width, "length": run.length,
          "pairs": run.pairs, "batch": int(mqar.make_config(preset, run).batch_size),
          "probe_steps": steps, "probe_cpu_seconds": res["cpu_seconds"],
          "steps_per_s": res["steps_per_s"], "cpu_per_step": per_step,
          "fixed_cpu_seconds": max(0.0, res["cpu_seconds"] - steps * per_step)}


def measure(preset: str, root: str, steps: int = PROBE_STEPS,
            variants=PROBE_VARIANTS, log=print) -> list[dict]:
  """`probe_one` of each of `variants` at every candidate cell (`candidates`), and of
  every other variant the preset trains at one reference cell (`reference_cell`: the
  ratio of its cost to the probed variants' there stands for every cell); a cell
  whose probe already ran under `root` is not run again. Returns the probes' records
  (list of `probe_one` dicts)."""
  p = mqar.PRESETS[preset]
  panels, widths = candidates(p)
  todo = [mqar.Run(n, w, x[0], x[1], 1e-3) for x in panels for w in widths
          for n in variants]
  ref = reference_cell(p)
  todo += [mqar.Run(n, *ref, 1e-3) for n in trained(preset) if n not in variants]
  out = []
  for r in todo:
    rec = probe_one(preset, r, steps, root)
    log(f"{r.variant} w{r.width} t{r.length} p{r.pairs}: {rec['cpu_per_step'] * 1e3:.1f} "
        f"CPU-ms/step, fixed {rec['fixed_cpu_seconds']:.1f} CPU-s")
    out.append(rec)
  return out


def trained(preset: str) -> list[str]:
  """The variants the preset trains (mqar.variants' "train")."""
  return [n for n, t in mqar.variants(preset).items() if t == "train"]


def reference_cell(p: dict) -> tuple:
  """(width, tokens, pairs) where every trained variant is probed: the preset's
  longest panel at its middle width."""
  t, P = max((tuple(x[:2]) for x in p["panels"]))
  return (sorted(p["widths"])[len(p["widths"]) // 2], t, P)


def run_cpu(probes: list[dict], p: dict, variant: str, width: int, length: int,
            pairs: int) -> float:
  """Projected CPU-seconds of one full run of `variant` at (width, length, pairs) under
  settings `p` (its panel's steps) from `probes` (`measure`'s records): the variant's
  own probe of that cell where there is one; else the costliest probed variant's at
  the cell times the variant's ratio to it at `reference_cell`. KeyError where the
  cell was not probed."""
  steps = mqar.panel_steps(p, length, pairs)
  # a panel trained at another batch than its probe: the per-step cost scaled by the
  # batch ratio (the step's work is the batch's; fixed costs stay)
  batch = mqar.panel_batch(p, length, pairs)
  full = lambda r: r["fixed_cpu_seconds"] + steps * r["cpu_per_step"] * (
      batch / r["batch"] if batch and r.get("batch") else 1.0)
  at = {r["variant"]: r for r in probes
        if (r["width"], r["length"], r["pairs"]) == (width, length, pairs)}
  if variant in at:
    return full(at[variant])
  base = [n for n in PROBE_VARIANTS if n in at]
  if not base:
    raise KeyError(f"no probe at width {width}, {length} tokens, {pairs} pairs")
  big = max(base, key=lambda n: full(at[n]))
  ref = {r["variant"]: r for r in probes
         if (r["width"], r["length"], r["pairs"]) == reference_cell(p)}
  if variant not in ref or big not in ref:
    raise KeyError(f"{variant}: no probe at the reference cell {reference_cell(p)}")
  return full(at[big]) * full(ref[variant]) / full(ref[big])


def plan_runs(p: dict, names) -> list[tuple[mqar.Run, str]]:
  """[(run, stage)] of the whole plan of settings `p` for `names` at its largest: every
  rate of the grid at every lr cell plus `lr_extend` past one end (the most the
  ladder can add), the grid and the seeds (at a rate standing for the chosen one)."""
  out = []
  k = int(p.get("lr_extend", 0))
  ladder = mqar.lr_rule(p).ladder
  rates = sorted(p["lrs"]) + ladder[-k:] if k else sorted(p["lrs"])
  for n in names:
    out += [(mqar.Run(n, *c, lr), "lr") for c in mqar.lr_cells(p) for lr in rates]
    lr = {w: float(p["lrs"][0]) for w in p["widths"]}
    out += [(r, "grid") for r in mqar.grid_runs(p, {n: lr})]
    out += [(r, "seeds") for r in mqar.seed_runs(p, {n: lr})]
  return out


def project(p: dict, probes: list[dict], names, startup_cpu_seconds: float) -> dict:
  """The projected CPU cost of the plan of settings `p` for `names` (`plan_runs`): its
  runs, CPU-minutes by variant and by stage, the child processes' start-up (two per
  variant: mqar.PARTS), the total and whether it fits BUDGET_CPU_MINUTES."""
  by_v, by_s, n = {}, {}, 0
  for r, stage in plan_runs(p, names):
    s = run_cpu(probes, p, r.variant, r.width, r.length, r.pairs)
    by_v[r.variant] = by_v.get(r.variant, 0.0) + s / 60
    by_s[stage] = by_s.get(stage, 0.0) + s / 60
    n += 1
  start = startup_cpu_seconds * len(mqar.PARTS) * len(list(names)) / 60
  total = sum(by_v.values()) + start
  return {"runs": n, "cpu_minutes": round(total, 1),
          "by_variant": {k: round(v, 1) for k, v in by_v.items()},
          "by_stage": {k: round(v, 1) for k, v in by_s.items()},
          "startup_cpu_minutes": round(start, 1),
          "budget_cpu_minutes": BUDGET_CPU_MINUTES, "fits": total <= BUDGET_CPU_MINUTES,
          "wall_hours_at_jobs_2": round(total / 2 / 60, 2)}


def write(preset: str, root: str, command: str, out: str = OUT, log=print, **kw) -> dict:
  """Runs the probe (`measure`) in this process, after reading the machine's matmul
  gauge, and writes `out` (costs.json): the machine, the gauge, the date, the command,
  the probes, the start-up CPU of a child (this process's CPU before its first probe:
  importing JAX and the study), and the projection of the preset's plan (`project`).
  Returns what it wrote."""
  from studies.core import sweep
  startup = runs.cpu_seconds()
  gauge = sweep.gauge()
  t0 = time.perf_counter()
  probes = measure(preset, root, log=log, **kw)
  p = mqar.PRESETS[preset]
  data = {"preset": preset, "machine": pages.run_record(command, preset),
          "matmul_peak": gauge, "date": pages.today(), "command": command,
          "probe_wall_seconds": round(time.perf_counter() - t0, 1),
          "probe_cpu_seconds": round(runs.cpu_seconds() - startup, 1),
          "startup_cpu_seconds": round(startup, 2), "probes": probes,
          "plan": project(p, probes, trained(preset), startup)}
  pages.write_json(out, data)
  return data


def replan(preset: str, out: str = OUT) -> dict:
  """Re-projects out/costs.json's plan for the preset's grid as it stands now, from the
  probes already there (no training): how the grid is fixed from a probe of a wider
  draft, before its first run. Returns the new plan."""
  data = pages.read_json(out)
  plan = project(mqar.PRESETS[preset], data["probes"], trained(preset),
                 data["startup_cpu_seconds"])
  earlier = data.get("earlier_plans", []) + [{"planned": data.get("planned"),
                                              "plan": data["plan"]}]
  if data.get("plan") == plan:
    earlier = data.get("earlier_plans", [])
  pages.write_json(out, dict(data, plan=plan, planned=pages.today(),
                             earlier_plans=earlier))
  return plan
