"""n-step rows of the vector (device) loops: the torch device replay's window (``agent_torch.on_device``) and the
JAX scan's window (``agent_jax.vector.n_step_window``) against a plain-Python reference and the gymnasium loop's
``agent_common.buffer.ReplayBuffer``, on a hand-built sequence with terminations and truncations in several envs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agent_common.buffer import BATCH_KEYS, ReplayBuffer
from agent_torch.on_device import DeviceReplay
from agent_torch.replay import TensorRowStorage

OBS, ACT, ENVS, STEPS, GAMMA = 2, 1, 3, 9, 0.9
WIDTH = 2 * OBS + ACT + 3
# (step, env) -> flag; env 0 never ends, env 1 terminates at steps 1 and 5, env 2 is truncated at 2 and terminates
# at 3 (back to back) and is truncated at 7
TERMINATED = {(1, 1), (5, 1), (3, 2)}
TRUNCATED = {(2, 2), (7, 2)}


def _sequence() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    steps = []
    for t in range(STEPS):
        steps.append({
            "observation": rng.normal(size=(ENVS, OBS)).astype(np.float32),
            "action": rng.uniform(-1, 1, size=(ENVS, ACT)).astype(np.float32),
            "reward": rng.normal(size=ENVS).astype(np.float32),
            "terminated": np.asarray([(t, e) in TERMINATED for e in range(ENVS)], np.float32),
            "truncated": np.asarray([(t, e) in TRUNCATED for e in range(ENVS)], np.float32),
            "next_observation": rng.normal(size=(ENVS, OBS)).astype(np.float32),  # the true final obs on an end
        })
    return steps


def _reference(steps: list[dict[str, np.ndarray]], n: int) -> list[dict[str, float | np.ndarray]]:
    """Plain Python: for each start step with n steps after it, each env's n-step transition, step-major."""
    out = []
    for t in range(len(steps) - n + 1):
        for e in range(ENVS):
            reward, k = 0.0, 0
            while True:
                step = steps[t + k]
                reward += GAMMA**k * float(step["reward"][e])
                if step["terminated"][e] or step["truncated"][e] or k == n - 1:
                    break
                k += 1
            last = steps[t + k]
            out.append({"observation": steps[t]["observation"][e], "action": steps[t]["action"][e], "reward": reward,
                        "terminated": float(last["terminated"][e]), "truncated": float(last["truncated"][e]),
                        "next_observation": last["next_observation"][e]})
    return out


def _columns(rows: np.ndarray) -> dict[str, np.ndarray]:
    """(N, W) ROW_KEYS rows -> {key: (N, ...)}."""
    return {"observation": rows[:, :OBS], "action": rows[:, OBS:OBS + ACT], "reward": rows[:, OBS + ACT],
            "terminated": rows[:, OBS + ACT + 1], "next_observation": rows[:, OBS + ACT + 2:-1],
            "truncated": rows[:, -1]}


def _assert_matches_reference(rows: np.ndarray, reference: list[dict[str, float | np.ndarray]]) -> None:
    got = _columns(rows)
    assert rows.shape == (len(reference), WIDTH)
    for key in BATCH_KEYS:
        want = np.stack([np.asarray(r[key], np.float32) for r in reference])
        np.testing.assert_allclose(got[key], want, rtol=1e-6, atol=1e-6, err_msg=key)


def _torch_replay(n: int) -> DeviceReplay:
    storage = TensorRowStorage(100, WIDTH, OBS, torch.device("cpu"), 0)
    return DeviceReplay(storage, OBS, ACT, min_length=1, n_step=n, gamma=GAMMA)


def _add(replay: DeviceReplay, step: dict[str, np.ndarray]) -> None:
    replay.add(*(torch.from_numpy(step[key]) for key in ("observation", "action", "reward", "terminated",
                                                          "truncated", "next_observation")))


def _host_rows(steps: list[dict[str, np.ndarray]], n: int) -> np.ndarray:
    host = ReplayBuffer(OBS, ACT, 100, 1, n, GAMMA, 0)
    for step in steps:
        host.add(**step)
    cols = {key: getattr(host, key)[: len(host)] for key in BATCH_KEYS}
    return np.concatenate([cols["observation"], cols["action"], cols["reward"][:, None], cols["terminated"][:, None],
                           cols["next_observation"], cols["truncated"][:, None]], axis=1)


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_torch_device_window_matches_the_reference_and_the_host_buffer(n):
    steps = _sequence()
    replay = _torch_replay(n)
    for step in steps:
        _add(replay, step)
    rows = replay.rows()
    _assert_matches_reference(rows, _reference(steps, n))
    np.testing.assert_array_equal(rows, _host_rows(steps, n))  # the gymnasium loop's buffer, bitwise
    assert len(replay) == (STEPS - n + 1) * ENVS
    replay.check_finite()


def test_torch_window_resumes_mid_sequence():
    """The in-flight window saved after 4 steps and put into a fresh replay (with the rows): the next steps store
    exactly what the uninterrupted replay stores."""
    steps = _sequence()
    first = _torch_replay(3)
    for step in steps[:4]:
        _add(first, step)
    state, rows, window = first.state_dict(), first.rows(), first.window_steps()
    assert window.shape == (2, ENVS, WIDTH)  # the 2 newest steps are in flight
    np.testing.assert_array_equal(window[-1, :, -1], steps[3]["truncated"])
    for step in steps[4:]:
        _add(first, step)
    second = _torch_replay(3)
    second.load_state_dict(state)
    second.load_rows(rows)
    second.load_window(window)
    for step in steps[4:]:
        _add(second, step)
    np.testing.assert_array_equal(second.rows(), first.rows())
    with pytest.raises(ValueError, match=r"n-step window must be \(<= 2, E, 8\), got \(3, 3, 8\)"):
        second.load_window(np.zeros((3, ENVS, WIDTH), np.float32))


def test_torch_window_flags_non_finite_in_flight_steps():
    steps = _sequence()
    replay = _torch_replay(3)
    steps[0]["reward"][1] = np.nan
    _add(replay, steps[0])
    with pytest.raises(FloatingPointError, match="non-finite values were added"):
        replay.check_finite()


@pytest.mark.parametrize("n", [1, 3])
def test_jax_window_matches_the_reference_and_the_torch_replay(n):
    import jax
    import jax.numpy as jnp

    from agent_jax.vector import n_step_window

    steps = _sequence()
    push = jax.jit(lambda w, f, r: n_step_window(w, f, r, GAMMA, OBS, ACT))
    window, fill = jnp.zeros((n - 1, ENVS, WIDTH), jnp.float32), jnp.zeros((), jnp.int32)
    stored = []
    for step in steps:
        rows = np.concatenate([step["observation"], step["action"], step["reward"][:, None],
                               step["terminated"][:, None], step["next_observation"], step["truncated"][:, None]], 1)
        window, fill, out, ready = push(window, fill, jnp.asarray(rows))
        if bool(ready):
            stored.append(np.asarray(out))
    rows = np.concatenate(stored)
    _assert_matches_reference(rows, _reference(steps, n))
    replay = _torch_replay(n)
    for step in steps:
        _add(replay, step)
    torch_rows = replay.rows()
    reward = OBS + ACT  # XLA may fuse the n-step sum's multiply-add: the rewards agree to float32 rounding
    np.testing.assert_allclose(rows[:, reward], torch_rows[:, reward], rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(np.delete(rows, reward, 1), np.delete(torch_rows, reward, 1))  # the rest, bitwise
    assert int(fill) == n - 1
