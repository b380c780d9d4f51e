#!/usr/bin/env bash
# The learning runs (python -m bench.learning) on a lent GPU machine, across chained device calls of at most 10
# minutes each while the machine stays warm (a machine is held for 30 minutes at most, and its files are lost when it
# is given back, so a run that is to count must finish within one hold; unfinished runs are checkpointed and resumed
# by the next `start` on the same machine):
#
#   bash bench/gpu_learning.sh start      # install the carried wheels, start `bench.learning run` detached
#   bash bench/gpu_learning.sh wait       # poll until it ends or LIMIT s (default 570) have passed; prints progress
#   bash bench/gpu_learning.sh collect    # every run's eval.csv / config.yaml / console log as $OUT/learning.tgz
#
# Environment: AGENTS (default torch,jax), TASKS (HalfCheetah-v4), SEEDS (0,1000,2000,3000,4000), or RUNS (a list
# AGENT:TASK:SEED,... instead of their product), STEPS (100000),
# PER_GPU (4), GPUS (0), BUDGET (the runner's budget in seconds, default 1500: each run checkpoints and exits in it),
# ROOT (/tmp/learning), OVERRIDES (space-separated KEY=VALUE for every run), MPS (1: the runs share each GPU through
# CUDA's Multi-Process Service, a control daemon this script starts with its pipes under $ROOT/mps and stops at
# `collect` once the runner has ended: kernels of different runs then execute concurrently instead of in turns; a
# run that cannot reach the daemon runs without it, so `start` prints the daemon's server list once the runs are up). Carry `.whl` (gymnasium, mujoco, omegaconf and their dependencies as cp312 wheels;
# omegaconf 2.3 needs antlr4-python3-runtime 4.9.x, published as a source archive only: `pip wheel --no-deps -w .whl
# antlr4-python3-runtime==4.9.3` builds it; with antlr4 4.13 every run fails at import, "Could not deserialize ATN").
# Then unpack learning.tgz, commit its learning/ as bench/results/learning-<gpu>-<date>/ and run
#   python -m bench.learning report bench/results/learning-* --readme
set -u
PHASE=${1:?usage: gpu_learning.sh start|wait|collect}
ROOT=${ROOT:-/tmp/learning}
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=/tmp/site:$PWD
if [ "${MPS:-0}" = 1 ]; then
  export CUDA_MPS_PIPE_DIRECTORY=$ROOT/mps/pipe CUDA_MPS_LOG_DIRECTORY=$ROOT/mps/log
fi
case $PHASE in
  start)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    mkdir -p "$ROOT"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$ROOT/gpu.txt" 2>&1
    if [ "${MPS:-0}" = 1 ] && ! echo get_server_list | nvidia-cuda-mps-control > /dev/null 2>&1; then
      mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
      nvidia-cuda-mps-control -d || { echo "MPS=1: nvidia-cuda-mps-control -d failed" >&2; exit 1; }
      echo "MPS control daemon started (pipes in $CUDA_MPS_PIPE_DIRECTORY)" | tee -a "$ROOT/runner.log"
    fi
    extra=()
    for kv in ${OVERRIDES:-}; do extra+=(--overrides "$kv"); done
    [ -n "${RUNS:-}" ] && extra+=(--runs "$RUNS")
    setsid python3 -m bench.learning run --root "$ROOT" --agents "${AGENTS:-torch,jax}" --tasks "${TASKS:-HalfCheetah-v4}" \
      --seeds "${SEEDS:-0,1000,2000,3000,4000}" --num-env-steps "${STEPS:-100000}" --gpus "${GPUS-0}" \
      --per-gpu "${PER_GPU:-4}" --budget-s "${BUDGET:-1500}" "${extra[@]}" >> "$ROOT/runner.log" 2>&1 < /dev/null &
    echo $! > "$ROOT/runner.pid"
    sleep 5; cat "$ROOT/runner.log"
    if [ "${MPS:-0}" = 1 ]; then
      sleep 25; echo "MPS servers (pid) after 30 s: $(echo get_server_list | nvidia-cuda-mps-control | tr '\n' ' ')" \
        | tee -a "$ROOT/runner.log"
    fi
    ;;
  wait)
    pid=$(cat "$ROOT/runner.pid")
    for _ in $(seq 1 "$(( ${LIMIT:-570} / 30 ))"); do
      kill -0 "$pid" 2> /dev/null || break
      sleep 30
    done
    tail -20 "$ROOT/runner.log"
    for log in "$ROOT"/*/*/seed*.log; do echo "$log: $(grep -o 'checkpoints/step[0-9]*\|env_step=[0-9]*' "$log" | tail -1)"; done
    kill -0 "$pid" 2> /dev/null && echo "runner still running" || echo "runner ended"
    ;;
  collect)
    # $OUT returns at most 8 files, 2 folders down: the collected tree (and each run's console log) goes back as one
    # archive, learning.tgz, holding learning/<agent>/<task>/seed<s>/ and learning/logs/.
    rm -rf "$ROOT/collected" && python3 -m bench.learning collect --root "$ROOT" --out "$ROOT/collected/learning" || exit
    mkdir -p "$ROOT/collected/learning/logs" && cp "$ROOT/gpu.txt" "$ROOT/runner.log" "$ROOT/collected/learning/"
    for log in "$ROOT"/*/*/seed*.log; do
      rel=${log#"$ROOT"/}; cp "$log" "$ROOT/collected/learning/logs/${rel//\//_}"
    done
    [ -d "$ROOT/mps/log" ] && cp -r "$ROOT/mps/log" "$ROOT/collected/learning/mps_log"
    tar czf "$OUT/learning.tgz" -C "$ROOT/collected" learning && ls -l "$OUT/learning.tgz"
    if [ "${MPS:-0}" = 1 ] && ! kill -0 "$(cat "$ROOT/runner.pid")" 2> /dev/null; then
      echo quit | nvidia-cuda-mps-control && echo "MPS control daemon stopped"
    fi
    ;;
  *) echo "unknown phase $PHASE" >&2; exit 2 ;;
esac
