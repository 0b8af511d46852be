"""The costed plan of "Recall at equal memory" (studies.recall.memory; issue 102 item 4):
the runs each (group, row, width) of the preset's `order` still needs under protocol
version 2, given the runs the ledgers already hold, each priced in CPU-seconds, summed
in the plan's order against the budget (1,200 CPU-minutes); an item that does not fit
is dropped and said so, and a later, cheaper item that still fits keeps its place (in
order: issue 102 wants both hybrids on the plot, and the cheaper one fits where the
wider one of the row before it does not). Written to results/mqar_memory/plan.json before the
first run (`write`), and printed on the page.

What an item counts (`needs`), from the finished runs (mqar.collect, the reused
zoology_cpu ledger among them):
  lr        the rates of the 4-rate grid not yet run at seed 0, and a reserve of one
            rate past an end (rule 11's extension) where the sweep is not complete and
            some rate has left chance (a row within 2x chance at every rate run so far
            gets no reserve: it is expected not to train, and an extension there would
            exceed the plan)
  seeds     the reporting seeds (1, 2, 3) missing at the rate the runs so far choose
            (the rule over the rates that ran), none for a row expected not to train;
            up to 8 where the seeds there already split (rule 10)
A run's price (`run_cpu`): the median CPU-seconds of that variant's finished runs at
that width in the ledgers (measured, 2 cores, --jobs=2); else a probe of the row
(out/plan.json's `probes`, `python -m scripts.mqar --preset=memory_cpu
--measure_costs`); else costs.json's 40-step probe projection of the variant at that
width (studies.recall.costs.run_cpu) scaled by the measured/projected ratio of the
variant (or of the measured variants) at the nearest measured width. A hybrid with no
probe: the mean of its two layers' variants' prices.
"""
from __future__ import annotations

import os
import statistics

from studies.core import pages, protocol
from studies.recall import memory, mqar
from studies.recall.mqar import PRESETS, Run

STARTUP_CPU_S = 10.0       # a child process's start (importing JAX and the study), each
                           # (row, group): its measured start-up on the 2-core host is 5-10


def measured(results: list[dict], variant: str, width: int, p: dict) -> float | None:
  """The median CPU-seconds of `variant`'s finished runs at `width` on the panel whose
  model is the plain variant's (rows of other models are priced by `run_cpu`)."""
  T, P = memory.panel(p)
  xs = [r["cpu_seconds"] for r in results if r["variant"] == variant
        and (r["width"], r["length"], r["pairs"]) == (width, T, P) and r.get("cpu_seconds")]
  return statistics.median(xs) if xs else None


def projected(variant: str, width: int, costs: dict) -> float | None:
  """costs.json's probe projection of one full zoology_cpu run of `variant` at `width`
  on the long panel (studies.recall.costs.run_cpu), or None where not probed."""
  from studies.recall import costs as mqar_costs
  try:
    return mqar_costs.run_cpu(costs["probes"], PRESETS["zoology_cpu"], variant, width,
                              512, 64)
  except KeyError:
    return None


def run_cpu(p: dict, row: str, width: int, results: list[dict], costs: dict,
            probes: dict | None = None) -> tuple[float, str]:
  """(CPU-seconds of one run of `row` at `width`, where the figure comes from): see the
  module docstring for the order of the sources."""
  spec = memory.row_spec(p, row)
  if spec.get("rate_of"):
    base, how = run_cpu(p, spec["rate_of"], width, results, costs, probes)
    extra = (probes or {}).get(f"{row}@{width}:decode")
    if extra is not None:
      return base + extra, how + f" + the measured decode evaluation ({extra:.0f} CPU-s)"
    # a decode measured at another width, scaled by the two widths' run prices
    got = sorted(((int(k.split("@")[1].split(":")[0]), v) for k, v in (probes or {}).items()
                  if k.startswith(f"{row}@") and k.endswith(":decode")),
                 key=lambda x: abs(x[0] - width))
    if got:
      w0, v0 = got[0]
      extra = v0 * base / run_cpu(p, spec["rate_of"], w0, results, costs, probes)[0]
      return base + extra, how + (f" + the decode evaluation measured at width {w0}, "
                                  f"scaled ({extra:.0f} CPU-s)")
    return base, how + " (its decode evaluation unmeasured)"
  if (probes or {}).get(f"{row}@{width}") is not None:
    return float(probes[f"{row}@{width}"]), "probe of this row"
  if spec.get("heads"):     # the multi-head panel: its own runs, else one-head softmax's
    m = measured(results, row, width, p)
    if m is not None:
      return m, "measured (ledger median)"
    base, how = run_cpu(p, "softmax", width, results, costs, probes)
    return base, f"one-head softmax at this width, {how} (estimate: the same width's FLOPs)"
  plain = not spec.get("layer_attention") and not spec.get("window_of") and \
      not spec.get("options")
  name = spec["attention"]
  if plain:
    m = measured(results, name, width, p)
    if m is not None:
      return m, "measured (ledger median)"
  if spec.get("layer_attention"):
    from models.config import parse_pattern
    parts = [n for n, _ in parse_pattern(spec["layer_attention"])]
    xs = [run_cpu(p, n, width, results, costs, probes)[0] for n in parts]
    return sum(xs) / len(xs), "mean of its layers' variants (estimate)"
  stand = {"retention": "gla"}.get(name, name)     # retention: not probed; gla's state
  proj = projected(stand, width, costs)            # and gating are its closest
  if proj is None:
    raise KeyError(f"{row} at width {width}: no measured run, probe or projection")
  ws = sorted({r["width"] for r in results if r["variant"] == stand}, key=lambda w: abs(
      w - width))
  ratio = None
  for w in ws:
    m, pr = measured(results, stand, w, p), projected(stand, w, costs)
    if m and pr:
      ratio = m / pr
      break
  if ratio is None:      # the measured variants' ratio at the nearest measured width
    for w in sorted({r["width"] for r in results}, key=lambda w: abs(w - width)):
      rs = [measured(results, v, w, p) / projected(v, w, costs)
            for v in ("softmax", "linear") if measured(results, v, w, p)
            and projected(v, w, costs)]
      if rs:
        ratio = statistics.median(rs)
        break
  ratio = 1.0 if ratio is None else ratio
  how = (f"projection of {stand}" if stand != name else "projection") + \
      f" x {ratio:.2f} (measured/projected)"
  return proj * ratio, how


def needs(p: dict, row: str, width: int, results: list[dict]) -> dict:
  """{"lr": rates to run (with the reserve), "seeds": seed runs, "why": words} of one
  plan item (module docstring)."""
  spec = memory.row_spec(p, row)
  if spec.get("rate_of"):
    have = {r["seed"] for r in results if r["variant"] == row and r["width"] == width}
    n = len([s for s in p["seeds"] if s not in have])
    return {"lr": 0, "seeds": n, "why": f"{n} reporting seeds retrained at "
            f"{spec['rate_of']}'s rate, each decoded through the {spec['cache_dtype']} "
            "cache"}
  up = memory.rising(p, results, row, width)
  if up is False:
    return {"lr": 0, "seeds": 0, "why": "not still rising at the narrower widths: not run"}
  g = memory.rule(p)
  v = memory.selection(p, results, row, width)
  missing = [lr for lr in g.grid if lr not in v]
  ran = dict(v)
  chance_so_far = bool(ran) and g.chance is not None and protocol.did_not_train(
      ran, g.chance)
  complete = not missing and g.next(v) is None
  top = bool(ran) and max(ran, key=lambda lr: ran[lr]) == max(ran)
  # the reserve: an extension past the top is possible only where the best rate so far
  # is the top one run (or nothing ran)
  reserve = 0 if complete or chance_so_far or (ran and not top) else 1
  if complete and not g.trained(v):
    return {"lr": 0, "seeds": 0, "why": "did not train: its sweep is complete"}
  from studies.core import runs
  best = runs.choose_lr(ran, g.tie, True) if ran else None
  seeds, split = 0, False
  if not chance_so_far:
    vals = memory.seed_values(p, results, row, width, best) if best is not None else {}
    want = list(p["seeds"])
    split = len(vals) >= 3 and protocol.more_seeds([vals[s] for s in sorted(vals)],
                                                   memory.bound()) > 0
    if split:
      want = list(range(p["seeds"][0], protocol.MAX_SEEDS + 1))
    seeds = len([s for s in want if s not in vals])
  words = [f"{len(missing)} rate(s) of the grid ({', '.join(f'{x:g}' for x in missing)})"
           if missing else "the grid's 4 rates ran"]
  if reserve:
    words.append("1 rate past an end in reserve")
  if chance_so_far:
    words.append("within 2x chance at every rate so far: no seeds planned")
  elif seeds:
    words.append(f"{seeds} reporting seed(s) at "
                 + (f"{best:g}, the rate the runs so far choose" if best is not None
                    else "the chosen rate")
                 + (" (its seeds split: up to 8)" if split else ""))
  if up is None:
    words.append("only if still rising (memory.rising: its mean at the narrower width "
                 "under 99% and more than 10 points above the one below)")
  return {"lr": len(missing) + reserve, "seeds": seeds, "why": "; ".join(words),
          "conditional": up is None}


def plan(preset: str, results: list[dict], costs: dict, probes: dict | None = None,
         budget: float | None = None) -> dict:
  """The plan: one item per (group, row, width) of the preset's `order` with its runs
  (`needs`), price (`run_cpu`), CPU-minutes and the running total; `fits` per item,
  in order, where it keeps the total within the budget (an item past it is dropped, a
  later one that still fits keeps its place), `fits_groups` the groups whose every item
  fits."""
  p = PRESETS[preset]
  budget = float(budget if budget is not None else p["budget"])
  # what this preset's own ledger has spent already counts against the budget
  spent = mqar.mqar_ledger.totals(mqar.mqar_ledger.path_of(preset))["cpu_seconds"] / 60
  items, total = [], spent
  started = set()
  for g, row, w in p["order"]:
    n = needs(p, row, w, results)
    each, how = run_cpu(p, row, w, results, costs, probes)
    runs_n = n["lr"] + n["seeds"]
    start = STARTUP_CPU_S if (g, row) not in started and runs_n else 0.0
    started.add((g, row))
    cpu = runs_n * each + start
    over = total + cpu / 60 > budget
    total += 0 if over else cpu / 60
    items.append({"group": g, "row": row, "width": w, "runs": runs_n, "lr_runs": n["lr"],
                  "seed_runs": n["seeds"], "cpu_s_per_run": round(each, 1),
                  "priced_by": how, "cpu_minutes": round(cpu / 60, 2),
                  "state_bytes": memory.state_bytes(preset, row, w),
                  "why": n["why"], "conditional": bool(n.get("conditional")),
                  "fits": not over,
                  "total_cpu_minutes": round(total, 1) if not over else None})
  groups = sorted({i["group"] for i in items})
  fits = [g for g in groups if all(i["fits"] for i in items if i["group"] == g)]
  return {"preset": preset, "budget_cpu_minutes": budget, "items": items,
          "spent_cpu_minutes": round(spent, 1), "planned_cpu_minutes": round(total, 1),
          "dropped_cpu_minutes": round(sum(i["cpu_minutes"] for i in items
                                           if not i["fits"]), 1),
          "fits_groups": fits,
          "dropped": [f"{i['row']} w{i['width']}" for i in items if not i["fits"]]}


def write(preset: str = memory.PRESET, out: str = memory.OUT, probes: dict | None = None,
          command: str = "", note: str | None = None) -> dict:
  """out/plan.json: the plan (`plan`) from the finished runs (the ledgers) and
  results/variants_mqar/costs.json, with the date, the command and the probes (kept
  from an earlier plan.json where none are given). Returns it."""
  path = os.path.join(out, "plan.json")
  old = pages.read_json(path) or {}
  probes = probes if probes is not None else old.get("probes", {})
  note = note if note is not None else old.get("probes_note", "")
  costs = pages.read_json(os.path.join(mqar.OUT, "costs.json"))
  results = mqar.collect(preset, mqar.root_of(preset))
  data = dict(plan(preset, results, costs, probes), probes=probes, probes_note=note,
              date=pages.today(),
              command=command or f"python -m scripts.mqar --preset={preset} --replan_costs",
              costs=os.path.join(mqar.OUT, "costs.json"))
  pages.write_json(path, data)
  return data


def probe(preset: str = memory.PRESET, cells=(), steps: int = 40, root: str | None = None,
          log=print) -> dict:
  """Times `steps`-step runs of each (row, width) of `cells` in this process
  (studies.recall.costs.probe_one: fixed cost + per-step cost, scaled to the panel's
  steps), the decode evaluation of a `cache_dtype` row included (its CPU apart as
  "<row>@<width>:decode"); returns {"<row>@<width>": CPU-seconds of a full run}."""
  from studies.core import runs
  from studies.recall import costs as mqar_costs
  p = PRESETS[preset]
  root = root or mqar.root_of(preset) + "_costs"
  T, P = memory.panel(p)
  steps_full = mqar.panel_steps(p, T, P)
  out = {}
  for row, w in cells:
    t0 = runs.cpu_seconds()
    rec = mqar_costs.probe_one(preset, Run(row, w, T, P, 1e-3, 0), steps, root)
    full = rec["fixed_cpu_seconds"] + steps_full * rec["cpu_per_step"]
    spec = memory.row_spec(p, row)
    if spec.get("cache_dtype"):
      wd = os.path.join(root, Run(row, w, T, P, 1e-3, 0).name)
      t1 = runs.cpu_seconds()
      memory.decode_workdir(wd, spec["cache_dtype"])
      out[f"{row}@{w}:decode"] = round(runs.cpu_seconds() - t1, 1)
    else:
      out[f"{row}@{w}"] = round(full, 1)
    log(f"{row} w{w}: {full:.0f} CPU-s a run (probe {runs.cpu_seconds() - t0:.0f} CPU-s)")
  return out
