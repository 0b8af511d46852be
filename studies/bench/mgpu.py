"""`flash_mgpu` (our Mosaic GPU kernels) on a Hopper GPU against cuDNN and jax's own
Mosaic GPU kernel: correctness against float64, then speed, in one process.

  1. the bf16 matmul peak measured in the process (`timing.matmul_peak`) beside the
     datasheet's dense bf16 peak of the detected device (`timing.datasheet_peak`);
  2. correctness: flash_mgpu's output and gradients (bf16 and fp16; causal and not;
     GQA; D 64 and 128; lengths off the tiles) against float64 softmax attention, with
     the float32 cuDNN/XLA error in bf16 beside each as the yardstick;
  3. tuning: flash_mgpu's (block_k, stages) per head dim and causal mode at tune_len,
     forward and forward+backward, each configuration that fails recorded with its
     error;
  4. speed: N = 4k ... 16k, B·N = 16384 tokens, H·D = 2048 (as `studies.bench.gpu`),
     bf16: flash_mgpu (tuned) and cuDNN, and jax's `attention_mgpu` in fp16 (its only
     dtype; forward, and forward+backward where it has one: not causal), medians of
     `runs` interleaved rounds.
FLOPs: one count per function, `benchmark_gpu.fa_flops` (4·B·H·N²·D forward, half of it
causal, ×3.5 forward+backward) on every row, whichever kernel computed it.
Writes <out>/mgpu_<device>.json after every case, and the page from it.
"""
from __future__ import annotations

import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from attention.flash_mgpu import flash_mgpu
from studies.core import pages, timing
from studies.bench.gpu import HIDDEN, TOKENS, fa_flops, speed_cells

TUNE = ((128, 2), (64, 2), (64, 3))          # (block_k, stages) of flash_mgpu
PEERS = ("flash_mgpu", "cudnn", "jax_mgpu")


def jax_mgpu(q, k, v, causal):
  """jax's pallas/ops/gpu/attention_mgpu on the contract's layout (fp16 only; it does
  not scale: q is scaled first)."""
  from jax.experimental.pallas.ops.gpu import attention_mgpu as am
  cfg = am.TuningConfig(block_q=64, block_kv=128, max_concurrent_steps=2, causal=causal,
                        block_q_dkv=64, block_kv_dkv=64, block_q_dq=64, block_kv_dq=64)
  q = q * jnp.asarray(1.0 / math.sqrt(q.shape[-1]), q.dtype)
  return am.attention(q, k, v, cfg)


def path_fn(name, cfg):
  if name == "flash_mgpu":
    return lambda q, k, v, causal: flash_mgpu(q, k, v, causal=causal, **cfg)
  if name == "cudnn":
    return lambda q, k, v, causal: jax.nn.dot_product_attention(
        q, k, v, is_causal=causal, implementation="cudnn")
  if name == "jax_mgpu":
    return jax_mgpu
  raise ValueError(f"unknown path {name!r}; valid: {', '.join(PEERS)}")


def jitted(fn, causal):
  """fwd(q, k, v) and fwd_bwd(q, k, v, w): the gradients of sum(out * w)."""
  fwd = jax.jit(lambda q, k, v: fn(q, k, v, causal))
  loss = lambda q, k, v, w: jnp.sum(fn(q, k, v, causal).astype(jnp.float32) * w)
  return fwd, jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


def inputs(B, Tq, Tk, H, Hkv, D, dtype, seed=0):
  ks = jax.random.split(jax.random.key(seed), 4)
  q = jax.random.normal(ks[0], (B, Tq, H, D), jnp.float32)
  k = jax.random.normal(ks[1], (B, Tk, Hkv, D), jnp.float32)
  v = jax.random.normal(ks[2], (B, Tk, Hkv, D), jnp.float32)
  w = jax.random.normal(ks[3], (B, Tq, H, D), jnp.float32)
  return tuple(x.astype(dtype) for x in (q, k, v)), w


def _err(e) -> str:
  return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}" if str(e) else type(e).__name__


def reference64(q, k, v, w, causal):
  """Output and gradients of float64 softmax attention (NumPy, on the host)."""
  q, k, v, w = (np.asarray(x, np.float64) for x in (q, k, v, w))
  B, Tq, H, D = q.shape
  G = H // k.shape[2]
  k, v = np.repeat(k, G, 2), np.repeat(v, G, 2)
  s = np.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(D)
  if causal:
    Tk = k.shape[1]
    ok = np.arange(Tk)[None] <= np.arange(Tq)[:, None] + (Tk - Tq)
    s = np.where(ok, s, -np.inf)
  p = np.exp(s - s.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  o = np.einsum("bhqk,bkhd->bqhd", p, v)
  do = w
  dv = np.einsum("bhqk,bqhd->bkhd", p, do)
  dp = np.einsum("bqhd,bkhd->bhqk", do, v)
  ds = p * (dp - (dp * p).sum(-1, keepdims=True)) / math.sqrt(D)
  dq = np.einsum("bhqk,bkhd->bqhd", ds, k)
  dk = np.einsum("bhqk,bqhd->bkhd", ds, q)
  group = lambda x: x.reshape(B, x.shape[1], H // G, G, D).sum(3)
  return o, dq, group(dk), group(dv)


CHECKS = (  # (B, Tq, Tk, Hq, Hkv, D, causal, dtype)
    (2, 512, 512, 4, 4, 128, True, "bfloat16"),
    (2, 512, 512, 4, 4, 128, False, "bfloat16"),
    (1, 640, 640, 8, 2, 64, True, "float16"),
    (1, 300, 700, 4, 1, 64, True, "bfloat16"),
    (1, 1000, 1000, 2, 2, 96, False, "float16"),
)


def correctness(log, checks=CHECKS, **cfg) -> list:
  """Per check: max |flash_mgpu - float64| of out, dq, dk, dv (relative to the largest
  |reference| entry), and cuDNN's (or XLA's) in the same dtype beside it."""
  rows = []
  for B, Tq, Tk, H, Hkv, D, causal, dt in checks:
    (q, k, v), w = inputs(B, Tq, Tk, H, Hkv, D, jnp.dtype(dt), seed=1)
    ref = reference64(q, k, v, w, causal)
    row = dict(shape=[B, Tq, Tk, H, Hkv, D], causal=causal, dtype=dt)
    peers = {"flash_mgpu": lambda q, k, v, c: flash_mgpu(q, k, v, causal=c, **cfg),
             "sdpa": lambda q, k, v, c: __import__("attention").get("sdpa")(q, k, v, causal=c)}
    for name, fn in peers.items():
      try:
        f, g = jitted(fn, causal)
        got = [f(q, k, v), *g(q, k, v, w)]
        row[name] = {n: float(np.abs(np.asarray(x, np.float64) - r).max() / np.abs(r).max())
                     for n, x, r in zip(("out", "dq", "dk", "dv"), got, ref)}
      except Exception as e:     # a refused or failing shape: recorded
        row[name] = {"error": _err(e)}
    rows.append(row)
    log(f"check {row['shape']} causal={causal} {dt}: " + "; ".join(
        f"{n} " + ", ".join(f"{k} {x:.2e}" if isinstance(x, float) else f"{k} {x}"
                            for k, x in row[n].items()) for n in peers))
  return rows


def _shape(N, D):
  return max(1, TOKENS // N), HIDDEN // D


def tune(D, causal, N, runs, log) -> dict:
  B, H = _shape(N, D)
  x, w = inputs(B, N, N, H, H, D, jnp.bfloat16)
  rows, best = [], {}
  for bk, st in TUNE:
    cfg = dict(block_k=bk, stages=st)
    row = dict(cfg)
    for mode in ("fwd", "fwd_bwd"):
      try:
        f = jitted(path_fn("flash_mgpu", cfg), causal)[mode == "fwd_bwd"]
        a = x if mode == "fwd" else (*x, w)
        _, s = timing.timed(lambda: f(*a), runs)
        row[mode] = s
        if mode not in best or s < best[mode][1]:
          best[mode] = (cfg, s)
      except Exception as e:
        row[mode] = _err(e)
    rows.append(row)
    log(f"tune D={D} causal={causal} N={N} {cfg}: {row}")
  return {"N": N, "rows": rows, **{f"best_{m}": best[m][0] for m in best}}


def speed(D, causal, lens, cfgs, runs, log, only=PEERS) -> dict:
  out = {}
  for N in lens:
    B, H = _shape(N, D)
    row = out.setdefault(str(N), {"B": B, "H": H})
    fns, args = {}, {}
    for name in only:
      dt = jnp.float16 if name == "jax_mgpu" else jnp.bfloat16
      x, w = inputs(B, N, N, H, H, D, dt)
      for mode in ("fwd", "fwd_bwd"):
        cfg = cfgs.get(mode, {}) if name == "flash_mgpu" else {}
        try:
          f = jitted(path_fn(name, cfg), causal)[mode == "fwd_bwd"]
          a = x if mode == "fwd" else (*x, w)
          jax.block_until_ready(f(*a))
          fns[name, mode], args[name, mode] = f, a
        except Exception as e:
          row.setdefault(name, {})[mode] = _err(e)
    for (name, mode), s in timing.interleaved(fns, args, runs).items():
      row.setdefault(name, {})[mode] = s
    log(f"speed D={D} causal={causal} N={N}: " + ", ".join(
        f"{n} {m} {row[n][m] * 1e3:.3f} ms" if isinstance(row[n][m], float)
        else f"{n} {m} {row[n][m]}" for n in only if n in row for m in row[n]))
  return out


def run(out, command, *, lens, head_dims, causals, tune_len, runs, budget_s=None,
        log=print) -> dict:
  t0 = time.time()
  name = timing.device_name()
  res = dict(run=pages.run_record(command, "gpu", jaxlib=__import__("jaxlib").__version__),
             name=name, device=f"{jax.devices()[0].device_kind} ({jax.devices()[0].platform})",
             datasheet_bf16=timing.datasheet_peak("bfloat16", name), cases={})
  res["peak"] = timing.matmul_peak(8192, jnp.bfloat16, 10)
  log(f"{res['device']}: bf16 matmul peak {timing.peak_text(res['peak'], 1e12, 'TFLOP/s', 1)}")
  path = os.path.join(out, f"mgpu_{name}.json")
  res["correctness"] = correctness(log)
  pages.write_json(path, res)
  for D in head_dims:
    for causal in causals:
      if budget_s and time.time() - t0 > budget_s:
        log(f"budget of {budget_s} s spent: D={D} causal={causal} not run")
        continue
      t = tune(D, causal, tune_len, runs, log)
      cfgs = {m: t[f"best_{m}"] for m in ("fwd", "fwd_bwd") if f"best_{m}" in t}
      res["cases"][f"D{D}_{'causal' if causal else 'full'}"] = dict(
          D=D, causal=causal, tuning=t, speed=speed(D, causal, lens, cfgs, runs, log))
      pages.write_json(path, res)
  return res


def write_page(res, out):
  """<out>/mgpu_<name>.md from the study's JSON."""
  peak, ds = res["peak"]["flop_per_s"], res.get("datasheet_bf16")
  L = ["# flash_mgpu (Mosaic GPU, Hopper) against cuDNN and jax's attention_mgpu", "",
       pages.header(res["run"]) + f" Device: **{res['device']}**, jaxlib "
       f"{res['run']['jaxlib']} (`mgpu_{res['name']}.json`).", "",
       f"bf16 matmul peak measured in the same process: "
       f"{timing.peak_text(res['peak'], 1e12, 'TFLOP/s')}; datasheet dense bf16 peak: "
       + (f"{ds / 1e12:.0f} TFLOP/s." if ds else "not known for this device."), "",
       "One FLOP count per function on every row: 4·B·H·N²·D forward, half of it causal, "
       "×3.5 forward+backward (B·N = 16384, H·D = 2048). 'meas.' is the fraction of the "
       "measured matmul peak, 'sheet' of the datasheet's. jax_mgpu runs in float16 (its "
       "only dtype), the others in bfloat16.", "", "## Correctness against float64", "",
       "| shape (B, Tq, Tk, Hq, Hkv, D) | causal | dtype | flash_mgpu out / dq / dk / dv "
       "| sdpa out / dq / dk / dv |", "|---|---|---|---|---|"]
  for r in res.get("correctness", []):
    cell = lambda e: e.get("error") or " / ".join(f"{e[k]:.1e}" for k in ("out", "dq", "dk", "dv"))
    L.append(f"| {tuple(r['shape'])} | {r['causal']} | {r['dtype']} | {cell(r['flash_mgpu'])} "
             f"| {cell(r['sdpa'])} |")
  L += ["", "Errors are max |x − float64| / max |float64| per tensor.", ""]
  for r in res["cases"].values():
    D, causal, t = r["D"], r["causal"], r["tuning"]
    L += [f"## D = {D}, {'causal' if causal else 'not causal'}", "",
          f"flash_mgpu tuned at N={t['N']} over (block_k, stages) {list(TUNE)}: forward "
          f"{t.get('best_fwd')}, forward+backward {t.get('best_fwd_bwd')}.", "",
          "| N | path | fwd ms | TFLOP/s | meas. | sheet | fwd+bwd ms | TFLOP/s | meas. "
          "| sheet | / cuDNN fwd | / cuDNN fwd+bwd |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for N, row in r["speed"].items():
      N, B, H = int(N), row["B"], row["H"]
      for name in PEERS:
        if name not in row:
          continue
        cells = []
        for mode in ("fwd", "fwd_bwd"):
          cells += speed_cells(row[name].get(mode), fa_flops(B, H, N, D, causal, mode),
                               (peak, ds), 60)
        for mode in ("fwd", "fwd_bwd"):
          c, s = row.get("cudnn", {}).get(mode), row[name].get(mode)
          cells.append(f"{c / s:.2f}×" if name != "cudnn" and isinstance(c, float)
                       and isinstance(s, float) else "")
        L.append(f"| {N} | {name} | " + " | ".join(cells) + " |")
    L.append("")
  pages.write_text(os.path.join(out, f"mgpu_{res['name']}.md"), L)
