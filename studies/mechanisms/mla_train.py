"""What MLA's smaller cache costs in quality (results/mla_train/): multi-head latent
attention at two latent widths against multi-head, grouped-query and multi-query
softmax attention, trained on Tiny Shakespeare at its cpu preset.

Rows (`ROWS`) are the decode-cost page's (studies.bench.kv_cache) at this model's sizes
(4 heads of d_h = 32, 4 layers, 128 wide): MHA caches 2 Hq d_h = 256 numbers per
token and layer, GQA(2) 128, MQA 64, MLA (one latent group, the paper's) d_c + d_r:
144 at d_c = 4 d_h (the paper's ratio) and 48 at d_c = d_h, below MQA's. The pairs a
reader compares: MLA 4 d_h against GQA(2) (about equal cache) and MLA d_h against MQA
(a smaller cache still); every row against MHA.

What differs between the rows besides the cache: MLA adds its decoupled RoPE key and
query (d_r = d_h / 2, the paper's) on top of the preset's sinusoidal positions, which
every row has; its parameters differ (the page lists each row's count).

Protocol (studies/PROTOCOL.md, version `VERSION`, 1): each row's rate is chosen
by the variant sweeps' rule (`compare_variants.lr_rule`: 3e-4, 1e-3, 3e-3 and beyond
an end that wins) on the validation loss of seed 0; `protocol.reporting_seeds` (3, the
expensive pages' count) are trained afresh at the chosen rate and reported on the test
split (the last 5% of the training characters, held out); every row is compared with
MHA by Welch's t-test, Holm-corrected over the page's comparisons.

Each run is one `compare_variants.ensure` (its child process, resumable workdir); each
finished run is added to results/mla_train/runs.json at once, so a study cut short
resumes from the committed ledger on any machine (`runs_done`).
"""
from __future__ import annotations

import dataclasses
import math
import os
import statistics

from data import tasks
from studies.variants import compare as cv
from studies.core import pages, plots, protocol, sweep

# The causal LM of the studies (its record's Study.roles) at its cpu preset.
TASK, PRESET = tasks.with_role("causal_lm"), "cpu"
OUT = "results/mla_train"
PAGE = "mla_train"                   # protocol.reporting_seeds: 3 (an expensive page)
# The protocol version its verdicts follow: it ran under version 1, whose family (every
# row against MHA and PAIRS) and tie rule it keeps (studies/PROTOCOL.md)
VERSION = 1
LEDGER = "runs.json"
REFERENCE = "MHA"


@dataclasses.dataclass(frozen=True)
class Row:
  name: str
  variant: str
  kv_heads: int | None               # key/value heads (mla: latent groups); None: Hq
  latent_mult: int | None = None     # mla: d_c = latent_mult * d_h
  positions: str | None = None       # model.positions; None: the preset's (sinusoidal)


ROWS = (
    Row("MHA", "softmax", None),
    Row("GQA(2)", "softmax", 2),
    Row("MQA", "softmax", 1),
    Row("MLA, d_c = 4 d_h", "mla", 1, 4),
    Row("MLA, d_c = d_h", "mla", 1, 1),
    # the control for MLA's decoupled RoPE: MHA with rotary positions on every head
    # (instead of the sinusoidal ones: model.positions is one scheme; MLA keeps the
    # sinusoidal ones and adds its RoPE), so that a gap between MLA and MHA is not
    # credited to the latent when rotary positions made it
    Row("MHA + RoPE", "softmax", None, positions="rope"),
)


def row(name: str) -> Row:
  """The row called `name`; an unknown one lists the valid names."""
  for r in ROWS:
    if r.name == name:
      return r
  raise ValueError(f"unknown row {name!r}; valid: {[r.name for r in ROWS]}")


def head_dim(overrides: dict | None = None) -> int:
  m = cv.make_config(TASK, PRESET, "softmax", overrides).model
  return int(m.d_model) // int(m.num_heads)


def overrides(r: Row, base: dict | None = None) -> dict:
  """The config overrides of row `r`: the protocol's held-out splits, `base` (a
  budget), the key/value heads and mla's latent width."""
  ov = {**protocol.data_overrides(TASK), **(base or {})}
  model = dict(ov.get("model", {}))
  if r.kv_heads is not None:
    model["num_kv_heads"] = r.kv_heads
  if r.latent_mult is not None:
    model["attention_options"] = {r.variant: {"latent_dim": r.latent_mult * head_dim(base)}}
  if r.positions is not None:
    model["positions"] = r.positions
  if model:
    ov["model"] = model
  return ov


def cache_per_token(r: Row, base: dict | None = None) -> int:
  """Bytes of the decode state per cached token and layer (float32), from the
  variant's own formula (`attention.decode_state_bytes` at 2 minus at 1 token)."""
  import attention
  c = cv.make_config(TASK, PRESET, r.variant, overrides(r, base))
  m = c.model
  opts = dict(m.attention_options.get(r.variant, {}))
  dk, dv = attention.variant(r.variant).kv_dims(head_dim(base), opts)
  opts.pop("latent_dim", None)
  at = lambda n: attention.decode_state_bytes(
      r.variant, batch=1, max_len=n, num_kv_heads=r.kv_heads or int(m.num_heads),
      head_dim=dk, v_head_dim=dv, **opts)
  return at(2) - at(1)


def run_dir(root: str, r: Row, lr: float, seed: int) -> str:
  return os.path.join(root, f"{r.name.replace(' ', '').replace(',', '_')}"
                            f"@lr{lr:g}@seed{seed}")


# ---- the ledger ---------------------------------------------------------------------

def runs_done(out: str, base: dict | None = None) -> list[dict]:
  """The ledger's runs (out/runs.json) of the current config of their row (a run of
  another budget or of a changed config is not this page's)."""
  keep = []
  for e in pages.read_json(os.path.join(out, LEDGER), []):
    try:
      r = row(e["row"])
    except ValueError:
      continue
    ov = cv.with_lr(overrides(r, base), e["lr"], None)
    want = sweep.fingerprints(cv.make_config(TASK, PRESET, r.variant,
                                             {**ov, "seed": e["seed"]}))
    if e["config"] in want:
      keep.append(e)
  return keep


def record(out: str, r: Row, lr: float, seed: int, res: dict) -> None:
  """Adds one finished run to out/runs.json (replacing one of the same row, rate, seed
  and config)."""
  entry = {"row": r.name, "variant": r.variant, "lr": lr, "seed": seed,
           "validation": res.get("validation"), "test": cv.quality(res),
           "params": res.get("params"), "config": res["config"],
           "train_seconds": res.get("train_seconds"),
           "cpu_seconds": res.get("cpu_seconds"), "date": res["date"],
           "host": res.get("eval", {}).get("host") or "host not recorded"}
  same = ("row", "lr", "seed", "config")
  pages.update_json(os.path.join(out, LEDGER), lambda done: sorted(
      [e for e in done if any(e.get(k) != entry[k] for k in same)] + [entry],
      key=lambda e: (e["row"], e["seed"], e["lr"])), [])


def selection(r: Row, done: list[dict], base: dict | None = None):
  """(rule, {rate: Scores}) of row `r`'s selection runs in `done`."""
  rule = cv.lr_rule(TASK, PRESET, base)
  sel = {e["lr"]: protocol.Scores(e["validation"], e["test"]) for e in done
         if e["row"] == r.name and e["seed"] in protocol.SELECTION_SEEDS}
  return rule, sel


def chosen(r: Row, done: list[dict], base: dict | None = None) -> float | None:
  """Row `r`'s rate, chosen on validation (None while its sweep is incomplete)."""
  rule, sel = selection(r, done, base)
  return protocol.select(rule, sel)


# ---- training -----------------------------------------------------------------------

def study(rows, root: str, out: str = OUT, base: dict | None = None, *, command: str,
          log=print) -> None:
  """Trains `rows` one after another: each row's rate sweep on seed 0 (validation),
  then its reporting seeds at the chosen rate; every finished run goes to the ledger."""
  run = sweep.started(command, PRESET)
  run["matmul_peak"] = sweep.gauge()
  run["rows"] = [r.name for r in rows]
  pages.update_json(os.path.join(out, "run.json"), lambda rs: rs + [run], [])
  seed0 = protocol.SELECTION_SEEDS[0]
  for r in rows:
    ov = overrides(r, base)
    tried = set()
    while True:                 # the sweep: what the ledger holds is not trained again
      rule, sel = selection(r, runs_done(out, base), base)
      lr = rule.next(protocol.Validation.of(sel))
      if lr is None or lr in tried:
        break
      tried.add(lr)
      res = cv.ensure(TASK, PRESET, r.variant, run_dir(root, r, lr, seed0),
                      {**cv.with_lr(ov, lr, None), "seed": seed0}, run=run, proto=True)
      log(f"{r.name} lr {lr:g}: {res['status']} val {res.get('validation')}")
      if res.get("status") == "ok":
        record(out, r, lr, seed0, res)
    lr = chosen(r, runs_done(out, base), base)
    if lr is None:
      log(f"{r.name}: its rate sweep is incomplete (a failed run); no reporting seeds")
      continue
    have = {e["seed"] for e in runs_done(out, base) if e["row"] == r.name and e["lr"] == lr}
    for s in protocol.reporting_seeds(PAGE):
      if s in have:
        continue
      res = cv.ensure(TASK, PRESET, r.variant, run_dir(root, r, lr, s),
                      {**cv.with_lr(ov, lr, None), "seed": s}, run=run, proto=True)
      log(f"{r.name} seed {s}: {res['status']} test {cv.quality_str(res)}")
      if res.get("status") == "ok":
        record(out, r, lr, s, res)


# ---- the page -------------------------------------------------------------------------

def summary(done: list[dict], base: dict | None = None) -> list[dict]:
  """Per row: its rate, cache bytes, parameters, reporting seeds' test losses (nats)."""
  out = []
  for r in ROWS:
    lr = chosen(r, done, base)
    rep = sorted((e for e in done if e["row"] == r.name and lr is not None
                  and e["lr"] == lr and e["seed"] in protocol.reporting_seeds(PAGE)),
                 key=lambda e: e["seed"])
    out.append(dict(row=r.name, variant=r.variant, lr=lr,
                    cache_bytes=cache_per_token(r, base),
                    params=next((e["params"] for e in done if e["row"] == r.name
                                 and e.get("params")), None),
                    seeds=[e["seed"] for e in rep], test=[e["test"] for e in rep],
                    cpu_seconds=sum(e.get("cpu_seconds") or 0 for e in done
                                    if e["row"] == r.name)))
  return out


# The pairs the page compares besides every row against MHA: MLA at the paper's ratio
# beside GQA(2) and MLA at d_c = d_h beside MQA (about equal caches), and each MLA
# beside MHA + RoPE (the control for its rotary positions).
PAIRS = (("MLA, d_c = 4 d_h", "GQA(2)"), ("MLA, d_c = d_h", "MQA"),
         ("MLA, d_c = 4 d_h", "MHA + RoPE"), ("MLA, d_c = d_h", "MHA + RoPE"))


def compare(rows: list[dict]) -> dict:
  """{(row, against): Verdict} of every row against REFERENCE and of each of PAIRS (test
  loss, lower is better), Holm-corrected over all of them together."""
  test = {r["row"]: r["test"] for r in rows}
  pairs = [(r["row"], REFERENCE) for r in rows if r["row"] != REFERENCE] + list(PAIRS)
  return protocol.verdicts({(a, b): (test[a], test[b]) for a, b in pairs
                            if test.get(a) and test.get(b)}, higher_better=False,
                           metric=LOSS)


# The test loss as the protocol's verdicts read it: unbounded above, so Welch's interval.
LOSS = protocol.metric("eval_loss", False, "{:.3f}")


def bits(x: float) -> float:
  return x / math.log(2)


def plot(rows: list[dict], path: str) -> None:
  """Test loss (bits/char, mean ± sd of the reporting seeds) against cache bytes."""
  import numpy as np
  plt = plots.pyplot()
  fig, ax = plt.subplots(figsize=(5.2, 3.4))
  pts = {}
  for r in rows:
    if not r["test"]:
      continue
    b = np.array([bits(t) for t in r["test"]])
    ax.errorbar(r["cache_bytes"], b.mean(), yerr=b.std(ddof=1) if len(b) > 1 else 0,
                fmt="o" if r["variant"] == "mla" else "s", capsize=3,
                color="tab:red" if r["variant"] == "mla" else "tab:blue")
    pts[r["row"]] = (r["cache_bytes"], b.mean())
  ax.set_xticks(sorted({r["cache_bytes"] for r in rows}))
  ax.tick_params(axis="x", labelsize=8)
  ax.set_xlabel("decode cache per token and layer (bytes, float32)")
  ax.set_ylabel("test loss (bits/char)")
  ax.set_title("Tiny Shakespeare cpu preset: quality against cache", fontsize=9)
  ax.grid(alpha=0.3)
  ax.margins(x=0.12)
  fig.tight_layout()
  plots.label_apart(ax, pts, fontsize=7)
  plots.save(fig, path, dpi=100)


def write_page(out: str = OUT, base: dict | None = None) -> str:
  """results/mla_train/README.md (and its figure, summary.json) from the ledger alone."""
  done = runs_done(out, base)
  rows = summary(done, base)
  ver = compare(rows)
  cache = {r["row"]: r["cache_bytes"] for r in rows}
  invocations = pages.read_json(os.path.join(out, "run.json"), [])
  run = invocations[0] if invocations else {}
  pages.write_json(os.path.join(out, "summary.json"), dict(
      rows=rows, protocol=protocol.record(PAGE, VERSION), runs=invocations,
      verdicts={f"{a} vs {b}": v.text() for (a, b), v in ver.items()}))
  if any(r["test"] for r in rows):
    plot(rows, os.path.join(out, "quality_vs_cache.png"))
  f = lambda xs: (f"{bits(sum(xs) / len(xs)):.3f} ± "
                  f"{bits(statistics.stdev(xs) if len(xs) > 1 else 0.0):.3f} ({len(xs)})") if xs else "not run yet"
  table = pages.table(
      ["row", "cache B/token/layer", "params", "rate (chosen on val)",
       "test bits/char (mean ± sd, seeds)", f"against {REFERENCE}"],
      [[r["row"], r["cache_bytes"], r["params"] or "-",
        "-" if r["lr"] is None else f"{r['lr']:g}", f(r["test"]),
        "reference" if r["row"] == REFERENCE else
        (ver[r["row"], REFERENCE].text("{:.3f}") if (r["row"], REFERENCE) in ver
         else "-")] for r in rows])
  pair_table = pages.table(
      ["row", "against", "cache B/token/layer", "verdict (test loss)"],
      [[a, b, f"{cache[a]} vs {cache[b]}",
        ver[a, b].text("{:.3f}") if (a, b) in ver else "not run yet"] for a, b in PAIRS])
  lines = [
      "# What MLA's smaller cache costs in quality",
      "",
      protocol.new_line(protocol.record(PAGE, VERSION)) + " Verdicts: test loss in nats/char "
      "(Δ = row − MHA; lower is better).",
      "",
      (pages.header(run) + (f" Its runs came from {len(invocations)} invocations "
                            "(run.json lists each: command, machine, matmul gauge)."
                            if len(invocations) > 1 else "")) if run else "Not run yet.",
      "",
      "Multi-head latent attention (`mla`, DeepSeek-V2) caches one latent of width d_c "
      "and a RoPE key of width d_r per token, instead of a key and a value per head. "
      "Trained here on Tiny Shakespeare's cpu preset (4 layers, 4 heads of d_h = 32, "
      "2,000 steps) against multi-head (MHA), grouped-query (GQA, 2 key/value heads) "
      "and multi-query (MQA) softmax attention. The cache sizes are the variants' own "
      "formulas (`attention.decode_state_bytes`), the same as the measured decode-cost "
      "page [results/kv_cache](../kv_cache/README.md).",
      "",
      *table,
      "",
      protocol.power_text(next((r["test"] for r in rows if r["row"] == REFERENCE), []),
                          LOSS, max(1, sum(v.test is not None for v in ver.values())),
                          name=REFERENCE) if any(r["row"] == REFERENCE and len(r["test"]) > 1
                                                 for r in rows) else "",
      "",
      "Each MLA row beside the softmax row whose cache is about its size, and beside "
      "MHA + RoPE, the control for its rotary positions (the same Holm correction, "
      "over all the page's comparisons):",
      "",
      *pair_table,
      "",
      "![test loss against cache bytes](quality_vs_cache.png)",
      "",
      "What differs besides the cache: MLA adds its decoupled RoPE (d_r = d_h / 2) on "
      "top of the sinusoidal positions the softmax rows have, so a gap between MLA and "
      "MHA may be the rotary positions' rather than the latent's: the MHA + RoPE row "
      "(rotary positions on every head, in place of the sinusoidal ones) is the control "
      "for that. Parameter counts differ as listed (MLA's up-projections). Equal-cache "
      "pairs: MLA d_c = 4 d_h (144 numbers) beside GQA(2) (128); MLA d_c = d_h (48) "
      "beside MQA (64).",
      "",
      f"Ledger: [{LEDGER}]({LEDGER}) (every run: row, rate, seed, validation and test "
      "loss, CPU seconds); summary: [summary.json](summary.json). Reproduce: "
      "`python -m scripts.mla_train` (resumes from the ledger), then "
      "`python -m scripts.mla_train --page_only`.",
  ]
  path = os.path.join(out, "README.md")
  pages.write_text(path, "\n".join(lines) + "\n")
  return path

