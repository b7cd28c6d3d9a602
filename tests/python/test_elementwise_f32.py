"""float32 elementwise ops through the graph: dtypes, torch's promotion, numbers, views, fusion.

The values themselves are proven in test_elementwise_f32_reference.py (through the loops'
debug entry); here every graph result must equal those loops applied op by op, whatever the
fusion setting, CPU variant or thread count (docs/numerics.md, "float32 elementwise ops").
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad._ffi import ffi, lib

UNARY = ["relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "exp", "neg", "abs", "square", "rsqrt", "sqrt", "log",
         "log1p", "sin", "cos"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "pow", "gelu_backward", "gelu_tanh_backward", "silu_backward",
          "sigmoid_backward", "tanh_backward", "relu_backward", "rsqrt_backward", "sqrt_backward"]


def f32(data: object) -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(np.asarray(data, np.float32), dtype=tgrad.float32)


def op_code(name: str) -> int:
    return tgrad.ops.REGISTRY[name].code


def loops(name: str, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """The float32 loops on flat arrays (tgrad_debug_elementwise_f32): the op-by-op reference."""
    a = np.ascontiguousarray(a, np.float32)
    out = np.empty_like(a)
    pb = ffi.NULL if b is None else ffi.from_buffer("uint32_t[]", np.ascontiguousarray(b, np.float32).view(np.uint32))
    assert lib.tgrad_debug_elementwise_f32(op_code(name), ffi.from_buffer("uint32_t[]", a.view(np.uint32)), pb,
                                           ffi.from_buffer("uint32_t[]", out.view(np.uint32)), a.size) == 0
    return out


def data(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    values = rng.standard_normal(shape) * np.exp2(rng.integers(-8, 8, shape))
    flat = values.reshape(-1)
    flat[: min(flat.size, 6)] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-42][: min(flat.size, 6)]
    return values.astype(np.float32)


def test_every_op_on_float32_tensors_gives_float32_equal_to_the_loops() -> None:
    rng = np.random.default_rng(1)
    a, b = data(rng, (5, 7)), data(rng, (5, 7))
    ta, tb = f32(a), f32(b)
    for name in UNARY:
        out = tgrad.ops.apply(name, ta)
        assert out.dtype is tgrad.float32 and out.numpy().dtype == np.float32
        assert out.numpy().tobytes() == loops(name, a).tobytes(), name
    for name in BINARY:
        out = tgrad.ops.apply(name, ta, tb)
        assert out.dtype is tgrad.float32
        assert out.numpy().tobytes() == loops(name, a, b).tobytes(), name
    # operators and methods
    assert (ta + tb).numpy().tobytes() == loops("add", a, b).tobytes()
    assert (-ta).numpy().tobytes() == loops("neg", a).tobytes()
    assert ta.exp().numpy().tobytes() == loops("exp", a).tobytes()
    assert ta.gelu(approximate="tanh").numpy().tobytes() == loops("gelu_tanh", a).tobytes()


def test_mixed_operands_promote_to_float32_as_torch() -> None:
    rng = np.random.default_rng(2)
    a = data(rng, (4, 6))
    b_bf16 = tgrad.Tensor.from_numpy(rng.standard_normal((6,)))  # bf16, broadcast along rows
    b_wide = b_bf16.numpy().astype(np.float32)  # bf16 widens exactly
    for x, y, first in ((f32(a), b_bf16, True), (b_bf16, f32(a), False)):
        out = x * y
        assert out.dtype is tgrad.float32
        want = loops("mul", a, np.broadcast_to(b_wide, a.shape)) if first else loops(
            "mul", np.broadcast_to(b_wide, a.shape), a)
        assert out.numpy().tobytes() == want.tobytes()
    both_bf16 = b_bf16 + b_bf16
    assert both_bf16.dtype is tgrad.bfloat16


def test_a_number_keeps_the_tensor_dtype() -> None:
    x = f32([1.0, 3.0])
    out = x + 0.1
    assert out.dtype is tgrad.float32
    assert out.numpy().tobytes() == loops("add", np.array([1.0, 3.0], np.float32),
                                          np.full(2, np.float32(0.1))).tobytes()  # 0.1 rounded once to float32
    assert (1 - x).dtype is tgrad.float32 and (x / 3).numpy()[1] == np.float32(1.0)
    assert (2**70 * x).numpy()[0] == np.float32(2.0**70)
    assert (tgrad.Tensor.from_numpy(np.ones(2)) + 0.1).dtype is tgrad.bfloat16


def test_int32_operands_are_refused_before_anything_is_allocated() -> None:
    i = tgrad.Tensor.from_numpy(np.array([1, 2], np.int32), dtype=tgrad.int32)
    x = f32([1.0, 2.0])
    before = tgrad.live_tensors()
    for make in (lambda: i.relu(), lambda: i + x, lambda: x * i, lambda: i.exp()):
        with pytest.raises(errors.DtypeUnsupportedError):
            make()
    with pytest.raises(errors.ShapeMismatchError):  # shapes are checked before the bf16 operand is widened
        f32(np.ones(3)) + tgrad.Tensor.from_numpy(np.ones(2))
    assert tgrad.live_tensors() == before


def test_views_and_broadcasting() -> None:
    rng = np.random.default_rng(3)
    a = data(rng, (6, 8))
    x = f32(a)
    t = x.T  # strided operand
    assert t.exp().numpy().tobytes() == loops("exp", np.ascontiguousarray(a.T)).tobytes()
    col = f32(a[:, :1])
    out = (x - col).numpy()
    assert out.tobytes() == loops("sub", a, np.broadcast_to(a[:, :1], a.shape)).tobytes()
    scalar = f32(np.float32(2.5))
    assert (scalar * x[1:4, ::2]).numpy().tobytes() == loops(
        "mul", np.full((3, 4), 2.5, np.float32), np.ascontiguousarray(a[1:4, ::2])).tobytes()
    assert f32(np.zeros((0, 3))).exp().numpy().shape == (0, 3)


def _chains(x: tgrad.Tensor, y: tgrad.Tensor, m: tgrad.Tensor) -> list[tgrad.Tensor]:
    return [((x * y).exp() + 1.0).tanh(), (x.silu() - y.sigmoid()).abs().rsqrt(), tgrad.maximum(x, y).gelu() / 3.0,
            (m * x).square().sum(axis=1), (x.square().mean(axis=-1, keepdims=True) + 1e-6).rsqrt() * x,
            (x + m).relu().float()]


def test_fusion_never_changes_a_byte_and_explain_says_why_not_fused() -> None:
    rng = np.random.default_rng(4)
    a, b = data(rng, (9, 70)), data(rng, (9, 70))
    m = tgrad.Tensor.from_numpy(rng.standard_normal((9, 70)))  # bf16: promoted where it meets float32

    def run() -> list[bytes]:
        return [o.numpy().tobytes() for o in _chains(f32(a), f32(b), m)]

    fusion = tgrad.fusion_enabled()
    try:
        tgrad.set_fusion(True)
        fused = run()
        plan = ((f32(a) * f32(b)).exp() + 1.0).explain()
        tgrad.set_fusion(False)
        assert run() == fused
    finally:
        tgrad.set_fusion(fusion)
    assert "a float32 value is not fused" in plan and "elementwise_f32" in plan
    # op by op, through the loops
    want = loops("tanh", loops("add", loops("exp", loops("mul", a, b)), np.ones_like(a)))
    assert fused[0] == want.tobytes()


def test_bytes_do_not_depend_on_variant_or_threads() -> None:
    rng = np.random.default_rng(5)
    a, b = data(rng, (3, 40_000)), data(rng, (3, 40_000))  # big enough to split over threads

    def run() -> list[bytes]:
        x, y = f32(a), f32(b)
        return [o.numpy().tobytes() for o in (x.gelu(), x / y, (x * y).silu(), x.T.exp())]

    isa, threads = tgrad._cpu_isa_setting(), tgrad.num_threads()
    try:
        reference = run()
        for variant, ok in tgrad.cpu_isas().items():
            if not ok:
                continue
            tgrad.set_cpu_isa(variant)
            for n in (1, 3):
                tgrad.set_num_threads(n)
                assert run() == reference, (variant, n)
    finally:
        tgrad.set_cpu_isa(isa)
        tgrad.set_num_threads(threads)
    assert reference[0] == loops("gelu", a).tobytes()


def test_float32_promoted_on_a_gpu_device_runs_there(opencl_device: str) -> None:
    """float32 on a GPU device takes every op (tests/python/test_gpu_elementwise_f32.py: integers;
    test_gpu_transcendental_f32.py: binary64), a bf16 operand promoted there by a cast."""
    x = tgrad.Tensor.from_numpy(np.full(4, 0.75, np.float32), device="opencl", dtype=tgrad.float32)
    bf = tgrad.Tensor.from_numpy(np.full(4, 0.75, np.float32), device="opencl")
    xc = tgrad.Tensor.from_numpy(np.full(4, 0.75, np.float32), dtype=tgrad.float32)
    got = tgrad.ops.apply("gelu_backward", bf, x)
    assert got.device == "opencl" and got.dtype == tgrad.float32
    assert got.numpy().tobytes() == tgrad.ops.apply("gelu_backward", xc, xc).numpy().tobytes()


@pytest.mark.parametrize("fused", [True, False])
def test_promoted_chain_equals_the_ops_one_at_a_time(fused: bool) -> None:
    rng = np.random.default_rng(6)
    a = data(rng, (4, 5))
    bf = tgrad.Tensor.from_numpy(rng.standard_normal((4, 5)))
    fusion = tgrad.fusion_enabled()
    try:
        tgrad.set_fusion(fused)
        out = ((bf * 2.0).relu() + f32(a)).exp()  # a bf16 chain, widened, then float32 ops
        got = out.numpy().tobytes()
    finally:
        tgrad.set_fusion(fusion)
    wide = ((bf * 2.0).relu()).numpy().astype(np.float32)
    assert got == loops("exp", loops("add", wide, a)).tobytes()


def test_slow_path_counter_counts() -> None:
    counts = np.zeros(3, np.int64)
    assert lib.tgrad_debug_f32_slow_path(op_code("exp"), ffi.from_buffer("int64_t[]", counts), 3) == 0
    before = counts.copy()
    f32(np.linspace(-5, 5, 101)).exp().numpy()
    assert lib.tgrad_debug_f32_slow_path(op_code("exp"), ffi.from_buffer("int64_t[]", counts), 3) == 0
    assert counts[0] - before[0] == 101 and counts[2] == before[2]
    assert set(itertools.chain(UNARY, BINARY)) == set(tgrad.ops.REGISTRY)
