"""The Pallas `flash_pallas` kernel on a GPU against cuDNN and XLA: tuning, speed, errors.

  python -m scripts.benchmark_gpu [--out=results/benchmarks] [--lens=1024,...,16384]
                                  [--head_dims=64,128] [--tune_len=4096] [--runs=10]
  python -m scripts.benchmark_gpu --dry --out=OUT_DIR  # CPU: interpret mode, tiny shapes

What it does, in one process on one device:
  1. the bf16 matmul peak: median TFLOP/s of an 8192² bf16 matmul (fp32 accumulation);
  2. tuning: for each head dim and causal mode, flash_pallas's forward and its
     forward+backward at --tune_len over block_q × block_k × num_warps × num_stages;
     a configuration that fails to compile (shared memory, registers) is recorded
     with its error; the fastest forward and fastest forward+backward configurations
     are kept;
  3. correctness on the device: flash_pallas's output and gradients against
     `jax.nn.dot_product_attention(implementation='xla')` in bf16, the largest
     |difference| recorded, and the float32 reference's difference beside it;
  4. speed: bf16, head dims 64 and 128, N = 1k ... 16k, causal and not, with B·N =
     16384 tokens and B·H·D = B·2048 (the FlashAttention papers' setting); forward and
     forward+backward of flash_pallas (tuned), cuDNN and XLA, median of --runs runs
     after warm-up, interleaved round by round; TFLOP/s with the papers' count
     (4·B·H·N²·D for the forward, halved when causal, ×3.5 forward+backward) and
     the fraction of the measured bf16 matmul peak.
Writes <out>/gpu.json and <out>/gpu.md, with the device, jax version and date. GPU
numbers are never written without the device's name.
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

from attention.flash_pallas import flash_pallas
from scripts.benchmark import interleaved, run_times

TOKENS, HIDDEN = 16384, 2048        # B * N and H * D of every speed case
TUNE = dict(block_q=(64, 128), block_k=(32, 64, 128), num_warps=(4, 8), num_stages=(2, 3))
DRY_TUNE = dict(block_q=(16, 32), block_k=(16,), num_warps=(4,), num_stages=(2,))


def fa_flops(B, H, N, D, causal, mode):
  """The FlashAttention papers' count: 4 B H N² D forward (two matmuls), half of it
  causal, and 2.5x that more for the backward."""
  f = 4 * B * H * N * N * D * (0.5 if causal else 1.0)
  return f * (3.5 if mode == "fwd_bwd" else 1.0)


def matmul_peak_bf16(n=8192, runs=10):
  a = jax.random.normal(jax.random.key(0), (n, n), jnp.bfloat16)
  f = jax.jit(lambda a: jnp.dot(a, a, preferred_element_type=jnp.float32))
  jax.block_until_ready(f(a))
  return 2 * n ** 3 / float(np.median(run_times(f, (a,), runs)))


def paths(interpret, have_cudnn):
  """name -> fn(q, k, v, causal, **cfg) in the contract's layout."""
  out = {
      "flash_pallas": lambda q, k, v, causal, **cfg: flash_pallas(
          q, k, v, causal=causal, interpret=interpret, **cfg),
      "xla": lambda q, k, v, causal, **cfg: jax.nn.dot_product_attention(
          q, k, v, is_causal=causal, implementation="xla"),
  }
  if have_cudnn:
    out["cudnn"] = lambda q, k, v, causal, **cfg: jax.nn.dot_product_attention(
        q, k, v, is_causal=causal, implementation="cudnn")
  return out


def jitted(fn, causal, cfg, w):
  fwd = jax.jit(lambda q, k, v: fn(q, k, v, causal, **cfg))
  loss = lambda q, k, v: jnp.sum(fn(q, k, v, causal, **cfg).astype(jnp.float32) * w)
  return fwd, jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


def inputs(B, N, H, D, dtype, seed=0):
  q, k, v = jax.random.normal(jax.random.key(seed), (3, B, N, H, D), jnp.float32)
  w = jax.random.normal(jax.random.key(seed + 1), (B, N, H, D), jnp.float32)
  return (q.astype(dtype), k.astype(dtype), v.astype(dtype)), w


def tune(D, causal, N, grid, runs, interpret, log):
  """Every configuration's forward and forward+backward seconds (or its error)."""
  B, H = max(1, TOKENS // N), HIDDEN // D
  if interpret:
    B, H = 1, 2
  x, w = inputs(B, N, H, D, jnp.bfloat16)
  rows = []
  for bq, bk, nw, ns in itertools.product(*grid.values()):
    cfg = dict(block_q=bq, block_k=bk, num_warps=nw, num_stages=ns)
    row = dict(cfg)
    try:
      fwd, bwd = jitted(paths(interpret, False)["flash_pallas"], causal, cfg, w)
      t = interleaved({"fwd": fwd, "fwd_bwd": bwd}, {"fwd": x, "fwd_bwd": x}, runs)
      row.update(t)
    except Exception as e:   # a tile that does not fit: recorded, not fatal
      row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    rows.append(row)
    log(f"tune D={D} causal={causal} {cfg}: "
        + (f"fwd {row['fwd'] * 1e3:.3f} ms, fwd+bwd {row['fwd_bwd'] * 1e3:.3f} ms"
           if "error" not in row else row["error"]))
  ok = [r for r in rows if "error" not in r]
  if not ok:
    raise RuntimeError(f"no flash_pallas configuration ran at D={D}, causal={causal}")
  pick = lambda m: {k: min(ok, key=lambda r: r[m])[k] for k in grid}
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
    fwd, bwd = jitted(fn, causal, cfg if name == "flash_pallas" else {}, w)
    a = tuple(x.astype(dt) for x in (q, k, v))
    res[name] = (f32(fwd(*a)), tuple(f32(g) for g in bwd(*a)))
  ref = res["xla_fp32"]
  err = lambda r: dict(out=float(jnp.abs(r[0] - ref[0]).max()),
                       **{f"d{n}": float(jnp.abs(a - b).max())
                          for n, a, b in zip("qkv", r[1], ref[1])})
  return dict(shape=[B, N, H, D], flash_pallas_vs_fp32=err(res["flash_pallas"]),
              xla_bf16_vs_fp32=err(res["xla"]))


def speed(D, causal, lens, cfgs, runs, interpret, have_cudnn, log):
  """{N: {path: {fwd, fwd_bwd}}} seconds, or the error a path raised at that size."""
  out = {}
  for N in lens:
    B, H = max(1, TOKENS // N), HIDDEN // D
    if interpret:
      B, H = 1, 2
    x, w = inputs(B, N, H, D, jnp.bfloat16)
    fns, args = {}, {}
    for name, fn in paths(interpret, have_cudnn).items():
      for mode in ("fwd", "fwd_bwd"):
        cfg = cfgs[mode] if name == "flash_pallas" else {}
        try:
          f = jitted(fn, causal, cfg, w)[0 if mode == "fwd" else 1]
          jax.block_until_ready(f(*x))
          fns[name, mode], args[name, mode] = f, x
        except Exception as e:   # cuDNN refusing a shape, XLA out of memory: recorded
          out.setdefault(N, {}).setdefault(name, {})[mode] = (
              f"{type(e).__name__}: {str(e).splitlines()[0][:160]}")
    t = interleaved(fns, args, runs)
    row = out.setdefault(N, {})
    for (name, mode), s in t.items():
      row.setdefault(name, {})[mode] = s
    row["B"], row["H"] = B, H
    log(f"D={D} causal={causal} N={N}: " + ", ".join(
        f"{n} {m} {s * 1e3:.3f} ms" for (n, m), s in t.items()))
  return out


# ---- the page -------------------------------------------------------------------------

def write_page(res, out):
  peak = res["peak_bf16"]
  L = ["# flash_pallas on a GPU", "",
       f"Written by `{res['command']}` on {res['date']}. Device: **{res['device']}**, "
       f"jax {res['jax']}, jaxlib {res['jaxlib']}. Every number comes from that run"
       + ("" if not res.get("earlier") else " and, for the cases it did not redo, from "
          + "; ".join(f"`{e['command']}` ({e['date']})" for e in res["earlier"])
          + " on the same device") + " (`gpu.json`).", "",
       f"bf16 matmul peak (8192², fp32 accumulation), measured in the same process: "
       f"{peak / 1e12:.0f} TFLOP/s.", "",
       "TFLOP/s use the FlashAttention papers' count: 4·B·H·N²·D for the forward, half "
       "of it causal, 3.5× for forward+backward; B·N = 16384 tokens, H·D = 2048. Times "
       "are medians, interleaved round by round across the paths.", ""]
  if res.get("dry"):
    L += ["**Dry run on a CPU in Pallas interpret mode: a test of this script, not a "
          "measurement.**", ""]
  for key, r in res["cases"].items():
    D, causal = r["D"], r["causal"]
    t = r["tuning"]
    L += [f"## D = {D}, {'causal' if causal else 'not causal'}", "",
          f"Tuned at N={t['N']}: forward {t['best_fwd']}, forward+backward "
          f"{t['best_fwd_bwd']} ({len(t['rows'])} configurations, "
          f"{sum('error' in x for x in t['rows'])} failed to build or run).", "",
          "| N | path | fwd ms | fwd TFLOP/s | of peak | fwd+bwd ms | fwd+bwd TFLOP/s | "
          "of peak | flash_pallas / cuDNN fwd speed |", "|---|---|---|---|---|---|---|---|---|"]
    for N, row in r["speed"].items():
      N = int(N)
      B, H = row["B"], row["H"]
      for name in ("flash_pallas", "cudnn", "xla"):
        if name not in row:
          continue
        cells = []
        for mode in ("fwd", "fwd_bwd"):
          s = row[name].get(mode)
          if isinstance(s, float):
            tf = fa_flops(B, H, N, D, causal, mode) / s
            cells += [f"{s * 1e3:.3f}", f"{tf / 1e12:.0f}", f"{tf / peak * 100:.0f}%"]
          else:
            cells += [str(s or "n/a"), "", ""]
        vs = ""
        if name == "flash_pallas" and isinstance(row.get("cudnn", {}).get("fwd"), float):
          vs = f"{row['cudnn']['fwd'] / row['flash_pallas']['fwd']:.2f}×"
        L.append(f"| {N} | {name} | " + " | ".join(cells) + f" | {vs} |")
    e = r["errors"]
    L += ["", f"Max |difference| from float32 XLA at {e['shape']} (B, N, H, D): "
          f"flash_pallas bf16 {e['flash_pallas_vs_fp32']}, XLA bf16 "
          f"{e['xla_bf16_vs_fp32']}.", ""]
  with open(os.path.join(out, "gpu.md"), "w") as f:
    f.write("\n".join(L) + "\n")


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--out", default="results/benchmarks")
  ap.add_argument("--lens", default="1024,2048,4096,8192,16384")
  ap.add_argument("--head_dims", default="64,128")
  ap.add_argument("--causal", default="false,true")
  ap.add_argument("--tune_len", type=int, default=4096)
  ap.add_argument("--runs", type=int, default=10)
  ap.add_argument("--dry", action="store_true",
                  help="CPU test: interpret mode, tiny shapes, no cuDNN")
  a = ap.parse_args(argv)
  on_gpu = jax.default_backend() == "gpu"
  if not on_gpu and not a.dry:
    raise SystemExit("benchmark_gpu: no GPU backend here (jax.default_backend() is "
                     f"{jax.default_backend()!r}); use --dry for a CPU test of the script")
  interpret = not on_gpu
  lens = [int(x) for x in a.lens.split(",")]
  grid = DRY_TUNE if a.dry else TUNE
  log = lambda s: print(s, flush=True)
  dev = jax.devices()[0]
  res = dict(device=f"{dev.device_kind} ({dev.platform})", jax=jax.__version__,
             jaxlib=__import__("jaxlib").__version__, date=datetime.date.today().isoformat(),
             command="python -m scripts.benchmark_gpu" + "".join(
                 f" {x}" for x in (sys.argv[1:] if argv is None else argv)),
             dry=a.dry, cases={})
  res["peak_bf16"] = matmul_peak_bf16(n=512 if a.dry else 8192, runs=3 if a.dry else 10)
  log(f"{res['device']}: bf16 matmul peak {res['peak_bf16'] / 1e12:.1f} TFLOP/s")
  os.makedirs(a.out, exist_ok=True)
  path = os.path.join(a.out, "gpu.json")
  if os.path.exists(path):   # cases of an earlier call on the same device are kept
    old = json.load(open(path))
    if old.get("device") == res["device"] and old.get("dry") == a.dry:
      res["cases"] = old["cases"]
      res["earlier"] = old.get("earlier", []) + [dict(command=old["command"],
                                                      date=old["date"])]
  for D in (int(x) for x in a.head_dims.split(",")):
    for causal in (x.strip() == "true" for x in a.causal.split(",")):
      t = tune(D, causal, a.tune_len, grid, a.runs, interpret, log)
      cfgs = dict(fwd=t["best_fwd"], fwd_bwd=t["best_fwd_bwd"])
      r = dict(D=D, causal=causal, tuning=t,
               errors=errors(D, causal, interpret, cfgs["fwd"]),
               speed=speed(D, causal, lens, cfgs, a.runs, interpret, on_gpu, log))
      res["cases"][f"D{D}_{'causal' if causal else 'full'}"] = r
      with open(path, "w") as f:   # after every case
        json.dump(res, f, indent=1)
  write_page(res, a.out)
  log(f"wrote {a.out}/gpu.md")


if __name__ == "__main__":
  main()
