"""The research loop's speed: train.py's loop against the bare step, MFU against the
matmul peak, generation images/s, KV-cache decode, and bf16 against float32. Its
figures go to results/benchmarks/train_<device>.json; studies.bench.train_page
writes its section of the benchmarks page (studies.bench.page composes the page).

Sections (each stored with its own run record; a later run of one section replaces
that section only, and keeps, under `earlier`, the rows of earlier runs it did not
measure again, each block with its own run record: a run cut short by a time limit
loses no figure measured before):
  train     the matmul peak of this process first (`studies.core.timing.matmul_peak`,
            float32 and bfloat16); then per (batch, variant, dtype) at the preset's
            model (default: the paper's MNIST model, 8 layers, d 256, 8 heads, FFN
            1024, DMOL head), interleaved:
              bare  trainer.step.TrainStep over batches already on the device, a round
                    of n steps with no host sync ended by one block_until_ready;
              loop  trainer.train_and_evaluate as users run it (real input pipeline,
                    prefetch, logging) for 2 n steps with log_every = n: its second
                    interval's `recent_steps_per_s` (the first holds the setup);
            in the order bare, loop, bare, ..., loop, bare (`rounds` loop runs). Each
            loop interval pairs with the mean of the bare rounds around it, so the
            shared machine's drift cancels in the pair; loop / bare and the overhead
            per step (loop ms - bare ms) are medians over the pairs, the overhead with
            the median's distribution-free 95% interval (order statistics). Then the
            loop once more with prefetch=0 (each batch made in the main thread), to
            show what the thread costs; tokens/s and MFU = 3 x forward FLOPs per token
            x tokens/s / peak (the dtype's matmul peak measured in the process, and
            `mfu_datasheet` against the device's datasheet peak where known), the
            FLOPs counted per function (`models.flops_per_token(per_function=True)`:
            a causal softmax is charged its visible pairs whichever kernel runs it).
  generate  images/s of models.generate per decode mode and batch size (untrained
            model of the preset: speed does not depend on the weights), whole
            images, after a warm-up call; the time per generated token.
  decode    seconds per KV-cache decode step inside a scan against the context
            length (studies.bench.benchmark's decode, its cpu shapes), fp and int8 caches.
  bf16      the small 28×28 MNIST config (configs/mnist.py) trained twice, float32 and
            bfloat16: test bits/dim of each and the difference.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp

from studies.bench import benchmark
from studies.core import pages, runs, timing

PAPER = dict(d_model=256, num_heads=8, d_ff=1024, num_layers=8, num_mixtures=10)
SECTIONS = ("train", "generate", "decode", "bf16")


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


# The presets of this study, in one place.
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




def config(p: Preset, batch: int, variant: str, dtype: str, data_dir: str):
  """configs/mnist.py at the preset's model and image size, one (batch, variant, dtype)."""
  from configs import mnist
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
    from data import pipeline
    from trainer import parallel
    import trainer
    self.c = c
    task = pipeline.create(c)
    mcfg = trainer.validate(c)
    self.mesh = parallel.make_mesh(c.get("mesh"))
    with self._ctx():
      model = trainer.make_model(c, mcfg)
      model.train()
      opt = nnx.Optimizer(model, trainer.make_optimizer(c), wrt=nnx.Param)
      self.step = trainer.TrainStep(model, opt, 0)
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
    from trainer import parallel
    import trainer
    stack = contextlib.ExitStack()
    stack.enter_context(parallel.use_mesh(self.mesh))
    stack.enter_context(trainer.matmul_precision(self.c.matmul_precision))
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

  def dispatch_ms(self, k: int = 5) -> float:
    """This thread's CPU ms from calling one step to the call's return, the device idle
    before it (the median of k): the host's own work per step (Python, dispatch and
    any device loop whose trips the host decides), without the wait for the device
    that a round's CPU per step (`host_ms`) also holds once the queue is full: on an
    H100 on 2026-11-27 that was 44 ms of sdpa's 58 ms step at batch 256, against
    2.9 ms at batch 16, for the same program."""
    ts = []
    with self._ctx():
      for b in self.batches[:k]:
        jax.block_until_ready(self.step.leaves)
        c = time.thread_time()
        self.step(b)
        ts.append((time.thread_time() - c) * 1e3)
      jax.block_until_ready(self.step.leaves)
    return statistics.median(ts)


def loop_rates(c, n: int, intervals: int) -> tuple[list[float], list[float]]:
  """trainer.train_and_evaluate for (intervals + 1) n steps, logging every n: the
  steps/s and the loop thread's CPU ms per step of each interval after the first
  (which holds the compilation, or on a later call with the step already compiled,
  the run's setup and the prefetch queue's filling)."""
  import trainer
  c = c.copy_and_resolve_references()
  c.num_train_steps, c.log_every = (intervals + 1) * n, n
  c.eval_every = c.checkpoint_every = 10 ** 9
  with tempfile.TemporaryDirectory() as wd:
    trainer.train_and_evaluate(c, wd)
    recs = runs.records_with(runs.read_metrics(wd), "recent_steps_per_s")[1:]
  return ([r["recent_steps_per_s"] for r in recs],
          [r["host_cpu_ms_per_step"] for r in recs])


def _train_row(p: Preset, c, variant, dtype, B, T, fl, peak) -> dict:
  """One (dtype, variant, batch) row of bench_train: the interleaved measurement."""
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
  input_ms, dispatch = b.input_ms, b.dispatch_ms()
  del b
  over, ratios = timing.paired(bares, loops)
  lo, hi, cover = timing.median_interval(over)
  loop, bare = statistics.median(loops), statistics.median(bares)
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
       "dispatch_ms": dispatch,          # one step's call from an idle device: the host's work
       "extra_host_ms": statistics.median(loop_host) - statistics.median(bare_host)
       + input_ms,
       "inline_steps_per_s": statistics.median(inlines),
       "bare_step_ms": 1e3 / bare,
       "tokens_per_s": loop * B * T, "train_flops_per_token": fl,
       "mfu": loop * B * T * fl / peak["flop_per_s"] if peak else None}
  return r


def bench_train(p: Preset, batches, variants, dtypes, data_dir, peaks, log,
                on_row=lambda rows: None) -> list:
  """One row per (dtype, variant, batch): the interleaved loop/bare measurement.
  `on_row(rows)` is called after each row (the caller saves what is done, so a run
  stopped at a time limit keeps its finished rows)."""
  import trainer
  from models import flops_per_token
  rows = []
  for dtype in dtypes:
    for variant in variants:
      for B in batches:
        c = config(p, B, variant, dtype, data_dir)
        mcfg = trainer.validate(c)
        T = p.image_size ** 2
        # forward + backward, the function's count: one per function, whichever kernel
        fl = 3 * flops_per_token(mcfg, T, per_function=True)["total"]
        try:
          r = _train_row(p, c, variant, dtype, B, T, fl, peaks.get(dtype))
          r["executed_flops_per_token"] = 3 * flops_per_token(mcfg, T)["total"]
          sheet = timing.datasheet_peak(dtype)
          r["mfu_datasheet"] = r["tokens_per_s"] * fl / sheet if sheet else None
        except jax.errors.JaxRuntimeError as e:   # recorded, and the next rows still run
          if "RESOURCE_EXHAUSTED" not in str(e):
            raise
          rows.append({"variant": variant, "dtype": dtype, "batch": B, "pixels": T,
                       "error": "out of memory: " + str(e).splitlines()[0][:200]})
          log(f"train {variant:8s} {dtype:8s} B={B:4d}: {rows[-1]['error']}")
          on_row(rows)
          continue
        rows.append(r)
        mfu = f"{100 * r['mfu']:.2f}%" if r["mfu"] is not None else "-"
        lo, hi = r["overhead_ci_ms"]
        log(f"train {variant:8s} {dtype:8s} B={B:4d}: loop {r['loop_steps_per_s']:8.3f} "
            f"steps/s, bare {r['bare_steps_per_s']:8.3f}, ratio {r['ratio']:.3f}, "
            f"overhead {r['overhead_ms']:+.2f} ms [{lo:+.2f}, {hi:+.2f}], MFU {mfu}")
        on_row(rows)
  return rows


def bench_generate(p: Preset, data_dir, log, on_row=lambda rows: None, unroll=1) -> list:
  """images/s of each of the preset's decode modes per batch size, whole images;
  `on_row(rows)` after each row, as in bench_train; unroll: generate's."""
  from flax import nnx
  import trainer
  from models import build, generate
  rows = []
  side = p.image_size
  for variant, mode, cache in p.gen:
    c = config(p, 1, variant, "float32", data_dir)
    model = build(trainer.validate(c), rngs=nnx.Rngs(0))
    model.eval()
    for B in p.gen_batches:
      prompt = jnp.zeros((B, 0), jnp.int32)
      _, dt = timing.timed(lambda: generate(model, prompt, steps=side * side,
                                            key=jax.random.key(0), mode=mode,
                                            cache_dtype=cache, unroll=unroll))
      r = {"variant": variant, "mode": mode, "cache": cache or "fp", "batch": B,
           "seconds": dt, "images_per_s": B / dt, "ms_per_token": dt / (side * side) * 1e3}
      rows.append(r)
      on_row(rows)
      log(f"generate {variant:8s} {mode:9s} B={B:5d}: {r['images_per_s']:9.2f} images/s, "
          f"{r['ms_per_token']:.3f} ms per token step")
      if dt > p.gen_limit_s:
        log(f"  (over {p.gen_limit_s:.0f} s: larger batches of this mode not run)")
        break
  return rows


def bench_bf16(p: Preset, data_dir, log) -> dict:
  """configs/mnist.py (the small 28×28 model) trained in float32 and in bfloat16: test
  bits/dim of each."""
  import trainer
  from configs import mnist
  out = {}
  for dtype in ("float32", "bfloat16"):
    c = mnist.get_config()
    c.dtype, c.data_dir, c.progress = dtype, data_dir, False
    c.eval_batches = 0                                      # the whole test split
    if p.bf16_steps:
      c.num_train_steps = c.eval_every = c.checkpoint_every = p.bf16_steps
    with tempfile.TemporaryDirectory() as wd:
      t = time.perf_counter()
      m = trainer.train_and_evaluate(c, wd)
      out[dtype] = {"bits_per_dim": m["bits_per_dim"], "seconds": time.perf_counter() - t,
                    "steps": c.num_train_steps}
    log(f"bf16 demo: {dtype}: {m['bits_per_dim']:.4f} bits/dim")
  out["difference"] = out["bfloat16"]["bits_per_dim"] - out["float32"]["bits_per_dim"]
  return out


# The KV-cache decode modes this study times again (the cache written in place).
DECODE_MODES = {"softmax, KV cache": ("softmax", None),
                "softmax, int8 KV cache": ("softmax", "int8")}


def bench_decode(preset_name, log) -> dict:
  """Seconds per token of one KV-cache decode step inside a lax.scan (the way
  generation runs it), against the context length N, fp and int8 caches: the
  decode of studies.bench.benchmark at its preset's shapes (B=1, 8 heads of 64, float32,
  median of its runs)."""
  bp = benchmark.PRESETS["smoke" if preset_name == "smoke" else "cpu"]
  res = benchmark.decode(bp, limit_s=60.0, log=log, modes=DECODE_MODES)
  return {"lens": list(bp.decode_lens), "B": bp.B, "H": bp.H, "D": bp.D,
          "seconds_per_token": {k: {str(n): v for n, v in r.items()} for k, r in res.items()}}


# What makes two rows of a section the same measurement (a later run's row replaces an
# earlier run's row of the same key; the earlier run's other rows are kept).
ROW_KEY = {"train": lambda r: (r["variant"], r["dtype"], r["batch"]),
           "generate": lambda r: (r["variant"], r["mode"], r["cache"], r["batch"])}


def carried(old: dict | None, rows: list, key) -> list[dict]:
  """The blocks of earlier runs to keep beside a new run's `rows`: `old` (the section
  the new run replaces) and the blocks it kept itself, newest first, each cut to the
  rows whose `key` neither `rows` nor a newer block has; empty blocks are dropped.
  Each block keeps its own run record (and `peak`, `partial`): rows of different runs
  are never mixed in one block."""
  if not old:
    return []
  have = {key(r) for r in rows}
  out = []
  for block in [{k: v for k, v in old.items() if k != "earlier"}] + old.get("earlier", []):
    keep = [r for r in block.get("rows", []) if key(r) not in have]
    if keep:
      out.append({**block, "rows": keep})
      have |= {key(r) for r in keep}
  return out


def blocks(sec: dict | None) -> list[tuple[str, dict]]:
  """(tag, block) for a section and the earlier runs' blocks it keeps: tag "" for the
  section's own run, " (earlier run, DATE)" for the others, to print after a figure."""
  if not sec:
    return []
  return [("", sec)] + [(f" (earlier run, {b['run'].get('date', 'undated')})", b)
                        for b in sec.get("earlier", [])]


def run(p: Preset, preset_name, sections, out, command, *, batches=None, variants=None,
        dtypes=None, data_dir="", log=print) -> dict:
  """Measures `sections` and stores them in <out>/train_<device>.json beside the
  sections of earlier runs on this device (each section keeps its own run record);
  returns the file's contents."""
  run_rec = pages.run_record(command, preset_name)
  path = os.path.join(out, f"train_{timing.device_name()}.json")
  res = pages.read_json(path, {})
  old = {name: res.get(name) for name in ROW_KEY}

  def sec(name=None, rows=None, partial=False, **kw):
    """A section of this run; for `name` in ROW_KEY, with the earlier runs' rows that
    `rows` does not measure again."""
    s = {"run": run_rec, "what": p.what, **kw}
    if rows is not None:
      s["rows"] = rows
      if partial:
        s["partial"] = True
      if earlier := carried(old.get(name), rows, ROW_KEY[name]):
        s["earlier"] = earlier
    return s

  def saver(name, **kw):
    """on_row for section `name`: the section so far, written at once."""
    def save(rows):
      res[name] = sec(name, rows, partial=True, **kw)
      pages.write_json(path, res)
    return save

  if "generate" in sections:
    kw = dict(pixels=p.image_size ** 2)
    res["generate"] = sec("generate", bench_generate(p, data_dir, log,
                                                     saver("generate", **kw)), **kw)
    pages.write_json(path, res)
  if "train" in sections:
    peak = {"float32": timing.matmul_peak(p.peak_n, jnp.float32),
            "bfloat16": timing.matmul_peak(p.peak_n, jnp.bfloat16)}
    log("matmul peak: " + ", ".join(f"{k} {timing.peak_text(v)}" for k, v in peak.items()))
    res["train"] = sec("train", bench_train(
        p, batches or p.batches, variants or p.variants, dtypes or p.dtypes, data_dir,
        peak, log, saver("train", peak=peak)), peak=peak)
    pages.write_json(path, res)
  if "decode" in sections:
    res["decode"] = sec(**bench_decode(preset_name, log))
    pages.write_json(path, res)
  if "bf16" in sections:
    res["bf16"] = sec(**bench_bf16(p, data_dir, log))
  pages.write_json(path, res)
  return res
