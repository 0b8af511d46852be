"""The Pallas `flash_pallas` kernel on a GPU against cuDNN and XLA: tuning, speed, errors
(what it measures: studies/bench/gpu.py).

  python -m scripts.benchmark_gpu [--out=results/benchmarks] [--lens=1024,...,16384]
                                  [--head_dims=64,128] [--tune_len=4096] [--runs=10]
                                  [--grid=128/64/4/3,128/64/8/2] [--paths=cudnn,xla]
  python -m scripts.benchmark_gpu --dry --out=OUT_DIR  # CPU: interpret mode, tiny shapes
  python -m scripts.benchmark_gpu --page_only [--out=...]   # gpu_*.md from gpu_*.json
  python -m scripts.benchmark_gpu --tile_errors   # bf16 errors per shape and tile choice

Writes <out>/gpu_<device>.json and <out>/gpu_<device>.md (gpu_h100, gpu_h200, gpu_dry),
with the device, jax version and date.
"""
from __future__ import annotations

import argparse
import glob
import os

import jax

from studies.bench import gpu as G
from studies.core import pages


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--out", default="results/benchmarks")
  ap.add_argument("--lens", default="1024,2048,4096,8192,16384")
  ap.add_argument("--head_dims", default="64,128")
  ap.add_argument("--causal", default="false,true")
  ap.add_argument("--tune_len", type=int, default=4096)
  ap.add_argument("--runs", type=int, default=10)
  ap.add_argument("--grid", default="",
                  help="tiles to tune over, block_q/block_k/num_warps/num_stages "
                       "comma-separated (e.g. 128/64/4/3,128/64/8/2); default the full grid")
  ap.add_argument("--paths", default=",".join(G.PATHS),
                  help=f"peers to time beside flash_pallas (of {', '.join(G.PATHS)})")
  ap.add_argument("--dry", action="store_true",
                  help="CPU test: interpret mode, tiny shapes, no cuDNN")
  ap.add_argument("--page_only", action="store_true", help="gpu_*.md from <out>/gpu_*.json")
  ap.add_argument("--tile_errors", action="store_true",
                  help="only the bf16 error of flash_pallas per shape and tile choice "
                       "against float32 softmax (the GPU-only discrepancy of 2026-11-26)")
  a = ap.parse_args(argv)
  if a.page_only:
    for p in sorted(glob.glob(os.path.join(a.out, "gpu_*.json"))):
      G.write_page(pages.read_json(p), a.out)
    return
  if a.tile_errors:
    G.tile_errors(interpret=jax.default_backend() != "gpu", log=lambda s: print(s, flush=True))
    return
  if jax.default_backend() != "gpu" and not a.dry:
    raise SystemExit("benchmark_gpu: no GPU backend here (jax.default_backend() is "
                     f"{jax.default_backend()!r}); use --dry for a CPU test of the script")
  os.makedirs(a.out, exist_ok=True)
  res = G.run(a.out, pages.command_line("scripts.benchmark_gpu", argv),
              lens=[int(x) for x in a.lens.split(",")],
              head_dims=[int(x) for x in a.head_dims.split(",")],
              causals=[x.strip() == "true" for x in a.causal.split(",")],
              tune_len=a.tune_len, runs=a.runs, dry=a.dry,
              grid=G.parse_grid(a.grid) if a.grid else None,
              only=tuple(x.strip() for x in a.paths.split(",")),
              log=lambda s: print(s, flush=True))
  G.write_page(res, a.out)
  print(f"wrote {a.out}/gpu_{res['name']}.md")


if __name__ == "__main__":
  main()
