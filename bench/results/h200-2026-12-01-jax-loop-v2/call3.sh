#!/usr/bin/env bash
# One device call: both CLIs on the same recipe, alternating, 3 rounds (bench.training_speed), then the JAX agent's
# paired jnp-vs-Pallas target runs (bench.paired_training) with the time left.
#   bash bench/results/h200-2026-12-01-jax-loop-v2/call3.sh     (carry .whl; writes $OUT/call3.tgz)
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
O=/tmp/c3; mkdir -p $O
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; tar czf $OUT/call3.tgz -C $O . 2>/dev/null; }
timeout 430 python3 -m bench.training_speed --out $O/training_speed --rounds 3 --num-env-steps 10000 \
  --buffer-min-length 2000 --budget-s 330 --timeout-s 120 > $O/training_speed.log 2>&1
el "training_speed rc=$?"; tail -25 $O/training_speed/results.md 2>/dev/null
L=$(( 575 - ($(date +%s) - T0) ))
timeout $L python3 -m bench.paired_training --out $O/paired --frameworks jax --seeds 0,1 --repeats 1 \
  --num-env-steps 5000 --budget-s $(( L - 90 )) --timeout-s 120 > $O/paired.log 2>&1
el "paired rc=$?"; tail -20 $O/paired/results.md 2>/dev/null
