#!/usr/bin/env bash
# Does the JAX agent's per-env-step call re-record XLA's command buffers (CUDA graphs) on every execution?
# The JAX CLI under bench.loop_breakdown with command_buffer_thunk's log at verbosity 3, under several settings;
# bench.xla_command_buffers counts the executions and updates. Everything is packed into $OUT/cmdbuf.tgz.
#   bash bench/results/h200-2026-12-01-jax-host/call_cmdbuf.sh
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 JAX_COMPILATION_CACHE_DIR=/tmp/jaxcache \
  JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0
R=/tmp/cmdbuf; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import sys, jax, jaxlib; print(sys.version.split()[0], jax.__version__, jaxlib.__version__)"
  date -u +%FT%TZ; } > $R/versions.txt 2>&1
# the command-buffer flags and update modes this jaxlib knows (strings in its shared objects)
python3 - > $R/jaxlib_flags.txt <<'PY'
import glob, os, re, jaxlib
found = set()
for path in glob.glob(os.path.join(os.path.dirname(jaxlib.__file__), "**", "*.so*"), recursive=True):
    data = open(path, "rb").read()
    found |= set(re.findall(rb"xla_gpu_[a-z_]*command_buffer[a-z_]*|xla_gpu_graph[a-z_]*", data))
    found |= {b"mode: " + m for m in re.findall(rb"\b(?:ALWAYS_UPDATE|SKIP_TEMP|NEVER_UPDATE|[A-Z_]*_TEMP)\b", data)}
print("\n".join(sorted(x.decode() for x in found)))
PY
CLI="--overrides env.env_name=HalfCheetah-v4 --overrides num_env_steps=5000 --overrides agent.buffer_min_length=2000
 --overrides num_eval_episodes=0 --overrides progress_bar=false --overrides agent.categorical_target_strict=true
 --overrides logging_per_interaction_step=500 --overrides agent.categorical_target_backend=pallas"
run() {  # name, env assignments...
  local name=$1; shift
  env "$@" timeout 150 python3 -m bench.loop_breakdown --framework jax --out $R/bd_$name -- $CLI \
    --overrides save_path=/tmp/run_$name > $R/$name.out 2> $R/$name.log
  echo "$name rc=$?"
  python3 -m bench.xla_command_buffers --log $R/$name.log --out $R/cb_$name --name "$name" | head -16
  grep -A18 '"us_per_step"' $R/bd_$name/results.json | grep -E 'dispatch|action_wait|"env"|total' | tr -d '\n '; echo
}
V="TF_CPP_MIN_LOG_LEVEL=0 TF_CPP_VMODULE=command_buffer_thunk=3"
run warm $V   # fills the compilation cache for the runs below
run default $V
run prealloc_off $V XLA_PYTHON_CLIENT_PREALLOCATE=false
run skip_temp $V XLA_FLAGS=--xla_gpu_command_buffer_update_mode=SKIP_TEMP
run nolog XLA_PYTHON_CLIENT_PREALLOCATE=true
for f in $R/*.log; do gzip -9 $f; done
tar -czf $OUT/cmdbuf.tgz -C /tmp cmdbuf
ls -la $OUT
