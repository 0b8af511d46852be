"""MNIST image completion of "Transformers are RNNs" (Katharopoulos et al., ICML 2020),
reproduced with one command: `results/mnist_completion/` (the study:
studies/repro/mnist.py).

  python -m scripts.reproduce_mnist --preset=cpu     # about an hour on 2 CPU cores
  python -m scripts.reproduce_mnist --preset=paper   # the paper's settings (a GPU)
  python -m scripts.reproduce_mnist --preset=smoke   # tiny, < 3 min (tests)
  python -m scripts.reproduce_mnist --page_only      # the page from results.json
  python -m scripts.reproduce_mnist --shipped        # the shipped models (pretrained/):
                                                     # completions judged, speed ratios

It trains (or reuses the finished workdirs of) a softmax and a linear-attention pixel
Transformer with identical settings, then measures bits/dim, generation speed per
decode mode, completions and their digit-classifier reading, and attention time
against length; every number on the page comes from the run that wrote it.
"""
from __future__ import annotations

import argparse
import os

from studies.core import pages
from studies.repro import mnist as rm, mnist_page as reproduce_mnist_page


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--preset", choices=sorted(rm.PRESETS), default="cpu")
  ap.add_argument("--out", default=None,
                  help=f"default: {rm.OUT} (cpu), {rm.OUT}/<preset>")
  ap.add_argument("--workdir", default="workdirs/reproduce_mnist",
                  help="train.py workdirs, one per preset and model (finished runs "
                       "are reused, interrupted ones resume)")
  ap.add_argument("--data_dir", default=None, help="default: $ATTNLAB_DATA_DIR or .data")
  ap.add_argument("--page_only", action="store_true",
                  help="rewrite README.md from <out>/results.json (the figures of the "
                       "run that wrote it; the preset's description as it is now)")
  ap.add_argument("--shipped", action="store_true",
                  help="measure the shipped models (pretrained/) into <out>/shipped.json "
                       "and the PNGs, then rewrite the page; the preset's run is kept")
  ap.add_argument("--gen_batch", type=int, default=16,
                  help="--shipped: images per generation call")
  a = ap.parse_args(argv)
  out = a.out or (rm.OUT if a.preset == "cpu" else os.path.join(rm.OUT, a.preset))
  command = pages.command_line("scripts.reproduce_mnist", argv)
  if a.shipped:
    rm.shipped_run(out, gen_batch=a.gen_batch, data_dir=a.data_dir, command=command)
  if a.page_only or a.shipped:
    res = pages.read_json(os.path.join(out, "results.json"))
    res["preset"]["what"] = rm.PRESETS[res["preset_name"]].what
  else:
    res = rm.run(a.preset, out, os.path.join(a.workdir, a.preset), data_dir=a.data_dir,
                 command=command)
  reproduce_mnist_page.write_page(res, out,
                                  pages.read_json(os.path.join(out, "shipped.json")))


if __name__ == "__main__":
  main()
