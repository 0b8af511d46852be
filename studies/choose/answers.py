"""The decision page's answers (issue 103): one answer per question a user brings, each
from evidence at the question's own length and budget, written by rules from the pages'
JSON (studies.choose.page lays them out).

  lm       a causal LM at each length of results/lm_length (bytes of code): the gap to
           flash with its version-2 interval and verdict, and the model's cost at that
           length from the study's own runs (`lm_answer`)
  recall   recall at a fixed decode budget: results/mqar_memory's points, MQAR accuracy
           against decode-state bytes (`recall_answer`)
  short    short sequences (≤ 258 tokens): the variants pages' verdicts (`short_answer`)

Each answer names at most MAX_CHOICES choices, in order, each with the condition under
which it wins, its cost at that length and its interval; a row judged worse on the
question's own evidence is never a choice (`Answer.worse`). Its lead is at most WORDS
words, and every figure in it is a `Cite` (the JSON file, the keys down to the value,
the value, the words it reads as) that tests/studies/test_choose_answers.py resolves
against the file. Under the lead: `change`, the one measurement that could reverse the
answer, from the data's own intervals, pending rows and power.
"""
from __future__ import annotations

import os

from studies.choose.answer import (LM_PAGE, MAX_CHOICES, MEMORY_PAGE, WORDS,  # noqa: F401
                                   Answer, Choice, Cite, _get, _lead, _rows_list, cite, kib)
from studies.choose.answers_lm import (gpu_kernel_lines, lm_answer,  # noqa: F401
                                       lm_change, lm_differs, lm_reference, lm_table)
from studies.core import pages, protocol


# ---- recall at a fixed decode budget: results/mqar_memory -------------------------------

def row_kind(spec: dict) -> str:
  """What a recall row keeps to decode: "hybrid", "int8 KV cache", "window KV cache",
  "latent KV cache" (a variant whose k and v come from a per-token latent: its record's
  kv_widths), "MQA/GQA KV cache" (heads sharing key/value heads), "full KV cache" or
  "fixed state" (spec: the row's record in the page's `rows`)."""
  import attention
  if spec.get("layer_attention"):
    return "hybrid"
  if spec.get("cache_dtype"):
    return f"{spec['cache_dtype']} KV cache"
  a = spec["attention"]
  if a == "local":
    return "window KV cache"
  v = attention.variant(a)
  if v.kv_widths is not None:     # keys and values from a per-token latent (mla)
    return "latent KV cache"
  if v.family not in ("exact", "score"):
    return "fixed state"
  h = spec.get("heads")
  kv = spec.get("kv_heads") or h
  return ("full KV cache" if not h or kv == h else
          f"{'MQA' if kv == 1 else 'GQA'} KV cache ({h} heads, {kv} kv)")


def _ahead(a: dict, b: dict):
  """The exploratory comparison of point a against point b (protocol.exploratory over
  their reporting seeds, MQAR accuracy)."""
  from studies.recall.stats import ACCURACY
  return protocol.exploratory({0: (list(a["seeds"].values()), list(b["seeds"].values()))},
                              ACCURACY)[0]


def frontier(pts: list[dict]) -> tuple[list[dict], dict]:
  """(the judged points no other judged point beats with no more state bytes, ordered
  by bytes; {index of a dominated point: (index of the point that beats it, its
  Verdict)}): a point is beaten where a point of at most its bytes is better in the
  exploratory comparison (Welch's p unadjusted < α: rule 6's pairs between rows)."""
  idx = [i for i, q in enumerate(pts) if q["status"] == "v2"]
  beaten = {}
  for i in idx:
    for j in idx:
      if j == i or pts[j]["state_bytes"] > pts[i]["state_bytes"]:
        continue
      if pts[j]["mean"] <= pts[i]["mean"]:
        continue
      v = _ahead(pts[j], pts[i])
      if v.word == "better":
        beaten[i] = (j, v)
        break
  front = sorted((i for i in idx if i not in beaten), key=lambda i: pts[i]["state_bytes"])
  return [pts[i] for i in front], beaten


def recall_answer(root: str = "results") -> Answer:
  """The answer for recall at a fixed decode budget, from results/mqar_memory's points
  (studies.recall.memory_page): over the frontier (`frontier`), in order of state bytes,
    1. the most accurate point of the smallest band of state bytes that has one (its
       condition: a budget under that band's top), where it is under 90%;
    2. the smallest state reaching 90%;
    3. the smallest state reaching 99%.
  A row with no point on the frontier (every judged point beaten at no more bytes, or
  did not train) is "worse" here, never a choice."""
  path = os.path.join(root, MEMORY_PAGE, "results.json")
  data = pages.read_json(path)
  title = "Recall at a fixed decode budget"
  cmd = "`python -m scripts.mqar --preset=memory_cpu --jobs=2`"
  pts = (data or {}).get("points", [])
  judged = [q for q in pts if q["status"] == "v2"]
  links = ("Bounded KV caches a user can choose instead: results/kv_cache (GQA, MQA, "
           "MLA's latent, int8, a window, hybrid stacks: bytes per token, speed, error) "
           "and results/mla_train (MLA's smaller cache, trained).")
  device = "decode-state bytes per sequence (`models.count.decode_state_bytes`: a count, no device)"
  if not judged:
    pend = tuple(dict.fromkeys(q["row"] for q in pts))
    lead = (f"Not answered yet: none of the {len(pts)} points of results/mqar_memory is "
            "judged under protocol version 2 (its runs are under way). The Zoology grid's "
            "equal-width page compares at equal width, not equal memory, so this page "
            f"gives no choice yet. {links} Run or resume: {cmd}.")
    return Answer("recall", title, MEMORY_PAGE, device, lead, pending=pend,
                  change=f"the memory study's runs ({cmd}).")
  front, beaten = frontier(pts)
  cites = []
  from studies.recall.memory_page import BAND_KIB

  def at(q, when):
    i = pts.index(q)
    b = cite(data, path, ("points", i, "state_bytes"), kib)
    m = cite(data, path, ("points", i, "mean"), "{:.1%}")
    cites.extend([b, m])
    says = m.text
    if q.get("interval"):      # the mean's 95% bootstrap over seeds (memory_page.point)
      iv = cite(data, path, ("points", i, "interval"),
                lambda v: f"[{v[0]:.1%}, {v[1]:.1%}]")
      cites.append(iv)
      says += f" {iv.text}"
    kind = row_kind(data["rows"][q["row"]])
    return Choice(q["row"], when, f"{says} at {b.text} (width {q['width']}, "
                  f"{kind}, {len(q['seeds'])} seeds)")

  choices = []
  first = front[0] if front else None
  if first is not None:
    band = next(hi for lo, hi in zip(BAND_KIB, BAND_KIB[1:])
                if first["state_bytes"] < hi * 1024)
    inband = [q for q in front if q["state_bytes"] < band * 1024]
    best = max(inband, key=lambda q: q["mean"])
    if best["mean"] < 0.9:
      choices.append(at(best, f"under {band:,} KiB a sequence"))
  for level in (0.9, 0.99):
    q = next((q for q in front if q["mean"] >= level), None)
    if q is not None and q["row"] not in [c.row for c in choices]:
      choices.append(at(q, f"for ≥ {level:.0%} recall, the smallest state"))
  rows = list(dict.fromkeys(q["row"] for q in pts))
  on_front = {q["row"] for q in front}
  from studies.recall.memory_page import NOT_RISING, SETTLED
  # worse: every point beaten or untrained (a wider point the plan leaves out, NOT_RISING,
  # counts neither way)
  worse = tuple(r for r in rows if r not in on_front and any(
      q["row"] == r and q["status"] in ("v2", "did not train") for q in pts)
      and not any(q["row"] == r and q["status"] not in ("v2", "did not train", NOT_RISING)
                  for q in pts))
  worse = tuple(r for r in worse if r not in [c.row for c in choices])
  # a point whose 8 seeds split for good is settled but judged neither way
  split = [q for q in pts if q["status"] == "unstable"]
  pending = tuple(r for r in rows if r not in on_front and r not in worse and any(
      q["row"] == r and q["status"] not in SETTLED for q in pts))
  parts = [f"{i + 1}. `{c.row}` {c.when}: {c.says}." for i, c in enumerate(choices)]
  waiting = [q for q in pts if q["status"] not in SETTLED]
  if waiting:      # a point still to judge could join the frontier below any choice
    parts.insert(0, f"Provisional, {settled(pts)}:")
  if not choices:
    parts.append("No judged point reaches 90%, and none is ahead in the smallest band.")
  # a row that never trained is said so, apart from one beaten (issue 102: a row that
  # did not train never reads as worse)
  untrained = tuple(r for r in worse if all(q["status"] in ("did not train", NOT_RISING)
                                            for q in pts if q["row"] == r))
  if untrained:
    parts.append(f"Did not train at any rate: {_rows_list(untrained)}.")
  if set(worse) - set(untrained):
    parts.append("Beaten at no more bytes: "
                 f"{_rows_list(r for r in worse if r not in untrained)}.")
  if split:
    parts.append("Seeds split, so neither chosen nor worse: " + ", ".join(
        f"`{q['row']}` w{q['width']} ({min(q['seeds'].values()):.0%} to "
        f"{max(q['seeds'].values()):.0%})" for q in split) + ".")
  if pending:
    parts.append(f"Not judged yet: {_rows_list(pending)}.")
  lead = _lead(parts)
  change = recall_change(pts, front, pending)
  table = recall_table(data, front, beaten)
  return Answer("recall", title, MEMORY_PAGE, device, lead, tuple(choices), worse,
                pending, change, tuple(table), tuple(cites),
                notes=tuple(cache_lines(data)) + (links,))


def cache_lines(data: dict) -> list[str]:
  """Where a KV cache (int8, a window, a full one) or a hybrid does better than a fixed
  state at the same bytes, by rule: in each band of state bytes (studies.recall.
  memory_page.bands: the best judged point, the next best row), the best is a cache or
  a hybrid and the next best a fixed state, with their exploratory comparison; or the
  reverse. One line per band where the two kinds meet."""
  from studies.recall.memory_page import bands
  out = []
  for b in bands(data["points"]):
    best, nxt, v = b["best"], b["next"], b["verdict"]
    if nxt is None:
      continue
    kb, kn = row_kind(data["rows"][best["row"]]), row_kind(data["rows"][nxt["row"]])
    if (kb == "fixed state") == (kn == "fixed state"):
      continue
    lo, hi = b["band_kib"]
    out.append(f"At {lo:,}–{hi:,} KiB a sequence, `{best['row']}` ({kb}, "
               f"{best['mean']:.1%}) is ahead of `{nxt['row']}` ({kn}, {nxt['mean']:.1%}): "
               f"{v.text('{:.1%}')}.")
  return out


def recall_change(pts, front, pending) -> str:
  """The rows still to judge; else the first frontier step whose lead over the next
  point is unresolved (more seeds could swap them); else a multi-head panel (GQA, MQA,
  MLA on MQAR), which this one-head model cannot have."""
  if pending:
    return (f"the rows not judged yet ({_rows_list(pending)}): each could join the "
            "frontier and the choices.")
  for a, b in zip(front, front[1:]):
    v = _ahead(b, a)
    if v.word == "unresolved":
      return (f"more seeds of `{a['row']}` (w{a['width']}) and `{b['row']}` "
              f"(w{b['width']}), whose order on the frontier is not resolved: the larger "
              f"state's lead is {v.text('{:.1%}')}.")
  return ("a multi-head panel (GQA, MQA, MLA on MQAR at the same bytes), which the "
          "one-head model here cannot have.")


def settled(pts: list[dict]) -> str:
  """"N of M points settled (J judged, D did not train, U with split seeds)": the memory
  page's points that no further run changes, by kind (the answer's lead and the page's
  list of sources say the same)."""
  from studies.recall.memory_page import NOT_RISING
  kinds = [("v2", "judged"), ("did not train", "did not train"),
           ("unstable", "with split seeds"), (NOT_RISING, "not run as no longer rising")]
  n = {k: sum(q["status"] == k for q in pts) for k, _ in kinds}
  parts = [f"{n[k]} {w}" for k, w in kinds if n[k] or k == "v2"]
  return f"{sum(n.values())} of {len(pts)} points settled ({', '.join(parts)})"


def recall_table(data: dict, front: list, beaten: dict) -> list[str]:
  pts = data["points"]
  rows = []
  for i, q in enumerate(pts):
    if q["status"] not in ("v2", "did not train"):
      continue
    where = ("on the frontier" if q in front else
             "did not train" if q["status"] == "did not train" else
             f"beaten by `{pts[beaten[i][0]]['row']}` w{pts[beaten[i][0]]['width']} "
             f"({beaten[i][1].text('{:.1%}')})")
    rows.append([f"`{q['row']}`", q["width"], row_kind(data["rows"][q["row"]]),
                 kib(q["state_bytes"]),
                 f"{q['mean']:.1%}" if q["mean"] is not None else "–",
                 len(q["seeds"]), where])
  return pages.table(["row", "width", "keeps", "decode state", "accuracy", "seeds",
                      "at its bytes"], rows)


# ---- short sequences: the variants pages --------------------------------------------------

VERDICT = "verdict"      # a Cite's first key where the figure is a source page's verdict cell


def short_cost(s, n: str, root: str = "results") -> tuple[str, list]:
  """(words, cites) of variant n's training speed on source s against softmax's there:
  the two rows' steps/s from the page's results.json, as a ratio, where both ran on the
  same host ("" where either has none, or the hosts differ: no ratio across machines)."""
  path = s.json(root)
  rows = pages.read_json(path, []) or []
  idx = {r["variant"]: i for i, r in enumerate(rows)
         if r.get("task") == s.task and r.get("preset") == s.preset}
  if n not in idx or "softmax" not in idx or n == "softmax":
    return "", []
  a, b = rows[idx[n]], rows[idx["softmax"]]
  if not a.get("steps_per_s") or not b.get("steps_per_s"):
    return "", []
  if (a.get("run") or {}).get("host") != (b.get("run") or {}).get("host"):
    return "steps/s measured on another host than softmax's: no ratio", []
  ca = cite(rows, path, (idx[n], "steps_per_s"), "{:.2f}")
  cb = cite(rows, path, (idx["softmax"], "steps_per_s"), "{:.2f}")
  return f"{ca.value / cb.value:.2f}× softmax's steps/s ({ca.text} vs {cb.text})", [ca, cb]

def short_answer(quality: dict, sources, root: str = "results") -> Answer:
  """The answer for short sequences (≤ 258 tokens), from the variants pages' cells
  (studies.choose.sources.read; sources: the short and mid-length columns). Rules:
  a variant judged worse on any of them is never a choice; the variants judged better
  than the exact reference on the most tasks (then with the fewest tasks where their
  95% interval lies wholly on the worse side, then the largest mean gain relative to
  the reference) take the first choices, at most two, each with the tasks it wins on
  and those it does not; the exact reference (`flash`, softmax's function) is the
  last, for every other task."""
  from studies.choose.cells import quality_text, wholly_worse
  names = sorted({n for s in sources for n in quality.get(s.key, {})})
  cell = lambda s, n: quality.get(s.key, {}).get(n)
  worse = tuple(n for n in names if any((c := cell(s, n)) and c.word == "worse"
                                        for s in sources))
  better = {n: [s for s in sources if (c := cell(s, n)) and c.word == "better"]
            for n in names if n not in worse}
  better = {n: ss for n, ss in better.items() if ss}
  wholly = {n: [s for s in sources if wholly_worse(s, cell(s, n))] for n in names}

  def gain(n):
    xs = [abs(cell(s, n).diff / cell(s, n).ref) for s in better[n] if cell(s, n).ref]
    return sum(xs) / len(xs) if xs else 0.0
  order = sorted(better, key=lambda n: (-len(better[n]), len(wholly[n]), -gain(n)))
  cites = []

  def cited(s, n):
    c = cell(s, n)
    # a verdict cell is computed from the page's seeds by its own verdict function
    # (studies.choose.sources): its Cite's keys name the cell, not a JSON field
    cites.append(Cite(c.source, (VERDICT, s.key, n), c.diff, quality_text(s, c)))
    words, cs = short_cost(s, n, root)
    cites.extend(cs)
    return f"{s.key}: {quality_text(s, c)}" + (f"; {words}" if words else "")

  choices = []
  for n in order[:MAX_CHOICES - 1]:
    no = [s.key for s in wholly[n]]
    when = (f"on tasks like {', '.join(s.key for s in better[n])}"
            + (f"; not for {', '.join(no)} (interval wholly worse there)" if no else ""))
    choices.append(Choice(n, when, cited(better[n][0], n)))
  ref = "flash"
  ex = [s for s in sources if (c := cell(s, ref)) and c.status in ("ok", "reference")]
  says = (cited(ex[0], ref) if ex else "softmax's function by a kernel that never holds "
          "the T × T scores")
  choices.append(Choice(ref, "for every other task (the exact reference's function)"
                        if choices else "(no variant is judged better on any task)", says))
  parts = [f"{i + 1}. `{c.row}` {c.when}: [{c.says}]." for i, c in enumerate(choices)]
  if worse:
    parts.append(f"Worse on a task here: {_rows_list(worse)}.")
  lead = _lead(parts)
  pend = []
  for s in sources:
    st = pages.read_json(s.json(root), []) or []
    pend += [r["variant"] for r in st if r.get("pending")]
  pend = tuple(dict.fromkeys(pend))
  if pend:
    change = (f"the variants still to run on a re-run page ({_rows_list(pend)}): each adds "
              "a comparison to Holm's correction there.")
  else:
    un = [(n, s) for n in order for s in sources if (c := cell(s, n))
          and c.word == "unresolved" and wholly_worse(s, c)]
    change = (f"more seeds of `{un[0][0]}` on {un[0][1].key}: its interval lies wholly on "
              "the worse side but Holm leaves it unresolved; judged worse, it would leave "
              "the choices." if un else "a re-run of the version-1 pages under version 2.")
  dev = "CPU (each variants page's own runs)"
  src = ", ".join(dict.fromkeys(s.page for s in sources))
  return Answer("short", "Short sequences (≤ 258 tokens)", src, dev, lead,
                tuple(choices), worse, (), change, (), tuple(cites))
