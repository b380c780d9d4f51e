"""Where a new run's initial weights come from (``agent_init_path``): resolves a checkpoint of this project, or a
folder converted from upstream FlashSAC, to its agent files and reward normaliser state, before any work.

Accepted: a run directory (its newest complete checkpoint), a checkpoint directory ``checkpoints/step<N>``, an agent
directory (``actor.pt`` / ``actor.pkl`` ...), or a folder written by ``python -m agent_interop.convert
upstream-to-{torch,jax}`` (``agent/`` + ``reward_normalizer.pkl`` + ``imported_from.json``). Upstream's own layout
is refused with the conversion command. Nothing is moved or changed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from agent_common.architecture import read_conversion_record
from agent_common.runs.checkpoints import candidate_checkpoints
from agent_common.runs.commands import converter_command
from agent_common.runs.files import AGENT_DIR, LOOP_STATE_FILE, CheckpointError, load_pickle
from agent_common.runs.upstream_layout import (
    IMPORTED_FILE,
    REWARD_NORMALIZER_FILE,
    describe_foreign_checkpoint,
    is_upstream_checkpoint,
    upstream_checkpoints_in,
)

__all__ = ["InitSource", "check_converted_architecture", "resolve_init_source"]

_MARKERS = {"torch": "actor.pt", "jax": "actor.pkl"}


@dataclass(frozen=True)
class InitSource:
    """A resolved ``agent_init_path``: the agent directory, the framework that wrote it, and where its reward
    normaliser state is (None: the source has none)."""

    path: str
    agent_dir: str
    framework: str
    normalizer_file: str | None

    def normalizer_state(self) -> dict[str, Any] | None:
        """The source's ``RewardNormalizer.state_dict()``, or None."""
        if self.normalizer_file is None:
            return None
        state = load_pickle(self.normalizer_file)
        return state.get("reward_normalizer") if os.path.basename(self.normalizer_file) == LOOP_STATE_FILE else state


def _framework(agent_dir: str) -> str | None:
    return next((fw for fw, marker in _MARKERS.items() if os.path.exists(os.path.join(agent_dir, marker))), None)


def resolve_init_source(path: str, framework: str) -> InitSource:
    """Resolves ``agent_init_path=path`` for the ``framework`` agent.

    Raises:
        CheckpointError: nothing usable at ``path``, upstream's own layout, or the other framework's agent; the
            message names the path and the command to run.
    """
    if is_upstream_checkpoint(path) or upstream_checkpoints_in(path):
        message = describe_foreign_checkpoint(path, given_as=f"agent_init_path={path}")
        raise CheckpointError((message or "").replace("upstream-to-torch", f"upstream-to-{framework}")
                              .replace("  (or upstream-to-jax)", "").replace("  (or upstream-to-torch)", ""))
    if not os.path.isdir(path):
        raise CheckpointError(f"agent_init_path={path}: no such directory (give a run, checkpoint, agent or "
                              "converted folder)")
    normalizer_file = None
    if os.path.isfile(os.path.join(path, IMPORTED_FILE)) or _framework(path) is not None:
        agent_dir = path if _framework(path) is not None else os.path.join(path, AGENT_DIR)
        if os.path.isfile(os.path.join(path, REWARD_NORMALIZER_FILE)):
            normalizer_file = os.path.join(path, REWARD_NORMALIZER_FILE)
    else:
        try:
            ckpt = candidate_checkpoints(path)[0]
        except CheckpointError as exc:
            raise CheckpointError(str(exc).replace("agent_load_path=", "agent_init_path=")) from None
        agent_dir = os.path.join(ckpt, AGENT_DIR)
        if os.path.isfile(os.path.join(ckpt, LOOP_STATE_FILE)):
            normalizer_file = os.path.join(ckpt, LOOP_STATE_FILE)
    written_by = _framework(agent_dir)
    if written_by is None:
        raise CheckpointError(f"agent_init_path={path}: {agent_dir} holds no agent files (actor.pt or actor.pkl)")
    if written_by != framework:
        raise CheckpointError(f"agent_init_path={path}: {agent_dir} was written by the {written_by} agent, this is "
                              f"the {framework} agent; convert it first: "
                              f"{converter_command(path, written_by, framework)}")
    return InitSource(path=path, agent_dir=agent_dir, framework=written_by, normalizer_file=normalizer_file)


_CONVERTED_ARCHITECTURE = ("agent.actor_num_blocks", "agent.actor_hidden_dim", "agent.critic_num_blocks",
                           "agent.critic_hidden_dim", "agent.critic_num_bins")  # shapes (the head is not one)


def check_converted_architecture(source: InitSource, cfg: Any) -> None:
    """A converted folder's networks fit the new run's config: its ``imported_from.json`` records the architecture
    the converter read from the checkpoint's shapes (its ``overrides``); a new run has its own config, so each of
    those keys (widths, block counts, atoms, the support) must be given the same. A folder without that record (an
    older converter's) is left to the agent's load.

    Raises:
        CheckpointError: one line naming every key that differs, both values, and the overrides to add.
    """
    record = read_conversion_record(source.path)
    if record is None:
        return
    record_file = os.path.join(source.path, IMPORTED_FILE)
    recorded = dict(o.split("=", 1) for o in record["overrides"] if "=" in o)
    a = cfg.agent
    found = {k: recorded[k] for k in _CONVERTED_ARCHITECTURE if k in recorded}
    if "agent.normalized_G_max" in recorded:
        g = float(recorded["agent.normalized_G_max"])
        found.update({"agent.critic_min_v": repr(-g), "agent.critic_max_v": repr(g)})
    found.update({k: recorded[k] for k in ("agent.critic_min_v", "agent.critic_max_v") if k in recorded})

    def differs(key: str, text: str) -> bool:
        value = getattr(a, key.split(".", 1)[1])
        return str(value) != text if isinstance(value, str) else float(value) != float(text)

    wrong = [k for k, v in found.items() if differs(k, v)]
    if wrong:
        have = ", ".join(f"{k}={getattr(a, k.split('.', 1)[1])}" for k in wrong)
        give = " ".join(f"--overrides {k}={found[k]}" for k in wrong)
        raise CheckpointError(f"agent_init_path={source.path}: its networks ({record_file}: the shapes of the "
                              f"converted checkpoint) do not fit this run's {have}; start the run with {give}")
