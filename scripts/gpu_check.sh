#!/usr/bin/env bash
# The GPU checks of one device call, in the order of their worth per GPU-second, each
# under its own time limit so that the whole fits one call (issue 44's list, cut to the
# lease): flash_pallas against cuDNN, the research loop's speed and generation, then the
# test suite (the tests that exercise the device first, the rest with the time left).
#
#   bash scripts/gpu_check.sh [BUDGET_S=570]      (on the GPU machine, from the repo root)
#
# Expects there, beside the checkout (carried, both ignored by git):
#   .whl/     the wheels the machine's image lacks (bash ../shared/gpu/wheels.sh)
#   .mirror/  a copy of the data mirror (cp -r ../shared/data .mirror), or
#             $ATTNLAB_DATA_MIRROR pointing at one
# Writes to $OUT (default /tmp/gpu_out), at most 8 files: run.log (versions, setup, both
# benchmarks' output), gpu.json, train_<device>.json, tests_core.log, tests_rest.log.
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

# 1. flash_pallas against cuDNN, bf16: two known tiles (the 2026-11-22 H100 tuning's
#    best at D=64 and the one that fits D=128), N 4k and 16k, D 64 then 128.
say "benchmark_gpu"
timeout 100 python3 -m scripts.benchmark_gpu --out=$BENCH --lens=4096,16384 \
  --head_dims=64,128 --causal=false,true --grid=128/64/4/3,128/64/8/2 --paths=cudnn \
  --runs=10 >>"$LOG" 2>&1 || say "benchmark_gpu stopped: status $?"
save

# 2. the research loop at the paper's MNIST model: generation at batch 16, then the
#    train step in bf16 at batch 16 and 256 (rows saved as they finish).
say "benchmark_train"
timeout 200 python3 -m scripts.benchmark_train --preset=gpu --sections=generate,train \
  --gen_batches=16 --variants=softmax,linear,flash --batches=16,256 --dtypes=bfloat16 \
  --n=20 --rounds=2 --out=$BENCH >>"$LOG" 2>&1 || say "benchmark_train stopped: status $?"
save

# 3. the suite: the tests that run attention, models and training on the device first
#    (without the benchmarks' compilation cache: the suite is tested as CI runs it).
unset JAX_COMPILATION_CACHE_DIR
CORE="test_exact test_flash test_flash_pallas test_sdpa test_precision test_models
  test_decode test_generate test_linear test_gated test_fp8 test_lora test_positions
  test_packing test_local_sparse test_linformer_reformer test_contract test_registry
  test_cost test_train test_trainer"
files=(); for f in $CORE; do files+=("tests/$f.py"); done
rest=(); for f in tests/test_*.py; do
  case " $(echo $CORE) " in *" $(basename "$f" .py) "*) ;; *) rest+=("$f");; esac; done
say "tests (core): $(left) s left"
timeout $(( $(left) - 10 )) python3 -m pytest -n 14 -v --tb=short -p no:cacheprovider \
  --timeout=120 "${files[@]}" >"$OUT/tests_core.log" 2>&1
say "tests (core) status $?"
if [ "$(left)" -gt 40 ]; then
  timeout $(( $(left) - 5 )) python3 -m pytest -n 14 -v --tb=short -p no:cacheprovider \
    --timeout=120 "${rest[@]}" >"$OUT/tests_rest.log" 2>&1
  say "tests (rest) status $?"
fi
say "done"
