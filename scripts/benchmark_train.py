"""The research loop's speed: train.py's loop against the bare step, MFU against the
machine's measured matmul peak, generation images/s, and bf16 against float32
(what each section measures: studies/bench/train.py).

  python -m scripts.benchmark_train --preset=cpu [--sections=train,generate,decode,bf16]
      [--batches=4,16] [--variants=softmax,linear] [--dtypes=float32,bfloat16]
      [--gen_batches=1,16] [--trace=softmax,bfloat16,16]
      [--image_size=8] [--n=40] [--rounds=12]

The CPU's loop-overhead target (loop >= 0.95x the bare step, <= 1 ms of overhead per
step) is measured at the paper's model over 8x8 images (64 pixels), where a step
takes tens of ms and 40 steps per round resolve a millisecond; over 784 pixels a CPU
step takes seconds, and the few steps a run can afford drown a millisecond in the
shared machine's noise:

  python -m scripts.benchmark_train --preset=cpu --sections=train --image_size=8 --n=40

Everything is measured in one process and written to
results/benchmarks/train_<device>.json (device = cpu, h100, ...), one run record per
section (a later run of one section replaces the rows it measures again and keeps the
others in a block of their own), and the benchmarks page is rewritten from its JSON
files (`python -m scripts.benchmark --page_only`).
"""
from __future__ import annotations

import argparse
import dataclasses
import os

from studies.bench import page as benchmark_page, trace as tr, train as bt
from studies.core import pages, timing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--preset", default="cpu", choices=sorted(bt.PRESETS))
  ap.add_argument("--sections", default=",".join(bt.SECTIONS))
  ap.add_argument("--batches", default=None)
  ap.add_argument("--variants", default=None)
  ap.add_argument("--dtypes", default=None)
  ap.add_argument("--image_size", type=int, default=None,
                  help="MNIST side of the train section (default: the preset's)")
  ap.add_argument("--gen_batches", default=None,
                  help="generation batch sizes (default: the preset's)")
  ap.add_argument("--n", type=int, default=None, help="timed steps per round")
  ap.add_argument("--rounds", type=int, default=None, help="rounds of n steps")
  ap.add_argument("--data_dir", default="")
  ap.add_argument("--trace", default="",
                  help="VARIANT,DTYPE,BATCH: also write <out>/trace_<device>.tar.gz, a "
                       "jax.profiler trace of 5 bare steps of that row (what bounds it)")
  ap.add_argument("--out", default=os.path.join(ROOT, "results", "benchmarks"))
  a = ap.parse_args(argv)
  sections = [s for s in a.sections.split(",") if s]
  bad = [s for s in sections if s not in bt.SECTIONS]
  if bad:
    raise SystemExit(f"--sections: unknown {bad}; valid: {', '.join(bt.SECTIONS)}")
  p = dataclasses.replace(bt.PRESETS[a.preset], **{
      k: getattr(a, k) for k in ("image_size", "n", "rounds") if getattr(a, k) is not None})
  split = lambda s, f=str: tuple(f(x) for x in s.split(",")) if s else None
  if a.gen_batches:
    p = dataclasses.replace(p, gen_batches=split(a.gen_batches, int))
  os.makedirs(a.out, exist_ok=True)
  res = bt.run(p, a.preset, sections, a.out, pages.command_line("scripts.benchmark_train", argv),
               batches=split(a.batches, int), variants=split(a.variants),
               dtypes=split(a.dtypes), data_dir=a.data_dir, log=lambda s: print(s, flush=True))
  benchmark_page.write(a.out)
  print(f"wrote {a.out}/train_{timing.device_name()}.json and the page")
  if a.trace:
    try:
      v, dt, b = a.trace.split(",")
      b = int(b)
    except ValueError:
      raise SystemExit(f"--trace: {a.trace!r} is not VARIANT,DTYPE,BATCH (e.g. "
                       "softmax,bfloat16,16)")
    path = tr.trace(p, v, dt, b, a.data_dir,
                    os.path.join(a.out, f"trace_{timing.device_name()}.tar.gz"))
    print(f"wrote {path}; the longest ops of its 5 steps (total ms, calls):")
    for proc, name, ms, n in tr.trace_summary(path):
      print(f"  {ms:10.3f} ms {n:6d}x  {proc}: {name[:120]}")
  return res


if __name__ == "__main__":
  main()
