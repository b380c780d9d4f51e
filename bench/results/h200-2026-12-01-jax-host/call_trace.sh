#!/usr/bin/env bash
# Where the JAX agent's per-env-step host time goes: the JAX CLI under bench.loop_breakdown (the action's
# device-to-host copy timed on its own), once plain and once with a jax.profiler trace of 200 counted steps (XLA's
# and PjRt's host events; command buffers kept on while tracing); the torch CLI beside it. Packed into
# $OUT/trace.tgz.   bash bench/results/h200-2026-12-01-jax-host/call_trace.sh
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 JAX_COMPILATION_CACHE_DIR=/tmp/jaxcache \
  JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0
R=/tmp/trace; mkdir -p $R
CLI="--overrides env.env_name=HalfCheetah-v4 --overrides num_env_steps=5000 --overrides agent.buffer_min_length=2000
 --overrides num_eval_episodes=0 --overrides progress_bar=false --overrides agent.categorical_target_strict=true
 --overrides logging_per_interaction_step=500"
bd() {  # name, framework, loop_breakdown options... (before --)
  local name=$1 fw=$2; shift 2
  timeout 150 python3 -m bench.loop_breakdown --framework $fw --out $R/bd_$name "$@" -- $CLI \
    --overrides save_path=/tmp/run_$name > $R/$name.log 2>&1
  echo "$name rc=$?"
  python3 -c "import json; r=json.load(open('$R/bd_$name/results.json')); print({k: round(v) for k, v in r['us_per_step'].items() if v > 1})"
}
bd jax_warm jax
bd jax jax
XLA_FLAGS=--xla_enable_command_buffers_during_profiling=true bd jax_trace jax --jax-trace $R/jax_trace --trace-steps 200
grep -A70 "jax.profiler trace" $R/bd_jax_trace/results.md | head -75
bd torch torch
rm -rf $R/jax_trace/plugins/profile/*/*.xplane.pb
tar -czf $OUT/trace.tgz -C /tmp trace
ls -la $OUT
