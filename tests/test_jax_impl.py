"""The jnp reference ("jax" backend) against the spec, plus JAX dispatch and jit behaviour."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_impl
from jax_impl import dispatch
from shared_spec import make_inputs
from shared_spec import reference as R
from shared_spec.tolerances import max_abs_error
from tests.op_test_base import OpTests

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def to_jax(x: dict, dtype: str = "float32") -> dict:
    out = {k: jnp.asarray(v) for k, v in x.items()}
    out["next_log_probs"] = out["next_log_probs"].astype(DTYPES[dtype])
    return out


class TestJaxReference(OpTests):
    name = "jax"
    dtypes = ("float32", "bfloat16", "float16")

    def run(self, x, gamma, min_v=-5.0, max_v=5.0, dtype="float32"):
        out = jax_impl.categorical_td_target(**to_jax(x, dtype), gamma=gamma, min_v=min_v, max_v=max_v,
                                             backend="jax", strict=True)
        assert out.dtype == jnp.float32
        return np.asarray(out)

    def reference_low_precision(self, x, dtype):
        return self.run(x, 0.99, dtype=dtype)

    def test_gamma_change_does_not_recompile(self):
        traces = []

        @jax.jit
        def step(x, gamma):
            traces.append(1)
            return jax_impl.categorical_td_target(**x, gamma=gamma, backend="jax")

        x = to_jax(make_inputs(16))
        a = step(x, jnp.float32(0.99))
        b = step(x, jnp.float32(0.5))
        assert len(traces) == 1
        assert not np.array_equal(np.asarray(a), np.asarray(b))
        want = R.categorical_td_target(**make_inputs(16), gamma=0.5)
        assert max_abs_error(np.asarray(b), want) <= 2e-5

    def test_stop_gradient(self):
        x = to_jax(make_inputs(8))

        def loss(lp):
            return jax_impl.categorical_td_target(**dict(x, next_log_probs=lp), gamma=0.99, backend="jax").sum()

        g = jax.grad(loss)(x["next_log_probs"])
        assert np.array_equal(np.asarray(g), np.zeros(g.shape))

    @pytest.mark.parametrize("mutate, exc, needle", [
        (lambda t: t.update(reward=t["reward"][:3]), ValueError, "reward"),
        (lambda t: t.update(next_qs=t["next_qs"][0]), ValueError, "next_qs"),
        (lambda t: t.update(next_log_probs=t["next_log_probs"][:0], next_qs=t["next_qs"][:0]), ValueError, "E >= 1"),
        (lambda t: t.update(next_log_probs=t["next_log_probs"][..., :1]), ValueError, "N >= 2"),
        (lambda t: t.update(next_log_probs=t["next_log_probs"].astype(jnp.int32)), TypeError, "next_log_probs"),
        (lambda t: t.update(terminated=t["terminated"].astype(bool)), TypeError, "terminated"),
        (lambda t: t.update(reward=jax.device_put(t["reward"], jax.devices()[1])), ValueError, "reward must be on"),
        (lambda t: t.update(next_qs=[[0.0]]), TypeError, "next_qs must be an array"),
    ])
    def test_bad_input_names_the_argument(self, mutate, exc, needle):
        t = to_jax(make_inputs(4, 11))
        mutate(t)
        with pytest.raises(exc, match=needle):
            jax_impl.categorical_td_target(**t, gamma=0.99, backend="jax")

    @pytest.mark.parametrize("kwargs, needle", [(dict(min_v=2.0, max_v=1.0), "min_v"), (dict(gamma=1.5), "gamma")])
    def test_bad_scalars(self, kwargs, needle):
        with pytest.raises(ValueError, match=needle):
            jax_impl.categorical_td_target(**to_jax(make_inputs(4, 11)), **dict(dict(gamma=0.99), **kwargs))


class TestJaxDispatch:
    def setup_method(self):
        dispatch.reset_dispatch()

    def teardown_method(self):
        dispatch.reset_dispatch()

    def test_unknown_backend(self):
        with pytest.raises(ValueError, match=r"\('auto', 'jax', 'pallas'\)"):
            jax_impl.resolve_backend("triton")

    def test_fallback_logged_once_strict_raises(self, monkeypatch, caplog):
        monkeypatch.setitem(dispatch.GATES, "pallas", lambda key: "simulated: no GPU")
        monkeypatch.setitem(dispatch.IMPLEMENTATIONS, "pallas", lambda *a: None)
        with caplog.at_level(logging.INFO, logger="flashsac.jax_impl"):
            for _ in range(3):
                assert jax_impl.resolve_backend("pallas") == "jax"
        assert len([r for r in caplog.records if "simulated: no GPU" in r.getMessage()]) == 1
        assert jax_impl.dispatch_stats()["fallback_count"] == 1
        with pytest.raises(jax_impl.BackendUnavailable, match="simulated"):
            jax_impl.resolve_backend("pallas", strict=True)

    def test_backend_info(self):
        info = jax_impl.backend_info()
        assert info["backends"]["jax"] == "available" and info["platform"] == "cpu"
