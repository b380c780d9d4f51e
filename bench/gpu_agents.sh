#!/usr/bin/env bash
# The agents' H200 session (issues 5-8), in device calls of <= 10 minutes on one warm machine:
#
#   bash bench/gpu_agents.sh start    # checks + isolated update timings (CHECKS=1), then the 100k runs in RUNS and,
#                                     # with HARNESS_GPU set, the full kernel harness start detached (setsid: they
#                                     # outlive the call while the machine stays warm), then the cross-framework
#                                     # parity (PARITY=1) in the foreground while they train
#   bash bench/gpu_agents.sh watch    # waits for the runs and the harness (until DEADLINE)
#   bash bench/gpu_agents.sh paired   # waits for the detached harness, then on PAIRED_GPU (a GPU no run uses),
#                                     # while the runs go on: the JAX update timing under each XLA_VARIANTS entry,
#                                     # then the paired training benchmark, detached; then waits for every job
#   bash bench/gpu_agents.sh finish   # waits for the runs, then, with the GPU to itself: each run's paired update
#                                     # timing on its final checkpoint (FINAL_TIMING=1), the paired training benchmark
#                                     # (PAIRED=1) and the kernel harness (HARNESS=1), each on what is left
#
# RUNS lists kind:seed[@gpu] entries (default "torch:0 jax:0"); kind is torch, jax or jax-torchinit (the JAX agent
# started from the torch agent's initial weights, bench/gpu_agent_jax.py --init-from-torch); a run trains in
# /tmp/agents/<kind>_seed<seed>, on GPU <gpu> (CUDA_VISIBLE_DEVICES) when given. On a 2-GPU machine
# (nvidia-h200-x2) the runs can train on GPU 1 while the harness and the paired benchmark have GPU 0 to themselves.
# Every phase ends by packing what exists into $OUT/results.tgz (logs, checks, parity, harness, paired, run folders
# without their checkpoints); unpack it into bench/results/<gpu>-<date>-agents/. DEADLINE (seconds, default 570)
# bounds a phase.
# The machine goes back 30 s after a call: issue the next call at once, or the detached jobs are lost.
# Needs gymnasium, mujoco and omegaconf (+ farama-notifications, glfw, pyopengl, antlr4-python3-runtime) as cp312
# wheels in .whl (carried), installed by the call's prefix:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#     .whl/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
PHASE=${1:?usage: gpu_agents.sh start|watch|paired|finish}
DEADLINE=${DEADLINE:-570}
RUNS=${RUNS:-torch:0 jax:0}
R=/tmp/agents
mkdir -p "$R/checks" "$R/logs"
START=$SECONDS
left() { echo $(( DEADLINE - (SECONDS - START) )); }
kind() { local k=${1%%:*}; echo "$k"; }                  # torch:1@1 -> torch
seed() { local s=${1#*:}; echo "${s%@*}"; }                # torch:1@1 -> 1
gpu() { case $1 in *@*) echo "${1##*@}";; esac; }         # torch:1@1 -> 1, torch:1 -> ""
name() { echo "$(kind "$1")_seed$(seed "$1")"; }
running() { pgrep -f -- "--run-dir $R/$(name "$1") " > /dev/null; }
harness_running() { pgrep -f -- "bench.harness --out $R/harness" > /dev/null; }
paired_running() { pgrep -f -- "bench.paired_training --out $R/paired" > /dev/null; }
module() { local k; k=$(kind "$1"); echo "bench.gpu_agent_${k%%-*}"; }  # jax-torchinit -> bench.gpu_agent_jax
any_running() {
  for run in $RUNS; do running "$run" && return 0; done
  harness_running || paired_running
}
noise() { grep -v '^[EW][0-9]\{4\} '; }  # drop absl / XLA log lines
on_gpu() { if [ -n "$1" ]; then echo "CUDA_VISIBLE_DEVICES=$1"; else echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}"; fi; }

status() {
  for run in $RUNS; do
    local state="stopped"
    running "$run" && state="running"
    echo "[$(( SECONDS - START ))s] $(name "$run") $state:" \
      "$(tail -n 1 "$R/$(name "$run")/eval.csv" 2>/dev/null | tr -d '\r\n') |" \
      "$(cat "$R/logs/$(name "$run").log" 2>/dev/null | noise | tail -n 1)"
  done
  [ -f "$R/logs/harness.log" ] && echo "[$(( SECONDS - START ))s] harness" \
    "$(harness_running && echo running || echo stopped): $(tail -n 1 "$R/logs/harness.log" | cut -c1-150)"
  [ -f "$R/logs/paired.log" ] && echo "[$(( SECONDS - START ))s] paired" \
    "$(paired_running && echo running || echo stopped): $(tail -n 1 "$R/logs/paired.log" | cut -c1-150)"
  return 0
}

wait_jobs() {  # until every detached job ($1: "any" or "harness") has stopped or only $2 seconds are left
  local check=any_running
  [ "$1" = harness ] && check=harness_running
  while $check && [ "$(left)" -gt "$2" ]; do
    sleep 30
    status
  done
}

pack() {
  status
  tar czf "$OUT/results.tgz" --exclude=checkpoints --exclude=jax_cache -C "$R" . && \
    echo "packed $(du -h "$OUT/results.tgz" | cut -f1)"
}
trap pack EXIT

paired_command() {  # $1: seconds before it starts no new pair
  echo env $(on_gpu "${PAIRED_GPU:-}") python3 -m bench.paired_training --out "$R/paired" \
    --seeds "${PAIRED_SEEDS:-0,1,2}" --repeats 1 --overrides agent.use_compile=false \
    --num-env-steps "${PAIRED_STEPS:-3000}" --budget-s "$1"
}

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
  if [ -n "${HARNESS_GPU:-}" ]; then  # the full kernel matrix, no budget, on a GPU of its own
    setsid nohup env "CUDA_VISIBLE_DEVICES=$HARNESS_GPU" python3 -m bench.harness --out "$R/harness" \
      > "$R/logs/harness.log" 2>&1 < /dev/null &
  fi
  for run in $RUNS; do
    extra=(); [ "$(kind "$run")" = torch ] && extra=(--overrides "agent.use_cuda_graph=$GRAPH")
    [ "$(kind "$run")" = jax-torchinit ] && extra=(--init-from-torch)
    setsid nohup env $(on_gpu "$(gpu "$run")") python3 -m "$(module "$run")" --run-dir "$R/$(name "$run")" \
      --seed "$(seed "$run")" --budget 3000 --skip-timing "${extra[@]}" > "$R/logs/$(name "$run").log" 2>&1 \
      < /dev/null &
  done
  sleep 5
  if [ "${PARITY:-1}" = 1 ]; then
    timeout $(( $(left) - 60 )) python3 -m bench.gpu_agent_parity --out "$R/parity" 2>&1 | noise > "$R/logs/parity.log"
    tail -n 12 "$R/logs/parity.log"
  fi
  wait_jobs any 20
  ;;
watch)
  wait_jobs any 20
  ;;
paired)
  wait_jobs harness "${PAIRED_MIN:-300}"
  if harness_running; then echo "the harness still runs: no paired benchmark this call"; exit 0; fi
  tail -n 15 "$R/logs/harness.log"
  i=0  # XLA_VARIANTS: ';'-separated XLA_FLAGS values ("default" = none), JAX update timing under each, same GPU
  IFS=';' read -ra variants <<< "${XLA_VARIANTS:-}"
  for v in "${variants[@]}"; do
    flags=$v; [ "$v" = default ] && flags=""
    timeout 100 env $(on_gpu "${PAIRED_GPU:-}") XLA_FLAGS="$flags" python3 -m bench.gpu_agent_jax --timing-only \
      --timing-repeats 5 --timing-iters 40 2>&1 | noise > "$R/logs/jax_timing_xla$i.log"
    echo "XLA_FLAGS='$flags': $(tail -n 1 "$R/logs/jax_timing_xla$i.log")" | tee -a "$R/logs/jax_timing_xla.txt"
    i=$(( i + 1 ))
  done
  # detached (it may outlive this call); PAIRED_BUDGET: seconds after which it starts no new pair
  setsid nohup $(paired_command "${PAIRED_BUDGET:-600}") > "$R/logs/paired.log" 2>&1 < /dev/null &
  sleep 5
  wait_jobs any 20
  ;;
finish)
  wait_jobs any "${RESERVE:-300}"
  if any_running; then echo "jobs still running: no isolated benchmarks this call"; exit 0; fi
  if [ "${FINAL_TIMING:-1}" = 1 ]; then
    for run in $RUNS; do  # the runs are complete: summary + paired update timing on the final checkpoint
      flags=(); [ "$(kind "$run")" = jax-torchinit ] && flags=(--init-from-torch)  # the summary records the start
      timeout 150 python3 -m "$(module "$run")" --run-dir "$R/$(name "$run")" --seed "$(seed "$run")" "${flags[@]}" \
        --timing-repeats 5 --timing-iters 40 2>&1 | noise > "$R/logs/$(name "$run")_final.log"
      tail -n 2 "$R/logs/$(name "$run")_final.log"
    done
  fi
  if [ "${PAIRED:-1}" = 1 ]; then
    PB=$(( $(left) * ${PAIRED_SHARE:-60} / 100 ))
    timeout "$PB" $(paired_command $(( PB - 90 ))) > "$R/logs/paired.log" 2>&1
    tail -n 12 "$R/logs/paired.log"
  fi
  HB=$(( $(left) - 30 ))
  [ "${HARNESS:-1}" = 1 ] && [ "$HB" -gt 60 ] && timeout "$HB" python3 -m bench.harness --out "$R/harness" \
    --budget-s $(( HB - 25 )) > "$R/logs/harness.log" 2>&1
  tail -n 15 "$R/logs/harness.log"
  ;;
*)
  echo "unknown phase $PHASE (start|watch|paired|finish)"; exit 2
  ;;
esac
