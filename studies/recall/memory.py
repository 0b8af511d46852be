"""Recall at equal memory (issue 102): MQAR at 512 tokens with 64 key-value pairs, each
run placed by its decode-state bytes per sequence, every row trained to its best under
protocol version 2 (the `memory_cpu` preset of studies/recall/presets.py; its page is
results/mqar_memory/, written by studies.recall.memory_page; its costed plan
studies.recall.memory_budget's).

A row (`rows` of the preset) is a name that studies.recall.mqar trains like a variant:
its Run's `variant` is the row, its config the row's (`apply_row`: the variant, a
2-layer hybrid pattern, options, local's window matched to another row's state), so
mqar's runner, child processes and committed ledger serve it unchanged. What differs
from the Zoology grid's plan is the procedure (`row_plan`):
  lr      seed 0 at every rate of the 4-rate grid at the row's width, then one rate
          past an end while the best figure or the chosen rate is that end, up to
          `lr_extend` a side (protocol.RateGrid, rule 11); a row within 2x chance at
          every rate did not train: no extension, no reporting seeds
  seeds   the reporting seeds (1, 2, 3) at the chosen rate, each scored on the test
          stream; a row whose seeds spread past the bound (10 points) gets seeds up to
          protocol.MAX_SEEDS (8), after which it reads "unstable" (rule 10)
A `rate_of` row has no rate stage: it retrains that row's model at its chosen rate
(`softmax_int8`: softmax, then decoded through an int8 KV cache: `decode_accuracy`).

x of a point: `state_bytes`, the model-level count of results/kv_cache's whole stacks
(`models.count.decode_state_bytes`: every layer's variant state, q/k/v and short
convolution taps, a quantised cache in its own dtype), per sequence at 512 tokens.
"""
from __future__ import annotations

import functools
import os

from data import tasks
from studies.core import protocol, runs
from studies.recall import mqar
from studies.recall.mqar import PRESETS, Run

PRESET = "memory_cpu"
OUT = "results/mqar_memory"
PAGE = "mqar_memory"            # its protocol record's page (3 reporting seeds)


def row_spec(p: dict, name: str) -> dict:
  """The row's entry of settings `p` (`rows`); a plain variant name is a row of its
  own (the variant with the preset's options)."""
  return dict((p.get("rows") or {}).get(name) or {"attention": name})


def latent(name: str) -> bool:
  """Whether variant `name` builds its keys and values from a per-token latent (its
  record's kv_widths: mla)."""
  import attention
  return attention.variant(name).kv_widths is not None


def row_widths(p: dict, name: str, groups=None) -> list[int]:
  """The widths of row `name` in the plan's `order` (of `groups` only, where given)."""
  return sorted({w for g, n, w in p["order"] if n == name
                 and (groups is None or g in groups)})


def panel(p: dict) -> tuple:
  """(tokens, pairs) of the preset's one panel."""
  return tuple(p["panels"][0][:2])


# ---- configs and state bytes ------------------------------------------------------------

def apply_row(c, preset: str, run: Run) -> None:
  """Sets the row `run.variant`'s model on config `c` (mqar.make_config's, in place):
  the variant, its heads and key/value heads (the multi-head panel's rows), a hybrid's
  `layer_attention`, the row's options over the preset's, and
  a `window_of` row's local window (`matched_window`). A name that is no row trains the
  variant of that name."""
  row = row_spec(PRESETS[preset], run.variant)
  c.attention = row["attention"]
  if row.get("heads"):              # the multi-head panel: heads sharing kv heads
    c.model.num_heads = int(row["heads"])
    c.model.num_kv_heads = int(row["kv_heads"]) if row.get("kv_heads") else None
  if row.get("layer_attention"):     # the pattern sets each layer's: no global swap
    c.attention, c.model.attention = "", row["attention"]
    c.model.layer_attention = row["layer_attention"]
  opts = c.model.attention_options.to_dict()
  for k, v in (row.get("options") or {}).items():
    opts[k] = dict(v)
  if row.get("window_of"):
    opts["local"] = dict(opts.get("local", {}),
                         window=matched_window(preset, run.width, row["window_of"]))
  c.model.attention_options = opts


def model_config(preset: str, row: str, width: int, window: int | None = None):
  """The models.ModelConfig a run of `row` at `width` trains (mqar.make_config, the
  trainer's model_dict); window: local's, replacing the row's."""
  from models.config import ModelConfig
  from trainer.config import model_dict
  p = PRESETS[preset]
  c = mqar.make_config(preset, Run(row, width, *panel(p), 1e-3, 1))
  if window is not None:
    c.model.attention_options = dict(c.model.attention_options.to_dict(),
                                     local={"window": int(window)})
  return ModelConfig.from_dict(model_dict(c))


@functools.lru_cache(maxsize=None)       # a pure function of the preset's declared rows
def state_bytes(preset: str, row: str, width: int, window: int | None = None) -> int:
  """Decode-state bytes per sequence (batch 1) of a run of `row` at `width`, at the
  panel's length: models.count.decode_state_bytes of its model (both layers, each by
  its own variant, the layer pieces' taps, the row's cache dtype), the count of
  results/kv_cache's whole stacks."""
  from models.count import decode_state_bytes
  p = PRESETS[preset]
  cfg = model_config(preset, row, width, window)
  return int(decode_state_bytes(cfg, panel(p)[0], batch=1,
                                cache_dtype=row_spec(p, row).get("cache_dtype")))


@functools.lru_cache(maxsize=None)
def matched_window(preset: str, width: int, target: str) -> int:
  """local's window whose model-level state at `width` is closest to row `target`'s
  (ties to the smaller window), within 1..tokens: the count is affine in the window,
  so it is solved from two windows and checked against its neighbours."""
  from models.count import decode_state_bytes
  T = panel(PRESETS[preset])[0]
  at = lambda W: decode_state_bytes(model_config(preset, "local", width, W), T)
  want = state_bytes(preset, target, width)
  a, b = at(1), at(2) - at(1)
  guess = min(T, max(1, round((want - a) / b)))
  near = [W for W in (guess - 1, guess, guess + 1) if 1 <= W <= T]
  return min(near, key=lambda W: (abs(at(W) - want), W))


# ---- the plan ----------------------------------------------------------------------------

def rule(p: dict) -> protocol.RateGrid:
  """Version 2's rate grid of settings `p`: `lrs` (4 rates), `lr_extend` a side, ties
  within MQAR's protocol tie, "did not train" within 2x `chance`."""
  return protocol.RateGrid(tuple(sorted(p["lrs"])), protocol.TIES[tasks.with_role("recall")], True,
                           p.get("chance"), int(p.get("lr_extend", 0)))


def figure(r: dict, p: dict) -> float | None:
  """The reported figure of a finished run `r`: its test accuracy, or, for a row with a
  `cache_dtype`, its test accuracy decoded through that cache."""
  dt = row_spec(p, r["variant"]).get("cache_dtype")
  return r.get(f"test_accuracy_{dt}") if dt else r.get("test_accuracy")


def selection(p: dict, results, row: str, width: int) -> protocol.Validation:
  """{rate: validation accuracy} of `row`'s seed-0 runs at `width` on the rule's
  ladder (the in-training figure: never a test one)."""
  T, P = panel(p)
  ladder = rule(p).ladder
  return protocol.Validation.of({
      r["lr"]: protocol.Scores(r["accuracy"], r.get("test_accuracy")) for r in results
      if r["variant"] == row and r.get("status", "ok") == "ok"
      and r["seed"] in protocol.SELECTION_SEEDS and r["lr"] in ladder
      and (r["width"], r["length"], r["pairs"]) == (width, T, P)})


def chosen(p: dict, results, row: str, width: int) -> float | None:
  """The rate of `row` at `width`: the rule's choice once its sweep is complete (a
  `rate_of` row: that row's), else None."""
  of = row_spec(p, row).get("rate_of")
  if of:
    return chosen(p, results, of, width)
  return rule(p).choose(selection(p, results, row, width))


def trained(p: dict, results, row: str, width: int) -> bool:
  """False where `row`'s complete sweep at `width` stayed within 2x chance at every
  rate (protocol.did_not_train); True otherwise (and while it runs)."""
  of = row_spec(p, row).get("rate_of")
  if of:
    return trained(p, results, of, width)
  v = selection(p, results, row, width)
  return rule(p).next(v) is not None or rule(p).trained(v)


def seed_values(p: dict, results, row: str, width: int, lr: float | None = None) -> dict:
  """{seed: reported figure} of `row`'s reporting runs at `width` and rate `lr`
  (default the chosen one): every seed after the selection seeds up to MAX_SEEDS."""
  lr = chosen(p, results, row, width) if lr is None else lr
  T, P = panel(p)
  return {r["seed"]: figure(r, p) for r in results if r["variant"] == row
          and r["lr"] == lr and (r["width"], r["length"], r["pairs"]) == (width, T, P)
          and r["seed"] not in protocol.SELECTION_SEEDS
          and r["seed"] <= protocol.MAX_SEEDS and figure(r, p) is not None}


def bound() -> float:
  """The spread (max - min) past which a row's seeds are split (10 points)."""
  from studies.recall.stats import ACCURACY
  return protocol.spread_bound(ACCURACY, [1.0])


def reporting_seeds(p: dict, results, row: str, width: int) -> list[int]:
  """The seeds `row` reports at `width`: the preset's (1, 2, 3), and, once those have
  run and spread past `bound`, every seed up to MAX_SEEDS (rule 10)."""
  base = [int(s) for s in p["seeds"]]
  vals = seed_values(p, results, row, width)
  if all(s in vals for s in base) and protocol.is_split([vals[s] for s in base], bound()):
    return list(range(base[0], protocol.MAX_SEEDS + 1))
  return base


RISE = 0.10     # "still rising": the mean gained more than this from the narrower width


def point_mean(p: dict, results, row: str, width: int) -> float | None:
  """The mean reported figure of `row` at `width` over its reporting seeds, once at
  least MIN_SEEDS of them ran (else None)."""
  vals = seed_values(p, results, row, width)
  xs = [vals[s] for s in reporting_seeds(p, results, row, width) if s in vals]
  return sum(xs) / len(xs) if len(xs) >= protocol.MIN_SEEDS else None


def rising(p: dict, results, row: str, width: int) -> bool | None:
  """Whether `row` is still rising below `width` (a width-256 item runs only then): at
  the next narrower width of its plan it trained, its mean is under 99% and more than
  RISE above the width below that one's. None while those points are not measured."""
  below = [w for w in row_widths(p, row) if w < width]
  if len(below) < 2:
    return True
  w1, w0 = below[-1], below[-2]
  if not all(chosen(p, results, row, w) is not None for w in (w0, w1)):
    return None
  if not trained(p, results, row, w1):
    return False
  m1, m0 = point_mean(p, results, row, w1), point_mean(p, results, row, w0)
  if m1 is None or (m0 is None and trained(p, results, row, w0)):
    return None
  return m1 < 0.99 and m1 - (m0 or 0.0) > RISE


def _tokens(stages, letter: str) -> set | None:
  got = {int(s[1:]) for s in stages if str(s).startswith(letter) and str(s)[1:].isdigit()}
  return got or None


def plan_groups(stages) -> set | None:
  """The plan groups named among `stages` ("g1", "g3"; studies.recall.mqar passes its
  stages through to a child), or None: every group."""
  return _tokens(stages, "g")


def plan_widths(stages) -> set | None:
  """The widths named among `stages` ("w64"), or None: every width."""
  return _tokens(stages, "w")


def row_plan(p: dict, row: str, results, stages=("lr", "grid", "seeds"),
             part: str = "") -> list:
  """[(run, stage)] of `row` at each of its widths (of the groups `stages` names), in
  order: the lr stage as far as `results` make it (`rule`), then, once a rate is
  chosen and the row trained, the reporting seeds (the first as stage "grid"). One
  panel: every run is in part "first" (or ""), none in "rest"."""
  if part == "rest":
    return []
  T, P = panel(p)
  results = list(results)
  out = []
  for w in row_widths(p, row, plan_groups(stages)):
    if plan_widths(stages) and w not in plan_widths(stages):
      continue
    if not rising(p, results, row, w):      # a wider point only while still rising
      continue
    if "lr" in stages and not row_spec(p, row).get("rate_of"):
      v = selection(p, results, row, w)
      g = rule(p)
      nxt = g.next(v)
      rates = sorted(set(g.grid) | set(v) | ({nxt} if nxt is not None else set()))
      out += [(Run(row, w, T, P, lr, protocol.SELECTION_SEEDS[0]), "lr") for lr in rates]
    lr = chosen(p, results, row, w)
    if lr is None or not trained(p, results, row, w):
      continue
    seeds = reporting_seeds(p, results, row, w)
    out += [(Run(row, w, T, P, lr, s), "grid" if s == seeds[0] else "seeds")
            for s in seeds if ("grid" if s == seeds[0] else "seeds") in stages]
  return out


# ---- the decode through a quantised cache ------------------------------------------------

def decode_logp(model, y_BT, cache_dtype=None):
  """Log-probabilities (B, T, V) float32 of every position of the int32 sequences
  `y_BT`, each predicted by the model's decode step from its decode state, the true
  previous token fed (teacher-forced), so that each position reads keys and values as
  a cache of `cache_dtype` ("int8", "fp8"; None: the model's float dtype) holds them.
  With the float cache they are the forward pass's (up to rounding)."""
  import jax
  import jax.numpy as jnp
  from models.transformer import shift_right
  B, T = y_BT.shape
  x_BT = shift_right(y_BT, model.cfg.start_id)

  def body(state, t):
    tok = jax.lax.dynamic_slice_in_dim(x_BT, t, 1, axis=1)
    logp, state = model.step_logp(tok, state, t)
    return state, logp[:, 0]
  _, logp_TBV = jax.lax.scan(body, model.init_state(B, T, cache_dtype=cache_dtype),
                             jnp.arange(T))
  return jnp.swapaxes(logp_TBV, 0, 1)


def decode_accuracy(model, task, config, cache_dtype=None) -> float:
  """MQAR's accuracy on the queried values of `task`'s eval batches (the split its
  config names), every position predicted through the decode state (`decode_logp`)."""
  import jax
  import jax.numpy as jnp
  model.eval()

  @jax.jit
  def hits(y_BT, w_BT):
    pred_BT = jnp.argmax(decode_logp(model, y_BT, cache_dtype), -1)
    return jnp.sum((pred_BT == y_BT) & (w_BT > 0)), jnp.sum(w_BT > 0)

  good = total = 0.0
  for batch in task.eval_batches():
    g, n = hits(jnp.asarray(batch["y"]), jnp.asarray(batch["w"]))
    good, total = good + float(g), total + float(n)
  return good / max(total, 1.0)


def decode_workdir(workdir: str, cache_dtype: str, split: str = "test") -> float:
  """`decode_accuracy` of a finished workdir's model on `split` (its config's eval
  batches), through a cache of `cache_dtype`."""
  from data import pipeline
  from trainer.checkpoint import load_model
  config, model, _ = load_model(workdir, eval_split=split)
  return decode_accuracy(model, pipeline.create(config), config, cache_dtype)


def extra_figures(preset: str, run: Run, workdir: str) -> dict:
  """What mqar.run_one adds to a finished run of a row with a `cache_dtype`: its test
  accuracy decoded through that cache (`test_accuracy_<dtype>`); {} for other rows."""
  dt = row_spec(PRESETS[preset], run.variant).get("cache_dtype") if \
      PRESETS[preset].get("rows") else None
  return {f"test_accuracy_{dt}": decode_workdir(workdir, dt)} if dt else {}


# ---- running it --------------------------------------------------------------------------

def fitting(preset: str = PRESET, out: str = OUT) -> dict:
  """{group: {row: [widths]}} of the items the committed plan (out/plan.json) fits in
  the budget, in the plan's order; every item where no plan is committed."""
  from studies.core import pages
  plan = pages.read_json(os.path.join(out, "plan.json"))
  items = ([(i["group"], i["row"], i["width"]) for i in plan["items"] if i["fits"]]
           if plan else PRESETS[preset]["order"])
  got = {}
  for g, n, w in items:
    got.setdefault(g, {}).setdefault(n, []).append(w)
  return got


def rows_of(p: dict, groups) -> list[str]:
  """The rows of `groups`, in the plan's order."""
  return list(dict.fromkeys(n for g, n, _ in p["order"] if g in groups))


def study(preset: str = PRESET, root: str | None = None, *, groups=None, rows=None,
          jobs: int = 1, log=print, ledger=True, subprocess_run: bool = True,
          replan=None) -> None:
  """Trains (or resumes) the plan, group after group in the plan's order: the items the
  committed plan fits in its budget (`fitting`), or every item of `groups`; each
  group's rows through mqar.execute (one child per row, `jobs` at once, every finished
  run in the committed ledger at once); a `rate_of` row's group waits for its source
  row's rate. `replan` (a callable that re-prices and rewrites out/plan.json from the
  ledgers: studies.recall.memory_budget.write, passed in by scripts/mqar.py) runs
  before each group, so CPU that an earlier group freed (a width-256 row no longer
  rising, a row that did not train) buys the dropped items, in order, within the same
  run of the study. No group starts once the ledger's spend has reached the budget or
  the stop file exists (`touch workdirs/STOP`: the runs in flight end first)."""
  p = PRESETS[preset]
  root = root or mqar.root_of(preset)
  os.makedirs(root, exist_ok=True)
  if groups:
    fixed = {g: {n: row_widths(p, n, [g]) for n in rows_of(p, [g])} for g in groups}
  path = mqar.mqar_ledger.path_of(preset, ledger)
  clock = mqar.mqar_ledger.LedgerClock(root, jobs, path) if path else None
  try:
    for g in sorted(groups or {g for g, _, _ in p["order"]}):
      runs.check_stop()
      if not groups and replan is not None:
        replan()
      by_row = (fixed if groups else fitting(preset)).get(g)
      if not by_row:
        continue
      spent = mqar.mqar_ledger.totals(path)["cpu_seconds"] / 60 if path else 0.0
      if spent >= float(p.get("budget", float("inf"))):
        log(f"stopped before group {g}: {spent:.0f} CPU-minutes spent, the budget "
            f"is {p['budget']}")
        break
      same = {}                   # rows with the same fitting widths go together
      for n, ws in by_row.items():
        if not rows or n in rows:
          same.setdefault(tuple(ws), []).append(n)
      for ws, names in same.items():
        log(f"group {g}: {', '.join(names)} at widths {', '.join(map(str, ws))}")
        mqar.execute(preset, names, root, ("lr", "grid", "seeds", f"g{g}")
                     + tuple(f"w{w}" for w in ws), None, subprocess_run, jobs, log,
                     ("",), ledger)
  finally:
    if clock:
      clock.stop()
