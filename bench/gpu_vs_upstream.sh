#!/usr/bin/env bash
# The H200 calls for the side-by-side with upstream FlashSAC and the default-config start-up time, one phase a call:
#
#   bash bench/gpu_vs_upstream.sh vs        # python -m bench.vs_upstream: the torch and JAX agents' defaults, upstream
#                                           # eager and upstream compile_mode=default on a 7k-step recipe (5k random
#                                           # steps), one after the other, within BUDGET seconds (default 450)
#   bash bench/gpu_vs_upstream.sh default   # each agent with its default config (1M steps, 10k random steps, 50
#                                           # evaluation episodes at the start): the line naming its compute path and
#                                           # its time to first update, then the run is ended (LIMIT s each, default 150)
#
# Results go to $OUT (vs_upstream/results.{json,md} and vs_upstream/logs/, or default_{torch,jax}.log); commit them
# as bench/results/<gpu>-<date>-vs-upstream/ and run `python -m bench.vs_upstream --readme <that folder>`.
# UPSTREAM (default .upstream) is a checkout of upstream FlashSAC. Needs gymnasium, mujoco, omegaconf, hydra-core
# (+ antlr4-python3-runtime, farama-notifications, glfw, pyopengl) as cp312 wheels in .whl, carried, installed by
# the call's prefix:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#     .whl/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
PHASE=${1:?usage: gpu_vs_upstream.sh vs|default}
OUT=${OUT:?OUT: the folder results go to}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1

case $PHASE in
  vs)
    python3 -m bench.vs_upstream --upstream-dir "${UPSTREAM:-.upstream}" --out "$OUT/vs_upstream" \
      --runs-dir /tmp/vs_upstream_runs --rows "${ROWS:-torch,jax,upstream:eager,upstream:default}" \
      --num-env-steps "${STEPS:-7000}" --buffer-min-length "${RANDOM_STEPS:-5000}" --upstream-dtype-fix \
      --time-limit "${ROW_LIMIT:-200}" --budget-s "${BUDGET:-450}"
    ;;
  default)
    for fw in torch jax; do
      log="$OUT/default_$fw.log"
      setsid python3 -m "agent_$fw.train" --overrides "save_path=/tmp/default_$fw" > "$log" 2>&1 &
      pid=$!
      for _ in $(seq 1 "${LIMIT:-150}"); do
        grep -q "first update at" "$log" && break
        kill -0 "$pid" 2> /dev/null || break
        sleep 1
      done
      kill -- "-$pid" 2> /dev/null  # the run's own process group: nothing else
      wait "$pid" 2> /dev/null
      grep -E "compute path|first update at" "$log" || echo "$fw: no first update within ${LIMIT:-150} s"
    done
    ;;
  *)
    echo "unknown phase $PHASE (vs or default)" >&2
    exit 2
    ;;
esac
