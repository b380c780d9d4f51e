#!/usr/bin/env bash
# One device call: the JAX agent's per-env-step call under XLA command-buffer variants, in real CLI training
# (bench.loop_breakdown: HalfCheetah-v4, B = 512, 6,000 env steps of which 2,000 random, strict Pallas target, device
# replay), each final checkpoint compared bitwise with the default's; the torch agent once for reference; the
# single-row act (bench.act_latency) under the default and the first other accepted mode; the MJX batched step
# (bench.mjx_env_speed, 1024 envs) with and without XLA while loops in command buffers.
#   bash bench/results/h200-2026-12-01-xla-flags/call.sh        (carry .whl; writes $OUT/xla.tgz)
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
O=/tmp/xla; mkdir -p $O
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; tar czf $OUT/xla.tgz -C $O . 2>/dev/null; }  # packs as it goes
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import sys, torch, jax, triton; print(sys.version.split()[0], torch.__version__, jax.__version__, triton.__version__)"
  git log -1 --format=%H 2>/dev/null; date -u +%FT%TZ; } > $O/gpu.txt 2>&1
cat $O/gpu.txt
declare -A F
F[base]=""
# XLA's command-buffer update modes (names differ between XLA versions; the probe keeps the ones this jaxlib takes):
# NEVER_UPDATE / SKIP_TEMP / VMM_PERSISTENT_TEMP map buffers into stable virtual addresses so recorded graphs need no
# per-execution update; CAPTURE_CMD_NEVER_UPDATE does so for library (traced) commands only.
F[va]="--xla_gpu_enable_command_buffer_va_remapping=true"
F[never]="--xla_gpu_command_buffer_update_mode=NEVER_UPDATE"
F[capture]="--xla_gpu_command_buffer_update_mode=CAPTURE_CMD_NEVER_UPDATE"
F[skip_temp]="--xla_gpu_command_buffer_update_mode=SKIP_TEMP"
F[vmm_temp]="--xla_gpu_command_buffer_update_mode=VMM_PERSISTENT_TEMP"
ORDER="base va never capture skip_temp vmm_temp"
OK=""
for v in $ORDER; do  # in parallel: an unknown flag or value makes XLA abort at its first compilation
  ( XLA_FLAGS="${F[$v]}" timeout 60 python3 -c "import jax, jax.numpy as j; print(float(jax.jit(lambda x: (x * 2).sum())(j.ones(4))))" > $O/probe_$v.log 2>&1; echo $? > $O/probe_$v.rc ) &
done
wait
for v in $ORDER; do [ "$(cat $O/probe_$v.rc)" = 0 ] && OK="$OK $v"; done
el "flags accepted:$OK"
C="--overrides env.env_name=HalfCheetah-v4 --overrides num_env_steps=6000 --overrides agent.buffer_min_length=2000 --overrides num_eval_episodes=0 --overrides progress_bar=false --overrides agent.categorical_target_strict=true --overrides logging_per_interaction_step=500 --overrides agent.categorical_target_backend=pallas --overrides agent.buffer_device_type=auto"
C="$C ${EXTRA:-}"  # EXTRA: more overrides (a CPU dry run of this script uses tiny networks)
for v in $OK base; do
  tag=$v; [ -d /tmp/bd_$v ] && tag=${v}_again
  XLA_FLAGS="${F[$v]}" timeout 100 python3 -m bench.loop_breakdown --framework jax --out $O/bd_$tag -- $C --overrides save_path=/tmp/bd_$tag > $O/bd_$tag.log 2>&1
  el "$tag rc=$?"; grep -E "^\| (dispatch|action_wait|agent_step|total) " $O/bd_$tag/results.md 2>/dev/null | tr '\n' ' '; echo
done
python3 - "$O" <<'PY' | tee $O/bitwise.txt
import glob, os, pickle, sys
import numpy as np
def leaves(x, p=""):
    if isinstance(x, dict):
        for k in sorted(x, key=str): yield from leaves(x[k], f"{p}/{k}")
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x): yield from leaves(v, f"{p}/{i}")
    elif isinstance(x, np.ndarray) or np.isscalar(x):
        yield p, np.asarray(x)
def load(run):
    d = sorted(glob.glob(f"/tmp/bd_{run}/checkpoints/step*/agent"), key=lambda s: int(s.split("step")[-1].split("/")[0]))
    if not d: return None
    out = {}
    for f in sorted(glob.glob(d[-1] + "/*.pkl")):
        with open(f, "rb") as fh: out[os.path.basename(f)] = pickle.load(fh)
    return dict(leaves(out))
ref = load("base")
for run in ("base_again", "va", "never", "capture", "skip_temp", "vmm_temp"):
    other = load(run)
    if ref is None or other is None:
        if other is None and os.path.isdir(f"/tmp/bd_{run}"): print(run, "no checkpoint")
        continue
    diff = [k for k in ref if k not in other or ref[k].shape != other[k].shape or ref[k].tobytes() != other[k].tobytes()]
    worst = max((float(np.max(np.abs(ref[k].astype(np.float64) - other[k].astype(np.float64)))) for k in diff if k in other and ref[k].shape == other[k].shape and ref[k].dtype.kind == "f"), default=0.0)
    print(f"{run}: {len(ref) - len(diff)}/{len(ref)} leaves bitwise equal to base; max |diff| {worst:.3g}")
PY
# MJX's solver runs XLA while loops; by default each iteration's condition goes back to the host. +WHILE,+CONDITIONAL
# puts the loops into command buffers (CUDA conditional nodes), so they iterate on the device. Same rollout, same
# checksum expected.
F[while]="--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL"
for v in base while; do
  XLA_FLAGS="${F[$v]}" timeout 100 python3 -m bench.mjx_env_speed --out $O/mjx_$v --task halfcheetah --envs ${MJX_ENVS:-1024} --steps 100 --repeats 3 > $O/mjx_$v.log 2>&1
  el "mjx $v rc=$?"; python3 -c "import json,sys; r=json.load(open(sys.argv[1])); [print(k, v['median_env_steps_per_s'], v['first_call_s'], v['first_call_checksum']) for k, v in r.items() if k.startswith('envs_')]" $O/mjx_$v/results.json 2>/dev/null
done
timeout 100 python3 -m bench.loop_breakdown --framework torch --out $O/bd_torch -- ${C/pallas/triton} --overrides agent.buffer_device_type=cpu --overrides save_path=/tmp/bd_torch > $O/bd_torch.log 2>&1
el "torch rc=$?"; grep -E "^\| (update|act|total) " $O/bd_torch/results.md 2>/dev/null | tr '\n' ' '; echo
FIRST=$(echo $OK | tr ' ' '\n' | grep -v '^base$' | head -1)
for v in base $FIRST; do
  XLA_FLAGS="${F[$v]}" timeout 70 python3 -m bench.act_latency --out $O/act_$v --repeats 3 --iters 500 --episodes 1 --eval-repeats 1 > $O/act_$v.log 2>&1
  el "act $v rc=$?"; grep -E "^\| (act|dispatch|put_obs) " $O/act_$v/results.md 2>/dev/null | tr '\n' ' '; echo
done
rm -rf /tmp/bd_*/checkpoints
el done
