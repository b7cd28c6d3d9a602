"""Arrays that lie (issue 33, cases 1 and 2): an ndarray subclass may override ``shape``,
``strides``, ``dtype``, ``__array__`` or ``__array_interface__`` in Python, and a property may
answer differently each time it is read. A tensor's shape, layout and values come from the buffer
itself and from libtgrad, never from those claims: from_numpy gives the right tensor or a typed
error, and every shape the Python object reports is the one libtgrad holds.

The hypothesis property runs a bounded number of examples (TGRAD_FUZZ_EXAMPLES, default 60)."""

from __future__ import annotations

import itertools
import os
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tgrad
from tgrad import errors
from tgrad._ffi import ffi, lib

BF16 = np.dtype(ml_dtypes.bfloat16)
EXAMPLES = int(os.environ.get("TGRAD_FUZZ_EXAMPLES", "60"))


def library_shape(t: tgrad.Tensor) -> tuple[int, ...]:
    """The shape libtgrad holds for t's handle, asked directly (no Python cache in between)."""
    ndim = ffi.new("int32_t *")
    assert lib.tgrad_tensor_ndim(t._handle, ndim) == 0
    out = ffi.new("int64_t[]", int(lib.TGRAD_MAX_DIMS))
    assert lib.tgrad_tensor_shape(t._handle, out) == 0
    return tuple(out[0:ndim[0]])


class ClaimsShape(np.ndarray):
    """An ndarray whose Python `shape` says `claim` (its buffer holds what it really holds)."""

    claim: tuple[int, ...] = ()

    @property  # type: ignore[override]
    def shape(self) -> tuple[int, ...]:
        return self.claim


class ShiftingShape(np.ndarray):
    """An ndarray whose `shape` answers differently on every read: the real one, then 4096."""

    reads = 0

    @property  # type: ignore[override]
    def shape(self) -> tuple[int, ...]:
        type(self).reads += 1
        return np.ndarray.view(self, np.ndarray).shape if type(self).reads % 2 else (4096,)


class Lies(np.ndarray):
    """Every layout attribute lies: shape, strides, dtype, size, ndim, __array__, the interface."""

    @property  # type: ignore[override]
    def shape(self) -> tuple[int, ...]:
        return (64, 64)

    @property  # type: ignore[override]
    def strides(self) -> tuple[int, ...]:
        return (1 << 40, 8)

    @property  # type: ignore[override]
    def dtype(self) -> Any:
        return np.dtype(np.float64)

    @property  # type: ignore[override]
    def size(self) -> int:
        return 4096

    @property  # type: ignore[override]
    def ndim(self) -> int:
        return 2

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.zeros(4096, np.float64)

    @property
    def __array_interface__(self) -> dict[str, Any]:  # type: ignore[override]
        return {"shape": (4096,), "typestr": "<f8", "data": (0, True), "version": 3}


def subclass(cls: type, real: np.ndarray, **attrs: Any) -> Any:
    out = real.view(cls)
    for k, v in attrs.items():
        setattr(type(out), k, v)
    return out


@pytest.mark.parametrize("claim", [(4_000_000,), (64,), (2, 2), (), (0,)])
def test_a_subclass_claiming_another_shape_gives_the_buffers_tensor(claim: tuple[int, ...]) -> None:
    real = np.arange(4, dtype=np.float32)
    lying = real.view(type("Claims", (ClaimsShape,), {"claim": claim}))
    assert lying.shape == claim  # the lie is in place
    t = tgrad.Tensor.from_numpy(lying)
    assert t.shape == (4,) == library_shape(t)
    np.testing.assert_array_equal(t.numpy(np.float32), real)
    assert t.numpy().shape == (4,)


def test_a_shape_that_changes_between_reads_cannot_size_the_tensor() -> None:
    cls = type("Shifting", (ShiftingShape,), {"reads": 0})
    arr = np.arange(4, dtype=np.float32).view(cls)
    for make in (tgrad.Tensor.from_numpy, tgrad.Tensor):
        t = make(arr)
        assert t.shape == (4,) == library_shape(t)
        out = t.numpy()
        assert out.shape == (4,)
        np.testing.assert_array_equal(out.astype(np.float32), np.arange(4, dtype=np.float32))


def test_products_and_unary_ops_of_a_lying_arrays_tensor_carry_libtgrads_shape() -> None:
    a_real = np.arange(6, dtype=np.float32).reshape(2, 3)
    b_real = np.ones((3, 4), np.float32)
    a = tgrad.Tensor.from_numpy(a_real.view(type("A", (ClaimsShape,), {"claim": (4096, 3)})))
    b = tgrad.Tensor.from_numpy(b_real.view(type("B", (ClaimsShape,), {"claim": (3, 4096)})))
    for t in (a @ b, (a @ b).relu(), a.exp(), -a, a + 1):
        assert t.shape == library_shape(t)
        assert t.numpy().shape == library_shape(t)
    np.testing.assert_array_equal((a @ b).numpy(np.float32), a_real @ b_real)


def test_every_layout_attribute_lying_at_once_changes_nothing() -> None:
    real = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]  # a strided view
    arr = real.view(Lies)
    t = tgrad.Tensor.from_numpy(arr)
    assert t.shape == (3, 2) == library_shape(t)
    np.testing.assert_array_equal(t.numpy(np.float32), real)


def test_a_subclass_lying_about_its_dtype_is_read_as_its_real_dtype() -> None:
    bits = np.array([0x3F80, 0x4000], np.uint16)
    cls = type("SaysFloat", (np.ndarray,), {"dtype": property(lambda self: np.dtype(np.float32))})
    t = tgrad.Tensor.from_bf16_bits(bits.view(cls))
    np.testing.assert_array_equal(t._bits(), bits)
    with pytest.raises(errors.DtypeUnsupportedError):  # real uint16, whatever it says
        tgrad.Tensor.from_numpy(bits.view(cls))


@pytest.mark.parametrize("kind", ["__array__", "__array_interface__", "list", "memoryview"])
def test_array_likes_that_are_not_ndarrays_are_refused_with_a_typed_error(kind: str) -> None:
    class ArrayLike:
        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
            return np.zeros(3, np.float32)

    class Interface:
        __array_interface__ = {"shape": (1 << 40,), "typestr": "<f4", "data": (0, True), "version": 3}

    value = {"__array__": ArrayLike(), "__array_interface__": Interface(), "list": [1.0, 2.0],
             "memoryview": memoryview(b"\x00" * 8)}[kind]
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.Tensor.from_numpy(value)
    t = tgrad.Tensor.from_numpy(np.ones(2, np.float32))
    with pytest.raises(TypeError):  # an operator given one returns NotImplemented: TypeError
        t + value  # noqa: B018


# ---- the property --------------------------------------------------------------------------
LIES = ("shape", "strides", "dtype", "size", "ndim", "__array__", "__array_interface__", "shifting")


@st.composite
def hostile(draw: Any) -> tuple[np.ndarray, Any]:
    """(the real array, an ndarray subclass over it lying about some of its attributes)."""
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim)))
    dtype = draw(st.sampled_from([np.float32, np.float64, np.float16, BF16]))
    real = np.arange(int(np.prod(shape)), dtype=np.float32).astype(dtype).reshape(shape)
    if ndim and draw(st.booleans()):
        real = real[..., ::-1] if draw(st.booleans()) else np.moveaxis(real, 0, -1)
    told = draw(st.lists(st.integers(0, 1 << 41), max_size=4).map(tuple))
    lies = draw(st.sets(st.sampled_from(LIES), min_size=1))
    attrs: dict[str, Any] = {}
    if "shape" in lies:
        attrs["shape"] = property(lambda self: told)
    if "shifting" in lies:
        reads = itertools.count()
        attrs["shape"] = property(lambda self: told if next(reads) % 2 else np.ndarray.view(self, np.ndarray).shape)
    if "strides" in lies:
        attrs["strides"] = property(lambda self: tuple(1 << 40 for _ in told))
    if "dtype" in lies:
        attrs["dtype"] = property(lambda self: np.dtype(np.float64))
    if "size" in lies:
        attrs["size"] = property(lambda self: 1 << 40)
    if "ndim" in lies:
        attrs["ndim"] = property(lambda self: len(told))
    if "__array__" in lies:
        attrs["__array__"] = lambda self, dtype=None, copy=None: np.zeros(told, np.float32) if sum(told) < 64 else np.zeros(1)
    if "__array_interface__" in lies:
        attrs["__array_interface__"] = property(lambda self: {"shape": told, "typestr": "<f8", "data": (0, True), "version": 3})
    return real, real.view(type("Hostile", (np.ndarray,), attrs))


def expected_bits(real: np.ndarray) -> np.ndarray:
    """What the tensor must hold: the real values rounded to bf16 (float16 widened first)."""
    if real.dtype == BF16:
        return np.ascontiguousarray(real).view(np.uint16)
    return tgrad.Tensor.from_numpy(np.ascontiguousarray(real))._bits()


@given(hostile(), st.sampled_from(["from_numpy", "init", "add", "mul_number", "relu", "matmul"]))
@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_lying_arrays_give_the_right_tensor_or_a_typed_error(case: tuple[np.ndarray, Any], use: str) -> None:
    real, lying = case
    try:
        t = tgrad.Tensor.from_numpy(lying) if use != "init" else tgrad.Tensor(lying)
    except errors.TgradError:
        return  # typed: fine (none is expected here, but a refusal is within the contract)
    assert t.shape == real.shape == library_shape(t)
    want = expected_bits(real)
    np.testing.assert_array_equal(t._bits(), want)
    assert t.numpy().shape == real.shape
    if use == "add":
        out = t + t
    elif use == "mul_number":
        out = t * 2
    elif use == "relu":
        out = t.relu()
    elif use == "matmul" and t.ndim == 2:
        out = t @ t.T
    else:
        out = t
    assert out.shape == library_shape(out)
    assert out.numpy().shape == library_shape(out)
    assert out.numpy(np.float32).shape == library_shape(out)
    # An array as an operand is no number: the operator defers (TypeError), the function refuses.
    with pytest.raises(TypeError):
        t + lying  # noqa: B018
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.mul(t, lying)


def test_every_way_of_making_a_tensor_caches_only_libtgrads_shape() -> None:
    """The shape cache (Python twin and tgrad._native alike) holds libtgrad's answer or nothing."""
    import copy
    import pickle

    a = tgrad.Tensor.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4).view(type("C", (ClaimsShape,), {"claim": (99,)})))
    b = tgrad.Tensor.from_numpy(np.ones((4, 2), np.float32))
    made = [a, b, tgrad.Tensor(np.ones((2, 2), np.float32)), tgrad.Tensor.from_bf16_bits(np.zeros((2, 3), np.uint16)),
            a @ b, a.T, a.mT, a[1:], a[0], a[..., ::-1], a.reshape(4, 3), a.T.reshape(-1), a.view(2, 6),
            a.expand(2, 3, 4), a.permute(1, 0), a.contiguous(), a + 1, a * a, a.relu(), tgrad.gelu(a),
            copy.copy(a), copy.deepcopy(a), pickle.loads(pickle.dumps(a)), a.to("cpu"), tgrad.from_dlpack(a)]
    for t in made:
        cached = t._shape
        assert cached is None or cached == library_shape(t), (cached, library_shape(t))
        assert t.shape == library_shape(t) and t.numpy().shape == library_shape(t)
