"""Reductions (tgrad.sum, mean, max, min, argmax, argmin), dtypes and casts: the contract of
tgrad.h's reduction registry and docs/numerics.md, checked against exact references (Python
fractions rounded by the conformance kit for sums and means, numpy for the exact extrema)."""

from __future__ import annotations

import base64
import fractions
import json

import ml_dtypes
import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad.conformance import exact
from every_setting import assert_same_bytes_everywhere  # noqa: E402

BF16 = ml_dtypes.bfloat16


def _round_exact(q: fractions.Fraction, dtype: np.dtype) -> float:
    """q rounded to nearest even in float32 or bfloat16 (overflow to inf): the conformance kit's
    exact rounding (tgrad.conformance.exact.round_to), read back as a float."""
    bf16 = np.dtype(dtype) == np.dtype(BF16)
    bits = exact.round_to(q, exact.BF16 if bf16 else exact.F32)
    return float(np.array([bits], np.uint16 if bf16 else np.uint32).view(BF16 if bf16 else np.float32)[0])


def _exact_sum(values: np.ndarray) -> fractions.Fraction:
    return sum((fractions.Fraction(float(v)) for v in values.astype(np.float64).ravel()), fractions.Fraction(0))


def _t(values: np.ndarray, dtype: tgrad.DType) -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(values, dtype=dtype)


ADVERSARIAL = {
    "cancellation": np.array([1e30, 1.0, -1e30, 3.0], np.float32),
    "subnormals": np.array([1e-45, 3e-45, -1e-45, 1e-40, 2e-40], np.float32),
    "ties": np.array([1.0, 2.0 ** -24, 2.0 ** -24 * 1.5, -2.0 ** -40], np.float32),
    "spread": np.array([3.0e38, -3.0e38, 1e-38, 7.0, -2.0 ** -30, 2.0 ** 100], np.float32),
    "negzero": np.array([-0.0, -0.0], np.float32),
    "one": np.array([0.1], np.float32),
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
@pytest.mark.parametrize("in_dtype,out_dtype", [(tgrad.float32, tgrad.float32), (tgrad.float32, tgrad.bfloat16),
                                                (tgrad.bfloat16, tgrad.bfloat16), (tgrad.bfloat16, tgrad.float32)])
def test_sum_and_mean_are_the_exact_value_rounded_once(name: str, in_dtype: tgrad.DType,
                                                       out_dtype: tgrad.DType) -> None:
    x = _t(ADVERSARIAL[name], in_dtype)
    stored = x.numpy().astype(np.float64)  # what the tensor holds (bf16 rounds the input once)
    exact = _exact_sum(stored)
    np_out = out_dtype.numpy
    got_sum = float(x.sum(dtype=out_dtype).numpy())
    got_mean = float(x.mean(dtype=out_dtype).numpy())
    want_sum = _round_exact(exact, np_out)
    want_mean = _round_exact(exact / len(stored), np_out)
    if name == "negzero":
        assert np.signbit(got_sum) and got_sum == 0.0  # every value -0: the sum is -0, as IEEE
    assert got_sum == want_sum and got_mean == want_mean


@pytest.mark.parametrize("seed", range(4))
def test_random_rows_against_the_rational_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    data = (rng.standard_normal((5, 301)) * np.exp2(rng.integers(-60, 60, (5, 301)))).astype(np.float32)
    x = _t(data, tgrad.float32)
    got = x.sum(axis=1).numpy()
    want = [_round_exact(_exact_sum(row), np.dtype(np.float32)) for row in data]
    assert got.tolist() == want
    got_bf = x.sum(axis=1, dtype=tgrad.bfloat16).numpy().astype(np.float64)
    assert got_bf.tolist() == [_round_exact(_exact_sum(row), BF16) for row in data]


def test_special_values_follow_the_documented_rules() -> None:
    inf, nan = np.inf, np.nan
    cases = {(1.0, inf): inf, (-inf, 1.0): -inf, (inf, -inf): nan, (nan, 1.0): nan, (3e38, 3e38): inf}
    for values, want in cases.items():
        got = float(_t(np.array(values, np.float32), tgrad.float32).sum().numpy())
        assert (np.isnan(got) and np.isnan(want)) or got == want, values
    x = _t(np.array([1.0, nan, 5.0, nan], np.float32), tgrad.float32)
    assert np.isnan(float(x.max().numpy())) and int(x.argmax().numpy()) == 1 and int(x.argmin().numpy()) == 1
    ties = _t(np.array([2.0, 7.0, 7.0, -1.0, -1.0], np.float32), tgrad.float32)
    assert int(ties.argmax().numpy()) == 1 and int(ties.argmin().numpy()) == 3
    zeros = _t(np.array([0.0, -0.0], np.float32), tgrad.float32)
    assert not np.signbit(zeros.max().numpy()) and int(zeros.argmin().numpy()) == 0


def test_empty_sets_follow_numpy() -> None:
    e = tgrad.Tensor.from_numpy(np.zeros((0, 3), np.float32))
    assert e.sum(axis=0).numpy(np.float32).tolist() == [0.0, 0.0, 0.0]
    assert not np.signbit(e.sum(axis=0).numpy(np.float32)).any()
    assert np.isnan(e.mean(axis=0).numpy(np.float32)).all()
    assert e.sum(axis=1).shape == (0,)
    for name in ("max", "min", "argmax", "argmin"):
        with pytest.raises(errors.InvalidArgumentError, match="empty"):
            getattr(e, name)(axis=0)
    assert e.max(axis=1).shape == (0,)  # nothing to compute: no output element


SHAPE = (3, 4, 5)
AXES = [None, 0, 1, 2, -1, (0, 2), (1, 2), (0, 1, 2), ()]


@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_axes_and_keepdims_match_numpy(axis: object, keepdims: bool) -> None:
    rng = np.random.default_rng(7)
    data = rng.integers(-20, 20, SHAPE).astype(np.float32)  # small integers: every sum is exact
    x = _t(data, tgrad.float32)
    for name, ref in (("sum", np.sum), ("max", np.max), ("min", np.min), ("mean", np.mean)):
        got = getattr(x, name)(axis=axis, keepdims=keepdims).numpy()
        want = ref(data.astype(np.float64), axis=axis, keepdims=keepdims)
        if name == "mean":  # exact mean rounded once to float32
            want = np.asarray(want).astype(np.float32)
        assert got.shape == np.shape(want) and np.array_equal(got, want), (name, axis, keepdims)
    if axis is None or isinstance(axis, int):
        for name, ref in (("argmax", np.argmax), ("argmin", np.argmin)):
            got = getattr(x, name)(axis=axis, keepdims=keepdims).numpy()
            want = ref(data, axis=axis, keepdims=keepdims)
            assert got.dtype == np.int32 and np.array_equal(got, want), (name, axis, keepdims)


def test_views_are_read_through_their_strides() -> None:
    rng = np.random.default_rng(3)
    data = rng.standard_normal((6, 8)).astype(np.float32)
    base = tgrad.Tensor.from_numpy(data)  # bf16
    held = base.numpy().astype(np.float64)
    views = {"T": (base.T, held.T), "slice": (base[::2, ::-3], held[::2, ::-3]),
             "expand": (base[:1].expand(5, 8), np.broadcast_to(held[:1], (5, 8)))}
    for name, (v, ref) in views.items():
        for axis in (0, 1, None):
            got = v.sum(axis=axis, dtype=tgrad.float32).numpy()
            rows = [ref.ravel()] if axis is None else list(np.moveaxis(ref, axis, -1).reshape(-1, ref.shape[axis]))
            want = [_round_exact(_exact_sum(r), np.dtype(np.float32)) for r in rows]
            assert np.ravel(got).tolist() == want, (name, axis)
            assert np.array_equal(v.argmax(axis=axis).numpy(), np.argmax(ref, axis=axis)), (name, axis)


@pytest.mark.every_variant
def test_bytes_do_not_depend_on_threads_variant_or_fusion() -> None:
    rng = np.random.default_rng(11)
    data = (rng.standard_normal((3, 70_000)) * np.exp2(rng.integers(-30, 30, (3, 70_000)))).astype(np.float32)
    x32, xbf = _t(data, tgrad.float32), tgrad.Tensor.from_numpy(data)
    long = tgrad.Tensor.from_numpy(data.reshape(-1))

    def run() -> list[bytes]:
        outs = [x32.sum(axis=1), x32.mean(axis=0), xbf.sum(axis=1), (xbf * xbf).sum(), long.sum(),
                long.mean(dtype=tgrad.float32), long.argmax(), x32.max(axis=0)]
        return [o.numpy().tobytes() for o in outs]

    assert_same_bytes_everywhere(run)


def test_refusals_are_typed_and_allocate_nothing() -> None:
    x = tgrad.Tensor.from_numpy(np.ones((2, 3), np.float32))
    before = tgrad.live_tensors()
    cases = [(lambda: x.sum(axis=2), errors.IndexOutOfRangeError), (lambda: x.sum(axis=(0, 0)), errors.InvalidArgumentError),
             (lambda: x.sum(axis=-3), errors.IndexOutOfRangeError), (lambda: x.argmax(axis=(0, 1)), errors.InvalidArgumentError),
             (lambda: x.sum(axis=1.5), errors.InvalidArgumentError), (lambda: x.sum(dtype="int32"), errors.DtypeUnsupportedError),
             (lambda: x.sum(dtype=np.float64), errors.DtypeUnsupportedError), (lambda: x.sum(keepdims=2), errors.InvalidArgumentError),
             (lambda: x.sum(axis=0, dim=1), errors.InvalidArgumentError),
             (lambda: tgrad.Tensor.from_numpy(np.ones(2, np.int32), dtype=tgrad.int32).sum(), errors.DtypeUnsupportedError),
             (lambda: x.float().max(dtype=tgrad.bfloat16), TypeError)]
    for make, exc in cases:
        with pytest.raises(exc):
            make()
    assert tgrad.live_tensors() == before


def test_dtypes_casts_and_creation() -> None:
    assert tgrad.bfloat16 == "bfloat16" and tgrad.float32 == np.float32 and tgrad.int32 != tgrad.float32
    data = np.array([[1.5, -2.25], [1e-40, 3.0000002]], np.float32)
    f = tgrad.Tensor.from_numpy(data, dtype=tgrad.float32)
    assert f.dtype == tgrad.float32 and f.itemsize == 4 and f.numpy().dtype == np.float32
    assert f.numpy().tobytes() == data.tobytes()  # float32 kept exactly
    b = f.to(tgrad.bfloat16)
    assert b.dtype is tgrad.bfloat16 and np.array_equal(b.numpy(), data.astype(BF16))  # RNE, as ml_dtypes
    assert b.float().numpy().tobytes() == b.numpy().astype(np.float32).tobytes()  # exact widening
    i = tgrad.Tensor.from_numpy(np.array([-7, 2 ** 31 - 1]), dtype="int32")
    assert i.dtype == tgrad.int32 and i.numpy().tolist() == [-7, 2 ** 31 - 1]
    assert i.to(tgrad.float32).numpy().tolist() == [-7.0, float(np.float32(2 ** 31 - 1))]
    assert f.to("int32").numpy().tolist() == [[1, -2], [0, 3]]  # truncation toward zero
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.Tensor.from_numpy(np.array([2 ** 40]), dtype=tgrad.int32)
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.Tensor.from_numpy(np.array([np.nan], np.float32), dtype=tgrad.float32).to(tgrad.int32).numpy()
    with pytest.raises(errors.DtypeUnsupportedError):  # a numpy dtype tgrad lacks, not a device name
        f.to("float64")
    with pytest.raises(errors.DtypeUnsupportedError):
        f @ f.T
    with pytest.raises(errors.DtypeUnsupportedError):
        i.relu()  # int32 takes no elementwise op (float32 does: test_elementwise_f32.py)


def test_chains_fuse_into_the_read_and_the_store_without_changing_a_byte() -> None:
    rng = np.random.default_rng(5)
    data = rng.standard_normal((33, 300)).astype(np.float32)
    eps = tgrad.Tensor.from_numpy(np.array(1e-6, np.float32))
    x = tgrad.Tensor.from_numpy(data)

    def programs() -> dict[str, tgrad.Tensor]:
        return {"rms": ((x * x).mean(axis=-1, keepdims=True) + eps).rsqrt(),  # prologue and epilogue
                "sum_sq_cols": (x * x).sum(axis=0),  # a prologue read across rows
                "max_abs": x.abs().max(axis=1),
                "argmax_exp": (x * 2.0).exp().argmax(axis=1),
                "all": x.square().sum()}

    fusion = tgrad.fusion_enabled()
    try:
        tgrad.set_fusion(True)
        fused = programs()
        plans = {k: v.explain() for k, v in fused.items()}
        fused_bytes = {k: v.numpy().tobytes() for k, v in fused.items()}
        tgrad.set_fusion(False)
        unfused_bytes = {k: v.numpy().tobytes() for k, v in programs().items()}
    finally:
        tgrad.set_fusion(fusion)
    assert fused_bytes == unfused_bytes
    assert "mul+mean+add+rsqrt" in plans["rms"] and plans["rms"].count("step ") == 1
    assert "abs+max" in plans["max_abs"] and "mul+exp+argmax" in plans["argmax_exp"]
    # the fused values are the ops' own: compare with the ops realized one at a time
    sq = (x * x).realize()
    want = ((sq.mean(axis=-1, keepdims=True).realize() + eps).realize()).rsqrt()
    assert fused_bytes["rms"] == want.numpy().tobytes()


def test_registry_names_and_sizes_are_total() -> None:
    from tgrad._ffi import ffi, lib

    names = [ffi.string(lib.tgrad_reduce_name(code)).decode() for code in range(-1, 9)]
    assert names[2:8] == ["sum", "mean", "max", "min", "argmax", "argmin"]
    assert set(names[:2] + names[8:]) == {"unknown_reduce"}
    sizes = {code: lib.tgrad_dtype_size(code) for code in range(-1, 7)}
    assert sizes == {-1: 0, 0: 0, 1: 2, 2: 4, 3: 8, 4: 4, 5: 1, 6: 0}


def test_trace_records_and_validates_reductions_and_casts() -> None:
    rng = np.random.default_rng(9)
    a = tgrad.Tensor.from_numpy(rng.standard_normal((4, 6)).astype(np.float32))

    def fn(x: tgrad.Tensor) -> tuple[tgrad.Tensor, ...]:
        f = x.float()
        return (x.sum(axis=1), (x * x).mean(axis=0, keepdims=True), f.max(), x.argmax(axis=1),
                f.sum(dtype=tgrad.bfloat16), f.to(tgrad.int32), x.T.argmin())

    tr = tgrad.trace(fn, a)
    kinds = [op.kind for op in tr.ops]
    assert {"sum", "mean", "max", "argmax", "argmin", "cast"} <= set(kinds)
    report = tr.validate()
    assert report.state == "passed", [(r.kind, r.state, r.detail) for r in report.results if r.state == "failed"]
    by_kind = {op.kind: op for op in reversed(tr.ops)}  # the first op of each kind
    assert by_kind["argmax"].dtype == "int32" and by_kind["max"].dtype == "float32"
    assert by_kind["sum"].args == {"axes": [1], "keepdims": False, "dtype": "bfloat16"}
    again = tgrad.Trace.from_json(tr.to_json(payloads=True))
    assert again.validate().state == "passed"
    # a payload that lies is caught
    stored = json.loads(tr.to_json(payloads=True))
    op = next(o for o in stored["ops"] if o["kind"] == "argmax")
    raw = bytearray(base64.b64decode(op["payload"]["data"]))
    raw[0] ^= 1
    op["payload"]["data"] = base64.b64encode(bytes(raw)).decode()
    assert tgrad.Trace.from_json(json.dumps(stored)).validate().state == "failed"


def test_trace_records_float32_ops_and_says_what_it_cannot_replay() -> None:
    a = tgrad.Tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), dtype=tgrad.float32)
    tr = tgrad.trace(lambda x: (x.exp() + x).sum(axis=0), a)
    report = tr.validate()
    states = {r.kind: r.state for r in report.results}
    assert states["sum"] == "passed" and states["exp"] == "skipped" and states["add"] == "skipped"
    assert report.state != "failed"
    assert [op.dtype for op in tr.ops] == ["float32"] * 4
