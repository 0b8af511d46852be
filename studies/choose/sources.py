"""What the decision page (studies.choose.page) reads from the other pages' JSON: one Cell
per (source page, variant), the variant's quality against the exact reference with
the source page's own verdict. Nothing here re-types a figure: every value is read
from the source's JSON, and every verdict comes from the source page's verdict
function (`verdicts_against`, the one adapter to switch when that function changes:
today variants_seeds.page_verdicts / mqar_stats.page_verdicts (Welch + Holm,
studies.core.protocol), before them variants_seeds.against / mqar_page.verdict).
"""
from __future__ import annotations

import dataclasses
import math
import os

from studies.core import pages, protocol
from studies.variants.compare import EXACT, METRIC

NOT_RUN, CANNOT = "not run", "cannot"


@dataclasses.dataclass(frozen=True)
class Source:
  """A column of the decision page: `key` (its name on the page), `page` (a folder
  under results/) of `kind` VARIANTS (studies.variants.page) or RECALL_PAGE
  (studies.recall.page), its task and preset, its sequence length in words (`tokens`,
  from its config), its length `regime`, and for MQAR the (width, tokens, pairs)
  cell. SOURCES builds them from their page folders (`column`)."""
  key: str
  page: str
  kind: str
  task: str
  preset: str
  tokens: str
  regime: str
  cell: tuple | None = None

  def json(self, root: str) -> str:
    """The path of the JSON this column reads its rows from."""
    return os.path.join(root, self.page, "results.json")


SHORT, MID, RECALL, LONG = "≤ 256 tokens", "258 tokens", "512 tokens", "~2k tokens"
REGIMES = (SHORT, MID, RECALL, LONG)
# The kinds of source page: a variants page (studies.variants.page), the MQAR page of
# the recall study (studies.recall.page).
VARIANTS, RECALL_PAGE = "variants", "recall"


def page_task(page: str) -> str:
  """The registered task whose page the folder `page` is: results/variants_<task>, or
  variants_<task>_<preset> (studies.variants.place.out_dir); the longest such name."""
  from data import tasks
  found = [n for n in tasks.names()
           if page == f"variants_{n}" or page.startswith(f"variants_{n}_")]
  if not found:
    raise ValueError(f"page {page!r} is no task's (results/variants_<task>[_<preset>]); "
                     f"tasks: {', '.join(tasks.names())}")
  return max(found, key=len)


def column(page: str, kind: str, preset: str, tokens: str, regime: str,
           cell: tuple | None = None, suffix: str = "") -> Source:
  """The Source of a page folder: its task that of the folder (`page_task`), its key
  the task's name, then `suffix` where it has one (a second column of a task)."""
  task = page_task(page)
  return Source(f"{task} {suffix}" if suffix else task, page, kind, task, preset,
                tokens, regime, cell)


# The columns, by page folder (lengths from each config: copy 2·64 + 2, copy cpu_258
# 2·128 + 2, MNIST 14×14, Shakespeare seq_len, Multi30k src_len + tgt_len, ListOps
# min..max_length, MQAR's sequence length).
SOURCES = (
    column("variants_copy", VARIANTS, "cpu", "130", SHORT),
    column("variants_mnist", VARIANTS, "cpu", "196", SHORT),
    column("variants_shakespeare", VARIANTS, "cpu", "64", SHORT),
    column("variants_listops", VARIANTS, "cpu", "32–128", SHORT),
    column("variants_copy_cpu_258", VARIANTS, "cpu_258", "258", MID, suffix="258"),
    # Zoology's grid (issue 78): its seeded cell, 64 pairs in 512 tokens at width 64,
    # where a fixed state holds fewer keys than the pairs: the recall column
    column("variants_mqar", RECALL_PAGE, "zoology_cpu", "512", RECALL, (64, 512, 64),
           suffix="512"),
)
# Archived pages are no column (results/archive/README.md says why): Multi30k
# (variants_multi30k: chosen on test, its version 2 re-run beyond issue 100's budget), the short MQAR grid
# (variants_mqar_short, superseded by the Zoology page and "Recall at equal memory") and
# ListOps at ~2k tokens (variants_listops_cpu_long: no exact reference on the CPU and
# chosen on test). The ~2k regime (LONG) has no column until a page for it is re-run.

MQAR_METRIC = ("accuracy", "recall accuracy", True, "{:.1%}")


def metric(src: Source) -> tuple:
  """(key, label, higher is better, format) of the source's quality figure."""
  return MQAR_METRIC if src.kind == RECALL_PAGE else METRIC[src.task]


@dataclasses.dataclass(frozen=True)
class Cell:
  """One variant on one source. status: "ok", "reference" (the exact reference's own
  row), CANNOT (the source's recorded refusal), NOT_RUN, "failed"; value: the
  variant's figure (the mean over its seeds where it has several, else its row's);
  ref / ref_name: the reference's figure on the same basis and its variant; diff =
  value - ref with its 95% interval (lo, hi) where the verdict tested it; seeds; word:
  the source page's verdict (better, worse, unresolved, equal, few, one seed, not like
  for like, no exact reference); why: a refusal's or skip's reason; source: the JSON
  path it was read from; differs: what differs from the reference's model besides
  the attention, in short (studies.variants.seeds.what_differs: "+35% parameters,
  own position signal"), "" where nothing does."""
  status: str
  source: str
  value: float | None = None
  ref: float | None = None
  ref_name: str | None = None
  diff: float | None = None
  lo: float | None = None
  hi: float | None = None
  seeds: int = 0
  word: str = ""
  why: str = ""
  differs: str = ""


# ---- the verdict adapter: the one place that knows the pages' verdict functions ------

@dataclasses.dataclass(frozen=True)
class Judged:
  """A source page's verdict of a variant against the reference: its word and, where
  tested, the difference with its 95% interval."""
  word: str
  diff: float | None = None
  lo: float | None = None
  hi: float | None = None


def _judged(x) -> Judged:
  """A protocol.Verdict as Judged."""
  t = getattr(x, "test", None)
  if t is None:
    return Judged(x.word, 0.0 if x.word == "equal" else None)
  return Judged(x.word, t.diff, x.lo, x.hi)     # the interval the page prints


def verdicts_against(kind: str, by: dict, higher_better: bool, **page) -> dict:
  """{variant: Judged} against softmax, as the source page's verdict function gives
  them. kind: VARIANTS or RECALL_PAGE; by: {variant: [seed figures]} at one cell;
  higher_better: the metric's direction; page: what the page's function needs
  (variants: rows, lrs, base, unlike, metric, version (the family's); mqar: data, cell)."""
  if kind == RECALL_PAGE:
    from studies.recall import stats as mqar_stats
    if hasattr(mqar_stats, "page_verdicts"):
      v = mqar_stats.page_verdicts(page["data"])
      return {n: _judged(x) for (n, c), x in v.items() if tuple(c) == tuple(page["cell"])}
  else:
    from studies.variants import seeds as vs
    if hasattr(vs, "page_verdicts"):
      v = vs.page_verdicts({n: dict(enumerate(xs)) for n, xs in by.items()},
                           higher_better, page.get("lrs"), page.get("base"),
                           page.get("unlike"), page.get("metric"),
                           page.get("version", 1))
      return {a: _judged(x) for (a, b), x in v.items() if b == EXACT}
  # no page-level function: the protocol's test over the comparisons with softmax
  pairs = {n: (xs, by[EXACT]) for n, xs in by.items() if n != EXACT and EXACT in by}
  return {n: _judged(x) for n, x in protocol.verdicts(pairs, higher_better).items()}


# ---- reading a variants page --------------------------------------------------------

def seed_runs(task: str, preset: str, rows: dict, out: str) -> dict:
  """{variant: {seed: figure}} of the source page's seed table: its own grouping
  (studies.variants.seeds.seed_figures, under the page's overrides), for the rows
  with a figure."""
  from studies.variants import seeds as vs
  from studies.variants.compare import quality
  ok = [r for r in rows.values() if r.get("status", "ok") == "ok" and quality(r) is not None]
  return vs.seed_figures(task, preset, ok, out, protocol.page_overrides(task, out))


def _unlike(src: Source, rows: dict, out: str) -> dict:
  from studies.variants import seeds as vs
  from studies.variants.compare import base_lr, chosen_lrs
  ov = protocol.page_overrides(src.task, out)
  lrs, base = chosen_lrs(src.task, src.preset, out, ov), base_lr(src.task, src.preset, ov)
  return dict(lrs=lrs, base=base, unlike=vs.unlike_softmax(rows, lrs, base))


def variants_cells(src: Source, root: str, names, group=None, rates=None) -> dict:
  """{variant: Cell} of a variants page (results/<src.page>/results.json + seeds.json).
  root: the results folder; names: every registered variant (one not on the page:
  "not run"); group: (task, preset, rows, out) -> {variant: {seed: figure}} (the
  page's seed table, `seed_runs`); rates: (src, rows, out) -> {"lrs", "base",
  "unlike"} (how the page's rates were chosen; `unlike`: the rows it does not judge;
  default `_unlike`)."""
  from studies.variants.compare import quality
  group, rates = group or seed_runs, rates or _unlike
  path, out = src.json(root), os.path.join(root, src.page)
  if not os.path.exists(path):
    return {n: Cell(NOT_RUN, path, why="no page") for n in names}
  rows = {r["variant"]: r for r in pages.read_json(path, [])
          if r.get("task") == src.task and r.get("preset") == src.preset}
  by = {v: [q[k] for k in sorted(q)] for v, q in group(src.task, src.preset, rows,
                                                      out).items()}
  vals = {v: (by[v] if v in by else [quality(r)]) for v, r in rows.items()
          if r.get("status") == "ok" and quality(r) is not None}
  how = rates(src, rows, out) if EXACT in vals else {}
  from studies.variants import seeds as vs
  judged = verdicts_against(VARIANTS, by, metric(src)[2], rows=rows,
                            metric=vs.task_metric(src.task),
                            version=vs.family_version(out), **how)
  differs = {v: d[0] for v, d in vs.page_differs(
      src.task, src.preset, rows, protocol.page_overrides(src.task, out)).items()}
  return _cells(src, path, names, rows, vals, judged, how.get("unlike", {}), differs)


def _mean(xs) -> float:
  return float(sum(xs) / len(xs))


def _cells(src, path, names, rows, vals, judged, unlike, differs=None) -> dict:
  """The Cells of one source from its rows' statuses, each variant's seed figures
  (vals), the page's verdicts (judged) and what differs besides the attention
  ({variant: short}, `Cell.differs`)."""
  ref = EXACT if EXACT in vals else None
  out = {}
  for n in names:
    r = rows.get(n)
    if r is None:
      out[n] = Cell(NOT_RUN, path, why="no row on the page")
    elif n not in vals:
      st = r.get("status")
      out[n] = Cell(CANNOT if st == "refused" else "failed" if st == "failed" else NOT_RUN,
                    path, why=r.get("reason", st or ""))
    elif ref is None:
      out[n] = Cell("ok", path, value=_mean(vals[n]), seeds=len(vals[n]),
                    word="no exact reference")
    elif n == ref:
      out[n] = Cell("reference", path, value=_mean(vals[n]), ref=_mean(vals[n]),
                    ref_name=ref, diff=0.0, seeds=len(vals[n]))
    else:
      j = judged.get(n)
      v, rv = _mean(vals[n]), _mean(vals[ref])
      word = ("not like for like" if n in unlike else
              "one seed" if len(vals[n]) == 1 else j.word if j else "few")
      diff = j.diff if j is not None and j.diff is not None else v - rv
      out[n] = Cell("ok", path, value=v, ref=rv, ref_name=ref, diff=diff,
                    lo=j.lo if j else None, hi=j.hi if j else None, seeds=len(vals[n]),
                    word=word, differs=(differs or {}).get(n, ""))
  return out


# ---- reading the MQAR page ----------------------------------------------------------

def mqar_cells(src: Source, root: str, names) -> dict:
  """{variant: Cell} of the MQAR page (results/<src.page>/results.json) at src.cell
  (width, tokens, pairs): the seeds' accuracies at each variant's chosen rate
  (mqar_stats.seed_values), a variant its sweep treats as softmax's own computation
  "not run" (and why), a refused one "cannot"."""
  from studies.recall import page as mqar_page, stats as mqar_stats
  path = src.json(root)
  if not os.path.exists(path):
    return {n: Cell(NOT_RUN, path, why="no page") for n in names}
  data = pages.read_json(path)
  rep = getattr(mqar_page, "reported", lambda d: d)(data)
  rows, vals = {}, {}
  for n in names:
    t = data.get("treatment", {}).get(n)
    if t is None:
      continue
    if t == "train":
      xs = mqar_stats.seed_values(rep, n, *src.cell)
      if xs:
        vals[n] = xs
        rows[n] = {"status": "ok"}
      else:
        rows[n] = {"status": "skipped", "reason": "no run at this cell"}
    else:
      word, why = t
      rows[n] = {"status": "refused" if word == "refused" else "skipped",
                 "reason": why if word == "refused" else f"the sweep's softmax: {why}"}
  judged = verdicts_against(RECALL_PAGE, vals, True, data=rep, cell=src.cell)
  return _cells(src, path, names, rows, vals, judged, {})


def read(root: str = "results", names=None, sources=SOURCES) -> dict:
  """{source key: {variant: Cell}} of every source. root: the results folder; names:
  the variants (default: every registered one); sources: the columns."""
  import attention
  names = list(names or attention.names())
  return {s.key: (mqar_cells(s, root, names) if s.kind == RECALL_PAGE
                  else variants_cells(s, root, names)) for s in sources}


def _mqar_pending(data: dict) -> list[str]:
  """The variants of an MQAR page's plan with runs still to finish (mqar.missing_cells's
  lines name them first)."""
  from studies.recall import mqar
  return [m.split(":")[0].strip("`") for m in mqar.missing_cells(data)]


def label(src: Source, root: str) -> str:
  """The column label of the source's quality metric: its task's under the protocol
  version its page follows (studies.variants.measure.metric_label; MQAR's own)."""
  if src.kind == RECALL_PAGE:
    return MQAR_METRIC[1]
  from studies.variants.measure import metric_label
  return metric_label(src.task, protocol.page_version(os.path.join(root, src.page)))


def protocol_status(src: Source, root: str) -> tuple[int | None, str]:
  """(version, words) of the evaluation protocol the source's figures follow, from
  its JSON (a variants page's protocol.json, the MQAR page's `protocol` record); None
  where the page is missing."""
  if src.kind == RECALL_PAGE:
    data = pages.read_json(src.json(root))
    if data is None:
      return None, "no page"
    v = int((data.get("protocol") or {}).get("version", 0))
  else:
    if not os.path.exists(src.json(root)):
      return None, "no page"
    rec = pages.read_json(os.path.join(root, src.page, "protocol.json"), {}) or {}
    v = int(rec.get("version", 0))
  if protocol.follows(v):
    pending = ([r["variant"] for r in pages.read_json(src.json(root), []) or []
                if r.get("pending")] if src.kind != RECALL_PAGE else _mqar_pending(data))
    left = "with runs still to finish" if src.kind == RECALL_PAGE else "still to run"
    return v, f"protocol version {v}" + (
        f", partway through its re-run: {len(pending)} variant(s) {left} "
        f"({', '.join(f'`{n}`' for n in pending)}) will add comparisons to Holm's "
        "correction, so its verdicts are provisional until then" if pending else "")
  return v, (f"old protocol (version {v}): rates chosen on the test figure, verdicts "
             "provisional until the page is re-run under version "
             f"{protocol.VERSION}")


def fmt_diff(src: Source, x: float) -> str:
  """A signed difference in the source's format (− for minus); of a percentage, in
  points ("pts": protocol.diff_text)."""
  return protocol.diff_text(x, metric(src)[3])


def finite(x) -> bool:
  return x is not None and math.isfinite(x)


# ---- "Recall at equal memory" (results/mqar_memory, studies.recall.memory_page) ----------

MEMORY_PAGE = "mqar_memory"


@dataclasses.dataclass(frozen=True)
class MemoryPoint:
  """One point of the recall frontier: a row at a width, its decode state per sequence
  (bytes), the mean of its reported seeds (None where none ran), their count, and its
  status there ("v2": judged under protocol version 2; "v1 ledger", "did not train",
  "awaits seeds", "more seeds", "unstable", "not rising": a wider point the plan leaves
  out, "not run")."""
  row: str
  width: int
  state_bytes: int
  mean: float | None
  seeds: int
  status: str

  @property
  def judged(self) -> bool:
    return self.status == "v2"


def memory_points(root: str = "results") -> list[MemoryPoint]:
  """The points of results/mqar_memory/results.json, in its plan's order ([] where the
  page is not written); ValueError naming the field a point lacks."""
  data = pages.read_json(os.path.join(root, MEMORY_PAGE, "results.json"))
  out = []
  for q in (data or {}).get("points", []):
    missing = [k for k in ("row", "width", "state_bytes", "mean", "seeds", "status")
               if k not in q]
    if missing:
      raise ValueError(f"{MEMORY_PAGE}/results.json: a point lacks {', '.join(missing)}")
    out.append(MemoryPoint(q["row"], int(q["width"]), int(q["state_bytes"]), q["mean"],
                           len(q["seeds"]), q["status"]))
  return out


def length_cells(root: str = "results/lm_length") -> dict:
  """The length study's cells (results/lm_length/results.json, studies.length.page):
  {(row, length): {"test", "gap", "lo", "hi", "verdict", "train_tokens_per_s",
  "state_bytes", "decode_us_per_token"}}; {} where the page has no JSON yet."""
  from studies.length import page
  return page.cells(page.load(root))
