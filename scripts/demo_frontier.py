"""Completion accuracy and bits/dim against training time, for `make demo` candidates.

  python -m scripts.demo_frontier --out=workdirs/frontier/runs.jsonl \
      --run="s14:1000,2000:image_size=14,model.max_len=196,batch_size=32" ...

Each --run is NAME:STEPS:OVERRIDES. STEPS is a comma list of total step counts; each
one is a separate run of configs/mnist.py with its own cosine schedule to that many
steps (the intermediate checkpoints of one long run would not have annealed), with
the OVERRIDES (comma-separated key=value, dotted keys for the model section). After
training it measures the test bits/dim (--bits_batches batches of 100; 0 = all) and,
on the first --completion_images test images, the digit classifier's completion
accuracy and its baselines (eval.completion_metric). One JSON line per run is
appended to --out: name, steps, overrides, train_seconds (the training loop's wall
time, compilation and its evaluations included), train_cpu_seconds (this process's
CPU time while training, all threads), bits_per_dim, the completion figures, device,
jax, date.

On a shared machine the wall time is inflated by other jobs; the CPU time is not, and
the same run alone on 2 idle cores takes between CPU/2 and CPU seconds of wall time.
`--speed_steps=N` instead times N training steps of each config here (after one
compiling step): steps/s and CPU seconds per step.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import time

import jax


def parse_run(spec: str):
  """'name:1000,2000:k=v,k2=v2' -> (name, [1000, 2000], {k: v, k2: v2})."""
  parts = spec.split(":", 2)
  if len(parts) < 2:
    raise ValueError(f"--run {spec!r}: expected NAME:STEPS[:key=value,...]")
  name, steps = parts[0], [int(s) for s in parts[1].split(",") if s]
  over = {}
  for kv in (parts[2].split(",") if len(parts) > 2 and parts[2] else []):
    k, sep, v = kv.partition("=")
    if not sep:
      raise ValueError(f"--run {spec!r}: override {kv!r} is not key=value")
    try:
      over[k] = ast.literal_eval(v)
    except (ValueError, SyntaxError):
      over[k] = v
  return name, steps, over


def make_config(over: dict, steps: int):
  from configs import mnist
  c = mnist.get_config()
  for k, v in over.items():
    node, *path = k.split(".")
    target = c
    for p in ([node] + path)[:-1]:
      target = target[p]
    leaf = ([node] + path)[-1]
    if leaf not in target:
      raise KeyError(f"override {k!r}: no such config field")
    target[leaf] = v
  c.update(dict(num_train_steps=steps, eval_every=steps, checkpoint_every=steps,
                eval_batches=1, progress=False, log_every=min(int(c.log_every), steps)))
  return c


def measure(name, steps, over, root, completion_images, bits_batches=0, seed=0):
  import train
  c = make_config(over, steps)
  wd = os.path.join(root, f"{name}_{steps}")
  cpu0 = time.process_time()
  train.train_and_evaluate(c, wd)
  cpu = time.process_time() - cpu0
  recs = [json.loads(l) for l in open(os.path.join(wd, "metrics.jsonl"))]
  speed = [r for r in recs if "steps_per_s" in r][-1]
  return {"name": name, "steps": steps, "overrides": over,
          "train_seconds": speed["step"] / speed["steps_per_s"], "train_cpu_seconds": cpu,
          "params": next(r["params"] for r in recs if "params" in r),
          **judge(wd, completion_images, bits_batches, seed)}


def judge(wd, completion_images, bits_batches=0, seed=0):
  """Test bits/dim and the completion figures of the finished run in `wd`."""
  from trainer import evaluate
  import input_pipeline
  import train
  config, model, step = train.load_model(wd)
  config.eval_batches = bits_batches
  config.completion_images = completion_images
  task = input_pipeline.create(config)
  t = time.perf_counter()
  ev = train.evaluate(model, task, config)
  eval_s = time.perf_counter() - t
  model.eval()
  out = os.path.join(wd, "eval")
  os.makedirs(out, exist_ok=True)
  comp = evaluate.completion_metric(config, task, model, out, "cache",
                                    jax.random.PRNGKey(seed), wd, step)
  return {"bits_per_dim": ev["bits_per_dim"], "bits_eval_seconds": eval_s, **comp,
          "device": jax.devices()[0].device_kind, "jax": jax.__version__,
          "cpu_count": os.cpu_count(), "date": time.strftime("%Y-%m-%d")}


def speed(name, over, n, root):
  """Steps/s of n training steps here, after one (compiling) step."""
  import train
  c = make_config(over, n + 1)
  c.eval_every = c.checkpoint_every = 10 ** 9        # no eval, one final checkpoint
  wd = os.path.join(root, f"speed_{name}")
  import shutil
  shutil.rmtree(wd, ignore_errors=True)
  c1 = make_config(over, 1)
  train.train_and_evaluate(c1, wd)                    # compiles; checkpoint at step 1
  t, cpu0 = time.perf_counter(), time.process_time()
  train.train_and_evaluate(c, wd)                     # resumes: n timed steps
  dt, cpu = time.perf_counter() - t, time.process_time() - cpu0
  return {"name": name, "overrides": over, "speed_steps": n, "steps_per_s": n / dt,
          "cpu_seconds_per_step": cpu / n,
          "device": jax.devices()[0].device_kind, "cpu_count": os.cpu_count(),
          "load_avg_1min": os.getloadavg()[0], "date": time.strftime("%Y-%m-%d")}


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
  if a.rejudge:
    recs = [json.loads(l) for l in open(a.out) if l.strip()]
    for r in recs:
      wd = os.path.join(a.root, f"{r['name']}_{r['steps']}")
      r.update({**judge(wd, a.completion_images, a.bits_batches), "date": r["date"],
                "rejudged": time.strftime("%Y-%m-%d")})
      print(json.dumps({k: v for k, v in r.items() if not k.endswith("_se")}), flush=True)
    with open(a.out, "w") as f:
      f.writelines(json.dumps(r) + "\n" for r in recs)
    return
  for spec in a.run:
    name, steps, over = parse_run(spec)
    todo = [None] if a.speed_steps else steps
    for s in todo:
      rec = (speed(name, over, a.speed_steps, a.root) if a.speed_steps
             else measure(name, s, over, a.root, a.completion_images, a.bits_batches))
      with open(a.out, "a") as f:
        f.write(json.dumps(rec) + "\n")
      print(json.dumps({k: v for k, v in rec.items() if not k.endswith("_se")}),
            flush=True)


if __name__ == "__main__":
  main()
