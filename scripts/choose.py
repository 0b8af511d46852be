"""The decision page, results/choose/: which attention to use and what it costs
(issue 80). Study logic: studies/choose/page.py (the page, its rules) and
studies/choose/cost.py (the one cost run).

  python -m scripts.choose               # the cost run (about 10 minutes on 2 cores),
                                         # cost.json, then the page
  python -m scripts.choose --page_only   # the page from the committed JSON (make pages)
"""
import argparse
import os
import sys

from studies.core import pages

OUT = "results/choose"


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--page_only", action="store_true",
                  help="rewrite the page from the committed cost.json and the other "
                       "pages' JSON; measure nothing")
  ap.add_argument("--out", default=OUT, help="the page's folder")
  a = ap.parse_args(argv)
  if not a.page_only:
    from studies.choose import cost as choose_cost
    rec = choose_cost.cost_run(choose_cost.CostSetup(),
                               pages.command_line("scripts.choose", argv))
    pages.write_json(os.path.join(a.out, "cost.json"), rec)
  from studies.choose import page as choose
  choose.write_page(a.out)
  return 0


if __name__ == "__main__":
  sys.exit(main())
