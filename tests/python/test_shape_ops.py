"""Shape ops (tgrad.shape_ops): cat, stack, take and x[ids] equal numpy's on every dtype and on
views (transposed, expanded, sliced), byte for byte; squeeze, unsqueeze, flatten, split, chunk and
x[None] are zero-copy views; refusals are typed and come before any work."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tgrad
from tgrad import Tensor, errors

DTYPES = ["bfloat16", "float32", "int32"]


def host(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Random values of dtype as numpy holds them (ml_dtypes.bfloat16 for bfloat16)."""
    if dtype == "int32":
        return rng.integers(-1000, 1000, size=shape).astype(np.int32)
    values = rng.standard_normal(shape).astype(np.float32)
    return values.astype(ml_dtypes.bfloat16) if dtype == "bfloat16" else values


def tensor(values: np.ndarray) -> Tensor:
    if values.dtype == ml_dtypes.bfloat16:
        return Tensor.from_bf16_bits(np.array(values).view(np.uint16))
    return Tensor.from_numpy(values, dtype=tgrad.int32 if values.dtype == np.int32 else tgrad.float32)


def bits(values: Any) -> np.ndarray:
    """Bit patterns of a Tensor's values or a numpy array (uint16 or uint32 words)."""
    arr = np.ascontiguousarray(values.numpy() if isinstance(values, Tensor) else values)
    return arr.view(np.uint16 if arr.dtype.itemsize == 2 else np.uint32)


def same(t: Tensor, want: np.ndarray) -> None:
    assert t.shape == want.shape
    np.testing.assert_array_equal(bits(t), bits(want))


#: Views of a base: (tgrad view, numpy view), each of the shape asked for.
def views(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> list[tuple[Tensor, np.ndarray]]:
    out = []
    base = host(rng, shape, dtype)
    out.append((tensor(base), base))
    tb = host(rng, shape[::-1], dtype)  # transposed: every axis reversed
    out.append((tensor(tb).T, tb.T))
    sl = host(rng, tuple(max(2 * e - 1, 0) for e in shape), dtype)  # sliced, step -2 on every axis
    key = tuple(slice(None, None, -2) for _ in shape)
    out.append((tensor(sl)[key], sl[key]))
    row = host(rng, (1, *shape[1:]), dtype)  # expanded along axis 0 (stride 0)
    out.append((tensor(row).expand(*shape), np.broadcast_to(row, shape)))
    return out


# ---- cat / stack ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_cat_equals_numpy_concatenate_on_views_every_axis(dtype: str, rng: np.random.Generator) -> None:
    for shape in [(3,), (2, 3), (3, 1, 4), (2, 3, 2, 2)]:
        nd = len(shape)
        for axis in range(-nd, nd):
            parts_t, parts_n = [], []
            for k, (t, n) in enumerate(views(rng, shape, dtype)):
                grown = list(shape)
                grown[axis] = k  # the operands differ along the axis (0 included)
                if k != shape[axis]:
                    extra = host(rng, tuple(grown), dtype)
                    parts_t.append(tensor(extra)), parts_n.append(extra)
                parts_t.append(t), parts_n.append(n)
            same(tgrad.cat(parts_t, dim=axis), np.concatenate(parts_n, axis=axis))
            same(tgrad.concatenate(parts_t, axis=axis), np.concatenate(parts_n, axis=axis))


@pytest.mark.parametrize("dtype", DTYPES)
def test_stack_equals_numpy_stack(dtype: str, rng: np.random.Generator) -> None:
    for shape in [(), (4,), (2, 3), (2, 1, 3)]:
        pairs = views(rng, shape, dtype) if shape else [(tensor(v), v) for v in (host(rng, (), dtype),) * 2]
        for axis in range(-len(shape) - 1, len(shape) + 1):
            same(tgrad.stack([t for t, _ in pairs], axis), np.stack([n for _, n in pairs], axis))


def test_cat_and_take_move_bits_unchanged() -> None:
    # NaN payloads, -0, subnormals, infinities
    special = np.array([0x7FA1, 0xFFC3, 0x8000, 0x0000, 0x0001, 0x807F, 0x7F80, 0xFF80], np.uint16)
    t = Tensor.from_bf16_bits(special)
    np.testing.assert_array_equal(bits(tgrad.cat([t, t[::-1]])), np.concatenate([special, special[::-1]]))
    np.testing.assert_array_equal(bits(t[[7, 0, 1, -4]]), special[[7, 0, 1, -4]])
    words = np.array([0x7FC00001, 0x80000000, 0x00000001, 0xFF800000], np.uint32)
    f = Tensor.from_numpy(words.view(np.float32), dtype=tgrad.float32)
    np.testing.assert_array_equal(bits(tgrad.stack([f, f])), np.stack([words, words]))
    np.testing.assert_array_equal(bits(f[[3, 0]]), words[[3, 0]])


def test_cat_of_one_and_of_many_operands(rng: np.random.Generator) -> None:
    x = host(rng, (3, 2), "bfloat16")
    same(tgrad.cat([tensor(x)]), x)
    parts = [host(rng, (1 + i % 3, 2), "bfloat16") for i in range(50)]  # more than a step reads inline
    same(tgrad.cat([tensor(p) for p in parts]), np.concatenate(parts))


def test_cat_refusals_are_typed_and_make_nothing() -> None:
    a = Tensor.from_numpy(np.zeros((2, 3), np.float32))
    b = Tensor.from_numpy(np.zeros((2, 4), np.float32))
    f = Tensor.from_numpy(np.zeros((2, 3), np.float32), dtype=tgrad.float32)
    live = tgrad.live_tensors()
    with pytest.raises(errors.ShapeMismatchError, match=r"tensor 1 has shape \[2, 4\]"):
        tgrad.cat([a, b])
    tgrad.cat([a, b], dim=1).release()  # they fit along axis 1
    with pytest.raises(errors.DtypeUnsupportedError, match="float32"):
        tgrad.cat([a, f])
    with pytest.raises(errors.RankMismatchError):
        tgrad.cat([a, a[0]])
    with pytest.raises(errors.IndexOutOfRangeError):
        tgrad.cat([a, a], dim=2)
    with pytest.raises(errors.IndexOutOfRangeError):
        tgrad.cat([a[0, 0], a[0, 0]])  # 0-d: no axis
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.cat([])
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.cat(a)  # type: ignore[arg-type]
    with pytest.raises(errors.ShapeMismatchError):
        tgrad.stack([a, b])
    assert tgrad.live_tensors() == live


# ---- take and x[ids] -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_take_equals_numpy_take_on_views(dtype: str, rng: np.random.Generator) -> None:
    shape = (4, 3, 5)
    for t, n in views(rng, shape, dtype):
        for axis in range(-3, 3):
            extent = shape[axis]
            for ids in ([extent - 1, 0, -extent], np.array([[1, -1], [0, 0]], np.int64), 2, []):
                want = np.take(n, ids, axis=axis)
                same(tgrad.take(t, ids, axis=axis), want)
                as_tensor = Tensor.from_numpy(np.asarray(ids, np.int32), dtype=tgrad.int32)
                same(t.take(as_tensor, axis), want)
    flat = host(rng, (3, 4), dtype)
    same(tgrad.take(tensor(flat).T, [0, 11, -1], axis=None), np.take(flat.T, [0, 11, -1]))


def test_embedding_lookup_shape_and_values(rng: np.random.Generator) -> None:
    emb = host(rng, (50, 8), "bfloat16")
    ids = rng.integers(0, 50, size=(3, 7))
    got = tensor(emb)[ids]
    assert got.shape == (3, 7, 8)
    same(got, emb[ids])
    same(tensor(emb)[Tensor.from_numpy(ids.astype(np.int32), dtype=tgrad.int32)], emb[ids])


def test_take_out_of_range_from_host_is_refused_at_the_call() -> None:
    x = Tensor.from_numpy(np.zeros((4, 2), np.float32))
    live = tgrad.live_tensors()
    for ids in ([0, 4], [-5], np.array([1 << 40])):
        with pytest.raises(errors.IndexOutOfRangeError, match="out of range"):
            tgrad.take(x, ids)
    computed = Tensor.from_numpy(np.array([3, 4], np.int32), dtype=tgrad.int32)
    with pytest.raises(errors.IndexOutOfRangeError, match="index 4"):  # checked at the call: computed already
        x[computed]
    computed.release()
    with pytest.raises(errors.DtypeUnsupportedError):
        x[Tensor.from_numpy(np.array([1.0], np.float32))]
    with pytest.raises(errors.InvalidArgumentError):
        x[[0.5]]
    with pytest.raises(errors.InvalidArgumentError):
        x[np.array([True, False, True, True])]
    with pytest.raises(errors.InvalidArgumentError):
        x[[0], [1]]
    with pytest.raises(errors.IndexOutOfRangeError):
        tgrad.take(x, [0], axis=2)
    assert tgrad.live_tensors() == live


def test_take_out_of_range_from_a_lazy_index_tensor_fails_at_realize_writing_nothing() -> None:
    x = Tensor.from_numpy(np.arange(8, dtype=np.float32).reshape(4, 2))
    i32 = Tensor.from_numpy(np.array([1, 9], np.int32), dtype=tgrad.int32)
    lazy = tgrad.cat([i32, i32])  # int32 [1, 9, 1, 9], not computed yet
    out = x[lazy]  # cannot be checked before it is computed
    assert out.shape == (4, 2) and not out.is_realized
    with pytest.raises(errors.IndexOutOfRangeError, match="index 9"):
        out.numpy()
    assert not out.is_realized  # nothing was written, the result stays pending
    with pytest.raises(errors.IndexOutOfRangeError):
        out.realize()
    good = x[tgrad.cat([i32[:1], i32[:1]])]  # a lazy index tensor in range
    same(good, np.arange(8, dtype=np.float32).reshape(4, 2)[[1, 1]].astype(ml_dtypes.bfloat16))


# ---- getitem with None, Ellipsis, ints and one array ------------------------------------------------
KEYS: list[Any] = [
    None, (None,), (..., None), (slice(None), None, slice(1, 3)), (None, ..., None), (0, None),
    (None, 1, ..., slice(None, None, -1)), (..., 2), ([2, 0],), (slice(None), [1, -1, 1]),
    (..., [0, 3]), ([[1, 2], [0, 0]], 1), (0, slice(None), [1, 2]), ([1, 2], slice(None), 0),
    (None, [1], None), (1, [0, 2], slice(1, 3)), (np.int64(1), ..., np.array(2)),
]


@pytest.mark.parametrize("key", KEYS, ids=[repr(k) for k in KEYS])
def test_getitem_equals_numpy(key: Any, rng: np.random.Generator) -> None:
    for t, n in views(rng, (3, 4, 5), "bfloat16"):
        same(t[key], n[key])


def test_new_axes_are_zero_copy(rng: np.random.Generator) -> None:
    t = tensor(host(rng, (3, 4), "float32"))
    for v in (t[None], t[..., None], t[:, None, 1:3], t.unsqueeze(-1), t[None].squeeze(), t.flatten(),
              *t.split(2), *t.chunk(2, dim=1)):
        assert v.shares_buffer(t) and v.is_realized


# ---- squeeze / unsqueeze / flatten / split / chunk ------------------------------------------------------
def test_squeeze_unsqueeze_flatten_equal_numpy(rng: np.random.Generator) -> None:
    n = host(rng, (2, 1, 3, 1), "int32")
    t = tensor(n)
    same(t.squeeze(), n.squeeze())
    same(tgrad.squeeze(t, 1), n.squeeze(1))
    same(t.squeeze(-1), n.squeeze(-1))
    same(t.squeeze(0), n)  # extent 2: kept, as in torch
    same(t.squeeze((1, 3)), n.squeeze((1, 3)))
    for d in range(-5, 5):
        same(tgrad.unsqueeze(t, d), np.expand_dims(n, d))
    same(t.flatten(), n.reshape(-1))
    same(tgrad.flatten(t, 1, 2), n.reshape(2, 3, 1))
    same(t.T.flatten(), n.T.reshape(-1))  # strides cannot express it: a copy
    assert not t.T.flatten().shares_buffer(t)
    same(t[0, 0, 0, 0].flatten(), n[0, 0, 0, 0].reshape(1))
    with pytest.raises(errors.IndexOutOfRangeError):
        t.unsqueeze(5)
    with pytest.raises(errors.IndexOutOfRangeError):
        t.squeeze(4)
    with pytest.raises(errors.InvalidArgumentError):
        t.flatten(2, 1)


def test_split_and_chunk_follow_torch(rng: np.random.Generator) -> None:
    n = host(rng, (7, 4), "float32")
    t = tensor(n)
    for size, sizes in ((3, [3, 3, 1]), (7, [7]), (10, [7]), (1, [1] * 7)):
        parts = t.split(size)
        assert [p.shape[0] for p in parts] == sizes
        same(tgrad.cat(list(parts)), n)
    parts = tgrad.split(t, [1, 0, 6], dim=0)
    assert [p.shape for p in parts] == [(1, 4), (0, 4), (6, 4)]
    same(parts[2], n[1:])
    for chunks, sizes in ((3, [3, 3, 1]), (4, [2, 2, 2, 1]), (7, [1] * 7), (9, [1] * 7), (1, [7])):
        assert [p.shape[0] for p in tgrad.chunk(t, chunks)] == sizes
    assert [p.shape for p in t.chunk(3, dim=-1)] == [(7, 2), (7, 2)]
    same(t.chunk(2, 1)[1], n[:, 2:])
    with pytest.raises(errors.InvalidArgumentError):
        t.split([3, 3])
    with pytest.raises(errors.InvalidArgumentError):
        t.split(0)
    with pytest.raises(errors.InvalidArgumentError):
        t.chunk(0)


# ---- fusion, threads, trace, explain, devices --------------------------------------------------------
def _chain_then_shape_ops(a: Tensor, b: Tensor) -> list[np.ndarray]:
    y = (a * 2 + 1).relu()
    z = (b - a).exp()
    cat = tgrad.cat([y, z.T.T, y[::-1]], dim=1)
    taken = tgrad.take(y, [2, 0, 2], axis=1)
    return [bits(cat), bits(taken), bits(cat.sum(0))]


def test_fusion_on_and_off_give_the_same_bytes(rng: np.random.Generator) -> None:
    a = tensor(host(rng, (6, 5), "bfloat16"))
    b = tensor(host(rng, (6, 5), "bfloat16"))
    was = tgrad.fusion_enabled()
    try:
        tgrad.set_fusion(True)
        on = _chain_then_shape_ops(a, b)
        tgrad.set_fusion(False)
        off = _chain_then_shape_ops(a, b)
    finally:
        tgrad.set_fusion(was)
    y = (a * 2 + 1).relu().realize()  # the chain stored, then the shape op
    for got, want in zip(on, off):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(on[1], bits(tgrad.take(y, [2, 0, 2], axis=1)))


def test_thread_counts_give_the_same_bytes(rng: np.random.Generator) -> None:
    n = host(rng, (300, 257), "bfloat16")  # past the threaded size
    w = host(rng, (3, 70, 40), "int32").transpose(0, 2, 1)[1]  # [40, 70], inner stride 40
    ids = rng.integers(-257, 257, size=(400,))  # fit both axes
    threads = tgrad.num_threads()
    results = []
    try:
        for count in (1, 2, 3):
            tgrad.set_num_threads(count)
            t = tensor(n)
            f = tensor(w)
            results.append((bits(tgrad.cat([t, t.T.T[::-1], t[:1].expand(300, 257)], dim=0)),
                            bits(tgrad.cat([t, t[:, :5]], dim=1)), bits(t[ids]), bits(t.T[ids]),
                            # transposed operands (copied in tiles), reversed, of 2- and 4-byte elements
                            bits(tgrad.cat([t.T, t.T[:, ::-1], t.T[5:40, ::-1]], dim=0)),
                            bits(tgrad.cat([f.T, f.T[::-1]], dim=0))))
    finally:
        tgrad.set_num_threads(threads)
    want = (np.concatenate([n, n[::-1], np.broadcast_to(n[:1], n.shape)]), np.concatenate([n, n[:, :5]], 1),
            n[ids], n.T[ids], np.concatenate([n.T, n.T[:, ::-1], n.T[5:40, ::-1]]), np.concatenate([w.T, w.T[::-1]]))
    for got in results:
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, bits(w))


def test_trace_and_explain_run_on_the_kinds(rng: np.random.Generator) -> None:
    x = tensor(host(rng, (5, 4), "bfloat16"))

    def fn(x: Tensor) -> Tensor:
        y = tgrad.cat([x, x[None].squeeze(0) + 1], dim=0)
        return y[[0, 9, 3]][..., None].flatten() * 2

    tr = tgrad.trace(fn, x)
    kinds = [op.kind for op in tr]
    assert "concat" in kinds and "gather" in kinds
    assert tr.validate().passed, tr.validate().message
    gather = next(op for op in tr if op.kind == "gather")
    gather.payload[1, 0] ^= 0x0001  # a wrong bit, as a broken gather would write
    result = tr.validate()
    assert not result.passed and gather.id in result.failed_ops
    out = fn(x)
    text = out.explain()
    assert "gather" in text and "concat" in text
    steps = [s["op"] for s in out.explain(json=True)["steps"]]
    assert "gather" in steps and "concat" in steps
    same(out, ((np.concatenate([x.numpy(), x.numpy() + 1])[[0, 9, 3]]).reshape(-1) * 2).astype(ml_dtypes.bfloat16))


def test_trace_replays_stack_take_and_int32_operands(rng: np.random.Generator) -> None:
    i = tensor(host(rng, (3, 4), "int32"))
    ids = Tensor.from_numpy(np.array([[0, -1], [2, 1]], np.int32), dtype=tgrad.int32)

    def fn(i: Tensor, ids: Tensor) -> tuple[Tensor, ...]:
        z = tgrad.stack([i, i[::-1], i.T.T], -1)
        return z, tgrad.take(z, tgrad.cat([ids, ids[::-1]], dim=1), axis=1), i[:, ids]

    tr = tgrad.trace(fn, i, ids)
    assert tr.validate().passed, tr.validate().message
    stored = type(tr).from_json(tr.to_json())
    assert stored.validate().passed


def test_gpu_operands_run_on_the_device(opencl_device: str) -> None:
    """cat and take run on GPU devices (tests/python/test_gpu_select.py has the byte checks)."""
    x = Tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3)).to("opencl")
    with tgrad.cat([x, x]) as y:
        assert y.device == "opencl" and y.numpy().tolist() == [[0, 1, 2], [3, 4, 5]] * 2
    ids = Tensor.from_numpy(np.array([1, -2], np.int32), dtype=tgrad.int32).to("opencl")
    with tgrad.take(x, ids) as y:
        assert y.device == "opencl" and y.numpy().tolist() == [[3, 4, 5], [0, 1, 2]]
    assert x[None].shape == (1, 2, 3)  # views work on every device


# ---- a property: getitem with None, Ellipsis, ints, slices and one array equals numpy --------------------
@st.composite
def keys(draw: Callable[..., Any], shape: tuple[int, ...] = (3, 4, 2)) -> tuple[Any, ...]:
    items: list[Any] = []
    axes = draw(st.integers(0, len(shape)))
    array_at = draw(st.integers(-1, axes - 1))
    for axis in range(axes):
        extent = shape[axis]
        if axis == array_at:
            items.append(draw(st.lists(st.integers(-extent, extent - 1), min_size=0, max_size=4)))
        else:
            items.append(draw(st.one_of(st.integers(-extent, extent - 1),
                                        st.builds(slice, st.none() | st.integers(-4, 4), st.none() | st.integers(-4, 4),
                                                  st.none() | st.sampled_from([1, 2, -1, -2])))))
        for _ in range(draw(st.integers(0, 2))):
            if draw(st.booleans()):
                items.insert(draw(st.integers(0, len(items))), None)
    if draw(st.booleans()):
        items.insert(draw(st.integers(0, len(items))), Ellipsis)
    return tuple(items)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=keys())
def test_property_getitem_equals_numpy(key: tuple[Any, ...]) -> None:
    n = np.arange(24, dtype=np.int32).reshape(3, 4, 2)
    t = tensor(n)
    try:
        want = n[key]
    except IndexError:  # numpy refuses it (an index past its axis once ... shifted the key)
        with pytest.raises(errors.IndexOutOfRangeError):
            t[key]
        return
    if want.ndim > 8:  # past TGRAD_MAX_DIMS: refused with a typed error
        with pytest.raises((errors.InvalidArgumentError, errors.RankMismatchError)):
            t[key]
        return
    same(t[key], want)


# ---- slice_scatter (issue 35: the KV cache's in-place write) ---------------------------------------
def test_slice_scatter_writes_a_block_and_leaves_its_input_unchanged() -> None:
    base = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = tgrad.Tensor.from_numpy(base)
    block = -np.arange(6, dtype=np.float32).reshape(2, 1, 3)
    src = tgrad.Tensor.from_numpy(block).transpose(1, 2)  # [2, 3, 1], read through its strides
    want = base.copy()
    want[:, :, 2:3] = block.transpose(0, 2, 1)
    for dim, start in ((-1, 2), (2, 2)):
        assert np.array_equal(tgrad.slice_scatter(x, src, dim, start).numpy(np.float32), want)
    assert np.array_equal(x.numpy(np.float32), base)  # x is still held: written into a copy
    ints = tgrad.Tensor.from_numpy(np.zeros((3, 2), np.int32), dtype=tgrad.int32)
    row = tgrad.Tensor.from_numpy(np.array([[7, 8]], np.int32), dtype=tgrad.int32)
    assert tgrad.slice_scatter(ints, row, 0, 2).numpy().tolist() == [[0, 0], [0, 0], [7, 8]]


@pytest.mark.parametrize("dim, start, error", [(1, 3, errors.IndexOutOfRangeError), (1, -1, errors.IndexOutOfRangeError),
                                               (3, 0, errors.IndexOutOfRangeError), (0, 0, errors.ShapeMismatchError)])
def test_slice_scatter_refuses_a_block_that_does_not_fit(dim: int, start: int, error: type) -> None:
    x = tgrad.zeros(2, 4, 3)
    with pytest.raises(error):
        tgrad.slice_scatter(x, tgrad.ones(2, 2, 3), dim, start)


def test_slice_scatter_refuses_mixed_dtypes_and_ranks() -> None:
    x = tgrad.zeros(2, 4)
    with pytest.raises(errors.DtypeUnsupportedError):
        tgrad.slice_scatter(x, tgrad.zeros(2, 1, dtype=tgrad.float32), 1, 0)
    with pytest.raises(errors.RankMismatchError):
        tgrad.slice_scatter(x, tgrad.zeros(2), 1, 0)
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.slice_scatter(x, np.zeros((2, 1)), 1, 0)  # type: ignore[arg-type]
