"""The Weights & Biases side of ``RunLogger`` (``logger_type=wandb`` or ``tensorboard,wandb``).

Upstream's keys name the run's place: ``project_name``, ``entity_name``, ``group_name``; the resolved config is the
run's W&B config. Every value is logged with ``env_step`` as its x-axis (``define_metric``), so a value logged late
(the step-0 evaluation that ran in the background) still lands at its own step. The W&B files go to
``<run>/wandb/``; ``WANDB_MODE=offline`` writes them without any network (``wandb sync <run>/wandb/offline-run-*``
uploads them later). The W&B run id is kept in ``<run>/wandb_run_id``, so a resume continues the same W&B run.
Videos are logged as their MP4 files (no NumPy-array encoding, which would need moviepy).
"""

from __future__ import annotations

import os
import secrets
from typing import Any

from agent_common.runs.files import atomic_write_text

__all__ = ["RUN_ID_FILE", "WandbSink", "logger_options"]

RUN_ID_FILE = "wandb_run_id"
STEP_KEY = "env_step"


class WandbSink:
    """One W&B run for one run directory.

    Args:
        run_dir: the run directory (W&B writes ``<run_dir>/wandb/``).
        project: ``project_name``.
        entity: ``entity_name`` (None: the account's default).
        group: ``group_name``.
        name: the W&B run name (the run directory's name).
        config: the resolved config as a nested dict.
    """

    def __init__(self, run_dir: str, project: str, entity: str | None, group: str, name: str,
                 config: dict[str, Any]) -> None:
        import wandb  # the wandb extra

        id_path = os.path.join(run_dir, RUN_ID_FILE)
        if os.path.exists(id_path):
            with open(id_path) as f:
                run_id = f.read().strip()
        else:
            run_id = secrets.token_hex(4)
            atomic_write_text(id_path, run_id + "\n")
        self._wandb = wandb
        self.run = wandb.init(project=project, entity=entity, group=group, name=name, config=config, dir=run_dir,
                              id=run_id, resume="allow", reinit="create_new")
        self.run.define_metric(STEP_KEY)
        self.run.define_metric("*", step_metric=STEP_KEY)
        self.dir = self.run.dir

    def log(self, values: dict[str, Any], step: int) -> None:
        """Logs ``values`` at env step ``step``."""
        self.run.log({**values, STEP_KEY: int(step)})

    def log_text(self, tag: str, text: str) -> None:
        """Keeps the latest text of ``tag`` in the run's summary."""
        self.run.summary[tag] = text

    def log_video(self, tag: str, path: str, fps: int, step: int) -> None:
        """Logs an MP4 file as a W&B video at ``step``."""
        self.log({tag: self._wandb.Video(path, fps=fps, format="mp4")}, step)

    def close(self) -> None:
        """Finishes the W&B run (offline: its files are complete after this)."""
        self.run.finish()


def logger_options(cfg: Any, run_dir: str) -> dict[str, Any]:
    """``RunLogger`` keyword arguments for ``cfg.logger_type``: ``use_tensorboard`` and ``wandb``."""
    import dataclasses

    from agent_common.keys import loggers

    names = loggers(cfg)
    wandb = None
    if "wandb" in names:
        wandb = {"project": cfg.project_name, "entity": cfg.entity_name, "group": cfg.group_name,
                 "name": os.path.basename(os.path.abspath(run_dir)), "config": dataclasses.asdict(cfg)}
    return {"use_tensorboard": "tensorboard" in names, "wandb": wandb}
