#!/usr/bin/env bash
# The GPU checks, in one prepared script: at most 8 minutes on one GPU.
#
#   bash benchmarks/device_check.sh             # on the GPU machine
#   DRY_RUN=1 bash benchmarks/device_check.sh   # the same steps on the CPU, tiny sizes
#
# 1. the device JAX sees; 2. the fast test suite; 3. the throughput table (float32 at
# the default and at `highest` matmul precision, bfloat16), K = 1, 8, 64 members in one
# program, time to 0.90, and an exported StableHLO artifact run on the device
# (benchmarks/device_check.py). Results go to $OUT (default benchmarks/results/device).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/device}
mkdir -p "$OUT"
# Several JAX processes share the device: none takes 75% of its memory up front.
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}
PYTHON=${PYTHON:-python}
if [ "${DRY_RUN:-0}" = "1" ]; then
  export JAX_PLATFORMS=cpu
  # The suite that runs this dry run runs those tests itself: here they are collected.
  TESTS=(-m "not slow" -q -n 0 --collect-only)
  FLAGS=(--dry-run)
else
  TESTS=(-m "not slow" -q -x)
  FLAGS=()
fi
start=$(date +%s)
echo "== 1. the device"
"$PYTHON" -c "import jax; print(jax.default_backend(), jax.devices())"
echo "== 2. the fast tests"
timeout 200 "$PYTHON" -m pytest "${TESTS[@]}" 2>&1 | tail -n 5
echo "== 3. throughput, members, time to accuracy, an artifact on the device"
timeout 270 "$PYTHON" benchmarks/device_check.py "${FLAGS[@]}" --out "$OUT"
echo "device check done in $(( $(date +%s) - start )) s; the table: $OUT/device_check.md"
