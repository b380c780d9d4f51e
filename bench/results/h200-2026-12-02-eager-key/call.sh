#!/usr/bin/env bash
# Device call 1 of 2026-12-02: main against branch eager-key (copied under _ek/), eager host time alternated in
# separate processes (3 rounds), eager-key's eager-plan tests on torch 2.11, then the learning runner started.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
which nvidia-cuda-mps-control || echo "no nvidia-cuda-mps-control"
mkdir -p $OUT/ab
for r in 1 2 3; do
  for v in main key; do
    if [ $v = main ]; then d=$PWD; else d=$PWD/_ek; fi
    (cd $d && PYTHONPATH=/tmp/site:$d python3 -m bench.gpu_checks --out $OUT/ab/${v}_r$r --sections eager_host_time \
      > $OUT/ab/${v}_r$r.log 2>&1)
    grep -E "host us (op_auto |op_auto_no_grad|dispatch_only|empty_custom_op|bare_launch )" $OUT/ab/${v}_r$r.log | sed "s/^/$v r$r /"
  done
done
