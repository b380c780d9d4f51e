"""Flax (linen) networks of the JAX FlashSAC agent, with the same module names and parameter shapes as agent_torch.

Layout choices, so that the converter (agent_interop) can convert weights by name alone:

* Linear weights are stored in PyTorch's layout, ``(out, in)`` (ensemble: ``(N, out, in)``), not flax's
  ``(in, out)`` kernel layout, and are named ``weight``; BatchNorm affine parameters are ``weight`` / ``bias``
  and its running statistics ``running_mean`` / ``running_var`` (collection ``batch_stats``).
* Module and parameter names are agent_torch's (``input_bn``, ``embed``, ``blocks``, ``fc1``/``bn1``/``fc2``/``bn2``,
  ``final_norm``, ``mean_head``/``mean_bias``, ``log_std_head``/``log_std_bias``, ``head``/``head_bias``,
  ``log_temp``). linen names list members ``blocks_0``, ``blocks_1`` where PyTorch has ``blocks.0``, ``blocks.1``;
  the torch critic's ``atoms`` buffer is a constant here (it is never trained or saved).

The unit-norm layers are FlashSAC's own layers (docs/flashsac.md); flax has no equivalent with PyTorch's
BatchNorm semantics (biased batch variance for normalisation, unbiased variance in the running estimate), so they
are written here on top of ``flax.linen``. Every module that owns projected weights has a
``normalize_parameters`` method that rewrites its parameters in place; call it through
``module.apply(variables, method="normalize_parameters", mutable=["params"])`` (see ``normalize_parameters``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "BN_EPS",
    "BN_MOMENTUM",
    "EnsembleResidualBlock",
    "EnsembleUnitBatchNorm",
    "EnsembleUnitLinear",
    "EnsembleUnitRMSNorm",
    "FlashSACActor",
    "FlashSACDoubleCritic",
    "FlashSACTemperature",
    "HeadLinear",
    "ResidualBlock",
    "UnitBatchNorm",
    "UnitLinear",
    "UnitRMSNorm",
    "normalize_parameters",
    "safe_tanh_log_det_jacobian",
    "scale_action",
    "torch_state_dict",
]

Array = jax.Array
BN_MOMENTUM = 0.01  # PyTorch convention: running <- (1 - momentum) * running + momentum * batch
BN_EPS = 1e-5
RMS_EPS = 1e-6
LOG_STD_MIN, LOG_STD_MAX = -10.0, 2.0  # paper-era log-std range
ACTOR_HEADS: dict[str, tuple[float, float]] = {"paper": (-10.0, 2.0), "upstream": (-5.0, 0.0)}
"""``agent.actor_head`` -> its (log σ min, log σ max) (docs/flashsac.md, "Actor head")."""
WEIGHT_EPS = 1e-8  # F.normalize eps for the unit-row projection
AFFINE_EPS = 1e-8  # inside rsqrt of the BN / RMSNorm sqrt(d) projection


def _orthogonal(key: Array, shape: Sequence[int], dtype: Any = jnp.float32) -> Array:
    """torch.nn.init.orthogonal_(gain=1) on the last two axes, independently for every leading index.

    For a (out, in) matrix the columns are orthonormal when out > in and the rows when out <= in, as in PyTorch;
    rows are only made unit-norm by the first ``normalize_parameters`` (docs/flashsac.md).
    """
    *lead, out_dim, in_dim = shape
    init = nn.initializers.orthogonal(scale=1.0, column_axis=-1)
    if not lead:
        return init(key, (out_dim, in_dim), dtype)  # (out, in)
    n = math.prod(lead)
    keys = jax.random.split(key, n)
    # A Python loop, not vmap: a batched QR custom call parallelises over the XLA:CPU intra-op pool, and several of
    # them running concurrently inside one jitted init deadlock on a 2-core machine.
    mats = jnp.stack([init(keys[i], (out_dim, in_dim), dtype) for i in range(n)])  # (n, out, in)
    return mats.reshape(*lead, out_dim, in_dim)


def _unit_rows(w: Array) -> Array:
    """F.normalize(w, dim=-1, eps=1e-8): every output unit's input weights to unit L2 norm."""
    norm = jnp.sqrt(jnp.sum(w * w, axis=-1, keepdims=True))  # (..., out, 1)
    return w / jnp.maximum(norm, WEIGHT_EPS)


def _sqrt_d_scale(*vectors: Array) -> tuple[Array, ...]:
    """Rescale vectors jointly (over their last axis) so that sum of squares = d, as upstream normalize_parameters."""
    d = vectors[0].shape[-1]
    sqsum = sum(jnp.sum(v * v, axis=-1, keepdims=True) for v in vectors)  # (..., 1)
    factor = math.sqrt(d) * jax.lax.rsqrt(sqsum + AFFINE_EPS)  # (..., 1)
    return tuple(v * factor for v in vectors)


def _matmul_inputs(x: Array, weight: Array, dtype: Any) -> tuple[Array, Array]:
    """``x`` and ``weight`` cast to the compute dtype (mixed precision), or as they are when ``dtype`` is None."""
    if dtype is None:
        return x, weight
    return x.astype(dtype), weight.astype(dtype)


def safe_tanh_log_det_jacobian(u: Array) -> Array:
    """log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable for large |u| (upstream distribution.py)."""
    return 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))


# ---------------------------------------------------------------------------------------------------------------
# Single-network layers (actor)
# ---------------------------------------------------------------------------------------------------------------


class UnitLinear(nn.Module):
    """Bias-free linear layer whose weight rows are projected to unit norm after every optimiser step.

    Attributes:
        in_features: input width.
        out_features: output width. The weight is (out_features, in_features), PyTorch layout.
        dtype: compute dtype of the matmul (None: the input's; the weight stays float32).
    """

    in_features: int
    out_features: int
    dtype: Any = None

    def setup(self) -> None:
        self.weight = self.param("weight", _orthogonal, (self.out_features, self.in_features))  # (out, in)

    def __call__(self, x: Array) -> Array:
        """(B, in) -> (B, out), in ``dtype`` when set."""
        x, weight = _matmul_inputs(x, self.weight, self.dtype)
        return x @ weight.T  # (B, out)

    def normalize_parameters(self) -> None:
        self.put_variable("params", "weight", _unit_rows(self.weight))


class UnitBatchNorm(nn.Module):
    """PyTorch-semantics BatchNorm1d (momentum 0.01, eps 1e-5) whose (weight, bias) are projected to norm sqrt(d).

    Training mode normalises with the biased batch variance and lerps the *unbiased* one into ``running_var``,
    exactly as ``torch.nn.functional.batch_norm``; flax.linen.BatchNorm stores the biased one, hence this layer.

    Attributes:
        dim: feature width d.
    """

    dim: int

    def setup(self) -> None:
        self.weight = self.param("weight", nn.initializers.ones_init(), (self.dim,))  # (d,)
        self.bias = self.param("bias", nn.initializers.zeros_init(), (self.dim,))  # (d,)
        self.running_mean = self.variable("batch_stats", "running_mean", jnp.zeros, (self.dim,))  # (d,)
        self.running_var = self.variable("batch_stats", "running_var", jnp.ones, (self.dim,))  # (d,)

    def __call__(self, x: Array, training: bool) -> Array:
        """(B, d) -> (B, d) in x's dtype, computed in float32. Training=True needs mutable=["batch_stats"]."""
        dtype, x = x.dtype, x.astype(jnp.float32)
        if training:
            mean = jnp.mean(x, axis=0)  # (d,)
            var = jnp.mean(jnp.square(x - mean), axis=0)  # (d,) biased
            if not self.is_initializing():
                n = x.shape[0]
                unbiased = var * (n / max(n - 1, 1))  # (d,)
                self.running_mean.value = self.running_mean.value + BN_MOMENTUM * (mean - self.running_mean.value)
                self.running_var.value = self.running_var.value + BN_MOMENTUM * (unbiased - self.running_var.value)
        else:
            mean, var = self.running_mean.value, self.running_var.value  # (d,), (d,)
        y = (x - mean) * jax.lax.rsqrt(var + BN_EPS)  # (B, d)
        return (y * self.weight + self.bias).astype(dtype)  # (B, d)

    def normalize_parameters(self) -> None:
        weight, bias = _sqrt_d_scale(self.weight, self.bias)
        self.put_variable("params", "weight", weight)
        self.put_variable("params", "bias", bias)


class UnitRMSNorm(nn.Module):
    """RMSNorm y = x * rsqrt(mean(x^2) + 1e-6) * weight, with weight projected to norm sqrt(d)."""

    dim: int

    def setup(self) -> None:
        self.weight = self.param("weight", nn.initializers.ones_init(), (self.dim,))  # (d,)

    def __call__(self, x: Array) -> Array:
        """(..., d) -> (..., d) in x's dtype, computed in float32."""
        dtype, x = x.dtype, x.astype(jnp.float32)
        y = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + RMS_EPS)  # (..., d)
        return (y * self.weight).astype(dtype)  # (..., d)

    def normalize_parameters(self) -> None:
        (weight,) = _sqrt_d_scale(self.weight)
        self.put_variable("params", "weight", weight)


class ResidualBlock(nn.Module):
    """Inverted residual block y = x + ReLU(BN2(W2 ReLU(BN1(W1 x)))), W1: d -> 4d, W2: 4d -> d."""

    dim: int
    dtype: Any = None  # compute dtype of the matmuls (None: float32)

    def setup(self) -> None:
        self.fc1 = UnitLinear(self.dim, 4 * self.dim, self.dtype)
        self.bn1 = UnitBatchNorm(4 * self.dim)
        self.fc2 = UnitLinear(4 * self.dim, self.dim, self.dtype)
        self.bn2 = UnitBatchNorm(self.dim)

    def __call__(self, x: Array, training: bool) -> Array:
        """(B, d) -> (B, d)."""
        h = nn.relu(self.bn1(self.fc1(x), training))  # (B, 4d)
        return x + nn.relu(self.bn2(self.fc2(h), training))  # (B, d)

    def normalize_parameters(self) -> None:
        for m in (self.fc1, self.bn1, self.fc2, self.bn2):
            m.normalize_parameters()


class HeadLinear(nn.Module):
    """Bias-free linear head that is never projected (upstream's current actor heads), weight (out, in).

    Attributes:
        in_features: input width.
        out_features: output width.
        init_std: weight ~ N(0, init_std^2); 0 gives a zero weight.
        dtype: compute dtype of the matmul (None: the input's; the weight stays float32).
    """

    in_features: int
    out_features: int
    init_std: float
    dtype: Any = None

    def setup(self) -> None:
        init = nn.initializers.normal(self.init_std) if self.init_std > 0 else nn.initializers.zeros_init()
        self.weight = self.param("weight", init, (self.out_features, self.in_features))  # (out, in)

    def __call__(self, x: Array) -> Array:
        """(B, in) -> (B, out), in ``dtype`` when set."""
        x, weight = _matmul_inputs(x, self.weight, self.dtype)
        return x @ weight.T  # (B, out)


def actor_bounds(actor_def: Any) -> tuple[Array, Array]:
    """(bias, range) (A,) float32 of an actor's upstream head (0 and 1 when it has no bounds)."""
    bias = jnp.asarray(actor_def.action_bias or (0.0,) * actor_def.action_dim, jnp.float32)  # (A,)
    scale = jnp.asarray(actor_def.action_range or (1.0,) * actor_def.action_dim, jnp.float32)  # (A,)
    return bias, scale


def scale_action(actor_def: Any, squashed: Array) -> Array:
    """tanh(u) (B, A) -> the env action: bias + range·tanh(u) with the upstream head, tanh(u) with the paper's.

    Reads only the module's attributes, so it works on an unbound ``FlashSACActor`` (acting code)."""
    if actor_def.head == "paper":
        return squashed
    bias, scale = actor_bounds(actor_def)
    return bias + scale * squashed  # (B, A)


class FlashSACActor(nn.Module):
    """Tanh-Gaussian actor (docs/flashsac.md), with the paper-era or upstream's current head.

    obs (B, O) -> BN -> UnitLinear(O -> d) -> blocks -> RMSNorm(d) -> mean / log-std heads + biases.
    ``head="paper"``: ``UnitLinear`` heads (projected), log σ in [-10, 2], action tanh(u). ``head="upstream"``:
    ``HeadLinear`` heads (mean weight ~ N(0, 1e-3²), log-std weight 0, never projected), log σ in [-5, 0], action
    bias + range·tanh(u) with the env's bounds, log-prob minus Σ ln max(|range|, 1e-6). Same parameter names.

    Attributes:
        observation_dim: O.
        action_dim: A.
        num_blocks: residual blocks.
        hidden_dim: d.
        head: "paper" or "upstream".
        action_bias: (A,) (high + low) / 2 for the upstream head; empty: 0.
        action_range: (A,) (high - low) / 2 for the upstream head; empty: 1.
        dtype: compute dtype of the linear layers and the activations between them (mixed precision,
            ``agent_jax.amp``); None: float32. Normalisation, the heads' outputs and the log-probability are float32.
    """

    observation_dim: int
    action_dim: int
    num_blocks: int
    hidden_dim: int
    head: str = "paper"
    action_bias: tuple[float, ...] = ()
    action_range: tuple[float, ...] = ()
    dtype: Any = None

    def setup(self) -> None:
        if self.head not in ACTOR_HEADS:
            raise ValueError(f"actor head: expected one of {sorted(ACTOR_HEADS)}, got {self.head!r}")
        self.input_bn = UnitBatchNorm(self.observation_dim)
        self.embed = UnitLinear(self.observation_dim, self.hidden_dim, self.dtype)
        self.blocks = [ResidualBlock(self.hidden_dim, self.dtype) for _ in range(self.num_blocks)]
        self.final_norm = UnitRMSNorm(self.hidden_dim)
        if self.head == "paper":
            self.mean_head: Any = UnitLinear(self.hidden_dim, self.action_dim, self.dtype)
            self.log_std_head: Any = UnitLinear(self.hidden_dim, self.action_dim, self.dtype)
        else:
            self.mean_head = HeadLinear(self.hidden_dim, self.action_dim, 1e-3, self.dtype)
            self.log_std_head = HeadLinear(self.hidden_dim, self.action_dim, 0.0, self.dtype)
        self.mean_bias = self.param("mean_bias", nn.initializers.zeros_init(), (self.action_dim,))  # (A,)
        self.log_std_bias = self.param("log_std_bias", nn.initializers.zeros_init(), (self.action_dim,))  # (A,)

    def _bounds(self) -> tuple[Array, Array]:
        return actor_bounds(self)

    def scale_action(self, squashed: Array) -> Array:
        """tanh(u) (B, A) -> the env action (``scale_action`` of this module's head)."""
        return scale_action(self, squashed)

    def trunk(self, obs: Array, training: bool) -> Array:
        """(B, O) -> (B, d)."""
        x = self.embed(self.input_bn(obs, training))  # (B, d)
        for block in self.blocks:
            x = block(x, training)  # (B, d)
        return self.final_norm(x)  # (B, d)

    def get_mean_and_std(self, obs: Array, training: bool) -> tuple[Array, Array]:
        """Pre-tanh Gaussian mean (B, A) and std (B, A), std = exp(log_std) with log_std in the head's range."""
        h = self.trunk(obs, training)  # (B, d)
        mean = self.mean_head(h).astype(jnp.float32) + self.mean_bias  # (B, A) float32
        raw = self.log_std_head(h).astype(jnp.float32) + self.log_std_bias  # (B, A) float32
        lo, hi = ACTOR_HEADS[self.head]
        log_std = lo + (hi - lo) * 0.5 * (1.0 + jnp.tanh(raw))  # (B, A)
        return mean, jnp.exp(log_std)  # (B, A), (B, A)

    def __call__(self, obs: Array, training: bool, key: Array) -> tuple[Array, Array]:
        """Reparametrised sample.

        Args:
            obs: (B, O).
            training: BN on batch statistics (apply with mutable=["batch_stats"]) or on running statistics.
            key: PRNG key for eps ~ N(0, I).

        Returns:
            action (B, A) = tanh(u) (upstream head: bias + range·tanh(u)), u = mean + std * eps, and log_prob (B,) =
            sum_i [log N(u_i; mean_i, std_i) - log(1 - tanh(u_i)^2)] (upstream head: minus sum_i ln range_i).
        """
        mean, std = self.get_mean_and_std(obs, training)  # (B, A), (B, A)
        eps = jax.random.normal(key, mean.shape, mean.dtype)  # (B, A)
        return self.sample_with_noise(mean, std, eps)

    def sample_with_noise(self, mean: Array, std: Array, eps: Array) -> tuple[Array, Array]:
        """(action (B, A), log_prob (B,)) for u = mean + std * eps (``__call__`` with given noise)."""
        u = mean + std * eps  # (B, A)
        normal_log_prob = -0.5 * jnp.square(eps) - jnp.log(std) - 0.5 * math.log(2.0 * math.pi)  # (B, A)
        log_prob = jnp.sum(normal_log_prob - safe_tanh_log_det_jacobian(u), axis=-1)  # (B,)
        if self.head != "paper":
            _, scale = self._bounds()
            log_prob = log_prob - jnp.sum(jnp.log(jnp.maximum(jnp.abs(scale), 1e-6)))  # (B,)
        return self.scale_action(jnp.tanh(u)), log_prob  # (B, A), (B,)

    def normalize_parameters(self) -> None:
        heads = (self.mean_head, self.log_std_head) if self.head == "paper" else ()
        for m in (self.input_bn, self.embed, *self.blocks, self.final_norm, *heads):
            m.normalize_parameters()


# ---------------------------------------------------------------------------------------------------------------
# Ensemble layers (critic): every array has a leading member axis N; activations are (N, B, d)
# ---------------------------------------------------------------------------------------------------------------


class EnsembleUnitLinear(nn.Module):
    """N independent bias-free unit-row linear layers, weight (N, out, in), einsum('nbi,noi->nbo')."""

    num_members: int
    in_features: int
    out_features: int
    dtype: Any = None  # compute dtype of the matmul (None: the input's; the weight stays float32)

    def setup(self) -> None:
        shape = (self.num_members, self.out_features, self.in_features)
        self.weight = self.param("weight", _orthogonal, shape)  # (N, out, in) orthogonal per member

    def __call__(self, x: Array) -> Array:
        """(N, B, in) -> (N, B, out), in ``dtype`` when set."""
        x, weight = _matmul_inputs(x, self.weight, self.dtype)
        return jnp.einsum("nbi,noi->nbo", x, weight)  # (N, B, out)

    def normalize_parameters(self) -> None:
        self.put_variable("params", "weight", _unit_rows(self.weight))


class EnsembleUnitBatchNorm(nn.Module):
    """Per-member PyTorch-semantics BatchNorm over the batch axis; parameters and running stats are (N, d)."""

    num_members: int
    dim: int

    def setup(self) -> None:
        shape = (self.num_members, self.dim)
        self.weight = self.param("weight", nn.initializers.ones_init(), shape)  # (N, d)
        self.bias = self.param("bias", nn.initializers.zeros_init(), shape)  # (N, d)
        self.running_mean = self.variable("batch_stats", "running_mean", jnp.zeros, shape)  # (N, d)
        self.running_var = self.variable("batch_stats", "running_var", jnp.ones, shape)  # (N, d)

    def __call__(self, x: Array, training: bool) -> Array:
        """(N, B, d) -> (N, B, d) in x's dtype, computed in float32."""
        dtype, x = x.dtype, x.astype(jnp.float32)
        if training:
            mean = jnp.mean(x, axis=1, keepdims=True)  # (N, 1, d)
            var = jnp.mean(jnp.square(x - mean), axis=1, keepdims=True)  # (N, 1, d) biased
            if not self.is_initializing():
                n = x.shape[1]
                unbiased = var[:, 0] * (n / max(n - 1, 1))  # (N, d)
                self.running_mean.value = self.running_mean.value + BN_MOMENTUM * (mean[:, 0] - self.running_mean.value)
                self.running_var.value = self.running_var.value + BN_MOMENTUM * (unbiased - self.running_var.value)
        else:
            mean = self.running_mean.value[:, None]  # (N, 1, d)
            var = self.running_var.value[:, None]  # (N, 1, d)
        y = (x - mean) * jax.lax.rsqrt(var + BN_EPS)  # (N, B, d)
        return (y * self.weight[:, None] + self.bias[:, None]).astype(dtype)  # (N, B, d)

    def normalize_parameters(self) -> None:
        weight, bias = _sqrt_d_scale(self.weight, self.bias)
        self.put_variable("params", "weight", weight)
        self.put_variable("params", "bias", bias)


class EnsembleUnitRMSNorm(nn.Module):
    """Per-member RMSNorm of (N, B, d) activations; weight (N, d) projected to norm sqrt(d) per member."""

    num_members: int
    dim: int

    def setup(self) -> None:
        self.weight = self.param("weight", nn.initializers.ones_init(), (self.num_members, self.dim))  # (N, d)

    def __call__(self, x: Array) -> Array:
        """(N, B, d) -> (N, B, d) in x's dtype, computed in float32."""
        dtype, x = x.dtype, x.astype(jnp.float32)
        y = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + RMS_EPS)  # (N, B, d)
        return (y * self.weight[:, None]).astype(dtype)  # (N, B, d)

    def normalize_parameters(self) -> None:
        (weight,) = _sqrt_d_scale(self.weight)
        self.put_variable("params", "weight", weight)


class EnsembleResidualBlock(nn.Module):
    """Ensemble twin of ``ResidualBlock`` on (N, B, d) activations."""

    num_members: int
    dim: int
    dtype: Any = None  # compute dtype of the matmuls (None: float32)

    def setup(self) -> None:
        self.fc1 = EnsembleUnitLinear(self.num_members, self.dim, 4 * self.dim, self.dtype)
        self.bn1 = EnsembleUnitBatchNorm(self.num_members, 4 * self.dim)
        self.fc2 = EnsembleUnitLinear(self.num_members, 4 * self.dim, self.dim, self.dtype)
        self.bn2 = EnsembleUnitBatchNorm(self.num_members, self.dim)

    def __call__(self, x: Array, training: bool) -> Array:
        """(N, B, d) -> (N, B, d)."""
        h = nn.relu(self.bn1(self.fc1(x), training))  # (N, B, 4d)
        return x + nn.relu(self.bn2(self.fc2(h), training))  # (N, B, d)

    def normalize_parameters(self) -> None:
        for m in (self.fc1, self.bn1, self.fc2, self.bn2):
            m.normalize_parameters()


class FlashSACDoubleCritic(nn.Module):
    """Clipped double-Q (arXiv 1802.09477): N = 2 categorical critics fused as one ensemble (docs/flashsac.md).

    Attributes:
        input_dim: O_c + A.
        num_blocks: residual blocks per member.
        hidden_dim: d.
        atoms: (K,) support as a tuple of floats (hashable, so the module can be a static jit argument); build it
            with ``tuple(CategoricalSupport(...).atoms().tolist())`` -- the one place the support is defined.
        num_members: N = 2.
        dtype: compute dtype of the linear layers and the activations between them (mixed precision,
            ``agent_jax.amp``); None: float32. Normalisation, the logits, log-softmax and Q are float32.
    """

    input_dim: int
    num_blocks: int
    hidden_dim: int
    atoms: tuple[float, ...]
    num_members: int = 2
    dtype: Any = None

    def setup(self) -> None:
        num_bins = len(self.atoms)
        n = self.num_members
        self.input_bn = EnsembleUnitBatchNorm(n, self.input_dim)
        self.embed = EnsembleUnitLinear(n, self.input_dim, self.hidden_dim, self.dtype)
        self.blocks = [EnsembleResidualBlock(n, self.hidden_dim, self.dtype) for _ in range(self.num_blocks)]
        self.final_norm = EnsembleUnitRMSNorm(n, self.hidden_dim)
        self.head = EnsembleUnitLinear(n, self.hidden_dim, num_bins, self.dtype)
        self.head_bias = self.param("head_bias", nn.initializers.zeros_init(), (self.num_members, num_bins))  # (N, K)

    def __call__(self, obs: Array, action: Array, training: bool) -> tuple[Array, Array]:
        """Q values and log-distributions of both members.

        Args:
            obs: (B, O_c).
            action: (B, A).
            training: BN mode (training=True needs mutable=["batch_stats"]).

        Returns:
            q (N, B) = sum_k softmax_k z_k, and log_probs (N, B, K).
        """
        x = jnp.concatenate([obs, action], axis=-1)  # (B, O_c + A)
        x = jnp.broadcast_to(x[None], (self.num_members, *x.shape))  # (N, B, O_c + A)
        x = self.embed(self.input_bn(x, training))  # (N, B, d)
        for block in self.blocks:
            x = block(x, training)  # (N, B, d)
        x = self.final_norm(x)  # (N, B, d)
        logits = self.head(x).astype(jnp.float32) + self.head_bias[:, None, :]  # (N, B, K) float32
        log_probs = jax.nn.log_softmax(logits, axis=-1)  # (N, B, K)
        atoms = jnp.asarray(np.asarray(self.atoms, dtype=np.float32))  # (K,)
        q = jnp.sum(jnp.exp(log_probs) * atoms, axis=-1)  # (N, B)
        return q, log_probs

    def normalize_parameters(self) -> None:
        for m in (self.input_bn, self.embed, *self.blocks, self.final_norm, self.head):
            m.normalize_parameters()


class FlashSACTemperature(nn.Module):
    """Learned SAC temperature alpha = exp(log_temp); log_temp (1,) starts at ln(initial_value), never projected."""

    initial_value: float = 0.01

    @nn.compact
    def __call__(self) -> Array:
        """() -> alpha (1,)."""
        log_temp = self.param("log_temp", nn.initializers.constant(math.log(self.initial_value)), (1,))  # (1,)
        return jnp.exp(log_temp)  # (1,)


def normalize_parameters(apply_fn: Callable[..., Any], params: Any, batch_stats: Any) -> Any:
    """Weight projection of docs/flashsac.md as a pure function: returns the projected ``params`` tree.

    Unit-row linear weights, BN (weight, bias) jointly to norm sqrt(d), RMSNorm weight to norm sqrt(d); head
    biases are untouched. Run it after every optimiser step of the actor and the critic (never after the EMA).

    Args:
        apply_fn: ``FlashSACActor(...).apply`` or ``FlashSACDoubleCritic(...).apply`` (a TrainState's apply_fn).
        params: its "params" collection.
        batch_stats: its "batch_stats" collection (read-only here; the BN layers declare it).

    Returns:
        The projected "params" collection (same tree structure).
    """
    variables = {"params": params, "batch_stats": batch_stats}
    _, mutated = apply_fn(variables, method="normalize_parameters", mutable=["params"])
    return mutated["params"]


def torch_state_dict(variables: dict[str, Any]) -> dict[str, np.ndarray]:
    """Flatten flax variables to agent_torch's ``state_dict`` names: ``blocks_0/fc1/weight`` -> ``blocks.0.fc1.weight``.

    Parameters and BN running statistics share one namespace, as in a torch module. Layouts are already PyTorch's,
    so weight conversion between the two agents (agent_interop) is a rename; the torch critic's ``atoms`` buffer has no
    counterpart (it is a constant here).

    Args:
        variables: {"params": ..., "batch_stats": ...} of one network (batch_stats may be absent).

    Returns:
        {dotted torch name: numpy array}.
    """
    out: dict[str, np.ndarray] = {}
    for collection in ("params", "batch_stats"):
        for path, leaf in jax.tree_util.tree_leaves_with_path(variables.get(collection, {})):
            parts: list[str] = []
            for entry in path:
                name = str(getattr(entry, "key", entry))
                head, _, index = name.rpartition("_")
                parts.extend([head, index] if head == "blocks" and index.isdigit() else [name])
            out[".".join(parts)] = np.asarray(leaf)
    return out
