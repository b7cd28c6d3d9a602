"""The elementwise derivative ops, torch's *_backward functions as single correctly rounded ops.

    gx = tgrad.gelu_backward(x, g)      # g * gelu'(x), one rounding of the exact value
    gy = tgrad.sigmoid_backward(y, g)   # g * y * (1 - y), y the forward output

Each is a registry op (TGRAD_OP_LIST codes 24-31) run through tgrad.ops like the others: lazy,
fused, numpy broadcasting, bf16 or float32 (torch's promotion), every element the correctly
rounded value of the exact result (docs/numerics.md "Derivative ops"). The first operand is the
forward op's input x (gelu, gelu_tanh, silu, relu) or output y (sigmoid, tanh, rsqrt, sqrt), the
second the cotangent g, as torch's gelu_backward(grad, self) has them the other way round:

- gelu_backward(x, g) = g gelu'(x), gelu the exact erf form;
- gelu_tanh_backward(x, g) = g gelu_tanh'(x), torch's approximate="tanh" with exact constants;
- silu_backward(x, g) = g sigmoid(x) (1 + x (1 - sigmoid(x)));
- sigmoid_backward(y, g) = g y (1 - y);
- tanh_backward(y, g) = g (1 - y^2);
- relu_backward(x, g) = g where x > 0, else +0 (torch's threshold_backward; a NaN in x or g gives
  NaN, where torch passes g for a NaN x and gives 0 for a NaN g with x <= 0);
- rsqrt_backward(y, g) = -g y^3 / 2;
- sqrt_backward(y, g) = g / (2 y).

The same ops by name through the generic path: ``tgrad.ops.apply("gelu_backward", x, g)``.
"""

from __future__ import annotations

from .ops import Operand, _binary
from .tensor import Tensor

__all__ = ["gelu_backward", "gelu_tanh_backward", "relu_backward", "rsqrt_backward", "sigmoid_backward",
           "silu_backward", "sqrt_backward", "tanh_backward"]


def gelu_backward(x: Operand, grad: Operand) -> Tensor:
    """grad * gelu'(x), gelu'(x) = Phi(x) + x phi(x) (gelu'(+inf) = 1, gelu'(-inf) = -0)."""
    return _binary("gelu_backward", x, grad)


def gelu_tanh_backward(x: Operand, grad: Operand) -> Tensor:
    """grad * d/dx [0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))], constants exact."""
    return _binary("gelu_tanh_backward", x, grad)


def silu_backward(x: Operand, grad: Operand) -> Tensor:
    """grad * sigmoid(x) (1 + x (1 - sigmoid(x)))."""
    return _binary("silu_backward", x, grad)


def sigmoid_backward(y: Operand, grad: Operand) -> Tensor:
    """grad * y * (1 - y), y = sigmoid(x) the forward output."""
    return _binary("sigmoid_backward", y, grad)


def tanh_backward(y: Operand, grad: Operand) -> Tensor:
    """grad * (1 - y^2), y = tanh(x) the forward output."""
    return _binary("tanh_backward", y, grad)


def relu_backward(x: Operand, grad: Operand) -> Tensor:
    """grad where x > 0, else +0; NaN in either gives NaN."""
    return _binary("relu_backward", x, grad)


def rsqrt_backward(y: Operand, grad: Operand) -> Tensor:
    """-grad * y^3 / 2, y = rsqrt(x) the forward output."""
    return _binary("rsqrt_backward", y, grad)


def sqrt_backward(y: Operand, grad: Operand) -> Tensor:
    """grad / (2 y), y = sqrt(x) the forward output."""
    return _binary("sqrt_backward", y, grad)
