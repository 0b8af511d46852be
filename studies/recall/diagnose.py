"""Diagnostic train.py runs of the MQAR task, recorded from their workdirs (issue 78:
a softmax cell under 99% is a fault of the setup until shown otherwise): each run's
command (the flags by which its config differs from the preset it started from), the
settings that matter here, and its evaluations, read from workdir/config.json and
workdir/metrics.jsonl, into a named block of results/variants_mqar/
zoology_cpu_diagnostics.json with a reading computed from them (`summary`). Nothing
typed by hand but the block's question (`why`).

The run: scripts/mqar_diagnose.py.
"""
from __future__ import annotations

import json
import os

from studies.core import pages

RECALL = 0.99           # studies.recall.zoology_page's bar: softmax should reach it
DIAGNOSTICS = "results/variants_mqar/zoology_cpu_diagnostics.json"


def _flat(d: dict, prefix: str = "") -> dict:
  out = {}
  for k, v in d.items():
    if isinstance(v, dict) and k != "attention_options":
      out.update(_flat(v, f"{prefix}{k}."))
    else:
      out[prefix + k] = v
  return out


def command(config: dict, base: dict, workdir: str, base_name: str) -> str:
  """`python train.py --config=<base_name> --config.<key>=<value> ..`: the flags by which
  `config` (a workdir's config.json "config") differs from `base` (the preset's
  config as a dict), data_dir left out, then --workdir."""
  got, ref = _flat(config), _flat(base)
  flags = [f"--config.{k}={'' if v is None else v}" for k, v in sorted(got.items())
           if k != "data_dir" and ref.get(k, object()) != v]
  return " ".join(["python train.py", f"--config={base_name}", *flags,
                   f"--workdir={workdir}"])


def record(workdir: str, base_name: str = "configs/mqar.py:cpu") -> dict:
  """A diagnostic run from its workdir: its command, tokens, pairs, batch, rate,
  schedule, planned steps, training mixture, the last logged step, and every
  evaluation (step, eval_loss, token_accuracy)."""
  from configs import mqar as mqar_cfg
  preset = base_name.split(":", 1)[1] if ":" in base_name else ""
  base = json.loads(mqar_cfg.get_config(preset).to_json_best_effort())
  with open(os.path.join(workdir, "config.json")) as f:
    c = json.load(f)["config"]
  recs = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl")) if l.strip()]
  evals = [{"step": r["step"], "eval_loss": r["eval_loss"],
            "token_accuracy": r["token_accuracy"]} for r in recs if "token_accuracy" in r]
  m = c[c["task"]]                  # the task's own config section: config.mqar
  return {"workdir": os.path.basename(os.path.normpath(workdir)),
          "command": command(c, base, workdir, base_name),
          "attention": c.get("attention") or c["model"]["attention"], "width": c["model"]["d_model"],
          "tokens": m["seq_len"], "pairs": m["num_pairs"], "batch": c["batch_size"],
          "lr": c["learning_rate"], "schedule": c["schedule"],
          "num_train_steps": c["num_train_steps"], "train_mix": m.get("train_mix", ""),
          "stopped_at_step": max(r["step"] for r in recs), "evals": evals}


def summary(run: dict) -> str:
  """One line from a run's record: its settings, its last evaluation, and the first
  step at or above RECALL (or 'never in N steps')."""
  ev = run["evals"]
  first = next((e["step"] for e in ev if e["token_accuracy"] >= RECALL), None)
  last = ev[-1] if ev else None
  mix = f", trained on {run['train_mix']} too" if run.get("train_mix") else ""
  head = (f"{run['attention']} w{run['width']}, {run['tokens']} tokens / {run['pairs']} "
          f"pairs, batch {run['batch']}, rate {run['lr']:g} {run['schedule']}{mix}")
  if last is None:
    return head + ": no evaluation"
  reach = (f"first >= {RECALL:.0%} at step {first}" if first is not None else
           f"never >= {RECALL:.0%} in {run['stopped_at_step']} steps")
  return (f"{head}: {last['token_accuracy']:.1%} at step {last['step']}; {reach}")


def add_block(name: str, why: str, workdirs, path: str = DIAGNOSTICS,
              base_name: str = "configs/mqar.py:cpu", command_line: str = "") -> dict:
  """Writes block `name` of the diagnostics JSON at `path`: {why, runs, reading (a
  `summary` per run), date, command}; other blocks are kept. Returns the block."""
  block = {"why": why, "runs": [record(w, base_name) for w in workdirs],
           "date": pages.today(), "command": command_line}
  block["reading"] = [summary(r) for r in block["runs"]]
  data = pages.read_json(path, {})
  data[name] = block
  pages.write_json(path, data)
  return block
