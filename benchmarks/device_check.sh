#!/usr/bin/env bash
# The accelerator checks, in one prepared script: on a TPU or a GPU, about 10 minutes.
#
#   bash benchmarks/device_check.sh             # on the accelerator's machine
#   DRY_RUN=1 bash benchmarks/device_check.sh   # the same steps on the CPU, tiny sizes
#
# 1. the device JAX sees; 2. the fast test suite; 3. the throughput table, K members of
# the default recipe in one program, the default recipe under each policy, time to
# 0.90 and an exported StableHLO artifact run on the device (benchmarks/device_check.py);
# 4. the step costs (benchmarks/step_costs.py) and the call costs
# (benchmarks/call_costs.py). Every table is written as soon as it is measured, into
# $OUT (default benchmarks/results/<device>, e.g. benchmarks/results/tpu-v5-lite).
set -euo pipefail
cd "$(dirname "$0")/.."
# Several JAX processes share a GPU: none takes 75% of its memory up front.
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}
PYTHON=${PYTHON:-python}
if [ "${DRY_RUN:-0}" = "1" ]; then
  export JAX_PLATFORMS=cpu
  # The suite that runs this dry run runs those tests itself: here they are collected.
  TESTS=(-m "not slow" -q -n 0 --collect-only)
  FLAGS=(--dry-run)
  COSTS=0
else
  # One process holds a TPU chip: the tests run in this process, not in workers.
  TESTS=(-m "not slow" -q -x -n 0)
  FLAGS=()
  COSTS=1
fi
device=$("$PYTHON" -c "import jax; print(jax.devices()[0].device_kind.lower().replace(' ', '-'))")
OUT=${OUT:-benchmarks/results/$device}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
start=$(date +%s)
echo "== 1. the device: $device"
"$PYTHON" -c "import jax; print(jax.default_backend(), jax.devices())"
echo "== 2. the fast tests"
timeout -k 10 300 "$PYTHON" -m pytest "${TESTS[@]}" 2>&1 | tail -n 5 || true
echo "== 3. throughput, members, precision, time to accuracy, an artifact on the device"
(cd benchmarks && timeout -k 10 400 "$PYTHON" device_check.py "${FLAGS[@]}" --out "$OUT")
if [ "$COSTS" = "1" ]; then
  echo "== 4. step and call costs"
  (cd benchmarks && timeout -k 10 300 "$PYTHON" step_costs.py --out "$OUT/step_costs.md")
  (cd benchmarks && timeout -k 10 200 "$PYTHON" call_costs.py --out "$OUT/call_costs.md")
fi
echo "device check done in $(( $(date +%s) - start )) s; the tables: $OUT"
