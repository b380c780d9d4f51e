#!/usr/bin/env bash
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_graph_min_graph_size=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-}
O=/tmp/o3; mkdir -p $O
C="--overrides env.env_name=HalfCheetah-v4 --overrides num_env_steps=6000 --overrides agent.buffer_min_length=2000 --overrides num_eval_episodes=0 --overrides progress_bar=false --overrides agent.categorical_target_strict=true --overrides logging_per_interaction_step=500 --overrides agent.categorical_target_backend=pallas --overrides agent.buffer_device_type=auto"
for v in plain gcfreeze cprofile; do
  case $v in plain) X="";; gcfreeze) X="--gc-freeze";; cprofile) X="--cprofile";; esac
  timeout 100 python3 -m bench.loop_breakdown --framework jax --packing matrices $X --out $O/bd_$v -- $C --overrides save_path=/tmp/bd_$v > $O/bd_$v.log 2>&1
  echo "== $v $(date +%T)"; grep -A17 "^| part" $O/bd_$v.log | head -18 | tr '\n' ' '; echo
done
sed -n '/cProfile of/,/^```$/p' $O/bd_cprofile/results.md | head -30
sed -n '/cProfile of/,$p' $O/bd_cprofile/results.md | sed -n 8,40p | cut -c1-160
timeout 60 python3 -m bench.act_latency --out $O/act --repeats 3 --iters 500 --episodes 1 --eval-repeats 1 > $O/act.log 2>&1
grep "^| act \|^| dispatch\|^| put_obs\|^| readback" $O/act.log | tr '\n' ' '; echo
tar czf $OUT/call3.tgz -C $O .
