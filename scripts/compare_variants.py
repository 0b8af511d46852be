"""Every attention variant on one task, under one budget: quality against cost
(the study: studies/compare_variants.py; the page: studies/variants_page.py).

  python -m scripts.compare_variants --task=copy --variants=all --preset=cpu
  python -m scripts.compare_variants --task=shakespeare --variants=softmax,linear \
      --preset=gpu
  python -m scripts.compare_variants --task=copy --variants=all --lr_sweep --seeds=1,2
  python -m scripts.compare_variants --task=copy --page_only      # rewrite the pages only

Trains (or keeps, where finished) each variant, each run in a subprocess of its own,
one variant after another (its lr sweep, its row, its seeds: a run stopped part way
leaves whole rows), and writes results/variants_<task>/README.md, results.json and
quality_vs_time.png; with the default --out it also rewrites the variant x task
summary in results/README.md between its markers. The page names the command that ran and,
per row, the run that trained and timed it.
"""
from __future__ import annotations

import argparse
import json
import os

from studies import compare_variants as cv, pages, variants_page


def main(argv=None):
  import attention
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--task", required=True, choices=cv.TASKS)
  ap.add_argument("--variants", default="all", help="all, or a comma-separated list")
  ap.add_argument("--preset", default="cpu",
                  help="a preset of configs/<task>.py (e.g. cpu, gpu; listops: cpu_long)")
  ap.add_argument("--workdir_root", default=None,
                  help="default: workdirs/variants_<task>_<preset>")
  ap.add_argument("--out", default=None, help="default: results/variants_<task>")
  ap.add_argument("--overrides", default="", help="JSON of config overrides (tests)")
  ap.add_argument("--page_only", action="store_true",
                  help="write the page from the finished results; train nothing")
  ap.add_argument("--reeval", action="store_true",
                  help="evaluate the finished variants again (training is kept)")
  ap.add_argument("--ignore_page", action="store_true",
                  help="train the chosen --variants again where the committed page "
                       "holds them but this machine has no workdir (e.g. to time every "
                       "row on one machine); default: keep the page's rows")
  ap.add_argument("--seeds", default="",
                  help="extra training seeds for the chosen --variants (e.g. 1,2): each "
                       "is trained and evaluated like its row, and the page gets their "
                       "spread beside seed 0's row (out/seeds.json keeps them)")
  ap.add_argument("--lr_sweep", action="store_true",
                  help="train the chosen --variants at each rate of the task's lr grid "
                       "(the preset's rate x0.3, x1, x3; seed 0) first; each row, and its "
                       "--seeds, then run at the rate the shared rule picks "
                       "(out/lr.json keeps the sweep)")
  a = ap.parse_args(argv)
  names = attention.names() if a.variants == "all" else a.variants.split(",")
  if a.preset not in cv.presets(a.task):
    ap.error(f"--preset: configs/{a.task}.py has no preset {a.preset!r}; valid: "
             f"{', '.join(sorted(cv.presets(a.task)))}")
  for n in names:
    attention.variant(n)        # an unknown name lists the valid ones, before any run
  out = a.out or cv.out_dir(a.task, a.preset)
  command = pages.command_line("scripts.compare_variants", argv, drop=("--workdir_root",))
  ov = json.loads(a.overrides) if a.overrides else None
  results = cv.study(a.task, a.preset, names,
                     a.workdir_root or f"workdirs/variants_{a.task}_{a.preset}", out, ov,
                     command=command, page_only=a.page_only, reeval=a.reeval,
                     ignore_page=a.ignore_page,
                     seeds=[int(x) for x in a.seeds.split(",") if x],
                     sweep_lr=a.lr_sweep,
                     log=lambda s: print(s, flush=True))
  variants_page.write_page(a.task, a.preset, results, out, ov, command)
  if out == cv.out_dir(a.task, "cpu"):     # the pages the README's summary reads
    variants_page.update_readme()
  print(f"wrote {os.path.join(out, 'README.md')}")


if __name__ == "__main__":
  main()
