#!/usr/bin/env bash
# The action's way back to the host: (1) a jitted program of ~1 ms of GPU work with a (1, 6) result, read four
# ways (device result then np.asarray; copy_to_host_async right after the dispatch, as the agent does; the program
# writing the result to pinned host memory, jax.memory.Space.Host; the same without waiting first), 5 interleaved
# rounds of 200 calls; (2) the JAX CLI under bench.loop_breakdown with env_step's action in pinned host memory or
# not (--host-action on/off), alternating, 2 rounds. Packed into $OUT/host_action.tgz.
#   bash bench/results/h200-2026-12-01-jax-host/call_host_action.sh
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 JAX_COMPILATION_CACHE_DIR=/tmp/jaxcache \
  JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0
R=/tmp/host_action; mkdir -p $R
python3 - > $R/micro.txt 2>&1 <<'PY'
import time, numpy as np, jax, jax.numpy as jnp
def work(x, host):
    for _ in range(40):
        x = jnp.tanh(x @ x.T * 0.01)
    out = x[:1, :6]
    return jax.device_put(out, jax.memory.Space.Host) if host else out
dev_f = jax.jit(lambda x: work(x, False))
host_f = jax.jit(lambda x: work(x, True))
x = jnp.ones((1024, 1024), jnp.float32)
def device_read(): a = dev_f(x); a.block_until_ready(); return np.asarray(a)
def device_async(): a = dev_f(x); a.copy_to_host_async(); return np.asarray(a)
def host_read(): a = host_f(x); a.block_until_ready(); return np.asarray(a)
def host_direct(): return np.asarray(host_f(x))
ways = dict(device_read=device_read, device_async=device_async, host_read=host_read, host_direct=host_direct)
ref = device_read()
for name, fn in ways.items():
    assert np.array_equal(fn(), ref), name
    for _ in range(20): fn()
print("result sharding:", host_f(x).sharding)
res = {k: [] for k in ways}
for _ in range(5):
    for name, fn in ways.items():
        t = time.perf_counter()
        for _ in range(200): fn()
        res[name].append((time.perf_counter() - t) / 200 * 1e6)
for name, v in res.items():
    print(f"{name:14s} us per call: median {np.median(v):8.1f}  min {min(v):8.1f}  max {max(v):8.1f}")
PY
cat $R/micro.txt
CLI="--overrides env.env_name=HalfCheetah-v4 --overrides num_env_steps=5000 --overrides agent.buffer_min_length=2000
 --overrides num_eval_episodes=0 --overrides progress_bar=false --overrides agent.categorical_target_strict=true
 --overrides logging_per_interaction_step=500"
bd() {  # name, loop_breakdown options...
  local name=$1; shift
  timeout 150 python3 -m bench.loop_breakdown --framework jax --out $R/bd_$name "$@" -- $CLI \
    --overrides save_path=/tmp/run_$name > $R/$name.log 2>&1
  echo "$name rc=$?"
  python3 -c "import json; r=json.load(open('$R/bd_$name/results.json')); print(r.get('step_action_on_host'), {k: round(v) for k, v in r['us_per_step'].items() if v > 1})"
}
bd warm --host-action on
for i in 1 2; do bd off$i --host-action off; bd on$i --host-action on; done
tar -czf $OUT/host_action.tgz -C /tmp host_action
