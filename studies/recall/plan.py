"""The plan of the MQAR study (studies.recall.mqar): its runs (`Run`), and which of them
each stage trains: the learning-rate stage at each preset's lr cells (one per width where
the preset tunes a rate per width), the grid at the chosen rates, and the reporting
seeds at the seeded cells; each rate chosen by the sweeps' rule on validation figures
(studies.core.protocol).
"""
from __future__ import annotations

import dataclasses

from studies.core import protocol, sweep


@dataclasses.dataclass(frozen=True)
class Run:
  """One training: variant at (width, tokens, pairs) with a learning rate and a seed."""
  variant: str
  width: int
  length: int
  pairs: int
  lr: float
  seed: int = 0

  @property
  def name(self) -> str:
    """Its workdir's name under the study's root."""
    return (f"{self.variant}/w{self.width}_t{self.length}_p{self.pairs}_lr{self.lr:g}"
            f"_s{self.seed}")

  @property
  def cell(self) -> tuple:
    return (self.variant, self.width, self.length, self.pairs)



MIN_EFFECT = 0.01    # differences below 1 point are "tied", whatever their standard error


def lr_rule(p: dict) -> sweep.LrRule:
  """The lr stage's rule (sweep.LrRule, the one of every sweep) for settings `p`: the
  grid `lrs`, up to `lr_extend` rates past each end, ties within MIN_EFFECT."""
  return sweep.LrRule(tuple(sorted(p["lrs"])), int(p.get("lr_extend", 0)), MIN_EFFECT)


def lr_cells(p: dict) -> list[tuple]:
  """The (width, tokens, pairs) cells of the lr stage of settings `p`: `lr_cells` (one
  per width: a rate per (variant, width)), else the one `lr_cell` (a rate per
  variant)."""
  return [tuple(c) for c in p["lr_cells"]] if p.get("lr_cells") else [tuple(p["lr_cell"])]


def lr_cell_of(p: dict, width: int) -> tuple:
  """The lr cell whose rate a run at `width` uses: that width's (`lr_cells`), else the
  preset's one `lr_cell`."""
  if not p.get("lr_cells"):
    return tuple(p["lr_cell"])
  return next(c for c in lr_cells(p) if c[0] == width)


def rate_at(lr, width: int) -> float | None:
  """A variant's rate at `width` from its entry of `choose_lr`'s answers: one rate
  (every width's), or {width: rate} (int or, from JSON, str keys), or None."""
  if isinstance(lr, dict):
    return lr.get(width, lr.get(str(width)))
  return lr


def _lr_quality(p: dict, results: list[dict], variant: str,
                cell: tuple | None = None) -> protocol.Validation:
  """{rate: final accuracy on the validation stream} of `variant`'s finished lr-stage
  runs on the ladder of `p` (at the lr `cell` (width, tokens, pairs) where given) (the
  in-training evaluation's: protocol.Validation, never a test figure)."""
  ladder = lr_rule(p).ladder
  return protocol.Validation.of({
      r["lr"]: protocol.Scores(r["accuracy"], r.get("test_accuracy")) for r in results
      if r["variant"] == variant and r.get("stage") == "lr" and r.get("status") == "ok"
      and r["lr"] in ladder
      and (cell is None or (r["width"], r["length"], r["pairs"]) == tuple(cell))})


def lr_rates(p: dict, results: list[dict], variant: str,
             cell: tuple | None = None) -> list[float]:
  """The rates of `variant`'s lr stage so far (at the lr `cell`, for a preset with
  `lr_cells`), smallest first: the grid, the rates past it that ran, and the next one
  the sweep needs (`lr_rule`: past an end of the grid while the best rate is that end
  and beats the rate next to it beyond MIN_EFFECT, up to `lr_extend` a side)."""
  return lr_rule(p).rates(_lr_quality(p, results, variant, cell))


def lr_runs(p: dict, names, results: list[dict] = ()) -> list[Run]:
  """The lr stage of settings `p` (a PRESETS entry, or the page's copy of one) for
  `names`, at each lr cell, as far as `results` (the finished runs) make it
  (`lr_rates`)."""
  per = bool(p.get("lr_cells"))
  return [Run(n, w, t, P, lr) for n in names for (w, t, P) in lr_cells(p)
          for lr in lr_rates(p, list(results), n, (w, t, P) if per else None)]


def choose_lr(p: dict, results: list[dict], variant: str):
  """`_choose_lr` of `variant`: one rate for a preset with one `lr_cell`; for one with
  `lr_cells`, {width: rate} once every width's rate is chosen (else None)."""
  if not p.get("lr_cells"):
    return _choose_lr(p, results, variant)
  out = {c[0]: _choose_lr(p, results, variant, c) for c in lr_cells(p)}
  return None if None in out.values() else out


def _choose_lr(p: dict, results: list[dict], variant: str,
               cell: tuple | None = None) -> float | None:
  """The learning rate of `variant`'s best final accuracy in the lr stage of settings
  `p`; rates within MIN_EFFECT (1 point) of the best tie, and a tie goes to the
  smallest rate (one seed's 100.0% against 99.5% is no evidence for the larger rate,
  and the larger one is the likelier to stall in another seed: softmax at width 32, 8
  pairs, rate 3e-3 reached 100% in seed 0 and 25% in seed 1). None while any run of
  its lr stage (`lr_rates`) is missing (`lr_rule`). cell: the lr cell (`lr_cells`)."""
  return lr_rule(p).choose(_lr_quality(p, results, variant, cell))


def grid_seed(p: dict) -> int:
  """The seed of the grid's runs: 0 before the protocol (the lr stage's winning run is
  the grid's at its cell); under it the first reporting seed, so that no reported run
  is one that chose the rate."""
  return int(p["seeds"][0]) if p.get("protocol") else 0


def grid_runs(p: dict, lrs: dict) -> list[Run]:
  """Every (width, panel) of settings `p` for each variant of `lrs` ({variant: rate,
  or {width: rate}}: `rate_at`; a width without a rate is left out)."""
  return [Run(n, w, x[0], x[1], rate_at(lr, w), grid_seed(p)) for n, lr in lrs.items()
          for x in p["panels"] for w in p["widths"] if rate_at(lr, w) is not None]


def seed_cells(p: dict, variant: str) -> list[tuple]:
  """The (width, tokens, pairs) at which `variant` gets other seeds, each once."""
  out = []
  for c in p["seed_cells"]:
    if variant in p["seeded"] and (len(c) == 3 or variant in c[3]) and \
        tuple(c[:3]) not in out:
      out.append(tuple(c[:3]))
  return out


def cell_seeds(p: dict, variant: str, cell: tuple) -> list[int]:
  """The seeds of `variant` at a seed cell: the preset's, and those of every entry
  of the cell that names them."""
  seeds = set()
  for c in p["seed_cells"]:
    if tuple(c[:3]) == tuple(cell) and (len(c) == 3 or variant in c[3]):
      seeds |= set(c[4] if len(c) > 4 else p["seeds"])
  return sorted(seeds)


def seed_runs(p: dict, lrs: dict) -> list[Run]:
  """The other seeds of the seeded variants of `lrs` at their seed cells."""
  return [Run(n, w, t, P, rate_at(lrs[n], w), s) for n in p["seeded"] if n in lrs
          for (w, t, P) in seed_cells(p, n) for s in cell_seeds(p, n, (w, t, P))
          if s != grid_seed(p) and rate_at(lrs[n], w) is not None
          and not (p.get("protocol") and s in protocol.SELECTION_SEEDS)]
