"""Data-parallel training (docs/flashsac.md, "Several GPUs"): torch replicas over gloo, JAX over 2 host devices.

- torch: replicas' parameters are bitwise equal after K updates on different data (BatchNorm running statistics
  are local, as upstream, and differ); averaged gradients match the doubled batch within a derived fp32 bound;
- JAX: the 2-device update is the 1-device update on the doubled batch (BatchNorm statistics and random draws are
  over the whole batch), up to reduction order;
- the torchrun CLI: one run directory, replica-0 logs, per-replica loop state in checkpoints, resume; a killed
  replica stops the run within a bounded time with the last checkpoint intact.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from agent_common.replicas import Replicas
from tests.agent_test_utils import REPO, run_module

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="gloo process groups on Linux")

TORCHRUN_TINY = [
    "num_threads=1",
    "progress_bar=false",
    "env.env_name=Hopper-v4",
    "agent.categorical_target_backend=torch",
    "agent.device_type=cpu",
    "agent.actor_hidden_dim=16",
    "agent.critic_hidden_dim=16",
    "agent.actor_num_blocks=1",
    "agent.critic_num_blocks=1",
    "agent.sample_batch_size=16",
    "agent.buffer_min_length=50",
    "env.max_episode_steps=50",
    "num_eval_episodes=1",
    "evaluation_per_interaction_step=120",
    "logging_per_interaction_step=40",
    "save_checkpoint_per_interaction_step=120",
    "agent.learning_rate_decay_step=240",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)  # keeps a --target site (GPU)
    return dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1", **extra)


def _torchrun(overrides: list[str], nproc: int = 2) -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1",
           f"--master_port={_free_port()}", "-m", "agent_torch.train"]
    for item in overrides:
        cmd += ["--overrides", item]
    return cmd


def test_replicas_schedule():
    r = Replicas(rank=1, world_size=2)
    assert (r.is_main, r.seed(7), r.interval(120, 999), r.interval(5, 999), r.interval(None, 60)) == (
        False, 8, 60, 3, 60)
    assert r.state_dir("/c") == os.path.join("/c", "ranks", "rank1") and Replicas().state_dir("/c") == "/c"
    with pytest.raises(ValueError, match="rank"):
        Replicas(rank=2, world_size=2)


def test_launch_from_env_reads_torchrun_variables():
    from agent_torch.distributed import launch_from_env

    assert launch_from_env({}) is None and launch_from_env({"WORLD_SIZE": "1"}) is None
    launch = launch_from_env({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"})
    assert (launch.rank, launch.world_size, launch.local_rank) == (1, 2, 1)
    with pytest.raises(ValueError, match="RANK is not set"):
        launch_from_env({"WORLD_SIZE": "2"})
    with pytest.raises(ValueError, match="RANK must be an integer"):
        launch_from_env({"WORLD_SIZE": "2", "RANK": "x", "LOCAL_RANK": "0"})
    with pytest.raises(ValueError, match="RANK must be in"):
        launch_from_env({"WORLD_SIZE": "2", "RANK": "2", "LOCAL_RANK": "0"})


def test_num_devices_config_errors(tmp_path):
    torch_run = run_module("agent_torch.train", overrides=["num_devices=2", f"save_path={tmp_path / 'a'}"],
                           timeout=120)
    assert torch_run.returncode == 2 and "num_devices" in torch_run.stderr and "torchrun" in torch_run.stderr
    import jax

    from agent_jax.parallel import make_mesh

    with pytest.raises(ValueError, match="num_devices=64 but JAX sees"):
        make_mesh(64, jax.devices("cpu")[0])


def _torch_worker(tmp_path, device: str, overrides: tuple[str, ...] = ()) -> dict:
    out = tmp_path / "dp.json"
    env = _env()
    if device == "cuda":
        env.pop("TRITON_INTERPRET", None)  # conftest's CPU interpreter: the GPU run compiles the Triton kernel
    proc = subprocess.run([sys.executable, os.path.join(REPO, "tests", "data_parallel_torch_worker.py"),
                           str(_free_port()), str(out), device, *overrides], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def _torch_cuda_devices() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.skipif(_torch_cuda_devices() < 2, reason="needs 2 CUDA devices (NCCL)")
@pytest.mark.parametrize("scope", ["networks", "update"])
def test_nccl_replicas_bitwise_equal_with_the_all_reduce_in_the_captured_update(tmp_path, scope):
    # compile_scope=update: the compiled update's pieces (Inductor) with the all-reduce between them, in the graph
    result = _torch_worker(tmp_path, "cuda", () if scope == "networks" else (
        "agent.use_compile=true", "agent.compile_scope=update", "agent.compile_mode=default"))
    rep = result["replicas"]
    assert rep["device"] == "cuda:0" and rep["cuda_graphs"] == 2  # both update variants captured, then replayed
    assert rep["params_checked"] > 30 and rep["params_unequal"] == [] and rep["buffers_unequal"]
    assert result["doubled_batch"]["max_ratio_to_bound"] <= 1.0 < result["doubled_batch"]["local_gap_ratio"]


def test_torch_replicas_bitwise_equal_and_averaged_gradient_matches_doubled_batch(tmp_path):
    result = _torch_worker(tmp_path, "cpu")
    rep = result["replicas"]
    # different initial seeds and different batches on the two replicas: the broadcast and the averaged gradients
    # keep every parameter (and the EMA target) bitwise equal; local BatchNorm running statistics differ
    assert rep["params_checked"] > 30 and rep["params_unequal"] == []
    assert rep["buffers_unequal"], "BatchNorm running statistics should follow each replica's own data"
    assert rep["critic_moved"] > 1e-4
    db = result["doubled_batch"]
    assert db["max_ratio_to_bound"] <= 1.0  # averaged gradient of 2 x B rows == gradient of 2B rows, within bound
    assert db["local_gap_ratio"] > 100.0  # a replica's own (un-averaged) gradient is far outside it


def test_jax_two_devices_match_one_device_doubled_batch():
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "tests", "data_parallel_jax_worker.py")],
        env=_env(XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu"),
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["replicas_equal"] and r["devices"] == [0, 1]
    assert r["checkpoint_round_trip"] and r["act_shape"] == [3, 3]
    # Only the order of the reductions over the 2B rows differs (both runs see the same rows, BN statistics over
    # all of them, the same random draws). Losses: a mean over n = 2B rows of non-negative terms, fp32 summation
    # error <= n u relative, times 4 for the BatchNorm reductions upstream of it.
    n, u = 2 * 16, 2.0**-24
    for m2, m1 in zip(r["metrics_2"], r["metrics_1"], strict=True):
        assert m2.keys() == m1.keys()
        for key in m2:
            assert abs(m2[key] - m1[key]) <= 4 * n * u * max(abs(m1[key]), 1.0), key
    # Parameters (magnitude <= 1 after the projection): each of the K Adam steps rounds to the fp32 grid of the
    # parameter, so results that differ before rounding only by the reduction order end <= 2 ulp(1) apart per step.
    updates = len(r["metrics_1"])
    assert r["max_param_diff"] <= updates * 2 * 2.0**-23
    assert r["max_param_move"] > 100 * updates * 2 * 2.0**-23  # the bound is far below what training moves


def _ranks_of(parent: int) -> dict[int, int]:
    """{RANK: pid} of the worker processes torchrun (``parent``) started."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            if b"RANK" in env:
                out[int(env[b"RANK"])] = int(pid)
        except (OSError, ValueError, IndexError):
            continue
    return out


def test_torchrun_cli_writes_one_run_and_resumes(tmp_path):
    run_dir = tmp_path / "run"
    first = subprocess.run(_torchrun([*TORCHRUN_TINY, "num_env_steps=240", f"save_path={run_dir}"]), env=_env(),
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.count("[completed]") == 1  # replica 0 alone prints the summary
    host = socket.gethostname()
    assert f"Data parallel: torchrun world size 2 (gloo), replicas on rank 0 {host}/cpu, rank 1 {host}/cpu" in (
        first.stderr)
    assert sorted(os.listdir(run_dir)) == ["checkpoints", "config.yaml", "eval.csv", "tb"]
    assert len(os.listdir(run_dir / "tb")) == 1
    steps = [line.split(",")[5] for line in (run_dir / "eval.csv").read_text().splitlines()[1:]]
    assert steps == ["0.0", "0.0", "120.0", "120.0", "240.0", "240.0"]  # global env steps: 2 replicas x 60 steps
    ckpt = run_dir / "checkpoints" / "step240"
    assert (ckpt / "COMPLETE").exists() and (ckpt / "ranks" / "rank1" / "loop_state.pkl").exists()
    resumed = subprocess.run(_torchrun(["num_env_steps=360", f"agent_load_path={run_dir}"]), env=_env(),
                             capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr and (run_dir / "checkpoints" / "step360" / "COMPLETE").exists()
    assert (run_dir / "eval.csv").read_text().splitlines()[-1].split(",")[5] == "360.0"
    single = run_module("agent_torch.train", overrides=["num_env_steps=480", f"agent_load_path={run_dir}"],
                        timeout=120)
    assert single.returncode == 2 and "written by 2 replica(s), this run has 1" in single.stderr
    budget = subprocess.run(_torchrun(["num_env_steps=1000000", "max_wall_seconds=2", f"agent_load_path={run_dir}"]),
                            env=_env(), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert budget.returncode == 0 and budget.stdout.count("[budget]") == 1, budget.stderr[-3000:]
    from agent_common.runs.checkpoints import latest_checkpoint
    from agent_common.runs.files import read_checkpoint_file

    latest = latest_checkpoint(str(run_dir))  # both replicas stopped at the same step, each saved its buffer
    for state_dir in (latest, os.path.join(latest, "ranks", "rank1")):
        state = read_checkpoint_file(os.path.join(state_dir, "loop_state.pkl"))
        assert state["buffer_saved"] and state["env_step"] == int(latest.rsplit("step", 1)[1]) > 360


@pytest.mark.parametrize("failure", ["killed", "hung"])
def test_failed_replica_stops_the_run_with_the_last_checkpoint_intact(tmp_path, failure):
    """A killed replica (SIGKILL): gloo sees the closed connection at once. A hung one (SIGSTOP): the others' next
    collective times out after distributed_timeout_seconds. Either way replica 0 ends with one line naming the
    newest complete checkpoint, which stays loadable."""
    run_dir = tmp_path / "run"
    timeout = 5
    overrides = [*TORCHRUN_TINY, "num_env_steps=100000", "save_checkpoint_per_interaction_step=100",
                 "evaluation_per_interaction_step=100000", f"save_path={run_dir}",
                 f"distributed_timeout_seconds={timeout}"]
    err = tmp_path / "stderr.txt"
    with open(err, "w") as err_file:
        proc = subprocess.Popen(_torchrun(overrides), env=_env(), stdout=subprocess.DEVNULL, stderr=err_file,
                                text=True, cwd=tmp_path)
    ranks: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 240
        while not (run_dir / "checkpoints" / "step200" / "COMPLETE").exists():
            assert proc.poll() is None, err.read_text()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint within 240 s"
            time.sleep(0.2)
        ranks = _ranks_of(proc.pid)
        assert set(ranks) == {0, 1}, ranks
        os.kill(ranks[1], signal.SIGKILL if failure == "killed" else signal.SIGSTOP)
        failed = time.monotonic()
        while "a collective failed" not in err.read_text() and time.monotonic() - failed < timeout + 55:
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        reported = time.monotonic() - failed
        if failure == "hung":
            os.kill(ranks[1], signal.SIGKILL)  # torchrun's SIGTERM cannot end a stopped process
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = err.read_text()
    assert proc.returncode != 0
    assert reported < (10 if failure == "killed" else timeout + 30), f"stopped after {reported:.0f} s"
    from agent_common.runs.checkpoints import latest_checkpoint
    from agent_common.runs.files import read_checkpoint_file

    latest = latest_checkpoint(str(run_dir))
    assert latest is not None
    # replica 0's own line; after a kill, torchrun may end replica 0 first, and its report names the killed rank
    ours = "a collective failed" in stderr and f"the newest complete one is {latest}" in stderr
    assert ours or (failure == "killed" and f"Signal 9 (SIGKILL) received by PID {ranks[1]}" in stderr), stderr[-3000:]
    state = read_checkpoint_file(os.path.join(latest, "loop_state.pkl"))
    assert state["world_size"] == 2 and state["env_step"] >= 200
    assert read_checkpoint_file(os.path.join(latest, "ranks", "rank1", "loop_state.pkl"))["env_step"] == (
        state["env_step"])
