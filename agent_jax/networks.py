"""Flax (linen) networks of the JAX FlashSAC agent, with the same module names and parameter shapes as agent_torch.

Layout choices, so that issue 7 can convert weights by name alone:

* Linear weights are stored in PyTorch's layout, ``(out, in)`` (ensemble: ``(E, out, in)``), not flax's
  ``(in, out)`` kernel layout, and are named ``weight``; BatchNorm affine parameters are ``weight`` / ``bias``
  and its running statistics ``running_mean`` / ``running_var`` (collection ``batch_stats``).
* Sub-module names follow upstream FlashSAC (``embedder``, ``encoder_<i>``, ``post_norm``, ``predictor``);
  linen names list members ``encoder_0``, ``encoder_1`` where PyTorch has ``encoder.0``, ``encoder.1``.

The unit-norm layers are FlashSAC's own layers (FLASHSAC.md section 8.1); flax has no equivalent with PyTorch's
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

from shared_spec.support import CategoricalSupport

__all__ = [
    "EnsembleCategoricalValue",
    "EnsembleFlashSACBlock",
    "EnsembleFlashSACEmbedder",
    "EnsembleUnitBatchNorm",
    "EnsembleUnitLinear",
    "EnsembleUnitRMSNorm",
    "FlashSACActor",
    "FlashSACBlock",
    "FlashSACDoubleCritic",
    "FlashSACEmbedder",
    "FlashSACTemperature",
    "NormalTanhPolicy",
    "UnitBatchNorm",
    "UnitLinear",
    "UnitRMSNorm",
    "normalize_parameters",
    "safe_tanh_log_det_jacobian",
]

Array = jax.Array
BN_MOMENTUM = 0.01  # PyTorch convention: running <- (1 - momentum) * running + momentum * batch
BN_EPS = 1e-5
RMS_EPS = 1e-6
WEIGHT_EPS = 1e-8  # F.normalize eps for the unit-row projection
AFFINE_EPS = 1e-8  # inside rsqrt of the BN / RMSNorm sqrt(d) projection


def _orthogonal(key: Array, shape: Sequence[int], dtype: Any = jnp.float32) -> Array:
    """torch.nn.init.orthogonal_(gain=1) on the last two axes, independently for every leading index.

    For a (out, in) matrix the columns are orthonormal when out > in and the rows when out <= in, as in PyTorch;
    rows are only made unit-norm by the first ``normalize_parameters`` (FLASHSAC.md section 8.1).
    """
    *lead, out_dim, in_dim = shape
    init = nn.initializers.orthogonal(scale=1.0, column_axis=-1)
    if not lead:
        return init(key, (out_dim, in_dim), dtype)  # (out, in)
    n = math.prod(lead)
    keys = jax.random.split(key, n)
    mats = jax.vmap(lambda k: init(k, (out_dim, in_dim), dtype))(keys)  # (n, out, in)
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


def safe_tanh_log_det_jacobian(u: Array) -> Array:
    """log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable for large |u| (upstream distribution.py)."""
    return 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))


# ---------------------------------------------------------------------------------------------------------------
# Single-network layers (actor)
# ---------------------------------------------------------------------------------------------------------------


class UnitLinear(nn.Module):
    """Bias-free linear layer whose weight rows are projected to unit norm after every optimiser step.

    Attributes:
        input_dim: in features.
        output_dim: out features. The weight is (output_dim, input_dim), PyTorch layout.
    """

    input_dim: int
    output_dim: int

    def setup(self) -> None:
        self.weight = self.param("weight", _orthogonal, (self.output_dim, self.input_dim))

    def __call__(self, x: Array) -> Array:
        """(B, in) -> (B, out)."""
        return x @ self.weight.T  # (B, out)

    def normalize_parameters(self) -> None:
        self.put_variable("params", "weight", _unit_rows(self.weight))


class UnitBatchNorm(nn.Module):
    """PyTorch-semantics BatchNorm1d (momentum 0.01, eps 1e-5) whose (weight, bias) are projected to norm sqrt(d).

    Training mode normalises with the biased batch variance and lerps the *unbiased* one into ``running_var``,
    exactly as ``torch.nn.functional.batch_norm``; flax.linen.BatchNorm stores the biased one, hence this layer.
    """

    input_dim: int

    def setup(self) -> None:
        self.weight = self.param("weight", nn.initializers.ones_init(), (self.input_dim,))
        self.bias = self.param("bias", nn.initializers.zeros_init(), (self.input_dim,))
        self.running_mean = self.variable("batch_stats", "running_mean", jnp.zeros, (self.input_dim,))
        self.running_var = self.variable("batch_stats", "running_var", jnp.ones, (self.input_dim,))

    def __call__(self, x: Array, training: bool) -> Array:
        """(B, d) -> (B, d). With training=True, apply with mutable=["batch_stats"]."""
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
        return y * self.weight + self.bias  # (B, d)

    def normalize_parameters(self) -> None:
        weight, bias = _sqrt_d_scale(self.weight, self.bias)
        self.put_variable("params", "weight", weight)
        self.put_variable("params", "bias", bias)


class UnitRMSNorm(nn.Module):
    """RMSNorm y = x / sqrt(mean(x^2) + 1e-6) * weight, with weight projected to norm sqrt(d)."""

    input_dim: int

    def setup(self) -> None:
        self.weight = self.param("weight", nn.initializers.ones_init(), (self.input_dim,))

    def __call__(self, x: Array) -> Array:
        """(B, d) -> (B, d)."""
        rms = jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + RMS_EPS)  # (B, 1)
        return x / rms * self.weight  # (B, d)

    def normalize_parameters(self) -> None:
        (weight,) = _sqrt_d_scale(self.weight)
        self.put_variable("params", "weight", weight)


class FlashSACEmbedder(nn.Module):
    """BatchNorm on the raw input (the agent's only observation normalisation), then a unit linear layer."""

    input_dim: int
    hidden_dim: int

    def setup(self) -> None:
        self.norm = UnitBatchNorm(self.input_dim)
        self.w = UnitLinear(self.input_dim, self.hidden_dim)

    def __call__(self, x: Array, training: bool) -> Array:
        """(B, in) -> (B, hidden)."""
        return self.w(self.norm(x, training))  # (B, hidden)

    def normalize_parameters(self) -> None:
        self.norm.normalize_parameters()
        self.w.normalize_parameters()


class FlashSACBlock(nn.Module):
    """Inverted residual block: y = x + ReLU(BN2(W2 ReLU(BN1(W1 x)))), W1: d -> 4d, W2: 4d -> d."""

    hidden_dim: int
    expansion: int = 4

    def setup(self) -> None:
        wide = self.hidden_dim * self.expansion
        self.w1 = UnitLinear(self.hidden_dim, wide)
        self.w2 = UnitLinear(wide, self.hidden_dim)
        self.norm1 = UnitBatchNorm(wide)
        self.norm2 = UnitBatchNorm(self.hidden_dim)

    def __call__(self, x: Array, training: bool) -> Array:
        """(B, d) -> (B, d)."""
        h = nn.relu(self.norm1(self.w1(x), training))  # (B, 4d)
        h = nn.relu(self.norm2(self.w2(h), training))  # (B, d)
        return x + h  # (B, d)

    def normalize_parameters(self) -> None:
        for m in (self.w1, self.w2, self.norm1, self.norm2):
            m.normalize_parameters()


class NormalTanhPolicy(nn.Module):
    """Paper-era FlashSAC actor head: unit-norm mean / log-std heads with zero-init biases, log std in [-10, 2].

    The action is tanh(u), u ~ N(mean, std); the env is rescaled to [-1, 1] (FLASHSAC.md section 22), so there is
    no action bias / range term.
    """

    hidden_dim: int
    action_dim: int
    log_std_min: float = -10.0
    log_std_max: float = 2.0

    def setup(self) -> None:
        self.mean_w = UnitLinear(self.hidden_dim, self.action_dim)
        self.mean_bias = self.param("mean_bias", nn.initializers.zeros_init(), (self.action_dim,))
        self.std_w = UnitLinear(self.hidden_dim, self.action_dim)
        self.std_bias = self.param("std_bias", nn.initializers.zeros_init(), (self.action_dim,))

    def get_mean_and_std(self, x: Array) -> tuple[Array, Array]:
        """(B, hidden) -> mean (B, A), std (B, A)."""
        mean = self.mean_w(x) + self.mean_bias  # (B, A)
        raw_log_std = self.std_w(x) + self.std_bias  # (B, A)
        log_std = self.log_std_min + (self.log_std_max - self.log_std_min) * 0.5 * (1.0 + jnp.tanh(raw_log_std))
        return mean, jnp.exp(log_std)  # (B, A), (B, A)

    def __call__(self, x: Array, key: Array) -> tuple[Array, dict[str, Array]]:
        """Reparametrised sample. (B, hidden) -> action (B, A), {"log_prob": (B,)}."""
        mean, std = self.get_mean_and_std(x)  # (B, A)
        eps = jax.random.normal(key, mean.shape, mean.dtype)  # (B, A)
        raw_action = mean + std * eps  # (B, A)
        # Normal log-density of raw_action, as torch.distributions.Normal.log_prob.
        log_prob = -0.5 * jnp.square(eps) - jnp.log(std) - 0.5 * math.log(2.0 * math.pi)  # (B, A)
        log_prob = log_prob - safe_tanh_log_det_jacobian(raw_action)  # (B, A)
        return jnp.tanh(raw_action), {"log_prob": jnp.sum(log_prob, axis=-1)}  # (B, A), (B,)

    def normalize_parameters(self) -> None:
        self.mean_w.normalize_parameters()
        self.std_w.normalize_parameters()


class FlashSACActor(nn.Module):
    """obs (B, O) -> BN -> UnitLinear(O -> h) -> num_blocks x Block(h <-> 4h) -> RMSNorm(h) -> NormalTanhPolicy."""

    num_blocks: int
    input_dim: int
    hidden_dim: int
    action_dim: int

    def setup(self) -> None:
        self.embedder = FlashSACEmbedder(self.input_dim, self.hidden_dim)
        self.encoder = [FlashSACBlock(self.hidden_dim) for _ in range(self.num_blocks)]
        self.post_norm = UnitRMSNorm(self.hidden_dim)
        self.predictor = NormalTanhPolicy(self.hidden_dim, self.action_dim)

    def _trunk(self, observations: Array, training: bool) -> Array:
        x = self.embedder(observations, training)  # (B, h)
        for block in self.encoder:
            x = block(x, training)  # (B, h)
        return self.post_norm(x)  # (B, h)

    def get_mean_and_std(self, observations: Array, training: bool) -> tuple[Array, Array]:
        """(B, O) -> mean (B, A), std (B, A) of the pre-tanh Gaussian (used for acting)."""
        return self.predictor.get_mean_and_std(self._trunk(observations, training))

    def __call__(self, observations: Array, training: bool, key: Array) -> tuple[Array, dict[str, Array]]:
        """(B, O) -> action (B, A) in [-1, 1], {"log_prob": (B,)}."""
        return self.predictor(self._trunk(observations, training), key)

    def normalize_parameters(self) -> None:
        self.embedder.normalize_parameters()
        for block in self.encoder:
            block.normalize_parameters()
        self.post_norm.normalize_parameters()
        self.predictor.normalize_parameters()


# ---------------------------------------------------------------------------------------------------------------
# Ensemble layers (critic): every array has a leading ensemble axis E; activations are (E, B, d)
# ---------------------------------------------------------------------------------------------------------------


class EnsembleUnitLinear(nn.Module):
    """E independent bias-free unit linear layers, weight (E, out, in), einsum('nbi,noi->nbo')."""

    num_ensemble: int
    input_dim: int
    output_dim: int

    def setup(self) -> None:
        self.weight = self.param("weight", _orthogonal, (self.num_ensemble, self.output_dim, self.input_dim))

    def __call__(self, x: Array) -> Array:
        """(E, B, in) -> (E, B, out)."""
        return jnp.einsum("nbi,noi->nbo", x, self.weight)  # (E, B, out)

    def normalize_parameters(self) -> None:
        self.put_variable("params", "weight", _unit_rows(self.weight))


class EnsembleUnitBatchNorm(nn.Module):
    """Per-member PyTorch-semantics BatchNorm over the batch axis; parameters and running stats are (E, d)."""

    num_ensemble: int
    input_dim: int

    def setup(self) -> None:
        shape = (self.num_ensemble, self.input_dim)
        self.weight = self.param("weight", nn.initializers.ones_init(), shape)
        self.bias = self.param("bias", nn.initializers.zeros_init(), shape)
        self.running_mean = self.variable("batch_stats", "running_mean", jnp.zeros, shape)
        self.running_var = self.variable("batch_stats", "running_var", jnp.ones, shape)

    def __call__(self, x: Array, training: bool) -> Array:
        """(E, B, d) -> (E, B, d)."""
        if training:
            mean = jnp.mean(x, axis=1, keepdims=True)  # (E, 1, d)
            var = jnp.mean(jnp.square(x - mean), axis=1, keepdims=True)  # (E, 1, d) biased
            if not self.is_initializing():
                n = x.shape[1]
                unbiased = var[:, 0] * (n / max(n - 1, 1))  # (E, d)
                self.running_mean.value = self.running_mean.value + BN_MOMENTUM * (mean[:, 0] - self.running_mean.value)
                self.running_var.value = self.running_var.value + BN_MOMENTUM * (unbiased - self.running_var.value)
        else:
            mean = self.running_mean.value[:, None]  # (E, 1, d)
            var = self.running_var.value[:, None]  # (E, 1, d)
        y = (x - mean) * jax.lax.rsqrt(var + BN_EPS)  # (E, B, d)
        return y * self.weight[:, None] + self.bias[:, None]  # (E, B, d)

    def normalize_parameters(self) -> None:
        weight, bias = _sqrt_d_scale(self.weight, self.bias)
        self.put_variable("params", "weight", weight)
        self.put_variable("params", "bias", bias)


class EnsembleUnitRMSNorm(nn.Module):
    """Per-member RMSNorm, weight (E, d)."""

    num_ensemble: int
    input_dim: int

    def setup(self) -> None:
        self.weight = self.param("weight", nn.initializers.ones_init(), (self.num_ensemble, self.input_dim))

    def __call__(self, x: Array) -> Array:
        """(E, B, d) -> (E, B, d)."""
        rms = jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + RMS_EPS)  # (E, B, 1)
        return x / rms * self.weight[:, None]  # (E, B, d)

    def normalize_parameters(self) -> None:
        (weight,) = _sqrt_d_scale(self.weight)
        self.put_variable("params", "weight", weight)


class EnsembleFlashSACEmbedder(nn.Module):
    """Ensemble twin of FlashSACEmbedder."""

    num_ensemble: int
    input_dim: int
    hidden_dim: int

    def setup(self) -> None:
        self.norm = EnsembleUnitBatchNorm(self.num_ensemble, self.input_dim)
        self.w = EnsembleUnitLinear(self.num_ensemble, self.input_dim, self.hidden_dim)

    def __call__(self, x: Array, training: bool) -> Array:
        """(E, B, in) -> (E, B, hidden)."""
        return self.w(self.norm(x, training))  # (E, B, hidden)

    def normalize_parameters(self) -> None:
        self.norm.normalize_parameters()
        self.w.normalize_parameters()


class EnsembleFlashSACBlock(nn.Module):
    """Ensemble twin of FlashSACBlock."""

    num_ensemble: int
    hidden_dim: int
    expansion: int = 4

    def setup(self) -> None:
        wide = self.hidden_dim * self.expansion
        self.w1 = EnsembleUnitLinear(self.num_ensemble, self.hidden_dim, wide)
        self.w2 = EnsembleUnitLinear(self.num_ensemble, wide, self.hidden_dim)
        self.norm1 = EnsembleUnitBatchNorm(self.num_ensemble, wide)
        self.norm2 = EnsembleUnitBatchNorm(self.num_ensemble, self.hidden_dim)

    def __call__(self, x: Array, training: bool) -> Array:
        """(E, B, d) -> (E, B, d)."""
        h = nn.relu(self.norm1(self.w1(x), training))  # (E, B, 4d)
        h = nn.relu(self.norm2(self.w2(h), training))  # (E, B, d)
        return x + h  # (E, B, d)

    def normalize_parameters(self) -> None:
        for m in (self.w1, self.w2, self.norm1, self.norm2):
            m.normalize_parameters()


class EnsembleCategoricalValue(nn.Module):
    """Categorical value head: logits = W x + bias over the atoms of ``CategoricalSupport(num_bins, min_v, max_v)``.

    The bias (E, num_bins) is zero-initialised and never projected.
    """

    num_ensemble: int
    hidden_dim: int
    num_bins: int
    min_v: float
    max_v: float

    def setup(self) -> None:
        self.w = EnsembleUnitLinear(self.num_ensemble, self.hidden_dim, self.num_bins)
        self.bias = self.param("bias", nn.initializers.zeros_init(), (self.num_ensemble, self.num_bins))

    @property
    def atoms(self) -> np.ndarray:
        """(num_bins,) float32 atoms, from the one place they are built."""
        return CategoricalSupport(self.num_bins, float(self.min_v), float(self.max_v)).atoms(np.float32)

    def __call__(self, x: Array) -> tuple[Array, dict[str, Array]]:
        """(E, B, hidden) -> Q = E_p[z] (E, B), {"log_prob": (E, B, num_bins)}."""
        logits = self.w(x) + self.bias[:, None]  # (E, B, K)
        log_prob = jax.nn.log_softmax(logits, axis=-1)  # (E, B, K)
        value = jnp.sum(jnp.exp(log_prob) * jnp.asarray(self.atoms), axis=-1)  # (E, B)
        return value, {"log_prob": log_prob}

    def normalize_parameters(self) -> None:
        self.w.normalize_parameters()


class FlashSACDoubleCritic(nn.Module):
    """Clipped double-Q (arXiv 1802.09477) as one ensemble of ``num_qs`` categorical critics on cat(obs, action)."""

    num_blocks: int
    input_dim: int
    hidden_dim: int
    num_bins: int
    min_v: float
    max_v: float
    num_qs: int = 2

    def setup(self) -> None:
        self.embedder = EnsembleFlashSACEmbedder(self.num_qs, self.input_dim, self.hidden_dim)
        self.encoder = [EnsembleFlashSACBlock(self.num_qs, self.hidden_dim) for _ in range(self.num_blocks)]
        self.post_norm = EnsembleUnitRMSNorm(self.num_qs, self.hidden_dim)
        self.predictor = EnsembleCategoricalValue(self.num_qs, self.hidden_dim, self.num_bins, self.min_v, self.max_v)

    def __call__(self, observations: Array, actions: Array, training: bool) -> tuple[Array, dict[str, Array]]:
        """obs (B, O), actions (B, A) -> Q (E, B), {"log_prob": (E, B, K)}."""
        x = jnp.concatenate([observations, actions], axis=-1)  # (B, O + A)
        x = jnp.broadcast_to(x[None], (self.num_qs, *x.shape))  # (E, B, O + A)
        x = self.embedder(x, training)  # (E, B, h)
        for block in self.encoder:
            x = block(x, training)  # (E, B, h)
        return self.predictor(self.post_norm(x))

    def normalize_parameters(self) -> None:
        self.embedder.normalize_parameters()
        for block in self.encoder:
            block.normalize_parameters()
        self.post_norm.normalize_parameters()
        self.predictor.normalize_parameters()


class FlashSACTemperature(nn.Module):
    """Learned SAC temperature alpha = exp(log_temp); log_temp (1,) starts at ln(initial_value) and is not projected."""

    initial_value: float = 0.01

    @nn.compact
    def __call__(self) -> Array:
        """() -> alpha (1,)."""
        log_temp = self.param("log_temp", nn.initializers.constant(math.log(self.initial_value)), (1,))
        return jnp.exp(log_temp)  # (1,)


def normalize_parameters(apply_fn: Callable[..., Any], params: Any, batch_stats: Any) -> Any:
    """Weight projection of FLASHSAC.md section 8.5 as a pure function: returns the projected ``params`` tree.

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
