#!/usr/bin/env bash
# Call 1: the pallas-rpp branch (copied as _pallas/) on its own: bitwise matrix + interleaved timing, then an ncu
# profile of the Triton kernel at large B; then learning batch 1 starts (MPS) and the Pallas contract checks run
# beside it (correctness only).
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
K=$OUT/k; mkdir -p $K
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $K/gpu.txt 2>&1
python3 -c "import torch, triton, jax, jaxlib, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'jax', jax.__version__, 'jaxlib', jaxlib.__version__)" > $K/versions.txt 2>&1
cat _pallas/COMMIT > $K/commit.txt
echo "[$(( $(date +%s) - T0 ))s] bitwise" 
(cd _pallas && PYTHONPATH=/tmp/site:$PWD timeout 330 python3 -m bench.gpu_bitwise --out $K/bitwise --rounds 5 --sweep "" \
  --baseline-kernel bench/baselines/categorical_td_target_v2.py > $K/bitwise.log 2>&1; echo "bitwise rc=$?" >> $K/bitwise.log)
tail -30 $K/bitwise.log
echo "[$(( $(date +%s) - T0 ))s] ncu"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
(PYTHONPATH=/tmp/site:$PWD timeout 120 $NCU --profile-from-start off --set full --import-source no \
  --export $K/ncu_kernel python3 -m bench.gpu_ncu_kernel --sizes 65536,1048576 > $K/ncu.log 2>&1
 $NCU --import $K/ncu_kernel.ncu-rep --page details > $K/ncu_kernel.txt 2>&1
 $NCU --import $K/ncu_kernel.ncu-rep --page raw --csv > $K/ncu_kernel.csv 2>&1
 PYTHONPATH=/tmp/site:$PWD python3 -m bench.gpu_ncu_kernel --summary $K/ncu_kernel.csv > $K/ncu_summary.md 2>&1)
tail -5 $K/ncu.log; cat $K/ncu_summary.md
echo "[$(( $(date +%s) - T0 ))s] learning batch 1"
MPS=1 RUNS="$RUNS1" PER_GPU=8 BUDGET=1500 OVERRIDES="num_threads=2" bash bench/gpu_learning.sh start
echo "[$(( $(date +%s) - T0 ))s] pallas checks beside the runs"
(cd _pallas && PYTHONPATH=/tmp/site:$PWD timeout 200 python3 -m bench.gpu_checks --out $K/checks \
  --sections pallas_determinism,pallas_vjp,nan_policy,strict > $K/checks.log 2>&1; echo "checks rc=$?" >> $K/checks.log)
tail -15 $K/checks.log
tar czf $OUT/k.tgz -C $OUT k
[ $(stat -c %s $OUT/k.tgz) -gt 15000000 ] && tar czf $OUT/k.tgz -C $OUT --exclude=k/ncu_kernel.ncu-rep k
rm -rf $K; ls -l $OUT
echo "[$(( $(date +%s) - T0 ))s] done"
