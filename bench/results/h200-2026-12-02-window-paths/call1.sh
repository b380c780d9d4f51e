#!/usr/bin/env bash
# Call 1 (the window in two paths, ead626d = window-paths.patch on 503c17f): XLA's PTX of the Pallas kernel and
# pip ptxas on it, an ncu profile of both kernels at 65,536, the bitwise matrix + interleaved timing against the row pairs
# kernel (bench/baselines/categorical_td_target_rowpair.py, f5d7832), the contract checks.
# Detached into /tmp/k; snapshots /tmp/k.tgz after each stage; /tmp/k/DONE marks the end.
set -u
T0=$(date +%s)
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
D=bench/results/h200-2026-12-02-window-paths
K=/tmp/k; rm -rf $K; mkdir -p $K
snap() { echo "[$(( $(date +%s) - T0 ))s] $1" >> $K/progress; tar czf /tmp/k.tgz.part -C /tmp k && mv /tmp/k.tgz.part /tmp/k.tgz; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $K/gpu.txt 2>&1
python3 -c "import torch, triton, jax, jaxlib, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'jax', jax.__version__, 'jaxlib', jaxlib.__version__)" > $K/versions.txt 2>&1
git log -1 --format=%H > $K/commit.txt 2>&1; git status --short >> $K/commit.txt 2>&1
snap start
mkdir -p $K/xla_dump
XLA_FLAGS="--xla_dump_to=/tmp/xd" timeout 120 python3 $D/xla_ptx.py > $K/xla_ptx.log 2>&1; echo "rc=$?" >> $K/xla_ptx.log
cp /tmp/xd/*.ptx $K/xla_dump/ 2>/dev/null; ls /tmp/xd | head -50 > $K/xla_dump/listing.txt
PTXAS=$(python3 -c "import triton, os; print(os.path.join(os.path.dirname(triton.__file__), 'backends/nvidia/bin/ptxas'))")
for f in $K/xla_dump/*.ptx; do $PTXAS -v --gpu-name sm_90a "$f" -o /tmp/x.cubin >> $K/xla_dump/ptxas_v.txt 2>&1; done
$PTXAS --version >> $K/xla_dump/ptxas_v.txt 2>&1
snap xla
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
timeout 150 $NCU --profile-from-start off --set full --import-source no --export $K/ncu_both \
  python3 -m bench.gpu_ncu_kernel --sizes 65536 --backends triton,pallas > $K/ncu.log 2>&1
$NCU --import $K/ncu_both.ncu-rep --page raw --csv > $K/ncu_both.csv 2>&1
python3 -m bench.gpu_ncu_kernel --summary $K/ncu_both.csv > $K/ncu_summary.md 2>&1
rm -f $K/ncu_both.ncu-rep
snap ncu
timeout 300 python3 -m bench.gpu_bitwise --out $K/bitwise --rounds 5 --sweep "" \
  --baseline-kernel bench/baselines/categorical_td_target_rowpair.py > $K/bitwise.log 2>&1; echo "bitwise rc=$?" >> $K/bitwise.log
snap bitwise
timeout 200 python3 -m bench.gpu_checks --out $K/checks > $K/checks.log 2>&1; echo "checks rc=$?" >> $K/checks.log
snap checks
touch $K/DONE; snap done
