"""Prints the README's tables of attention variants and of how each takes each
position scheme, written from the registry (studies/variant_table.py).

  python -m scripts.variant_table            # print them
  python -m scripts.variant_table --write    # replace both tables in README.md
"""
import sys

from studies import variant_table


if __name__ == "__main__":
  if "--write" in sys.argv:
    variant_table.write()
  else:
    print(variant_table.table() + "\n\n" + variant_table.positions_table())
