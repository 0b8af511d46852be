"""Speed and memory of every attention variant, decode latency, and the CPU targets:
results/benchmarks/ (what each section measures: studies/bench/benchmark.py).

  python -m scripts.benchmark [--preset=cpu|smoke] [--out=results/benchmarks]
                              [--sections=sweep,decode,targets,generation]
                              [--variants=softmax,flash,...] [--case_limit_s=60]
  python -m scripts.benchmark --page_only [--out=...]   # rewrite README.md from the JSONs

Every number on the page comes from one run of this script (the training-loop
section, from scripts/benchmark_train.py, names its own runs); the page states the
machine, preset, command and date.
"""
from __future__ import annotations

import argparse
import time

import attention
from studies.bench import benchmark, page as benchmark_page
from studies.core import pages

OUT = "results/benchmarks"


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--preset", default="cpu", choices=sorted(benchmark.PRESETS))
  ap.add_argument("--out", default=OUT)
  ap.add_argument("--sections", default=",".join(benchmark.SECTIONS))
  ap.add_argument("--variants", default="", help="comma list (default: all + xla ref)")
  ap.add_argument("--case_limit_s", type=float, default=None)
  ap.add_argument("--page_only", action="store_true",
                  help="rewrite README.md from the JSON files in --out; measure nothing")
  a = ap.parse_args(argv)
  if a.page_only:
    benchmark_page.write(a.out)
    print(f"wrote {a.out}/README.md")
    return
  p = benchmark.PRESETS[a.preset]
  sections = [s for s in a.sections.split(",") if s]
  bad = [s for s in sections if s not in benchmark.SECTIONS]
  if bad:
    raise SystemExit(f"--sections: unknown {bad}; valid: {', '.join(benchmark.SECTIONS)}")
  names = [n for n in a.variants.split(",") if n] or attention.names() + [benchmark.XLA_REF]
  for n in names:
    if n != benchmark.XLA_REF:
      attention.variant(n)   # an unknown name fails here, listing the valid ones
  t0 = time.time()
  benchmark.run(p, a.preset, a.out, sections, names, a.case_limit_s or p.case_limit_s,
                pages.command_line("scripts.benchmark", argv),
                log=lambda s: print(s, flush=True))
  benchmark_page.write(a.out)
  print(f"wrote {a.out}/README.md in {time.time() - t0:.0f} s")


if __name__ == "__main__":
  main()
