"""Writes results/mnist_demo/ from a `make demo` workdir: the PNGs and a README page.

  python -m scripts.demo_results --workdir=workdirs/mnist_demo

Every number on the page is read from the workdir's files (metrics.jsonl,
eval/eval.json, config.json) written by train.py and eval.py in that one run.
"""
import argparse
import datetime
import json
import math
import os
import platform
import shutil

import jax

OUT = "results/mnist_demo"


def frontier_section(path, ev, last, steps):
  """The demo_frontier.py records as a table: what a 2-core budget buys; `ev`, `last`
  (the last train record) and `steps` are this demo run's, for the extrapolation."""
  if not os.path.isfile(path):
    return ""
  runs = [json.loads(l) for l in open(path) if l.strip()]
  rows = "\n".join(
      f"| {r['overrides'].get('attention', 'linear')} | {r['overrides'].get('image_size', 28)}² "
      f"| {r['steps']} | {r['train_cpu_seconds']:.0f} | {r['bits_per_dim']:.3f} "
      f"| {100 * r['completion_accuracy']:.1f} ± {100 * r['completion_accuracy_se']:.1f} "
      f"| {100 * r['blank_accuracy']:.1f} | {100 * r['completion_lead_over_blank']:+.1f} "
      f"| {r['date']} |" for r in runs)
  best = max(runs, key=lambda r: r["completion_accuracy"])
  gains = [(b["completion_accuracy"] - a["completion_accuracy"])
           / math.log2(b["steps"] / a["steps"])
           for a in runs for b in runs
           if a["name"] == b["name"] and b["steps"] > a["steps"]]
  gain = ""
  if gains and "completion_accuracy" in ev:
    g = sum(gains) / len(gains)
    x = 2 ** ((0.7 - ev["completion_accuracy"]) / g)
    gain = (f"Doubling the training steps added {100 * g:.0f} points of completion "
            f"accuracy{' (mean over the pairs above)' if len(gains) > 1 else ' (one pair of runs: a rough rate)'}. At that "
            f"rate this demo run ({100 * ev['completion_accuracy']:.0f}%) would need about "
            f"{x:.1f}× its {steps} steps to reach 70%: {x * steps / last['steps_per_s'] / 60:.0f} "
            f"minutes of training at its {last['steps_per_s']:.1f} steps/s, before the "
            "classifier and the evaluation")
  return f"""
## The frontier: what 2 CPU cores buy

The issue's bar for this demo is 70% completion accuracy and +15 points over the
blank-bottom baseline within 10 minutes on 2 cores. It is not reached. These are the
candidate runs measured for it by `python -m scripts.demo_frontier` (records in
[`frontier_runs.jsonl`](frontier_runs.jsonl): d_model 64, 2 layers, batch 32, lr 3e-3,
cosine schedule; CPU seconds of training, all threads, because the machine was shared
while they ran: on 2 idle cores the wall time is between half of it and all of it):

| attention | image | steps | train CPU-s | test bits/dim | completions read right (%) | blank bottom (%) | lead (points) | date |
|---|---|---|---|---|---|---|---|---|
{rows}

The best, {best['overrides'].get('attention', 'linear')} at {best['steps']} steps,
reaches {100 * best['completion_accuracy']:.0f}%. {gain}. The bound is training
compute on 2 cores (at 800 steps the completions are still noisy strokes that the
classifier often reads as the digit the top half already suggests). At 14×14 the
blank-bottom baseline is high (the top half alone is read right about half the time),
so the 70% bar binds before the +15 points do. A GPU run of the paper's model
([results/mnist_completion](../mnist_completion/README.md)) is where the bar is met or
missed for the model rather than for the budget.
"""


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--workdir", required=True)
  ap.add_argument("--out", default=OUT)
  ap.add_argument("--config_file", default="configs/mnist_demo.py",
                  help="the config the workdir was trained with (named on the page)")
  ap.add_argument("--frontier", default=os.path.join(OUT, "frontier_runs.jsonl"),
                  help="scripts/demo_frontier.py records, tabled on the page if present")
  a = ap.parse_args(argv)
  recs = [json.loads(l) for l in open(os.path.join(a.workdir, "metrics.jsonl"))]
  ev = json.load(open(os.path.join(a.workdir, "eval", "eval.json")))
  cfg = json.load(open(os.path.join(a.workdir, "config.json")))
  m, c = cfg["model"], cfg["config"]
  train = [r for r in recs if "train_loss" in r]
  first = next(r for r in recs if "params" in r)
  os.makedirs(a.out, exist_ok=True)
  for f in ("completions.png", "samples.png"):
    shutil.copy(os.path.join(a.workdir, "eval", f), os.path.join(a.out, f))
  n_eval = ev["eval_sequences"]
  side = c.get("image_size", 28)
  pct = lambda k: f"{100 * ev[k]:.1f}% ± {100 * ev[k + '_se']:.1f}"
  judged = "" if "completion_accuracy" not in ev else f"""
Are the completions digits? The digit classifier of `models/classifier.py` (a small
CNN trained on {side}×{side} MNIST, {100 * ev['classifier_test_accuracy']:.2f}% test
accuracy) reads {ev['n_images']} test images, each completed once from its top half,
against the true labels. Beside it, its accuracy on the same images' originals, on
their top half over a blank bottom, and on their top half over the bottom half of
another test image: a completion model is only as good as its lead over the blank
and random baselines (± one standard error;
`{a.workdir}/eval/completion_metric.npz` holds the judged images, labels and split).

| classifier reads | accuracy |
|---|---|
| **completions** (top half given, bottom half generated) | **{pct('completion_accuracy')}** |
| originals | {pct('original_accuracy')} |
| top half, blank bottom | {pct('blank_accuracy')} |
| top half, bottom of another test image | {pct('random_bottom_accuracy')} |
| lead of the completions over the blank baseline | {100 * ev['completion_lead_over_blank']:+.1f} points |
"""
  if "completion_accuracy" not in ev:
    verdict = "The completions were not judged (config.completion_images = 0)."
  elif ev["completion_accuracy"] >= 0.7 and ev["completion_lead_over_blank"] >= 0.15:
    verdict = (f"The classifier reads the right digit in "
               f"{100 * ev['completion_accuracy']:.0f}% of the completions, "
               f"{100 * ev['completion_lead_over_blank']:.0f} points more than in the "
               "top halves alone: the model draws digits, not only strokes.")
  else:
    verdict = (f"The classifier reads the right digit in only "
               f"{100 * ev['completion_accuracy']:.0f}% of the completions, "
               f"{100 * ev['completion_lead_over_blank']:+.0f} points against the top "
               "halves alone: this run continues the given strokes without drawing "
               "recognisable digits (the issue's bar is 70% and +15 points).")
  page_frontier = frontier_section(a.frontier, ev, train[-1], c["num_train_steps"])
  page = f"""# MNIST demo: a small linear-attention pixel model (`make demo`)

Written by `python -m scripts.demo_results` from the `make demo` run in
`{a.workdir}`, on {datetime.date.today().isoformat()}, {platform.machine()} CPU with
{os.cpu_count()} cores, jax {jax.__version__}, device `{ev['device']}`.

Preset: `{a.config_file}` unchanged: {side}×{side} images{" (MNIST area-downsampled from 28×28)" if side != 28 else ""}, attention `{m['attention']}`, {m['num_layers']}
layers, d_model {m['d_model']}, {m['num_heads']} heads, d_ff {m['d_ff']}, a
{m['num_mixtures']}-component discretised logistic mixture head,
{first['params']:,} parameters, {c['num_train_steps']} steps of batch {c['batch_size']}
({c['optimizer']}, peak lr {c['learning_rate']}, {c['schedule']} schedule).

| figure | value |
|---|---|
| final train loss (nats/pixel, mean of the last {c['log_every']} steps) | {train[-1]['train_loss']:.4f} |
| training speed (steps/s, whole run) | {train[-1]['steps_per_s']:.2f} |
| test bits/dim (first {n_eval} test images) | {ev['bits_per_dim']:.4f} |
| completion accuracy by the digit classifier ({ev.get('n_images', 0)} images) | {pct('completion_accuracy') if 'completion_accuracy' in ev else 'not measured'} |
| completion speed ({ev['completion_batch']} images, {ev['decode_mode']} decoding) | {ev['completion_images_per_s']:.2f} images/s |
| unconditional sampling speed | {ev['sample_images_per_s']:.2f} images/s |

Completions of occluded test images: original | occluded (top half given, the hidden
half drawn grey) | {c.get('num_samples', 4)} samples.

![completions](completions.png)
{judged}
Unconditional samples:

![samples](samples.png)

{verdict} The linear-transformer paper's model (8 layers, d_model 256, trained for days
on a GPU) reaches about 0.64 bits/dim at 28×28; its reproduction is
[results/mnist_completion](../mnist_completion/README.md).
{page_frontier}"""
  with open(os.path.join(a.out, "README.md"), "w") as f:
    f.write(page)
  print(f"wrote {a.out}/README.md")


if __name__ == "__main__":
  main()
