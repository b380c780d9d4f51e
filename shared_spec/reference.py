"""Float64 numpy references of FlashSAC's categorical TD target: the ground truth for every implementation.

Two independent formulations are provided (SPEC.md section 5):
  * `categorical_td_target`      value space, floor/fraction scatter (upstream FlashSAC's maths, `np.add.at`);
  * `categorical_td_target_hat`  index space, dense hat form out[k] = sum_j p_j * max(0, 1 - |b_j - k|)
                                 (Bellemare et al. 2017, Eq. 7).
They agree to ~1e-12 (tests/test_spec.py). Both follow the NaN policy of SPEC.md section 6.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from shared_spec.support import CategoricalSupport, validate_support

__all__ = [
    "Shapes",
    "categorical_td_target",
    "categorical_td_target_hat",
    "check_gamma",
    "check_row_offset",
    "check_shapes",
    "expected_mean",
    "invalid_rows",
    "project_hat",
    "project_scatter",
    "select_min_q",
]


class Shapes(NamedTuple):
    """Sizes of one call: E critics, B rows, N atoms."""

    E: int
    B: int
    N: int


def check_row_offset(row_offset: object) -> int:
    """Validate a row offset: a static (Python or numpy) integer >= 0, never a bool or a traced value."""
    if isinstance(row_offset, bool) or not isinstance(row_offset, int | np.integer):
        raise TypeError(f"row_offset must be a static integer >= 0 (or None), got {type(row_offset).__name__} "
                        f"{row_offset!r}")
    if row_offset < 0:
        raise ValueError(f"row_offset must be >= 0, got {int(row_offset)}")
    return int(row_offset)


def check_shapes(
    next_qs: tuple[int, ...],
    next_log_probs: tuple[int, ...],
    reward: tuple[int, ...],
    terminated: tuple[int, ...],
    next_alpha_log_pi: tuple[int, ...],
    row_offset: int | None = None,
) -> Shapes:
    """Validate the argument shapes of `categorical_td_target` (framework-neutral).

    Per-row inputs may be (B,) or (B, 1). Raises ValueError naming the argument, with expected vs got.

    Args:
        next_qs ... next_alpha_log_pi: the shapes of the five array arguments.
        row_offset: None: next_qs (E, B) and next_log_probs (E, B, N) hold exactly the B target rows. An integer
            >= 0 (the row-offset form, SPEC.md section 1): next_qs (E, R) and next_log_probs (E, R, N) hold R rows
            of which the target reads rows [row_offset, row_offset + B), B being the rows of the per-row inputs;
            row_offset + B <= R.

    Returns:
        Shapes(E, B, N).
    """
    next_qs, next_log_probs = tuple(next_qs), tuple(next_log_probs)
    rows = "B" if row_offset is None else "R"
    if len(next_log_probs) != 3:
        raise ValueError(f"next_log_probs must have shape (E, {rows}, N) (rank 3), got shape {next_log_probs}")
    E, R, N = next_log_probs
    if E < 1:
        raise ValueError(f"next_log_probs must hold E >= 1 critics (shape (E, {rows}, N)), got E = {E}")
    if N < 2:
        raise ValueError(f"next_log_probs must hold N >= 2 atoms (shape (E, {rows}, N)), got N = {N}")
    if R < 1:
        raise ValueError(f"next_log_probs must hold {rows} >= 1 rows (shape (E, {rows}, N)), got {rows} = {R}")
    if next_qs != (E, R):
        raise ValueError(f"next_qs must have shape (E, {rows}) = {(E, R)} to match next_log_probs {next_log_probs}, "
                         f"got {next_qs}")
    if row_offset is None:
        B, source = R, "from next_log_probs"
    else:
        row_offset = check_row_offset(row_offset)
        reward = tuple(reward)
        if len(reward) not in (1, 2) or reward[0] < 1 or reward[1:] not in ((), (1,)):
            raise ValueError(f"reward must have shape (B,) or (B, 1) with B >= 1 target rows, got {reward}")
        B, source = reward[0], "from reward"
        if row_offset + B > R:
            raise ValueError(f"row_offset + B must be <= R = {R} (the rows of next_log_probs {next_log_probs}): "
                             f"the target reads rows [row_offset, row_offset + B) = [{row_offset}, {row_offset + B}),"
                             f" got row_offset = {row_offset}, B = {B} (from reward)")
    for name, shape in (("reward", reward), ("terminated", terminated), ("next_alpha_log_pi", next_alpha_log_pi)):
        shape = tuple(shape)
        if shape not in ((B,), (B, 1)):
            raise ValueError(f"{name} must have shape (B,) or (B, 1) with B = {B} ({source}), got {shape}")
    return Shapes(E, B, N)


def check_gamma(gamma: object) -> float:
    """Validate a concrete discount gamma (already raised to the n-step power): a real number in [0, 1]."""
    if isinstance(gamma, bool) or not isinstance(gamma, int | float | np.floating | np.integer):
        if isinstance(gamma, np.ndarray) and gamma.shape == () and gamma.dtype.kind == "f":
            gamma = float(gamma)
        else:
            raise TypeError(f"gamma must be a real number in [0, 1], got {type(gamma).__name__} {gamma!r}")
    gamma = float(gamma)
    if not (0.0 <= gamma <= 1.0):  # also rejects NaN
        raise ValueError(f"gamma must be in [0, 1] (the n-step discount gamma**n_step), got {gamma}")
    return gamma


def _float_array(name: str, x: object) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind != "f" and a.dtype.name not in ("bfloat16",):
        raise TypeError(f"{name} must be a floating-point array, got dtype {a.dtype}")
    return a.astype(np.float64)


def _prepare(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, gamma, min_v, max_v):
    names = ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")
    arrays = [_float_array(n, x) for n, x in zip(names, (next_qs, next_log_probs, reward, terminated,
                                                          next_alpha_log_pi), strict=True)]
    E, B, N = check_shapes(*(a.shape for a in arrays))
    validate_support(N, min_v, max_v)
    gamma = check_gamma(gamma)
    q, lp, r, d, s = arrays
    return q, lp, r.reshape(B), d.reshape(B), s.reshape(B), gamma, CategoricalSupport(N, float(min_v), float(max_v))


def select_min_q(next_qs: np.ndarray, next_log_probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pick, per row, the critic with the smallest mean (ties -> the first critic; a NaN mean wins, as argmin).

    Args:
        next_qs: (E, B).
        next_log_probs: (E, B, N).

    Returns:
        (index (B,) int64, selected log-probs (B, N)).
    """
    idx = np.argmin(next_qs, axis=0)  # (B,)  numpy argmin: first minimum, first NaN wins
    lp = np.take_along_axis(next_log_probs, idx[None, :, None], axis=0)[0]  # (B, N)
    return idx, lp


def invalid_rows(next_qs, r, d, s, lp, g, c) -> np.ndarray:
    """SPEC.md section 6: rows whose output is all NaN.

    A row is invalid iff any of: reward, next_alpha_log_pi or any critic mean is NaN; terminated is NaN or
    outside [0, 1]; g = gamma (1 - d) is not a finite number >= 0; the shift c (index space) is NaN, which happens
    exactly when the Bellman atoms are NaN (inf - inf, or 0 * inf on a terminated row with infinite alpha*log pi);
    the total fp32 mass sum_j exp(lp_j) of the selected critic is not finite (a NaN or +inf log-prob, or log-probs
    so large that exp overflows; valid log-probs are <= 0).
    """
    bad = np.isnan(r) | np.isnan(s) | np.isnan(next_qs).any(axis=0)  # (B,)
    bad |= ~((d >= 0.0) & (d <= 1.0))
    bad |= ~((g >= 0.0) & (g < np.inf)) | np.isnan(c)
    with np.errstate(over="ignore", invalid="ignore"):
        total = np.exp(lp.astype(np.float32)).astype(np.float64).sum(axis=1)  # fp32 probabilities, as the kernels
    bad |= ~(total <= np.finfo(np.float32).max)  # NaN or +inf log-prob, or an fp32 overflow of the total mass
    return bad


def project_scatter(p: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Floor/fraction projection (upstream FlashSAC): m[l] += p (1 - f), m[u] += p f, u = min(l + 1, N - 1).

    Args:
        p: (B, N) source masses.
        b: (B, N) source positions in index space, already clamped to [0, N - 1].
    """
    B, N = p.shape
    l = np.floor(b).astype(np.int64)  # (B, N)
    u = np.minimum(l + 1, N - 1)  # (B, N)
    f = b - l  # (B, N)
    m = np.zeros((B, N), dtype=np.float64)
    rows = np.broadcast_to(np.arange(B)[:, None], (B, N))
    np.add.at(m, (rows, l), p * (1.0 - f))
    np.add.at(m, (rows, u), p * f)
    return m


def project_hat(p: np.ndarray, b: np.ndarray, chunk: int = 256) -> np.ndarray:
    """Dense hat projection: m[k] = sum_j p_j * max(0, 1 - |b_j - k|), summed over sources in increasing j."""
    B, N = p.shape
    k = np.arange(N, dtype=np.float64)
    out = np.empty((B, N), dtype=np.float64)
    for i in range(0, B, chunk):
        w = np.maximum(0.0, 1.0 - np.abs(b[i:i + chunk, :, None] - k[None, None, :]))  # (b, N_src, N_dst)
        out[i:i + chunk] = np.einsum("bj,bjk->bk", p[i:i + chunk], w)
    return out


def _finish(m: np.ndarray, bad: np.ndarray) -> np.ndarray:
    m[bad] = np.nan
    return m


def categorical_td_target(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, *, gamma,
                          min_v=-5.0, max_v=5.0) -> np.ndarray:
    """FlashSAC's categorical TD target in float64, value space, floor/fraction scatter (SPEC.md).

    Args:
        next_qs: (E, B) mean value of each target critic at (s', a').
        next_log_probs: (E, B, N) log-probabilities of each target critic over the N atoms.
        reward: (B,) or (B, 1) normalised (n-step) reward r.
        terminated: (B,) or (B, 1) termination flag d in {0, 1} (truncation is not termination).
        next_alpha_log_pi: (B,) or (B, 1) alpha * log pi(a'|s').
        gamma: discount already raised to the n-step power, in [0, 1].
        min_v, max_v: support bounds; atoms z_j = min_v + j (max_v - min_v) / (N - 1).

    Returns:
        (B, N) float64 target probabilities; rows invalid under SPEC.md section 6 are all NaN.
    """
    q, lp, r, d, s, gamma, sup = _prepare(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi,
                                          gamma, min_v, max_v)
    N = sup.num_bins
    _, lp_sel = select_min_q(q, lp)  # (B, N)
    g = gamma * (1.0 - d)  # (B,)
    z = sup.atoms(np.float64)  # (N,)
    with np.errstate(invalid="ignore", over="ignore"):
        c = ((r - sup.min_v) + g * (sup.min_v - s)) * sup.inv_bin_width  # (B,) only used for the NaN policy
        bad = invalid_rows(q, r, d, s, lp_sel, g, c)  # (B,)
        t = r[:, None] + gamma * (z[None, :] - s[:, None]) * (1.0 - d[:, None])  # (B, N) upstream's order
        t = np.clip(t, sup.min_v, sup.max_v)
        b = np.clip((t - sup.min_v) / sup.bin_width, 0.0, N - 1)  # (B, N)
        p = np.exp(lp_sel)  # (B, N)
    b[bad] = 0.0  # guard before floor().astype: upstream crashes here on NaN
    p[bad] = 0.0
    return _finish(project_scatter(p, b), bad)


def categorical_td_target_hat(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, *, gamma,
                              min_v=-5.0, max_v=5.0) -> np.ndarray:
    """The same target as `categorical_td_target`, computed independently: index space + dense hat form.

    b_j = clip(c + g j, 0, N - 1) with g = gamma (1 - d) and c = ((r - min_v) + g (min_v - s)) / Delta,
    then out[k] = sum_j p_j max(0, 1 - |b_j - k|).
    """
    q, lp, r, d, s, gamma, sup = _prepare(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi,
                                          gamma, min_v, max_v)
    N = sup.num_bins
    mask = q <= q.min(axis=0, keepdims=True)  # (E, B) candidates at the minimum (NaN rows are invalid anyway)
    first = np.argmax(mask, axis=0)  # (B,) first critic attaining the minimum
    lp_sel = lp[first, np.arange(q.shape[1])]  # (B, N)
    g = gamma * (1.0 - d)  # (B,)
    with np.errstate(invalid="ignore", over="ignore"):
        c = ((r - sup.min_v) + g * (sup.min_v - s)) * sup.inv_bin_width  # (B,)
        bad = invalid_rows(q, r, d, s, lp_sel, g, c)
        b = np.clip(c[:, None] + g[:, None] * np.arange(N)[None, :], 0.0, N - 1)  # (B, N)
        p = np.exp(lp_sel)
    b[bad] = 0.0
    p[bad] = 0.0
    return _finish(project_hat(p, b), bad)


def expected_mean(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, *, gamma, min_v=-5.0,
                  max_v=5.0) -> np.ndarray:
    """E_m[z] predicted by the Bellman update when nothing clips: r + gamma (1 - d) (E_p[z] - alpha log pi)."""
    q, lp, r, d, s, gamma, sup = _prepare(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi,
                                          gamma, min_v, max_v)
    _, lp_sel = select_min_q(q, lp)
    p = np.exp(lp_sel)
    mass = p.sum(axis=1)
    return r * mass + gamma * (1.0 - d) * (p @ sup.atoms(np.float64) - s * mass)

