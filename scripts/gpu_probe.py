"""Short GPU probes of 2026-11-26 (H100), kept as the commands behind their figures
(results/benchmarks/gpu_runs.md):

  python scripts/gpu_probe.py embed MAX_VOCAB VARIANT [CHUNK]
      the bare train step of the paper's MNIST model (bf16, batch 16) with token
      embeddings looked up as a one-hot matmul up to MAX_VOCAB (the model config's
      one_hot_max_vocab; 0: always a gather): 4 rounds of 20 steps, steps/s each.
      Run each MAX_VOCAB in its own process (the compiled step is cached per model).
      CHUNK: the chunk size of linear/gla/deltanet's chunked causal form (default 64).
  python scripts/gpu_probe.py gen UNROLL VARIANT
      whole-image generation at the paper's MNIST model, batch 16, KV cache / RNN
      state, with the decode scan unrolled UNROLL token steps per loop trip
      (the `unroll` argument of models.generate.generate): images/s, one process per UNROLL.
  python scripts/gpu_probe.py gentrace VARIANT [TOKENS=64] [OUT_DIR=/tmp]
      a profiler trace of generating TOKENS tokens at batch 16 (KV cache / RNN state,
      the paper's MNIST model): device ops per token, the time some op ran (busy)
      against the span, and the longest op names. Many short ops with busy well
      below the span: generation is bound by launching kernels, not by arithmetic.
      The trace is kept as OUT_DIR/gentrace_<VARIANT>.tar.gz.
  python scripts/gpu_probe.py form FORM [VARIANT=linear]
      the bare train step of the paper's MNIST model (bf16, batch 16, 4 rounds of 20
      steps) with linear's causal chunks as a scan (FORM scan) or all at once (FORM
      parallel: the variant's `chunk_parallel` option, set through the model config's
      attention_options), one process per FORM.
  python scripts/gpu_probe.py kernel FORM
      linear's causal attention alone, forward + backward, at the MNIST model's shapes
      (batch 16, 784 positions, 8 heads of 32) with its chunks as a scan or all at once
      (FORM scan or parallel), float32, on any backend: the median of 7 calls.
  python scripts/gpu_probe.py tiles
      flash_pallas's bf16 error against float32 softmax at tile, warp and stage
      choices around the failing 64/16 tile (studies.bench.gpu.tile_errors).

From the repo root, with the repo on PYTHONPATH.
"""
import sys
import time

from studies.bench import gpu as G
from studies.bench import trace as tr, train as bt


def embed(max_vocab: int, variant: str, chunk: int = 0):
  c = bt.config(bt.PRESETS["gpu"], 16, variant, "bfloat16", "")
  c.model.one_hot_max_vocab = max_vocab
  if chunk:      # the chunked causal form's chunk (linear, gla, deltanet; default 64)
    import ml_collections
    c.model.attention_options = ml_collections.ConfigDict(
        {**c.model.attention_options.to_dict(), variant: {"chunk_size": chunk}})
  t = time.time()
  b = bt.Bare(c, 20)
  t = time.time() - t
  r = b.rates(4)
  print(f"EMBED one_hot_max={max_vocab} {variant}{f' chunk={chunk}' if chunk else ''} "
        f"B=16 bf16: build {t:.0f}s, "
        f"bare steps/s {[round(x, 2) for x in r]}", flush=True)


def form(name: str, variant: str = "linear"):
  import attention
  import ml_collections
  if name not in ("scan", "parallel"):
    raise SystemExit(f"form: FORM is scan or parallel, not {name!r}")
  if "chunk_parallel" not in attention.variant(variant).options:
    raise SystemExit(f"form: variant {variant!r} has no chunk_parallel option")
  c = bt.config(bt.PRESETS["gpu"], 16, variant, "bfloat16", "")
  opts = c.model.attention_options.to_dict()
  opts[variant] = {**opts.get(variant, {}), "chunk_parallel": name == "parallel"}
  c.model.attention_options = ml_collections.ConfigDict(opts)
  t = time.time()
  b = bt.Bare(c, 20)
  t = time.time() - t
  r = b.rates(4)
  print(f"FORM {name} {variant} B=16 bf16: build {t:.0f}s, "
        f"bare steps/s {[round(x, 2) for x in r]}", flush=True)


def kernel(name: str):
  import statistics
  import jax
  import attention
  if name not in ("scan", "parallel"):
    raise SystemExit(f"kernel: FORM is scan or parallel, not {name!r}")
  par = name == "parallel"
  q, k, v = (jax.random.normal(jax.random.key(i), (16, 784, 8, 32)) for i in range(3))
  f = jax.jit(jax.grad(lambda q, k, v: attention.get("linear")(
      q, k, v, causal=True, chunk_parallel=par).sum(), argnums=(0, 1, 2)))
  jax.block_until_ready(f(q, k, v))
  ts = []
  for _ in range(7):
    t = time.perf_counter()
    jax.block_until_ready(f(q, k, v))
    ts.append(time.perf_counter() - t)
  print(f"KERNEL {name} linear causal fwd+bwd (16, 784, 8, 32) float32 on "
        f"{jax.default_backend()}: {statistics.median(ts) * 1e3:.1f} ms (median of 7)",
        flush=True)


def gen(unroll: int, variant: str):
  import dataclasses
  p = dataclasses.replace(bt.PRESETS["gpu"], gen_batches=(16,),
                          gen=tuple(g for g in bt.PRESETS["gpu"].gen
                                    if g[0] == variant and g[1] == "cache"))
  for r in bt.bench_generate(p, "", log=lambda s: None, unroll=unroll):
    print(f"GEN unroll={unroll} {variant} B=16: {r['images_per_s']:.2f} images/s, "
          f"{r['ms_per_token']:.3f} ms per token step", flush=True)


def gentrace(variant: str, tokens: int, out_dir: str):
  import os
  path = tr.gen_trace(bt.PRESETS["gpu"], variant, 16, "",
                      os.path.join(out_dir, f"gentrace_{variant}.tar.gz"), tokens)
  b = tr.device_busy(path)
  print(f"GENTRACE {variant} B=16, {tokens} tokens: {b['ops']} ops "
        f"({b['ops'] / tokens:.0f} per token), busy {b['busy_ms']:.2f} of "
        f"{b['span_ms']:.2f} ms ({b['busy_ms'] / tokens * 1e3:.1f} of "
        f"{b['span_ms'] / tokens * 1e3:.1f} us per token)", flush=True)
  for proc, name, ms, n in tr.trace_summary(path, 12):
    print(f"  {proc[:24]:24s} {name[:60]:60s} {ms:8.2f} ms {n:6d} calls", flush=True)


def tiles():
  log = lambda s: print("TILE", s, flush=True)
  t = [(64, 16), (64, 16, 4, 1), (64, 16, 8, 2), (32, 16), (128, 16), (128, 32),
       (64, 32), (128, 64)]
  G.tile_errors(False, shapes={"aligned": (1, 64, 64, 2, 1, 16, 16)}, tiles=t[:4], log=log)
  G.tile_errors(False, shapes={"long D64": (1, 256, 256, 2, 1, 64, 64)}, tiles=t, log=log)


if __name__ == "__main__":
  if sys.argv[1:2] == ["embed"] and len(sys.argv) in (4, 5):
    embed(int(sys.argv[2]), sys.argv[3], int((sys.argv[4:5] or ["0"])[0]))
  elif sys.argv[1:2] == ["gen"] and len(sys.argv) == 4:
    gen(int(sys.argv[2]), sys.argv[3])
  elif sys.argv[1:2] == ["gentrace"] and 3 <= len(sys.argv) <= 5:
    gentrace(sys.argv[2], int((sys.argv[3:4] or ["64"])[0]), (sys.argv[4:5] or ["/tmp"])[0])
  elif sys.argv[1:2] == ["form"] and len(sys.argv) in (3, 4):
    form(*sys.argv[2:])
  elif sys.argv[1:2] == ["kernel"] and len(sys.argv) == 3:
    kernel(sys.argv[2])
  elif sys.argv[1:] == ["tiles"]:
    tiles()
  else:
    raise SystemExit(__doc__)
