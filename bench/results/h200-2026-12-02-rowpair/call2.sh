#!/usr/bin/env bash
# Call 2 (the row pairs in both kernels, pinned): bitwise matrix + interleaved timing against main's previous kernel
# (bench/baselines/categorical_td_target_cut2.py), a launch sweep, the contract checks, an ncu profile of both kernels.
# Runs detached into /tmp/k (a later call tars it into its $OUT); /tmp/k/DONE marks the end.
set -u
T0=$(date +%s)
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
K=/tmp/k; rm -rf $K; mkdir -p $K
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $K/gpu.txt 2>&1
python3 -c "import torch, triton, jax, jaxlib, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'jax', jax.__version__, 'jaxlib', jaxlib.__version__)" > $K/versions.txt 2>&1
echo "[$(( $(date +%s) - T0 ))s] bitwise" >> $K/progress
timeout 300 python3 -m bench.gpu_bitwise --out $K/bitwise --rounds 5 --sweep "" \
  --baseline-kernel bench/baselines/categorical_td_target_cut2.py > $K/bitwise.log 2>&1; echo "bitwise rc=$?" >> $K/bitwise.log
echo "[$(( $(date +%s) - T0 ))s] sweep" >> $K/progress
timeout 200 python3 -m bench.gpu_bitwise --out $K/sweep --rounds 5 --skip-bitwise --sizes 2048,65536,1048576 \
  --sweep 2:1:1,2:1:2,2:1:8,1:1:4,1:1:16 > $K/sweep.log 2>&1; echo "sweep rc=$?" >> $K/sweep.log
echo "[$(( $(date +%s) - T0 ))s] checks" >> $K/progress
timeout 200 python3 -m bench.gpu_checks --out $K/checks > $K/checks.log 2>&1; echo "checks rc=$?" >> $K/checks.log
echo "[$(( $(date +%s) - T0 ))s] ncu" >> $K/progress
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
(timeout 150 $NCU --profile-from-start off --set full --import-source no --export $K/ncu_both \
  python3 -m bench.gpu_ncu_kernel --sizes 65536,1048576 --backends triton,pallas > $K/ncu.log 2>&1
 $NCU --import $K/ncu_both.ncu-rep --page raw --csv > $K/ncu_both.csv 2>&1
 python3 -m bench.gpu_ncu_kernel --summary $K/ncu_both.csv > $K/ncu_summary.md 2>&1)
rm -f $K/ncu_both.ncu-rep
echo "[$(( $(date +%s) - T0 ))s] done" >> $K/progress
touch $K/DONE
