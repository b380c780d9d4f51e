#!/usr/bin/env bash
# Call 2 (main's kernels, 0fc4373): jaxlib's PTX of the Pallas kernel and `ptxas -v` on it (pip Triton's ptxas),
# then a launch sweep of tiles per program for both kernels at large B (5 interleaved rounds).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
D=bench/results/h200-2026-12-02-window-paths
K=$OUT/call2; mkdir -p $K
timeout 120 python3 $D/jaxlib_ptx.py $K/ptx > $K/jaxlib_ptx.log 2>&1; echo "rc=$?" >> $K/jaxlib_ptx.log
PTXAS=$(python3 -c "import triton, os; print(os.path.join(os.path.dirname(triton.__file__), 'backends/nvidia/bin/ptxas'))")
$PTXAS -v --gpu-name sm_90a $K/ptx/pallas_jaxlib.ptx -o /tmp/x.cubin > $K/ptx/ptxas_v.txt 2>&1
$PTXAS --version >> $K/ptx/ptxas_v.txt 2>&1
timeout 420 python3 -m bench.gpu_bitwise --out $K/sweep --rounds 5 --skip-bitwise --sizes 2048,65536,262144,1048576 \
  --sweep 2:1:1,2:1:2,2:1:8,2:1:16 > $K/sweep.log 2>&1; echo "sweep rc=$?" >> $K/sweep.log
cd $OUT && tar czf call2.tgz call2 && rm -rf call2
