#!/usr/bin/env bash
# Probe (Triton only): rows sharing a warp (BR 2 and 4 with one warp, Q = 32 / BR lanes per slot tile) against the
# pinned one-row-per-warp kernel, 5 interleaved rounds; every variant must give the pinned bits.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
P=$OUT/p; mkdir -p $P
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $P/gpu.txt 2>&1
timeout 420 python3 -m bench.gpu_bitwise --out $P/sweep --rounds 5 --skip-bitwise --sizes 512,2048,65536,1048576 \
  --sweep-kernels triton --sweep 1:1:4,1:1:16,2:1:1,2:1:2,2:1:4,2:1:8,4:1:1,4:1:2,4:1:4 > $P/sweep.log 2>&1
echo "rc=$?" >> $P/sweep.log
grep -v "^WARNING" $P/sweep.log | tail -12
