"""The commands the lifecycle prints for the user to run next (the training program, a converter), and the summary
lines that say how to continue a run."""

from __future__ import annotations

__all__ = ["continue_lines", "converter_command", "set_train_program", "train_command"]

_TRAIN_PROGRAM = ["python -m agent_<torch|jax>.train"]

def set_train_program(program: str) -> None:
    """The program the printed next commands start with (``python -m agent_torch.train``); set by the CLI."""
    _TRAIN_PROGRAM[0] = program

def train_command(*overrides: str) -> str:
    """``<program> --overrides a=b --overrides c=d``: a command the user can run as printed."""
    return " ".join([_TRAIN_PROGRAM[0], *(f"--overrides {item}" for item in overrides)])

def converter_command(src: str, source: str, target: str) -> str:
    """The command that converts a checkpoint written by one agent for the other."""
    return f"python -m agent_interop.convert {source}-to-{target} {src} <new checkpoint dir>"

def continue_lines(status: str, run_dir: str, num_env_steps: int) -> list[str]:
    """The summary lines that say how to continue a run: resume an interrupted one, extend a completed one (a
    resume with a larger ``num_env_steps``; the run's schedule is kept unless ``rederive_schedule_on_resume``)."""
    if status != "completed":
        return [f"  resume:     {train_command(f'agent_load_path={run_dir}')}"]
    return [f"  extend:     {train_command(f'agent_load_path={run_dir}', f'num_env_steps={2 * num_env_steps}')}"
            "  (any larger num_env_steps)"]
