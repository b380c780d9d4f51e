"""torch backends against the spec: the torch reference and the Triton kernel (TRITON_INTERPRET=1 on CPU)."""

import json
import logging

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_impl
from shared_spec import Case, make_inputs
from shared_spec import reference as R
from shared_spec.dispatch import validation_path
from shared_spec.tolerances import ATOL_BETWEEN, atol_vs_float64, max_abs_error
from tests.op_test_base import OpTests
from torch_impl import dispatch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def to_torch(x: dict, dtype: str = "float32") -> dict:
    out = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in x.items()}
    out["next_log_probs"] = out["next_log_probs"].to(DTYPES[dtype])
    return out


class TorchOpTests(OpTests):
    backend = "torch"
    dtypes = ("float32", "bfloat16", "float16")

    def run(self, x, gamma, min_v=-5.0, max_v=5.0, dtype="float32"):
        out = torch_impl.categorical_td_target(**to_torch(x, dtype), gamma=gamma, min_v=min_v, max_v=max_v,
                                               backend=self.backend, strict=True)
        assert out.dtype == torch.float32 and out.is_contiguous()
        return out.numpy()

    def reference_low_precision(self, x, dtype):
        return torch_impl.categorical_td_target(**to_torch(x, dtype), gamma=0.99, backend="torch").numpy()

    def test_strided_views_as_upstream(self):
        # Upstream passes the second half of (E, 2B) and (E, 2B, N) tensors: strided views with a storage offset.
        B = 37
        big = make_inputs(2 * B, kind="mixed", seed=9)
        q2 = torch.from_numpy(big["next_qs"])
        lp2 = torch.from_numpy(big["next_log_probs"])
        q, lp = q2.chunk(2, dim=1)[1], lp2.chunk(2, dim=1)[1]
        assert not lp.is_contiguous() and lp.storage_offset() > 0
        rest = {k: torch.from_numpy(big[k][B:]) for k in ("reward", "terminated", "next_alpha_log_pi")}
        rest["reward"] = torch.from_numpy(np.repeat(big["reward"][B:, None], 2, axis=1))[:, :1]  # (B, 1), stride 2
        got = torch_impl.categorical_td_target(q, lp, **rest, gamma=0.99, backend=self.backend, strict=True).numpy()
        want = R.categorical_td_target(q.numpy(), lp.numpy(), rest["reward"].numpy(), rest["terminated"].numpy(),
                                       rest["next_alpha_log_pi"].numpy(), gamma=0.99)
        assert max_abs_error(got, want) <= atol_vs_float64(101)

    def test_transposed_log_probs(self):
        x = make_inputs(19, kind="mixed", seed=10)
        t = to_torch(x)
        t["next_log_probs"] = t["next_log_probs"].transpose(0, 2).contiguous().transpose(0, 2)  # (E, B, N), N-major
        got = torch_impl.categorical_td_target(**t, gamma=0.99, backend=self.backend, strict=True).numpy()
        assert max_abs_error(got, R.categorical_td_target(**x, gamma=0.99)) <= atol_vs_float64(101)

    @pytest.mark.parametrize("mutate, exc, needle", [
        (lambda t: t.update(reward=t["reward"][:3]), ValueError, "reward"),
        (lambda t: t.update(next_qs=t["next_qs"][0]), ValueError, "next_qs"),
        (lambda t: t.update(next_log_probs=t["next_log_probs"][0]), ValueError, "next_log_probs"),
        (lambda t: t.update(next_log_probs=t["next_log_probs"][:0], next_qs=t["next_qs"][:0]), ValueError, "E >= 1"),
        (lambda t: t.update(next_log_probs=t["next_log_probs"][..., :1]), ValueError, "N >= 2"),
        (lambda t: t.update(next_log_probs=t["next_log_probs"].long()), TypeError, "next_log_probs"),
        (lambda t: t.update(terminated=t["terminated"].bool()), TypeError, "terminated"),
        (lambda t: t.update(reward=t["reward"].to("meta")), ValueError, "reward must be on the same device"),
        (lambda t: t.update(next_qs=t["next_qs"].numpy()), TypeError, "next_qs must be a torch.Tensor"),
    ])
    def test_bad_input_names_the_argument(self, mutate, exc, needle):
        t = to_torch(make_inputs(4, 11))
        mutate(t)
        with pytest.raises(exc, match=needle):
            torch_impl.categorical_td_target(**t, gamma=0.99, backend=self.backend, strict=True)

    @pytest.mark.parametrize("kwargs, needle", [(dict(min_v=2.0, max_v=1.0), "min_v"), (dict(gamma=-0.1), "gamma"),
                                                (dict(gamma="0.9"), "gamma")])
    def test_bad_scalars(self, kwargs, needle):
        t = to_torch(make_inputs(4, 11))
        with pytest.raises((ValueError, TypeError), match=needle):
            torch_impl.categorical_td_target(**t, **dict(dict(gamma=0.99), **kwargs), backend=self.backend)


class TestTorchReference(TorchOpTests):
    name = backend = "torch"


class TestTritonInterpreted(TorchOpTests):
    """The fused kernel itself, run by the Triton interpreter (strict: a fallback would raise)."""

    name = backend = "triton"

    def test_kernel_really_runs(self, monkeypatch):
        calls = []
        real = dispatch.IMPLEMENTATIONS["triton"]
        monkeypatch.setitem(dispatch.IMPLEMENTATIONS, "triton", lambda *a: calls.append(1) or real(*a))
        self.run(make_inputs(5), 0.99)
        assert calls == [1]

    def test_agrees_with_torch_reference(self):
        for case in (Case(B=129, kind="mixed"), Case(B=64, kind="peaked"), Case(B=33, N=51, E=3, kind="mixed")):
            x = case.inputs()
            got = self.run(x, case.gamma)
            ref = torch_impl.categorical_td_target(**to_torch(x), gamma=case.gamma, backend="torch").numpy()
            assert max_abs_error(got, ref) <= 1e-6  # same fp32 b bit for bit; only exp and sum order differ

    def test_registered_op_equals_direct_launch(self):
        # Eager calls launch the kernel directly; torch.compile calls the registered triton_op. Same kernel, same bits.
        from torch_impl.reference import support_constants

        t = to_torch(make_inputs(50, kind="mixed", seed=12))
        mv, inv = support_constants(101, -5.0, 5.0)
        via_op = torch.ops.flashsac.categorical_td_target(*t.values(), 0.99, mv, inv)
        direct = torch_impl.categorical_td_target(**t, gamma=0.99, backend="triton", strict=True)
        assert torch.equal(via_op.nan_to_num(-1.0), direct.nan_to_num(-1.0))

    @settings(max_examples=25, deadline=None)
    @given(gamma=st.one_of(st.floats(0.0, 1.0), st.sampled_from([0.0625, 0.0624, 0.5, 0.9, 1.0])),
           seed=st.integers(0, 2**31 - 1), N=st.sampled_from([2, 3, 51, 101, 257]), E=st.integers(1, 3),
           kind=st.sampled_from(["mixed", "peaked", "integral", "large_shift"]))
    def test_matches_torch_reference_for_any_discount(self, gamma, seed, N, E, kind):
        # The banded gather must cover every contributing source for every g (SPEC.md 8): compare with the scatter.
        x = make_inputs(24, N, E, seed=seed, kind=kind)
        got = self.run(x, gamma)
        ref = torch_impl.categorical_td_target(**to_torch(x), gamma=gamma, backend="torch").numpy()
        assert max_abs_error(got, ref) <= 1e-6 * max(1.0, (N - 1) / 100)

    def test_deterministic(self):
        x = make_inputs(100, kind="mixed", seed=4)
        assert np.array_equal(self.run(x, 0.99), self.run(x, 0.99), equal_nan=True)


class TestDispatch:
    def setup_method(self):
        dispatch.reset_dispatch()

    def teardown_method(self):
        dispatch.reset_dispatch()

    def test_compiles_fullgraph_without_dynamo_cache_warnings(self):
        # the dispatcher's cached validation must not make dynamo warn (once per process, in users' training logs)
        import warnings

        t = to_torch(make_inputs(9, kind="mixed", seed=3))
        eager = torch_impl.categorical_td_target(**t, gamma=0.99, backend="torch")
        torch._dynamo.reset()
        fn = torch.compile(lambda **kw: torch_impl.categorical_td_target(**kw, gamma=0.99, backend="torch"),
                           fullgraph=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled = fn(**t)
        assert torch.allclose(compiled, eager, atol=1e-6, equal_nan=True)
        assert not [w for w in caught if "lru_cache" in str(w.message)]

    def test_unknown_backend_lists_the_valid_ones(self):
        with pytest.raises(ValueError, match=r"\('auto', 'torch', 'triton'\)"):
            torch_impl.categorical_td_target(**to_torch(make_inputs(3)), gamma=0.9, backend="cuda")

    def test_auto_picks_triton_when_it_can_run(self):
        d = torch_impl.resolve_backend("auto", device="cpu")  # the interpreter counts as available in tests
        assert d.backend == "triton"

    @pytest.mark.parametrize("patch, reason", [
        (lambda mp: mp.setattr("torch_impl.ops.INTERPRET", False), "needs CUDA"),
        (lambda mp: mp.setattr("torch_impl.ops.triton.__version__", "2.1.0"), "outside the tested range"),
        (lambda mp: mp.setattr("torch_impl.ops.INTERPRET", False) or mp.setattr("torch.cuda.is_available",
                                                                                 lambda: True), "needs CUDA"),
    ])
    def test_fallback_reasons_logged_once_and_counted(self, monkeypatch, caplog, patch, reason):
        patch(monkeypatch)
        x = to_torch(make_inputs(6))
        with caplog.at_level(logging.INFO, logger="flashsac.torch_impl"):
            for _ in range(3):
                out = torch_impl.categorical_td_target(**x, gamma=0.99, backend="triton")
        assert [r for r in caplog.records if reason in r.getMessage()].__len__() == 1
        assert torch_impl.dispatch_stats()["fallback_count"] == 1
        assert max_abs_error(out.numpy(), R.categorical_td_target(**make_inputs(6), gamma=0.99)) <= atol_vs_float64(101)
        with pytest.raises(torch_impl.BackendUnavailable, match=reason):
            torch_impl.categorical_td_target(**x, gamma=0.99, backend="triton", strict=True)

    def test_capability_below_8_falls_back(self, monkeypatch):
        from torch_impl import ops

        monkeypatch.setattr(ops, "INTERPRET", False)
        monkeypatch.setattr(ops, "_CAPABILITY", {0: (7, 5)})
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        d = torch_impl.resolve_backend("triton", device="cuda:0")
        assert d.backend == "torch" and "compute capability 7.5 < 8.0" in d.reason

    @pytest.mark.parametrize("dtype, N, reason", [(torch.float64, 101, "float64"), (torch.float32, 5000, "N = 5000")])
    def test_unsupported_inputs_fall_back(self, dtype, N, reason):
        d = torch_impl.resolve_backend("triton", dtype=dtype, num_bins=N)
        assert d.backend == "torch" and reason in d.reason

    def test_grad_inputs_route_to_reference(self):
        x = to_torch(make_inputs(6))
        x["next_log_probs"].requires_grad_(True)
        out = torch_impl.categorical_td_target(**x, gamma=0.99, backend="triton")
        assert not out.requires_grad
        assert "requires grad" in torch_impl.backend_info()["decisions"][-1]["reason"]
        with torch.no_grad():
            torch_impl.categorical_td_target(**x, gamma=0.99, backend="triton", strict=True)  # fine without grad

    def test_first_launch_failure_falls_back_once_logged_counted_strict_raises(self, monkeypatch, caplog):
        launches = []

        def broken(*args):
            launches.append(1)
            raise RuntimeError("simulated triton launch failure: CUDA_ERROR_NO_BINARY_FOR_GPU")

        monkeypatch.setitem(dispatch.IMPLEMENTATIONS, "triton", broken)
        x = make_inputs(6)
        want = R.categorical_td_target(**x, gamma=0.99)
        with pytest.raises(RuntimeError, match="NO_BINARY_FOR_GPU"):
            torch_impl.categorical_td_target(**to_torch(x), gamma=0.99, backend="auto", strict=True)
        with caplog.at_level(logging.INFO, logger="flashsac.torch_impl"):
            for _ in range(3):
                out = torch_impl.categorical_td_target(**to_torch(x), gamma=0.99, backend="auto")
                assert max_abs_error(out.numpy(), want) <= atol_vs_float64(101)
        hits = [r for r in caplog.records if "NO_BINARY_FOR_GPU" in r.getMessage()]
        assert len(hits) == 1 and hits[0].levelno == logging.WARNING and launches == [1, 1]
        assert torch_impl.dispatch_stats() == {"fallback_count": 1, "runtime_failures": 1}
        info = torch_impl.backend_info(to_torch(x)["next_log_probs"], "triton")
        assert info["decision"]["backend"] == "torch" and "runtime failure at its first launch" in (
            info["decision"]["reason"])
        with pytest.raises(torch_impl.BackendUnavailable, match="NO_BINARY_FOR_GPU"):
            torch_impl.categorical_td_target(**to_torch(x), gamma=0.99, backend="triton", strict=True)

    def test_missing_triton_import(self, monkeypatch):
        monkeypatch.delitem(dispatch.IMPLEMENTATIONS, "triton")
        monkeypatch.setitem(dispatch.IMPORT_ERRORS, "triton", "ModuleNotFoundError: No module named 'triton'")
        d = torch_impl.resolve_backend("auto")
        assert d.backend == "torch" and "No module named 'triton'" in d.reason
        with pytest.raises(torch_impl.BackendUnavailable, match="No module named"):
            torch_impl.resolve_backend("triton", strict=True)

    def test_backend_info_without_inputs_reports_the_machine_not_a_decision(self):
        info = torch_impl.backend_info()
        assert info["device"] == "cpu" and info["probe"].startswith("device=cpu, dtype=float32, E=2, N=101")
        assert info["backends"] == {"torch": "available", "triton": "available"}  # the interpreter runs CPU tensors
        assert info["interpret"] is True
        assert info["decision"] is None and info["decisions"] == [] and info["fallback_count"] == 0

    def test_backend_info_without_a_gpu_names_the_device_not_inputs(self, monkeypatch):
        monkeypatch.setattr("torch_impl.ops.INTERPRET", False)
        info = torch_impl.backend_info()
        assert "the device is cpu: the kernel needs CUDA" in info["backends"]["triton"]
        assert "inputs" not in info["backends"]["triton"]
        assert info["decision"] is None and info["fallback_count"] == 0

    def test_backend_info_with_inputs_reports_their_decision_without_counting(self, monkeypatch, caplog):
        monkeypatch.setattr("torch_impl.ops.INTERPRET", False)
        lp = torch.zeros(3, 4, 51, dtype=torch.bfloat16)
        with caplog.at_level(logging.INFO, logger="flashsac.torch_impl"):
            info = torch_impl.backend_info(lp, "triton")
        assert info["decision"]["backend"] == "torch" and "needs CUDA" in info["decision"]["reason"]
        assert info["decision"]["config"] == "device=cpu, dtype=bfloat16, E=3, N=51, needs_grad=False"
        assert info["fallback_count"] == 0 and info["decisions"] == [] and not caplog.records, "a report, not a call"
        x = to_torch(make_inputs(4, 51, 3))
        torch_impl.categorical_td_target(**x, gamma=0.9, backend="triton")  # the real call falls back: counted once
        info = torch_impl.backend_info(x["next_log_probs"], "triton")
        assert info["fallback_count"] == 1 and len(info["decisions"]) == 1
        assert info["decision"] == info["decisions"][0]
        with pytest.raises(ValueError, match="next_log_probs"):
            torch_impl.backend_info(torch.zeros(3, 4))

    def test_backend_info_has_the_same_structure_in_both_frameworks(self, monkeypatch):
        import jax_impl
        from jax_impl import dispatch as jax_dispatch

        monkeypatch.setitem(jax_dispatch.GATES, "mosaic", lambda key: "simulated: no Hopper GPU")
        t, j = torch_impl.backend_info(), jax_impl.backend_info()
        assert t.keys() == j.keys() and t["decision"] is None and j["decision"] is None
        assert list(t["backends"]) == ["torch", "triton"]
        assert list(j["backends"]) == ["jax", "triton", "pallas", "mosaic"]
        recorded = json.loads(validation_path().read_text())["backends"]["torch/triton"]
        assert t["validated"]["triton"]["gpu"] == recorded["gpu"] and t["auto_order"] == ["triton"]
        assert isinstance(t["fallback_count"], int) and isinstance(j["fallback_count"], int)
        assert type(torch_impl.resolve_backend("torch")) is type(jax_impl.resolve_backend("jax"))

    def test_repeat_calls_skip_the_metadata_checks(self, monkeypatch):
        calls = []
        real = dispatch._validate
        monkeypatch.setattr(dispatch, "_validate", lambda *a: calls.append(1) or real(*a))
        x = to_torch(make_inputs(5, 11))
        for _ in range(3):
            torch_impl.categorical_td_target(**x, gamma=0.9, backend="torch")
        assert calls == [1]
        bad = dict(x, reward=x["reward"][:4])  # a new signature is checked again
        with pytest.raises(ValueError, match="reward"):
            torch_impl.categorical_td_target(**bad, gamma=0.9, backend="torch")
        x["next_log_probs"].requires_grad_(True)  # requires_grad is read on every call: routed to the reference
        out = torch_impl.categorical_td_target(**x, gamma=0.9, backend="triton")
        assert len(calls) == 2 and not out.requires_grad
        assert "requires grad" in torch_impl.backend_info()["decisions"][-1]["reason"]
        with pytest.raises(ValueError, match="gamma"):  # gamma is checked on every call
            torch_impl.categorical_td_target(**to_torch(make_inputs(5, 11)), gamma=1.5, backend="torch")

    def test_unhashable_support_bound_names_the_argument(self):
        with pytest.raises(TypeError, match="min_v"):
            torch_impl.categorical_td_target(**to_torch(make_inputs(3)), gamma=0.9, min_v=[1.0], backend="torch")

    def test_torch_vs_jax_reference(self):
        import jax.numpy as jnp

        import jax_impl

        for case in (Case(B=129, kind="mixed"), Case(B=64, N=51, E=3, kind="peaked")):
            x = case.inputs()
            a = torch_impl.categorical_td_target(**to_torch(x), gamma=case.gamma, backend="torch").numpy()
            b = np.asarray(jax_impl.categorical_td_target(**{k: jnp.asarray(v) for k, v in x.items()},
                                                          gamma=case.gamma, backend="jax"))
            assert max_abs_error(a, b) <= ATOL_BETWEEN
