"""Prints the README's table of attention variants, written from the registry
(studies/variant_table.py).

  python -m scripts.variant_table            # print it
  python -m scripts.variant_table --write    # replace the table in README.md
"""
import sys

from studies import variant_table


if __name__ == "__main__":
  variant_table.write() if "--write" in sys.argv else print(variant_table.table())
