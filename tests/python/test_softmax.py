"""softmax, log_softmax and logsumexp (tgrad.softmax, the SOFTMAX kind): each output is the exact
value of its mathematics on the inputs rounded once to the output dtype, proved against mpmath
(tgrad.conformance.softmax) on random and adversarial rows, bf16 and float32 in and out, along
every axis and through views; the bytes do not depend on threads, CPU variant or fusion; bad
arguments get typed errors before anything is allocated. The big sweeps are in the slow tier."""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad._ffi import ffi, lib
from tgrad.conformance.softmax import bits_of, reference
from every_setting import assert_same_bytes_everywhere  # noqa: E402

sm = sys.modules["tgrad.softmax"]  # the module (tgrad.softmax, the attribute, is the function)
OPS = ("softmax", "log_softmax", "logsumexp")
BF16 = ml_dtypes.bfloat16


def _tensor(data: np.ndarray, dtype: str) -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(np.asarray(data, np.float32), dtype=dtype)


def _run(op: str, x: tgrad.Tensor, dim: int, out_dtype: str | None = None, keepdim: bool = False) -> np.ndarray:
    if op == "logsumexp":
        return bits_of(tgrad.logsumexp(x, dim, keepdim, dtype=out_dtype).numpy())
    return bits_of(getattr(tgrad, op)(x, dim, dtype=out_dtype).numpy())


def _want(op: str, x: tgrad.Tensor, dim: int, out_dtype: str, keepdim: bool = False) -> np.ndarray:
    """The reference over x's values (read back), along dim, shaped as the op's result."""
    src = bits_of(x.numpy())
    src = src.reshape(1) if src.ndim == 0 else src
    d = dim % src.ndim
    moved = np.moveaxis(src, d, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    got = [reference(op, [int(b) for b in r], str(x.dtype), out_dtype) for r in rows]
    if op == "logsumexp":
        want = np.array([g[0] for g in got], np.int64).reshape(moved.shape[:-1])
        return np.expand_dims(want, d) if keepdim else want
    return np.moveaxis(np.array(got, np.int64).reshape(moved.shape), -1, d).reshape(x.numpy().shape)


def _check(op: str, x: tgrad.Tensor, dim: int = -1, out_dtype: str | None = None, keepdim: bool = False) -> None:
    out = out_dtype or str(x.dtype)
    got = _run(op, x, dim, out_dtype, keepdim).astype(np.int64)
    want = _want(op, x, dim, out, keepdim)
    assert got.shape == want.shape, (op, got.shape, want.shape)
    bad = np.argwhere(got != want)
    assert bad.size == 0, (op, str(x.dtype), out, dim, [(tuple(i), hex(got[tuple(i)]), hex(want[tuple(i)]))
                                                      for i in bad[:4]])


def _counts() -> list[int]:
    c = ffi.new("int64_t[]", int(lib.TGRAD_DEBUG_SOFTMAX_COUNT))
    assert lib.tgrad_debug_softmax_slow_path(c, int(lib.TGRAD_DEBUG_SOFTMAX_COUNT)) == 0
    return list(c)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("in_dtype,out_dtype", [("bfloat16", None), ("bfloat16", "float32"),
                                                ("float32", None), ("float32", "bfloat16")])
def test_random_rows_are_the_exact_value_rounded_once(op: str, in_dtype: str, out_dtype: str | None) -> None:
    rng = np.random.default_rng(hash((op, in_dtype, out_dtype)) % 2**32)
    scale = np.exp2(rng.integers(-3, 6, (6, 1)))
    _check(op, _tensor(rng.standard_normal((6, 45)) * scale, in_dtype), -1, out_dtype)


@pytest.mark.parametrize("op", OPS)
def test_every_axis_and_views(op: str) -> None:
    rng = np.random.default_rng(3)
    x = _tensor(rng.standard_normal((3, 5, 7)) * 3, "bfloat16")
    for dim in (0, 1, 2, -1, -2, -3):
        _check(op, x, dim)
    _check(op, x.transpose(0, 2), 1)  # read through strides, no copy
    _check(op, x[:, ::2, 1:6], -1)
    _check(op, x[:, 3], 0)
    if op == "logsumexp":
        _check(op, x, 1, keepdim=True)
        assert tgrad.logsumexp(x, 1, keepdim=True).shape == (3, 1, 7)
        assert tgrad.logsumexp(x, axis=0).shape == (5, 7)


ADVERSARIAL = [
    [512.0, 1.0, 3.0, -2.0],                     # x - m = -511, a bf16 midpoint, minus a tiny log: below it
    [610.0, 0.0, -0.5],                          # the DESIGN's case: -610 - 1.5e-41
    [-np.inf, 2.0, -np.inf, 1.0],                # masks
    [-np.inf, -np.inf, -np.inf],                 # every entry masked
    [np.nan, 1.0, 2.0], [1.0, -np.inf, np.nan],  # NaN anywhere
    [np.inf, 1.0, 2.0], [np.inf, -np.inf, 0.0],  # +inf
    [5.0] * 7, [-3.25] * 3, [0.0, -0.0, 0.0],    # all equal: 1/n
    [100.0, -100.0, 0.0, 50.0],                  # huge spread
    [3.3e38, 3.3e38, -3.3e38, 1.0],              # near overflow
    [-3.3e38, -3.3e38, -3.2e38],
    [1e-40, -1e-40, 0.0, 2e-38],                 # subnormal inputs
    [88.0, -88.0, 87.5, -103.0],                 # results near the bottom of float32
    [7.0, -np.inf],                              # one finite element
]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("in_dtype,out_dtype", [("bfloat16", "bfloat16"), ("bfloat16", "float32"),
                                                ("float32", "float32"), ("float32", "bfloat16")])
def test_adversarial_rows(op: str, in_dtype: str, out_dtype: str) -> None:
    for row in ADVERSARIAL:
        _check(op, _tensor(np.array([row]), in_dtype), -1, out_dtype)


def test_special_rows_follow_torch() -> None:
    def f(op: str, row: list[float]) -> list[float]:
        x = _tensor(np.array(row), "float32")
        return (getattr(tgrad, op)(x, 0) if op != "logsumexp" else tgrad.logsumexp(x, 0)).numpy().tolist()

    assert np.isnan(f("softmax", [-np.inf, -np.inf])).all() and f("logsumexp", [-np.inf, -np.inf]) == -np.inf
    assert np.isnan(f("softmax", [np.inf, 1.0])).all() and np.isnan(f("log_softmax", [np.inf, 1.0])).all()
    assert f("logsumexp", [np.inf, 1.0]) == np.inf and np.isnan(f("logsumexp", [np.nan, 1.0]))
    assert f("softmax", [3.0]) == [1.0] and f("log_softmax", [3.0]) == [0.0]
    assert f("softmax", [2.0, -np.inf]) == [1.0, 0.0] and f("log_softmax", [2.0, -np.inf]) == [0.0, -np.inf]
    assert f("logsumexp", [2.5, -np.inf]) == 2.5
    assert f("softmax", [1.0] * 4) == [0.25] * 4
    # f32 -> bf16: a logsumexp whose max is a bf16 midpoint, plus a tiny positive log: rounds up
    mid = float(np.float32(1 + 2**-8))
    x = _tensor(np.array([mid, mid - 200.0]), "float32")
    assert bits_of(tgrad.logsumexp(x, 0, dtype="bfloat16").numpy()) == 0x3F81


def test_empty_axis_and_length_one() -> None:
    e = _tensor(np.zeros((3, 0)), "bfloat16")
    assert tgrad.softmax(e, -1).shape == (3, 0) and tgrad.log_softmax(e, 1).numpy().size == 0
    assert tgrad.logsumexp(e, -1).numpy().tolist() == [-np.inf] * 3
    assert tgrad.softmax(e, 0).shape == (3, 0)
    s = _tensor(np.array([4.0]), "float32")
    assert tgrad.softmax(s).numpy().tolist() == [1.0] and tgrad.logsumexp(s, 0).numpy().tolist() == 4.0


def test_the_slow_path_runs_where_double_cannot_decide_and_is_counted() -> None:
    before = _counts()
    x = _tensor(np.array([[512.0, 1.0, 3.0], [610.0, 0.0, -0.5]]), "bfloat16")
    _check("log_softmax", x)  # -511 - tiny: the double sits on the midpoint
    after = _counts()
    assert after[int(lib.TGRAD_DEBUG_SOFTMAX_SLOW)] > before[int(lib.TGRAD_DEBUG_SOFTMAX_SLOW)]
    assert after[int(lib.TGRAD_DEBUG_SOFTMAX_UNDECIDED)] == before[int(lib.TGRAD_DEBUG_SOFTMAX_UNDECIDED)]
    assert after[int(lib.TGRAD_DEBUG_SOFTMAX_ROWS)] - before[int(lib.TGRAD_DEBUG_SOFTMAX_ROWS)] == 2
    rng = np.random.default_rng(8)  # random rows: the slow path is rare
    y = _tensor(rng.standard_normal((64, 1000)) * 4, "bfloat16")
    c0 = _counts()
    y.softmax(-1).realize()
    c1 = _counts()
    assert c1[int(lib.TGRAD_DEBUG_SOFTMAX_ELEMENTS)] - c0[int(lib.TGRAD_DEBUG_SOFTMAX_ELEMENTS)] == 64_000
    assert c1[int(lib.TGRAD_DEBUG_SOFTMAX_SLOW)] - c0[int(lib.TGRAD_DEBUG_SOFTMAX_SLOW)] < 10


@pytest.mark.every_variant
def test_bytes_do_not_depend_on_threads_variant_or_fusion() -> None:
    rng = np.random.default_rng(11)
    data = (rng.standard_normal((40, 3000)) * 6).astype(np.float32)
    data[::7, ::5] = -np.inf
    xbf, x32 = _tensor(data, "bfloat16"), _tensor(data, "float32")
    scale = _tensor(np.full((40, 3000), 1.5), "bfloat16")

    def run() -> list[bytes]:
        outs = [xbf.softmax(-1), xbf.log_softmax(0), xbf.logsumexp(-1), x32.softmax(-1, dtype="bfloat16"),
                x32.log_softmax(-1), (xbf * scale).softmax(-1), (xbf * scale).log_softmax(-1) * scale,
                xbf.softmax(-1, dtype="float32")]
        return [o.numpy().tobytes() for o in outs]

    assert_same_bytes_everywhere(run)


@pytest.mark.every_variant
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_masked_runs_give_the_oracle_bytes(dtype: str) -> None:
    """Runs of eight and more elements whose exp is 0 (a causal mask's -inf, finite scores more
    than 708 below the row's maximum) skip the exp and the rounding where a vector of them is
    whole (softmax_avx512.h): the bytes stay the oracle's, on every variant, at every alignment."""
    rng = np.random.default_rng(12)
    rows, n = 70, 203
    data = rng.standard_normal((rows, n)) * 3
    data[np.triu_indices(rows, 1, n)] = -np.inf  # row i sees positions 0..i
    data[60:, 100:160] = -800.0  # finite, exp underflows to 0 against a maximum near 0
    data[65, :] = -np.inf
    data[65, 37] = 1.0  # one finite element
    x = _tensor(data, dtype)
    for op in ("softmax", "log_softmax", "logsumexp"):
        _check(op, x)
    _check("softmax", x, out_dtype="bfloat16" if dtype == "float32" else "float32")


def test_a_fused_producer_and_consumer_give_the_ops_own_bytes() -> None:
    rng = np.random.default_rng(5)
    x = _tensor(rng.standard_normal((17, 300)), "bfloat16")
    fusion = tgrad.fusion_enabled()
    try:
        tgrad.set_fusion(True)
        fused = (x * 3.0).softmax(-1) * 2.0
        plan = fused.explain()
        got = fused.numpy().tobytes()
    finally:
        tgrad.set_fusion(fusion)
    assert "mul+softmax+mul" in plan and plan.count("step ") == 1, plan
    step = ((x * 3.0).realize().softmax(-1).realize() * 2.0).numpy().tobytes()
    assert got == step
    _check("softmax", (x * 3.0).realize())


def test_python_surface_follows_torch_and_numpy_spellings() -> None:
    x = _tensor(np.arange(12.0).reshape(3, 4) / 4, "bfloat16")
    a = tgrad.softmax(x, 1).numpy().tobytes()
    assert tgrad.softmax(x, dim=1).numpy().tobytes() == a == x.softmax(1).numpy().tobytes()
    assert tgrad.softmax(x, axis=-1).numpy().tobytes() == a == sm.softmax(x).numpy().tobytes()
    assert tgrad.softmax(x, None, 3, "float32").dtype == tgrad.float32  # torch's positional order
    assert x.log_softmax(0).shape == (3, 4) and x.logsumexp(1).shape == (3,)
    assert tgrad.logsumexp(x, dim=0, keepdims=True).shape == (1, 4)
    assert x.logsumexp(axis=1, keepdim=True).shape == (3, 1)
    assert str(tgrad.softmax(x.float(), -1, dtype=tgrad.bfloat16).dtype) == "bfloat16"


def test_refusals_are_typed_and_allocate_nothing() -> None:
    x = _tensor(np.ones((2, 3)), "float32")
    i = tgrad.Tensor.from_numpy(np.ones(2, np.int32), dtype=tgrad.int32)
    before = tgrad.live_tensors()
    cases = [(lambda: x.softmax(2), errors.IndexOutOfRangeError), (lambda: x.log_softmax(-3), errors.IndexOutOfRangeError),
             (lambda: x.softmax(1.5), errors.InvalidArgumentError), (lambda: x.softmax(True), errors.InvalidArgumentError),
             (lambda: x.softmax(0, axis=1), errors.InvalidArgumentError),
             (lambda: x.softmax(0, dtype="int32"), errors.DtypeUnsupportedError),
             (lambda: x.softmax(0, dtype=np.float64), errors.DtypeUnsupportedError),
             (lambda: i.softmax(0), errors.DtypeUnsupportedError), (lambda: tgrad.logsumexp(x), errors.InvalidArgumentError),
             (lambda: tgrad.logsumexp(x, 0, keepdim=2), errors.InvalidArgumentError),
             (lambda: tgrad.softmax(np.ones(3)), errors.InvalidArgumentError)]
    for make, exc in cases:
        with pytest.raises(exc):
            make()
    assert tgrad.live_tensors() == before
    out = ffi.new("tgrad_tensor_t *")
    assert lib.tgrad_softmax(9, x._h, 0, 0, 0, out) == lib.TGRAD_ERR_INVALID_ARGUMENT
    assert lib.tgrad_softmax(lib.TGRAD_SOFTMAX_SOFTMAX, x._h, 0, 1, 0, out) == lib.TGRAD_ERR_INVALID_ARGUMENT
    assert lib.tgrad_softmax(lib.TGRAD_SOFTMAX_LOGSUMEXP, x._h, 0, 2, 0, out) == lib.TGRAD_ERR_INVALID_ARGUMENT
    assert lib.tgrad_softmax(lib.TGRAD_SOFTMAX_SOFTMAX, x._h, 0, 0, 0, ffi.NULL) == lib.TGRAD_ERR_INVALID_ARGUMENT
    assert out[0] == 0 and tgrad.live_tensors() == before
    assert ffi.string(lib.tgrad_softmax_name(2)) == b"log_softmax"
    assert ffi.string(lib.tgrad_softmax_name(0)) == b"unknown_softmax"
    assert lib.tgrad_debug_softmax_slow_path(ffi.NULL, 1) == lib.TGRAD_ERR_INVALID_ARGUMENT


def test_trace_records_and_validates_the_softmax_kind_and_explain_names_it() -> None:
    rng = np.random.default_rng(2)
    a = _tensor(rng.standard_normal((3, 9)), "bfloat16")
    tr = tgrad.trace(lambda x: (x.softmax(-1), x.log_softmax(0), x.logsumexp(1, keepdim=True)), a)
    assert {"softmax", "log_softmax", "logsumexp"} <= {op.kind for op in tr.ops}
    report = tr.validate()
    assert report.state == "passed", [(r.kind, r.state, r.detail) for r in report.results if r.state == "failed"]
    assert "logsumexp" in a.logsumexp(0).explain()


@pytest.mark.slow
@pytest.mark.parametrize("op", OPS)
def test_sweep_long_rows_and_many_random_rows(op: str) -> None:
    rng = np.random.default_rng(21)
    _check(op, _tensor(rng.standard_normal((1, 100_000)) * 5, "bfloat16"), -1, None)  # a row of 10^5
    for in_dtype, out_dtype in (("bfloat16", "bfloat16"), ("bfloat16", "float32"), ("float32", "float32")):
        for spread in (1, 40, 200):
            _check(op, _tensor(rng.standard_normal((12, 257)) * spread, in_dtype), -1, out_dtype)
