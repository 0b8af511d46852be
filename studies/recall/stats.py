"""The figures of the MQAR pages, from the sweep's data (results.json: `mqar.page_data`)
alone: each cell's mean accuracy and its seeds at the chosen rates, the verdicts against
softmax (Welch + Holm, studies.core.protocol), and the sweep's time against its target.
The pages' words: studies.recall.page and studies.recall.zoology_page.
"""
from __future__ import annotations

import math

from studies.core import protocol
from studies.recall.mqar import REFERENCE, missing_cells, rate_at, run_of

TARGET_WALL_S = 3600   # issue 40: the whole sweep within 60 minutes on 2 cores


def time_verdict(data: dict) -> str:
  """The sentence that judges the sweep's time against TARGET_WALL_S: by the wall time
  of one invocation where the ledger holds exactly one and the plan is complete (a
  sweep resumed over several invocations has no wall time of the whole, one cut short
  is not the whole), else missed where its CPU-time floor is over the target, else not
  judged; with the machine's matmul gauge where it was read."""
  from studies.core import timing
  wall, jobs = data.get("wall_seconds"), max(1, int(data.get("jobs", 1)))
  gauge = data.get("matmul_peak")
  on = (" on this machine (its matmul gauge as the sweep started: "
        f"{timing.peak_text(gauge)}; one host name has covered "
        "machines about 3x apart in this sweep's speed)" if gauge else " on this machine")
  target = TARGET_WALL_S / 60
  whole = data.get("results") and not missing_cells(data)
  if wall and whole and data.get("invocations") == 1:
    met = "met" if wall <= TARGET_WALL_S else "missed"
    return (f"Target ({target:.0f} minutes of wall time on 2 cores): {met}{on}, one "
            f"uninterrupted invocation with {jobs} run(s) at once took "
            f"{wall / 60:.1f} minutes.")
  if data["cpu_seconds"] / 2 > TARGET_WALL_S:          # 2 cores do it no faster
    return (f"Target ({target:.0f} minutes of wall time on 2 cores): missed{on}, by its "
            "CPU-time floor.")
  return (f"Target ({target:.0f} minutes of wall time on 2 cores): not judged{on}: no "
          "one invocation ran the whole plan.")


def cell_stats(results: list[dict], lrs: dict) -> dict:
  """{(variant, width, tokens, pairs): (mean, standard error or None, seeds)} of the
  final accuracies at each variant's chosen rate (at the run's width: mqar.rate_at);
  the standard error (sample sd / sqrt(n)) needs two seeds or more."""
  acc = {}
  for r in results:
    lr = rate_at(lrs.get(r["variant"]), r["width"])
    if lr is not None and r["lr"] == lr:
      acc.setdefault(run_of(r).cell, {})[r["seed"]] = r["accuracy"]
  out = {}
  for k, by_seed in acc.items():
    xs = list(by_seed.values())
    n = len(xs)
    mean = sum(xs) / n
    se = (math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1) / n) if n > 1 else None)
    out[k] = (mean, se, n)
  return out


# The recall accuracy as the protocol's verdicts read it: a fraction in [0, 1], its
# differences in points (studies.core.protocol.Metric: bounded intervals, the ceiling).
ACCURACY = protocol.metric("accuracy", True, "{:.1%}")


def page_verdicts(data: dict) -> dict:
  """{(variant, (width, tokens, pairs)): protocol.Verdict of variant against softmax}
  for every comparison the page states: each seeded variant against softmax at each
  seed cell, and linear against softmax at every other cell of the grid; Welch's test
  per pair and Holm's correction over all of them (studies.core.protocol.verdicts, the one
  place; a page of version 2: protocol.primary_verdicts, one column per cell, the
  reference's implementations aside, split rows given more seeds); no verdict from
  fewer than MIN_SEEDS seeds of either side. Intervals inside [0, 1] (ACCURACY)."""
  p = data["settings"]
  seeded = list(dict.fromkeys(tuple(c[:3]) for c in p["seed_cells"]))
  grid = [(w, t, P) for t, P in _panels(p) for w in p["widths"]]
  todo = [(n, c) for n in p["seeded"] if n != REFERENCE for c in seeded]
  todo += [("linear", c) for c in grid if ("linear", c) not in todo]
  pairs = {}
  for n, cell in todo:
    a, b = seed_values(data, n, *cell), seed_values(data, REFERENCE, *cell)
    if a and b:
      pairs[(n, cell)] = (a, b)
  if int((data.get("protocol") or {}).get("version", 0)) < 2:
    return protocol.verdicts(pairs, True, metric=ACCURACY)
  cols = {}
  for (n, cell), (a, b) in pairs.items():
    cols.setdefault(cell, {REFERENCE: b})[n] = a
  return protocol.primary_verdicts(cols, ACCURACY, REFERENCE)


def _panels(p) -> list[tuple]:
  """(tokens, pairs) of each panel."""
  return [tuple(x[:2]) for x in p["panels"]]


SOLVED = 0.9     # a cell "solves" MQAR at this accuracy on the queried values


def seed_values(data, variant, w, t, P) -> list[float]:
  """Each seed's final accuracy of a cell at the variant's chosen rate (at width w)."""
  lr = rate_at(data["lrs"].get(variant), w)
  return [r["accuracy"] for r in data["results"] if lr is not None and r["lr"] == lr
          and run_of(r).cell == (variant, w, t, P)]


def recalled(data, variant, w, t, P) -> str:
  """'k of n': the seeds of a cell whose final accuracy reaches SOLVED (recall is
  learnt in a jump, so a cell's seeds are mostly near 100% or near chance, and this
  count reads more directly than their mean)."""
  xs = seed_values(data, variant, w, t, P)
  return f"{sum(x >= SOLVED for x in xs)} of {len(xs)}"


def _pct(m) -> str:
  mean, se, n = m
  return f"{mean:.1%}" + (f" ± {se:.1%} ({n})" if se is not None else "")
