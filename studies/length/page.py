"""results/lm_length/README.md, written from its JSON alone (results.json: studies.
length.results.build), with two small plots: the gap to flash against length per row
(gap_length.png) and the gap against train tokens/s at the longest length
(gap_speed.png), and the training curves (curves.png). Until a row has run, its cells say "not run yet" and name the command;
until any run exists, the page shows the plan, the measured step costs and the budget.
`cells` is what the decision page (studies.choose) reads of it.
"""
from __future__ import annotations

import json
import os

from studies.core import pages, protocol
from studies.length import (costs, floors, ledger, longer, plan as plan_lib, presets,
                            results, runner)

JSON = "results.json"
PLAN = "plan.json"


def _f(x, fmt="{:.3f}"):
  return "–" if x is None else fmt.format(x)


def _mib(b):
  return "–" if b is None else f"{b / 2 ** 20:.1f} MiB"


def _state(b):
  return "–" if b is None else (f"{b / 2 ** 10:.0f} KiB" if b < 2 ** 20 else _mib(b))


def plan_lines(d: dict) -> list[str]:
  """The plan: steps, tokens, runs and CPU-minutes per row x length, the spend."""
  pl, sc = d.get("plan"), d.get("step_costs")
  out = ["## The plan (fixed before the first run)", ""]
  out.append(f"Every run: {d['steps']:,} steps of {d['tokens_per_step']:,} bytes "
             f"({', '.join(f'batch {d['tokens_per_step'] // L} at {L:,}' for L in d['lengths'])}"
             f"), {d['tokens_per_run']:,} training bytes; evaluated on the first "
             f"{d['eval_tokens']:,} bytes of validation (the rate) and of test (the page). "
             f"Rates chosen at {d['select_at']:,} on validation (seed 0), carried to the "
             f"other lengths; reporting seeds {', '.join(map(str, d['seeds']))}.")
  if not pl and d["preset"] != "cpu":      # a lent GPU's time decides how far it gets
    return out + ["", "No CPU-minute plan: this preset runs on a lent GPU (issue 105 item "
                  "3: `bash scripts/gpu_check.sh 560 length`, one device call at a time, "
                  "each resuming from the committed ledger and the cut-off run's "
                  "checkpoint), in the runner's order, as far as the device time allows."]
  if not pl:
    return out + ["", "No plan recorded yet: `python -m scripts.lm_length --measure_steps`."]
  ch = pl["chosen"]
  if pl["dropped"]:
    full = pl["all"]["named_cpu_min"]
    out += ["", f"At every length the six named rows would take {full:,.0f} CPU-minutes, "
            f"over the budget of {ch['budget_cpu_min']:,.0f}: length "
            f"{', '.join(map(str, pl['dropped']))} is dropped before any row (issue 101)."]
  out += ["", f"Planned: the six named rows at {', '.join(f'{L:,}' for L in ch['lengths'])}"
          f" take {ch['named_cpu_min']:,.0f} CPU-minutes; the rows past them that fit the "
          f"rest of the budget: {', '.join(ch['extra_rows']) or 'none'}; in all "
          f"{ch['planned_cpu_min']:,.0f} of {ch['budget_cpu_min']:,.0f} CPU-minutes."]
  head = ["row"] + [f"{L:,}: runs × CPU-min" for L in ch["lengths"]] + ["CPU-min"]
  rows = []
  for r, by in ch["rows"].items():
    rows.append([f"`{r}`"] + [f"{c['runs']} × {c['cpu_min_per_run']:.1f}"
                              + ("" if c["measured"] else " (est.)") for c in by.values()]
                + [f"{sum(c['cpu_min'] for c in by.values()):,.0f}"])
  out += [""] + pages.table(head, rows)
  a = ch["assumptions"]
  out += ["", f"A run's CPU: steps × the measured CPU-s a step + {a['overhead_compiles']} "
          f"builds (start-up and compile, measured) + the evaluation's forward passes "
          f"({a['eval_step_fraction']:.2f} of a step each); the sweep budgets "
          f"{a['extension_allowance']} extension a row; \"(est.)\": a row not measured, "
          "costed as the costliest measured row at that length (studies/length/plan.py)."]
  if sc:
    out += ["", "### Measured step costs", ""]
    for part in sc.get("parts") or [dict(sc, lengths=sorted({c["length"] for c in
                                                               sc["cells"]}))]:
      g, run = part["gauge"], part["run"]
      out += [f"{', '.join(f'{L:,}' for L in part['lengths'])}: `{run['command']}` on "
              f"{run['date']}, {pages.where(run)}, {part['threads']}; gauge "
              f"{g['before']['flop_per_s'] / 1e9:.0f} GFLOP/s before, "
              f"{g['after']['flop_per_s'] / 1e9:.0f} after (a {g['before']['n']}² float32 "
              "matmul, `studies.core.timing.matmul_peak`).", ""]
    out += [f"Each cell: the median of {sc['rounds']} rounds of {sc['steps_per_round']} "
            "steps, interleaved with the other rows at its length, after compilation (CPU "
            "seconds of the process, all its threads: the loaded host's waits do not "
            "count)" + ("" if sc.get("complete", True) else "; **a part was cut off "
                        "before its last round**") + ".", ""]
    out += pages.table(["row", "length", "batch", "CPU-s a step", "rounds (min–max)",
                        "wall-s a step", "build CPU-s"],
                       [[f"`{c['row']}`", f"{c['length']:,}", c["batch"],
                         f"{c['cpu_s_per_step']:.2f}",
                         f"{c['spread'][0]:.2f}–{c['spread'][1]:.2f}",
                         f"{c['wall_s_per_step']:.2f}", f"{c['compile_cpu_s']:.0f}"]
                        for c in sc["cells"]])
  sp = d.get("spend") or {}
  out += ["", f"Spent so far: {sp.get('cpu_seconds', 0) / 60:,.0f} CPU-minutes over "
          f"{d['runs']} runs (the committed ledger, {ledger.NAME.format(preset=d['preset'])}"
          f"; {ledger.counted()})."]
  return out


def _cell_text(d, r, L):
  c = d["cells"][r][L]
  of = d.get("controls", {}).get(r)
  if of:        # a control row: out of the family, its pair with the row it controls
    x = d["verdicts"].get("controls", {}).get(r, {}).get(L)
    if not c["seeds"]:
      return (f"control of `{of}` (out of the family), as the budget allows: "
              f"`{results.command(_p(d), [r], [int(L)])}`")
    f = d["verdicts"].get("controls_vs_reference", {}).get(r, {}).get(L)
    k = len(c["seeds"])
    return (f"{c['test']:.3f} ({k} seed{'s' * (k != 1)})"
            + (f"; against flash {f['words']}" if f else "") + f"; control of `{of}`"
            + (f": `{of}` against it {x['words']}" if x else ""))
  if not c["seeds"] and r not in d["trained_rows"]:
    return f"outside the budget (plan.json): `{results.command(_p(d), [r], [int(L)])}`"
  if not c["seeds"]:
    rate = d["rates"][r]
    if rate["chosen"] is None:
      n, nxt = len(rate["grid"]), rate.get("next")
      why = ("rate sweep incomplete" + (
          f": its best of {n} rates is at the grid's edge, {nxt:g} next"
          if n >= protocol.MIN_RATES and nxt is not None else
          f": {n} of ≥ {protocol.MIN_RATES} rates" if n else ""))
      return f"not run yet ({why}): `{results.command(_p(d), [r])}`"
    return f"not run yet: `{results.command(_p(d), [r], [int(L)])}`"
  v = d["verdicts"]["by"].get(r, {}).get(L)
  k = len(c["seeds"])
  s = f"{c['test']:.3f} ({k} seed{'s' * (k != 1)})"
  return s + (f"; {v['words']}" if v else "")


def _p(d):
  return presets.preset(d["preset"])


def rate_lines(d: dict) -> list[str]:
  """Each row's rate sweep at the selection length: validation bits/byte of seed 0 at
  every rate run (the chosen one in bold), the tie it was chosen under and where the
  tie came from, and what the sweep waits for."""
  out = [f"## Rates chosen on validation at {d['select_at']:,}", "",
         "Seed 0's validation bits/byte at each rate (protocol.RateGrid: ≥ "
         f"{protocol.MIN_RATES} rates, a best figure at an end of the grid extends it); "
         "the chosen rate in bold: the smallest within the tie of the best.", ""]
  rows = []
  for r in d["rows"]:
    st = d["rates"].get(r) or {}
    g = st.get("grid") or {}
    if not g and r not in d["trained_rows"]:
      continue
    cells = ", ".join((f"**{float(x):g}: {v:.3f}**" if st.get("chosen") is not None and
                       float(x) == st["chosen"] else f"{float(x):g}: {v:.3f}")
                      for x, v in sorted(g.items(), key=lambda kv: float(kv[0])))
    left = ("did not train" if not st.get("trained", True) else
            f"chosen {st['chosen']:g}" if st.get("chosen") is not None else
            f"next {st['next']:g}" if st.get("next") is not None else st.get("tie_from", ""))
    tie = f"{st['tie']:.4f} ({st.get('tie_from', '')})" if st.get("tie") is not None else \
        st.get("tie_from", "–")
    rc = st.get("recheck")
    if rc:     # the reference re-read under the tie its own seeds fixed (results.recheck)
      left += (f"; {rc['chosen']:g} under {rc['tie_from']}' tie {rc['tie']:.4f}"
               + (", the same" if rc["chosen"] == st["chosen"] else
                  ": the seeds stay at the rate they ran at"))
    rows.append([f"`{r}`", cells or "–", tie, left])
  return out + pages.table(["row", "validation by rate", "tie (bits/byte)", "status"], rows)


def quality_lines(d: dict) -> list[str]:
  Ls = [str(L) for L in d["lengths"]]
  out = ["## Quality: test bits/byte, gap to flash", "",
         f"Per length, each row against flash (Welch's t-test, Holm over the "
         f"{d['verdicts']['family']} comparisons of the family; bits/byte is unbounded "
         "above, so the interval is Welch's 95%); a row is reported only once its rate "
         "sweep is complete.", ""]
  out += pages.table(["row", "rate"] + [f"{int(L):,} bytes" for L in Ls],
                     [[f"`{r}`", _f(d["rates"][r]["chosen"], "{:g}")]
                      + [_cell_text(d, r, L) for L in Ls] for r in d["rows"]])
  for L, t in d["verdicts"]["power"].items():
    out += ["", f"{int(L):,} bytes: {t}"]
  return out


def curve_lines(d: dict) -> list[str]:
  """Whether the runs ended still learning: each row x length's drop in train bits/byte
  over the last quarter of its steps (results.late_drop), the seeds' mean and range."""
  out = ["## Still learning at the end?", "",
         f"The train loss (bits/byte, the mean over each log interval) fell this much over "
         f"the last quarter of the {d['steps']:,} steps: the mean of the intervals ending in "
         "the third quarter less that of those ending in the fourth (`studies.length."
         "results.late_drop`); positive: still learning. Every gap on this page is at "
         f"{d['tokens_per_run']:,} training bytes a run.", ""]
  rows = []
  for r in d["rows"]:
    for L in map(str, d["lengths"]):
      c = d["cells"][r][L]
      xs = [v["late_drop"] for v in c["seeds"].values() if v.get("late_drop") is not None]
      if xs:
        end = c["curve"][-1][1] if c.get("curve") else None
        rows.append([f"`{r}`", f"{int(L):,}", f"{sum(xs) / len(xs):+.3f}",
                     f"{min(xs):+.3f} to {max(xs):+.3f}", str(len(xs)), _f(end)])
  if not rows:
    return out + ["No reporting run has a training curve yet."]
  return out + pages.table(["row", "length", "fell over the last quarter", "seeds' range",
                            "seeds", "train bits/byte at the end"], rows)


def split_lines(d: dict) -> list[str]:
  out = ["## Where the gap comes from", "",
         f"Each run's test loss split into recall positions (`data.recall_mask`, n = "
         f"{d['recall_n']}: a byte that continues a {d['recall_n'] + 1}-gram seen "
         "earlier in the same window) and the rest; gaps to flash's seed means.", ""]
  rows = []
  for r, by in d["split"].items():
    for L, s in by.items():
      rows.append([f"`{r}`", f"{int(L):,}", f"{s['gap']:+.3f}", f"{s['gap_recall']:+.3f}",
                   f"{s['gap_rest']:+.3f}", _f(s["recall_share"], "{:.0%}"),
                   _f(d["cells"][r][L].get("recall_fraction"), "{:.0%}")])
  if not rows:
    return out + ["Not run yet: no row has run beside flash at any length "
                  f"(`{d['command']}`)."]
  return out + pages.table(["row", "length", "gap", "gap on recall", "gap on the rest",
                            "recall's share of the gap", "recall positions"], rows)


def cost_lines(d: dict) -> list[str]:
  out = ["## Cost as a model, from the same runs", "",
         "Medians over the reporting seeds: train tokens/s (the log intervals after the "
         "first), the XLA memory plan of one forward+backward step, decode µs a token "
         "(batch 1, a state sized for the length), the model's decode-state bytes "
         "(`models.count.decode_state_bytes`).", ""]
  rows = []
  for r in d["rows"]:
    for L in map(str, d["lengths"]):
      c = d["cells"][r][L].get("cost")
      if c:
        rows.append([f"`{r}`", f"{int(L):,}", f"{c['train_tokens_per_s']:,.0f}",
                     _mib(c.get("peak_bytes")), f"{c['decode_us_per_token']:,.0f}",
                     _state(c.get("state_bytes"))])
  if not rows:
    out.append(f"Not run yet: `{d['command']}`.")
  else:
    out += pages.table(["row", "length", "train tokens/s", "memory", "decode µs/token",
                        "state"], rows)
  cr = d.get("cost_run")
  out += ["", "### Interleaved cost run", ""]
  if not cr:
    return out + ["Not run yet: `python -m scripts.lm_length --cost_run` (every row at "
                  "each length, ≥ 3 interleaved rounds, with the gauge)."]
  g = cr["gauge"]
  out += [f"`{cr['run']['command']}` on {cr['run']['date']}: {cr['rounds']} rounds, "
          f"gauge {g['before']['flop_per_s'] / 1e9:.0f} → "
          f"{g['after']['flop_per_s'] / 1e9:.0f} GFLOP/s.", ""]
  dec = lambda c: ([f"{c['decode_us_per_token']:,.0f}", f"{c['decode_spread'][0]:,.0f}–"
                    f"{c['decode_spread'][1]:,.0f}"] if "decode_us_per_token" in c else
                   ["–", "–"])
  # tokens a second from the wall time (one core, the other idle: what the decision page
  # reads), and their range over the rounds from each round's CPU seconds (on one core
  # the two agree within the host's noise)
  tps = lambda c: [f"{c['tokens_per_step'] / c['wall_s_per_step']:,.0f}",
                   f"{c['tokens_per_step'] / c['spread'][1]:,.0f}–"
                   f"{c['tokens_per_step'] / c['spread'][0]:,.0f}"]
  return out + ["Train tokens/s: the step's bytes over its median wall seconds (one core); "
                "their range: over each round's CPU seconds a step.", ""] + pages.table(
      ["row", "length", "train tokens/s", "range", "CPU-s a step", "min–max",
       "decode µs/token", "min–max"],
      [[f"`{c['row']}`", f"{c['length']:,}"] + tps(c)
       + [f"{c['cpu_s_per_step']:.2f}", f"{c['spread'][0]:.2f}–{c['spread'][1]:.2f}"]
       + dec(c) for c in cr["cells"]])


def plots(d: dict, out: str) -> list[str]:
  """gap_length.png and gap_speed.png where there is something to draw; their names."""
  from studies.core import plots as P
  made = []
  V = d["verdicts"]["by"]
  if any("diff" in x for by in V.values() for x in by.values()) or d["verdicts"].get(
      "controls_vs_reference"):
    plt = P.pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 3))
    for r, by in V.items():
      Ls = [L for L in map(str, d["lengths"]) if "diff" in by.get(L, {})]
      if Ls:
        ax.errorbar([int(L) for L in Ls], [by[L]["diff"] for L in Ls],
                    yerr=[[by[L]["diff"] - by[L]["lo"] for L in Ls],
                          [by[L]["hi"] - by[L]["diff"] for L in Ls]], marker="o",
                    ms=3, capsize=2, lw=1, label=r)
    # a control row (out of the family): its exploratory gap to flash, dashed
    for r, by in d["verdicts"].get("controls_vs_reference", {}).items():
      Ls = [L for L in map(str, d["lengths"]) if "diff" in by.get(L, {})]
      if Ls:
        ax.errorbar([int(L) for L in Ls], [by[L]["diff"] for L in Ls],
                    yerr=[[by[L]["diff"] - by[L]["lo"] for L in Ls],
                          [by[L]["hi"] - by[L]["diff"] for L in Ls]], marker="s",
                    ms=3, capsize=2, lw=1, ls="--", label=f"{r} (control, exploratory)")
    ax.axhline(0, color="grey", lw=0.6)
    ax.set(xscale="log", xlabel="bytes a window", ylabel="gap to flash (bits/byte)")
    # plain tick labels (a log axis's default, 10^k in mathtext, costs seconds to parse)
    ax.set_xticks(list(d["lengths"]), [f"{L:,}" for L in d["lengths"]])
    ax.minorticks_off()
    ax.legend(fontsize=6)
    P.save(fig, os.path.join(out, "gap_length.png"), dpi=110, bbox_inches="tight")
    made.append("gap_length.png")
  top = str(d["lengths"][-1])
  pts = {r: (d["cells"][r][top]["cost"]["train_tokens_per_s"], V[r][top]["diff"])
         for r in V if "diff" in V[r].get(top, {}) and d["cells"][r][top].get("cost")}
  ref = d["cells"].get("flash", {}).get(top, {}).get("cost")
  if pts and ref:           # the reference itself: gap 0 at its own speed
    pts["flash"] = (ref["train_tokens_per_s"], 0.0)
  if pts:
    plt = P.pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 3))
    ax.scatter([x for x, _ in pts.values()], [y for _, y in pts.values()], s=12)
    ax.axhline(0, color="grey", lw=0.6)
    ax.set(xlabel=f"train tokens/s at {int(top):,}", ylabel="gap to flash (bits/byte)")
    P.label_apart(ax, pts)
    P.save(fig, os.path.join(out, "gap_speed.png"), dpi=110, bbox_inches="tight")
    made.append("gap_speed.png")
  curves = {L: {r: d["cells"][r][L]["curve"] for r in d["rows"]
                if d["cells"][r][L].get("curve")} for L in map(str, d["lengths"])}
  curves = {L: by for L, by in curves.items() if by}
  if curves:
    plt = P.pyplot()
    fig, axes = plt.subplots(1, len(curves), figsize=(3.2 * len(curves), 2.8), sharey=True,
                             squeeze=False)
    # one colour per row on every panel, one legend for the figure: a row that has run
    # at one length only is still named
    color = {r: plt.get_cmap("tab10")(i % 10) for i, r in enumerate(d["rows"])}
    handles = {}
    for ax, (L, by) in zip(axes[0], curves.items()):
      for r, c in by.items():       # the last three quarters: where "still learning" is read
        c = [(s, b) for s, b in c if s > d["steps"] / 4]
        handles[r], = ax.plot([s * d["tokens_per_step"] / 1e6 for s, _ in c],
                              [b for _, b in c], lw=1, marker="o", ms=2, color=color[r])
      # the n-gram floors of the runs' own bytes (their test figures): a row above the
      # 3-gram's has learned little past local byte statistics
      fl = floors.summary(d.get("floors"), L) or {}
      for n in sorted(set(fl) & {2, 3}) + ([min(fl, key=lambda n: fl[n]["bits"])]
                                            if fl else []):
        ax.axhline(fl[n]["bits"], color="grey", lw=0.7, ls=":")
        ax.annotate(f"{n}-gram (test)", (1, fl[n]["bits"]), xycoords=("axes fraction",
                    "data"), ha="right", va="bottom", fontsize=6, color="grey")
      ax.set(title=f"{int(L):,} bytes a window", xlabel="training bytes (millions)")
    axes[0][0].set_ylabel("train bits/byte (seed mean)\nlast three quarters of the run",
                          fontsize=8)
    names = [r for r in d["rows"] if r in handles]
    fig.legend([handles[r] for r in names], names, fontsize=7, frameon=False,
               loc="lower center", ncol=min(len(names), 6), bbox_to_anchor=(0.5, 0.98))
    P.save(fig, os.path.join(out, "curves.png"), dpi=110, bbox_inches="tight")
    made.append("curves.png")
  return made


def corpus_slice(d: dict) -> str:
  """"; this preset reads <glob> of it: N files, X MB" for a preset on a slice."""
  p = presets.preset(d["preset"])
  if not p.files:
    return ""
  return (f"; this preset reads `{p.files}` of it, the slice a device call can carry: "
          f"{presets.GPU_SLICE['files']:,} files, {presets.GPU_SLICE['bytes'] / 1e6:.1f} MB "
          "of text, each document in the split it has in the whole corpus")


def gpu_pointer(d: dict) -> list[str]:
  """The cpu page's line on the gpu preset's page (its own folder: presets.out_of),
  whether it has run or not."""
  if d["preset"] != "cpu":
    return []
  g = d.get("gpu_page")
  where, gp = presets.folder_of("gpu"), presets.preset("gpu")
  if g:
    return ["", f"On a GPU: [the `gpu` preset's page]({where}/README.md) ({g['runs']} "
            f"runs on {g['device']}, lengths {', '.join(f'{L:,}' for L in g['lengths'])})"
            ": its figures stay on that page, apart from these CPU runs."]
  return ["", f"On a GPU: the `gpu` preset ({gp.lengths[0]:,} to {gp.lengths[-1]:,} "
          f"bytes, {gp.steps * gp.tokens_per_step / 1e6:.1f}M training bytes a run) writes "
          f"its own page, {presets.out_of('gpu')}/, when a GPU is lent "
          "(`bash scripts/gpu_check.sh 560 length`, issue 105 item 3); none has run yet."]


def render(d: dict, images=()) -> list[str]:
  """The page's lines from its JSON `d`."""
  out = [f"# A causal LM at {' and '.join(f'{L:,}' for L in d['lengths'])} bytes of "
         "code: the gap to flash, where it comes from, and the cost", ""] + ([pages.header(d["run"]), ""] if d.get("run")
                                            else []) + [
         protocol.top_line(d["protocol"]), "",
         f"Corpus: pycode (`python -m data fetch pycode`: the .py files of 4 pinned PyPI "
         f"sdists, data/pycode.py{corpus_slice(d)}), a byte-level LM, configs/text.py:pycode's model "
         f"(4 layers × 128, 4 heads); rows: "
         + "; ".join(f"`{r}` ({d['row_why'][r]})" for r in d["rows"]) + "."]
  out += gpu_pointer(d)
  if not d["runs"]:
    out += ["", f"**No row has run yet.** The study runs over several sessions from its "
            f"committed ledger: `{d['command']} --jobs=2`, then commit results/lm_length."
            if d["preset"] == "cpu" else
            f"**No row has run yet.** It runs on a lent GPU, one device call at a time "
            f"(`bash scripts/gpu_check.sh 560 length`), then commit "
            f"{presets.out_of(d['preset'])}."]
  out += [""] + plan_lines(d) + [""] + rate_lines(d) + [""] + quality_lines(d)
  out += [""] + floors.floor_lines(d)
  if "longer" in d:
    out += [""] + longer.lines(d)
  out += [""] + curve_lines(d)
  out += [""] + split_lines(d)
  out += [""] + cost_lines(d)
  ck = d.get("check") or {}
  out += ["", f"## The carried rate at {d['check_at']:,}", ""]
  if not any(c.get("complete") for c in ck.values()):
    out.append(f"Not run yet: `{d['command']} --lengths={d['check_at']}`.")
  for r, c in ck.items():
    if c.get("complete"):
      rates = ", ".join(f"{float(x):g}: {v:.3f}" for x, v in c["rates"].items())
      out.append(f"`{r}` (validation, seed 0: {rates}): the carried rate {c['carried']:g} "
                 + ("is" if c["within_tie"] else "is not") + f" within the tie "
                 f"({c['tie']:.4f}) of the best, {float(c['best']):g}.")
  out += ["", "## Reading (written by rules from the tables above)", ""]
  out += [f"- {s}" for s in d["reading"]] or ["No row has a verdict yet."]
  for im in images:
    out += ["", f"![{im}]({im})"]
  return out


def collect(p, out: str) -> dict:
  """The page's JSON from out/'s ledger and records."""
  path = ledger.path_of(p.name, out)
  got = ledger.runs_of(path, p.name)
  sc = pages.read_json(os.path.join(out, costs.STEP_COSTS))
  pl = pages.read_json(os.path.join(out, PLAN))
  cr = pages.read_json(os.path.join(out, costs.COST_RUN))
  fl = pages.read_json(floors.path_of(out))
  fl = fl if fl and fl.get("preset") == p.name else None
  return json.loads(json.dumps(results.build(p, got, sc, pl, cr, ledger.totals(path), fl)))


def write(p, out: str, command: str = "") -> dict:
  """Writes out/plan.json (from the measured step costs), out/results.json, the plots
  and out/README.md; returns the JSON."""
  sc = pages.read_json(os.path.join(out, costs.STEP_COSTS))
  if sc and sc.get("preset") == p.name:      # the plan of the preset it measured
    pages.write_json(os.path.join(out, PLAN), plan_lib.fix(p, sc))
  d = dict(collect(p, out), run=pages.run_record(command or results.command(p)
                                                 + " --page_only", p.name))
  if p.name == "cpu":
    d["longer"] = longer.summary(out)
  g = load(os.path.join(out, presets.folder_of("gpu"))) if p.name == "cpu" else None
  if g:
    d["gpu_page"] = {"runs": g.get("runs", 0), "lengths": g.get("lengths", []),
                     "device": (g.get("run") or {}).get("device_kind")
                     or (g.get("run") or {}).get("host", "a GPU")}
  pages.write_json(os.path.join(out, JSON), d)
  pages.write_text(os.path.join(out, "README.md"), render(d, plots(d, out)))
  return d


def load(out: str = costs.OUT) -> dict | None:
  """The page's JSON (results/lm_length/results.json), None where there is none."""
  return pages.read_json(os.path.join(out, JSON))


def cells(d: dict | None) -> dict:
  """What the decision page reads of this page: {(row, length): {"gap", "lo", "hi",
  "verdict", "test", "train_tokens_per_s", "state_bytes", "decode_us_per_token"}} for
  every cell with a figure (a verdict only where the family tested it)."""
  out = {}
  for r, by in (d or {}).get("cells", {}).items():
    for L, c in by.items():
      if "test" not in c:
        continue
      v = d["verdicts"]["by"].get(r, {}).get(L, {})
      cost = c.get("cost", {})
      out[(r, int(L))] = {"test": c["test"], "gap": v.get("diff"), "lo": v.get("lo"),
                          "hi": v.get("hi"), "verdict": v.get("word"),
                          **{k: cost.get(k) for k in ("train_tokens_per_s", "state_bytes",
                                                      "decode_us_per_token")}}
  return out


def main(p, *, rows=None, lengths=None, jobs=1, page_only=False, root, out, data_dir=None,
         command=""):
  """The CLI's study: train what is due (unless page_only), then write the page."""
  os.makedirs(out, exist_ok=True)
  if not page_only:
    os.makedirs(root, exist_ok=True)
    runner.study(p, rows=rows, lengths=lengths, jobs=jobs, root=root, out=out, data_dir=data_dir)
  write(p, out, command=command)
