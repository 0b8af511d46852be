"""Rewrites results/README.md, the index of every results page, from the pages
themselves (studies/core/results_index.py); `make pages` runs it after every page.

  python -m scripts.results_index
"""
import sys

from studies.core import results_index

if __name__ == "__main__":
  results_index.write("results")
  sys.exit(0)
