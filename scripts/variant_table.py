"""Prints the README's tables of attention variants, written from the registry: the
variant table, and how each variant takes each in-attention position scheme (or why
it refuses it).

  python -m scripts.variant_table            # print them
  python -m scripts.variant_table --write    # replace both tables in README.md

tests/test_registry.py fails when README.md holds a stale table.
"""
import sys

import attention
from attention.registry import POSITION_SCHEMES

BEGIN = "<!-- variant table: written by `make table` -->"
END = "<!-- end variant table -->"
POS_BEGIN = "<!-- positions table: written by `make table` -->"
POS_END = "<!-- end positions table -->"


def cross(v) -> str:
  if v.cross_attends:
    return "yes"
  return "Tq≠Tk yes; no cross-attention (positional)" if v.cross else "no"


def positions(v) -> str:
  taken = [s for s in POSITION_SCHEMES if v.takes(s)]
  return ", ".join(taken) if taken else "none (refused)"


def table() -> str:
  rows = ["| variant | what it is | time | memory | causal | cross (Tq≠Tk) | masks "
          "| attn. dropout | positions (in attention) | decode | reference |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
  for name in attention.names():
    v = attention.variant(name)
    rows.append(f"| `{name}` | {v.summary} | {v.time} | {v.memory} | "
                f"{'yes' if v.causal else 'no (refused)'} | {cross(v)} | "
                f"{v.masks} | {'yes' if v.dropout else 'no'} | {positions(v)} | "
                f"{v.decode or 'no'} | {v.paper} |")
  return "\n".join(rows)


def positions_table() -> str:
  """How each variant takes each in-attention scheme, or "refused: why"."""
  rows = ["| variant | " + " | ".join(f"`{s}`" for s in POSITION_SCHEMES) + " |",
          "|---|" + "---|" * len(POSITION_SCHEMES)]
  for name in attention.names():
    v = attention.variant(name)
    cells = [(str(v.positions[s]) if v.takes(s) else f"refused: {v.positions[s]}")
             .replace("|", "\\|") for s in POSITION_SCHEMES]     # a cell's own bars
    rows.append(f"| `{name}` | " + " | ".join(cells) + " |")
  return "\n".join(rows)


def _replace(text, begin, end, body):
  start, stop = text.index(begin) + len(begin), text.index(end)
  return text[:start] + "\n" + body + "\n" + text[stop:]


def write(path="README.md"):
  text = open(path, encoding="utf-8").read()
  text = _replace(text, BEGIN, END, table())
  text = _replace(text, POS_BEGIN, POS_END, positions_table())
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)


if __name__ == "__main__":
  write() if "--write" in sys.argv else print(table() + "\n\n" + positions_table())
