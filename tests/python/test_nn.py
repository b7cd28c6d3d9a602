"""tgrad.nn.Linear: weight [out, in] and bias [out] as torch holds them, y = x @ weight.T + bias
with each op's value rounded to bf16 (the product, then the sum), made from given tensors or a
safetensors checkpoint, with shapes checked before anything is read or computed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tgrad
from tgrad.conformance import oracle
from tgrad import Tensor, errors
from tgrad.nn import Linear

PREFIX = "model.layers.0.mlp.up_proj"


def bits(t: Tensor) -> np.ndarray:
    return t.numpy().view(np.uint16)


def weights(rng: np.random.Generator, in_f: int = 7, out_f: int = 3) -> tuple[Tensor, Tensor]:
    w = Tensor.from_numpy(rng.standard_normal((out_f, in_f)).astype(np.float32))
    b = Tensor.from_numpy(rng.standard_normal(out_f).astype(np.float32))
    return w, b


def reference(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """The documented order in numpy: the oracle's product rounded to bf16, then the sum of two
    bf16 values, rounded once (exact in float64)."""
    product = oracle.matmul_bits(x, w.T)
    if b is None:
        return product
    total = oracle.bf16_bits_to_f32(product).astype(np.float64) + oracle.bf16_bits_to_f32(b).astype(np.float64)
    return np.where(np.isnan(total), np.uint16(oracle.CANONICAL_NAN_BITS), oracle.f64_to_bf16_bits(total))


def test_linear_is_the_product_with_the_transposed_weight_then_the_bias(rng: np.random.Generator) -> None:
    w, b = weights(rng)
    x = Tensor.from_numpy(rng.standard_normal((5, 7)).astype(np.float32))
    layer = Linear.from_tensors(w, b)
    assert (layer.in_features, layer.out_features) == (7, 3)
    assert layer.weight is w and layer.bias is b
    y = layer(x)
    assert y.shape == (5, 3)
    assert np.array_equal(bits(y), reference(bits(x), bits(w), bits(b)))
    unfused = ((x @ w.T).realize() + b).realize()
    assert np.array_equal(bits(layer.forward(x)), bits(unfused))
    assert repr(layer) == "Linear(in_features=7, out_features=3, bias=True)"


def test_linear_without_bias(rng: np.random.Generator) -> None:
    w, _ = weights(rng)
    x = Tensor.from_numpy(rng.standard_normal((4, 7)).astype(np.float32))
    layer = Linear.from_tensors(w)
    assert layer.bias is None
    assert np.array_equal(bits(layer(x)), reference(bits(x), bits(w), None))
    assert np.array_equal(bits(Linear(7, 3, bias=False, weight=w)(x)), bits(layer(x)))


def test_leading_axes_are_rows(rng: np.random.Generator) -> None:
    w, b = weights(rng)
    layer = Linear(7, 3, weight=w, bias=b)
    x_bits = bits(Tensor.from_numpy(rng.standard_normal((2, 4, 7)).astype(np.float32)))
    want = reference(x_bits.reshape(8, 7), bits(w), bits(b))
    y = layer(Tensor.from_bf16_bits(x_bits))
    assert y.shape == (2, 4, 3)
    assert np.array_equal(bits(y), want.reshape(2, 4, 3))
    one = layer(Tensor.from_bf16_bits(x_bits[1, 2]))
    assert one.shape == (3,) and np.array_equal(bits(one), want[6])
    empty = layer(Tensor.from_bf16_bits(x_bits[:0]))
    assert empty.shape == (0, 4, 3)


def test_a_layer_needs_its_weights(rng: np.random.Generator) -> None:
    # Linear(7, 3) without weights: drawn from tgrad.random, or refused in a build without it
    # (test_nn_functional.py).
    w, b = weights(rng)
    with pytest.raises(errors.InvalidArgumentError, match="bias=True needs the bias tensor"):
        Linear(7, 3, weight=w)
    for bad in ((-1, 3), (True, 3), (7.0, 3)):
        with pytest.raises(errors.InvalidArgumentError):
            Linear(*bad, weight=w, bias=b)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgumentError):
        Linear(7, 3, weight=bits(w), bias=b)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgumentError):
        Linear.from_tensors(bits(w))  # type: ignore[arg-type]


def test_weights_of_the_wrong_shape_are_refused(rng: np.random.Generator) -> None:
    w, b = weights(rng)
    with pytest.raises(errors.ShapeMismatchError, match=r"weight is \[3, 7\], expected \[7, 3\]"):
        Linear(3, 7, weight=w, bias=False)
    with pytest.raises(errors.ShapeMismatchError, match=r"bias is \[3\], expected \[4\]"):
        Linear(7, 4, weight=Tensor.from_numpy(np.zeros((4, 7), np.float32)), bias=b)
    with pytest.raises(errors.ShapeMismatchError, match="2-D"):
        Linear.from_tensors(b)
    with pytest.raises(errors.ShapeMismatchError):
        Linear.from_tensors(w, w)


def test_inputs_of_another_width_are_refused(rng: np.random.Generator) -> None:
    layer = Linear.from_tensors(*weights(rng))
    for shape in ((5, 6), (7, 5), (), (2, 3, 8)):
        with pytest.raises(errors.ShapeMismatchError, match=r"expected \[\.\.\., 7\]"):
            layer(Tensor.from_numpy(np.zeros(shape, np.float32)))
    with pytest.raises(errors.InvalidArgumentError):
        layer(np.zeros((5, 7), np.float32))  # type: ignore[arg-type]


# ---- checkpoints ----------------------------------------------------------------------------------
def write(path: Path, tensors: dict[str, Tensor]) -> Path:
    pytest.importorskip("safetensors")
    tgrad.safetensors.save(path, tensors)
    return path


def test_from_checkpoint_loads_prefix_weight_and_bias(tmp_path: Path, rng: np.random.Generator) -> None:
    w, b = weights(rng, in_f=6, out_f=5)
    path = write(tmp_path / "model.safetensors", {f"{PREFIX}.weight": w, f"{PREFIX}.bias": b,
                                                  "model.norm.weight": b})
    x = Tensor.from_numpy(rng.standard_normal((4, 6)).astype(np.float32))
    want = bits(Linear.from_tensors(w, b)(x))
    ckpt = tgrad.safetensors.open(path)
    for layer in (Linear.from_checkpoint(ckpt, PREFIX), Linear.from_checkpoint(path, PREFIX),
                  Linear.from_checkpoint(str(path), PREFIX, in_features=6, out_features=5, bias=True)):
        assert (layer.in_features, layer.out_features) == (6, 5) and layer.bias is not None
        assert np.array_equal(bits(layer(x)), want)
    plain = Linear.from_checkpoint(ckpt, PREFIX, bias=False)
    assert plain.bias is None and np.array_equal(bits(plain(x)), bits(x @ w.T))


def test_from_checkpoint_checks_the_schema_before_reading(tmp_path: Path, rng: np.random.Generator) -> None:
    w, b = weights(rng, in_f=6, out_f=5)
    path = write(tmp_path / "model.safetensors", {
        f"{PREFIX}.weight": w, f"{PREFIX}.bias": b, "no_bias.weight": w,
        "odd_bias.weight": w, "odd_bias.bias": w[0], "flat.weight": b})
    ckpt = tgrad.safetensors.open(path)
    # Change the file under the open checkpoint: reading any tensor of it is now refused, so a
    # refusal other than FileMalformedError below was decided from the schema alone.
    write(path, {f"{PREFIX}.weight": w, f"{PREFIX}.bias": b})
    with pytest.raises(errors.FileMalformedError, match="changed since it was opened"):
        Linear.from_checkpoint(ckpt, PREFIX)
    refusals = [
        (dict(prefix=PREFIX, in_features=7), errors.ShapeMismatchError, r"is \[5, 6\], expected .* \[5, 7\]"),
        (dict(prefix=PREFIX, out_features=4), errors.ShapeMismatchError, r"\[4, 6\]"),
        (dict(prefix="odd_bias"), errors.ShapeMismatchError, r"'odd_bias.bias' is \[6\], expected \[5\]"),
        (dict(prefix="flat"), errors.ShapeMismatchError, "2-D"),
        (dict(prefix="nope"), errors.TensorNotFoundError, "nope.weight"),
        (dict(prefix="no_bias", bias=True), errors.TensorNotFoundError, "no_bias.bias"),
        (dict(prefix=3), errors.InvalidArgumentError, "prefix"),
        (dict(prefix=PREFIX, bias="yes"), errors.InvalidArgumentError, "bias"),
        (dict(prefix=PREFIX, in_features=-6), errors.InvalidArgumentError, "in_features"),
    ]
    for kwargs, error, text in refusals:
        with pytest.raises(error, match=text):
            Linear.from_checkpoint(ckpt, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgumentError):
        Linear.from_checkpoint(42, PREFIX)  # type: ignore[arg-type]
    with pytest.raises(errors.FileMissingError):
        Linear.from_checkpoint(tmp_path / "absent.safetensors", PREFIX)


# ---- peers and tracing ----------------------------------------------------------------------------
@pytest.mark.interop
def test_linear_holds_its_weights_as_torch_does(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    # Small integers: every product and sum is exact, so any summation order gives these bytes
    # and the comparison is of the layout alone (weight [out, in], bias [out]).
    x, w, b = (rng.integers(-2, 3, size=s).astype(np.float32) for s in ((9, 16), (5, 16), (5,)))
    layer = Linear.from_tensors(Tensor.from_numpy(w), Tensor.from_numpy(b))
    want = torch.nn.functional.linear(*(torch.from_numpy(a).to(torch.bfloat16) for a in (x, w, b)))
    assert np.array_equal(layer(Tensor.from_numpy(x)).numpy(np.float32), want.float().numpy())


def test_a_traced_linear_records_transpose_matmul_add(rng: np.random.Generator) -> None:
    layer = Linear.from_tensors(*weights(rng))
    tr = tgrad.trace(layer, Tensor.from_numpy(np.ones((2, 7), np.float32)))
    assert [op.kind for op in tr] == ["input", "input", "transpose", "matmul", "input", "add"]
    assert tr.ops[3].inputs == (0, 2) and tr.ops[5].inputs == (3, 4)
    assert tr.ops[2].buffer_id == tr.ops[1].buffer_id  # weight.T is a view, not a copy
