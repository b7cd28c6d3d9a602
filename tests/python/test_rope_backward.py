"""rope_backward: the transpose rotation (by -theta) of a gradient, each value the exact value
rounded once to bf16 (docs/numerics.md, "Rotary position embedding"): checked against the mpmath
reference of test_rope.py at the negated positions (Python integers: -(-2^31) included), on both
layouts, partial rotary dims, batched positions and a float32 inv_freq; the same bytes on every
setting; typed refusals."""

from __future__ import annotations

import numpy as np
import pytest

import tgrad
from tgrad import errors
from every_setting import assert_same_bytes_everywhere  # noqa: E402
from test_rope import _x, reference  # noqa: E402


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rotary_dim", [None, 4])
def test_rope_backward_is_the_transpose_rotation_rounded_once(interleaved: bool, rotary_dim: int | None) -> None:
    rng = np.random.default_rng(4)
    g = _x(rng, (2, 3, 5, 8))
    pos = np.array([0, 1, 7, 4095, 100_000], np.int32)
    y = tgrad.rope_backward(g, pos, 10000.0, rotary_dim=rotary_dim, interleaved=interleaved)
    gb = g.numpy().view(np.uint16).reshape(6, 5, 8)
    want = reference(gb, -pos.astype(np.int64), 10000.0, rotary_dim or 8, interleaved, None)
    assert np.array_equal(y.numpy().view(np.uint16).reshape(6, 5, 8), want)


def test_batched_positions_inv_freq_and_extremes() -> None:
    rng = np.random.default_rng(5)
    g = _x(rng, (2, 2, 3, 6))
    pos = np.array([[3, 9, -(2**31)], [2**31 - 1, 0, -2]], np.int32)
    inv = np.array([1.0, 0.125, 3.0e-5], np.float32)
    y = tgrad.rope_backward(g, tgrad.Tensor.from_numpy(pos, dtype=tgrad.int32), inv_freq=inv)
    gb = g.numpy().view(np.uint16).reshape(4, 3, 6)
    want = reference(gb, -np.repeat(pos, 2, axis=0).astype(np.int64), 0.0, 6, False, inv)
    assert np.array_equal(y.numpy().view(np.uint16).reshape(4, 3, 6), want)


def test_it_undoes_rope_up_to_the_roundings_and_is_named_in_explain() -> None:
    rng = np.random.default_rng(6)
    x = tgrad.Tensor.from_numpy(rng.standard_normal((1, 4, 16)).astype(np.float32), dtype=tgrad.float32).bfloat16()
    pos = np.array([0, 3, 50, 999], np.int32)
    back = tgrad.rope_backward(tgrad.rope(x, pos), pos)
    assert "rope_backward" in back.explain()
    np.testing.assert_allclose(back.float().numpy(), x.float().numpy(), rtol=0, atol=2.0**-6 * 4)


def test_bytes_do_not_depend_on_threads_or_variant() -> None:
    rng = np.random.default_rng(7)
    g = _x(rng, (2, 2, 32, 16))
    pos = np.arange(32, dtype=np.int32) * 37

    def run() -> bytes:
        return (tgrad.rope_backward(g * 1.0, pos).numpy().tobytes()
                + tgrad.rope_backward(g, pos, interleaved=True).numpy().tobytes())

    assert_same_bytes_everywhere(run)


def test_refusals_are_typed_and_allocate_nothing() -> None:
    g = tgrad.Tensor.from_numpy(np.ones((2, 3, 8), np.float32))
    before = tgrad.live_tensors()
    cases = [(lambda: tgrad.rope_backward(g, [0, 1]), errors.ShapeMismatchError),
             (lambda: tgrad.rope_backward(g, [0, 1, 2], rotary_dim=3), errors.InvalidArgumentError),
             (lambda: tgrad.rope_backward(g, [0, 1, 2], base=-1.0), errors.InvalidArgumentError),
             (lambda: tgrad.rope_backward(g, [0, 1, 2], scaling={"rope_type": "llama3"}), errors.InvalidArgumentError),
             (lambda: tgrad.rope_backward(g.float(), [0, 1, 2]), errors.DtypeUnsupportedError),
             (lambda: tgrad.rope_backward(np.ones(3), [0]), errors.InvalidArgumentError)]
    for make, exc in cases:
        with pytest.raises(exc, match="rope_backward"):
            make()
    assert tgrad.live_tensors() == before
