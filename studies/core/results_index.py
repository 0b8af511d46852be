"""results/README.md, the index of every results page, written from the pages
themselves (`python -m scripts.results_index`; `make pages` runs it last): one line
per page with its title, the command that rewrites it (studies.core.all_pages), and the
dates and machines its "Written by ..." / "started ..." lines record. The variants x
tasks summary between its markers is studies.variants.summary.update_readme's (written
by the variants pages) and is kept as it stands.
"""
from __future__ import annotations

import fnmatch
import glob
import os
import re

from studies.core import all_pages, pages

INDEX = "README.md"            # under the results folder
BEGIN = "<!-- variants summary: written by scripts/compare_variants.py -->"
END = "<!-- end variants summary -->"
DECISION = "choose/README.md"

_DATE = re.compile(r"\b(20\d\d-\d\d-\d\d)\b")
_CPU = re.compile(r"([^,:;()`]+?(?:\([^)]*\)[^,:;()`]*)*), (\d+) cores")
_GPU = re.compile(r"(NVIDIA [^(,]+?) x\d")
_RUN_LINE = ("Written by", "started ", "a run of the study on")


def page_files(root: str = "results") -> list[str]:
  """Every results page under `root`: each folder's README.md and the other Markdown
  pages a `make pages` entry writes there (benchmarks/gpu_*.md), as paths relative to
  root, sorted (the index itself aside)."""
  found = {os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "*", "README.md"))}
  for p in all_pages.PAGES:
    for w in p.writes:
      if w.startswith("results/") and w.endswith(".md") and w != "results/README.md":
        found |= {os.path.relpath(x, root) for x in glob.glob(os.path.join(root, w[8:]))}
  for x in glob.glob(os.path.join(root, "*", "*.md")):
    if os.path.basename(x) != "README.md" and any(
        fnmatch.fnmatch("results/" + os.path.relpath(x, root), w)
        for p in all_pages.PAGES for w in p.writes):
      found.add(os.path.relpath(x, root))
  return sorted(found)


def describe(path: str) -> dict:
  """{"title", "dates", "machines"} of a page: its first '# ' heading, and the dates
  and machines of its run lines ("Written by ...", "started ...", "a run of the study
  on ..."). path: the page's file."""
  title, dates, machines = "", set(), []
  with open(path, encoding="utf-8") as f:
    for line in f:
      if not title and line.startswith("# "):
        title = line[2:].strip()
      if not any(k in line for k in _RUN_LINE):
        continue
      for piece in re.split(r"(?=Written by|started |a run of the study on)", line):
        if not any(piece.startswith(k) for k in _RUN_LINE):
          continue
        d = _DATE.search(piece)
        if d:
          dates.add(d.group(1))
        m = _GPU.search(piece) or _CPU.search(piece)
        if m:
          name = (m.group(1) if m.re is _GPU else
                  f"{m.group(2)}-core {m.group(1).strip()}")
          name = name.replace("Intel(R) Xeon(R) Processor", "Intel Xeon").strip()
          if name not in machines:
            machines.append(name)
  return dict(title=title, dates=sorted(dates), machines=machines)


def writer(rel: str) -> str:
  """The `make pages` command that rewrites results/<rel>, or 'hand-written'."""
  for p in all_pages.PAGES:
    if any(fnmatch.fnmatch("results/" + rel, w) for w in p.writes):
      return "`python -m " + " ".join((p.module,) + tuple(p.args)) + "`"
  return "hand-written (" + all_pages.HAND_WRITTEN.get("results/" + rel, "no writer") + ")"


def _dates(ds) -> str:
  return "not recorded" if not ds else ds[0] if len(ds) == 1 else f"{ds[0]} to {ds[-1]}"


def lines(root: str = "results", summary: str | None = None) -> list[str]:
  """The index's lines. root: the results folder; summary: the variants summary block
  (markers included) to keep, or None for a placeholder."""
  rows = []
  for rel in page_files(root):
    d = describe(os.path.join(root, rel))
    rows.append([f"[{rel[:-len('/README.md')] if rel.endswith('/README.md') else rel}]"
                 f"({rel})", d["title"], writer(rel), _dates(d["dates"]),
                 ", ".join(d["machines"]) or "not recorded"])
  return [
      "# Results", "",
      "Every results page of the project, one line each, written from the pages "
      "themselves by `python -m scripts.results_index` (`make pages` rewrites every "
      "page from its JSON, then this index). Each page keeps beside it the JSON of the "
      "runs that wrote it and opens with the command, the date and the machine. How "
      "each study works: [docs/reproductions.md](../docs/reproductions.md).", "",
      f"**Which attention should I use, and what will it cost?** [{DECISION}]"
      f"({DECISION}): one answer per question (a causal LM at 1,024 and 4,096 tokens, "
      "recall at a fixed decode budget, short sequences), each from evidence at that "
      "length and budget, written by rules with its cells cited.", "",
      "## Every variant on every task", "",
      "Each task's quality metric for every variant, from the variant pages' JSON: the "
      "mean of the seeds in the page's seed table where it has several, else its row's "
      "single run (\"cannot\" = the variant cannot do the task, the page says why). "
      "A gap between two cells is a verdict only where the task's page gives one; each "
      "column names the evaluation protocol its page follows "
      "([studies/PROTOCOL.md](../studies/PROTOCOL.md)).", "",
      summary or f"{BEGIN}\n(not written yet: `make pages`)\n{END}", "",
      "## The pages", ""] + pages.table(
          ["page", "title", "rewritten by", "date(s)", "machine(s)"], rows) + [
      "", "The shipped pretrained models and their frontier of training time: "
      "[pretrained/README.md](../pretrained/README.md)."]


def write(root: str = "results") -> None:
  """Rewrites root/README.md, keeping its variants summary block. root: the results
  folder."""
  path = os.path.join(root, INDEX)
  summary = None
  if os.path.exists(path):
    text = open(path, encoding="utf-8").read()
    if BEGIN in text and END in text:
      summary = BEGIN + text.split(BEGIN, 1)[1].split(END, 1)[0] + END
  pages.write_text(path, lines(root, summary))
