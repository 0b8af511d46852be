"""`flash_mgpu` on a Hopper GPU against cuDNN and jax's attention_mgpu: correctness
against float64, tuning, speed (what it measures: studies/bench/mgpu.py).

  python -m scripts.mgpu_bench [--out=results/benchmarks] [--lens=4096,8192,16384]
                               [--head_dims=128,64] [--causal=false,true] [--runs=10]
                               [--budget_s=SECONDS]
  python -m scripts.mgpu_bench --page_only [--out=...]   # mgpu_*.md from mgpu_*.json

Writes <out>/mgpu_<device>.json (after every case) and <out>/mgpu_<device>.md.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys

import jax

from studies.bench import mgpu as M
from studies.core import pages


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--out", default="results/benchmarks")
  ap.add_argument("--lens", default="4096,8192,16384")
  ap.add_argument("--head_dims", default="128,64")
  ap.add_argument("--causal", default="false,true")
  ap.add_argument("--tune_len", type=int, default=4096)
  ap.add_argument("--runs", type=int, default=10)
  ap.add_argument("--budget_s", type=float, default=None,
                  help="start no new (D, causal) case after this many seconds")
  ap.add_argument("--page_only", action="store_true")
  a = ap.parse_args(argv)
  if a.page_only:
    for p in sorted(glob.glob(os.path.join(a.out, "mgpu_*.json"))):
      M.write_page(pages.read_json(p), a.out)
    return
  if jax.default_backend() != "gpu":
    sys.exit("mgpu_bench: needs a GPU (jax sees " + str(jax.devices()) + "); the kernels' "
             "CPU checks are tests/attention/test_flash_mgpu.py")
  res = M.run(a.out, "python -m scripts.mgpu_bench " + " ".join(argv or sys.argv[1:]),
              lens=[int(x) for x in a.lens.split(",")],
              head_dims=[int(x) for x in a.head_dims.split(",")],
              causals=[x.strip() == "true" for x in a.causal.split(",")],
              tune_len=a.tune_len, runs=a.runs, budget_s=a.budget_s,
              log=lambda s: print(s, flush=True))
  M.write_page(res, a.out)


if __name__ == "__main__":
  main()
