#!/usr/bin/env bash
# Call 3 (the committed tree): bench.gpu_bitwise again after its Triton kernel-time graph moved to
# bench.common.capture_cuda_graph (same graph, same pattern). Detached into /tmp/k; /tmp/k/DONE marks the end.
set -u
T0=$(date +%s)
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
K=/tmp/k; rm -rf $K; mkdir -p $K
snap() { echo "[$(( $(date +%s) - T0 ))s] $1" >> $K/progress; tar czf /tmp/k.tgz.part -C /tmp k && mv /tmp/k.tgz.part /tmp/k.tgz; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $K/gpu.txt 2>&1
git log -1 --format=%H > $K/commit.txt 2>&1; git status --short >> $K/commit.txt 2>&1
snap start
timeout 420 python3 -m bench.gpu_bitwise --out $K/bitwise --rounds 5 --sweep 2:1:1,2:1:4 > $K/bitwise.log 2>&1; echo "bitwise rc=$?" >> $K/bitwise.log
touch $K/DONE; snap done
