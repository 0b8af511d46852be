"""The Pallas `flash_pallas` kernel on a GPU against cuDNN and XLA: tuning, speed, errors.

In one process on one device:
  1. the bf16 matmul peak (`studies.core.timing.matmul_peak`: an 8192² bf16 matmul with
     float32 accumulation, the median of its calls);
  2. tuning: for each head dim and causal mode, flash_pallas's forward and its
     forward+backward at tune_len over block_q × block_k × num_warps × num_stages;
     a configuration that fails to compile (shared memory, registers) is recorded
     with its error; the fastest forward and fastest forward+backward configurations
     are kept;
  3. correctness on the device: flash_pallas's output and gradients against
     `jax.nn.dot_product_attention(implementation='xla')` in bf16, the largest
     |difference| recorded, and the float32 reference's difference beside it;
  4. speed: bf16, head dims 64 and 128, N = 1k ... 16k, causal and not, with B·N =
     16384 tokens and B·H·D = B·2048 (the FlashAttention papers' setting); forward and
     forward+backward of flash_pallas (tuned), cuDNN and XLA, median of `runs` runs
     after warm-up, interleaved round by round; TFLOP/s with the papers' count
     (4·B·H·N²·D for the forward, halved when causal, ×3.5 forward+backward) and
     the fraction of the measured bf16 matmul peak.
Writes <out>/gpu_<device>.json and <out>/gpu_<device>.md (gpu_h100, gpu_h200; gpu_dry for
a dry run), with the device, jax version and date: one file per device, so a run on an
H100 never replaces the H200's figures. GPU numbers are never written without the
device's name.
"""
from __future__ import annotations

import itertools
import os

import jax
import jax.numpy as jnp

from attention.flash_pallas import flash_pallas
from studies.core import pages, timing

TOKENS, HIDDEN = 16384, 2048        # B * N and H * D of every speed case
TUNE = dict(block_q=(64, 128), block_k=(32, 64, 128), num_warps=(4, 8), num_stages=(2, 3))
DRY_TUNE = dict(block_q=(16, 32), block_k=(16,), num_warps=(4,), num_stages=(2,))


def fa_flops(B, H, N, D, causal, mode):
  """The FlashAttention papers' count: 4 B H N² D forward (two matmuls), half of it
  causal, and 2.5x that more for the backward."""
  f = 4 * B * H * N * N * D * (0.5 if causal else 1.0)
  return f * (3.5 if mode == "fwd_bwd" else 1.0)


TILE_KEYS = ("block_q", "block_k", "num_warps", "num_stages")   # one kernel configuration


def speed_cells(s, flops, peaks, width=None) -> list[str]:
  """A page's cells for one timing: ms, TFLOP/s and the percentage of each peak (a
  falsy peak: "–"); for a recorded error (or nothing) its text (cut to `width`) and
  blanks."""
  if isinstance(s, float):
    tf = flops / s
    return [f"{s * 1e3:.3f}", f"{tf / 1e12:.0f}"] + [
        f"{tf / p * 100:.0f}%" if p else "–" for p in peaks]
  return [str(s or "n/a")[:width], ""] + [""] * len(peaks)


def parse_grid(text: str) -> dict:
  """'128/64/4/3,128/64/8/2' (block_q/block_k/num_warps/num_stages, comma-separated)
  -> {"configs": [dict, ...]}: a short list of tiles to tune over instead of TUNE's
  full product (one Triton compile of forward and backward each, ~10 s on an H100)."""
  cfgs = []
  for item in filter(None, (t.strip() for t in text.split(","))):
    parts = item.split("/")
    if len(parts) != 4 or not all(x.isdigit() for x in parts):
      raise ValueError(f"--grid: {item!r} is not block_q/block_k/num_warps/num_stages, "
                       "e.g. 128/64/4/3")
    cfgs.append(dict(zip(TILE_KEYS, map(int, parts))))
  if not cfgs:
    raise ValueError("--grid: no configuration given")
  return {"configs": cfgs}


def _configs(grid: dict) -> list:
  """The configurations of a grid: TUNE-style product, or parse_grid's list."""
  if "configs" in grid:
    return list(grid["configs"])
  return [dict(zip(grid, vals)) for vals in itertools.product(*grid.values())]


PATHS = ("flash_pallas", "cudnn", "xla")


def paths(interpret, have_cudnn, only=PATHS):
  """name -> fn(q, k, v, causal, **cfg) in the contract's layout, for the names in
  `only` (flash_pallas always: it is what is measured)."""
  out = {
      "flash_pallas": lambda q, k, v, causal, **cfg: flash_pallas(
          q, k, v, causal=causal, interpret=interpret, **cfg),
      "xla": lambda q, k, v, causal, **cfg: jax.nn.dot_product_attention(
          q, k, v, is_causal=causal, implementation="xla"),
  }
  if have_cudnn:
    out["cudnn"] = lambda q, k, v, causal, **cfg: jax.nn.dot_product_attention(
        q, k, v, is_causal=causal, implementation="cudnn")
  return {k: f for k, f in out.items() if k == "flash_pallas" or k in only}


def jitted(fn, causal, cfg):
  """fwd(q, k, v) and bwd(q, k, v, w): the gradients of sum(out * w). The cotangent w is
  an argument, not a closed-over constant: as a constant, XLA folds a (B, N, H, D)
  float32 tensor at compile time (a 134 MB transpose at the speed shapes, minutes on an
  H100, 2026-11-26) and bakes it into every program."""
  fwd = jax.jit(lambda q, k, v: fn(q, k, v, causal, **cfg))
  loss = lambda q, k, v, w: jnp.sum(fn(q, k, v, causal, **cfg).astype(jnp.float32) * w)
  return fwd, jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


def inputs(B, N, H, D, dtype, seed=0):
  q, k, v = jax.random.normal(jax.random.key(seed), (3, B, N, H, D), jnp.float32)
  w = jax.random.normal(jax.random.key(seed + 1), (B, N, H, D), jnp.float32)
  return (q.astype(dtype), k.astype(dtype), v.astype(dtype)), w


def _shape(N, D, interpret):
  """(B, H) of a speed or tuning case: B·N = TOKENS, H·D = HIDDEN (tiny in interpret)."""
  return (1, 2) if interpret else (max(1, TOKENS // N), HIDDEN // D)


def _error(e) -> str:
  return f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"


def tune(D, causal, N, grid, runs, interpret, log):
  """Every configuration's forward and forward+backward seconds (or its error)."""
  B, H = _shape(N, D, interpret)
  x, w = inputs(B, N, H, D, jnp.bfloat16)
  rows = []
  for cfg in _configs(grid):
    row = dict(cfg)
    try:
      fwd, bwd = jitted(paths(interpret, False)["flash_pallas"], causal, cfg)
      row.update(timing.interleaved({"fwd": fwd, "fwd_bwd": bwd}, {"fwd": x, "fwd_bwd": (*x, w)},
                                    runs))
    except Exception as e:   # a tile that does not fit: recorded, not fatal
      row["error"] = _error(e)
    rows.append(row)
    log(f"tune D={D} causal={causal} {cfg}: "
        + (f"fwd {row['fwd'] * 1e3:.3f} ms, fwd+bwd {row['fwd_bwd'] * 1e3:.3f} ms"
           if "error" not in row else row["error"]))
  ok = [r for r in rows if "error" not in r]
  if not ok:
    raise RuntimeError(f"no flash_pallas configuration ran at D={D}, causal={causal}")
  pick = lambda m: {k: min(ok, key=lambda r: r[m])[k] for k in TILE_KEYS}
  return dict(N=N, B=B, H=H, rows=rows, best_fwd=pick("fwd"), best_fwd_bwd=pick("fwd_bwd"))


def errors(D, causal, interpret, cfg):
  """Max |flash_pallas - xla| in bf16, forward and gradients, with fp32 xla for scale."""
  B, N, H = 2, 1024 if not interpret else 64, 4
  (q, k, v), w = inputs(B, N, H, D, jnp.bfloat16, seed=7)
  P = paths(interpret, False)
  f32 = lambda x: x.astype(jnp.float32)
  res = {}
  for name, dt in (("flash_pallas", jnp.bfloat16), ("xla", jnp.bfloat16),
                   ("xla_fp32", jnp.float32)):
    fn = P["xla" if name.startswith("xla") else name]
    fwd, bwd = jitted(fn, causal, cfg if name == "flash_pallas" else {})
    a = tuple(x.astype(dt) for x in (q, k, v))
    res[name] = (f32(fwd(*a)), tuple(f32(g) for g in bwd(*a, w)))
  ref = res["xla_fp32"]
  err = lambda r: dict(out=float(jnp.abs(r[0] - ref[0]).max()),
                       **{f"d{n}": float(jnp.abs(a - b).max())
                          for n, a, b in zip("qkv", r[1], ref[1])})
  return dict(shape=[B, N, H, D], flash_pallas_vs_fp32=err(res["flash_pallas"]),
              xla_bf16_vs_fp32=err(res["xla"]))


# The case that came out wrong on an H200 (2026-11-26, tests/attention/test_flash.py
# test_flash_bf16_gradients_close_to_fp32): bf16, causal, (B, Tq, Tk, Hq, Hkv, D, Dv)
# = (1, 37, 53, 2, 1, 4, 6), kernel tiles 64/16; dq off by up to 1.09 (77 of 296
# elements), where interpret mode is within 0.017 at every tile choice (0.042 on the
# inputs below, which are not the test's).
BISECT_SHAPES = {"odd (failed)": (1, 37, 53, 2, 1, 4, 6), "odd, D=Dv=16": (1, 37, 53, 2, 1, 16, 16),
                 "aligned": (1, 64, 64, 2, 1, 16, 16), "Tq=Tk=53": (1, 53, 53, 2, 1, 4, 6)}
BISECT_TILES = ((64, 16), (16, 16), (64, 64), (32, 16), (16, 64))


def tile_errors(interpret, shapes=None, tiles=BISECT_TILES, causal=True, log=print) -> list:
  """Max |flash_pallas bf16 - softmax float32| of the output and of dq, dk, dv, per
  (shape, tiles): which tile choice or shape makes the kernels differ on a GPU. A tile
  is (block_q, block_k) or (block_q, block_k, num_warps, num_stages) (None: the
  kernel's default)."""
  import numpy as np
  import attention
  rows = []
  for name, (B, Tq, Tk, Hq, Hkv, D, Dv) in (shapes or BISECT_SHAPES).items():
    r = np.random.default_rng(0)
    q, k, v = (jnp.asarray(r.normal(size=s), jnp.float32) for s in
               ((B, Tq, Hq, D), (B, Tk, Hkv, D), (B, Tk, Hkv, Dv)))
    w = jnp.asarray(r.normal(size=(B, Tq, Hq, Dv)), jnp.float32)

    def grads(fn, *x):
      f = lambda q, k, v: jnp.sum(fn(q, k, v).astype(jnp.float32) * w)
      return (fn(*x).astype(jnp.float32),
              *(g.astype(jnp.float32) for g in jax.grad(f, argnums=(0, 1, 2))(*x)))

    ref = jax.jit(lambda *x: grads(lambda q, k, v: attention.get("softmax")(
        q, k, v, causal=causal), *x))(q, k, v)
    for tile in tiles:
      bq, bk, nw, ns = (*tile, None, None)[:4]
      fn = lambda q, k, v: flash_pallas(q, k, v, causal=causal, block_q=bq, block_k=bk,
                                        interpret=interpret, num_warps=nw, num_stages=ns)
      try:
        got = jax.jit(lambda *x: grads(fn, *x))(*(x.astype(jnp.bfloat16) for x in (q, k, v)))
        err = {n: float(jnp.abs(a - b).max()) for n, a, b in zip(
            ("out", "dq", "dk", "dv"), got, ref)}
      except Exception as e:      # a tile the kernel refuses: recorded
        err = {"error": _error(e)}
      rows.append(dict(shape=name, block_q=bq, block_k=bk, num_warps=nw, num_stages=ns,
                       **err))
      log(f"{name:14s} tiles {bq:3d}/{bk:3d} warps {nw} stages {ns}: " + ", ".join(
          f"{n} {x:.4f}" if isinstance(x, float) else f"{n} {x}" for n, x in err.items()))
  return rows


def speed(D, causal, lens, cfgs, runs, interpret, have_cudnn, log, only=PATHS):
  """{N: {path: {fwd, fwd_bwd}}} seconds, or the error a path raised at that size."""
  out = {}
  for N in lens:
    B, H = _shape(N, D, interpret)
    x, w = inputs(B, N, H, D, jnp.bfloat16)
    fns, args = {}, {}
    for name, fn in paths(interpret, have_cudnn, only).items():
      for mode in ("fwd", "fwd_bwd"):
        cfg = cfgs[mode] if name == "flash_pallas" else {}
        try:
          f = jitted(fn, causal, cfg)[0 if mode == "fwd" else 1]
          a = x if mode == "fwd" else (*x, w)
          jax.block_until_ready(f(*a))
          fns[name, mode], args[name, mode] = f, a
        except Exception as e:   # cuDNN refusing a shape, XLA out of memory: recorded
          out.setdefault(N, {}).setdefault(name, {})[mode] = _error(e)
    t = timing.interleaved(fns, args, runs)
    row = out.setdefault(N, {})
    for (name, mode), s in t.items():
      row.setdefault(name, {})[mode] = s
    row["B"], row["H"] = B, H
    log(f"D={D} causal={causal} N={N}: " + ", ".join(
        f"{n} {m} {s * 1e3:.3f} ms" for (n, m), s in t.items()))
  return out


def run(out, command, *, lens, head_dims, causals, tune_len, runs, dry, grid=None,
        only=PATHS, log=print) -> dict:
  """The whole study; gpu.json is written after every case (cases of an earlier call
  on the same device are kept) and returned."""
  on_gpu = jax.default_backend() == "gpu"
  interpret = dry or not on_gpu   # a dry run is interpret mode on tiny shapes, also on a GPU
  res = dict(run=pages.run_record(command, "dry" if dry else "gpu",
                                  jaxlib=__import__("jaxlib").__version__),
             name="dry" if dry else timing.device_name(),
             device=f"{jax.devices()[0].device_kind} ({jax.devices()[0].platform})",
             dry=dry, cases={})
  res["peak"] = timing.matmul_peak(512 if dry else 8192, jnp.bfloat16, 3 if dry else 10)
  log(f"{res['device']}: bf16 matmul peak {timing.peak_text(res['peak'], 1e12, 'TFLOP/s', 1)}")
  path = os.path.join(out, f"gpu_{res['name']}.json")
  old = pages.read_json(path)
  if old and old.get("device") == res["device"] and old.get("dry") == dry:
    res["cases"] = old["cases"]
    res["earlier"] = old.get("earlier", []) + [old["run"]]
  grid = grid or (DRY_TUNE if dry else TUNE)
  for D in head_dims:
    for causal in causals:
      t = tune(D, causal, tune_len, grid, runs, interpret, log)
      cfgs = dict(fwd=t["best_fwd"], fwd_bwd=t["best_fwd_bwd"])
      res["cases"][f"D{D}_{'causal' if causal else 'full'}"] = dict(
          D=D, causal=causal, tuning=t, errors=errors(D, causal, interpret, cfgs["fwd"]),
          speed=speed(D, causal, lens, cfgs, runs, interpret, on_gpu and not dry, log,
                      only))
      pages.write_json(path, res)
  return res


def write_page(res, out):
  """<out>/gpu_<name>.md from the study's results (res['name']: h100, h200, dry)."""
  peak = res["peak"]["flop_per_s"]
  earlier = res.get("earlier")
  L = ["# flash_pallas on a GPU", "",
       pages.header(res["run"]) + f" Device: **{res['device']}**, jaxlib "
       f"{res['run']['jaxlib']}. Every number comes from that run"
       + ("" if not earlier else " and, for the cases it did not redo, from "
          + "; ".join(f"`{e['command']}` ({e['date']})" for e in earlier)
          + " on the same device") + f" (`gpu_{res['name']}.json`).", "",
       f"bf16 matmul peak, measured in the same process: "
       f"{timing.peak_text(res['peak'], 1e12, 'TFLOP/s')}.", "",
       "TFLOP/s use the FlashAttention papers' count: 4·B·H·N²·D for the forward, half "
       "of it causal, 3.5× for forward+backward; B·N = 16384 tokens, H·D = 2048. Times "
       "are medians, interleaved round by round across the paths.", ""]
  if res.get("dry"):
    L += ["**Dry run (on a CPU, or in Pallas interpret mode on a GPU): a test of this "
          "script, not a measurement.**", ""]
  for r in res["cases"].values():
    D, causal, t = r["D"], r["causal"], r["tuning"]
    L += [f"## D = {D}, {'causal' if causal else 'not causal'}", "",
          f"Tuned at N={t['N']}: forward {t['best_fwd']}, forward+backward "
          f"{t['best_fwd_bwd']} ({len(t['rows'])} configurations, "
          f"{sum('error' in x for x in t['rows'])} failed to build or run).", "",
          "| N | path | fwd ms | fwd TFLOP/s | of peak | fwd+bwd ms | fwd+bwd TFLOP/s | "
          "of peak | flash_pallas / cuDNN fwd speed |", "|---|---|---|---|---|---|---|---|---|"]
    for N, row in r["speed"].items():
      N, B, H = int(N), row["B"], row["H"]
      for name in ("flash_pallas", "cudnn", "xla"):
        if name not in row:
          continue
        cells = []
        for mode in ("fwd", "fwd_bwd"):
          cells += speed_cells(row[name].get(mode), fa_flops(B, H, N, D, causal, mode),
                               (peak,))
        vs = ""
        if name == "flash_pallas" and isinstance(row.get("cudnn", {}).get("fwd"), float):
          vs = f"{row['cudnn']['fwd'] / row['flash_pallas']['fwd']:.2f}×"
        L.append(f"| {N} | {name} | " + " | ".join(cells) + f" | {vs} |")
    over = [f"{name} N={N} {m}" for N, row in r["speed"].items() for name in PATHS
            for m in ("fwd", "fwd_bwd") if isinstance(row.get(name, {}).get(m), float)
            and fa_flops(row["B"], row["H"], int(N), D, causal, m) / row[name][m] > peak]
    if over:
      L += ["", f"**Above the matmul peak measured in this run: {', '.join(over)}.** "
            "That peak was probably measured low (the GPU not yet at full clocks: before 2026-11-26 "
            "the peak had one warm-up call, now 0.5 s of calls), so read the 'of peak' "
            "columns as relative only; the times and the ratios to cuDNN stand."]
    e = r["errors"]
    L += ["", f"Max |difference| from float32 XLA at {e['shape']} (B, N, H, D): "
          f"flash_pallas bf16 {e['flash_pallas_vs_fp32']}, XLA bf16 "
          f"{e['xla_bf16_vs_fp32']}.", ""]
  pages.write_text(os.path.join(out, f"gpu_{res['name']}.md"), L)
