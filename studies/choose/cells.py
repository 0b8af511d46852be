"""The decision page's cells (studies.choose.page): the variants' families and the
page's constants, each quality and cost cell in words, and what the summary's rules
read of a cell (a cost at a length, a worse verdict, an interval wholly worse).
"""
from __future__ import annotations

import attention
from data import tasks
from studies.choose import sources as S
from studies.core import pages

COST = "cost.json"
FAMILIES = ("exact", "score", "efficient", "gated")
# The task whose gap to the exact reference is the Pareto plots' quality axis: a
# causal LM every causal variant ran, 3 seeds each (its record's Study.roles names
# "causal_lm").
PARETO_TASK = tasks.with_role("causal_lm")
# The question "which attention for a causal LM of this many tokens?" (issue 80): its
# quality from the causal-LM column (PARETO_TASK), its cost at this length.
LM_TOKENS = 4096


def grouped(names) -> list[tuple[str, list[str]]]:
  """[(family, [variants])] in FAMILIES order (then any other family), each sorted.
  names: the variants."""
  fams = {}
  for n in names:
    fams.setdefault(attention.variant(n).family, []).append(n)
  order = [f for f in FAMILIES if f in fams] + sorted(f for f in fams if f not in FAMILIES)
  return [(f, sorted(fams[f])) for f in order]


# ---- cells in words -----------------------------------------------------------------

def quality_text(src: S.Source, c: S.Cell) -> str:
  """A quality cell in words: the difference from the reference with its interval,
  seeds and verdict; the reference's own figure; "cannot" / "not run" / "failed"
  (never blank)."""
  f = S.metric(src)[3]
  if c.status == "reference":
    return f"reference: {f.format(c.value)} ({c.seeds} seeds)"
  if c.status != "ok":
    return c.status
  if c.word == "no exact reference":
    return f"{f.format(c.value)} ({c.seeds} seed{'s' * (c.seeds != 1)}), no exact reference"
  iv = (f" [{S.fmt_diff(src, c.lo)}, {S.fmt_diff(src, c.hi)}]"
        if S.finite(c.lo) and S.finite(c.hi) and c.lo != c.hi else "")
  word = "no verdict" if c.word == "one seed" else c.word
  # a verdict on a model that differs besides its attention says how (variants_seeds)
  also = f" ({c.differs})" if c.differs and c.word in ("better", "worse") else ""
  return (f"Δ {S.fmt_diff(src, c.diff)}{iv}, {c.seeds} seed{'s' * (c.seeds != 1)}, "
          f"{word}{also}")


def _mib(b) -> str:
  return f"{b / 2 ** 20:.1f}"


def train_text(cell: dict | None) -> tuple[str, str]:
  """(tokens/s, peak MiB) of a training cost cell in words; a cell not run says why in
  one word or two (never blank). cell: cost.json's train[v]["cells"][N], or None."""
  if cell is None:
    return "not run", "not run"
  if cell["status"] != "ok":
    return cell["status"], cell["status"]
  return f"{cell['tokens_per_s']:,.0f}", _mib(cell["peak_bytes"])


def decode_text(d: dict | None, L: int) -> tuple[str, str]:
  """(µs per token, state KiB) at context L of a decode cost record; "cannot" for a
  variant without a decode state. d: cost.json's decode[v], or None."""
  if d is None:
    return "not run", "not run"
  if d["status"] != "ok":
    return d["status"], d["status"]
  return f"{d['us_per_token']:.1f}", f"{pages.keyed(d['state_bytes'])[L] / 1024:,.1f}"


# ---- what the rules read of a cell --------------------------------------------------

def _cite(src: S.Source, n: str, c: S.Cell) -> str:
  """'[shakespeare: `gla` Δ +0.018 [...], 3 seeds, unresolved]': a quality cell cited."""
  return f"[{src.key}: `{n}` {quality_text(src, c)}]"


def _tok(cost, n, N) -> float | None:
  c = (cost.get("train", {}).get(n, {}).get("cells") or {})
  c = pages.keyed(c).get(N)
  return c["tokens_per_s"] if c and c["status"] == "ok" else None


def _peak(cost, n, N) -> float | None:
  c = pages.keyed(cost.get("train", {}).get(n, {}).get("cells") or {}).get(N)
  return c["peak_bytes"] if c and c["status"] == "ok" else None


def judged_worse(quality: dict, sources, n: str) -> list:
  """The sources on which the page's verdict finds `n` worse than the reference."""
  return [s for s in sources if quality.get(s.key, {}).get(n, S.Cell("", "")).word
          == "worse"]


def wholly_worse(src: S.Source, c: S.Cell | None) -> bool:
  """Whether a cell's 95% interval lies wholly on the worse side of 0 (the source's
  metric direction). src: its column; c: the cell, or None."""
  if c is None or c.status != "ok" or not (S.finite(c.lo) and S.finite(c.hi)):
    return False
  return c.hi < 0 if S.metric(src)[2] else c.lo > 0
