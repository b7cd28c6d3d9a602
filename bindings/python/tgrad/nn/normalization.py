"""RMSNorm and LayerNorm, as torch.nn's: the norm over the last axes (normalized_shape), with an
elementwise weight (ones unless loaded) and, for LayerNorm, a bias (zeros unless loaded)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import errors, safetensors
from ..tensor import Tensor, _as_int
from . import functional as F
from .module import Module, open_checkpoint, shape_text

__all__ = ["LayerNorm", "RMSNorm"]


def _normalized(shape: Any, user: str) -> tuple[int, ...]:
    extents = (shape,) if not isinstance(shape, (Sequence, np.ndarray)) else tuple(shape)
    out = tuple(_as_int(e, f"{user}: normalized_shape") for e in extents)
    if not out or any(e < 0 for e in out):
        raise errors.InvalidArgumentError(f"{user}: normalized_shape must be one or more extents >= 0, got {shape!r}")
    return out


def _filled(shape: tuple[int, ...], value: float) -> Tensor:
    """A default weight or bias: a leaf requiring a gradient, as torch's Parameter."""
    return Tensor.from_numpy(np.full(shape, value, np.float32)).requires_grad_()


def _affine(ckpt: safetensors.Checkpoint, prefix: str, names: tuple[str, ...], user: str) -> dict[str, Tensor]:
    """`<prefix>.<name>` of each name the checkpoint has (weight required), of one shape, read."""
    if not isinstance(prefix, str):
        raise errors.InvalidArgumentError(f"{user}: prefix must be a str, got {type(prefix).__name__}")
    full = {name: f"{prefix}.{name}" for name in names if f"{prefix}.{name}" in ckpt}
    if "weight" not in full:
        raise errors.TensorNotFoundError(f"{ckpt.path}: no tensor named {prefix + '.weight'!r}")
    shape = ckpt.schema[full["weight"]].shape
    for name, key in full.items():
        if ckpt.schema[key].shape != shape:
            raise errors.ShapeMismatchError(
                f"{ckpt.path}: tensor {key!r} is {shape_text(ckpt.schema[key].shape)}, expected "
                f"{shape_text(shape)} (the weight's)")
    loaded = ckpt.load(list(full.values()))
    return {name: loaded[key] for name, key in full.items()}


class _Norm(Module):
    normalized_shape: tuple[int, ...]
    elementwise_affine: bool
    weight: Tensor | None

    def _init_affine(self, normalized_shape: Any, elementwise_affine: bool, weight: Tensor | None) -> None:
        user = type(self).__name__
        self.normalized_shape = _normalized(normalized_shape, user)
        self.elementwise_affine = bool(elementwise_affine)
        if not elementwise_affine:
            if weight is not None:
                raise errors.InvalidArgumentError(f"{user}: weight= with elementwise_affine=False")
            self.register_parameter("weight", None)
            return
        self.weight = self._checked(_filled(self.normalized_shape, 1.0) if weight is None else weight, "weight")

    def _checked(self, tensor: Any, what: str) -> Tensor:
        user = type(self).__name__
        if not isinstance(tensor, Tensor):
            raise errors.InvalidArgumentError(f"{user}: {what} must be a tgrad.Tensor, got {type(tensor).__name__}")
        if tensor.shape != self.normalized_shape:
            raise errors.ShapeMismatchError(
                f"{user}: {what} is {shape_text(tensor.shape)}, expected {shape_text(self.normalized_shape)} "
                "(normalized_shape)")
        return tensor


class RMSNorm(_Norm):
    """x * weight / sqrt(mean(x^2) + eps) over the last len(normalized_shape) axes (F.rms_norm;
    eps None: torch's default, the dtype's machine epsilon)."""

    eps: float | None

    def __init__(self, normalized_shape: int | Sequence[int], eps: float | None = None,
                 elementwise_affine: bool = True, *, weight: Tensor | None = None) -> None:
        super().__init__()
        self.eps = eps
        self._init_affine(normalized_shape, elementwise_affine, weight)

    @classmethod
    def from_checkpoint(cls, checkpoint: safetensors.Checkpoint | str | os.PathLike[str], prefix: str,
                        eps: float | None = None) -> RMSNorm:
        """The norm of `<prefix>.weight` in a safetensors checkpoint (its shape is normalized_shape)."""
        ckpt = open_checkpoint(checkpoint, "RMSNorm.from_checkpoint")
        weight = _affine(ckpt, prefix, ("weight",), "RMSNorm.from_checkpoint")["weight"]
        return cls(weight.shape, eps=eps, weight=weight)

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class LayerNorm(_Norm):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last len(normalized_shape) axes
    (F.layer_norm)."""

    eps: float
    bias: Tensor | None

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool | Tensor = True, *, weight: Tensor | None = None) -> None:
        super().__init__()
        self.eps = eps
        self._init_affine(normalized_shape, elementwise_affine, weight)
        if not elementwise_affine or bias is False:
            if isinstance(bias, Tensor):
                raise errors.InvalidArgumentError("LayerNorm: a bias tensor with elementwise_affine=False")
            self.register_parameter("bias", None)
        else:
            self.bias = self._checked(_filled(self.normalized_shape, 0.0) if bias is True else bias, "bias")

    @classmethod
    def from_checkpoint(cls, checkpoint: safetensors.Checkpoint | str | os.PathLike[str], prefix: str,
                        eps: float = 1e-5) -> LayerNorm:
        """The norm of `<prefix>.weight` and `<prefix>.bias` (if present) in a safetensors checkpoint."""
        ckpt = open_checkpoint(checkpoint, "LayerNorm.from_checkpoint")
        found = _affine(ckpt, prefix, ("weight", "bias"), "LayerNorm.from_checkpoint")
        return cls(found["weight"].shape, eps=eps, bias=found.get("bias", False), weight=found["weight"])

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")
