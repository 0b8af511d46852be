"""The decision page, results/choose/: which attention to use, and what it costs
(issue 80), written by `python -m scripts.choose` (`--page_only`: from the committed
JSON) from

  * the other pages' JSON, read by studies.choose.sources (every quality cell: the
    variant against the exact reference on one task and length, with the source page's
    own verdict; "cannot" where the source records a refusal, "not run" where it has
    no run), and
  * one cost run, results/choose/cost.json (studies.choose.cost: training tokens/s and
    peak memory of one attention op at 1k / 4k / 16k (64k) tokens, decode µs per token
    and state bytes at a 16k context, the matmul gauge).

The decision summary is written by rules (`summary`), each sentence naming the cells
it rests on; tests/studies/test_choose.py checks the rules on fixture data.
"""
from __future__ import annotations

import os

import attention
from studies.choose import sources as S
from studies.choose.cells import (COST, LM_TOKENS, PARETO_TASK, _cite, _mib, _peak, _tok,
                                  decode_text, grouped, judged_worse, quality_text,
                                  train_text, wholly_worse)
from studies.core import pages, plots, timing


def summary(quality: dict, cost: dict, names, sources=S.SOURCES) -> list[str]:
  """The decision summary: sentences written from the data by rules, each citing the
  cells it rests on ([task: variant cell] for quality, (cost.json train/decode cells)
  for cost). quality: choose_sources.read's {source: {variant: Cell}}; cost: the cost
  record (cost.json); names: the variants; sources: the columns."""
  out = []
  short = [s for s in sources if s.regime in (S.SHORT, S.MID)]
  # 1. quality at short lengths: anything judged better than the exact reference?
  better = [(s, n, quality[s.key][n]) for s in short for n in names
            if quality.get(s.key, {}).get(n) and quality[s.key][n].word == "better"]
  tested = sum(1 for s in short for n in names if quality.get(s.key, {}).get(n)
               and quality[s.key][n].word in ("better", "worse", "unresolved", "equal"))
  if better:
    out.append("At ≤ 258 tokens some variants are judged better than the exact "
               "reference: " + "; ".join(_cite(s, n, c) for s, n, c in better) + ".")
  else:
    out.append(f"At ≤ 258 tokens no variant is judged better than the exact reference "
               f"on any task ({tested} judged comparisons on "
               f"{', '.join(s.key for s in short)}): nothing beats softmax or its exact "
               "kernels on quality here.")
  worse = {n: judged_worse(quality, short, n) for n in names}
  worse = {n: ss for n, ss in worse.items() if ss}
  if worse:
    out.append("Judged worse than the exact reference: " + "; ".join(
        _cite(s, n, quality[s.key][n]) for n, ss in sorted(worse.items()) for s in ss)
        + ".")
  lm = lm_answer(quality, cost, names, sources)
  if lm:
    out.append(lm)
  # 2. speed at each length: the exact family's fastest, and the fastest of the
  # causal variants close to the reference on every short task they ran
  ref = S.EXACT
  close = [n for n in names if n not in worse and attention.variant(n).causal
           and any(c and c.status in ("ok", "reference") for c in
                   (quality.get(s.key, {}).get(n) for s in short))
           and not any(wholly_worse(s, quality.get(s.key, {}).get(n)) for s in short)]
  refused = sorted(n for n in names if not attention.variant(n).causal)
  safe = close
  # the cost run is one process on one device: a variant that runs as another there
  # (`Variant.runs_as`: ring = flash) is left out of the speed comparisons, said so
  as_other = {n: w for n in names if (w := attention.variant(n).note_on(None))}
  exact = [n for n in names if attention.variant(n).family == "exact" and n not in as_other]
  safe = [n for n in safe if n not in as_other]
  lens = sorted({int(N) for v in cost.get("train", {}).values() for N in v["cells"]})

  def ref_words(N):
    r = _tok(cost, ref, N)
    if r:
      return f"{ref}'s {r:,.0f} (cost.json train.{ref}.{N})"
    c = pages.keyed(cost["train"].get(ref, {}).get("cells", {})).get(N)
    return (f"{ref}, {c['status']} there (cost.json train.{ref}.{N})" if c else
            f"{ref}, not attempted there (memory quadratic in N)")

  for N in lens:
    ex = {n: _tok(cost, n, N) for n in exact if _tok(cost, n, N)}
    ok = {n: _tok(cost, n, N) for n in safe if n not in exact and _tok(cost, n, N)}
    words = []
    if ex:
      b = max(ex, key=ex.get)
      words.append(f"the fastest exact kernel is `{b}`, {ex[b]:,.0f} tokens/s (cost.json "
                   f"train.{b}.{N})")
    if ok:
      b = max(ok, key=ok.get)
      words.append(f"the fastest other variant not shown worse than {ref} on any short "
                   f"task it ran (no worse verdict, no 95% interval wholly on the worse "
                   f"side; an unresolved gap can still be large: see its cells) is "
                   f"`{b}`, {ok[b]:,.0f} tokens/s (cost.json train.{b}.{N})")
    if words:
      out.append(f"Training at {N:,} tokens: " + "; ".join(words) + f"; against "
                 f"{ref_words(N)}.")
  if lens and cost.get("setup"):
    N = max(int(x) for x in cost["setup"]["lens"])
    fast = {n: _tok(cost, n, N) for n in names if n not in close and n not in exact
            and n not in refused and _tok(cost, n, N)}
    if fast:
      b = max(fast, key=fast.get)
      bad = [(s, quality[s.key][b]) for s in short if quality.get(s.key, {}).get(b)
             and (quality[s.key][b].word == "worse" or wholly_worse(s, quality[s.key][b]))]
      if bad:
        out.append(f"Faster at a cost in quality: at {N:,} tokens `{b}` trains at "
                   f"{fast[b]:,.0f} tokens/s (cost.json train.{b}.{N}), but "
                   + "; ".join(_cite(s, b, c) for s, c in bad) + ".")
  if as_other:
    out.append("Left out of those speed comparisons as another variant on this run's "
               "one device: " + "; ".join(f"`{n}` ({w})" for n, w in sorted(as_other.items()))
               + ".")
  if refused:
    out.append("Left out of those speed comparisons: " + ", ".join(
        f"`{n}`" for n in refused) + " (cannot be causal, so timed without the mask: "
        "not comparable), and every variant with a worse verdict or a 95% interval "
        "wholly on the worse side on a short task.")
  # 3. memory at the longest length: who runs there, and the smallest plan
  if lens:
    N = max(lens)
    ran = {n: _peak(cost, n, N) for n in names if _peak(cost, n, N)}
    if ran:
      low = min(ran, key=ran.get)
      out.append(f"At {N:,} tokens only {len(ran)} variant(s) ran within the run's "
                 f"limits ({', '.join(f'`{n}`' for n in sorted(ran))}); the smallest "
                 f"memory plan is `{low}`'s, {_mib(ran[low])} MiB (cost.json "
                 f"train.{low}.{N}).")
  # 4. long inputs: the ~2k regime
  for s in [s for s in sources if s.regime == S.LONG]:
    ok = {n: c for n, c in quality.get(s.key, {}).items() if c.status == "ok"}
    if not ok:
      continue
    hb = S.metric(s)[2]
    best = (max if hb else min)(ok, key=lambda n: ok[n].value)
    out.append(f"At {s.tokens} tokens ({s.key}) no exact reference ran; the best "
               f"score is {_cite(s, best, ok[best])}, among {len(ok)} variants run.")
  # 5. recall at fixed memory: a decode state that does not grow with the context
  dec = cost.get("decode", {})
  fixed = sorted(n for n, d in dec.items() if d.get("status") == "ok"
                 and len(set(d["state_bytes"].values())) == 1)
  # the MQAR column with the heaviest recall load (most pairs, then tokens) that has rows
  mq = [s for s in sources if s.kind == S.RECALL_PAGE and any(
      c.status == "ok" for c in quality.get(s.key, {}).values())]
  if fixed and mq:
    s = max(mq, key=lambda s: (s.cell[2], s.cell[1]))
    cells = {n: quality.get(s.key, {}).get(n) for n in fixed}
    cells = {n: c for n, c in cells.items() if c is not None and c.status == "ok"}
    L = int(cost["setup"]["decode_context"])
    refb = pages.keyed(dec.get(ref, {}).get("state_bytes", {})).get(L)
    fixed_b = [pages.keyed(dec[n]["state_bytes"]).get(L) for n in fixed]
    lo, hi = min(b for b in fixed_b if b), max(b for b in fixed_b if b)
    if cells:
      hold = [n for n, c in cells.items() if c.word != "worse"]
      out.append(
          "For a recall-heavy task at fixed memory (a decode state that does not grow with the "
          f"context: {', '.join(f'`{n}`' for n in fixed)}; cost.json decode): "
          + ("; ".join(_cite(s, n, cells[n]) for n in sorted(cells)) + ". "
             + (f"Not judged worse than softmax: {', '.join(f'`{n}`' for n in hold)}"
                if hold else (f"Every one run there ({len(cells)} of {len(fixed)}) is "
                              "judged worse than softmax"))
             + ("; not run there: " + ", ".join(f"`{n}`" for n in fixed if n not in cells)
                if len(cells) < len(fixed) else "")
             + (f"; softmax's state at {L:,} tokens is {refb / 1024:,.1f} KiB, a "
                f"decode step {dec[ref]['us_per_token']:.1f} µs (cost.json decode.{ref}), "
                f"the fixed states' {lo / 1024:,.1f} to {hi / 1024:,.1f} KiB"
                if refb else "") + "."))
  return out


def lm_groups(quality: dict, cost: dict, names, sources=S.SOURCES,
              N: int = LM_TOKENS, task: str = PARETO_TASK) -> dict | None:
  """The causal-LM answer's grouping, by rule: every causal variant timed at N in the
  cost run (cost.json train.<v>.<N>), fastest first, split by its cell on the causal-LM
  column `task`. Returns {"src", "cells", "timed": {v: tokens/s}, "fine": to consider
  (the exact reference and its kernels, and the variants with no worse verdict and no
  95% interval wholly on the worse side there), "bad": judged worse there, "none": no
  figure there, "stands": the exact kernels (registry family "exact") among "fine" that
  the column did not train, for which the reference's cell stands, "ref": the
  reference, "skipped": {causal variant the cost run did not time at N: its status}};
  None where the cost run or the column is missing."""
  src = next((s for s in sources if s.key == task), None)
  cells = quality.get(task, {}) if src else {}
  timed = {n: _tok(cost, n, N) for n in names if attention.variant(n).causal
           and not attention.variant(n).note_on(None) and _tok(cost, n, N)}
  if src is None or not timed or not any(c.status in ("ok", "reference")
                                         for c in cells.values()):
    return None
  order = sorted(timed, key=lambda n: -timed[n])
  has = lambda n: cells.get(n) is not None and cells[n].status in ("ok", "reference")
  bad = [n for n in order if has(n) and (cells[n].word == "worse"
                                         or wholly_worse(src, cells[n]))]
  ref = next((n for n, c in cells.items() if c.status == "reference"), None)
  # an exact kernel the column did not train is the reference's function (registry
  # family "exact": tests/attention/test_contract.py checks it equals softmax); the
  # reference's cell stands for it, said so where it is cited
  stands = [n for n in order if not has(n) and ref and attention.variant(n).family
            == "exact"]
  at_N = lambda n: pages.keyed(cost.get("train", {}).get(n, {}).get("cells") or {}).get(N)
  skipped = {n: at_N(n)["status"] for n in sorted(names) if attention.variant(n).causal
             and n not in timed and not attention.variant(n).note_on(None) and at_N(n)}
  return dict(src=src, cells=cells, timed=timed, ref=ref, stands=stands, skipped=skipped,
              fine=[n for n in order if (has(n) and n not in bad) or n in stands],
              bad=bad, none=[n for n in order if not has(n) and n not in stands])


def lm_quality(g: dict, n: str) -> str:
  """Variant n's quality cell on the LM column in words (`quality_text`); for an exact
  kernel the column did not train, the reference's cell, said so. g: `lm_groups`."""
  src, cells = g["src"], g["cells"]
  if n in g["stands"]:
    return (f"not run on {src.key}: it computes `{g['ref']}`'s function by another kernel "
            f"or precision (registry family exact), so `{g['ref']}`'s cell stands for it: "
            f"{quality_text(src, cells[g['ref']])}")
  return quality_text(src, cells[n]) if n in cells else S.NOT_RUN


LM_GROUPS = (("fine", "to consider"), ("bad", "worse there"),
             ("none", "no quality figure there"))
WORSE_WHY = ("a worse verdict, or a 95% interval wholly on the worse side of 0, which an "
             "unresolved verdict can have")


def lm_answer(quality: dict, cost: dict, names, sources=S.SOURCES,
              N: int = LM_TOKENS, task: str = PARETO_TASK) -> str | None:
  """The answer for a causal LM of N tokens in one sentence (`lm_groups`): the variants
  of each group, fastest first, by name; their tokens/s, peak memory and quality cells
  are in the table of `lm_table`, which the sentence names. None where the cost run or
  the column is missing."""
  g = lm_groups(quality, cost, names, sources, N, task)
  if g is None:
    return None
  src = g["src"]
  groups = "; ".join((f"{word} ({WORSE_WHY})" if k == "bad" else
                      word) + ": " + ", ".join(f"`{n}`" for n in g[k])
                     for k, word in LM_GROUPS if g[k])
  text = (f"For a causal LM at {N:,} tokens (cost at {N:,} tokens from the cost run; "
          f"quality from the {src.key} column at {src.tokens} tokens, the longest causal "
          f"LM run here: a gap measured there need not hold at {N:,}), fastest first, "
          "each one's tokens/s, memory and quality cell in the table *A causal LM at "
          f"{N:,} tokens* below. {groups[:1].upper()}{groups[1:]}.")
  if g["skipped"]:
    text += f" Not run at {N:,} tokens in the cost run: " + ", ".join(
        f"`{n}` ({st})" for n, st in g["skipped"].items()) + "."
  return text


def lm_table(quality: dict, cost: dict, names, sources=S.SOURCES,
             N: int = LM_TOKENS, task: str = PARETO_TASK, label: str | None = None
             ) -> list[str]:
  """The page lines of the causal-LM answer's table: one row per variant of
  `lm_groups`, in its groups, fastest first: tokens/s and peak memory at N (cost.json
  train.<v>.<N>) and the quality cell on the LM column (`lm_quality`). label: the
  column's metric label (choose_sources.label); [] where `lm_answer` is None."""
  g = lm_groups(quality, cost, names, sources, N, task)
  if g is None:
    return []
  src = g["src"]
  L = [f"### A causal LM at {N:,} tokens", "",
       f"The rule of the sentence above, as a table: training cost at {N:,} tokens from "
       f"the cost run (cost.json train.<variant>.{N}), quality from the {src.key} column "
       f"({src.tokens} tokens; a gap measured there need not hold at {N:,}); "
       f"worse there: {WORSE_WHY}.", "",
       f"| group | variant | training tokens/s | peak memory (MiB) | {src.key} "
       f"({label or S.metric(src)[1]}) |", "|---|---|---|---|---|"]
  for k, word in LM_GROUPS:
    for n in g[k]:
      L.append(f"| {word} | `{n}` | {g['timed'][n]:,.0f} | {_mib(_peak(cost, n, N))} | "
               f"{lm_quality(g, n)} |")
  for n, st in g["skipped"].items():
    L.append(f"| not timed at {N:,} | `{n}` | {st} | {st} | {lm_quality(g, n)} |")
  return L + [""]


# ---- the Pareto plots -----------------------------------------------------------------

def pareto_points(quality: dict, cost: dict, N: int, task: str = PARETO_TASK) -> dict:
  """{variant: (tokens/s at N, gap)} where both exist: gap = the variant's difference
  from the exact reference on `task`, signed so that positive is worse. quality, cost:
  as `summary`'s; N: the training length."""
  src = next(s for s in S.SOURCES if s.key == task)
  sign = -1 if S.metric(src)[2] else 1
  pts = {}
  for n, c in quality.get(task, {}).items():
    t = _tok(cost, n, N)
    if t and c.status in ("ok", "reference") and c.diff is not None:
      pts[n] = (t, sign * c.diff)
  return pts


def front(pts: dict) -> list[str]:
  """The Pareto front of {name: (throughput, gap)}: no other point is at least as fast
  with a gap no larger, and strictly better in one; sorted by throughput."""
  keep = [n for n, (t, g) in pts.items()
          if not any((t2 >= t and g2 <= g) and (t2 > t or g2 < g)
                     for m, (t2, g2) in pts.items() if m != n)]
  return sorted(keep, key=lambda n: pts[n][0])


def plot_pareto(path: str, pts: dict, N: int, label: str) -> None:
  """A small PNG: one point per variant (gap against tokens/s, log x), the front drawn.
  path: the PNG; pts: pareto_points; N: the length; label: the quality axis's words."""
  plt = plots.pyplot()
  fig, ax = plt.subplots(figsize=(5.2, 3.6))
  fr = front(pts)
  for n, (t, g) in pts.items():
    ax.plot(t, g, "o", color="C3" if n in fr else "C0", ms=4)
  if fr:
    ax.plot([pts[n][0] for n in fr], [pts[n][1] for n in fr], "-", color="C3", lw=1,
            label="Pareto front")
    ax.legend(fontsize=7)
  ax.axhline(0, color="grey", lw=0.5)
  ax.set_xscale("log")
  ax.set_xlabel(f"training tokens/s at {N:,} tokens (one attention op, CPU)", fontsize=8)
  ax.set_ylabel(label, fontsize=8)
  ax.tick_params(labelsize=7)
  ax.set_title(f"quality gap against throughput, N = {N:,}", fontsize=9)
  fig.tight_layout()
  plots.label_apart(ax, pts)            # where the points land: after the layout
  plots.save(fig, path, dpi=90)


# ---- the page --------------------------------------------------------------------------

def page_lines(quality: dict, cost: dict | None, status: dict, names,
               sources=S.SOURCES, pngs=(), labels=None) -> list[str]:
  """The page's Markdown lines. quality: {source: {variant: Cell}}; cost: cost.json's
  record or None (not run yet); status: {source key: protocol words}
  (choose_sources.protocol_status); names: the variants; sources: the columns; pngs:
  [(N, file name)] of the Pareto plots; labels: {source key: its metric's label}
  (choose_sources.label; default: the task's before the protocol)."""
  cost = cost or {}
  lab = lambda s: (labels or {}).get(s.key) or S.metric(s)[1]
  link = lambda s: f"[{s.key}](../{s.page}/README.md)"
  L = ["# Which attention should I use, and what will it cost?", "",
       "Written by `python -m scripts.choose` (study logic `studies/choose/page.py`, "
       "`studies/choose/sources.py`, `studies/choose/cost.py`); `python -m scripts."
       "choose --page_only` (`make pages`) rewrites it from the committed JSON. Every "
       "quality cell is read from the JSON of the page its column links (nothing "
       "re-typed); every cost cell from `cost.json`, one run on one machine.", ""]
  # provisional inputs
  L += ["## What is provisional", ""]
  for s in sources:
    L.append(f"- {link(s)}: {status.get(s.key, 'no page')}"
             + (" (the small 64-token grid; Zoology's grid is the recall column, "
                f"{', '.join(x.key for x in sources if x.regime == S.RECALL)})"
                if s.kind == S.RECALL_PAGE and s.regime != S.RECALL else ""))
  if cost:
    L.append("- the cost columns: one run on a shared CPU, small shapes "
             f"(B={cost['setup']['batch']}, {cost['setup']['heads']} heads of "
             f"{cost['setup']['head_dim']}): what they rank is the CPU's, at these "
             "shapes, not a GPU's")
  L.append("")
  # the summary
  L += ["## The decision, from the data", "",
        "Written by rules (`studies.choose.page.summary`), each sentence citing its cells: "
        "[task: variant cell] from the quality table, (cost.json ...) from the cost "
        "table. A verdict is the source page's own.", ""]
  L += [f"- {x}" for x in summary(quality, cost, names, sources)] + [""]
  L += lm_table(quality, cost, names, sources, label=(labels or {}).get(PARETO_TASK))
  # quality table
  L += ["## Quality against the exact reference", "",
        "Each cell: the variant's mean minus the exact reference's (softmax) on the "
        "column's task, with its 95% interval (Welch, unadjusted) where the source "
        "page tested it, the variant's seeds and the source page's verdict (better / "
        "worse at its Holm-adjusted p, so an interval clear of 0 can still read "
        "unresolved; `no verdict`: a single run; `not like for like`: rates chosen "
        "differently, not judged; in brackets after a better or worse verdict: what "
        "differs from softmax's model besides the attention, e.g. more parameters or a "
        "position signal of its own, so the verdict is not on the attention alone). "
        "`cannot`: the source records the variant's refusal; `not run`: it holds no "
        "run of it.", ""]
  head = ["family", "variant"] + [f"{link(s)} ({s.tokens} tok.; {lab(s)})"
                                  for s in sources]
  rows = []
  for fam, ns in grouped(names):
    for n in ns:
      rows.append([fam, f"`{n}`"] + [quality_text(s, quality.get(s.key, {}).get(
          n, S.Cell(S.NOT_RUN, s.json("results"))) ) for s in sources])
  L += pages.table(head, rows) + [""]
  L += ["Length regimes: " + "; ".join(
      f"{r}: {', '.join(s.key for s in sources if s.regime == r)}" for r in S.REGIMES
      if any(s.regime == r for s in sources)) + ". Sources: " + ", ".join(
      f"`{s.json('results')}`" for s in dict((s.page, s) for s in sources).values())
      + ".", ""]
  # cost table
  L += ["## Cost: one run on one machine", ""]
  if not cost:
    L += ["not run: `python -m scripts.choose` writes `cost.json`.", ""]
    return L
  st, run = cost["setup"], cost["run"]
  lens = sorted({int(N) for v in cost["train"].values() for N in v["cells"]})
  Ld = int(st["decode_context"])
  L += [pages.header(run) + " Matmul gauge (`studies.core.timing.matmul_peak`): "
        + timing.peak_text(cost["peak"][0]) + " at the start, "
        f"{cost['peak'][1]['flop_per_s'] / 1e9:.0f} GFLOP/s at the end. "
        f"The run took {cost['seconds'] / 60:.1f} minutes.", "",
        f"Training: forward + backward of one attention op (B={st['batch']}, "
        f"{st['heads']} heads of {st['head_dim']}, float32; causal where the variant "
        f"can be), every variant of a length in the same {st['rounds']} interleaved "
        "rounds; tokens/s = B·N / the median wall seconds; peak = XLA's compiled memory "
        "plan (arguments + outputs + temporaries), MiB. "
        f"{lens[-1]:,} tokens only for the variants whose memory is linear in N. "
        f"`skipped (time)`: predicted over {st['cell_limit_s']:.0f} s for the cell (or "
        "the run's budget spent); `skipped (memory)`: a plan over "
        f"{st['mem_budget_gib']} GiB; `skipped (CPU)`: a kernel a CPU only interprets. "
        f"Decode: µs per token of {st['decode_steps']}-token decode scans from a state "
        f"holding {Ld:,} positions ({st['decode_rounds']} interleaved rounds, the "
        "KV-cache harness `studies.bench.kv_cache`), and the state's bytes per sequence "
        "(one layer, all heads) at 1k and at that context.", ""]
  head = (["family", "variant"] + [f"tok/s {N // 1024}k" for N in lens]
          + [f"MiB {N // 1024}k" for N in lens]
          + [f"decode µs/tok {Ld // 1024}k", "state KiB 1k", f"state KiB {Ld // 1024}k"])
  rows = []
  for fam, ns in grouped(names):
    for n in ns:
      cells = pages.keyed(cost["train"].get(n, {}).get("cells", {}))
      tx = [train_text(cells.get(N)) if N in cells else
            ("not attempted",) * 2 if N > max(st["lens"]) else ("not run",) * 2
            for N in lens]
      d = cost["decode"].get(n)
      small = min(int(x) for x in st["lens"])
      note = attention.variant(n).note_on(None)     # its short form: "ring on 1 device = flash"
      label = f"`{n}`" + (f" ({note.split(':')[0]})" if note else "")
      rows.append([fam, label] + [t for t, _ in tx] + [m for _, m in tx]
                  + [decode_text(d, Ld)[0], decode_text(d, small)[1],
                     decode_text(d, Ld)[1]])
  L += pages.table(head, rows) + [""]
  if lens[-1] > max(st["lens"]):
    L += [f"`not attempted` at {lens[-1]:,}: the variant's record declares a memory "
          "quadratic in N (N² in `Variant.memory`).", ""]
  # Pareto plots
  if pngs:
    src = next(s for s in S.SOURCES if s.key == PARETO_TASK)
    L += ["## Quality against throughput", "",
          f"Quality: the gap to softmax on {PARETO_TASK} ({src.tokens} tokens; "
          f"{lab(src)}; positive = worse) from the quality table; throughput: "
          "the training tokens/s of the cost table at each length. The front: the "
          "variants no other is both faster than and at least as good as.", ""]
    L += [f"![Pareto front at {N:,} tokens]({f})" for N, f in pngs] + [""]
  return L


def write_page(out: str = "results/choose", root: str = "results", names=None) -> None:
  """out/README.md and out/pareto_<N>.png from out/cost.json and the other pages'
  JSON under `root`. out: the page's folder; root: the results folder; names: the
  variants (default: every registered one)."""
  names = list(names or attention.names())
  quality = S.read(root, names)
  status = {s.key: S.protocol_status(s, root)[1] for s in S.SOURCES}
  labels = {s.key: S.label(s, root) for s in S.SOURCES}
  cost = pages.read_json(os.path.join(out, COST))
  pngs = []
  if cost:
    src = next(s for s in S.SOURCES if s.key == PARETO_TASK)
    for N in sorted(int(x) for x in cost["setup"]["lens"]):
      f = f"pareto_{N // 1024}k.png"
      plot_pareto(os.path.join(out, f), pareto_points(quality, cost, N), N,
                  f"Δ {labels[src.key]} vs softmax")
      pngs.append((N, f))
  pages.write_text(os.path.join(out, "README.md"),
                   page_lines(quality, cost, status, names, S.SOURCES, pngs, labels))
