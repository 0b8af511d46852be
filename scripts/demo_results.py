"""The `make demo` page: the PNGs and a README page from a `make demo` workdir
(the page: studies/repro/demo.py).

  python -m scripts.demo_results --workdir=workdirs/mnist_demo            # -> <workdir>/page
  python -m scripts.demo_results --workdir=workdirs/mnist_demo --out=results/mnist_demo
  python -m scripts.demo_results --page_only --out=results/mnist_demo    # from demo.json

`make demo` writes its page into the workdir (untracked: `git status` stays clean);
the committed results/mnist_demo page is rewritten only by the second command, from
a finished `make demo` run. Every number on the page is read from the workdir's files
(metrics.jsonl, eval/eval.json, config.json), kept in demo.json beside the page.
"""
import argparse
import os

from studies.core import pages
from studies.repro import demo

OUT = "results/mnist_demo"


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--workdir", default=None, help="a finished `make demo` workdir")
  ap.add_argument("--out", default=None, help="default: <workdir>/page")
  ap.add_argument("--page_only", action="store_true", help="the page from <out>/demo.json")
  ap.add_argument("--config_file", default="configs/mnist_demo.py",
                  help="the config the workdir was trained with (named on the page)")
  ap.add_argument("--shipped", default="mnist14_linear",
                  help="the shipped model `make demo` evaluated into <workdir>/shipped "
                       "(shown beside the run when that folder holds its eval.json)")
  ap.add_argument("--frontier", default=os.path.join(OUT, "frontier_runs.jsonl"),
                  help="scripts/demo_frontier.py records, tabled on the page if present")
  a = ap.parse_args(argv)
  if a.page_only:
    out = a.out or OUT
    d = pages.read_json(os.path.join(out, "demo.json"))
  else:
    if not a.workdir:
      ap.error("--workdir is required (or --page_only)")
    out = a.out or os.path.join(a.workdir, "page")
    shipped_folder = os.path.join(a.workdir, "shipped")
    d = demo.record(a.workdir, a.config_file, a.shipped, shipped_folder)
    demo.copy_pictures(a.workdir, out, shipped_folder)
  demo.write_page(d, out, demo.read_frontier(a.frontier))
  print(f"wrote {out}/README.md")


if __name__ == "__main__":
  main()
