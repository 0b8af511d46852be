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


# Offsets (points) tried for a label, in order: beside the marker, then further out.
LABEL_OFFSETS = [(3, 3), (3, -8), (-3, 3), (-3, -8), (3, 10), (3, -15), (-3, 10),
                 (-3, -15), (8, 18), (8, -24), (-8, 18), (-8, -24)]


def label_apart(ax, points: dict, fontsize: float = 6) -> None:
  """Labels each point of {name: (x, y)} (data coordinates) at the first offset of
  LABEL_OFFSETS whose text overlaps no label placed before it and no other point's
  marker and stays inside the axes (a greedy placement, left to right); a label that finds none takes the last
  offset with a thin leader line to its point. Call after the axes' scales and limits
  are set (they fix where the points land)."""
  fig = ax.figure
  fig.canvas.draw()
  r = fig.canvas.get_renderer()
  marks = {n: ax.transData.transform(p) for n, p in points.items()}
  placed = []

  box = ax.get_window_extent(r)

  def clear(bb, name):
    bb = bb.expanded(1.0, 1.0).padded(2)      # a gap between two labels
    if bb.x0 < box.x0 or bb.x1 > box.x1 or bb.y0 < box.y0 or bb.y1 > box.y1:
      return False                              # inside the axes, not cut at the edge
    if any(bb.overlaps(o) for o in placed):
      return False
    return not any(bb.x0 - 2 <= x <= bb.x1 + 2 and bb.y0 - 2 <= y <= bb.y1 + 2
                   for m, (x, y) in marks.items() if m != name)

  for name in sorted(points, key=lambda n: tuple(marks[n])):
    for i, (dx, dy) in enumerate(LABEL_OFFSETS):
      last = i == len(LABEL_OFFSETS) - 1
      t = ax.annotate(name, points[name], xytext=(dx, dy), textcoords="offset points",
                      fontsize=fontsize, ha="left" if dx >= 0 else "right",
                      arrowprops=dict(arrowstyle="-", lw=0.4, color="grey") if last
                      else None)
      bb = t.get_window_extent(r)
      if clear(bb, name) or last:
        placed.append(bb)
        break
      t.remove()
