"""Speed of the gated family (retention, gla and its SSD gate, deltanet) on a CPU:
`results/gated/`.

Three measurements, each timed by `studies.core.timing.interleaved_clocks` (a warm-up call
each, then rounds in which every compared function runs once in turn; medians of the
wall-clock and of this process's CPU time):
  slope    forward+backward of the chunked form (the training form) at each length of
           `lens`, the lengths of one case interleaved; the log-log slope of time
           against N over them (issue 41's target: <= 1.1, i.e. linear time).
  forms    forward+backward at N = `forms_N` of the chunked form, the step-by-step
           `lax.scan` form interleaved (target: scan / chunked >= 3) and, for the
           diagonal gates, `lax.associative_scan` interleaved with the chunked form
           apart (`measure_forms` says why). The quadratic "parallel" form is
           left out: at 4096 tokens gla's (T, T, D) decay tensor alone is GiBs.
  decode   per-token time of `attention.decode_step` (the models' decode path, one
           token per `lax.scan` step, `decode_steps` of them) from the state after a
           prefill of N tokens, for each N of `decode_lens` (target: t(16k) / t(256)
           <= 1.2: the state is O(D Dv) whatever N).
forward+backward is the gradient of 0.5 Σ out² with respect to q, k, v and the
per-token inputs (gate or β logits, random, from the variant's `input_shapes`).
"""
from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np

import attention
from attention.core.decode import decode_tokens
from studies.core import pages, plots, timing



# cases of a variant's options besides its defaults: gla's SSD gate (Mamba-2's scalar)
OPTION_CASES = {"gla (ssd)": ("gla", {"gate": "ssd"})}


def cases() -> dict:
  """{case: (variant, options)}: the registry's gated family, each with its defaults
  and then its `OPTION_CASES`."""
  out = {}
  for n in attention.names():
    if attention.variant(n).family == "gated":
      out[n] = (n, {})
      out.update({c: vo for c, vo in OPTION_CASES.items() if vo[0] == n})
  return out


# case: (variant, options); the page's order is the registry's (sorted names)
CASES = cases()
TARGETS = dict(slope=1.1, scan_over_chunked=3.0, decode_ratio=1.2)


@dataclasses.dataclass(frozen=True)
class Preset:
  B: int                # batch
  H: int                # heads (query = key/value heads)
  D: int                # head dim (= value dim)
  lens: tuple           # lengths of the slope
  forms_N: int          # length of the forms' comparison
  decode_lens: tuple    # context lengths of the decode timing
  decode_steps: int     # tokens per timed decode scan
  rounds: int           # interleaved rounds (medians over them)
  what: str


PRESETS = {
    "smoke": Preset(B=1, H=2, D=8, lens=(64, 128), forms_N=64, decode_lens=(16, 64),
                    decode_steps=4, rounds=2, what="tiny shapes: a test of the study"),
    "cpu": Preset(B=1, H=4, D=64, lens=(1024, 2048, 4096, 8192, 16384, 32768),
                  forms_N=4096, decode_lens=(256, 16384), decode_steps=2048, rounds=5,
                  what="B=1, 4 heads of 64 (the usual head dim), float32"),
    # the page's preset before 2026-11-25: at head dim 32 a scan step is so little
    # work (a 32 x 32 state per head) that the step-by-step scan is cheap on a CPU, and
    # scan / chunked was 1.7-2.5 by CPU time (results/gated as of commit 060df60)
    "cpu_small": Preset(B=1, H=2, D=32, lens=(1024, 2048, 4096, 8192, 16384, 32768),
                        forms_N=4096, decode_lens=(256, 16384), decode_steps=2048,
                        rounds=7, what="B=1, 2 heads of 32, float32: small, so that the "
                        "study takes minutes on 2 shared cores"),
}


def make_inputs(name, opts, p: Preset, N, seed=0):
  """(q, k, v (B, N, H, D) float32, the variant's per-token inputs {name: array}),
  standard normal. Drawn by NumPy: jax.random compiles its sampler for every shape
  (~0.15 s each on a CPU, for values whose only use is to be timed)."""
  r = np.random.default_rng(seed)
  normal = lambda s: jnp.asarray(r.standard_normal(s, np.float32))
  q, k, v = (normal((p.B, N, p.H, p.D)) for _ in range(3))
  ins = {n: normal(s) for n, s in
         attention.variant(name).input_shapes(p.B, N, p.H, p.H, p.D, opts).items()}
  return q, k, v, ins


def fwd_bwd(name, opts, form):
  """Jitted (q, k, v, ins) -> gradients of 0.5 Σ out² by `form`."""
  fn = attention.get(name)
  loss = lambda q, k, v, ins: 0.5 * jnp.sum(jnp.square(
      fn(q, k, v, causal=True, form=form, **opts, **ins)))
  return jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))


def forms_of(name):
  """The forms a variant has (its record's `forms`), the quadratic one aside."""
  return tuple(f for f in attention.variant(name).forms if f != "parallel")


def measure_slope(case, p: Preset, log=print) -> dict:
  """{"times": {N: {"wall", "cpu"}}, "slope": {"wall", "cpu"}} of the chunked form."""
  name, opts = CASES[case]
  f = fwd_bwd(name, opts, "chunked")
  t = timing.interleaved_clocks({N: f for N in p.lens},
                                {N: make_inputs(name, opts, p, N) for N in p.lens}, p.rounds)
  s = {c: timing.slope({N: t[N][c] for N in p.lens}) for c in ("wall", "cpu")}
  log(f"{case}: chunked fwd+bwd slope {s['wall']:.2f} (wall), {s['cpu']:.2f} (cpu)")
  return {"times": t, "slope": s}


def measure_forms(case, p: Preset, log=print) -> dict:
  """{form: {"wall", "cpu"}} at N = forms_N: the chunked and scan forms interleaved
  with each other, then the associative scan interleaved with the chunked form apart
  (its O(N D Dv) states evict the caches of whatever runs after it: interleaved with
  all three, the chunked form's time varied 1.7x within one run). The chunked time
  reported is that of the first pair; "chunked beside assoc" is its time in the
  second, from which assoc / chunked is taken."""
  name, opts = CASES[case]
  x = make_inputs(name, opts, p, p.forms_N)
  chunked = fwd_bwd(name, opts, "chunked")
  t = timing.interleaved_clocks({"chunked": chunked, "scan": fwd_bwd(name, opts, "scan")},
                                {"chunked": x, "scan": x}, p.rounds)
  if "assoc" in forms_of(name):
    a = timing.interleaved_clocks({"chunked": chunked, "assoc": fwd_bwd(name, opts, "assoc")},
                                  {"chunked": x, "assoc": x}, p.rounds)
    t["assoc"], t["chunked beside assoc"] = a["assoc"], a["chunked"]
  log(f"{case} at N={p.forms_N}: " + ", ".join(f"{f} {v['wall'] * 1e3:.1f} ms"
                                               for f, v in t.items()))
  return t


def measure_decode(case, p: Preset, log=print) -> dict:
  """{N: {"wall", "cpu"}}: seconds per decoded token after a prefill of N tokens."""
  name, opts = CASES[case]
  st0 = attention.init_decode_state(name, batch=p.B, max_len=None, num_kv_heads=p.H,
                                    head_dim=p.D, **opts)
  prefill = jax.jit(lambda st, q, k, v, ins: attention.decode_step(
      st, q, k, v, **opts, **ins)[1])

  generate = jax.jit(lambda st, q, k, v, ins: decode_tokens(st, q, k, v, ins, **opts))

  new = make_inputs(name, opts, p, p.decode_steps, seed=1)
  args = {N: (prefill(st0, *make_inputs(name, opts, p, N)),) + new for N in p.decode_lens}
  for N, a in args.items():
    assert int(a[0].pos) == N
  t = timing.interleaved_clocks({N: generate for N in p.decode_lens}, args, p.rounds)
  t = {N: {c: s / p.decode_steps for c, s in v.items()} for N, v in t.items()}
  log(f"{case} decode: " + ", ".join(f"N={N} {v['wall'] * 1e6:.0f} µs/token"
                                     for N, v in t.items()))
  return t


def measure(p: Preset, preset: str, command: str, cases=tuple(CASES), log=print) -> dict:
  """Every measurement of every case, with the run record."""
  r = dict(run=pages.run_record(command, preset), shape=dataclasses.asdict(p),
           targets=TARGETS, cases={}, load={"before": os.getloadavg()[0]})
  for case in cases:
    r["cases"][case] = dict(slope=measure_slope(case, p, log),
                            forms=measure_forms(case, p, log),
                            decode=measure_decode(case, p, log))
  r["load"]["after"] = os.getloadavg()[0]
  return r


IDLE_LOAD = 0.5     # a 1-minute load average below this before the run: an idle machine


def idle(r: dict) -> bool | None:
  """Whether the machine was idle when the run started (None: not recorded)."""
  before = r.get("load", {}).get("before")
  return None if before is None else before < IDLE_LOAD


# ---- the page ------------------------------------------------------------------------

def summary(r: dict, clock: str) -> dict:
  """{case: (slope, scan / chunked, assoc / chunked or None, decode ratio)} by `clock`."""
  out = {}
  for case, c in r["cases"].items():
    f = c["forms"]
    d = pages.keyed(c["decode"])
    lo, hi = min(d), max(d)
    out[case] = (c["slope"]["slope"][clock], f["scan"][clock] / f["chunked"][clock],
                 f["assoc"][clock] / f.get("chunked beside assoc", f["chunked"])[clock]
                 if "assoc" in f else None,
                 d[hi][clock] / d[lo][clock])
  return out


def plot(path, r: dict) -> None:
  """Three small panels, by this process's CPU time (the steadier clock on a shared
  machine; the wall clock is in the tables): fwd+bwd time against N (chunked), the
  forms at forms_N, the decode time per token against the context."""
  plt = plots.pyplot()
  fig, axs = plt.subplots(1, 3, figsize=(11, 3.3))
  cases = list(r["cases"])
  for case in cases:
    t = pages.keyed(r["cases"][case]["slope"]["times"])
    ns = sorted(t)
    axs[0].plot(ns, [t[n]["cpu"] for n in ns], "o-",
                label=f"{case} ({r['cases'][case]['slope']['slope']['cpu']:.2f})")
  axs[0].set(xscale="log", yscale="log", xlabel="N (tokens)",
             ylabel="fwd+bwd CPU seconds", title="chunked form (slope)")
  axs[0].set_xscale("log", base=2)
  forms = ("chunked", "assoc", "scan")
  for i, form in enumerate(forms):
    ys = [r["cases"][c]["forms"].get(form, {}).get("cpu", np.nan) * 1e3 for c in cases]
    axs[1].bar(np.arange(len(cases)) + (i - 1) * 0.27, ys, 0.27, label=form)
  axs[1].set_xticks(range(len(cases)), cases, fontsize=8, rotation=20, ha="right")
  axs[1].set(yscale="log", ylabel="CPU ms",
             title=f"fwd+bwd at N = {r['shape']['forms_N']}")
  for case in cases:
    d = pages.keyed(r["cases"][case]["decode"])
    ns = sorted(d)
    axs[2].plot(ns, [d[n]["cpu"] * 1e6 for n in ns], "o-", label=case)
  axs[2].set_xscale("log", base=2)
  axs[2].set(xlabel="context N (tokens)", ylabel="CPU µs per token",
             title="decode_step, one token")
  axs[2].set_ylim(bottom=0)
  for ax in axs:
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
  fig.tight_layout()
  plots.save(fig, path, dpi=90)


def _met(x, target, le=True) -> bool:
  return x <= target if le else x >= target


def disagreements(r: dict) -> list[str]:
  """'case: target' for each target that one clock meets and the other misses."""
  tg, out = r["targets"], []
  wall, cpu = summary(r, "wall"), summary(r, "cpu")
  for case in wall:
    for i, (what, le) in ((0, ("slope", True)), (1, ("scan_over_chunked", False)),
                          (3, ("decode_ratio", True))):
      if _met(wall[case][i], tg[what], le) != _met(cpu[case][i], tg[what], le):
        out.append(f"{case}: {what.replace('_', ' ')}")
  return out


def _verdict(x, target, le=True) -> str:
  return f"{x:.2f} ({'met' if _met(x, target, le) else 'missed'})"


def merge_case(r: dict, other: dict, case: str) -> dict:
  """`r` (a bench.json record) with `case`'s measurements from `other` (another run's
  record of the same shape), the other run's header and load kept beside it
  (r["case_runs"]) so that the page says where its rows come from."""
  if other["shape"] != r["shape"]:
    raise ValueError(f"merge_case: {case!r} was measured at another shape "
                     f"({other['shape']} != {r['shape']})")
  out = dict(r, cases={**r["cases"], case: other["cases"][case]})
  out["case_runs"] = {**r.get("case_runs", {}),
                      case: {"run": other["run"], "load": other.get("load", {})}}
  return out


def write(r: dict, out: str) -> None:
  """bench.json, bench.png and README.md of `out` from `measure`'s record."""
  pages.write_json(os.path.join(out, "bench.json"), r)
  plot(os.path.join(out, "bench.png"), r)
  s, tg = r["shape"], r["targets"]
  lens = list(s["lens"])
  lines = [
      "# The gated family: speed of the chunked, scan and associative-scan forms, and "
      "of decoding",
      "",
      pages.header(r["run"]) + " The page is rewritten from `bench.json` by `python -m "
      "scripts.gated_bench --page_only`.",
      "",
      f"Causal, B={s['B']}, {s['H']} heads (as many key/value heads), head dim "
      f"{s['D']}, float32 inputs ({s['what']}). Each time is the median of "
      f"{s['rounds']} interleaved rounds after a warm-up call, by the wall clock and "
      "by this process's CPU time (all its threads" + {
          None: "; the machine was shared, so the CPU time is the steadier of the two)",
          True: f"; the machine was idle: 1-minute load average {r.get('load', {}).get('before', 0):.2f} "
                "before the run, nothing else running, so the wall clock is what a user "
                "waits)",
          False: f"; the machine was shared: 1-minute load average "
                 f"{r.get('load', {}).get('before', 0):.2f} before the run, so the CPU "
                 "time is the steadier of the two)"}[idle(r)] + ". Forward+backward: the gradient of "
      "0.5 Σ out² with respect to q, k, v and the per-token gate/β logits. What is "
      "measured: `studies/bench/gated.py`.",
      ""]
  for case, cr in r.get("case_runs", {}).items():    # a case measured by a later run
    lines += [f"**{case}'s rows come from another run** ({pages.header(cr['run'])}), "
              f"merged into this page's bench.json (`merge_case`): 1-minute load average "
              f"{cr.get('load', {}).get('before', 0):.2f} before it"
              + (" — the CPU was shared with other work, so its wall-clock times are "
                 "inflated against the rows above and its CPU times are the fairer "
                 "comparison; timed again on an idle machine, they may move"
                 if cr.get("load", {}).get("before", 0) >= IDLE_LOAD else "") + ".", ""]
  lines += [
      "## Targets (issue 41)",
      ""]
  rows = []
  for clock in ("wall", "cpu"):
    for case, (sl, sc, asc, dec) in summary(r, clock).items():
      rows.append([case, clock, _verdict(sl, tg["slope"]),
                   _verdict(sc, tg["scan_over_chunked"], le=False),
                   "" if asc is None else f"{asc:.2f}", _verdict(dec, tg["decode_ratio"])])
  lo, hi = min(s["decode_lens"]), max(s["decode_lens"])
  lines += pages.table(
      ["case", "clock", f"fwd+bwd slope {lens[0]}–{lens[-1]} (≤ {tg['slope']})",
       f"scan / chunked at {s['forms_N']} (≥ {tg['scan_over_chunked']})",
       f"assoc / chunked at {s['forms_N']}",
       f"decode t({hi}) / t({lo}) (≤ {tg['decode_ratio']})"], rows)
  split = disagreements(r)
  if split and idle(r):
    par = {f: np.median([c["forms"][f]["cpu"] / c["forms"][f]["wall"]
                         for c in r["cases"].values()]) for f in ("chunked", "scan")}
    lines += ["", "The two clocks disagree on " + "; ".join(split) + ". On this idle "
              "machine the wall clock is the time a user waits; the CPU time adds up "
              "the work of every thread, and the chunked form keeps the two cores busy "
              f"more of the time than the scan (CPU time / wall time, median over the "
              f"cases: chunked {par['chunked']:.2f}, scan {par['scan']:.2f}), so its "
              "CPU-time ratio is the lower one."]
  elif split:
    lines += ["", "The two clocks disagree on " + "; ".join(split) + ": on this shared "
              "machine those verdicts are unresolved (the wall clock counts the time "
              "spent waiting for a core, the CPU time does not)."]
  lines += ["", "![CPU time: fwd+bwd against N; the forms at N = "
            f"{s['forms_N']}; decode per token](bench.png)", "",
            "The figure shows the CPU times (the wall clock's are in the tables).", "",
            "## Forward+backward of the chunked form, seconds (wall / cpu)", ""]
  lines += pages.table(["case"] + [f"N={n}" for n in lens], [
      [case] + [f"{t['wall']:.4f} / {t['cpu']:.4f}" for t in
                (pages.keyed(c["slope"]["times"])[n] for n in lens)]
      for case, c in r["cases"].items()])
  lines += ["", f"## The forms at N = {s['forms_N']}, forward+backward, ms (wall / cpu)",
            "", "The chunked and scan forms timed in turns; the associative scan in turns "
            "with the chunked form apart (its states evict the caches of what runs after "
            "it), beside that pair's own chunked time.", ""]
  lines += pages.table(["case", "chunked", "scan (token by token)", "associative scan",
                        "chunked, beside it"], [
      [case] + [f"{c['forms'][f]['wall'] * 1e3:.1f} / {c['forms'][f]['cpu'] * 1e3:.1f}"
                if f in c["forms"] else "— (no such form)"
                for f in ("chunked", "scan", "assoc", "chunked beside assoc")]
      for case, c in r["cases"].items()])
  dl = list(s["decode_lens"])
  lines += ["", f"## Decoding, µs per token (wall / cpu), {s['decode_steps']} tokens per "
            "timed `lax.scan` after a chunked prefill of N tokens", ""]
  lines += pages.table(["case"] + [f"N={n}" for n in dl], [
      [case] + [f"{d['wall'] * 1e6:.1f} / {d['cpu'] * 1e6:.1f}" for d in
                (pages.keyed(c["decode"])[n] for n in dl)]
      for case, c in r["cases"].items()])
  lines += [
      "",
      "Reading: the chunked form does O(N C (D + Dv) + N D Dv) work in blocks whose "
      "arrays stay in cache, so its time should grow linearly in N (the slope above "
      "says whether it did); the scan form does "
      "O(N D Dv) work but in N sequential steps of a few Dk x Dv products each; the "
      "associative scan forms every state (O(N D Dv) memory, log N levels). Decoding "
      "carries one O(D Dv) state per head, so its time per token cannot depend on "
      "the context: the two contexts run the same compiled step on states of one "
      "shape."]
  lines += ["", "What each piece of the family's published layer buys on recall, against "
            "the bare operator and against linear attention given the same pieces: "
            "[the layer ablation](../gated_ablation/README.md) "
            "(studies/mechanisms/gated_ablation.py)."]
  pages.write_text(os.path.join(out, "README.md"), lines)
