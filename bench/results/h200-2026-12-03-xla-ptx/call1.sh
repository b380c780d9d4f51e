#!/usr/bin/env bash
# Call 1: where jaxlib compiles the Pallas kernel, and with which ptxas; XLA's LLVM IR / PTX of it; ncu SASS of both
# kernels at B = 65,536; the Pallas kernel's duration and registers under XLA flag variants (ptxas choice).
# Detached into /tmp/k; snapshots /tmp/k.tgz after each stage; /tmp/k/DONE marks the end.
set -u
T0=$(date +%s)
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
D=bench/results/h200-2026-12-03-xla-ptx
K=/tmp/k; rm -rf $K; mkdir -p $K
snap() { echo "[$(( $(date +%s) - T0 ))s] $1" >> $K/progress; tar czf /tmp/k.tgz.part -C /tmp k && mv /tmp/k.tgz.part /tmp/k.tgz; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $K/gpu.txt 2>&1
python3 -c "import torch, triton, jax, jaxlib, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'jax', jax.__version__, 'jaxlib', jaxlib.__version__)" > $K/versions.txt 2>&1
git log -1 --format=%H > $K/commit.txt 2>&1; git status --short >> $K/commit.txt 2>&1
python3 $D/inspect_jax.py > $K/inspect.txt 2>&1
snap start
rm -rf /tmp/xd; XLA_FLAGS="--xla_dump_to=/tmp/xd --xla_gpu_dump_llvmir" timeout 120 python3 $D/../h200-2026-12-02-window-paths/xla_ptx.py > $K/xla_dump.log 2>&1; echo "rc=$?" >> $K/xla_dump.log
mkdir -p $K/xd; ls -la /tmp/xd > $K/xd/listing.txt 2>&1
for f in $(grep -l -r "categorical_td_target" /tmp/xd 2>/dev/null); do echo "$f" >> $K/xd/hits.txt; done
for f in $(ls /tmp/xd | grep -E "\.(ll|ptx)$|triton" ); do cp /tmp/xd/$f $K/xd/ 2>/dev/null; done
cp /tmp/xd/*jit__lambda*debug_options $K/xd/ 2>/dev/null
snap xla
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
timeout 150 $NCU --profile-from-start off --set full --import-source yes --export $K/ncu_both \
  python3 -m bench.gpu_ncu_kernel --sizes 65536 --backends triton,pallas > $K/ncu.log 2>&1
$NCU --import $K/ncu_both.ncu-rep --page raw --csv > $K/ncu_both.csv 2>&1
python3 -m bench.gpu_ncu_kernel --summary $K/ncu_both.csv > $K/ncu_summary.md 2>&1
$NCU --import $K/ncu_both.ncu-rep --page source --csv --print-source sass > $K/ncu_sass.csv 2>$K/ncu_sass.err
$NCU --import $K/ncu_both.ncu-rep --page source --csv --print-source ptx > $K/ncu_ptx.csv 2>$K/ncu_ptx.err
rm -f $K/ncu_both.ncu-rep
snap ncu
TP=$(python3 -c "import triton, os; print(os.path.join(os.path.dirname(triton.__file__), 'backends/nvidia'))")
mkdir -p /tmp/tcuda/bin; ln -sf $TP/bin/ptxas /tmp/tcuda/bin/ptxas; ln -sf $TP/bin/nvlink /tmp/tcuda/bin/nvlink 2>/dev/null
$TP/bin/ptxas --version > $K/triton_ptxas_version.txt 2>&1
i=0
for F in "" "--xla_gpu_enable_libnvptxcompiler=false" "--xla_gpu_enable_libnvptxcompiler=false --xla_gpu_cuda_data_dir=/tmp/tcuda"; do
  i=$((i+1)); echo "$F" > $K/variant$i.flags
  XLA_FLAGS="$F" timeout 100 $NCU --profile-from-start off --section LaunchStats --section SpeedOfLight --export $K/v$i \
    python3 -m bench.gpu_ncu_kernel --sizes 65536,1048576 --backends triton,pallas > $K/variant$i.log 2>&1
  $NCU --import $K/v$i.ncu-rep --page raw --csv > $K/variant$i.csv 2>&1
  python3 -m bench.gpu_ncu_kernel --summary $K/variant$i.csv > $K/variant$i.md 2>&1; rm -f $K/v$i.ncu-rep
  snap variant$i
done
touch $K/DONE; snap done
