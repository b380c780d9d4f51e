"""What a checkpoint's tensors state about its networks: the architecture keys of ``agent.*``, the observation and
action widths, the critic's support and the actor head, read from the parameter shapes (numpy only).

Each framework reads its own agent files into ``{name: array}`` (``agent_torch.policy.read_architecture``,
``agent_jax.policy.read_architecture``; upstream FlashSAC's through ``agent_interop.upstream``), and
``infer_architecture`` turns them into an ``Architecture``. The converter and ``load_policy`` build their agents from
it, so a user never types what the file already states; a key the user (or a stored config) gives is checked against
it with one line naming the key, the value given and the value in the file.

Names are this project's torch state-dict names (``blocks.0.fc1.weight``); the JAX agent's flax paths joined with
dots (``blocks_0.fc1.weight``) are read the same way. Shapes: actor ``embed.weight`` (H, O), ``blocks.i.fc1.weight``
(4H, H), ``mean_bias`` (A,); critic (two members stacked first) ``embed.weight`` (N, Hc, O + A), ``head.weight``
(N, K, Hc); the torch critic's ``atoms`` buffer (K,) is the support (the JAX files do not hold it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from agent_common.keys import ConfigError
from agent_common.runs.files import CheckpointError
from agent_common.runs.upstream_layout import IMPORTED_FILE

__all__ = ["ARCHITECTURE_KEYS", "Architecture", "ArchitectureError", "detect_actor_head", "infer_architecture",
           "read_conversion_record"]

ARCHITECTURE_KEYS = ("agent.actor_num_blocks", "agent.actor_hidden_dim", "agent.critic_num_blocks",
                     "agent.critic_hidden_dim", "agent.critic_num_bins")
"""The ``agent.*`` keys a checkpoint's shapes state exactly."""
SUPPORT_KEYS = ("agent.normalized_G_max", "agent.critic_min_v", "agent.critic_max_v")
"""The keys that give the critic's support [critic_min_v, critic_max_v] (a null bound is -/+ normalized_G_max)."""
_BLOCK = re.compile(r"blocks[._](\d+)\.fc1\.weight")


class ArchitectureError(ConfigError):
    """A checkpoint's networks are not a FlashSAC agent's, or a configured key does not fit them; the message names
    the file, the entry or key, and both values."""


def detect_actor_head(mean_weight: Any, log_std_weight: Any) -> tuple[str, str]:
    """("paper" | "upstream", why) from the actor's mean and log-std head weights (A, H): the paper-era heads are
    projected to unit rows after every step (and start orthogonal: every row norm 1), upstream HEAD's are never
    projected (initial norms ~1e-3·√H, the log-std head starts at 0)."""
    norms = [np.linalg.norm(np.asarray(w, dtype=np.float64), axis=-1) for w in (mean_weight, log_std_weight)]
    row_norms = np.concatenate(norms)
    if np.all(np.abs(row_norms - 1.0) < 1e-4):
        return "paper", f"every head row has unit norm ({row_norms.min():.6f}..{row_norms.max():.6f}): projected heads"
    return "upstream", (f"head row norms {row_norms.min():.3g}..{row_norms.max():.3g} are not all 1: unprojected "
                        "heads (upstream HEAD)")


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What a checkpoint's shapes state.

    Attributes:
        observation_dim: O (the actor's input width).
        action_dim: A.
        keys: ``ARCHITECTURE_KEYS`` -> the value the files hold.
        evidence: each key (and ``"support"``) -> the entry that states it, e.g. ``critic.pt embed.weight has shape
            (2, 16, 23)``.
        support: (first atom, last atom) of the critic, or None where the files do not hold the support (JAX).
        actor_head: the detected head, ``"paper"`` or ``"upstream"`` (``detect_actor_head``).
        actor_head_reason: why.
        where: the folder the files are in (for messages).
    """

    observation_dim: int
    action_dim: int
    keys: dict[str, int]
    evidence: dict[str, str]
    support: tuple[float, float] | None
    actor_head: str
    actor_head_reason: str
    where: str

    def overrides(self, given: Mapping[str, Any]) -> list[str]:
        """``key=value`` overrides for what the files state and ``given`` (parsed overrides) does not set: every
        ``ARCHITECTURE_KEYS`` entry, the support (as ``agent.normalized_G_max=g`` for a symmetric [-g, g], upstream's
        convention, else both bounds) unless a ``SUPPORT_KEYS`` entry is given, and ``agent.actor_head`` (the
        detected head) unless given."""
        out = [f"{key}={value}" for key, value in self.keys.items() if key not in given]
        if self.support is not None and not any(key in given for key in SUPPORT_KEYS):
            low, high = self.support
            if low == -high:
                out.append(f"agent.normalized_G_max={high!r}")
            else:
                out += [f"agent.critic_min_v={low!r}", f"agent.critic_max_v={high!r}"]
        if "agent.actor_head" not in given:
            out.append(f"agent.actor_head={self.actor_head}")
        return out

    def check(self, agent_cfg: Any) -> None:
        """Raises ``ArchitectureError`` for the first key of the resolved ``agent_cfg`` (``Config.agent``) that does
        not fit the files: one line naming the key, its value and the file's. The actor head is not checked: it is
        detected from trained values, and a stated head wins (``agent_interop.convert --actor-head``)."""
        for key, found in self.keys.items():
            value = getattr(agent_cfg, key.split(".", 1)[1])
            if value != found:
                raise ArchitectureError(f"{key}={value} does not fit {self.where}: the file holds {found} "
                                        f"({self.evidence[key]}); leave the key out (it is read from the file) or "
                                        f"give {found}")
        if self.support is not None:
            low, high = self.support
            got = (float(agent_cfg.critic_min_v), float(agent_cfg.critic_max_v))
            if not np.allclose(got, self.support, rtol=0.0, atol=1e-6):
                raise ArchitectureError(
                    f"agent.critic_min_v/critic_max_v=[{got[0]!r}, {got[1]!r}] (agent.normalized_G_max="
                    f"{agent_cfg.normalized_G_max!r}) does not fit {self.where}: the critic's support is [{low!r}, "
                    f"{high!r}] ({self.evidence['support']}); leave agent.normalized_G_max, critic_min_v and "
                    "critic_max_v out (they are read from the file) or give that support")


def _entry(net: dict[str, np.ndarray], name: str, file: str, what: str, ndim: int, shown: str) -> np.ndarray:
    value = net.get(name)
    if value is None:
        raise ArchitectureError(f"{file} holds no '{shown}' ({what}): not a FlashSAC {what.split()[0]} of this "
                                "project or upstream's")
    if np.ndim(value) != ndim:
        raise ArchitectureError(f"{file} '{shown}' has shape {tuple(np.shape(value))}, a FlashSAC {what} has {ndim} "
                                "dimensions")
    return np.asarray(value)


def infer_architecture(actor: Mapping[str, Any], critic: Mapping[str, Any], atoms: Any | None,
                       files: tuple[str, str], where: str,
                       rename: Callable[[str, str], str] | None = None) -> Architecture:
    """The ``Architecture`` that an actor's and a critic's parameters state.

    Args:
        actor: the actor's parameters by name (numpy arrays or anything ``np.shape`` reads; the head weights are
            read as values, for ``detect_actor_head``).
        critic: the critic's.
        atoms: the critic's support (K,) or (1, 1, K), or None where the files do not hold it.
        files: the actor's and the critic's file, for messages.
        where: the folder, for messages.
        rename: (``"actor"`` | ``"critic"``, this project's name) -> the file's own name (upstream's), for
            messages.

    Raises:
        ArchitectureError: an entry is missing or has another rank, or the actor and the critic do not belong to one
            agent (the critic's input is not observation + action); the message names the file and the entry.
    """
    show = rename or (lambda net, name: name)
    actor_file, critic_file = files
    actor = {_dotted(k): v for k, v in actor.items()}
    critic = {_dotted(k): v for k, v in critic.items()}
    def entry(net: str, name: str, what: str, ndim: int) -> np.ndarray:
        params, file = (actor, actor_file) if net == "actor" else (critic, critic_file)
        return _entry(params, name, file, f"{net} {what}", ndim, show(net, name))

    embed = entry("actor", "embed.weight", "embedding (H, O)", 2)
    mean_bias = entry("actor", "mean_bias", "mean bias (A,)", 1)
    mean_head = entry("actor", "mean_head.weight", "mean head (A, H)", 2)
    log_std_head = entry("actor", "log_std_head.weight", "log-std head (A, H)", 2)
    c_embed = entry("critic", "embed.weight", "embedding (N, Hc, O + A)", 3)
    c_head = entry("critic", "head.weight", "head (N, K, Hc)", 3)
    hidden, observation_dim = (int(n) for n in embed.shape)
    action_dim = int(mean_bias.shape[0])
    if int(c_embed.shape[-1]) != observation_dim + action_dim:
        name = show("critic", "embed.weight")
        raise ArchitectureError(f"{critic_file} takes {c_embed.shape[-1]} inputs ({name} {tuple(c_embed.shape)}) but "
                                f"the actor in {actor_file} has {observation_dim} observations and {action_dim} "
                                "actions: the two files are not one agent's")

    def blocks(net: dict[str, Any], file: str) -> int:
        found = sorted(int(m.group(1)) for m in map(_BLOCK.fullmatch, net) if m)
        if found != list(range(len(found))):
            raise ArchitectureError(f"{file} holds blocks {found}: not numbered 0..n-1")
        return len(found)

    def shown(net: str, name: str, value: np.ndarray) -> str:
        file = actor_file if net == "actor" else critic_file
        return f"{file} {show(net, name)} has shape {tuple(int(n) for n in value.shape)}"

    keys = {"agent.actor_num_blocks": blocks(actor, actor_file), "agent.actor_hidden_dim": hidden,
            "agent.critic_num_blocks": blocks(critic, critic_file), "agent.critic_hidden_dim": int(c_embed.shape[1]),
            "agent.critic_num_bins": int(c_head.shape[1])}
    def counted(net: str, file: str, n: int) -> str:
        return f"{file} {show(net, f'blocks.{n - 1}.fc1.weight')} is its last block" if n else f"{file} has no block"

    evidence = {"agent.actor_num_blocks": counted("actor", actor_file, keys["agent.actor_num_blocks"]),
                "agent.actor_hidden_dim": shown("actor", "embed.weight", embed),
                "agent.critic_num_blocks": counted("critic", critic_file, keys["agent.critic_num_blocks"]),
                "agent.critic_hidden_dim": shown("critic", "embed.weight", c_embed),
                "agent.critic_num_bins": shown("critic", "head.weight", c_head)}
    support = None
    if atoms is not None:
        values = np.asarray(atoms, dtype=np.float64).reshape(-1)
        if values.shape[0] != keys["agent.critic_num_bins"]:
            raise ArchitectureError(f"{critic_file}: the support holds {values.shape[0]} atoms, the critic head "
                                    f"{keys['agent.critic_num_bins']} ({evidence['agent.critic_num_bins']})")
        support = (float(str(np.float32(values[0]))), float(str(np.float32(values[-1]))))  # shortest float32 text
        evidence["support"] = f"{critic_file} {show('critic', 'atoms')} [{values[0]:g}, {values[-1]:g}]"
    head, why = detect_actor_head(mean_head, log_std_head)
    return Architecture(observation_dim=observation_dim, action_dim=action_dim, keys=keys, evidence=evidence,
                        support=support, actor_head=head, actor_head_reason=why, where=where)


def _dotted(name: str) -> str:
    """A flax path (``blocks_0/fc1/weight`` or joined with dots) or a torch name -> dotted, compiled prefix dropped."""
    return name.replace("/", ".").removeprefix("_orig_mod.")


def read_conversion_record(folder: str) -> dict[str, Any] | None:
    """A converted folder's ``imported_from.json`` (``agent_interop.convert``), its ``overrides`` (the keys its agent
    was built with: the architecture read from the shapes, the actor head, the user's) as a list of ``key=value``
    strings (a record without them: its actor head alone); None when the folder has no record.

    Raises:
        CheckpointError: the record is unreadable or not the converter's, naming it.
    """
    file = os.path.join(folder, IMPORTED_FILE)
    if not os.path.isfile(file):
        return None
    try:
        with open(file, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"cannot read {file} ({type(exc).__name__}: {exc}): the converter's record is damaged; "
                              "convert the source again") from None
    if not isinstance(record, dict) or not isinstance(record.get("overrides", []), list):
        raise CheckpointError(f"{file} is not the converter's record (a JSON object with a list of overrides "
                              f"expected); convert the source again")
    overrides = [str(o) for o in record.get("overrides", [])]
    if not overrides and "actor_head" in record:
        overrides = [f"agent.actor_head={record['actor_head']}"]
    return {**record, "overrides": overrides}
