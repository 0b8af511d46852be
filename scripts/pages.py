"""Rewrites every results page from the JSON committed beside it (nothing is measured):
the commands of studies/core/all_pages.py's PAGES, in order (`make pages`).

  python -m scripts.pages                 # every page
  python -m scripts.pages variants_copy   # the entries whose module or page names it
"""
import sys

from studies.core import all_pages

if __name__ == "__main__":
  sys.exit(all_pages.main())
