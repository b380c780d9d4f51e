"""agent_torch.graphs.GraphCache's bookkeeping on CPU, with torch.cuda's graph API replaced by an emulation.

The emulated graph records the captured call and replays it by calling it again on the static inputs, which is what
a CUDA graph does to the captured kernels. What CUDA does is tested on a GPU
(tests/test_agent_torch.py::test_cuda_graph_agent_matches_eager_agent); here: warm-up counts, one
capture per key, new inputs copied into the static ones, static outputs returned, clear().
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import agent_torch.graphs as graphs


class _FakeGraph:
    current: _FakeGraph | None = None

    def __init__(self) -> None:
        self.replays = 0
        self.fn = None

    def replay(self) -> None:
        self.replays += 1
        self.fn()


@pytest.fixture
def fake_cuda(monkeypatch):
    captured = []

    @contextlib.contextmanager
    def graph(g, stream=None):
        _FakeGraph.current = g
        yield
        _FakeGraph.current = None
        captured.append(g)

    class _Stream:
        def wait_stream(self, other) -> None:
            pass

    monkeypatch.setattr(graphs.torch.cuda, "CUDAGraph", _FakeGraph)
    monkeypatch.setattr(graphs.torch.cuda, "graph", graph)
    monkeypatch.setattr(graphs.torch.cuda, "Stream", _Stream)
    monkeypatch.setattr(graphs.torch.cuda, "current_stream", lambda: _Stream())
    monkeypatch.setattr(graphs.torch.cuda, "stream", lambda s: contextlib.nullcontext())
    return captured


def _recording(calls):
    """fn(x) -> x * 2 into a persistent output (a capture must write to static memory); records each eager run."""
    out = {}

    def fn(x):
        calls.append(x.clone())
        if _FakeGraph.current is not None:  # under capture: the replay recomputes into the same output tensor
            static_out = torch.empty_like(x)
            _FakeGraph.current.fn = lambda: static_out.copy_(x * 2)
            out["static"] = static_out
            return static_out
        return x * 2

    return fn, out


def test_warmup_then_one_capture_then_replays(fake_cuda):
    cache = graphs.GraphCache(warmup=2)
    calls: list[torch.Tensor] = []
    fn, out = _recording(calls)
    results = [cache("k", fn, torch.full((3,), float(i))) for i in range(5)]
    assert [r.tolist() for r in results[:2]] == [[0.0] * 3, [2.0] * 3]  # eager warm-up calls
    assert len(fake_cuda) == 1 and len(cache) == 1  # captured once, at the third call
    assert results[2] is out["static"] and results[4] is out["static"]  # replays return the static output
    assert out["static"].tolist() == [8.0] * 3  # the last replay ran on the last inputs (4 * 2)
    assert len(calls) == 3 and fake_cuda[0].replays == 3  # fn traced only at capture; 3 replays (calls 3..5)


def test_keys_are_captured_separately_and_clear_restarts(fake_cuda):
    cache = graphs.GraphCache(warmup=1)
    fn_a, out_a = _recording([])
    fn_b, out_b = _recording([])
    for i in range(3):
        cache("a", fn_a, torch.full((2,), float(i)))
        cache("b", fn_b, torch.full((2,), 10.0 + i))
    assert len(cache) == 2 and len(fake_cuda) == 2
    assert out_a["static"].tolist() == [4.0, 4.0] and out_b["static"].tolist() == [24.0, 24.0]
    cache.clear()
    assert len(cache) == 0
    assert cache("a", fn_a, torch.ones(2)).tolist() == [2.0, 2.0]  # eager again (warm-up restarts)
    assert len(fake_cuda) == 2


def test_warmup_must_be_positive():
    with pytest.raises(ValueError, match="warmup must be >= 1, got 0"):
        graphs.GraphCache(warmup=0)
