#!/usr/bin/env bash
# Call 2 (the Pallas kernel with constant strides): ncu of both kernels at 65,536 and 1,048,576 (registers, SASS),
# a smoke run of the CUPTI kernel timing, then bash bench/gpu_kernel_checks.sh's two halves: the bitwise matrix with
# the interleaved timings (bitwise/) and the contract checks (checks/).
# Detached into /tmp/k; snapshots /tmp/k.tgz after each stage; /tmp/k/DONE marks the end.
set -u
T0=$(date +%s)
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
K=/tmp/k; rm -rf $K; mkdir -p $K
snap() { echo "[$(( $(date +%s) - T0 ))s] $1" >> $K/progress; tar czf /tmp/k.tgz.part -C /tmp k && mv /tmp/k.tgz.part /tmp/k.tgz; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $K/gpu.txt 2>&1
python3 -c "import torch, triton, jax, jaxlib, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'jax', jax.__version__, 'jaxlib', jaxlib.__version__)" > $K/versions.txt 2>&1
git log -1 --format=%H > $K/commit.txt 2>&1; git status --short >> $K/commit.txt 2>&1
snap start
timeout 60 python3 -m bench.gpu_bitwise --out $K/smoke --skip-bitwise --rounds 1 --sizes 2048 --sweep "" > $K/smoke.log 2>&1; echo "rc=$?" >> $K/smoke.log
snap smoke
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
timeout 150 $NCU --profile-from-start off --set full --import-source yes --export $K/ncu_both \
  python3 -m bench.gpu_ncu_kernel --sizes 65536,1048576 --backends triton,pallas > $K/ncu.log 2>&1
$NCU --import $K/ncu_both.ncu-rep --page raw --csv > $K/ncu_both.csv 2>&1
python3 -m bench.gpu_ncu_kernel --summary $K/ncu_both.csv > $K/ncu_summary.md 2>&1
$NCU --import $K/ncu_both.ncu-rep --page source --csv --print-source sass > $K/ncu_sass.csv 2>$K/ncu_sass.err
rm -f $K/ncu_both.ncu-rep
snap ncu
timeout 400 python3 -m bench.gpu_bitwise --out $K/bitwise --rounds 5 --sweep 2:1:1,2:1:4 > $K/bitwise.log 2>&1; echo "bitwise rc=$?" >> $K/bitwise.log
snap bitwise
timeout 200 python3 -m bench.gpu_checks --out $K/checks > $K/checks.log 2>&1; echo "checks rc=$?" >> $K/checks.log
snap checks
touch $K/DONE; snap done
