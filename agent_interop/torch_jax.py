"""Move a FlashSAC agent between PyTorch (``agent_torch``) and JAX (``agent_jax``), with its whole training state.

What is converted (both directions, bit for bit: every value is an fp32 array copied unchanged):

* every parameter of the actor, the critic, the EMA target critic and the temperature (``log_temp`` = log alpha);
* the BatchNorm running statistics (``running_mean`` / ``running_var``) of the actor, critic and target critic;
* the Adam state of the actor, critic and temperature: first and second moments (torch ``exp_avg`` /
  ``exp_avg_sq`` = optax ``mu`` / ``nu``) and the step count, which also drives each network's learning-rate schedule
  (torch ``state["step"]`` and ``LambdaLR.last_epoch`` = optax ``ScaleByAdamState.count`` /
  ``ScaleByScheduleState.count`` = flax ``TrainState.step``);
* the agent's update counter (which update is an actor update).

Not converted: framework RNG state (each agent keeps its own: torch's global generator, the JAX agent's PRNG key),
the torch GradScaler (AMP only; the JAX agent has no AMP) and the JAX agent's pending (not yet returned) metrics,
which are cleared. Torch's ``atoms`` buffer is not a trained value: it is checked against the JAX critic's support.

Names: agent_jax uses agent_torch's module and parameter names and PyTorch's ``(out, in)`` weight layout, so the
mapping is by name only: the torch name ``blocks.1.fc2.weight`` is the flax path ``blocks_1/fc2/weight``
(``torch_name_to_jax_path``, in ``agent_interop.trees``); parameters live in the flax ``params`` collection, running
statistics in ``batch_stats``. Each agent's state is read and written through its public attributes (the network
bundles, ``Network.schedule_step`` / ``set_schedule_step``, ``state_replaced``).

Both agents must already exist (built from their configs); the functions overwrite the destination's state. A
mismatch raises ``ConversionError`` naming the offending entry: a parameter missing on one side, a shape difference
(e.g. another hidden width), a different support (``critic_num_bins``, ``critic_min_v``/``critic_max_v``) or, with
``check_hyperparameters=True`` (the default), a different update configuration (learning-rate schedule, gamma,
n-step, tau, actor update period, temperature target, AMP), because a converted optimizer state only continues the
same training under the same schedule.

Typical use::

    from agent_interop.torch_jax import torch_to_jax, jax_to_torch
    torch_to_jax(torch_agent, jax_agent)        # jax_agent now holds torch_agent's full state
    jax_to_torch(jax_agent, torch_agent)        # and back (bitwise round trip)
    convert_torch_checkpoint(src_dir, dst_dir, torch_agent, jax_agent)   # a saved torch checkpoint -> JAX one

or from the shell (both agents are built on the CPU from the checkpoint's shapes and stored config;
``agent_interop.convert``)::

    python -m agent_interop.convert torch-to-jax <run dir> <out dir>

torch and the agents are imported lazily inside the functions, so importing this module needs only jax / flax /
numpy.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Iterator
from typing import Any

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import optax

from agent_interop.trees import (
    flatten_tree,
    jax_path_to_torch_name,
    named_arrays,
    torch_name_to_jax_path,
    unflatten_tree,
)

__all__ = [
    "ADAM_HYPERPARAMETERS",
    "ConversionError",
    "HYPERPARAMETER_KEYS",
    "agent_dir_of",
    "check_compatible",
    "convert_jax_checkpoint",
    "convert_torch_checkpoint",
    "jax_to_torch",
    "make_agent_from_torch_init",
    "make_torch_agent_from_jax_init",
    "torch_to_jax",
]

NETWORKS = ("actor", "critic", "temperature")  # trained networks (each has its own Adam state)
ADAM_HYPERPARAMETERS = {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0, "amsgrad": False, "maximize": False}
"""The Adam settings both agents use (``agent_torch.state.make_network``, ``agent_jax.state``)."""
ARCHITECTURE_KEYS = ("actor_num_blocks", "actor_hidden_dim", "critic_num_blocks", "critic_hidden_dim",
                     "critic_num_bins", "critic_min_v", "critic_max_v", "actor_head")
HYPERPARAMETER_KEYS = ("learning_rate_init", "learning_rate_peak", "learning_rate_end", "learning_rate_warmup_step",
                       "learning_rate_decay_step", "gamma", "n_step", "critic_target_update_tau",
                       "actor_update_period", "actor_bc_alpha", "temp_target_entropy", "temp_target_sigma",
                       "use_amp")
"""``agent.*`` keys that must agree for the converted optimizer state to continue the same training."""
CHECKPOINT_AGENT_DIR = "agent"  # agent_common.runs: <step dir>/agent/ holds the agent files, the rest is framework-free


class ConversionError(ValueError):
    """The two agents do not have the same architecture or configuration; the message names the entry."""


# ---------------------------------------------------------------------------------------------------------------
# checks
# ---------------------------------------------------------------------------------------------------------------


def _same_value(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a) == bool(b)
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0)
    except (TypeError, ValueError):
        return a == b


def check_compatible(torch_agent: Any, jax_agent: Any, check_hyperparameters: bool = True) -> None:
    """Raises ``ConversionError`` unless the two agents can exchange their state.

    Checks the architecture keys of ``agent.*`` (hidden widths, block counts, support), the observation and
    action widths, and, with ``check_hyperparameters``, ``HYPERPARAMETER_KEYS`` and the resolved discount and
    temperature target. Parameter names and shapes are checked again, entry by entry, during the conversion.

    Args:
        torch_agent: an ``agent_torch.agent.FlashSACAgent``.
        jax_agent: an ``agent_jax.agent.FlashSACAgent``.
        check_hyperparameters: also require the same update configuration (default True).
    """
    t_cfg, j_cfg = torch_agent.cfg.agent, jax_agent.cfg.agent
    keys = ARCHITECTURE_KEYS + (HYPERPARAMETER_KEYS if check_hyperparameters else ())
    for key in keys:
        tv, jv = getattr(t_cfg, key, None), getattr(j_cfg, key, None)
        if not _same_value(tv, jv):
            kind = "architecture" if key in ARCHITECTURE_KEYS else "update configuration"
            raise ConversionError(f"{kind} mismatch: agent.{key} is {tv!r} in the torch agent and {jv!r} in the JAX "
                                  f"agent" + ("" if kind == "architecture" else
                                              " (pass check_hyperparameters=False to convert the weights anyway)"))
    t_obs = int(torch_agent.actor.module.input_bn.weight.shape[0])
    j_obs = int(jax_agent.state.actor.params["input_bn"]["weight"].shape[0])
    if t_obs != j_obs:
        raise ConversionError(f"observation width mismatch: torch actor input_bn.weight has {t_obs} features, the "
                              f"JAX actor {j_obs}")
    t_act = int(torch_agent.actor.module.mean_bias.shape[0])
    j_act = int(jax_agent.state.actor.params["mean_bias"].shape[0])
    if t_act != j_act:
        raise ConversionError(f"action width mismatch: torch actor mean_bias has {t_act} entries, the JAX actor "
                              f"{j_act}")
    t_atoms = torch_agent.critic.module.atoms.detach().cpu().numpy()
    from shared_spec import CategoricalSupport

    j_support = CategoricalSupport(int(j_cfg.critic_num_bins), float(j_cfg.critic_min_v), float(j_cfg.critic_max_v))
    j_atoms = np.asarray(j_support.atoms(), np.float32)
    if t_atoms.shape != j_atoms.shape or not np.array_equal(t_atoms, j_atoms):
        raise ConversionError(f"critic support mismatch: torch critic 'atoms' has shape {t_atoms.shape} "
                              f"[{t_atoms.min():g}, {t_atoms.max():g}], the JAX agent's support has shape "
                              f"{j_atoms.shape} [{j_atoms.min():g}, {j_atoms.max():g}]")
    if check_hyperparameters:
        for name, tv, jv in (("discount gamma**n_step", torch_agent.ctx.discount, jax_agent.ctx.discount),
                             ("target entropy", torch_agent.ctx.target_entropy, jax_agent.ctx.target_entropy),
                             ("tau", torch_agent.ctx.tau, jax_agent.ctx.tau)):
            if not math.isclose(float(tv), float(jv), rel_tol=1e-6, abs_tol=1e-7):  # JAX holds them as f32 arrays
                raise ConversionError(f"update configuration mismatch: {name} is {float(tv)!r} in the torch agent "
                                      f"and {float(jv)!r} in the JAX agent")


def _check_keys(net: str, kind: str, torch_names: set[str], jax_paths: set[tuple[str, ...]]) -> None:
    expected = {jax_path_to_torch_name(p) for p in jax_paths}
    missing = sorted(expected - torch_names)
    extra = sorted(torch_names - expected)
    if missing or extra:
        raise ConversionError(f"{net} {kind} do not match: only in the JAX agent: {missing or 'none'}; only in the "
                              f"torch agent: {extra or 'none'} (different num_blocks, or not a FlashSAC agent?)")


def _check_shape(net: str, name: str, torch_shape: tuple[int, ...], jax_shape: tuple[int, ...]) -> None:
    if tuple(torch_shape) != tuple(jax_shape):
        path = "/".join(torch_name_to_jax_path(name))
        raise ConversionError(f"{net} '{name}' (JAX '{path}') has shape {tuple(torch_shape)} in the torch agent and "
                              f"{tuple(jax_shape)} in the JAX agent (different hidden_dim / num_bins / "
                              f"observation or action width?)")


# ---------------------------------------------------------------------------------------------------------------
# torch side
# ---------------------------------------------------------------------------------------------------------------


def _torch_modules(torch_agent: Any) -> dict[str, Any]:
    return {"actor": torch_agent.actor.module, "critic": torch_agent.critic.module,
            "target_critic": torch_agent.target_critic.module, "temperature": torch_agent.temperature.module}


def _torch_named(module: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(parameters, running statistics) by state-dict name; the critic's constant ``atoms`` buffer is left out."""
    params = dict(module.named_parameters())
    buffers = {n: b for n, b in module.named_buffers() if n.rsplit(".", 1)[-1] in ("running_mean", "running_var")}
    return params, buffers


def _torch_step(net_name: str, bundle: Any, params: dict[str, Any]) -> int:
    """The common Adam step count of a torch network bundle (0 before the first step); checks its LR schedule
    agrees."""
    optimizer = bundle.optimizer
    steps = {}
    for name, p in params.items():
        state = optimizer.state.get(p, {})
        if "step" in state:
            steps[name] = float(state["step"])
        elif state:
            raise ConversionError(f"{net_name} optimizer state of '{name}' has no 'step' entry (not torch Adam?)")
    values = set(steps.values())
    if len(values) > 1 or (values and len(steps) != len(params)):
        raise ConversionError(f"{net_name} parameters have different Adam step counts {sorted(values)} (some "
                              f"parameters never stepped?); the JAX optimizer holds one count per network")
    step = values.pop() if values else 0.0
    if step != int(step) or step < 0:
        raise ConversionError(f"{net_name} Adam step count {step} is not a non-negative integer")
    if bundle.scheduler is not None and bundle.schedule_step != int(step):
        raise ConversionError(f"{net_name} LR scheduler is at step {bundle.schedule_step} but Adam at {int(step)}; "
                              f"the JAX schedule reads the optimizer's own count")
    for group in optimizer.param_groups:
        for key, want in ADAM_HYPERPARAMETERS.items():
            got = group.get(key)
            if not (tuple(got) == want if isinstance(want, tuple) else got == want):
                raise ConversionError(f"{net_name} torch Adam has {key}={got!r}; the JAX agent's Adam uses {want!r}")
    return int(step)


# ---------------------------------------------------------------------------------------------------------------
# jax optimizer state
# ---------------------------------------------------------------------------------------------------------------


def _is_opt_state_node(x: Any) -> bool:
    return isinstance(x, optax.ScaleByAdamState | optax.ScaleByScheduleState)


def _opt_state_nodes(opt_state: Any) -> Iterator[Any]:
    for leaf in jax.tree_util.tree_leaves(opt_state, is_leaf=_is_opt_state_node):
        if _is_opt_state_node(leaf):
            yield leaf


def _jax_adam(net_name: str, opt_state: Any) -> Any:
    adams = [n for n in _opt_state_nodes(opt_state) if isinstance(n, optax.ScaleByAdamState)]
    if len(adams) != 1:
        raise ConversionError(f"{net_name} JAX optimizer state holds {len(adams)} Adam states, expected exactly 1")
    return adams[0]


def _replace_opt_state(opt_state: Any, count: int, mu: Any, nu: Any) -> Any:
    """Every ScaleByAdamState gets (count, mu, nu) and every ScaleByScheduleState the count; the rest is kept."""

    def swap(node: Any) -> Any:
        if isinstance(node, optax.ScaleByAdamState):
            return node._replace(count=jnp.asarray(count, dtype=node.count.dtype), mu=mu, nu=nu)
        if isinstance(node, optax.ScaleByScheduleState):
            return node._replace(count=jnp.asarray(count, dtype=node.count.dtype))
        return node

    return jax.tree_util.tree_map(swap, opt_state, is_leaf=_is_opt_state_node)


# ---------------------------------------------------------------------------------------------------------------
# torch -> jax
# ---------------------------------------------------------------------------------------------------------------


def _as_numpy(value: Any) -> np.ndarray:
    """A torch tensor (any device) or a numpy array -> numpy."""
    return value if isinstance(value, np.ndarray) else value.detach().cpu().numpy()


def _to_jax_tree(net: str, kind: str, template: Any, torch_values: dict[str, Any]) -> Any:
    """torch {name: tensor} -> a tree shaped like ``template`` (a flax collection), every entry name- and
    shape-checked."""
    flat = flatten_tree(flax.serialization.to_state_dict(template))
    _check_keys(net, kind, set(torch_values), set(flat))
    out = {}
    for path, leaf in flat.items():
        name = jax_path_to_torch_name(path)
        value = _as_numpy(torch_values[name])
        _check_shape(net, name, value.shape, np.shape(leaf))
        out[path] = np.array(value, dtype=np.asarray(leaf).dtype, copy=True)
    return flax.serialization.from_state_dict(template, unflatten_tree(out))


def _endpoints(torch_agent: Any, jax_agent: Any, check_hyperparameters: bool) -> tuple[dict, dict, Any]:
    """Checks the pair (``check_compatible``) and returns the torch modules, the torch network bundles and the JAX
    agent's state: what both conversion directions start from."""
    check_compatible(torch_agent, jax_agent, check_hyperparameters)
    bundles = {"actor": torch_agent.actor, "critic": torch_agent.critic, "temperature": torch_agent.temperature}
    return _torch_modules(torch_agent), bundles, jax_agent.state


def torch_to_jax(torch_agent: Any, jax_agent: Any, check_hyperparameters: bool = True) -> None:
    """Overwrites ``jax_agent``'s whole training state with ``torch_agent``'s (see the module doc for the list).

    The JAX agent keeps its PRNG key; its pending metrics are cleared. Values are copied bit for bit.

    Args:
        torch_agent: source ``agent_torch.agent.FlashSACAgent``.
        jax_agent: destination ``agent_jax.agent.FlashSACAgent`` built with a matching config.
        check_hyperparameters: also require the same update configuration (see ``check_compatible``).

    Raises:
        ConversionError: architecture or configuration mismatch, naming the offending key or parameter.
    """
    modules, bundles, state = _endpoints(torch_agent, jax_agent, check_hyperparameters)
    new = {}
    for net in NETWORKS:
        js = getattr(state, net)
        t_params, t_stats = _torch_named(modules[net])
        params = _to_jax_tree(net, "parameters", js.params, t_params)
        batch_stats = _to_jax_tree(net, "running statistics", js.batch_stats, t_stats)
        bundle = bundles[net]
        step = _torch_step(net, bundle, t_params)
        opt = bundle.optimizer.state
        zeros = {n: np.zeros(tuple(p.shape), np.float32) for n, p in t_params.items()}

        # torch creates Adam state at the first step; before it the moments are zeros, as optax's initial state
        mu_t = {n: opt[p]["exp_avg"] if step else zeros[n] for n, p in t_params.items()}
        nu_t = {n: opt[p]["exp_avg_sq"] if step else zeros[n] for n, p in t_params.items()}
        adam = _jax_adam(net, js.opt_state)
        mu = _to_jax_tree(net, "Adam first moments", adam.mu, mu_t)
        nu = _to_jax_tree(net, "Adam second moments", adam.nu, nu_t)
        opt_state = _replace_opt_state(js.opt_state, step, mu, nu)
        js = js.replace(params=params, batch_stats=batch_stats, opt_state=opt_state,
                        step=jnp.asarray(step, dtype=jnp.asarray(js.step).dtype))
        if net == "critic":
            tt_params, tt_stats = _torch_named(modules["target_critic"])
            js = js.replace(target_params=_to_jax_tree("target_critic", "parameters", js.target_params, tt_params),
                            target_batch_stats=_to_jax_tree("target_critic", "running statistics",
                                                            js.target_batch_stats, tt_stats))
        new[net] = js
    new_state = state.replace(**new)
    jax_agent.state = jax.device_put(new_state, jax_agent.device)
    jax_agent.update_step = int(torch_agent.update_step)
    jax_agent.state_replaced()  # its pending metrics belonged to the replaced state


# ---------------------------------------------------------------------------------------------------------------
# jax -> torch
# ---------------------------------------------------------------------------------------------------------------


def _checked_flat(net: str, kind: str, targets: dict[str, Any], tree: Any) -> dict[tuple[str, ...], Any]:
    """A flax collection flattened to {path: leaf}, after checking that its names and shapes are ``targets``'s
    (torch tensors by state-dict name)."""
    flat = flatten_tree(flax.serialization.to_state_dict(tree))
    _check_keys(net, kind, set(targets), set(flat))
    for path, leaf in flat.items():
        name = jax_path_to_torch_name(path)
        _check_shape(net, name, tuple(targets[name].shape), np.shape(leaf))
    return flat


def _copy_into_torch(net: str, kind: str, targets: dict[str, Any], tree: Any) -> None:
    """Copies a flax collection into torch tensors in place (the Parameter objects, and so the optimizer's
    references, are kept)."""
    import torch

    flat = _checked_flat(net, kind, targets, jax.device_get(tree))
    with torch.no_grad():
        for path, leaf in flat.items():
            target = targets[jax_path_to_torch_name(path)]
            target.copy_(torch.from_numpy(np.array(leaf, copy=True)).to(target.dtype))


def _set_torch_adam(net: str, bundle: Any, t_params: dict[str, Any], count: int, mu: Any, nu: Any) -> None:
    """Writes torch Adam / LambdaLR state equal to what ``count`` torch steps with these moments would leave."""
    import torch

    optimizer = bundle.optimizer
    mu_flat, nu_flat = named_arrays(mu), named_arrays(nu)
    _check_keys(net, "Adam moments", set(t_params), {torch_name_to_jax_path(n) for n in mu_flat})
    group = optimizer.param_groups[0]
    for name, p in t_params.items():
        if count == 0:
            optimizer.state.pop(p, None)  # torch creates Adam state lazily at the first step
            continue
        _check_shape(net, name + " (Adam moment)", tuple(p.shape), mu_flat[name].shape)
        on_device = group.get("capturable", False) or group.get("fused", False)
        step = torch.tensor(float(count), dtype=torch.float32, device=p.device if on_device else "cpu")
        optimizer.state[p] = {
            "step": step,
            "exp_avg": torch.from_numpy(np.array(mu_flat[name], copy=True)).to(device=p.device, dtype=p.dtype),
            "exp_avg_sq": torch.from_numpy(np.array(nu_flat[name], copy=True)).to(device=p.device, dtype=p.dtype),
        }
    if bundle.scheduler is not None:
        bundle.set_schedule_step(count)


def jax_to_torch(jax_agent: Any, torch_agent: Any, check_hyperparameters: bool = True) -> None:
    """Overwrites ``torch_agent``'s whole training state with ``jax_agent``'s (see the module doc for the list).

    Tensors are written in place, so optimizers and compiled modules keep referring to the same parameters. The
    torch RNG is left alone. Values are copied bit for bit: ``jax_to_torch(torch_to_jax(t))`` reproduces ``t``'s
    state dicts exactly (network, optimizer and scheduler).

    Args:
        jax_agent: source ``agent_jax.agent.FlashSACAgent``.
        torch_agent: destination ``agent_torch.agent.FlashSACAgent`` built with a matching config.
        check_hyperparameters: also require the same update configuration (see ``check_compatible``).

    Raises:
        ConversionError: architecture or configuration mismatch, naming the offending key or parameter.
    """
    modules, bundles, state = _endpoints(torch_agent, jax_agent, check_hyperparameters)
    counts = {}
    for net in NETWORKS:  # validate everything before the first write
        js = getattr(state, net)
        adam = _jax_adam(net, js.opt_state)
        counts[net] = int(jax.device_get(adam.count))
        if counts[net] != int(jax.device_get(js.step)):
            raise ConversionError(f"{net} JAX TrainState.step {int(js.step)} differs from its Adam count "
                                  f"{counts[net]}")
        t_params, t_stats = _torch_named(modules[net])
        _checked_flat(net, "parameters", t_params, js.params)
        _checked_flat(net, "running statistics", t_stats, js.batch_stats)
    for net in NETWORKS:
        js = getattr(state, net)
        t_params, t_stats = _torch_named(modules[net])
        _copy_into_torch(net, "parameters", t_params, js.params)
        _copy_into_torch(net, "running statistics", t_stats, js.batch_stats)
        adam = _jax_adam(net, js.opt_state)
        _set_torch_adam(net, bundles[net], t_params, counts[net], adam.mu, adam.nu)
        if net == "critic":
            tt_params, tt_stats = _torch_named(modules["target_critic"])
            _copy_into_torch("target_critic", "parameters", tt_params, js.target_params)
            _copy_into_torch("target_critic", "running statistics", tt_stats, js.target_batch_stats)
    torch_agent.update_step = int(jax_agent.update_step)
    torch_agent.state_replaced()  # new Adam state tensors and float LRs: CUDA graphs must be captured again


# ---------------------------------------------------------------------------------------------------------------
# checkpoints
# ---------------------------------------------------------------------------------------------------------------


def _convert_dir(src: str, dst: str, load_agent: Any, save_agent: Any, convert: Any) -> str:
    """Agent directory, loop checkpoint directory (``<step>/agent/`` + framework-free files) or run directory (its
    latest complete checkpoint)."""
    is_agent_dir = any(os.path.exists(os.path.join(src, f"actor.{ext}")) for ext in ("pt", "pkl"))
    if not is_agent_dir and not os.path.isdir(os.path.join(src, CHECKPOINT_AGENT_DIR)):
        from agent_common.runs.checkpoints import resolve_checkpoint

        src = resolve_checkpoint(src)  # a run directory -> <run>/checkpoints/step<N>; FileNotFoundError otherwise
    if os.path.isdir(os.path.join(src, CHECKPOINT_AGENT_DIR)):
        from agent_common.runs.manifest import COMPLETE_FILE, verify_checkpoint, write_manifest

        if os.path.exists(os.path.join(src, COMPLETE_FILE)):
            verify_checkpoint(src)  # a damaged source is refused (DamagedCheckpointError names the file)
        os.makedirs(dst, exist_ok=True)
        for entry in os.listdir(src):
            if entry in (CHECKPOINT_AGENT_DIR, COMPLETE_FILE):  # the manifest is written anew below, last
                continue
            s, d = os.path.join(src, entry), os.path.join(dst, entry)
            if os.path.isdir(s):
                shutil.copytree(s, d, dirs_exist_ok=True)
            else:
                shutil.copy2(s, d)
        _convert_dir(os.path.join(src, CHECKPOINT_AGENT_DIR), os.path.join(dst, CHECKPOINT_AGENT_DIR), load_agent,
                     save_agent, convert)
        if os.path.exists(os.path.join(src, COMPLETE_FILE)):
            write_manifest(dst)
        return dst
    try:
        load_agent.load(src, load_optimizer=True)
    except (RuntimeError, ValueError, KeyError) as exc:  # torch load_state_dict / agent_jax's structure check
        detail = " ".join(str(exc).split("\n")[:2]).replace("\t", " ")
        raise ConversionError(f"checkpoint {src!r} does not fit the {type(load_agent).__module__.split('.')[0]} "
                              f"agent built from the given config (architecture keys?): {detail}") from exc
    convert()
    save_agent.save(dst)
    return dst


def convert_torch_checkpoint(src_dir: str, dst_dir: str, torch_agent: Any, jax_agent: Any,
                             check_hyperparameters: bool = True) -> str:
    """Converts a saved torch agent checkpoint into a JAX one that ``agent_jax``'s ``load`` restores.

    ``src_dir`` is an agent directory (``actor.pt`` ... ``agent_state.pt``, what ``FlashSACAgent.save`` writes), a
    training checkpoint ``<run>/checkpoints/step<N>/`` (its ``agent/`` is converted; the framework-free files next
    to it -- ``loop_state.pkl``, ``replay_buffer.pkl`` -- are copied, after the source is verified against its manifest
    ``COMPLETE``, and a new manifest is written last) or a run directory (its latest
    complete checkpoint). ``dst_dir`` receives the same layout (for a training checkpoint: the step directory;
    resuming from it takes ``agent_load_path=<dst_dir>``).

    Both agents must be built with the checkpoint's configuration; ``torch_agent`` is overwritten by the
    checkpoint, ``jax_agent`` by the conversion (it keeps its own PRNG key, seeded from its config).

    Returns:
        ``dst_dir``.
    """
    return _convert_dir(src_dir, dst_dir, torch_agent, jax_agent,
                        lambda: torch_to_jax(torch_agent, jax_agent, check_hyperparameters))


def convert_jax_checkpoint(src_dir: str, dst_dir: str, jax_agent: Any, torch_agent: Any,
                           check_hyperparameters: bool = True) -> str:
    """Converts a saved JAX agent checkpoint into a torch one that ``agent_torch``'s ``load`` restores.

    The mirror of ``convert_torch_checkpoint`` (agent directory of ``*.pkl`` files, a training checkpoint with
    ``agent/``, or a run directory). The torch files carry ``torch_agent``'s current torch RNG state.

    Returns:
        ``dst_dir``.
    """
    return _convert_dir(src_dir, dst_dir, jax_agent, torch_agent,
                        lambda: jax_to_torch(jax_agent, torch_agent, check_hyperparameters))


def make_agent_from_torch_init(cfg: Any, observation_space: Any, action_space: Any) -> Any:
    """The JAX agent for ``cfg``, started from the torch agent's initial state for the same config and seed.

    ``torch_to_jax`` gives it the torch agent's weights, BN statistics, log alpha, target critic and (fresh)
    optimizer state. Its PRNG key (policy noise) stays its own, and the environment, buffer and exploration streams
    are shared numpy code anyway, so a run from here differs from the torch agent's run only in the update's random
    draws and the frameworks' arithmetic: the experiment that tells an initialisation outcome from a defect when the
    two agents' returns differ. The torch agent is built on the CPU with the reference target backend.

    Args:
        cfg: the JAX run's resolved config (a dataclass config, as ``agent_common.config.load_config`` returns).
        observation_space: Box (O,).
        action_space: Box (A,).

    Returns:
        The ``agent_jax`` agent.
    """
    import dataclasses

    from agent_jax.agent import make_agent
    from agent_torch.agent import make_agent as make_torch_agent

    torch_agent_cfg = dataclasses.replace(cfg.agent, categorical_target_backend="torch",
                                          categorical_target_strict=False, device_type="cpu")
    torch_agent = make_torch_agent(dataclasses.replace(cfg, agent=torch_agent_cfg), observation_space, action_space)
    agent = make_agent(cfg, observation_space, action_space)
    torch_to_jax(torch_agent, agent)
    return agent


def make_torch_agent_from_jax_init(cfg: Any, observation_space: Any, action_space: Any) -> Any:
    """The torch agent for ``cfg``, started from the JAX agent's initial state for the same config and seed: the
    mirror of ``make_agent_from_torch_init``.

    ``jax_to_torch`` writes the JAX agent's weights, BN statistics, log alpha, target critic and (fresh) optimizer
    state into the torch agent in place (a CUDA-graph agent drops its graphs and captures them again on first use).
    Its torch generator (policy noise) stays its own. The JAX agent is built with the jnp reference target backend;
    its parameters come from ``cfg.seed``'s PRNG key, so they are the JAX run's initial parameters (threefry is
    exact on every platform; the normal initialisers' transforms may round differently by an ulp between the CPU
    and the GPU).

    Args:
        cfg: the torch run's resolved config.
        observation_space: Box (O,).
        action_space: Box (A,).

    Returns:
        The ``agent_torch`` agent.
    """
    import dataclasses

    from agent_jax.agent import make_agent as make_jax_agent
    from agent_torch.agent import make_agent

    jax_agent_cfg = dataclasses.replace(cfg.agent, categorical_target_backend="jax", categorical_target_strict=False)
    jax_agent = make_jax_agent(dataclasses.replace(cfg, agent=jax_agent_cfg), observation_space, action_space)
    agent = make_agent(cfg, observation_space, action_space)
    jax_to_torch(jax_agent, agent)
    return agent


# ---------------------------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------------------------


def agent_dir_of(path: str) -> str:
    """The directory holding ``actor.pt`` / ``actor.pkl`` for an agent, training-checkpoint or run directory."""
    if not any(os.path.exists(os.path.join(path, f"actor.{ext}")) for ext in ("pt", "pkl")):
        if not os.path.isdir(os.path.join(path, CHECKPOINT_AGENT_DIR)):
            from agent_common.runs.checkpoints import resolve_checkpoint

            path = resolve_checkpoint(path)
        path = os.path.join(path, CHECKPOINT_AGENT_DIR)
    return path
