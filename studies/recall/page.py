"""results/variants_mqar/: the page of `studies.recall.mqar` (README.md and mqar.png),
written from the sweep's data (results.json: `mqar.page_data`) alone: accuracy against
width, the learning rates, the verdicts against softmax, what is missing, and the sweep's
time against its target.
"""
from __future__ import annotations

import json
import os

from studies.core import pages, plots, protocol
from studies.recall.mqar import REFERENCE, lr_rates, lr_rule, missing_cells
from studies.recall.stats import (ACCURACY, SOLVED, _panels, _pct, cell_stats, page_verdicts,
                                  recalled, seed_values, time_verdict)

# ---- the page ----------------------------------------------------------------------------

ZOOLOGY = ("Arora, Eyuboglu et al., 'Zoology: Measuring and Improving Recall in Efficient "
           "Language Models', ICLR 2024, arXiv:2312.04927")
ZOOLOGY_RESULT = (
    "Their Figure 2 plots MQAR accuracy against model dimension (64 to 512), one panel "
    "per sequence length (64, 128, 256, 512 tokens with 4, 8, 16, 64 key-value pairs), "
    "for 2-layer models with attention and with gated-convolution or recurrent mixers "
    "(H3, Hyena, RWKV, BaseConv). Attention solves the task at every width and length; "
    "the gated convolutions need a model dimension that grows with the sequence length "
    "and the number of pairs, and fall short of attention at the longer lengths and "
    "smaller widths.")


def _col(w, t, P) -> str:
  return f"w{w} · {t} tok, {P} pairs"


def plot(data: dict, path: str) -> None:
  """Accuracy against width, one panel per (tokens, pairs), one line per trained variant
  (mean over seeds with ± 1 standard error bars where there are seeds)."""
  import attention
  stats = cell_stats(data["results"], data["lrs"])
  p = data["settings"]
  panels, widths = _panels(p), p["widths"]
  trained = [n for n, t in data["treatment"].items() if t == "train"]
  plt = plots.pyplot()
  fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels) + 1.9, 3.7),
                           dpi=100, sharey=True, squeeze=False)
  fam_color = {"exact": "black", "score": "tab:blue", "efficient": "tab:orange",
               "gated": "tab:green"}
  styles = ("-", "--", ":", "-.")
  marks = "os^vDPX*"
  seen = {}
  for ax, (t, P) in zip(axes[0], panels):
    for n in trained:
      fam = attention.variant(n).family
      i = seen.setdefault(n, sum(1 for m in seen if attention.variant(m).family == fam))
      pts = [(w, stats[(n, w, t, P)]) for w in widths if (n, w, t, P) in stats]
      if not pts:
        continue
      color = fam_color.get(fam, "grey")
      ax.errorbar([w for w, _ in pts], [s[0] for _, s in pts],
                  yerr=[s[1] or 0.0 for _, s in pts], color=color,
                  ls=styles[i % 4], marker=marks[i % len(marks)], ms=4,
                  lw=1.8 if n == REFERENCE else 1.1, capsize=2, label=n)
      for w, _ in pts:          # each seed's run, where there are several: MQAR is
        xs = seed_values(data, n, w, t, P)  # learnt in a jump, some seeds do not
        if len(xs) > 1:
          ax.scatter([w * 1.04 ** (i - 1)] * len(xs), xs, s=9, color=color, alpha=0.45,
                     marker=marks[i % len(marks)], linewidths=0)
    ax.set_xscale("log", base=2)
    ax.set_xlim(widths[0] / 1.25, widths[-1] * 1.25)
    ax.set_xticks(widths, [str(w) for w in widths])
    if not ax.lines:
      ax.text(0.5, 0.5, "not run yet", ha="center", transform=ax.transAxes, color="0.4")
    ax.minorticks_off()
    ax.axhline(1 / P, color="0.5", ls=":", lw=1)
    ax.text(widths[-1] * 1.2, 1 / P - 0.01, f"1/{P}: a guess among the pairs' values",
            fontsize=7, color="0.4", va="top", ha="right")
    ax.set_title(f"{t} tokens, {P} pairs", fontsize=10)
    ax.set_xlabel("model width (d_model)", fontsize=9)
    ax.set_ylim(0, 1.04)
    ax.grid(alpha=0.3)
  axes[0][0].set_ylabel("accuracy on the queried values", fontsize=9)
  by_label = {}            # every panel's lines: a variant may have run in one panel only
  for ax in axes[0]:
    for h, lab in zip(*ax.get_legend_handles_labels()):
      by_label.setdefault(lab, h)
  labels = [n for n in trained if n in by_label]
  fig.legend([by_label[n] for n in labels], labels, loc="center right", fontsize=7.5,
             frameon=False)
  fig.suptitle("MQAR: accuracy against width (2 layers; softmax stands for "
               "sdpa, flash, flash_pallas, ring, fp8)", fontsize=10)
  fig.tight_layout(rect=(0, 0, 1 - 1.6 / fig.get_figwidth(), 1))
  plots.save(fig, path)


def write_page(data: dict, out: str, run: dict) -> None:
  """out/README.md, out/results.json (data + the run record) and out/mqar.png (the
  zoology presets' page: studies.recall.zoology_page)."""
  os.makedirs(out, exist_ok=True)
  # the protocol the data followed (studies.core.protocol.record); data from before it
  # records none: version 0, rates chosen on the figure it reports
  data = dict(data, protocol=data.get("protocol") or protocol.record(None, 0))
  pages.write_json(os.path.join(out, "results.json"), dict(data, run=run))
  plot(reported(data), os.path.join(out, "mqar.png"))
  pages.write_text(os.path.join(out, "README.md"), page_lines(data, run))


def _ladder_words(p) -> str:
  """'x3 above, x0.3 below' for the ladder's steps past the grid's ends."""
  g = sorted(p["lrs"])
  return f"x{g[-1] / g[-2]:.3g} above, x{g[0] / g[1]:.3g} below"


def _layered() -> str:
  """The variants whose records list a layer around the operator (`Variant.layer`)."""
  import attention
  return ", ".join(n for n in attention.names() if attention.variant(n).layer)


def _steps_words(p) -> str:
  """'1500 steps at 4 pairs, 3000 at 8' (or one number when the panels agree)."""
  steps = [int(x[2]) for x in p["panels"]]
  if len(set(steps)) == 1:
    return f"{steps[0]} steps"
  return f"{steps[0]} steps at {p['panels'][0][1]} pairs, " + ", ".join(
      f"{x[2]} at {x[1]}" for x in p["panels"][1:])


def _seed_cell_words(p) -> str:
  out = []
  for c in p["seed_cells"]:
    who = "" if len(c) == 3 else f" ({', '.join(c[3])} only)"
    if len(c) > 4:
      who = f" (seeds {', '.join(map(str, c[4]))} for {', '.join(c[3])})"
    out.append(f"({c[0]}, {c[1]}, {c[2]}){who}")
  return ", ".join(out)


def reported(data: dict) -> dict:
  """The data whose figures the page reports: under the protocol, the reporting seeds'
  runs with their test accuracy as `accuracy` (the validation figure kept as
  `validation_accuracy`), the selection runs left out; before it, the data as is."""
  rec = data.get("protocol") or {}
  if not protocol.follows(rec.get("version")):
    return data
  keep = set(rec["reporting_seeds"])
  return dict(data, results=[
      dict(r, validation_accuracy=r["accuracy"], accuracy=r["test_accuracy"])
      for r in data["results"] if r["seed"] in keep and r.get("stage") != "lr"
      and r.get("test_accuracy") is not None])


def page_lines(data: dict, run: dict) -> list[str]:
  p, c = data["settings"], data["config"]
  rec = data.get("protocol") or protocol.record(None, 0)
  shown = reported(data)
  stats = cell_stats(shown["results"], data["lrs"])
  treat, lrs = data["treatment"], data["lrs"]
  trained = [n for n, t in treat.items() if t == "train"]
  panels = _panels(p)
  lengths = sorted({x[0] for x in p["panels"]})
  L = ["# Multi-query associative recall (Zoology's MQAR): every variant, "
       f"{'/'.join(map(str, lengths))} tokens", "",
       protocol.top_line(rec), "", pages.header(run), "",
       "The recall study on Zoology's own grid (longer sequences, Zoology's widths, "
       "a rate per width): [variants_mqar](../variants_mqar/README.md).", ""]
  wall, jobs = data.get("wall_seconds"), max(1, int(data.get("jobs", 1)))
  L += [f"Total CPU time of the sweep: {data['cpu_seconds'] / 60:.1f} CPU-minutes (user "
        "+ system, every child process from its start; "
        f"{sum(r['cpu_seconds'] for r in data['results']) / 60:.1f} of them in the "
        f"{len(data['results'])} finished runs themselves)"
        + (f"; {wall / 60:.1f} minutes of wall time recorded by the sweep's "
           f"invocations (up to {jobs} variants trained at once; invocations that "
           "overlapped are counted twice, ones killed before a record are missing)"
           if wall else "")
        + f". With {jobs} run(s) at once the sweep needs at least "
        f"{data['cpu_seconds'] / 60 / jobs:.0f} minutes of wall time (its CPU time over "
        f"{jobs}). " + time_verdict(data), ""]
  by = {}
  for r in data["results"]:
    by[r.get("stage", "grid")] = by.get(r.get("stage", "grid"), 0.0) + r["cpu_seconds"]
  if by:
    L += ["CPU time of the runs by stage: " + ", ".join(
        f"{s} {by[s] / 60:.1f} CPU-minutes" for s in ("lr", "grid", "seeds") if s in by)
        + " (the lr stage's winning run is also the grid's run at its cell).", ""]
  L += ["![accuracy against width](mqar.png)", "",
        f"**What Zoology shows** ({ZOOLOGY}): {ZOOLOGY_RESULT}", ""]
  L += ["## Setup", "",
        f"- Data: `data/mqar.py` (Zoology §3 and their generator): vocabulary "
        f"{c['vocab_size']} (keys from the lower half, values from the upper), panels of "
        + ", ".join(f"{t} tokens with {P} pairs" for t, P in panels)
        + f", queries placed by Zoology's power law (a = {c['power_a']}); fresh "
        f"sequences every step; accuracy = share of the {c['eval_sequences']} held-out "
        "sequences' queried values predicted exactly (argmax), after the last step. "
        "A model that answers with one of the sequence's P values at random scores "
        "1/P (the dotted line); one that recalls, 100%.",
        f"- Model: {c['num_layers']}-layer decoder (pre-LN), {c['num_heads']} attention "
        f"head(s) at every width, {c['positions']} positions, MLP width 2 x d_model"
        + (f", a depthwise causal convolution of {c['short_conv']} taps on each "
           "attention layer's input (`model.short_conv`; configs/mqar.py says why)"
           if c.get("short_conv") else "")
        + (f"; the variants whose papers build a layer around them ({_layered()}) as "
           "bare operators, without that layer (output norm and gate, q/k/v "
           "convolutions: `model.gated_layer=bare`, issue 76)"
           if c.get("gated_layer", "bare") == "bare" else
           f"; the variants whose papers build a layer around them ({_layered()}) with "
           f"`model.gated_layer={c['gated_layer']}`")
        + f"; widths {', '.join(map(str, p['widths']))}.",
        f"- Training: {_steps_words(p)} of {c['batch_size']} sequences, AdamW "
        f"(weight decay {c['weight_decay']}), {c['warmup_steps']} warmup steps then "
        f"{c['schedule']}; variant options {json.dumps(c['attention_options'])}.",
        f"- Learning rate, one procedure for every variant: each of "
        f"{', '.join(f'{x:g}' for x in p['lrs'])} at width {p['lr_cell'][0]}, "
        f"{p['lr_cell'][1]} tokens and {p['lr_cell'][2]} pairs, seed 0; the best final "
        "accuracy wins (rates within 1 point of the best tie, and a tie goes to the "
        "smallest rate) and is used across the whole grid"
        + (f". Where the best is an end of the rates run and beats the rate next to it "
           f"by more than 1 point, the next rate out ({_ladder_words(p)}) is run too, up "
           f"to {p['lr_extend']} a side (studies.core.runs.next_lr, the rule of the other "
           "variant pages)" if p.get("lr_extend") else "") + ".",
        f"- Seeds: {', '.join(map(str, p['seeds']))} for "
        f"{', '.join(p['seeded'])} at (width, tokens, pairs) {_seed_cell_words(p)}: "
        "mean ± standard error (sample sd / sqrt(n), the count in brackets); elsewhere "
        "one seed. 'Better' or 'worse' needs Welch's p, adjusted by Holm's method over "
        f"every comparison of the page, below {protocol.ALPHA}; everything else is "
        "unresolved.", ""]
  L += ["**What differs from Zoology's setup.** Their vocabulary is 8192 (here "
        f"{c['vocab_size']}, so that the output layer does not dominate a CPU step); "
        "their widths are 64-512 and their panels grow the length and the pairs together "
        "(64-512 tokens, 4-64 pairs); here the widths are "
        f"{p['widths'][0]}-{p['widths'][-1]} and the panels "
        + ", ".join(f"{t} tokens with {P} pairs" for t, P in panels)
        + " (more pairs in the same length: the recall load grows at the cost of the "
        "shortest sequences); they train 64 epochs of 100 000 sequences with batch 512 "
        f"at the short lengths (here {_steps_words(p)} of {c['batch_size']}: "
        + " and ".join(f"{x[2] * c['batch_size']:,}" for x in p["panels"])
        + " sequences); they sweep 4 learning rates "
        "(1e-4 to 1e-2) per point and keep the best (here "
        f"{len(p['lrs'])}" + (f" to {len(lr_rule(p).ladder)}" if p.get("lr_extend") else "")
        + " at one cell per variant); their models have no MLP in that "
        "figure and attention has learned positions, the other mixers none (here an MLP "
        f"and {c['positions']} positions for every variant)"
        + ("; their attention has no convolution beside it (their BaseConv and Based "
           "have short ones), here every variant has the same "
           f"{c['short_conv']}-tap convolution, so a row measures the variant's recall "
           "with the previous-token step given, not how soon it grows a previous-token "
           "head" if c.get("short_conv") else "")
        + "; their query region is "
        "filler with the answer as the label only, here the answer follows its key in "
        "the token stream (data/mqar.py). Their mixers are gated convolutions and "
        "RNNs; the rows here are this project's attention variants.", ""]
  # the learning rates
  w0, t0, P0 = p["lr_cell"]
  L += ["## Learning rates", "",
        f"Final accuracy at width {w0}, {t0} tokens, {P0} pairs, seed 0, per rate; the "
        "chosen one in bold.", ""]
  needed = {n: lr_rates(p, data["results"], n) for n in trained}
  cols = sorted(set(p["lrs"]).union(*needed.values()))
  head = ["variant"] + [f"lr {x:g}" for x in cols]
  rows = []
  for n in trained:
    cells = []
    for x in cols:
      r = next((r for r in data["results"] if r["variant"] == n and r["stage"] == "lr"
                and r["lr"] == x), None)
      s = f"{r['accuracy']:.1%}" if r else "not run" if x in needed[n] else "–"
      cells.append(f"**{s}**" if lrs.get(n) == x else s)
    rows.append([f"`{n}`"] + cells)
  L += pages.table(head, rows) + [""]
  if len(cols) > len(p["lrs"]):
    L += ["'–': a rate past the grid that the variant's sweep did not need (its best "
          "rate was not that end of the grid, or did not beat the rate next to it by "
          "more than 1 point).", ""]
  # the grid
  L += ["## Accuracy on the queried values", "",
        "At each variant's chosen rate; mean ± standard error (seeds) where there are "
        "seeds, else seed 0; '-' = not run yet.", ""]
  head = ["variant", "lr"] + [_col(w, t, P) for t, P in panels for w in p["widths"]]
  rows = []
  for n, t in treat.items():
    if t != "train":
      kind, why = t
      label = (f"represented by softmax: {why}" if kind == "same"
               else f"cannot: {why}")
      rows.append([f"`{n}`", "", label.replace("|", "\\|")] + [""] * (len(head) - 3))
      continue
    rows.append([f"`{n}`", f"{lrs[n]:g}" if lrs.get(n) else "-"] +
                [_pct(stats[(n, w, tt, P)]) if (n, w, tt, P) in stats else "-"
                 for tt, P in panels for w in p["widths"]])
  L += pages.table(head, rows) + [""]
  L += verdict_lines(shown, stats)
  L += reading_lines(shown, stats)
  missing = missing_cells(data)
  L += ["## Missing", ""]
  L += ([f"- {m}" for m in missing] if missing else ["Every run of the plan finished."])
  L += ["", "Rewrite this page from results.json: `python -m scripts.mqar --page_only`; "
        "run or resume the sweep (finished runs are kept, interrupted ones resume): "
        "`python -m scripts.mqar --jobs=2`, then `python -m scripts.mqar "
        "--collect` for the page of what finished."]
  return L


def verdict_lines(data, stats) -> list[str]:
  """Each seeded variant against softmax at each of its seed cells, and where the
  softmax-linear gap closes with width (`page_verdicts`: Welch + Holm over all of
  them)."""
  p = data["settings"]
  cells = list(dict.fromkeys(tuple(c[:3]) for c in p["seed_cells"]))
  v = page_verdicts(data)
  L = ["## Against softmax, at the seeded cells", "",
       "Difference in accuracy (variant - softmax) with its 95% interval (Welch) and "
       "Welch's p adjusted by Holm's method over every comparison of this page (this "
       "table and the softmax-linear lines below: "
       f"{sum(x.test is not None for x in v.values())} tests); better/worse only at an "
       f"adjusted p < {protocol.ALPHA}, else unresolved; `equal on every seed` for "
       f"identical values; no verdict from fewer than {protocol.MIN_SEEDS} seeds of "
       "either ([the protocol](../../studies/PROTOCOL.md)).", ""]
  head = ["variant"] + [_col(*c) for c in cells]
  rows = []
  for n in p["seeded"]:
    if n == REFERENCE:
      continue
    row = [v[(n, c)].text("{:.1%}") if (n, c) in v else "-" for c in cells]
    rows.append([f"`{n}`"] + row)
  L += pages.table(head, rows) + [""]
  # softmax against linear, panel by panel, width by width
  for t, P in _panels(p):
    words = []
    for w in p["widths"]:
      a, b = stats.get((REFERENCE, w, t, P)), stats.get(("linear", w, t, P))
      x = v.get(("linear", (w, t, P)))
      if not a or not b or x is None:
        continue
      how = {"better": "softmax worse", "worse": "softmax better"}.get(x.word, x.word)
      if x.test is not None:
        how += f", linear − softmax {x.test.diff:+.1%}, p_adj {x.p_adj:.2g}"
      words.append(f"width {w}: softmax {_pct(a)}, linear {_pct(b)} ({how}"
                   + (f"; seeds reaching {SOLVED:.0%}: softmax "
                      f"{recalled(data, REFERENCE, w, t, P)}, linear "
                      f"{recalled(data, 'linear', w, t, P)}" if x.word != "few" else
                      "; too few seeds for a verdict")
                   + ")")
    if words:
      L += [f"Softmax against linear at {t} tokens, {P} pairs: " + "; ".join(words) + ".",
            ""]
  return L


def reading_lines(data, stats) -> list[str]:
  """What the figures say against Zoology's, from the figures alone."""
  if not stats:
    return []
  p = data["settings"]
  L = ["## Reading", ""]
  for t, P in _panels(p):
    solved = {}
    for (n, w, tt, PP), m in stats.items():
      if (tt, PP) == (t, P) and m[0] >= SOLVED:
        solved[n] = min(solved.get(n, w), w)
    ran = sorted({n for (n, w, tt, PP) in stats if (tt, PP) == (t, P)})
    if not ran:
      continue
    by = sorted(solved.items(), key=lambda kv: (kv[1], kv[0]))

    def lost(n, w0):        # wider cells of a solved variant that are not solved
      out = [f"{m[0]:.1%} at width {w}" for (nn, w, tt, PP), m in sorted(stats.items())
             if (nn, tt, PP) == (n, t, P) and w > w0 and m[0] < SOLVED]
      return f" (but {', '.join(out)})" if out else ""

    L += [f"At {t} tokens with {P} pairs, {len(solved)} of the {len(ran)} variants run "
          f"reach {SOLVED:.0%} at some width"
          + (": " + ", ".join(f"`{n}` from width {w}{lost(n, w)}" for n, w in by)
             if by else "")
          + ((". Not there at any width run: " + ", ".join(
              f"`{n}`" for n in ran if n not in solved)) if len(solved) < len(ran) else "")
          + ".", ""]
  falls = width_drops(stats)
  if falls:
    wide = sorted({n for (n, *_), m in stats.items() if m[1] is not None and m[1] > 0.1})
    L += ["Accuracy falls with width, by more than "
          f"{DROP * 100:.0f} points from a narrower width of the same panel, for "
          + "; ".join(f"`{n}` ({t} tokens, {P} pairs: {a:.1%} at width {w0}, {b:.1%} at "
                      f"width {w1})" for n, t, P, w0, a, w1, b in falls)
          + ". Zoology tunes the rate at every point of its grid; here each variant's "
          "one rate is chosen at one cell (width "
          f"{p['lr_cell'][0]}, {p['lr_cell'][1]} tokens, {p['lr_cell'][2]} pairs) and "
          "used at every width, and a rate that suits one width can be too high or too "
          "low for another. A second cause is the spread between seeds: cells off the "
          "seeded ones have one seed"
          + (", and at the seeded cells the standard error of "
             + ", ".join(f"`{n}`" for n in wide) + " exceeds 10 points" if wide else "")
          + ". Neither is tested here: read these cells as a limit of the one-rate, "
          "one-seed procedure, not as evidence that width hurts recall.", ""]
  s = [m[0] for (n, w, t, P), m in stats.items() if n == REFERENCE]
  if s and max(s) < SOLVED:
    L += [f"At this budget softmax does not solve MQAR at any cell (its best: "
          f"{max(s):.1%}); Zoology's attention solves it at every width after 64 epochs "
          "of 100 000 sequences, and its qualitative result is not reproduced here.", ""]
  lrs = {n: x for n, x in data["lrs"].items() if x is not None}
  ladder = lr_rule(p).ladder      # the grid where the sweep does not go past it
  edge = sorted(n for n, x in lrs.items() if x in (ladder[0], ladder[-1]))
  if edge:
    what = ("of the grid" if len(ladder) == len(p["lrs"]) else
            f"of the rates the sweep may run ({ladder[0]:g} to {ladder[-1]:g})")
    L += [f"The chosen rate lies at an end {what} for {len(edge)} of the {len(lrs)} "
          f"variants whose rate is chosen ({', '.join(f'`{n}`' for n in edge)}): the "
          "sweep does not bracket their best rate, and a rate beyond it might do better.",
          ""]
  return L


# A fall of accuracy with width (one variant, one panel) that the page names
DROP = 0.2


def width_drops(stats: dict) -> list[tuple]:
  """(variant, tokens, pairs, narrower width, its accuracy, wider width, its accuracy)
  for each wider cell whose accuracy is more than DROP below the best narrower cell of
  the same variant and panel (`stats`: cell_stats)."""
  out = []
  for (n, w1, t, P), m in sorted(stats.items()):
    below = [(mm[0], w) for (nn, w, tt, PP), mm in stats.items()
             if (nn, tt, PP) == (n, t, P) and w < w1]
    if below and max(below)[0] - m[0] > DROP:
      a, w0 = max(below)
      out.append((n, t, P, w0, a, w1, m[0]))
  return out
