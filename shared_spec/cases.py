"""Golden cases with hand-computed outputs, and seeded generators of random and adversarial inputs.

Every test suite and the benchmark harness draw their inputs from here (never from a second copy).
Inputs are float32 numpy arrays; implementations cast log-probs to bf16/fp16 where a case asks for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["CASES", "GOLDEN", "KINDS", "Case", "GoldenCase", "make_inputs"]

KINDS = ("random", "peaked", "onehot", "integral", "clamp_high", "clamp_low", "terminated", "ties", "large_shift",
         "mixed", "nonfinite")


@dataclass(frozen=True)
class GoldenCase:
    """A small input with its hand-computed expected output (see the derivation in each `note`)."""

    name: str
    note: str
    inputs: dict = field(repr=False)
    gamma: float
    min_v: float
    max_v: float
    expected: np.ndarray = field(repr=False)


def _golden() -> list[GoldenCase]:
    f32 = np.float32
    lg = lambda p: np.log(np.asarray(p, dtype=np.float64)).astype(f32)  # noqa: E731  exp(lg(p)) ~ p to 1e-7
    with np.errstate(divide="ignore"):
        # Support [-2, 2], N = 5, Delta = 1: atoms z = [-2, -1, 0, 1, 2], b = t + 2.
        lp = np.stack([
            np.stack([lg([.2] * 5), lg([.2] * 5), lg([.5, .5, 0, 0, 0]), lg([.2] * 5)]),
            np.stack([lg([.1, .2, .3, .2, .2]), lg([.6, .1, .1, .1, .1]), lg([.2] * 5), lg([.3] * 3 + [.05] * 2)]),
        ])  # (2, 4, 5)
    inputs = dict(
        next_qs=np.array([[1.0, 0.2, -1.0, 0.0], [0.5, 0.2, 0.0, 0.0]], f32),
        next_log_probs=lp,
        reward=np.array([0.5, 0.3, 10.0, 0.0], f32),
        terminated=np.array([0.0, 1.0, 0.0, 0.0], f32),
        next_alpha_log_pi=np.array([0.0, 0.0, 0.0, 1.0], f32),
    )
    # gamma = 0.5 (a row's gamma is global): row 3 uses s = 1 with gamma 0.5.
    # row 0: critic 1 (0.5 < 1.0); t = 0.5 + 0.5 z = [-.5, 0, .5, 1, 1.5] -> b = [1.5, 2, 2.5, 3, 3.5]
    #        m = [0, .1*.5, .1*.5 + .2 + .3*.5, .3*.5 + .2 + .2*.5, .2*.5] = [0, .05, .4, .45, .1]
    # row 1: tie 0.2 == 0.2 -> critic 0 (uniform); terminated -> t = 0.3 everywhere -> b = 2.3 -> [0, 0, .7, .3, 0]
    # row 2: critic 0 (-1 < 0), p = [.5, .5, 0, 0, 0]; t = 10 + .5 z >= 9 -> clipped to 2 -> b = 4 -> all mass in bin 4
    # row 3: tie 0 == 0 -> critic 0 (uniform); t = 0 + .5 (z - 1) = [-1.5, -1, -.5, 0, .5] -> b = [.5, 1, 1.5, 2, 2.5]
    #        m = [.1, .1 + .2 + .1, .1 + .2 + .1, .1 + .2 + .1 ... ] computed: j0 -> bins 0,1 (.1,.1); j1 -> bin 1 (.2);
    #        j2 -> bins 1,2 (.1,.1); j3 -> bin 2 (.2); j4 -> bins 2,3 (.1,.1) = [.1, .4, .4, .1, 0]
    expected = np.array([
        [0, .05, .4, .45, .1],
        [0, 0, .7, .3, 0],
        [0, 0, 0, 0, 1],
        [.1, .4, .4, .1, 0],
    ])
    cases = [GoldenCase("four_rows", "interior, terminated+tie, top clamp, alpha*log pi shift", inputs, 0.5,
                        -2.0, 2.0, expected)]

    # gamma = 0: every row is a two-hot of the clipped reward; gamma = 1 with d = 0, r = 0, s = 0 is the identity.
    inputs0 = dict(
        next_qs=np.array([[0.0, 0.0, 0.0]], f32),
        next_log_probs=lg([[.1, .2, .3, .2, .2]] * 3)[None],
        reward=np.array([0.25, -3.0, 1.0], f32),
        terminated=np.array([0.0, 0.0, 1.0], f32),
        next_alpha_log_pi=np.array([0.7, -0.2, 0.0], f32),
    )
    # row 0: t = 0.25 -> b = 2.25 -> [0, 0, .75, .25, 0]; row 1: t = -3 -> clipped -2 -> b = 0 -> bin 0;
    # row 2: t = 1 -> b = 3 (integral) -> bin 3
    cases.append(GoldenCase("gamma_zero", "two-hot of the clipped reward, integral b, bottom clamp, E = 1", inputs0,
                            0.0, -2.0, 2.0, np.array([[0, 0, .75, .25, 0], [1, 0, 0, 0, 0], [0, 0, 0, 1, 0]])))
    inputs1 = dict(inputs0, terminated=np.zeros(3, f32), reward=np.zeros(3, f32), next_alpha_log_pi=np.zeros(3, f32))
    cases.append(GoldenCase("identity", "gamma = 1, r = 0, alpha*log pi = 0: every atom maps onto itself (integral b)",
                            inputs1, 1.0, -2.0, 2.0, np.array([[.1, .2, .3, .2, .2]] * 3)))
    # NaN policy: row 0 NaN reward, row 1 fine, row 2 +inf reward clamps to the top atom, row 3 terminated = 2.
    inputsn = dict(
        next_qs=np.array([[0.0, 0.0, 0.0, 0.0]], f32),
        next_log_probs=lg([[.1, .2, .3, .2, .2]] * 4)[None],
        reward=np.array([np.nan, 0.25, np.inf, 0.0], f32),
        terminated=np.array([0.0, 1.0, 0.0, 2.0], f32),
        next_alpha_log_pi=np.zeros(4, f32),
    )
    nan = np.full(5, np.nan)
    cases.append(GoldenCase("nan_policy", "NaN reward -> NaN row; +inf reward clamps; terminated outside [0, 1] -> NaN",
                            inputsn, 0.9, -2.0, 2.0, np.stack([nan, [0, 0, .75, .25, 0], [0, 0, 0, 0, 1], nan])))
    return cases


GOLDEN: list[GoldenCase] = _golden()


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def make_inputs(B: int, N: int = 101, E: int = 2, *, seed: int = 0, kind: str = "random", min_v: float = -5.0,
                max_v: float = 5.0) -> dict[str, np.ndarray]:
    """Seeded float32 inputs of one kind (see KINDS). Returns the five array arguments of the op.

    Kinds:
        random: log-softmax of N(0, 2^2) logits, rewards in the support, 5% terminated, alpha*log pi ~ N(0, 0.5).
        peaked: near one-hot distributions (logit scale 30): the case where fp32 rounding of b matters most.
        onehot: exactly one atom with log-prob 0, the rest -inf.
        integral: b lands exactly on atoms (r = 0, alpha*log pi = 0, half the rows terminated with an atom reward).
        clamp_high / clamp_low: rewards of +-1e3: every atom clips to max_v / min_v.
        terminated: every row terminated (two-hot of the clipped reward).
        ties: all critics have equal means (the first critic must win).
        large_shift: |alpha*log pi| large (most atoms clip at one end).
        mixed: each row drawn from one of the kinds above, so one call mixes every edge case.
        nonfinite: `mixed` plus NaN / +-inf sprinkled in every input (SPEC.md section 6).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    rng = np.random.default_rng(seed)
    span = max_v - min_v
    atoms = min_v + np.arange(N) * (span / (N - 1))
    logits = rng.normal(0.0, 2.0, size=(E, B, N))
    qs = rng.normal(0.0, 1.0, size=(E, B))
    r = rng.uniform(min_v, max_v, size=B) * 0.3
    d = (rng.random(B) < 0.05).astype(np.float64)
    s = rng.normal(0.0, 0.5, size=B)
    if kind in ("mixed", "nonfinite"):
        sub = rng.choice(KINDS[:-2], size=B)
        parts = {k: make_inputs(B, N, E, seed=seed + 1 + i, kind=k, min_v=min_v, max_v=max_v)
                 for i, k in enumerate(KINDS[:-2])}
        out = {name: np.array(parts["random"][name]) for name in parts["random"]}
        for k, part in parts.items():
            rows = sub == k
            out["next_qs"][:, rows] = part["next_qs"][:, rows]
            out["next_log_probs"][:, rows] = part["next_log_probs"][:, rows]
            for name in ("reward", "terminated", "next_alpha_log_pi"):
                out[name][rows] = part[name][rows]
        if kind == "nonfinite":
            for name, values in (("reward", [np.nan, np.inf, -np.inf]), ("terminated", [np.nan]),
                                 ("next_alpha_log_pi", [np.nan, np.inf, -np.inf])):
                hit = rng.random(B) < 0.08
                out[name][hit] = rng.choice(values, size=hit.sum())
            hit = rng.random(B) < 0.05
            out["next_qs"][rng.integers(0, E, size=hit.sum()), hit] = np.nan
            hit = np.nonzero(rng.random(B) < 0.05)[0]
            out["next_log_probs"][rng.integers(0, E, size=hit.size), hit, rng.integers(0, N, size=hit.size)] = \
                rng.choice([np.nan, np.inf], size=hit.size)
        return out
    if kind == "peaked":
        logits = logits * 15.0
    elif kind == "onehot":
        logits = np.full((E, B, N), -np.inf)
        logits[np.arange(E)[:, None], np.arange(B)[None, :], rng.integers(0, N, size=(E, B))] = 0.0
    elif kind == "integral":
        r = np.zeros(B)
        s = np.zeros(B)
        d = (rng.random(B) < 0.5).astype(np.float64)
        r[d == 1] = rng.choice(atoms, size=int(d.sum()))
    elif kind == "clamp_high":
        r = np.full(B, 1e3)
    elif kind == "clamp_low":
        r = np.full(B, -1e3)
    elif kind == "terminated":
        d = np.ones(B)
    elif kind == "ties":
        qs = np.repeat(qs[:1], E, axis=0)
    elif kind == "large_shift":
        s = rng.choice([-1.0, 1.0], size=B) * rng.uniform(2.0, 50.0, size=B)
    with np.errstate(invalid="ignore"):
        lp = _log_softmax(logits) if kind != "onehot" else logits
    f32 = np.float32
    return dict(next_qs=qs.astype(f32), next_log_probs=lp.astype(f32), reward=r.astype(f32),
                terminated=d.astype(f32), next_alpha_log_pi=s.astype(f32))


@dataclass(frozen=True)
class Case:
    """One parametrized test case: sizes, input kind and discount."""

    B: int
    N: int = 101
    E: int = 2
    kind: str = "random"
    gamma: float = 0.99
    seed: int = 0
    min_v: float = -5.0
    max_v: float = 5.0

    @property
    def id(self) -> str:
        support = "" if (self.min_v, self.max_v) == (-5.0, 5.0) else f"-v[{self.min_v:g},{self.max_v:g}]"
        return f"{self.kind}-B{self.B}-N{self.N}-E{self.E}-g{self.gamma}{support}"

    def inputs(self) -> dict[str, np.ndarray]:
        return make_inputs(self.B, self.N, self.E, seed=self.seed, kind=self.kind, min_v=self.min_v, max_v=self.max_v)


# The shared case matrix: every kind at B = 129, awkward sizes with random inputs, N in {2, 51, 101, 256, 1024}
# (N = 256 on an asymmetric support), E in {1, 2, 3}, gamma in {0, 0.5, 0.99, 1}. Kept small enough for the Triton
# interpreter and Pallas interpret mode on CPU: the large supports use small B.
CASES: list[Case] = (
    [Case(B=129, kind=k) for k in KINDS if k != "nonfinite"]
    + [Case(B=b) for b in (1, 3, 127, 128, 512)]
    + [Case(B=64, N=n, kind="mixed") for n in (2, 51)]
    + [Case(B=b, N=256, kind=k, min_v=-3.0, max_v=11.0) for b, k in ((24, "mixed"), (16, "peaked"))]
    + [Case(B=32, N=1024, kind="mixed"), Case(B=16, N=1024, kind="peaked")]
    + [Case(B=33, E=e, kind="mixed") for e in (1, 3)]
    + [Case(B=65, kind="mixed", gamma=g) for g in (0.0, 0.5, 1.0)]
)
