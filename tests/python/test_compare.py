"""Comparisons, where, logic and the bool dtype (tgrad.compare): values against numpy on random and
special values (NaN, ±0, ±inf, subnormals), every dtype pair, broadcasting, scalars, bool round
trips, Python truth, hashing by identity, typed refusals that change nothing, fusion on and off,
threads, and tgrad.trace validating the new kinds."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tgrad
from tgrad import errors

OPS = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
       "ge": np.greater_equal}
OPERATORS = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
             "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}
SPECIALS = np.array([0.0, -0.0, 1.0, -1.0, 0.1, np.inf, -np.inf, np.nan, -np.nan, 1e-40, -1e-40, 9.2e-41,
                     3.3e38, -3.3e38, 2.0, 1.0078125], np.float32)


def values(t: tgrad.Tensor) -> np.ndarray:
    """A tensor's exact values as float64 (numpy's comparisons are then exact)."""
    if t.dtype == tgrad.bfloat16:
        return t.numpy(np.float32).astype(np.float64)
    return t.numpy().astype(np.float64)


def make(array: np.ndarray, dtype: tgrad.DType) -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(array, dtype=dtype)


def random_floats(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    x = rng.standard_normal(shape).astype(np.float32) * 4
    x.reshape(-1)[:: 7] = rng.choice(SPECIALS, size=x.reshape(-1)[:: 7].shape)
    x.reshape(-1)[3:: 11] = np.round(x.reshape(-1)[3:: 11])  # ties between operands
    return x


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("da,db", [(tgrad.bfloat16, tgrad.bfloat16), (tgrad.float32, tgrad.float32),
                                   (tgrad.bfloat16, tgrad.float32), (tgrad.int32, tgrad.float32),
                                   (tgrad.int32, tgrad.int32), (tgrad.bool, tgrad.bfloat16)])
def test_comparisons_match_numpy_on_exact_values(name: str, da: tgrad.DType, db: tgrad.DType) -> None:
    rng = np.random.default_rng(34)
    def host(dtype: tgrad.DType, shape: tuple[int, ...]) -> np.ndarray:
        if dtype == tgrad.int32:
            return rng.integers(-5, 5, shape).astype(np.int32)
        if dtype == tgrad.bool:
            return rng.integers(0, 2, shape).astype(bool)
        return random_floats(rng, shape)
    a, b = make(host(da, (37, 1, 5)), da), make(host(db, (1, 9, 5)), db)  # broadcast both ways
    got = OPERATORS[name](a, b)
    assert isinstance(got, tgrad.Tensor) and got.dtype == tgrad.bool and got.shape == (37, 9, 5)
    want = OPS[name](values(a), values(b))
    np.testing.assert_array_equal(got.numpy(), want)
    assert got.numpy().dtype == np.bool_
    np.testing.assert_array_equal(getattr(tgrad, name)(a, b).numpy(), want)


def test_special_values_every_pair() -> None:
    for dtype in (tgrad.bfloat16, tgrad.float32):
        a = make(SPECIALS.reshape(-1, 1), dtype)
        b = make(SPECIALS.reshape(1, -1), dtype)
        for name, op in OPS.items():
            np.testing.assert_array_equal(OPERATORS[name](a, b).numpy(), op(values(a), values(b)))
    z = make(np.array([0.0, -0.0], np.float32), tgrad.bfloat16)
    assert (z == z[::-1]).numpy().all()  # -0 == +0
    n = make(np.array([np.nan], np.float32), tgrad.float32)
    assert not (n == n).numpy()[0] and (n != n).numpy()[0]


def test_int32_against_float32_is_exact() -> None:
    i = make(np.array([2**24 + 1], np.int32), tgrad.int32)
    f = make(np.array([2.0**24], np.float32), tgrad.float32)
    assert not bool(i == f) and bool(i > f)  # through float32 they would be equal


def test_scalars_take_the_tensor_dtype() -> None:
    x = make(np.array([0.1, 0.5, np.nan], np.float32), tgrad.bfloat16)
    # 0.1 is rounded to bfloat16 first (torch's and numpy's rule), so x == 0.1 holds for bf16(0.1)
    np.testing.assert_array_equal((x == 0.1).numpy(), [True, False, False])
    np.testing.assert_array_equal((0.3 < x).numpy(), [False, True, False])  # reflected
    np.testing.assert_array_equal((x != 0.5).numpy(), [True, False, True])
    i = make(np.array([1, 2, 3], np.int32), tgrad.int32)
    np.testing.assert_array_equal((i > 1.5).numpy(), [False, True, True])
    np.testing.assert_array_equal((i < 2**40).numpy(), [True, True, True])
    np.testing.assert_array_equal((i == np.int64(2)).numpy(), [False, True, False])
    b = make(np.array([True, False]), tgrad.bool)
    np.testing.assert_array_equal((b == True).numpy(), [True, False])  # noqa: E712
    np.testing.assert_array_equal((b < 0.5).numpy(), [False, True])


def test_bool_round_trips_and_casts() -> None:
    host = np.array([[True, False, True], [False, False, True]])
    t = tgrad.Tensor.from_numpy(host)  # numpy bool gives a bool tensor
    assert t.dtype == tgrad.bool and t.dtype == "bool" and t.itemsize == 1 and t.nbytes == 6
    assert tgrad.bool is tgrad.dtypes.bool_ is tgrad.bool_ and tgrad.dtypes.bool is tgrad.bool
    np.testing.assert_array_equal(t.numpy(), host)
    np.testing.assert_array_equal(t.T.numpy(), host.T)  # a 1-byte view
    np.testing.assert_array_equal(t[:, ::-2].contiguous().numpy(), host[:, ::-2])
    np.testing.assert_array_equal(t.reshape(3, 2).numpy(), host.reshape(3, 2))
    np.testing.assert_array_equal(t.numpy(np.float32), host.astype(np.float32))
    np.testing.assert_array_equal(t.to(tgrad.bfloat16).numpy(np.float32), host.astype(np.float32))
    np.testing.assert_array_equal(t.to(tgrad.int32).numpy(), host.astype(np.int32))
    x = np.array([0.0, -0.0, np.nan, 1e-40, -3.0, np.inf], np.float32)
    np.testing.assert_array_equal(make(x, tgrad.float32).to(tgrad.bool).numpy(), x.astype(bool))
    np.testing.assert_array_equal(make(x, tgrad.bfloat16).to("bool").numpy(), x.astype(bool))
    np.testing.assert_array_equal(make(np.array([0, 7, -1], np.int32), tgrad.int32).to(np.bool_).numpy(),
                                  [False, True, True])
    assert "True" in repr(t.realize()) and "bool" in repr(t)
    assert make(np.array([3, 0]), tgrad.bool).numpy().tolist() == [True, False]  # x != 0
    assert t.tolist() == host.tolist() and t[0, 0].tolist() is True


def test_where_broadcasts_and_selects_bits() -> None:
    rng = np.random.default_rng(5)
    cond = rng.integers(0, 2, (4, 1, 6)).astype(bool)
    a = random_floats(rng, (3, 6))
    b = random_floats(rng, (4, 3, 1))
    for dtype in (tgrad.bfloat16, tgrad.float32):
        ta, tb = make(a, dtype), make(b, dtype)
        got = tgrad.where(tgrad.Tensor.from_numpy(cond), ta, tb)
        want = np.where(cond, ta.numpy(), tb.numpy())
        assert got.dtype == dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.numpy().view(np.uint8), want.view(np.uint8))  # bits, NaN too
    i = tgrad.where(tgrad.Tensor.from_numpy(cond), make(np.arange(6, dtype=np.int32), tgrad.int32), -1)
    np.testing.assert_array_equal(i.numpy(), np.where(cond, np.arange(6), -1))
    bb = tgrad.where(tgrad.Tensor.from_numpy(cond), True, tgrad.Tensor.from_numpy(~cond))
    assert bb.dtype == tgrad.bool and bb.numpy().all()


def test_where_scalars_and_promotion() -> None:
    cond = tgrad.Tensor.from_numpy(np.array([True, False]))
    x = make(np.array([1.0, 2.0], np.float32), tgrad.bfloat16)
    y = tgrad.where(cond, x, 0.1)
    assert y.dtype == tgrad.bfloat16
    assert y.numpy()[1] == ml_dtypes.bfloat16(0.1)  # the scalar rounded once to bf16 (RNE)
    assert tgrad.where(cond, x, make(np.array([5.0], np.float32), tgrad.float32)).dtype == tgrad.float32
    assert tgrad.where(cond, make(np.array([1, 2], np.int32), tgrad.int32), x).dtype == tgrad.bfloat16
    assert tgrad.where(cond, 1, 0).dtype == tgrad.int32
    assert tgrad.where(cond, 1.0, 0).dtype == tgrad.bfloat16
    np.testing.assert_array_equal(tgrad.where(cond, 1.5, -2.0).numpy(np.float32), [1.5, -2.0])
    assert x.where(cond, 7.0).numpy(np.float32).tolist() == [1.0, 7.0]  # torch's Tensor.where


def test_masked_fill() -> None:
    scores = make(np.arange(6, dtype=np.float32).reshape(2, 3), tgrad.bfloat16)
    causal = tgrad.Tensor.from_numpy(np.triu(np.ones((2, 3), bool), 1))
    filled = scores.masked_fill(causal, float("-inf"))
    want = np.where(np.triu(np.ones((2, 3), bool), 1), -np.inf, np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(filled.numpy(np.float32), want)
    assert filled.dtype == tgrad.bfloat16
    assert tgrad.masked_fill(scores, causal, 0).dtype == tgrad.bfloat16


def test_logical_ops() -> None:
    a_np = np.array([[True, False, True, False]])
    b_np = np.array([[True], [False]])
    a, b = tgrad.Tensor.from_numpy(a_np), tgrad.Tensor.from_numpy(b_np)
    np.testing.assert_array_equal((a & b).numpy(), a_np & b_np)
    np.testing.assert_array_equal((a | b).numpy(), a_np | b_np)
    np.testing.assert_array_equal((a ^ b).numpy(), a_np ^ b_np)
    np.testing.assert_array_equal((~a).numpy(), ~a_np)
    np.testing.assert_array_equal((a & True).numpy(), a_np)
    np.testing.assert_array_equal((False | a).numpy(), a_np)
    x = make(np.array([0.0, np.nan, -0.0, 2.0], np.float32), tgrad.bfloat16)
    np.testing.assert_array_equal(tgrad.logical_not(x).numpy(), np.logical_not(x.numpy(np.float32)))
    np.testing.assert_array_equal(tgrad.logical_and(x, a).numpy(), np.logical_and(x.numpy(np.float32), a_np))
    np.testing.assert_array_equal(tgrad.logical_or(x, a).numpy(), np.logical_or(x.numpy(np.float32), a_np))
    np.testing.assert_array_equal(tgrad.logical_xor(x, a).numpy(), np.logical_xor(x.numpy(np.float32), a_np))
    with pytest.raises(errors.DtypeUnsupportedError):
        x & a
    with pytest.raises(errors.DtypeUnsupportedError):
        ~x


def test_bool_reductions_and_any_all() -> None:
    host = np.array([[True, False, True], [False, False, True]])
    t = tgrad.Tensor.from_numpy(host)
    s = t.sum()
    assert s.dtype == tgrad.int32 and int(s) == 3
    np.testing.assert_array_equal(t.sum(axis=0).numpy(), host.sum(axis=0))
    np.testing.assert_array_equal(t.mean(axis=1).numpy(), host.mean(axis=1).astype(np.float32))
    assert t.max().dtype == tgrad.bool and bool(t.max()) and not bool(t.min())
    np.testing.assert_array_equal(t.argmax(axis=1).numpy(), host.argmax(axis=1))
    np.testing.assert_array_equal(t.any(axis=1).numpy(), host.any(axis=1))
    np.testing.assert_array_equal(t.all(axis=0).numpy(), host.all(axis=0))
    assert bool(tgrad.any(t)) and not bool(tgrad.all(t))
    x = make(np.array([0.0, np.nan], np.float32), tgrad.float32)
    assert bool(x.any()) and not bool(x.all())
    empty = tgrad.Tensor.from_numpy(np.zeros((0,), bool))
    assert not bool(empty.any()) and bool(empty.all())  # numpy's empty-set answers


def test_truth_of_tensors() -> None:
    one = make(np.array([[2.5]], np.float32), tgrad.bfloat16)
    assert bool(one) and float(one) == 2.5 and int(one) == 2
    assert not bool(make(np.array([0.0], np.float32), tgrad.float32))
    assert bool(make(np.array([np.nan], np.float32), tgrad.float32))  # NaN is true
    assert int(make(np.array([-7], np.int32), tgrad.int32)) == -7
    assert float(tgrad.Tensor.from_numpy(np.array(True))) == 1.0
    many = make(np.array([1.0, 2.0], np.float32), tgrad.bfloat16)
    with pytest.raises(ValueError, match="more than one element is ambiguous"):
        bool(many)
    with pytest.raises(errors.InvalidArgumentError):
        if many == many:  # the elementwise result has two elements
            pass
    with pytest.raises(errors.InvalidArgumentError):
        bool(tgrad.Tensor.from_numpy(np.zeros((0,), np.float32)))


def test_tensors_stay_hashable_by_identity() -> None:
    a = make(np.array([1.0], np.float32), tgrad.bfloat16)
    b = make(np.array([1.0], np.float32), tgrad.bfloat16)
    seen = {a: "a", b: "b"}
    assert seen[a] == "a" and seen[b] == "b" and len({a, b, a}) == 2
    assert hash(a) == object.__hash__(a)
    assert (a == "text") is False and (a != None) is True  # noqa: E711 - not operands: identity


def test_refusals_change_nothing() -> None:
    x = make(np.zeros((2, 3), np.float32), tgrad.bfloat16)
    c = x == 0
    live = tgrad.live_tensors()
    with pytest.raises(errors.ShapeMismatchError):
        x < make(np.zeros((4,), np.float32), tgrad.bfloat16)
    with pytest.raises(errors.DtypeUnsupportedError):
        tgrad.where(x, x, x)  # the condition must be bool
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.where(c, x, "nope")
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.eq(1, 2)
    with pytest.raises(errors.DtypeUnsupportedError):
        x == 1j
    with pytest.raises(errors.DtypeUnsupportedError):
        c + c  # no arithmetic on bool
    with pytest.raises(errors.DtypeUnsupportedError):
        c @ c.T
    with pytest.raises(errors.DtypeUnsupportedError):
        x.masked_fill(x, 0.0)
    assert tgrad.live_tensors() == live


@pytest.mark.parametrize("fused", [True, False])
def test_fusion_and_threads_do_not_change_bytes(fused: bool) -> None:
    rng = np.random.default_rng(8)
    x = make(random_floats(rng, (300, 257)), tgrad.bfloat16)
    y = make(random_floats(rng, (257,)), tgrad.bfloat16)
    saved_fusion, saved_threads = tgrad.fusion_enabled(), tgrad.num_threads()
    results = []
    try:
        tgrad.set_fusion(fused)
        for threads in (1, 3):
            tgrad.set_num_threads(threads)
            chain = (x * 2 + y).relu()  # an elementwise chain read by a comparison and a where
            mask = chain > y
            out = tgrad.where(mask, chain, y).exp()  # an elementwise op reading a where
            results.append((mask.numpy().tobytes(), out.numpy().tobytes()))
            ref = ((x * 2 + y).relu().numpy(np.float32) > y.numpy(np.float32))
            np.testing.assert_array_equal(mask.numpy(), ref)
    finally:
        tgrad.set_fusion(saved_fusion)
        tgrad.set_num_threads(saved_threads)
    assert results[0] == results[1]


def test_explain_names_the_kinds_and_why_not_fused() -> None:
    x = make(np.ones((4, 4), np.float32), tgrad.bfloat16)
    mask = (x + 1) > 1
    text = tgrad.where(mask, x, 0.0).neg().explain()
    assert "where" in text and "gt" in text
    assert "cpu.compare" in mask.route


def test_trace_records_and_validates_the_kinds() -> None:
    x = make(np.array([[1.0, np.nan, -2.0]], np.float32), tgrad.bfloat16)
    f = make(np.array([[0.5], [1.0]], np.float32), tgrad.float32)

    def fn(a: tgrad.Tensor, b: tgrad.Tensor) -> tgrad.Tensor:
        m = (a > b) | (a != a)
        return tgrad.where(m, a, -1.0).masked_fill(~m, 0.0)

    tr = tgrad.trace(fn, x, f)
    kinds = [op.kind for op in tr.ops]
    assert "gt" in kinds and "where" in kinds and "ne" in kinds and "eq" in kinds
    report = tr.validate()
    assert report.passed, report.message
    assert {r.kind for r in report.results if r.state == "passed"} >= {"gt", "ne", "eq", "where"}
    stored = type(tr).from_json(tr.to_json(payloads=True))  # bool payloads round-trip
    assert [op.kind for op in stored.ops] == kinds
    assert stored.validate().passed


def test_gpu_operands_run_there_and_mixed_devices_are_refused_typed() -> None:
    """tests/python/test_gpu_compare.py checks the GPU routes' bytes; here the device rules."""
    names = [b.name for b in tgrad.backends() if b.available and b.name != "cpu"]
    if not names:
        pytest.skip("no GPU device here (PoCL absent)")
    x = tgrad.Tensor.from_numpy(np.array([[1, np.nan], [-0.0, 3]], np.float32), device=names[0])
    cond = tgrad.Tensor.from_numpy(np.array([[True, False], [False, True]]))
    live = tgrad.live_tensors()
    with pytest.raises(errors.DeviceMismatchError):
        tgrad.where(cond, x, x)
    with (x == x) as eq, cond.to(names[0]) as gpu_cond, tgrad.where(gpu_cond, x, x[::-1]) as w:
        assert eq.device == names[0] and eq.numpy().tolist() == [[True, False], [True, True]]
        assert w.device == names[0] and w.numpy().tolist() == [[1, 3], [1, 3]]
    assert tgrad.live_tensors() == live


def test_dlpack_refuses_bool_typed() -> None:
    t = tgrad.Tensor.from_numpy(np.array([True, False]))
    with pytest.raises(errors.DtypeUnsupportedError):
        t.__dlpack__()
    with pytest.raises(errors.DtypeUnsupportedError):
        t.__dlpack__(copy=True)
