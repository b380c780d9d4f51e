#!/usr/bin/env bash
# The agents' H200 session (issues 5-8), in device calls of <= 10 minutes on one warm machine:
#
#   bash bench/gpu_agents.sh start    # checks + isolated update timings (CHECKS=1), then the 100k runs in RUNS start
#                                     # detached (setsid: they outlive the call while the machine stays warm), then
#                                     # the cross-framework parity (PARITY=1) in the foreground while they train
#   bash bench/gpu_agents.sh watch    # waits for the runs (until DEADLINE)
#   bash bench/gpu_agents.sh finish   # waits for the runs, then, with the GPU to itself: each run's paired update
#                                     # timing on its final checkpoint, the paired training benchmark (PAIRED_SEEDS)
#                                     # and the kernel harness, each on what is left of the budget
#
# RUNS lists kind:seed pairs (default "torch:0 jax:0"); kind is torch, jax or jax-torchinit (the JAX agent started
# from the torch agent's initial weights, bench/gpu_agent_jax.py --init-from-torch); a run trains in
# /tmp/agents/<kind>_seed<seed>.
# Every phase ends by packing what exists into $OUT/results.tgz (logs, checks, parity, run folders without their
# checkpoints); unpack it into bench/results/<gpu>-<date>-agents/. DEADLINE (seconds, default 570) bounds a phase.
# The machine goes back 30 s after a call: issue the next call at once, or the detached runs are lost.
# Needs gymnasium, mujoco and omegaconf (+ farama-notifications, glfw, pyopengl, antlr4-python3-runtime) as cp312
# wheels in .whl (carried), installed by the call's prefix:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#     .whl/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
PHASE=${1:?usage: gpu_agents.sh start|watch|finish}
DEADLINE=${DEADLINE:-570}
RUNS=${RUNS:-torch:0 jax:0}
R=/tmp/agents
mkdir -p "$R/checks" "$R/logs"
START=$SECONDS
left() { echo $(( DEADLINE - (SECONDS - START) )); }
running() { pgrep -f -- "--run-dir $R/$1_seed$2 " > /dev/null; }
module() { echo "bench.gpu_agent_${1%%-*}"; }  # torch / jax / jax-torchinit -> its benchmark module
any_running() {
  for run in $RUNS; do running "${run%:*}" "${run#*:}" && return 0; done
  return 1
}
noise() { grep -v '^[EW][0-9]\{4\} '; }  # drop absl / XLA log lines

status() {
  for run in $RUNS; do
    local fw=${run%:*} seed=${run#*:} state="stopped"
    running "$fw" "$seed" && state="running"
    echo "[$(( SECONDS - START ))s] ${fw}_seed$seed $state:" \
      "$(tail -n 1 "$R/${fw}_seed$seed/eval.csv" 2>/dev/null | tr -d '\r\n') |" \
      "$(cat "$R/logs/${fw}_seed$seed.log" 2>/dev/null | noise | tail -n 1)"
  done
}

wait_runs() {  # until every run has stopped or only $1 seconds are left
  while any_running && [ "$(left)" -gt "$1" ]; do
    sleep 30
    status
  done
}

pack() {
  status
  tar czf "$OUT/results.tgz" --exclude=checkpoints -C "$R" . && echo "packed $(du -h "$OUT/results.tgz" | cut -f1)"
}
trap pack EXIT

case "$PHASE" in
start)
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
  python3 -c "import sys, torch, triton, jax; print(sys.version.split()[0], torch.__version__, triton.__version__,
jax.__version__)" | tee -a "$R/gpu.txt"
  GRAPH=true
  if [ "${CHECKS:-1}" = 1 ]; then
    # CUDA-graph agent vs eager agent (same weights, batches, noise) and the four-way update timing, GPU alone
    timeout 170 python3 -m bench.gpu_agent_torch --graph-check --timing-repeats 5 --timing-iters 40 \
      --state-out "$R/checks" > "$R/logs/graph_check.log" 2>&1
    GRAPH_RC=$?
    tail -n 3 "$R/logs/graph_check.log"
    timeout 120 python3 -m bench.gpu_agent_jax --timing-only --timing-repeats 5 --timing-iters 40 \
      --state-out "$R/checks" 2>&1 | noise > "$R/logs/jax_timing.log"
    tail -n 2 "$R/logs/jax_timing.log"
    [ "$GRAPH_RC" -eq 0 ] || { GRAPH=false; echo "graph check failed (rc $GRAPH_RC): torch runs go eager"; }
  fi
  for run in $RUNS; do
    fw=${run%:*}; seed=${run#*:}
    extra=(); [ "$fw" = torch ] && extra=(--overrides "agent.use_cuda_graph=$GRAPH")
    [ "$fw" = jax-torchinit ] && extra=(--init-from-torch)
    setsid nohup python3 -m "$(module "$fw")" --run-dir "$R/${fw}_seed$seed" --seed "$seed" --budget 3000 \
      --skip-timing "${extra[@]}" > "$R/logs/${fw}_seed$seed.log" 2>&1 < /dev/null &
  done
  sleep 5
  if [ "${PARITY:-1}" = 1 ]; then
    timeout $(( $(left) - 60 )) python3 -m bench.gpu_agent_parity --out "$R/parity" 2>&1 | noise > "$R/logs/parity.log"
    tail -n 12 "$R/logs/parity.log"
  fi
  wait_runs 20
  ;;
watch)
  wait_runs 20
  ;;
finish)
  wait_runs "${RESERVE:-300}"
  if any_running; then echo "runs still training: no isolated benchmarks this call"; exit 0; fi
  for run in $RUNS; do  # the runs are complete: summary + paired update timing on the final checkpoint
    fw=${run%:*}; seed=${run#*:}
    flags=(); [ "$fw" = jax-torchinit ] && flags=(--init-from-torch)  # the summary records the start
    timeout 150 python3 -m "$(module "$fw")" --run-dir "$R/${fw}_seed$seed" --seed "$seed" "${flags[@]}" \
      --timing-repeats 5 --timing-iters 40 2>&1 | noise > "$R/logs/${fw}_seed${seed}_final.log"
    tail -n 2 "$R/logs/${fw}_seed${seed}_final.log"
  done
  PAIRED=$(( $(left) * ${PAIRED_SHARE:-60} / 100 ))
  timeout "$PAIRED" python3 -m bench.paired_training --out "$R/paired" --seeds "${PAIRED_SEEDS:-0,1,2}" --repeats 1 \
    --overrides agent.use_compile=false --num-env-steps "${PAIRED_STEPS:-3000}" --budget-s $(( PAIRED - 90 )) \
    > "$R/logs/paired.log" 2>&1
  tail -n 12 "$R/logs/paired.log"
  HB=$(( $(left) - 30 ))
  [ "$HB" -gt 60 ] && timeout "$HB" python3 -m bench.harness --out "$R/harness" --budget-s $(( HB - 25 )) \
    > "$R/logs/harness.log" 2>&1
  tail -n 15 "$R/logs/harness.log"
  ;;
esac
