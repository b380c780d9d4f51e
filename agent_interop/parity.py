"""Cross-framework agent parity harness: a PyTorch and a JAX FlashSAC agent with identical state.

Used by ``tests/test_agent_parity.py`` (CPU, interpreted kernels) and, through ``agent_interop.parity_run``, by the
GPU comparison script (real kernels). Both agents run their own, unmodified update code; the harness only makes
their inputs identical:

* **weights and optimizer state**: the JAX agent gets the torch agent's full state through
  ``agent_interop.torch_jax.torch_to_jax`` (bitwise);
* **batches**: the same numpy batch goes to both ``update`` methods;
* **policy noise**: the JAX agent draws eps ~ N(0, I) from its PRNG key inside its jitted update; the harness
  draws the same eps outside (``jax_update_noise``: the agent's key split, then ``jax.random.normal``) and hands
  them to the torch actor, whose ``torch.randn_like`` is the only random draw of a torch update
  (``torch_noise`` swaps the ``torch`` name seen by ``agent_torch.networks`` for a proxy that returns them, in the
  order torch asks: the actor update's (2B, A) draw, then the critic target's (B, A) draw);
* **gradients**: torch leaves them in ``.grad``; on the JAX side ``record_jax_gradients`` prepends a pass-through
  optax transformation that stores the gradient it receives in the optimizer state (the update itself is unchanged).

What remains is the arithmetic of the two frameworks, which is what the comparisons measure. The tolerances the
comparisons are held to, and why, are in docs/testing.md.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from agent_interop.synthetic import make_spaces
from agent_interop.torch_jax import torch_to_jax
from agent_interop.trees import named_arrays

__all__ = [
    "GradRecord",
    "compare_named",
    "jax_grads",
    "jax_named_state",
    "jax_update_noise",
    "make_agent_pair",
    "op_parity",
    "param_diff_stats",
    "record_jax_gradients",
    "step_pair",
    "target_diagnostics",
    "torch_grads",
    "torch_named_state",
    "torch_noise",
]

NETS = ("actor", "critic", "target_critic", "temperature")


# ---------------------------------------------------------------------------------------------------------------
# construction
# ---------------------------------------------------------------------------------------------------------------


def make_agent_pair(overrides: Sequence[str], observation_dim: int, action_dim: int, torch_backend: str,
                    jax_backend: str, action_low: Any = None, action_high: Any = None) -> tuple[Any, Any]:
    """A torch agent (``torch_backend``, strict) and a JAX agent (``jax_backend``, strict) with identical state.

    The torch agent is built from its seed; the JAX agent then receives its full state (``torch_to_jax``).

    Args:
        overrides: ``key=value`` config overrides shared by both agents (sizes, device, ...).
        observation_dim: O.
        action_dim: A.
        torch_backend: ``torch`` or ``triton``.
        jax_backend: ``jax`` or ``pallas``.
        action_low: (A,) action bounds of both agents (None: [-1, 1]).
        action_high: (A,).

    Returns:
        (torch agent, JAX agent).
    """
    from agent_common.config import load_config
    from agent_jax.agent import FlashSACAgent as JaxAgent
    from agent_torch.agent import FlashSACAgent as TorchAgent

    obs_space, act_space = make_spaces(observation_dim, action_dim, action_low, action_high)
    common = [*overrides, "agent.categorical_target_strict=true"]
    t_cfg = load_config([*common, f"agent.categorical_target_backend={torch_backend}"], "torch")
    j_cfg = load_config([*common, f"agent.categorical_target_backend={jax_backend}"], "jax")
    torch_agent = TorchAgent(t_cfg, obs_space, act_space)
    jax_agent = JaxAgent(j_cfg, obs_space, act_space)
    torch_to_jax(torch_agent, jax_agent)
    return torch_agent, jax_agent


# ---------------------------------------------------------------------------------------------------------------
# shared noise
# ---------------------------------------------------------------------------------------------------------------


@jax.jit
def _split3(rng: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    return tuple(jax.random.split(rng, 3))  # type: ignore[return-value]


def _normal(key: jax.Array, shape: tuple[int, int]) -> np.ndarray:
    return np.array(jax.random.normal(key, shape, jnp.float32))  # a writable copy (torch.from_numpy warns otherwise)


def jax_update_noise(jax_agent: Any, batch_size: int) -> list[np.ndarray]:
    """The eps the JAX agent's next ``update`` will draw, in the order the torch update consumes them.

    ``agent_jax.update.update_networks`` splits ``state.rng`` into (next rng, actor key, critic key); the actor
    update samples (2B, A) from the actor key (on [s; s']), the critic target (B, A) from the critic key (on s').
    """
    _, actor_key, critic_key = _split3(jax_agent.state.rng)
    action_dim = int(jax_agent.action_dim)
    noises = []
    if jax_agent.update_step % jax_agent.cfg.agent.actor_update_period == 0:
        noises.append(_normal(actor_key, (2 * batch_size, action_dim)))
    noises.append(_normal(critic_key, (batch_size, action_dim)))
    return noises


class _NoiseTorch:
    """Stands in for the ``torch`` module inside ``agent_torch.networks``: ``randn_like`` returns queued noise."""

    def __init__(self, torch_module: Any, queue: list[np.ndarray]) -> None:
        self._torch = torch_module
        self._queue = queue

    def __getattr__(self, name: str) -> Any:
        return getattr(self._torch, name)

    def randn_like(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        if not self._queue:
            raise AssertionError(f"torch drew more noise than queued (shape {tuple(x.shape)})")
        eps = self._queue.pop(0)
        if tuple(eps.shape) != tuple(x.shape):
            raise AssertionError(f"torch drew noise of shape {tuple(x.shape)}, the next queued is {eps.shape}")
        return self._torch.from_numpy(np.array(eps, dtype=np.float32)).to(device=x.device, dtype=x.dtype)


@contextlib.contextmanager
def torch_noise(noises: Sequence[np.ndarray]) -> Iterator[None]:
    """Within the block, the torch actor's eps ~ N(0, I) draws return ``noises`` in order; all must be used."""
    import torch

    import agent_torch.networks as networks

    queue = list(noises)
    original = networks.torch
    networks.torch = _NoiseTorch(torch, queue)  # type: ignore[assignment]
    try:
        yield
    finally:
        networks.torch = original
    if queue:
        raise AssertionError(f"{len(queue)} queued noise arrays were not drawn by torch")


# ---------------------------------------------------------------------------------------------------------------
# gradients
# ---------------------------------------------------------------------------------------------------------------


class GradRecord(NamedTuple):
    """Optimizer-state slot holding the last gradient a network received."""

    grads: Any


def _record_transform() -> optax.GradientTransformation:
    def init(params: Any) -> GradRecord:
        return GradRecord(jax.tree_util.tree_map(jnp.zeros_like, params))

    def update(updates: Any, state: GradRecord, params: Any = None) -> tuple[Any, GradRecord]:
        del state, params
        return updates, GradRecord(updates)

    return optax.GradientTransformation(init, update)


def record_jax_gradients(jax_agent: Any) -> None:
    """Makes every trained JAX network keep its last gradient: ``tx`` becomes chain(record, tx).

    The recording transformation passes the gradient through unchanged, so the update is the agent's own; the
    Adam and schedule states keep their values (nested one level deeper, where ``agent_interop.torch_jax`` finds
    them).
    """
    s = jax_agent.state
    new = {}
    for net in ("actor", "critic", "temperature"):
        ts = getattr(s, net)
        record = _record_transform()
        new[net] = ts.replace(tx=optax.chain(record, ts.tx), opt_state=(record.init(ts.params), ts.opt_state))
    jax_agent.state = jax.device_put(s.replace(**new), jax_agent.device)


def jax_grads(jax_agent: Any) -> dict[str, dict[str, np.ndarray]]:
    """{network: {torch name: last gradient}} from ``record_jax_gradients``' slot."""
    out = {}
    for net in ("actor", "critic", "temperature"):
        record = getattr(jax_agent.state, net).opt_state[0]
        assert isinstance(record, GradRecord), "call record_jax_gradients first"
        out[net] = named_arrays(record.grads)
    return out


def torch_grads(torch_agent: Any) -> dict[str, dict[str, np.ndarray]]:
    """{network: {name: .grad}} (parameters without a gradient are left out)."""
    out = {}
    for net in ("actor", "critic", "temperature"):
        module = getattr(torch_agent, net).module
        out[net] = {n: p.grad.detach().cpu().numpy().copy() for n, p in module.named_parameters()
                    if p.grad is not None}
    return out


# ---------------------------------------------------------------------------------------------------------------
# state snapshots and comparisons
# ---------------------------------------------------------------------------------------------------------------


def torch_named_state(torch_agent: Any) -> dict[str, dict[str, np.ndarray]]:
    """{network: {name: parameter or running statistic}} as numpy (``atoms`` left out)."""
    out = {}
    for net in NETS:
        sd = getattr(torch_agent, net).module.state_dict()
        out[net] = {k: v.detach().cpu().numpy().copy() for k, v in sd.items() if k != "atoms"}
    return out


def jax_named_state(jax_agent: Any) -> dict[str, dict[str, np.ndarray]]:
    """The JAX agent's parameters and running statistics under torch names, as ``torch_named_state``."""
    s = jax_agent.state
    trees = {"actor": (s.actor.params, s.actor.batch_stats), "critic": (s.critic.params, s.critic.batch_stats),
             "target_critic": (s.critic.target_params, s.critic.target_batch_stats),
             "temperature": (s.temperature.params, {})}
    return {net: {**named_arrays(p), **named_arrays(b)} for net, (p, b) in trees.items()}


def compare_named(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, Any]:
    """Max abs difference over all entries, the entry where it occurs, max relative (to max |a| of that entry)."""
    if set(a) != set(b):
        raise AssertionError(f"different entries: {sorted(set(a) ^ set(b))}")
    worst, worst_name, worst_rel, bitwise = 0.0, "", 0.0, True
    for name in sorted(a):
        x, y = np.asarray(a[name], np.float64), np.asarray(b[name], np.float64)
        if x.shape != y.shape:
            raise AssertionError(f"{name}: shapes {x.shape} vs {y.shape}")
        d = float(np.max(np.abs(x - y))) if x.size else 0.0
        bitwise = bitwise and np.array_equal(np.asarray(a[name]), np.asarray(b[name]))
        scale = float(np.max(np.abs(x))) if x.size else 0.0
        if d > worst:
            worst, worst_name = d, name
        if scale > 0:
            worst_rel = max(worst_rel, d / scale)
    return {"max_abs": worst, "where": worst_name, "max_rel": worst_rel, "bitwise": bool(bitwise)}


def param_diff_stats(torch_agent: Any, jax_agent: Any, threshold: float = 1e-6) -> dict[str, dict[str, float]]:
    """Per network, over every element of its parameters and running statistics: ``max`` abs difference, the
    99.9th percentile ``p999``, the ``fraction_over`` ``threshold`` and the element count ``n``."""
    t_state, j_state = torch_named_state(torch_agent), jax_named_state(jax_agent)
    out = {}
    for net in NETS:
        compare_named(t_state[net], j_state[net])  # same entries and shapes
        d = np.concatenate([np.abs(t_state[net][k].astype(np.float64) - j_state[net][k]).ravel()
                            for k in sorted(t_state[net])])
        out[net] = {"max": float(d.max()), "p999": float(np.quantile(d, 0.999)),
                    "fraction_over": float(np.mean(d > threshold)), "n": int(d.size)}
    return out


def _norm(named: dict[str, np.ndarray]) -> float:
    return float(np.sqrt(sum(float(np.sum(np.asarray(v, np.float64) ** 2)) for v in named.values())))


# ---------------------------------------------------------------------------------------------------------------
# the comparisons
# ---------------------------------------------------------------------------------------------------------------


def op_parity(next_qs: np.ndarray, next_log_probs: np.ndarray, reward: np.ndarray, terminated: np.ndarray,
              next_alpha_log_pi: np.ndarray, gamma: float, min_v: float, max_v: float, torch_backend: str,
              jax_backend: str, device: str = "cpu") -> dict[str, Any]:
    """The TD-target op of both frameworks fed the *same* inputs: max abs difference, bitwise flag, and outputs.

    Args:
        next_qs, next_log_probs, reward, terminated, next_alpha_log_pi: fp32 numpy inputs (E, B), (E, B, N), (B,).
        gamma, min_v, max_v: op constants.
        torch_backend / jax_backend: backends, run strict.
        device: torch device of the inputs.
    """
    import torch

    import jax_impl
    import torch_impl

    t_args = [torch.from_numpy(np.array(x, dtype=np.float32)).to(device) for x in
              (next_qs, next_log_probs, reward, terminated, next_alpha_log_pi)]
    t_out = torch_impl.categorical_td_target(*t_args, gamma=gamma, min_v=min_v, max_v=max_v,
                                             backend=torch_backend, strict=True).cpu().numpy()
    j_args = [jnp.asarray(x) for x in (next_qs, next_log_probs, reward, terminated, next_alpha_log_pi)]
    j_out = np.asarray(jax_impl.categorical_td_target(*j_args, gamma=gamma, min_v=min_v, max_v=max_v,
                                                      backend=jax_backend, strict=True))
    return {"max_abs": float(np.max(np.abs(t_out.astype(np.float64) - j_out))),
            "bitwise": bool(np.array_equal(t_out, j_out)), "torch": t_out, "jax": j_out}


@functools.partial(jax.jit, static_argnums=(0, 3))
def _actor_sample(apply_fn: Any, variables: Any, obs: jax.Array, training: bool, key: jax.Array) -> Any:
    return apply_fn(variables, obs, training, key)


@functools.partial(jax.jit, static_argnums=(0,))
def _critic_training_forward(apply_fn: Any, params: Any, batch_stats: Any, obs: jax.Array, act: jax.Array) -> Any:
    return apply_fn({"params": params, "batch_stats": batch_stats}, obs, act, True, mutable=["batch_stats"])[0]


@functools.cache
def _jitted_critic_target() -> Any:
    import agent_jax.update as jupd

    return jax.jit(jupd.critic_target)


def target_diagnostics(torch_agent: Any, jax_agent: Any, batch: dict[str, np.ndarray]) -> dict[str, Any]:
    """The critic-target chain of both agents on ``batch`` with the noise of their next update; no state changes.

    Returns a dict of max abs differences (and arrays for further checks):
        ``next_action``, ``next_log_pi``, ``next_alpha_log_pi``: the actor at s' (BN running stats) with shared eps;
        ``target_q``, ``target_log_probs``: both target critics (BN training mode on the joint 2B batch) fed the
        *same* inputs [(s, a); (s', a'_torch)];
        ``td_target_end_to_end``: each agent's own ``critic_target`` (own a', own critic outputs, own op backend);
        ``td_target_same_inputs``: both ops fed the torch agent's critic outputs (``op_parity``), + ``..._bitwise``.
    """
    import torch

    import agent_torch.update as tupd

    batch_size = int(batch["reward"].shape[0])
    noises = jax_update_noise(jax_agent, batch_size)
    critic_eps = noises[-1]
    _, _, critic_key = _split3(jax_agent.state.rng)
    t_batch = torch_agent.to_batch(batch)
    j_batch = jax_agent.to_batch(batch)
    s = jax_agent.state
    tgt = torch_agent.target_critic.module
    saved = {k: v.detach().clone() for k, v in tgt.state_dict().items()}  # target BN running stats move in forward
    try:
        with torch.no_grad():
            with torch_noise([critic_eps]):
                t_next_action, t_next_log_pi = torch_agent.actor.module(t_batch.next_observation, training=False)
            with torch_noise([critic_eps]):
                t_target, t_alpha_log_pi, t_next_actions = tupd.critic_target(
                    torch_agent.actor, torch_agent.target_critic, torch_agent.temperature, t_batch, torch_agent.ctx)
            obs_all = torch.cat([t_batch.observation, t_batch.next_observation], 0)  # (2B, O)
            act_all = torch.cat([t_batch.action, t_next_actions], 0)  # (2B, A)
            t_q, t_lp = tgt(obs_all, act_all, training=True)  # (2, 2B), (2, 2B, K)
    finally:
        tgt.load_state_dict(saved)
    actor_vars = {"params": s.actor.params, "batch_stats": s.actor.batch_stats}
    j_next_action, j_next_log_pi = _actor_sample(s.actor.apply_fn, actor_vars, j_batch.next_observation, False,
                                                 critic_key)
    j_target, j_alpha_log_pi, _, _ = _jitted_critic_target()(s.actor, s.critic, s.temperature, j_batch,
                                                             jax_agent.ctx, critic_key)
    obs_all_j = jax.device_put(obs_all.cpu().numpy(), jax_agent.device)
    act_all_j = jax.device_put(act_all.cpu().numpy(), jax_agent.device)
    j_q, j_lp = _critic_training_forward(s.critic.apply_fn, s.critic.target_params, s.critic.target_batch_stats,
                                         obs_all_j, act_all_j)
    ctx = torch_agent.ctx
    t_qs_next = t_q[:, batch_size:].cpu().numpy()
    t_lp_next = t_lp[:, batch_size:].cpu().numpy()
    same = op_parity(t_qs_next, t_lp_next, batch["reward"], batch["terminated"], t_alpha_log_pi.cpu().numpy(),
                     ctx.discount, ctx.min_v, ctx.max_v, torch_agent.backend_decision.backend, jax_agent.ctx.backend,
                     device=str(torch_agent.device))

    def diff(a: Any, b: Any) -> float:
        return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))

    t_np = t_target.cpu().numpy()
    return {
        "next_action": diff(t_next_action.cpu().numpy(), j_next_action),
        "next_log_pi": diff(t_next_log_pi.cpu().numpy(), j_next_log_pi),
        "next_alpha_log_pi": diff(t_alpha_log_pi.cpu().numpy(), j_alpha_log_pi),
        "target_q": diff(t_q.cpu().numpy(), j_q),
        "target_log_probs": diff(t_lp.cpu().numpy(), j_lp),
        "td_target_end_to_end": diff(t_np, j_target),
        "td_target_same_inputs": same["max_abs"],
        "td_target_same_inputs_bitwise": same["bitwise"],
        "td_target_mass_error": float(np.max(np.abs(t_np.sum(-1) - 1.0))),
        "arrays": {"torch_target": t_np, "jax_target": np.asarray(j_target), "same_torch": same["torch"],
                   "same_jax": same["jax"], "torch_next_log_pi": t_next_log_pi.cpu().numpy()},
    }


def step_pair(torch_agent: Any, jax_agent: Any, batch: dict[str, np.ndarray]) -> dict[str, Any]:
    """One ``update`` of each agent on the same batch with shared noise; the differences afterwards.

    Needs ``record_jax_gradients(jax_agent)`` once beforehand (for the gradient comparison).

    Returns:
        ``metrics``: {name: (torch value, JAX value)} of the update's info dict; ``grad_norm``: {network: (torch,
        JAX, max abs difference of the gradients)} (actor/temperature only on actor updates); ``params``: {network:
        ``compare_named`` of parameters + running statistics}.
    """
    batch_size = int(batch["reward"].shape[0])
    actor_step = torch_agent.update_step % torch_agent.cfg.agent.actor_update_period == 0
    if torch_agent.update_step != jax_agent.update_step:
        raise AssertionError(f"update counters differ: torch {torch_agent.update_step}, jax {jax_agent.update_step}")
    noises = jax_update_noise(jax_agent, batch_size)
    with torch_noise(noises):
        t_metrics = torch_agent.update(batch)
    jax_agent.update(batch)
    j_metrics = jax_agent.flush_metrics()
    metrics = {k: (t_metrics[k], j_metrics[k]) for k in sorted(t_metrics) if k in j_metrics}
    tg, jg = torch_grads(torch_agent), jax_grads(jax_agent)
    grad_norm = {}
    for net in ("actor", "critic", "temperature"):
        if net != "critic" and not actor_step:
            continue
        grad_norm[net] = (_norm(tg[net]), _norm(jg[net]), compare_named(tg[net], jg[net])["max_abs"])
    t_state, j_state = torch_named_state(torch_agent), jax_named_state(jax_agent)
    params = {net: compare_named(t_state[net], j_state[net]) for net in NETS}
    return {"actor_step": actor_step, "metrics": metrics, "grad_norm": grad_norm, "params": params}
