"""Measures the output error of the int8 KV cache against the fp32 cache.

  python -m scripts.kv_int8_error [--heads 8 --head_dim 64 --len 1024 --batch 4]

Decodes a random unit-normal sequence token by token with both caches (one jitted
lax.scan each, `studies.bench.quant_error.decode_all`) and prints the max and mean
absolute output error, the rigorous bound of attention.int8_output_error_bound, and the
cache sizes, with the run record. The numbers quoted in docs/variants.md come from this
script.
"""
import argparse
import json

from studies.bench import quant_error
from studies.core import pages


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--batch", type=int, default=4)
  p.add_argument("--len", type=int, default=1024)
  p.add_argument("--heads", type=int, default=8)
  p.add_argument("--head_dim", type=int, default=64)
  p.add_argument("--seed", type=int, default=0)
  a = p.parse_args(argv)
  res = quant_error.kv_int8(a.batch, a.len, a.heads, a.head_dim, a.seed)
  res["run"] = pages.run_record(pages.command_line("scripts.kv_int8_error", argv))
  print(json.dumps(res, indent=1))


if __name__ == "__main__":
  main()
