"""A resume: the checkpoint a run continues from and the config it stored (``stored_config``), the schedule keys the
resumed run keeps (``kept_on_resume``), and the lines the driver prints when it opens a resumed run."""

from __future__ import annotations

import os
from typing import Any

from agent_common.keys import Config, ConfigError, budget_defaults
from agent_common.runs.checkpoints import checkpoint_framework, select_checkpoint
from agent_common.runs.commands import converter_command
from agent_common.runs.files import CONFIG_FILE, CheckpointError, NoCheckpointError, read_config_file
from agent_common.runs.rundir import run_dir_of_checkpoint

__all__ = ["NothingToResume", "kept_on_resume", "stored_config"]


class NothingToResume(NoCheckpointError):
    """``agent_load_path`` names a run directory that holds a run's config but no complete checkpoint."""


def stored_config(load_path: str, framework: str) -> tuple[str, dict[str, Any]]:
    """(checkpoint, its stored config) for a resume from ``load_path``, checked for the framework: the newest
    checkpoint that verifies and whose config reads (``checkpoint.select_checkpoint``: a damaged one is moved aside
    with a warning and the next older one is used).

    Raises:
        NothingToResume: a run directory with a config and no complete checkpoint (the caller names the command
            that starts it over with that config).
        ConfigError: no checkpoint there (with the next commands), a checkpoint of the other framework (with the
            converter command), another program's layout, or no readable stored config.
    """
    stored: dict[str, Any] = {}

    def read(ckpt: str) -> None:
        written_by = checkpoint_framework(ckpt)
        if written_by is not None and written_by != framework:
            raise ConfigError(
                f"agent_load_path={load_path}: {ckpt} was written by the {written_by} agent, this is the {framework} "
                f"agent; convert it first: {converter_command(ckpt, written_by, framework)}"
            )
        for path in (os.path.join(ckpt, CONFIG_FILE), os.path.join(run_dir_of_checkpoint(ckpt), CONFIG_FILE)):
            if os.path.exists(path):
                stored.clear()
                stored.update(read_config_file(path))
                return
        raise ConfigError(f"agent_load_path={load_path}: no {CONFIG_FILE} in {ckpt} or its run directory, so the "
                          "run's config cannot be restored")

    try:
        ckpt = select_checkpoint(load_path, read)
    except NoCheckpointError as exc:
        if os.path.exists(os.path.join(load_path, CONFIG_FILE)) and "nothing to resume" in str(exc):
            raise NothingToResume(str(exc)) from None
        raise ConfigError(str(exc)) from None
    except CheckpointError as exc:
        raise ConfigError(str(exc)) from None
    return ckpt, stored


def kept_on_resume(cfg: Config) -> list[str]:
    """The schedule keys whose values differ from what ``num_env_steps`` alone would derive (kept from the run)."""
    kept = []
    for key, derived in budget_defaults(cfg).items():
        obj: Any = cfg
        for part in key.split("."):
            obj = getattr(obj, part)
        if obj != derived and key != "recording_per_interaction_step":
            kept.append(f"{key}={obj} (num_env_steps={cfg.num_env_steps} would give {derived})")
    return kept
