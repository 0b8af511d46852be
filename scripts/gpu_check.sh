#!/usr/bin/env bash
# The GPU checks of one device call, in the order of their worth per GPU-second, each
# under its own time limit so that the whole fits one call (issue 44's list, cut to the
# lease): the research loop's speed with a profiler trace, flash_pallas against cuDNN,
# the bf16 tile-error bisect, then the test suite with the time left.
#
#   bash scripts/gpu_check.sh [BUDGET_S=570]      (on the GPU machine, from the repo root)
#
# Expects there, beside the checkout (carried, both ignored by git):
#   .whl/     the wheels the machine's image lacks (bash ../shared/gpu/wheels.sh)
#   .mirror/  a copy of the data mirror (cp -r ../shared/data .mirror), or
#             $ATTNLAB_DATA_MIRROR pointing at one
# Writes to $OUT (default /tmp/gpu_out), at most 8 files: run.log (versions, setup, both
# benchmarks' output), gpu.json, train_<device>.json, trace_<device>.tar.gz,
# tests_rest.log, tests_core.log.
# Put the JSON files into results/benchmarks/ and rewrite the page there:
#   python -m scripts.benchmark_gpu --page_only; python -m scripts.benchmark --page_only
set -u
T0=$(date +%s)
BUDGET=${1:-570}
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
LOG=$OUT/run.log
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
say() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$LOG"; }

if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >>"$LOG" 2>&1 || { say "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export ATTNLAB_DATA_MIRROR=${ATTNLAB_DATA_MIRROR:-$PWD/.mirror}
# compiled programs kept on disk: a benchmark's repeated builds of one program compile once
export JAX_COMPILATION_CACHE_DIR=/tmp/jax_cache
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm \
  --format=csv >>"$LOG" 2>&1
python3 -c 'import jax, jaxlib, flax, optax, orbax.checkpoint as o, sys; print(sys.version.split()[0], "jax", jax.__version__, "jaxlib", jaxlib.__version__, "flax", flax.__version__, "optax", optax.__version__, "orbax", o.__version__, jax.devices())' >>"$LOG" 2>&1
python3 -m data build mnist >>"$LOG" 2>&1 || say "data build failed"
say "setup done"

BENCH=/tmp/bench
mkdir -p $BENCH
save() { cp $BENCH/*.json "$OUT/" 2>/dev/null; true; }

# 1. the research loop at the paper's MNIST model: a profiler trace of the batch-16
#    bf16 softmax step (69 ms on an H200 on 2026-11-26, 52x its FLOPs at the peak: what
#    bounds it?), then flash and linear beside softmax at batch 16 (rows saved as they
#    finish; batch 256 ran out of memory for softmax: 89 GiB of temporaries).
say "benchmark_train"
timeout 170 python3 -m scripts.benchmark_train --preset=gpu --sections=train \
  --variants=softmax,flash,linear --batches=16 --dtypes=bfloat16 --n=20 --rounds=2 \
  --trace=softmax,bfloat16,16 --out=$BENCH >>"$LOG" 2>&1 || say "benchmark_train stopped: status $?"
save; cp $BENCH/trace_*.tar.gz "$OUT/" 2>/dev/null

# 2. flash_pallas against cuDNN, bf16, causal (2026-11-26 measured D 64 and 128 not
#    causal): the tile that fits both head dims, N 4k and 16k.
say "benchmark_gpu"
timeout 100 python3 -m scripts.benchmark_gpu --out=$BENCH --lens=4096,16384 \
  --head_dims=64,128 --causal=true --grid=128/64/8/2 --paths=cudnn \
  --runs=10 >>"$LOG" 2>&1 || say "benchmark_gpu stopped: status $?"
save

# 3. the bf16 discrepancy of 2026-11-26 (flash on the GPU, dq off by up to 1.09): the
#    error per shape and tile choice of the real kernels (interpret mode: <= 0.042).
say "tile errors"
timeout 90 python3 -m scripts.benchmark_gpu --tile_errors >>"$LOG" 2>&1 || say "tile errors stopped: status $?"

# 4. the suite: the files never run on a GPU first, then those run on 2026-11-26
#    (without the benchmarks' compilation cache: the suite is tested as CI runs it).
unset JAX_COMPILATION_CACHE_DIR
CORE="test_exact test_flash test_flash_pallas test_sdpa test_precision test_models
  test_decode test_generate test_linear test_gated test_fp8 test_lora test_positions
  test_packing test_local_sparse test_linformer_reformer test_contract test_registry
  test_cost test_train test_trainer"
files=(); for f in $CORE; do files+=("tests/$f.py"); done
rest=(); for f in tests/test_*.py; do
  case " $(echo $CORE) " in *" $(basename "$f" .py) "*) ;; *) rest+=("$f");; esac; done
say "tests (rest, never run on a GPU before): $(left) s left"
timeout $(( $(left) / 2 )) python3 -m pytest -n 15 -v --tb=short -p no:cacheprovider \
  --timeout=120 "${rest[@]}" >"$OUT/tests_rest.log" 2>&1
say "tests (rest) status $?"
timeout $(( $(left) - 5 )) python3 -m pytest -n 15 -v --tb=short -p no:cacheprovider \
  --timeout=120 "${files[@]}" >"$OUT/tests_core.log" 2>&1
say "tests (core) status $?"
say "done"
