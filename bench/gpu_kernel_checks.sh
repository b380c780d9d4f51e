#!/usr/bin/env bash
# One GPU call for the kernels' contracts and timings (about 3-4 minutes on an H200):
#   bench.gpu_checks   eager host time at B = 512 beside a bare launch and an empty custom op, determinism (100
#                      repeats), NaN policy, strict mode, torch.compile(fullgraph=True), CUDA-graph capture and
#                      replay, torch.library.opcheck, the Pallas custom_vjp contract;
#   bench.gpu_bitwise  the bitwise Triton == Pallas case matrix, then the interleaved timings (5 rounds).
# Writes gpu.txt, checks/results.json, checks.log, bitwise/results.json and bitwise.log under $1 (default $OUT);
# exit status 1 if any check failed. Environment: CHECKS_BUDGET, BITWISE_BUDGET (seconds), BITWISE_ARGS (more
# bench.gpu_bitwise arguments, e.g. "--baseline-kernel <previous kernel .py>" or "--skip-bitwise").
set -o pipefail
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
R="${1:-$OUT}"
mkdir -p "$R"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$R/gpu.txt"
status=0
timeout "${CHECKS_BUDGET:-110}" python3 -m bench.gpu_checks --out "$R/checks" 2>&1 | tee "$R/checks.log" \
  | grep -v '^[EW][0-9]\{4\} ' | tail -45 || status=1
# shellcheck disable=SC2086  (BITWISE_ARGS is a list of arguments)
timeout "${BITWISE_BUDGET:-130}" python3 -m bench.gpu_bitwise --out "$R/bitwise" --rounds 5 --sweep "" \
  ${BITWISE_ARGS:-} 2>&1 | tee "$R/bitwise.log" | grep -v '^[EW][0-9]\{4\} ' | grep -v '^bitwise True' | tail -25 \
  || status=1
exit $status
