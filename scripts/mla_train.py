"""What MLA's smaller cache costs in quality, results/mla_train/ (the study:
studies/mechanisms/mla_train.py): MHA, GQA(2), MQA and MLA at two latent widths on Tiny
Shakespeare's cpu preset, rates chosen on validation, 3 fresh seeds on test.

  python -m scripts.mla_train [--rows "MHA;MLA, d_c = d_h"] [--root workdirs/mla_train]
  python -m scripts.mla_train --page_only      # the page from the ledger, nothing trained

Resumable: a run in results/mla_train/runs.json is not trained again; a workdir under
--root resumes from its checkpoint. Two invocations with disjoint --rows (e.g. under
`taskset -c 0` and `taskset -c 1`) share the ledger safely.
"""
import argparse

from studies.core import pages
from studies.mechanisms import mla_train


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--rows", default="", help="row names separated by ';' (default: all): "
                  + "; ".join(r.name for r in mla_train.ROWS))
  ap.add_argument("--root", default="workdirs/mla_train", help="the runs' workdirs")
  ap.add_argument("--out", default=mla_train.OUT)
  ap.add_argument("--page_only", action="store_true", help="the page from the ledger")
  a = ap.parse_args(argv)
  if not a.page_only:
    rows = ([mla_train.row(n.strip()) for n in a.rows.split(";")] if a.rows
            else list(mla_train.ROWS))
    mla_train.study(rows, a.root, a.out,
                    command=pages.command_line("scripts.mla_train", argv),
                    log=lambda m: print(m, flush=True))
  print(f"wrote {mla_train.write_page(a.out)}")


if __name__ == "__main__":
  main()
