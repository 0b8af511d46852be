"""results/variants_<task>/: the page of `studies.variants.compare` (one table, the
quality-against-time plot, the task's notes (studies.variants.notes), the learning
rates, the seed spread (studies.variants.seeds), the reference points), and the variant
x task summary in results/README.md. It reads the study's JSON (results.json, lr.json,
seeds.json beside the page) and measures nothing.

Every row names the run that trained and timed it; where a page holds rows of more
than one run, their speed cells carry the run's letter, and speeds are compared only
between rows of one run.
"""
from __future__ import annotations

import os
import textwrap

from data import tasks
from studies.core import pages, plots, protocol, references as refs
from studies.variants import (notes as variants_notes, seeds as variants_seeds,
                              state as variants_state)
from studies.variants.compare import (DECODE, EXACT, LR_EXTEND, LR_TIE, METRIC, metric_label,
                                      TASKS, TRAIN_METRIC, attention_notes, base_lr, by_rule,
                                      chosen_lrs, exact_roles, fingerprints, lr_choices, lr_grid, make_config,
                                      layer_notes, on_protocol, out_dir, quality,
                                      quality_str, train_command, with_lr)
from studies.variants.ledger import ledger_lines

# Each task's metric as the protocol's rate choice reads it (studies/PROTOCOL.md rule 1;
# its record's Study.validation_label)
VALIDATION_LABEL = {t: tasks.task(t).study.validation_label for t in TASKS}

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


def run_notes(res, config) -> list[str]:
  """The attention notes of the run behind an ok row (`Variant.runs_as`: ring on 1
  device = flash): those it recorded (runtime.json's `attention_notes`), else the
  trainer's notes for its config (`config`) on the mesh it had, the config's mesh
  sizes over the row's recorded device count. [] for a row that trained nothing."""
  if res.get("status") != "ok":
    return []
  if "attention_notes" in res:       # the trainer's; the layer's from the config
    notes = list(res["attention_notes"])
    return notes + [n for n in layer_notes(config) if n not in notes]
  return attention_notes(config, res.get("eval", {}).get("device_count"))


def note_head(note: str) -> str:
  """A note's short form for a table cell: its words before the first ':'."""
  return note.split(":", 1)[0].strip()


def row(res, mark: str = "", exact: list[str] = (), notes: list[str] = ()) -> str:
  """The page's table row; `mark` tags the speed cells when the rows come from
  several machines; `exact` names the roles that keep exact softmax; `notes` (the
  run's `run_notes`) are marked in the variant cell by their short form."""
  v = f"`{res['variant']}`" + (f" ({', '.join(exact)}: {EXACT})" if exact else "")
  if res.get("committed"):
    v += " (committed)"
  if res.get("ledger"):
    v += " (ledger)"
  if notes:
    v += f" ({'; '.join(note_head(n) for n in notes)})"
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
         else "n/a (a classifier)" if tasks.task(res["task"]).kind == "classifier"
         else "-")
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
          "studies.core.timing.matmul_peak, with the cores shared as the run's were) tells how "
          "fast its machine was; runs without one predate it.")


def plot(results, task, path, preset="cpu"):
  """Quality (the training-time metric) against training seconds: one panel per
  variant family (`attention.core.registry.FAMILIES`), one line per variant, softmax
  repeated in grey as the reference in the panels it is not in. All panels share
  both axes, so a line can be read against any other; where the rows come from
  several runs, each label carries its run's letter (the page's list of runs), since
  times from two runs may come from machines of different speed."""
  import matplotlib.ticker
  import attention
  from attention.core.registry import FAMILIES

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
  rec = protocol.write_page_record(out, os.path.basename(out_dir(task, preset)))
  new = protocol.follows(rec["version"])
  lines = [
      f"# Attention variants on {task}: quality against cost",
      "",
      protocol.top_line(rec),
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
      (f"- each row: the run of reporting seed {rec['reporting_seeds'][0]} at the "
       f"variant's rate (chosen on validation from seed "
       f"{', '.join(map(str, rec['selection_seeds']))}'s runs), evaluated on the test "
       "split; the other reporting seeds under \"Seed spread\" below" if new else
       f"- one training run per variant, each from seed {config.seed} (the same data "
      "order)" + ("; other seeds of some variants under \"Seed spread\" below"
                  if os.path.exists(os.path.join(out, "seeds.json")) else
                  ": the spread between seeds was not measured, so a small gap between "
                  "two rows is not evidence that one variant is better")),
      "- train steps/s: training alone (the log intervals after the first, which holds "
      "the compilation, that hold no evaluation or checkpoint save)",
      f"- peak memory: {', '.join(mem) or '-'}; decode speed: eval.py's generation "
      "timing (after a warm-up call), `cache` = the variant's decode state, "
      "`recompute` = the full forward pass per new token (variants without a state)",
      "",
      f"| variant | {metric_label(task, protocol.page_version(out))} | train steps/s | "
      "peak memory | parameters | "
      "decode speed |",
      "|---|---|---|---|---|---|",
  ]
  notes = {}
  for r in results:
    c = make_config(task, preset, r["variant"], overrides)
    notes[r["variant"]] = run_notes(r, c)
    lines.append(row(r, marks.get(run_key(r), "") if r.get("status") == "ok" else "",
                     exact_roles(c), notes[r["variant"]]))
  said = list(dict.fromkeys(n for ns in notes.values() for n in ns))
  if said:       # each note once, in full, under the table
    lines += [""] + [", ".join(f"`{v}`" for v, ns in notes.items() if n in ns)
                     + f": {n}." for n in said]
  lines += committed_lines(task, preset, results, overrides)
  lines += ledger_lines(results)
  pending = [r["variant"] for r in results if r.get("pending")]
  if pending:      # one line, not one command per row
    flags = [f for f, file in (("--lr_sweep", "lr.json"), ("--seeds", "seeds.json"))
             if os.path.exists(os.path.join(out, file))]
    command = train_command(task, preset, pending)
    how = f" (with the rows' {' and '.join(flags)})" if flags else ""
    if new:         # under the protocol: its sweep and fresh seeds, not the old flags
      command += " --protocol"
      how = " (with the protocol's rate sweep and reporting seeds)"
    lines += ["", f"Not trained yet: {', '.join(f'`{v}`' for v in pending)}. "
              f"`{command}` trains "
              + ("it" if len(pending) == 1 else "them, one after another") + how + "."]
  lines += ["", "![quality against training time](quality_vs_time.png)", ""]
  if marks:
    lines += ["The letter after each label is the run that trained the line (the list "
              "of runs above). Times of lines with different letters do not compare: "
              "the runs may have had machines of different speed, and one host name "
              "can cover machines of different speed; to compare them, train the rows "
              "again in one run (`--ignore_page`)." + _gauge_note(ok), ""]
  lines += variants_notes.task_notes(task, results, config, out, preset)
  lines += lr_lines(task, preset, out, overrides, results)
  lines += variants_seeds.seed_spread(task, preset, results, out, overrides)
  lines += variants_state.lines(task, preset, results, out, overrides)
  lines += variants_seeds.changed_lines(task, preset, results, out, overrides)
  ref = refs.VARIANT_PAGES.get(tasks.task(task).study.reference)
  if ref:
    lines += ["## Reference points", "", ref.strip(), ""]
  pages.write_text(os.path.join(out, "README.md"), lines)


def committed_lines(task, preset, results, overrides=None) -> list[str]:
  """The lines under the table of a page that shows committed rows beside its own
  (`compare_variants.committed_rows`, marked "(committed)"): where they come from, when
  and where they were trained, and whether they ran under this page's config. []
  where the page has none. task, preset: the page's; results: its rows; overrides:
  its config overrides (a run's budget flags)."""
  rows = [r for r in results if r.get("committed")]
  if not rows:
    return []
  src = sorted({r["committed"]["page"] for r in rows})
  dates = sorted({str(r["committed"]["date"]) for r in rows})
  hosts = sorted({r["committed"]["host"] for r in rows})
  same = all(r.get("config") in fingerprints(make_config(task, preset, r["variant"],
                                                         overrides)) for r in rows)
  return ["", "Rows marked (committed) are not this run's: they are read from "
          + ", ".join(f"`{s}/results.json`" for s in src) + ", the committed page, "
          f"trained {dates[0]}" + (f" to {dates[-1]}" if len(dates) > 1 else "")
          + f" on {', '.join(hosts)}, "
          + ("under the same config as this page's rows." if same else
             ("under the preset's own budget, not this page's (" + ", ".join(
                 f"{k}={v}" for k, v in sorted(overrides.items())) + ")" if overrides
              else "under another config than this page's rows (the preset changed "
                   "since)")
             + ": their quality and times do not compare with this run's rows.")]


def _config_summary(c) -> str:
  m = c.model
  keys = tasks.task(c.task).study.config_keys
  s = [f"{k}={c[k].to_dict() if hasattr(c[k], 'to_dict') else c[k]}" for k in keys]
  s += [f"layers={m.num_layers}", f"d_model={m.d_model}", f"heads={m.num_heads}",
        f"d_ff={m.d_ff}", f"dropout={m.dropout}", f"batch={c.batch_size}",
        f"steps={c.num_train_steps}", f"lr={c.learning_rate}"]
  if m.kind != "classifier":        # where the gated variants run: their layer
    s.append(f"gated_layer={m.get('gated_layer', 'bare')}")
  opts = {k: dict(v) for k, v in c.model.attention_options.items()}
  if opts:
    s.append(f"attention_options={opts}")
  return ", ".join(s)


def cpu_line(task, preset, results, out, overrides=None) -> str:
  """The page's CPU time: every run it reads, from the cpu_seconds each run recorded
  (training, evaluation and the memory estimate of its process); runs from before that
  record are counted, not timed. A page before the protocol: its rows, the other rates
  of its lr sweep and its extra seeds. A protocol page (studies.core.protocol): the
  selection runs at every rate of the sweep and the reporting seeds' runs, the protocol's
  own only (a row is its first reporting seed's run, counted once; the runs of the page
  before the protocol that its lr.json and seeds.json still hold are not this page's)."""
  ok = [r for r in results if r.get("status") == "ok"]
  base = base_lr(task, preset, overrides)
  lrs = chosen_lrs(task, preset, out, overrides)
  row_lr = {r["variant"]: lrs.get(r["variant"]) or base for r in ok}
  new = on_protocol(out)
  mine = lambda e: e["preset"] == preset and e["task"] == task \
      and (not new or protocol.follows(e.get("protocol")))
  swept = [e for e in pages.read_json(os.path.join(out, "lr.json"), [])
           if mine(e) and (new or e["lr"] != row_lr.get(e["variant"]))
           and e["config"] in fingerprints(make_config(
               task, preset, e["variant"], with_lr(overrides, e["lr"], base)))]
  seeds = [e for e in pages.read_json(os.path.join(out, "seeds.json"), [])
           if mine(e) and e["variant"] in row_lr and e["config"] in fingerprints(make_config(
               task, preset, e["variant"],
               {**(with_lr(overrides, lrs.get(e["variant"]), base) or {}),
                "seed": e["seed"]}))]
  if new:
    seeded = {(e["variant"], e["config"]) for e in seeds}
    rows = [r for r in ok if (r["variant"], r.get("config")) not in seeded]
    parts = [("rows without a seeds.json entry", rows),
             ("selection runs of the lr sweep", swept), ("reporting seeds", seeds)]
  else:
    parts = [("rows", ok), ("other rates of the lr sweep", swept),
             ("extra seeds", seeds)]
  secs = lambda xs: sum(x.get("cpu_seconds") or 0.0 for x in xs)
  untimed = sum(x.get("cpu_seconds") is None for _, xs in parts for x in xs)
  return (f"- CPU time of this page's runs: {sum(secs(xs) for _, xs in parts) / 60:.1f} "
          "CPU-min (" + ", ".join(f"{name} {secs(xs) / 60:.1f} ({len(xs)} runs)"
                                  for name, xs in parts if xs) + ")"
          + (f"; {untimed} of the runs were trained before runs recorded their CPU time "
             "and count zero here" if untimed else ""))


def v2_rule_lines(task, preset, overrides, grid, label, tie) -> list:
  """The rate rule of a version 2 page in words (studies/PROTOCOL.md rule 11,
  protocol.RateGrid)."""
  return [f"One procedure for every variant (`--lr_sweep`, protocol version 2, rule 11): "
          f"each trains from seed 0 at the rates {', '.join(f'{lr:g}' for lr in grid)} "
          f"(the preset's {base_lr(task, preset, overrides):g} times 0.3, 1, 3 and 9), "
          f"with the rest of the config as above, and its seeds run at the rate of the "
          f"best {label}; rates within {tie} of the best tie (the task's tie, "
          "`protocol.TIES`: √2 × the reference's seed sd), and a tie goes to the "
          "smallest rate. Where the chosen rate or the best figure is an end of what "
          "ran, the sweep adds the next rate out (the end's own ratio), up to "
          f"{LR_EXTEND} times a side, so the optimum is inside the grid or its limit is "
          "stated. **Bold**: the chosen rate; a chosen rate at the end of what the "
          "sweep ran is still a limit of the sweep."]


def lr_lines(task, preset, out, overrides=None, results=()) -> list:
  """Page lines: the lr sweep of out/lr.json (compare_variants --lr_sweep), the grid,
  each swept variant's metric per rate and the rate its row runs at, and the trained
  rows that were not swept (they run at the preset's rate)."""
  ch = lr_choices(task, preset, out, overrides)
  if not ch:
    return []
  version = protocol.page_version(out)
  grid, label, fmt = lr_grid(task, preset, overrides, version), METRIC[task][1], METRIC[task][3]
  proto = protocol.follows(version)
  if proto:        # the protocol chooses on validation: the table shows those figures
    label = (f"{VALIDATION_LABEL[task]} on the validation split (seed 0's runs; no test "
             "figure reaches the choice)")
  cols = sorted(set(grid).union(*(c["grid"] for c in ch.values())))
  t = protocol.TIES[task] if version >= 2 else LR_TIE[task]
  tie = fmt.format(t) if "%" not in fmt else f"{t * 100:g} point"
  lines = ["## Learning rates", ""] + (v2_rule_lines(task, preset, overrides, grid, label, tie)
                                       if version >= 2 else [
           f"One procedure for every variant (`--lr_sweep`): each trains from seed 0 at "
           f"the rates {', '.join(f'{lr:g}' for lr in grid)} (the preset's "
           f"{base_lr(task, preset, overrides):g} times 0.3, 1 and 3), with the rest of "
           f"the config as above, and its row (and its seeds) run at the rate of the best "
           f"{label}; rates within {tie} of the best tie (one seed does not tell them "
           "apart), and a tie goes to the smallest rate (studies.core.runs.choose_lr, the rule "
           "of the MQAR page too). Where the best rate is an end of the grid and beats "
           f"the rate next to it beyond {tie}, a rate past it might do better still, so "
           f"the sweep adds the next rate out (x3 or x0.3), up to {LR_EXTEND} times a "
           "side. **Bold**: the chosen rate; a chosen rate at the end of what the sweep "
           "ran is still a limit of the sweep."]) + ["",
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
  if twice and not proto:      # under the protocol the row is a reporting seed's run
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


