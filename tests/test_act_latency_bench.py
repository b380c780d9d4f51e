"""bench/act_latency.py on the CPU: a tiny actor, every block timed and reported, one evaluation episode per act."""

from __future__ import annotations

import json

import pytest

from bench.act_latency import main


def test_tiny_run_times_every_block_and_the_evaluation(tmp_path):
    out = tmp_path / "act"
    assert main(["--out", str(out), "--tiny", "--repeats", "2", "--iters", "5", "--episodes", "1",
                 "--eval-repeats", "1"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert set(res["us_per_call"]) == {"act", "act_dict_args", "act_numpy_io", "dispatch", "put_obs", "put_pinned",
                                      "readback", "cpu_act"}
    assert all(len(v) == 2 and min(v) > 0 for v in res["raw_us"].values())
    ev = res["evaluate"]
    assert ev["env_steps"] == 1000 and set(ev["us_per_env_step"]) == {"act", "act_dict_args"}
    assert ev["avg_return"]["act"] == ev["avg_return"]["act_dict_args"]  # the same actions, the same episode
    assert "| act |" in (out / "results.md").read_text()


@pytest.mark.parametrize("arg", [["--repeats", "0"], ["--iters", "0"], ["--episodes", "-1"]])
def test_bad_arguments_exit_2(tmp_path, arg):
    with pytest.raises(SystemExit) as exc:
        main(["--out", str(tmp_path / "x"), "--tiny", *arg])
    assert exc.value.code == 2
