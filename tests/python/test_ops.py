"""Elementwise ops from Python (tgrad.ops): each spelling reaches the registry op it names, on the
operands it was given, in their order, through their views, with numbers rounded once by libtgrad.

The values themselves are proven in C and against mpmath (docs/numerics.md); here the reference
is the library's own per-element kernel (tgrad_debug_elementwise) on the same bits, broadcast by
numpy, and for + - * / maximum minimum an independent float64 computation as well.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tgrad
from tgrad.conformance import oracle
from tgrad import Tensor, errors
from tgrad._ffi import ffi, lib

NAN = 0x7FC0


# ---- helpers --------------------------------------------------------------------------------------
def registry() -> dict[str, int]:
    """Op name -> code, asked of the library directly (not through tgrad.ops)."""
    return {ffi.string(lib.tgrad_op_name(op)).decode(): op for op in range(1, lib.tgrad_op_count() + 1)}


def arity(name: str) -> int:
    return int(lib.tgrad_op_arity(registry()[name]))


def bits(t: Tensor) -> np.ndarray:
    return t.numpy().view(np.uint16)


def tensor(values: Any) -> Tensor:
    return Tensor.from_bf16_bits(np.asarray(values, dtype=np.uint16))


def kernel(name: str, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """The library's per-element kernel on numpy-broadcast operands: the reference result bits."""
    if b is not None:
        a, b = np.broadcast_arrays(a, b)
        b = np.array(b, dtype=np.uint16, order="C")  # a compact copy (0-d stays 0-d)
    a = np.array(a, dtype=np.uint16, order="C")
    out = np.zeros_like(a)
    pb = ffi.NULL if b is None else ffi.from_buffer("uint16_t[]", b)
    errors._check(lib.tgrad_debug_elementwise(registry()[name], ffi.from_buffer("uint16_t[]", a), pb,
                                              ffi.from_buffer("uint16_t[]", out), a.size))
    return out


def float64_reference(name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """+ - * / maximum minimum of bf16 operands in float64, rounded once to bf16 (the oracle's
    conversion): a bf16 sum or product is exact in float64 or too far from a bf16 midpoint to
    matter, and a quotient's one double rounding cannot cross one (docs/numerics.md)."""
    a, b = np.broadcast_arrays(np.asarray(a, np.uint16), np.asarray(b, np.uint16))
    with np.errstate(all="ignore"):  # signalling NaNs among the operands
        x = oracle.bf16_bits_to_f32(a).astype(np.float64)
        y = oracle.bf16_bits_to_f32(b).astype(np.float64)
        exact = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
                 "maximum": np.maximum, "minimum": np.minimum}[name](x, y)
    out = oracle.f64_to_bf16_bits(exact)
    if name in ("maximum", "minimum"):  # IEEE 754-2019: max(-0, +0) = +0, min(-0, +0) = -0
        zeros = (x == 0) & (y == 0)
        out = np.where(zeros, (a & b) if name == "maximum" else (a | b), out)
    return np.where(np.isnan(exact), np.uint16(NAN), out).astype(np.uint16)


def random_bits(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """Every kind of bf16: normals, subnormals, zeros, infinities and NaNs of both signs."""
    return rng.integers(0, 1 << 16, size=shape, dtype=np.uint16)


def live() -> tuple[int, int, int]:
    gc.collect()
    return tgrad.live_tensors(), tgrad.live_buffers(), tgrad.live_bytes()


@pytest.fixture
def fusion() -> Iterator[None]:
    """Restores the fusion switch a test changes."""
    saved = tgrad.fusion_enabled()
    yield
    tgrad.set_fusion(saved)


# Every way Python spells each registry op. A registry op missing here fails
# test_every_registry_op_is_reachable_from_python_by_its_name.
SPELLINGS: dict[str, list[Callable[..., Tensor]]] = {
    "relu": [tgrad.relu, Tensor.relu],
    "gelu": [tgrad.gelu, Tensor.gelu, lambda x: x.gelu(approximate="none")],
    "gelu_tanh": [lambda x: tgrad.gelu(x, approximate="tanh"), lambda x: x.gelu("tanh")],
    "silu": [tgrad.silu, Tensor.silu],
    "sigmoid": [tgrad.sigmoid, Tensor.sigmoid],
    "tanh": [tgrad.tanh, Tensor.tanh],
    "exp": [tgrad.exp, Tensor.exp],
    "neg": [tgrad.neg, Tensor.neg, lambda x: -x],
    "abs": [tgrad.abs, Tensor.abs, lambda x: abs(x)],
    "square": [tgrad.square, Tensor.square],
    "rsqrt": [tgrad.rsqrt, Tensor.rsqrt],
    "add": [tgrad.add, Tensor.add, lambda a, b: a + b],
    "sub": [tgrad.sub, Tensor.sub, lambda a, b: a - b],
    "mul": [tgrad.mul, Tensor.mul, lambda a, b: a * b],
    "div": [tgrad.div, Tensor.div, lambda a, b: a / b],
    "maximum": [tgrad.maximum, Tensor.maximum],
    "minimum": [tgrad.minimum, Tensor.minimum],
    "sqrt": [tgrad.sqrt, Tensor.sqrt],
    "log": [tgrad.log, Tensor.log],
    "log1p": [tgrad.log1p, Tensor.log1p],
    "sin": [tgrad.sin, Tensor.sin],
    "cos": [tgrad.cos, Tensor.cos],
    "pow": [tgrad.pow, Tensor.pow, lambda a, b: a ** b],
    # the derivative ops (tgrad.derivatives): the forward value first, the cotangent second
    "gelu_backward": [tgrad.gelu_backward, tgrad.derivatives.gelu_backward],
    "gelu_tanh_backward": [tgrad.gelu_tanh_backward],
    "silu_backward": [tgrad.silu_backward],
    "sigmoid_backward": [tgrad.sigmoid_backward],
    "tanh_backward": [tgrad.tanh_backward],
    "relu_backward": [tgrad.relu_backward],
    "rsqrt_backward": [tgrad.rsqrt_backward],
    "sqrt_backward": [tgrad.sqrt_backward],
}


# ---- reaching the registry ------------------------------------------------------------------------
def test_the_op_table_is_the_library_registry() -> None:
    assert {name: info.code for name, info in tgrad.ops.REGISTRY.items()} == registry()
    assert all(info.arity == arity(name) for name, info in tgrad.ops.REGISTRY.items())


def test_every_registry_op_is_reachable_from_python_by_its_name(rng: np.random.Generator) -> None:
    assert set(SPELLINGS) == set(registry()), "a registry op without a Python spelling, or the reverse"
    a, b = random_bits(rng, 3, 4), random_bits(rng, 3, 4)
    for name, spellings in SPELLINGS.items():
        operands = [tensor(a), tensor(b)][: arity(name)]
        want = kernel(name, *[a, b][: arity(name)])
        assert np.array_equal(bits(tgrad.ops.apply(name, *operands)), want), name
        for spell in spellings:
            tr = tgrad.trace(spell, *operands)
            assert tr.ops[-1].kind == name, f"{spell} is recorded as {tr.ops[-1].kind}, not {name}"
            assert tr.ops[-1].inputs == tuple(range(arity(name)))
            assert np.array_equal(tr.ops[-1].payload, want), f"{name} spelled {spell}"


def test_unary_ops_on_every_bf16_input() -> None:
    every = np.arange(1 << 16, dtype=np.uint16).reshape(256, 256)
    x = tensor(every)
    for name in (n for n in registry() if arity(n) == 1):
        y = SPELLINGS[name][1](x)  # the method
        assert y.shape == (256, 256)
        assert np.array_equal(bits(y), kernel(name, every)), name


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "maximum", "minimum"])
def test_binary_ops_equal_a_float64_reference(name: str, rng: np.random.Generator) -> None:
    a, b = random_bits(rng, 256, 256), random_bits(rng, 256, 256)
    got = bits(SPELLINGS[name][0](tensor(a), tensor(b)))
    assert np.array_equal(got, float64_reference(name, a, b))
    assert np.array_equal(got, kernel(name, a, b))


# ---- broadcasting and views -----------------------------------------------------------------------
SHAPES = [((2, 3), (3,)), ((2, 1), (1, 3)), ((), (2, 3)), ((2, 3), ()), ((), ()), ((4, 1, 3), (2, 1)),
          ((1,), (5,)), ((0, 3), (3,)), ((2, 0), (2, 1)), ((0,), ()), ((3, 1, 1, 2), (1, 4, 1))]


@pytest.mark.parametrize(("sa", "sb"), SHAPES, ids=[f"{sa}x{sb}" for sa, sb in SHAPES])
def test_binary_ops_broadcast_like_numpy(sa: tuple[int, ...], sb: tuple[int, ...],
                                         rng: np.random.Generator) -> None:
    a, b = random_bits(rng, *sa), random_bits(rng, *sb)
    for name in ("sub", "div", "maximum"):  # order-sensitive ops, both ways round
        for x, y in ((a, b), (b, a)):
            got = SPELLINGS[name][0](tensor(x), tensor(y))
            assert got.shape == np.broadcast_shapes(x.shape, y.shape)
            assert np.array_equal(bits(got), float64_reference(name, x, y)), (name, x.shape, y.shape)


@pytest.mark.parametrize("shape", [(), (0,), (0, 3), (1, 7), (5, 1, 3)])
def test_unary_ops_keep_the_shape(shape: tuple[int, ...], rng: np.random.Generator) -> None:
    a = random_bits(rng, *shape)
    for name in ("relu", "exp", "rsqrt"):
        got = tgrad.ops.apply(name, tensor(a))
        assert got.shape == shape
        assert np.array_equal(bits(got), kernel(name, a))


def test_operands_are_read_through_their_views(rng: np.random.Generator) -> None:
    base_bits, big_bits, col_bits, cube_bits = (random_bits(rng, *s) for s in ((6, 8), (16, 18), (8, 1), (3, 8, 6)))
    base, big, col, cube = tensor(base_bits), tensor(big_bits), tensor(col_bits), tensor(cube_bits)
    views = {  # label: a tgrad view [8, 6], the same view of the bits in numpy
        "transposed": (base.T, base_bits.T),
        "reversed": (base[::-1, ::-1].T, base_bits[::-1, ::-1].T),
        "strided": (big[1::2, ::3], big_bits[1::2, ::3]),
        "expanded": (col.expand(8, 6), np.broadcast_to(col_bits, (8, 6))),
        "selected": (cube[1], cube_bits[1]),
    }
    for label, (view, view_bits) in views.items():
        assert np.array_equal(bits(tgrad.exp(view)), kernel("exp", view_bits)), label
        for other_label, (other, other_bits) in views.items():
            got = view - other
            assert np.array_equal(bits(got), float64_reference("sub", view_bits, other_bits)), (label, other_label)
        row = base.T[0]  # a strided 1-D view, broadcast along the rows
        assert np.array_equal(bits(row / view), float64_reference("div", base_bits.T[0], view_bits)), label


def test_operands_that_cannot_broadcast_are_refused_naming_both_shapes() -> None:
    a, b, c = tensor(np.zeros((2, 3))), tensor(np.zeros(4)), tensor(np.zeros((3, 2)))
    before = live()
    for x, y, texts in ((a, b, ("[2, 3]", "[4]")), (a, c, ("[2, 3]", "[3, 2]"))):
        with pytest.raises(errors.ShapeMismatchError) as info:
            x + y
        assert all(text in str(info.value) for text in texts), str(info.value)
        with pytest.raises(errors.ShapeMismatchError):
            tgrad.maximum(y, x)
        assert live() == before


def test_operands_on_two_devices_are_refused(opencl_device: str) -> None:
    cpu = tensor(np.zeros((2, 3)))
    gpu = Tensor.from_numpy(np.zeros((2, 3), np.float32), device="opencl")
    with pytest.raises(errors.DeviceMismatchError):
        cpu + gpu


# ---- numbers as operands --------------------------------------------------------------------------
def bf16_of(value: float) -> int:
    return int(oracle.f64_to_bf16_bits(value))


TIE_AFTER_F32 = 1 + 2**-8 + 2**-30  # float32 rounds it to the tie 1 + 2^-8, which bf16 takes to 1
NUMBERS = [
    (0.1, bf16_of(0.1)),
    (np.float64(0.1), bf16_of(0.1)),
    (TIE_AFTER_F32, 0x3F81),                          # one rounding from the float64 value: up
    (np.float32(TIE_AFTER_F32), 0x3F80),              # a float32's own value is the tie: to even
    (np.float16(0.1), bf16_of(float(np.float16(0.1)))),
    (ml_dtypes.bfloat16(0.1), 0x3DCD),
    (3, 0x4040),
    (np.int64(-3), 0xC040),
    (np.uint8(255), bf16_of(255.0)),
    (True, 0x3F80),
    (np.bool_(False), 0x0000),
    (2**60 + 2**52 + 1, bf16_of(2.0**60 + 2.0**53)),  # float(n) is the tie 2^60 + 2^52: it would round down
    (-(2**60 + 2**52 + 1), bf16_of(-(2.0**60 + 2.0**53))),
    (2**128 - 2**119, 0x7F80),                        # the overflow tie of bf16 goes to inf
    (10**400, 0x7F80),                                # beyond float64
    (-(10**400), 0xFF80),
    (-1e-41, 0x8000),                                 # below half the smallest subnormal: -0
    (-0.0, 0x8000),
    (float("inf"), 0x7F80),
    (float("nan"), NAN),
]


@pytest.mark.parametrize(("number", "want"), NUMBERS, ids=[f"{type(n).__name__}({n!r:.30})" for n, _ in NUMBERS])
def test_numbers_become_bf16_by_one_rounding_in_libtgrad(number: Any, want: int) -> None:
    one = tensor([0x3F80])  # 1 * c and c * 1 are c, exactly (signed zeros, inf and NaN too)
    assert bits(one * number).tolist() == [want]
    assert bits(number * one).tolist() == [want]
    tr = tgrad.trace(lambda x: x * number, one)
    assert [op.kind for op in tr] == ["input", "constant", "mul"]
    assert tr.ops[1].shape == () and int(tr.ops[1].payload) == want
    assert tr.ops[2].inputs == (0, 1)


def test_reflected_operators_put_the_number_first(rng: np.random.Generator) -> None:
    a = random_bits(rng, 4, 5)
    x = tensor(a)
    cases: list[tuple[Tensor, str, Any, Any]] = [
        (1 - x, "sub", 1.0, a), (x - 1, "sub", a, 1.0), (3.0 / x, "div", 3.0, a), (x / 3.0, "div", a, 3.0),
        (2 * x, "mul", 2.0, a), (x + 0.1, "add", a, 0.1), (0.1 + x, "add", 0.1, a),
        (tgrad.maximum(0, x), "maximum", 0.0, a), (x.minimum(-0.0), "minimum", a, -0.0),
        (tgrad.sub(2, x), "sub", 2.0, a),
    ]
    for got, name, left, right in cases:
        lbits = np.uint16(bf16_of(left)) if not isinstance(left, np.ndarray) else left
        rbits = np.uint16(bf16_of(right)) if not isinstance(right, np.ndarray) else right
        assert np.array_equal(bits(got), float64_reference(name, lbits, rbits)), (name, left, right)
    tr = tgrad.trace(lambda t: 1 - t, x)
    assert [op.kind for op in tr] == ["input", "constant", "sub"] and tr.ops[2].inputs == (1, 0)


def test_what_is_no_number_is_refused() -> None:
    before = live()
    x = tensor(np.zeros(3))
    for other in ("a", None, [1.0], np.ones(3), np.array(2.0), object()):
        for operation in (lambda: x + other, lambda: other - x, lambda: x * other, lambda: other / x):
            with pytest.raises(TypeError) as info:
                operation()
            assert not isinstance(info.value, errors.TgradError)  # Python's own operator refusal
        with pytest.raises(errors.InvalidArgumentError):
            tgrad.add(x, other)
        with pytest.raises(errors.InvalidArgumentError):
            tgrad.maximum(other, x)
    for unsupported in (1j, np.complex64(1), np.longdouble(1)):
        with pytest.raises(errors.DtypeUnsupportedError):
            x + unsupported
        with pytest.raises(errors.DtypeUnsupportedError):
            tgrad.div(unsupported, x)
    with pytest.raises(errors.InvalidArgumentError, match="at least one operand must be a Tensor"):
        tgrad.add(1, 2)
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.relu(2.0)  # type: ignore[arg-type]
    del x, info
    assert live() == before


def test_unknown_ops_and_gelu_forms_are_typed_errors() -> None:
    x = tensor(np.zeros(3))
    for call in (lambda: tgrad.ops.apply("nope", x), lambda: tgrad.ops.apply("add", x),
                 lambda: tgrad.ops.apply("relu", x, x), lambda: tgrad.ops.apply("relu"),
                 lambda: tgrad.ops.apply(12, x, x), lambda: tgrad.ops.apply("add", x, x, x),
                 lambda: x.gelu("fast"), lambda: tgrad.gelu(x, approximate=None),
                 lambda: tgrad.gelu(x, approximate="Tanh")):
        with pytest.raises(errors.InvalidArgumentError):
            call()


def test_a_failed_op_leaves_nothing_alive() -> None:
    x, y = tensor(np.zeros((2, 3))), tensor(np.zeros(4))
    gone = tensor(np.zeros(3))
    gone.release()
    before = live()
    for call in (lambda: gone + 0.5, lambda: 0.5 * gone, lambda: tgrad.maximum(gone, 1),
                 lambda: x + gone, lambda: gone.relu()):
        with pytest.raises(errors.InvalidHandleError) as info:
            call()
        assert live() == before, "the number's 0-d tensor outlived the failed op"  # info holds the frames
    with pytest.raises(errors.ShapeMismatchError) as info:
        x + y
    assert live() == before
    del info


# ---- fusion ---------------------------------------------------------------------------------------
def mlp_graphs(rng: np.random.Generator, m: int) -> dict[str, Callable[[], Tensor]]:
    def t(*shape: int) -> Tensor:
        return Tensor.from_numpy(rng.standard_normal(shape).astype(np.float32))

    x, w, b, g, u = t(m, 32), t(32, 24), t(24), t(32, 24), t(32, 24)
    return {
        "gelu(x @ w + b)": lambda: (x @ w + b).gelu(),
        "gelu_tanh(x @ w + b)": lambda: (x @ w + b).gelu("tanh"),
        "silu(x @ g) * (x @ u)": lambda: tgrad.silu(x @ g) * (x @ u),
        "relu(x @ w.T.T - 0.5) / 3": lambda: tgrad.relu(x @ w.T.T - 0.5) / 3,
    }


def step_by_step(graph: str, rng: np.random.Generator, m: int) -> np.ndarray:
    """The graph with every intermediate realized before the next op reads it: nothing to fuse."""
    def t(*shape: int) -> Tensor:
        return Tensor.from_numpy(rng.standard_normal(shape).astype(np.float32))

    x, w, b, g, u = t(m, 32), t(32, 24), t(24), t(32, 24), t(32, 24)
    if graph.startswith("gelu"):
        return bits(((x @ w).realize() + b).realize().gelu("tanh" if "tanh" in graph else "none"))
    if graph.startswith("silu"):
        return bits(tgrad.silu((x @ g).realize()).realize() * (x @ u).realize())
    return bits(tgrad.relu(((x @ w).realize() - 0.5).realize()).realize() / 3)


@pytest.mark.parametrize("m", [1, 16, 80])  # one row, a few, a packed product: the matmul's routes
def test_fusion_never_changes_bytes(m: int, fusion: None) -> None:
    results: dict[bool, dict[str, np.ndarray]] = {}
    for enabled in (False, True):
        tgrad.set_fusion(enabled)
        assert tgrad.fusion_enabled() is enabled
        graphs = mlp_graphs(np.random.default_rng(5), m)
        results[enabled] = {name: bits(make()) for name, make in graphs.items()}
    for name in results[True]:
        assert np.array_equal(results[True][name], results[False][name]), name
        assert np.array_equal(results[True][name], step_by_step(name, np.random.default_rng(5), m)), name


def test_set_fusion_takes_a_bool(fusion: None) -> None:
    for bad in (1, 0, "on", None):
        with pytest.raises(errors.InvalidArgumentError):
            tgrad.set_fusion(bad)  # type: ignore[arg-type]
    tgrad.set_fusion(np.bool_(False))
    assert tgrad.fusion_enabled() is False


# ---- tracing --------------------------------------------------------------------------------------
def test_trace_records_each_op_under_its_registry_name(rng: np.random.Generator) -> None:
    w = Tensor.from_numpy(rng.standard_normal((8, 4)).astype(np.float32))
    b = Tensor.from_numpy(rng.standard_normal(4).astype(np.float32))
    tr = tgrad.trace(lambda x: (x @ w + b).gelu("tanh") * 2, Tensor.from_numpy(np.ones((3, 8), np.float32)))
    assert [op.kind for op in tr] == ["input", "input", "matmul", "input", "add", "gelu_tanh", "constant", "mul"]
    add, gelu, mul = tr.ops[4], tr.ops[5], tr.ops[7]
    assert add.inputs == (2, 3) and gelu.inputs == (4,) and mul.inputs == (5, 6)
    assert add.args == {} and gelu.args == {} and mul.args == {}
    assert np.array_equal(gelu.payload, kernel("gelu_tanh", add.payload))
    assert np.array_equal(mul.payload, float64_reference("mul", gelu.payload, tr.ops[6].payload))
