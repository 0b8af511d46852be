"""The decision page, results/choose/: which attention to use, and what it costs
(issues 80, 103), written by `python -m scripts.choose` (`--page_only`: from the
committed JSON): one answer per question a user brings, each from evidence at that
question's own length and budget (studies.choose.answers):

  * a causal LM at 1,024 and at 4,096 tokens: results/lm_length (the gap to flash, its
    recall split, the model's cost from the same runs);
  * recall at a fixed decode budget: results/mqar_memory (MQAR accuracy against
    decode-state bytes);
  * short sequences (≤ 258 tokens): the variants pages, read by studies.choose.sources
    (every quality cell: the variant against the exact reference on one task, with the
    source page's own verdict).

Then the short tasks' quality table, and, as an appendix labelled so, one cost run of a
single attention op (results/choose/cost.json, studies.choose.cost): a CPU's, at shapes
no answer uses. GPU figures come only from the GPU pages and sit in tables of their own.
tests/studies/test_choose.py and test_choose_answers.py check the rules on fixture data.
"""
from __future__ import annotations

import os

import attention
from studies.choose import answers as A, sources as S
from studies.choose.cells import COST, decode_text, grouped, quality_text, train_text
from studies.core import pages, timing


SHORT_REGIMES = (S.SHORT, S.MID)


def short_sources(sources=S.SOURCES) -> list:
  """The columns of the short-sequence answer: the variants pages at ≤ 258 tokens."""
  return [s for s in sources if s.regime in SHORT_REGIMES and s.kind == S.VARIANTS]


def all_answers(quality: dict, root: str = "results", sources=S.SOURCES) -> list:
  """Every answer of the page, in the page's order: the causal LM at each length of the
  length study, recall at a fixed decode budget, short sequences."""
  from studies.length import page as length_page, presets
  d = length_page.load(os.path.join(root, A.LM_PAGE))
  lengths = (d or {}).get("lengths") or list(presets.preset("cpu").lengths)
  out = [A.lm_answer(d, int(L), root) for L in lengths]
  out.append(A.recall_answer(root))
  out.append(A.short_answer(quality, short_sources(sources), root))
  return out


def answer_lines(a, root: str = "results") -> list[str]:
  """One answer's page lines: its question, where its evidence and costs come from, the
  lead, what would change it, its table, its GPU table, its notes."""
  links = ", ".join(f"[{p}](../{p}/README.md)" for p in a.source.split(", "))
  L = [f"### {a.title}", "", f"*Evidence:* {links}; *costs:* {a.device}.", "", a.lead, "",
       f"*What would change this answer:* {a.change}", ""]
  if a.table:
    L += list(a.table) + [""]
  if a.gpu:
    L += list(a.gpu)
  L += [x for n in a.notes for x in (n, "")]
  return L


def status_lines(answers, status: dict, sources, root: str = "results") -> list[str]:
  """What each answer rests on, and how final it is."""
  L = ["## What each answer rests on", ""]
  d = pages.read_json(os.path.join(root, A.LM_PAGE, "results.json"))
  if d:
    judged = sum(1 for by in d["verdicts"]["by"].values() for v in by.values()
                 if v["word"] in ("better", "worse", "unresolved", "equal"))
    L.append(f"- [lm_length](../lm_length/README.md): protocol version "
             f"{d['protocol'].get('version')}, {d['runs']} runs in its ledger, {judged} "
             f"of {len([r for r in d['trained_rows'] if r != A.lm_reference()]) * len(d['lengths'])}"
             " comparisons with flash judged")
  else:
    L.append("- [lm_length](../lm_length/README.md): no page yet")
  m = pages.read_json(os.path.join(root, A.MEMORY_PAGE, "results.json"))
  if m:
    pts = m["points"]
    L.append(f"- [mqar_memory](../mqar_memory/README.md): protocol version "
             f"{m['protocol'].get('version')}, {A.settled(pts)}")
  else:
    L.append("- [mqar_memory](../mqar_memory/README.md): no page yet")
  for s in sources:
    L.append(f"- [{s.key}](../{s.page}/README.md): {status.get(s.key, 'no page')}")
  return L + [""]


def page_lines(quality: dict, cost: dict | None, status: dict, names,
               sources=S.SOURCES, labels=None, root: str = "results",
               answers=None) -> list[str]:
  """The page's Markdown lines. quality: {source: {variant: Cell}} (sources.read);
  cost: cost.json's record or None; status: {source key: protocol words}
  (sources.protocol_status); names: the variants; sources: the columns; labels:
  {source key: its metric's label}; root: the results folder; answers: the answers
  (default `all_answers`)."""
  cost = cost or {}
  short = short_sources(sources)
  answers = answers if answers is not None else all_answers(quality, root, sources)
  lab = lambda s: (labels or {}).get(s.key) or S.metric(s)[1]
  link = lambda s: f"[{s.key}](../{s.page}/README.md)"
  L = ["# Which attention should I use, and what will it cost?", "",
       "Written by `python -m scripts.choose --page_only` (`make pages`) from the "
       "committed JSON of the pages each answer links (study logic "
       "`studies/choose/answers.py`, `studies/choose/page.py`); nothing is re-typed.", "",
       "## The answers", "",
       f"One answer per question, each from evidence at that question's own length and "
       f"budget, written by rules: at most {A.MAX_CHOICES} choices, in order, each with the "
       "condition under which it wins, its interval and its cost there; a row judged "
       "worse on the question's own evidence is never a choice. Each says where its "
       "costs were measured; GPU figures come only from GPU pages, in tables of their "
       "own.", ""]
  for a in answers:
    L += answer_lines(a, root)
  L += status_lines(answers, status, short, root)
  L += ["## Short sequences: quality against the exact reference", "",
        "The evidence of the short-sequence answer. Each cell: the variant's mean minus "
        "the exact reference's (softmax) on the column's task, with its 95% interval "
        "(Welch, unadjusted) where the source page tested it, the variant's seeds and the "
        "source page's verdict (better / worse at its Holm-adjusted p, so an interval "
        "clear of 0 can still read unresolved; `no verdict`: a single run; `not like for "
        "like`: rates chosen differently, not judged; in brackets: what differs from "
        "softmax's model besides the attention: parameters, a position signal of its "
        "own, the layer pieces its paper builds). `cannot`: the source records the "
        "variant's refusal; `not run`: it holds no run of it.", ""]
  head = ["family", "variant"] + [f"{link(s)} ({s.tokens} tok.; {lab(s)})" for s in short]
  rows = []
  for fam, ns in grouped(names):
    for n in ns:
      rows.append([fam, f"`{n}`"] + [quality_text(s, quality.get(s.key, {}).get(
          n, S.Cell(S.NOT_RUN, s.json(root)))) for s in short])
  L += pages.table(head, rows) + [""]
  L += ["Sources: " + ", ".join(f"`{s.json('results')}`" for s in short) + ". Pages that "
        "no answer reads any more (archived, or superseded for the decision: the Zoology "
        "grid's equal-width MQAR page by results/mqar_memory) are no column here.", ""]
  # cost table
  L += ["## Appendix: one attention op, not a model (CPU)", "",
        "Not an answer's cost: the answers above take theirs from their studies' own "
        "models. This table times one attention op alone, on one CPU, at shapes no "
        "answer uses (kept for lengths no model study reaches: 16k, 64k).", ""]
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
  return L


def write_page(out: str = "results/choose", root: str = "results", names=None) -> None:
  """out/README.md from out/cost.json and the other pages' JSON under `root`. out:
  the page's folder; root: the results folder; names: the variants (default: every
  registered one)."""
  names = list(names or attention.names())
  quality = S.read(root, names)
  status = {s.key: S.protocol_status(s, root)[1] for s in S.SOURCES}
  labels = {s.key: S.label(s, root) for s in S.SOURCES}
  cost = pages.read_json(os.path.join(out, COST))
  for f in os.listdir(out) if os.path.isdir(out) else ():
    if f.startswith("pareto_") and f.endswith(".png"):     # the old page's plots
      os.remove(os.path.join(out, f))
  pages.write_text(os.path.join(out, "README.md"),
                   page_lines(quality, cost, status, names, S.SOURCES, labels, root))
