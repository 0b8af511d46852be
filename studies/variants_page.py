"""results/variants_<task>/: the page of `studies.compare_variants` (one table, the
quality-against-time plot, the task's notes, the seed spread, the reference points),
and the variant x task summary in the top-level README.md.

Every row names the run that trained and timed it; where a page holds rows of more
than one run, their speed cells carry the run's letter, and speeds are compared only
between rows of one run.
"""
from __future__ import annotations

import math
import os
import textwrap

import numpy as np

from studies import completion, pages, plots, references as refs
from studies.compare_variants import (DECODE, EXACT, LR_EXTEND, LR_TIE, METRIC, SOLVED,
                                      STATUS_SHORT, TASKS, TRAIN_METRIC, base_lr,
                                      by_rule, chosen_lrs, exact_roles,
                                      fingerprints, lr_choices, lr_grid, make_config, out_dir,
                                      quality, quality_str, train_command, with_lr)

README_BEGIN = "<!-- variants summary: written by scripts/compare_variants.py -->"
README_END = "<!-- end variants summary -->"


def host(res) -> str:
  """The machine a row was trained and evaluated on (eval.json's runtime record)."""
  return res.get("eval", {}).get("host") or "host not recorded"


def run_key(res) -> tuple:
  """The run that trained and timed a row: its run record's id; a row written before
  runs were recorded, its date and machine."""
  r = res.get("run")
  return (r["id"],) if r else (None, res.get("date"), host(res))


def run_words(res) -> str:
  """That run in words, for the page's list of runs."""
  r = res.get("run")
  if r:
    gauge = r.get("matmul_peak")
    return (f"`{r['command']}`, started {r['started'].replace('T', ' ')}, {pages.where(r)}, "
            f"jax {r['jax_version']}" + (
                f", matmul gauge {gauge['flop_per_s'] / 1e9:.0f} GFLOP/s" if gauge else ""))
  return (f"a run of the study on {res.get('date')} whose command was not recorded (rows "
          f"written before runs were), {host(res)}, jax {res.get('jax', '?')}")


def _mib(b):
  return f"{b / 2 ** 20:.1f} MiB" if b is not None else "-"


def row(res, mark: str = "", exact: list[str] = ()) -> str:
  """The page's table row; `mark` tags the speed cells when the rows come from
  several machines; `exact` names the roles that keep exact softmax."""
  v = f"`{res['variant']}`" + (f" ({', '.join(exact)}: {EXACT})" if exact else "")
  if res.get("status") != "ok":
    label = {"refused": "cannot do this task", "skipped": "not run",
             "failed": "failed"}[res["status"]]
    reason = res["reason"].replace("|", "\\|").replace("\n", " ")
    cell = "not run yet (the command is under the table)" if res.get("pending") else \
        f"{label}: {reason}"
    return f"| {v} | {cell} | | | | |"
  dk, unit = DECODE[res["task"]]
  dec = res["eval"].get(dk) if dk else None
  dec = (f"{dec:,.0f} {unit} ({res['decode_mode']})" if dec is not None
         else "n/a (a classifier)" if res["task"] == "listops" else "-")
  sps = f"{res['steps_per_s']:.2f}" if res.get("steps_per_s") else "-"
  if mark:
    sps, dec = f"{sps} ({mark})", f"{dec} ({mark})"
  return (f"| {v} | {quality_str(res)} | {sps} | {_mib(res.get('peak_bytes'))} | "
          f"{res['params']:,} | {dec} |")


def run_marks(results) -> dict:
  """{run_key: letter} of the runs behind a page's rows, in the rows' order; empty when
  one run made them all (nothing to tell apart)."""
  keys = list(dict.fromkeys(run_key(r) for r in results if r.get("status") == "ok"))
  return {k: run_letter(i) for i, k in enumerate(keys)} if len(keys) > 1 else {}


def _gauge_note(ok) -> str:
  """The sentence that says what a run's matmul gauge is (from the first row whose run
  recorded one), or "" where none did."""
  gauge = next((r["run"]["matmul_peak"] for r in ok
                if (r.get("run") or {}).get("matmul_peak")), None)
  if not gauge:
    return ""
  return (f" The matmul gauge of a run (the {gauge['statistic']} of {gauge['runs']} calls "
          f"of a {gauge['n']} × {gauge['n']} {gauge['dtype']} matmul as it started, "
          "studies.timing.matmul_peak, with the cores shared as the run's were) tells how "
          "fast its machine was; runs without one predate it.")


def plot(results, task, path, preset="cpu"):
  """Quality (the training-time metric) against training seconds: one panel per
  variant family (`attention.registry.FAMILIES`), one line per variant, softmax
  repeated in grey as the reference in the panels it is not in. All panels share
  both axes, so a line can be read against any other; where the rows come from
  several runs, each label carries its run's letter (the page's list of runs), since
  times from two runs may come from machines of different speed."""
  import matplotlib.ticker
  import attention
  from attention.registry import FAMILIES

  def pts(r):
    return [(sec, q) for _, sec, q in r["curve"] if sec is not None and q is not None]

  ok = [r for r in results if r.get("status") == "ok" and r.get("curve") and pts(r)]
  fams = [f for f in FAMILIES if any(attention.variant(r["variant"]).family == f
                                     for r in ok)] or ["exact"]
  plt = plots.pyplot()
  fig, axes = plt.subplots(1, len(fams), figsize=(3.9 * len(fams) + 0.4, 4.1), dpi=100,
                           sharex=True, sharey=True, squeeze=False)
  axes = axes[0]
  ref = next((r for r in ok if r["variant"] == "softmax"), None)
  cmap = plt.get_cmap("tab10")
  marks = run_marks(results)
  tag = lambda r: f" ({marks[run_key(r)]})" if marks else ""
  for ax, fam in zip(axes, fams):
    rows = [r for r in ok if attention.variant(r["variant"]).family == fam]
    if ref is not None and ref not in rows:
      xs, ys = zip(*pts(ref))
      ax.plot(xs, ys, color="0.6", lw=2.2, alpha=0.7,
              label="softmax (reference" + (f", {marks[run_key(ref)]})" if marks else ")"))
    for i, r in enumerate(rows):
      xs, ys = zip(*pts(r))
      # exact-family lines overlap by design: styles and markers keep them apart
      ax.plot(xs, ys, ls=("-", "--", ":", "-.")[i % 4], marker="os^vDP"[i % 6], ms=3.5,
              lw=1.3, color=cmap(i % 10), label=r["variant"] + tag(r))
    # wrapped: a one-panel figure is narrower than the longest family name
    ax.set_title("\n".join(textwrap.wrap(FAMILIES[fam], 44)), fontsize=9)
    ax.grid(alpha=0.3)
    if rows or ref is not None:
      ax.legend(fontsize=7, frameon=False, ncol=2, loc="upper center",
                bbox_to_anchor=(0.5, -0.16))
  key = TRAIN_METRIC[task]
  cpu = ok and ok[0].get("device", "").lower().startswith("cpu")
  for ax in axes:
    ax.set_xlabel("training time (s, 2 shared CPU cores)" if cpu else "training time (s)",
                  fontsize=8)
  axes[0].set_ylabel({"eval_loss": "held-out loss (nats/token)",
                      "bleu": "BLEU, in-training evals (validation)",
                      "bits_per_dim": "bits/dim, in-training evals",
                      "accuracy": "validation accuracy, in-training evals"}.get(key, key))
  ax = axes[0]                       # the axes are shared: scales set once
  if key == "eval_loss":
    ax.set_yscale("log")
  times = [sec for r in ok for sec, _ in pts(r) if sec]
  if times and max(times) > 5 * min(times):     # one slow variant would squash the rest
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("{x:g}"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
  if key == "accuracy":
    ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0, decimals=1))
  lo, hi = ax.get_ylim()
  if key == "eval_loss" and ok and hi < 10 * lo:     # under a decade: plain tick labels
    for set_fmt in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
      set_fmt(matplotlib.ticker.StrMethodFormatter("{x:.1f}"))
  fig.suptitle(f"{task}{'' if preset == 'cpu' else f' ({preset} preset)'}: quality "
               "against training time", fontsize=11)
  if not ok:
    ax.text(0.5, 0.5, "no variant has run yet", ha="center", transform=ax.transAxes)
  fig.tight_layout()
  plots.save(fig, path)


def run_letter(i):
  """The mark of the i-th run (0-based) in a page's speed cells: A..Z, then AA, AB, ...
  (a page that grows one command per variant can hold more runs than letters)."""
  s = ""
  i += 1
  while i:
    i, r = divmod(i - 1, 26)
    s = chr(ord("A") + r) + s
  return s


def write_page(task, preset, results, out, overrides=None, command=None):
  """results/variants_<task>/README.md, results.json and quality_vs_time.png;
  `command`: the command that ran (the page names it)."""
  pages.write_json(os.path.join(out, "results.json"), results)
  plot(results, task, os.path.join(out, "quality_vs_time.png"), preset)
  ok = [r for r in results if r.get("status") == "ok"]
  config = make_config(task, preset, "softmax", overrides)
  command = command or f"python -m scripts.compare_variants --task={task} --page_only"
  train_s = sum(r.get("train_seconds", 0.0) for r in ok)
  mem = sorted({r.get("memory_kind") for r in ok if r.get("memory_kind")})
  by_run = {}
  for r in ok:
    by_run.setdefault(run_key(r), r)
  marks = run_marks(results)
  cpu = any(r.get("device", "").lower() == "cpu" for r in ok)
  if marks:
    where = ("- the rows' runs (the letter in their speed cells): " + "; ".join(
        f"({marks[k]}) {run_words(r)}" for k, r in by_run.items())
             + ". Train steps/s, decode speed and the training times of the plot are "
             "compared only between rows of one run")
  else:
    where = "- the rows' run: " + (run_words(ok[0]) if ok else "none yet")
  lines = [
      f"# Attention variants on {task}: quality against cost",
      "",
      f"Written by `{command}` from the rows below; every number of ours comes from the "
      "run that trained and timed its row.",
      "",
      where + ("; CPU cores shared with other jobs while it ran: timings are indicative "
               "only, re-run on a quiet machine for speed claims" if cpu else ""),
      f"- preset `{preset}`; {len(ok)} variant(s) trained, {train_s / 60:.1f} min of "
      "training in all (compilation and evaluations included; each variant's "
      "evaluation comes on top)",
      cpu_line(task, preset, results, out, overrides),
      f"- the same config for every variant, only `attention` differs"
      + (" (and the learning rate of the rows that \"Learning rates\" below moves)"
         if any(lr != config.learning_rate
                for lr in chosen_lrs(task, preset, out, overrides).values()) else "")
      + f": `{_config_summary(config)}`"
      + ("; the variant fills the encoder's and the decoder's self-attention and the "
         "cross-attention, and a role it cannot fill keeps exact softmax (its row says "
         "which)" if config.model.kind == "encdec" else ""),
      f"- one training run per variant, each from seed {config.seed} (the same data "
      "order)" + ("; other seeds of some variants under \"Seed spread\" below"
                  if os.path.exists(os.path.join(out, "seeds.json")) else
                  ": the spread between seeds was not measured, so a small gap between "
                  "two rows is not evidence that one variant is better"),
      "- train steps/s: training alone (the log intervals after the first, which holds "
      "the compilation, that hold no evaluation or checkpoint save)",
      f"- peak memory: {', '.join(mem) or '-'}; decode speed: eval.py's generation "
      "timing (after a warm-up call), `cache` = the variant's decode state, "
      "`recompute` = the full forward pass per new token (variants without a state)",
      "",
      f"| variant | {METRIC[task][1]} | train steps/s | peak memory | parameters | "
      "decode speed |",
      "|---|---|---|---|---|---|",
  ]
  lines += [row(r, marks.get(run_key(r), "") if r.get("status") == "ok" else "",
                exact_roles(make_config(task, preset, r["variant"], overrides)))
            for r in results]
  pending = [r["variant"] for r in results if r.get("pending")]
  if pending:      # one line, not one command per row
    flags = [f for f, file in (("--lr_sweep", "lr.json"), ("--seeds", "seeds.json"))
             if os.path.exists(os.path.join(out, file))]
    lines += ["", f"Not trained yet: {', '.join(f'`{v}`' for v in pending)}. "
              f"`{train_command(task, preset, pending)}` trains "
              + ("it" if len(pending) == 1 else "them, one after another")
              + (f" (with the rows' {' and '.join(flags)})" if flags else "") + "."]
  lines += ["", "![quality against training time](quality_vs_time.png)", ""]
  if marks:
    lines += ["The letter after each label is the run that trained the line (the list "
              "of runs above). Times of lines with different letters do not compare: "
              "the runs may have had machines of different speed, and one host name "
              "can cover machines of different speed; to compare them, train the rows "
              "again in one run (`--ignore_page`)." + _gauge_note(ok), ""]
  if task == "copy":
    lines += _copy_notes(results, config)
  if task == "mnist":
    lines += _completion_notes(results, config)
  if task == "listops":
    lines += _listops_notes(results, config, out, preset)
  if task == "shakespeare":
    lines += _samples(results)
  if task == "multi30k":
    sig = sorted({r["bleu_signature"] for r in ok if "bleu_signature" in r})
    lines += [f"sacreBLEU signature: `{s}`" for s in sig] + [""]
  lines += lr_lines(task, preset, out, overrides, results)
  lines += seed_spread(task, preset, results, out, overrides)
  if refs.VARIANT_PAGES.get(task):
    lines += ["## Reference points", "", refs.VARIANT_PAGES[task].strip(), ""]
  pages.write_text(os.path.join(out, "README.md"), lines)


def _config_summary(c) -> str:
  m = c.model
  keys = {"copy": ["copy_len"], "shakespeare": ["seq_len"], "listops": ["listops"],
          "multi30k": ["src_len", "tgt_len", "length_buckets"],
          "mnist": ["image_size"]}[c.task]
  s = [f"{k}={c[k].to_dict() if hasattr(c[k], 'to_dict') else c[k]}" for k in keys]
  s += [f"layers={m.num_layers}", f"d_model={m.d_model}", f"heads={m.num_heads}",
        f"d_ff={m.d_ff}", f"dropout={m.dropout}", f"batch={c.batch_size}",
        f"steps={c.num_train_steps}", f"lr={c.learning_rate}"]
  opts = {k: dict(v) for k, v in c.model.attention_options.items()}
  if opts:
    s.append(f"attention_options={opts}")
  return ", ".join(s)


def _copy_notes(results, config):
  key, at = SOLVED["copy"]
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


def _completion_notes(results, config):
  """The one completion table (studies.completion) of the variants that were judged."""
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
  """{"listops": the data settings, "test" / "validation": label counts (10 classes)}
  of the preset's ListOps splits: out/labels.json, committed beside the page, or, when
  it is missing or of other settings, counted from the data and written there."""
  want = config.listops.to_dict()
  path = os.path.join(out, "labels.json")
  have = pages.read_json(path)
  if have and have["listops"] == want:
    return have
  import input_pipeline
  sp = input_pipeline.create(config).splits
  have = {"listops": want, **{s: np.bincount(sp[s][1], minlength=10).tolist()
                              for s in ("test", "validation")}}
  pages.write_json(path, have)
  return have


def _cpu_page_rows(task, out) -> dict:
  """{variant: row} of the cpu preset's page beside `out` (results/variants_<task>),
  or {} where there is none (a page written elsewhere)."""
  rows = pages.read_json(os.path.join(os.path.dirname(os.path.abspath(out)),
                                      os.path.basename(out_dir(task, "cpu")), "results.json"))
  return {r["variant"]: r for r in rows or []}


def _listops_notes(results, config, out, preset="cpu"):
  """Our accuracy next to LRA's published one, and the constant-answer baseline; for a
  preset other than cpu, the same variants' accuracy at the cpu preset's lengths."""
  counts, L = listops_labels(config, out), config.listops
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
  short = _cpu_page_rows("listops", out) if preset != "cpu" else {}
  same = [v for v in acc if quality(short.get(v, {})) is not None]
  if same:
    Ls = make_config("listops", "cpu", EXACT).listops
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


def _samples(results):
  lines = ["Samples (prompt `ROMEO:`, temperature 0.8; the first of eval.py's four), as "
           "long as the context the model was trained on (`seq_len`): it has never seen "
           "later positions.", ""]
  for r in results:
    if r.get("status") == "ok" and r.get("sample"):
      lines += [f"`{r['variant']}`:", "", "```", r["sample"].strip(), "```", ""]
  return lines


def summary_table(root="results") -> str:
  """The variant x task table from every results/variants_<task>/results.json."""
  import attention
  by_task = {}
  for task in TASKS:
    rows = pages.read_json(os.path.join(root, f"variants_{task}", "results.json"))
    if rows is not None:
      by_task[task] = {r["variant"]: r for r in rows}
  tasks = [t for t in TASKS if t in by_task]
  head = ["| variant | " + " | ".join(
      f"[{t}](results/variants_{t}/README.md) ({METRIC[t][1]})" for t in tasks) + " |",
      "|---|" + "---|" * len(tasks)]
  body = []
  for v in attention.names():
    cells = []
    for t in tasks:
      r = by_task[t].get(v)
      if r is None:
        cells.append("not run")
      elif r["status"] == "ok":
        cells.append(quality_str(r))
      else:
        cells.append(STATUS_SHORT[r["status"]])
      if r is not None and r["status"] != "refused" and exact_roles(
          make_config(t, r.get("preset", "cpu"), v)):
        cells[-1] += " *"
    body.append(f"| `{v}` | " + " | ".join(cells) + " |")
  foot = ["", "\\* with exact softmax in the roles the variant cannot fill (the task's page "
          "names them)"] if any(" *" in line for line in body) else []
  return "\n".join(head + body + foot)


def update_readme(path="README.md", root="results"):
  """Rewrites the summary between README_BEGIN and README_END in `path`."""
  pages.splice_file(path, README_BEGIN, README_END, summary_table(root))




# The fewest seeds of each side that a verdict (better, worse, unresolved, equal) is
# given from (issue 40: "3 seeds, mean ± standard error"). Two seeds give a standard
# error from one degree of freedom: two seeds of multi30k's gla that agreed to 0.1 BLEU
# made a 2.4-point gap read as "worse" beyond 20 standard errors (2026-11-27).
MIN_SEEDS = 3


def mean_se(xs) -> tuple[float, float, int]:
  """(mean, standard error of the mean: sample sd / sqrt(n), nan for one value, n)."""
  xs = np.asarray(xs, float)
  return float(xs.mean()), (float(xs.std(ddof=1) / np.sqrt(len(xs))) if len(xs) > 1
                            else float("nan")), len(xs)


def against(stats: dict, v: str, ref: str, higher_better: bool, fmt: str) -> str:
  """`v`'s verdict against `ref` from {variant: (mean, se, n)} (mean_se): better /
  worse beyond two standard errors of the difference, else unresolved, with the
  difference ± its se; "equal on every seed" when both scored one value on all their
  seeds (the copy page's rows at 100%: "unresolved (Δ +0.00% ± 0.00%)" read as if
  something were in doubt). No verdict from fewer than MIN_SEEDS seeds of either."""
  if v == ref:
    return "—"
  if ref not in stats or min(stats[v][2], stats[ref][2]) < MIN_SEEDS:
    have = ", ".join(f"`{x}` {stats[x][2] if x in stats else 0}" for x in (ref, v))
    return f"needs ≥ {MIN_SEEDS} seeds of both (seeds: {have})"
  d = stats[v][0] - stats[ref][0]
  se = float(np.hypot(stats[v][1], stats[ref][1]))
  if d == 0 and se == 0:
    return f"equal on every seed ({fmt.format(stats[v][0])})"
  word = ("unresolved" if abs(d) <= 2 * se else
          "better" if (d > 0) == higher_better else "worse")
  return f"{word} (Δ {'+' if d >= 0 else '−'}{fmt.format(abs(d))} ± {fmt.format(se)})"


def cpu_line(task, preset, results, out, overrides=None) -> str:
  """The page's CPU time: every run it reads (the rows, the other rates of the lr
  sweep, the extra seeds), from the cpu_seconds each run recorded (training,
  evaluation and the memory estimate of its process); runs from before that record
  are counted, not timed."""
  ok = [r for r in results if r.get("status") == "ok"]
  base = base_lr(task, preset, overrides)
  lrs = chosen_lrs(task, preset, out, overrides)
  row_lr = {r["variant"]: lrs.get(r["variant"]) or base for r in ok}
  swept = [e for e in pages.read_json(os.path.join(out, "lr.json"), [])
           if e["preset"] == preset and e["task"] == task
           and e["lr"] != row_lr.get(e["variant"]) and e["config"] in fingerprints(
               make_config(task, preset, e["variant"], with_lr(overrides, e["lr"], base)))]
  seeds = [e for e in pages.read_json(os.path.join(out, "seeds.json"), [])
           if e["preset"] == preset and e["task"] == task and e["variant"] in row_lr
           and e["config"] in fingerprints(make_config(
               task, preset, e["variant"],
               {**(with_lr(overrides, lrs.get(e["variant"]), base) or {}),
                "seed": e["seed"]}))]
  parts = [("rows", ok), ("other rates of the lr sweep", swept), ("extra seeds", seeds)]
  secs = lambda xs: sum(x.get("cpu_seconds") or 0.0 for x in xs)
  untimed = sum(x.get("cpu_seconds") is None for _, xs in parts for x in xs)
  return (f"- CPU time of this page's runs: {sum(secs(xs) for _, xs in parts) / 60:.1f} "
          "CPU-min (" + ", ".join(f"{name} {secs(xs) / 60:.1f} ({len(xs)} runs)"
                                  for name, xs in parts if xs) + ")"
          + (f"; {untimed} of the runs were trained before runs recorded their CPU time "
             "and count zero here" if untimed else ""))


def lr_lines(task, preset, out, overrides=None, results=()) -> list:
  """Page lines: the lr sweep of out/lr.json (compare_variants --lr_sweep), the grid,
  each swept variant's metric per rate and the rate its row runs at, and the trained
  rows that were not swept (they run at the preset's rate)."""
  ch = lr_choices(task, preset, out, overrides)
  if not ch:
    return []
  grid, label, fmt = lr_grid(task, preset, overrides), METRIC[task][1], METRIC[task][3]
  cols = sorted(set(grid).union(*(c["grid"] for c in ch.values())))
  tie = fmt.format(LR_TIE[task]) if "%" not in fmt else f"{LR_TIE[task] * 100:g} point"
  lines = ["## Learning rates", "",
           f"One procedure for every variant (`--lr_sweep`): each trains from seed 0 at "
           f"the rates {', '.join(f'{lr:g}' for lr in grid)} (the preset's "
           f"{base_lr(task, preset, overrides):g} times 0.3, 1 and 3), with the rest of "
           f"the config as above, and its row (and its seeds) run at the rate of the best "
           f"{label}; rates within {tie} of the best tie (one seed does not tell them "
           "apart), and a tie goes to the smallest rate (studies.runs.choose_lr, the rule "
           "of the MQAR page too). Where the best rate is an end of the grid and beats "
           f"the rate next to it beyond {tie}, a rate past it might do better still, so "
           f"the sweep adds the next rate out (x3 or x0.3), up to {LR_EXTEND} times a "
           "side. **Bold**: the chosen rate; a chosen rate at the end of what the sweep "
           "ran is still a limit of the sweep.", "",
           "| variant | " + " | ".join(f"lr {lr:g}" for lr in cols) + " | chosen |",
           "|---|" + "---|" * (len(cols) + 1)]
  for v, c in ch.items():
    cells = []
    for lr in cols:
      q = c["grid"].get(lr)
      cell = ("not run yet" if lr in grid else "—") if lr not in c["grid"] \
          else "failed" if q is None else fmt.format(q)
      cells.append(f"**{cell}**" if lr == c["chosen"] else cell)
    lines.append(f"| `{v}` | " + " | ".join(cells) + " | "
                 + (f"{c['chosen']:g}" if c["chosen"] is not None else "sweep incomplete")
                 + " |")
  rows = {r["variant"]: r for r in results if quality(r) is not None}
  twice = {v: (quality(rows[v]), c["grid"][c["chosen"]]) for v, c in ch.items()
           if v in rows and c["chosen"] in c["grid"] and c["grid"][c["chosen"]] is not None
           and fmt.format(quality(rows[v])) != fmt.format(c["grid"][c["chosen"]])}
  if twice:
    lines += ["", "Trained twice at the chosen rate from seed 0, by the sweep and by the "
              "row's run, with one config: " + ", ".join(
                  f"`{v}` ({fmt.format(a)} in its row, {fmt.format(b)} in the sweep)"
                  for v, (a, b) in twice.items())
              + ". Two runs need not compute bit for bit alike (XLA's CPU code "
              "follows the machine's vector instructions and threads), and small "
              "differences grow over training: the gap is a floor on run-to-run noise "
              "at one seed, beside the seed spread below. The rows show the row's run."]
  rule = by_rule(ch)
  ruled = sorted(r["variant"] for r in results
                 if r.get("status") == "ok" and r["variant"] in rule)
  if ruled:
    lines += ["", f"Not swept, at softmax's chosen rate ({rule[ruled[0]]:g}) by rule: "
              f"{', '.join(f'`{v}`' for v in ruled)}, kernels of softmax attention "
              "(registry family `exact`): they compute softmax's function, so they share "
              "its rate (compare_variants.by_rule)."]
  rest = sorted(r["variant"] for r in results
                if r.get("status") == "ok" and r["variant"] not in ch
                and r["variant"] not in rule)
  if rest:
    base = base_lr(task, preset, overrides)
    same = (ch.get("softmax") or {}).get("chosen") == base
    lines += ["", f"Not swept, at the preset's rate: {', '.join(f'`{v}`' for v in rest)}. "
              "A gap between one of these rows and a swept row mixes the variant with "
              "the rate: it is not a like-for-like comparison."
              + (f" The preset's rate ({base:g}) is also the one softmax's own sweep "
                 "chose, so their gaps to softmax compare them at softmax's best rate, "
                 "not at one tuned for them." if same else "")]
  return lines + [""]


def seed_spread(task, preset, results, out, overrides=None) -> list:
  """Page lines: per variant with extra-seed runs in out/seeds.json (of this preset,
  under the config its row was trained with, at its chosen rate), its metric per
  seed, mean and range."""
  rows = {r["variant"]: r for r in results if r.get("status") == "ok"}
  lrs = chosen_lrs(task, preset, out, overrides)
  base = base_lr(task, preset, overrides)
  by = {}
  for s in pages.read_json(os.path.join(out, "seeds.json"), []):
    r0 = rows.get(s["variant"])
    if s["preset"] != preset or s["task"] != task or r0 is None:
      continue
    ov = with_lr(overrides, lrs.get(s["variant"]), base)
    want = fingerprints(make_config(task, preset, s["variant"],
                                    {**(ov or {}), "seed": s["seed"]}))
    if s["config"] in want:
      seed0 = int(make_config(task, preset, s["variant"], overrides).seed)
      by.setdefault(s["variant"], {seed0: quality(r0)})        # the row's own run
      by[s["variant"]][s["seed"]] = s["quality"]
  if not by:
    return []
  fmt = METRIC[task][3]
  lines = ["## Seed spread", "",
           "The same variant trained again from other seeds (initialisation, data order, "
           "dropout), by `--seeds`: a gap between two rows smaller than this spread is "
           "not evidence that one variant is better. Against softmax: the difference of "
           "the means and its standard error (the two variants' seed runs taken as "
           "independent samples); `better` or `worse` only beyond 2 standard errors, "
           "else `unresolved` (`equal on every seed` where both scored one value on all "
           f"their seeds); no verdict from fewer than {MIN_SEEDS} seeds of either "
           "(two seeds that happen to agree give a standard error near 0). Ahead of: "
           "the other seeded rows, softmax aside, that "
           "this row beats by the same test (pairs whose rates were chosen alike "
           "only); the test is about 5% likely to pass by chance for two variants "
           "that do not differ, and a page with many pairs will hold some such.", "",
           f"| variant | {METRIC[task][1]} per seed | mean ± s.e. | max − min "
           "| against softmax | ahead of |", "|---|---|---|---|---|---|"]
  stats = {v: mean_se([q[k] for k in sorted(q)]) for v, q in by.items()}
  unlike = unlike_softmax(rows, lrs, base)
  for v, q in sorted(by.items()):
    vals = [q[k] for k in sorted(q)]
    m, se, _ = stats[v]
    word = (against(stats, v, 'softmax', METRIC[task][2], fmt) if "softmax" in rows
            else "— (`softmax` has no row on this page)")
    if v in unlike and word.startswith(("better", "worse", "unresolved")):
      word = "not like for like, " + unlike[v] + " (" + word.split("(", 1)[1]
    ahead = ", ".join(f"`{w}`" for w in ahead_of(stats, v, METRIC[task][2], lrs, base))
    lines.append(f"| `{v}` | " + ", ".join(f"{fmt.format(q[k])} ({k})" for k in sorted(q))
                 + f" | {fmt.format(m)} ± {fmt.format(se)} | "
                 f"{fmt.format(max(vals) - min(vals))} | {word} | {ahead or '—'} |")
  return lines + [""] + separation(rows, by, stats, task, unlike)


def rates_alike(v: str, w: str, lrs: dict, base: float) -> bool:
  """Whether `v`'s and `w`'s rates were chosen alike, so a gap between them compares
  the variants, not the rates: both out of the lr sweep (or sharing softmax's rate by
  rule; `lrs`, chosen_lrs: {variant: rate}), both at the preset's rate `base`, or both
  at one rate."""
  swept = {x: lr for x, lr in lrs.items() if lr is not None}
  return (v in swept) == (w in swept) or swept.get(v, base) == swept.get(w, base)


def ahead_of(stats: dict, v: str, higher_better: bool, lrs: dict, base: float) -> list:
  """The seeded variants other than `v` and softmax that `v` beats beyond two standard
  errors of the difference (`against`), among those whose rate was chosen like `v`'s
  (`rates_alike`)."""
  return [w for w in sorted(stats) if w not in (v, "softmax")
          and rates_alike(v, w, lrs, base)
          and against(stats, v, w, higher_better, "{}").startswith("better")]


def unlike_softmax(rows: dict, lrs: dict, base: float) -> dict:
  """{variant: why} for the rows whose rate was not chosen like softmax's
  (`rates_alike`): one of the two came out of the lr sweep, the other runs at the
  preset's rate, so a gap between them mixes the variant with the rate."""
  if "softmax" not in rows or not any(lr is not None for lr in lrs.values()):
    return {}
  why = ("at the preset's rate, softmax at its swept one"
         if lrs.get("softmax") is not None else "swept, softmax at the preset's rate")
  return {v: why for v in rows
          if v != "softmax" and not rates_alike(v, "softmax", lrs, base)}


def _n(k: int, noun: str) -> str:
  return f"{k} {noun}" + ("" if k == 1 else "s")


def _names(vs) -> str:
  """`a`, `b`, `c`: variant names as the page sets them."""
  return ", ".join(f"`{v}`" for v in vs)


def separation(rows: dict, by: dict, stats: dict, task: str,
               unlike: dict | None = None) -> list[str]:
  """What the page can tell apart at its budget, from its own rows and seeds: the
  seeded variants that differ from softmax beyond 2 standard errors, those that scored
  softmax's value on every seed (`against`: equal), and the rows of one seed, whose
  gaps to softmax are set beside the widest seed range measured; the rows in `unlike`
  (unlike_softmax) are named apart and not judged."""
  fmt, hi = METRIC[task][3], METRIC[task][2]
  if "softmax" not in stats or not np.isfinite(stats["softmax"][1]):
    return []
  unlike = {v: w for v, w in (unlike or {}).items() if quality(rows[v]) is not None}
  seeded = [v for v in by if v != "softmax" and v not in unlike]
  few = sorted(v for v in seeded if min(stats[v][2], stats["softmax"][2]) < MIN_SEEDS)
  words = {v: against(stats, v, "softmax", hi, fmt) for v in seeded if v not in few}
  sep = sorted(v for v, w in words.items() if w.startswith(("better", "worse")))
  same = sorted(v for v, w in words.items() if w.startswith("equal"))
  single = sorted(v for v in rows if v not in by and v not in unlike
                  and quality(rows[v]) is not None)
  spread = max(max(q.values()) - min(q.values()) for q in by.values())
  s = "**What this page tells apart at this budget.** " + (
      ", ".join(f"`{v}` ({words[v].split(' ')[0]})" for v in sep)
      + f" against softmax, beyond 2 standard errors ({_n(len(words), 'variant')} "
      "seeded beside softmax)." if sep else
      f"None of the {_n(len(words), 'variant')} seeded beside softmax differs from it "
      "beyond 2 standard errors." if len(words) > 1 else
      f"`{next(iter(words))}`, seeded beside softmax, does not differ "
      "from it beyond 2 standard errors." if words else
      "" if few else "Only softmax ran several seeds.")
  if few:
    s += ((" " if words else "")
          + f"Not judged yet, with fewer than {MIN_SEEDS} seeds of softmax or their own: "
          + ", ".join(f"`{v}` ({stats[v][2]})" for v in few)
          + f" (softmax: {stats['softmax'][2]}).")
  if same:
    s += (f" {_names(same)} scored what softmax scored on every seed "
          f"({fmt.format(stats['softmax'][0])}): at this budget the task does not tell "
          + ("it" if len(same) == 1 else "them") + " from softmax.")
  if single:
    gaps = {v: abs(quality(rows[v]) - stats["softmax"][0]) for v in single}
    over = [v for v in single if gaps[v] > spread]
    lo, up = fmt.format(min(gaps.values())), fmt.format(max(gaps.values()))
    if len(single) == 1:
      s += (f" The other row, {_names(single)}, ran one seed, so its gap to softmax's "
            f"mean ({lo}) is not resolved")
      cmp = ("larger than that gap: at this budget the page cannot rank it" if not over
             else "smaller than that gap: seeds of that row would tell whether it differs")
    else:
      s += (f" The other {len(single)} rows ({_names(single)}) ran one seed, so none of "
            f"their gaps to softmax's mean ({lo} to {up}) is resolved")
      cmp = ("larger than every one of those gaps: at this budget the page cannot rank "
             "them" if not over else
             f"smaller than the gap of {_names(over)}: seeds of that row would tell "
             "whether it differs" if len(over) == 1 else
             f"smaller than the gaps of {_names(over)}: seeds of those rows would tell "
             "whether they differ")
    s += ("; the widest spread between seeds of one variant here is "
          f"{fmt.format(spread)}, {cmp}.")
  if unlike:
    s += (f" Not judged: {', '.join(f'`{v}`' for v in sorted(unlike))} (" +
          next(iter(unlike.values())) + "): a gap between rows whose rates were chosen "
          "differently mixes the variant with the rate.")
  return [s, ""]
