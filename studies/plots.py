"""The one matplotlib set-up of the results pages: a non-interactive backend, figures
saved and closed. Every study draws through `pyplot()` and `save()`."""
from __future__ import annotations


def pyplot():
  """matplotlib.pyplot on the file-only Agg backend (no display needed)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  return plt


def save(fig, path: str, **savefig_kw) -> None:
  """Writes `fig` to `path` (savefig's keywords: dpi, ...) and frees it."""
  fig.savefig(path, **savefig_kw)
  pyplot().close(fig)
