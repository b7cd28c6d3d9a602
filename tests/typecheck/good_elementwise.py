"""Elementwise ops keep the shape: the same shape, a number, or a row broadcast over the rows."""

from typing import Literal, assert_type

import tgrad
from tgrad import Tensor

Batch = Literal[32]
Hidden = Literal[512]


def mlp_step(x: Tensor[Batch, Hidden], bias: Tensor[Hidden], gate: Tensor[Batch, Hidden]) -> Tensor[Batch, Hidden]:
    assert_type(x + x, Tensor[Batch, Hidden])
    assert_type(x * 2.0, Tensor[Batch, Hidden])
    assert_type(1 - x, Tensor[Batch, Hidden])
    assert_type(x / 3, Tensor[Batch, Hidden])
    assert_type(-x, Tensor[Batch, Hidden])
    assert_type(abs(x), Tensor[Batch, Hidden])
    assert_type(x + bias, Tensor[Batch, Hidden])
    assert_type(bias + x, Tensor[Batch, Hidden])
    assert_type(x.relu(), Tensor[Batch, Hidden])
    assert_type(x.gelu(approximate="tanh"), Tensor[Batch, Hidden])
    assert_type(tgrad.silu(x), Tensor[Batch, Hidden])
    assert_type(tgrad.rsqrt(bias), Tensor[Hidden])
    return tgrad.silu(x + bias) * gate


def other_broadcasts(x: Tensor[Batch, Hidden], column: Tensor[Batch, Literal[1]]) -> Tensor:
    """Broadcasts the types do not follow give unknown extents (a bare Tensor), not an error."""
    return x * column
