#!/usr/bin/env bash
# One H200 call for both kernels (issues 3 and 4): Triton validation + benchmark, then Pallas validation, Triton <->
# Pallas parity through DLPack and Pallas timing. Results land in $OUT/triton and $OUT/pallas.
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout "${TRITON_BUDGET:-270}" python3 -m bench.gpu_triton --out "$OUT/triton" \
  --sections correctness,determinism,compile,timing,config_sweep 2>&1 | grep -v '^[EW][0-9]\{4\} ' | tail -40
timeout "${PALLAS_BUDGET:-230}" python3 -m bench.gpu_pallas --out "$OUT/pallas" 2>&1 | tail -60
