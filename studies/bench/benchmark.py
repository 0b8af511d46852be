"""Speed and memory of every attention variant, decode latency, and the CPU targets:
the measurements of `results/benchmarks/` (its page: `studies.bench.page`).

Sections, each written to <out>/<section>.json as soon as it is done:
  sweep       every registered variant (and `jax.nn.dot_product_attention`, xla), N in
              the preset's lengths: forward and forward+backward (gradient of ½‖out‖²
              w.r.t. q, k, v) seconds, the median of `runs` timed runs after a
              warm-up; XLA's memory plan; the process RSS growth during the runs;
              FLOP/s from `attention.cost` and its fraction of the matmul peak. Causal
              where the variant supports it (the decoder case), else not. A case is
              not run, and is recorded as such, when XLA's plan exceeds the memory
              budget ("oom") or when its predicted time (the previous length's time
              scaled by the cost model's FLOPs) or its warm-up run exceeds the case
              time limit ("time limit"). Log-log slopes of time against N per variant.
  decode      per-token latency of one decode step against context length N: softmax
              recompute (the causal forward over all N positions, what a model
              without a cache pays per token), softmax with a KV cache, with an int8 KV
              cache, and linear in RNN form; each the mean over a `lax.scan` of
              `decode_steps` tokens from a state prefilled to N.
  targets     the CPU targets (a)-(e), each a ratio taken in this process; timings
              that are compared are interleaved round by round.
  generation  MNIST image generation at the paper's model size (8 layers, d 256,
              8 heads, FFN 1024) and batch 16: linear in RNN form against softmax
              in recompute mode (target (e)).

The matmul peak (`studies.core.timing.matmul_peak`) is read at the start and end of the
run and before the targets; the page's one peak is the highest of those readings, so
every fraction of it is conservative.
"""
from __future__ import annotations

import dataclasses
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import attention
from studies.bench.presets import PRESETS, SECTIONS, SKIP_ON_CPU, XLA_REF, Preset
from studies.core import pages, timing

GiB = pages.GiB


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
          for n, s in var.params.items()
          if s.when is None}
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
  plan = timing.memory_plan(compiled)
  plan.pop("alias_bytes")
  total = plan["argument_bytes"] + plan["output_bytes"] + plan["temp_bytes"]
  if total > budget_bytes:
    return dict(status="oom", memory=plan,
                why=f"XLA plans {total / GiB:.1f} GiB > budget {budget_bytes / GiB:.1f} GiB")
  timing.trim()
  try:
    with timing.RssPeak() as rss:
      t = time.perf_counter()
      jax.block_until_ready(compiled(*args))
      warm = time.perf_counter() - t
      if warm * p.runs > limit_s:
        return dict(status="time limit", warmup_s=warm, memory=plan,
                    why=f"one run took {warm:.1f} s; {p.runs} more > {limit_s:.0f} s")
      ts = timing.run_times(compiled, args, p.runs)
  except Exception as e:  # XlaRuntimeError RESOURCE_EXHAUSTED: record, do not die
    if "RESOURCE_EXHAUSTED" in str(e) or "memory" in str(e).lower():
      return dict(status="oom", memory=plan, why=str(e).splitlines()[0][:200])
    raise
  return dict(status="ok", seconds=float(np.median(ts)), times=[float(x) for x in ts],
              compile_s=compile_s, memory=plan, rss_growth_bytes=int(rss.growth))


def sweep(p: Preset, names, peak, limit_s, log=print) -> dict:
  """{name: {"causal": bool, "fwd"|"fwd_bwd": {N: case}}} over the preset's lengths;
  `peak` (FLOP/s) is the denominator of each case's of_peak."""
  budget = p.mem_fraction * pages.ram_bytes()
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
      res[name][mode + "_slope"] = timing.slope(pts, *p.slope_range)
  return res


# ---- decode ---------------------------------------------------------------------------

DECODE_MODES = {  # label: (variant, cache_dtype); "recompute" = no decode state
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
  if attention.variant(name).decode_impl is attention.KV_CACHE:
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


def decode(p: Preset, limit_s, log=print, modes=None) -> dict:
  """{label: {N: seconds per token, or a not-run record}} of each decode mode
  (default DECODE_MODES; label: (variant, cache dtype or "recompute"))."""
  res = {}
  budget = p.mem_fraction * pages.ram_bytes()
  for label, (name, cache) in (modes or DECODE_MODES).items():
    res[label] = {}
    kv = attention.variant(name).decode_impl is attention.KV_CACHE
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
        ts = timing.run_times_fresh(lambda: (decode_state(name, cache, p, N, N + S), *xs),
                                    run, p.runs + 1)
        res[label][N] = float(np.median(ts[1:])) / S   # the first run compiles: dropped
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


TILE_CHOICES = (  # (label, flash kwargs, flash's step_score_bytes; None = its default)
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
  x = tuple(jax.random.normal(jax.random.key(6), (3, p.B, N, p.H, p.D), jnp.float32))
  fl = attention.get("flash")
  fns = {}
  for label, kw, budget in TILE_CHOICES:
    kw = dict(kw, step_score_bytes=budget)        # None: flash's default
    for causal in (False, True):
      f = jax.jit(lambda q, k, v, kw=kw, causal=causal: fl(q, k, v, causal=causal, **kw))
      jax.block_until_ready(f(*x))   # compiled now, outside the timed calls
      fns[f"{label}|{causal}"] = f
  t = timing.interleaved(fns, {k: x for k in fns}, 3)
  res = {}
  for key, s in t.items():
    label, causal = key.split("|")
    res.setdefault(label, {})["causal" if causal == "True" else "full"] = s
  log("tile choices: " + "; ".join(f"{k}: {v['full'] * 1e3:.0f} / {v['causal'] * 1e3:.0f} ms"
                                   for k, v in res.items()))
  return dict(N=N, seconds=res)


def target_exact(p: Preset, peak_fn, log=print) -> dict:
  """(a): flash forward against jax.nn's xla path and the matmul, at target_N; the
  matmul is timed in the same interleaved rounds, and peak_fn() reads the peak."""
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
  mm, mm_args, mm_flops = timing.matmul_fn(p.peak_n)
  args = {k_: (q, k, v) for k_ in fns}
  args["matmul"] = mm_args
  t = timing.interleaved(dict(fns, matmul=mm), args, max(p.runs, 7))
  peak = peak_fn()
  work = {k_: flops("flash", p, N, "causal" in k_, "fwd") for k_ in fns}
  work["flash's tiles, matmuls only"] = 4 * p.B * p.H * N * N * p.D   # QKᵀ and PV only
  work["matmul"] = mm_flops
  r = dict(N=N, seconds=t, peak=peak, flops=work,
           flop_per_s={k_: work[k_] / v_ for k_, v_ in t.items()})
  r["flash_vs_xla"] = t[XLA_REF] / t["flash"]
  r["causal_speedup"] = t["flash"] / t["flash, causal"]
  r["causal_tiles"] = {N: causal_tiles(p, N)}
  # the causal speedup again at a longer length, where diagonal tiles weigh less
  N2 = p.causal_N
  x2 = jax.random.normal(jax.random.key(5), (3, p.B, N2, p.H, p.D), jnp.float32)
  t2 = timing.interleaved({k_: fns[k_] for k_ in ("flash", "flash, causal")},
                          {"flash": tuple(x2), "flash, causal": tuple(x2)}, 3)
  r["causal_long"] = dict(N=N2, seconds=t2, speedup=t2["flash"] / t2["flash, causal"])
  r["causal_tiles"][N2] = causal_tiles(p, N2)
  log(f"(a) N={N}: flash {t['flash'] * 1e3:.0f} ms, xla {t[XLA_REF] * 1e3:.0f} ms "
      f"({r['flash_vs_xla']:.2f}x), {r['flop_per_s']['flash'] / 1e9:.0f} GFLOP/s; "
      f"causal {r['causal_speedup']:.2f}x faster, "
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
  r = dict(N=N, ram_bytes=pages.ram_bytes())
  for name in ("flash", "softmax", XLA_REF):
    _, bwd = case_fns(name, p, N, causal=False)
    r[name] = timing.memory_plan(bwd.lower(q, k, v).compile())
    r[name].pop("alias_bytes")
  _, bwd = case_fns("flash", p, N, causal=False)
  timing.trim()
  with timing.RssPeak() as rss:
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
  import trainer
  c = mnist.get_config()
  for k, v in p.gen_model:
    c.model[k] = v
  T = p.gen_side ** 2
  c.model.max_len = max(c.model.max_len, T)
  res = dict(batch=p.gen_batch, pixels=T, model=dict(p.gen_model))
  key = jax.random.key(0)
  for name in ("linear", "softmax"):
    c.attention = name
    m = build(ModelConfig.from_dict(trainer.model_dict(c)), rngs=nnx.Rngs(0))
    res.setdefault("params", param_count(m)["params"])
    if name == "linear":
      g = lambda: generate(m, jnp.zeros((p.gen_batch, 0), jnp.int32), steps=T, key=key)
      jax.block_until_ready(g())
      ts = timing.run_times(g, (), 3)
      res["linear, RNN form"] = dict(seconds_per_batch=float(np.median(ts)), times=ts)
    else:
      n = p.recompute_tokens
      prompt = jnp.zeros((p.gen_batch, T - n), jnp.int32)
      g = lambda: generate(m, prompt, steps=n, key=key, mode="recompute")
      jax.block_until_ready(g())
      ts = timing.run_times(g, (), 3)
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


# ---- the run --------------------------------------------------------------------------

def run(p: Preset, preset_name: str, out: str, sections, names, limit_s, command,
        log=print) -> dict:
  """Measures `sections` for variants `names` under preset `p` and writes each
  section's JSON to `out` as it finishes, then meta.json (the run record, the preset,
  the peak readings); returns the meta record. The page is written by
  studies.bench.page.write(out)."""
  os.makedirs(out, exist_ok=True)
  peaks = [timing.matmul_peak(p.peak_n)]
  log(f"matmul peak {timing.peak_text(peaks[0])}")

  def save(name, obj):
    pages.write_json(os.path.join(out, f"{name}.json"), obj)

  def peak_fn():
    peaks.append(timing.matmul_peak(p.peak_n))
    return peaks[-1]["flop_per_s"]

  t0 = time.time()
  sw = None
  if "sweep" in sections:
    sw = sweep(p, names, peaks[0]["flop_per_s"], limit_s, log)
    save("sweep", sw)
  if "decode" in sections:
    save("decode", decode(p, limit_s, log))
  if "targets" in sections:
    save("targets", dict(exact=target_exact(p, peak_fn, log), memory=target_memory(p, log),
                         tiles=tile_choices(p, p.target_N, log)))
  if "generation" in sections:
    save("generation", generation(p, log))
  peaks.append(timing.matmul_peak(p.peak_n))
  peak = max(x["flop_per_s"] for x in peaks)
  if sw is not None:   # fractions against the run's highest peak (conservative)
    for r in sw.values():
      for mode in ("fwd", "fwd_bwd"):
        for c in r.get(mode, {}).values():
          if c.get("status") == "ok":
            c["of_peak"] = c["flop_per_s"] / peak
    save("sweep", sw)
  meta = dict(run=pages.run_record(command, preset_name, wall_s=time.time() - t0),
              preset=dataclasses.asdict(p) | {"case_limit_s": limit_s}, peak=peak,
              peaks=peaks, sections=list(sections))
  save("meta", meta)
  return meta
