"""Views: the same values numpy's views give, zero-copy where promised, and typed refusals."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tgrad import Tensor, errors

Bits = Callable[..., np.ndarray]


def bits_of(t: Tensor) -> np.ndarray:
    return t.numpy().view(np.uint16)


def same(t: Tensor, expected_bits: np.ndarray) -> None:
    assert t.shape == expected_bits.shape
    np.testing.assert_array_equal(bits_of(t), expected_bits)


def assert_zero_copy(view: Tensor, base: Tensor) -> None:
    assert view.shares_buffer(base)
    assert view.is_realized


# ---- transpose / permute -----------------------------------------------------------------------
def test_T_reverses_all_axes(bf16_bits: Bits) -> None:
    for shape in [(5,), (3, 4), (2, 3, 4), (2, 1, 3, 2)]:
        x = bf16_bits(*shape)
        t = Tensor.from_bf16_bits(x)
        same(t.T, x.T)
        assert t.T.strides == t.strides[::-1]
        assert_zero_copy(t.T, t)


def test_T_of_0d_is_0d() -> None:
    t = Tensor.from_numpy(np.float32(3.0))  # type: ignore[arg-type]
    assert t.T.shape == () and t.T.numpy(np.float32) == 3.0


def test_transpose_swaps_two_axes_including_negative(bf16_bits: Bits) -> None:
    x = bf16_bits(2, 3, 4)
    t = Tensor.from_bf16_bits(x)
    same(t.transpose(0, 2), x.swapaxes(0, 2))
    same(t.transpose(-1, -2), x.swapaxes(-1, -2))
    same(t.transpose(1, 1), x)
    same(t.transpose(), x.T)
    assert_zero_copy(t.transpose(0, 1), t)


def test_permute_accepts_varargs_and_a_tuple(bf16_bits: Bits) -> None:
    x = bf16_bits(2, 3, 4)
    t = Tensor.from_bf16_bits(x)
    same(t.permute(2, 0, 1), x.transpose(2, 0, 1))
    same(t.permute((1, 2, 0)), x.transpose(1, 2, 0))
    same(t.permute([0, -1, 1]), x.transpose(0, 2, 1))
    same(t.permute(np.int64(1), np.int32(0), 2), x.transpose(1, 0, 2))
    assert t.permute(2, 0, 1).strides == (1, 12, 4)


@pytest.mark.parametrize("axes", [(0, 0, 1), (0, 1), (0, 1, 2, 3), (0, 1, 3), (0, 1, -4)])
def test_bad_permutation_is_refused(axes: tuple[int, ...]) -> None:
    t = Tensor.from_numpy(np.zeros((2, 3, 4), np.float32))
    with pytest.raises(errors.BadPermutationError):
        t.permute(*axes)


@pytest.mark.parametrize("axes", [(0, 3), (-4, 0), (5, 5)])
def test_transpose_axis_out_of_range(axes: tuple[int, int]) -> None:
    t = Tensor.from_numpy(np.zeros((2, 3, 4), np.float32))
    with pytest.raises(errors.IndexOutOfRangeError):
        t.transpose(*axes)


def test_transpose_needs_both_axes_or_none() -> None:
    t = Tensor.from_numpy(np.zeros((2, 3), np.float32))
    with pytest.raises(errors.InvalidArgumentError):
        t.transpose(0)
    with pytest.raises(errors.InvalidArgumentError):
        t.permute(0.0, 1)  # type: ignore[arg-type]
    with pytest.raises(errors.IndexOutOfRangeError):
        t.transpose(1 << 40, 0)


# ---- expand ------------------------------------------------------------------------------------
def test_expand_broadcasts_size_one_axes_with_stride_zero(bf16_bits: Bits) -> None:
    x = bf16_bits(1, 4)
    t = Tensor.from_bf16_bits(x)
    e = t.expand(3, 4)
    same(e, np.broadcast_to(x, (3, 4)))
    assert e.strides == (0, 1)
    assert_zero_copy(e, t)
    same(t.expand((5, -1)), np.broadcast_to(x, (5, 4)))


def test_expand_prepends_new_axes(bf16_bits: Bits) -> None:
    x = bf16_bits(3, 1)
    t = Tensor.from_bf16_bits(x)
    e = t.expand(2, 3, 5)
    same(e, np.broadcast_to(x, (2, 3, 5)))
    assert e.strides == (0, 1, 0)


def test_expand_of_empty_and_to_zero(bf16_bits: Bits) -> None:
    t = Tensor.from_bf16_bits(bf16_bits(1, 3))
    assert t.expand(0, 3).shape == (0, 3)
    assert t.expand(0, 3).numpy().shape == (0, 3)


@pytest.mark.parametrize("shape", [(3, 5), (2, 8), (4,), (4, 2, 4, 1)])
def test_expand_of_a_non_one_axis_is_refused(shape: tuple[int, ...]) -> None:
    t = Tensor.from_numpy(np.zeros((1, 4), np.float32))
    with pytest.raises(errors.BadExpandError):
        t.expand(*shape)


# ---- reshape / view / contiguous ---------------------------------------------------------------
def test_reshape_of_contiguous_is_zero_copy(bf16_bits: Bits) -> None:
    x = bf16_bits(4, 6)
    t = Tensor.from_bf16_bits(x)
    for shape in [(24,), (2, 12), (2, 3, 4), (-1, 8), (1, 24, 1)]:
        r = t.reshape(*shape)
        same(r, x.reshape(shape))
        assert_zero_copy(r, t)
        same(t.view(shape), x.reshape(shape))
        assert_zero_copy(t.view(shape), t)


def test_reshape_of_a_non_contiguous_view_materializes(bf16_bits: Bits) -> None:
    x = bf16_bits(4, 6)
    t = Tensor.from_bf16_bits(x)
    r = t.T.reshape(24)
    assert not r.shares_buffer(t)
    same(r, x.T.reshape(24))
    assert r.strides == (1,)


def test_view_of_a_non_contiguous_view_is_refused(bf16_bits: Bits) -> None:
    t = Tensor.from_bf16_bits(bf16_bits(4, 6))
    with pytest.raises(errors.ViewNotExpressibleError):
        t.T.view(24)
    with pytest.raises(errors.ViewNotExpressibleError):
        t[:, :3].view(12)
    with pytest.raises(errors.ViewNotExpressibleError):
        t[:, ::4].view(8)
    # [:, ::2] of a [4, 6] tensor is evenly strided (0, 2, ..., 22): flattening it is a view.
    flat = t[:, ::2].view(12)
    assert flat.strides == (2,) and flat.shares_buffer(t)


def test_view_splitting_a_strided_axis_is_zero_copy(bf16_bits: Bits) -> None:
    x = bf16_bits(4, 6)
    t = Tensor.from_bf16_bits(x)
    v = t[:, ::2].view(4, 3, 1)  # splitting/adding unit axes keeps strides expressible
    same(v, x[:, ::2].reshape(4, 3, 1))
    assert_zero_copy(v, t)
    w = t.T.view(3, 2, 4)  # splitting one axis of a transposed tensor
    same(w, x.T.reshape(3, 2, 4))
    assert_zero_copy(w, t)


@pytest.mark.parametrize("shape", [(5, 5), (25,), (0,), (-1, 7), (2, 3, 5)])
def test_bad_reshape_is_refused(shape: tuple[int, ...]) -> None:
    t = Tensor.from_numpy(np.zeros((4, 6), np.float32))
    with pytest.raises(errors.BadReshapeError):
        t.reshape(*shape)
    with pytest.raises(errors.BadReshapeError):
        t.view(*shape)


def test_reshape_with_two_unknown_extents_is_refused() -> None:
    t = Tensor.from_numpy(np.zeros((4, 6), np.float32))
    with pytest.raises(errors.TgradError) as info:
        t.reshape(-1, -1)
    assert isinstance(info.value, ValueError)


def test_reshape_of_empty_and_0d() -> None:
    t = Tensor.from_numpy(np.zeros((0, 3), np.float32))
    assert t.reshape(3, 0).shape == (3, 0)
    s = Tensor.from_numpy(np.float32(7.0))  # type: ignore[arg-type]
    assert s.reshape(1, 1).numpy(np.float32).tolist() == [[7.0]]
    assert s.reshape(()).shape == ()


def test_contiguous(bf16_bits: Bits) -> None:
    x = bf16_bits(3, 5)
    t = Tensor.from_bf16_bits(x)
    c = t.contiguous()
    assert c.shares_buffer(t) and c.strides == (5, 1)
    ct = t.T.contiguous()
    assert not ct.shares_buffer(t)
    assert ct.strides == (3, 1) and ct.offset == 0
    same(ct, np.ascontiguousarray(x.T))
    ce = t[:1].expand(4, 5).contiguous()
    same(ce, np.ascontiguousarray(np.broadcast_to(x[:1], (4, 5))))
    assert ce.strides == (5, 1)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_large_copies_split_over_the_threads_give_numpys_bytes(threads: int) -> None:
    """Copies of 1 MiB and more run over the pool (cpu/copy_view.c): the view's axes coalesced
    where they are one run, its first axis split into tasks. Permuted panels read back (64-byte
    runs), a reversed and stepped view, a broadcast axis and a float32 one: numpy's bytes."""
    import tgrad

    saved = tgrad.num_threads()
    tgrad.set_num_threads(threads)
    try:
        rng = np.random.default_rng(3)
        x = rng.integers(0, 1 << 16, (176, 64, 32), dtype=np.uint16)
        t = Tensor.from_bf16_bits(x)
        same(t.permute(1, 0, 2).reshape(64, 176 * 32), x.transpose(1, 0, 2).reshape(64, 176 * 32))
        same(t[::-1, 5:, ::3].permute(2, 0, 1).contiguous(), np.ascontiguousarray(x[::-1, 5:, ::3].transpose(2, 0, 1)))
        same(t[:, :1].expand(176, 200, 32).contiguous(), np.ascontiguousarray(np.broadcast_to(x[:, :1], (176, 200, 32))))
        f = rng.standard_normal((300, 1000)).astype(np.float32)
        g = Tensor.from_numpy(f, dtype=tgrad.float32).T.contiguous()
        assert np.array_equal(g.numpy(), np.ascontiguousarray(f.T))
    finally:
        tgrad.set_num_threads(saved)


# ---- indexing ----------------------------------------------------------------------------------
KEYS: list[Any] = [
    0, -1, 2, (1, 2), (-1, -3, 0), slice(None), slice(1, 3), slice(None, None, 2),
    slice(None, None, -1), slice(3, 0, -2), slice(-2, None), slice(10, 20), slice(-100, 100),
    (slice(None), 1), (Ellipsis, 0), (0, Ellipsis), (Ellipsis,), (1, Ellipsis, slice(None, None, -2)),
    (slice(1, None), slice(None, None, 3), -1), (Ellipsis, slice(2, 3), slice(None)),
    (np.int64(1), np.int32(-1)), (), slice(None, None, 7), slice(2, 2),
]


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_basic_indexing_matches_numpy(bf16_bits: Bits, key: Any) -> None:
    x = bf16_bits(4, 5, 6)
    t = Tensor.from_bf16_bits(x)
    v = t[key]
    same(v, x[key])
    assert_zero_copy(v, t)


def test_integer_indices_shift_axes_after_each_select(bf16_bits: Bits) -> None:
    x = bf16_bits(3, 4, 5)
    t = Tensor.from_bf16_bits(x)
    same(t[2, 3, 4], x[2, 3, 4])
    same(t[1, :, 2], x[1, :, 2])
    same(t[:, 1, 2], x[:, 1, 2])


def test_slice_strides_and_offsets(bf16_bits: Bits) -> None:
    t = Tensor.from_bf16_bits(bf16_bits(4, 6))
    assert t[:, ::2].strides == (6, 2)
    assert t[::2].strides == (12, 1)
    r = t[::-1, ::-1]
    assert r.strides == (-6, -1)
    assert r.offset == 23
    assert t[1:, 2:].offset == 8
    assert t[:, ::-3].strides == (6, -3) and t[:, ::-3].offset == 5


def test_views_of_views(bf16_bits: Bits) -> None:
    x = bf16_bits(6, 8)
    t = Tensor.from_bf16_bits(x)
    v = t[1:, ::-2].T[::2, 1:4].expand(2, 2, 3)
    same(v, np.broadcast_to(x[1:, ::-2].T[::2, 1:4], (2, 2, 3)))
    assert_zero_copy(v, t)
    w = t[::-1].T[::-3].permute(1, 0)[2]
    same(w, x[::-1].T[::-3].transpose(1, 0)[2])


def test_huge_slice_bounds_and_steps_clamp_like_numpy(bf16_bits: Bits) -> None:
    x = bf16_bits(5, 3)
    t = Tensor.from_bf16_bits(x)
    for key in [slice(-10**30, 10**30), slice(10**30, -10**30, -1), slice(None, None, 10**30),
                slice(None, None, -10**30), slice(-(1 << 63), (1 << 63) - 1), slice(2, None, (1 << 63) - 1)]:
        same(t[key], x[key])


@pytest.mark.parametrize("n", [1, 2, 5])
@pytest.mark.parametrize("step", [-1, -2, -3])
def test_negative_step_slices_clamp_at_minus_len_like_numpy(bf16_bits: Bits, n: int, step: int) -> None:
    """stop == -len with a negative step names the position before the first element: the slice
    runs down to (and includes) element 0; -len - 1 clamps the same way; start == -len is element
    0 itself (a one-element slice)."""
    x = bf16_bits(n, n)
    t = Tensor.from_bf16_bits(x)
    for key in [slice(None, -n, step), slice(n - 1, -n, step), slice(None, -n - 1, step),
                slice(-n, None, step), slice(-n, -n, step), slice(n, -n, step), slice(-1, -n, step)]:
        same(t[key], x[key])
        same(t[:, key], x[:, key])


@pytest.mark.parametrize("index", [4, -5, 1 << 62, -(1 << 63), 10**30])
def test_integer_index_out_of_range(index: int) -> None:
    t = Tensor.from_numpy(np.zeros((4, 3), np.float32))
    with pytest.raises(errors.IndexOutOfRangeError):
        t[index]
    with pytest.raises(IndexError):
        t[0, index]


def test_too_many_indices() -> None:
    t = Tensor.from_numpy(np.zeros((4, 3), np.float32))
    with pytest.raises(errors.IndexOutOfRangeError, match="too many indices"):
        t[0, 0, 0]
    with pytest.raises(errors.IndexOutOfRangeError):
        t[..., 0, 0, 0]
    s = Tensor.from_numpy(np.float32(1.0))  # type: ignore[arg-type]
    with pytest.raises(errors.IndexOutOfRangeError):
        s[0]
    assert s[...].shape == () and s[()].shape == ()


@pytest.mark.parametrize(
    "key",
    # None and integer arrays are supported (tests/python/test_shape_ops.py); masks and pairs of arrays not
    [1.0, True, np.bool_(False), np.array([True, False, True, True]), ([0, 1], [0, 1]), [0.5], "a",
     (Ellipsis, Ellipsis), (None, Ellipsis, Ellipsis), slice(0.0, 2), slice(None, None, 1.5)],
    ids=repr,
)
def test_unsupported_index_types_are_refused(key: Any) -> None:
    t = Tensor.from_numpy(np.zeros((4, 3), np.float32))
    with pytest.raises(errors.InvalidArgumentError):
        t[key]


def test_slice_step_zero_is_refused() -> None:
    t = Tensor.from_numpy(np.zeros((4, 3), np.float32))
    with pytest.raises(errors.InvalidArgumentError):
        t[::0]


def test_failed_index_chain_releases_its_intermediates() -> None:
    # The leak fixture checks counts; here the chain fails after two views were made.
    t = Tensor.from_numpy(np.zeros((4, 3, 2), np.float32))
    with pytest.raises(errors.IndexOutOfRangeError):
        t[1:, ::2, 7]


# ---- random views against numpy ----------------------------------------------------------------
@st.composite
def index_keys(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[Any, ...]:
    """A basic index: items for the first `head` axes, optionally `...`, items for the last `tail`."""
    bound = st.one_of(st.none(), st.integers(-9, 9))

    def item(extent: int) -> Any:
        if extent and draw(st.booleans()):
            return draw(st.integers(-extent, extent - 1))
        step = draw(st.one_of(st.none(), st.integers(-4, 4).filter(bool)))
        return slice(draw(bound), draw(bound), step)

    head = draw(st.integers(0, len(shape)))
    if not draw(st.booleans()):
        return tuple(item(e) for e in shape[:head])
    tail = draw(st.integers(0, len(shape) - head))
    return (*(item(e) for e in shape[:head]), Ellipsis,
            *(item(e) for e in shape[len(shape) - tail:]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), shape=st.lists(st.integers(0, 5), min_size=1, max_size=4).map(tuple))
def test_random_index_chains_match_numpy(data: st.DataObject, shape: tuple[int, ...]) -> None:
    x = np.arange(int(np.prod(shape)), dtype=np.uint16).reshape(shape)
    t = Tensor.from_bf16_bits(x)
    xv, tv = x, t
    for _ in range(data.draw(st.integers(1, 3))):
        op = data.draw(st.sampled_from(["index", "T", "permute"]))
        if op == "index":
            key = data.draw(index_keys(xv.shape))
            xv, tv = xv[key], tv[key]
        elif op == "T":
            xv, tv = xv.T, tv.T
        else:
            axes = data.draw(st.permutations(range(xv.ndim)))
            xv, tv = xv.transpose(axes), tv.permute(axes)
    same(tv, xv)
    assert tv.shares_buffer(t)


def test_extents_beyond_64_bits_are_refused() -> None:
    t = Tensor.from_numpy(np.zeros((1, 4), np.float32))
    with pytest.raises(errors.SizeOverflowError):
        t.reshape(1 << 70)
    with pytest.raises(errors.SizeOverflowError):
        t.expand(1 << 64, 4)


def test_shape_products_overflowing_64_bits_are_refused() -> None:
    t = Tensor.from_numpy(np.zeros((1, 1), np.float32))
    with pytest.raises(errors.SizeOverflowError):
        t.expand(1 << 40, 1 << 40)


def _factorizations(n: int, parts: int) -> list[tuple[int, ...]]:
    if parts == 1:
        return [(n,)]
    return [(d, *rest) for d in range(1, n + 1) if n % d == 0 for rest in _factorizations(n // d, parts - 1)]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple))
def test_view_succeeds_exactly_when_numpy_reshapes_without_copy(
    data: st.DataObject, shape: tuple[int, ...]
) -> None:
    x = np.arange(int(np.prod(shape)), dtype=np.uint16).reshape(shape)
    t = Tensor.from_bf16_bits(x)
    xv, tv = x, t
    for _ in range(data.draw(st.integers(1, 3))):
        op = data.draw(st.sampled_from(["step", "T", "permute", "expand"]))
        if op == "step":
            axis = data.draw(st.integers(0, xv.ndim - 1))
            key = (slice(None),) * axis + (slice(None, None, data.draw(st.sampled_from([2, -1, -2, 3]))),)
            xv, tv = xv[key], tv[key]
        elif op == "T":
            xv, tv = xv.T, tv.T
        elif op == "permute":
            axes = data.draw(st.permutations(range(xv.ndim)))
            xv, tv = xv.transpose(axes), tv.permute(axes)
        else:
            ones = [i for i, e in enumerate(xv.shape) if e == 1]
            if ones:
                new = list(xv.shape)
                new[data.draw(st.sampled_from(ones))] = data.draw(st.integers(2, 3))
                xv, tv = np.broadcast_to(xv, new), tv.expand(*new)
    target = data.draw(st.sampled_from(_factorizations(xv.size, data.draw(st.integers(1, 3)))))
    try:
        np.reshape(xv, target, copy=False)
        numpy_views = True
    except ValueError:
        numpy_views = False
    try:
        v = tv.view(*target)
    except errors.ViewNotExpressibleError:
        assert not numpy_views, f"numpy views {xv.shape} strides {xv.strides} as {target}"
    else:
        assert numpy_views, f"numpy would copy {xv.shape} strides {xv.strides} as {target}"
        same(v, xv.reshape(target))
        assert v.shares_buffer(t)
    same(tv.reshape(*target), xv.reshape(target))
