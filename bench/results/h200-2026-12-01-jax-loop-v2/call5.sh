#!/usr/bin/env bash
# One device call: the JAX agent's learning check, new loop (agent.buffer_device_type=auto, the default: one jitted
# call per env step, device replay) against the old loop (=cpu: host replay, separate act and update calls), seeds 0
# and 1, HalfCheetah-v4, upstream's CPU-sim recipe to 30k env steps (10k random), evaluation every 10k steps with
# 10 episodes; the four runs share the GPU.   bash bench/results/h200-2026-12-01-jax-loop-v2/call5.sh  (carry .whl)
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
O=/tmp/lc; mkdir -p $O
R="env.env_name=HalfCheetah-v4 num_train_envs=1 num_eval_envs=1 agent.buffer_max_length=1_000_000 agent.buffer_min_length=10_000 agent.sample_batch_size=512 agent.use_amp=false updates_per_interaction_step=1 gamma=0.99 n_step=1 num_env_steps=30000 evaluation_per_interaction_step=10000 num_eval_episodes=10 progress_bar=false agent.categorical_target_strict=true"
for buf in auto cpu; do for seed in 0 1; do
  args=""; for kv in $R seed=$seed agent.buffer_device_type=$buf save_path=$O/$buf-seed$seed; do args="$args --overrides $kv"; done
  setsid timeout 450 python3 -m agent_jax.train $args > $O/$buf-seed$seed.log 2>&1 &
done; done
wait
for d in $O/*-seed*/; do echo "== $d"; find $d -name eval.csv | head -1 | xargs cat; done
tar czf $OUT/lc.tgz -C $O $(cd $O && ls *.log) $(cd $O && find . -name eval.csv -o -name config.yaml -o -name summary.json)
grep -h "completed" $O/*.log
