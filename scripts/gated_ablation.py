"""The gated family's layer piece by piece on MQAR (what it runs:
studies/mechanisms/gated_ablation.py).

  python -m scripts.gated_ablation [--jobs=2] [--root=workdirs/gated_ablation]
  python -m scripts.gated_ablation --page_only      # the page from the committed ledger
"""
from __future__ import annotations

import argparse
import os
import sys

from studies.core import pages
from studies.mechanisms import gated_ablation as A
from studies.recall import ledger as mqar_ledger


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--root", default=A.ROOT)
  ap.add_argument("--out", default=A.OUT)
  ap.add_argument("--jobs", type=int, default=1)
  ap.add_argument("--page_only", action="store_true")
  ap.add_argument("--variants", default="",
                  help="train only these rows' variants, comma-separated")
  ap.add_argument("--specs", default="",
                  help="train only these rows' model.gated_layer specs, ';'-separated "
                       "(e.g. 'bare;published'); two invocations with disjoint specs "
                       "can run at once")
  a = ap.parse_args(argv)
  if not a.page_only:
    only = [x for x in a.specs.split(";") if x]
    bad = sorted(set(only) - set(A.specs()))
    if bad:
      ap.error(f"--specs: {bad} are not rows' specs; valid: {'; '.join(A.specs())}")
    names = [x for x in a.variants.split(",") if x]
    rows = [r for r in A.ROWS if (not only or r[1] in only) and (not names or r[0] in names)]
    A.run(a.root, a.jobs, rows, log=lambda s: print(s, flush=True))
  ledger = mqar_ledger.path_of(A.PRESET, True)
  old = pages.read_json(os.path.join(a.out, "results.json"))
  run = (old["run"] if a.page_only and old else    # the page keeps its run's record
         pages.run_record("python -m scripts.gated_ablation " + " ".join(
             argv if argv is not None else sys.argv[1:]), A.PRESET))
  A.write_page({"rows": A.collect(a.root), "run": run,
                "totals": dict(mqar_ledger.totals(ledger), ledger=os.path.relpath(ledger))},
               a.out)


if __name__ == "__main__":
  main()
