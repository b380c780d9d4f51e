"""FlashSAC networks (docs/flashsac.md): BN embedder, inverted residual blocks, post-RMSNorm, unit-norm projection."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "BN_EPS",
    "BN_MOMENTUM",
    "EnsembleUnitBatchNorm",
    "EnsembleUnitLinear",
    "EnsembleUnitRMSNorm",
    "FlashSACActor",
    "FlashSACDoubleCritic",
    "FlashSACTemperature",
    "UnitBatchNorm",
    "UnitLinear",
    "UnitRMSNorm",
    "ACTOR_HEADS",
    "HeadLinear",
    "normalize_parameters",
]

BN_MOMENTUM = 0.01  # running <- 0.99 running + 0.01 batch (flax decay 0.99)
BN_EPS = 1e-5
RMS_EPS = 1e-6
LOG_STD_MIN, LOG_STD_MAX = -10.0, 2.0  # paper-era log-std range
ACTOR_HEADS: dict[str, tuple[float, float]] = {"paper": (-10.0, 2.0), "upstream": (-5.0, 0.0)}
"""``agent.actor_head`` -> its (log σ min, log σ max) (docs/flashsac.md, "Actor head")."""


def _project_rows(weight: torch.Tensor) -> None:
    """In place: every output unit's input weights (last axis) to unit L2 norm, w / max(||w||, 1e-8)."""
    norm = weight.norm(dim=-1, keepdim=True).clamp_min(1e-8)  # (..., out, 1)
    weight.div_(norm)


def _project_joint(*params: torch.Tensor) -> None:
    """In place: rescale params jointly (per leading ensemble index) so that sum of squares = d (last dim)."""
    d = params[0].shape[-1]
    sq = sum((p.float() ** 2).sum(dim=-1, keepdim=True) for p in params)  # (..., 1)
    factor = math.sqrt(d) * torch.rsqrt(sq + 1e-8)  # (..., 1)
    for p in params:
        p.mul_(factor.to(p.dtype))


class UnitLinear(nn.Module):
    """Bias-free linear layer whose rows are projected to unit norm after every optimizer step.

    Args:
        in_features: input width.
        out_features: output width.
    """

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))  # (out, in)
        nn.init.orthogonal_(self.weight, gain=1.0)
        with torch.no_grad():
            _project_rows(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)  # (B, out)

    projection = "rows"  # normalize_parameters: every output unit's input weights to unit norm

    def projected_parameters(self) -> tuple[torch.Tensor, ...]:
        return (self.weight,)

    @torch.no_grad()
    def normalize_parameters(self) -> None:
        _project_rows(self.weight)


class UnitBatchNorm(nn.Module):
    """BatchNorm (momentum 0.01, eps 1e-5) whose (gamma, beta) are projected jointly to norm sqrt(d).

    Args:
        dim: feature width d.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))  # (d,)
        self.bias = nn.Parameter(torch.zeros(dim))  # (d,)
        self.register_buffer("running_mean", torch.zeros(dim))  # (d,)
        self.register_buffer("running_var", torch.ones(dim))  # (d,)

    def forward(self, x: torch.Tensor, training: bool) -> torch.Tensor:
        # normalises with the biased batch variance; the running var lerps the unbiased one (torch semantics)
        return F.batch_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias, training, BN_MOMENTUM, BN_EPS
        )  # (B, d)

    projection = "joint"  # normalize_parameters: (gamma, beta) jointly to norm sqrt(d)

    def projected_parameters(self) -> tuple[torch.Tensor, ...]:
        return (self.weight, self.bias)

    @torch.no_grad()
    def normalize_parameters(self) -> None:
        _project_joint(self.weight, self.bias)


class UnitRMSNorm(nn.Module):
    """RMSNorm y = x / sqrt(mean(x^2) + 1e-6) * gamma, gamma projected to norm sqrt(d).

    Args:
        dim: feature width d.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))  # (d,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()  # (..., d)
        y = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + RMS_EPS)  # (..., d)
        return y * self.weight  # (..., d)

    projection = "joint"  # normalize_parameters: gamma to norm sqrt(d)

    def projected_parameters(self) -> tuple[torch.Tensor, ...]:
        return (self.weight,)

    @torch.no_grad()
    def normalize_parameters(self) -> None:
        _project_joint(self.weight)


class EnsembleUnitLinear(nn.Module):
    """N independent bias-free unit-row linear layers applied as one einsum.

    Args:
        num_members: N.
        in_features: input width.
        out_features: output width.
    """

    def __init__(self, num_members: int, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_members, out_features, in_features))  # (N, out, in)
        with torch.no_grad():
            for member in range(num_members):
                nn.init.orthogonal_(self.weight[member], gain=1.0)
            _project_rows(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("nbi,noi->nbo", x, self.weight)  # (N, B, out)

    projection = "rows"  # normalize_parameters: every output unit's input weights to unit norm

    def projected_parameters(self) -> tuple[torch.Tensor, ...]:
        return (self.weight,)

    @torch.no_grad()
    def normalize_parameters(self) -> None:
        _project_rows(self.weight)


class EnsembleUnitBatchNorm(nn.Module):
    """Per-member BatchNorm over the batch axis of (N, B, d) activations; (gamma, beta) projected per member.

    Implemented as one ``F.batch_norm`` over (B, N*d) so the statistics, momentum and unbiased running-variance
    semantics are exactly torch's.

    Args:
        num_members: N.
        dim: d.
    """

    def __init__(self, num_members: int, dim: int) -> None:
        super().__init__()
        self.num_members = num_members
        self.dim = dim
        self.weight = nn.Parameter(torch.ones(num_members, dim))  # (N, d)
        self.bias = nn.Parameter(torch.zeros(num_members, dim))  # (N, d)
        self.register_buffer("running_mean", torch.zeros(num_members, dim))  # (N, d)
        self.register_buffer("running_var", torch.ones(num_members, dim))  # (N, d)

    def forward(self, x: torch.Tensor, training: bool) -> torch.Tensor:
        n, b, d = x.shape
        flat = x.permute(1, 0, 2).reshape(b, n * d)  # (B, N*d)
        y = F.batch_norm(
            flat,
            self.running_mean.view(-1),
            self.running_var.view(-1),
            self.weight.view(-1),
            self.bias.view(-1),
            training,
            BN_MOMENTUM,
            BN_EPS,
        )  # (B, N*d)
        return y.view(b, n, d).permute(1, 0, 2)  # (N, B, d)

    projection = "joint"  # normalize_parameters: (gamma, beta) jointly to norm sqrt(d)

    def projected_parameters(self) -> tuple[torch.Tensor, ...]:
        return (self.weight, self.bias)

    @torch.no_grad()
    def normalize_parameters(self) -> None:
        _project_joint(self.weight, self.bias)


class EnsembleUnitRMSNorm(nn.Module):
    """Per-member RMSNorm of (N, B, d) activations; gamma (N, d) projected to norm sqrt(d) per member."""

    def __init__(self, num_members: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_members, dim))  # (N, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()  # (N, B, d)
        y = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + RMS_EPS)  # (N, B, d)
        return y * self.weight[:, None, :]  # (N, B, d)

    projection = "joint"  # normalize_parameters: gamma to norm sqrt(d)

    def projected_parameters(self) -> tuple[torch.Tensor, ...]:
        return (self.weight,)

    @torch.no_grad()
    def normalize_parameters(self) -> None:
        _project_joint(self.weight)


class ResidualBlock(nn.Module):
    """Inverted residual block y = x + ReLU(BN2(W2 ReLU(BN1(W1 x)))), expansion 4."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc1 = UnitLinear(dim, 4 * dim)
        self.bn1 = UnitBatchNorm(4 * dim)
        self.fc2 = UnitLinear(4 * dim, dim)
        self.bn2 = UnitBatchNorm(dim)

    def forward(self, x: torch.Tensor, training: bool) -> torch.Tensor:
        h = F.relu(self.bn1(self.fc1(x), training))  # (B, 4d)
        return x + F.relu(self.bn2(self.fc2(h), training))  # (B, d)


class EnsembleResidualBlock(nn.Module):
    """Ensemble twin of ``ResidualBlock`` on (N, B, d) activations."""

    def __init__(self, num_members: int, dim: int) -> None:
        super().__init__()
        self.fc1 = EnsembleUnitLinear(num_members, dim, 4 * dim)
        self.bn1 = EnsembleUnitBatchNorm(num_members, 4 * dim)
        self.fc2 = EnsembleUnitLinear(num_members, 4 * dim, dim)
        self.bn2 = EnsembleUnitBatchNorm(num_members, dim)

    def forward(self, x: torch.Tensor, training: bool) -> torch.Tensor:
        h = F.relu(self.bn1(self.fc1(x), training))  # (N, B, 4d)
        return x + F.relu(self.bn2(self.fc2(h), training))  # (N, B, d)


def _safe_tanh_log_det(u: torch.Tensor) -> torch.Tensor:
    """log(1 - tanh(u)^2) = 2 (ln 2 - u - softplus(-2u)), stable for large |u|."""
    return 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))  # same shape as u


class HeadLinear(nn.Module):
    """Bias-free linear head that is never projected (upstream's current actor heads).

    Args:
        in_features: input width.
        out_features: output width.
        init_std: weight ~ N(0, init_std^2); 0 gives a zero weight.
    """

    def __init__(self, in_features: int, out_features: int, init_std: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(out_features, in_features))  # (out, in)
        if init_std > 0:
            nn.init.normal_(self.weight, mean=0.0, std=init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)  # (B, out)


def action_bounds(action_dim: int, action_low: np.ndarray | None,
                  action_high: np.ndarray | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(bias, range) = ((high + low) / 2, (high - low) / 2) as (A,) float32, (0, 1) when no bounds are given.

    Raises:
        ValueError: bounds of another shape, not finite, or high < low.
    """
    if action_low is None or action_high is None:
        return torch.zeros(action_dim), torch.ones(action_dim)
    low = torch.as_tensor(np.asarray(action_low, dtype=np.float32)).reshape(-1)
    high = torch.as_tensor(np.asarray(action_high, dtype=np.float32)).reshape(-1)
    if low.shape != (action_dim,) or high.shape != (action_dim,):
        raise ValueError(f"action bounds: expected shape ({action_dim},), got low {tuple(low.shape)}, "
                         f"high {tuple(high.shape)}")
    if not (torch.isfinite(low).all() and torch.isfinite(high).all()):
        raise ValueError(f"action bounds must be finite for a tanh-squashed policy, got low {low.tolist()}, "
                         f"high {high.tolist()}")
    if (high < low).any():
        raise ValueError(f"action bounds: high < low (low {low.tolist()}, high {high.tolist()})")
    return 0.5 * (high + low), 0.5 * (high - low)


class FlashSACActor(nn.Module):
    """Tanh-Gaussian actor (docs/flashsac.md), with the paper-era or upstream's current head.

    obs (B, O) -> BN -> UnitLinear(O -> d) -> blocks -> RMSNorm(d) -> mean / log-std heads + biases.

    ``head="paper"``: heads are ``UnitLinear`` (orthogonal, projected after every step), log σ in [-10, 2], the action
    is tanh(u). ``head="upstream"``: heads are ``HeadLinear`` (mean weight ~ N(0, 1e-3²), log-std weight 0, never
    projected), log σ in [-5, 0], the action is bias + range·tanh(u) with the env's bounds and the log-prob subtracts
    Σ ln max(|range|, 1e-6). Parameter names are the same for both heads.

    Args:
        observation_dim: O.
        action_dim: A.
        num_blocks: residual blocks.
        hidden_dim: d.
        head: "paper" or "upstream".
        action_low: (A,) lower action bounds for the upstream head (None: [-1, 1]).
        action_high: (A,) upper action bounds.
    """

    def __init__(self, observation_dim: int, action_dim: int, num_blocks: int, hidden_dim: int, head: str = "paper",
                 action_low: np.ndarray | None = None, action_high: np.ndarray | None = None) -> None:
        super().__init__()
        if head not in ACTOR_HEADS:
            raise ValueError(f"actor head: expected one of {sorted(ACTOR_HEADS)}, got {head!r}")
        self.head = head
        self.log_std_min, self.log_std_max = ACTOR_HEADS[head]
        self.input_bn = UnitBatchNorm(observation_dim)
        self.embed = UnitLinear(observation_dim, hidden_dim)
        self.blocks = nn.ModuleList([ResidualBlock(hidden_dim) for _ in range(num_blocks)])
        self.final_norm = UnitRMSNorm(hidden_dim)
        if head == "paper":
            self.mean_head: nn.Module = UnitLinear(hidden_dim, action_dim)
        else:
            self.mean_head = HeadLinear(hidden_dim, action_dim, init_std=1e-3)
        self.mean_bias = nn.Parameter(torch.zeros(action_dim))  # (A,) not projected
        if head == "paper":
            self.log_std_head: nn.Module = UnitLinear(hidden_dim, action_dim)
        else:
            self.log_std_head = HeadLinear(hidden_dim, action_dim, init_std=0.0)
        self.log_std_bias = nn.Parameter(torch.zeros(action_dim))  # (A,) not projected
        bias, scale = action_bounds(action_dim, action_low, action_high) if head == "upstream" else (None, None)
        self.scaled = head == "upstream"
        if self.scaled:
            assert bias is not None and scale is not None
            self.register_buffer("action_bias", bias, persistent=False)  # (A,)
            self.register_buffer("action_range", scale, persistent=False)  # (A,)
            self.register_buffer("log_action_range", torch.log(scale.abs().clamp_min(1e-6)).sum(),
                                 persistent=False)  # ()

    def scale_action(self, squashed: torch.Tensor) -> torch.Tensor:
        """tanh(u) (B, A) -> the env action: bias + range·tanh(u) with the upstream head, tanh(u) with the paper's."""
        if not self.scaled:
            return squashed
        return self.action_bias + self.action_range * squashed  # (B, A)

    def trunk(self, obs: torch.Tensor, training: bool) -> torch.Tensor:
        x = self.embed(self.input_bn(obs, training))  # (B, d)
        for block in self.blocks:
            x = block(x, training)  # (B, d)
        return self.final_norm(x)  # (B, d)

    def get_mean_and_std(self, obs: torch.Tensor, training: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Pre-tanh Gaussian mean and std.

        Args:
            obs: (B, O) float32.
            training: BN on batch statistics (True) or running statistics (False).

        Returns:
            mean (B, A) and std (B, A), std = exp(log_std) in fp32 with log_std in the head's range.
        """
        h = self.trunk(obs, training)  # (B, d)
        mean = F.linear(h, self.mean_head.weight, self.mean_bias)  # (B, A)
        raw = F.linear(h, self.log_std_head.weight, self.log_std_bias)  # (B, A)
        lo, hi = self.log_std_min, self.log_std_max
        log_std = lo + (hi - lo) * 0.5 * (1.0 + torch.tanh(raw.float()))  # (B, A)
        return mean, torch.exp(log_std)  # (B, A), (B, A)

    def forward(self, obs: torch.Tensor, training: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparametrised sample.

        Args:
            obs: (B, O).
            training: BN mode.

        Returns:
            action (B, A) = tanh(u) (upstream head: bias + range·tanh(u)) and log_prob (B,) =
            sum_i [log N(u_i; mu_i, sigma_i) - log(1 - tanh(u_i)^2)] (upstream head: minus sum_i ln range_i).
        """
        mean, std = self.get_mean_and_std(obs, training)  # (B, A), (B, A)
        mean = mean.float()  # (B, A)
        eps = torch.randn_like(mean)  # (B, A)
        u = mean + std * eps  # (B, A)
        normal_log_prob = -0.5 * eps.pow(2) - torch.log(std) - 0.5 * math.log(2.0 * math.pi)  # (B, A)
        log_prob = (normal_log_prob - _safe_tanh_log_det(u)).sum(dim=-1)  # (B,)
        if self.scaled:
            log_prob = log_prob - self.log_action_range  # (B,)
        return self.scale_action(torch.tanh(u)), log_prob  # (B, A), (B,)


class FlashSACDoubleCritic(nn.Module):
    """Two critic members fused as an ensemble with a categorical head over a fixed support (docs/flashsac.md).

    Args:
        input_dim: O_c + A.
        num_blocks: residual blocks per member.
        hidden_dim: d.
        atoms: (K,) float32 support from ``shared_spec.CategoricalSupport.atoms()``.
        num_members: N = 2.
    """

    def __init__(
        self, input_dim: int, num_blocks: int, hidden_dim: int, atoms: np.ndarray, num_members: int = 2
    ) -> None:
        super().__init__()
        num_bins = int(atoms.shape[0])
        self.num_members = num_members
        self.input_bn = EnsembleUnitBatchNorm(num_members, input_dim)
        self.embed = EnsembleUnitLinear(num_members, input_dim, hidden_dim)
        self.blocks = nn.ModuleList([EnsembleResidualBlock(num_members, hidden_dim) for _ in range(num_blocks)])
        self.final_norm = EnsembleUnitRMSNorm(num_members, hidden_dim)
        self.head = EnsembleUnitLinear(num_members, hidden_dim, num_bins)
        self.head_bias = nn.Parameter(torch.zeros(num_members, num_bins))  # (N, K) not projected
        self.register_buffer("atoms", torch.as_tensor(np.asarray(atoms, dtype=np.float32)))  # (K,)

    def forward(self, obs: torch.Tensor, action: torch.Tensor, training: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Q values and log-distributions of both members.

        Args:
            obs: (B, O_c).
            action: (B, A).
            training: BN mode.

        Returns:
            q (N, B) = sum_k softmax_k z_k in fp32, and log_probs (N, B, K) fp32.
        """
        x = torch.cat([obs, action], dim=-1)  # (B, O_c + A)
        x = x.unsqueeze(0).expand(self.num_members, *x.shape)  # (N, B, O_c + A)
        x = self.embed(self.input_bn(x, training))  # (N, B, d)
        for block in self.blocks:
            x = block(x, training)  # (N, B, d)
        x = self.final_norm(x)  # (N, B, d)
        logits = self.head(x).float() + self.head_bias[:, None, :]  # (N, B, K)
        log_probs = F.log_softmax(logits, dim=-1)  # (N, B, K)
        q = (log_probs.exp() * self.atoms).sum(dim=-1)  # (N, B)
        return q, log_probs


class FlashSACTemperature(nn.Module):
    """Learned SAC temperature alpha = exp(log_temp), log_temp (1,) initialised to ln(initial_value)."""

    def __init__(self, initial_value: float) -> None:
        super().__init__()
        self.log_temp = nn.Parameter(torch.full((1,), math.log(initial_value)))  # (1,)

    def forward(self) -> torch.Tensor:
        return self.log_temp.exp()  # (1,)


def normalize_parameters(module: nn.Module) -> None:
    """Projects every submodule that defines ``normalize_parameters`` (never the heads' biases or log alpha).

    The layers that declare their ``projection`` (``"rows"``: unit-norm rows, ``"joint"``: parameters jointly to
    norm sqrt(d)) are projected together, in batched ``torch._foreach_*`` ops where the operands of one op have equal
    shapes (on CUDA one multi-tensor kernel each), and per tensor where an op broadcasts (the row norms and joint
    sums of squares, and the final in-place rescale). Every element goes through the same operations in the same
    order as the per-layer ``normalize_parameters``, so the result is bitwise the same; other submodules with a
    ``normalize_parameters`` method are projected by it.
    """
    rows: list[torch.Tensor] = []
    joint: list[tuple[torch.Tensor, ...]] = []
    with torch.no_grad():
        for sub in module.modules():
            if sub is module or not hasattr(sub, "normalize_parameters"):
                continue
            kind = getattr(sub, "projection", None)
            if kind == "rows":
                rows.extend(sub.projected_parameters())
            elif kind == "joint":
                joint.append(tuple(sub.projected_parameters()))
            else:
                sub.normalize_parameters()
        _project_rows_batched(rows)
        _project_joint_batched(joint)


def _project_rows_batched(weights: list[torch.Tensor]) -> None:
    """``_project_rows`` of every weight: per-row norms, one clamp for all, then per-weight in-place division."""
    if not weights:
        return
    norms = [w.norm(dim=-1, keepdim=True) for w in weights]  # (..., out, 1) each
    torch._foreach_clamp_min_(norms, 1e-8)
    for w, norm in zip(weights, norms, strict=True):
        w.div_(norm)


def _project_joint_batched(groups: list[tuple[torch.Tensor, ...]]) -> None:
    """``_project_joint`` of every group (a BN's (gamma, beta) or an RMSNorm's gamma): squares in one op, per-tensor
    sums over the last axis, the groups' sums added pairwise, then eps, rsqrt and sqrt(d) in one op each."""
    if not groups:
        return
    if any(len(g) not in (1, 2) for g in groups):
        raise ValueError(f"joint projection groups hold 1 or 2 tensors, got sizes {[len(g) for g in groups]}")
    flat = [p.float() for g in groups for p in g]
    squares = torch._foreach_mul(flat, flat)  # p ** 2 is computed as p * p
    sums = [sq.sum(dim=-1, keepdim=True) for sq in squares]  # (..., 1) each
    totals: list[torch.Tensor] = []
    firsts: list[torch.Tensor] = []
    seconds: list[torch.Tensor] = []
    pair_slots: list[int] = []
    i = 0
    for g in groups:
        if len(g) == 2:
            pair_slots.append(len(totals))
            firsts.append(sums[i])
            seconds.append(sums[i + 1])
        totals.append(sums[i])
        i += len(g)
    if firsts:
        for slot, total in zip(pair_slots, torch._foreach_add(firsts, seconds), strict=True):
            totals[slot] = total
    torch._foreach_add_(totals, 1e-8)
    torch._foreach_rsqrt_(totals)
    torch._foreach_mul_(totals, [math.sqrt(g[0].shape[-1]) for g in groups])  # factor = sqrt(d) rsqrt(sq + eps)
    for g, factor in zip(groups, totals, strict=True):
        for p in g:
            p.mul_(factor.to(p.dtype))
