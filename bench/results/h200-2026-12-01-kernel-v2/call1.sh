#!/usr/bin/env bash
# One device call on the exact-integer-edge-sum kernels (branch s26-kernel = main + bench/candidates patch):
# the kernel contracts and the bitwise Triton == Pallas matrix with interleaved timings (bench/gpu_kernel_checks.sh,
# previous kernel as baseline), then the Pallas target inside jitted programs (bench.pallas_in_program).
#   bash bench/results/h200-2026-12-01-kernel-v2/call1.sh      (writes under $OUT)
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
{ python3 -c "import sys, torch, jax, triton; print(sys.version.split()[0], torch.__version__, jax.__version__, triton.__version__)"
  git log -1 --format=%H 2>/dev/null; date -u +%FT%TZ; } > $OUT/versions.txt 2>&1
cat $OUT/versions.txt
CHECKS_BUDGET=110 BITWISE_BUDGET=220 \
  BITWISE_ARGS="--baseline-kernel bench/baselines/categorical_td_target_prev.py" bash bench/gpu_kernel_checks.sh $OUT/k
echo "kernel checks rc=$?"
timeout 150 python3 -m bench.pallas_in_program --out $OUT/pip --sizes 512,2048,65536 --profile > $OUT/pip.log 2>&1
echo "pallas_in_program rc=$?"; grep -v '^[EW][0-9]\{4\} ' $OUT/pip.log | tail -30
