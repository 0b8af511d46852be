"""The README's table of attention variants, written from the registry
(`make table`; tests/test_registry.py fails when README.md holds a stale table)."""
from __future__ import annotations

import attention
from studies import pages

BEGIN = "<!-- variant table: written by `make table` -->"
END = "<!-- end variant table -->"


def cross(v) -> str:
  if v.cross_attends:
    return "yes"
  return "Tq≠Tk yes; no cross-attention (positional)" if v.cross else "no"


def table() -> str:
  """One markdown row per registered variant: what it is, its cost, what it supports."""
  rows = [[f"`{name}`", v.summary, v.time, v.memory, "yes" if v.causal else "no (refused)",
           cross(v), v.masks, "yes" if v.dropout else "no", v.decode or "no", v.paper]
          for name, v in ((n, attention.variant(n)) for n in attention.names())]
  return "\n".join(pages.table(["variant", "what it is", "time", "memory", "causal",
                                "cross (Tq≠Tk)", "masks", "attn. dropout", "decode",
                                "reference"], rows))


def write(path="README.md"):
  """Rewrites the table between its markers in `path`."""
  pages.splice_file(path, BEGIN, END, table())
