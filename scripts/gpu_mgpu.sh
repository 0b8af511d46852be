#!/usr/bin/env bash
# One device call for flash_mgpu (issue 82, item 1), each step under its own time limit:
#   1. the kernels' tests on the GPU: tests/attention/test_flash_mgpu.py (the study's
#      float64 checks, compiled) and the registry contract for flash_mgpu;
#   2. python -m scripts.mgpu_bench: correctness, tuning and speed against cuDNN and
#      jax's attention_mgpu (new cases stop at BENCH_S - 90 s).
#   bash scripts/gpu_mgpu.sh [TESTS_S=150] [BENCH_S=330]     (repo root, on the GPU)
# Expects .whl/ beside the checkout (bash ../shared/gpu/wheels.sh), carried.
# Writes to $OUT: run.log, tests_mgpu.log, mgpu_<device>.json and .md.
set -u
T0=$(date +%s)
TESTS_S=${1:-150}
BENCH_S=${2:-330}
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
LOG=$OUT/run.log
say() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$LOG"; }
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >>"$LOG" 2>&1 || { say "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm \
  --format=csv >>"$LOG" 2>&1
python3 -c 'import jax, jaxlib, sys; print(sys.version.split()[0], "jax", jax.__version__, "jaxlib", jaxlib.__version__, jax.devices())' >>"$LOG" 2>&1
say "setup done"
timeout -s INT -k 15 "$TESTS_S" python3 -m pytest -q -n 4 -p no:cacheprovider --tb=short \
  tests/attention/test_flash_mgpu.py "tests/attention/test_contract.py" -k "flash_mgpu or test_flash_mgpu" \
  >"$OUT/tests_mgpu.log" 2>&1
say "tests status $? ($(tail -1 "$OUT/tests_mgpu.log"))"
timeout -s INT -k 15 "$BENCH_S" python3 -m scripts.mgpu_bench --out="$OUT" --runs=5 \
  --budget_s=$(( BENCH_S - 90 )) >>"$LOG" 2>&1
say "bench status $?"
