"""Shipping a trained model: a train.py workdir's checkpoint exported into the format
of trainer/pretrained.py (`pretrained/<name>/`), with its provenance, and the index
page of pretrained/ with the frontier runs that chose the shipped models' size.

  meta = export("workdirs/ship/linear", "mnist14_linear", command=..., commit=...)
  write_index(pretrained.ROOT)        # pretrained/README.md from the records alone

Every figure in a model's pretrained.json is read from its workdir (config.json,
runtime.json, metrics.jsonl, .lock) or measured by `export` (the test bits/dim);
the command and the commit of the code that trained it are the caller's word
(`python -m scripts.export_pretrained --command=... --commit=...`).
"""
from __future__ import annotations

import datetime
import json
import os
import time

from studies.core import completion, pages, runs
from trainer import pretrained

FRONTIER = "frontier"      # pretrained/frontier/: runs.jsonl, speed.jsonl


def _lock_record(workdir: str) -> dict:
  """The last train.py that held the workdir (pid, host, since, command cut at 200
  characters), or {}."""
  try:
    with open(os.path.join(workdir, ".lock")) as f:
      return json.loads(f.read())
  except (OSError, ValueError):
    return {}


def wall_seconds(workdir: str, step: int) -> float | None:
  """Wall seconds of training up to `step` (the last train record at or before it,
  over every segment of the run: studies.core.runs.timeline), or None without records."""
  before = [t for r, t, _ in runs.timeline(runs.read_metrics(workdir)) if r["step"] <= step]
  return before[-1] if before else None


def export(workdir: str, name: str, *, root=None, step: int | None = None,
           command: str | None = None, commit: str | None = None, machine_note: str = "",
           bits_batches: int = 0, data_dir: str | None = None, log=print) -> dict:
  """Exports the checkpoint `step` (default the newest) of `workdir` as root/<name>
  (root default pretrained.ROOT) with its provenance; returns its pretrained.json.

  The test bits/dim is measured here on the test split (bits_batches batches of
  eval_batch_size images; 0 = all of it). command defaults to the one in workdir/.lock
  (marked as cut at 200 characters when it is); commit to "not recorded".
  """
  from data import pipeline
  import trainer
  config, model, step = trainer.load_model(workdir, step)
  saved = pages.read_json(os.path.join(workdir, "config.json"))
  saved["config"].update(init_from="", data_dir="")       # nothing outside the folder
  if saved["config"].get("lora"):
    saved["config"]["lora"]["base_workdir"] = ""
  ecfg = config.copy_and_resolve_references()
  ecfg.eval_batches = int(bits_batches)
  if data_dir:
    ecfg.data_dir = data_dir
  t = time.perf_counter()
  m = trainer.evaluate_model(model, pipeline.create(ecfg), ecfg)
  log(f"{name}: test bits/dim {m['bits_per_dim']:.4f} on {m['eval_sequences']} images "
      f"({time.perf_counter() - t:.0f} s)")
  lock = _lock_record(workdir)
  if command is None:
    command = lock.get("command", "not recorded")
    if len(command) >= 200:
      command += " [cut at 200 characters in workdir/.lock]"
  ckpt = os.path.join(workdir, "checkpoints", str(step))
  written = datetime.datetime.fromtimestamp(os.path.getmtime(ckpt), datetime.timezone.utc)
  recs = runs.read_metrics(workdir)
  meta = {"name": name, "config": saved["config"], "model": saved["model"],
          "command": command, "commit": commit or "not recorded",
          "machine": {**pages.read_json(os.path.join(workdir, "runtime.json"), {}),
                      "note": machine_note},
          "started": lock.get("since"), "date": written.strftime("%Y-%m-%d %H:%M UTC"),
          "train_wall_seconds": wall_seconds(workdir, step), "steps": step,
          "num_train_steps": int(config.num_train_steps),
          "params": next((r["params"] for r in recs if "params" in r), None),
          "test_bits_per_dim": float(m["bits_per_dim"]),
          "test_images": int(m["eval_sequences"]), "exported": pages.today()}
  meta = pretrained.save(os.path.join(root or pretrained.ROOT, name), model, meta)
  log(f"{name}: step {step} of {meta['num_train_steps']}, {meta['bytes'] / 2 ** 20:.2f} "
      f"MiB, sha256 {meta['sha256']}")
  return meta


# ---- the index page --------------------------------------------------------------------

def frontier_command(rec: dict, out: str) -> str:
  """The scripts.demo_frontier command of a frontier record (a training run, or with
  speed_steps a speed run), rebuilt from its name, steps and overrides."""
  over = ",".join(f"{k}={v}" for k, v in rec["overrides"].items())
  if "speed_steps" in rec:
    return (f"python -m scripts.demo_frontier --speed_steps={rec['speed_steps']} "
            f"--out={out} --run={rec['name']}::{over}")
  return f"python -m scripts.demo_frontier --out={out} --run={rec['name']}:{rec['steps']}:{over}"


def _hours(s):
  return "not recorded" if s is None else f"{s / 3600:.2f} h"


def write_index(root=None, judged: dict | None = None) -> str:
  """pretrained/README.md from the shipped models' records and root/frontier/*.jsonl;
  `judged`: {name: {"steps", "completion": figures}} (reproduce_mnist's shipped.json
  models) to table beside them."""
  root = str(root or pretrained.ROOT)
  metas = [pages.read_json(os.path.join(root, n, pretrained.META))
           for n in pretrained.names(root)]
  rows = [[f"`{m['name']}`", m["model"]["attention"],
           f"{m['model']['num_layers']} × d{m['model']['d_model']}", f"{m['params']:,}",
           f"{m['steps']:,} of {m['num_train_steps']:,}", _hours(m["train_wall_seconds"]),
           f"{m['test_bits_per_dim']:.4f} ({m['test_images']:,})",
           f"{m['bytes'] / 2 ** 20:.2f}", m["date"]] for m in metas]
  lines = ["# Shipped pretrained models", "",
           "Trained models to load instead of training them: `trainer.load_model(NAME)`, "
           "`python eval.py --pretrained=NAME`. Each folder holds `weights.npz` (the "
           "float32 parameters, no optimizer state) and `pretrained.json` (the train.py "
           "config, the command, commit, machine, date, wall time, steps, test bits/dim "
           "and the weights' sha256, checked on every load: a mismatch is refused with "
           "`trainer.pretrained.ChecksumError`). Exported from train.py workdirs by "
           "`python -m scripts.export_pretrained` (`studies/repro/shipping.py`); this page is "
           "rewritten from the records by `python -m scripts.export_pretrained "
           "--index_only`.", ""]
  lines += pages.table(["name", "attention", "layers × width", "parameters", "steps",
                        "training wall time", "test bits/dim (images)", "MiB", "date"], rows)
  for m in metas:
    mach = m["machine"]
    lines += ["", f"`{m['name']}`: `{m['command']}` at commit `{m['commit']}` on "
              f"{mach.get('host', 'a machine not recorded')} ({mach.get('backend', '?')}, "
              f"jax {mach.get('jax_version', '?')}){'; ' + mach['note'] if mach.get('note') else ''}; "
              f"sha256 `{m['sha256']}`."]
  if judged:
    steps = {m["name"]: m["steps"] for m in metas}
    stale = sorted(n for n, j in judged.items() if j.get("steps") != steps.get(n))
    any_ = next(iter(judged.values()))
    lines += ["", "## Completions", "",
              "Measured by `python -m scripts.reproduce_mnist --shipped` "
              "([results/mnist_completion](../results/mnist_completion/README.md#the-shipped-models)). "
              + completion.method(any_["completion"], metas[0]["config"]["image_size"]), ""]
    lines += completion.table([(f"`{n}` (step {j.get('steps'):,})", j["completion"])
                               for n, j in sorted(judged.items())])
    if stale:
      lines += ["", f"**Not the shipped step**: {', '.join(stale)} were judged at another "
                "step than the one shipped; rerun the command above."]
  lines += _frontier_lines(os.path.join(root, FRONTIER))
  pages.write_text(os.path.join(root, "README.md"), lines)
  return os.path.join(root, "README.md")


def _frontier_lines(folder: str) -> list[str]:
  """The evidence that chose width, depth, learning rate and batch: the frontier runs
  (equal CPU budget) and the speed runs, with their commands."""
  from studies.repro.demo import read_frontier
  recs = read_frontier(os.path.join(folder, "runs.jsonl"))
  speed = read_frontier(os.path.join(folder, "speed.jsonl"))
  if not recs:
    return []
  rows = [[r["name"], f"{r['params']:,}", r["steps"], f"{r['train_cpu_seconds']:.0f}",
           f"{r['bits_per_dim']:.3f}"] + completion.cells(r) for r in recs]
  lines = ["", "## Why this size: the frontier", "",
           "Candidate linear-attention models at 14×14, each trained for a comparable "
           "CPU budget (the column says each one's) on the same shared 2-core machine, "
           "then measured (test "
           "bits/dim on the whole test split; completions of the first "
           f"{recs[0]['n_images']} test images read by the digit judge). Records: "
           f"[`{FRONTIER}/runs.jsonl`]({FRONTIER}/runs.jsonl), written by these commands (rebuilt "
           "from each record's name, steps and overrides):", ""]
  lines += [f"    {frontier_command(r, 'runs.jsonl')}" for r in recs] + [""]
  lines += pages.table(["run", "parameters", "steps", "train CPU-s", "test bits/dim"]
                       + completion.HEAD, rows)
  low = min(recs, key=lambda r: r["bits_per_dim"])
  most = max(recs, key=lambda r: r["completion_accuracy"])
  small = min(recs, key=lambda r: r["params"])
  if low is most is small:
    lines += ["", f"The smallest model, `{low['name']}`, has the lowest bits/dim and the "
              "most completions read right while costing the least CPU time: on 2 cores "
              "a wider or deeper model buys fewer steps than it gains per step. Its "
              f"settings (lr {low['overrides'].get('learning_rate')}, batch "
              f"{low['overrides'].get('batch_size')}) are the shipped models'."]
  else:
    lines += ["", f"Lowest bits/dim: `{low['name']}`; most completions read right: "
              f"`{most['name']}`."]
  if speed:
    lines += ["", f"Training speed of the candidates ([`{FRONTIER}/speed.jsonl`]"
              f"({FRONTIER}/speed.jsonl); the 1-minute load average beside each, the "
              "machine being shared):", ""]
    lines += [f"    {frontier_command(r, 'speed.jsonl')}" for r in speed] + [""]
    lines += pages.table(["run", "steps/s", "CPU-s per step", "load average"],
                         [[r["name"], f"{r['steps_per_s']:.2f}",
                           f"{r['cpu_seconds_per_step']:.3f}",
                           f"{r['load_avg_1min']:.1f}"] for r in speed])
  return lines
