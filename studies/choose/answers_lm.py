"""The decision page's answer for a causal LM at each length of the length study
(results/lm_length, studies.length): the gap to flash with its version-2 interval, the
model's cost from the study's own runs, what differs besides the attention, and the
exact reference's kernels on a GPU from the GPU pages, in a table of their own
(studies.choose.answers lays out the rules of every answer).
"""
from __future__ import annotations

import os

from studies.choose.answer import (LM_PAGE, MAX_CHOICES, Answer, Choice, _lead, _rows_list,
                                   cite, kib)
from studies.core import pages, protocol

def lm_reference() -> str:
  from studies.length import runner
  return runner.REFERENCE


def _specs(preset: str, row: str):
  """The decoder's attention layer specs of the length study's `row` model."""
  from studies.length import presets
  from models.config import ModelConfig
  from trainer.config import model_dict
  p = presets.preset(preset)
  c = presets.make_config(p, row, p.lengths[0], p.grid[0], 0, None)
  return ModelConfig.from_dict(model_dict(c)).layer_specs("decoder_attention")


def layer_pieces(preset: str, row: str, specs=None) -> list[str]:
  """The layer pieces `row`'s layers have (a hybrid: over its layers), in order."""
  return list(dict.fromkeys(x for s in (specs or _specs(preset, row)) for x in s.pieces))


def lm_differs(preset: str, row: str, params: dict) -> str:
  """What differs between the length study's `row` and flash's model besides the
  attention: its parameters where more than 5% away from flash's (params: {row: count},
  from the runs), the layer pieces its layers have (a hybrid: over its layers), a
  position signal of its own; "" where nothing does."""
  import attention
  from studies.variants.seeds import SIZE_TOL
  specs = _specs(preset, row)
  out = []
  ref = lm_reference()
  if params.get(row) and params.get(ref) and abs(params[row] - params[ref]) > SIZE_TOL * params[ref]:
    out.append(f"{(params[row] - params[ref]) / params[ref]:+.0%} parameters")
  pieces = layer_pieces(preset, row, specs)
  if pieces:
    out.append("layer pieces " + ", ".join(pieces))
  if any(attention.variant(s.name).own_positions for s in specs):
    out.append("own position signal")
  return "; ".join(out)


def _lm_params(d) -> dict:
  out = {}
  for r, by in d.get("cells", {}).items():
    for c in by.values():
      if (c.get("cost") or {}).get("params"):
        out[r] = c["cost"]["params"]
  return out


def lm_answer(d: dict | None, L: int, root: str = "results") -> Answer:
  """The answer for a causal LM at L tokens (bytes) from the length study's JSON `d`
  (studies.length.page.load; None: not written). Rules, over the rows with a verdict
  at L against flash (candidates: flash and the rows judged better, unresolved or
  equal whose 95% interval is not wholly on the worse side):
    1. for the lowest loss: the better-judged row with the lowest test bits/byte, else
       flash (nothing judged better);
    2. when training throughput binds: the candidate with the most train tokens/s, if
       faster than the choices before it;
    3. when decode memory binds: the candidate with the smallest decode state, if
       smaller than the choices before it.
  Costs: medians of the reporting seeds' runs at L (CPU); change: `lm_change`."""
  path = os.path.join(root, LM_PAGE, "results.json")
  title = f"A causal LM at {L:,} tokens"
  ref = lm_reference()
  Ls = str(L)
  cmd = "`python -m scripts.lm_length --preset=cpu --jobs=2`"
  have_ref = bool(d) and "test" in (d.get("cells", {}).get(ref, {}).get(Ls) or {})
  if not have_ref:
    rows = tuple(r for r in (d or {}).get("trained_rows", ()) if r != ref)
    runs = (d or {}).get("runs", 0)
    lead = (f"Not answered yet: the length study (results/lm_length) has no reference "
            f"run at {L:,} bytes ({runs} run{'s' * (runs != 1)} in its ledger). No other "
            "page measures a causal LM at this length, so this page gives no choice here "
            f"(a gap at 64 tokens need not hold at {L:,}). Run or resume: {cmd}.")
    return Answer(f"lm_{L}", title, LM_PAGE, "CPU (the length study's runs)", lead,
                  pending=rows, change=f"the length study's runs at {L:,} ({cmd}).",
                  gpu=tuple(gpu_model_lines(root, L) + gpu_kernel_lines(root, L)))
  host = (d.get("run") or {}).get("host", "")
  device = f"CPU ({host}, one core a run: the length study's runs)" if host else "CPU"
  C, V = d["cells"], d["verdicts"]["by"]
  rows = [r for r in d["trained_rows"] if r != ref]
  verdict = {r: V[r][Ls] for r in rows if Ls in V.get(r, {})}
  judged = {r: v for r, v in verdict.items()
            if v["word"] in ("better", "worse", "unresolved", "equal")}
  worse = tuple(r for r, v in judged.items() if v["word"] == "worse")
  wholly = tuple(r for r, v in judged.items() if v["word"] == "unresolved"
                 and v.get("lo") is not None and v["lo"] > 0)
  pending = tuple(r for r in rows if r not in judged)
  cand = [ref] + [r for r in judged if r not in worse and r not in wholly]
  cost = lambda r, k: (C[r][Ls].get("cost") or {}).get(k)
  cites = []

  def fig(r, k, fmt):
    c = cite(d, path, ("cells", r, Ls, "cost", k), fmt)
    cites.append(c)
    return c.text

  def gap(r):
    if r == ref:
      c = cite(d, path, ("cells", r, Ls, "test"), "{:.3f} bits/byte")
      cites.append(c)
      k = len(C[r][Ls]["seeds"])
      return f"{c.text}, the exact reference ({k} seed{'s' * (k != 1)})"
    v = judged[r]
    parts = [cite(d, path, ("verdicts", "by", r, Ls, k),
                  lambda x: protocol.diff_text(x, "{:.3f}")) for k in ("diff", "lo", "hi")]
    cites.extend(parts)
    return (f"Δ {parts[0].text} [{parts[1].text}, {parts[2].text}] bits/byte, "
            f"{v['word']}")

  params = _lm_params(d)
  chosen = []
  better = [r for r in cand if r != ref and judged[r]["word"] == "better"]
  if better:
    b = min(better, key=lambda r: C[r][Ls]["test"])
    chosen.append((b, "for the lowest loss"))
  else:
    chosen.append((ref, "for the lowest loss (no row is judged better here)"))
  # training speed: the interleaved cost run's where it timed every candidate at L (one
  # process, rounds interleaved: a loaded host's phases fall on every row alike), else
  # the runs' medians (each run timed alone, so the host's load can differ between rows)
  cr = d.get("cost_run") or {}
  at = {(c["row"], int(c["length"])): i for i, c in enumerate(cr.get("cells", []))}
  from_run = bool(cand) and all((r, L) in at for r in cand)
  if from_run:
    tps = {r: cr["cells"][at[(r, L)]]["tokens_per_step"]
           / cr["cells"][at[(r, L)]]["wall_s_per_step"] for r in cand}
  else:
    tps = {r: cost(r, "train_tokens_per_s") for r in cand if cost(r, "train_tokens_per_s")}

  def speed(r):
    if from_run:
      i = at[(r, L)]
      n = cr["cells"][i]["tokens_per_step"]
      c = cite(d, path, ("cost_run", "cells", i, "wall_s_per_step"),
               lambda w: f"{n / w:,.0f} tokens/s (cost run)")
      cites.append(c)
      return c.text
    return fig(r, "train_tokens_per_s", "{:,.0f} tokens/s (runs' median)")
  def faster(f, r) -> bool:
    """f trains faster than r: by the medians; in the cost run, also every round of f
    faster than every round of r (its slowest round's CPU-s a step under r's fastest),
    so that the rounds' spread cannot reverse it."""
    if r not in tps:
      return True
    if not from_run:
      return tps[f] > tps[r]
    a, b = cr["cells"][at[(f, L)]]["spread"], cr["cells"][at[(r, L)]]["spread"]
    return tps[f] > tps[r] and a[1] < b[0]
  if tps:
    f = max(tps, key=tps.get)
    if f not in [r for r, _ in chosen] and all(faster(f, r) for r, _ in chosen):
      chosen.append((f, "when training throughput binds"))
  st = {r: cost(r, "state_bytes") for r in cand if cost(r, "state_bytes")}
  if st:
    s = min(st, key=st.get)
    if s not in [r for r, _ in chosen] and st[s] < min(st.get(r, 2 ** 62) for r, _ in chosen):
      chosen.append((s, "when decode memory binds"))
  choices = []
  for r, when in chosen[:MAX_CHOICES]:
    says = gap(r)
    if r in tps:
      says += "; " + speed(r)
    if cost(r, "state_bytes"):
      says += ", state " + fig(r, "state_bytes", kib)
    dif = lm_differs(d["preset"], r, params) if r != ref else ""
    ctl = control_text(d, L, r) if r != ref else ""
    dif = "; ".join(x for x in (dif, ctl) if x)
    choices.append(Choice(r, when, says + (f" ({dif})" if dif else "")))
  parts = [f"{i + 1}. `{c.row}` {c.when}: {c.says}." for i, c in enumerate(choices)]
  if pending:      # a row still to judge could join the choices or be judged worse
    parts.insert(0, f"Provisional ({len(rows) - len(pending)} of {len(rows)} rows judged "
                    "against flash here):")
  if worse:
    parts.append(f"Worse here: {_rows_list(worse)}.")
  if wholly:
    parts.append(f"Not chosen (interval wholly worse, unresolved): {_rows_list(wholly)}.")
  if pending:
    parts.append(f"Not judged yet: {_rows_list(pending)}.")
  lead = _lead(parts)
  return Answer(f"lm_{L}", title, LM_PAGE, device, lead, tuple(choices), worse, pending,
                lm_change(d, L, judged, [c.row for c in choices], pending),
                tuple(lm_table(d, L, params)), tuple(cites),
                gpu=tuple(gpu_model_lines(root, L) + gpu_kernel_lines(root, L)))


def _control(d: dict, L: int, judged: dict, chosen: list) -> str:
  """Where the first choice is judged better than flash and its layers have pieces
  flash's model lacks (a short convolution, norms, gates: `lm_differs`): the control
  row, flash's model with those pieces, which could show the gap is the layer's: its
  command where the length study has it and it has not run at L (`Row.control`), the
  sentence saying it is missing where the study has none, "" once it ran (the choice
  then states its comparison: `control_text`)."""
  r = chosen[0] if chosen else None
  if r is None or r == lm_reference() or (judged.get(r) or {}).get("word") != "better":
    return ""
  pieces = layer_pieces(d["preset"], r)
  if not pieces:
    return ""
  what = f"flash's model with `{r}`'s layer pieces ({', '.join(pieces)})"
  ctl = [c for c, of in (d.get("controls") or {}).items() if of == r]
  if not ctl:
    return (f"a control row: {what}, not in the length study; if it closes the gap, the "
            "gap is the layer's, not the attention's.")
  c = ctl[0]
  if (d["cells"].get(c) or {}).get(str(L), {}).get("seeds"):
    return ""
  from studies.length import presets, results
  cmd = results.command(presets.preset(d["preset"]), [c], [L])
  return (f"its control row `{c}` ({what}), not run yet: `{cmd}`; if it closes the gap, "
          "the gap is the layer's, not the attention's.")


def control_text(d: dict, L: int, r: str) -> str:
  """`r`'s comparison with its control row at L (flash inside r's layer; exploratory:
  studies.length.results.verdicts' "controls"), "" where none ran."""
  for c, of in (d.get("controls") or {}).items():
    x = (d["verdicts"].get("controls") or {}).get(c, {}).get(str(L))
    if of == r and x:
      return f"against flash inside its own layer (`{c}`): {x['words']}"
  return ""


def lm_change(d: dict, L: int, judged: dict, chosen: list, pending) -> str:
  """The one measurement that could reverse the answer at L, by rule: the rows still to
  judge; else a chosen row whose interval reaches the worse side (more seeds could
  judge it worse); else, where the first choice is better than flash with layer pieces
  flash lacks, the control row with those pieces (`_control`), unless the reference is
  above the best n-gram floor of its own training bytes (`_floor`: longer training);
  else longer training, where the runs end still learning by more than
  a judged row's gap (`_late`); else the unresolved row whose interval reaches furthest to the
  better side (more seeds could judge it better); else a GPU cost run (the tokens/s
  order is a CPU's), at a longer length for the longest."""
  if pending:
    return (f"the rows not judged yet at {L:,} ({_rows_list(pending)}): each could join "
            "the choices or be judged worse.")
  d_ = lambda x: protocol.diff_text(x, "{:.3f}")
  risky = [r for r in chosen if r in judged and judged[r]["word"] == "unresolved"]
  if risky:
    r = risky[0]
    v = judged[r]
    return (f"more seeds of `{r}`: its interval [{d_(v['lo'])}, {d_(v['hi'])}] reaches the "
            "worse side, so more seeds could judge it worse and take it out of the choices"
            f"{_detect(d, L)}.")
  low = _floor(d, L)
  if low:
    return low
  ctrl = _control(d, L, judged, chosen)
  if ctrl:
    return ctrl
  late = _late(d, L, judged)
  if late:
    return late
  open_ = [r for r, v in judged.items() if v["word"] == "unresolved" and r not in chosen]
  if open_:
    r = min(open_, key=lambda r: judged[r]["lo"])
    v = judged[r]
    return (f"more seeds of `{r}`: its interval [{d_(v['lo'])}, {d_(v['hi'])}] reaches the "
            f"better side{_detect(d, L)}.")
  longer = max(d["lengths"]) == L
  return ("a GPU cost run of the same rows (the tokens/s order here is a CPU's; results/"
          "lm_length's gpu preset, issue 105)" + (", which also reaches 16,384 tokens"
                                                   if longer else "") + ".")


def _floor(d: dict, L: int) -> str:
  """Longer training, by rule, where the reference's test figure at L is above the best
  n-gram floor of its own training bytes (studies.length.floors): the runs have
  learned less than a count model, so the answer is about learning speed; else ""."""
  from studies.length import floors
  x = ((d["cells"].get(lm_reference()) or {}).get(str(L)) or {}).get("test")
  at = floors.place(d.get("floors"), L, x) if x is not None else None
  if not at or x < at[2]:
    return ""
  lg = (d.get("longer") or {}) if int(L) == int(d.get("select_at", 0)) else {}
  seen = "; ".join(f"`{r}` {v['test']:.3f}" for r, v in (lg.get("rows") or {}).items())
  return (f"longer training (the `gpu` preset): at {d['tokens_per_run']:,} bytes a run "
          f"{lm_reference()} ({x:.3f} bits/byte) is above the {at[1]}-gram floor of its own "
          f"training bytes ({at[2]:.3f}), so this answer says which model learns byte "
          "statistics fastest, and may reorder once the rows learn past it"
          + (f" (with {lg['tokens_per_run'] / 1e6:.1f}M bytes, exploratory: {seen})"
             if seen else "") + ".")


def _late(d: dict, L: int, judged: dict) -> str:
  """Longer training, by rule: where the reference's train loss still fell over its
  last quarter by more than the tie (studies.length.results.learning) and by more than
  the gap of a row judged better or worse at L (the smallest such gap), the sentence
  that says so; else ""."""
  from studies.length import results
  x = results.learning(d, str(L))
  gaps = {r: v["diff"] for r, v in judged.items()
          if v["word"] in ("better", "worse") and v.get("diff") is not None}
  if not x or not gaps or min(abs(g) for g in gaps.values()) >= x[0]:
    return ""
  r = min(gaps, key=lambda r: abs(gaps[r]))
  return (f"longer training (the `gpu` preset): at {d['tokens_per_run']:,} bytes a run, "
          f"{lm_reference()}'s train loss still fell {x[0]:.3f} bits/byte over its last "
          f"quarter, more than `{r}`'s gap of {gaps[r]:+.3f}, so rows that learn at "
          "different speeds may reorder.")


def _detect(d: dict, L: int) -> str:
  """", which this column detects at ≥ X bits/byte (...)" from the reference's seeds."""
  from studies.length import presets
  ref = lm_reference()
  seeds = [v["test"] for v in d["cells"][ref][str(L)]["seeds"].values()]
  x = protocol.detectable(seeds, None, max(1, d["verdicts"]["family"]))
  return ("" if x is None else f" (this column detects a gap of "
          f"{protocol.diff_text(x, presets.METRIC.fmt).lstrip('+')} bits/byte at 80% power "
          f"with {len(seeds)} seeds a side)")


def _not_yet(d: dict, r: str, L: int) -> str:
  """Where a planned row with no reporting seed at L stands: its rate being chosen (at
  the selection length, with how many rates ran), its seeds at the chosen rate, or
  nothing run yet."""
  rt = (d.get("rates") or {}).get(r) or {}
  n = len(rt.get("grid") or {})
  if rt.get("chosen") is not None:
    return f"rate {rt['chosen']:g} chosen at {d['select_at']:,}: seeds to run"
  if n:
    return (f"choosing its rate at {d['select_at']:,} ({n} rates run"
            + (f", {rt['next']:g} next" if rt.get("next") else "") + ")")
  return "not run yet"


def lm_table(d: dict, L: int, params: dict) -> list[str]:
  """Every row at L: its gap to flash (interval, seeds, verdict), the gap on recall
  positions and on the rest, its cost from its runs (train tokens/s, memory plan,
  decode µs a token, decode state), the interleaved cost run's CPU-s a step with its
  spread where it ran; what differs besides the attention."""
  from studies.length import costs
  Ls, ref = str(L), lm_reference()
  C, V, S = d["cells"], d["verdicts"]["by"], d.get("split", {})
  cr = d.get("cost_run")
  sd = lambda x: protocol.diff_text(x, "{:.3f}")
  rows = []
  for r in d["rows"]:
    c = C[r][Ls]
    run = costs.cell(cr, r, L) if cr else None
    rc = ([f"{run['cpu_s_per_step']:.2f} ({run['spread'][0]:.2f}–{run['spread'][1]:.2f})"
           if run else "–"] if cr else [])
    of = (d.get("controls") or {}).get(r)
    if not c.get("seeds"):
      why = (_not_yet(d, r, L) if r in d["trained_rows"] else
             f"control of `{of}` (flash inside its layer), not run" if of else
             "outside the budget (plan.json)")
      rows.append([f"`{r}`", why, "–", "–", "–", "–", "–", "–"] + rc + [""])
      continue
    v = V.get(r, {}).get(Ls)
    k = f"{len(c['seeds'])} seed{'s' * (len(c['seeds']) != 1)}"
    if r == ref:
      q = f"{c['test']:.3f} (reference, {k})"
    elif v:
      q = f"{v['words']}, {k}"
    elif of:          # a control row: its pair with the row it controls (exploratory)
      x = ((d["verdicts"].get("controls") or {}).get(r) or {}).get(Ls)
      q = f"{c['test']:.3f}, {k}; control of `{of}`" + (
          f": `{of}` against it {x['words']}" if x else "")
    else:
      q = f"{c['test']:.3f}"
    s = S.get(r, {}).get(Ls)
    k = c.get("cost") or {}
    rows.append([f"`{r}`", q, sd(s["gap_recall"]) if s else "–",
                 sd(s["gap_rest"]) if s else "–",
                 f"{k['train_tokens_per_s']:,.0f}" if k.get("train_tokens_per_s") else "–",
                 f"{k['peak_bytes'] / 2 ** 20:.0f} MiB" if k.get("peak_bytes") else "–",
                 f"{k['decode_us_per_token']:,.0f}" if k.get("decode_us_per_token") else "–",
                 kib(k["state_bytes"]) if k.get("state_bytes") else "–"] + rc
                + [lm_differs(d["preset"], r, params) if r != ref else ""])
  rows += _floor_row(d, L, len(rc))
  head = ["row", "test bits/byte: gap to flash", "gap on recall positions",
          "gap on the rest", "train tokens/s (runs' median)", "memory plan",
          "decode µs/token", "decode state"]
  if cr:
    head.append(f"cost run: CPU-s a step (min–max of {cr['rounds']} rounds)")
  return pages.table(head + ["differs besides the attention"], rows)


def _floor_row(d: dict, L: int, extra: int) -> list[list[str]]:
  """The best n-gram floor of the runs' own training bytes at L (studies.length.floors)
  as a last row, with where flash falls among the floors; none where not measured."""
  from studies.length import floors
  x = ((d["cells"].get(lm_reference()) or {}).get(str(L)) or {}).get("test")
  at = floors.place(d.get("floors"), L, x) if x is not None else None
  if not at:
    return []
  k, n, best = at
  return [[f"best n-gram floor ({n}-gram)", f"{best:.3f}: a count model of the runs' own "
           f"training bytes; {lm_reference()} {floors.beats(k)}"]
          + ["–"] * (6 + extra) + [""]]


def gpu_model_lines(root: str = "results", L: int = 4096) -> list[str]:
  """The length study's `gpu` preset at L (results/lm_length/gpu/results.json, written
  on a lent GPU: issue 105 item 3): each row's test bits/byte with its verdict against
  flash there, and its model-level cost on that GPU, in a table of its own, never a
  CPU column; [] where that page has no run at L."""
  from studies.length import presets
  rel = presets.folder_of("gpu")
  path = os.path.join(root, LM_PAGE, rel, "results.json")
  g = pages.read_json(path)
  if not g or str(L) not in {str(x) for x in g.get("lengths", [])}:
    return []
  Ls = str(L)
  V = (g.get("verdicts") or {}).get("by", {})
  rows = []
  for r, by in g.get("cells", {}).items():
    c = by.get(Ls) or {}
    if "test" not in c:
      continue
    k = c.get("cost") or {}
    v = V.get(r, {}).get(Ls)
    rows.append([f"`{r}`", f"{c['test']:.3f}", v["words"] if v else
                 ("reference" if r == lm_reference() else "–"), len(c.get("seeds", {})),
                 f"{k['train_tokens_per_s']:,.0f}" if k.get("train_tokens_per_s") else "–",
                 f"{k['peak_bytes'] / 2 ** 20:,.0f} MiB" if k.get("peak_bytes") else "–",
                 f"{k['decode_us_per_token']:,.0f}" if k.get("decode_us_per_token") else "–"])
  if not rows:
    return []
  dev = (g.get("run") or {}).get("device_kind") or "a GPU"
  return ([f"GPU (the model, from the length study's `gpu` preset on {dev}, "
           f"{g.get('tokens_per_run', 0):,} training bytes a run; apart from every CPU "
           f"figure; [its page](../{LM_PAGE}/{rel}/README.md)):", ""]
          + pages.table(["row", "test bits/byte", "against flash", "seeds",
                         "train tokens/s", "memory plan", "decode µs/token"], rows) + [""])


def gpu_kernel_lines(root: str = "results", L: int | None = None) -> list[str]:
  """GPU figures for the exact reference's kernel (results/benchmarks/gpu_<device>.json:
  flash_pallas against cuDNN, which `sdpa` runs on a GPU), at L where the page measured
  it (every length where L is None): a table of its own, never a CPU column."""
  out = []
  for dev in ("h100", "h200"):
    path = os.path.join(root, "benchmarks", f"gpu_{dev}.json")
    g = pages.read_json(path)
    if not g:
      continue
    for case in g.get("cases", {}).values():
      for N, sp in sorted(case.get("speed", {}).items(), key=lambda x: int(x[0])):
        if L is not None and int(N) != L or "cudnn" not in sp or "flash_pallas" not in sp:
          continue
        c, f = sp["cudnn"], sp["flash_pallas"]
        out.append([g.get("device", dev), f"{int(N):,}", f"D {case['D']}"
                    + (", causal" if case.get("causal") else ""),
                    f"{f['fwd'] * 1e3:.2f} / {c['fwd'] * 1e3:.2f}",
                    f"{f['fwd_bwd'] * 1e3:.2f} / {c['fwd_bwd'] * 1e3:.2f}",
                    f"{c['fwd_bwd'] / f['fwd_bwd']:.2f}×",
                    f"[gpu_{dev}.md](../benchmarks/gpu_{dev}.md)"])
  if not out:
    return []
  ratios = [float(r[5].rstrip("×")) for r in out]
  said = (f"On every GPU measured, cuDNN (`sdpa`) is the faster exact kernel at this "
          f"length: flash_pallas reaches {min(ratios):.2f}–{max(ratios):.2f}× its speed, "
          "forward+backward." if max(ratios) < 1 else
          f"flash_pallas reaches {min(ratios):.2f}–{max(ratios):.2f}× cuDNN's speed, "
          "forward+backward.")
  return (["GPU (one attention op, not the model; from the GPU pages, apart from every "
           "CPU figure): the exact reference's kernels, flash_pallas against cuDNN (what "
           f"`sdpa` runs on a GPU), bf16, ms. {said}", ""]
          + pages.table(["device", "tokens", "shape", "fwd ms (flash_pallas / cuDNN)",
                         "fwd+bwd ms (flash_pallas / cuDNN)",
                         "flash_pallas speed / cuDNN's (fwd+bwd)", "page"], out) + [""])
