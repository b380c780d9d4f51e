#!/usr/bin/env bash
# The agents' H200 session (issues 5-8), in device calls of <= 10 minutes on one warm machine:
#
#   bash bench/gpu_agents.sh start    # checks + isolated update timings, then both 100k runs start detached
#                                     # (setsid: they outlive the call while the machine stays warm), then the
#                                     # cross-framework parity in the foreground while the runs train
#   bash bench/gpu_agents.sh watch    # waits for the runs (until DEADLINE)
#   bash bench/gpu_agents.sh finish   # waits for the runs, then, with the GPU to itself: each agent's paired
#                                     # update timing on its final checkpoint, the paired training benchmark and
#                                     # the full kernel harness, each on what is left of the budget
#
# Every phase ends by packing what exists into $OUT/results.tgz (logs, checks, parity, run folders without their
# checkpoints); unpack it into bench/results/<gpu>-<date>/. DEADLINE (seconds, default 570) bounds a phase.
# Needs the .whl folder carried (gymnasium, mujoco, omegaconf: see bench/results/README.md).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
PHASE=${1:?usage: gpu_agents.sh start|watch|finish}
DEADLINE=${DEADLINE:-570}
R=/tmp/agents
mkdir -p "$R/checks" "$R/logs"
START=$SECONDS
left() { echo $(( DEADLINE - (SECONDS - START) )); }
running() { pgrep -f "bench.gpu_agent_$1 --run-dir" > /dev/null; }

status() {
  for fw in torch jax; do
    local state="stopped"; running "$fw" && state="running"
    echo "[$(( SECONDS - START ))s] $fw $state: $(tail -n 1 "$R/$fw/eval.csv" 2>/dev/null | tr -d '\n') |" \
      "$(grep -v '^[EW][0-9]\{4\} ' "$R/logs/$fw.log" 2>/dev/null | tail -n 1)"
  done
}

wait_runs() {  # until both runs have stopped or only $1 seconds are left
  while { running torch || running jax; } && [ "$(left)" -gt "$1" ]; do
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
  # CUDA-graph agent vs eager agent (same weights, batches, noise) and the four-way update timing, GPU alone
  timeout 170 python3 -m bench.gpu_agent_torch --graph-check --timing-repeats 5 --timing-iters 40 \
    --state-out "$R/checks" > "$R/logs/graph_check.log" 2>&1
  GRAPH_RC=$?
  tail -n 3 "$R/logs/graph_check.log"
  timeout 120 python3 -m bench.gpu_agent_jax --timing-only --timing-repeats 5 --timing-iters 40 \
    --state-out "$R/checks" 2>&1 | grep -v '^[EW][0-9]\{4\} ' > "$R/logs/jax_timing.log"
  tail -n 2 "$R/logs/jax_timing.log"
  GRAPH=true
  [ "$GRAPH_RC" -eq 0 ] || { GRAPH=false; echo "graph check failed (rc $GRAPH_RC): torch run goes eager"; }
  setsid nohup python3 -m bench.gpu_agent_torch --run-dir "$R/torch" --budget 3000 --skip-timing \
    --overrides "agent.use_cuda_graph=$GRAPH" > "$R/logs/torch.log" 2>&1 < /dev/null &
  setsid nohup python3 -m bench.gpu_agent_jax --run-dir "$R/jax" --budget 3000 --skip-timing \
    > "$R/logs/jax.log" 2>&1 < /dev/null &
  sleep 5
  timeout $(( $(left) - 60 )) python3 -m bench.gpu_agent_parity --out "$R/parity" 2>&1 \
    | grep -v '^[EW][0-9]\{4\} ' > "$R/logs/parity.log"
  tail -n 12 "$R/logs/parity.log"
  wait_runs 20
  ;;
watch)
  wait_runs 20
  ;;
finish)
  wait_runs "${RESERVE:-300}"
  if running torch || running jax; then echo "runs still training: no isolated benchmarks this call"; exit 0; fi
  for fw in torch jax; do  # the runs are complete: summary + paired update timing on the final checkpoint
    timeout 150 python3 -m "bench.gpu_agent_$fw" --run-dir "$R/$fw" --timing-repeats 5 --timing-iters 40 2>&1 \
      | grep -v '^[EW][0-9]\{4\} ' > "$R/logs/${fw}_final.log"
    tail -n 2 "$R/logs/${fw}_final.log"
  done
  PAIRED=$(( $(left) * 3 / 5 ))
  timeout "$PAIRED" python3 -m bench.paired_training --out "$R/paired" --seeds 0,1,2 --repeats 1 \
    --overrides agent.use_compile=false \
    --num-env-steps "${PAIRED_STEPS:-3000}" --budget-s $(( PAIRED - 90 )) > "$R/logs/paired.log" 2>&1
  tail -n 12 "$R/logs/paired.log"
  HB=$(( $(left) - 30 ))
  [ "$HB" -gt 60 ] && timeout "$HB" python3 -m bench.harness --out "$R/harness" --budget-s $(( HB - 25 )) \
    > "$R/logs/harness.log" 2>&1
  tail -n 15 "$R/logs/harness.log"
  ;;
esac
