"""results/variants_mqar/ for the zoology presets (studies/recall/presets.py: a rate per
(variant, width), Zoology's panels): Zoology's Figure 2 shape (accuracy against width,
one panel per length, one line per variant), the smallest width at which each variant
reaches 99% with the decode state that width implies (bytes per sequence), the rates,
the Welch + Holm verdicts against softmax, the budget against costs.json's projection,
and every softmax cell under 99% flagged as a setup fault to investigate (issue 78:
never dropped). Written from results.json (`mqar.page_data`) and costs.json alone.
"""
from __future__ import annotations

import json
import os

from studies.core import pages, protocol
from studies.recall.mqar import REFERENCE, lr_cells, lr_rates, missing_cells, rate_at
from studies.recall.plan import MIN_EFFECT
from studies.recall.page import ZOOLOGY, ZOOLOGY_RESULT, plot, reported
from studies.recall.stats import ACCURACY, _pct, cell_stats, page_verdicts, seed_values

RECALL = 0.99      # "reaches 99%": Zoology's solved; softmax under it is a setup fault


def _panels(p) -> list[tuple]:
  return [tuple(x[:2]) for x in p["panels"]]


def state_bytes(variant: str, width: int, length: int, heads: int = 1, layers: int = 2,
                options: dict | None = None) -> int:
  """Bytes per sequence (batch 1, float32) of the decode state of `variant`'s attention
  operators in a `layers`-layer model of width `width` with `heads` heads (head size
  width / heads) at `length` tokens: attention.decode_state_bytes where the variant
  gives a formula, else the arrays of attention.init_decode_state (state_nbytes);
  options: the variant's attention options (a local window). Softmax's is its KV
  cache, which grows with the length; a fixed-state variant's does not."""
  import attention
  kw = dict(batch=1, max_len=length, num_kv_heads=heads, head_dim=width // heads,
            **dict(options or {}))
  try:
    one = attention.decode_state_bytes(variant, **kw)
  except attention.AttentionError:
    one = attention.state_nbytes(attention.init_decode_state(variant, **kw))
  return int(one) * layers


def smallest_width(stats: dict, variant: str, t: int, P: int, widths) -> int | None:
  """The smallest width of `widths` whose mean accuracy (`stats`: stats.cell_stats)
  of `variant` at (t, P) reaches RECALL, or None."""
  return next((w for w in sorted(widths) if (variant, w, t, P) in stats
               and stats[(variant, w, t, P)][0] >= RECALL), None)


def softmax_faults(stats: dict, p: dict) -> list[tuple]:
  """[(width, tokens, pairs, mean accuracy)] of every softmax cell under RECALL: each a
  fault of the setup until shown otherwise (issue 78), shown, never dropped."""
  return [(w, t, P, stats[(REFERENCE, w, t, P)][0]) for t, P in _panels(p)
          for w in p["widths"] if (REFERENCE, w, t, P) in stats
          and stats[(REFERENCE, w, t, P)][0] < RECALL]


def write_page(data: dict, out: str, run: dict) -> None:
  """out/README.md, out/results.json (data + the run record) and out/mqar.png (Zoology's
  Figure 2 shape: mqar_page.plot) for a zoology preset; reads out/costs.json (the
  probe's projection) where it is there."""
  os.makedirs(out, exist_ok=True)
  data = dict(data, protocol=data.get("protocol") or protocol.record(None, 0))
  pages.write_json(os.path.join(out, "results.json"), dict(data, run=run))
  plot(reported(data), os.path.join(out, "mqar.png"))
  costs = pages.read_json(os.path.join(out, "costs.json"))
  diag = pages.read_json(os.path.join(out, f"{data['preset']}_diagnostics.json"))
  pages.write_text(os.path.join(out, "README.md"), page_lines(data, run, costs, diag))


def page_lines(data: dict, run: dict, costs: dict | None = None,
               diag: dict | None = None) -> list[str]:
  """The page's markdown lines from results.json's `data`, the run record,
  costs.json's `costs` and <preset>_diagnostics.json's `diag` (or None)."""
  p, c = data["settings"], data["config"]
  rec = data.get("protocol") or protocol.record(None, 0)
  shown = reported(data)
  stats = cell_stats(shown["results"], data["lrs"])
  trained = [n for n, t in data["treatment"].items() if t == "train"]
  panels = _panels(p)
  missing = missing_cells(data)
  L = ["# Multi-query associative recall on Zoology's grid", "",
       protocol.top_line(rec), "", pages.header(run), ""]
  if missing:
    L += [f"**Partway through its grid**: {len(missing)} of the {len(trained)} variants "
          "have runs still to finish ([Missing](#missing)); the verdicts (and the number "
          "of tests Holm's correction counts), the accuracy table and the smallest "
          "widths are provisional until the grid completes.", ""]
  L += budget_lines(data, costs)
  L += ["![accuracy against width, one panel per length](mqar.png)", "",
        f"**What Zoology shows** ({ZOOLOGY}): {ZOOLOGY_RESULT}", ""]
  L += reading_lines(data, stats, shown, trained)
  L += ["## The grid, and why", "",
        f"Preset `{data['preset']}`: " + p.get("why", "") + "", "",
        f"- Panels (tokens, pairs, steps, batch): " + ", ".join(
            f"({', '.join(map(str, x))})" for x in p["panels"])
        + f"; widths {', '.join(map(str, p['widths']))}; vocabulary {c['vocab_size']}; "
        f"{c['num_layers']} layers, {c['num_heads']} head(s), MLP 2 x d_model, "
        f"{c['positions']} positions"
        + (f", a {c['short_conv']}-tap causal convolution on each attention input"
           if c.get("short_conv") else "")
        + f"; `model.gated_layer={c['gated_layer']}`; options "
        f"{json.dumps(c['attention_options'])}.",
        "- Variants trained: " + ", ".join(f"`{n}`" for n in trained) + "; "
        + "; ".join(f"`{n}` {t[0]}" + (f" ({t[1]})" if t[0] != "left out" else "")
                    for n, t in data["treatment"].items() if t != "train"
                    and t[0] != "left out").replace("|", "\\|")
        + (". Left out of this grid: " + ", ".join(
            f"`{n}`" for n, t in data["treatment"].items()
            if t != "train" and t[0] == "left out") if any(
            t != "train" and t[0] == "left out" for t in data["treatment"].values())
           else "") + ".",
        f"- Rates: each of {', '.join(f'{x:g}' for x in p['lrs'])} ("
        + (f"and up to {p['lr_extend']} past an end" if p.get("lr_extend") else
           "none past an end") + ") per (variant, width), at "
        + ", ".join(f"width {w}: {t} tokens, {P} pairs" for w, t, P in lr_cells(p))
        + f", seed {', '.join(map(str, rec.get('selection_seeds', [0])))}, chosen on the "
        "validation stream (rates within 1 point tie, the smaller wins).",
        f"- Reported: seed {p['seeds'][0]} at every cell, seeds "
        f"{', '.join(map(str, p['seeds']))} at the seeded cells "
        + ", ".join(f"w{a} · {b} tok, {cc} pairs" for a, b, cc, *_ in p["seed_cells"])
        + ", each on the test stream.", ""]
  L += fault_lines(stats, p)
  L += diagnostic_lines(diag, data["preset"])
  L += accuracy_lines(data, stats, trained)
  L += state_lines(data, stats, trained)
  L += verdict_lines(shown)
  L += rate_lines(data, trained)
  L += ["## Missing", ""] + ([f"- {m}" for m in missing] if missing else
                             ["Every run of the plan finished."])
  L += ["", f"Run or resume: `python -m scripts.mqar --preset={data['preset']} "
        "--jobs=2`; the page of what finished: `--collect`; from results.json: "
        "`--page_only`."] + ([
      f"Every finished run is in the committed ledger `{data['ledger']}` (the run's "
      "result, host, CPU seconds and config fingerprint), which a fresh clone resumes "
      "from; runs finished without it: `--ledger_from_workdirs`."] if data.get("ledger")
      else [])
  return L


def budget_lines(data: dict, costs: dict | None) -> list[str]:
  """The CPU spent (the ledger) against the probe's projection and the budget."""
  spent = data.get("cpu_seconds", 0.0) / 60
  L = [f"CPU time spent: {spent:.1f} CPU-minutes (" + data.get(
      "cpu_counted", "every child process, start-up included") + ")."]
  if "runs_cpu_seconds" in data:
    L[0] += (f" {data['runs_cpu_seconds'] / 60:.1f} CPU-minutes of it in the runs "
             "themselves.")
  if costs and costs.get("preset") == data["preset"]:
    plan = costs["plan"]
    L[0] += (f" Projected before the first run (costs.json, {costs['date']}, "
             f"`{costs['command']}`): {plan['cpu_minutes']:.0f} CPU-minutes for "
             f"{plan['runs']} runs at most, against a budget of "
             f"{plan['budget_cpu_minutes']} ({'fits' if plan['fits'] else 'over'}).")
    earlier = costs.get("earlier_plans") or []
    if earlier:
      L[0] += (f" That plan was re-projected on {costs.get('planned')} from the same "
               "probes for the grid as amended (`scripts.mqar --replan_costs`); before: "
               + ", ".join(f"{e['plan']['cpu_minutes']:.0f} CPU-minutes for "
                           f"{e['plan']['runs']} runs ({e.get('planned') or costs['date']})"
                           for e in earlier) + ".")
    budget = plan["budget_cpu_minutes"]
    done = "settings" in data and not missing_cells(data)
    L[0] += (f" **Budget: {spent:.0f} of {budget} CPU-minutes spent"
             + (f" for the whole grid: {'met' if spent <= budget else 'over'}.**" if done
                else f" so far, {'within it' if spent <= budget else 'over it'}, with "
                     "runs still to finish.**"))
  return L + [""]


def reading_lines(data: dict, stats: dict, shown: dict, trained: list[str]) -> list[str]:
  """What the tables below say, in sentences written from them by rules: softmax in
  every cell (or its faults), the verdicts at each seeded cell grouped by word, and per
  panel which variants reach 99% at which width."""
  p = data["settings"]
  soft = [stats[(REFERENCE, w, t, P)][0] for t, P in _panels(p) for w in p["widths"]
          if (REFERENCE, w, t, P) in stats]
  faults = softmax_faults(stats, p)
  L = []
  if faults:
    L.append(f"softmax is under {RECALL:.0%} in {len(faults)} of its {len(soft)} cells: "
             "a fault of the setup until shown otherwise (the section below).")
  elif soft:
    L.append(f"softmax reaches {RECALL:.0%} in every one of its {len(soft)} cells "
             f"(the lowest {min(soft):.1%}).")
  v = page_verdicts(shown)
  for cell in dict.fromkeys(tuple(c[:3]) for c in p["seed_cells"]):
    words = {}
    for n in p["seeded"]:
      if (n, cell) in v:
        words.setdefault(v[(n, cell)].word, []).append(f"`{n}`")
    if words:
      L.append(f"At w{cell[0]} · {cell[1]} tokens, {cell[2]} pairs (the seeded cell), "
               "against softmax by Welch + Holm: " + "; ".join(
                   f"{w} {', '.join(ns)}" for w, ns in words.items()) + ".")
  for t, P in _panels(p):
    reach = {n: smallest_width(stats, n, t, P, p["widths"]) for n in trained}
    got = [f"`{n}` from width {w}" for n, w in reach.items() if w is not None]
    miss = [f"`{n}`" for n, w in reach.items() if w is None
            and any((n, x, t, P) in stats for x in p["widths"])]
    L.append(f"At {t} tokens, {P} pairs, {RECALL:.0%} within widths "
             f"{', '.join(map(str, p['widths']))}: " + (", ".join(got) or "none")
             + (f"; not reached: {', '.join(miss)}" if miss else "") + ".")
  return ["## Reading", "", "Written by rules from the tables below "
          "(`studies.recall.zoology_page.reading_lines`).", ""] + [f"- {x}" for x in L] + [""]


def fault_lines(stats: dict, p: dict) -> list[str]:
  """Every softmax cell under RECALL, flagged (`softmax_faults`)."""
  faults = softmax_faults(stats, p)
  if not faults:
    return []
  return ["## Softmax under 99%: a setup fault to investigate", "",
          "Zoology's attention solves every cell; until shown otherwise a softmax cell "
          "under 99% is a fault of this setup (rate, steps, initialisation, positions), "
          "not a result. The cells, kept on the page and in the figure:", ""] + [
          f"- **setup fault to investigate**: softmax {a:.1%} at width {w}, {t} "
          f"tokens, {P} pairs" for w, t, P, a in faults] + [""]


def diagnostic_lines(diag: dict | None, preset: str) -> list[str]:
  """The evidence gathered on softmax's faults of this setup, one entry per block of
  <preset>_diagnostics.json (its question and its reading: runs recorded by
  scripts.mqar_diagnose, or earlier by hand from their workdirs), in the file's order."""
  blocks = [(k, v) for k, v in (diag or {}).items() if isinstance(v, dict) and "why" in v]
  if not blocks:
    return []
  L = ["## How the setup was diagnosed", "",
       f"Each softmax fault of this preset was investigated before the grid went on; "
       f"the runs, their commands and evaluations are in "
       f"[{preset}_diagnostics.json]({preset}_diagnostics.json).", ""]
  for k, v in blocks:
    reading = v.get("reading")
    reading = "; ".join(reading) if isinstance(reading, list) else (reading or "")
    L.append(f"- **`{k}`**: {v['why']} **Reading:** {reading}".replace("|", "\\|"))
  return L + [""]


def accuracy_lines(data: dict, stats: dict, trained: list[str]) -> list[str]:
  """The accuracy table: a row per trained variant, a column per (panel, width)."""
  p = data["settings"]
  cols = [(w, t, P) for t, P in _panels(p) for w in p["widths"]]
  rows = []
  for n in trained:
    cells = []
    for w, t, P in cols:
      m = stats.get((n, w, t, P))
      s = _pct(m) if m else "-"
      if m and n == REFERENCE and m[0] < RECALL:
        s += " (setup fault?)"
      cells.append(s)
    rows.append([f"`{n}`"] + cells)
  return ["## Accuracy on the queried values", "",
          "At each (variant, width)'s chosen rate, on the test stream; mean ± standard "
          "error (seeds) where seeded; '-' = not run yet.", ""] + pages.table(
      ["variant"] + [f"w{w} · {t} tok, {P} pairs" for w, t, P in cols], rows) + [""]


def state_lines(data: dict, stats: dict, trained: list[str]) -> list[str]:
  """Per variant and panel: the smallest width reaching RECALL and the decode state per
  sequence it implies (`state_bytes`)."""
  p, c = data["settings"], data["config"]
  panels = _panels(p)
  rows = []
  for n in trained:
    row = [f"`{n}`"]
    for t, P in panels:
      w = smallest_width(stats, n, t, P, p["widths"])
      if w is None:
        row.append("not reached" if any((n, x, t, P) in stats for x in p["widths"])
                   else "-")
        continue
      b = state_bytes(n, w, t, c["num_heads"], c["num_layers"],
                      c["attention_options"].get(n))
      row.append(f"{w} ({b / 1024:,.1f} KiB)")
    rows.append(row)
  return [f"## The smallest width reaching {RECALL:.0%}, and its decode state", "",
          "Per sequence, both layers, float32: softmax's KV cache at the panel's length "
          "(it grows with the length), a fixed-state variant's state (it does not); "
          "the short convolutions' few taps, the same for every variant, left out. "
          "Zoology's trade-off: recall against the memory of the state.", ""] + \
      pages.table(["variant"] + [f"{t} tokens, {P} pairs" for t, P in panels], rows) + [""]


def verdict_lines(shown: dict) -> list[str]:
  """Each seeded variant against softmax at the seeded cells (stats.page_verdicts:
  Welch + Holm over the page)."""
  p = shown["settings"]
  v = page_verdicts(shown)
  cells = list(dict.fromkeys(tuple(c[:3]) for c in p["seed_cells"]))
  rows = [[f"`{n}`"] + [v[(n, cell)].text("{:.1%}") if (n, cell) in v else "-"
                        for cell in cells] for n in p["seeded"] if n != REFERENCE]
  tested = sum(x.test is not None for x in v.values())
  power = [f"- w{w} · {t} tok, {P} pairs: "
           + protocol.power_text(seed_values(shown, REFERENCE, w, t, P), ACCURACY,
                                 max(1, tested)) for w, t, P in cells
           if seed_values(shown, REFERENCE, w, t, P)]
  return ["## Against softmax, at the seeded cells", "",
          "Variant − softmax in points (pts) with its 95% interval (a bootstrap over "
          "seeds, which stays inside 0-100%; per comparison, not adjusted) and Welch's p "
          f"adjusted by Holm over the page's {tested} tests; "
          f"better/worse at adjusted p < {protocol.ALPHA}, else unresolved, which says "
          "the page cannot tell, not that the two are alike "
          "([the protocol](../../studies/PROTOCOL.md)).", ""] + pages.table(
      ["variant"] + [f"w{w} · {t} tok, {P} pairs" for w, t, P in cells], rows) + [""] \
      + power + ([""] if power else [])


def rate_lines(data: dict, trained: list[str]) -> list[str]:
  """The lr stage: per variant and width, the validation accuracy of each rate run at
  that width's lr cell, the chosen one in bold."""
  p = data["settings"]
  rows = []
  for n in trained:
    row = [f"`{n}`"]
    for cell in lr_cells(p):
      chosen = rate_at(data["lrs"].get(n), cell[0])
      got = []
      for x in lr_rates(p, data["results"], n, cell):
        r = next((r for r in data["results"] if r["variant"] == n
                  and r.get("stage") == "lr" and r["lr"] == x
                  and (r["width"], r["length"], r["pairs"]) == cell), None)
        s = f"{x:g}: {r['accuracy']:.1%}" if r else f"{x:g}: not run"
        got.append(f"**{s}**" if chosen == x else s)
      row.append(", ".join(got))
    rows.append(row)
  return ["## Learning rates (validation, seed 0)", ""] + pages.table(
      ["variant"] + [f"w{w} at {t} tok, {P} pairs" for w, t, P in lr_cells(p)],
      rows) + [""] + tie_lines(data, trained)


def tied_everywhere(data: dict, variant: str, cell: tuple) -> bool:
  """Whether every rate of `variant`'s finished lr stage at `cell` is within the tie
  (MIN_EFFECT) of the best: its rate is then the tie rule's pick (the smallest), which
  no validation run preferred."""
  acc = [r["accuracy"] for r in data["results"] if r["variant"] == variant
         and r.get("stage") == "lr" and r.get("status") == "ok"
         and (r["width"], r["length"], r["pairs"]) == tuple(cell)]
  return len(acc) == len(data["settings"]["lrs"]) and max(acc) - min(acc) < MIN_EFFECT


def tie_lines(data: dict, trained: list[str]) -> list[str]:
  """One line naming each (variant, width) whose rates all tied at its lr cell: its
  rate carries to the width's other panels untested there, so its rows at those
  panels may understate what a rate chosen for them would give."""
  p = data["settings"]
  tied = [f"`{n}` at width {c[0]}" for n in trained for c in lr_cells(p)
          if tied_everywhere(data, n, c)]
  if not tied:
    return []
  return [f"- **No rate preferred**: {', '.join(tied)}: every rate within "
          f"{MIN_EFFECT * 100:g} point of the others at the lr cell, so the tie rule "
          "took the smallest. The rows at that width's other panels ran at this rate, "
          "which no validation run there chose: they may understate what a rate tuned "
          "for those panels would give.", ""]
