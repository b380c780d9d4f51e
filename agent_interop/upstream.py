"""Checkpoints of upstream FlashSAC (leeyngdo/FlashSAC, its per-network ``.pt`` files) into and out of both agents.

Upstream's ``FlashSACAgent.save(path)`` writes ``actor.pt``, ``critic.pt``, ``target_critic.pt``, ``temperature.pt``
(each ``{network_state_dict, optimizer_state_dict, scheduler_state_dict, update_step}``), ``agent_state.pt``
(``{update_step, grad_scaler_state_dict}``) and, with reward normalisation, ``reward_normalizer.pt``. Every tensor maps
one to one onto this project's modules; only the names differ (``upstream_to_torch_name``). What the conversion does:

* **Names**: ``embedder.norm`` <-> ``input_bn``, ``embedder.w(.w)`` <-> ``embed``, ``encoder.i.{w1,w2,norm1,norm2}``
  <-> ``blocks.i.{fc1,fc2,bn1,bn2}``, ``post_norm`` <-> ``final_norm``, ``predictor.{mean_w.w,mean_bias,std_w.w,
  std_bias}`` <-> ``{mean_head,mean_bias,log_std_head,log_std_bias}``, ``predictor.{w,bias}`` <-> ``head``,
  ``head_bias``; upstream's critic buffer ``predictor.bin_values`` (1, 1, K) is checked against this project's support.
* **Adam state by parameter name**: the two register parameters in different orders (upstream's block lists both
  linear layers before both norms, its head lists the biases first), so a positional copy would pair moments with
  the wrong tensors. Each optimizer-state entry is moved to the index of the parameter with the mapped name.
* **LR schedule**: upstream's ``LambdaLR`` scales a base LR (``learning_rate_peak``) by schedule / peak; here the base
  LR is 1 and the schedule is absolute. The step counters (``last_epoch``) carry over and the base LRs are rewritten,
  so the LR continues from the same step; the importer checks that the destination config's schedule gives
  upstream's saved LR at that step (the schedule keys are not in upstream's files).
* **Reward normaliser**: upstream's ``G_r, G_r_max, G_rms_{mean,var,count}`` <-> ``RewardNormalizer.state_dict()``.
* **Update counter**: ``agent_state.pt``'s ``update_step`` (which update is an actor update).
* **Actor head**: upstream before 2026-06 (the paper era) and upstream HEAD save the same names; the paper-era heads
  are projected to unit rows after every step, HEAD's are not. ``detect_actor_head`` tells them apart by the head
  rows' norms; ``--actor-head`` states it.

* **Architecture**: ``upstream_architecture`` reads it from the actor's and critic's shapes (and the support from
  ``bin_values``; ``agent_common.architecture``), ``upstream_learning_rate_peak`` the peak from the scheduler's base
  LR. ``read_upstream`` checks every file's structure and refuses a missing, truncated or foreign one in one line.

An imported checkpoint is written as ``<dst>/agent/`` (the agent's own files) plus ``<dst>/reward_normalizer.pkl``
and ``<dst>/imported_from.json`` (what was imported, and the ``overrides`` the agent was built with): a run starts
from it with ``agent_init_path=<dst>`` (a new run from its weights, optimizer state and reward normaliser), and
``load_policy`` / ``evaluate`` load it. Exported upstream folders load in upstream's ``train.py`` through its
``agent_load_path``. The command line is ``agent_interop.convert``.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any

import numpy as np

from agent_common.architecture import Architecture, infer_architecture
from agent_common.architecture import detect_actor_head as _detect_head
from agent_common.runs.files import AGENT_DIR, LOOP_STATE_FILE, atomic_pickle, atomic_write_text, read_checkpoint_file
from agent_common.runs.upstream_layout import (
    IMPORTED_FILE,
    REWARD_NORMALIZER_FILE,
    UPSTREAM_FILES,
    is_upstream_checkpoint,
)
from agent_interop.torch_jax import ConversionError

__all__ = [
    "detect_actor_head",
    "export_upstream",
    "import_upstream",
    "read_upstream",
    "torch_name_to_upstream",
    "upstream_architecture",
    "upstream_learning_rate_peak",
    "upstream_to_torch_name",
]

NETS = ("actor", "critic", "target_critic", "temperature")
_BUFFERS = ("running_mean", "running_var", "bin_values")

# (upstream regex, this project's template) per network kind; applied in order, the first match wins.
# The actor and the critic share the encoder's names; upstream wraps each of the actor's linear layers once more
# (``embedder.w.w.weight`` where the critic has ``embedder.w.weight``): ``wrap`` is that extra ``.w``.
def _encoder_rules(wrap: str) -> list[tuple[str, str]]:
    return [
        (r"embedder\.norm\.(\w+)", r"input_bn.\1"),
        (rf"embedder\.w{wrap}\.weight", "embed.weight"),
        (rf"encoder\.(\d+)\.w1{wrap}\.weight", r"blocks.\1.fc1.weight"),
        (rf"encoder\.(\d+)\.w2{wrap}\.weight", r"blocks.\1.fc2.weight"),
        (r"encoder\.(\d+)\.norm1\.(\w+)", r"blocks.\1.bn1.\2"),
        (r"encoder\.(\d+)\.norm2\.(\w+)", r"blocks.\1.bn2.\2"),
        (r"post_norm\.weight", "final_norm.weight"),
    ]


_ACTOR_RULES = _encoder_rules(r"\.w") + [
    (r"predictor\.mean_w\.w\.weight", "mean_head.weight"),
    (r"predictor\.mean_bias", "mean_bias"),
    (r"predictor\.std_w\.w\.weight", "log_std_head.weight"),
    (r"predictor\.std_bias", "log_std_bias"),
]
_CRITIC_RULES = _encoder_rules("") + [
    (r"predictor\.w\.weight", "head.weight"),
    (r"predictor\.bias", "head_bias"),
]
_TEMPERATURE_RULES = [(r"log_temp", "log_temp")]


def _rules(net: str) -> list[tuple[str, str]]:
    return {"actor": _ACTOR_RULES, "critic": _CRITIC_RULES, "target_critic": _CRITIC_RULES,
            "temperature": _TEMPERATURE_RULES}[net]


def upstream_to_torch_name(net: str, name: str) -> str:
    """Upstream state-dict name -> this project's (``encoder.0.w1.w.weight`` -> ``blocks.0.fc1.weight``).

    Raises:
        ConversionError: a name no rule maps.
    """
    name = name.removeprefix("_orig_mod.")  # upstream's compiled modules
    for pattern, template in _rules(net):
        match = re.fullmatch(pattern, name)
        if match:
            return match.expand(template)
    raise ConversionError(f"upstream {net} entry '{name}' has no counterpart in this project's {net}")


def torch_name_to_upstream(net: str, name: str) -> str:
    """This project's state-dict name -> upstream's (the inverse of ``upstream_to_torch_name``).

    Raises:
        ConversionError: a name no rule maps.
    """
    for template, pattern in _rules(net):
        regex = re.escape(pattern).replace(r"\\1", r"(\d+)" if "blocks" in pattern else r"(\w+)")
        regex = regex.replace(r"\\2", r"(\w+)")
        match = re.fullmatch(regex, name)
        if match:
            out = template.replace("\\.", ".")
            for group in match.groups():
                out = re.sub(r"\((?:\\d|\\w)\+\)", group, out, count=1)
            if upstream_to_torch_name(net, out) == name:
                return out
    raise ConversionError(f"{net} entry '{name}' has no counterpart in upstream's {net}")


_OPTIMIZED = ("actor", "critic", "temperature")  # upstream's networks with an optimizer and a scheduler
_NORMALIZER_KEYS = ("G_r", "G_r_max", "G_rms_mean", "G_rms_var", "G_rms_count")


def _load_upstream_file(file: str) -> Any:
    """One of upstream's ``.pt`` files as ``torch.load`` reads it (``weights_only``, as upstream loads its own).

    Raises:
        ConversionError: the file is missing, truncated, or not a torch file; one line naming it and what it looks
            like.
    """
    import torch

    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except (KeyboardInterrupt, SystemExit, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - any reader failure: the file is damaged or foreign
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ConversionError(f"cannot read {file} ({_looks_like(file)}; {type(exc).__name__}: {first})") from None


def _looks_like(file: str) -> str:
    """What an unreadable ``.pt`` file looks like, from its first bytes."""
    import zipfile

    try:
        with open(file, "rb") as f:
            head = f.read(64)
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    if not head:
        return "an empty file"
    if head.startswith(b"PK"):
        try:
            with zipfile.ZipFile(file) as archive:
                bad = archive.testzip()
        except (zipfile.BadZipFile, OSError, EOFError):
            return "a truncated or damaged torch zip archive"
        return (f"a zip archive whose member {bad} is damaged" if bad is not None
                else "a zip archive that is not a torch checkpoint")
    if head.lstrip()[:1] in (b"{", b"["):
        return "a JSON or text file, not a torch file"
    return f"not a torch file (it starts with {head[:8]!r})"


def _check_upstream_file(file: str, name: str, content: Any) -> None:
    """Raises ``ConversionError`` naming ``file`` unless ``content`` has the structure upstream's ``save`` writes for
    ``name`` (``actor`` ... ``temperature``, ``agent_state``, ``reward_normalizer``)."""
    import torch

    def fail(problem: str) -> None:
        raise ConversionError(f"{file} is not upstream FlashSAC's {name}.pt: {problem}")

    if not isinstance(content, dict):
        fail(f"it holds a {type(content).__name__}, upstream's is a dict")
    if name == "agent_state":
        if not isinstance(content.get("update_step"), int | torch.Tensor):
            fail(f"no update_step (keys: {sorted(map(str, content))})")
        return
    if name == "reward_normalizer":
        missing = [k for k in _NORMALIZER_KEYS if not isinstance(content.get(k), torch.Tensor)]
        if missing:
            fail(f"no {', '.join(missing)} tensors (keys: {sorted(map(str, content))})")
        return
    weights = content.get("network_state_dict")
    if not isinstance(weights, dict) or not weights:
        fail(f"no network_state_dict (keys: {sorted(map(str, content))})")
    bad = [k for k, v in weights.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        fail(f"network_state_dict entry {bad[0]!r} is not a named tensor")
    if name not in _OPTIMIZED:
        return
    opt, sched = content.get("optimizer_state_dict"), content.get("scheduler_state_dict")
    if opt is not None and not (isinstance(opt, dict) and isinstance(opt.get("param_groups"), list)
                                and opt["param_groups"] and isinstance(opt.get("state"), dict)):
        fail("optimizer_state_dict is not a torch optimizer's state (state, param_groups)")
    if sched is not None and not (isinstance(sched, dict) and all(k in sched for k in (
            "last_epoch", "_step_count", "_last_lr", "base_lrs"))):
        fail("scheduler_state_dict is not a torch LR scheduler's state (last_epoch, _step_count, _last_lr, base_lrs)")


def read_upstream(path: str) -> dict[str, Any]:
    """Upstream's files in ``path`` as loaded by torch: {"actor": {...}, ..., "agent_state": {...},
    "reward_normalizer": {...} or None}, each checked for the structure upstream's ``save`` writes.

    Raises:
        ConversionError: ``path`` does not hold upstream's layout, or one of its files is missing, truncated, not a
            torch file or not upstream's; one line naming the folder or the file and what is wrong.
    """
    expected = f"an upstream FlashSAC checkpoint folder holds {', '.join(UPSTREAM_FILES)} (and reward_normalizer.pt)"
    if not os.path.isdir(path):
        raise ConversionError(f"{path}: no such directory ({expected})")
    present = sorted(os.listdir(path))
    missing = [f for f in UPSTREAM_FILES if not os.path.isfile(os.path.join(path, f))]
    if len(missing) == len(UPSTREAM_FILES):
        raise ConversionError(f"{path} is not an upstream FlashSAC checkpoint folder ({expected}; found: "
                              f"{', '.join(present) or 'nothing'})")
    if missing:
        raise ConversionError(f"{os.path.join(path, missing[0])} is missing: {expected}")
    out: dict[str, Any] = {}
    for name in (*NETS, "agent_state", "reward_normalizer"):
        file = os.path.join(path, f"{name}.pt")
        if name == "reward_normalizer" and not os.path.exists(file):
            out[name] = None
            continue
        out[name] = _load_upstream_file(file)
        _check_upstream_file(file, name, out[name])
    if not is_upstream_checkpoint(path):
        names = sorted(out["actor"]["network_state_dict"])[:4]
        raise ConversionError(f"{os.path.join(path, 'actor.pt')} holds {names}..., not upstream's actor names "
                              "(embedder.norm.weight, predictor.mean_w.w.weight ...): a checkpoint of this project "
                              "converts with torch-to-jax / jax-to-torch, an agent directory is given as SRC of "
                              "torch-to-upstream")
    return out


def upstream_architecture(path: str, files: dict[str, Any]) -> Architecture:
    """What upstream's actor and critic in ``files`` (``read_upstream``) state (``agent_common.architecture``),
    named in messages by upstream's own entry names."""
    nets: dict[str, dict[str, np.ndarray]] = {}
    atoms = None
    for net in ("actor", "critic"):
        nets[net] = {}
        for up_name, value in files[net]["network_state_dict"].items():
            if up_name.removeprefix("_orig_mod.") == "predictor.bin_values":
                atoms = value.detach().float().numpy()
                continue
            nets[net][upstream_to_torch_name(net, up_name)] = value.detach().float().numpy()

    def rename(net: str, name: str) -> str:
        return "predictor.bin_values" if name == "atoms" else torch_name_to_upstream(net, name)

    return infer_architecture(nets["actor"], nets["critic"], atoms, ("actor.pt", "critic.pt"), path, rename)


def upstream_learning_rate_peak(files: dict[str, Any]) -> float | None:
    """Upstream's ``learning_rate_peak``: its LR scheduler's base LR (its optimizers start at the peak, its
    ``LambdaLR`` scales it by schedule / peak); None without a scheduler state."""
    sched = files["actor"].get("scheduler_state_dict")
    return float(sched["base_lrs"][0]) if sched else None


def detect_actor_head(actor_state: dict[str, Any]) -> tuple[str, str]:
    """("paper" | "upstream", why) from an upstream actor's ``network_state_dict``
    (``agent_common.architecture.detect_actor_head`` on its head weights)."""
    weights = [actor_state[k] for k in ("predictor.mean_w.w.weight", "predictor.std_w.w.weight")]
    return _detect_head(*(w.detach().cpu().numpy() if hasattr(w, "detach") else w for w in weights))


def _param_names(state_dict: dict[str, Any]) -> list[str]:
    """Parameter names of a saved ``network_state_dict`` in ``module.parameters()`` order (buffers dropped)."""
    return [k for k in state_dict if k.rsplit(".", 1)[-1] not in _BUFFERS]


def _reorder_optimizer_state(state: dict[int, Any], from_names: list[str], to_names: list[str]) -> dict[int, Any]:
    """A torch optimizer's per-parameter ``state`` keyed by position in ``from_names`` -> keyed by position in
    ``to_names`` (the same names, this project's spelling, in the other side's parameter order). Tensors are copied
    to the CPU; parameters without state stay without."""
    import torch

    position = {name: i for i, name in enumerate(from_names)}
    out = {}
    for j, name in enumerate(to_names):
        entry = state.get(position[name])
        if entry is not None:
            out[j] = {k: v.detach().cpu().clone() if isinstance(v, torch.Tensor) else v for k, v in entry.items()}
    return out


def _schedule_lr(cfg: Any, step: int) -> float:
    from agent_common.schedule import warmup_cosine_decay

    return float(warmup_cosine_decay(step, cfg.learning_rate_init, cfg.learning_rate_peak, cfg.learning_rate_end,
                                     int(cfg.learning_rate_warmup_step or 0), int(cfg.learning_rate_decay_step or 1)))


def import_upstream(files: dict[str, Any], torch_agent: Any, normalizer: Any | None = None,
                    check_schedule: bool = True, check_head: bool = True) -> dict[str, Any]:
    """Writes an upstream checkpoint (``read_upstream`` output) into a torch agent built with a matching config:
    networks, Adam state (by name), LR schedule position, update counter, and ``normalizer`` (an
    ``agent_common.normalizer.RewardNormalizer``) if given and the checkpoint has one. ``check_head=False`` takes
    the agent's actor head as stated (no detection check); ``check_schedule=False`` keeps the config's schedule.

    Raises:
        ConversionError: a name, shape, support, head or schedule mismatch, naming the entry and the config key.

    Returns:
        What was imported: {"update_step", "actor_head" (detected), "schedule_steps", "reward_normalizer"}.
    """

    head, why = detect_actor_head(files["actor"]["network_state_dict"])
    agent_head = torch_agent.actor.module.head
    if check_head and head != agent_head:
        raise ConversionError(f"the checkpoint's actor head looks like '{head}' ({why}) but the agent is built with "
                              f"agent.actor_head={agent_head}; pass --actor-head {agent_head} only if you are sure")
    bundles = {"actor": torch_agent.actor, "critic": torch_agent.critic, "target_critic": torch_agent.target_critic,
               "temperature": torch_agent.temperature}
    schedule_steps = {}
    for net, bundle in bundles.items():
        saved = files[net]
        module = bundle.module
        ours = module.state_dict()
        new_state = {}
        for up_name, value in saved["network_state_dict"].items():
            if up_name.removeprefix("_orig_mod.") == "predictor.bin_values":
                atoms = ours["atoms"].cpu().numpy()
                if tuple(value.shape[-1:]) != atoms.shape or not np.allclose(value.reshape(-1).numpy(), atoms,
                                                                             atol=1e-6):
                    raise ConversionError(f"{net} support differs: upstream bin_values {value.reshape(-1).tolist()} "
                                          f"vs agent.critic_num_bins / critic_min_v / critic_max_v giving "
                                          f"{atoms.tolist()}")
                continue
            name = upstream_to_torch_name(net, up_name)
            if name not in ours:
                raise ConversionError(f"upstream {net} entry '{up_name}' -> '{name}' is not in the agent's {net}")
            if tuple(ours[name].shape) != tuple(value.shape):
                raise ConversionError(f"{net} '{up_name}' -> '{name}': shape {tuple(value.shape)} in the checkpoint, "
                                      f"{tuple(ours[name].shape)} in the agent (architecture keys: "
                                      "agent.actor_hidden_dim / actor_num_blocks / critic_hidden_dim / ...)")
            new_state[name] = value.to(ours[name].dtype)
        missing = sorted(set(ours) - set(new_state) - {"atoms"})
        if missing:
            raise ConversionError(f"upstream {net} has no entries for {missing}")
        new_state.update({k: v for k, v in ours.items() if k == "atoms"})
        module.load_state_dict(new_state)
        if bundle.optimizer is None:
            continue
        opt = saved["optimizer_state_dict"]
        sched = saved["scheduler_state_dict"]
        if opt is None or sched is None:
            raise ConversionError(f"upstream {net}.pt has no optimizer / scheduler state")
        up_names = [upstream_to_torch_name(net, n) for n in _param_names(saved["network_state_dict"])]
        our_names = [n for n, _ in module.named_parameters()]
        if sorted(up_names) != sorted(our_names):
            raise ConversionError(f"{net} parameters differ: upstream {sorted(up_names)} vs {sorted(our_names)}")
        group = opt["param_groups"][0]
        if len(opt["param_groups"]) != 1 or list(group["params"]) != list(range(len(up_names))):
            raise ConversionError(f"upstream {net} optimizer has an unexpected parameter grouping")
        state = _reorder_optimizer_state(opt["state"], up_names, our_names)
        ours_opt = bundle.optimizer.state_dict()
        step = int(sched["last_epoch"])
        lr = float(sched["_last_lr"][0])
        want = _schedule_lr(torch_agent.cfg.agent, step)
        if check_schedule and not math.isclose(lr, want, rel_tol=1e-9, abs_tol=1e-15):
            a = torch_agent.cfg.agent
            raise ConversionError(
                f"{net}: upstream's LR at schedule step {step} is {lr!r}, this config's schedule gives {want!r} "
                f"(learning_rate_init/peak/end {a.learning_rate_init}/{a.learning_rate_peak}/{a.learning_rate_end}, "
                f"warmup_step {a.learning_rate_warmup_step}, decay_step {a.learning_rate_decay_step}); set the keys "
                "of the upstream run (its decay step is num_env_steps/num_train_envs x UTD), or pass "
                "--no-check-hyperparameters to continue on this config's schedule")
        new_group = dict(ours_opt["param_groups"][0])
        new_group["lr"] = lr
        bundle.optimizer.load_state_dict({"state": state, "param_groups": [new_group]})
        sched_state = bundle.scheduler.state_dict()
        sched_state.update(last_epoch=step, _step_count=int(sched["_step_count"]), _last_lr=[lr])
        bundle.scheduler.load_state_dict(sched_state)
        bundle.ensure_lr_tensors()
        schedule_steps[net] = step
    torch_agent.update_step = int(files["agent_state"]["update_step"])
    torch_agent.state_replaced()
    imported_normalizer = False
    if normalizer is not None and files["reward_normalizer"] is not None:
        rn = files["reward_normalizer"]
        normalizer.load_state_dict({
            "G": rn["G_r"].double().reshape(-1).numpy(),
            "G_max": float(rn["G_r_max"].reshape(-1)[0]),
            "mean": float(rn["G_rms_mean"].reshape(-1)[0]),
            "var": float(rn["G_rms_var"].reshape(-1)[0]),
            "count": float(rn["G_rms_count"].reshape(-1)[0]),
        })
        imported_normalizer = True
    return {"update_step": torch_agent.update_step, "actor_head": head, "actor_head_reason": why,
            "schedule_steps": schedule_steps, "reward_normalizer": imported_normalizer}


def export_upstream(torch_agent: Any, dst: str, normalizer_state: dict[str, Any] | None) -> str:
    """Writes a torch agent (and an ``agent_common.normalizer.RewardNormalizer.state_dict()``) as upstream's files,
    loadable by upstream's ``FlashSACAgent.load`` (its ``agent_load_path``). Upstream's LR base is the config's
    ``learning_rate_peak``, the value upstream's own config must have for the schedule to continue.

    Returns:
        ``dst``.
    """
    import torch

    a = torch_agent.cfg.agent
    peak = float(a.learning_rate_peak)
    bundles = {"actor": torch_agent.actor, "critic": torch_agent.critic, "target_critic": torch_agent.target_critic,
               "temperature": torch_agent.temperature}
    os.makedirs(dst, exist_ok=True)
    for net, bundle in bundles.items():
        module = bundle.module
        state = module.state_dict()
        up_state: dict[str, Any] = {}
        # upstream's order: its module registration order (parameters before buffers within each module)
        for name, value in state.items():
            if name == "atoms":
                continue
            up_state[torch_name_to_upstream(net, name)] = value.detach().cpu().clone()
        if "atoms" in state:
            up_state["predictor.bin_values"] = state["atoms"].detach().cpu().clone().reshape(1, 1, -1)
        up_state = _upstream_order(net, up_state)
        opt_state = sched_state = None
        if bundle.optimizer is not None:
            our_names = [n for n, _ in module.named_parameters()]
            up_names = [upstream_to_torch_name(net, n) for n in _param_names(up_state)]
            saved = bundle.optimizer.state_dict()
            states = _reorder_optimizer_state(saved["state"], our_names, up_names)
            group = dict(saved["param_groups"][0])
            lr = float(group["lr"])
            group.update(lr=lr, initial_lr=peak, fused=False, foreach=None, capturable=False,
                         params=list(range(len(up_names))))
            opt_state = {"state": states, "param_groups": [group]}
            step = bundle.schedule_step
            sched_state = {"base_lrs": [peak], "last_epoch": step, "_step_count": step + 1, "_is_initial": False,
                           "_get_lr_called_within_step": False, "_last_lr": [lr], "lr_lambdas": [None]}
        torch.save({"network_state_dict": up_state, "optimizer_state_dict": opt_state,
                    "scheduler_state_dict": sched_state, "update_step": 0}, os.path.join(dst, f"{net}.pt"))
    scaler = torch_agent.scaler.state_dict() if torch_agent.scaler is not None else {}
    torch.save({"update_step": int(torch_agent.update_step), "grad_scaler_state_dict": scaler},
               os.path.join(dst, "agent_state.pt"))
    if normalizer_state is not None:
        torch.save({
            "G_r": torch.as_tensor(np.asarray(normalizer_state["G"], np.float64).reshape(-1)),
            "G_r_max": torch.tensor([float(normalizer_state["G_max"])], dtype=torch.float32),
            "G_rms_mean": torch.tensor([float(normalizer_state["mean"])], dtype=torch.float64),
            "G_rms_var": torch.tensor([float(normalizer_state["var"])], dtype=torch.float64),
            "G_rms_count": torch.tensor(float(normalizer_state["count"]), dtype=torch.float64),
        }, os.path.join(dst, "reward_normalizer.pt"))
    return dst


def _upstream_order(net: str, state: dict[str, Any]) -> dict[str, Any]:
    """Upstream's state-dict order (which is also its parameter order, buffers aside)."""
    def key(name: str) -> tuple:
        parts = name.split(".")
        if parts[0] == "embedder":
            return (0, 0 if parts[1] == "norm" else 1, _field(parts[-1]))
        if parts[0] == "encoder":
            sub = {"w1": 0, "w2": 1, "norm1": 2, "norm2": 3}[parts[2]]
            return (1, int(parts[1]), sub, _field(parts[-1]))
        if parts[0] == "post_norm":
            return (2,)
        if parts[0] == "predictor":
            order = ["mean_bias", "std_bias", "mean_w", "std_w", "bias", "bin_values", "w"]
            return (3, order.index(parts[1]))
        return (4, name)
    return {k: state[k] for k in sorted(state, key=key)}


def _field(name: str) -> int:
    return {"weight": 0, "bias": 1, "running_mean": 2, "running_var": 3}[name]


# ---------------------------------------------------------------------------------------------------------------
# folders: imported checkpoints (agent/ + reward_normalizer.pkl + imported_from.json)
# ---------------------------------------------------------------------------------------------------------------


def write_imported(dst: str, agent: Any, normalizer_state: dict[str, Any] | None, info: dict[str, Any]) -> str:
    """Saves ``agent`` (either framework) to ``<dst>/agent/``, the normaliser to ``reward_normalizer.pkl`` and
    ``info`` to ``imported_from.json``."""
    os.makedirs(dst, exist_ok=True)
    agent.save(os.path.join(dst, AGENT_DIR))
    if normalizer_state is not None:
        atomic_pickle(os.path.join(dst, REWARD_NORMALIZER_FILE), normalizer_state)
    atomic_write_text(os.path.join(dst, IMPORTED_FILE), json.dumps(info, indent=1, default=str) + "\n")
    return dst


def read_normalizer_state(src: str) -> dict[str, Any] | None:
    """The reward normaliser state of one of this project's checkpoints: an imported folder's
    ``reward_normalizer.pkl`` or a training checkpoint's ``loop_state.pkl``; None when neither is there.

    Raises:
        agent_common.runs.files.CheckpointError: the file is unreadable, naming it.
    """
    imported = os.path.join(src, REWARD_NORMALIZER_FILE)
    if os.path.exists(imported):
        return read_checkpoint_file(imported)
    loop_state = os.path.join(src, LOOP_STATE_FILE)
    if os.path.exists(loop_state):
        return read_checkpoint_file(loop_state).get("reward_normalizer")
    return None
