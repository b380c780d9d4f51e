"""Env steps per second of the batched MJX step (``simulators.mjx_env``), for several env counts.

``python -m bench.mjx_env_speed --out DIR [--task halfcheetah] [--envs 256 1024 4096] [--steps 100] [--repeats 5]``

For each env count E: one jitted function runs ``--steps`` interaction steps in a ``lax.scan`` (uniform random
actions in [-1, 1] drawn inside the scan, auto-resets included: the default 1000-step episode limit is crossed once
every 10 calls at 100 steps), and each call continues from the previous call's state. The first call (compilation)
is timed on its own; then ``--repeats`` timed calls, each waited for. env steps/s = E * steps / seconds per call.
Writes ``DIR/results.json`` and ``DIR/results.md`` after every env count, so a time-out keeps what ran.

On a device machine whose image lacks the ``mjx`` extra: carry a ``.whl-mjx`` folder (listed in
``.git/info/exclude``) with the cp312 / py3 wheels of brax 0.12.5, mujoco-mjx 3.3.3, mujoco 3.3.3 and what Brax
imports at import time and env creation beyond jax / flax / optax / numpy / scipy (trimesh, jaxopt, pillow, etils,
absl-py, cloudpickle, glfw, pyopengl; Flask and the other training-UI dependencies are never imported), and install,
in one pip call so that mujoco and mujoco-mjx share one ``mujoco/`` folder, only those not installed already::

    ws=""; for w in .whl-mjx/*.whl; do n=$(basename "$w" | cut -d- -f1); python3 -c "import importlib.metadata \
      as m,sys; m.version(sys.argv[1])" "$n" 2>/dev/null || ws="$ws $w"; done; [ -z "$ws" ] || python3 -m pip \
      install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site-mjx $ws; \
    export PYTHONPATH=/tmp/site-mjx:$PYTHONPATH; python3 -m bench.mjx_env_speed --out $OUT/mjx_env_speed
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.common import block_seconds, environment, fmt, write_results

__all__ = ["main", "measure"]


def measure(
    task: str, num_envs: int, steps: int, repeats: int, seed: int = 0, make_env: Callable[[str, int], Any] | None = None
) -> dict[str, Any]:
    """Compile time and seconds per call of ``steps`` batched steps of ``num_envs`` envs (see the module doc).

    ``make_env(task, num_envs)`` builds the env (default ``simulators.mjx_env.make_mjx_env``); anything with
    ``action_size``, ``reset(key)`` and ``step(state, action)`` returning ``MjxStep``'s fields can be timed.
    """
    import jax

    from simulators.mjx_env import key_from_seed, make_mjx_env

    env = (make_env or make_mjx_env)(task, num_envs)
    shape = (num_envs, env.action_size)

    def rollout(state, key):
        def body(carry, _):
            state, key = carry
            key, sub = jax.random.split(key)
            out = env.step(state, jax.random.uniform(sub, shape, minval=-1.0, maxval=1.0))
            return (out.state, key), out.reward.sum() + out.truncated.sum()

        (state, key), per_step = jax.lax.scan(body, (state, key), None, length=steps)
        return state, key, per_step.sum()

    # the state is donated where the backend can reuse its buffers (not on the CPU, which would only warn)
    run = jax.jit(rollout, donate_argnums=(0,) if jax.default_backend() != "cpu" else ())
    # the first state from a jitted reset: an eager one would make ``run`` compile a second time (MjxVecEnv.init)
    carry = [jax.jit(env.reset)(key_from_seed(seed)), jax.random.PRNGKey(seed + 1)]  # any env with a reset

    def call(_: int) -> Any:
        carry[0], carry[1], total = run(carry[0], carry[1])
        return total

    def sync(out: Any) -> None:
        jax.block_until_ready(out if out is not None else carry[0])

    t0 = time.perf_counter()
    first = call(0)
    sync(first)
    compile_s = time.perf_counter() - t0
    seconds = [block_seconds(call, 1, sync) for _ in range(repeats)]
    med = statistics.median(seconds)
    return {
        "task": task, "num_envs": num_envs, "steps_per_call": steps, "repeats": repeats,
        "first_call_s": round(compile_s, 2), "seconds_per_call": seconds,
        # rewards + truncations summed over the first call: equal for equal seeds and numerics (XLA_FLAGS variants)
        "first_call_sum": float(first),
        "median_env_steps_per_s": num_envs * steps / med,
        "min_env_steps_per_s": num_envs * steps / max(seconds),
        "max_env_steps_per_s": num_envs * steps / min(seconds),
        "device": str(jax.devices()[0]),
        "compilations": run._cache_size(),  # 1 unless a later call recompiled (its time would be in the figures)
    }


def markdown(res: dict[str, Any], env_counts: list[int]) -> str:
    lines = ["# MJX batched step: env steps/s", "",
             f"{res['environment'].get('gpu') or 'CPU'}; {res['args']}; XLA_FLAGS={res.get('xla_flags')!r}", "",
             "| envs | steps per call | first call (compile) s | median s per call | env steps/s median [min, max] | "
             "first-call sum |", "|---|---|---|---|---|---|"]
    for n in env_counts:
        r = res.get(f"envs_{n}")
        if isinstance(r, dict):
            lines.append(f"| {n} | {r['steps_per_call']} | {r['first_call_s']} | "
                         f"{fmt(statistics.median(r['seconds_per_call']), '.4g')} | "
                         f"{r['median_env_steps_per_s']:,.0f} [{r['min_env_steps_per_s']:,.0f}, "
                         f"{r['max_env_steps_per_s']:,.0f}] | {fmt(r.get('first_call_sum'), '.6g')} |")
        elif r is not None:
            lines.append(f"| {n} | failed: see results.json | | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mjx_env_speed", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="results directory")
    parser.add_argument("--task", default="halfcheetah")
    parser.add_argument("--envs", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--steps", type=int, default=100, help="interaction steps per jitted call")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.repeats < 1 or min(args.envs) < 1:
        parser.error(f"--steps, --repeats and --envs must be >= 1, got {args.steps}, {args.repeats}, {args.envs}")
    res: dict[str, Any] = {"environment": environment(), "args": vars(args),
                           "xla_flags": os.environ.get("XLA_FLAGS", "")}

    def write(r: dict[str, Any]) -> None:
        print(write_results(args.out, r, markdown(r, args.envs)), flush=True)

    for n in args.envs:  # results are written after every env count, so a time-out keeps what ran
        try:
            res[f"envs_{n}"] = measure(args.task, n, args.steps, args.repeats)
        except Exception as exc:  # noqa: BLE001  recorded, and the job exits 1
            res[f"envs_{n}"] = f"{type(exc).__name__}: {exc}"
        write(res)
    return 0 if all(isinstance(res.get(f"envs_{n}"), dict) for n in args.envs) else 1


if __name__ == "__main__":
    import os

    from simulators.mjx import xla_flags as mjx_xla_flags

    # what MJX training runs with (its CLIs set it too); XLA_FLAGS="--xla_gpu_enable_command_buffer=" turns it off
    os.environ["XLA_FLAGS"] = mjx_xla_flags(os.environ.get("XLA_FLAGS", ""))
    raise SystemExit(main())
