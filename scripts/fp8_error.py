"""Error of FP8 attention (per-tensor, per-block, per-block + Hadamard) against float64,
and of the fp8 and int8 KV caches: results/fp8/ (the study: studies/bench/quant_error.py).

  python -m scripts.fp8_error [--lens 1024,2048,4096,8192] [--dims 64,128]
                              [--out results/fp8]
  python -m scripts.fp8_error --page_only [--out results/fp8]   # from results.json

Writes results.json, README.md and rmse.png to --out; every number on the page
comes from the run that wrote results.json.
"""
import argparse
import os

from studies.bench import quant_error
from studies.core import pages


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--lens", default="1024,2048,4096,8192")
  p.add_argument("--dims", default="64,128")
  p.add_argument("--cache_len", type=int, default=1024)
  p.add_argument("--cache_heads", type=int, default=8)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--out", default="results/fp8")
  p.add_argument("--page_only", action="store_true",
                 help="rewrite README.md and rmse.png from <out>/results.json")
  a = p.parse_args(argv)
  if a.page_only:
    r = pages.read_json(os.path.join(a.out, "results.json"))
  else:
    r = quant_error.measure([int(x) for x in a.lens.split(",")],
                            [int(x) for x in a.dims.split(",")], a.cache_len,
                            a.cache_heads, a.seed,
                            pages.command_line("scripts.fp8_error", argv))
  quant_error.write(r, a.out)
  print(f"wrote {a.out}")


if __name__ == "__main__":
  main()
