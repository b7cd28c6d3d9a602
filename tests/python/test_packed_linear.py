"""tgrad.nn.PackedLinear: a Linear whose weight is held as 32-column panels [out/32, in, 32].

The promise: PackedLinear.from_linear(layer)(x) is layer(x) byte for byte (each output the same
sum in the documented order: a batch's bytes are its 2-D product's), on every CPU variant, thread
count and fusion setting; x @ panels with x shared by every panel runs A packed once (route
rowvec for one row, gemm for more: libtgrad/src/cpu/shared_a.c), and those paths give each
batch's own bytes. Bad input gets a typed error.
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import tgrad
import tgrad.nn as nn
from every_setting import assert_same_bytes_everywhere
from tgrad import Tensor, errors
from tgrad.nn.packed import pack_panels, unpack_panels


def _rand(rng: np.random.Generator, shape: tuple[int, ...], special: bool = False) -> np.ndarray:
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-6, 7, shape))).astype(np.float32)
    if special:  # infinities, NaN, signed zeros and subnormals among the values
        flat = x.reshape(-1)
        at = rng.integers(0, flat.size, max(1, flat.size // 40))
        flat[at] = rng.choice(np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-39, -1e-39], np.float32), at.size)
    return x.astype(ml_dtypes.bfloat16)


def _bits(t: Tensor) -> bytes:
    a = t.numpy()
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint16).tobytes()


def _layer(rng: np.random.Generator, out_f: int, in_f: int, bias: bool, special: bool = False) -> nn.Linear:
    w = Tensor.from_numpy(_rand(rng, (out_f, in_f), special))
    b = Tensor.from_numpy(_rand(rng, (out_f,))) if bias else False
    return nn.Linear(in_f, out_f, b, weight=w)


@pytest.mark.parametrize("in_f", [1, 3, 32, 33, 100, 1024])
@pytest.mark.parametrize("rows", [1, 2, 7, 17, 64])
def test_the_packed_layer_gives_the_linear_layers_bytes(in_f: int, rows: int) -> None:
    rng = np.random.default_rng(in_f * 100 + rows)
    for out_f, bias, special in [(32, False, False), (96, True, False), (64, False, True)]:
        layer = _layer(rng, out_f, in_f, bias, special)
        packed = nn.PackedLinear.from_linear(layer)
        x = Tensor.from_numpy(_rand(rng, (rows, in_f), special))
        assert _bits(packed(x)) == _bits(layer(x))
        assert _bits(packed.product(x, out_dtype=tgrad.float32)) == _bits(
            x.matmul(layer.weight.T, out_dtype=tgrad.float32))


def test_leading_axes_are_rows() -> None:
    rng = np.random.default_rng(1)
    layer = _layer(rng, 64, 48, True)
    packed = nn.PackedLinear.from_linear(layer)
    for shape in [(48,), (2, 3, 48), (1, 1, 48), (4, 1, 48)]:
        x = Tensor.from_numpy(_rand(rng, shape))
        got, want = packed(x), layer(x)
        assert got.shape == want.shape == (*shape[:-1], 64)
        assert _bits(got) == _bits(want)


def test_the_same_bytes_on_every_variant_thread_count_and_fusion_setting() -> None:
    rng = np.random.default_rng(2)
    packed = nn.PackedLinear.from_linear(_layer(rng, 512, 300, False, special=True))  # 16 panels: shared A
    one, many = (Tensor.from_numpy(_rand(rng, (r, 300), True)) for r in (1, 40))
    # fusion on and off: an epilogue fused into the shared-A product (one row and 40 rows, the
    # batched result itself) against its own pass
    assert_same_bytes_everywhere(lambda: [_bits(packed(one)), _bits((packed(many) * 2.0).relu()),
                                          _bits((packed(one) * 2.0).relu()),
                                          _bits(((many @ packed.panels) * 2.0).relu()),
                                          _bits(packed.product(one, out_dtype=tgrad.float32))])


@pytest.mark.parametrize("order", ["block32", "pairwise"])
@pytest.mark.parametrize("threads", [1, 2])
def test_shared_left_operand_batches_match_each_batchs_product(threads: int, order: str) -> None:
    """x [M, K] @ B [G, K, N] for panel widths other than 32 too: batch by batch, the same bytes,
    in both documented orders."""
    before, order_before = tgrad.num_threads(), tgrad.get_matmul_order()
    tgrad.set_num_threads(threads)
    tgrad.set_matmul_order(order)
    try:
        rng = np.random.default_rng(3)
        shapes = itertools.product([1, 33, 64, 520], [2, 5, 9], [1, 3, 20], [8, 32, 40, 300], [None, "float32"])
        for k, g, m, n, dt in shapes:
            b = _rand(rng, (g, k, n), special=True)
            x = Tensor.from_numpy(_rand(rng, (m, k), special=True))
            got = tgrad.matmul(x, Tensor.from_numpy(b), out_dtype=dt)
            want = [_bits(tgrad.matmul(x, Tensor.from_numpy(np.ascontiguousarray(b[i])), out_dtype=dt)) for i in range(g)]
            assert _bits(got) == b"".join(want), (k, g, m, n, dt)
    finally:
        tgrad.set_num_threads(before)
        tgrad.set_matmul_order(order_before)


def test_weight_unpacks_to_the_original_and_back_to_a_linear() -> None:
    rng = np.random.default_rng(4)
    layer = _layer(rng, 96, 40, True)
    packed = nn.PackedLinear.from_linear(layer)
    assert packed.panels.shape == (3, 40, 32)
    assert _bits(packed.weight) == _bits(layer.weight)
    assert _bits(unpack_panels(pack_panels(layer.weight))) == _bits(layer.weight)
    again = packed.to_linear()
    x = Tensor.from_numpy(_rand(rng, (5, 40)))
    assert _bits(again(x)) == _bits(layer(x))
    assert [name for name, _ in packed.named_parameters()] == ["panels", "bias"]


def test_the_panels_gradient_is_the_packed_weight_gradient() -> None:
    rng = np.random.default_rng(5)
    layer = _layer(rng, 64, 24, False)
    layer.weight.requires_grad_()
    packed = nn.PackedLinear.from_linear(layer)
    packed.panels.requires_grad_()
    x = Tensor.from_numpy(_rand(rng, (6, 24)))
    (layer(x).float() ** 2).sum().backward()
    (packed(x).float() ** 2).sum().backward()
    assert _bits(packed.panels.grad) == _bits(pack_panels(layer.weight.grad))


def test_bad_input_gets_a_typed_error() -> None:
    rng = np.random.default_rng(6)
    with pytest.raises(errors.ShapeMismatchError, match="multiple of 32"):
        nn.PackedLinear.from_linear(_layer(rng, 48, 16, False))
    with pytest.raises(errors.InvalidArgumentError):
        nn.PackedLinear.from_linear("not a layer")  # type: ignore[arg-type]
    packed = nn.PackedLinear.from_linear(_layer(rng, 32, 16, False))
    with pytest.raises(errors.ShapeMismatchError, match=r"expected \[\.\.\., 16\]"):
        packed(Tensor.from_numpy(_rand(rng, (2, 17))))
    with pytest.raises(errors.ShapeMismatchError):
        nn.PackedLinear(Tensor.from_numpy(_rand(rng, (2, 16, 16))))
    with pytest.raises(errors.ShapeMismatchError):
        nn.PackedLinear(Tensor.from_numpy(_rand(rng, (2, 16, 32))), Tensor.from_numpy(_rand(rng, (63,))))
    with pytest.raises(errors.ShapeMismatchError):
        pack_panels(Tensor.from_numpy(_rand(rng, (40, 8))))


def test_fused_layers_give_each_layers_bytes_side_by_side() -> None:
    rng = np.random.default_rng(7)
    for bias in (False, True):
        layers = [_layer(rng, out_f, 40, bias, special=True) for out_f in (64, 32, 96)]
        fused = nn.PackedLinear.fused(layers)
        assert fused.panels.shape == (6, 40, 32)
        for rows in (1, 9):
            x = Tensor.from_numpy(_rand(rng, (rows, 40), True))
            side_by_side = np.concatenate([layer(x).numpy() for layer in layers], 1)
            assert _bits(fused(x)) == side_by_side.view(np.uint16).tobytes()
            assert _bits(fused.product(x)) == _bits(tgrad.cat([x @ layer.weight.T for layer in layers], 1))


def test_fusing_refuses_layers_that_do_not_fit_together() -> None:
    rng = np.random.default_rng(8)
    with pytest.raises(errors.ShapeMismatchError, match="in_features"):
        nn.PackedLinear.fused([_layer(rng, 32, 8, False), _layer(rng, 32, 9, False)])
    with pytest.raises(errors.ShapeMismatchError, match="multiple of 32"):
        nn.PackedLinear.fused([_layer(rng, 32, 8, False), _layer(rng, 16, 8, False)])
    with pytest.raises(errors.InvalidArgumentError, match="bias"):
        nn.PackedLinear.fused([_layer(rng, 32, 8, True), _layer(rng, 32, 8, False)])
    with pytest.raises(errors.ShapeMismatchError):
        nn.PackedLinear.fused([])
