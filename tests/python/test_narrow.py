"""Tensor.narrow (torch.narrow): one axis's slice, a view, with torch's argument rules."""

from __future__ import annotations

import numpy as np
import pytest

import tgrad


def _x() -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5))


@pytest.mark.parametrize("dim, start, length", [(0, 0, 2), (1, 1, 2), (2, -3, 3), (-1, 0, 0), (2, 5, 0), (-2, 2, 1)])
def test_narrow_is_the_slice_of_one_axis(dim: int, start: int, length: int) -> None:
    x = _x()
    want = np.arange(30, dtype=np.float32).reshape(2, 3, 5)
    axis = dim % 3
    first = start + want.shape[axis] if start < 0 else start
    index = [slice(None)] * 3
    index[axis] = slice(first, first + length)
    got = x.narrow(dim, start, length)
    assert got.shape == want[tuple(index)].shape
    assert np.array_equal(got.numpy(np.float32), want[tuple(index)])
    assert got.buffer_id == x.buffer_id  # a view: the same buffer


@pytest.mark.parametrize("dim, start, length", [(3, 0, 1), (-4, 0, 1), (1, 0, 4), (1, 2, 2), (2, -6, 1), (0, 0, -1)])
def test_narrow_out_of_range_raises_index_out_of_range(dim: int, start: int, length: int) -> None:
    with pytest.raises(tgrad.errors.IndexOutOfRangeError, match="narrow"):
        _x().narrow(dim, start, length)


def test_narrow_takes_integers_only() -> None:
    with pytest.raises(tgrad.errors.InvalidArgumentError):
        _x().narrow(0, 0.5, 1)  # type: ignore[arg-type]


def test_a_traced_narrow_is_recorded_as_its_slice_and_validates() -> None:
    x = _x()
    tr = tgrad.trace(lambda t: t.narrow(2, 1, 3) + t.narrow(2, 1, 3), x)
    kinds = [op.kind for op in tr.ops]
    assert kinds.count("slice") == 2
    status = tr.validate()
    assert status.passed, status.message
