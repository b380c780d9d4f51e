"""Issue 17 on one GPU: both agents' training speed on MJX and a 3-seed learning curve, in two chained device calls
of under 10 minutes on one warm machine (docs/flashsac.md section 8).

    python3 -m bench.gpu_mjx call1 --deadline-s 530   # record, warm-up, speed sweep, env speed, learning started
    python3 -m bench.gpu_mjx call2 --deadline-s 540   # waits for the learning runs, packs everything

Issue call 2 within 30 s of call 1's end: the machine keeps the detached learning runs only that long. After every
phase a call packs ``--root`` (default /tmp/gpu_mjx; without checkpoints or the compilation cache) into
``$OUT/gpu_mjx_call<N>.tgz``, so a call cut short still returns what ran. Unpack call 2's archive into
``bench/results/<gpu>-<date>-mjx-training/`` and run ``python -m bench.mjx_learning`` on it.

Call 1, bounded by ``--deadline-s`` from its start:

1. ``gpu.txt`` and ``environment.json``: the GPU, the software, the inherited XLA_FLAGS.
2. Warm-up: every program of steps 3-5 compiled at once, in parallel processes (each bounded by
   ``--warm-timeout-s``), into one persistent JAX compilation cache (``ROOT/jax_cache``; the torch agent's env step
   is a JAX program too, its Triton kernels go to Triton's own disk cache): each speed-sweep run once as it will be
   timed (the same command), the learning recipe once with a spare seed until its first call ends
   (``max_wall_seconds=1``: its evaluation and training programs), and the env-speed programs under each XLA_FLAGS
   variant. Compiling is mostly host work, so together they take about as long as the slowest; their timings are
   not used (``ROOT/warm/``).
3. Speed sweep, one process at a time (the GPU to itself): ``python -m bench.mjx_training_speed`` for the JAX agent,
   then the torch agent, at ``--envs`` on upstream's GPU recipe (``ROOT/sweep/<agent>/``). A run that would start
   after ``--learn-start-by-s`` is skipped and one that overruns ``--run-timeout-s`` is killed; both are recorded
   and the other runs keep their results.
4. The batched env step alone (``python -m bench.mjx_env_speed`` at ``--env-speed-envs``) under each
   ``--xla-variant`` (``ROOT/env_speed/v<i>/``; none by default: the CLIs and ``bench.mjx_env_speed`` already run MJX
   with ``mjx_envs.recipe.DEVICE_LOOPS_FLAG``, measured in bench/results/h200-2026-12-01-xla-flags), then the torch
   agent without AMP at ``--noamp-envs`` (CUDA-graph
   updates; ``ROOT/sweep/torch-noamp/``), while time is left before ``--learn-start-by-s``.
5. The learning runs (``learning_overrides``: the JAX agent on upstream's GPU recipe, evaluated every
   ``--eval-every`` interaction steps) start detached (setsid), one per ``--learn-seeds`` entry, in
   ``ROOT/learn/seed<s>/``, with ``max_wall_seconds`` set so that each ends, its final checkpoint included,
   ``--pack-s`` before call 2's deadline (``learn_wall_seconds``); ``ROOT/learn/launch.json`` records when and how.

Then call 1 reports the runs' progress until its deadline, and call 2 waits for them to exit.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence

from agent_jax.compilation_cache import jax_cache_env
from bench.common import REPO, environment
from bench.paired_training import PAIRS, child_env, merge_overrides, timed_run

__all__ = ["learn_wall_seconds", "learning_overrides", "main", "parse_args"]

ARCHIVE_EXCLUDE = ("checkpoints", "jax_cache")
RESULT_LINE = re.compile(r"^\[(?:completed|budget|interrupted)\] .*$", re.M)  # agent_common.loop.run_cli's summary


def learning_overrides(a: argparse.Namespace, seed: int, run_dir: str, max_wall_seconds: int) -> list[str]:
    """The learning run's overrides: upstream's GPU recipe for the JAX agent (``mjx_envs.recipe.gpu_recipe``: 1024
    envs, batch 2048, UTD 2, 10M-row device replay filled to 100k before updates, 50M env steps, so the LR schedule
    is that run's), evaluated every ``--eval-every`` interaction steps on ``--eval-episodes`` episodes (as many eval
    envs: one round), no checkpoint before the stop and none with replay rows but that one (``max_wall_seconds``),
    the strict fused target; then ``--overrides`` and ``--learn-overrides``."""
    from mjx_envs.recipe import gpu_recipe

    backend = a.backend["jax"]
    ours = [f"num_train_envs={a.learn_envs}", f"num_eval_envs={a.eval_episodes}",
            f"num_eval_episodes={a.eval_episodes}", f"evaluation_per_interaction_step={a.eval_every}",
            f"logging_per_interaction_step={a.learn_log_every}", "save_checkpoint_per_interaction_step=1_000_000_000",
            "save_buffer=false", "progress_bar=false", f"agent.categorical_target_backend={backend}",
            "agent.categorical_target_strict=true"]
    merged = merge_overrides(merge_overrides(merge_overrides(gpu_recipe(a.task, "jax"), ours), a.overrides),
                             a.learn_overrides)
    return merged + [f"seed={seed}", f"save_path={run_dir}", f"max_wall_seconds={max(1, int(max_wall_seconds))}"]


def learn_wall_seconds(call1_left_s: float, a: argparse.Namespace) -> int:
    """``max_wall_seconds`` of runs started with ``call1_left_s`` of call 1 left: the time until ``--pack-s`` before
    call 2's deadline (``--gap-s`` between the calls), less the start-up before training (``--startup-s``: imports,
    env and agent construction, the initial evaluation) and the stop after the budget (``--stop-s``: the call and
    evaluation in progress, the final checkpoint with the replay rows). At least 1."""
    left = call1_left_s + a.gap_s + a.call2_deadline_s - a.pack_s
    return max(1, int(left - a.startup_s - a.stop_s))


# ---------------------------------------------------------------------------------------------------------- runner


class Phase:
    """One call's clock, root folder, output archive and shared child environment."""

    def __init__(self, a: argparse.Namespace, name: str) -> None:
        self.a, self.name = a, name
        self.t0 = time.monotonic()
        self.root = os.path.abspath(a.root)
        self.out = os.path.abspath(a.out)
        self.cache = os.path.join(self.root, "jax_cache")
        for sub in ("logs", "warm", "sweep", "env_speed", "learn"):
            os.makedirs(os.path.join(self.root, sub), exist_ok=True)
        os.makedirs(self.out, exist_ok=True)
        # no JAX process reserves most of the GPU (several share it in the warm-up and the learning runs)
        self.env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", **jax_cache_env(self.cache)}

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self, until_s: float | None = None) -> float:
        return (self.a.deadline_s if until_s is None else until_s) - self.elapsed()

    def say(self, text: str) -> None:
        print(f"[{self.name} {self.elapsed():5.0f}s] {text}", flush=True)

    def log(self, tag: str) -> str:
        return os.path.join(self.root, "logs", f"{self.name}-{tag}.log")

    def record(self, name: str, value: object) -> None:
        path = os.path.join(self.root, f"{self.name}.json")
        data = json.load(open(path)) if os.path.isfile(path) else {}
        data[name] = value
        with open(path, "w") as f:
            json.dump(data, f, indent=1, default=str)

    def pack(self) -> None:
        """``root`` without ``ARCHIVE_EXCLUDE`` folders into ``out/gpu_mjx_<name>.tgz`` (written, then renamed)."""
        path = os.path.join(self.out, f"gpu_mjx_{self.name}.tgz")

        def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
            return None if set(info.name.split("/")) & set(ARCHIVE_EXCLUDE) else info

        with tarfile.open(path + ".tmp", "w:gz") as tar:
            tar.add(self.root, arcname=os.path.basename(self.root), filter=keep)
        os.replace(path + ".tmp", path)
        self.say(f"packed {path} ({os.path.getsize(path) / 2**20:.2f} MiB)")

    def run(self, tag: str, cmd: list[str], timeout_s: float, extra_env: dict[str, str] | None = None) -> dict:
        """One process in the foreground (``timed_run``), recorded under ``tag``."""
        rec = timed_run(cmd, self.log(tag), timeout_s, {**self.env, **(extra_env or {})})
        rec.pop("log_tail", None)
        self.say(f"{tag}: rc={rec['returncode']} in {rec['wall_s']:.0f} s")
        self.record(tag, rec)
        return rec

    def start(self, tag: str, cmd: list[str], extra_env: dict[str, str] | None = None,
              detach: bool = False) -> subprocess.Popen:
        """One process in the background; ``detach``: in its own session (setsid), so it outlives this call."""
        log = open(self.log(tag), "w")
        log.write(f"$ {' '.join(cmd)}\n")
        log.flush()
        return subprocess.Popen(cmd, cwd=REPO, env=child_env({**self.env, **(extra_env or {})}), stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=detach)


def _speed_command(a: argparse.Namespace, framework: str, envs: Sequence[int], out: str, timeout_s: float,
                   extra: Sequence[str] = (), budget_s: float | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "bench.mjx_training_speed", "--out", out, "--framework", framework, "--task", a.task,
           "--envs", *map(str, envs), "--steps", str(a.steps), "--warmup-steps", str(a.warmup_steps),
           "--log-every", str(a.log_every), "--backend", a.backend[framework], "--timeout-s", str(int(timeout_s)),
           "--cache-dir", os.path.join(os.path.abspath(a.root), "jax_cache")]
    for o in [*a.overrides, *extra]:
        cmd += ["--overrides", o]
    return cmd + (["--budget-s", str(int(budget_s))] if budget_s is not None else [])


def _env_speed_command(a: argparse.Namespace, out: str, repeats: int) -> list[str]:
    return [sys.executable, "-m", "bench.mjx_env_speed", "--out", out, "--task", a.task, "--envs",
            *map(str, a.env_speed_envs), "--steps", str(a.env_speed_steps), "--repeats", str(repeats)]


def _xla_env(variant: str) -> dict[str, str]:
    """XLA_FLAGS of a variant: the inherited flags with the variant's appended."""
    return {"XLA_FLAGS": " ".join(f for f in (os.environ.get("XLA_FLAGS", ""), variant) if f)}


def _train_command(framework: str, overrides: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", PAIRS[framework][0]] + [arg for o in overrides for arg in ("--overrides", o)]


def _alive(pid: int, run_dir: str) -> bool:
    """Whether ``pid`` still runs the learning run of ``run_dir`` (not a reused pid)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return run_dir.encode() in f.read()
    except OSError:
        return False


def _reap() -> None:
    """Collects exited children of this process (detached runs started by call 1 are its children there)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def _status(p: Phase, launch: dict) -> bool:
    """One line per learning run (alive, last evaluation, the CLI's result line); whether any is alive."""
    _reap()
    any_alive = False
    for seed, run in launch.get("runs", {}).items():
        alive = _alive(run["pid"], run["run_dir"])
        any_alive |= alive
        last = ""
        csv_path = os.path.join(run["run_dir"], "eval.csv")
        if os.path.isfile(csv_path):
            rows = [r for r in open(csv_path).read().splitlines() if ",avg_return," in r]
            last = rows[-1].split(",", 5)[-1] if rows else ""
        text = open(run["log"], errors="replace").read() if os.path.isfile(run["log"]) else ""
        result = RESULT_LINE.findall(text)
        p.say(f"seed {seed}: {'running' if alive else 'stopped'}; last eval (env step, return) {last or '-'}"
              + (f"; {result[-1]}" if result else ""))
    return any_alive


def _wait_runs(p: Phase, launch: dict, until_s: float, every_s: float) -> None:
    """Status lines every ``every_s`` until no learning run is alive or ``until_s`` of this call has passed."""
    while _status(p, launch) and p.left(until_s) > 0:
        time.sleep(max(0.5, min(every_s, p.left(until_s))))


# ----------------------------------------------------------------------------------------------------------- calls


def call1(a: argparse.Namespace) -> int:
    p = Phase(a, "call1")
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True) if shutil.which("nvidia-smi") else None
    with open(os.path.join(p.root, "gpu.txt"), "w") as f:
        f.write(smi.stdout if smi is not None else "no nvidia-smi\n")
    info = environment()
    for dist in ("brax", "mujoco", "mujoco-mjx", "flax", "optax", "tensorboard"):
        try:
            import importlib.metadata as md

            info[dist] = md.version(dist)
        except Exception:  # noqa: BLE001  not installed
            info[dist] = None
    info.update(xla_flags=os.environ.get("XLA_FLAGS", ""), child_env=p.env, args=vars(a))
    with open(os.path.join(p.root, "environment.json"), "w") as f:
        json.dump(info, f, indent=1, default=str)
    p.say(f"gpu: {(smi.stdout.strip() if smi else 'none')}; jax {info.get('jax')}, torch {info.get('torch')}")

    # 2. warm-up: every program once, all processes at once; (process, seconds after which it is killed)
    jobs: dict[str, tuple[subprocess.Popen, float]] = {}
    for fw in ("jax", "torch"):
        for n in a.envs:  # mjx_training_speed kills its own child at the time-out
            out = os.path.join(p.root, "warm", f"{fw}-{n}")
            jobs[f"warm-{fw}-{n}"] = (p.start(f"warm-{fw}-{n}", _speed_command(a, fw, [n], out, a.warm_timeout_s)),
                                      a.warm_timeout_s + 15)
    warm_dir = os.path.join(p.root, "warm", "learn")
    jobs["warm-learn"] = (p.start("warm-learn", _train_command("jax", learning_overrides(a, a.warm_seed, warm_dir,
                                                                                          1))), a.warm_timeout_s)
    for i, v in enumerate(a.xla_variant):  # a variant that hangs must not hold up the rest
        jobs[f"warm-env-v{i}"] = (p.start(f"warm-env-v{i}", _env_speed_command(
            a, os.path.join(p.root, "warm", f"env-v{i}"), 1), _xla_env(v)), a.env_warm_timeout_s)
    p.say(f"warm-up: {len(jobs)} processes")
    started, codes = time.monotonic(), {}
    while len(codes) < len(jobs):
        for tag, (proc, timeout) in jobs.items():
            if tag in codes:
                continue
            if proc.poll() is not None:
                codes[tag] = proc.returncode
                p.say(f"{tag}: rc={proc.returncode} after {time.monotonic() - started:.0f} s")
            elif time.monotonic() - started > timeout:
                proc.kill()
                proc.wait()
                codes[tag] = "timeout"
                p.say(f"{tag}: killed at its time-out ({timeout:.0f} s)")
        time.sleep(1.0)
    p.record("warm", {"seconds": round(time.monotonic() - started, 1), "returncodes": codes})
    p.pack()

    # 3. the speed sweep, one process at a time
    for fw in ("jax", "torch"):
        budget = p.left(a.learn_start_by_s)
        if budget < a.min_run_s:
            p.say(f"sweep-{fw}: skipped ({budget:.0f} s left before the learning runs)")
            continue
        p.run(f"sweep-{fw}", _speed_command(a, fw, a.envs, os.path.join(p.root, "sweep", fw), a.run_timeout_s,
                                            budget_s=budget), budget + 30)
        p.pack()

    # 4. the env step alone under each XLA_FLAGS variant, then the torch agent without AMP
    for i, v in enumerate(a.xla_variant):
        left = p.left(a.learn_start_by_s)
        if left < a.min_run_s:
            p.say(f"env-speed-v{i}: skipped ({left:.0f} s left)")
            continue
        p.run(f"env-speed-v{i}", _env_speed_command(a, os.path.join(p.root, "env_speed", f"v{i}"),
                                                    a.env_speed_repeats), min(a.run_timeout_s, left), _xla_env(v))
    if a.noamp_envs:
        budget = p.left(a.learn_start_by_s)
        if budget >= a.min_run_s:
            p.run("sweep-torch-noamp", _speed_command(
                a, "torch", a.noamp_envs, os.path.join(p.root, "sweep", "torch-noamp"), a.run_timeout_s,
                ["agent.use_amp=false"], budget), budget + 30)
        else:
            p.say(f"sweep-torch-noamp: skipped ({budget:.0f} s left)")
    p.pack()

    # 5. the learning runs, detached
    # the learning warm-up exited with an error (a time-out says nothing): no strict fused target, it may be the cause
    learn_strict = codes.get("warm-learn") in (0, "timeout")
    wall = learn_wall_seconds(p.left(), a)
    launch: dict = {"max_wall_seconds": wall, "call1_elapsed_s": round(p.elapsed(), 1), "runs": {},
                    "warm_learn_rc": codes.get("warm-learn")}
    for seed in a.learn_seeds:
        run_dir = os.path.join(p.root, "learn", f"seed{seed}")
        overrides = learning_overrides(a, seed, run_dir, wall)
        if not learn_strict:
            overrides = merge_overrides(overrides, ["agent.categorical_target_backend=auto",
                                                    "agent.categorical_target_strict=false"])
        cmd = _train_command("jax", overrides)
        proc = p.start(f"learn-seed{seed}", cmd, detach=True)
        launch["runs"][str(seed)] = {"pid": proc.pid, "run_dir": run_dir, "launch_unix": time.time(),
                                     "log": p.log(f"learn-seed{seed}"), "cmd": " ".join(cmd)}
        with open(os.path.join(run_dir + ".launch.json"), "w") as f:  # beside the run: bench.mjx_learning reads it
            json.dump(launch["runs"][str(seed)], f, indent=1)
    with open(os.path.join(p.root, "learn", "launch.json"), "w") as f:
        json.dump(launch, f, indent=1)
    time.sleep(5.0)  # until the children have exec'd: before, their command line is this process's (``_alive``)
    p.say(f"learning runs started: seeds {a.learn_seeds}, max_wall_seconds={wall}"
          + ("" if learn_strict else " (warm-up failed: backend auto, not strict)"))
    _wait_runs(p, launch, a.deadline_s - 10, a.status_every_s)
    p.pack()
    return 0


def call2(a: argparse.Namespace) -> int:
    p = Phase(a, "call2")
    path = os.path.join(p.root, "learn", "launch.json")
    if not os.path.isfile(path):
        p.say(f"no {path}: call 1 did not start the learning runs here (a fresh machine?)")
        p.pack()
        return 1
    launch = json.load(open(path))
    _wait_runs(p, launch, a.deadline_s - a.pack_s, a.status_every_s)
    for seed, run in launch["runs"].items():
        if _alive(run["pid"], run["run_dir"]):  # overran: SIGTERM stops it after its call, with a checkpoint
            os.kill(run["pid"], signal.SIGTERM)
            p.say(f"seed {seed}: still running, sent SIGTERM")
    _wait_runs(p, launch, a.deadline_s - 10, 2.0)  # the evaluations so far are in eval.csv and tb/ either way
    p.pack()
    return 0


def _backends(values: Sequence[str]) -> dict[str, str]:
    out = {fw: PAIRS[fw][2] for fw in PAIRS}
    for v in values:
        fw, _, name = v.partition("=")
        if fw not in PAIRS or not name:
            raise argparse.ArgumentTypeError(f"--backend: expected torch=NAME or jax=NAME, got {v!r}")
        out[fw] = name
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_mjx", description=__doc__.split("\n\n")[0])
    ap.add_argument("call", choices=("call1", "call2"))
    ap.add_argument("--root", default="/tmp/gpu_mjx")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--deadline-s", type=float, default=530.0, help="this call's length")
    ap.add_argument("--task", default="halfcheetah")
    ap.add_argument("--overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="added to every training run (the CPU rehearsal's tiny sizes)")
    ap.add_argument("--backend", action="append", default=[], metavar="FRAMEWORK=NAME",
                    help="strict target backend (default torch=triton, jax=pallas)")
    g = ap.add_argument_group("speed sweep (bench.mjx_training_speed)")
    g.add_argument("--envs", type=int, nargs="+", default=[256, 1024, 4096])
    g.add_argument("--steps", type=int, default=130)
    g.add_argument("--warmup-steps", type=int, default=10)
    g.add_argument("--log-every", type=int, default=10)
    g.add_argument("--noamp-envs", type=int, nargs="*", default=[1024], help="torch without AMP; none: skip")
    g.add_argument("--warm-timeout-s", type=float, default=210.0)
    g.add_argument("--run-timeout-s", type=float, default=120.0)
    g.add_argument("--min-run-s", type=float, default=30.0)
    g = ap.add_argument_group("env speed (bench.mjx_env_speed)")
    g.add_argument("--env-speed-envs", type=int, nargs="+", default=[1024, 4096])
    g.add_argument("--env-speed-steps", type=int, default=100)
    g.add_argument("--env-speed-repeats", type=int, default=3)
    g.add_argument("--env-warm-timeout-s", type=float, default=150.0)
    g.add_argument("--xla-variant", action="append", default=None,
                   help="XLA_FLAGS appended for one env-speed run ('' = none); default: no env-speed run")
    g = ap.add_argument_group("learning runs")
    g.add_argument("--learn-seeds", type=int, nargs="+", default=[0, 1, 2])
    g.add_argument("--warm-seed", type=int, default=99)
    g.add_argument("--learn-envs", type=int, default=1024)
    g.add_argument("--eval-every", type=int, default=1000, help="interaction steps")
    g.add_argument("--eval-episodes", type=int, default=50, help="= eval envs: one round")
    g.add_argument("--learn-log-every", type=int, default=100)
    g.add_argument("--learn-overrides", action="append", default=[], metavar="KEY=VALUE")
    g.add_argument("--learn-start-by-s", type=float, default=450.0, help="call 1's latest learning start")
    g.add_argument("--gap-s", type=float, default=25.0, help="between call 1's end and call 2's start")
    g.add_argument("--call2-deadline-s", type=float, default=540.0)
    g.add_argument("--pack-s", type=float, default=30.0, help="call 2's time after the runs' end")
    g.add_argument("--startup-s", type=float, default=60.0, help="launch to training start")
    g.add_argument("--stop-s", type=float, default=50.0, help="budget reached to exit")
    g.add_argument("--status-every-s", type=float, default=45.0)
    a = ap.parse_args(argv)
    try:
        a.backend = _backends(a.backend)
    except argparse.ArgumentTypeError as exc:
        ap.error(str(exc))
    if a.xla_variant is None:
        a.xla_variant = []
    if a.steps < a.warmup_steps + 2 * a.log_every:
        ap.error(f"--steps ({a.steps}) must leave two logging windows after the warm-up")
    return a


def main(argv: Sequence[str] | None = None) -> int:
    a = parse_args(argv)
    return call1(a) if a.call == "call1" else call2(a)


if __name__ == "__main__":
    sys.exit(main())
