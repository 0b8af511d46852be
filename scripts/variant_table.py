"""Prints the tables of attention variants of docs/variants.md, of how each takes each position
scheme and of how each takes segment ids, written from the registry
(studies/variants/table.py).

  python -m scripts.variant_table            # print them
  python -m scripts.variant_table --write    # replace the three tables in docs/variants.md
"""
import sys

from studies.variants import table as variant_table


if __name__ == "__main__":
  if "--write" in sys.argv:
    variant_table.write()
  else:
    print(variant_table.table() + "\n\n" + variant_table.positions_table() + "\n\n"
          + variant_table.segments_table())
