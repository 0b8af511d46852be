"""benchmark_train's section of the benchmarks page (studies.bench.page composes
the page): from the sections of results/benchmarks/train_<device>.json alone
(`studies.bench.train` measures them), each with its run record, the CPU loop
target's and the GPU targets' verdicts.
"""
from __future__ import annotations

from studies.core import pages, timing
from studies.bench.train import blocks


def _run_line(sec: dict) -> str:
  """The section's run record; `superseded` (a later measurement's text, set by hand
  in the JSON when code measured here has since changed) is printed after it."""
  return pages.header(sec["run"])[:-1] + f" ({sec['what']})." + (
      " **The run stopped before this section's end (a time limit or an error): the rows "
      "below are those it finished.**" if sec.get("partial") else "") + (
      f" **Superseded: {sec['superseded']}**" if sec.get("superseded") else "")


def cpu_verdict(rows: list) -> str:
  """The CPU loop target's verdict line: loop >= 0.95x bare and <= 1 ms overhead per
  step (medians over the pairs), at the rows whose bare step takes >= 20 ms; each
  missed row with its interval and the host CPU the loop adds there."""
  head = ("CPU loop target (loop ≥ 0.95 × bare and ≤ 1 ms overhead per step, at a step "
          "≥ 20 ms): ")
  ok = [r for r in rows if r["bare_step_ms"] >= 20]
  if not ok:
    return head + "not judged, no row's bare step took 20 ms."
  name = lambda r: f"{r['variant']} {r['dtype']} B={r['batch']}"
  met = [r for r in ok if r["ratio"] >= 0.95 and r["overhead_ms"] <= 1.0]
  missed = [r for r in ok if r not in met]
  line = head + f"met by {len(met)} of {len(ok)} rows" + (
      f" ({', '.join(map(name, missed))} missed)." if missed else ".")
  sure = [r for r in met if r["overhead_ci_ms"][1] <= 1.0]
  if met:
    line += (f" In {len(sure)} of the {len(met)} met, the whole 95% interval of the "
             "overhead is ≤ 1 ms" + (
                 "; in the others the interval reaches above 1 ms, so this run does not "
                 "resolve the overhead to 1 ms there." if len(sure) < len(met) else "."))
  for r in missed:
    lo, hi = r["overhead_ci_ms"]
    line += (f" {name(r)}: overhead {r['overhead_ms']:+.2f} ms (95% interval {lo:+.2f} "
             f"to {hi:+.2f} ms), ratio {r['ratio']:.3f}, and the loop's threads add "
             f"{r['extra_host_ms']:.2f} ms of host CPU per step"
             + ("; the interval includes 1 ms, so the miss is within this run's noise."
                if lo <= 1.0 else "."))
  return line


# The research loop's targets on one GPU (issue 44): steps/s of a batch-16 train step
# of the paper's MNIST model, MFU in bf16 at the best batch, and images/s of whole-image
# generation at batch 16 (linear's is the paper's Table 2 figure,
# studies.core.references).
GPU_TARGETS = {"steps_per_s_b16": 116.0, "mfu_bf16": 0.30,
               "linear_images_per_s": 142.8, "softmax_kv_images_per_s": 128.0}


def gpu_verdict(res: dict) -> list[str]:
  """One line per GPU target: the measured figure against it, or why it is not judged."""
  T = GPU_TARGETS
  # each row with its tag (its run, where an earlier run measured it) and its run's peaks
  rows = [(tag, b.get("peak", {}), r) for tag, b in blocks(res.get("train"))
          for r in b["rows"] if "error" not in r]
  gen = [(tag, r) for tag, b in blocks(res.get("generate")) for r in b["rows"]]
  met = lambda ok: "**met**" if ok else "**missed**"
  out = []
  b16 = [(tag, r) for tag, _, r in rows if r["batch"] == 16]
  out.append(f"Train step ≥ {T['steps_per_s_b16']:.0f} steps/s at batch 16: " + (
      "; ".join(f"{r['variant']} {r['dtype']} {r['loop_steps_per_s']:.1f}{tag} "
                f"({r['loop_steps_per_s'] / T['steps_per_s_b16']:.2f}×): "
                f"{met(r['loop_steps_per_s'] >= T['steps_per_s_b16'])}" for tag, r in b16)
      if b16 else "not measured."))
  bf = [(tag, r) for tag, _, r in rows if r["dtype"] == "bfloat16" and r["mfu"] is not None]
  if bf:
    tag, best = max(bf, key=lambda x: x[1]["mfu"])
    out.append(f"MFU ≥ {100 * T['mfu_bf16']:.0f}% in bf16 at the best batch: best "
               f"{100 * best['mfu']:.2f}% ({best['variant']}, batch {best['batch']}{tag}; "
               f"batches measured: {sorted({r['batch'] for _, r in bf})}): "
               f"{met(best['mfu'] >= T['mfu_bf16'])}")
  else:
    out.append("MFU in bf16: not measured.")
  for tag, peaks, r in rows:      # what bounds the step: host dispatch, arithmetic, or neither
    pk = peaks.get(r["dtype"], {}).get("flop_per_s")
    if pk:
      floor = r["train_flops_per_token"] * r["tokens_per_step"] / pk * 1e3
      step = r["bare_step_ms"]
      # the host's own CPU per step (one call from an idle device, `Bare.dispatch_ms`).
      # Dispatch is asynchronous: it overlaps the device's work on the steps before, so
      # it bounds a step only when it takes about the whole step (>= 90%; linear's
      # 5.5 ms of dispatch in a 10.1 ms step on an H100 left the device busy 10.0 ms
      # of each step in a trace, 2026-11-27). Rows from before 2026-11-27 have only the
      # round's CPU per step, which also holds the thread's wait for the device: from
      # half the step on, they cannot tell which bounds it.
      host = r.get("dispatch_ms", r["bare_host_ms"])
      what = ("the host's dispatch" if "dispatch_ms" in r else
              "the dispatching thread's CPU (its wait for the device included)")
      bound = host >= (0.9 if "dispatch_ms" in r else 0.5) * step
      hosted = ((f"{host:.1f} ms of CPU, {host / step:.0%} of the step (asynchronous, it "
                 "overlaps the device's work: not the bound)" if "dispatch_ms" in r else
                 f"{host:.1f} ms of CPU (not the bound)") if not bound else
                f"{host:.1f} ms of CPU, {host / step:.0%} of the step: the host's work "
                "per step bounds it (dispatch, or a device loop whose trips the host "
                "decides)" if "dispatch_ms" in r else
                f"{host:.1f} ms of CPU, {host / step:.0%} of the step, which does not tell "
                "the host's work from its wait (a run that measures the dispatch apart "
                "must say which bounds it)")
      out.append(f"What bounds {r['variant']} {r['dtype']} B={r['batch']}{tag}: the bare step "
                 f"takes {step:.1f} ms, of which {what} is {hosted}; its "
                 f"FLOPs at the measured {r['dtype']} matmul peak would take {floor:.2f} "
                 f"ms: the step takes {step / floor:.0f}× that"
                 + ("." if bound else ", so the device spends its time on "
                    "work other than peak-rate matmuls (a profile must say which)."))
  for label, variant, mode, key in (("linear RNN generation", "linear", "cache",
                                     "linear_images_per_s"),
                                    ("softmax KV-cache generation", "softmax", "cache",
                                     "softmax_kv_images_per_s")):
    g = [(tag, r) for tag, r in gen if r["variant"] == variant and r["mode"] == mode
         and r["cache"] == "fp" and r["batch"] == 16]
    out.append(f"{label} ≥ {T[key]:g} images/s at batch 16: " + (
        f"{g[0][1]['images_per_s']:.1f}{g[0][0]} ({g[0][1]['images_per_s'] / T[key]:.2f}×): "
        f"{met(g[0][1]['images_per_s'] >= T[key])}" if g else "not measured."))
  # flash against softmax only within one run (one machine state)
  pairs = [(tf, f, s) for tf, _, f in rows for ts, _, s in rows if tf == ts
           and f["variant"] == "flash" and s["variant"] == "softmax"
           and (f["dtype"], f["batch"]) == (s["dtype"], s["batch"])]
  out.append("flash ≥ softmax (train steps/s, same dtype and batch, same run): " + (
      "; ".join(f"{f['dtype']} B={f['batch']}{tag}: {f['loop_steps_per_s']:.1f} vs "
                f"{s['loop_steps_per_s']:.1f}: {met(f['loop_steps_per_s'] >= s['loop_steps_per_s'])}"
                for tag, f, s in pairs) if pairs else "not measured."))
  return out


TRAIN_METHOD = (
    "The loop is `trainer.train_and_evaluate` (input pipeline, prefetch, logging); the "
    "bare step is the same jitted step over batches already on the device, with no host "
    "sync. The two are interleaved: a bare round, a loop run, a bare round, and so on, "
    "each of n steps (a loop run's interval after its first, which holds the setup). "
    "Each loop interval is paired with the mean of the bare rounds around it, so that a "
    "drift of the shared machine, which moves both alike, cancels in the pair. Steps/s: "
    "medians over the samples. Loop / bare and the overhead per step (loop ms − bare "
    "ms): medians over the pairs; the overhead's 95% interval is the median's "
    "distribution-free interval (from the order statistics, the sign test): the noise "
    "of the measurement, stated. Input CPU per batch: the input pipeline's CPU time to "
    "make one batch and put it on the device (the prefetch thread spends it beside the "
    "step, on the same cores). Loop, no prefetch: the loop's median steps/s with each "
    "batch made in the main thread (`prefetch=0`). Host CPU per step, loop / bare: the "
    "CPU time of the thread that runs the loop (its Python, dispatch and logging) and of "
    "the bare loop's (dispatch, and on a GPU the thread's wait for the device once the "
    "queue is full), medians over the samples. Dispatch CPU: the thread's CPU from "
    "calling one bare step to the call's return with the device idle before it (median "
    "of 5): the host's own work per step, the wait excluded. Added host CPU = the "
    "loop's and the bare loop's difference plus the input CPU per batch: the host work "
    "the loop adds to each step, "
    "on the cores the step computes on (a CPU-time measure, which other tenants of a "
    "shared machine disturb far less than they disturb wall time). MFU = 3 × forward "
    "FLOPs per token × tokens/s / the dtype's matmul peak of the same process (and, "
    "where the device has one, / its datasheet peak: 'MFU, datasheet'). A row whose "
    "JSON holds `executed_flops_per_token` counts each attention's FLOPs per function "
    "(a causal softmax its visible pairs, whichever kernel: "
    "`models.flops_per_token(per_function=True)`); older rows count what the kernel "
    "computes (a dense causal softmax all N² pairs).")


EARLIER = ("Rows of an earlier run on this device that the run above did not measure "
           "again (its own run, machine state and peak: compare them with the rows above "
           "only as figures of two runs):")


def page(res: dict) -> str:
  """The training-loop section of the benchmarks page: one block per measured section,
  each with its own run line (sections may come from separate runs, never mixed
  within one)."""
  run = next((res[k]["run"] for k in ("train", "generate", "decode", "bf16") if res.get(k)),
             None)
  if run is None:     # a file with no section yet (a run that only traced)
    return ""
  on = "the CPU" if run.get("backend", "cpu") == "cpu" else run.get("device_kind", "a GPU")
  L = [f"## Training loop and generation on {on} (scripts/benchmark_train.py)", ""]
  for tag, t in blocks(res.get("train")):
    L += ([EARLIER, ""] if tag else []) + [_run_line(t), "",
          "Matmul peak measured in the same process: "
          + "; ".join(f"{k} {timing.peak_text(v, 1e12, 'TFLOP/s', 2)}"
                      for k, v in t["peak"].items()) + ". "
          + ("The method is the one above." if tag else TRAIN_METHOD), ""]
    L += pages.table(
        ["variant", "dtype", "batch × pixels", "bare step", "loop steps/s", "bare steps/s",
         "loop / bare", "overhead per step", "its 95% interval", "pairs",
         "input CPU per batch", "host CPU per step, loop / bare", "dispatch CPU",
         "added host CPU",
         "loop, no prefetch", "tokens/s", "MFU", "MFU, datasheet"],
        [[r["variant"], r["dtype"], f"{r['batch']} × {r['pixels']}",
          f"{r['bare_step_ms']:.1f} ms", f"{r['loop_steps_per_s']:.3f}",
          f"{r['bare_steps_per_s']:.3f}", f"{r['ratio']:.3f}", f"{r['overhead_ms']:+.2f} ms",
          f"{r['overhead_ci_ms'][0]:+.2f} to {r['overhead_ci_ms'][1]:+.2f} ms "
          f"({100 * r['overhead_ci_coverage']:.0f}%)", len(r["pair_overheads_ms"]),
          f"{r['input_cpu_ms']:.2f} ms", f"{r['loop_host_ms']:.2f} / {r['bare_host_ms']:.2f} ms",
          f"{r['dispatch_ms']:.2f} ms" if "dispatch_ms" in r else "–",
          f"{r['extra_host_ms']:.2f} ms", f"{r['inline_steps_per_s']:.3f}",
          f"{r['tokens_per_s']:,.0f}", f"{100 * r['mfu']:.2f}%" if r["mfu"] is not None
          else "–", f"{100 * r['mfu_datasheet']:.2f}%" if r.get("mfu_datasheet") is not None
          else "–"] for r in t["rows"] if "error" not in r])
    L.append("")
    L += [f"{r['variant']} {r['dtype']} B={r['batch']}: {r['error']}." for r in t["rows"]
          if "error" in r]
    if t["run"].get("backend") == "cpu":
      L += [cpu_verdict([r for r in t["rows"] if "error" not in r]), ""]
  for tag, g in blocks(res.get("generate")):
    L += ([EARLIER, ""] if tag else []) + [_run_line(g), "",
          f"Generation of whole images ({g['pixels']} pixels) from an empty prompt, "
          "untrained model of the preset (speed does not depend on the weights), after a "
          "warm-up call:", ""]
    L += pages.table(["variant", "mode", "batch", "images/s", "ms per token step"],
                     [[r["variant"], f"{r['mode']} ({r['cache']})", r["batch"],
                       f"{r['images_per_s']:.2f}", f"{r['ms_per_token']:.3f}"]
                      for r in g["rows"]])
    L.append("")
  if run.get("backend", "cpu") != "cpu" and (res.get("train") or res.get("generate")):
    L += ["### Against the GPU targets", ""] + [f"- {x}" for x in gpu_verdict(res)] + [""]
  if res.get("decode"):
    d = res["decode"]
    L += [_run_line(d), "",
          f"KV-cache decode, one token (B={d['B']}, {d['H']} heads of {d['D']}, float32) "
          "against a context of N positions, per token inside a `lax.scan` of steps (the "
          "generation loop's form), with the cache written in place (attention/core/kv_cache.py). "
          "This supersedes the KV-cache rows of the decode table above, which were measured "
          "before that change (the scan then copied and transposed the whole cache every "
          "step).", ""]
    L += pages.table(["cache"] + [f"N={n}" for n in d["lens"]],
                     [[k] + [f"{r[str(n)] * 1e3:.3f} ms" if isinstance(r[str(n)], float)
                             else r[str(n)]["status"] for n in d["lens"]]
                      for k, r in d["seconds_per_token"].items()])
    L.append("")
  if res.get("bf16"):
    b = res["bf16"]
    L += [_run_line(b), "",
          f"bf16 against float32 on the small MNIST config (configs/mnist.py, "
          f"{b['float32']['steps']} steps, bits/dim on the whole test split): "
          f"{b['float32']['bits_per_dim']:.4f} (float32) vs "
          f"{b['bfloat16']['bits_per_dim']:.4f} (bfloat16), difference "
          f"{b['difference']:+.4f}; {b['float32']['seconds']:.0f} s vs "
          f"{b['bfloat16']['seconds']:.0f} s of training and evaluation.", ""]
  return "\n".join(L).rstrip("\n")
