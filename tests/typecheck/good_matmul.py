"""Products whose contracted extents agree are accepted, typed with the outer extents."""

from typing import Literal, TypeVar, assert_type

import tgrad
from tgrad import Tensor

M = TypeVar("M", bound=int)
N = TypeVar("N", bound=int)
K = TypeVar("K", bound=int)

Batch = Literal[32]
Model = Literal[768]
Hidden = Literal[512]


def project(x: Tensor[Batch, Model], w: Tensor[Hidden, Model]) -> Tensor[Batch, Hidden]:
    assert_type(w.T, Tensor[Model, Hidden])
    assert_type(w.mT, Tensor[Model, Hidden])
    y = x @ w.T
    assert_type(y, Tensor[Batch, Hidden])
    return y


def chain(x: Tensor[Batch, Model], up: Tensor[Model, Hidden], down: Tensor[Hidden, Model]) -> Tensor[Batch, Model]:
    return x @ up @ down


def any_linear(x: Tensor[M, K], w: Tensor[N, K]) -> Tensor[M, N]:
    """Type variables: any extents, as long as K is the same on both sides."""
    return x @ w.T


def gram(x: Tensor[M, K]) -> Tensor[M, M]:
    return x @ x.T


def use(x: Tensor[Batch, Model], w: Tensor[Hidden, Model]) -> None:
    assert_type(any_linear(x, w), Tensor[Batch, Hidden])
    assert_type(gram(x), Tensor[Batch, Batch])
    assert_type(x.T.T, Tensor[Batch, Model])


def accumulators(x: Tensor[Batch, Model], w: Tensor[Hidden, Model]) -> Tensor[Batch, Hidden]:
    """out_dtype changes the element type, not the shape."""
    assert_type(tgrad.matmul(x, w.T, out_dtype=tgrad.float32), Tensor[Batch, Hidden])
    return x.matmul(w.T, out_dtype="float32")
