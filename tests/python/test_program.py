"""tgrad.capture / Program.run (libtgrad's tgrad_program_*) and slice_scatter with a Tensor start."""

from __future__ import annotations

import numpy as np
import pytest

import tgrad
from model_dirs import storage_address
from tgrad import errors, int32

RNG = np.random.default_rng(7)


def _t(*shape: int) -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(RNG.standard_normal(shape).astype(np.float32))


def _pos(value: int) -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(np.array([value], np.int32), dtype=int32)


def _graph(x: tgrad.Tensor, w: tgrad.Tensor, cache: tgrad.Tensor, at: tgrad.Tensor) -> list[tgrad.Tensor]:
    """A decode-like graph: a product, a norm, a softmax, a cache write at a data position."""
    h = tgrad.rms_norm(x @ w, [16])
    written = tgrad.slice_scatter(cache, h.reshape(1, 2, 16), 1, at)
    scores = tgrad.softmax(h @ written.reshape(-1, 16).T, dim=-1)
    return [scores, written]


def test_a_run_gives_the_bytes_of_the_graph_built_again() -> None:
    w = _t(24, 16).realize()
    x, cache = _t(2, 24), tgrad.zeros(1, 8, 16)
    at = _pos(3)
    outs = _graph(x, w, cache, at)
    program = tgrad.capture(outs, [x, cache, at])
    assert (program.inputs, program.outputs) == (3, 2) and program.nodes >= 5 and program.constants >= 1
    first = [o.to_bytes() for o in outs]  # capturing changed nothing: the outputs realize as before
    assert first == [o.to_bytes() for o in _graph(x, w, cache, _pos(3))]
    for i in range(4):
        x2, cache2, at2 = _t(2, 24), _t(1, 8, 16).realize(), _pos(5 - i)
        got = program.run([x2, cache2, at2])
        want = _graph(x2, w, cache2, at2)
        assert [g.to_bytes() for g in got] == [v.to_bytes() for v in want]
        assert [g.shape for g in got] == [v.shape for v in want]


def test_constants_stay_with_the_program() -> None:
    w = _t(8, 4).realize()
    x = _t(3, 8)
    y = (x @ w).exp()
    program = tgrad.capture([y], [x])
    want = (x @ w).exp().to_bytes()
    del w, y
    (again,) = program.run([x])
    assert again.to_bytes() == want


def test_inputs_must_match_what_was_captured() -> None:
    x = _t(3, 8)
    program = tgrad.capture([x.exp() + 1.0], [x])
    with pytest.raises(errors.ShapeMismatchError, match="input 0"):
        program.run([_t(3, 7)])
    with pytest.raises(errors.ShapeMismatchError):
        program.run([_t(8, 3).T])  # the same shape through another view
    with pytest.raises(errors.DtypeUnsupportedError):
        program.run([tgrad.Tensor.from_numpy(np.ones((3, 8), np.float32), dtype=tgrad.float32)])
    with pytest.raises(errors.InvalidArgumentError, match="captured with 1"):
        program.run([])
    with pytest.raises(errors.InvalidArgumentError):
        program.run([np.ones((3, 8))])  # type: ignore[list-item]


def test_what_cannot_be_captured_is_refused() -> None:
    x = _t(3, 3)
    with pytest.raises(errors.InvalidArgumentError, match="random"):
        tgrad.capture([x + tgrad.rand(3, 3)], [x])
    with pytest.raises(errors.InvalidArgumentError, match="share one buffer"):
        tgrad.capture([x.exp()], [x, x.T])
    with pytest.raises(errors.InvalidArgumentError, match="no outputs"):
        tgrad.capture([], [x])
    w = _t(3, 3).realize().requires_grad_()
    with pytest.raises(errors.InvalidArgumentError, match="gradients"):
        tgrad.capture([x @ w], [x])
    with pytest.raises(errors.InvalidArgumentError, match="gradient rule"):
        tgrad.slice_scatter(_t(2, 3).requires_grad_(), _t(1, 3), 0, _pos(0))


def test_a_long_chain_is_captured_without_recursion() -> None:
    x = _t(4)
    y = x
    for _ in range(20000):
        y = y + 1.0
    program = tgrad.capture([y], [x])
    assert program.nodes == 20000
    (again,) = program.run([x])
    assert again.to_bytes() == y.to_bytes()


def test_a_program_outputs_an_input_or_a_constant_as_itself() -> None:
    x, c = _t(2, 2), _t(2, 2).realize()
    program = tgrad.capture([x, c], [x])
    x2 = _t(2, 2)
    a, b = program.run([x2])
    assert (a.to_bytes(), b.to_bytes()) == (x2.to_bytes(), c.to_bytes()) and program.nodes == 0


# ---- slice_scatter with a Tensor start ------------------------------------------------------------
def test_a_tensor_start_writes_where_the_number_would() -> None:
    dst, src = _t(2, 9, 3).realize(), _t(2, 2, 3)
    for at in (0, 4, 7):
        assert tgrad.slice_scatter(dst, src, 1, _pos(at)).to_bytes() == tgrad.slice_scatter(dst, src, 1, at).to_bytes()


def test_a_tensor_start_is_checked_when_it_is_known() -> None:
    dst, src = _t(2, 9, 3).realize(), _t(2, 2, 3)
    for bad in (8, -1):
        with pytest.raises(errors.IndexOutOfRangeError, match="do not fit"):
            tgrad.slice_scatter(dst, src, 1, _pos(bad))
    pending = tgrad.take(tgrad.Tensor.from_numpy(np.array([8, 1], np.int32), dtype=int32),
                         tgrad.Tensor.from_numpy(np.array([0], np.int32), dtype=int32))
    before = dst.to_bytes()
    out = tgrad.slice_scatter(dst, src, 1, pending)  # 8 is known only when the take runs
    with pytest.raises(errors.IndexOutOfRangeError, match="start tensor"):
        out.realize()
    assert dst.to_bytes() == before
    with pytest.raises(errors.DtypeUnsupportedError, match="int32"):
        tgrad.slice_scatter(dst, src, 1, tgrad.Tensor.from_numpy(np.array([1.0], np.float32)))
    with pytest.raises(errors.ShapeMismatchError, match="one element"):
        tgrad.slice_scatter(dst, src, 1, tgrad.Tensor.from_numpy(np.array([1, 2], np.int32), dtype=int32))


def test_a_tensor_start_writes_in_place_when_it_holds_the_only_reference() -> None:
    cache = tgrad.zeros(1, 6, 4).realize()
    where = storage_address(cache)
    for at in range(6):
        cache = tgrad.slice_scatter(cache, _t(1, 1, 4), 1, _pos(at))  # the old cache's last reference dropped
        cache.realize()
        assert storage_address(cache) == where


def test_a_program_and_its_runs_leave_nothing_behind() -> None:
    import gc

    gc.collect()
    before = (tgrad.live_tensors(), tgrad.live_buffers())
    w, x, cache = _t(24, 16).realize(), _t(2, 24), tgrad.zeros(1, 8, 16)
    at = _pos(2)
    program = tgrad.capture(_graph(x, w, cache, at), [x, cache, at])
    for _ in range(3):
        outs = program.run([x, cache, at])
        outs[0].realize()
    with pytest.raises(errors.ShapeMismatchError):
        program.run([_t(2, 23), cache, at])  # a refused run makes nothing
    del w, x, cache, at, program, outs
    gc.collect()
    assert (tgrad.live_tensors(), tgrad.live_buffers()) == before
