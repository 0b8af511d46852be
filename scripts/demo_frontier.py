"""Completion accuracy and bits/dim against training time, for `make demo` candidates
(the runs: studies/repro/demo.py).

  python -m scripts.demo_frontier --out=workdirs/frontier/runs.jsonl \
      --run="s14:1000,2000:image_size=14,model.max_len=196,batch_size=32" ...

Each --run is NAME:STEPS:OVERRIDES. STEPS is a comma list of total step counts; each
one is a separate run of configs/mnist.py with its own cosine schedule to that many
steps (the intermediate checkpoints of one long run would not have annealed), with
the OVERRIDES (comma-separated key=value, dotted keys for the model section). After
training it measures the test bits/dim (--bits_batches batches of 100; 0 = all) and,
on the first --completion_images test images, the digit classifier's completion
accuracy and its baselines. One JSON line per run is appended to --out: name, steps,
overrides, train_seconds (the training loop's wall time, compilation and its
evaluations included), train_cpu_seconds (this process's CPU time while training,
all threads), bits_per_dim, the completion figures, device, jax, date.

On a shared machine the wall time is inflated by other jobs; the CPU time is not, and
the same run alone on 2 idle cores takes between CPU/2 and CPU seconds of wall time.
`--speed_steps=N` instead times N training steps of each config here (after one
compiling step): steps/s and CPU seconds per step.
"""
from __future__ import annotations

import argparse
import json
import os

from studies.core import pages
from studies.repro import demo


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--run", action="append", default=[], help="NAME:STEPS:OVERRIDES")
  ap.add_argument("--out", required=True, help="JSON lines file, appended to")
  ap.add_argument("--root", default="workdirs/frontier", help="workdirs go here")
  ap.add_argument("--completion_images", type=int, default=500)
  ap.add_argument("--bits_batches", type=int, default=0,
                  help="test batches for bits/dim (0 = the whole test split)")
  ap.add_argument("--rejudge", action="store_true",
                  help="re-measure bits/dim and the completion figures of the runs "
                       "already in --out from their workdirs under --root (training "
                       "figures kept), and rewrite --out")
  ap.add_argument("--speed_steps", type=int, default=0,
                  help="time this many steps of each config instead of training runs")
  a = ap.parse_args(argv)
  from absl import logging
  logging.set_verbosity(logging.WARNING)
  os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
  show = lambda r: print(json.dumps({k: v for k, v in r.items() if not k.endswith("_se")}),
                         flush=True)
  if a.rejudge:
    recs = demo.read_frontier(a.out)
    for r in recs:
      wd = os.path.join(a.root, f"{r['name']}_{r['steps']}")
      r.update({**demo.judge(wd, a.completion_images, a.bits_batches), "date": r["date"],
                "rejudged": pages.today()})
      show(r)
    with open(a.out, "w") as f:
      f.writelines(json.dumps(r) + "\n" for r in recs)
    return
  for spec in a.run:
    name, steps, over = demo.parse_run(spec)
    for s in ([None] if a.speed_steps else steps):
      rec = (demo.speed(name, over, a.speed_steps, a.root) if a.speed_steps
             else demo.measure(name, s, over, a.root, a.completion_images, a.bits_batches))
      with open(a.out, "a") as f:
        f.write(json.dumps(rec) + "\n")
      show(rec)


if __name__ == "__main__":
  main()
