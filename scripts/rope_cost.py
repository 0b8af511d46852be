"""What applying RoPE costs in a shakespeare training step (studies/bench/rope_cost.py):
writes results/positions/rope_cost.json, which results/positions/README.md states
(python -m scripts.positions --page_only rewrites the page).

  python -m scripts.rope_cost [--preset=full|smoke] [--out=results/positions]
"""
from __future__ import annotations

import argparse
import os

from studies.bench import rope_cost
from studies.core import pages


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--preset", default="full", choices=sorted(rope_cost.PRESETS))
  ap.add_argument("--out", default="results/positions")
  ap.add_argument("--data_dir", default="")
  ap.add_argument("--rounds", type=int, default=0, help="paired rounds (0: the preset's)")
  a = ap.parse_args(argv)
  d = rope_cost.measure(a.preset, a.data_dir,
                        pages.command_line("scripts.rope_cost", argv), a.rounds)
  pages.write_json(os.path.join(a.out, "rope_cost.json"), d)
  print("\n".join(rope_cost.section(d)))


if __name__ == "__main__":
  main()
