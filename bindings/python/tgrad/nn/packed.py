"""PackedLinear: a Linear whose weight is stored in 32-column panels, for inference.

    packed = tgrad.nn.PackedLinear.from_linear(layer)   # one copy of the weight, then drop layer
    y = packed(x)                                        # the bytes layer(x) gives

``x @ weight.T`` reads the weight's rows across the K axis for every output column; a one-row
product (a decode step) then moves 32 rows of W through registers at a time. The panels hold
each group of 32 output features as a row-major ``[in_features, 32]`` matrix, the groups one
after another: ``panels[g, k, c] = weight[32 g + c, k]``, a ``[out/32, in, 32]`` bf16 tensor. The
product is then the batched product ``x @ panels`` (x shared by every panel), which each thread
streams as one contiguous run, with no transposes (docs/kernels.md, "Packed weights").

Bytes: each output is the same sum of the same products in the documented order as
``x @ weight.T``: a batch's bytes are its 2-D product's (docs/numerics.md), and panel g's column
c is weight's row 32 g + c. So ``PackedLinear.from_linear(layer)(x)`` equals ``layer(x)`` byte
for byte, on every route and device. The gradient of the panels is the packing of weight's
gradient; the input's gradient is the batched product's (a sum over the panels), defined but not
the bytes nn.Linear's gives.
"""

from __future__ import annotations

import math
from typing import Any

from .. import errors
from ..tensor import Tensor
from .linear import Linear
from .module import Module

__all__ = ["PANEL", "PackedLinear", "pack_panels", "unpack_panels"]

#: Output features per panel.
PANEL = 32


def _shape_text(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def pack_panels(weight: Tensor) -> Tensor:
    """weight [out, in] (out a multiple of 32) as panels [out/32, in, 32]: a realized copy, not
    recorded for gradients (the panels are a new tensor, not a function of weight)."""
    if not isinstance(weight, Tensor):
        raise errors.InvalidArgumentError(f"pack_panels: weight must be a tgrad.Tensor, got {type(weight).__name__}")
    if weight.ndim != 2 or weight.shape[0] % PANEL:
        raise errors.ShapeMismatchError(
            f"pack_panels: weight is {_shape_text(weight.shape)}, expected [out_features, in_features] with "
            f"out_features a multiple of {PANEL}")
    return _copied([_panel_view(weight)])


def _copied(parts: list[Tensor]) -> Tensor:
    """parts concatenated along axis 0 into a new realized tensor, not recorded for gradients:
    one copy (concat's route, which reads each part's view in place). detach() would copy each
    part once more first."""
    from ..autograd import no_grad
    from ..shape_ops import cat

    with no_grad():
        out: Tensor = cat(parts, 0).realize()
    return out


def _panel_view(weight: Tensor) -> Tensor:
    """weight [out, in] seen as [out/32, in, 32] (a view: panels[g, k, c] = weight[32 g + c, k])."""
    out_f, in_f = weight.shape
    view: Tensor = weight.reshape(out_f // PANEL, PANEL, in_f).permute(0, 2, 1)
    return view


def _check_panels(panels: Any, user: str) -> None:
    """ShapeMismatchError unless panels is a [groups, in_features, 32] Tensor."""
    if not isinstance(panels, Tensor) or panels.ndim != 3 or panels.shape[2] != PANEL:
        shape = _shape_text(panels.shape) if isinstance(panels, Tensor) else type(panels).__name__
        raise errors.ShapeMismatchError(f"{user}: panels is {shape}, expected [groups, in_features, {PANEL}]")


def unpack_panels(panels: Tensor) -> Tensor:
    """panels [out/32, in, 32] as the weight [out, in] (a lazy copy)."""
    _check_panels(panels, "unpack_panels")
    groups, in_f, _ = panels.shape
    weight: Tensor = panels.permute(0, 2, 1).reshape(groups * PANEL, in_f)
    return weight


class PackedLinear(Module):
    """y = x @ weight.T + bias with the weight held as ``panels`` [out/32, in, 32] (its only
    copy) and ``bias`` [out] (or None); nn.Linear's bytes (the product rounded to bf16, then the
    sum). ``weight`` gives the [out, in] matrix back (a copy, made when read)."""

    in_features: int
    out_features: int
    panels: Tensor
    bias: Tensor | None

    def __init__(self, panels: Tensor, bias: Tensor | None = None) -> None:
        super().__init__()
        _check_panels(panels, "PackedLinear")
        self.in_features, self.out_features = panels.shape[1], panels.shape[0] * PANEL
        if bias is not None and (not isinstance(bias, Tensor) or bias.shape != (self.out_features,)):
            shape = _shape_text(bias.shape) if isinstance(bias, Tensor) else type(bias).__name__
            raise errors.ShapeMismatchError(f"PackedLinear: bias is {shape}, expected [{self.out_features}]")
        if bias is not None and bias.device != panels.device:
            raise errors.DeviceMismatchError(f"PackedLinear: panels on {panels.device}, bias on {bias.device}")
        self.panels = panels
        self.register_parameter("bias", bias)

    @classmethod
    def packs(cls, layer: Any) -> bool:
        """Whether from_linear takes this layer: an nn.Linear whose out_features is a multiple of 32."""
        return isinstance(layer, Linear) and layer.out_features % PANEL == 0 and layer.out_features > 0

    @classmethod
    def from_linear(cls, layer: Linear) -> PackedLinear:
        """The packed layer of an nn.Linear (its weight copied into panels, its bias shared).
        out_features not a multiple of 32 raises ShapeMismatchError."""
        if not isinstance(layer, Linear):
            raise errors.InvalidArgumentError(
                f"PackedLinear.from_linear: expected a tgrad.nn.Linear, got {type(layer).__name__}")
        if not cls.packs(layer):
            raise errors.ShapeMismatchError(
                f"PackedLinear.from_linear: {layer!r} has out_features {layer.out_features}, not a positive "
                f"multiple of {PANEL}")
        return cls(pack_panels(layer.weight), layer.bias)

    @classmethod
    def fused(cls, layers: list[Linear]) -> PackedLinear:
        """One packed layer computing several nn.Linear of the same input at once: their weights
        stacked along out_features ([sum of outs, in], each out a multiple of 32), their biases
        likewise (all or none). Its output's columns are the layers' outputs side by side, each
        the bytes its layer gives (every output is its own sum: one launch instead of several)."""
        if not layers or not all(cls.packs(layer) for layer in layers):
            raise errors.ShapeMismatchError(
                f"PackedLinear.fused: every layer must be an nn.Linear with out_features a positive multiple of {PANEL}")
        if len({layer.in_features for layer in layers}) != 1:
            raise errors.ShapeMismatchError("PackedLinear.fused: the layers' in_features differ")
        biases = [layer.bias for layer in layers]
        if any(b is None for b in biases) and not all(b is None for b in biases):
            raise errors.InvalidArgumentError("PackedLinear.fused: some layers have a bias and some do not")
        # each weight's panels read through a view into the one result (the concat route): no
        # stacked [out, in] copy in between
        panels = _copied([_panel_view(layer.weight) for layer in layers])
        bias = None if biases[0] is None else _copied([b for b in biases if b is not None])
        return cls(panels, bias)

    def to_linear(self) -> Linear:
        """The nn.Linear of the same weight (unpacked: a copy) and bias."""
        return Linear(self.in_features, self.out_features, self.bias if self.bias is not None else False,
                      weight=self.weight.realize())

    @property
    def weight(self) -> Tensor:
        """The [out_features, in_features] weight, unpacked from the panels (a lazy copy)."""
        return unpack_panels(self.panels)

    # ---- running --------------------------------------------------------------------------------
    def product(self, x: Tensor, out_dtype: Any = None) -> Tensor:
        """x @ weight.T for x [..., in_features] -> [..., out_features], without the bias: rounded
        to bf16, or with out_dtype=tgrad.float32 the fp32 accumulators (unrounded)."""
        if not isinstance(x, Tensor):
            raise errors.InvalidArgumentError(f"{self!r}: input must be a tgrad.Tensor, got {type(x).__name__}")
        shape = x.shape
        if not shape or shape[-1] != self.in_features:
            raise errors.ShapeMismatchError(
                f"{self!r}: input is {_shape_text(shape)}, expected [..., {self.in_features}]")
        rows = math.prod(shape[:-1])
        flat = x if len(shape) == 2 else x.reshape(rows, self.in_features)
        y = flat.matmul(self.panels, out_dtype=out_dtype)  # [groups, rows, 32]: flat shared by every panel
        y = y.reshape(rows, self.out_features) if rows == 1 else y.permute(1, 0, 2).reshape(rows, self.out_features)
        return y if len(shape) == 2 else y.reshape(*shape[:-1], self.out_features)

    def forward(self, x: Tensor) -> Tensor:
        """nn.Linear's forward: the product rounded to bf16, then + bias."""
        y = self.product(x)
        return y if self.bias is None else y + self.bias

    def __call__(self, x: Tensor) -> Tensor:
        return self.forward(x)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"panels={PANEL}")
