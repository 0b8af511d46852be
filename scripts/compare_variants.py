"""Every attention variant on one task, under one budget: quality against cost
(the study: studies/variants/compare.py; the page: studies/variants/page.py).

  python -m scripts.compare_variants --task=copy --variants=all --preset=cpu
  python -m scripts.compare_variants --task=shakespeare --variants=softmax,linear \
      --preset=gpu
  python -m scripts.compare_variants --task=copy --variants=all --lr_sweep --seeds=1,2
  python -m scripts.compare_variants --task=copy --page_only      # rewrite the pages only

  python -m scripts.compare_variants --task=copy --variants=softmax,my_variant --steps=200
      # a small run beside the committed rows: its page goes to
      # workdirs/pages/copy_cpu_steps200/ (untracked), results/ is left as it is

Trains (or keeps, where finished) each variant, each run in a subprocess of its own,
one variant after another (its lr sweep, its row, its seeds: a run stopped part way
leaves whole rows), and writes its page: README.md, results.json and
quality_vs_time.png. The page names the command that ran and, per row, the run that
trained and timed it.

Where the page goes (--out's default): the committed page, results/variants_<task>
(and, for the cpu preset, the variant x task summary in results/README.md), only for
a run at the preset's own budget over variants that page already holds, or with
--page_only. A run with a budget flag (--steps, --eval_batches, --overrides) or with
a variant the committed page does not hold writes to workdirs/pages/<task>_<preset>
[_<budget>]/ instead (git ignores workdirs/) and trains under workdirs/variants_<task>
_<preset>[_<budget>]/, and its page shows the committed page's rows beside its own,
marked (committed) with their date and machine, instead of "not run yet". To add a new
variant's row to the committed page, run it at the preset's budget with
--out=results/variants_<task> (results/ refuses a budget flag).
"""
from __future__ import annotations

import argparse
import json
import os

from studies.core import pages, protocol
from studies.variants import compare as cv, page as variants_page, seeds as variants_seeds
from studies.variants import summary as variants_summary


def main(argv=None):
  import attention
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                               epilog=__doc__.split("\n\n", 1)[1],
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--task", required=True, choices=cv.TASKS)
  ap.add_argument("--variants", default="all", help="all, or a comma-separated list")
  ap.add_argument("--preset", default="cpu",
                  help="a preset of configs/<task>.py (e.g. cpu, gpu; listops: cpu_long)")
  ap.add_argument("--workdir_root", default=None,
                  help="default: workdirs/variants_<task>_<preset>[_<budget>]")
  ap.add_argument("--out", default=None,
                  help="the page's folder; default: results/variants_<task> at the "
                       "preset's budget over variants it holds, else workdirs/pages/"
                       "<task>_<preset>[_<budget>] (see below)")
  ap.add_argument("--steps", type=int, default=None,
                  help="budget: train every run N steps instead of the preset's "
                       "num_train_steps (e.g. 200 for a quick look)")
  ap.add_argument("--eval_batches", type=int, default=None,
                  help="budget: evaluation batches instead of the preset's "
                       "eval_batches (0: the whole split; mnist and listops rows are "
                       "still evaluated on their whole test split)")
  ap.add_argument("--overrides", default="",
                  help="budget: JSON of any other config overrides, e.g. "
                       "'{\"batch_size\": 8, \"model\": {\"num_layers\": 1}}'")
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
  ap.add_argument("--protocol", action="store_true",
                  help="re-run under studies/PROTOCOL.md: the lr sweep on seed 0 chosen on "
                       "validation, then the page's fresh reporting seeds at the chosen "
                       "rate, reported on test; marks the page (protocol.json) so that "
                       "--page_only renders it under the protocol from then on")
  ap.add_argument("--record_before", default="", metavar="REV",
                  help="record in the page's protocol.json the verdicts against softmax "
                       "its committed JSON at git revision REV stated (the page before "
                       "its re-run under the protocol), which the page then compares "
                       "with its new ones; train nothing")
  a = ap.parse_args(argv)
  if a.record_before:
    out = a.out or cv.out_dir(a.task, a.preset)
    before = variants_seeds.record_before(a.task, a.preset, out, a.record_before)
    print(f"recorded the verdicts of {a.record_before} in {out}/protocol.json: {before}")
    return
  names = attention.names() if a.variants == "all" else a.variants.split(",")
  if a.preset not in cv.presets(a.task):
    ap.error(f"--preset: configs/{a.task}.py has no preset {a.preset!r}; valid: "
             f"{', '.join(sorted(cv.presets(a.task)))}")
  for n in names:
    attention.variant(n)        # an unknown name lists the valid ones, before any run
  try:
    ov = cv.budget_overrides(json.loads(a.overrides) if a.overrides else None,
                             steps=a.steps, eval_batches=a.eval_batches)
  except (ValueError, json.JSONDecodeError) as e:
    ap.error(f"{e}".splitlines()[0])
  if a.out and ov and cv.is_committed_path(a.out):
    ap.error(f"--out={a.out}: results/ holds the preset's own budget, and this run's is "
             f"another ({', '.join(f'{k}={v}' for k, v in sorted(ov.items()))}); leave "
             "--out out (its page goes under workdirs/pages/) or drop the budget flags")
  out = a.out or cv.page_dir(a.task, a.preset, names, ov, a.page_only)
  committed = cv.out_dir(a.task, a.preset)
  beside = (cv.committed_rows(a.task, a.preset)
            if os.path.normpath(out) != os.path.normpath(committed) else None)
  if a.protocol:
    # a page already under the protocol keeps its version (its verdicts' family was
    # declared before it ran); a page new to it takes the current one
    v = protocol.page_version(out)
    protocol.write_page_record(out, os.path.basename(committed),
                               v if protocol.follows(v) else protocol.VERSION)
  proto = cv.on_protocol(out)
  if proto:      # the held-out splits the protocol needs (mnist, shakespeare), the layers
    ov = protocol.with_overrides(a.task, ov)
  root = a.workdir_root or (f"workdirs/variants_{a.task}_{a.preset}{cv.budget_tag(ov)}"
                            + (f"_protocol{protocol.RUNS}" if proto else ""))
  command = pages.command_line("scripts.compare_variants", argv, drop=("--workdir_root",))
  results = cv.study(a.task, a.preset, names, root, out, ov,
                     command=command, page_only=a.page_only, reeval=a.reeval,
                     ignore_page=a.ignore_page,
                     seeds=[int(x) for x in a.seeds.split(",") if x],
                     sweep_lr=a.lr_sweep or proto, beside=beside,
                     log=lambda s: print(s, flush=True))
  variants_page.write_page(a.task, a.preset, results, out, ov, command)
  if out == cv.out_dir(a.task, "cpu"):     # the pages the README's summary reads
    variants_summary.update_readme()
  print(f"wrote {os.path.join(out, 'README.md')}")


if __name__ == "__main__":
  main()
