"""tgrad.typed states a shape, checked at run time, for the checkers to follow."""

from typing import Literal, assert_type

import numpy as np

import tgrad
from tgrad import Tensor


def stated() -> Tensor[Literal[32], Literal[512]]:
    raw = Tensor.from_numpy(np.zeros((32, 768), np.float32))
    x: Tensor[Literal[32], Literal[768]] = tgrad.typed(raw, 32, 768)
    w = tgrad.typed(Tensor.from_numpy(np.zeros((512, 768), np.float32)), Tensor[Literal[512], Literal[768]])
    assert_type(w, Tensor[Literal[512], Literal[768]])
    return x @ w.T


def unstated_extents(raw: Tensor) -> Tensor[int, int]:
    """Without a Literal the extents are int: the rank is stated, the extents are not."""
    return tgrad.typed(raw, 4, 4)
