"""The positions study (studies/mechanisms/positions.py): length extrapolation on Tiny
Shakespeare, the MNIST demo model under sinusoidal, learned and rope2d, and the page
results/positions/README.md (which also states scripts/rope_cost.py's JSON).

  python -m scripts.positions [--part=all|extrapolation|images] [--preset=full|smoke]
  python -m scripts.positions --page_only      # rewrite the page from the JSON
"""
from __future__ import annotations

import argparse
import os

from studies.core import pages
from studies.mechanisms import positions as S


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--part", default="all", choices=["all", "extrapolation", "images"])
  ap.add_argument("--preset", default="full", choices=sorted(S.PRESETS))
  ap.add_argument("--out", default="results/positions")
  ap.add_argument("--workdir", default="workdirs/positions", help="training runs")
  ap.add_argument("--data_dir", default="")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--schemes", default=",".join(S.IMAGE_SCHEMES),
                  help="images: the schemes to (re)run; the others' results are kept")
  ap.add_argument("--page_only", action="store_true")
  a = ap.parse_args(argv)
  p = S.PRESETS[a.preset]
  command = pages.command_line("scripts.positions", argv)
  if not a.page_only and a.part in ("all", "extrapolation"):
    runs_ = [S.extrapolation_run(p, s, v, a.workdir, a.data_dir, a.seed)
             for v in S.VARIANTS for s in S.SCHEMES]
    pages.write_json(os.path.join(a.out, "extrapolation.json"), {
        "run": pages.run_record(command, a.preset, what=p.what), "L": p.L,
        "seed": a.seed, "runs": runs_})
  if not a.page_only and a.part in ("all", "images"):
    for s in a.schemes.split(","):     # each scheme's result stored as soon as it is in
      S.store_image_run(os.path.join(a.out, "images.json"),
                        S.image_run(p, s, a.workdir, a.data_dir, a.seed),
                        pages.run_record(command, a.preset, what=p.what),
                        int(S.mnist_config(p, s).image_size))
  print(S.write_page(a.out))


if __name__ == "__main__":
  main()
