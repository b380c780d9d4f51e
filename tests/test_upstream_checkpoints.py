"""Upstream FlashSAC checkpoints in and out of both agents, against outputs saved by upstream's own code.

The fixture (tests/fixtures/upstream_f2da589/, README there) is a checkpoint of a tiny HalfCheetah-v4 run of upstream
FlashSAC at f2da589 on the CPU, with upstream's outputs on fixed inputs and its checkpoint after two updates from a
fixed batch with fixed noise, all written by upstream's code. Tolerances are float32 rounding: the same float32
operations in another order (oneDNN / XLA matmuls, ``Normal.log_prob`` vs the closed form from the noise).
"""

from __future__ import annotations

import json
import os
import shutil

import jax
import numpy as np
import pytest
import torch

from agent_common.config import ConfigError, load_config
from agent_common.normalizer import RewardNormalizer
from agent_interop import convert
from agent_interop.parity import torch_noise
from agent_interop.synthetic import make_spaces
from agent_interop.torch_jax import ConversionError, jax_to_torch, torch_to_jax
from agent_interop.upstream import (
    detect_actor_head,
    export_upstream,
    import_upstream,
    read_upstream,
    torch_name_to_upstream,
    upstream_to_torch_name,
)
from tests.agent_test_utils import REPO

FIXTURE = os.path.join(REPO, "tests", "fixtures", "upstream_f2da589")
CKPT = os.path.join(FIXTURE, "step300")
REF = np.load(os.path.join(FIXTURE, "reference", "outputs.npz"))
AFTER = os.path.join(FIXTURE, "reference", "after_updates")
OBS_DIM, ACT_DIM = 17, 6
# the tiny upstream run's architecture and schedule (README), here
ARCH = ["agent.actor_num_blocks=1", "agent.actor_hidden_dim=8", "agent.critic_num_blocks=1",
        "agent.critic_hidden_dim=16", "agent.critic_num_bins=11", "agent.learning_rate_warmup_step=0",
        "agent.learning_rate_decay_step=300", "agent.sample_batch_size=16"]
CPU = ["agent.device_type=cpu", "num_threads=1", "agent.use_compile=false"]
# float32 rounding: network outputs of size ~1-10 through different matmul orders [measured: q 3.6e-7, log-probs
# 7.2e-7, actions 0]; log pi ~ -10 summed over A dims, closed form from eps vs Normal.log_prob [measured 1.9e-6]
ATOL = 5e-6
ATOL_LOG_PI = 2e-5


@pytest.fixture(autouse=True)
def _threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _torch_agent(*overrides: str, head: str = "upstream"):
    from agent_torch.agent import FlashSACAgent

    cfg = load_config([*ARCH, *CPU, "agent.categorical_target_backend=torch", f"agent.actor_head={head}",
                       *overrides], "torch")
    return FlashSACAgent(cfg, *make_spaces(OBS_DIM, ACT_DIM))


def _jax_agent(*overrides: str):
    from agent_jax.agent import FlashSACAgent

    cfg = load_config([*ARCH, *CPU, "agent.categorical_target_backend=jax", "agent.actor_head=upstream", *overrides],
                      "jax")
    return FlashSACAgent(cfg, *make_spaces(OBS_DIM, ACT_DIM))


def _imported(*overrides: str):
    agent = _torch_agent(*overrides)
    normalizer = RewardNormalizer(0.99, 5.0)
    info = import_upstream(read_upstream(CKPT), agent, normalizer)
    return agent, normalizer, info


def _close(got, want, atol, what, rtol=0.0):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)


def test_name_mapping_both_ways():
    assert upstream_to_torch_name("actor", "encoder.0.w1.w.weight") == "blocks.0.fc1.weight"
    assert upstream_to_torch_name("actor", "_orig_mod.predictor.std_w.w.weight") == "log_std_head.weight"
    assert upstream_to_torch_name("critic", "encoder.3.norm2.running_var") == "blocks.3.bn2.running_var"
    assert upstream_to_torch_name("critic", "predictor.bias") == "head_bias"
    files = read_upstream(CKPT)
    for net in ("actor", "critic", "temperature"):
        for name in files[net]["network_state_dict"]:
            if name != "predictor.bin_values":
                assert torch_name_to_upstream(net, upstream_to_torch_name(net, name)) == name
    with pytest.raises(ConversionError, match="no counterpart"):
        upstream_to_torch_name("actor", "predictor.extra.weight")


def test_import_detects_the_head_and_the_update_step():
    agent, normalizer, info = _imported()
    assert info["actor_head"] == "upstream" and info["update_step"] == 201 == int(REF["update_step_before"])
    assert info["schedule_steps"] == {"actor": 101, "critic": 201, "temperature": 101}
    assert info["reward_normalizer"] and normalizer.count == 300.0
    # a paper-era checkpoint (projected heads) is told apart by its head rows
    state = {k: v.clone() for k, v in read_upstream(CKPT)["actor"]["network_state_dict"].items()}
    for key in ("predictor.mean_w.w.weight", "predictor.std_w.w.weight"):
        state[key] = torch.nn.functional.normalize(state[key], dim=-1)
    assert detect_actor_head(state)[0] == "paper"
    with pytest.raises(ConversionError, match="actor head looks like 'upstream'"):
        import_upstream(read_upstream(CKPT), _torch_agent(head="paper"))


def test_torch_outputs_equal_upstreams():
    agent, normalizer, _ = _imported()
    actor, critic, target = agent.actor.module, agent.critic.module, agent.target_critic.module
    obs, act = torch.as_tensor(REF["obs"]), torch.as_tensor(REF["act"])
    with torch.no_grad():
        mean, std = actor.get_mean_and_std(obs, training=False)
        _close(mean, REF["mean"], ATOL, "mean")
        _close(std, REF["std"], ATOL, "std")
        _close(agent.act(REF["obs"], None), REF["det_action"], ATOL, "deterministic action")
        with torch_noise([REF["eps"]]):
            action, log_prob = actor(obs, training=False)
        _close(action, REF["noise_action"], ATOL, "action with fixed noise")
        _close(log_prob, REF["noise_log_prob"], ATOL_LOG_PI, "log-prob with fixed noise")
        for name, net in (("critic", critic), ("target_critic", target)):
            q, log_probs = net(obs, act, training=False)
            _close(q, REF[f"{name}_q"], ATOL, f"{name} q")
            _close(log_probs, REF[f"{name}_log_probs"], ATOL, f"{name} log-probs")
        _close(agent.temperature.module(), REF["temperature"], 0, "temperature")
    _close(normalizer.normalize(REF["batch_reward"]), REF["batch_reward_normalized"], 1e-7, "normalised reward")


def test_jax_outputs_equal_upstreams():
    torch_agent, _, _ = _imported()
    agent = _jax_agent()
    torch_to_jax(torch_agent, agent)
    actor_def = agent._actor_def
    s = agent.state
    actor_vars = {"params": s.actor.params, "batch_stats": s.actor.batch_stats}
    mean, std = actor_def.apply(actor_vars, REF["obs"], False, method="get_mean_and_std")
    _close(mean, REF["mean"], ATOL, "mean")
    _close(std, REF["std"], ATOL, "std")
    _close(agent.act(REF["obs"], None), REF["det_action"], ATOL, "deterministic action")
    action, log_prob = actor_def.apply(actor_vars, mean, std, REF["eps"], method="sample_with_noise")
    _close(action, REF["noise_action"], ATOL, "action with fixed noise")
    _close(log_prob, REF["noise_log_prob"], ATOL_LOG_PI, "log-prob with fixed noise")
    critic_vars = {"params": s.critic.params, "batch_stats": s.critic.batch_stats}
    target_vars = {"params": s.critic.target_params, "batch_stats": s.critic.target_batch_stats}
    for name, variables in (("critic", critic_vars), ("target_critic", target_vars)):
        q, log_probs = s.critic.apply_fn(variables, REF["obs"], REF["act"], False)
        _close(q, REF[f"{name}_q"], ATOL, f"{name} q")
        _close(log_probs, REF[f"{name}_log_probs"], ATOL, f"{name} log-probs")
    _close(s.temperature.apply_fn({"params": s.temperature.params}), REF["temperature"], 0, "temperature")


def _batch() -> dict[str, np.ndarray]:
    keys = ("observation", "action", "terminated", "truncated", "next_observation")
    batch = {k: REF[f"batch_{k}"] for k in keys}
    batch["reward"] = REF["batch_reward_normalized"]  # the agent's update takes normalised rewards
    return batch


def test_two_updates_equal_upstreams_with_upstreams_head():
    """From the same state and batch with the same noise: a critic-only update, then an actor + temperature + critic
    update; parameters, running statistics, Adam moments, learning rates and metrics equal upstream's."""
    agent, _, _ = _imported()
    with open(os.path.join(FIXTURE, "reference", "outputs.json")) as f:
        upstream_metrics = json.load(f)["update_metrics"]
    for i in range(2):
        noises = [REF[f"update{i}_noise{j}"] for j in range(2) if f"update{i}_noise{j}" in REF]
        for net in ("actor", "critic", "temperature"):
            lr = float(getattr(agent, net).optimizer.param_groups[0]["lr"])
            assert lr == pytest.approx(float(REF[f"update{i}_lr_before_{net}"]), rel=1e-12), (i, net)
        with torch_noise(noises):
            metrics = agent.update(_batch())
        for key, want in upstream_metrics[i].items():
            assert metrics[key] == pytest.approx(want, abs=ATOL_LOG_PI if "entropy" in key else ATOL), (i, key)
        assert set(metrics) == set(upstream_metrics[i])
        for net in ("actor", "critic", "temperature"):
            lr = float(getattr(agent, net).optimizer.param_groups[0]["lr"])
            assert lr == pytest.approx(float(REF[f"update{i}_lr_after_{net}"]), rel=1e-12), (i, net)
    after = read_upstream(AFTER)
    assert agent.update_step == int(after["agent_state"]["update_step"]) == 203
    moved = 0.0
    for net in ("actor", "critic", "target_critic", "temperature"):
        bundle = getattr(agent, net)
        ours = bundle.module.state_dict()
        start = read_upstream(CKPT)[net]["network_state_dict"]
        for up_name, want in after[net]["network_state_dict"].items():
            if up_name == "predictor.bin_values":
                continue
            got = ours[upstream_to_torch_name(net, up_name)]
            _close(got, want, 1e-6, f"{net}.{up_name}", rtol=1e-6)  # BN running variances reach ~20
            moved = max(moved, float((want - start[up_name]).abs().max()))
        if bundle.optimizer is None:
            continue
        index = {n: i for i, n in enumerate(n for n, _ in bundle.module.named_parameters())}
        up_names = [k for k in after[net]["network_state_dict"]
                    if k.rsplit(".", 1)[-1] not in ("running_mean", "running_var", "bin_values")]
        for j, up_name in enumerate(up_names):
            want = after[net]["optimizer_state_dict"]["state"][j]
            got = bundle.optimizer.state[list(bundle.module.parameters())[index[upstream_to_torch_name(net, up_name)]]]
            assert float(got["step"]) == float(want["step"]), (net, up_name)
            _close(got["exp_avg"], want["exp_avg"], 1e-7, f"{net}.{up_name} exp_avg")
            _close(got["exp_avg_sq"], want["exp_avg_sq"], 1e-9, f"{net}.{up_name} exp_avg_sq")
    assert moved > 1e-5  # the updates did move the parameters, far beyond the tolerance


def _files_equal(a: str, b: str) -> None:
    """Every entry of upstream's files in ``a`` and ``b`` equal: tensors bitwise (dtype and shape too), the rest ==."""
    def eq(x, y, path):
        if isinstance(x, dict):
            assert isinstance(y, dict) and list(x) == list(y), (path, list(x), y)
            for k in x:
                eq(x[k], y[k], f"{path}/{k}")
        elif isinstance(x, (list, tuple)):
            assert len(x) == len(y), path
            for i, (u, v) in enumerate(zip(x, y, strict=True)):
                eq(u, v, f"{path}[{i}]")
        elif isinstance(x, torch.Tensor):
            assert isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x, y), path
        else:
            assert x == y, (path, x, y)

    for name in ("actor", "critic", "target_critic", "temperature", "agent_state", "reward_normalizer"):
        eq(torch.load(os.path.join(a, f"{name}.pt"), weights_only=False),
           torch.load(os.path.join(b, f"{name}.pt"), weights_only=False), name)


def test_round_trip_upstream_torch_jax_torch_upstream_is_lossless(tmp_path):
    agent, normalizer, _ = _imported()
    jax_agent = _jax_agent()
    torch_to_jax(agent, jax_agent)
    back = _torch_agent("seed=5")
    jax_to_torch(jax_agent, back)
    export_upstream(back, str(tmp_path / "out"), normalizer.state_dict())
    _files_equal(CKPT, str(tmp_path / "out"))


def test_command_line_round_trip_and_start_from_weights(tmp_path):
    """upstream-to-jax, jax-to-upstream through the converter CLI (bitwise), and upstream-to-torch then
    torch-to-upstream."""
    args = [a for o in ARCH for a in ("--overrides", o)]
    assert convert.main(["upstream-to-jax", CKPT, str(tmp_path / "j"), *args]) == 0
    info = json.loads((tmp_path / "j" / "imported_from.json").read_text())
    assert info["actor_head"] == "upstream" and info["framework"] == "jax" and not info["actor_head_stated"]
    assert convert.main(["jax-to-upstream", str(tmp_path / "j"), str(tmp_path / "u"), *args]) == 0
    _files_equal(CKPT, str(tmp_path / "u"))
    assert convert.main(["upstream-to-torch", CKPT, str(tmp_path / "t"), *args]) == 0
    assert convert.main(["torch-to-upstream", str(tmp_path / "t"), str(tmp_path / "u2"), *args]) == 0
    _files_equal(CKPT, str(tmp_path / "u2"))


def test_command_line_refuses_mismatches(tmp_path, capsys):
    args = [a for o in ARCH for a in ("--overrides", o)]
    wide = [*args, "--overrides", "agent.critic_hidden_dim=32"]
    assert convert.main(["upstream-to-torch", CKPT, str(tmp_path / "a"), *wide]) == 2
    assert "shape" in capsys.readouterr().err
    other_schedule = [*args, "--overrides", "agent.learning_rate_decay_step=1000"]
    assert convert.main(["upstream-to-torch", CKPT, str(tmp_path / "b"), *other_schedule]) == 2
    err = capsys.readouterr().err
    assert "learning_rate" in err and "--no-check-hyperparameters" in err
    assert convert.main(["upstream-to-torch", CKPT, str(tmp_path / "b"), *other_schedule,
                         "--no-check-hyperparameters"]) == 0
    assert convert.main(["torch-to-jax", CKPT, str(tmp_path / "c")]) == 2
    assert "python -m agent_interop.convert upstream-to-jax" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "c").exists()


def test_loader_names_upstreams_layout_and_leaves_it_alone(tmp_path):
    run = tmp_path / "upstream_run"
    shutil.copytree(CKPT, run / "step300")
    before = {p: os.stat(os.path.join(dp, p)).st_mtime_ns for dp, _, fs in os.walk(run) for p in fs}
    for path in (run / "step300", run):
        for framework in ("torch", "jax"):
            with pytest.raises(ConfigError) as err:
                load_config([f"agent_load_path={path}"], framework)
            message = str(err.value)
            assert "upstream FlashSAC's checkpoint layout" in message and "interrupted" not in message
            assert f"python -m agent_interop.convert upstream-to-torch {run / 'step300'}" in message
    after = {p: os.stat(os.path.join(dp, p)).st_mtime_ns for dp, _, fs in os.walk(run) for p in fs}
    assert before == after and sorted(os.listdir(run)) == ["step300"]


# ---------------------------------------------------------------------------------------------------------------
# start from weights (agent_init_path)
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def imported_dirs(tmp_path_factory):
    """The fixture converted with the CLI into a torch and a JAX folder."""
    root = tmp_path_factory.mktemp("imported")
    args = [a for o in ARCH for a in ("--overrides", o)]
    assert convert.main(["upstream-to-torch", CKPT, str(root / "t"), *args]) == 0
    assert convert.main(["upstream-to-jax", CKPT, str(root / "j"), *args]) == 0
    return str(root / "t"), str(root / "j")


def test_torch_agent_starts_from_imported_weights(imported_dirs):
    from agent_common.schedule import warmup_cosine_decay

    files = read_upstream(CKPT)
    for load_optimizer in (True, False):
        agent = _torch_agent("seed=3")
        rng = torch.get_rng_state()
        agent.start_from(os.path.join(imported_dirs[0], "agent"), load_optimizer=load_optimizer)
        assert torch.equal(torch.get_rng_state(), rng)  # this run's own RNG stream
        assert agent.update_step == 0
        for net in ("actor", "critic", "target_critic", "temperature"):
            bundle = getattr(agent, net)
            ours = bundle.module.state_dict()
            for up_name, value in files[net]["network_state_dict"].items():
                if up_name != "predictor.bin_values":
                    assert torch.equal(ours[upstream_to_torch_name(net, up_name)], value), (net, up_name)
            if bundle.optimizer is None:
                continue
            assert bundle.schedule_step == 0
            a = agent.cfg.agent
            assert float(bundle.optimizer.param_groups[0]["lr"]) == warmup_cosine_decay(
                0, a.learning_rate_init, a.learning_rate_peak, a.learning_rate_end, 0, 300)
            steps = {float(s["step"]) for s in bundle.optimizer.state.values()}
            assert steps == ({101.0} if net != "critic" else {201.0}) if load_optimizer else steps == set()


def test_jax_agent_starts_from_imported_weights(imported_dirs):
    import optax

    agent = _jax_agent("seed=3")
    key = np.asarray(agent.state.rng).copy()
    agent.start_from(os.path.join(imported_dirs[1], "agent"), load_optimizer=True)
    assert agent.update_step == 0 and np.array_equal(np.asarray(agent.state.rng), key)
    reference = _jax_agent()
    torch_to_jax(_imported()[0], reference)
    for net in ("actor", "critic", "temperature"):
        got, want = getattr(agent.state, net), getattr(reference.state, net)
        for x, y in zip(jax.tree_util.tree_leaves(got.params), jax.tree_util.tree_leaves(want.params), strict=True):
            assert np.array_equal(np.asarray(x), np.asarray(y)), net
        nodes = jax.tree_util.tree_leaves(got.opt_state, is_leaf=lambda n: isinstance(
            n, (optax.ScaleByScheduleState, optax.ScaleByAdamState)))
        counts = {type(n).__name__: int(n.count) for n in nodes
                  if isinstance(n, (optax.ScaleByScheduleState, optax.ScaleByAdamState))}
        assert counts == {"ScaleByAdamState": 201 if net == "critic" else 101, "ScaleByScheduleState": 0}, net


def test_init_path_config_checks(imported_dirs, tmp_path):
    t_dir, j_dir = imported_dirs
    cfg = load_config([*ARCH, f"agent_init_path={t_dir}"], "torch")
    assert cfg.agent_init_path == t_dir and cfg.agent_init_optimizer and cfg.agent_init_reward_normalizer
    with pytest.raises(ConfigError, match="written by the jax agent.*convert it first"):
        load_config([*ARCH, f"agent_init_path={j_dir}"], "torch")
    with pytest.raises(ConfigError, match="upstream-to-jax"):
        load_config([*ARCH, f"agent_init_path={CKPT}"], "jax")
    with pytest.raises(ConfigError, match="give one of them"):
        load_config([*ARCH, f"agent_init_path={t_dir}", f"agent_load_path={t_dir}"], "torch")
    with pytest.raises(ConfigError, match="not a run to resume.*agent_init_path="):
        load_config([f"agent_load_path={t_dir}"], "torch")


def test_training_run_starts_from_the_imported_weights(imported_dirs, tmp_path, capfd):
    """A tiny torch run with agent_init_path: a new run directory, the source named on stderr and in config.yaml,
    the imported reward normaliser continued (count 300 + this run's steps), the update counter from 0."""
    from agent_common.driver import train
    from agent_common.host import host_trainer
    from agent_common.runs.files import load_pickle
    from agent_torch.agent import make_agent

    run_dir = tmp_path / "run"
    cfg = load_config([*ARCH, *CPU, "agent.actor_head=upstream", "agent.categorical_target_backend=torch",
                       f"agent_init_path={imported_dirs[0]}", "num_env_steps=20", "agent.buffer_min_length=16",
                       "env.max_episode_steps=10", "num_eval_episodes=1", "logger_type=none",
                       f"save_path={run_dir}"], "torch")
    result = train(cfg, host_trainer(make_agent))
    err = capfd.readouterr().err
    assert f"new run started from weights, optimizer state, reward normaliser of {imported_dirs[0]}" in err
    assert f"agent_init_path: {imported_dirs[0]}" in (run_dir / "config.yaml").read_text()
    state = load_pickle(os.path.join(result.checkpoint, "loop_state.pkl"))
    assert state["reward_normalizer"]["count"] == 300.0 + 20 and state["interaction_step"] == 20
    agent_state = torch.load(os.path.join(result.checkpoint, "agent", "agent_state.pt"), weights_only=False)
    assert agent_state["update_step"] == 5  # 16..20: this run's own updates, counted from 0
    assert sorted(os.listdir(imported_dirs[0])) == ["agent", "imported_from.json", "reward_normalizer.pkl"]


# ---------------------------------------------------------------------------------------------------------------
# converted folders as first-class: the architecture from the shapes, load_policy / evaluate / export, refusals
# ---------------------------------------------------------------------------------------------------------------

TASK = "env.env_name=HalfCheetah-v4"
POLICY_CPU = ["agent.device_type=cpu", "num_threads=1", "agent.use_compile=false", "env.max_episode_steps=10"]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """The fixture converted with the CLI and no architecture key (the task given): a torch and a JAX folder."""
    root = tmp_path_factory.mktemp("converted")
    for target in ("torch", "jax"):
        assert convert.main([f"upstream-to-{target}", CKPT, str(root / target), "--overrides", TASK]) == 0
    return {"torch": str(root / "torch"), "jax": str(root / "jax")}


def _policy_module(framework: str):
    import agent_jax.policy
    import agent_torch.policy

    return agent_torch.policy if framework == "torch" else agent_jax.policy


def test_converter_reads_the_architecture_from_the_shapes(converted, imported_dirs):
    """Without architecture keys the converter builds the agents the files state (widths, block counts, atoms,
    support, head, LR peak) and writes the same networks and optimizer state as with the run's keys given."""
    from agent_common.runs.files import load_pickle
    from tests.agent_test_utils import assert_nested_equal

    record = json.loads(open(os.path.join(converted["torch"], "imported_from.json")).read())
    assert record["overrides"] == ["agent.actor_num_blocks=1", "agent.actor_hidden_dim=8", "agent.critic_num_blocks=1",
                                   "agent.critic_hidden_dim=16", "agent.critic_num_bins=11",
                                   "agent.normalized_G_max=5.0", "agent.actor_head=upstream",
                                   "agent.learning_rate_peak=0.0003", TASK]
    assert (record["observation_dim"], record["action_dim"]) == (OBS_DIM, ACT_DIM) and not record["schedule_checked"]
    for net in ("actor", "critic", "target_critic", "temperature"):
        ours = torch.load(os.path.join(converted["torch"], "agent", f"{net}.pt"), weights_only=False)
        given = torch.load(os.path.join(imported_dirs[0], "agent", f"{net}.pt"), weights_only=False)
        assert_nested_equal(ours, given, net)
        assert_nested_equal(load_pickle(os.path.join(converted["jax"], "agent", f"{net}.pkl")),
                            load_pickle(os.path.join(imported_dirs[1], "agent", f"{net}.pkl")), net)


@pytest.mark.parametrize(("given", "message"), [
    ("agent.actor_num_blocks=2", "agent.actor_num_blocks=2 does not fit {src}: the file holds 1 (actor.pt "
                                 "encoder.0.w1.w.weight is its last block)"),
    ("agent.critic_num_bins=101", "agent.critic_num_bins=101 does not fit {src}: the file holds 11 (critic.pt "
                                  "predictor.w.weight has shape (2, 11, 16))"),
    ("agent.normalized_G_max=10.0", "agent.critic_min_v/critic_max_v=[-10.0, 10.0] (agent.normalized_G_max=10.0) does "
                                    "not fit {src}: the critic's support is [-5.0, 5.0] (critic.pt "
                                    "predictor.bin_values [-5, 5])"),
    ("agent.learning_rate_peak=0.001", "agent.learning_rate_peak=0.001 does not fit {src}: upstream's scheduler base "
                                       "LR (its learning_rate_peak) is 0.0003"),
], ids=["blocks", "atoms", "support", "lr_peak"])
def test_converter_checks_given_keys_against_the_file(given, message, tmp_path, capsys):
    assert convert.main(["upstream-to-torch", CKPT, str(tmp_path / "out"), "--overrides", given]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: " + message.format(src=CKPT)) and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize(("file", "damage", "message"), [
    ("critic.pt", _truncate, "cannot read {f} (a truncated or damaged torch zip archive; "),
    ("critic.pt", lambda p: p.write_bytes(bytes(range(256)) * 8),
     "cannot read {f} (not a torch file (it starts with b'\\x00\\x01\\x02\\x03\\x04\\x05\\x06\\x07'); "),
    ("critic.pt", lambda p: p.write_text(json.dumps({"network_state_dict": {}})),
     "cannot read {f} (a JSON or text file, not a torch file; "),
    ("critic.pt", os.unlink, "{f} is missing: an upstream FlashSAC checkpoint folder holds actor.pt, critic.pt"),
    ("critic.pt", lambda p: torch.save({"weights": torch.zeros(3)}, p),
     "{f} is not upstream FlashSAC's critic.pt: no network_state_dict (keys: ['weights'])"),
    ("actor.pt", _truncate, "cannot read {f} (a truncated or damaged torch zip archive; "),
    ("agent_state.pt", lambda p: torch.save([1, 2], p),
     "{f} is not upstream FlashSAC's agent_state.pt: it holds a list"),
    ("reward_normalizer.pt", _truncate, "cannot read {f} (a truncated or damaged torch zip archive; "),
], ids=["truncated", "not_torch", "json", "missing", "foreign_torch", "truncated_actor", "foreign_state",
        "truncated_normalizer"])
def test_converter_refuses_an_unreadable_upstream_file_in_one_line(file, damage, message, tmp_path, capsys):
    src = tmp_path / "step300"
    shutil.copytree(CKPT, src)
    damage(src / file)
    before = {p: (src / p).read_bytes() for p in os.listdir(src)}
    assert convert.main(["upstream-to-torch", str(src), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: " + message.format(f=src / file)), err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists() and before == {p: (src / p).read_bytes() for p in os.listdir(src)}


def test_converter_refuses_an_unreadable_agent_file_and_a_used_destination(converted, tmp_path, capsys):
    agent = tmp_path / "agent"
    shutil.copytree(os.path.join(converted["torch"], "agent"), agent)
    _truncate(agent / "critic.pt")
    assert convert.main(["torch-to-jax", str(agent), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot read {agent / 'critic.pt'} (") and err.count("\n") == 1
    assert convert.main(["torch-to-jax", converted["jax"], str(tmp_path / "out")]) == 2
    assert f"holds the jax agent's files ({converted['jax']}/agent), not the torch agent's: python -m " \
           f"agent_interop.convert jax-to-... {converted['jax']}" in capsys.readouterr().err
    assert convert.main(["upstream-to-torch", CKPT, str(agent)]) == 2
    assert capsys.readouterr().err.startswith(f"error: DST {agent} holds actor.pt, agent_state.pt, critic.pt")
    assert not (tmp_path / "out").exists()


def test_help_says_what_src_and_dst_are(capsys):
    with pytest.raises(SystemExit) as exit_:
        convert.main(["--help"])
    text = capsys.readouterr().out
    assert exit_.value.code == 0
    for fragment in ("upstream-to-torch, upstream-to-jax\n      SRC  an upstream FlashSAC checkpoint folder: actor.pt",
                     "torch-to-jax, jax-to-torch\n      SRC  a run directory", "torch-to-upstream, jax-to-upstream",
                     "python -m agent_interop.convert upstream-to-torch ", "python -m agent_torch.evaluate converted"):
        assert fragment in text, fragment


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_converted_folder_loads_as_a_policy_acting_as_upstreams(converted, framework, tmp_path):
    """load_policy on a converted upstream folder: the deterministic actions are upstream's own (fixture), and the
    exported actor gives them too."""
    module = _policy_module(framework)
    policy = module.load_policy(converted[framework], overrides=POLICY_CPU)
    assert policy.cfg.env.env_name == "HalfCheetah-v4" and policy.cfg.agent.actor_head == "upstream"
    assert (policy.observation_dim, policy.action_dim) == (OBS_DIM, ACT_DIM)
    _close(policy(REF["obs"]), REF["det_action"], ATOL, "deterministic action")
    exported = module.load_exported(module.export_actor(policy, str(tmp_path / f"actor.{framework}")))
    _close(exported(REF["obs"]), REF["det_action"], ATOL, "exported action")


def test_evaluate_runs_a_converted_folder_and_refuses_what_is_not_one(converted, imported_dirs, tmp_path, capsys):
    from agent_jax.evaluate import main as evaluate_jax
    from agent_torch.evaluate import main as evaluate

    cpu = [a for o in POLICY_CPU for a in ("--overrides", o)]
    exported = tmp_path / "actor.pt"
    assert evaluate([converted["torch"], "--episodes", "1", *cpu, "--export", str(exported)]) == 0
    out = capsys.readouterr().out
    assert f"checkpoint {converted['torch']} (HalfCheetah-v4, torch, deterministic actions)" in out
    assert "over 1 episodes" in out and exported.is_file()
    refusals = [  # (arguments, what the one error line says)
        ([imported_dirs[0]], f"{imported_dirs[0]} (converted from upstream FlashSAC (leeyngdo/FlashSAC)) does not name "
                             "the task its policy was trained on: give it with --overrides env.env_name=<task>"),
        ([imported_dirs[0], "--overrides", "env.env_name=Hopper-v4"],
         f"env.env_name=Hopper-v4 has 11 observations and 3 actions, the policy in {imported_dirs[0]} takes 17 and "
         "gives 6"),
        ([converted["torch"], "--overrides", "agent.actor_hidden_dim=16"],
         "agent.actor_hidden_dim=16 does not fit"),
        ([converted["torch"], "--replay-last-eval"], f"{converted['torch']} is a converted folder: it holds the agent "
                                                     "only"),
        ([CKPT], f"convert it, then load the converted folder: python -m agent_interop.convert upstream-to-torch "
                 f"{CKPT} <new dir>"),
        ([str(tmp_path)], f"{tmp_path} is not a policy to load (found: actor.pt); expected a run directory"),
    ]
    for args, message in refusals:
        assert evaluate([*args, "--episodes", "1", *cpu]) == 2, args
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, (args, err)
    assert evaluate_jax([converted["torch"], "--episodes", "1", *cpu]) == 2
    assert (f"this is the jax agent; convert it first: python -m agent_interop.convert torch-to-jax "
            f"{converted['torch']}") in capsys.readouterr().err


def test_converted_folders_convert_on_and_load(converted, tmp_path):
    """torch-to-jax of a converted folder (a converted folder of the other framework) and of its bare agent
    directory (no record: the head detected, the task given) load as JAX policies acting as upstream's."""
    from agent_jax.policy import load_policy

    assert convert.main(["torch-to-jax", converted["torch"], str(tmp_path / "j")]) == 0
    assert json.loads((tmp_path / "j" / "imported_from.json").read_text())["framework"] == "jax"
    _close(load_policy(str(tmp_path / "j"), overrides=POLICY_CPU)(REF["obs"]), REF["det_action"], ATOL, "folder")
    assert convert.main(["torch-to-jax", os.path.join(converted["torch"], "agent"), str(tmp_path / "bare")]) == 0
    policy = load_policy(str(tmp_path / "bare"), overrides=[*POLICY_CPU, TASK])
    assert policy.cfg.agent.actor_head == "upstream" and policy.cfg.agent.actor_hidden_dim == 8
    _close(policy(REF["obs"]), REF["det_action"], ATOL, "bare agent directory")


def test_a_run_from_a_converted_folder_names_the_keys_its_networks_need(converted):
    with pytest.raises(ConfigError) as err:
        load_config([f"agent_init_path={converted['torch']}"], "torch")
    assert ("do not fit this run's agent.actor_num_blocks=2, agent.actor_hidden_dim=128, agent.critic_num_blocks=2, "
            "agent.critic_hidden_dim=256, agent.critic_num_bins=101; start the run with --overrides "
            "agent.actor_num_blocks=1 --overrides agent.actor_hidden_dim=8") in str(err.value)
    load_config([f"agent_init_path={converted['torch']}", *(f"agent.{k}" for k in (
        "actor_num_blocks=1", "actor_hidden_dim=8", "critic_num_blocks=1", "critic_hidden_dim=16",
        "critic_num_bins=11"))], "torch")


def test_round_trip_without_architecture_keys_is_lossless(tmp_path):
    """upstream-to-jax with only the schedule keys (which upstream's files do not hold), then jax-to-upstream with
    none (the folder's record has them): upstream's files back bitwise."""
    schedule = ["--overrides", "agent.learning_rate_warmup_step=0", "--overrides", "agent.learning_rate_decay_step=300"]
    assert convert.main(["upstream-to-jax", CKPT, str(tmp_path / "j"), *schedule]) == 0
    assert json.loads((tmp_path / "j" / "imported_from.json").read_text())["schedule_checked"]
    assert convert.main(["jax-to-upstream", str(tmp_path / "j"), str(tmp_path / "u")]) == 0
    _files_equal(CKPT, str(tmp_path / "u"))
