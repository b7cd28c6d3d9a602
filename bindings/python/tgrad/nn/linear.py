"""Linear: y = x @ weight.T + bias, holding its weights as torch.nn.Linear does.

    up = tgrad.nn.Linear.from_checkpoint(ckpt, "model.layers.0.mlp.up_proj")
    y = up(x)                        # F.linear(x, up.weight, up.bias), lazily

A layer is made from the weights it runs: `Linear.from_tensors(weight, bias)`,
`Linear.from_checkpoint(checkpoint, prefix)`, or `Linear(in_features, out_features, weight=...,
bias=...)`. `Linear(in_features, out_features)` without weights draws them as torch does
(kaiming_uniform with a=sqrt(5): U(-1/sqrt(in), 1/sqrt(in)) for weight and bias) from tgrad's
generator (tgrad.random); a build without tgrad.random refuses it.
"""

from __future__ import annotations

import math
import os
from typing import Any

from .. import errors, safetensors
from ..tensor import Tensor, _as_int
from . import functional as F
from ._borrow import borrowed
from .module import Module, open_checkpoint

__all__ = ["Linear"]


def _features(value: Any, what: str) -> int:
    count = _as_int(value, f"Linear: {what}")
    if count < 0:
        raise errors.InvalidArgumentError(f"Linear: {what} must be >= 0, got {count}")
    return count


def _shape_text(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


class Linear(Module):
    """y = x @ weight.T + bias, with ``weight`` [out_features, in_features] and ``bias``
    [out_features] (or None), as torch.nn.Linear holds them.

    The product reads ``weight.T`` as a zero-copy view, and the scheduler fuses the bias add into
    the matmul. Values are per op, as in eager torch: the product is rounded to bf16, then the
    sum (torch's F.linear adds the bias before rounding; docs/numerics.md). x may have any number
    of leading axes: [..., in_features] -> [..., out_features].
    """

    in_features: int
    out_features: int
    weight: Tensor
    bias: Tensor | None

    def __init__(self, in_features: int, out_features: int, bias: bool | Tensor | None = True, *,
                 weight: Tensor | None = None) -> None:
        """A layer over the given weights: ``weight`` [out, in] and ``bias`` a Tensor [out], or
        False (or None) for none. Without ``weight``, weight (and, for bias=True, the bias) are
        drawn as torch initializes them, from tgrad.random; in a build without it that raises
        InvalidArgumentError, as does bias=True without its tensor beside a given weight. Shapes
        other than these raise ShapeMismatchError."""
        super().__init__()
        self.in_features = _features(in_features, "in_features")
        self.out_features = _features(out_features, "out_features")
        shape = (self.out_features, self.in_features)
        if weight is None:  # drawn here: leaves requiring a gradient, as torch's Parameter
            weight = _torch_uniform(shape, self.in_features, "Linear").requires_grad_()
            if bias is True:
                bias = _torch_uniform((self.out_features,), self.in_features, "Linear").requires_grad_()
        if bias is True:
            raise errors.InvalidArgumentError(
                f"Linear({self.in_features}, {self.out_features}): bias=True needs the bias tensor "
                f"[{self.out_features}] (bias=<Tensor>), or bias=False for none")
        self.weight = self._checked(weight, "weight", shape)
        self.register_parameter(
            "bias", None if bias is False or bias is None else self._checked(bias, "bias", (self.out_features,)))
        if self.bias is not None and self.bias.device != self.weight.device:
            raise errors.DeviceMismatchError(
                f"{self!r}: weight on {self.weight.device}, bias on {self.bias.device}")

    def _checked(self, tensor: Any, what: str, shape: tuple[int, ...]) -> Tensor:
        if not isinstance(tensor, Tensor):
            raise errors.InvalidArgumentError(
                f"Linear: {what} must be a tgrad.Tensor, got {type(tensor).__name__}")
        if tensor.shape != shape:
            raise errors.ShapeMismatchError(
                f"Linear({self.in_features}, {self.out_features}): {what} is "
                f"{_shape_text(tensor.shape)}, expected {_shape_text(shape)}")
        return tensor

    # ---- construction ---------------------------------------------------------------------------
    @classmethod
    def from_tensors(cls, weight: Tensor, bias: Tensor | None = None) -> Linear:
        """The layer of `weight` [out, in] and `bias` [out] (None: no bias); the features are
        weight's shape. A weight that is not 2-D or a bias of another extent raises
        ShapeMismatchError."""
        if not isinstance(weight, Tensor):
            raise errors.InvalidArgumentError(
                f"Linear.from_tensors: weight must be a tgrad.Tensor, got {type(weight).__name__}")
        if weight.ndim != 2:
            raise errors.ShapeMismatchError(
                f"Linear.from_tensors: weight is {_shape_text(weight.shape)}, expected 2-D "
                "[out_features, in_features]")
        out_features, in_features = weight.shape
        return cls(in_features, out_features, bias, weight=weight)

    @classmethod
    def from_checkpoint(cls, checkpoint: safetensors.Checkpoint | str | os.PathLike[str], prefix: str, *,
                        in_features: int | None = None, out_features: int | None = None,
                        bias: bool | None = None) -> Linear:
        """The layer of `<prefix>.weight` and `<prefix>.bias` in a safetensors checkpoint (an
        opened tgrad.safetensors.Checkpoint, or a path to open). bias: None takes the bias when
        the checkpoint has one, True requires it, False ignores it. The shapes are checked
        against the schema (and the given features) before any tensor is read: a missing tensor
        raises TensorNotFoundError, a wrong shape ShapeMismatchError."""
        ckpt = open_checkpoint(checkpoint, "Linear.from_checkpoint")
        if not isinstance(prefix, str):
            raise errors.InvalidArgumentError(
                f"Linear.from_checkpoint: prefix must be a str, got {type(prefix).__name__}")
        if bias is not None and not isinstance(bias, bool):
            raise errors.InvalidArgumentError(
                f"Linear.from_checkpoint: bias must be None, True or False, got {bias!r}")
        names = _checkpoint_names(ckpt, prefix, bias)
        out_f, in_f = _weight_shape(ckpt, names[0], in_features, out_features)
        if len(names) == 2 and ckpt.schema[names[1]].shape != (out_f,):
            raise errors.ShapeMismatchError(
                f"{ckpt.path}: tensor {names[1]!r} is {_shape_text(ckpt.schema[names[1]].shape)}, "
                f"expected [{out_f}] (the weight's out_features)")
        loaded = ckpt.load(names)
        return cls(in_f, out_f, loaded[names[1]] if len(names) == 2 else False, weight=loaded[names[0]])

    # ---- running --------------------------------------------------------------------------------
    def forward(self, x: Tensor) -> Tensor:
        """F.linear(x, weight, bias): x @ weight.T + bias for x [..., in_features], lazily;
        another last extent raises ShapeMismatchError."""
        if not isinstance(x, Tensor):
            raise errors.InvalidArgumentError(f"{self!r}: input must be a tgrad.Tensor, got {type(x).__name__}")
        return F.linear(x, self.weight, self.bias)

    def __call__(self, x: Tensor) -> Tensor:
        return self.forward(x)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def _torch_uniform(shape: tuple[int, ...], fan_in: int, user: str) -> Tensor:
    """U(-1/sqrt(fan_in), 1/sqrt(fan_in)) of `shape` from tgrad's generator: torch's
    kaiming_uniform_(a=sqrt(5)) bound for a weight, and its bias bound (0 when fan_in is 0)."""
    uniform = borrowed("random", "uniform_")
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    return uniform(shape, -bound, bound)  # type: ignore[no-any-return]


def _checkpoint_names(ckpt: safetensors.Checkpoint, prefix: str, bias: bool | None) -> list[str]:
    """[weight name] or [weight name, bias name], each present in the checkpoint."""
    weight, bias_name = f"{prefix}.weight", f"{prefix}.bias"
    if weight not in ckpt:
        raise errors.TensorNotFoundError(f"{ckpt.path}: no tensor named {weight!r}")
    if bias is True and bias_name not in ckpt:
        raise errors.TensorNotFoundError(f"{ckpt.path}: no tensor named {bias_name!r} (bias=True)")
    return [weight, bias_name] if bias is not False and bias_name in ckpt else [weight]


def _weight_shape(ckpt: safetensors.Checkpoint, name: str, in_features: int | None,
                  out_features: int | None) -> tuple[int, int]:
    """(out, in) of a checkpoint's weight as its schema says, checked against the features given."""
    shape = ckpt.schema[name].shape
    if len(shape) != 2:
        raise errors.ShapeMismatchError(
            f"{ckpt.path}: tensor {name!r} is {_shape_text(shape)}, expected 2-D [out_features, in_features]")
    want = (shape[0] if out_features is None else _features(out_features, "out_features"),
            shape[1] if in_features is None else _features(in_features, "in_features"))
    if shape != want:
        raise errors.ShapeMismatchError(
            f"{ckpt.path}: tensor {name!r} is {_shape_text(shape)}, expected "
            f"[out_features, in_features] = {_shape_text(want)}")
    return want
