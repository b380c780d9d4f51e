"""Device-resident counterparts of the loop's host pieces, for training on MJX environments.

With the environments stepped on the device (``env.env_type=mjx``), everything the gymnasium loop keeps on the host
per env step moves to the agent's device, so an interaction step needs no host round trip:

* ``DeviceRewardNormalizer``: ``agent_common.normalizer.RewardNormalizer``'s statistics (float64, the same update
  rule and divisor) as device tensors; its divisor is a device scalar the batch sampler divides by.
* ``DeviceZetaNoise``: ``agent_common.noise.ZetaNoise``'s truncated-zeta repetition, drawn from a torch generator;
  the "draw a new length?" decision is a ``torch.where``, not a host branch.
* ``DeviceReplay``: ``agent_common.buffer.ReplayBuffer``'s ring and n-step window on a ``TensorRowStorage``; the
  counters (size, ring index, window fill) stay host integers, since they depend only on how many steps were added.

Each one's ``state_dict`` holds plain numpy / Python values (generators as their byte states; the normaliser in
``RewardNormalizer``'s layout), so a checkpoint restores them exactly (bitwise on a CPU).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from agent_common.buffer import ROW_KEYS, flat_widths
from agent_common.noise import truncated_zeta_cdf
from agent_common.seeding import stream_seed
from agent_torch.replay import TensorRowStorage, ring_segments

__all__ = ["DeviceReplay", "DeviceRewardNormalizer", "DeviceZetaNoise", "n_step_rows", "stream_seed",
           "torch_generator"]


def torch_generator(device: torch.device, seed: int, stream: int) -> torch.Generator:
    """A torch generator on ``device`` seeded with ``agent_common.seeding.stream_seed(seed, stream)``."""
    generator = torch.Generator(device=device)
    generator.manual_seed(stream_seed(seed, stream))
    return generator


def _numpy(x: torch.Tensor) -> np.ndarray:
    return x.detach().cpu().numpy().copy()


class DeviceRewardNormalizer:
    """``RewardNormalizer`` on the device: rewards scaled by max(√(var_G + 1e-8), G_max / normalized_G_max).

    The same rule, in float64: G ← γ·(1 − done)·G + r with done = terminated OR truncated of the current step;
    G_max ← max(G_max, max|G|); the running moments of G with upstream's count quirk. ``scale()`` is the divisor
    as a float32 device scalar (1 when disabled), updated in place so a captured reader sees new values.

    Args:
        gamma: the config γ.
        normalized_G_max: target bound of the normalised return.
        enabled: if False the divisor stays 1 (the statistics are still tracked).
        num_envs: E.
        device: the agent's device.
    """

    def __init__(self, gamma: float, normalized_G_max: float, enabled: bool, num_envs: int,
                 device: torch.device) -> None:
        self.gamma = float(gamma)
        self.normalized_G_max = float(normalized_G_max)
        self.enabled = bool(enabled)
        self.device = device
        f64 = {"dtype": torch.float64, "device": device}
        self.G = torch.zeros(int(num_envs), **f64)  # (E,)
        self.G_max = torch.zeros((), **f64)
        self.mean = torch.zeros((), **f64)
        self.var = torch.ones((), **f64)
        self.count = torch.zeros((), **f64)
        self._scale = torch.ones((), dtype=torch.float32, device=device)

    def update(self, reward: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor) -> None:
        """One vector step's (E,) rewards and 0/1 flags (device tensors; nothing is read back)."""
        done = ((terminated > 0) | (truncated > 0)).to(torch.float64)  # (E,)
        self.G.mul_(self.gamma * (1.0 - done)).add_(reward.to(torch.float64))  # (E,)
        torch.maximum(self.G_max, self.G.abs().max(), out=self.G_max)
        batch_mean = self.G.mean()
        batch_var = self.G.var(correction=0)
        batch_count = float(self.G.shape[0])
        delta = batch_mean - self.mean
        total = self.count + batch_count
        m2 = self.var * (self.count + 1e-4) + batch_var * batch_count + delta**2 * self.count * batch_count / total
        self.mean.add_(delta * batch_count / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)
        if self.enabled:
            self._refresh()

    def _refresh(self) -> None:
        divisor = torch.maximum(torch.sqrt(self.var + 1e-8), self.G_max / self.normalized_G_max)
        self._scale.copy_(divisor.to(torch.float32))

    def scale(self) -> torch.Tensor:
        """The () float32 device divisor of sampled rewards (a tensor updated in place; 1 when disabled)."""
        return self._scale

    def state_dict(self) -> dict[str, Any]:
        """``RewardNormalizer.state_dict``'s layout: G (numpy), G_max, mean, var, count (floats)."""
        return {"G": _numpy(self.G), "G_max": float(self.G_max), "mean": float(self.mean), "var": float(self.var),
                "count": float(self.count)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        G = torch.as_tensor(np.asarray(state["G"], dtype=np.float64), device=self.device)
        self.G.copy_(G.expand_as(self.G))  # a fresh host normaliser's G is (1,)
        for name in ("G_max", "mean", "var", "count"):
            getattr(self, name).fill_(float(state[name]))
        if self.enabled:
            self._refresh()


class DeviceZetaNoise:
    """``ZetaNoise`` on the device: Gaussian noise held for k ~ TruncZeta(mu, k_max) steps, shared by all envs.

    Each ``sample()`` draws a fresh ε (E, A) and a fresh length from the generator, and replaces the held ones where
    the count is 0 or has reached the held length (a device ``where``), as ``ZetaNoise.sample`` does on the host.

    Args:
        num_envs: E.
        action_dim: A.
        mu: zeta exponent.
        k_max: maximum repetition length.
        generator: the torch generator on the agent's device (saved with ``state_dict``).
    """

    def __init__(self, num_envs: int, action_dim: int, mu: float, k_max: int, generator: torch.Generator) -> None:
        self.generator = generator
        device = generator.device
        self.shape = (int(num_envs), int(action_dim))
        self.cdf = torch.as_tensor(truncated_zeta_cdf(mu, k_max), device=device)  # (K,) float64
        self.eps = torch.randn(self.shape, generator=generator, device=device)  # (E, A)
        self.count = torch.zeros((), dtype=torch.int64, device=device)
        self.repeat = torch.ones((), dtype=torch.int64, device=device)

    def sample(self) -> torch.Tensor:
        """Advances one env step and returns the (E, A) float32 noise for it (the held tensor: do not modify)."""
        device = self.eps.device
        new_eps = torch.randn(self.shape, generator=self.generator, device=device)  # (E, A)
        u = torch.rand((1,), generator=self.generator, device=device, dtype=torch.float64)  # (1,)
        new_repeat = 1 + torch.searchsorted(self.cdf, u, right=True)[0]  # (): 1 + #{cdf <= u}
        replace = (self.count == 0) | (self.count >= self.repeat)  # ()
        self.eps = torch.where(replace, new_eps, self.eps)
        self.repeat = torch.where(replace, new_repeat, self.repeat)
        self.count = torch.where(replace, torch.zeros_like(self.count), self.count) + 1
        return self.eps

    def state_dict(self) -> dict[str, Any]:
        return {"eps": _numpy(self.eps), "count": int(self.count), "repeat": int(self.repeat),
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        device = self.eps.device
        self.eps = torch.as_tensor(np.asarray(state["eps"], dtype=np.float32), device=device).clone()
        self.count = torch.tensor(int(state["count"]), dtype=torch.int64, device=device)
        self.repeat = torch.tensor(int(state["repeat"]), dtype=torch.int64, device=device)
        self.generator.set_state(state["generator"])


def n_step_rows(window: torch.Tensor, gamma: float, observation_dim: int, action_dim: int) -> torch.Tensor:
    """The n-step rows of the oldest step of a full window, as ``agent_common.buffer.ReplayBuffer`` stores them.

    Args:
        window: (n, E, W) float32 rows (``ROW_KEYS`` columns), oldest first.
        gamma: γ.
        observation_dim: O.
        action_dim: A.

    Returns:
        (E, W): the oldest step's observation and action, reward Σ_{k<n} γᵏ r_{t+k} cut at the first done
        (terminated or truncated) of the window, and that step's terminated, next observation and truncated flags
        (the last step's when no step is done).
    """
    reward_col = observation_dim + action_dim
    terminated_col, truncated_col = reward_col + 1, window.shape[2] - 1
    out = window[0].clone()  # (E, W)
    alive = torch.ones(window.shape[1], dtype=torch.bool, device=window.device)  # (E,)
    for k in range(1, window.shape[0]):
        step = window[k]  # (E, W)
        done = (out[:, terminated_col] > 0) | (out[:, truncated_col] > 0)  # (E,) the previous step ended
        alive &= ~done
        weight = torch.tensor(np.float32(gamma**k), device=window.device)
        reward = out[:, reward_col] + weight * step[:, reward_col]  # (E,)
        tail = torch.where(alive[:, None], step[:, reward_col:], out[:, reward_col:])  # (E, W - O - A)
        tail[:, 0] = torch.where(alive, reward, out[:, reward_col])
        out[:, reward_col:] = tail
    return out


class DeviceReplay:
    """``ReplayBuffer``'s ring on a ``TensorRowStorage``, filled from device tensors, with its n-step window.

    ``add`` takes one vector step as device tensors (the MJX step's DLPack views). With n = 1 it writes its E rows
    into the ring (the one copy). With n > 1 the step's (E, W) rows go into a device window of the last n steps
    (a ring of n slots); once it holds n steps, each ``add`` writes the n-step rows of the oldest one
    (``n_step_rows``: ``ReplayBuffer``'s rule), so the n − 1 newest steps are in flight. The size, the ring index
    and the window's fill and slot are host integers. Non-finite values are not checked per step (that would read
    the device back): a device flag collects them and ``check_finite`` raises at the next read-back.

    Args:
        storage: the rows (``TensorRowStorage``; its generator is the sampler's).
        observation_dim: O.
        action_dim: A.
        min_length: sampling is allowed once this many rows are stored.
        n_step: n.
        gamma: γ of the n-step reward.
    """

    def __init__(self, storage: TensorRowStorage, observation_dim: int, action_dim: int, min_length: int,
                 n_step: int = 1, gamma: float = 0.99) -> None:
        if int(n_step) < 1:
            raise ValueError(f"n_step must be >= 1, got {n_step}")
        self.storage = storage
        self.observation_dim, self.action_dim = int(observation_dim), int(action_dim)
        widths = [*flat_widths(int(observation_dim), int(action_dim)), 1]  # ROW_KEYS columns
        self.bounds = np.cumsum([0, *widths]).tolist()
        self.max_length = storage.capacity
        self.min_length = int(min_length)
        self.n_step, self.gamma = int(n_step), float(gamma)
        self.size = 0
        self.index = 0
        self.window: torch.Tensor | None = None  # (n, E, W) ring of the last steps, built on the first add
        self.window_fill = 0  # steps in the window (<= n)
        self.window_slot = 0  # the slot the next step goes to
        self.nonfinite = torch.zeros((), dtype=torch.bool, device=storage.device)

    def __len__(self) -> int:
        return self.size

    def can_sample(self) -> bool:
        return self.size >= self.min_length

    def add(self, observation: torch.Tensor, action: torch.Tensor, reward: torch.Tensor, terminated: torch.Tensor,
            truncated: torch.Tensor, next_observation: torch.Tensor) -> None:
        """One vector step: (E, O), (E, A), (E,), (E,), (E,), (E, O) device tensors (only read)."""
        transition = {"observation": observation, "action": action, "reward": reward, "terminated": terminated,
                      "next_observation": next_observation, "truncated": truncated}
        num_rows = int(reward.shape[0])
        if self.n_step > 1:
            self._add_to_window(transition, num_rows)
            return
        rows = self.storage.rows
        segments = ring_segments(self.index, num_rows, self.max_length)  # (ring position, first env, count)
        for column, key in enumerate(ROW_KEYS):
            value = transition[key].reshape(num_rows, -1)  # (E, width)
            lo, hi = self.bounds[column], self.bounds[column + 1]
            for position, first, count in segments:
                rows[position : position + count, lo:hi] = value[first : first + count]
        self._advance(segments, num_rows)

    def _advance(self, segments: list[tuple[int, int, int]], num_rows: int) -> None:
        rows = self.storage.rows
        for position, _, count in segments:
            self.nonfinite |= ~torch.isfinite(rows[position : position + count]).all()
        self.index = int((self.index + num_rows) % self.max_length)
        self.size = min(self.size + num_rows, self.max_length)
        self.storage.size = self.size

    def _empty_window(self, num_rows: int) -> torch.Tensor:
        return torch.zeros((self.n_step, num_rows, self.storage.width), dtype=torch.float32,
                           device=self.storage.device)  # (n, E, W)

    def _add_to_window(self, transition: dict[str, torch.Tensor], num_rows: int) -> None:
        if self.window is None or self.window.shape[1] != num_rows:
            self.window = self._empty_window(num_rows)
            self.window_fill = self.window_slot = 0
        slot = self.window[self.window_slot]  # (E, W) view
        for column, key in enumerate(ROW_KEYS):
            slot[:, self.bounds[column] : self.bounds[column + 1]] = transition[key].reshape(num_rows, -1)
        self.window_slot = (self.window_slot + 1) % self.n_step
        self.window_fill = min(self.window_fill + 1, self.n_step)
        if self.window_fill < self.n_step:
            self.nonfinite |= ~torch.isfinite(slot).all()  # checked here: these rows are not stored yet
            return
        oldest = self.window_slot  # a full ring's next slot holds its oldest step
        order = [(oldest + k) % self.n_step for k in range(self.n_step)]
        ordered = self.window if oldest == 0 else self.window[order]  # (n, E, W)
        self.nonfinite |= ~torch.isfinite(ordered[-1]).all()
        out = n_step_rows(ordered, self.gamma, self.observation_dim, self.action_dim)  # (E, W)
        segments = ring_segments(self.index, num_rows, self.max_length)
        for position, first, count in segments:
            self.storage.rows[position : position + count] = out[first : first + count]
        self._advance(segments, num_rows)

    def window_steps(self) -> np.ndarray | None:
        """The in-flight window's steps, oldest first, as (fill, E, W) float32 numpy (one device read); None with
        n = 1 or before the first add."""
        if self.window is None:
            return None
        fill = min(self.window_fill, self.n_step - 1)  # a full window's oldest step is already stored
        first = (self.window_slot - fill) % self.n_step
        order = [(first + k) % self.n_step for k in range(fill)]
        return self.window[order].cpu().numpy().copy()

    def load_window(self, steps: np.ndarray | None) -> None:
        """Puts ``window_steps`` output back; None (or a window of another n) restarts the window empty."""
        self.window, self.window_fill, self.window_slot = None, 0, 0
        if steps is None or self.n_step == 1:
            return
        steps = np.asarray(steps, dtype=np.float32)
        if steps.ndim != 3 or steps.shape[0] > self.n_step - 1 or steps.shape[2] != self.storage.width:
            raise ValueError(f"n-step window must be (<= {self.n_step - 1}, E, {self.storage.width}), "
                             f"got {steps.shape}")
        self.window = self._empty_window(steps.shape[1])
        self.window[: steps.shape[0]] = torch.from_numpy(steps).to(self.storage.device)
        self.window_fill = self.window_slot = steps.shape[0]

    def sample(self, batch_size: int, reward_scale: torch.Tensor) -> torch.Tensor:
        """(B, 2O + A + 2) device batch (``UPDATE_KEYS`` columns), rewards divided by ``reward_scale``."""
        return self.storage.sample(batch_size, reward_scale)

    def check_finite(self) -> None:
        """Raises ``FloatingPointError`` if a non-finite value was added (one device read)."""
        if bool(self.nonfinite):
            raise FloatingPointError("non-finite values were added to the replay buffer (check the environment's "
                                     "observations and rewards)")

    def state_dict(self) -> dict[str, Any]:
        """Size, ring index, n and the sampler generator's state (the rows: ``rows``; the window:
        ``window_steps``)."""
        return {"size": self.size, "index": self.index, "n_step": self.n_step, "sampler": self.storage.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict`` output; the rows follow with ``load_rows``."""
        self.size, self.index = int(state["size"]), int(state["index"])
        self.storage.load_state_dict(state["sampler"])

    def rows(self) -> np.ndarray:
        """The stored (size, 2O + A + 3) float32 rows, ``ROW_KEYS`` columns (one device read)."""
        return self.storage.read(self.size)

    def load_rows(self, rows: np.ndarray | None) -> None:
        """Puts saved rows back (after ``load_state_dict``); None empties the replay (a checkpoint without rows)."""
        if rows is None:
            self.storage.load(np.zeros((0, self.storage.width), np.float32), 0)
            self.size = self.index = 0
            self.load_window(None)
        else:
            rows = np.asarray(rows, dtype=np.float32)
            if rows.shape[0] != self.size:
                raise ValueError(f"replay rows: the loop state records {self.size} rows, the buffer holds "
                                 f"{rows.shape[0]}")
            self.storage.load(rows, self.index)
        self.storage.size = self.size
        self.nonfinite.zero_()
