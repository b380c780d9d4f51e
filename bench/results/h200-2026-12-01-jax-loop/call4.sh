#!/usr/bin/env bash
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-}
O=/tmp/oA; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $O/gpu.txt
python3 -c "import sys, torch, jax, triton; print(sys.version.split()[0], torch.__version__, jax.__version__, triton.__version__)" >> $O/gpu.txt 2>&1
git log -1 --format=%H >> $O/gpu.txt 2>/dev/null
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
timeout 60 python3 -m bench.act_latency --out $O/act_latency --repeats 5 --iters 1000 --episodes 2 --eval-repeats 2 > $O/act_latency.log 2>&1
el act; grep "^| act\|^| put\|^| dispatch" $O/act_latency.log | tr '\n' ' '; echo
setsid python3 -m agent_jax.train --overrides save_path=/tmp/default_jax > $O/default_jax.log 2>&1 &
pid=$!
for _ in $(seq 1 110); do grep -q "first update at" $O/default_jax.log && break; kill -0 $pid 2>/dev/null || break; sleep 1; done
kill -- -$pid 2>/dev/null; wait $pid 2>/dev/null
el ttfu; grep -E "first update at" $O/default_jax.log || echo "jax: no first update within 110 s"
C="--overrides env.env_name=HalfCheetah-v4 --overrides num_env_steps=6000 --overrides agent.buffer_min_length=2000 --overrides num_eval_episodes=0 --overrides progress_bar=false --overrides agent.categorical_target_strict=true --overrides logging_per_interaction_step=500 --overrides agent.categorical_target_backend=pallas --overrides agent.buffer_device_type=auto"
timeout 90 python3 -m bench.loop_breakdown --framework jax --out $O/breakdown_jax -- $C --overrides save_path=/tmp/bdj > $O/breakdown_jax.log 2>&1
el breakdown; grep -A17 "^| part" $O/breakdown_jax.log | tr '\n' ' '; echo
timeout 260 python3 -m bench.training_speed --out $O/training_speed --rounds 3 --num-env-steps 8000 --buffer-min-length 2000 --log-every 500 --timeout-s 110 --budget-s 230 > $O/training_speed.log 2>&1
el speed; tail -12 $O/training_speed/results.md 2>/dev/null || tail -5 $O/training_speed.log
timeout 110 python3 -m bench.pallas_in_program --out $O/pip --sizes 512,2048 > $O/pip.log 2>&1
el pip; grep -i "^| " $O/pip/results.md 2>/dev/null | head -12
timeout 60 python3 -m bench.gpu_bitwise --out $O/bitwise_offset --skip-timing --strided-only > $O/bitwise.log 2>&1; echo "bitwise rc=$?"
el bitwise; tail -4 $O/bitwise.log
tar czf $OUT/callA.tgz -C $O .
