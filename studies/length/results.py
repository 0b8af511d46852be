"""The length page's JSON (results/lm_length/results.json), built from the committed
ledger, the measured step costs and the plan alone (studies.length.page renders it):

  rates     each row's sweep (runner.rate_state): grid, tie and where it comes from,
            chosen rate; a row whose sweep is incomplete gets no figures
  cells     {row: {length: ...}}: each reporting seed's test bits/byte, recall and rest
            bits (studies.length.evaluate), their means, and the cost as a model (the
            seeds' medians: train tokens/s, memory plan, decode us/token, state bytes)
  verdicts  version 2's family (protocol.primary_verdicts): each row against flash, per
            length (a column per length), Holm over those; bits/byte is unbounded
            above, so the interval is Welch's (protocol.interval); the power line per
            length (protocol.power_text)
            and the training curve: each seed's train bits/byte by step (`curve`), the
            seeds' mean curve and how much it still fell over the last quarter
            (`late_drop`)
  split     per row x length, the gap to flash on recall positions and on the rest
            (seed means), and the share of the total gap the recall positions carry
            (gap_recall x recall fraction / gap_total)
  check     at the check length: the validation of the carried rate and of its
            neighbours (seed 0), and whether the carried rate is within the tie of the
            best of them
  reading   sentences written by `reading`'s rules from the above, no verdict typed
"""
from __future__ import annotations

import statistics

from studies.core import protocol
from studies.length import floors, presets, runner

METRIC = presets.METRIC        # bits/byte: lower is better, bounded below by 0
COST_KEYS = ("train_tokens_per_s", "peak_bytes", "decode_us_per_token", "state_bytes",
             "params")     # params: what the decision page says differs (studies.choose)


def command(p, rows=None, lengths=None) -> str:
  """The command that trains (row, length) cells of preset `p`."""
  s = f"python -m scripts.lm_length --preset={p.name}"
  if rows:
    s += f" --rows={','.join(rows)}"
  if lengths:
    s += f" --lengths={','.join(map(str, lengths))}"
  return s


def _mean(xs):
  xs = [x for x in xs if x is not None]
  return sum(xs) / len(xs) if xs else None


def late_drop(curve: list, steps: int) -> float | None:
  """How much a run's train loss still fell over its last quarter, in bits/byte: the mean
  of the log intervals ending in (steps/2, 3 steps/4] less the mean of those ending in
  (3 steps/4, steps] (each a mean over its interval's steps: evaluate.train_curve).
  Positive: still learning. None without a point in each half."""
  a = [b for s, b in curve or () if steps / 2 < s <= 3 * steps / 4]
  b = [b for s, b in curve or () if 3 * steps / 4 < s <= steps]
  return sum(a) / len(a) - sum(b) / len(b) if a and b else None


def mean_curve(curves: list) -> list:
  """[[step, mean bits/byte], ...] over the steps every curve logged."""
  curves = [dict((int(s), b) for s, b in c) for c in curves if c]
  if not curves:
    return []
  steps = sorted(set.intersection(*(set(c) for c in curves)))
  return [[s, sum(c[s] for c in curves) / len(curves)] for s in steps]


def cells(p, got: dict, rates: dict) -> dict:
  """{row: {length: cell}} of the reporting seeds at each row's chosen rate."""
  out = {}
  for r in p.rows:
    lr = rates[r]["chosen"]
    for L in p.lengths:
      seeds = {s: got[(r, L, lr, s)] for s in range(presets.SEEDS[0], presets.SEEDS[0]
                                                    + protocol.MAX_SEEDS)
               if lr is not None and (r, L, lr, s) in got}
      c = {"seeds": {str(s): {"test": e["test"]["bits_per_byte"],
                              "recall_bits": e["test"]["recall_bits"],
                              "rest_bits": e["test"]["rest_bits"],
                              "recall_fraction": e["test"]["recall_fraction"],
                              "validation": e.get("validation"),
                              "cpu_seconds": e.get("cpu_seconds"),
                              "late_drop": late_drop(e.get("curve"), p.steps)}
                     for s, e in seeds.items()}, "lr": lr}
      if seeds:
        c["curve"] = mean_curve([e.get("curve") for e in seeds.values()])
        c["late_drop"] = _mean([v["late_drop"] for v in c["seeds"].values()])
        for k in ("test", "recall_bits", "rest_bits", "recall_fraction"):
          c[k] = _mean([v[k] for v in c["seeds"].values()])
        c["cost"] = {k: statistics.median(e["cost"][k] for e in seeds.values())
                     for k in COST_KEYS if all(k in e.get("cost", {}) for e in seeds.values())}
      out.setdefault(r, {})[str(L)] = c
  return out


def verdicts(p, cell: dict, untrained=()) -> dict:
  """{row: {length: verdict record}}: protocol.primary_verdicts over {length: {row:
  [seed test bits]}}, each row against flash, per length."""
  ctl = {r: c for r, c in presets.controls().items() if r in p.rows}
  seeds = lambda r, L: [v["test"] for v in cell[r][str(L)]["seeds"].values()]
  cols = {str(L): {r: seeds(r, L) for r in p.rows
                   if cell[r][str(L)]["seeds"] and r not in ctl} for L in p.lengths}
  v = protocol.primary_verdicts(cols, METRIC, reference=runner.REFERENCE,
                                untrained=tuple(untrained))
  out = {}
  for (r, L), x in v.items():
    rec = {"word": x.word, "n": list(x.n), "words": x.text(METRIC.fmt)}
    if x.test:
      rec.update(diff=x.test.diff, lo=x.lo, hi=x.hi, p_adj=x.p_adj)
    out.setdefault(r, {})[L] = rec
  family = len(v)
  power = {L: protocol.power_text(cols[L][runner.REFERENCE], METRIC, max(1, family),
                                  name=runner.REFERENCE)
           for L in cols if runner.REFERENCE in cols[L]}
  # each control row: the row it controls against it (that row minus the control),
  # exploratory, at each length where both have reporting seeds ("controls")
  pairs = {(c, r, str(L)): (seeds(r, L), seeds(c, L)) for c, r in ctl.items()
           if r in p.rows for L in p.lengths
           if cell[c][str(L)]["seeds"] and cell[r][str(L)]["seeds"]}
  # and each control row against flash (exploratory too: the layer's own effect)
  ref = runner.REFERENCE
  pairs.update({(c, ref, str(L)): (seeds(c, L), seeds(ref, L)) for c in ctl
                for L in p.lengths
                if cell[c][str(L)]["seeds"] and cell[ref][str(L)]["seeds"]})
  controls, against_ref = {}, {}
  for (c, r, L), x in protocol.exploratory(pairs, METRIC).items():
    rec = {"row": r, "word": x.word, "n": list(x.n), "words": x.text(METRIC.fmt)}
    if x.test:
      rec.update(diff=x.test.diff, lo=x.lo, hi=x.hi, p=x.test.p)
    (against_ref if r == ref else controls).setdefault(c, {})[L] = rec
  return {"by": out, "family": family, "power": power, "controls": controls,
          "controls_vs_reference": against_ref}


def split(p, cell: dict) -> dict:
  """{row: {length: {"gap", "gap_recall", "gap_rest", "recall_share"}}} against flash's
  seed means at that length (rows and lengths where both ran)."""
  ref = runner.REFERENCE
  out = {}
  for r in p.rows:
    if r == ref:
      continue
    for L in map(str, p.lengths):
      a, b = cell[r][L], cell[ref][L]
      if "test" not in a or "test" not in b:
        continue
      g = a["test"] - b["test"]
      gr, gs = a["recall_bits"] - b["recall_bits"], a["rest_bits"] - b["rest_bits"]
      share = gr * b["recall_fraction"] / g if g else None
      out.setdefault(r, {})[L] = {"gap": g, "gap_recall": gr, "gap_rest": gs,
                                  "recall_share": share}
  return out


def check(p, got: dict, rates: dict) -> dict:
  """{row: {"rates": {rate: validation}, "carried", "best", "within_tie", "tie"}} at the
  check length (rows whose three runs all ran)."""
  L, rows = p.check
  out = {}
  for r in rows:
    st = rates.get(r) or {}
    lr = st.get("chosen")
    if lr is None or L not in p.lengths:
      continue
    want = sorted([lr] + runner.neighbours(st["ladder"], lr))
    have = {x: got[(r, L, x, 0)].get("validation") for x in want if (r, L, x, 0) in got}
    if len(have) < len(want):
      out[r] = {"rates": have, "carried": lr, "complete": False}
      continue
    best = min(have, key=lambda x: have[x])
    tie = st["tie"]
    out[r] = {"rates": have, "carried": lr, "best": best, "tie": tie, "complete": True,
              "within_tie": have[lr] - have[best] <= tie}
  return out


def recheck(p, got: dict, rates: dict) -> None:
  """flash's rate is chosen under the provisional tie (its seeds do not exist yet);
  once its reporting seeds fix the other rows' tie, the choice is re-read under that
  tie too: rates[flash]["recheck"] = {"tie", "chosen"} (the reported rate stays the
  one its seeds ran at; the page shows whether the two agree)."""
  ref = rates.get(runner.REFERENCE)
  tie, source = runner.tie_for(p, got, p.rows[1]) if len(p.rows) > 1 else (None, "")
  if ref and ref.get("chosen") is not None and tie is not None and \
      ref.get("tie_from") != source:
    ref["recheck"] = {"tie": tie, "tie_from": source,
                      "chosen": p.rule(tie).choose(ref["grid"])}


def reading(p, data: dict) -> list[str]:
  """Sentences by fixed rules from the tables (no verdict typed here):
  1. per row at the longest length with a verdict: the verdict's words;
  2. per row with gaps at two lengths: "grows" where the longest length's interval lies
     wholly above the shortest's, "shrinks" where wholly below, else "the intervals do
     not show a change";
  3. per row at the longest length: "mostly recall" where the recall positions carry
     over half of the gap, else "mostly the rest";
  4. per row at the longest length: its train tokens/s and decode-state bytes as a
     multiple of flash's;
  5. per control row at the longest length where it and the row it controls ran: its
     figure beside flash's and that row's, the share of that row's gap to flash the
     layer alone carries ((flash - control) / (flash - row), seed means), and that
     row's exploratory comparison with it;
  6. per length: where flash's seeds' train loss still fell over their last quarter by
     more than the tie the rows' rates are chosen with (`learning`), that the runs end
     still learning, so gaps at this budget may move with longer training;
  7. the reference across lengths: where flash's test bits/byte at a longer length is
     above its figure at the selection length (same training bytes), that it is, with
     both lengths' recall and rest parts: a longer window that has not yet paid for
     itself at this budget; with floors at both lengths, the best floor of each beside
     it (the same bytes, cut into fewer and longer windows);
  8. per length with floors (studies.length.floors): flash's place among the n-gram
     floors of its own training bytes; where it is above the best floor, that the runs
     have learned less than a count model of the same bytes, so a gap at that length
     says which model learns byte statistics faster at this budget."""
  out, V = [], data["verdicts"]["by"]
  Ls = [str(L) for L in p.lengths]
  for r in p.rows:
    if r == runner.REFERENCE or r not in V:
      continue
    have = [L for L in Ls if L in V[r]]
    if not have:
      continue
    top = have[-1]
    v = V[r][top]
    out.append(f"`{r}` at {int(top):,} bytes against flash: {v['words']}.")
    tested = [L for L in have if "lo" in V[r][L]]
    if len(tested) >= 2:
      a, b = V[r][tested[0]], V[r][tested[-1]]
      trend = ("grows" if b["lo"] > a["hi"] else "shrinks" if b["hi"] < a["lo"]
               else "does not change by more than the intervals show")
      out.append(f"`{r}`: its gap from {int(tested[0]):,} to {int(tested[-1]):,} bytes "
                 f"{trend} ({a['diff']:+.3f} → {b['diff']:+.3f} bits/byte).")
    s = data["split"].get(r, {}).get(top)
    if s and s["recall_share"] is not None and v.get("word") in ("worse", "better"):
      where = "recall positions" if s["recall_share"] > 0.5 else "the other positions"
      out.append(f"`{r}` at {int(top):,}: {s['recall_share']:.0%} of its gap is on the "
                 f"recall positions (n = {p.recall_n}): mostly {where}.")
    c, f = (data["cells"][r][top].get("cost"), data["cells"][runner.REFERENCE][top]
            .get("cost"))
    if c and f and f.get("train_tokens_per_s") and f.get("state_bytes"):
      out.append(f"`{r}` at {int(top):,}: {c['train_tokens_per_s'] / f['train_tokens_per_s']:.2f}"
                 f"× flash's train tokens/s, {c['state_bytes'] / f['state_bytes']:.2f}× its "
                 "decode-state bytes.")
  for c, x in data["verdicts"].get("controls", {}).items():
    top = [L for L in Ls if L in x][-1]
    r, v = x[top]["row"], x[top]
    cl = data["cells"]
    f, a, b = (cl[k][top].get("test") for k in (runner.REFERENCE, r, c))
    share = ((f - b) / (f - a)) if None not in (f, a, b) and f != a else None
    out.append(f"`{c}` (flash inside `{r}`'s layer) at {int(top):,} bytes: {b:.3f} "
               f"bits/byte against flash's {f:.3f} and `{r}`'s {a:.3f}"
               + (f", so the layer alone carries {share:.0%} of `{r}`'s gap to flash"
                  if share is not None else "")
               + f"; `{r}` against it: {v['words']}.")
  for L in Ls:
    x = learning(data, L)
    if x:
      drop, tie = x
      out.append(f"At {int(L):,} bytes the runs end still learning: flash's train loss fell "
                 f"{drop:.3f} bits/byte over the last quarter of its {p.steps:,} steps "
                 f"(seed mean; the rates' tie is {tie:.4f}), so every gap here is at "
                 f"{p.tokens_per_run:,} training bytes, and rows that learn at different "
                 "speeds may reorder with longer training (the `gpu` preset).")
  ref, sel = data["cells"].get(runner.REFERENCE, {}), str(p.select_at)
  a = ref.get(sel, {})
  for L in Ls:
    b = ref.get(L, {})
    if L == sel or int(L) < p.select_at or "test" not in a or "test" not in b:
      continue
    if b["test"] > a["test"]:
      n = lambda c: len(c["seeds"])
      out.append(f"flash itself is worse at {int(L):,} bytes than at {p.select_at:,} on the "
                 f"same {p.tokens_per_run:,} training bytes ({b['test']:.3f} against "
                 f"{a['test']:.3f} bits/byte, {n(b)} and {n(a)} seeds), on the recall "
                 f"positions ({b['recall_bits']:.3f} against {a['recall_bits']:.3f}) and on "
                 f"the rest ({b['rest_bits']:.3f} against {a['rest_bits']:.3f}): at this "
                 "budget the longer window has not yet paid for itself"
                 + _floor_pair(data, sel, L) + ".")
  for L in Ls:
    x = ref.get(L, {}).get("test")
    at = floors.place(data.get("floors"), L, x) if x is not None else None
    if not at:
      continue
    k, n, best = at
    if x < best:
      out.append(f"At {int(L):,} bytes flash ({x:.3f} bits/byte) is below every n-gram "
                 f"floor of its own training bytes (the best, the {n}-gram's, {best:.3f}): "
                 "it has learned more than local byte statistics.")
      continue
    below = [r for r in p.rows if r != runner.REFERENCE and data["cells"].get(r, {})
             .get(L, {}).get("test", best) < best]
    out.append(f"At {int(L):,} bytes flash ({x:.3f} bits/byte) {floors.beats(k)} "
               f"(n-gram models of its own {p.tokens_per_run:,} training bytes); the best "
               f"floor (the "
               f"{n}-gram's, {best:.3f}) is below it"
               + (" and below every row with a figure" if not below else
                  f"; below that floor: {', '.join(f'`{r}`' for r in below)}")
               + ": the runs have learned less than a count model of the same bytes, so "
               "a gap here says which model learns byte statistics faster from "
               f"{p.tokens_per_run:,} bytes, not yet what attention does with a "
               f"{int(L):,}-byte window.")
  return out


def _floor_pair(data: dict, a: str, b: str) -> str:
  """"; the best n-gram floor of the same bytes: X at a, Y at b" where both ran."""
  fa, fb = (floors.place(data.get("floors"), L, 0.0) for L in (a, b))
  if not fa or not fb:
    return ""
  return (f"; the best n-gram floor of the same training bytes also moves, {fa[2]:.3f} at "
          f"{int(a):,} against {fb[2]:.3f} at {int(b):,} (the same bytes, cut into fewer "
          "and longer windows)")


def learning(data: dict, L: str):
  """(flash's late drop at L, the tie) where the drop exceeds the tie the other rows'
  rates are chosen with (flash's seeds' tie; flash's own where no other row has one),
  else None."""
  ref = runner.REFERENCE
  drop = data["cells"].get(ref, {}).get(L, {}).get("late_drop")
  ties = [st["tie"] for r, st in data["rates"].items() if r != ref and st.get("tie")]
  tie = min(ties) if ties else (data["rates"].get(ref) or {}).get("tie")
  return (drop, tie) if drop is not None and tie is not None and drop > tie else None


def build(p, got: dict, step_costs=None, plan=None, cost_run=None, spend=None,
          floors_=None) -> dict:
  """The page's JSON from the ledger's runs `got` (ledger.runs_of) and the records."""
  rates = {r: runner.rate_state(p, got, r) for r in p.rows}
  recheck(p, got, rates)
  cell = cells(p, got, rates)
  untrained = [r for r in p.rows if not rates[r]["trained"]]
  data = {"preset": p.name, "lengths": list(p.lengths), "rows": list(p.rows),
          "row_why": {r: presets.row(r).why for r in p.rows},
          "controls": {r: c for r, c in presets.controls().items() if r in p.rows},
          "trained_rows": list(p.rows[:p.trained]),
          "steps": p.steps, "tokens_per_step": p.tokens_per_step,
          "tokens_per_run": p.tokens_per_run, "recall_n": p.recall_n,
          "eval_tokens": p.eval_tokens, "select_at": p.select_at,
          "check_at": p.check[0], "seeds": list(presets.SEEDS),
          "protocol": protocol.record(presets.PAGE),
          "rates": rates, "cells": cell, "runs": len(got),
          "verdicts": verdicts(p, cell, untrained), "split": split(p, cell),
          "check": check(p, got, rates), "step_costs": step_costs, "plan": plan,
          "cost_run": cost_run, "spend": spend, "floors": floors_,
          "command": command(p)}
  data["reading"] = reading(p, data)
  return data
