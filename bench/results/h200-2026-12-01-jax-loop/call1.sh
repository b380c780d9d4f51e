#!/usr/bin/env bash
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-}
O=/tmp/o; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $O/gpu.txt
python3 -c "import torch, jax, triton; print(torch.__version__, jax.__version__, triton.__version__)" >> $O/gpu.txt 2>&1
C="--overrides env.env_name=HalfCheetah-v4 --overrides num_env_steps=7000 --overrides agent.buffer_min_length=2000 --overrides num_eval_episodes=0 --overrides progress_bar=false --overrides agent.categorical_target_strict=true --overrides logging_per_interaction_step=500"
for p in none matrices all; do
  timeout 110 python3 -m bench.loop_breakdown --framework jax --packing $p --out $O/bd_jax_$p -- $C --overrides save_path=/tmp/bd_$p --overrides agent.categorical_target_backend=pallas --overrides agent.buffer_device_type=auto > $O/bd_jax_$p.log 2>&1
  grep -A14 "^| part" $O/bd_jax_$p.log | head -14; echo "jax $p done $(date +%T)"
done
timeout 110 python3 -m bench.loop_breakdown --framework torch --out $O/bd_torch -- $C --overrides save_path=/tmp/bd_t --overrides agent.categorical_target_backend=triton --overrides agent.use_compile=false --overrides agent.use_cuda_graph=true --overrides agent.buffer_device_type=cpu > $O/bd_torch.log 2>&1
grep -A14 "^| part" $O/bd_torch.log | head -14; echo "torch done $(date +%T)"
OUT=$O LIMIT=110 bash bench/gpu_vs_upstream.sh default
timeout 90 python3 -m bench.act_latency --out $O/act_latency --repeats 5 --iters 1000 --episodes 2 --eval-repeats 2 > $O/act_latency.log 2>&1
tail -30 $O/act_latency.log
tar czf $OUT/call1.tgz -C $O .
