"""Tensor creation, conversion, properties and lifetime: one test per promise or refusal."""

from __future__ import annotations

import copy
import gc
import math
import pickle
import re
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tgrad
from tgrad import Tensor, errors
from tgrad._ffi import ffi, lib

BF16 = ml_dtypes.bfloat16


def bits_of(t: Tensor) -> np.ndarray:
    return t.numpy().view(np.uint16)


def rne_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Reference: round float32/float64 values once, to nearest even, to bf16 (finite inputs)."""
    x = np.asarray(x, dtype=np.float64)
    _, e = np.frexp(x)
    exponent = np.maximum(e.astype(np.int64) - 1, -126)  # bf16 (like f32) has subnormals below 2^-126
    quantum = exponent - 7  # 8 significant bits
    n = np.rint(np.ldexp(x, -quantum))  # exact scaling; rint ties to even
    rounded = np.ldexp(n, quantum)
    with np.errstate(over="ignore"):
        out: np.ndarray = rounded.astype(np.float32).astype(BF16).view(np.uint16)  # exact unless overflow
    return out


def f32_from_bits(bits: list[int]) -> np.ndarray:
    return np.array(bits, dtype=np.uint32).view(np.float32)


# ---- from_numpy: float32 -----------------------------------------------------------------------
def test_f32_rounds_to_nearest_even_at_ties() -> None:
    one = 1.0
    cases = [
        (one + 2.0**-8, 0x3F80),  # halfway between 1 and 1+2^-7: even is 1.0
        (one + 3 * 2.0**-8, 0x3F82),  # halfway between 1+2^-7 and 1+2^-6: even is 1+2^-6
        (one + 2.0**-8 + 2.0**-20, 0x3F81),  # just above halfway: up
        (one + 2.0**-8 - 2.0**-20, 0x3F80),  # just below halfway: down
        (-(one + 2.0**-8), 0xBF80),
        (-(one + 3 * 2.0**-8), 0xBF82),
        (0.0, 0x0000),
        (-0.0, 0x8000),
    ]
    x = np.array([value for value, _ in cases], dtype=np.float32)
    assert bits_of(Tensor.from_numpy(x)).tolist() == [bits for _, bits in cases]


def test_f32_overflow_and_infinities() -> None:
    x = np.array([np.finfo(np.float32).max, -np.finfo(np.float32).max, np.inf, -np.inf,
                  3.3895314e38, float.fromhex("0x1.fep127")], dtype=np.float32)
    # float32 max rounds up past bf16 max: inf. 0x1.fep127 is bf16 max itself.
    assert bits_of(Tensor.from_numpy(x)).tolist() == [0x7F80, 0xFF80, 0x7F80, 0xFF80, 0x7F7F, 0x7F7F]


def test_f32_matches_single_rne_on_random_bit_patterns(rng: np.random.Generator) -> None:
    raw = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    x = raw.view(np.float32)
    x = x[np.isfinite(x)]
    got = bits_of(Tensor.from_numpy(x))
    np.testing.assert_array_equal(got, rne_bf16_bits(x))
    np.testing.assert_array_equal(got, x.astype(BF16).view(np.uint16))  # ml_dtypes agrees


def test_f32_subnormals_round_not_flush() -> None:
    smallest = np.float32(2.0**-133)  # smallest bf16 subnormal
    x = np.array([smallest, 2.0**-134, 3 * 2.0**-135, 2.0**-149, -smallest], dtype=np.float32)
    # 2^-134 is a tie with 0 (even): 0. 3*2^-135 = 0.75 quantum: up to 2^-133. 2^-149: 0.
    assert bits_of(Tensor.from_numpy(x)).tolist() == [0x0001, 0x0000, 0x0001, 0x0000, 0x8001]


def test_f32_nan_stays_nan_quiet_with_sign() -> None:
    patterns = [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FBFFFFF, 0x7F80FFFF, 0xFFFFFFFF]
    got = bits_of(Tensor.from_numpy(f32_from_bits(patterns)))
    for pattern, b in zip(patterns, got.tolist()):
        assert b & 0x7F80 == 0x7F80 and b & 0x007F != 0, f"{pattern:#x} -> {b:#x} is not NaN"
        assert b & 0x0040, f"{pattern:#x} -> {b:#x} is not quiet"
        assert (b >> 15) == (pattern >> 31), f"{pattern:#x} -> {b:#x} lost its sign"
        assert math.isnan(float(np.array([b], np.uint16).view(BF16)[0]))


# ---- from_numpy: float64 -----------------------------------------------------------------------
def test_f64_rounds_once_directly_to_bf16() -> None:
    x = 1.0 + 2.0**-8 + 2.0**-30
    # Through float32 it would become 1 + 2^-8 (a tie) and then 1.0; rounded once it is 1 + 2^-7.
    assert np.float32(x) == np.float32(1.0 + 2.0**-8)
    got = bits_of(Tensor.from_numpy(np.array([x, -x], dtype=np.float64)))
    assert got.tolist() == [0x3F81, 0xBF81]


def test_f64_matches_single_rne_on_random_values(rng: np.random.Generator) -> None:
    mantissa = rng.standard_normal(100_000)
    x = np.ldexp(mantissa, rng.integers(-140, 128, size=mantissa.size))
    x = np.concatenate([x, 1.0 + rng.integers(0, 2**20, 1000) * 2.0**-28])  # near ties
    got = bits_of(Tensor.from_numpy(x))
    np.testing.assert_array_equal(got, rne_bf16_bits(x))


def test_f64_out_of_range_and_nan() -> None:
    x = np.array([1e300, -1e300, 1e-300, -1e-300, np.inf, np.nan, -np.nan])
    got = bits_of(Tensor.from_numpy(x)).tolist()
    assert got[:5] == [0x7F80, 0xFF80, 0x0000, 0x8000, 0x7F80]
    assert got[5] & 0x7FC0 == 0x7FC0 and got[5] >> 15 == 0
    assert got[6] & 0x7FC0 == 0x7FC0 and got[6] >> 15 == 1


# ---- bf16 bits ---------------------------------------------------------------------------------
def test_bf16_bits_round_trip_unchanged_for_all_65536_patterns() -> None:
    bits = np.arange(65536, dtype=np.uint16).reshape(256, 256)
    with Tensor.from_bf16_bits(bits) as t:
        np.testing.assert_array_equal(bits_of(t), bits)
    with Tensor.from_numpy(bits.view(BF16)) as t:
        np.testing.assert_array_equal(bits_of(t), bits)
        widened = t.numpy(np.float32).view(np.uint32)
        np.testing.assert_array_equal(widened, bits.astype(np.uint32) << 16)


def test_to_bytes_is_little_endian_row_major_bf16() -> None:
    bits = np.array([[0x3F80, 0x4000], [0xC040, 0x0001]], dtype=np.uint16)
    t = Tensor.from_bf16_bits(bits)
    assert t.to_bytes() == bytes([0x80, 0x3F, 0x00, 0x40, 0x40, 0xC0, 0x01, 0x00])
    assert t.T.to_bytes() == bits.T.astype("<u2").tobytes()


def test_from_bf16_bits_accepts_big_endian_uint16() -> None:
    bits = np.array([0x3F80, 0x1234], dtype=">u2")
    assert bits_of(Tensor.from_bf16_bits(bits)).tolist() == [0x3F80, 0x1234]


# ---- layouts and shapes ------------------------------------------------------------------------
LAYOUTS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "fortran": np.asfortranarray,
    "reversed-stepped": lambda x: x[::-1, ::2],
    "transposed": lambda x: x.T,
    "big-endian": lambda x: x.astype(x.dtype.newbyteorder(">")),
    "zero-stride": lambda x: np.lib.stride_tricks.as_strided(x[:1], shape=(3, 6), strides=(0, x.strides[1])),
}


# ml_dtypes.bfloat16 has no byte-order variant, so that one combination does not exist.
LAYOUT_CASES = [(layout, dtype) for layout in LAYOUTS for dtype in (np.float32, np.float64, BF16)
                if not (dtype is BF16 and layout == "big-endian")]


@pytest.mark.parametrize(("layout", "dtype"), LAYOUT_CASES,
                         ids=[f"{l}-{np.dtype(d).name}" for l, d in LAYOUT_CASES])
def test_any_layout_is_accepted(layout: str, dtype: Any) -> None:
    base = (np.arange(24, dtype=np.float64).reshape(4, 6) - 7).astype(dtype)  # exact in bf16
    x = LAYOUTS[layout](base)
    t = Tensor.from_numpy(x)
    assert t.shape == x.shape
    np.testing.assert_array_equal(t.numpy(np.float32), np.asarray(x, dtype=np.float32))


def test_read_only_input_is_accepted() -> None:
    x = np.arange(6, dtype=np.float32)
    x.setflags(write=False)
    assert Tensor.from_numpy(x).numpy(np.float32).tolist() == list(range(6))


@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (0, 0, 5), (1,) * 8, (2, 1, 1, 1, 1, 1, 1, 3)])
def test_shapes_from_0_to_8_dims_including_empty(shape: tuple[int, ...]) -> None:
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    t = Tensor.from_numpy(x)
    assert t.shape == shape and t.ndim == len(shape) and t.size == x.size
    out = t.numpy()
    assert out.shape == shape and out.dtype == BF16
    np.testing.assert_array_equal(t.numpy(np.float32), x)


def _libtgrad_shape(t: Tensor) -> tuple[int, ...]:
    """The shape as libtgrad reports it, past the Python object's cached copy."""
    from tgrad._ffi import ffi, lib  # type: ignore[attr-defined, unused-ignore]

    ndim = ffi.new("int32_t *")
    assert lib.tgrad_tensor_ndim(t._handle, ndim) == lib.TGRAD_OK
    out = ffi.new("int64_t[]", int(lib.TGRAD_MAX_DIMS))
    assert lib.tgrad_tensor_shape(t._handle, out) == lib.TGRAD_OK
    return tuple(out[0 : ndim[0]])


@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (1,) * 8, (2, 1, 1, 1, 1, 1, 1, 3), (5, 7)])
def test_shape_kept_at_creation_is_libtgrad_s(shape: tuple[int, ...]) -> None:
    # from_numpy, the constructor, from_bf16_bits and to() keep the shape on the Tensor (so reading
    # a product back skips a query); it must be the one libtgrad holds, products included.
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    made = [Tensor.from_numpy(x), Tensor(x), Tensor.from_numpy(x.astype(np.float64)),
            Tensor.from_numpy(np.array(x, order="F")), Tensor.from_bf16_bits(np.zeros(shape, np.uint16)),
            Tensor.from_numpy(x).to("cpu")]
    for t in made:
        assert t._shape == shape == _libtgrad_shape(t)
    if len(shape) == 2:
        c = made[0] @ Tensor.from_numpy(np.ascontiguousarray(x.T))
        assert c._shape == (shape[0], shape[0]) == _libtgrad_shape(c)
        assert c.numpy().shape == (shape[0], shape[0])


def test_more_than_8_dims_is_refused() -> None:
    with pytest.raises(errors.InvalidArgumentError):
        Tensor.from_numpy(np.zeros((1,) * 9, np.float32))


def test_numpy_scalar_is_a_0d_tensor() -> None:
    t = Tensor.from_numpy(np.float32(2.5))  # type: ignore[arg-type]
    assert t.shape == () and t.numpy(np.float32) == np.float32(2.5)


def test_constructor_is_from_numpy() -> None:
    t = Tensor(np.array([1.0, 2.0], np.float32))
    assert t.numpy(np.float32).tolist() == [1.0, 2.0]


# ---- refusals on input -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "x",
    [
        np.zeros(3, np.int32), np.zeros(3, np.int64), np.zeros(3, np.complex64),
        np.zeros(3, object), np.zeros(3, np.uint16),
        np.zeros(3, ml_dtypes.float8_e4m3fn), np.zeros(3, "U1"),
    ],
    ids=lambda x: str(x.dtype),
)
def test_unsupported_dtypes_are_refused(x: np.ndarray) -> None:
    with pytest.raises(errors.DtypeUnsupportedError, match=re.escape(str(x.dtype))):
        Tensor.from_numpy(x)


def test_long_double_is_refused_where_it_is_wider() -> None:
    x = np.zeros(3, np.longdouble)
    if x.dtype.itemsize == 8:
        pytest.skip("long double is double here")
    with pytest.raises(errors.DtypeUnsupportedError):
        Tensor.from_numpy(x)


@pytest.mark.parametrize("x", [[1.0, 2.0], (1.0,), 3.0, "abc", None], ids=repr)
def test_non_numpy_input_is_refused(x: object) -> None:
    with pytest.raises(errors.InvalidArgumentError, match="numpy"):
        Tensor.from_numpy(x)  # type: ignore[arg-type]


def test_from_bf16_bits_refuses_other_dtypes() -> None:
    with pytest.raises(errors.DtypeUnsupportedError):
        Tensor.from_bf16_bits(np.zeros(3, np.float32))
    with pytest.raises(errors.DtypeUnsupportedError):
        Tensor.from_bf16_bits(np.zeros(3, np.int16))
    with pytest.raises(errors.InvalidArgumentError):
        Tensor.from_bf16_bits([1, 2])  # type: ignore[arg-type]


# ---- reading -----------------------------------------------------------------------------------
def test_numpy_dtypes() -> None:
    t = Tensor.from_numpy(np.array([[1.5, -2.0]], np.float32))
    assert t.numpy().dtype == BF16
    assert t.numpy(BF16).dtype == BF16
    assert t.numpy("bfloat16").dtype == BF16
    for f32 in (np.float32, "float32", np.dtype(np.float32), "f4"):
        out = t.numpy(f32)
        assert out.dtype == np.float32 and out.tolist() == [[1.5, -2.0]]


@pytest.mark.parametrize("dtype", [np.float64, np.int32, "float16", np.uint16, "nonsense", object])
def test_numpy_refuses_other_dtypes(dtype: object) -> None:
    t = Tensor.from_numpy(np.zeros(2, np.float32))
    with pytest.raises(errors.DtypeUnsupportedError):
        t.numpy(dtype)  # type: ignore[arg-type]


def test_array_protocol() -> None:
    t = Tensor.from_numpy(np.array([1.0, 2.5], np.float32))
    assert np.asarray(t).dtype == BF16
    assert np.asarray(t, dtype=np.float32).tolist() == [1.0, 2.5]
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    assert np.array(t, dtype=np.float64).tolist() == [1.0, 2.5]
    with pytest.raises(ValueError):
        np.array(t, copy=False)


def test_numpy_result_is_a_fresh_writable_copy() -> None:
    t = Tensor.from_numpy(np.ones(3, np.float32))
    a = t.numpy(np.float32)
    a[0] = 5
    assert t.numpy(np.float32).tolist() == [1.0, 1.0, 1.0]


# ---- properties --------------------------------------------------------------------------------
def test_properties_of_a_contiguous_tensor() -> None:
    t = Tensor.from_numpy(np.zeros((3, 4, 5), np.float32))
    assert t.shape == (3, 4, 5)
    assert t.ndim == 3
    assert t.strides == (20, 5, 1)
    assert t.offset == 0
    assert t.dtype == "bfloat16"
    assert t.size == 60
    assert t.is_realized
    assert len(t) == 3
    assert all(isinstance(v, int) for v in (*t.shape, *t.strides, t.offset, t.size, t.ndim))


def test_len_of_0d_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        len(Tensor.from_numpy(np.float32(1.0)))  # type: ignore[arg-type]


def test_iteration_yields_rows() -> None:
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    rows = [r.numpy(np.float32).tolist() for r in Tensor.from_numpy(x)]
    assert rows == x.tolist()
    with pytest.raises(TypeError):
        iter(Tensor.from_numpy(np.float32(1.0))).__next__()  # type: ignore[arg-type]


def test_truth_value_of_several_elements_is_refused() -> None:
    # numpy's rule: one element has a truth value (tests/python/test_compare.py), more do not
    with pytest.raises(errors.InvalidArgumentError):
        bool(Tensor.from_numpy(np.ones(2, np.float32)))


def test_repr_of_a_lazy_tensor_says_so_and_how_to_compute_it_without_computing_it() -> None:
    a = Tensor.from_numpy(np.ones((2, 3), np.float32))
    lazy = a @ a.T
    assert repr(lazy) == ("Tensor(shape=(2, 2), dtype=bfloat16, lazy: not computed yet; .realize() "
                          "computes it, .numpy() reads its values)")
    assert str(lazy) == repr(lazy)
    assert not lazy.is_realized
    lazy.realize()
    assert repr(lazy) == "Tensor([[3., 3.],\n        [3., 3.]], shape=(2, 2), dtype=bfloat16)"


def test_repr_of_a_computed_tensor_shows_values_as_numpy_does() -> None:
    values = np.arange(1_000_000, dtype=np.float32).reshape(1000, 1000) % 256
    big = Tensor.from_numpy(values)
    text = repr(big)
    want = np.array2string(values, separator=", ", prefix="Tensor(", threshold=1000, edgeitems=3)
    assert text == f"Tensor({want}, shape=(1000, 1000), dtype=bfloat16)"
    assert "..." in text and text.count("\n") == 6  # summarized: 3 rows, "...", 3 rows
    assert repr(Tensor.from_numpy(np.float32(2.5))) == "Tensor(2.5, shape=(), dtype=bfloat16)"
    big.release()
    assert repr(big) == "Tensor(released)"


@pytest.mark.parametrize("shape", [(2000,), (1001,), (3, 2000), (2, 3, 400), (7, 7, 7, 7), (6, 6, 6, 6), (8, 1, 200)])
def test_a_summarized_repr_is_numpys_of_the_whole_tensor(shape: tuple[int, ...]) -> None:
    # repr reads only the corners a summary shows; the text is numpy's for all the values.
    values = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    t = Tensor.from_numpy(values)
    want = np.array2string(t.numpy(np.float32), separator=", ", prefix="Tensor(", threshold=1000, edgeitems=3)
    assert repr(t) == f"Tensor({want}, shape={shape}, dtype=bfloat16)"


def test_repr_of_a_huge_view_reads_only_its_corners() -> None:
    row = np.arange(5000, dtype=np.float32) % 97
    huge = Tensor.from_numpy(row).reshape(1, 5000).expand(5000, 5000)  # 25e6 elements, one buffer of 5000
    assert huge.is_realized and huge.size == 25_000_000
    want = np.array2string(np.broadcast_to(row, (5000, 5000)), separator=", ", prefix="Tensor(", threshold=1000,
                           edgeitems=3)
    assert repr(huge) == f"Tensor({want}, shape=(5000, 5000), dtype=bfloat16)"


def test_repr_shows_float32_and_int32_tensors_in_their_dtype() -> None:
    x = Tensor.from_numpy(np.array([[0.1, 5.0, 2.0], [7.0, 1.0, 3.0]], np.float32), dtype="float32")
    assert repr(x) == "Tensor([[0.1, 5. , 2. ],\n        [7. , 1. , 3. ]], shape=(2, 3), dtype=float32)"
    index = x.argmax(axis=1).realize()
    assert repr(index) == "Tensor([1, 0], shape=(2,), dtype=int32)"
    wide = Tensor.from_numpy(np.arange(3000, dtype=np.float32), dtype="float32").argmax(axis=0).realize()
    assert repr(wide) == "Tensor(2999, shape=(), dtype=int32)"


# ---- lifetime ----------------------------------------------------------------------------------
def test_release_is_idempotent_and_later_use_is_invalid_handle() -> None:
    t = Tensor.from_numpy(np.ones(3, np.float32))
    t.release()
    t.release()
    for use in (lambda: t.shape, lambda: t.numpy(), lambda: t.T, lambda: t @ t, lambda: t[0], t.realize):
        with pytest.raises(errors.InvalidHandleError):
            use()


def test_with_block_releases() -> None:
    start = tgrad.live_tensors()
    with Tensor.from_numpy(np.ones(3, np.float32)) as t:
        assert tgrad.live_tensors() == start + 1
    assert tgrad.live_tensors() == start
    with pytest.raises(errors.InvalidHandleError):
        t.numpy()


def test_collection_releases_handle_and_buffer() -> None:
    start = (tgrad.live_tensors(), tgrad.live_buffers(), tgrad.live_bytes())
    t = Tensor.from_numpy(np.ones((10, 10), np.float32))
    assert tgrad.live_tensors() == start[0] + 1
    assert tgrad.live_buffers() == start[1] + 1
    assert tgrad.live_bytes() >= start[2] + 200
    del t
    gc.collect()
    assert (tgrad.live_tensors(), tgrad.live_buffers(), tgrad.live_bytes()) == start


def test_view_keeps_the_buffer_after_its_base_is_released() -> None:
    base = Tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    view = base.T[1:]
    base.release()
    assert view.numpy(np.float32).tolist() == [[1.0, 4.0], [2.0, 5.0]]


def test_stale_handle_is_refused_by_the_library() -> None:
    t = Tensor.from_numpy(np.ones(3, np.float32))
    stale = t._handle
    t.release()
    replacement = Tensor.from_numpy(np.ones(3, np.float32))  # may reuse the slot
    ndim = ffi.new("int32_t *")
    assert lib.tgrad_tensor_ndim(stale, ndim) == errors.InvalidHandleError.status
    assert lib.tgrad_tensor_release(stale) == errors.InvalidHandleError.status
    out = ffi.new("tgrad_tensor_t *")
    assert lib.tgrad_matmul(stale, replacement._handle, out) == errors.InvalidHandleError.status
    assert out[0] == 0
    assert replacement.shape == (3,)


# ---- copies and pickling -------------------------------------------------------------------------
def _views_to_copy() -> dict[str, Tensor]:
    base = Tensor.from_numpy(np.arange(24, dtype=np.float32).reshape(4, 6))
    return {
        "contiguous": base,
        "transposed": base.T,
        "negative_strides": base[::-1, ::-2],
        "expanded": Tensor.from_numpy(np.arange(3, dtype=np.float32).reshape(1, 3)).expand(4, 3),
        "selected_0d": base[2, 3],
        "lazy_product": base @ base.T,
        "empty": base[:0],
    }


COPIERS: dict[str, Callable[[Tensor], Tensor]] = {
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
    "pickle": lambda t: pickle.loads(pickle.dumps(t)),
}


@pytest.mark.parametrize("how", sorted(COPIERS))
@pytest.mark.parametrize("view", sorted(_views_to_copy()))
def test_a_copy_is_an_independent_owner_of_the_same_value(how: str, view: str) -> None:
    original = _views_to_copy()[view]
    want = (original.shape, original.device, original.to_bytes())
    duplicate = COPIERS[how](original)
    assert duplicate is not original
    assert (duplicate.shape, duplicate.device, duplicate.to_bytes()) == want
    duplicate.release()
    assert (original.shape, original.device, original.to_bytes()) == want  # the original still reads
    again = COPIERS[how](original)
    original.release()
    assert (again.shape, again.device, again.to_bytes()) == want  # and the copy outlives it


@pytest.mark.parametrize("how", ["copy", "deepcopy"])
def test_copies_share_the_buffer_instead_of_copying_it(how: str) -> None:
    t = Tensor.from_numpy(np.ones((64, 64), np.float32))
    bytes_before = tgrad.live_bytes()
    duplicate = COPIERS[how](t)
    assert duplicate.shares_buffer(t) and tgrad.live_bytes() == bytes_before


def test_deepcopy_keeps_one_copy_per_shared_tensor() -> None:
    t = Tensor.from_numpy(np.ones(3, np.float32))
    pair = copy.deepcopy([t, t])
    assert pair[0] is pair[1] and pair[0] is not t


def test_pickle_round_trips_every_bf16_pattern() -> None:
    bits = np.arange(1 << 16, dtype=np.uint16).reshape(256, 256)
    back = pickle.loads(pickle.dumps(Tensor.from_bf16_bits(bits)))
    assert back.shape == (256, 256) and bits_of(back).tobytes() == bits.tobytes()


def test_pickle_round_trips_the_device(opencl_device: str) -> None:
    t = Tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), device="opencl")
    back = pickle.loads(pickle.dumps(t))
    assert back.device == "opencl" and back.to_bytes() == t.to_bytes()


@pytest.mark.parametrize("how", sorted(COPIERS))
def test_copying_a_released_tensor_is_invalid_handle(how: str) -> None:
    t = Tensor.from_numpy(np.ones(3, np.float32))
    t.release()
    with pytest.raises(errors.InvalidHandleError):
        COPIERS[how](t)


@pytest.mark.parametrize("data, shape", [(b"\0" * 6, (2, 2)), (b"\0" * 3, (1,)), ("text", (2,)), (b"\0" * 4, (-2, -1))])
def test_a_pickle_whose_bytes_do_not_fit_its_shape_is_refused(data: Any, shape: tuple[int, ...]) -> None:
    from tgrad.tensor import _unpickle

    with pytest.raises(errors.InvalidArgumentError, match="unpickle"):
        _unpickle(data, shape, "cpu")


def test_release_of_handle_zero_is_a_no_op() -> None:
    assert lib.tgrad_tensor_release(0) == 0


def test_forged_handles_are_refused() -> None:
    ndim = ffi.new("int32_t *")
    for forged in (1, 0xDEADBEEF, (1 << 64) - 1, 1 << 63):
        status = lib.tgrad_tensor_ndim(forged, ndim)
        assert status in (errors.InvalidHandleError.status, errors.WrongHandleKindError.status)


# ---- runtime settings --------------------------------------------------------------------------
def test_num_threads_round_trip() -> None:
    before = tgrad.num_threads()
    assert before >= 1
    try:
        tgrad.set_num_threads(1)
        assert tgrad.num_threads() == 1
    finally:
        tgrad.set_num_threads(before)
    assert tgrad.num_threads() == before


@pytest.mark.parametrize("n", [0, -1, 1 << 40])
def test_set_num_threads_refuses_below_one(n: int) -> None:
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.set_num_threads(n)


def test_set_num_threads_refuses_non_int() -> None:
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.set_num_threads(2.0)  # type: ignore[arg-type]


def test_cpu_isa_variants() -> None:
    variants = tgrad.cpu_isas()
    assert "portable" in variants and variants["portable"]
    assert tgrad.cpu_isa() in variants and variants[tgrad.cpu_isa()]
    isa_before = tgrad._cpu_isa_setting()
    try:
        tgrad.set_cpu_isa("portable")
        assert tgrad.cpu_isa() == "portable"
        assert tgrad.cpu_stream_isa() == "portable" and tgrad.cpu_isa_forced()
        assert tgrad.cpu_isa_reason().startswith("forced:")
        tgrad.set_cpu_isa("auto")
        # the automatic choice streams with the most capable variant; packed products use it too
        # unless the rule prefers another here (test_matmul_api.py tests that choice)
        assert tgrad.cpu_stream_isa() == next(name for name, ok in variants.items() if ok)
        assert variants[tgrad.cpu_isa()] and not tgrad.cpu_isa_forced()
        assert tgrad.cpu_isa_reason().startswith(("rule:", "measured:"))
    finally:
        tgrad.set_cpu_isa(isa_before)


def test_set_cpu_isa_refusals() -> None:
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.set_cpu_isa("no-such-isa")
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.set_cpu_isa(3)  # type: ignore[arg-type]
    for name, available in tgrad.cpu_isas().items():
        if not available:
            with pytest.raises(errors.BackendUnavailableError):
                tgrad.set_cpu_isa(name)


def test_a_failing_call_writes_no_output_and_allocates_nothing() -> None:
    t = Tensor.from_numpy(np.ones((3, 4), np.float32))
    out = ffi.new("tgrad_tensor_t *")
    out[0] = 777
    before = (tgrad.live_tensors(), tgrad.live_buffers(), tgrad.live_bytes())
    shape = ffi.new("int64_t[]", [2, -1])
    failing = [
        lambda: lib.tgrad_tensor_from_f32(ffi.new("float[]", 2), 2, shape, out),
        lambda: lib.tgrad_tensor_permute(t._handle, ffi.new("int32_t[]", [0, 0]), 2, out),
        lambda: lib.tgrad_tensor_slice(t._handle, 0, 0, 0, 0, 0, out),
        lambda: lib.tgrad_tensor_select(t._handle, 0, 3, out),
        lambda: lib.tgrad_tensor_reshape(t._handle, ffi.new("int64_t[]", [5]), 1, out),
        lambda: lib.tgrad_matmul(t._handle, t._handle, out),
    ]
    for call in failing:
        assert call() != 0
        assert out[0] == 777
    dst = ffi.new("uint16_t[]", [0xABCD] * 12)
    assert lib.tgrad_tensor_read_bf16(t._handle, dst, 11) == errors.BufferTooSmallError.status
    assert list(dst) == [0xABCD] * 12
    assert (tgrad.live_tensors(), tgrad.live_buffers(), tgrad.live_bytes()) == before


def test_package_docstring_example_runs() -> None:
    import doctest

    assert doctest.testmod(tgrad).failed == 0


def test_peak_probe_and_storage_cache_are_exposed() -> None:
    assert tgrad.cpu_peak_gflops(1) > 0
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.cpu_peak_gflops(-1)
    tgrad.release_cached()  # else a block up to twice the size, cached by an earlier test, is reused
    big = Tensor.from_numpy(np.zeros((1024, 1024), np.float32))  # 2 MiB: a cached-size block
    before = tgrad.cached_bytes()
    big.release()
    assert tgrad.cached_bytes() == before + 2 * 1024 * 1024  # kept for the next tensor
    tgrad.release_cached()
    assert tgrad.cached_bytes() == 0
