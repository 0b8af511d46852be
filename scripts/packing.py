"""Packed against length-bucketed Multi30k batches (studies/mechanisms/packing.py):
padding share, real tokens per CPU-second of training steps, test BLEU of short trainings.
Each part updates its section of results/packing/packing.json and rewrites
results/packing/README.md from it.

  python -m scripts.packing --part=padding|throughput|bleu|page [--preset=cpu|smoke]
      [--seeds=0,1] [--out=results/packing] [--workdir=workdirs/packing]

A BLEU sweep trains one run per (seed, arm), seeds in turn, and writes the JSON after
each, so an interrupted sweep keeps the runs it finished (a rerun skips them).
"""
from __future__ import annotations

import argparse
import os

from studies.core import pages
from studies.mechanisms import packing


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--part", required=True, choices=["padding", "throughput", "bleu", "page"])
  ap.add_argument("--preset", default="cpu", choices=sorted(packing.PRESETS))
  ap.add_argument("--seeds", default="0", help="BLEU: comma-separated seeds")
  ap.add_argument("--out", default="results/packing")
  ap.add_argument("--workdir", default="workdirs/packing")
  ap.add_argument("--data_dir", default="")
  a = ap.parse_args(argv)
  path = os.path.join(a.out, "packing.json")
  p = packing.PRESETS[a.preset]
  rec = lambda: pages.run_record(pages.command_line("scripts.packing", argv), a.preset)

  def store(part, value):
    """Writes one part into the JSON as it is now (another part may have run
    meanwhile, in another process), then the page from it."""
    d = pages.read_json(path, {})
    d[part] = value
    pages.write_json(path, d)
    pages.write_text(os.path.join(a.out, "README.md"), packing.page(d))
    return d

  if a.part == "padding":
    store("padding", {**packing.padding(p, a.data_dir), "run": rec()})
  elif a.part == "throughput":
    store("throughput", {**packing.throughput(p, a.data_dir), "run": rec()})
  elif a.part == "bleu":
    for seed in (int(s) for s in a.seeds.split(",")):
      for arm in packing.ARMS:
        bl = pages.read_json(path, {}).get("bleu") or {}
        runs = bl.get("runs", []) if bl.get("preset") == a.preset else []
        if any(r["arm"] == arm and r["seed"] == seed and r["steps"] == p.bleu_steps
               for r in runs):
          continue
        wd = os.path.join(a.workdir, f"{a.preset}_{arm}_s{seed}")
        out = packing.bleu_run(arm, seed, p, wd, a.data_dir)
        bl = pages.read_json(path, {}).get("bleu") or {}
        runs = bl.get("runs", []) if bl.get("preset") == a.preset else []
        store("bleu", {"preset": a.preset, "runs": runs + [out], "run": rec()})
        print(out, flush=True)
  d = pages.read_json(path, {})
  pages.write_text(os.path.join(a.out, "README.md"), packing.page(d))
  print("\n".join(packing.page(d)))


if __name__ == "__main__":
  main()
