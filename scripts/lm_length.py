"""A causal LM at 256 / 1,024 / 4,096 bytes of code (issue 101): the quality gap of each
row to flash, where it comes from (recall positions), and what each row costs as a model
(the study: studies/length/; the page: results/lm_length/README.md).

  nice -n 10 python -m scripts.lm_length --preset=cpu --jobs=2     # run / resume
  git add results/lm_length && git commit ...                      # keep the ledger
  python -m scripts.lm_length --preset=cpu --page_only             # the page alone
  python -m scripts.lm_length --preset=cpu --rows=flash,gated_deltanet --lengths=1024
  python -m scripts.lm_length --measure_steps      # -> results/lm_length/step_costs.json
  python -m scripts.lm_length --cost_run           # -> results/lm_length/cost_run.json
  python -m scripts.lm_length --add_curves         # ledger runs logged before the curve
  python -m scripts.lm_length --floors             # -> results/lm_length/floors.json (the
                                                   #   n-gram floors of the runs' bytes)
  python -m scripts.lm_length --longer             # flash, gated_deltanet, the control
                                                   #   with 4x the bytes (studies/length/
                                                   #   longer.py), then the page
  python -m scripts.lm_length --mirror_slice=.mirror        # the gpu preset's corpus slice,
  python -m scripts.lm_length --preset=gpu --prepare_slice  #   carried, then extracted there
  python -m scripts.lm_length --preset=gpu --pack=F.tgz     # its ledger, page and cut-off
                                                             #   runs' newest checkpoints
  (bash scripts/gpu_check.sh 560 length: the three on a lent GPU; studies/length/carry.py)

Each run trains in a child process through the project's training loop; every finished
run goes to the committed ledger results/lm_length/<preset>_runs.json the moment it
ends, so a fresh clone resumes where the last session stopped (a run in the ledger is
never trained again). `touch workdirs/STOP` stops at the next run boundary.
"""
from __future__ import annotations

import argparse
import os
import sys


def main(argv=None):
  from studies.length import costs
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--preset", default="cpu")
  p.add_argument("--rows", default="", help="comma-separated rows (default: all)")
  p.add_argument("--lengths", default="", help="comma-separated lengths (default: all)")
  p.add_argument("--jobs", type=int, default=1, help="children at a time, one a core")
  p.add_argument("--page_only", action="store_true", help="write the page, train nothing")
  p.add_argument("--measure_steps", action="store_true",
                 help="CPU-s a step of flash, gated_deltanet, qwen3_next per length")
  p.add_argument("--cost_run", action="store_true",
                 help="the interleaved cost run of every row at each length")
  p.add_argument("--floors", action="store_true", help="the n-gram floors of the "
                 "reporting seeds' training bytes at each length (studies/length/floors.py)")
  p.add_argument("--longer", action="store_true", help="the exploratory longer runs "
                 "(preset cpu_x4: 4x the steps at 1,024, rates carried), then the cpu page")
  p.add_argument("--longer_seeds", default="1", help="comma-separated seeds of --longer")
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--core", type=int, default=None, help="the core a measurement runs on")
  p.add_argument("--name", default="", help="the measurement's file (default "
                 "step_costs.json / cost_run.json); --merge joins such parts")
  p.add_argument("--merge", default="", help="comma-separated part files -> --name")
  p.add_argument("--add_curves", action="store_true",
                 help="give ledger runs recorded without a training curve the one their "
                      "workdir under --root holds, then write the page")
  p.add_argument("--mirror_slice", default="", help="copy the gpu preset's corpus "
                 "slice (sha256-verified sdists) into this folder's pycode_sdist/, to carry")
  p.add_argument("--prepare_slice", action="store_true", help="verify and extract the "
                 "preset's slice from the data mirror (never downloads); train nothing")
  p.add_argument("--pack", default="", help="write this tarball of the preset's page "
                 "folder and its cut-off runs' workdirs (newest checkpoint); train nothing")
  p.add_argument("--root", default="workdirs/lm_length")
  p.add_argument("--out", default=None, help="the page's folder (default: the "
                 "preset's, studies.length.presets.out_of: results/lm_length for cpu, "
                 "results/lm_length/<preset> for another)")
  p.add_argument("--data_dir", default=None)
  a = p.parse_args(argv)
  from studies.core import pages
  from studies.length import presets
  pre = presets.preset(a.preset)
  a.out = a.out or presets.out_of(pre.name)
  command = pages.command_line("scripts.lm_length", argv)
  split = lambda s, f: [f(x) for x in s.split(",") if x] if s else None
  if a.mirror_slice or a.prepare_slice or a.pack:
    from data.fetch import DataError
    from studies.length import carry
    try:
      if a.mirror_slice:
        print("\n".join(carry.mirror_slice(a.mirror_slice, "gpu", a.data_dir)))
      if a.prepare_slice:
        print(carry.prepare_slice(pre.name, a.data_dir, log=print))
    except DataError as e:
      return f"error: {e}"
    if a.pack:
      got = carry.pack(a.pack, a.root, a.out, pre.name)
      print(f"wrote {a.pack}: {', '.join(got) or 'nothing'}")
    return
  if a.merge:
    parts = [pages.read_json(os.path.join(a.out, f)) for f in a.merge.split(",")]
    path = os.path.join(a.out, a.name or costs.STEP_COSTS)
    pages.write_json(path, costs.merge(parts))
    print(f"wrote {path}")
    return
  if a.floors:
    from studies.length import floors
    path = costs.write(floors.measure(pre, split(a.lengths, int), data_dir=a.data_dir),
                       floors.FLOORS, command, a.out)
    print(f"wrote {path}")
    return
  if a.measure_steps or a.cost_run:
    costs.pin_one_core(a.core)
    rows = split(a.rows, str) or (list(costs.PLAN_ROWS) if a.measure_steps
                                  else list(pre.rows))
    lengths = split(a.lengths, int) or ([256, 1024, 4096] if a.measure_steps
                                        else list(pre.lengths))
    name = a.name or (costs.STEP_COSTS if a.measure_steps else costs.COST_RUN)
    keep = lambda r: costs.write(dict(r, preset=pre.name), name, command, a.out)
    path = keep(costs.measure(pre, rows, lengths, rounds=a.rounds, data_dir=a.data_dir,
                              on_round=keep, decode=a.cost_run))
    print(f"wrote {path}")
    return
  from studies.length import page
  if a.longer:
    from studies.length import longer
    n = longer.run(a.root, a.out, split(a.longer_seeds, int), a.data_dir)
    print(f"longer runs: {n} launched")
    a.page_only = True
  if a.add_curves:
    from studies.length import ledger, runner
    got = runner.add_curves(ledger.path_of(pre.name, a.out), a.root)
    print(f"curves added: {', '.join(got) or 'none'}")
    a.page_only = True
  page.main(pre, rows=split(a.rows, str), lengths=split(a.lengths, int), jobs=a.jobs,
              page_only=a.page_only, root=a.root, out=a.out, data_dir=a.data_dir,
              command=command)


if __name__ == "__main__":
  sys.exit(main())
