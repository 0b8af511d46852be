"""Speed of the gated family's forms and of its decoding (the study:
studies/bench/gated.py).

  python -m scripts.gated_bench [--preset cpu|cpu_small|smoke] [--cases retention,gla,...]
      [--out results/gated]
  python -m scripts.gated_bench --page_only [--out ...]   # the page from bench.json

Writes bench.json, bench.png and README.md to --out. With --cases naming some of the
cases and a bench.json of the same shape already in --out, the cases measured replace
theirs there (studies.bench.gated.merge_case: the page says which run they come from)
and the other cases' rows stay.
"""
import argparse
import os

from studies.bench import gated as gated_bench
from studies.core import pages


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--preset", default="cpu", choices=sorted(gated_bench.PRESETS))
  ap.add_argument("--cases", default=",".join(gated_bench.CASES),
                  help="comma-separated, of: " + ", ".join(gated_bench.CASES))
  ap.add_argument("--out", default="results/gated")
  ap.add_argument("--page_only", action="store_true", help="the page from bench.json")
  a = ap.parse_args(argv)
  cases = a.cases.split(",")
  bad = [c for c in cases if c not in gated_bench.CASES]
  if bad:
    ap.error(f"--cases: unknown {bad}; choose from {list(gated_bench.CASES)}")
  old = pages.read_json(os.path.join(a.out, "bench.json"))
  if a.page_only:
    r = old
  else:
    r = gated_bench.measure(gated_bench.PRESETS[a.preset], a.preset,
                            pages.command_line("scripts.gated_bench", argv), cases,
                            log=lambda s: print(s, flush=True))
    if old and set(cases) < set(old["cases"]) and old["shape"] == r["shape"]:
      for c in cases:
        old = gated_bench.merge_case(old, r, c)
      r = old
  gated_bench.write(r, a.out)
  print(f"wrote {a.out}/README.md and bench.png")


if __name__ == "__main__":
  main()
