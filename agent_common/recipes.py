"""Named recipes: a name for a set of ``--overrides`` (standard library only).

``python -m agent_torch.train --recipe smoke`` (or ``agent_jax.train``) applies the recipe's overrides first and the
command line's ``--overrides`` on top; the run's ``config.yaml`` records the name (``recipe``). The agents' CLIs, the
GPU-simulator benchmarks take their recipes from here.

    smoke  a short CPU run: Hopper-v4, 10k env steps, a smaller network and batch (learning visible in minutes)
    gym    upstream's gymnasium MuJoCo recipe: HalfCheetah-v4, 1M env steps, batch 512 (the config's defaults)
    mjx    upstream's GPU-simulator recipe on MJX: 1024 envs, batch 2048, 2 updates per interaction step, the
           replay rows on the GPU (10M rows, updates after 100k), AMP for the torch agent
    dmc, playground, myosuite
           upstream's recipes for DeepMind Control, MuJoCo Playground and MyoSuite (its scripts/run_*.sh)
    mjlab  upstream's mjlab recipe (the torch agent, MuJoCo Warp): the GPU-simulator values on
           Mjlab-Velocity-Flat-Unitree-G1

The GPU-simulator recipe keeps the gymnasium recipe's γ = 0.99 and n-step 1 (the Brax locomotion tasks are the
gym-MuJoCo ones); they turn AMP on for the torch agent only (the JAX agent's recipe runs fp32; it takes
``agent.use_amp=true`` on the command line).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["GPU_RECIPE", "RECIPES", "TORCH_AMP", "Recipe", "gpu_recipe", "recipe_overrides", "recipes_help",
           "unknown_recipe"]

GPU_RECIPE: tuple[str, ...] = (
    "env.env_type=mjx",
    "num_train_envs=1024",
    "num_eval_envs=50",
    "num_eval_episodes=50",
    "num_env_steps=50_000_896",
    "updates_per_interaction_step=2",
    "agent.sample_batch_size=2048",
    "agent.buffer_max_length=10_000_000",
    "agent.buffer_min_length=100_000",
    "agent.buffer_device_type=cuda",
    "gamma=0.99",
    "n_step=1",
)
"""The GPU-simulator recipe's overrides for both agents, without the task; docs/flashsac.md shows the same list
(tests/test_mjx_config.py checks)."""

TORCH_AMP = "agent.use_amp=true"
"""Added to the GPU-simulator recipe for the torch agent: fp16 autocast pays off at batch 2048."""


@dataclass(frozen=True)
class Recipe:
    """A named recipe: ``overrides`` for both agents, then ``per_framework[framework]`` for one of them."""

    description: str  # one line, shown by --help
    overrides: tuple[str, ...]
    per_framework: dict[str, tuple[str, ...]] = field(default_factory=dict)


RECIPES: dict[str, Recipe] = {
    "smoke": Recipe(
        "a short CPU run: Hopper-v4, 10k env steps, smaller network and batch, 5 eval episodes, 1 thread",
        (
            "env.env_name=Hopper-v4",
            "num_env_steps=10_000",
            "agent.buffer_min_length=2_000",
            "agent.sample_batch_size=128",
            "agent.critic_hidden_dim=128",
            "agent.actor_hidden_dim=64",
            "num_eval_episodes=5",
            "num_threads=1",
        ),
    ),
    "gym": Recipe(
        "upstream's gymnasium MuJoCo recipe: HalfCheetah-v4, 1M env steps, batch 512",
        ("env.env_type=mujoco", "env.env_name=HalfCheetah-v4", "num_env_steps=1_000_000",
         "agent.sample_batch_size=512"),
    ),
    "mjx": Recipe(
        "upstream's GPU-simulator recipe on MJX (halfcheetah): 1024 envs, batch 2048, UTD 2, replay on the GPU, "
        "AMP (torch)",
        (GPU_RECIPE[0], "env.env_name=halfcheetah", *GPU_RECIPE[1:]),
        {"torch": (TORCH_AMP,)},
    ),
    "dmc": Recipe(
        "upstream's DeepMind Control recipe (scripts/run_dmc.sh; humanoid-walk): 1 env, batch 512, 1M env steps",
        ("env.env_type=dmc", "env.env_name=humanoid-walk", "num_env_steps=1_000_000", "num_train_envs=1",
         "num_eval_envs=1", "num_eval_episodes=50", "agent.buffer_max_length=1_000_000",
         "agent.buffer_min_length=10_000", "agent.buffer_device_type=cpu", "agent.sample_batch_size=512",
         "updates_per_interaction_step=1", "gamma=0.99", "n_step=1"),
    ),
    "myosuite": Recipe(
        "upstream's MyoSuite recipe (scripts/run_myosuite.sh; myo-reach): 1 env, batch 512, 1M env steps, gamma 0.95",
        ("env.env_type=myosuite", "env.env_name=myo-reach", "num_env_steps=1_000_000", "num_train_envs=1",
         "num_eval_envs=1", "num_eval_episodes=50", "agent.buffer_max_length=1_000_000",
         "agent.buffer_min_length=10_000", "agent.buffer_device_type=cpu", "agent.sample_batch_size=512",
         "updates_per_interaction_step=1", "gamma=0.95", "n_step=1"),
    ),
    "playground": Recipe(
        "upstream's MuJoCo Playground recipe (scripts/run_mujoco_playground.sh; CheetahRun): 1024 envs, batch 2048, "
        "UTD 2, gamma 0.97, AMP (torch)",
        ("env.env_type=mujoco_playground", "env.env_name=CheetahRun", "env.rescale_action=false",
         "num_train_envs=1024", "num_eval_envs=50", "num_eval_episodes=50", "num_env_steps=50_000_896",
         "updates_per_interaction_step=2", "agent.sample_batch_size=2048", "agent.buffer_max_length=10_000_000",
         "agent.buffer_min_length=100_000", "agent.buffer_device_type=cuda", "gamma=0.97", "n_step=1"),
        {"torch": (TORCH_AMP,)},
    ),
    "mjlab": Recipe(
        "upstream's mjlab recipe (scripts/run_mjlab.sh; Mjlab-Velocity-Flat-Unitree-G1, torch agent): 1024 envs, "
        "batch 2048, UTD 2, AMP, n-step 3",
        ("env.env_type=mjlab", "env.env_name=Mjlab-Velocity-Flat-Unitree-G1", "env.rescale_action=false",
         "num_train_envs=1024", "num_eval_envs=1024", "num_eval_episodes=1024", "num_env_steps=50_000_896",
         "updates_per_interaction_step=2", "agent.sample_batch_size=2048", "agent.buffer_max_length=10_000_000",
         "agent.buffer_min_length=100_000", "agent.buffer_device_type=cuda", "gamma=0.99", "n_step=3"),
        {"torch": (TORCH_AMP,)},
    ),
}
"""Recipe name -> recipe. The ``--help`` of both training CLIs lists them. ``dmc``, ``myosuite`` and ``playground``
take another task with ``--overrides env.env_name=<task>``; upstream's Playground recipe also feeds the critic
Playground's ``privileged_state`` (``agent.asymmetric_observation``), which these agents do not have: both train on
``state``.
``mjlab`` is upstream's recipe, n-step returns with n = 3 included (the device replay keeps the in-flight n-step
window on the device); its evaluation runs 1024 episodes on 1024 evaluation envs of their own (upstream evaluates on
the training envs and resets them afterwards)."""


def unknown_recipe(name: object) -> str:
    """The error message for a recipe name that is not in ``RECIPES``."""
    return f"unknown recipe {name!r}; known recipes: {', '.join(RECIPES)}; --help lists them"


def recipe_overrides(name: str, framework: str) -> list[str]:
    """The ``--overrides`` values of recipe ``name`` for ``framework`` (``"torch"`` or ``"jax"``).

    Raises:
        ValueError: ``name`` is not in ``RECIPES`` (the message names it and lists the known ones), or ``framework``
            is neither ``"torch"`` nor ``"jax"``.
    """
    if framework not in ("torch", "jax"):
        raise ValueError(f"framework: expected 'torch' or 'jax', got {framework!r}")
    recipe = RECIPES.get(name) if isinstance(name, str) else None
    if recipe is None:
        raise ValueError(unknown_recipe(name))
    return [*recipe.overrides, *recipe.per_framework.get(framework, ())]


def gpu_recipe(task: str = "halfcheetah", framework: str = "torch") -> list[str]:
    """The ``mjx`` recipe for one MJX task (``simulators.mjx.TASKS``) and agent, as ``--overrides`` values."""
    return [f"env.env_name={task}" if item.startswith("env.env_name=") else item
            for item in recipe_overrides("mjx", framework)]


def recipes_help() -> str:
    """The recipes as ``--help`` lines: name and description."""
    width = max(map(len, RECIPES))
    return "recipes (--recipe NAME; --overrides apply on top):\n" + "\n".join(
        f"  {name:<{width}}  {recipe.description}" for name, recipe in RECIPES.items())
