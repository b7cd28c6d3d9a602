"""Products the checkers must refuse; each marked line names the error both checkers give."""

from typing import Literal

import tgrad
from tgrad import Tensor

Batch = Literal[32]
Model = Literal[768]
Hidden = Literal[512]


def forgot_the_transpose(x: Tensor[Batch, Model], w: Tensor[Hidden, Model]) -> Tensor:
    return x @ w  # expect-error: mypy[operator] pyright[reportOperatorIssue]


# mypy infers the product from the declared result, so it reports the operand (`w.T` would have
# to be Tensor[768, 768]); pyright reports the result.
def wrong_result(x: Tensor[Batch, Model], w: Tensor[Hidden, Model]) -> Tensor[Batch, Model]:
    return x @ w.T  # expect-error: mypy[arg-type] pyright[reportReturnType]


def wrong_order(x: Tensor[Batch, Model], w: Tensor[Hidden, Model]) -> Tensor:
    return w.T @ x  # expect-error: mypy[operator] pyright[reportOperatorIssue]


def three_axes(x: Tensor[Batch, Batch, Model], w: Tensor[Model, Hidden]) -> Tensor:
    return x @ w  # expect-error: mypy[misc,operator] pyright[reportOperatorIssue]


# mypy cannot solve the function's type variables from operands that disagree [misc]; the method,
# its self bound first, reports the argument.
def forgot_the_transpose_in_float32(x: Tensor[Batch, Model], w: Tensor[Hidden, Model]) -> Tensor:
    return tgrad.matmul(x, w, out_dtype=tgrad.float32)  # expect-error: mypy[misc] pyright[reportArgumentType]


def forgot_the_transpose_in_the_method(x: Tensor[Batch, Model], w: Tensor[Hidden, Model]) -> Tensor:
    return x.matmul(w, out_dtype=tgrad.float32)  # expect-error: mypy[arg-type] pyright[reportArgumentType]
