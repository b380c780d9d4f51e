"""The library under the bench/ scripts: what every benchmark needs once.

Sections
    environment ``environment()``: when, where and with what a benchmark ran (date, command, git, versions, GPU).
    inputs      ``repeated_inputs``: shared_spec inputs for any batch size (large ones repeat a generated block);
                ``first_rows``, ``INPUT_NAMES``, ``F64_ROWS`` (the rows compared with the float64 spec).
    timing      ``block_seconds`` (one timed block of calls between device syncs), ``interleaved_blocks``
                (every variant's blocks in turn, so all variants see the same machine state), ``jit_loop`` (a
                jitted loop of dependent calls: device time per call in JAX), ``capture_cuda_graph``.
    statistics  ``bootstrap_ci`` (percentile bootstrap, stratified over groups such as tasks).
    runs        ``tensorboard_events`` / ``tensorboard_scalars``, ``steady_rates`` (a training run's steady rates),
                ``parse_result_line`` (the rates of the CLI's closing line), ``cli_run_rates`` (both, for one run).
    reports     ``write_results`` (results.json + results.md), ``fmt``, ``speedup_plot``, ``section_markers``,
                ``replace_readme_section`` (the generated sections of README.md).
    recipe      upstream's CPU-sim HalfCheetah recipe (``UPSTREAM_RECIPE``, ``TORCH_RECIPE_EXTRA``).
    processes   ``train_command`` / ``timed_run``: one training run through an agent's CLI, timed from start to exit;
                ``tiny_defaults``: a job's ``--tiny`` sizes.

Importing this module needs the standard library and numpy only; torch, jax, matplotlib and ``agent_common``
(omegaconf) are imported by the functions that use them.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------------------------------------------- running


# --------------------------------------------------------------------------------------------------- environment

VERSIONED = ("numpy", "torch", "triton", "jax", "jaxlib")  # packages whose versions the environment record holds


def command_output(cmd: list[str], cwd: str | None = None) -> str | None:
    """A command's stripped stdout, or None if it cannot start, runs past 20 s or prints nothing."""
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=cwd)
        return res.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def versions() -> dict[str, str]:
    """Versions of numpy, torch, triton, jax and jaxlib: the imported module's ``__version__`` where it is imported,
    else the installed distribution's (nothing is imported here, so the torch-before-jax import order of a script
    is never changed); packages that are not installed are left out."""
    out = {}
    for name in VERSIONED:
        version = getattr(sys.modules.get(name), "__version__", None)
        if version is None:
            try:
                version = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                continue
        out[name] = str(version)
    return out


def command_line() -> str:
    """The command that started this process as typed: ``python -m bench <job> ...`` (the entry point names its job in
    ``sys.argv[0]``), else the interpreter followed by its arguments."""
    if sys.argv and sys.argv[0].startswith("python -m "):
        return " ".join(sys.argv)
    return " ".join([sys.executable] + sys.argv)


def upstream_commit(upstream_dir: str) -> str:
    """The commit of an upstream checkout, or a note when the folder is not the top of its own git repository (a
    folder inside this repository's working tree would otherwise report this repository's commit)."""
    top = command_output(["git", "rev-parse", "--show-toplevel"], cwd=upstream_dir)
    if top and os.path.realpath(top) == os.path.realpath(upstream_dir):
        return command_output(["git", "rev-parse", "HEAD"], cwd=upstream_dir) or "unknown commit"
    return "not a git checkout"


def environment() -> dict[str, Any]:
    """When, where and with what a benchmark ran: UTC date, the command line, Python, platform, CPU count, the git
    commit of the repository (and whether tracked files differ from it), the versions of the numeric stack
    (``versions``) and the first GPU's name and driver from nvidia-smi (``gpu`` None without one)."""
    info: dict[str, Any] = {
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": command_line(), "python": platform.python_version(),
        "platform": platform.platform(), "cpu_count": os.cpu_count(),
        "git_sha": command_output(["git", "rev-parse", "HEAD"], cwd=REPO),
        "git_dirty": bool(command_output(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO)),
        **versions(), "gpu": None}
    smi = command_output(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    if smi:
        name, _, driver = smi.splitlines()[0].partition(",")
        info.update(gpu=name.strip(), driver=driver.strip())
    return info


# -------------------------------------------------------------------------------------------------------- inputs

INPUT_NAMES = ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")  # the op's array arguments
GEN_ROWS = 16384  # rows generated by shared_spec.make_inputs; larger batches repeat them (generation is slow)
F64_ROWS = 4096  # rows checked against the float64 spec (its numpy add.at is slow); beyond, an fp32 reference
_BLOCKS: dict[tuple, dict[str, np.ndarray]] = {}


def first_rows(x: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """The first ``n`` rows (batch entries) of host inputs: next_qs / next_log_probs along axis 1, the rest axis 0."""
    return {k: (v[:, :n] if k in ("next_qs", "next_log_probs") else v[:n]) for k, v in x.items()}


def repeated_inputs(B: int, kind: str, N: int = 101, E: int = 2, seed: int = 0,
                    block: int = GEN_ROWS) -> dict[str, np.ndarray]:
    """``shared_spec.make_inputs`` (numpy float32: next_qs (E, B), next_log_probs (E, B, N), per-row (B,)); above
    ``block`` rows, row i is row ``i % block`` of one generated block (cached: generating 1M rows of the mixed kind
    takes minutes on the host)."""
    from shared_spec import make_inputs

    if B <= block:
        return make_inputs(B, N, E, seed=seed, kind=kind)
    key = (kind, N, E, seed, block)
    if key not in _BLOCKS:
        _BLOCKS[key] = make_inputs(block, N, E, seed=seed, kind=kind)
    idx = np.arange(B) % block
    return {k: np.take(v, idx, axis=1 if k in ("next_qs", "next_log_probs") else 0) for k, v in _BLOCKS[key].items()}


# -------------------------------------------------------------------------------------------------------- timing


def block_seconds(call: Callable[[int], object], n: int, sync: Callable[[object], object]) -> float:
    """Wall seconds per call of ``call(0) ... call(n - 1)``: ``sync(None)`` before the first call (the device is
    idle when the clock starts) and ``sync(last output)`` after the last (the clock stops when the work is done)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    sync(None)
    t0 = time.perf_counter()
    out = None
    for i in range(n):
        out = call(i)
    sync(out)
    return (time.perf_counter() - t0) / n


def interleaved_blocks(blocks: Mapping[str, Callable[[int], float]], repeats: int, iters: int,
                       warmup_iters: int = 0) -> dict[str, list[float]]:
    """Each block once with ``warmup_iters`` (compilation, graph capture; not recorded) if > 0, then ``repeats``
    rounds in which every block runs with ``iters`` in the given order: all variants see the same machine state
    (clocks, other processes, caches). Returns each block's ``repeats`` results, in order."""
    if warmup_iters > 0:
        for block in blocks.values():
            block(warmup_iters)
    raw: dict[str, list[float]] = {name: [] for name in blocks}
    for _ in range(repeats):
        for name, block in blocks.items():
            raw[name].append(block(iters))
    return raw


def capture_cuda_graph(fn: Callable[[], Any], warmup: int = 3, thread_local: bool = False) -> tuple[Any, Any]:
    """Warm ``fn`` up on a side stream (``warmup`` calls, as CUDA-graph capture requires), then capture one call in a
    ``torch.cuda.CUDAGraph``. Returns (graph, the captured call's output: each ``graph.replay()`` rewrites it).
    ``thread_local``: capture in thread-local mode, so CUDA calls of other threads (JAX's runtime in the same process)
    cannot invalidate the capture; the default global mode forbids them."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local" if thread_local else "global"):
        out = fn()
    return graph, out


def jit_loop(op: Callable[..., Any], K: int) -> Callable[..., Any]:
    """``jax.jit`` of a ``fori_loop`` of ``K`` dependent calls ``op(q, lp, r, d, s, gamma, base)``:
    gamma_{i+1} = gamma_i + 1e-30 * sum(out_i), an fp32 no-op for these inputs that XLA cannot remove, so no call is
    hoisted or merged and every output is consumed (one sum). Its time over K is device time per call plus the
    loop's own cost per iteration (time the same loop with ``op`` returning ``base * gamma`` to measure that)."""
    import jax
    import jax.numpy as jnp

    def run(q, lp, r, d, s, gamma, base):
        def body(_, carry):
            g, acc = carry
            tot = jnp.sum(op(q, lp, r, d, s, g, base))
            return g + 1e-30 * tot, acc + tot
        return jax.lax.fori_loop(0, K, body, (gamma, jnp.float32(0.0)))[1]
    return jax.jit(run)


# ------------------------------------------------------------------------------------------------------- reports


BOOTSTRAP_REPS = 2000


def bootstrap_ci(strata: Sequence[np.ndarray], statistic, reps: int = BOOTSTRAP_REPS, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float, float]:
    """(point, low, high): the statistic of all scores and its stratified percentile-bootstrap interval.

    Each stratum (a task's seeds) is resampled with replacement on its own and the resampled strata are pooled, as
    rliable does across tasks; with one stratum it is the plain bootstrap over seeds.
    """
    rng = np.random.default_rng(seed)
    pooled = np.concatenate(strata)
    samples = np.concatenate([s[rng.integers(0, len(s), size=(reps, len(s)))] for s in strata], axis=1)
    values = statistic(samples, axis=1)
    low, high = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return float(statistic(pooled[None, :], axis=1)[0]), float(low), float(high)


def tensorboard_events(log_dir: str, tags: Sequence[str] | None = None
                       ) -> tuple[float | None, dict[str, list[tuple[int, float, float]]]]:
    """(the wall time of the first event, tag -> [(step, value, wall time)]) of the scalar events in the TensorBoard
    folder ``log_dir`` (``tags``: only these; a tag without events is absent). Wall times are Unix seconds; the first
    event is the event file's start (the writer's creation), None for a folder without events."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(log_dir, size_guidance={"scalars": 0})
    acc.Reload()
    try:
        start: float | None = float(acc.FirstEventTimestamp())
    except ValueError:  # no events
        start = None
    have = acc.Tags().get("scalars", [])
    return start, {tag: [(e.step, float(e.value), float(e.wall_time)) for e in acc.Scalars(tag)]
                   for tag in have if tags is None or tag in tags}


def tensorboard_scalars(log_dir: str, tags: Sequence[str] | None = None) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] of the scalar events in the TensorBoard folder ``log_dir`` (``tensorboard_events``
    without the wall times)."""
    return {tag: [(s, v) for s, v, _ in events] for tag, events in tensorboard_events(log_dir, tags)[1].items()}


def steady_rates(run_dir: str) -> dict[str, float | int]:
    """A training run's steady updates/s and env steps/s: the medians of its logging windows (``perf/*`` in
    ``run_dir/tb``) after the first window with updates (which holds the first update and its compilation)."""
    series = tensorboard_scalars(os.path.join(run_dir, "tb"), ("perf/updates_per_second", "perf/env_steps_per_second"))
    steps = {s for s, v in series.get("perf/updates_per_second", []) if v > 0}
    steps.discard(min(steps, default=None))
    out: dict[str, float | int] = {"steady_windows": len(steps)}
    for tag, key in (("perf/updates_per_second", "steady_updates_per_second"),
                     ("perf/env_steps_per_second", "steady_env_steps_per_second")):
        values = [v for s, v in series.get(tag, []) if s in steps]
        if values:
            out[key] = float(np.median(values))
    return out


# fields of the training CLI's closing line (agent_common.cli.summary): "[completed] env_step=... env_steps/s=...
# updates/s=... ... time_to_first_update=...s steady_updates/s=..."
RESULT_LINE_FIELDS = {"env_steps_per_second": re.compile(r"\benv_steps/s=([0-9.]+)"),
                      "updates_per_second": re.compile(r"(?<![_a-z])updates/s=([0-9.]+)"),
                      "time_to_first_update_s": re.compile(r"\btime_to_first_update=([0-9.]+)s")}


def parse_result_line(text: str) -> dict[str, float]:
    """``env_steps_per_second``, ``updates_per_second`` (whole loop) and ``time_to_first_update_s`` from the last
    ``[completed]`` line of a training CLI's output ``text`` (a field that is absent or not a number is left out;
    no such line: {})."""
    lines = [line for line in text.splitlines() if line.startswith("[completed]")]
    if not lines:
        return {}
    out = {}
    for key, pattern in RESULT_LINE_FIELDS.items():
        found = pattern.search(lines[-1])
        if found:
            out[key] = float(found.group(1))
    return out


def cli_run_rates(log_path: str, run_dir: str) -> dict[str, float | int]:
    """What a completed training CLI run measured: its closing line's numbers (``parse_result_line`` of the log at
    ``log_path``) and its steady rates (``steady_rates`` of ``run_dir``)."""
    with open(log_path) as f:
        out: dict[str, float | int] = dict(parse_result_line(f.read()))
    out.update(steady_rates(run_dir))
    return out


def fmt(v: object, spec: str = ".3g") -> str:
    """A table cell: numbers with ``spec``, None as empty, anything else as ``str``."""
    if v is None:
        return ""
    return format(v, spec) if isinstance(v, int | float) else str(v)


def write_results(out_dir: str, res: dict, markdown: str) -> str:
    """``out_dir/results.json`` (``res``; values JSON cannot hold are written as strings) and
    ``out_dir/results.md`` (``markdown``); returns the markdown."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(markdown)
    return markdown


def section_markers(name: str) -> tuple[str, str]:
    """The begin and end markers of README.md's generated section ``name``."""
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def replace_readme_section(name: str, body: str, path: str = os.path.join(REPO, "README.md")) -> None:
    """Rewrites the text between ``<!-- name:begin -->`` and ``<!-- name:end -->`` in ``path`` with ``body``
    (appends the marked section when the markers are missing): how generated README sections are regenerated."""
    begin, end = section_markers(name)
    with open(path) as f:
        text = f.read()
    new = f"{begin}\n{body}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + new + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + new + "\n"
    with open(path, "w") as f:
        f.write(text)


def speedup_plot(path: str, series: Mapping[str, tuple[Sequence[float], Sequence[float]]], title: str, *,
                 log_y: bool = False, flag: float | None = None, title_size: float | None = None) -> None:
    """Speedup over upstream's compiled path against the batch size B (log x axis), one line per series
    (label -> (Bs, speedups)); a grey line at 1x, a dashed red one at ``flag`` (the review threshold) if given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, (Bs, speedups) in series.items():
        ax.plot(Bs, speedups, "o-", label=label)
    ax.axhline(1.0, color="grey", lw=0.8)
    if flag is not None:
        ax.axhline(flag, color="red", lw=0.8, ls="--", label=f"{flag:.0f}x review flag")
    ax.set_xscale("log")
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel("batch B")
    ax.set_ylabel("speedup vs upstream (torch.compile)")
    ax.set_title(title, fontsize=title_size)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -------------------------------------------------------------------------------------------------------- recipe

# upstream's scripts/run_mujoco.sh, the CPU-sim recipe
UPSTREAM_RECIPE = [
    "env.env_name=HalfCheetah-v4",
    "num_train_envs=1",
    "num_eval_envs=1",
    "agent.buffer_max_length=1_000_000",
    "agent.buffer_min_length=10_000",
    "agent.buffer_device_type=cpu",
    "agent.sample_batch_size=512",
    "agent.use_amp=false",
    "updates_per_interaction_step=1",
    "gamma=0.99",
    "n_step=1",
]
# The torch agent in the benchmarks: no torch.compile (max-autotune's GEMM autotuning ran past 5.5 minutes on the
# H200, and every call of a split run recompiles); the update step and acting captured in CUDA graphs instead.
TORCH_RECIPE_EXTRA = ["agent.use_compile=false", "agent.use_cuda_graph=true"]


def recipe_settings(name: str, framework: str = "torch") -> dict[str, str]:
    """``agent_common.recipes``' recipe ``name`` for ``framework`` as {key: value} (values as written there)."""
    from agent_common.recipes import recipe_overrides

    return dict(o.split("=", 1) for o in recipe_overrides(name, framework))




# ------------------------------------------------------------------------------------------------------ processes

# framework -> (training module, reference backend, kernel backend)
PAIRS = {"torch": ("agent_torch.train", "torch", "triton"), "jax": ("agent_jax.train", "jax", "pallas")}
LOOP_WALL = re.compile(r"^\[completed\] .*?\bwall=([0-9.]+)s", re.M)  # agent_common.cli.summary's first line


def merge_overrides(defaults: Sequence[str], extra: Sequence[str]) -> list[str]:
    """``defaults`` then ``extra``, where an ``extra`` key replaces the default with the same key."""
    keys = {o.split("=", 1)[0].strip() for o in extra}
    return [o for o in defaults if o.split("=", 1)[0].strip() not in keys] + list(extra)


def train_command(framework: str, backend: str, seed: int, num_env_steps: int, run_dir: str,
                  extra: Sequence[str]) -> list[str]:
    """The command line of one training run through an agent's CLI, with a strict target ``backend``."""
    overrides = [f"num_env_steps={num_env_steps}", f"seed={seed}", f"agent.categorical_target_backend={backend}",
                 "agent.categorical_target_strict=true", f"save_path={run_dir}", "progress_bar=false", *extra]
    return [sys.executable, "-m", PAIRS[framework][0]] + [arg for o in overrides for arg in ("--overrides", o)]


def child_env(extra_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a benchmark's child process: this one's, unbuffered, ``extra_env`` added, and the repository
    first on ``PYTHONPATH``."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(extra_env or {}))
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def timed_run(cmd: list[str], log_path: str, timeout_s: float, extra_env: Mapping[str, str] | None = None) -> dict:
    """Run one training process, its output to ``log_path``; wall-clock from start to exit (imports and compilation
    included) and the loop's own wall time from the CLI's result line."""
    t0 = time.perf_counter()
    try:
        with open(log_path, "w") as log:
            proc = subprocess.run(cmd, cwd=REPO, env=child_env(extra_env), stdout=log, stderr=subprocess.STDOUT,
                                  timeout=timeout_s)
        rc: int | str = proc.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    wall = time.perf_counter() - t0
    with open(log_path) as f:
        text = f.read()
    loop = LOOP_WALL.findall(text)
    return {"cmd": " ".join(cmd), "returncode": rc, "wall_s": wall, "loop_s": float(loop[-1]) if loop else None,
            "log": log_path, "log_tail": text[-1500:]}


def tiny_defaults(ap: Any, argv: Sequence[str] | None, **defaults: Any) -> Any:
    """Parse ``argv`` with ``ap``; with ``--tiny``, ``defaults`` replace the parser's defaults first (options given on
    the command line still win)."""
    if ap.parse_known_args(argv)[0].tiny:
        ap.set_defaults(**defaults)
    return ap.parse_args(argv)
