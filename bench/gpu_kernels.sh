#!/usr/bin/env bash
# One H200 call for both kernels (issues 3, 4, 8): Triton validation + benchmark; Pallas validation, Triton <-> Pallas
# parity through DLPack and Pallas timing; then the cascaded harness on a budget. Everything is packed into
# $OUT/results.tgz (the device tool returns at most 8 files); unpack it into bench/results/.
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
R="$OUT/r"
mkdir -p "$R"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
timeout "${TRITON_BUDGET:-170}" python3 -m bench.gpu_triton --out "$R/triton" \
  --sections correctness,determinism,compile,timing,config_sweep 2>&1 | grep -v '^[EW][0-9]\{4\} ' > "$R/triton.log"
tail -30 "$R/triton.log"
timeout "${PALLAS_BUDGET:-90}" python3 -m bench.gpu_pallas --out "$R/pallas" > "$R/pallas.log" 2>&1
tail -25 "$R/pallas.log"
timeout "${HARNESS_BUDGET:-70}" python3 -m bench.harness --out "$R/harness" --sizes "${HARNESS_SIZES:-512,2048,65536}" \
  --trials 2 --budget-s "$(( ${HARNESS_BUDGET:-70} - 20 ))" > "$R/harness.log" 2>&1
tail -25 "$R/harness.log"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
