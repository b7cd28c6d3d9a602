"""Code that states no shapes type-checks as before: a bare Tensor has unknown (Any) extents."""

from typing import Any, Literal

import numpy as np

import tgrad
from tgrad import Tensor


def linear(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    return (x @ w.T + b).relu()


def from_host() -> Tensor:
    x = Tensor.from_numpy(np.ones((4, 8), np.float32))
    w = tgrad.Tensor.from_numpy(np.ones((2, 8), np.float32))
    y = x @ w.T
    z: Tensor = y * 2 + 1
    return tgrad.gelu(z)


def views(x: Tensor) -> list[int]:
    return list(x.T.reshape(-1, 2).permute(1, 0).shape)


def mixed(x: Tensor, w: Tensor[Literal[512], Literal[768]]) -> Tensor[Any, Literal[512]]:
    """A bare Tensor's Any extents agree with Literal ones."""
    return x @ w.T


def conveniences(x: Tensor) -> tuple[int, int, int, int, float]:
    return x.size, x.nbytes, x.itemsize, len(x), float(x[0, 0])
