"""Products the checkers must refuse; each marked line names the error both checkers give."""

from typing import Literal

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
