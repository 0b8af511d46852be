"""Prints the README's table of attention variants, written from the registry.

  python -m scripts.variant_table            # print it
  python -m scripts.variant_table --write    # replace the table in README.md

tests/test_registry.py fails when README.md holds a stale table.
"""
import sys

import attention

BEGIN = "<!-- variant table: written by `make table` -->"
END = "<!-- end variant table -->"


def cross(v) -> str:
  if v.cross_attends:
    return "yes"
  return "Tq≠Tk yes; no cross-attention (positional)" if v.cross else "no"


def table() -> str:
  rows = ["| variant | what it is | time | memory | causal | cross (Tq≠Tk) | masks "
          "| attn. dropout | decode | reference |",
          "|---|---|---|---|---|---|---|---|---|---|"]
  for name in attention.names():
    v = attention.variant(name)
    rows.append(f"| `{name}` | {v.summary} | {v.time} | {v.memory} | "
                f"{'yes' if v.causal else 'no (refused)'} | {cross(v)} | "
                f"{v.masks} | {'yes' if v.dropout else 'no'} | {v.decode or 'no'} | "
                f"{v.paper} |")
  return "\n".join(rows)


def write(path="README.md"):
  text = open(path, encoding="utf-8").read()
  start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text[:start] + "\n" + table() + "\n" + text[stop:])


if __name__ == "__main__":
  write() if "--write" in sys.argv else print(table())
