#!/usr/bin/env bash
# Call 1 (main with kernel-cut2 applied): bitwise matrix + interleaved timing against main's previous kernel
# (bench/baselines/categorical_td_target_rpp.py), the RPP sweep, an ncu profile at large B; the contract checks; then the
# learning batch (issue 21) starts under MPS. If the bitwise run fails,
# the previous kernels (carried as _prev/) are put back before the learning runs start.
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=/tmp/site:$PWD
K=$OUT/k; mkdir -p $K
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $K/gpu.txt 2>&1
python3 -c "import torch, triton, jax, jaxlib, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'jax', jax.__version__, 'jaxlib', jaxlib.__version__)" > $K/versions.txt 2>&1
cat _prev/COMMIT > $K/commit.txt
echo "[$(( $(date +%s) - T0 ))s] bitwise"
timeout 300 python3 -m bench.gpu_bitwise --out $K/bitwise --rounds 5 --sweep "" \
  --baseline-kernel bench/baselines/categorical_td_target_rpp.py > $K/bitwise.log 2>&1; BRC=$?
echo "bitwise rc=$BRC" >> $K/bitwise.log; tail -32 $K/bitwise.log
echo "[$(( $(date +%s) - T0 ))s] sweep"
timeout 150 python3 -m bench.gpu_bitwise --out $K/sweep --rounds 5 --skip-bitwise \
  --sweep 1:1:1,1:1:2,1:1:4,1:1:8,1:1:16 > $K/sweep.log 2>&1; echo "sweep rc=$?" >> $K/sweep.log; tail -24 $K/sweep.log
echo "[$(( $(date +%s) - T0 ))s] ncu"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
(timeout 120 $NCU --profile-from-start off --set full --import-source no \
  --export $K/ncu_kernel python3 -m bench.gpu_ncu_kernel --sizes 65536,1048576 > $K/ncu.log 2>&1
 $NCU --import $K/ncu_kernel.ncu-rep --page raw --csv > $K/ncu_kernel.csv 2>&1
 python3 -m bench.gpu_ncu_kernel --summary $K/ncu_kernel.csv > $K/ncu_summary.md 2>&1)
rm -f $K/ncu_kernel.ncu-rep; tail -3 $K/ncu.log; cat $K/ncu_summary.md
echo "[$(( $(date +%s) - T0 ))s] checks"
timeout 200 python3 -m bench.gpu_checks --out $K/checks > $K/checks.log 2>&1; echo "checks rc=$?" >> $K/checks.log
tail -25 $K/checks.log
if [ $BRC != 0 ]; then
  echo "bitwise failed: the previous kernels go back for the learning runs" | tee $K/fallback.txt
  cp _prev/triton_kernels/categorical_td_target.py triton_kernels/; cp _prev/jax_impl/pallas_kernel.py jax_impl/
fi
echo "[$(( $(date +%s) - T0 ))s] learning"
MPS=1 RUNS="torch:Hopper-v4:2000,torch:Walker2d-v4:0,torch:Walker2d-v4:1000,torch:Walker2d-v4:2000,torch:Ant-v4:0,torch:Ant-v4:1000,torch:Ant-v4:2000,torch:Humanoid-v4:0,torch:Humanoid-v4:1000,torch:Humanoid-v4:2000,jax-torchinit:HalfCheetah-v4:1000,torch-jaxinit:HalfCheetah-v4:1000" \
  PER_GPU=12 BUDGET=1250 OVERRIDES="num_threads=2" bash bench/gpu_learning.sh start
tar czf $OUT/k.tgz -C $OUT k; rm -rf $K; ls -l $OUT
echo "[$(( $(date +%s) - T0 ))s] done"
