#!/usr/bin/env bash
# One device call (main with the exact-edge-sum kernels): the Pallas target inside the agent's update
# (bench.pallas_in_program, B = 512), then the JAX agent's per-env-step call in real CLI training
# (bench.loop_breakdown: HalfCheetah-v4, B = 512, 6,000 env steps of which 2,000 random, strict Pallas target,
# device replay) under XLA command-buffer / GEMM variants, the torch agent once for reference; the base run dumps its
# optimised HLO and a summary of the step program's command buffers and GEMM calls comes back.
#   bash bench/results/h200-2026-12-01-jax-loop-v2/call2.sh     (carry .whl; writes $OUT/call2.tgz)
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
O=/tmp/c2; mkdir -p $O
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; tar czf $OUT/call2.tgz -C $O . 2>/dev/null; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import sys, torch, jax, triton; print(sys.version.split()[0], torch.__version__, jax.__version__, triton.__version__)"
  date -u +%FT%TZ; } > $O/gpu.txt 2>&1
timeout 100 python3 -m bench.pallas_in_program --out $O/pip --sizes 512 --update-k 50 --repeats 7 > $O/pip.log 2>&1
el "pallas_in_program rc=$?"; grep -E "update|scan" $O/pip/results.md 2>/dev/null | head -20
rm -rf $O/pip/hlo
C="--overrides env.env_name=HalfCheetah-v4 --overrides num_env_steps=6000 --overrides agent.buffer_min_length=2000 --overrides num_eval_episodes=0 --overrides progress_bar=false --overrides agent.categorical_target_strict=true --overrides logging_per_interaction_step=500 --overrides agent.categorical_target_backend=pallas --overrides agent.buffer_device_type=auto"
declare -A F
F[base]="--xla_dump_to=/tmp/dump --xla_dump_hlo_as_text"
F[nocublas_cmdbuf]="--xla_gpu_enable_command_buffer=-CUBLAS,-CUBLASLT"
F[trace_cache]="--xla_cmd_buffer_trace_cache_size=256"
F[triton_gemm]="--xla_gpu_cublas_fallback=false"
F[base2]=""
for v in base nocublas_cmdbuf trace_cache triton_gemm base2; do
  XLA_FLAGS="${F[$v]}" timeout 95 python3 -m bench.loop_breakdown --framework jax --out $O/bd_$v -- $C --overrides save_path=/tmp/bd_$v > $O/bd_$v.log 2>&1
  el "$v rc=$?"; grep -E "^\| (dispatch|action_wait|agent_step|total) " $O/bd_$v/results.md 2>/dev/null | tr '\n' ' '; echo
  if [ "$v" = base ]; then
    python3 - > $O/hlo_summary.txt 2>&1 <<'PY'
import glob, os, re
files = sorted(glob.glob("/tmp/dump/*after_optimizations.txt"), key=os.path.getsize)
for f in files[-3:]:
    t = open(f).read()
    print(os.path.basename(f), os.path.getsize(f))
    ent = t[t.find("ENTRY"):]
    for pat in ("custom_call_target=\"__cublas", "custom_call_target=\"__gpu$xla.gpu.triton", "__triton_gemm",
                " fusion(", "command_buffer", " while(", " copy(", " transpose("):
        print(f"  {pat!r}: whole {t.count(pat)}, entry {ent.count(pat)}")
    print("  command buffer computations:", len(re.findall(r"^command_buffer[\w.]* ", t, re.M)))
PY
    ls /tmp/dump | grep -c . >> $O/hlo_summary.txt; cat $O/hlo_summary.txt | head -40
    for f in $(ls -S /tmp/dump/*after_optimizations.txt | head -1); do gzip -c $f > $O/step_after_opt.txt.gz; done
    rm -rf /tmp/dump
  fi
done
timeout 90 python3 -m bench.loop_breakdown --framework torch --out $O/bd_torch -- ${C/pallas/triton} --overrides agent.buffer_device_type=cpu --overrides save_path=/tmp/bd_torch > $O/bd_torch.log 2>&1
el "torch rc=$?"; grep -E "^\| (update|act|total) " $O/bd_torch/results.md 2>/dev/null | tr '\n' ' '; echo
el done
