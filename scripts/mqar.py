"""Multi-query associative recall (Zoology's MQAR) for every attention variant: accuracy
against width per sequence length (the study: studies/recall/mqar.py; the page:
studies/recall/page.py).

  nice -n 10 python -m scripts.mqar                     # the cpu preset's whole sweep
  python -m scripts.mqar --stages=lr                    # only the learning-rate stage
  python -m scripts.mqar --collect                      # the page from the finished runs
  python -m scripts.mqar --preset=zoology_cpu --ledger_from_workdirs
                                  # finished workdirs -> the committed ledger
  python -m scripts.mqar --page_only                    # the page from results.json
  python -m scripts.mqar --preset=zoology_cpu --page_only
  taskset -c 0 python -m scripts.mqar --preset=zoology_cpu --measure_costs
                                  # short timed runs -> results/variants_mqar/costs.json
  nice -n 10 python -m scripts.mqar --preset=memory_cpu --jobs=2
                                  # "Recall at equal memory" (results/mqar_memory/):
                                  # the plan's groups that fit its budget, in order
  python -m scripts.mqar --preset=memory_cpu --replan_costs   # re-price its plan

Trains (or keeps, where finished: it resumes) the learning-rate stage, the grid and
the extra seeds, one child process per variant, and writes the preset's page
(README.md, results.json and mqar.png): results/variants_mqar/ for zoology_cpu (the
recall study's front page), results/archive/variants_mqar_short/ for the small cpu
grid (archived), results/variants_mqar_gpu/ for zoology_gpu (studies.recall.mqar.out_of).

Resuming: within a session, from the workdirs (a finished run's result.json, an
interrupted run's checkpoint). Across sessions (a fresh clone has no workdirs/), the
cpu and zoology presets keep a committed ledger, results/variants_mqar/<preset>_runs.json
(studies/recall/ledger.py): every run is added the moment it finishes, a run there is
never trained again, and --collect writes the page from it alone (CPU and wall totals
included). Commit it before a session ends:

  nice -n 10 python -m scripts.mqar --preset=zoology_cpu --jobs=2       # run / resume
  git add results/variants_mqar/zoology_cpu_runs.json && git commit ...  # keep it
  python -m scripts.mqar --preset=zoology_cpu --collect --out=<dir>     # the page

Runs finished by code from before the ledger: `--ledger_from_workdirs` adds every
finished result.json under the preset's workdir root (a run in progress has none),
with the root's CPU and wall ledgers.
"""
from __future__ import annotations

import argparse
import os

from studies.core import pages
from studies.recall import mqar, page as mqar_page, zoology_page as mqar_zoology_page


def page_module(data: dict):
  """The module that writes the page of `data` (results.json's): a preset of rows placed
  by their state (`points`: memory_cpu) has studies.recall.memory_page's, one with a
  rate per width (`lr_cells`, the zoology presets) studies.recall.zoology_page's."""
  if "points" in data:
    from studies.recall import memory_page
    return memory_page
  return mqar_zoology_page if data["settings"].get("lr_cells") else mqar_page


def memory_main(a, argv) -> None:
  """A preset of rows (memory_cpu, studies.recall.memory): its plan (--replan_costs,
  --measure_costs: probes of the rows with no measured price), its runs group by group
  in the plan's order (--groups, --rows, --jobs), its page (--collect, --page_only)."""
  from studies.recall import memory, memory_budget, memory_page
  command = pages.command_line("scripts.mqar", argv,
                               drop=("--workdir_root", "--out", "--ledger"))
  if a.measure_costs or a.replan_costs:
    probes = None
    if a.measure_costs:
      old = pages.read_json(os.path.join(a.out, "plan.json")) or {}
      cells = [(i["row"], i["width"]) for i in old.get("items", [])
               if not i["priced_by"].startswith("measured") and i["runs"]]
      probes = dict(old.get("probes", {}), **memory_budget.probe(
          a.preset, cells, log=lambda s: print(s, flush=True)))
    plan = memory_budget.write(a.preset, a.out, probes, command)
    print(f"plan: {plan['planned_cpu_minutes']} of {plan['budget_cpu_minutes']} "
          f"CPU-minutes; dropped: {plan['dropped']}")
    return
  if not (a.collect or a.page_only):
    memory.study(a.preset, a.workdir_root, jobs=a.jobs,
                 groups=[int(g) for g in a.groups.split(",") if g] or None,
                 rows=[n for n in a.variants.split(",") if n] or None,
                 log=lambda s: print(s, flush=True),
                 replan=lambda: memory_budget.write(a.preset, a.out))
  data = memory_page.page_data(a.preset, a.workdir_root)
  memory_page.write_page(data, a.out, pages.run_record(command, a.preset))


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--preset", default="cpu", choices=sorted(mqar.PRESETS))
  ap.add_argument("--stages", default="lr,grid,seeds", help="a comma-separated subset")
  ap.add_argument("--variants", default="", help="train only these (default: all; "
                  "memory_cpu: its rows)")
  ap.add_argument("--groups", default="", help="memory_cpu: the plan groups to run "
                  "(default: those its committed plan fits in the budget)")
  ap.add_argument("--jobs", type=int, default=1, help="variants trained at once")
  ap.add_argument("--workdir_root", default=None, help="default: workdirs/variants_mqar_<preset>")
  ap.add_argument("--out", default=None,
                  help="the page's folder (default: the preset's, mqar.out_of: "
                       f"{mqar.OUT} for zoology_cpu, {mqar.OUTS['cpu']} for cpu)")
  ap.add_argument("--page_only", action="store_true",
                  help="rewrite the page from out/results.json; train nothing")
  ap.add_argument("--collect", action="store_true",
                  help="write the page from the finished runs under --workdir_root "
                       "(e.g. of a sweep stopped early); train nothing")
  ap.add_argument("--ledger", default=None,
                  help="the committed ledger of finished runs (default: the preset's own, "
                       "results/variants_mqar/<preset>_runs.json, where it keeps one)")
  ap.add_argument("--ledger_from_workdirs", action="store_true",
                  help="add every finished run under --workdir_root to the ledger "
                       "(runs finished before it); train nothing")
  ap.add_argument("--measure_costs", action="store_true",
                  help="time short runs of the preset's candidate cells under this "
                       "process's cores and write out/costs.json (studies.recall.costs); "
                       "train nothing else")
  ap.add_argument("--replan_costs", action="store_true",
                  help="re-project out/costs.json's plan for the preset's grid as it "
                       "stands now, from the probes already there (the earlier plan is "
                       "kept in it); train nothing")
  a = ap.parse_args(argv)
  a.out = a.out or mqar.out_of(a.preset)
  ledger = a.ledger or True
  if mqar.PRESETS[a.preset].get("rows") and not a.page_only:
    memory_main(a, argv)
    print(f"wrote {os.path.join(a.out, 'README.md')}")
    return
  if a.replan_costs:
    from studies.recall import costs as mqar_costs
    plan = mqar_costs.replan(a.preset, os.path.join(a.out, "costs.json"))
    print(f"re-projected plan: {plan}")
    return
  if a.ledger_from_workdirs:
    root = a.workdir_root or mqar.root_of(a.preset)
    n = mqar.backfill(a.preset, root, ledger=ledger)
    print(f"added {n} finished runs of {root} to "
          f"{mqar.mqar_ledger.path_of(a.preset, ledger)}")
    return
  if a.measure_costs:
    from studies.recall import costs as mqar_costs
    command = pages.command_line("scripts.mqar", argv, drop=("--workdir_root", "--out"))
    root = a.workdir_root or mqar.root_of(a.preset) + "_costs"
    data = mqar_costs.write(a.preset, root, command, os.path.join(a.out, "costs.json"),
                            log=lambda s: print(s, flush=True))
    print(f"projected plan: {data['plan']}")
    return
  if a.page_only:
    saved = pages.read_json(os.path.join(a.out, "results.json"))
    if saved is None:
      raise SystemExit(f"--page_only: no {a.out}/results.json to write the page from")
    run = saved.pop("run")
    page_module(saved).write_page(saved, a.out, run)
  else:
    command = pages.command_line("scripts.mqar", argv,
                                 drop=("--workdir_root", "--out", "--ledger"))
    root = a.workdir_root or mqar.root_of(a.preset)
    if a.collect:
      data = mqar.page_data(a.preset, root, ledger=ledger)
    else:
      data = mqar.study(a.preset, root, names=[n for n in a.variants.split(",") if n],
                        stages=tuple(s for s in a.stages.split(",") if s), jobs=a.jobs,
                        log=lambda s: print(s, flush=True), ledger=ledger)
    page_module(data).write_page(data, a.out, pages.run_record(command, a.preset))
  print(f"wrote {os.path.join(a.out, 'README.md')}")


if __name__ == "__main__":
  main()
