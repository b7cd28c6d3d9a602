"""tgrad.rms_norm and tgrad.layer_norm: the exact value of the formula rounded once to bf16
(docs/numerics.md, "Norms"), against an exact reference (mpmath proposes, Fractions decide:
norm_reference.py) on random and adversarial rows; bytes independent of threads, CPU variant
and fusion; typed refusals that allocate nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tgrad
from tgrad import errors

sys.path.insert(0, str(Path(__file__).parent))
from norm_reference import layer_norm_row, rms_norm_row  # noqa: E402
from every_setting import assert_same_bytes_everywhere  # noqa: E402


def bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to bf16 (RNE) as uint16 bits, through tgrad's own conversion."""
    return tgrad.Tensor.from_numpy(np.asarray(a, np.float32)).numpy().view(np.uint16)


def tensor(bits: np.ndarray) -> tgrad.Tensor:
    f = (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)
    return tgrad.Tensor.from_numpy(f)


def out_bits(t: tgrad.Tensor) -> np.ndarray:
    return t.numpy().view(np.uint16)


def _rows(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Adversarial rows (bf16 bits)."""
    f32 = np.float32
    return {
        "random": bf16_bits(rng.standard_normal(37)),
        "spread": bf16_bits(np.array([3.0e38, -1e-38, 7.0, -2.0 ** -30, 2.0 ** 100, 1e-40], f32)),
        "overflow": bf16_bits(np.array([3.3e38, -3.3e38, 3.0e38, 1.0], f32)),
        "all_equal": bf16_bits(np.full(9, 1.5, f32)),
        "one": bf16_bits(np.array([-0.3], f32)),
        "subnormals": bf16_bits(np.array([1e-40, -3e-40, 9.2e-41, 0.0], f32)),
        "zeros": bf16_bits(np.array([0.0, -0.0, 0.0], f32)),
        "offset": bf16_bits(1000.0 + rng.integers(-3, 4, 64).astype(f32)),
        "midpoint": bf16_bits(np.array([3.0, 1.0, 1.0, 5.0], f32)),  # mean square 9: see the weight below
        "pm_one": bf16_bits(np.array([-1.0, 1.0], f32)),
        "nan": bf16_bits(np.array([1.0, np.nan, 2.0], f32)),
        "inf": bf16_bits(np.array([1.0, -np.inf, 2.0], f32)),
        "wide": bf16_bits(rng.standard_normal(40) * np.exp2(rng.integers(-60, 60, 40))),
    }


def _check_rows(fn_name: str, eps: float, seed: int, weighted: bool, biased: bool) -> None:
    rng = np.random.default_rng(seed)
    for name, x in _rows(rng).items():
        n = len(x)
        w = bf16_bits(np.full(n, 255 / 128)) if name == "midpoint" else bf16_bits(rng.standard_normal(n) * 2)
        b = bf16_bits(np.full(n, 2.0 ** -8)) if name == "pm_one" else bf16_bits(rng.standard_normal(n))
        if fn_name == "rms_norm":
            got = out_bits(tgrad.rms_norm(tensor(x), n, tensor(w) if weighted else None, eps=eps))
            want = rms_norm_row(list(x), list(w) if weighted else None, eps)
        else:
            got = out_bits(tgrad.layer_norm(tensor(x), [n], tensor(w) if weighted else None,
                                            tensor(b) if biased else None, eps=eps))
            want = layer_norm_row(list(x), list(w) if weighted else None, list(b) if biased else None, eps)
        assert [hex(v) for v in got] == [hex(v) for v in want], (fn_name, name, eps, weighted, biased)


@pytest.mark.parametrize("eps", [0.0, 1e-6, 2.0 ** -7, 1e-5])
@pytest.mark.parametrize("weighted", [False, True])
def test_rms_norm_is_the_exact_value_rounded_once(eps: float, weighted: bool) -> None:
    _check_rows("rms_norm", eps, 1, weighted, False)


@pytest.mark.parametrize("eps", [0.0, 1e-5])
@pytest.mark.parametrize("weighted,biased", [(False, False), (True, False), (True, True), (False, True)])
def test_layer_norm_is_the_exact_value_rounded_once(eps: float, weighted: bool, biased: bool) -> None:
    _check_rows("layer_norm", eps, 2, weighted, biased)


def test_exact_midpoints_round_to_even() -> None:
    # rms_norm([3, 1, 1, 5], w = 255/128, eps = 0): mean square 9, y_3 = 5 * 255 / 384 = 425/128,
    # a bf16 midpoint: ties to even give 424/128 = 3.3125
    x = tensor(bf16_bits(np.array([3.0, 1.0, 1.0, 5.0], np.float32)))
    w = tensor(bf16_bits(np.full(4, 255 / 128)))
    assert tgrad.rms_norm(x, 4, w, eps=0.0).numpy(np.float32)[3] == 3.3125
    # layer_norm([-1, 1], eps = 0) = [-1, 1] exactly; -1 + 2^-9 is the midpoint between -1 and
    # -1 + 2^-8 (even: -1), 1 + 3 * 2^-8 the one between 1 + 2^-7 and 1 + 2^-6 (even: 1 + 2^-6)
    y = tgrad.layer_norm(tensor(bf16_bits(np.array([-1.0, 1.0], np.float32))), 2,
                         bias=tensor(bf16_bits(np.array([2.0 ** -9, 3 * 2.0 ** -8], np.float32))), eps=0.0)
    assert list(y.numpy(np.float32)) == [-1.0, 1.0 + 2.0 ** -6]


def test_special_rows_follow_the_documented_rules() -> None:
    z = tensor(bf16_bits(np.zeros(4, np.float32)))
    assert np.all(tgrad.rms_norm(z, 4, eps=1e-6).numpy(np.float32) == 0)
    assert np.all(np.isnan(tgrad.rms_norm(z, 4, eps=0.0).numpy(np.float32)))  # 0 / 0
    c = tensor(bf16_bits(np.full(5, 3.0, np.float32)))
    assert np.all(np.isnan(tgrad.layer_norm(c, 5, eps=0.0).numpy(np.float32)))
    assert np.all(tgrad.layer_norm(c, 5, eps=1e-5).numpy(np.float32) == 0)
    nanrow = tensor(bf16_bits(np.array([1.0, np.nan], np.float32)))
    assert np.all(np.isnan(tgrad.rms_norm(nanrow, 2).numpy(np.float32)))


def test_default_eps_is_torch_finfo_eps() -> None:
    x = tensor(bf16_bits(np.array([[2.0 ** -5, 0.0]], np.float32)))
    want = rms_norm_row(list(bf16_bits(np.array([2.0 ** -5, 0.0]))), None, 2.0 ** -7)
    assert list(out_bits(tgrad.rms_norm(x, [2]))[0]) == want


def test_long_rows_multi_axis_and_views() -> None:
    rng = np.random.default_rng(5)
    data = rng.standard_normal((2, 3, 40)).astype(np.float32)
    x = tgrad.Tensor.from_numpy(data)
    w = tgrad.Tensor.from_numpy(rng.standard_normal((3, 40)).astype(np.float32))
    y = out_bits(tgrad.rms_norm(x, (3, 40), w, eps=1e-6)).reshape(2, 120)
    xb, wb = out_bits(x).reshape(2, 120), out_bits(w).reshape(120)
    for r in range(2):
        assert list(y[r]) == rms_norm_row(list(xb[r]), list(wb), 1e-6)
    # a transposed view is read through its strides
    t = tgrad.Tensor.from_numpy(data[0].T.copy()).T  # [3, 40] view of a [40, 3] buffer
    assert np.array_equal(out_bits(tgrad.layer_norm(t, 40)), out_bits(tgrad.layer_norm(tgrad.Tensor.from_numpy(data[0]), 40)))


@pytest.mark.every_variant
def test_bytes_do_not_depend_on_threads_variant_or_fusion() -> None:
    rng = np.random.default_rng(11)
    data = (rng.standard_normal((64, 600)) * np.exp2(rng.integers(-8, 8, (64, 600)))).astype(np.float32)
    x = tgrad.Tensor.from_numpy(data)
    w = tgrad.Tensor.from_numpy(rng.standard_normal(600).astype(np.float32))
    b = tgrad.Tensor.from_numpy(rng.standard_normal(600).astype(np.float32))

    def run() -> list[bytes]:
        h = (x * 2.0 + 1.0).relu()  # an elementwise producer feeding the norm
        outs = [tgrad.rms_norm(h, 600, w, eps=1e-6), tgrad.layer_norm(x - 3.0, 600, w, b), tgrad.rms_norm(x, 600)]
        return [o.numpy().tobytes() for o in outs]

    assert_same_bytes_everywhere(run)


def test_slow_path_is_counted_and_rare() -> None:
    rng = np.random.default_rng(3)
    before = tgrad.norms.slow_path_counts()
    x = tgrad.Tensor.from_numpy(rng.standard_normal((256, 256)).astype(np.float32))
    tgrad.rms_norm(x, 256, eps=1e-6).numpy()
    tgrad.layer_norm(x, 256).numpy()
    after = tgrad.norms.slow_path_counts()
    evaluated, slow = after[0] - before[0], after[1] - before[1]
    assert evaluated == 2 * 256 * 256
    assert slow < evaluated // 100


def test_refusals_are_typed_and_allocate_nothing() -> None:
    x = tgrad.Tensor.from_numpy(np.ones((2, 3), np.float32))
    w4 = tgrad.Tensor.from_numpy(np.ones(4, np.float32))
    before = tgrad.live_tensors()
    cases = [(lambda: tgrad.rms_norm(x, 4), errors.ShapeMismatchError),
             (lambda: tgrad.rms_norm(x, (2, 3, 1)), errors.ShapeMismatchError),
             (lambda: tgrad.rms_norm(x, 3, w4), errors.ShapeMismatchError),
             (lambda: tgrad.layer_norm(x, 3, None, w4), errors.ShapeMismatchError),
             (lambda: tgrad.rms_norm(x, 3, eps=-1.0), errors.InvalidArgumentError),
             (lambda: tgrad.rms_norm(x, 3, eps=float("nan")), errors.InvalidArgumentError),
             (lambda: tgrad.layer_norm(x, 3, eps=1e-300), errors.InvalidArgumentError),
             (lambda: tgrad.rms_norm(x, "3"), errors.InvalidArgumentError),
             (lambda: tgrad.rms_norm(x, [], None), errors.InvalidArgumentError),
             (lambda: tgrad.rms_norm(x.float(), 3), errors.DtypeUnsupportedError),
             (lambda: tgrad.rms_norm(x, 3, x.float()[0]), errors.DtypeUnsupportedError),
             (lambda: tgrad.rms_norm(np.ones(3), 3), errors.InvalidArgumentError)]
    for make, exc in cases:
        with pytest.raises(exc):
            make()
    assert tgrad.live_tensors() == before


def test_explain_names_the_norm() -> None:
    x = tgrad.Tensor.from_numpy(np.ones((2, 3), np.float32))
    y = tgrad.layer_norm(x * 2.0, 3)
    assert "layer_norm" in tgrad.explain(y)
    y.numpy()


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_random_sweep_against_the_reference(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(1, 300))
    scale = np.exp2(rng.integers(-20, 20, (8, n)))
    x = bf16_bits((rng.standard_normal((8, n)) * scale).astype(np.float32))
    w = bf16_bits(rng.standard_normal(n).astype(np.float32))
    b = bf16_bits(rng.standard_normal(n).astype(np.float32))
    got_r = out_bits(tgrad.rms_norm(tensor(x), n, tensor(w), eps=1e-6))
    got_l = out_bits(tgrad.layer_norm(tensor(x), n, tensor(w), tensor(b), eps=1e-5))
    for r in range(8):
        assert list(got_r[r]) == rms_norm_row(list(x[r]), list(w), 1e-6)
        assert list(got_l[r]) == layer_norm_row(list(x[r]), list(w), list(b), 1e-5)


@pytest.mark.slow
def test_a_row_of_ten_to_the_fifth() -> None:
    rng = np.random.default_rng(8)
    x = bf16_bits(rng.standard_normal(100_000).astype(np.float32))
    got = out_bits(tgrad.rms_norm(tensor(x[None]), 100_000, eps=1e-5))[0]
    want = rms_norm_row(list(x[:100_000]), None, 1e-5)
    assert list(got) == want


def test_trace_records_the_norms_and_says_it_cannot_replay_them() -> None:
    x = tgrad.Tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    tr = tgrad.trace(lambda t: tgrad.layer_norm(tgrad.rms_norm(t * 2.0, 3, eps=1e-6), [3]), x)
    kinds = [op.kind for op in tr.ops]
    assert "rms_norm" in kinds and "layer_norm" in kinds
    states = {r.kind: r.state for r in tr.validate().results}
    assert states["rms_norm"] == "skipped" and states["layer_norm"] == "skipped" and states["mul"] == "passed"
    assert tgrad.Trace.from_json(tr.to_json(payloads=True)).validate().state != "failed"
