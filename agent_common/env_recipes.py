"""Upstream's training recipes for the DeepMind Control and MuJoCo Playground env types, as ``--overrides`` values
(standard library only).

``RECIPES[name]`` is the tuple of overrides of one recipe; ``recipe(name, task, framework)`` adds the task and, for
the torch agent on a GPU recipe, AMP.

* ``dmc``: upstream's ``scripts/run_dmc.sh`` (the CPU-simulator recipe: one env, batch 512, a 1M-row CPU buffer
  filled with 10k random steps, one update per env step, γ 0.99, 1-step returns, 1M env steps, 50 evaluation
  episodes; ``env.max_episode_steps`` null = 1000).
* ``mujoco_playground``: upstream's ``scripts/run_mujoco_playground.sh`` (the GPU-simulator recipe: 1024 envs,
  batch 2048, 2 updates per interaction step, a 10M-row device buffer filled to 100k rows, γ 0.97, 1-step returns,
  ~50M env steps, 50 evaluation envs and episodes, actions passed to the task unchanged). Upstream also sets
  ``agent.asymmetric_observation=true`` (the critic sees Playground's ``privileged_state``); the agents here have no
  asymmetric input, so the recipe trains on ``state`` for actor and critic.
"""

from __future__ import annotations

__all__ = ["DEFAULT_TASKS", "RECIPES", "TORCH_AMP", "recipe"]

RECIPES: dict[str, tuple[str, ...]] = {
    "dmc": (
        "env.env_type=dmc",
        "num_env_steps=1_000_000",
        "num_train_envs=1",
        "num_eval_envs=1",
        "num_eval_episodes=50",
        "agent.buffer_max_length=1_000_000",
        "agent.buffer_min_length=10_000",
        "agent.buffer_device_type=cpu",
        "agent.sample_batch_size=512",
        "updates_per_interaction_step=1",
        "gamma=0.99",
        "n_step=1",
    ),
    "mujoco_playground": (
        "env.env_type=mujoco_playground",
        "env.rescale_action=false",
        "num_train_envs=1024",
        "num_eval_envs=50",
        "num_eval_episodes=50",
        "num_env_steps=50_000_896",
        "updates_per_interaction_step=2",
        "agent.sample_batch_size=2048",
        "agent.buffer_max_length=10_000_000",
        "agent.buffer_min_length=100_000",
        "agent.buffer_device_type=cuda",
        "gamma=0.97",
        "n_step=1",
    ),
}
"""Each recipe's overrides for both agents (without the task)."""

DEFAULT_TASKS: dict[str, str] = {"dmc": "humanoid-walk", "mujoco_playground": "CheetahRun"}

TORCH_AMP = "agent.use_amp=true"
"""Added for the torch agent on a GPU recipe (upstream: AMP on with batch 2048)."""


def recipe(name: str, task: str | None = None, framework: str = "torch") -> list[str]:
    """The overrides of recipe ``name`` for ``task`` (default ``DEFAULT_TASKS[name]``) and agent ``framework``."""
    if name not in RECIPES:
        raise ValueError(f"recipe: expected one of {', '.join(RECIPES)}, got {name!r}")
    if framework not in ("torch", "jax"):
        raise ValueError(f"framework: expected 'torch' or 'jax', got {framework!r}")
    overrides = RECIPES[name]
    amp = [TORCH_AMP] if framework == "torch" and name == "mujoco_playground" else []
    return [overrides[0], f"env.env_name={task or DEFAULT_TASKS[name]}", *overrides[1:], *amp]
