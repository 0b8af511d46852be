"""The research loop's speed: train.py's loop against the bare step, MFU against the
machine's measured matmul peak, generation images/s, and bf16 against float32.

  python -m scripts.benchmark_train --preset=cpu [--sections=train,generate,decode,bf16]
      [--batches=4,16] [--variants=softmax,linear] [--dtypes=float32,bfloat16]
      [--image_size=8] [--n=40] [--rounds=12]

The CPU's loop-overhead target (loop >= 0.95x the bare step, <= 1 ms of overhead per
step) is measured at the paper's model over 8x8 images (64 pixels), where a step
takes tens of ms and 40 steps per round resolve a millisecond; over 784 pixels a CPU
step takes seconds, and the few steps a run can afford drown a millisecond in the
shared machine's noise:

  python -m scripts.benchmark_train --preset=cpu --sections=train --image_size=8 --n=40

Everything is measured in one process and written to
results/benchmarks/train_<device>.json (device = cpu, h100, ...) and to the
"Training loop" section of results/benchmarks/README.md (between its markers).

Sections (each written with its own machine, date and command; a later run of one
section replaces that section only)
  train     the matmul peak of this process first (a jitted square matmul, float32 at
            the default precision and bfloat16, TFLOP/s, best of several runs); then
            per (batch, variant, dtype) at the preset's model (default: the paper's
            MNIST model, 8 layers, d 256, 8 heads, FFN 1024, DMOL head), interleaved:
              bare  trainer.step.TrainStep over batches already on the device, a round
                    of n steps with no host sync ended by one block_until_ready;
              loop  train.train_and_evaluate as users run it (real input pipeline,
                    prefetch, logging) for 2 n steps with log_every = n: its second
                    interval's `recent_steps_per_s` (the first holds the setup);
            in the order bare, loop, bare, ..., loop, bare (`rounds` loop runs). Each
            loop interval pairs with the mean of the bare rounds around it, so the
            shared machine's drift cancels in the pair; loop / bare and the overhead
            per step (loop ms - bare ms) are medians over the pairs, the overhead with
            the median's distribution-free 95% interval (order statistics). Then the
            loop once more with prefetch=0 (each batch made in the main thread), to
            show what the thread costs; tokens/s and MFU = 3 x forward FLOPs per token
            x tokens/s / peak (the dtype's peak).
  generate  images/s of models.generate per decode mode and batch size (untrained
            model of the preset: speed does not depend on the weights), whole
            784-pixel images, after a warm-up call; the time per generated token.
  decode    seconds per KV-cache decode step inside a scan against the context
            length (scripts/benchmark.py's decode helpers), fp and int8 caches.
  bf16      the small 28×28 MNIST config (configs/mnist.py) trained twice, float32 and
            bfloat16: test bits/dim of each and the difference.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import statistics
import sys
import tempfile
import time

import jax
import jax.numpy as jnp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import input_pipeline  # noqa: E402
import parallel  # noqa: E402
import train  # noqa: E402
from configs import mnist  # noqa: E402
from models import flops_per_token, generate  # noqa: E402

PAPER = dict(d_model=256, num_heads=8, d_ff=1024, num_layers=8, num_mixtures=10)


@dataclasses.dataclass(frozen=True)
class Preset:
  model: dict             # ModelConfig overrides of configs/mnist.py
  image_size: int         # MNIST side (sequence = side²)
  batches: tuple          # train batch sizes
  variants: tuple         # attention variants
  dtypes: tuple           # compute dtypes
  n: int                  # timed steps per round
  rounds: int             # loop runs, interleaved with rounds + 1 bare rounds (pairs)
  gen: tuple              # ((variant, mode, cache_dtype), ...)
  gen_batches: tuple      # generation batch sizes
  gen_limit_s: float      # skip larger batches of a mode once one call takes longer
  peak_n: int             # matmul side for the peak
  bf16_steps: int         # demo-config steps of the bf16 comparison (0: its default)
  what: str


PRESETS = {
    "smoke": Preset(dict(d_model=16, num_heads=2, d_ff=32, num_layers=1, num_mixtures=2),
                    4, (2,), ("softmax",), ("float32",), 2, 2,
                    (("linear", "cache", None),), (1, 2), 30.0, 128, 4,
                    "tiny shapes: a test of the script, not a measurement"),
    "cpu": Preset(PAPER, 28, (4,), ("softmax", "linear"), ("float32",), 3, 12,
                  (("linear", "cache", None), ("softmax", "cache", None)),
                  (1, 16, 64, 256), 60.0, 2048, 0,
                  "the paper's MNIST model on the CPU: float32 (bf16 matmuls are "
                  "emulated on most CPUs)"),
    "gpu": Preset(PAPER, 28, (16, 64, 256), ("softmax", "linear", "flash", "sdpa"),
                  ("float32", "bfloat16"), 30, 8,
                  (("linear", "cache", None), ("softmax", "cache", None),
                   ("softmax", "recompute", None)),
                  (1, 16, 64, 256, 1024), 120.0, 8192, 0,
                  "the paper's MNIST model on a GPU, float32 (TF32 matmuls) and bf16"),
}


def device_name() -> str:
  d = jax.devices()[0]
  if d.platform == "cpu":
    return "cpu"
  kind = d.device_kind.lower()
  for k in ("h100", "h200", "a100", "l4", "v100", "t4"):
    if k in kind:
      return k
  return kind.replace(" ", "_")


def matmul_peak(n: int, dtype, runs: int = 5) -> float:
  """TFLOP/s of a jitted (n, n) @ (n, n) in `dtype` (float32 at the default matmul
  precision), best of `runs` calls of 4 chained products."""
  a = jax.random.normal(jax.random.key(0), (n, n), dtype)
  f = jax.jit(lambda a: ((a @ a) @ a) @ a @ a)
  jax.block_until_ready(f(a))
  best = min(_time(lambda: jax.block_until_ready(f(a))) for _ in range(runs))
  return 4 * 2 * n ** 3 / best / 1e12


def _time(fn) -> float:
  t = time.perf_counter()
  fn()
  return time.perf_counter() - t


def config(p: Preset, batch: int, variant: str, dtype: str, data_dir: str):
  c = mnist.get_config()
  c.model.update(p.model)
  c.image_size = p.image_size
  c.model.max_len = p.image_size ** 2
  c.attention, c.dtype, c.batch_size = variant, dtype, batch
  c.data_dir = data_dir
  c.progress = False
  c.eval_batches, c.eval_batch_size = 1, batch
  return c


class Bare:
  """trainer.step.TrainStep over n batches already on the device, built and compiled
  once; `rates(rounds)` times rounds of n steps with no host sync, each ended by one
  block_until_ready, and returns each round's steps/s."""

  def __init__(self, c, n: int):
    from flax import nnx
    self.c = c
    task = input_pipeline.create(c)
    mcfg = train.validate(c)
    self.mesh = parallel.make_mesh(c.get("mesh"))
    with self._ctx():
      model = train.make_model(c, mcfg)
      model.train()
      opt = nnx.Optimizer(model, train.make_optimizer(c), wrt=nnx.Param)
      self.step = train.TrainStep(model, opt, 0)
      make = lambda s: parallel.put_batch(task.train_batch(s), self.mesh)
      self.batches = [make(s) for s in range(n)]
      # the input pipeline's CPU time per batch (what the loop's prefetch thread
      # spends beside the step): n batches again, made warm, on this thread's clock
      t = time.thread_time()
      jax.block_until_ready([make(s) for s in range(n, 2 * n)])
      self.input_ms = (time.thread_time() - t) / n * 1e3
      self.step(self.batches[0])
      jax.block_until_ready(self.step.leaves)           # compiled and warm

  def _ctx(self):
    import contextlib
    stack = contextlib.ExitStack()
    stack.enter_context(parallel.use_mesh(self.mesh))
    stack.enter_context(train.matmul_precision(self.c.matmul_precision))
    return stack

  def rates(self, rounds: int) -> list[float]:
    out = []
    self.host_ms = []       # per round: this thread's CPU per step (the dispatch)
    with self._ctx():
      for _ in range(rounds):
        t, c = time.perf_counter(), time.thread_time()
        for b in self.batches:
          self.step(b)
        jax.block_until_ready(self.step.leaves)
        out.append(len(self.batches) / (time.perf_counter() - t))
        self.host_ms.append((time.thread_time() - c) / len(self.batches) * 1e3)
    return out


def loop_rates(c, n: int, intervals: int) -> tuple[list[float], list[float]]:
  """train.train_and_evaluate for (intervals + 1) n steps, logging every n: the
  steps/s and the loop thread's CPU ms per step of each interval after the first
  (which holds the compilation, or on a later call with the step already compiled,
  the run's setup and the prefetch queue's filling)."""
  c = c.copy_and_resolve_references()
  c.num_train_steps, c.log_every = (intervals + 1) * n, n
  c.eval_every = c.checkpoint_every = 10 ** 9
  with tempfile.TemporaryDirectory() as wd:
    train.train_and_evaluate(c, wd)
    recs = [json.loads(l) for l in open(os.path.join(wd, "metrics.jsonl"))]
  recs = [r for r in recs if "recent_steps_per_s" in r][1:]
  return ([r["recent_steps_per_s"] for r in recs],
          [r["host_cpu_ms_per_step"] for r in recs])


def median_interval(xs: list, level: float = 0.95) -> tuple[float, float, float]:
  """(lo, hi, coverage): the distribution-free confidence interval of the median of
  xs from its order statistics (the sign test): the widest-inset pair (x_(j),
  x_(k+1-j)) whose coverage 1 - 2 P(Binomial(k, 1/2) < j) is still >= level; with
  too few samples for that, (min, max) and its lower coverage."""
  x, k = sorted(xs), len(xs)
  cdf = lambda j: sum(math.comb(k, i) for i in range(j)) / 2 ** k   # P(X < j)
  j = 1
  while j + 1 <= (k + 1) // 2 and 1 - 2 * cdf(j + 1) >= level:
    j += 1
  return x[j - 1], x[k - j], 1 - 2 * cdf(j)


def paired(bare_rates: list, loop_rates_: list) -> tuple[list, list]:
  """Per loop interval i, run between bare rounds i and i + 1: (the loop's ms per
  step minus the mean of the two bare rounds' ms per step, the bare rounds' mean
  ms over the loop's ms, i.e. loop / bare in steps/s)."""
  over, ratio = [], []
  for i, l in enumerate(loop_rates_):
    b = (1e3 / bare_rates[i] + 1e3 / bare_rates[i + 1]) / 2
    over.append(1e3 / l - b)
    ratio.append(b / (1e3 / l))
  return over, ratio


def bench_train(p: Preset, args, peaks, log) -> list:
  rows = []
  for dtype in args.dtypes:
    for variant in args.variants:
      for B in args.batches:
        c = config(p, B, variant, dtype, args.data_dir)
        mcfg = train.validate(c)
        T = p.image_size ** 2
        fl = 3 * flops_per_token(mcfg, T)["total"]      # forward + backward
        # interleaved: bare round, loop run, bare round, loop run, ..., bare round.
        # Each loop interval is paired with the bare rounds just before and after it,
        # so that the shared machine's drift, which moves both alike, cancels in the
        # pair's difference; the overhead is the median of the pairs, with the
        # median's distribution-free 95% interval (the noise, stated)
        b = Bare(c, p.n)
        bares = b.rates(1)
        bare_host = list(b.host_ms)
        loops, loop_host = [], []
        for _ in range(p.rounds):
          l, h = loop_rates(c, p.n, 1)        # the step is compiled once (lru cache)
          loops += l
          loop_host += h
          bares += b.rates(1)
          bare_host += b.host_ms
        # the same loop with each batch made inline in the main thread (prefetch 0):
        # what the prefetch thread costs or saves
        inline = c.copy_and_resolve_references()
        inline.prefetch = 0
        inlines, _ = loop_rates(inline, p.n, p.rounds)
        input_ms = b.input_ms
        del b
        over, ratios = paired(bares, loops)
        lo, hi, cover = median_interval(over)
        loop, bare = statistics.median(loops), statistics.median(bares)
        peak = peaks.get(dtype)
        r = {"variant": variant, "dtype": dtype, "batch": B, "pixels": T,
             "tokens_per_step": B * T, "n": p.n, "rounds": p.rounds,
             "bare_steps_per_s": bare, "loop_steps_per_s": loop,
             "ratio": statistics.median(ratios), "bare_rounds": bares,
             "loop_intervals": loops, "pair_overheads_ms": over,
             "overhead_ms": statistics.median(over), "overhead_ci_ms": [lo, hi],
             "overhead_ci_coverage": cover,
             "input_cpu_ms": input_ms, "inline_intervals": inlines,
             # host CPU per step, medians over the samples: the main thread's (the
             # loop's Python and dispatch; the bare loop's dispatch) and, for the
             # loop, the prefetch thread's input_cpu_ms beside it
             "loop_host_ms": statistics.median(loop_host),
             "bare_host_ms": statistics.median(bare_host),
             "extra_host_ms": statistics.median(loop_host) - statistics.median(bare_host)
             + input_ms,
             "inline_steps_per_s": statistics.median(inlines),
             "bare_step_ms": 1e3 / bare,
             "tokens_per_s": loop * B * T, "train_flops_per_token": fl,
             "mfu": loop * B * T * fl / (peak * 1e12) if peak else None}
        rows.append(r)
        mfu = f"{100 * r['mfu']:.2f}%" if r["mfu"] is not None else "-"
        log(f"train {variant:8s} {dtype:8s} B={B:4d}: loop {loop:8.3f} steps/s, bare "
            f"{bare:8.3f}, ratio {r['ratio']:.3f}, overhead {r['overhead_ms']:+.2f} ms "
            f"[{lo:+.2f}, {hi:+.2f}], MFU {mfu}")
  return rows


def bench_generate(p: Preset, args, log) -> list:
  from flax import nnx
  from models import build
  rows = []
  side = p.image_size
  for variant, mode, cache in p.gen:
    c = config(p, 1, variant, "float32", args.data_dir)
    model = build(train.validate(c), rngs=nnx.Rngs(0))
    model.eval()
    for B in p.gen_batches:
      prompt = jnp.zeros((B, 0), jnp.int32)
      run = lambda: jax.block_until_ready(generate(model, prompt, steps=side * side,
                                                   key=jax.random.key(0), mode=mode,
                                                   cache_dtype=cache))
      run()
      dt = _time(run)
      r = {"variant": variant, "mode": mode, "cache": cache or "fp", "batch": B,
           "seconds": dt, "images_per_s": B / dt, "ms_per_token": dt / (side * side) * 1e3}
      rows.append(r)
      log(f"generate {variant:8s} {mode:9s} B={B:5d}: {r['images_per_s']:9.2f} images/s, "
          f"{r['ms_per_token']:.3f} ms per token step")
      if dt > p.gen_limit_s:
        log(f"  (over {p.gen_limit_s:.0f} s: larger batches of this mode not run)")
        break
  return rows


def bench_bf16(p: Preset, args, log) -> dict:
  """configs/mnist.py (the small 28×28 model) trained in float32 and in bfloat16: test bits/dim of each."""
  out = {}
  for dtype in ("float32", "bfloat16"):
    c = mnist.get_config()
    c.dtype, c.data_dir, c.progress = dtype, args.data_dir, False
    c.eval_batches = 0                                      # the whole test split
    if p.bf16_steps:
      c.num_train_steps = c.eval_every = c.checkpoint_every = p.bf16_steps
    with tempfile.TemporaryDirectory() as wd:
      t = time.perf_counter()
      m = train.train_and_evaluate(c, wd)
      out[dtype] = {"bits_per_dim": m["bits_per_dim"], "seconds": time.perf_counter() - t,
                    "steps": c.num_train_steps}
    log(f"bf16 demo: {dtype}: {m['bits_per_dim']:.4f} bits/dim")
  out["difference"] = out["bfloat16"]["bits_per_dim"] - out["float32"]["bits_per_dim"]
  return out


def bench_decode(args, log) -> dict:
  """Seconds per token of one KV-cache decode step inside a lax.scan (the way
  generation runs it), against the context length N, fp and int8 caches: the
  preset and helpers of scripts/benchmark.py's decode section (B=1, 8 heads of 64,
  float32, median of its runs), rerun for the in-place cache update."""
  from scripts import benchmark as B
  bp = B.PRESETS["smoke" if args.preset == "smoke" else "cpu"]
  modes = {"softmax, KV cache": ("softmax", None), "softmax, int8 KV cache": ("softmax", "int8")}
  saved = B.DECODE_MODES
  B.DECODE_MODES = modes
  try:
    res = B.decode(bp, limit_s=60.0, log=log)
  finally:
    B.DECODE_MODES = saved
  return {"lens": list(bp.decode_lens), "B": bp.B, "H": bp.H, "D": bp.D,
          "seconds_per_token": {k: {str(n): v for n, v in r.items()} for k, r in res.items()}}


BEGIN, END = "<!-- benchmark_train:begin -->", "<!-- benchmark_train:end -->"


def _run_line(run: dict) -> str:
  m = run["machine"]
  return (f"Measured on {m['device_kind']} ({m['backend']}, {m['device_count']} "
          f"device(s)), jax {m['jax_version']}, {m['date']}, preset `{run['preset']}` "
          f"({run['what']}), by `{run['command']}`.")


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


def page(res: dict) -> str:
  """The README section: one block per measured section, each with its own run line
  (sections may come from separate runs of the script, never mixed within one)."""
  L = [BEGIN, "## Training loop and generation (scripts/benchmark_train.py)", ""]
  if res.get("train"):
    t = res["train"]
    L += [_run_line(t), "",
          "Matmul peak measured in the same process: "
          + ", ".join(f"{k} {v:.2f} TFLOP/s" for k, v in t["peak"].items()) + ". "
          "The loop is `train.train_and_evaluate` (input pipeline, prefetch, logging); "
          "the bare step is the same jitted step over batches already on the device, "
          "with no host sync. The two are interleaved: a bare round, a loop run, a bare "
          "round, and so on, each of n steps (a loop run's interval after its first, "
          "which holds the setup). Each loop interval is paired with the mean of the "
          "bare rounds around it, so that a drift of the shared machine, which moves "
          "both alike, cancels in the pair. Steps/s: medians over the samples. Loop / "
          "bare and the overhead per step (loop ms − bare ms): medians over the pairs; "
          "the overhead's 95% interval is the median's distribution-free interval (from "
          "the order statistics, the sign test): the noise of the measurement, stated. "
          "Input CPU per batch: the input pipeline's CPU time to make one batch and put "
          "it on the device (the prefetch thread spends it beside the step, on the same "
          "cores). Loop, no prefetch: the loop's median steps/s with each batch made in "
          "the main thread (`prefetch=0`). Host CPU per step, loop / bare: the CPU time "
          "of the thread that runs the loop (its Python, dispatch and logging) and of "
          "the bare loop's (dispatch alone), medians over the samples; added host CPU = "
          "their difference plus the input CPU per batch: the host work the loop adds "
          "to each step, on the cores the step computes on (a CPU-time measure, which "
          "other tenants of a shared machine disturb far less than they disturb wall "
          "time). MFU = 3 × forward FLOPs per token × tokens/s / the dtype's matmul "
          "peak.", "",
          "| variant | dtype | batch × pixels | bare step | loop steps/s | bare steps/s | "
          "loop / bare | overhead per step | its 95% interval | pairs | input CPU per "
          "batch | host CPU per step, loop / bare | added host CPU | loop, no prefetch "
          "| tokens/s | MFU |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in t["rows"]:
      mfu = f"{100 * r['mfu']:.2f}%" if r["mfu"] is not None else "–"
      T = r.get("pixels", r["tokens_per_step"] // r["batch"])
      lo, hi = r["overhead_ci_ms"]
      L.append(f"| {r['variant']} | {r['dtype']} | {r['batch']} × {T} | "
               f"{r['bare_step_ms']:.1f} ms "
               f"| {r['loop_steps_per_s']:.3f} | {r['bare_steps_per_s']:.3f} | "
               f"{r['ratio']:.3f} | {r['overhead_ms']:+.2f} ms | "
               f"{lo:+.2f} to {hi:+.2f} ms ({100 * r['overhead_ci_coverage']:.0f}%) | "
               f"{len(r['pair_overheads_ms'])} | "
               f"{r['input_cpu_ms']:.2f} ms | "
               f"{r['loop_host_ms']:.2f} / {r['bare_host_ms']:.2f} ms | "
               f"{r['extra_host_ms']:.2f} ms | {r['inline_steps_per_s']:.3f} | "
               f"{r['tokens_per_s']:,.0f} | {mfu} |")
    L.append("")
    if t["machine"].get("backend") == "cpu":
      L += [cpu_verdict(t["rows"]), ""]
  if res.get("generate"):
    g = res["generate"]
    L += [_run_line(g), "",
          f"Generation of whole images ({g['pixels']} pixels) from an empty prompt, "
          "untrained model of the preset (speed does not depend on the weights), after a "
          "warm-up call:", "",
          "| variant | mode | batch | images/s | ms per token step |", "|---|---|---|---|---|"]
    for r in g["rows"]:
      L.append(f"| {r['variant']} | {r['mode']} ({r['cache']}) | {r['batch']} | "
               f"{r['images_per_s']:.2f} | {r['ms_per_token']:.3f} |")
    L.append("")
  if res.get("decode"):
    d = res["decode"]
    L += [_run_line(d), "",
          f"KV-cache decode, one token (B={d['B']}, {d['H']} heads of {d['D']}, float32) "
          "against a context of N positions, per token inside a `lax.scan` of steps (the "
          "generation loop's form), with the cache written in place (attention/decode.py). "
          "This supersedes the KV-cache rows of the decode table above, which were measured "
          "before that change (the scan then copied and transposed the whole cache every "
          "step).", "",
          "| cache | " + " | ".join(f"N={n}" for n in d["lens"]) + " |",
          "|---|" + "---|" * len(d["lens"])]
    for k, r in d["seconds_per_token"].items():
      cells = [f"{r[str(n)] * 1e3:.3f} ms" if isinstance(r[str(n)], float) else
               r[str(n)]["status"] for n in d["lens"]]
      L.append(f"| {k} | " + " | ".join(cells) + " |")
    L.append("")
  if res.get("bf16"):
    b = res["bf16"]
    L += [_run_line(b), "",
          f"bf16 against float32 on the small MNIST config (configs/mnist.py, {b['float32']['steps']}"
          f" steps, bits/dim on the whole test split): {b['float32']['bits_per_dim']:.4f} "
          f"(float32) vs {b['bfloat16']['bits_per_dim']:.4f} (bfloat16), difference "
          f"{b['difference']:+.4f}; {b['float32']['seconds']:.0f} s vs "
          f"{b['bfloat16']['seconds']:.0f} s of training and evaluation.", ""]
  return "\n".join(L + [END])


def write_page(path: str, section: str) -> None:
  text = open(path).read() if os.path.exists(path) else ""
  if BEGIN in text:
    text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END):]
  else:
    text = text.rstrip() + "\n\n" + section + "\n"
  with open(path, "w") as f:
    f.write(text)


def _public(command: str) -> str:
  """The command without its local paths (--data_dir, --out): what a reader reruns."""
  return " ".join(w for w in command.split()
                  if not w.startswith(("--data_dir", "--out")))


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--preset", default="cpu", choices=sorted(PRESETS))
  ap.add_argument("--sections", default="train,generate,decode,bf16")
  ap.add_argument("--batches", default=None)
  ap.add_argument("--variants", default=None)
  ap.add_argument("--dtypes", default=None)
  ap.add_argument("--image_size", type=int, default=None,
                  help="MNIST side of the train section (default: the preset's)")
  ap.add_argument("--n", type=int, default=None, help="timed steps per round")
  ap.add_argument("--rounds", type=int, default=None, help="rounds of n steps")
  ap.add_argument("--data_dir", default="")
  ap.add_argument("--out", default=os.path.join(ROOT, "results", "benchmarks"))
  args = ap.parse_args(argv)
  p = PRESETS[args.preset]
  p = dataclasses.replace(p, **{k: getattr(args, k) for k in ("image_size", "n", "rounds")
                                if getattr(args, k) is not None})
  args.batches = tuple(int(x) for x in args.batches.split(",")) if args.batches else p.batches
  args.variants = tuple(args.variants.split(",")) if args.variants else p.variants
  args.dtypes = tuple(args.dtypes.split(",")) if args.dtypes else p.dtypes
  sections = set(args.sections.split(","))
  log = lambda s: print(s, flush=True)
  run = {"preset": args.preset, "what": p.what,
         "command": _public("python -m scripts.benchmark_train " + " ".join(
             argv if argv is not None else sys.argv[1:])),
         "machine": {**train.runtime_info(), "date": datetime.date.today().isoformat()}}
  os.makedirs(args.out, exist_ok=True)
  path = os.path.join(args.out, f"train_{device_name()}.json")
  # sections of earlier runs on this device are kept; each records its own run
  res = json.load(open(path)) if os.path.exists(path) else {}
  for sec in res.values():
    sec["command"] = _public(sec.get("command", ""))
  if "train" in sections:
    peak = {"float32": matmul_peak(p.peak_n, jnp.float32),
            "bfloat16": matmul_peak(p.peak_n, jnp.bfloat16)}
    log("matmul peak: " + ", ".join(f"{k} {v:.2f} TFLOP/s" for k, v in peak.items()))
    res["train"] = {**run, "peak": peak, "rows": bench_train(p, args, peak, log)}
  if "generate" in sections:
    res["generate"] = {**run, "pixels": p.image_size ** 2,
                       "rows": bench_generate(p, args, log)}
  if "decode" in sections:
    res["decode"] = {**run, **bench_decode(args, log)}
  if "bf16" in sections:
    res["bf16"] = {**run, **bench_bf16(p, args, log)}
  with open(path, "w") as f:
    json.dump(res, f, indent=1)
  write_page(os.path.join(args.out, "README.md"), page(res))
  log(f"wrote {path} and the README section")
  return res


if __name__ == "__main__":
  main()
