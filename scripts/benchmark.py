"""Speed and memory of every attention variant, decode latency, and the speed targets.

  python -m scripts.benchmark [--preset=cpu|smoke] [--out=results/benchmarks]
                              [--sections=sweep,decode,targets,generation]
                              [--variants=softmax,flash,...] [--case_limit_s=60]
  python -m scripts.benchmark --page_only [--out=...]   # rewrite README.md from the JSONs

Sections, each written to <out>/<section>.json as soon as it is done:
  sweep       every registered variant (and `jax.nn.dot_product_attention`, xla), N in
              the preset's lengths: forward and forward+backward (gradient of ½‖out‖²
              w.r.t. q, k, v) seconds, the median of
              `runs` timed runs after a warm-up, with `block_until_ready`; XLA's
              memory plan (`compiled.memory_analysis()`: arguments, outputs,
              temporaries); the process RSS growth during the runs; FLOP/s from
              `attention.cost` and its fraction of the matmul peak. Causal where the
              variant supports it (the decoder case), else not. A case is not run, and
              is recorded as such, when XLA's plan exceeds the memory budget ("oom")
              or when its predicted time (the previous length's time scaled by the
              cost model's FLOPs) or its warm-up run exceeds the case time limit
              ("time limit"). Log-log slopes of time against N per variant.
  decode      per-token latency of one decode step against context length N: softmax
              recompute (the causal forward over all N positions, what a model
              without a cache pays per token), softmax with a KV cache, with an int8 KV
              cache, and linear in RNN form; each the mean over a `lax.scan` of
              `decode_steps` tokens from a state prefilled to N.
  targets     the issue's CPU targets (a)-(e), each a ratio taken in this process;
              timings that are compared are interleaved round by round, so that the
              drift of a shared machine hits both sides alike.
  generation  MNIST image generation at the paper's model size (8 layers, d 256,
              8 heads, FFN 1024) and batch 16: linear in RNN form against softmax
              in recompute mode (target (e)).

The matmul peak is the median FLOP/s of a square fp32 matmul, measured at the start
and end of the run and before the targets; the highest of those is the peak used,
so fractions are conservative. Every number on the page comes from one run of this
script; the page states the machine, preset, command and date.
"""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import datetime
import json
import math
import os
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np

import attention
import attention.decode

OUT = "results/benchmarks"
GiB = 2 ** 30
XLA_REF = "dot_product_attention (xla)"   # the sweep's name for jax.nn's reference


@dataclasses.dataclass(frozen=True)
class Preset:
  B: int                  # batch of every attention call
  H: int                  # heads (MHA)
  D: int                  # head dim (= value dim)
  lens: tuple             # sweep lengths N
  decode_lens: tuple      # decode context lengths N
  decode_steps: int       # tokens per timed decode scan (KV caches)
  rnn_decode_steps: int   # tokens per timed scan of an O(1) state: steps of a few µs
                          # need many, so that the call's fixed cost is amortised
  runs: int               # timed runs per case (the median is reported)
  case_limit_s: float     # warm-up + runs of one case may take at most this long
  mem_fraction: float     # XLA's plan may use at most this fraction of the RAM
  target_N: int           # target (a)'s length
  causal_N: int           # a longer length for (a)'s causal speedup (smaller diagonal)
  mem_N: int              # target (b)'s length
  slope_range: tuple      # (lo, hi) lengths of the fitted slopes
  gen_model: tuple        # generation model fields (configs/mnist.py model overrides)
  gen_batch: int          # images per generation call
  gen_side: int           # image side (28: 784 pixels)
  recompute_tokens: int   # tokens timed in recompute mode (each costs the same)
  what: str
  peak_n: int = 2048      # side of the matmul that measures the machine's peak


PRESETS = {
    "smoke": Preset(
        B=1, H=2, D=16, lens=(64, 128), decode_lens=(64, 128), decode_steps=4,
        rnn_decode_steps=8, runs=5, peak_n=256,
        case_limit_s=30.0, mem_fraction=0.5, target_N=128, causal_N=256, mem_N=256,
        slope_range=(64, 128),
        gen_model=(("d_model", 16), ("num_heads", 2), ("d_ff", 32), ("num_layers", 1),
                   ("max_len", 49)),
        gen_batch=2, gen_side=7, recompute_tokens=2,
        what="tiny shapes: a test of the script, not a measurement"),
    "cpu": Preset(
        B=1, H=8, D=64, lens=(256, 512, 1024, 2048, 4096, 8192, 16384, 32768),
        decode_lens=(256, 1024, 4096, 16384), decode_steps=32, rnn_decode_steps=1024,
        runs=5,
        case_limit_s=40.0, mem_fraction=0.6, target_N=4096, causal_N=16384, mem_N=32768,
        slope_range=(1024, 32768),
        gen_model=(("d_model", 256), ("num_heads", 8), ("d_ff", 1024), ("num_layers", 8)),
        gen_batch=16, gen_side=28, recompute_tokens=3,
        what="the issue's shapes: B=1, 8 heads, head dim 64, float32, N = 256 ... 32768"),
}

# Variants whose CPU timing would measure something else than the algorithm.
SKIP_ON_CPU = {"flash_pallas": "Pallas interpret mode on CPU runs every grid step as a "
                               "separate XLA op: it measures the interpreter, not the "
                               "kernel (timed on a GPU by the GPU benchmark)"}


# ---- measuring ------------------------------------------------------------------------

def _rss():
  """Resident set size of this process in bytes (Linux), else 0."""
  try:
    with open("/proc/self/statm") as f:
      return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
  except (OSError, ValueError):
    return 0


def _trim():
  """Returns freed heap to the OS, so the next RSS growth is this case's own."""
  try:
    ctypes.CDLL("libc.so.6").malloc_trim(0)
  except (OSError, AttributeError):
    pass


def ram_bytes():
  try:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  except (ValueError, OSError):
    return 16 * GiB


class RssPeak:
  """Samples RSS every 5 ms in a thread; .growth is the peak above the start."""

  def __enter__(self):
    self.base = self.peak = _rss()
    self._stop = threading.Event()
    self._t = threading.Thread(target=self._poll, daemon=True)
    self._t.start()
    return self

  def _poll(self):
    while not self._stop.wait(0.005):
      self.peak = max(self.peak, _rss())

  def __exit__(self, *exc):
    self._stop.set()
    self._t.join()
    self.peak = max(self.peak, _rss())
    self.growth = self.peak - self.base


def run_times(f, args, runs):
  """Seconds of `runs` calls of f(*args), each to `block_until_ready`."""
  ts = []
  for _ in range(runs):
    t = time.perf_counter()
    jax.block_until_ready(f(*args))
    ts.append(time.perf_counter() - t)
  return ts


def interleaved(fns: dict, args: dict, rounds: int) -> dict:
  """Median seconds of each fn, timed once per round in turn (after one warm-up each),
  so slow phases of a shared machine fall on every fn alike."""
  for k, f in fns.items():
    jax.block_until_ready(f(*args[k]))
  ts = {k: [] for k in fns}
  for _ in range(rounds):
    for k, f in fns.items():
      ts[k] += run_times(f, args[k], 1)
  return {k: float(np.median(v)) for k, v in ts.items()}


def matmul_peak(n=2048, runs=7, dtype=jnp.float32):
  """Median FLOP/s of an (n, n) @ (n, n) matmul: this machine's practical peak."""
  a = jax.random.normal(jax.random.key(0), (n, n), dtype)
  f = jax.jit(lambda a: a @ a)
  jax.block_until_ready(f(a))
  return 2 * n ** 3 / float(np.median(run_times(f, (a,), runs)))


def slope(points: dict, lo=0, hi=math.inf) -> float:
  """Least-squares slope p of log t = p log N + c over lengths lo <= N <= hi (nan if
  fewer than two measured points)."""
  pts = sorted((int(n), t) for n, t in points.items() if lo <= int(n) <= hi and t)
  if len(pts) < 2:
    return float("nan")
  x, y = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
  return float(np.polyfit(x, y, 1)[0])


# ---- the sweep ------------------------------------------------------------------------

def case_fns(name, p: Preset, N, causal):
  """(forward, forward+backward) jitted functions of (q, k, v) for variant `name`."""
  if name == XLA_REF:
    fn = lambda q, k, v, causal=False: jax.nn.dot_product_attention(
        q, k, v, is_causal=causal, implementation="xla")
    kw = {}
  else:
    var = attention.variant(name)
    fn = var.fn
    kw = {n: s.init(jax.random.key(3), s.shape(p.H, p.D, N), jnp.float32)
          for n, s in var.params.items()}
    kw.update({n: jax.random.normal(jax.random.key(4), shape)      # per-token inputs
               for n, shape in var.input_shapes(p.B, N, p.H, p.H, p.D).items()})
  fwd = jax.jit(lambda q, k, v: fn(q, k, v, causal=causal, **kw))
  # the cotangent is the output itself: every element gets its own, and no (B, N, H,
  # D) constant is baked into the program (XLA would constant-fold it)
  loss = lambda q, k, v: 0.5 * jnp.sum(jnp.square(fn(q, k, v, causal=causal, **kw)))
  bwd = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
  return fwd, bwd


def flops(name, p: Preset, N, causal, mode):
  """Cost-model FLOPs (the reference's are softmax's: the same computation)."""
  c = attention.cost("softmax" if name == XLA_REF else name, batch=p.B, q_len=N,
                     num_heads=p.H, head_dim=p.D, causal=causal, mode=mode)
  return c.flops


def measure_case(fn, args, p: Preset, budget_bytes, limit_s, predicted_s):
  """One (variant, mode, N) measurement, or the reason it was not run."""
  if predicted_s is not None and predicted_s * (p.runs + 1) > limit_s:
    return dict(status="time limit", predicted_s=predicted_s,
                why=f"predicted {predicted_s:.1f} s per run x {p.runs + 1} runs > "
                    f"{limit_s:.0f} s")
  t = time.perf_counter()
  compiled = fn.lower(*args).compile()
  compile_s = time.perf_counter() - t
  m = compiled.memory_analysis()
  plan = dict(argument_bytes=int(m.argument_size_in_bytes),
              output_bytes=int(m.output_size_in_bytes),
              temp_bytes=int(m.temp_size_in_bytes))
  total = plan["argument_bytes"] + plan["output_bytes"] + plan["temp_bytes"]
  if total > budget_bytes:
    return dict(status="oom", memory=plan,
                why=f"XLA plans {total / GiB:.1f} GiB > budget {budget_bytes / GiB:.1f} GiB")
  _trim()
  try:
    with RssPeak() as rss:
      t = time.perf_counter()
      jax.block_until_ready(compiled(*args))
      warm = time.perf_counter() - t
      if warm * p.runs > limit_s:
        return dict(status="time limit", warmup_s=warm, memory=plan,
                    why=f"one run took {warm:.1f} s; {p.runs} more > {limit_s:.0f} s")
      ts = run_times(compiled, args, p.runs)
  except Exception as e:  # XlaRuntimeError RESOURCE_EXHAUSTED: record, do not die
    if "RESOURCE_EXHAUSTED" in str(e) or "memory" in str(e).lower():
      return dict(status="oom", memory=plan, why=str(e).splitlines()[0][:200])
    raise
  return dict(status="ok", seconds=float(np.median(ts)), times=[float(x) for x in ts],
              compile_s=compile_s, memory=plan, rss_growth_bytes=int(rss.growth))


def sweep(p: Preset, names, peak, limit_s, log=print) -> dict:
  """{name: {"causal": bool, "fwd"|"fwd_bwd": {N: case}}} over the preset's lengths."""
  budget = p.mem_fraction * ram_bytes()
  res = {}
  for name in names:
    if jax.default_backend() == "cpu" and name in SKIP_ON_CPU:
      res[name] = dict(skipped=SKIP_ON_CPU[name])
      log(f"{name}: skipped ({SKIP_ON_CPU[name]})")
      continue
    causal = True if name == XLA_REF else attention.variant(name).causal
    res[name] = dict(causal=causal)
    for mode in ("fwd", "fwd_bwd"):
      cases, last, stop = {}, None, None
      for N in p.lens:
        if stop:
          cases[N] = dict(status=stop["status"], why=f"after N={stop['N']}: {stop['why']}")
          continue
        q, k, v = jax.random.normal(jax.random.key(N), (3, p.B, N, p.H, p.D), jnp.float32)
        fwd, bwd = case_fns(name, p, N, causal)
        pred = None
        if last is not None:
          pred = last[1] * flops(name, p, N, causal, mode) / flops(name, p, last[0], causal,
                                                                    mode)
        c = measure_case(fwd if mode == "fwd" else bwd, (q, k, v), p, budget, limit_s, pred)
        if c["status"] == "ok":
          c["flops"] = flops(name, p, N, causal, mode)
          c["flop_per_s"] = c["flops"] / c["seconds"]
          c["of_peak"] = c["flop_per_s"] / peak
          last = (N, c["seconds"])
        else:
          stop = dict(c, N=N)
        cases[N] = c
        log(f"{name:28s} {mode:7s} N={N:6d} " + (
            f"{c['seconds'] * 1e3:10.2f} ms  {c['of_peak'] * 100:5.1f}% of peak  "
            f"temp {c['memory']['temp_bytes'] / 2 ** 20:9.1f} MiB"
            if c["status"] == "ok" else f"{c['status']}: {c['why']}"))
        del q, k, v
      res[name][mode] = cases
      pts = {N: c["seconds"] for N, c in cases.items() if c["status"] == "ok"}
      res[name][mode + "_slope"] = slope(pts, *p.slope_range)
  return res


# ---- decode ---------------------------------------------------------------------------

DECODE_MODES = {  # label: (variant, cache_dtype); None = recompute
    "softmax, recompute": ("softmax", "recompute"),
    "softmax, KV cache": ("softmax", None),
    "softmax, int8 KV cache": ("softmax", "int8"),
    "linear, RNN form": ("linear", None),
}


def decode_state(name, cache, p: Preset, N, cap):
  """A decode state of capacity `cap` holding N positions of random keys and values.

  A KV cache is filled directly (its contents do not change a step's time; building
  it by a chunked prefill would cost O(N²) per timed run); linear's (S, Z) is
  prefilled by `decode_step` over the N positions, which is O(N)."""
  key = jax.random.key(N)
  k, v = jax.random.normal(key, (2, p.B, cap, p.H, p.D), jnp.float32)
  if attention.variant(name).decode_impl is attention.decode.KV_CACHE:
    kh, vh = (jnp.swapaxes(x, 1, 2) for x in (k, v))   # the cache is head-major
    ks = vs = None
    if cache == "int8":
      (kh, ks), (vh, vs) = attention.quantize_int8(kh), attention.quantize_int8(vh)
    return attention.KVCache(kh, vh, ks, vs, jnp.int32(N), name)
  st = attention.init_decode_state(name, batch=p.B, max_len=cap, num_kv_heads=p.H,
                                   head_dim=p.D, cache_dtype=cache)
  return jax.jit(attention.decode_step)(st, k[:, :N], k[:, :N], v[:, :N])[1]


def decode_steps_fn(S):
  """jit(state, q, k, v) -> (state, outputs) of S single-token decode steps in one scan;
  the state is donated, so the cache is updated in place as in a generation loop."""
  def run(st, q, k, v):
    def body(st, x):
      out, st = attention.decode_step(st, *(a[:, None] for a in x))
      return st, out
    # the final state is returned, so the donated one is updated in place
    return jax.lax.scan(body, st, (jnp.moveaxis(q, 1, 0), jnp.moveaxis(k, 1, 0),
                                   jnp.moveaxis(v, 1, 0)))
  return jax.jit(run, donate_argnums=0)


def decode(p: Preset, limit_s, log=print) -> dict:
  """{label: {N: seconds per token, or a not-run record}}."""
  res = {}
  budget = p.mem_fraction * ram_bytes()
  for label, (name, cache) in DECODE_MODES.items():
    res[label] = {}
    kv = attention.variant(name).decode_impl is attention.decode.KV_CACHE
    S = p.decode_steps if kv else p.rnn_decode_steps
    run = decode_steps_fn(S)
    for N in p.decode_lens:
      if cache == "recompute":   # the causal forward over all N positions, per token
        fwd, _ = case_fns(name, p, N, causal=True)
        x = jax.random.normal(jax.random.key(N), (3, p.B, N, p.H, p.D), jnp.float32)
        c = measure_case(fwd, tuple(x), p, budget, limit_s, None)
        res[label][N] = c["seconds"] if c["status"] == "ok" else c
      else:
        xs = tuple(jax.random.normal(jax.random.key(N + 1), (3, p.B, S, p.H, p.D)))
        ts = []
        for _ in range(p.runs + 1):   # the first run compiles: dropped
          st = jax.block_until_ready(decode_state(name, cache, p, N, N + S))
          t = time.perf_counter()
          jax.block_until_ready(run(st, *xs))
          ts.append((time.perf_counter() - t) / S)
        res[label][N] = float(np.median(ts[1:]))
      r = res[label][N]
      log(f"decode {label:24s} N={N:6d} " + (f"{r * 1e6:10.1f} us/token"
                                             if isinstance(r, float) else r["status"]))
  return res


# ---- targets --------------------------------------------------------------------------

def tiles_matmuls_only(q, k, v):
  """flash's non-causal tile loop (same tiles, one (batch, head) slice per step) with
  its two matmuls per tile and nothing else: what flash's forward would take if
  its online softmax cost nothing. (B, N, H, D) -> (B * H, N, D), meaningless values."""
  from attention import flash as F
  Bn, N, H, D = q.shape
  bq, bk = F.blocks(attention.Dims(Bn, N, N, H, H, D, D))
  qh = jnp.transpose(q, (0, 2, 1, 3)).reshape(Bn * H, N // bq, bq, D)
  kt = jnp.transpose(k, (0, 2, 3, 1)).reshape(Bn * H, D, N)
  vh = jnp.transpose(v, (0, 2, 1, 3)).reshape(Bn * H, N, D)

  def one_slice(x):
    qs, kt, vh = x

    def q_step(qi):
      def kv_step(j, acc):
        s = qi @ jax.lax.dynamic_slice_in_dim(kt, j * bk, bk, axis=1)
        return acc + s @ jax.lax.dynamic_slice_in_dim(vh, j * bk, bk, axis=0)
      return jax.lax.fori_loop(0, N // bk, kv_step, jnp.zeros((bq, D), q.dtype))
    return jax.lax.map(q_step, qs).reshape(N, D)
  return jax.lax.map(one_slice, (qh, kt, vh))


TILE_CHOICES = (  # (label, flash kwargs, STEP_SCORE_BYTES)
    ("default", {}, None),
    ("512 x 512 tiles, all 8 heads in one step", dict(block_q=512, block_k=512), 8 << 20),
    ("512 x 512 tiles, one head per step", dict(block_q=512, block_k=512), 1 << 20),
    ("256 x 512 tiles, one head per step", dict(block_q=256, block_k=512), 1 << 19),
    ("1024 x 1024 tiles, one head per step", dict(block_q=1024, block_k=1024), 1 << 20),
    ("2048 x 256 tiles, one head per step", dict(block_q=2048, block_k=256), 1 << 20),
)


def tile_choices(p: Preset, N, log=print) -> dict:
  """flash forward at N under other tile sizes / slices per step, non-causal and
  causal, interleaved: the evidence behind attention/flash.py's defaults."""
  from attention import flash as F
  x = tuple(jax.random.normal(jax.random.key(6), (3, p.B, N, p.H, p.D), jnp.float32))
  fl, keep = attention.get("flash"), F.STEP_SCORE_BYTES
  fns = {}
  try:
    for label, kw, budget in TILE_CHOICES:
      F.STEP_SCORE_BYTES = keep if budget is None else budget
      for causal in (False, True):
        f = jax.jit(lambda q, k, v, kw=kw, causal=causal: fl(q, k, v, causal=causal, **kw))
        jax.block_until_ready(f(*x))   # traced now, under this STEP_SCORE_BYTES
        fns[f"{label}|{causal}"] = f
  finally:
    F.STEP_SCORE_BYTES = keep
  t = interleaved(fns, {k: x for k in fns}, 3)
  res = {}
  for key, s in t.items():
    label, causal = key.split("|")
    res.setdefault(label, {})["causal" if causal == "True" else "full"] = s
  log("tile choices: " + "; ".join(f"{k}: {v['full'] * 1e3:.0f} / {v['causal'] * 1e3:.0f} ms"
                                   for k, v in res.items()))
  return dict(N=N, seconds=res)


def target_exact(p: Preset, peak_fn, log=print) -> dict:
  """(a): flash forward against jax.nn's xla path and the matmul peak, at target_N."""
  N = p.target_N
  q, k, v = jax.random.normal(jax.random.key(1), (3, p.B, N, p.H, p.D), jnp.float32)
  fl, sm = attention.get("flash"), attention.get("softmax")
  fns = {
      "flash": jax.jit(lambda q, k, v: fl(q, k, v)),
      "flash, causal": jax.jit(lambda q, k, v: fl(q, k, v, causal=True)),
      "softmax (naive einsum)": jax.jit(lambda q, k, v: sm(q, k, v)),
      XLA_REF: jax.jit(lambda q, k, v: jax.nn.dot_product_attention(
          q, k, v, implementation="xla")),
      "flash's tiles, matmuls only": jax.jit(tiles_matmuls_only),
  }
  n_mm = 2048
  a = jax.random.normal(jax.random.key(0), (n_mm, n_mm), jnp.float32)
  mm = jax.jit(lambda a: a @ a)
  args = {k_: (q, k, v) for k_ in fns}
  args["matmul"] = (a,)
  t = interleaved(dict(fns, matmul=mm), args, max(p.runs, 7))
  # the fraction's denominator is the matmul timed in the same rounds as flash (the
  # issue's "ratio in one run"); a separate reading is kept for the page
  peak = 2 * n_mm ** 3 / t["matmul"]
  peak_separate = peak_fn()
  work = {k_: flops("flash", p, N, "causal" in k_, "fwd") for k_ in fns}
  work["flash's tiles, matmuls only"] = 4 * p.B * p.H * N * N * p.D   # QKᵀ and PV only
  work["matmul"] = 2 * n_mm ** 3
  r = dict(N=N, seconds=t, peak=peak, peak_separate=peak_separate, flops=work,
           flop_per_s={k_: work[k_] / v_ for k_, v_ in t.items()})
  r["of_peak"] = {k_: v_ / peak for k_, v_ in r["flop_per_s"].items() if k_ != "matmul"}
  r["flash_vs_xla"] = t[XLA_REF] / t["flash"]
  r["causal_speedup"] = t["flash"] / t["flash, causal"]
  r["causal_tiles"] = {N: causal_tiles(p, N)}
  # the causal speedup again at a longer length, where diagonal tiles weigh less
  N2 = p.causal_N
  x2 = jax.random.normal(jax.random.key(5), (3, p.B, N2, p.H, p.D), jnp.float32)
  t2 = interleaved({k_: fns[k_] for k_ in ("flash", "flash, causal")},
                   {"flash": tuple(x2), "flash, causal": tuple(x2)}, 3)
  r["causal_long"] = dict(N=N2, seconds=t2, speedup=t2["flash"] / t2["flash, causal"])
  r["causal_tiles"][N2] = causal_tiles(p, N2)
  log(f"(a) N={N}: flash {t['flash'] * 1e3:.0f} ms, xla {t[XLA_REF] * 1e3:.0f} ms "
      f"({r['flash_vs_xla']:.2f}x), {r['of_peak']['flash'] * 100:.1f}% of "
      f"{peak / 1e9:.0f} GFLOP/s; causal {r['causal_speedup']:.2f}x faster, "
      f"{r['causal_long']['speedup']:.2f}x at N={N2}")
  return r


def causal_tiles(p: Preset, N):
  """Tiles flash's causal forward visits at length N, of all (its speedup bound)."""
  from attention import flash as F
  d = attention.Dims(p.B, N, N, p.H, p.H, p.D, p.D)
  bq, bk = F.blocks(d, causal=True)
  nq, nk = -(-N // bq), -(-N // bk)
  visited = sum(min(nk, ((i + 1) * bq - 1) // bk + 1) for i in range(nq))
  return dict(visited=visited, total=nq * nk, block_q=bq, block_k=bk)


def target_memory(p: Preset, log=print) -> dict:
  """(b): flash forward+backward at mem_N: XLA's plan, one run, RSS; naive's plan."""
  N = p.mem_N
  q, k, v = jax.random.normal(jax.random.key(2), (3, p.B, N, p.H, p.D), jnp.float32)
  r = dict(N=N, ram_bytes=ram_bytes())
  for name in ("flash", "softmax", XLA_REF):
    _, bwd = case_fns(name, p, N, causal=False)
    m = bwd.lower(q, k, v).compile().memory_analysis()
    r[name] = dict(temp_bytes=int(m.temp_size_in_bytes),
                   argument_bytes=int(m.argument_size_in_bytes),
                   output_bytes=int(m.output_size_in_bytes))
  _, bwd = case_fns("flash", p, N, causal=False)
  _trim()
  with RssPeak() as rss:
    t = time.perf_counter()
    jax.block_until_ready(bwd(q, k, v))
    r["flash"]["seconds_one_run"] = time.perf_counter() - t   # includes compilation
  r["flash"]["rss_growth_bytes"] = int(rss.growth)
  log(f"(b) N={N}: flash fwd+bwd temporaries {r['flash']['temp_bytes'] / GiB:.2f} GiB, "
      f"RSS growth {rss.growth / GiB:.2f} GiB; softmax would need "
      f"{r['softmax']['temp_bytes'] / GiB:.1f} GiB of temporaries "
      f"(RAM {r['ram_bytes'] / GiB:.0f} GiB)")
  return r


# ---- generation (target e) ------------------------------------------------------------

def generation(p: Preset, log=print) -> dict:
  """Seconds to generate gen_batch images of gen_side² pixels: linear RNN form (the
  whole scan), softmax recompute (recompute_tokens steps at the full buffer, each the
  same program, times the pixel count)."""
  from flax import nnx

  from configs import mnist
  from models import ModelConfig, build, param_count
  from models.generate import generate
  import train
  c = mnist.get_config()
  for k, v in p.gen_model:
    c.model[k] = v
  T = p.gen_side ** 2
  c.model.max_len = max(c.model.max_len, T)
  res = dict(batch=p.gen_batch, pixels=T, model=dict(p.gen_model))
  key = jax.random.key(0)
  for name in ("linear", "softmax"):
    c.attention = name
    m = build(ModelConfig.from_dict(train.model_dict(c)), rngs=nnx.Rngs(0))
    res.setdefault("params", param_count(m)["params"])
    if name == "linear":
      g = lambda: generate(m, jnp.zeros((p.gen_batch, 0), jnp.int32), steps=T, key=key)
      jax.block_until_ready(g())
      ts = run_times(lambda: g(), (), 3)
      res["linear, RNN form"] = dict(seconds_per_batch=float(np.median(ts)), times=ts)
    else:
      n = p.recompute_tokens
      prompt = jnp.zeros((p.gen_batch, T - n), jnp.int32)
      g = lambda: generate(m, prompt, steps=n, key=key, mode="recompute")
      jax.block_until_ready(g())
      ts = run_times(lambda: g(), (), 3)
      # n tokens cost n + 1 forwards (the first token's log-probs come from one
      # more), and so T tokens cost T + 1
      per = float(np.median(ts)) / (n + 1)
      res["softmax, recompute"] = dict(seconds_per_token=per, seconds_per_batch=per * (T + 1),
                                       tokens_timed=n, times=ts)
    log(f"generation {name}: {res[list(res)[-1]]}")
  res["ratio"] = (res["softmax, recompute"]["seconds_per_batch"]
                  / res["linear, RNN form"]["seconds_per_batch"])
  log(f"(e) linear RNN generation is {res['ratio']:.0f}x faster than softmax recompute")
  return res


# ---- the page -------------------------------------------------------------------------

def machine():
  from trainer.metrics import host_cpu
  cpu = host_cpu()
  dev = jax.devices()[0]
  where = cpu if dev.platform == "cpu" else f"{dev.device_kind} ({cpu} host)"
  return (f"{where}, {os.cpu_count()} cores, {ram_bytes() / GiB:.0f} GiB RAM, "
          f"jax {jax.__version__}")


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


def _keyed(d):
  """JSON turns int keys into strings; make them ints again."""
  return {int(k): v for k, v in d.items()}


def plot_sweep(sw, path, lens):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
  names = [n for n in sw if "fwd" in sw[n]]
  cmap = plt.get_cmap("tab20")
  for ax, mode in zip(axes, ("fwd", "fwd_bwd")):
    for i, n in enumerate(names):
      cs = _keyed(sw[n][mode])
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
  fig.savefig(path, dpi=75)
  plt.close(fig)


def plot_decode(dec, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(5, 3.4))
  for label, pts in dec.items():
    pts = sorted((N, t) for N, t in _keyed(pts).items() if isinstance(t, float))
    ax.loglog(*zip(*pts), "o-", ms=3, label=label)
  ax.set_xlabel("context length N")
  ax.set_ylabel("seconds per token")
  ax.grid(alpha=0.3, which="both")
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=75)
  plt.close(fig)


def _check(ok):
  return "**met**" if ok else "**missed**"


def write_page(out):
  """README.md (and the PNGs) from the JSON files in `out`."""
  meta = json.load(open(os.path.join(out, "meta.json")))
  load = lambda s: (json.load(open(os.path.join(out, f"{s}.json")))
                    if os.path.exists(os.path.join(out, f"{s}.json")) else None)
  # only the sections of the run that wrote meta.json: a stale file is never mixed in
  sw, dec, tg, gen = (load(s) if s in meta["sections"] else None for s in SECTIONS)
  p = meta["preset"]
  L = [f"# Attention benchmarks ({meta['preset_name']} preset)", "",
       f"Written by `{meta['command']}` on {meta['date']}, {meta['machine']}. "
       f"Every number below comes from that one run (`*.json` beside this page); the "
       f"page is rewritten from them by `python -m scripts.benchmark --page_only "
       f"--out={out}`.", "",
       f"Shapes: B={p['B']}, {p['H']} heads, head dim {p['D']}, float32. The matmul "
       f"peak is the median FLOP/s of a 2048 × 2048 fp32 matmul in the same process: "
       f"{meta['peak'] / 1e9:.0f} GFLOP/s (highest of "
       + ", ".join(f"{x / 1e9:.0f}" for x in meta["peaks"]) + " measured during the "
       "run; the sweep's fractions use that highest one, target (a) the matmul timed in "
       "its own interleaved rounds). This machine is shared: absolute times drift between runs, so "
       "the comparisons below are ratios taken in this one run, and the targets' "
       "timings are interleaved round by round.", ""]
  if tg:
    L += targets_section(tg, dec, sw, p, gen, meta["peak"])
  if sw:
    L += sweep_section(sw, p, out)
  if dec:
    plot_decode(dec, os.path.join(out, "decode.png"))
    lens = sorted(_keyed(next(iter(dec.values()))))
    L += ["## Decode: seconds per token against context length", "",
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
      pts = _keyed(pts)
      ok = [N for N in lens if isinstance(pts[N], float)]
      L.append(f"| {label} | " + " | ".join(_fmt_s(pts[N]) for N in lens)
               + f" | {pts[ok[-1]] / pts[ok[0]]:.2f}"
               + (f" (N ≤ {ok[-1]})" if ok[-1] != lens[-1] else "") + " |")
    L += ["", "![decode](decode.png)", ""]
  if gen:
    L += ["## MNIST generation at the paper's model size", "",
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
  with open(os.path.join(out, "README.md"), "w") as f:
    f.write("\n".join(L) + "\n")


def targets_section(tg, dec, sw, p, gen, meta_peak):
  L = ["## The CPU targets", "", "| target | measured | |", "|---|---|---|"]
  a = tg.get("exact")
  if a:
    t = a["seconds"]
    # against the matmul timed in the same rounds (the JSON's seconds["matmul"]), and,
    # for transparency, against the highest matmul reading of the whole run
    peak = a["flops"]["matmul"] / t["matmul"] if "flops" in a else a["peak"]
    high = max(peak, meta_peak, a.get("peak_separate", 0.0))
    of_peak = {k: a["flop_per_s"][k] / peak for k in a["of_peak"]}
    L.append(f"| (a) flash forward ≥ 3× `jax.nn.dot_product_attention` (xla), N={a['N']} "
             f"| {a['flash_vs_xla']:.2f}× ({t['flash'] * 1e3:.0f} vs "
             f"{t[XLA_REF] * 1e3:.0f} ms) | {_check(a['flash_vs_xla'] >= 3)} |")
    L.append(f"| (a) flash forward ≥ 70% of the matmul FLOP/s | "
             f"{of_peak['flash'] * 100:.1f}% ({a['flop_per_s']['flash'] / 1e9:.0f} "
             f"of {peak / 1e9:.0f} GFLOP/s, the matmul timed in the same rounds); "
             f"{a['flop_per_s']['flash'] / high * 100:.1f}% of the run's highest matmul "
             f"reading, {high / 1e9:.0f} | {_check(of_peak['flash'] >= 0.7)} |")
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
    lin = _keyed(dec["linear, RNN form"])
    kv = _keyed(dec["softmax, KV cache"])
    lens = sorted(lin)
    flat = lin[lens[-1]] / lin[lens[0]]
    long = [N for N in lens if N >= 1024]
    below = bool(long) and all(lin[N] < kv[N] for N in long)
    L.append(f"| (d) linear decode flat: t({lens[-1]}) / t({lens[0]}) ≤ 1.2 | "
             f"{flat:.2f} | {_check(flat <= 1.2)} |")
    L.append("| (d) linear decode below the KV-cached softmax at every N ≥ 1024 | "
             + ", ".join(f"N={N}: {lin[N] * 1e6:.0f} vs {kv[N] * 1e6:.0f} µs"
                         for N in lens if N >= 1024) + f" | {_check(below)} |")
  if gen:
    L.append(f"| (e) MNIST generation, linear RNN ≥ 317× softmax recompute (paper size, "
             f"batch {gen['batch']}) | {gen['ratio']:.0f}× | {_check(gen['ratio'] >= 317)} |")
  L.append("")
  if a:
    L += ["Forward at the same shapes, interleaved round by round (median):", "",
          "| path | ms | GFLOP/s | of the matmul peak |", "|---|---|---|---|"]
    for k in ("flash", "flash, causal", "softmax (naive einsum)", XLA_REF,
              "flash's tiles, matmuls only"):
      if k not in a["seconds"]:
        continue
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
    ct = _keyed(a["causal_tiles"])[N]
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
    lin = _keyed(dec["linear, RNN form"])
    L.append(
        f"- **Linear decode.** One RNN step costs {min(lin.values()) * 1e6:.1f}–"
        f"{max(lin.values()) * 1e6:.1f} µs whatever N is (the (S, Z) state has "
        "no length); the spread between lengths is this machine's timing noise at "
        "the microsecond scale.")
  return L + [""]


def sweep_section(sw, p, out):
  plot_sweep(sw, os.path.join(out, "sweep.png"), p["lens"])
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
      cs = _keyed(r[mode])
      ok = [N for N in lens if cs.get(N, {}).get("status") == "ok"]
      top = cs[ok[-1]] if ok else None
      L.append(f"| {name} | {'yes' if r['causal'] else 'no'} | "
               + " | ".join(_fmt_t(cs.get(N)) for N in lens)
               + f" | {r[mode + '_slope']:.2f} | "
               + (f"{top['of_peak'] * 100:.1f}% | "
                  f"{top['memory']['temp_bytes'] / 2 ** 20:.0f} MiB |" if top else " | |"))
    L.append("")
  skipped = {n: r["skipped"] for n, r in sw.items() if "skipped" in r}
  for n, why in skipped.items():
    L.append(f"`{n}` is not in the sweep: {why}.")
  L += ["", "![time against N](sweep.png)", ""]
  return L


# ---- main -----------------------------------------------------------------------------

SECTIONS = ("sweep", "decode", "targets", "generation")


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--preset", default="cpu", choices=sorted(PRESETS))
  ap.add_argument("--out", default=OUT)
  ap.add_argument("--sections", default=",".join(SECTIONS))
  ap.add_argument("--variants", default="", help="comma list (default: all + xla ref)")
  ap.add_argument("--case_limit_s", type=float, default=None)
  ap.add_argument("--page_only", action="store_true")
  a = ap.parse_args(argv)
  if a.page_only:
    write_page(a.out)
    print(f"wrote {a.out}/README.md")
    return
  p = PRESETS[a.preset]
  limit = a.case_limit_s or p.case_limit_s
  sections = [s for s in a.sections.split(",") if s]
  bad = [s for s in sections if s not in SECTIONS]
  if bad:
    raise SystemExit(f"--sections: unknown {bad}; valid: {', '.join(SECTIONS)}")
  names = [n for n in a.variants.split(",") if n] or attention.names() + [XLA_REF]
  for n in names:
    if n != XLA_REF:
      attention.variant(n)   # an unknown name fails here, listing the valid ones
  os.makedirs(a.out, exist_ok=True)
  peaks = [matmul_peak(p.peak_n)]
  print(f"matmul peak {peaks[0] / 1e9:.0f} GFLOP/s on {machine()}", flush=True)
  log = lambda s: print(s, flush=True)

  def save(name, obj):
    with open(os.path.join(a.out, f"{name}.json"), "w") as f:
      json.dump(obj, f, indent=1, default=float)

  t0 = time.time()
  sw = None
  if "sweep" in sections:
    sw = sweep(p, names, peaks[0], limit, log)
    save("sweep", sw)
  if "decode" in sections:
    save("decode", decode(p, limit, log))
  if "targets" in sections:
    def peak_fn():
      peaks.append(matmul_peak(p.peak_n))
      return peaks[-1]
    tg = dict(exact=target_exact(p, peak_fn, log), memory=target_memory(p, log),
              tiles=tile_choices(p, p.target_N, log))
    save("targets", tg)
  if "generation" in sections:
    save("generation", generation(p, log))
  peaks.append(matmul_peak(p.peak_n))
  peak = max(peaks)
  if sw is not None:   # fractions against the run's highest peak (conservative)
    for r in sw.values():
      for mode in ("fwd", "fwd_bwd"):
        for c in r.get(mode, {}).values():
          if c.get("status") == "ok":
            c["of_peak"] = c["flop_per_s"] / peak
    save("sweep", sw)
  cmd = "python -m scripts.benchmark" + "".join(f" {x}" for x in
                                                (sys.argv[1:] if argv is None else argv))
  save("meta", dict(preset_name=a.preset, preset=dataclasses.asdict(p) | {
      "case_limit_s": limit}, peak=peak, peaks=peaks, machine=machine(),
      date=datetime.date.today().isoformat(), command=cmd, sections=sections,
      wall_s=time.time() - t0))
  write_page(a.out)
  print(f"wrote {a.out}/README.md in {time.time() - t0:.0f} s")


if __name__ == "__main__":
  main()
