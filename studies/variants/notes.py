"""The task's own notes on a variants page (studies.variants.page): the copy task's
exact-copy and solved-at table, MNIST's completion table, ListOps beside LRA's
published accuracies and the constant answer, Shakespeare's samples, Multi30k's
sacreBLEU signature. From the page's rows (and, for ListOps, the label counts kept
beside it) alone. Which of them a task's page has is its record's (data/tasks/:
Study.sections, each a key of NOTES).
"""
from __future__ import annotations

import math
import os

import numpy as np

from data import tasks
from studies.core import completion, pages, references as refs
from studies.variants.compare import (EXACT, SOLVED, STATUS_SHORT, make_config, out_dir,
                                      quality, quality_str)


def task_notes(task, results, config, out, preset="cpu") -> list[str]:
  """The page lines of `task`'s own notes: those of NOTES its record's sections name,
  in their order (none for a task without any)."""
  lines = []
  for s in tasks.task(task).study.sections:
    if s in NOTES:
      lines += NOTES[s](task, results, config, out, preset)
  return lines


def bleu_signatures(results) -> list[str]:
  """The sacreBLEU signatures of the rows (one where they agree)."""
  ok = [r for r in results if r.get("status") == "ok"]
  sig = sorted({r["bleu_signature"] for r in ok if "bleu_signature" in r})
  return [f"sacreBLEU signature: `{s}`" for s in sig] + [""]


def copy_notes(results, config, task):
  """The exact-copy and solved-at table of `task` (its record's Study.solved)."""
  key, at = SOLVED[task]
  n = (f"{config.eval_batches * (config.get('eval_batch_size') or config.batch_size)} "
       "held-out sequences" if config.eval_batches else "the whole held-out split")
  ok = [r for r in results if r.get("status") == "ok"]
  alike = ok and min(r["eval"]["token_accuracy"] for r in ok) >= 0.999
  lines = ["Other measures of the same runs (test batches from a held-out seed). "
           f"Solved at: the first in-training evaluation (every {config.eval_every} "
           f"steps, {n}) with at least {at:.0%} of "
           "the sequences copied exactly, and the training time to it"
           + (": the accuracy columns end alike, this one tells how fast a variant "
              "gets there." if alike else
              ". Teacher-forced: each token predicted from the true tokens before it; "
              "generated: greedy, each token from the model's own copy so far."), "",
           "| variant | sequences copied exactly (teacher-forced) | token accuracy of the "
           "greedy generated copy | solved at (step, training time) |",
           "|---|---|---|---|"]
  for r in results:
    if r.get("status") == "ok":
      e, hit = r["eval"], r.get("solved_at")
      when = (f"{hit[0]} ({hit[1]:.1f} s)" if hit and hit[1] is not None
              else f"{hit[0]}" if hit
              else f"not within {config.num_train_steps} steps" if "solved_at" in r
              else "-")
      lines.append(f"| `{r['variant']}` | {e['accuracy']:.1%} | "
                   f"{e['generated_token_accuracy']:.2%} | {when} |")
  return lines + [""]


def completion_notes(results, config):
  """The one completion table (studies.core.completion) of the variants that were judged."""
  ev = [r for r in results if r.get("status") == "ok" and
        "completion_accuracy" in r["eval"]]
  if not ev:
    return []
  lines = [completion.method(ev[0]["eval"], int(config.image_size)), ""]
  lines += completion.table([(f"`{r['variant']}`", r["eval"]) for r in ev], "variant")
  ahead = [r["variant"] for r in ev if completion.verdict(r["eval"]) == "ahead"]
  behind = [r["variant"] for r in ev if completion.verdict(r["eval"]) == "behind"]
  say = lambda vs: ", ".join(f"`{v}`" for v in vs)
  lines += ["", (f"Ahead of the blank bottom: {say(ahead)}. " if ahead else
                 "No variant's completions are read right more often than the top halves "
                 "over a blank bottom. ")
            + (f"Behind it: {say(behind)}: their strokes mislead the classifier more than "
               "they complete the digit. " if behind else "")
            + "At this budget the test bits/dim column is the informative one "
            "(configs/mnist_demo.py's page, results/mnist_demo, measures how the "
            "completion metric grows with training steps)."]
  return lines + [""]


def listops_labels(config, out) -> dict:
  """{config.task: the data settings (its config section), "test" / "validation": label
  counts (10 classes)} of the preset's ListOps splits: out/labels.json, committed
  beside the page, or, when it is missing or of other settings, counted from the data
  and written there."""
  want = config[config.task].to_dict()
  path = os.path.join(out, "labels.json")
  have = pages.read_json(path)
  if have and have.get(config.task) == want:
    return have
  from data import pipeline
  sp = pipeline.create(config).splits
  have = {config.task: want, **{s: np.bincount(sp[s][1], minlength=10).tolist()
                              for s in ("test", "validation")}}
  pages.write_json(path, have)
  return have


def _cpu_page_rows(task, out) -> dict:
  """{variant: row} of the cpu preset's page beside `out` (results/variants_<task>),
  or {} where there is none (a page written elsewhere)."""
  rows = pages.read_json(os.path.join(os.path.dirname(os.path.abspath(out)),
                                      os.path.basename(out_dir(task, "cpu")), "results.json"))
  return {r["variant"]: r for r in rows or []}


def listops_notes(results, config, out, preset="cpu", task=None):
  """Our accuracy next to LRA's published one, and the constant-answer baseline; for a
  preset other than cpu, the same variants' accuracy at the cpu preset's lengths."""
  counts, L = listops_labels(config, out), config[config.task]
  top, val = np.asarray(counts["test"]), np.asarray(counts["validation"])
  n = int(top.sum())
  const = top.max() / n
  lines = [f"A constant answer (the test split's most frequent label, {int(top.argmax())}) "
           f"scores {const:.1%} on our {n} test sequences; chance is 10%."]
  acc = {r["variant"]: quality(r) for r in results if quality(r) is not None}
  if acc:
    lo, hi = min(acc.values()), max(acc.values())
    se = math.sqrt(hi * (1 - hi) / n)
    # a row within 2 standard errors of its own (over n sequences) of the constant
    # answer learnt nothing beyond the label counts
    flat = sorted(v for v, a in acc.items() if a - const <= 2 * math.sqrt(a * (1 - a) / n))
    lines[-1] += f" Every variant that ran scores {lo:.1%} to {hi:.1%}"
    if flat:
      lines[-1] += (f"; {', '.join(f'`{v}`' for v in flat)} within 2 standard errors of "
                    "the constant answer: no more than the label counts give")
    else:
      lines[-1] += f", {math.floor(1000 * (lo - const)) / 10:.1f} or more points above it"
    lines[-1] += (f"; one standard error over {n} sequences is about {100 * se:.1f} points, "
                  "so differences of two or three points between variants are hardly "
                  "resolved by one run.")
    weak = {v: p for v, (_, p) in refs.LRA_LISTOPS_ACC.items() if p < 20 and v in acc}
    if weak:
      ours = [acc[v] for v in weak]
      lines[-1] += (f" In LRA's table {', '.join(f'`{v}`' for v in sorted(weak))} stay at "
                    f"{min(weak.values()):.1f} to {max(weak.values()):.1f}%, near a constant "
                    f"answer, at lengths up to 2000; at this preset's lengths "
                    f"({L.min_length + 1}..{L.max_length - 1} tokens) they score "
                    f"{min(ours):.1%} to {max(ours):.1%}")
      if "softmax" in acc:
        gap = max(acc["softmax"] - acc[v] for v in weak)
        lines[-1] += f", within {100 * gap:.1f} points of `softmax`."
      else:
        lines[-1] += (f", {'+' if min(ours) >= const else '−'}"
                      f"{abs(math.floor(1000 * (min(ours) - const)) / 10):.1f} points or more "
                      "against the constant answer (`softmax` is not run in this preset).")
  task = task or config.task
  short = _cpu_page_rows(task, out) if preset != "cpu" else {}
  same = [v for v in acc if quality(short.get(v, {})) is not None]
  if same:
    Ls = make_config(task, "cpu", EXACT).listops
    lines[-1] += (f" The same variants at the `cpu` preset's lengths ({Ls.min_length + 1}.."
                  f"{Ls.max_length - 1} tokens, the same model and steps; [its page]"
                  f"(../variants_listops/README.md), seed 0): " + ", ".join(
                      f"`{v}` {quality(short[v]):.1%}" for v in sorted(same)) + ".")
  # the plot's curves are validation accuracy, the tables test accuracy
  last_val = {r["variant"]: r["curve"][-1][2] for r in results
              if r["variant"] in acc and r.get("curve") and r["curve"][-1][2] is not None}
  if last_val:
    gap = 100 * float(np.median([last_val[v] - acc[v] for v in last_val]))
    ends = lambda c: float((c[0] + c[9]) / c.sum())
    lines[-1] += (f" The plot's curves are validation accuracy, which at the last step runs "
                  f"{abs(gap):.1f} points {'above' if gap >= 0 else 'below'} test accuracy "
                  f"(the median over the variants): "
                  f"the two splits are drawn alike and differ by chance; the validation "
                  f"split holds {ends(val):.1%} of the extreme answers 0 and 9 (what MAX "
                  f"and MIN most often give) against the test split's {ends(top):.1%}.")
  lines += ["",
           "| variant | ours (this preset) | LRA, published (its model) |", "|---|---|---|"]
  for r in results:
    pub = refs.LRA_LISTOPS_ACC.get(r["variant"])
    pub = f"{pub[1]:.2f}% ({pub[0]})" if pub else "- (not in LRA's table)"
    ours = quality_str(r) if r.get("status") == "ok" else STATUS_SHORT[r["status"]]
    lines.append(f"| `{r['variant']}` | {ours} | {pub} |")
  m = config.model
  return lines + ["", f"What differs from LRA's setup: sequences of {L.min_length + 1}.."
                  f"{L.max_length - 1} tokens here (LRA: 501..1999); a {m.num_layers}-layer "
                  f"{m.d_model}-wide model with MLP {m.d_ff} (LRA: 6 layers, 512 wide, MLP "
                  f"2048); {config.num_train_steps} steps of {config.batch_size} sequences "
                  f"from {config.listops.num_train} (LRA: 5000 steps of 32 from 96,000); a "
                  "mean-pooled classifier (LRA: a CLS token) and this project's AdamW with a "
                  "cosine schedule. The comparison is of the ranking, not the values (see "
                  "below).", ""]


def samples(results):
  lines = ["Samples (prompt `ROMEO:`, temperature 0.8; the first of eval.py's four), as "
           "long as the context the model was trained on (`seq_len`): it has never seen "
           "later positions.", ""]
  for r in results:
    if r.get("status") == "ok" and r.get("sample"):
      lines += [f"`{r['variant']}`:", "", "```", r["sample"].strip(), "```", ""]
  return lines


# A task's own notes (Study.sections): section -> fn(task, results, config, out, preset)
# -> page lines. ("state", the fixed-state rows, is studies.variants.state's section.)
NOTES = {
    "solved": lambda task, results, config, out, preset: copy_notes(results, config, task),
    "completion": lambda task, results, config, out, preset: completion_notes(results,
                                                                              config),
    "lra": lambda task, results, config, out, preset: listops_notes(results, config, out,
                                                                    preset, task),
    "samples": lambda task, results, config, out, preset: samples(results),
    "bleu_signature": lambda task, results, config, out, preset: bleu_signatures(results),
}
