"""What the attention benchmark (studies.bench.benchmark) measures: its presets (the
shapes, lengths, budgets and targets of each run), the variants it does not time on a
CPU and why, and its sections.
"""
from __future__ import annotations

import dataclasses

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


# The presets of this study, in one place.
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
                               "kernel (timed on a GPU by the GPU benchmark)",
               "flash_mgpu": "Mosaic GPU kernels for Hopper: off one they run in the "
                             "Mosaic GPU interpreter, which simulates every warpgroup "
                             "(timed on an H100/H200 by scripts/mgpu_bench.py)"}

SECTIONS = ("sweep", "decode", "targets", "generation")
