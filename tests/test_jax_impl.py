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
from shared_spec.tolerances import atol_vs_float64, max_abs_error
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
        assert max_abs_error(np.asarray(b), want) <= atol_vs_float64(101)

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
        with pytest.raises(ValueError, match=r"\('auto', 'jax', 'triton', 'pallas', 'mosaic'\)"):
            jax_impl.resolve_backend("cuda")

    def test_fallback_logged_once_strict_raises(self, monkeypatch, caplog):
        monkeypatch.setitem(dispatch.GATES, "pallas", lambda key: "simulated: no GPU")
        monkeypatch.setitem(dispatch.IMPLEMENTATIONS, "pallas", lambda *a: None)
        with caplog.at_level(logging.INFO, logger="flashsac.jax_impl"):
            for _ in range(3):
                assert jax_impl.resolve_backend("pallas").backend == "jax"
        assert len([r for r in caplog.records if "simulated: no GPU" in r.getMessage()]) == 1
        assert jax_impl.dispatch_stats()["fallback_count"] == 1
        with pytest.raises(jax_impl.BackendUnavailable, match="simulated"):
            jax_impl.resolve_backend("pallas", strict=True)

    @pytest.mark.usefixtures("pallas_validated_on_h200")
    def test_backend_info_without_inputs_reports_the_machine_not_a_decision(self, monkeypatch):
        monkeypatch.setitem(dispatch.GATES, "pallas", lambda key: f"simulated: no GPU for {key}")
        monkeypatch.setitem(dispatch.GATES, "mosaic", lambda key: "simulated: no Hopper GPU")
        info = jax_impl.backend_info()
        assert info["device"] == "cpu" and info["probe"] == "platform=cpu, dtype=float32, E=2, N=101"
        assert list(info["backends"]) == ["jax", "triton", "pallas", "mosaic"]
        assert info["backends"]["mosaic"] == "simulated: no Hopper GPU"
        assert info["backends"]["jax"] == "available"
        assert info["backends"]["pallas"] == "simulated: no GPU for ('cpu', 'float32', 2, 101)"
        assert info["auto_order"] == list(dispatch.AUTO_ORDER)
        assert info["validated"]["pallas"]["gpu"] == "NVIDIA H200", "the fixture's validation"
        assert "no GPU validation result for jax/triton" in info["validated"]["triton"]
        assert "no GPU validation result for jax/mosaic" in info["validated"]["mosaic"]
        assert info["decision"] is None and info["decisions"] == [] and info["fallback_count"] == 0
        assert jax_impl.dispatch_stats()["fallback_count"] == 0

    def test_backend_info_with_inputs_reports_their_decision_without_counting(self, monkeypatch, caplog):
        monkeypatch.setitem(dispatch.GATES, "pallas", lambda key: "simulated: no GPU")
        x = to_jax(make_inputs(4, 21, 3), "bfloat16")
        with caplog.at_level(logging.INFO, logger="flashsac.jax_impl"):
            info = jax_impl.backend_info(x["next_log_probs"], "pallas")
        assert info["decision"] == {"requested": "pallas", "backend": "jax",
                                    "reason": "fallback from pallas: simulated: no GPU",
                                    "config": "platform=cpu, dtype=bfloat16, E=3, N=21"}
        assert info["fallback_count"] == 0 and info["decisions"] == [] and not caplog.records, "a report, not a call"
        jax_impl.categorical_td_target(**x, gamma=0.9, backend="pallas")  # the real call falls back: counted once
        info = jax_impl.backend_info(x["next_log_probs"], "pallas")
        assert info["fallback_count"] == 1 and info["decisions"] == [info["decision"]]
        with pytest.raises(ValueError, match="next_log_probs"):
            jax_impl.backend_info(x["next_qs"])

    def test_repeat_calls_skip_the_metadata_checks(self, monkeypatch):
        calls = []
        real = dispatch._validate
        monkeypatch.setattr(dispatch, "_validate", lambda *a: calls.append(1) or real(*a))
        x = to_jax(make_inputs(5, 11))
        for _ in range(3):
            jax_impl.categorical_td_target(**x, gamma=0.9, backend="jax")
        assert calls == [1]
        moved = dict(x, reward=jax.device_put(x["reward"], jax.devices()[1]))  # a new signature is checked again
        with pytest.raises(ValueError, match="reward must be on"):
            jax_impl.categorical_td_target(**moved, gamma=0.9, backend="jax")
        with pytest.raises(ValueError, match="gamma"):  # gamma is checked on every call
            jax_impl.categorical_td_target(**x, gamma=1.5, backend="jax")
        assert len(calls) == 2


class TestJaxKernelFailures:
    """A kernel backend that raises at its first launch falls back (every JAX kernel backend)."""

    def setup_method(self):
        dispatch.reset_dispatch()

    def teardown_method(self):
        dispatch.reset_dispatch()

    @pytest.mark.parametrize("name", dispatch.KERNELS)
    def test_first_launch_failure_falls_back_once_logged_counted_strict_raises(self, name, monkeypatch, caplog):
        launches = []

        def broken(*args, **kwargs):
            launches.append(1)
            raise RuntimeError(f"simulated {name} compile failure")

        monkeypatch.setitem(dispatch.GATES, name, lambda key: None)
        monkeypatch.setitem(dispatch.IMPLEMENTATIONS, name, broken)
        x = make_inputs(6, 11)
        want = R.categorical_td_target(**x, gamma=0.9)
        with pytest.raises(RuntimeError, match=f"simulated {name}"):
            jax_impl.categorical_td_target(**to_jax(x), gamma=0.9, backend=name, strict=True)
        with caplog.at_level(logging.INFO, logger="flashsac.jax_impl"):
            for _ in range(3):
                out = jax_impl.categorical_td_target(**to_jax(x), gamma=0.9, backend=name)
                assert max_abs_error(np.asarray(out), want) <= atol_vs_float64(11)
        hits = [r for r in caplog.records if f"simulated {name} compile failure" in r.getMessage()]
        assert len(hits) == 1 and hits[0].levelno == logging.WARNING and launches == [1, 1]
        assert jax_impl.dispatch_stats() == {"fallback_count": 1, "runtime_failures": 1}
        decision = jax_impl.resolve_backend(name, num_bins=11)
        assert decision.backend == "jax" and "runtime failure at its first launch" in decision.reason
        with pytest.raises(jax_impl.BackendUnavailable, match=f"simulated {name}"):
            jax_impl.categorical_td_target(**to_jax(x), gamma=0.9, backend=name, strict=True)

    @pytest.mark.usefixtures("pallas_validated_on_h200")
    def test_auto_never_chooses_an_unvalidated_kernel(self, monkeypatch, caplog):
        monkeypatch.setitem(dispatch.GATES, "pallas", lambda key: "simulated: pallas cannot run")
        monkeypatch.setitem(dispatch.GATES, "triton", lambda key: None)  # it could run, but is not validated
        with caplog.at_level(logging.INFO, logger="flashsac.jax_impl"):
            decision = jax_impl.resolve_backend("auto")
        assert decision.backend == "jax"
        assert "pallas: simulated: pallas cannot run" in decision.reason
        assert "triton: no GPU validation result for jax/triton" in decision.reason
        assert [r.levelno for r in caplog.records] == [logging.INFO]
        assert jax_impl.resolve_backend("triton").backend == "triton", "by name it runs"
