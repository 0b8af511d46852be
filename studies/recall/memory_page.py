"""results/mqar_memory/: "Recall at equal memory" (issue 102), the page of the
memory_cpu preset (studies.recall.memory), written from its results.json alone
(`page_data` writes it: every point with its decode-state bytes, `points`): accuracy
against decode-state bytes per sequence (log x, one line per row: Zoology's figure),
the best row in each band of state bytes with its bounded interval against the next
best, the smallest state at which each row reaches 90% and 99%, the costed plan, and a
reading written by rules. A page of its own beside the Zoology grid's
(results/variants_mqar): that page compares at equal width under protocol version 1
and stays as it is; this one follows version 2, on another axis and with other rows.

Each point is labelled by the protocol its figures follow: "v2" (its rate chosen by
version 2's grid, >= 3 reporting seeds, not split), or "v1 ledger" (a Zoology-grid
point the ledger holds: its rate chosen on 3 rates, which version 2 counts as selection
runs that its grid extends, not as a reported row), drawn hollow and never judged.
A point with version 2 seeds carries the 95% interval of its mean (`interval`: the
percentile bootstrap over its seeds, studies.core.verdicts.bootstrap_mean, so inside
0-100%).
"""
from __future__ import annotations

import os

from studies.core import pages, plots, protocol, verdicts
from studies.recall import memory, mqar
from studies.recall.mqar import PRESETS
from studies.recall.stats import ACCURACY

REACH = (0.9, 0.99)                         # the smallest state reaching each
BAND_KIB = (16, 64, 256, 1024, 4096)        # bands of state bytes (KiB): x4 each
LINKS = ("[results/kv_cache](../kv_cache/README.md) (what each bounded cache holds per "
         "token, its decode speed and its error: GQA, MQA, MLA's latent, int8 and fp8, a "
         "sliding window, and the whole hybrid stacks)",
         "[results/mla_train](../mla_train/README.md) (what MLA's smaller cache costs in "
         "quality, trained)")


def multi_head_line(data: dict) -> str:
  """Where GQA, MQA and MLA stand: the plan's multi-head panel (the rows with `heads`),
  planned, partly dropped by the budget, or not in the plan; from plan.json."""
  rows = data.get("rows") or {}
  mh = [n for n, r in rows.items() if r.get("heads")]
  head = ("GQA, MQA and MLA need several heads; the zoology_cpu model has one (one head "
          "of width 64-256, Zoology's attention).")
  items = [i for i in (data.get("plan") or {}).get("items", []) if i["row"] in mh]
  if not items:
    return head + (" No multi-head panel is in this plan; results/kv_cache sizes those "
                   "caches.")
  fit = [i for i in items if i["fits"]]
  g = items[0]["group"]
  what = ", ".join(f"`{i['row']}` ({kib(i['state_bytes'])})" for i in items)
  return (head + f" Group {g}, a multi-head panel at width {items[0]['width']} (heads of "
          f"{items[0]['width'] // rows[items[0]['row']]['heads']}: {what}; `mha_h4` is "
          "the control, MHA at the same heads), each a 4-rate sweep and 3 seeds: "
          + (f"in the plan ({sum(i['cpu_minutes'] for i in fit):,.0f} CPU-minutes)."
             if len(fit) == len(items) else
             f"{len(fit)} of its {len(items)} rows fit the budget, the others dropped "
             "(the plan below)."))


# ---- the data ----------------------------------------------------------------------------

def v1_rates(results: list[dict]) -> dict:
  """{row: {width: rate}} zoology_cpu's version 1 procedure chose for its rows from the
  same runs (3 rates, a 1-point tie): the rates of the "v1 ledger" points."""
  from studies.recall import plan
  z = PRESETS["zoology_cpu"]
  out = {}
  for n in z["variants"]:
    for w, *_ in plan.lr_cells(z):
      lr = plan._choose_lr(z, [r for r in results if r.get("stage") == "lr"
                               or r["seed"] == 0], n, (w, 512, 64))
      if lr is not None:
        out.setdefault(n, {})[w] = lr
  return out


# The status of a width-256 point that the plan does not run because its row is not
# still rising at the narrower widths (`memory.rising` is False): settled, not awaited.
NOT_RISING = "not rising"
# The statuses no further run changes (the page's "awaiting runs" are the others).
SETTLED = ("v2", "did not train", "unstable", NOT_RISING)


def point(p: dict, results: list[dict], row: str, width: int, x: int, v1: dict) -> dict:
  """One (row, width) of the plan: its x (`memory.state_bytes`), its status under
  version 2 and, where version 2 has no figure yet, the v1 ledger's; NOT_RISING for a
  wider point the plan leaves out because its row stopped rising below it."""
  lr = memory.chosen(p, results, row, width)
  out = {"row": row, "width": width, "state_bytes": int(x), "rate": lr}
  if lr is not None and not memory.trained(p, results, row, width):
    best = max(dict(memory.selection(p, results, row, width)).values())
    return dict(out, status="did not train", protocol=2, seeds={}, mean=None,
                best_validation=best)
  if lr is not None:
    vals = memory.seed_values(p, results, row, width)
    want = memory.reporting_seeds(p, results, row, width)
    seeds = {s: vals[s] for s in want if s in vals}
    xs = list(seeds.values())
    split = protocol.is_split(xs, memory.bound()) if len(xs) >= 3 else False
    status = ("awaits seeds" if len(xs) < protocol.MIN_SEEDS else
              "unstable" if split and len(xs) >= protocol.MAX_SEEDS else
              "more seeds" if split else "v2")
    if seeds:
      return dict(out, status=status, protocol=2, seeds=seeds, mean=sum(xs) / len(xs),
                  interval=list(verdicts.bootstrap_mean(xs)))
  old = (v1.get(row) or {}).get(width)
  xs = {r["seed"]: r["test_accuracy"] for r in results if r["variant"] == row
        and r["width"] == width and r["lr"] == old and r["length"] == 512
        and r["seed"] not in protocol.SELECTION_SEEDS and r.get("test_accuracy") is not None}
  if xs:
    return dict(out, status="v1 ledger", protocol=1, rate=None, v1_rate=old, seeds=xs,
                mean=sum(xs.values()) / len(xs))
  if memory.rising(p, results, row, width) is False:     # a wider point that never runs
    return dict(out, status=NOT_RISING, protocol=None, seeds={}, mean=None)
  return dict(out, status="not run", protocol=None, seeds={}, mean=None)


def page_data(preset: str = memory.PRESET, root: str | None = None) -> dict:
  """What the page is written from (results.json): the settings, the protocol record,
  the finished runs (this preset's ledger and those it reuses), every point with its x,
  the CPU this preset's ledger spent, and the committed plan (out/plan.json)."""
  p = PRESETS[preset]
  results = mqar.collect(preset, root or mqar.root_of(preset))
  v1 = v1_rates(results)
  pts = [point(p, results, n, w, memory.state_bytes(preset, n, w), v1)
         for _, n, w in p["order"]]
  ledger = mqar.mqar_ledger.path_of(preset)
  return {"preset": preset, "settings": {k: v for k, v in p.items() if k != "rows"},
          "rows": p["rows"], "protocol": protocol.record(memory.PAGE, p["protocol"]),
          "points": pts, "results": sorted(results, key=lambda r: (
              r["variant"], r["width"], r["lr"], r["seed"])),
          "softmax_step": softmax_step(p, results),
          **mqar.mqar_ledger.totals(ledger), "ledger": os.path.relpath(ledger),
          "plan": pages.read_json(os.path.join(out_of(preset), "plan.json"))}


def out_of(preset: str) -> str:
  return mqar.out_of(preset)


def softmax_step(p: dict, results: list[dict]) -> dict:
  """{width: the first evaluated step at which every reporting seed of softmax at its
  chosen rate (version 2's, else the v1 ledger's) reached 99% on validation, or None}."""
  out = {}
  v1 = v1_rates(results)
  for w in memory.row_widths(p, "softmax"):
    lr = memory.chosen(p, results, "softmax", w) or (v1.get("softmax") or {}).get(w)
    curves = [dict(map(tuple, r["curve"])) for r in results if r["variant"] == "softmax"
              and r["width"] == w and r["lr"] == lr and r["length"] == 512
              and r["seed"] not in protocol.SELECTION_SEEDS and r.get("curve")]
    steps = sorted(set.intersection(*[set(c) for c in curves])) if curves else []
    out[w] = next((s for s in steps if all(c[s] >= 0.99 for c in curves)), None)
  return out


# ---- the figures the page states ---------------------------------------------------------

def judged(pts: list[dict]) -> list[dict]:
  """The points version 2 judges: status "v2"."""
  return [q for q in pts if q["status"] == "v2"]


def bands(pts: list[dict]) -> list[dict]:
  """Per band of state bytes (BAND_KIB) with a judged point: the best row's point (the
  highest mean), the next best, and the exploratory comparison of the two
  (protocol.exploratory: Welch's p unadjusted, the bootstrap interval in points)."""
  out = []
  for lo, hi in zip(BAND_KIB, BAND_KIB[1:]):
    inside = sorted((q for q in judged(pts) if lo * 1024 <= q["state_bytes"] < hi * 1024),
                    key=lambda q: -q["mean"])
    if not inside:
      continue
    best = inside[0]
    nxt = next((q for q in inside[1:] if q["row"] != best["row"]), None)
    v = None
    if nxt:
      v = protocol.exploratory({0: (list(best["seeds"].values()),
                                    list(nxt["seeds"].values()))}, ACCURACY)[0]
    out.append({"band_kib": (lo, hi), "best": best, "next": nxt, "verdict": v})
  return out


def smallest(pts: list[dict], row: str, level: float) -> dict | None:
  """The judged point of `row` with the smallest state whose mean reaches `level`."""
  got = sorted((q for q in judged(pts) if q["row"] == row and q["mean"] >= level),
               key=lambda q: q["state_bytes"])
  return got[0] if got else None


def kib(b) -> str:
  return f"{b / 1024:,.1f} KiB"


def command(preset: str, groups=None) -> str:
  return (f"`nice -n 10 python -m scripts.mqar --preset={preset} --jobs=2`"
          + (f" with `--groups={','.join(map(str, groups))}`" if groups else ""))


# ---- the plot ----------------------------------------------------------------------------

def plot(data: dict, path: str) -> None:
  """Accuracy against decode-state bytes (log x): one line per row through its judged
  points (filled, with the mean's bootstrap interval as a bar), the v1 ledger's points
  hollow and dashed, a point whose seeds are still coming (or split, more coming) hollow
  with its bar, a point whose seeds split for good ("unstable") as its mean's bar with
  each seed a small dot, a row that did not train as an x at chance; chance dotted."""
  plt = plots.pyplot()
  fig, ax = plt.subplots(figsize=(8.0, 4.6), dpi=100)
  rows = list(dict.fromkeys(q["row"] for q in data["points"]))
  colors = [plt.get_cmap("tab10")(i % 10) for i in range(len(rows))]
  marks = "os^vDPX*<>p"
  chance = data["settings"].get("chance") or 0.0

  def bars(pts, color, mfc, label, ls="none", marker="o"):
    xs = [q["state_bytes"] / 1024 for q in pts]
    ys = [q["mean"] for q in pts]
    err = [[max(0.0, q["mean"] - (q.get("interval") or [q["mean"]] * 2)[0]) for q in pts],
           [max(0.0, (q.get("interval") or [q["mean"]] * 2)[1] - q["mean"]) for q in pts]]
    ax.errorbar(xs, ys, yerr=err, marker=marker, ms=5, color=color, ls=ls, mfc=mfc,
                lw=1.2, elinewidth=0.9, capsize=2.5, label=label)

  for i, n in enumerate(rows):
    c, m = colors[i], marks[i % len(marks)]
    of = lambda *status: sorted((q for q in data["points"] if q["row"] == n
                                 and q["status"] in status and q["mean"] is not None),
                                key=lambda q: q["state_bytes"])
    if of("v2"):
      bars(of("v2"), c, c, n, ls="-", marker=m)
    old = of("v1 ledger")
    if old:
      ax.plot([q["state_bytes"] / 1024 for q in old], [q["mean"] for q in old],
              marker=m, ms=5, color=c, ls="--", mfc="none", lw=1.2,
              label=f"{n} (v1 ledger)")
    if of("awaits seeds", "more seeds"):
      bars(of("awaits seeds", "more seeds"), c, "none", f"{n} (seeds running)",
           marker=m)
    split = of("unstable")
    if split:
      bars(split, c, "white", f"{n}: seeds split (dots)", marker=m)
      for q in split:
        ys = list(q["seeds"].values())
        ax.scatter([q["state_bytes"] / 1024] * len(ys), ys, s=7, color=c, alpha=0.6)
    dnt = [q for q in data["points"] if q["row"] == n and q["status"] == "did not train"]
    if dnt:
      ax.scatter([q["state_bytes"] / 1024 for q in dnt], [chance] * len(dnt),
                 marker="x", color=c, label=f"{n}: did not train")
  ax.set_xscale("log", base=2)
  ax.axhline(chance, color="0.5", ls=":", lw=1)
  ax.set_xlabel("decode state per sequence at 512 tokens (KiB, both layers)", fontsize=9)
  ax.set_ylabel("accuracy on the queried values (test)", fontsize=9)
  ax.set_ylim(0, 1.04)
  ax.grid(alpha=0.3)
  if not ax.lines:
    ax.text(0.5, 0.5, "not run yet", ha="center", transform=ax.transAxes, color="0.4")
  hs, ls = ax.get_legend_handles_labels()
  order = sorted(range(len(ls)), key=lambda j: rows.index(ls[j].split(" ")[0].rstrip(":")))
  ax.legend([hs[j] for j in order], [ls[j] for j in order], fontsize=6.5, frameon=False,
            loc="center left", bbox_to_anchor=(1.0, 0.5))
  ax.set_title("MQAR, 512 tokens, 64 pairs: recall against decode memory\nfilled: "
               "protocol v2, >= 3 seeds, bar: the mean's 95% bootstrap interval\n"
               "hollow, dashed: the v1 ledger's, not judged", fontsize=8.5)
  fig.tight_layout()
  plots.save(fig, path)


# ---- the page ----------------------------------------------------------------------------

def write_page(data: dict, out: str, run: dict) -> None:
  """out/results.json (data + the run record), out/memory.png and out/README.md."""
  os.makedirs(out, exist_ok=True)
  pages.write_json(os.path.join(out, "results.json"), dict(data, run=run))
  plot(data, os.path.join(out, "memory.png"))
  pages.write_text(os.path.join(out, "README.md"), page_lines(data, run))


def page_lines(data: dict, run: dict) -> list[str]:
  pts, preset = data["points"], data["preset"]
  n_v2 = len(judged(pts))
  L = ["# Recall at equal memory: MQAR accuracy against decode-state bytes", "",
       protocol.new_line(data["protocol"]), "", pages.header(run), ""]
  if n_v2 < len(pts):
    L += [f"**Partway: {n_v2} of the plan's {len(pts)} points are judged under version "
          "2.** The others show the plan, or the point the Zoology grid's ledger already "
          "holds, labelled \"v1 ledger\" (its rate chosen on 3 rates: version 2 counts "
          "those runs as selection runs that its 4-rate grid extends, not as reported "
          "figures) and drawn hollow; no verdict is drawn from them. "
          f"Run or resume: {command(preset)}.", ""]
  L += ["![accuracy against decode-state bytes](memory.png)", "",
        "Each point is one (row, width) of MQAR at 512 tokens with 64 key-value pairs "
        "(the Zoology page's long panel: 2 layers, one head, vocabulary 256, 1500 steps "
        "of 8 sequences over a mixture of shorter shapes), placed at its **decode state "
        "per sequence**: `models.count.decode_state_bytes` of the run's model, both "
        "layers, each by its own variant (a KV cache grows with the 512 tokens, a fixed "
        "state does not), the q/k/v and short convolutions' taps included, a quantised "
        "cache in its own bytes: the count of results/kv_cache's whole stacks "
        "(`studies.recall.memory.state_bytes`).", ""]
  bs = bands(pts)                # a bootstrap per band: computed once
  L += reading_lines(data, bs)
  L += point_lines(data)
  L += band_lines(bs)
  L += reach_lines(pts)
  L += ["## The bounded caches a user can choose instead", ""] + [
      f"- {x}" for x in LINKS] + [f"- {multi_head_line(data)}", ""]
  L += plan_lines(data)
  L += row_lines(data)
  L += ["Rewrite this page from results.json: `python -m scripts.mqar "
        f"--preset={preset} --page_only`; from the ledgers: `--collect`; re-price the "
        "plan from the ledger: `--replan_costs`."]
  return L


def reading_lines(data: dict, bs: list[dict]) -> list[str]:
  """Sentences written by rules from the points: softmax at its own points, the best
  row per band (`bs`: `bands`), the rows that did not train, what awaits runs."""
  pts = data["points"]
  L = []
  for q in (q for q in pts if q["row"] == "softmax"):
    step = (data.get("softmax_step") or {}).get(str(q["width"]),
                                                (data.get("softmax_step") or {}).get(
                                                    q["width"]))
    if q["mean"] is not None:
      L.append(f"softmax at width {q['width']} ({kib(q['state_bytes'])}): "
               f"{q['mean']:.1%} over {len(q['seeds'])} seed"
               f"{'s' if len(q['seeds']) != 1 else ''} ({q['status']})"
               + (f"; every seed at or over 99% on validation by step {step}" if step
                  else "; not every seed at 99% by the last step")
               + ("" if q["mean"] >= 0.99 else ": under 99%, a fault of the setup to "
                  "investigate before any verdict"))
  for b in bs:
    best, nxt, v = b["best"], b["next"], b["verdict"]
    L.append(f"{b['band_kib'][0]:,}-{b['band_kib'][1]:,} KiB: best `{best['row']}` "
             f"(width {best['width']}, {best['mean']:.1%})"
             + (f", against `{nxt['row']}` ({nxt['mean']:.1%}): {v.text('{:.1%}')}"
                if nxt else ", the only judged row there"))
  dnt = [f"`{q['row']}` at width {q['width']}" for q in pts if q["status"] == "did not train"]
  if dnt:
    L.append("did not train (within 2x chance at every rate of a complete grid; not "
             "\"worse\"): " + ", ".join(dnt))
  for q in (q for q in pts if q["status"] == "unstable"):
    xs = list(q["seeds"].values())
    L.append(f"unstable, so not judged: `{q['row']}` at width {q['width']} "
             f"({kib(q['state_bytes'])}): its {len(xs)} seeds split past "
             f"{memory.bound() * 100:.0f} points ({min(xs):.1%} to {max(xs):.1%}; mean "
             f"{q['mean']:.1%}, interval [{q['interval'][0]:.1%}, {q['interval'][1]:.1%}])"
             " at the rate its seed 0 chose: whether it recalls depends on the seed")
  flat = [f"`{q['row']}` w{q['width']}" for q in pts if q["status"] == NOT_RISING]
  if flat:
    L.append("not run, by the plan's rule (a wider point only while the row still rises "
             f"by more than {memory.RISE * 100:.0f} points under 99% at the narrower widths, "
             "`memory.rising`): " + ", ".join(flat))
  waits = [f"`{q['row']}` w{q['width']}" for q in pts if q["status"] not in SETTLED]
  if waits:
    L.append(f"awaiting runs ({len(waits)} points, so no verdict yet): " + ", ".join(waits))
  return ["## Reading", "", "Written by rules from the tables below "
          "(`studies.recall.memory_page.reading_lines`).", ""] + [f"- {x}" for x in L] + [""]


def point_lines(data: dict) -> list[str]:
  """Every point of the plan: its x, rate, seeds, mean and status."""
  rows = []
  dropped = {(i["row"], i["width"]): i["group"] for i in (data.get("plan") or {}).get(
      "items", []) if not i["fits"]}
  for q in data["points"]:
    rate = (f"{q['rate']:g}" if q.get("rate") is not None else
            f"v1: {q['v1_rate']:g}" if q.get("v1_rate") is not None else "-")
    vals = ", ".join(f"{x:.1%}" for x in q["seeds"].values())
    mean = f"{q['mean']:.1%}" if q["mean"] is not None else "-"
    iv = q.get("interval")
    iv = f"[{iv[0]:.1%}, {iv[1]:.1%}]" if iv else "-"
    status = ("not run: not still rising at the narrower widths (`memory.rising`)"
              if q["status"] == NOT_RISING else q["status"]) if q["status"] != "not run" else \
        f"not run: {command(data['preset'])}" if (q["row"], q["width"]) not in dropped \
        else f"dropped by the budget: {command(data['preset'], [dropped[(q['row'], q['width'])]])}"
    rows.append([f"`{q['row']}`", q["width"], kib(q["state_bytes"]), rate,
                 len(q["seeds"]), mean, iv, vals or "-", status])
  return ["## Every point", "",
          "Rate: version 2's choice (seed 0, validation), or the v1 ledger's where version "
          "2 has none yet; seeds: the reporting seeds' test accuracy (for `softmax_int8`, "
          "decoded through its int8 cache); interval: the mean's 95% percentile bootstrap "
          "over the version 2 seeds (inside 0-100%).", ""] + pages.table(
      ["row", "width", "decode state", "rate", "seeds", "mean", "interval", "each seed",
       "status"],
      rows) + [""]


def band_lines(bs: list[dict]) -> list[str]:
  rows = [[f"{b['band_kib'][0]:,}-{b['band_kib'][1]:,} KiB",
           f"`{b['best']['row']}` w{b['best']['width']} ({b['best']['mean']:.1%})",
           f"`{b['next']['row']}` w{b['next']['width']} ({b['next']['mean']:.1%})"
           if b["next"] else "-", b["verdict"].text("{:.1%}") if b["verdict"] else "-"]
          for b in bs]
  L = ["## The best row in each band of state bytes", "",
       "Among the judged points (version 2) in each band (x4 in bytes); against the "
       "next best row there: the difference in points with its 95% bootstrap interval "
       "over seeds (inside 0-100%) and Welch's p, unadjusted and exploratory (rule 6: "
       "pairs between rows are outside the family).", ""]
  return L + (pages.table(["band", "best", "next best", "best - next"], rows) if rows
              else ["No band has a judged point yet."]) + [""]


def reach_lines(pts: list[dict]) -> list[str]:
  rows = []
  for n in dict.fromkeys(q["row"] for q in pts):
    cells = []
    for level in REACH:
      q = smallest(pts, n, level)
      cells.append(f"{kib(q['state_bytes'])} (w{q['width']})" if q else
                   "not reached" if any(x["row"] == n and x["status"] == "v2" for x in pts)
                   else "awaits runs")
    rows.append([f"`{n}`"] + cells)
  return ["## The smallest state reaching 90% and 99%", "",
          "Per row, over its judged points.", ""] + pages.table(
      ["row"] + [f"{x:.0%}" for x in REACH], rows) + [""]


def plan_lines(data: dict) -> list[str]:
  """The costed plan (plan.json) and the spend so far."""
  plan = data.get("plan")
  spent = data.get("cpu_seconds", 0.0) / 60
  L = ["## The plan and its budget", "",
       f"Spent by this preset's runs: {spent:.1f} CPU-minutes (its ledger "
       f"`{data.get('ledger')}`); the reused Zoology runs were paid by that page."]
  if not plan:
    return L + ["", "No plan.json committed yet: `python -m scripts.mqar "
                f"--preset={data['preset']} --replan_costs`.", ""]
  L[-1] += (f" Plan ({plan['date']}, `{plan['command']}`): "
            f"{plan['planned_cpu_minutes']:,.0f} of {plan['budget_cpu_minutes']:,.0f} "
            f"CPU-minutes bought, in the plan's order (`studies/recall/presets.py`: "
            f"issue 102 item 1's, with width 256, conditional and the dearest group, "
            f"moved after the hybrids at width 64 so that both hybrids reach the plot); "
            + (f"dropped where the running total would pass the budget, a later item "
               f"that still fits keeping its place ({plan['dropped_cpu_minutes']:,.0f} "
               f"CPU-minutes more): {', '.join(plan['dropped'])}." if plan["dropped"] else
               "nothing dropped.")
            + " The runner re-prices the plan from the ledger before each group (as "
            "`--replan_costs` does): an item that does not run (a width-256 row no longer "
            "rising, a row that did not train) frees its CPU for the dropped items, in "
            "order; the runner runs the items that fit (`--groups` runs a group whole).")
  if plan.get("probes_note"):
    L[-1] += f" Probes: {plan['probes_note']}."
  rows = [[i["group"], f"`{i['row']}`", i["width"], kib(i["state_bytes"]), i["runs"],
           f"{i['cpu_s_per_run']:,.0f}", f"{i['cpu_minutes']:,.1f}",
           f"{i['total_cpu_minutes']:,.0f}" if i["fits"] else "dropped",
           i["priced_by"], i["why"]] for i in plan["items"]]
  return L + [""] + pages.table(
      ["group", "row", "width", "state", "runs", "CPU-s a run", "CPU-min", "running total",
       "priced by", "what"], rows) + [""]


def row_lines(data: dict) -> list[str]:
  """What each row trains, and the protocol it follows."""
  s, rows = data["settings"], data["rows"]
  words = {"softmax_int8": "softmax's model retrained at softmax's rate, scored by "
           "decoding the test stream through an int8 KV cache (1 byte per element and "
           "a float32 scale per position and head)",
           "local": "configs/mqar.py:cpu's window of 16 tokens (the Zoology page's)",
           "local_state": "local attention whose window is chosen per width so that "
           "its whole state matches `gla`'s (`memory.matched_window`)",
           "hybrid_qwen3_next": "Qwen3-Next's pattern at 2 layers: a Gated DeltaNet "
           "layer (fixed state) then full softmax with its output gate",
           "hybrid_gpt_oss": "gpt-oss's pattern at 2 layers: a windowed softmax layer "
           "(window 128, fixed state) then full softmax (sinks left out)"}
  for n, r in rows.items():     # the multi-head panel
    if r.get("heads"):
      kv = r.get("kv_heads") or r["heads"]
      words[n] = (f"`{r['attention']}` with {r['heads']} heads sharing {kv} key/value "
                  f"head{'s' * (kv != 1)}" + (" (one latent a token per group)"
                                              if memory.latent(r["attention"]) else ""))
  L = ["## The rows and the procedure", "",
       f"Protocol version {s['protocol']}, declared before any run of this preset "
       f"(`studies/recall/presets.py: memory_cpu`): each rate of "
       f"{', '.join(f'{x:g}' for x in s['lrs'])} at seed 0, chosen on validation, one "
       f"rate past an end while the best is there (up to {s['lr_extend']} a side); a row "
       f"within 2x chance ({s['chance']:.2%}) at every rate did not train (no "
       f"extension, no seeds); reporting seeds {', '.join(map(str, s['seeds']))} on the "
       f"test stream, up to {protocol.MAX_SEEDS} where they spread past 10 points, "
       "then \"unstable\"; a width-256 point only where the row is still rising "
       "(`memory.rising`).", ""]
  L += [f"- `{n}`: " + words.get(n, f"`{r['attention']}`"
                                 + (f" ({r['layer_attention']})" if r.get("layer_attention")
                                    else "")) for n, r in rows.items()]
  return L + ["", LEDGER_WORDS, ""]


# How the Zoology grid's committed runs count here (studies/PROTOCOL.md: a run trained
# under version 1 counts under version 2, which says what more it needs)
LEDGER_WORDS = (
    "**How the Zoology grid's runs count.** The rows `softmax`, `linear`, `gla`, "
    "`gated_deltanet` and `local` at widths 64 and 128 train exactly the configs of "
    "`zoology_cpu`'s runs (the same fingerprints), so its committed ledger "
    "(`results/variants_mqar/zoology_cpu_runs.json`) is read as theirs and none is "
    "trained again. Their rates were chosen on validation (seed 0), but on 3 rates with "
    "a 1-point tie: under version 2 those seed-0 runs are selection runs that the "
    "4-rate grid extends (9e-3, then past an end), and the choice is made again with "
    "MQAR's tie (0.00037). Their reporting seeds (test stream) count where version 2 "
    "chooses the same rate; until then the page shows them as \"v1 ledger\" points, "
    "hollow, never judged. The three softmax runs of the grid's first setup (set aside, "
    "another fingerprint) do not count.")
