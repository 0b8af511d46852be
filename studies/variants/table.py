"""The tables of attention variants in docs/variants.md, written from the registry (`make
table`; test_registry.py fails when docs/variants.md holds a stale table): the variant table,
how each variant takes each in-attention position scheme (or why it refuses it), and
how each takes segment ids of packed rows (or why it refuses them)."""
from __future__ import annotations

import attention
from attention.core.registry import POSITION_SCHEMES
from studies.core import pages

BEGIN = "<!-- variant table: written by `make table` -->"
END = "<!-- end variant table -->"
POS_BEGIN = "<!-- positions table: written by `make table` -->"
POS_END = "<!-- end positions table -->"
SEG_BEGIN = "<!-- segments table: written by `make table` -->"
SEG_END = "<!-- end segments table -->"


def cross(v) -> str:
  if v.cross_attends:
    return "yes"
  return "Tq≠Tk yes; no cross-attention (positional)" if v.cross else "no"


def positions(v) -> str:
  """The in-attention schemes a variant takes, comma-separated."""
  taken = [s for s in POSITION_SCHEMES if v.takes(s)]
  return ", ".join(taken) if taken else "none (refused)"


def table() -> str:
  """One markdown row per registered variant: what it is, its cost, what it supports."""
  rows = [[f"`{name}`", v.summary, v.time, v.memory, "yes" if v.causal else "no (refused)",
           cross(v), v.masks, "yes" if v.dropout else "no", positions(v),
           "yes" if v.takes_segments else "no (refused)", v.decode or "no", v.paper]
          for name, v in ((n, attention.variant(n)) for n in attention.names())]
  return "\n".join(pages.table(["variant", "what it is", "time", "memory", "causal",
                                "cross (Tq≠Tk)", "masks", "attn. dropout",
                                "positions (in attention)", "segments", "decode",
                                "reference"], rows))


def positions_table() -> str:
  """How each variant takes each in-attention scheme, or "refused: why"."""
  rows = []
  for name in attention.names():
    v = attention.variant(name)
    rows.append([f"`{name}`"] + [
        (str(v.positions[s]) if v.takes(s) else f"refused: {v.positions[s]}")
        .replace("|", "\\|") for s in POSITION_SCHEMES])     # a cell's own bars
  return "\n".join(pages.table(["variant"] + [f"`{s}`" for s in POSITION_SCHEMES], rows))


def segments_table() -> str:
  """How each variant takes segment ids (q_seg, k_seg), or "refused: why"."""
  rows = [[f"`{name}`", (str(v.segments) if v.takes_segments
                         else f"refused: {v.segments}").replace("|", "\\|")]
          for name, v in ((n, attention.variant(n)) for n in attention.names())]
  return "\n".join(pages.table(["variant", "segment ids (packed rows)"], rows))


PAGE = "docs/variants.md"     # the page that holds the three tables, between markers


def write(path=PAGE):
  """Rewrites the three tables between their markers in `path`."""
  pages.splice_file(path, BEGIN, END, table())
  pages.splice_file(path, POS_BEGIN, POS_END, positions_table())
  pages.splice_file(path, SEG_BEGIN, SEG_END, segments_table())
