"""results/kv_cache/README.md and its plot, from the JSON studies.bench.kv_cache
measured (`write`): the per-token and per-context state bytes and step times, the
whole stacks' rows, and a reading written by rules.
"""
from __future__ import annotations

import os

from studies.bench.kv_cache import (KiB, _hybrid_lines, hybrid_stacks, per_token,
                                    predicted_per_token)
from studies.core import pages, plots, timing


def plot(path: str, rec: dict) -> None:
  """Two panels: bytes per cached token (bars) and decode µs per token against the
  context (lines), one colour per row."""
  plt = plots.pyplot()
  s, rows = rec["setup"], rec["rows"]
  ctx = list(s["contexts"])
  labels = list(rows)
  colours = plt.get_cmap("tab10").colors
  fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
  bpt = [per_token(rows[k], ctx) for k in labels]
  a.barh(range(len(labels)), [x / KiB for x in bpt], color=colours[:len(labels)])
  a.set_yticks(range(len(labels)), labels, fontsize=8)
  a.invert_yaxis()
  for i, x in enumerate(bpt):
    a.text(x / KiB, i, f" {x / KiB:.2f}", va="center", fontsize=8)
  a.set_xlabel("KiB cached per token, per layer")
  a.set_xlim(0, max(bpt) / KiB * 1.25)
  a.set_title("what the cache holds", fontsize=10)
  for i, k in enumerate(labels):
    us = pages.keyed(rows[k]["us"])
    b.plot(ctx, [us[L] for L in ctx], "o-", color=colours[i], label=k)
  b.set_xscale("log", base=2)
  b.set_yscale("log")
  b.set_xticks(ctx, [f"{L // 1024}k" if L % 1024 == 0 else str(L) for L in ctx])
  b.set_xlabel("context (positions in the cache)")
  b.set_ylabel("decode µs per token (CPU)")
  b.set_title("one decode step", fontsize=10)
  b.grid(True, which="both", alpha=0.3)
  b.legend(fontsize=7)
  fig.tight_layout()
  plots.save(fig, path, dpi=100)


def write(rec: dict, out: str) -> None:
  """results.json, kv_cache.png and README.md of `out` from `measure`'s record, with
  the whole stacks' bytes (`hybrid_stacks`, computed) added to it."""
  rec = dict(rec, hybrids=hybrid_stacks(rec["setup"]))
  pages.write_json(os.path.join(out, "results.json"), rec)
  plot(os.path.join(out, "kv_cache.png"), rec)
  s, rows = rec["setup"], rec["rows"]
  ctx = list(s["contexts"])
  lo, hi = min(ctx), max(ctx)
  mha = per_token(rows["MHA"], ctx) if "MHA" in rows else None
  kl = lambda L: f"{L // 1024}k" if L % 1024 == 0 else str(L)
  lines = [
      "# The KV-cache frontier: what each decode state holds and costs per token",
      "",
      pages.header(rec["run"]) + " Matmul gauge (`studies.core.timing.matmul_peak`): "
      + " at the start, ".join(timing.peak_text(p) for p in rec["peak"][:1])
      + f"; {rec['peak'][1]['flop_per_s'] / 1e9:.0f} GFLOP/s at the end (a gap between "
      "the two says the shared machine was busier at one end). The page is "
      "rewritten from `results.json` by `python -m scripts.kv_cache --page_only`; the "
      "study is `studies/bench/kv_cache.py`.",
      "",
      f"One attention layer, batch {s['batch']}, {s['heads']} query heads of d_h = "
      f"{s['head_dim']}, float32 unless the cache is int8 or fp8. Bytes are per batch "
      "row and per layer: a model multiplies them by its layers and batch.",
      "",
      "## Bytes per token, predicted and measured",
      "",
      "Measured: the sum of the `nbytes` of the decode state's arrays "
      "(`attention.state_nbytes`) for a state of capacity L; per token: its growth "
      f"from L = {lo} to {hi} over {hi - lo} positions. Predicted: the decode state's "
      "own formula, `attention.decode_state_bytes` (`DecodeImpl.state_bytes`); "
      "`tests/studies/test_kv_cache.py` checks predicted == measured for every row "
      "and context.",
      ""]
  lines += pages.table(
      ["cache", "Hkv", "cached per token and head group", "formula (bytes per token)",
       "predicted", "measured", "vs MHA"]
      + [f"state at {kl(L)} (KiB)" for L in ctx],
      [[k, r["Hkv"],
        ("latent d_c = %d + rope key d_r = %d" % (r["Dv"], r["Dk"])) if r["name"] == "mla"
        else f"k {r['Dk']} + v {r['Dv']}" + (f" ({r['cache_dtype']})" if r["cache_dtype"]
                                             else ""),
        r["formula"], f"{predicted_per_token(r, ctx):g}", f"{per_token(r, ctx):g}",
        f"{per_token(r, ctx) / mha:.3f}" if mha else ""]
       + [f"{pages.keyed(r['bytes'])[L]['measured'] / KiB:,.1f}" for L in ctx]
       for k, r in rows.items()])
  lines += _hybrid_lines(rec["hybrids"], ctx, kl)
  lines += [
      "",
      "## Decode µs per token and error against exact softmax",
      "",
      f"µs per token: {s['steps']} single-token decode steps in one jitted scan, the "
      "state donated (updated in place) and refilled before each timed call, from a "
      "state holding L positions; every row and context timed once per round, "
      f"{s['rounds']} interleaved rounds (`studies.core.timing.run_times_fresh`), the "
      "median. Error: the first step's output against float64 softmax attention of "
      "the same query over the same L + 1 tokens' keys and values (mla: its keys and "
      "values materialised from the latents, as the paper defines them), relative RMS. "
      "Temporaries: XLA's memory plan of the compiled scan.",
      ""]
  lines += pages.table(
      ["cache"] + [f"µs/token at {kl(L)}" for L in ctx]
      + [f"error at {kl(L)}" for L in ctx] + [f"temporaries at {kl(L)} (KiB)" for L in ctx],
      [[k] + [f"{pages.keyed(r['us'])[L]:.1f}" for L in ctx]
       + [f"{pages.keyed(r['error'])[L]:.1e}" for L in ctx]
       + [f"{pages.keyed(r['temp_bytes'])[L] / KiB:,.0f}" for L in ctx]
       for k, r in rows.items()])
  lines += ["", "![bytes per token and decode time per token](kv_cache.png)", "",
            "## Reading it", ""] + _reading(rows, ctx, mha)
  pages.write_text(os.path.join(out, "README.md"), lines)


def _reading(rows, ctx, mha) -> list[str]:
  """The page's closing paragraphs, with their numbers read from the record."""
  lo, hi = min(ctx), max(ctx)
  us = lambda k, L: pages.keyed(rows[k]["us"])[L]
  err = lambda k: max(pages.keyed(rows[k]["error"]).values())
  out = []
  if "sliding window" in rows:
    r = rows["sliding window"]
    b = pages.keyed(r["bytes"])
    out.append(
        f"- **The sliding window is flat.** local's rolling cache holds w = "
        f"{r['options']['window']} positions: {b[lo]['measured']:,} bytes at {lo} and "
        f"{b[hi]['measured']:,} at {hi} positions of context, 0 bytes per further token; "
        f"its step took {us('sliding window', lo):.1f} µs at {lo} and "
        f"{us('sliding window', hi):.1f} at {hi} (`attention.cost(..., mode='decode')` "
        "is the same at every context past w, and tests/attention/test_local_window_"
        "cache.py checks the state bytes and the compiled step's memory plan equal at "
        "1k and 16k; the spread between contexts here is the shared machine's noise). "
        "On this CPU its step costs more than MHA's at 1k: it joins the whole rolling "
        "buffer to the new keys and scatters the write, a copy of w positions per "
        "step. Its error is its truncation: it is another function, exact only "
        "where the attention of the dropped keys is negligible (here, on random keys "
        f"whose attention is diffuse, up to {err('sliding window'):.2f}).")
  if "MLA, d_c = 4 d_h" in rows and mha:
    big = rows["MLA, d_c = 4 d_h"]
    out.append(
        f"- **MLA caches {per_token(big, ctx) / mha:.3f} of MHA's bytes** with the "
        f"paper's ratio (d_c = {big['Dv']}, d_r = {big['Dk']}: "
        f"{per_token(big, ctx):g} bytes per token against {mha:g}), between GQA(4) and "
        "MQA here"
        + (f"; with d_c = d_h, {per_token(rows['MLA, d_c = d_h'], ctx) / mha:.3f}"
           if "MLA, d_c = d_h" in rows else "")
        + f". Its error is rounding only (at most {err('MLA, d_c = 4 d_h'):.1e}): the "
        "absorbed step computes the paper's attention exactly. Its step does more "
        "work per cached byte than MHA's: every head scores its d_c-wide absorbed "
        "query against the latents, 2 Hq Tk (2 d_c + d_r) FLOPs against MHA's 2 Hq Tk "
        f"2 d_h; at {hi} it took {us('MLA, d_c = 4 d_h', hi):.1f} µs against MHA's "
        f"{us('MHA', hi):.1f} on this CPU.")
  quant = [k for k in ("int8 cache", "fp8 cache") if k in rows]
  if quant and mha:
    out.append(
        f"- **{' and '.join(k.split()[0] for k in quant)}** hold "
        f"{per_token(rows[quant[0]], ctx) / mha:.3f} of MHA's bytes (1 byte per element "
        "and a float32 scale per position and head) for an error of up to "
        + " and ".join(f"{err(k):.1e} ({k.split()[0]})" for k in quant)
        + " (fp8 keeps 3 mantissa bits, int8 7)."
        + (" fp8's step is the slowest here: this CPU has no float8 arithmetic, so "
           "XLA emulates every conversion of the cache to float32." if "fp8 cache" in quant
           else ""))
  out += [
      "- **What differs on a GPU.** A decode step is bound by reading the cache from "
      "memory, so on a GPU (HBM at terabytes per second, and every head read in "
      "parallel) the µs per token should follow the bytes column more closely than "
      "here, where 2 CPU cores and XLA:CPU's dot kernels set the pace and a small "
      "state fits in cache; MLA's extra FLOPs per byte are then nearly free while "
      "its 4x smaller read is not (the reason DeepSeek-V2 gives). The int8 and fp8 "
      "caches' blocked dequantising path is tuned for a CPU's caches. The bytes "
      "columns are the same on any backend: they are the arrays' sizes. Not measured "
      "on a GPU yet."]
  return out
