#!/usr/bin/env bash
# Call 3 (the row pairs with the two window paths: 64 registers): bitwise matrix + interleaved timing against main's
# previous kernel (bench/baselines/categorical_td_target_cut2.py), the contract checks, an ncu profile of both kernels.
set -u
T0=$(date +%s)
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
K=$OUT/k3; mkdir -p $K
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $K/gpu.txt 2>&1
python3 -c "import torch, triton, jax, jaxlib, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'jax', jax.__version__, 'jaxlib', jaxlib.__version__)" > $K/versions.txt 2>&1
echo "[$(( $(date +%s) - T0 ))s] bitwise" >> $K/progress
timeout 290 python3 -m bench.gpu_bitwise --out $K/bitwise --rounds 5 --sweep "" \
  --baseline-kernel bench/baselines/categorical_td_target_cut2.py > $K/bitwise.log 2>&1; echo "bitwise rc=$?" >> $K/bitwise.log
echo "[$(( $(date +%s) - T0 ))s] checks" >> $K/progress
timeout 130 python3 -m bench.gpu_checks --out $K/checks > $K/checks.log 2>&1; echo "checks rc=$?" >> $K/checks.log
echo "[$(( $(date +%s) - T0 ))s] ncu" >> $K/progress
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
(timeout 80 $NCU --profile-from-start off --set full --import-source no --export $K/ncu_both \
  python3 -m bench.gpu_ncu_kernel --sizes 65536,1048576 --backends triton,pallas > $K/ncu.log 2>&1
 $NCU --import $K/ncu_both.ncu-rep --page raw --csv > $K/ncu_both.csv 2>&1
 python3 -m bench.gpu_ncu_kernel --summary $K/ncu_both.csv > $K/ncu_summary.md 2>&1)
rm -f $K/ncu_both.ncu-rep
echo "[$(( $(date +%s) - T0 ))s] done" >> $K/progress
cat $K/progress; grep -v "^WARNING" $K/bitwise.log | tail -7; grep -E "FAILED|rc=" $K/checks.log; grep -E "^##|duration|registers|warp instr" $K/ncu_summary.md
tar czf $OUT/k3.tgz -C $OUT k3; rm -rf $K
