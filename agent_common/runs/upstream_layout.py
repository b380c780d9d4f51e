"""Recognises checkpoint folders this project's loader must not treat as its own (no torch import: file layout and
the pickled names only), and says what to run instead.

* Upstream FlashSAC's ``FlashSACAgent.save`` folder (``actor.pt``, ``critic.pt``, ``target_critic.pt``,
  ``temperature.pt``, ``agent_state.pt``, optionally ``reward_normalizer.pt``; upstream's parameter names such as
  ``embedder.norm.weight``), or a run folder of upstream's ``train.py`` that holds such ``step<N>`` folders.
* A folder written by ``python -m agent_interop.convert upstream-to-{torch,jax}`` (``imported_from.json``): it starts a
  new run through ``agent_init_path`` (and ``evaluate`` / ``load_policy`` load it); it is not a run to resume.

``describe_foreign_checkpoint`` returns the message for a folder given as ``agent_load_path``; nothing here moves,
changes or deletes anything.
"""

from __future__ import annotations

import os
import zipfile

__all__ = [
    "IMPORTED_FILE",
    "REWARD_NORMALIZER_FILE",
    "UPSTREAM_FILES",
    "describe_foreign_checkpoint",
    "is_upstream_checkpoint",
    "upstream_checkpoints_in",
]

UPSTREAM_FILES = ("actor.pt", "critic.pt", "target_critic.pt", "temperature.pt", "agent_state.pt")
IMPORTED_FILE = "imported_from.json"  # written by agent_interop.convert upstream-to-{torch,jax}
REWARD_NORMALIZER_FILE = "reward_normalizer.pkl"  # an imported folder's RewardNormalizer.state_dict()
_UPSTREAM_ACTOR_NAMES = (b"embedder.norm.weight", b"predictor.mean_w.w.weight")  # upstream's actor, not ours


def _pickled_names(path: str) -> bytes:
    """The pickle stream of a torch zip checkpoint (holds the state-dict keys as strings); b"" if unreadable."""
    try:
        with zipfile.ZipFile(path) as archive:
            name = next((n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
            return archive.read(name) if name is not None else b""
    except (OSError, zipfile.BadZipFile, KeyError):
        return b""


def is_upstream_checkpoint(path: str) -> bool:
    """Whether ``path`` is a folder written by upstream FlashSAC's ``FlashSACAgent.save``."""
    if not all(os.path.isfile(os.path.join(path, f)) for f in UPSTREAM_FILES):
        return False
    names = _pickled_names(os.path.join(path, "actor.pt"))
    return any(n in names for n in _UPSTREAM_ACTOR_NAMES)


def upstream_checkpoints_in(path: str) -> list[str]:
    """Upstream checkpoint folders directly inside ``path`` (an upstream run: ``step<N>`` folders), newest first."""
    if not os.path.isdir(path):
        return []
    found = [os.path.join(path, d) for d in os.listdir(path)
             if d.startswith("step") and d[4:].isdigit() and is_upstream_checkpoint(os.path.join(path, d))]
    return sorted(found, key=lambda p: int(os.path.basename(p)[4:]), reverse=True)


def describe_foreign_checkpoint(path: str, given_as: str | None = None) -> str | None:
    """The refusal for ``agent_load_path=path`` (or what ``given_as`` names) when ``path`` holds another program's
    checkpoint (or a converted one that starts new runs), with the exact command to run; None for anything else."""
    given_as = given_as or f"agent_load_path={path}"
    if os.path.isfile(os.path.join(path, IMPORTED_FILE)):
        return (f"{given_as}: this folder was converted from another program's checkpoint "
                f"({IMPORTED_FILE}); it starts a new run from its weights, it is not a run to resume: "
                f"--overrides agent_init_path={path}")
    found = [path] if is_upstream_checkpoint(path) else upstream_checkpoints_in(path)
    if not found:
        return None
    src = found[0]
    where = "" if src == path else f" (newest: {src})"
    return (f"{given_as}: this is upstream FlashSAC's checkpoint layout{where}, written by another "
            "program, not a checkpoint of this project (it was left as it is). Convert it, then start a new run "
            "from its weights: python -m agent_interop.convert upstream-to-torch "
            f"{src} <new dir>  (or upstream-to-jax), then --overrides agent_init_path=<new dir>")
