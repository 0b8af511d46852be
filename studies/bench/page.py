"""results/benchmarks/README.md: the one writer of the benchmarks page.

The page has two parts, each from its own JSON: the attention benchmark's run
(`studies.bench.benchmark`: meta.json and its sections) and the training-loop sections of
`studies.bench.train` (train_<device>.json, each section with its own run).
Either script's run rewrites the whole page from both, so neither deletes the other's
part.
"""
from __future__ import annotations

import glob
import os

from studies.core import pages, plots, references as refs, timing
from studies.bench.presets import SECTIONS, XLA_REF
from studies.bench.train_page import page as train_section

GiB = pages.GiB


def _fmt_t(c):
  if c is None:
    return ""
  if c.get("status") != "ok":
    return c.get("status", "")
  s = c["seconds"]
  return f"{s * 1e3:.1f}" if s < 10 else f"{s * 1e3:.0f}"


def _fmt_s(x):
  """seconds as µs / ms / s, or a not-run record's status."""
  if not isinstance(x, float):
    return x.get("status", "")
  return (f"{x * 1e6:.0f} µs" if x < 1e-3 else f"{x * 1e3:.1f} ms" if x < 1
          else f"{x:.2f} s")


def _check(ok):
  return "**met**" if ok else "**missed**"


# ---- plots ----------------------------------------------------------------------------

def plot_sweep(sw, path):
  plt = plots.pyplot()
  fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
  names = [n for n in sw if "fwd" in sw[n]]
  cmap = plt.get_cmap("tab20")
  for ax, mode in zip(axes, ("fwd", "fwd_bwd")):
    for i, n in enumerate(names):
      cs = pages.keyed(sw[n][mode])
      pts = sorted((N, c["seconds"]) for N, c in cs.items() if c["status"] == "ok")
      if pts:
        ax.loglog(*zip(*pts), "o-" if n in ("flash", "linear", "softmax") else ".-",
                  ms=3, lw=1.8 if n in ("flash", "linear", "softmax") else 0.9,
                  color=cmap(i % 20), label=n)
    ax.set_title({"fwd": "forward", "fwd_bwd": "forward + backward"}[mode], fontsize=10)
    ax.set_xlabel("sequence length N")
    ax.grid(alpha=0.3, which="both")
  axes[0].set_ylabel("seconds (median)")
  axes[1].legend(fontsize=6, ncol=2, loc="upper left")
  fig.tight_layout()
  plots.save(fig, path, dpi=75)


def plot_decode(curves, path):
  """curves: [(label, {N: seconds or a not-run record}, line style)]."""
  plt = plots.pyplot()
  fig, ax = plt.subplots(figsize=(5, 3.4))
  for label, pts, style in curves:
    pts = sorted((N, t) for N, t in pages.keyed(pts).items() if isinstance(t, float))
    ax.loglog(*zip(*pts), style, ms=3, label=label)
  ax.set_xlabel("context length N")
  ax.set_ylabel("seconds per token")
  ax.grid(alpha=0.3, which="both")
  ax.legend(fontsize=7)
  fig.tight_layout()
  plots.save(fig, path, dpi=75)


# ---- the page -------------------------------------------------------------------------

def write(out: str) -> None:
  """README.md (and its PNGs) of `out` from the JSON files there: the attention
  benchmark's part (meta.json) if present, then the training-loop part."""
  trains = {os.path.basename(p)[6:-5]: pages.read_json(p)
            for p in sorted(glob.glob(os.path.join(out, "train_*.json")))}
  L = []
  if os.path.exists(os.path.join(out, "meta.json")):
    L = main_part(out, trains.get("cpu"))
  for sec in filter(None, map(train_section, trains.values())):   # "" for a file without sections
    L += [sec, ""]
  gpus = [os.path.basename(p)[:-3] for p in sorted(glob.glob(os.path.join(out, "gpu_*.md")))
          if os.path.basename(p) != "gpu_runs.md"]
  if gpus:
    L += ["## flash_pallas against cuDNN on a GPU", "",
          "Kernel speed and errors in bf16 (`python -m scripts.benchmark_gpu`), one page "
          "per device, each written from its JSON: "
          + ", ".join(f"[{g[4:].upper()}]({g}.md) (`{g}.json`)" for g in gpus) + ".", ""]
  if os.path.exists(os.path.join(out, "gpu_runs.md")):
    L += ["## What each GPU run found", "",
          "The device calls, what failed there, what bounded the step and what was "
          "changed after each (figures with their commands and raw logs): "
          "[gpu_runs.md](gpu_runs.md).", ""]
  pages.write_text(os.path.join(out, "README.md"), L or ["# Attention benchmarks"])


def main_part(out, train=None) -> list[str]:
  meta = pages.read_json(os.path.join(out, "meta.json"))
  load = lambda s: pages.read_json(os.path.join(out, f"{s}.json"))
  # only the sections of the run that wrote meta.json: a stale file is never mixed in
  sw, dec, tg, gen = (load(s) if s in meta["sections"] else None for s in SECTIONS)
  p, run = meta["preset"], meta["run"]
  pk = max(meta["peaks"], key=lambda x: x["flop_per_s"])
  L = [f"# Attention benchmarks ({run['preset']} preset)", "",
       pages.header(run) + " Every number of the sections below comes from that one run "
       "(`*.json` beside this page), except the training-loop section at the end, which "
       "names its own runs; the page is rewritten from them by `python -m "
       f"scripts.benchmark --page_only --out={out}`.", "",
       f"Shapes: B={p['B']}, {p['H']} heads, head dim {p['D']}, float32. The matmul "
       "peak, the one denominator of every fraction of peak below, is the highest of the "
       "run's readings ("
       + ", ".join(f"{x['flop_per_s'] / 1e9:.0f}" for x in meta["peaks"])
       + f" GFLOP/s, read at the start, before the targets and at the end): "
       f"{timing.peak_text(pk)}. The highest reading is the one least slowed by the other "
       "jobs of this shared machine, so fractions of it are conservative. Absolute "
       "times drift between runs, so the comparisons below are ratios taken in this one "
       "run, and the targets' timings are interleaved round by round.", ""]
  peak = meta["peak"]
  if tg:
    L += targets_section(tg, dec, sw, p, gen, peak, train)
  if sw:
    L += sweep_section(sw, p, out)
  if dec:
    L += decode_section(dec, p, out, (train or {}).get("decode"))
  if gen:
    L += generation_section(gen, (train or {}).get("generate"))
  return L


def targets_section(tg, dec, sw, p, gen, peak, train):
  L = ["## The CPU targets", "", "| target | measured | |", "|---|---|---|"]
  a = tg.get("exact")
  of_peak = {}
  if a:
    t = a["seconds"]
    of_peak = {k: v / peak for k, v in a["flop_per_s"].items() if k != "matmul"}
    L.append(f"| (a) flash forward ≥ 3× `jax.nn.dot_product_attention` (xla), N={a['N']} "
             f"| {a['flash_vs_xla']:.2f}× ({t['flash'] * 1e3:.0f} vs "
             f"{t[XLA_REF] * 1e3:.0f} ms) | {_check(a['flash_vs_xla'] >= 3)} |")
    L.append(f"| (a) flash forward ≥ 70% of the matmul peak | {of_peak['flash'] * 100:.1f}% "
             f"({a['flop_per_s']['flash'] / 1e9:.0f} of {peak / 1e9:.0f} GFLOP/s; the "
             f"matmul timed in flash's own interleaved rounds read "
             f"{a['flop_per_s']['matmul'] / 1e9:.0f}) | {_check(of_peak['flash'] >= 0.7)} |")
    for N, sp, ct, bound in _causal_rows(a):
      L.append(f"| (a) causal about 2× faster than non-causal, N={N} | {sp:.2f}× (tiles "
               f"visited: {ct['visited']} of {ct['total']}, so at most {bound:.2f}×) | "
               f"{_check(sp >= 1.8)} |")
  b = tg.get("memory")
  if b:
    fl = b["flash"]
    L.append(f"| (b) flash fwd+bwd at N={b['N']}: temporaries < 2 GiB | "
             f"{fl['temp_bytes'] / GiB:.2f} GiB planned, RSS grew "
             f"{fl['rss_growth_bytes'] / GiB:.2f} GiB in the run | "
             f"{_check(fl['temp_bytes'] < 2 * GiB)} |")
    L.append(f"| (b) the naive path cannot run there | softmax plans "
             f"{b['softmax']['temp_bytes'] / GiB:.0f} GiB, jax.nn (xla) "
             f"{b[XLA_REF]['temp_bytes'] / GiB:.0f} GiB of temporaries; RAM "
             f"{b['ram_bytes'] / GiB:.0f} GiB | "
             f"{_check(b['softmax']['temp_bytes'] > b['ram_bytes'])} |")
  if sw and "linear" in sw:
    s = sw["linear"]["fwd_bwd_slope"]
    L.append(f"| (c) linear causal fwd+bwd slope ≤ 1.1 over {p['slope_range'][0]}–"
             f"{p['slope_range'][1]} | p = {s:.3f} | {_check(s <= 1.1)} |")
  if dec:
    lin = pages.keyed(dec["linear, RNN form"])
    kv = pages.keyed(dec["softmax, KV cache"])
    lens = sorted(lin)
    flat = lin[lens[-1]] / lin[lens[0]]
    below = all(lin[N] < kv[N] for N in lens if N >= 1024) and any(N >= 1024 for N in lens)
    L.append(f"| (d) linear decode flat: t({lens[-1]}) / t({lens[0]}) ≤ 1.2 | "
             f"{flat:.2f} | {_check(flat <= 1.2)} |")
    L.append("| (d) linear decode below the KV-cached softmax at every N ≥ 1024 | "
             + ", ".join(f"N={N}: {lin[N] * 1e6:.0f} vs {kv[N] * 1e6:.0f} µs"
                         for N in lens if N >= 1024) + f" | {_check(below)} |")
  if gen:
    L.append(f"| (e) MNIST generation, linear RNN ≥ {refs.PAPER_MNIST_SPEEDUP}× softmax "
             f"recompute (paper size, batch {gen['batch']}) | {gen['ratio']:.0f}× (softmax "
             "without a cache; see \"What the generation ratios compare\") | "
             f"{_check(gen['ratio'] >= refs.PAPER_MNIST_SPEEDUP)} |")
  L.append("")
  if a:
    L += ["Forward at the same shapes, interleaved round by round (median):", "",
          "| path | ms | GFLOP/s | of the matmul peak |", "|---|---|---|---|"]
    for k in ("flash", "flash, causal", "softmax (naive einsum)", XLA_REF,
              "flash's tiles, matmuls only"):
      if k in a["seconds"]:
        L.append(f"| {k} | {a['seconds'][k] * 1e3:.0f} | {a['flop_per_s'][k] / 1e9:.0f} | "
                 f"{of_peak[k] * 100:.1f}% |")
    L.append("")
    L += bounds(a, of_peak, dec, p)
  tc = tg.get("tiles")
  if tc:
    base = tc["seconds"]["default"]
    L += [f"### flash tile choices (forward, N={tc['N']}, interleaved, median ms)", "",
          "The defaults of `attention/flash.py` against the alternatives: non-causal uses "
          "1024 × 512 tiles, causal 512 × 512, one (batch, head) slice per step.", "",
          "| tiles | non-causal | vs default | causal | vs default |", "|---|---|---|---|---|"]
    for label, t in tc["seconds"].items():
      L.append(f"| {label} | {t['full'] * 1e3:.0f} | {t['full'] / base['full']:.2f}× | "
               f"{t['causal'] * 1e3:.0f} | {t['causal'] / base['causal']:.2f}× |")
    L.append("")
  return L


def _causal_rows(a):
  """(N, causal speedup, tiles record, tile bound) at target (a)'s two lengths."""
  for N, sp in ((a["N"], a["causal_speedup"]),
                (a["causal_long"]["N"], a["causal_long"]["speedup"])):
    ct = pages.keyed(a["causal_tiles"])[N]
    yield N, sp, ct, ct["total"] / ct["visited"]


def bounds(a, of_peak, dec, p):
  """What limits (a) and (d) on this machine, in this run's own numbers."""
  L = ["### What bounds these figures", ""]
  mm = "flash's tiles, matmuls only"
  if mm in a["seconds"]:
    t, t_mm = a["seconds"]["flash"], a["seconds"][mm]
    L.append(
        f"- **Exact attention.** The same tile loop as flash with only its two matmuls "
        f"per tile (QKᵀ and PV, nothing else) reaches {of_peak[mm] * 100:.0f}% of the "
        f"matmul peak: that is the ceiling XLA:CPU's matmul sets at flash's tile shapes "
        f"(a 1024 × 64 by 64 × 512 product and a 1024 × 512 by 512 × 64 one, per "
        f"(batch, head) slice), lower than the square 2048² matmul of the peak. "
        f"flash's forward takes {t / t_mm:.2f}× that time: the other "
        f"{(1 - t_mm / t) * 100:.0f}% is its online softmax, elementwise passes over "
        "every score (max, exp, sum, the rescaling of the accumulator) that run at "
        "vector/memory speed, not matmul speed. The naive paths are further down "
        "because they also write and re-read the whole N × N fp32 score matrix "
        f"({p['B'] * p['H'] * a['N'] ** 2 * 4 / GiB:.1f} GiB at N={a['N']} over "
        f"{p['H']} heads), which a 2-core machine's memory bandwidth cannot feed; flash "
        "keeps a 2 MiB tile in L2.")
  parts = []
  for N, sp, ct, b in _causal_rows(a):
    parts.append(f"at N={N} it visits {ct['visited']} of {ct['total']} tiles, so block "
                 f"skipping can give at most {b:.2f}×, and the run got {sp:.2f}× "
                 f"({sp / b * 100:.0f}% of that bound)")
  L.append(
      f"- **Causal.** With {ct['block_q']}-row query tiles the causal forward skips whole "
      "tiles above the diagonal: " + "; ".join(parts) + ". The bound is "
      "1 / (1/2 + block_q / 2N): the diagonal tiles are computed whole, so it reaches 2× "
      "only as N grows. Below the bound, the diagonal tiles also pay for the mask and "
      "the short inner loops of the first query tiles amortise their fixed costs less. "
      "Finer query tiles would skip more but run each matmul less efficiently on this "
      "CPU (the tile table below).")
  if dec:
    lin = pages.keyed(dec["linear, RNN form"])
    L.append(
        f"- **Linear decode.** One RNN step costs {min(lin.values()) * 1e6:.1f}–"
        f"{max(lin.values()) * 1e6:.1f} µs whatever N is (the (S, Z) state has "
        "no length); the spread between lengths is this machine's timing noise at "
        "the microsecond scale.")
  return L + [""]


def sweep_section(sw, p, out):
  plot_sweep(sw, os.path.join(out, "sweep.png"))
  lens = p["lens"]
  L = ["## Every variant against N", "",
       "Median milliseconds; `oom`: XLA's memory plan exceeds "
       f"{p['mem_fraction'] * 100:.0f}% of the RAM, so it was not run; `time limit`: "
       f"the predicted or first-run time of warm-up + {p['runs']} runs exceeds "
       f"{p['case_limit_s']:.0f} s. Slope: least-squares p of t ∝ N^p over "
       f"{p['slope_range'][0]} ≤ N ≤ {p['slope_range'][1]} (measured points only). "
       "Causal where the variant supports it.", ""]
  for mode, title in (("fwd", "Forward"), ("fwd_bwd", "Forward + backward")):
    L += [f"### {title}", "",
          "| variant | causal | " + " | ".join(str(N) for N in lens) + " | slope | "
          "% of peak (largest N run) | temporaries (largest N run) |",
          "|---|---|" + "---|" * (len(lens) + 3)]
    for name, r in sw.items():
      if "skipped" in r:
        continue
      cs = pages.keyed(r[mode])
      ok = [N for N in lens if cs.get(N, {}).get("status") == "ok"]
      top = cs[ok[-1]] if ok else None
      L.append(f"| {name} | {'yes' if r['causal'] else 'no'} | "
               + " | ".join(_fmt_t(cs.get(N)) for N in lens)
               + f" | {r[mode + '_slope']:.2f} | "
               + (f"{top['of_peak'] * 100:.1f}% | "
                  f"{top['memory']['temp_bytes'] / 2 ** 20:.0f} MiB |" if top else " | |"))
    L.append("")
  for n, r in sw.items():
    if "skipped" in r:
      L.append(f"`{n}` is not in the sweep: {r['skipped']}.")
  L += ["", "![time against N](sweep.png)", ""]
  return L


KV_ROWS = ("softmax, KV cache", "softmax, int8 KV cache")


def decode_section(dec, p, out, later=None):
  """The decode table of this run; `later`: benchmark_train's decode section, whose
  KV-cache rows (the cache written in place) supersede this run's."""
  newer = later and later.get("seconds_per_token")
  curves = [(label, pts, "o-") for label, pts in dec.items()
            if not (newer and label in newer)]
  if newer:
    curves += [(f"{label} ({later['run']['date']}, in place)", pts, "s--")
               for label, pts in newer.items()]
  plot_decode(curves, os.path.join(out, "decode.png"))
  lens = sorted(pages.keyed(next(iter(dec.values()))))
  L = ["## Decode: seconds per token against context length", "",
       f"One new token (B={p['B']}) against a context of N positions: recompute is "
       "the causal softmax forward over all N (what a model without a cache pays "
       "per token, per layer), the cached modes are one `decode_step` (the mean over a "
       f"`lax.scan` of {p['decode_steps']} steps from a state already holding N "
       "positions, median of the runs), linear's is its (S, Z) update (the mean over "
       f"a scan of {p['rnn_decode_steps']} steps: each takes microseconds, so the "
       "call's fixed cost must be spread thin).", "",
       "| mode | " + " | ".join(f"N={N}" for N in lens) + " | t(max N) / t(min N) |",
       "|---|" + "---|" * (len(lens) + 1)]
  for label, pts in dec.items():
    pts = pages.keyed(pts)
    ok = [N for N in lens if isinstance(pts[N], float)]
    mark = " (superseded, see below)" if newer and label in newer else ""
    L.append(f"| {label}{mark} | " + " | ".join(_fmt_s(pts[N]) for N in lens)
             + f" | {pts[ok[-1]] / pts[ok[0]]:.2f}"
             + (f" (N ≤ {ok[-1]})" if ok[-1] != lens[-1] else "") + " |")
  if newer:
    top = str(max(later["lens"]))
    L += ["", "The KV-cache rows were measured before the cache was written in place "
          "inside the decode scan (the scan then copied and transposed the whole cache "
          f"every step); `{later['run']['command']}` measured them again on "
          f"{later['run']['date']} at the same shapes (the training-loop section below): "
          + ", ".join(f"{label} {newer[label][top] * 1e3:.1f} ms" for label in newer)
          + f" at N={top}. The plot draws those later rows (dashed), not the superseded "
          "ones."]
  return L + ["", "![decode](decode.png)", ""]


def generation_section(gen, later=None):
  L = ["## MNIST generation at the paper's model size", "",
       f"{gen['batch']} images of {gen['pixels']} pixels, the paper's model "
       f"({', '.join(f'{k} {v}' for k, v in gen['model'].items())}; "
       f"{gen['params']:,} parameters, untrained: the time does not depend on the "
       "weights).", "",
       "| mode | seconds per batch | images/s |", "|---|---|---|"]
  for label in ("softmax, recompute", "linear, RNN form"):
    s = gen[label]["seconds_per_batch"]
    L.append(f"| {label} | {s:.1f} | {gen['batch'] / s:.3f} |")
  r = gen["softmax, recompute"]
  L += ["", f"Softmax recompute was timed over {r['tokens_timed']} tokens at the full "
        f"{gen['pixels']}-pixel buffer: {r['tokens_timed'] + 1} forward passes (the "
        "first token's log-probs take one more), "
        f"{r['seconds_per_token']:.2f} s each. In recompute mode every step runs the "
        "same program on that fixed buffer (`models/generate.py`), so a batch takes "
        f"{gen['pixels'] + 1} passes. Linear's batch is the whole generation, timed.", ""]
  return L + ratios(gen, later)


def ratios(gen, later=None) -> list[str]:
  """What each generation ratio on the page compares, and the like-for-like ones."""
  P = refs.PAPER_MNIST
  lin, soft = P["linear"]["images_per_s"], P["softmax"]["images_per_s"]
  st = refs.PAPER_MNIST_STATEFUL_SOFTMAX
  L = ["### What the generation ratios compare", "",
       f"- **{gen['ratio']:.0f}× (target (e))**: linear in RNN form against softmax "
       "*without* a cache (the whole forward pass per pixel), this run, the paper's "
       f"model size, batch {gen['batch']}; softmax's time is extrapolated from "
       f"{gen['softmax, recompute']['tokens_timed']} timed tokens (every step runs the "
       "same program).",
       f"- **{refs.PAPER_MNIST_SPEEDUP}× (the paper's, Table 2)**: its linear {lin} "
       f"against its softmax {soft} images/s, softmax there also without a state; on "
       "a GPU, quoted, not measured here."]
  rows = {(r["variant"], r["batch"]): r for r in (later or {}).get("rows", [])
          if r["mode"] == "cache" and r["cache"] == "fp"}
  B = gen["batch"]
  if ("linear", B) in rows and ("softmax", B) in rows:
    a, b = rows["linear", B]["images_per_s"], rows["softmax", B]["images_per_s"]
    L.append(f"- **{a / b:.1f}× (like for like, ours)**: linear in RNN form against "
             f"softmax with its KV cache, the same model size and batch {B}: {a:.2f} "
             f"against {b:.2f} images/s (the generation table of the training-loop "
             f"section below: another run, `{later['run']['command']}`, "
             f"{later['run']['date']}).")
  L.append(f"- **{lin / st:.1f}× (like for like, the paper's)**: its appendix's stateful "
           f"softmax (cached keys and values) generates {st} images/s against linear's "
           f"{lin}; quoted, not measured here.")
  return L + [""]
