"""``python -m agent_interop.convert DIRECTION SRC DST``: the project's one converter command.

Between the two agents (``torch-to-jax`` / ``jax-to-torch``: ``agent_interop.torch_jax``, where the conversion
functions live) and from / to upstream FlashSAC's checkpoint layout (``upstream-to-torch`` / ``upstream-to-jax`` /
``torch-to-upstream`` / ``jax-to-upstream``: ``agent_interop.upstream``).

The agents are built on the CPU from what the source states: the architecture from its tensors' shapes
(``agent_common.architecture``: widths, block counts, atoms, support, observation / action widths, actor head), the
other keys from the source's ``config.yaml`` (a run or checkpoint) or ``imported_from.json`` (a converted folder),
then the user's ``--overrides``, each architecture key checked against the files. Every failure (a missing,
truncated or foreign file, a key that does not fit, a destination that holds files) is one line on stderr and exit
status 2, before anything is written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from agent_common.architecture import Architecture, read_conversion_record
from agent_common.keys import ConfigError
from agent_common.runs.files import AGENT_DIR, CONFIG_FILE, CheckpointError
from agent_common.runs.upstream_layout import IMPORTED_FILE, is_upstream_checkpoint, upstream_checkpoints_in
from agent_interop.torch_jax import ARCHITECTURE_KEYS, HYPERPARAMETER_KEYS, ConversionError, agent_dir_of

__all__ = ["DIRECTIONS", "main"]

DIRECTIONS = ("upstream-to-torch", "upstream-to-jax", "torch-to-jax", "jax-to-torch", "torch-to-upstream",
              "jax-to-upstream")
_NOT_KEPT = ("agent.categorical_target_backend", "agent.device_type", "agent.categorical_target_strict",
             "agent_load_path", "agent_init_path", "buffer_load_path", "save_path")  # set here, or runs' keys
_SCHEDULE_KEYS = ("agent.learning_rate_init", "agent.learning_rate_end", "agent.learning_rate_warmup_step",
                  "agent.learning_rate_decay_step", "agent.learning_rate_warmup_rate",
                  "agent.learning_rate_decay_rate", "num_env_steps", "num_train_envs", "updates_per_interaction_step",
                  "recipe")
"""The keys that place upstream's LR schedule and are not in its files (its peak is: the scheduler's base LR)."""
_MARKERS = {"torch": "actor.pt", "jax": "actor.pkl"}

_EPILOG = """\
SRC and DST by direction:
  upstream-to-torch, upstream-to-jax
      SRC  an upstream FlashSAC checkpoint folder: actor.pt, critic.pt, target_critic.pt, temperature.pt,
           agent_state.pt (reward_normalizer.pt), as upstream's train.py saves <save_path>/step<N>/; or
           upstream's run folder holding such step<N> folders (its newest is read)
      DST  a new folder: agent/ (this project's agent files), reward_normalizer.pkl, imported_from.json
  torch-to-jax, jax-to-torch
      SRC  a run directory (its newest complete checkpoint), one of its checkpoints/step<N> directories, an agent
           directory (actor.pt ... / actor.pkl ...) or a converted folder (DST of any direction here)
      DST  a new folder of the same kind (a checkpoint gets a new COMPLETE manifest)
  torch-to-upstream, jax-to-upstream
      SRC  as for torch-to-jax
      DST  a new folder in upstream's layout (upstream's train.py loads it with agent_load_path=DST)

The architecture (widths, block counts, atoms, support, observation and action widths, actor head) is read from
SRC's tensors; a run's other keys from its config.yaml. --overrides are needed only for what SRC does not hold:
upstream's task (env.env_name, so that evaluate knows it) and, to check upstream's LR position, its schedule keys.
A converted folder is used directly: python -m agent_torch.evaluate DST (or agent_jax.evaluate), or a new run from
its weights: python -m agent_torch.train --overrides agent_init_path=DST ...

examples:
  python -m agent_interop.convert upstream-to-torch models/test/test/HalfCheetah-v4/seed0-0101-120000/step1000000 \\
      converted --overrides env.env_name=HalfCheetah-v4
  python -m agent_torch.evaluate converted --episodes 10 --export actor.pt
  python -m agent_interop.convert torch-to-jax runs/HalfCheetah-v4/seed0 runs/HalfCheetah-v4/seed0-jax
  python -m agent_interop.convert jax-to-upstream runs/HalfCheetah-v4/seed0 upstream_step
"""


def _value(value: Any) -> str:
    """A config value as override text (YAML)."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else repr(value) if isinstance(
        value, float) else str(value)


def _user_overrides(overrides: list[str]) -> list[str]:
    """The user's overrides without the keys the converter sets itself (CPU agents, each framework's reference
    target) and the paths of a training run (a conversion neither resumes nor writes a run)."""
    return [o for o in overrides if o.split("=", 1)[0].strip() not in _NOT_KEPT]


def _parsed(overrides: list[str]) -> dict[str, Any]:
    from agent_common.config import parse_overrides

    return parse_overrides(overrides)


def _stored_overrides(src: str, agent_dir: str) -> tuple[list[str], str]:
    """(overrides, where they come from) that the source states beside its tensors: a converted folder's recorded keys
    (``imported_from.json``), or the architecture and update keys of a run's ``config.yaml``; nothing for a bare agent
    directory.

    Raises:
        CheckpointError: the record or the config file is there but unreadable, naming it.
    """
    from agent_common.config import read_config_file
    from agent_common.runs.rundir import run_dir_of_checkpoint

    step_dir = os.path.dirname(os.path.normpath(agent_dir)) if os.path.basename(
        os.path.normpath(agent_dir)) == AGENT_DIR else agent_dir
    record = read_conversion_record(step_dir)
    if record is not None:
        return record["overrides"], os.path.join(step_dir, IMPORTED_FILE)
    for config in (os.path.join(step_dir, CONFIG_FILE), os.path.join(run_dir_of_checkpoint(step_dir), CONFIG_FILE)):
        if os.path.isfile(config):
            stored = read_config_file(config)
            keys = [k if k in ("gamma", "n_step") else f"agent.{k}" for k in (*ARCHITECTURE_KEYS,
                                                                              *HYPERPARAMETER_KEYS)]
            keys.append("agent.normalized_G_max")
            return [f"{k}={_value(stored[k])}" for k in keys if k in stored], config
    return [], ""


def _cpu_agents(overrides: list[str], observation_dim: int, action_dim: int, frameworks: tuple[str, ...]) -> dict[
        str, Any]:
    """{framework: agent} built on the CPU with each framework's reference target (the JAX agent in fp32: its
    weights are fp32 either way)."""
    from agent_common.config import load_config
    from agent_interop.synthetic import make_spaces

    spaces = make_spaces(observation_dim, action_dim)
    common = [*overrides, "agent.device_type=cpu"]
    agents: dict[str, Any] = {}
    if "torch" in frameworks:
        from agent_torch.agent import FlashSACAgent as TorchAgent

        agents["torch"] = TorchAgent(load_config([*common, "agent.categorical_target_backend=torch"], "torch"),
                                     *spaces)
    if "jax" in frameworks:
        from agent_jax.agent import FlashSACAgent as JaxAgent

        cfg = load_config([*common, "agent.categorical_target_backend=jax"], "jax")
        if cfg.agent.use_amp:
            cfg = load_config([*common, "agent.categorical_target_backend=jax", "agent.use_amp=false"], "jax")
        agents["jax"] = JaxAgent(cfg, *spaces)
    return agents


def _read_architecture(agent_dir: str, framework: str) -> Architecture:
    if framework == "torch":
        from agent_torch.policy import read_architecture
    else:
        from agent_jax.policy import read_architecture
    return read_architecture(agent_dir)


def _our_source(src: str, source: str, dst: str) -> str:
    """The agent directory of a source of this project for ``source``'s agent.

    Raises:
        ConversionError: upstream's layout, the other framework's agent, or nothing usable, with the command to run.
        CheckpointError: a run without a complete checkpoint (the message says what is there).
    """
    if is_upstream_checkpoint(src) or upstream_checkpoints_in(src):
        step = src if is_upstream_checkpoint(src) else upstream_checkpoints_in(src)[0]
        raise ConversionError(f"{src} holds upstream FlashSAC's checkpoint layout (another program's), not a {source} "
                              f"checkpoint of this project; convert it with: python -m agent_interop.convert "
                              f"upstream-to-{'jax' if source == 'torch' else 'torch'} {step} {dst}")
    if not os.path.isdir(src):
        raise ConversionError(f"{src}: no such directory (SRC of {source}-to-...: a run, checkpoint, agent or "
                              "converted directory; see --help)")
    agent_dir = agent_dir_of(src)
    written_by = next((fw for fw, marker in _MARKERS.items() if os.path.isfile(os.path.join(agent_dir, marker))), None)
    if written_by is None:
        raise ConversionError(f"{agent_dir} holds no agent files (actor.pt ... or actor.pkl ...): SRC of "
                              f"{source}-to-... is a run, checkpoint, agent or converted directory (see --help)")
    if written_by != source:
        raise ConversionError(f"{src} holds the {written_by} agent's files ({agent_dir}), not the {source} agent's: "
                              f"python -m agent_interop.convert {written_by}-to-... {src} {dst}")
    return agent_dir


def _configured(src: str, agent_dir: str, source: str, user: list[str], actor_head: str | None) -> tuple[
        list[str], Architecture]:
    """(the overrides the agents are built with, the source's architecture) for a source of this project: what the
    source stores, the shapes, then the user's keys (``--actor-head`` last)."""
    arch = _read_architecture(agent_dir, source)
    stored, _ = _stored_overrides(src, agent_dir)
    stated = [f"agent.actor_head={actor_head}"] if actor_head is not None else []
    given = _parsed([*stored, *user, *stated])
    return [*stored, *arch.overrides(given), *user, *stated], arch


def _between_agents(direction: str, src: str, dst: str, user: list[str], check: bool) -> str:
    """``torch-to-jax`` / ``jax-to-torch``; returns the summary line."""
    from agent_interop.torch_jax import convert_jax_checkpoint, convert_torch_checkpoint

    source, target = direction.split("-to-")
    agent_dir = _our_source(src, source, dst)
    overrides, arch = _configured(src, agent_dir, source, user, None)
    agents = _cpu_agents(overrides, arch.observation_dim, arch.action_dim, ("torch", "jax"))
    arch.check(agents["torch"].cfg.agent)
    if source == "torch":
        out = convert_torch_checkpoint(src, dst, agents["torch"], agents["jax"], check)
    else:
        out = convert_jax_checkpoint(src, dst, agents["jax"], agents["torch"], check)
    record = os.path.join(out, IMPORTED_FILE)
    if os.path.isfile(record):  # a converted upstream folder stays one, now of the other framework
        from agent_common.runs.files import atomic_write_text

        with open(record, encoding="utf-8") as f:
            info = json.load(f)
        info["framework"] = target
        atomic_write_text(record, json.dumps(info, indent=1, default=str) + "\n")
    return (f"converted {src} ({source}) -> {out} ({target}); observation width {arch.observation_dim}, action width "
            f"{arch.action_dim}")


def _from_upstream(direction: str, src: str, dst: str, user: list[str], actor_head: str | None, check: bool) -> str:
    """``upstream-to-torch`` / ``upstream-to-jax``; returns the summary line."""
    from agent_common.normalizer import RewardNormalizer
    from agent_interop.torch_jax import torch_to_jax
    from agent_interop.upstream import (
        import_upstream,
        read_upstream,
        upstream_architecture,
        upstream_learning_rate_peak,
        write_imported,
    )

    target = direction.split("-to-")[1]
    if not is_upstream_checkpoint(src) and upstream_checkpoints_in(src):
        src = upstream_checkpoints_in(src)[0]  # an upstream run folder: its newest step<N>
    files = read_upstream(src)
    arch = upstream_architecture(src, files)
    given = _parsed(user)
    stated = actor_head or given.get("agent.actor_head")
    head = stated or arch.actor_head
    peak = upstream_learning_rate_peak(files)
    found = [f"agent.actor_head={head}"]
    if peak is not None and "agent.learning_rate_peak" not in given:
        found.append(f"agent.learning_rate_peak={peak!r}")
    overrides = [*arch.overrides({**given, "agent.actor_head": head}), *found,
                 *(o for o in user if o.split("=", 1)[0].strip() != "agent.actor_head")]
    agents = _cpu_agents(overrides, arch.observation_dim, arch.action_dim, ("torch", *((target,) if target == "jax"
                                                                                      else ())))
    torch_agent = agents["torch"]
    a = torch_agent.cfg.agent
    arch.check(a)
    if peak is not None and float(a.learning_rate_peak) != peak:
        raise ConversionError(f"agent.learning_rate_peak={a.learning_rate_peak!r} does not fit {src}: upstream's "
                              f"scheduler base LR (its learning_rate_peak) is {peak!r} (actor.pt "
                              "scheduler_state_dict.base_lrs); leave the key out (it is read from the file) or give "
                              f"{peak!r}")
    schedule_given = any(k in given for k in _SCHEDULE_KEYS)
    normalizer = RewardNormalizer(torch_agent.cfg.gamma, a.normalized_G_max, enabled=a.normalize_reward)
    info = import_upstream(files, torch_agent, normalizer, check_schedule=check and schedule_given,
                           check_head=stated is None)
    info.update(source=os.path.abspath(src), source_program="upstream FlashSAC (leeyngdo/FlashSAC)",
                actor_head=head, actor_head_detected=arch.actor_head, actor_head_reason=arch.actor_head_reason,
                actor_head_stated=stated is not None, framework=target, schedule_checked=check and schedule_given,
                observation_dim=arch.observation_dim, action_dim=arch.action_dim, overrides=overrides)
    agent = torch_agent
    if target == "jax":
        torch_to_jax(torch_agent, agents["jax"], check)
        agent = agents["jax"]
    write_imported(dst, agent, normalizer.state_dict() if info["reward_normalizer"] else None, info)
    steps = info["schedule_steps"]
    schedule = ("its LR schedule checked against the given keys" if info["schedule_checked"] else
                f"LR schedule position kept (actor step {steps.get('actor')}, critic step {steps.get('critic')}; "
                "upstream's files do not hold its warm-up, decay and end keys, so it was not checked: give them to "
                "check it)")
    task = (f"evaluate it: python -m agent_{target}.evaluate {dst}" if "env.env_name" in given else
            f"evaluate it: python -m agent_{target}.evaluate {dst} --overrides env.env_name=<its task>")
    keys = ", ".join(f"{k.split('.', 1)[1]}={v}" for k, v in arch.keys.items())
    return (f"converted {src} (upstream FlashSAC; {keys}; observation width {arch.observation_dim}, action width "
            f"{arch.action_dim}; actor head {head}: {'stated' if stated else arch.actor_head_reason}) -> {dst} "
            f"({target}); update step {info['update_step']}; {schedule}. {task}; start a run from its weights: "
            f"--overrides agent_init_path={dst}")


def _to_upstream(direction: str, src: str, dst: str, user: list[str], actor_head: str | None, check: bool) -> str:
    """``torch-to-upstream`` / ``jax-to-upstream``; returns the summary line."""
    from agent_interop.torch_jax import jax_to_torch
    from agent_interop.upstream import export_upstream, read_normalizer_state

    source = direction.split("-to-")[0]
    agent_dir = _our_source(src, source, dst)
    step_dir = os.path.dirname(os.path.normpath(agent_dir)) if os.path.basename(
        os.path.normpath(agent_dir)) == AGENT_DIR else agent_dir
    overrides, arch = _configured(src, agent_dir, source, user, actor_head)
    agents = _cpu_agents(overrides, arch.observation_dim, arch.action_dim, ("torch", source))
    torch_agent = agents["torch"]
    arch.check(torch_agent.cfg.agent)
    head = torch_agent.cfg.agent.actor_head
    try:
        if source == "torch":
            torch_agent.load(agent_dir, load_optimizer=True)
        else:
            agents["jax"].load(agent_dir, load_optimizer=True)
            jax_to_torch(agents["jax"], torch_agent, check)
    except (RuntimeError, ValueError, KeyError) as exc:  # torch load_state_dict / agent_jax's structure check
        detail = " ".join(str(exc).split())[:300]
        raise ConversionError(f"{agent_dir} does not fit the {source} agent built from its shapes and keys: "
                              f"{detail}") from None
    export_upstream(torch_agent, dst, read_normalizer_state(step_dir))
    note = "" if head == "upstream" else (" (its actor head is the paper-era one; upstream HEAD's code runs its "
                                          "own head on these weights)")
    return (f"exported {src} ({source}, actor head {head}) -> {dst} (upstream FlashSAC layout){note}; load it in "
            f"upstream's train.py with --overrides agent_load_path={os.path.abspath(dst)}")


def _check_destination(dst: str) -> None:
    if os.path.exists(dst) and (not os.path.isdir(dst) or os.listdir(dst)):
        what = "is a file" if not os.path.isdir(dst) else f"holds {', '.join(sorted(os.listdir(dst))[:5])}"
        raise ConversionError(f"DST {dst} {what}; give a new folder (nothing was written)")


def main(argv: list[str] | None = None) -> int:
    """``python -m agent_interop.convert DIRECTION SRC DST [--overrides key=value ...]``; returns the exit code (2:
    a bad source, destination or key, one line on stderr)."""
    parser = argparse.ArgumentParser(
        prog="python -m agent_interop.convert", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Convert a FlashSAC checkpoint between this project's torch and JAX agents and upstream\n"
                    "FlashSAC's layout (leeyngdo/FlashSAC), with its optimizer state, LR schedule position, update\n"
                    "counter and reward normaliser.", epilog=_EPILOG)
    parser.add_argument("direction", choices=DIRECTIONS, metavar="DIRECTION",
                        help=f"SOURCE-to-TARGET, one of: {', '.join(DIRECTIONS)}")
    parser.add_argument("src", metavar="SRC", help="the checkpoint to read (by direction, below)")
    parser.add_argument("dst", metavar="DST", help="a new folder to write (by direction, below)")
    parser.add_argument("--overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="config keys the source does not hold (e.g. env.env_name for upstream); a key the source "
                             "states is checked against it")
    parser.add_argument("--no-check-hyperparameters", action="store_true",
                        help="convert even if the update configuration (LR schedule, gamma, ...) differs")
    parser.add_argument("--actor-head", choices=("paper", "upstream"), default=None,
                        help="the checkpoint's actor head (default: a converted folder's record, else detected "
                             "from the head weights: the paper-era heads have unit rows)")
    args = parser.parse_args(argv)
    user = _user_overrides(args.overrides)
    check = not args.no_check_hyperparameters
    try:
        _check_destination(args.dst)
        if args.direction.startswith("upstream-to-"):
            summary = _from_upstream(args.direction, args.src, args.dst, user, args.actor_head, check)
        elif args.direction.endswith("-to-upstream"):
            summary = _to_upstream(args.direction, args.src, args.dst, user, args.actor_head, check)
        else:
            summary = _between_agents(args.direction, args.src, args.dst, user, check)
    except (ConversionError, ConfigError, CheckpointError) as exc:  # NoCheckpointError is a CheckpointError
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
