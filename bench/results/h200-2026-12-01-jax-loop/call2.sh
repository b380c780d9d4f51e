#!/usr/bin/env bash
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-}
O=/tmp/o2; mkdir -p $O
C="--overrides env.env_name=HalfCheetah-v4 --overrides num_env_steps=6000 --overrides agent.buffer_min_length=2000 --overrides num_eval_episodes=0 --overrides progress_bar=false --overrides agent.categorical_target_strict=true --overrides logging_per_interaction_step=500 --overrides agent.categorical_target_backend=pallas --overrides agent.buffer_device_type=auto"
declare -A F
F[A]=""
F[B]="--xla_gpu_graph_min_graph_size=1"
F[C]="--xla_gpu_enable_command_buffer="
F[D]="--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL,DYNAMIC_SLICE_FUSION,DYNAMIC_SLICE_COPY_FUSION --xla_gpu_graph_min_graph_size=1"
for v in A B C D; do
  export XLA_FLAGS="${F[$v]}"
  timeout 100 python3 -m bench.loop_breakdown --framework jax --packing matrices --out $O/bd_$v -- $C --overrides save_path=/tmp/bd_$v > $O/bd_$v.log 2>&1
  echo "== $v [$XLA_FLAGS] $(date +%T)"; grep -A16 "^| part" $O/bd_$v.log | head -17 | tr '\n' ' '; echo; tail -3 $O/bd_$v.log | grep -i error
  timeout 60 python3 -m bench.act_latency --out $O/act_$v --repeats 3 --iters 500 --episodes 0 > $O/act_$v.log 2>&1
  grep "^| act \|^| dispatch\|^| put_obs" $O/act_$v.log | tr '\n' ' '; echo
done
tar czf $OUT/call2.tgz -C $O .
