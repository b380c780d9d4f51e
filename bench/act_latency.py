"""Latency of the JAX agent's single-row ``act``, the call the evaluation makes once per env step, and its parts.

    python -m bench.act_latency --out $OUT/act_latency                 # GPU: the recipe actor, HalfCheetah shapes
    python -m bench.act_latency --out /tmp/act_latency --tiny          # CPU smoke run (tiny actor, few calls)

Timed blocks, run interleaved (``bench.common.interleaved_blocks``), ``--repeats`` rounds of ``--iters`` calls on
one (1, O) observation; microseconds per call, median and range over the rounds:

- ``act``: ``FlashSACAgent.act(obs, None)``, numpy in and out (what ``agent_common.envs.evaluate`` calls).
- ``act_dict_args``: the same policy jitted over the actor's nested params / batch_stats dicts with a zeros noise
  array sent along (how ``act`` called it before it cached the flat leaves); the actions are checked bitwise equal.
- ``act_numpy_io``: the jitted policy on the cached leaves with the observation as numpy and the action read back
  from the device (``act``'s route where the agent does not use pinned host memory; on a GPU ``act`` passes both
  through pinned host memory: ``agent_jax.agent.HOST_TRANSFERS``).
- ``dispatch``: the jitted policy on the cached leaves, waiting for the device result without copying it back.
- ``put_obs``: the observation alone to the device (``jax.device_put`` + wait).
- ``put_pinned``: the observation alone to pinned host memory, as ``act`` hands it over on a GPU (+ wait; on a CPU
  ``act`` passes numpy and this block does nothing).
- ``readback``: a (1, A) device array to numpy.
- ``cpu_act``: the same policy on the host CPU backend with the actor's leaves copied there once (what an
  evaluation on the host would cost; on a GPU its actions are not bitwise those of the GPU, so the agent does not
  do this).

With gymnasium installed, ``evaluate`` runs ``--episodes`` HalfCheetah-v4 episodes with ``act`` and with
``act_dict_args`` (interleaved, ``--eval-repeats`` rounds) and reports microseconds per env step.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from bench.common import (
    ACT_DIM,
    OBS_DIM,
    environment,
    fmt,
    interleaved_blocks,
    json_block,
    recipe_config,
    write_results,
)

TINY = ["agent.actor_hidden_dim=8", "agent.actor_num_blocks=1", "agent.critic_hidden_dim=8",
        "agent.critic_num_blocks=1"]


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": float(np.median(values)), "min": float(min(values)), "max": float(max(values))}


def measure(tiny: bool, repeats: int, iters: int, episodes: int, eval_repeats: int) -> dict[str, Any]:
    """Builds the agent on the default JAX device and times the blocks (see the module doc)."""
    import jax

    from agent_interop.synthetic import make_spaces
    from agent_jax.agent import make_agent
    from agent_jax.step import policy_actions, policy_on_leaves

    cfg = recipe_config("jax", "jax", TINY if tiny else [])
    agent = make_agent(cfg, *make_spaces(OBS_DIM, ACT_DIM))
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((1, OBS_DIM)).astype(np.float32)  # (1, O)
    dict_policy = jax.jit(policy_actions, static_argnames=("actor_def", "deterministic"))

    def act_dict_args(observation: np.ndarray) -> np.ndarray:
        actor = agent.state.actor
        eps = np.zeros((observation.shape[0], ACT_DIM), np.float32)  # (1, A)
        return np.asarray(dict_policy(agent._actor_def, actor.params, actor.batch_stats, observation, eps,
                                      deterministic=True), dtype=np.float32)

    for _ in range(20):
        checks = rng.standard_normal((1, OBS_DIM)).astype(np.float32)
        if agent.act(checks, None).tobytes() != act_dict_args(checks).tobytes():
            raise AssertionError("act and the dict-argument policy give different actions")
    agent.act(obs, None)
    leaves, treedef = agent.actor_leaves()
    cpu = jax.devices("cpu")[0]
    cpu_leaves = jax.device_put(leaves, cpu)
    device_action = policy_on_leaves(leaves, obs, None, actor_def=agent._actor_def, treedef=treedef,
                                   deterministic=True)

    def timed(call: Any) -> Any:
        def block(n: int) -> float:
            t0 = time.perf_counter()
            for _ in range(n):
                call()
            return 1e6 * (time.perf_counter() - t0) / n
        return block

    blocks = {
        "act": timed(lambda: agent.act(obs, None)),
        "act_dict_args": timed(lambda: act_dict_args(obs)),
        "dispatch": timed(lambda: policy_on_leaves(leaves, obs, None, actor_def=agent._actor_def,
                                                   treedef=treedef, deterministic=True).block_until_ready()),
        "act_numpy_io": timed(lambda: np.asarray(policy_on_leaves(leaves, obs, None, actor_def=agent._actor_def,
                                                                  treedef=treedef, deterministic=True))),
        "put_obs": timed(lambda: jax.device_put(obs, agent.device).block_until_ready()),
        "put_pinned": timed(lambda: jax.block_until_ready(agent._to_host_input(obs))),
        "readback": timed(lambda: np.asarray(device_action)),
        "cpu_act": timed(lambda: np.asarray(policy_on_leaves(cpu_leaves, obs, None, actor_def=agent._actor_def,
                                                             treedef=treedef, deterministic=True))),
    }
    raw = interleaved_blocks(blocks, repeats, iters, warmup_iters=max(10, iters // 10))
    res: dict[str, Any] = {"device": str(agent.device), "actor": "tiny" if tiny else "recipe",
                           "repeats": repeats, "iters": iters, "us_per_call": {k: _stats(v) for k, v in raw.items()},
                           "raw_us": raw, "bitwise_equal_checks": 20}
    res["evaluate"] = _evaluate(agent, act_dict_args, episodes, eval_repeats)
    return res


def _evaluate(agent: Any, act_dict_args: Any, episodes: int, repeats: int) -> dict[str, Any]:
    try:
        from agent_common.envs import evaluate, make_vec_env

        env = make_vec_env("HalfCheetah-v4", 1, 0, True, None)
    except Exception as exc:  # noqa: BLE001  gymnasium or MuJoCo missing: the act blocks still stand
        return {"skipped": f"{type(exc).__name__}: {exc}"}
    if episodes < 1:
        return {"skipped": "--episodes 0"}
    acts = {"act": lambda o: agent.act(o, None), "act_dict_args": act_dict_args}
    raw: dict[str, list[float]] = {k: [] for k in acts}
    returns: dict[str, list[float]] = {k: [] for k in acts}
    steps = 0
    try:
        for _ in range(repeats):
            for name, act in acts.items():
                env.reset(seed=0)
                t0 = time.perf_counter()
                metrics = evaluate(act, env, episodes)
                steps = int(round(metrics["avg_length"] * episodes))
                raw[name].append(1e6 * (time.perf_counter() - t0) / max(steps, 1))
                returns[name].append(metrics["avg_return"])
    finally:
        env.close()
    return {"episodes": episodes, "env_steps": steps, "us_per_env_step": {k: _stats(v) for k, v in raw.items()},
            "raw_us_per_env_step": raw, "avg_return": returns}


def report(res: dict[str, Any]) -> str:
    lines = ["# JAX act latency (one row)", "", f"Device: {res['device']}; actor: {res['actor']}; "
             f"{res['repeats']} interleaved rounds of {res['iters']} calls.", "",
             "| block | µs per call, median | min | max |", "|---|---|---|---|"]
    for name, s in res["us_per_call"].items():
        lines.append(f"| {name} | {fmt(s['median'], '.1f')} | {fmt(s['min'], '.1f')} | {fmt(s['max'], '.1f')} |")
    ev = res["evaluate"]
    lines.append("")
    if "skipped" in ev:
        lines.append(f"evaluate: skipped ({ev['skipped']})")
    else:
        lines += [f"evaluate, HalfCheetah-v4, {ev['episodes']} episodes ({ev['env_steps']} env steps):", "",
                  "| act | µs per env step, median | min | max |", "|---|---|---|---|"]
        for name, s in ev["us_per_env_step"].items():
            lines.append(f"| {name} | {fmt(s['median'], '.1f')} | {fmt(s['min'], '.1f')} | {fmt(s['max'], '.1f')} |")
    lines.append("")
    lines += json_block("environment", res["environment"])
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.act_latency", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="results directory (results.json, results.md)")
    p.add_argument("--tiny", action="store_true", help="tiny actor (CPU smoke run)")
    p.add_argument("--repeats", type=int, default=7, help="interleaved rounds (default 7)")
    p.add_argument("--iters", type=int, default=2000, help="calls per block (default 2000)")
    p.add_argument("--episodes", type=int, default=2, help="evaluation episodes per round (default 2; 0: none)")
    p.add_argument("--eval-repeats", type=int, default=5, help="interleaved evaluation rounds (default 5)")
    args = p.parse_args(argv)
    for name in ("repeats", "iters", "eval_repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.episodes < 0:
        p.error(f"--episodes must be >= 0, got {args.episodes}")
    res = measure(args.tiny, args.repeats, args.iters, args.episodes, args.eval_repeats)
    res["environment"] = environment()
    print(write_results(args.out, res, report(res)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
