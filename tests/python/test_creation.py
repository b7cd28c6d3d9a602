"""Tensor creation (tgrad.creation; docs/random.md, "Creation"): values against numpy and the
exact rounding of the conformance kit, torch's dtype rules where tgrad has the dtype, item(), and
typed refusals that allocate nothing."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad.conformance import exact


def bf16_bits(t: tgrad.Tensor) -> list[int]:
    return [int(b) for b in t.numpy().view(np.uint16).reshape(-1)]


def rounded(values: list[Fraction], dtype: str) -> list[int]:
    return [exact.round_to(v, exact.BF16 if dtype == "bfloat16" else exact.F32) for v in values]


def test_tensor_from_python_data() -> None:
    t = tgrad.tensor([[1.5, 2.1], [3.0, -0.1]])
    assert t.dtype == tgrad.bfloat16 and t.shape == (2, 2)
    assert bf16_bits(t) == rounded([Fraction(v) for v in (1.5, 2.1, 3.0, -0.1)], "bfloat16")
    i = tgrad.tensor([[1, 2, 3]])
    assert i.dtype == tgrad.int32 and i.numpy().tolist() == [[1, 2, 3]]
    assert tgrad.tensor(7).shape == () and tgrad.tensor(7).item() == 7
    assert tgrad.tensor(2.5).item() == 2.5 and isinstance(tgrad.tensor(2.5).item(), float)
    assert tgrad.tensor([1, 2.5]).dtype == tgrad.bfloat16  # mixed: floating
    f = tgrad.tensor([0.1, 1e-40], dtype=tgrad.float32)
    assert f.dtype == tgrad.float32 and f.numpy().tolist() == np.array([0.1, 1e-40], np.float32).tolist()
    # integers for a floating dtype: libtgrad's cast rounds them once
    big = tgrad.tensor([257, 16_777_217, -(1 << 31)], dtype=tgrad.bfloat16)
    assert bf16_bits(big) == rounded([Fraction(257), Fraction(16_777_217), Fraction(-(1 << 31))], "bfloat16")
    assert tgrad.tensor([], dtype=tgrad.float32).shape == (0,)
    assert tgrad.tensor(np.arange(6, dtype=np.float64).reshape(2, 3)).numpy().astype(np.float32).tolist() == \
        [[0, 1, 2], [3, 4, 5]]
    assert tgrad.tensor(tgrad.tensor([1.0, 2.0])).numpy().tolist() == [1.0, 2.0]


def test_float64_data_rounds_once() -> None:
    """1 + 2^-8 + 2^-60 lies above the bf16 midpoint 1 + 2^-8: one rounding goes up; rounding
    through float32 first would land on the midpoint and go to even (1.0)."""
    assert bf16_bits(tgrad.tensor([1 + 2**-8 + 2**-40])) == [0x3F81]


@pytest.mark.parametrize("dtype", [None, tgrad.float32, tgrad.int32])
def test_zeros_ones_full_empty(dtype: object) -> None:
    want = dtype or tgrad.bfloat16
    for make, value in ((tgrad.zeros, 0), (tgrad.ones, 1), (tgrad.empty, 0)):
        t = make(2, 3, dtype=dtype)
        assert t.shape == (2, 3) and t.dtype == want
        assert np.asarray(t.numpy(), dtype=np.float64).tolist() == [[value] * 3] * 2
    assert tgrad.zeros((4,)).shape == (4,) and tgrad.zeros([]).shape == () and tgrad.zeros(0, 5).shape == (0, 5)
    assert bf16_bits(tgrad.zeros(2)) == [0, 0]  # +0.0
    full = tgrad.full((3,), 0.1, dtype=dtype) if dtype != tgrad.int32 else tgrad.full((3,), 7, dtype=dtype)
    assert full.dtype == want
    if want == tgrad.bfloat16:
        assert bf16_bits(full) == rounded([Fraction(0.1)] * 3, "bfloat16")
    assert tgrad.full((2,), 7).dtype == tgrad.int32 and tgrad.full((2,), 7.0).dtype == tgrad.bfloat16


def test_like_forms_take_shape_dtype_device() -> None:
    x = tgrad.tensor([[1.0, 2.0, 3.0]], dtype=tgrad.float32)
    for t in (tgrad.zeros_like(x), tgrad.ones_like(x), tgrad.empty_like(x), tgrad.full_like(x, 2.5)):
        assert t.shape == (1, 3) and t.dtype == tgrad.float32 and t.device == "cpu"
    assert tgrad.full_like(x, 2.5).numpy().tolist() == [[2.5] * 3]
    assert tgrad.zeros_like(x, dtype=tgrad.int32).dtype == tgrad.int32


@pytest.mark.parametrize("args,kwargs", [((5,), {}), ((2, 9), {}), ((10, 0, -3), {}), ((3, 3), {}), ((-4, 4, 2), {})])
def test_arange_of_ints_is_int32_like_numpy(args: tuple[int, ...], kwargs: dict[str, object]) -> None:
    t = tgrad.arange(*args, **kwargs)
    assert t.dtype == tgrad.int32
    assert t.numpy().tolist() == np.arange(*args).tolist()


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("start,end,step", [(0.0, 1.0, 0.1), (1.0, 4.0, 1), (-1.5, 2.0, 0.37), (5.0, 0.0, -0.7),
                                            (1000.0, 1001.0, 1 / 64), (0, 3, 0.5)])
def test_arange_of_floats_rounds_each_exact_value_once(dtype: str, start: float, end: float, step: float) -> None:
    t = tgrad.arange(start, end, step, dtype=dtype)
    fs, fe, fd = Fraction(start), Fraction(end), Fraction(step)
    n = max(0, -((fs - fe) // fd))  # ceil((end - start) / step), exactly
    assert t.shape == (n,) == np.arange(start, end, step).shape
    want = rounded([fs + i * fd for i in range(n)], dtype)
    got = bf16_bits(t) if dtype == "bfloat16" else [int(b) for b in t.numpy().view(np.uint32)]
    assert got == want


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("start,end,steps", [(0.0, 1.0, 5), (-3.0, 7.0, 11), (0.0, 1.0, 7), (2.0, 2.0, 4),
                                             (1.0, -1.0, 100), (5.0, 9.0, 1), (0.0, 1.0, 0)])
def test_linspace_rounds_each_exact_value_once(dtype: str, start: float, end: float, steps: int) -> None:
    t = tgrad.linspace(start, end, steps, dtype=dtype)
    fs, fe = Fraction(start), Fraction(end)
    want = rounded([fs + (fe - fs) * i / (steps - 1) if steps > 1 else fs for i in range(steps)], dtype)
    got = bf16_bits(t) if dtype == "bfloat16" else [int(b) for b in t.numpy().view(np.uint32)]
    assert got == want
    if steps > 1:
        assert np.asarray(t.numpy(), np.float64)[-1] == np.asarray(tgrad.tensor(end, dtype=dtype).numpy(), np.float64)


def test_eye() -> None:
    assert np.asarray(tgrad.eye(3).numpy(), np.float32).tolist() == np.eye(3).tolist()
    assert np.asarray(tgrad.eye(2, 4, dtype=tgrad.float32).numpy()).tolist() == np.eye(2, 4).tolist()
    assert tgrad.eye(3, dtype=tgrad.int32).numpy().tolist() == np.eye(3, dtype=np.int32).tolist()
    assert tgrad.eye(0).shape == (0, 0)


def test_item() -> None:
    assert tgrad.tensor([[3.25]]).item() == 3.25
    assert tgrad.tensor([[5]]).item() == 5 and isinstance(tgrad.tensor([[5]]).item(), int)
    assert tgrad.tensor([0.1], dtype=tgrad.float32).item() == float(np.float32(0.1))
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.tensor([1.0, 2.0]).item()
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.zeros(0).item()


def test_refusals_allocate_nothing() -> None:
    live = tgrad.live_tensors()
    bad: list[tuple[type[Exception], object]] = [
        (errors.InvalidArgumentError, lambda: tgrad.zeros(-1)),
        (errors.InvalidArgumentError, lambda: tgrad.ones(2, -3)),
        (errors.InvalidArgumentError, lambda: tgrad.full((2,), "x")),
        (errors.InvalidArgumentError, lambda: tgrad.tensor([[1, 2], [3]])),
        (errors.DtypeUnsupportedError, lambda: tgrad.tensor([True, False])),
        (errors.DtypeUnsupportedError, lambda: tgrad.tensor(["a"])),
        (errors.DtypeUnsupportedError, lambda: tgrad.tensor([1.5], dtype=tgrad.int32)),
        (errors.InvalidArgumentError, lambda: tgrad.tensor([1 << 40])),
        (errors.InvalidArgumentError, lambda: tgrad.tensor([1 << 60], dtype=tgrad.float32)),
        (errors.InvalidArgumentError, lambda: tgrad.arange(0, 10, 0)),
        (errors.InvalidArgumentError, lambda: tgrad.arange(0, float("inf"))),
        (errors.DtypeUnsupportedError, lambda: tgrad.arange(0, 1, 0.5, dtype=tgrad.int32)),
        (errors.InvalidArgumentError, lambda: tgrad.linspace(0, 1, -1)),
        (errors.DtypeUnsupportedError, lambda: tgrad.linspace(0, 1, 3, dtype=tgrad.int32)),
        (errors.InvalidArgumentError, lambda: tgrad.eye(-1)),
        (errors.InvalidArgumentError, lambda: tgrad.zeros_like(np.zeros(3))),
        (errors.DtypeUnsupportedError, lambda: tgrad.zeros(3, dtype="float64")),
    ]
    for cls, make in bad:
        with pytest.raises(cls):
            make()  # type: ignore[operator]
    assert tgrad.live_tensors() == live
