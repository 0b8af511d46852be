"""The fixed-state rows of a copy page: what their state holds against what the copy asks
of it, and which effect the page sees (issue 76, item 3: "on copy a decaying state may
trail an undecayed one; the page says which effect it sees and shows the evidence").

Copying n symbols means reading each one n + 1 positions back. A variant whose decode
state does not grow with the context holds either a matrix memory per head (linear,
performer and the gated family: S of (key features × value size), summed or decayed
outer products) or a window of the last w tokens (local). Three things can cost such a
row against softmax here, and the page's own rows and seeds tell them apart:

- **capacity**: a matrix memory holds at most (heads × key features) associations
  without interference, per layer; the copy asks for n;
- **decay**: retention's fixed decays γ_h leave γ_h^(n+1) of a symbol's weight at the
  copy distance (an exact figure, from the operator's schedule); gla's and
  gated_deltanet's decays are learned per token, so the same question is answered by
  their rows against the undecayed rows they extend (gla against linear,
  gated_deltanet against deltanet, retention against linear);
- **the layer**: the gated rows run with their papers' layers (`model.gated_layer`);
  the figures of the bare operators from the page before its re-run stand beside them
  (rates chosen on test there: shown, not judged), and results/gated_ablation tests
  each piece on recall.

Every figure comes from the page's rows and seeds (studies.variants.seeds) and from the
variants' decode-state shapes (attention.init_decode_state, shapes only); the verdicts
are the page's own (Welch + Holm over the page, studies.core.protocol).
"""
from __future__ import annotations

import inspect
import os

import numpy as np

import attention
from data import tasks
from studies.core import pages, protocol
from studies.variants.compare import (METRIC, metric_label, base_lr, fingerprints, lr_grid,
                                      make_config, quality, with_lr)
from studies.variants.seeds import mean_se, seed_figures, seed_verdicts

# (the row, the row it extends by a decay): what a decay costs or buys on the copy
DECAYS = (("retention", "linear", "a fixed decay per head"),
          ("gla", "linear", "a learned decay per token and key feature"),
          ("gated_deltanet", "deltanet", "a learned decay per token"))
# (the row, the row it changes the update of): the delta rule against the sum
RULES = (("deltanet", "linear", "the delta rule in place of the plain sum"),)
DECAYED = {a for a, _, _ in DECAYS}      # the rows whose state decays, fixed or learned


def state_shape(variant: str, config) -> dict | None:
  """What `variant`'s decode state holds per layer in `config`'s model, from its shapes
  (attention.init_decode_state under jax.eval_shape: nothing is allocated):
  {"kind": "matrix", "heads", "features"} for a state S of (heads, key features,
  value size); {"kind": "window", "tokens"} for a cache that keeps a fixed number of
  tokens; None for a state that grows with the context, or no decode state."""
  import jax

  import attention
  m = config.model
  if attention.variant(variant).decode_impl is None:
    return None
  opts = dict(m.attention_options.get(variant, {}) if m.attention_options else {})
  heads = int(m.num_kv_heads or m.num_heads)

  def shapes(n):
    return jax.eval_shape(lambda: attention.init_decode_state(
        variant, batch=1, max_len=n, num_kv_heads=heads,
        head_dim=int(m.d_model) // int(m.num_heads), **opts))

  a, b = shapes(int(m.max_len)), shapes(2 * int(m.max_len))
  if jax.tree.map(lambda x: x.shape, a) != jax.tree.map(lambda x: x.shape, b):
    return None                                    # grows with the context
  if getattr(a, "S", None) is not None:
    return {"kind": "matrix", "heads": int(a.S.shape[1]), "features": int(a.S.shape[2])}
  if getattr(a, "k", None) is not None:
    return {"kind": "window", "tokens": int(a.k.shape[2])}
  return None


def state_bytes(variant: str, config) -> int:
  """Bytes of the model's whole decode state per sequence at its max_len (every layer:
  the attention's state, a layer's convolution histories, position counters), from
  the shapes of TransformerLM.init_state (jax.eval_shape: nothing is allocated)."""
  import jax
  from flax import nnx

  import trainer
  from models import build
  m = build(trainer.validate(config), rngs=nnx.Rngs(0))
  s = jax.eval_shape(lambda: m.init_state(1, int(config.model.max_len)))
  return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(s)))


def fixed_decay(variant: str, config) -> list[float] | None:
  """The fixed decays γ_h per key/value head of `variant` in `config` (the registry's
  `decay`, from the model's kv heads and the options it names: retention's `gamma`,
  else RetNet's schedule), None where the decay is learned or there is none."""
  fn = attention.variant(variant).decay
  if fn is None:
    return None
  m = config.model
  opts = dict((m.attention_options or {}).get(variant, {}))
  names = inspect.signature(fn).parameters
  return [float(x) for x in fn(int(m.num_kv_heads or m.num_heads),
                               **{k: v for k, v in opts.items() if k in names})]


def bare_before(task, preset, out, variant) -> tuple[float | None, dict]:
  """(rate, {seed: figure}) of `variant`'s bare operator on the page before its re-run:
  the runs of out/lr.json and out/seeds.json trained before the protocol (no
  "protocol" field) under the preset's config with `model.gated_layer="bare"`, at the
  rate that has the most seeds; (None, {}) where there are none."""
  base = base_lr(task, preset)
  rates = sorted(set(lr_grid(task, preset)) | {
      e["lr"] for e in pages.read_json(os.path.join(out, "lr.json"), [])
      if e.get("variant") == variant})
  old = [e for f in ("lr.json", "seeds.json")
         for e in pages.read_json(os.path.join(out, f), [])
         if e.get("variant") == variant and e.get("preset") == preset
         and "protocol" not in e]
  best = (None, {})
  for lr in rates:
    got = {}
    for seed in sorted({int(e.get("seed", 0)) for e in old}):
      ov = with_lr({"model": {"gated_layer": "bare"}, **({"seed": seed} if seed else {})},
                   lr, base)
      want = fingerprints(make_config(task, preset, variant, ov))
      hit = [e for e in old if int(e.get("seed", 0)) == seed and e["config"] in want
             and (seed or e.get("lr") == lr)]
      if hit:
        got[seed] = float(hit[-1]["quality"])
    if len(got) > len(best[1]):
      best = (lr, got)
  return best


def _verdict(verdicts: dict, a: str, b: str):
  """The page's verdict of `a` against `b`, whichever way round the page stored it."""
  if (a, b) in verdicts:
    return verdicts[(a, b)]
  if (b, a) in verdicts:
    return verdicts[(b, a)].flipped()
  return None


def lines(task, preset, results, out, overrides=None) -> list[str]:
  """The page's section on its fixed-state rows (a task whose record's Study.sections
  names "state": the copy tasks), [] where fewer than two of them ran."""
  if "state" not in tasks.task(task).study.sections:
    return []
  fmt, hb = METRIC[task][3], METRIC[task][2]
  rows = {r["variant"]: r for r in results if r.get("status") == "ok"
          and quality(r) is not None}
  configs = {v: make_config(task, preset, v, overrides) for v in rows}
  held = {v: s for v in rows if (s := state_shape(v, configs[v])) is not None}
  if len(held) < 2:
    return []
  by = seed_figures(task, preset, results, out, overrides)
  verdicts = seed_verdicts(task, preset, results, out, overrides)   # the seed table's
  n = int(configs[next(iter(held))].copy_len)
  stats = {v: mean_se([q[k] for k in sorted(q)]) for v, q in by.items()}

  def score(v):
    if v in stats and stats[v][2] > 1:
      m, se, k = stats[v]
      return f"{fmt.format(m)} ± {fmt.format(se)} ({k})"
    return f"{fmt.format(quality(rows[v]))} (1)"

  def holds(s):
    if s["kind"] == "window":
      return f"the last {s['tokens']} tokens"
    k = s["heads"] * s["features"]
    return (f"{k} key directions ({s['heads']} heads × {s['features']}): "
            + ("fewer than" if k < n else "as many as" if k == n else "more than")
            + f" the {n} symbols")

  def decay(v):
    if held[v]["kind"] == "window":
      w = held[v]["tokens"]
      return f"0% in one layer (window {w})" if w < n + 1 else "none: 100%"
    g = fixed_decay(v, configs[v])
    if g is not None:
      return ", ".join(f"{x ** (n + 1):.0%} (γ {x:.4g})" for x in g)
    return "learned per token" if v in DECAYED else "none: 100%"

  def layer(v):
    import attention
    from models.config import layer_pieces
    rec = attention.variant(v).layer
    if not rec:
      return "–"
    p = layer_pieces(configs[v].model.gated_layer, rec)
    return ", ".join(p) if p else "bare operator"

  def before(v):
    import attention
    if not attention.variant(v).layer or configs[v].model.gated_layer == "bare":
      return "–"
    lr, got = bare_before(task, preset, out, v)
    if not got:
      return "not on record"
    xs = [got[k] for k in sorted(got)]
    return (f"{fmt.format(float(np.mean(xs)))} (seeds {', '.join(map(str, sorted(got)))}; "
            f"rate {lr:g})")

  ref = "softmax" if "softmax" in rows else None
  head = ["## Fixed-state rows: capacity, decay or layer?", "",
          f"Copying {n} symbols means reading each one {n + 1} positions back. The rows "
          "whose decode state does not grow with the context, beside "
          + (f"`{ref}`'s KV cache" if ref else "no softmax row") + ": what the state holds "
          "per layer (a matrix memory holds at most heads × key features associations "
          "without interference), the weight a fixed decay leaves a symbol at the copy "
          f"distance (γ^{n + 1} per head), the layer its paper builds around the operator "
          "(`model.gated_layer`) and, for the rows run with it, the bare operator's figure "
          "on this page before its re-run (rate chosen on the test figure there: shown, "
          "not judged). Verdicts: the page's own (Welch + Holm over the page, as in *Seed "
          "spread*).", "",
          f"| variant | state per sequence | holds per layer | decay left at distance "
          f"{n + 1} | layer | {metric_label(task, protocol.page_version(out))} | bare operator "
          "before | against softmax |",
          "|---|---|---|---|---|---|---|---|"]
  body = []
  order = ([ref] if ref else []) + sorted(held)
  for v in order:
    s = held.get(v)
    kib = state_bytes(v, configs[v]) / 1024
    x = _verdict(verdicts, v, ref) if ref and v != ref else None
    body.append(f"| `{v}` | {kib:,.1f} KiB | "
                + (holds(s) if s else f"every token ({int(configs[v].model.max_len)})")
                + f" | {decay(v) if s else '–'} | {layer(v)} | {score(v)} | "
                f"{before(v) if s else '–'} | "
                + (x.text(fmt) if x else "—" if v == ref else "no verdict (seeds)") + " |")
  return head + body + [""] + reading(held, verdicts, stats, n, fmt, configs) + [""]


def reading(held, verdicts, stats, n, fmt, configs) -> list[str]:
  """Sentences written by rules from the section's verdicts: what a decay, the delta
  rule and the state's size do here, each citing its pair."""
  out = []

  def cite(a, b):
    x = _verdict(verdicts, a, b)
    return None if x is None or x.word == "few" else x

  for a, b, what in DECAYS + RULES:
    x = cite(a, b)
    if a not in held or b not in held or x is None:
      continue
    said = {"worse": "trails", "better": "beats", "equal": "scores what",
            "unresolved": "is not told apart from"}[x.word]
    extra = ""
    g = fixed_decay(a, configs[a])
    if g is not None:
      extra = (f"; its decays leave " + " and ".join(f"{y ** (n + 1):.0%}" for y in g)
               + f" of a symbol's weight {n + 1} positions back")
    out.append(f"- `{a}` ({what}) {said} `{b}`: {x.text(fmt)}{extra}.")
  mats = {v: s for v, s in held.items() if s["kind"] == "matrix"}
  if mats:
    small = sorted(v for v, s in mats.items() if s["heads"] * s["features"] <= n)
    k = sorted({mats[v]["heads"] * mats[v]["features"] for v in small})
    if small:
      most = max(k)
      out.append(f"- Capacity: {', '.join(f'`{v}`' for v in small)} hold "
                 f"{' or '.join(map(str, k))} key directions per layer, "
                 + (f"exactly the {n} symbols a copy must hold: recalling every one "
                    "without interference needs all their keys orthogonal" if most == n
                    else f"fewer than the {n} symbols a copy must hold: their keys cannot "
                    "all be orthogonal, so every recall mixes in others")
                 + "; the undecayed `linear` against softmax (*Seed spread*) shows what "
                 "that costs with no decay.")
  if not out:
    return []
  seen = []
  decayed = [a for a, b, _ in DECAYS if a in held and b in held
             and (x := cite(a, b)) is not None and x.word == "worse"]
  if decayed:
    seen.append("decay (" + ", ".join(f"`{a}` trails the row it extends" for a in decayed)
                + ")")
  full = sorted(v for v, s in mats.items() if s["heads"] * s["features"] <= n
                and v not in DECAYED and (x := cite(v, "softmax")) is not None
                and x.word == "worse")
  if full:
    seen.append("capacity (" + ", ".join(f"`{v}`" for v in full) + ", with no decay, "
                + ("trails" if len(full) == 1 else "trail") + " softmax)")
  out.append("- **Which effect this page sees:** " + (" and ".join(seen) if seen else
             "neither a decay nor the state's size is judged to cost a row here at this "
             "page's seeds") + ". The layer's pieces are tested one by one on recall in "
             "[the gated ablation](../gated_ablation/README.md).")
  return ["Reading (by rules, from the verdicts above and in *Seed spread*):", ""] + out
