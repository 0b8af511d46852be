"""The KV-cache frontier page, results/kv_cache/ (the study: studies/bench/kv_cache.py):
bytes cached per token, decode µs per token at 1k/4k/16k positions and the error against
exact softmax, for MHA, GQA(4), MQA, MLA (two latent widths), int8 and fp8 caches and
the sliding window, in one run (about 3 minutes on 2 CPU cores); and the decode-state
bytes of whole 4-layer stacks, hybrids (gpt-oss and Qwen3-Next styles) beside pure ones,
computed by models.count (so --page_only writes them too).

  python -m scripts.kv_cache [--contexts 1024,4096,16384] [--steps 16] [--rounds 5]
  python -m scripts.kv_cache --page_only    # the page from results.json, nothing measured
"""
import argparse
import os

from studies.bench import kv_cache, kv_cache_page
from studies.core import pages


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--contexts", default="1024,4096,16384")
  ap.add_argument("--heads", type=int, default=8)
  ap.add_argument("--head_dim", type=int, default=64)
  ap.add_argument("--steps", type=int, default=16)
  ap.add_argument("--rounds", type=int, default=5)
  ap.add_argument("--out", default="results/kv_cache")
  ap.add_argument("--page_only", action="store_true", help="the page from results.json")
  a = ap.parse_args(argv)
  if a.page_only:
    rec = pages.read_json(os.path.join(a.out, "results.json"))
  else:
    s = kv_cache.Setup(heads=a.heads, head_dim=a.head_dim, steps=a.steps, rounds=a.rounds,
                       contexts=tuple(int(x) for x in a.contexts.split(",")))
    rec = kv_cache.measure(s, pages.command_line("scripts.kv_cache", argv),
                           log=lambda m: print(m, flush=True))
  kv_cache_page.write(rec, a.out)
  print(f"wrote {a.out}/README.md, results.json and kv_cache.png")


if __name__ == "__main__":
  main()
