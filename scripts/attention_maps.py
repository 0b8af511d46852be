"""Attention heat maps of a trained workdir: per layer and head, for every variant
(the study: studies/mechanisms/attention_maps.py).

  python -m scripts.attention_maps --workdir=workdirs/mnist_demo [--index=0]
      [--query=10,7] [--out=DIR] [--page=results/attention_maps --workdir=... [--reuse]
      [--add]]
  python -m scripts.attention_maps --page_only [--page=results/attention_maps]

Draws, for one test input, the weights each layer applies to its values, per head
(<out>/<layer>.png; MNIST: query_pixel.png; Multi30k: cross_alignment.png) into
<workdir>/attention_maps (or --out). --page writes a results page with a few maps of
every --workdir given (--add: beside the maps already on it); --page_only rewrites it
from its maps.json.
"""
from __future__ import annotations

import argparse
import os

from studies.core import pages
from studies.mechanisms import attention_maps as am


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--workdir", action="append", default=[])
  ap.add_argument("--out", default=None, help="default: <workdir>/attention_maps")
  ap.add_argument("--index", type=int, default=0, help="test image / sentence")
  ap.add_argument("--query", default=None, help="row,col of the MNIST query pixel")
  ap.add_argument("--page", default=None, help="also write a results page here")
  ap.add_argument("--page_only", action="store_true",
                  help="rewrite the page (default results/attention_maps) from its maps.json")
  ap.add_argument("--add", action="store_true",
                  help="--page: keep the page's other maps (its maps.json), add these")
  ap.add_argument("--reuse", action="store_true",
                  help="--page: use maps an earlier run drew (<out>/maps.json)")
  ap.add_argument("--note", action="append", default=[],
                  help="workdir=text: a line under that workdir's heading on the page "
                       "(all=text: under every workdir's without one of its own)")
  a = ap.parse_args(argv)
  if a.page_only:
    page = a.page or "results/attention_maps"
    saved = pages.read_json(os.path.join(page, "maps.json"))
    am.write_page(page, saved["run"], saved["maps"])
    return
  if not a.workdir:
    ap.error("--workdir is required (or --page_only)")
  from absl import logging
  logging.set_verbosity(logging.WARNING)
  query = tuple(int(x) for x in a.query.split(",")) if a.query else None
  notes = dict(n.split("=", 1) for n in a.note)
  infos = []
  for wd in a.workdir:
    out = a.out if a.out and len(a.workdir) == 1 else os.path.join(wd, "attention_maps")
    done = os.path.join(out, "maps.json")
    info = (pages.read_json(done) if a.reuse and os.path.exists(done)   # an earlier draw
            else am.draw(wd, out, a.index, query))
    info["out"] = out
    if wd in notes or "all" in notes:
      info["note"] = notes.get(wd, notes.get("all"))
    infos.append(info)
    print(f"drew {len(info['files'])} PNGs into {out}", flush=True)
  if a.page:
    run = pages.run_record(pages.command_line("scripts.attention_maps", argv))
    if a.add:               # the page keeps its run; the added sections name theirs
      saved = pages.read_json(os.path.join(a.page, "maps.json"))
      infos = am.merged(saved, run, infos)
      run = saved["run"]
    am.write_page(a.page, run, infos)
    print(f"wrote {a.page}/README.md", flush=True)


if __name__ == "__main__":
  main()
