"""The variant x task summary of results/README.md, between its markers: every
variants page's rows in one table (the mean of a variant's seeds where its page has
several), rewritten by each variants page's run (scripts/compare_variants.py).
"""
from __future__ import annotations

import os

from studies.core import pages, protocol
from studies.variants import seeds as variants_seeds
from studies.variants.compare import (METRIC, STATUS_SHORT, TASKS, exact_roles,
                                      make_config, metric_label, quality_str)

README_BEGIN = "<!-- variants summary: written by scripts/compare_variants.py -->"
README_END = "<!-- end variants summary -->"


def summary_table(root="results", page_dir="results") -> str:
  """The variant x task table from every <root>/variants_<task>/results.json, its links
  to the task pages relative to `page_dir` (the folder of the page it goes in). A cell:
  the mean of the variant's seeds in the page's seed table (`seed_figures`, under the
  page's overrides) where it has several, else its row's figure."""
  import attention
  by_task, seeds = {}, {}
  for task in TASKS:
    out = os.path.join(root, f"variants_{task}")
    rows = pages.read_json(os.path.join(out, "results.json"))
    if rows is not None:
      by_task[task] = {r["variant"]: r for r in rows}
      preset = next((r["preset"] for r in rows if r.get("preset")), "cpu")
      seeds[task] = variants_seeds.seed_figures(task, preset, rows, out,
                                                protocol.page_overrides(task, out))
  tasks = [t for t in TASKS if t in by_task]
  link = lambda t: os.path.relpath(os.path.join(root, f"variants_{t}", "README.md"),
                                   page_dir)
  version = lambda t: protocol.page_version(os.path.join(root, f"variants_{t}"))
  # each column names the evaluation protocol its page follows (issue 103)
  head = ["| variant | " + " | ".join(
      f"[{t}]({link(t)}) ({metric_label(t, version(t))}; protocol version {version(t)})"
      for t in tasks) + " |",
      "|---|" + "---|" * len(tasks)]
  body = []
  for v in attention.names():
    cells = []
    for t in tasks:
      r = by_task[t].get(v)
      if r is None:
        cells.append("not run")
      elif r["status"] == "ok" and len(seeds[t].get(v, {})) > 1:
        m, _, k = variants_seeds.mean_se(list(seeds[t][v].values()))
        mean = dict(r, eval={**r["eval"], METRIC[t][0]: m})
        cells.append(f"{quality_str(mean)}, mean of {k} seeds")
      elif r["status"] == "ok":
        cells.append(quality_str(r))
      else:
        cells.append(STATUS_SHORT[r["status"]])
      if r is not None and r["status"] != "refused" and exact_roles(
          make_config(t, r.get("preset", "cpu"), v)):
        cells[-1] += " *"
    body.append(f"| `{v}` | " + " | ".join(cells) + " |")
  foot = ["", "\\* with exact softmax in the roles the variant cannot fill (the task's page "
          "names them)"] if any(" *" in line for line in body) else []
  return "\n".join(head + body + foot)


def update_readme(path="results/README.md", root="results"):
  """Rewrites the summary between README_BEGIN and README_END in `path` (the results
  index), nothing else of it."""
  pages.splice_file(path, README_BEGIN, README_END,
                    summary_table(root, os.path.dirname(os.path.abspath(path))))
