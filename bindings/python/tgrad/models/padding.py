"""Batches of prompts of different lengths: the attention_mask of tgrad.models.

A row's tokens are those where its mask is 1, in order; the 0s are padding (left, as
transformers' generate pads, right, or anywhere). Each forward arranges every row with its real
tokens first (a stable gather of the ids; the padding after them), so that row r's keys sit at
slots 0, 1, 2, ... of its own sequence, exactly where a run of that prompt alone puts them, with
the padding's keys after them. Then, per row:

- rope's positions are the row's own (the cache's length for that row plus 0, 1, ...; for the
  real tokens this is transformers' `cumsum(mask) - 1`);
- the additive float32 mask is -inf on every padding key and every key a token may not see
  (causal, sliding window): a padding key's softmax probability is exactly 0 and its product
  with v an exact 0, at the end of the sum (trailing, as a recompute's masked future is), so the
  sum's order over the real keys is the one the prompt alone gives;
- a padding query sees the real keys (within the window) and its own key, so its row of the
  softmax is never all -inf: its values are finite, and meaningless.

Every other value of the model depends only on its own row, so a row's logits at its real
positions and its greedy tokens are byte for byte those of the prompt run alone (docs/models.md).
The hidden states go back to the caller's positions by the inverse gather.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import errors
from ..dtypes import float32, int32
from ..tensor import Tensor

__all__ = ["Plan", "check_mask", "plan", "additive_mask"]


def check_mask(mask: Any, shape: tuple[int, ...], who: str) -> np.ndarray:
    """The real tokens of attention_mask (bool [B, L]): a numpy (or array-like) or Tensor of 0s and
    1s (bool, integer or floating), of ids' shape, each row with at least one 1."""
    if isinstance(mask, Tensor):
        array = np.asarray(mask.numpy()).astype(np.float64)  # exact for bool, int32, bf16, float32
    else:
        array = np.asarray(mask)
        if array.dtype.kind not in "biuf":
            raise errors.InvalidArgumentError(f"{who}: attention_mask must hold 0s and 1s, got a {array.dtype} array")
    if array.shape != tuple(shape):
        raise errors.ShapeMismatchError(
            f"{who}: attention_mask is {list(array.shape)}, expected ids' shape {list(shape)} "
            f"(with a cache: the new ids only)")
    if not np.isin(array, (0, 1)).all():
        bad = array[~np.isin(array, (0, 1))].flat[0]
        raise errors.InvalidArgumentError(f"{who}: attention_mask must hold only 0 and 1, found {bad!r}")
    real: np.ndarray = np.asarray(array != 0)
    empty = np.flatnonzero(~real.any(axis=1))
    if empty.size:
        raise errors.InvalidArgumentError(
            f"{who}: row {int(empty[0])} of attention_mask has no real token (every row needs at least one 1)")
    return real


@dataclass(frozen=True)
class Plan:
    """How one forward arranges a padded batch. order[r, c]: the caller's index of row r's c-th
    token in the arranged row (its real tokens first, in order, then its padding); real[r]: row
    r's real tokens in this forward; start[r]: its tokens before this forward (the cache's)."""

    order: np.ndarray
    real: np.ndarray
    start: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        b, length = self.order.shape
        return int(b), int(length)

    @property
    def identity(self) -> bool:
        """Nothing to rearrange: every row's real tokens already come first."""
        return bool((self.order == np.arange(self.shape[1])).all())

    def positions(self, device: str = "cpu") -> Tensor:
        """rope's positions [B, L] of the arranged rows (int32, on `device`)."""
        pos = self.start[:, None] + np.arange(self.shape[1])[None, :]
        return Tensor.from_numpy(np.ascontiguousarray(pos, np.int32), dtype=int32, device=device)

    def flat(self, index: np.ndarray) -> np.ndarray:
        """Rows' indices [B, n] into the [B * L, ...] flattening (int32)."""
        b, length = self.shape
        return np.ascontiguousarray((np.arange(b)[:, None] * length + index).reshape(-1), np.int32)

    def arrange(self, x: Tensor) -> Tensor:
        """x [B, L, ...] in the arranged order (an exact gather)."""
        return self._gather(x, self.order)

    def restore(self, x: Tensor) -> Tensor:
        """x [B, L, ...] of the arranged rows back at the caller's positions."""
        return self._gather(x, np.argsort(self.order, axis=1, kind="stable"))

    def last_real(self, x: Tensor) -> Tensor:
        """x [B, L, ...] of the arranged rows -> [B, 1, ...]: each row's last real position."""
        return self._gather(x, (self.real - 1)[:, None])

    def _gather(self, x: Tensor, index: np.ndarray) -> Tensor:
        b, length = self.shape
        rest = x.shape[2:]
        picked = x.reshape(b * length, *rest).take(self.flat(index), 0)
        return picked.reshape(b, index.shape[1], *rest)


def plan(real: np.ndarray, start: np.ndarray) -> Plan:
    """The arrangement of a batch whose real tokens are `real` (bool [B, L]), continuing rows of
    `start` tokens each."""
    order = np.argsort(~real, axis=1, kind="stable")
    return Plan(order=order, real=real.sum(axis=1).astype(np.int64), start=start.astype(np.int64))


def additive_mask(p: Plan, window: int | None, sources: int, device: str = "cpu") -> Tensor | None:
    """The float32 mask [B, 1, 1, L, sources] (0 visible, -inf not) of the arranged rows' queries
    over key slots 0 .. sources-1, on `device`; None when every key is visible."""
    b, length = p.shape
    q = p.start[:, None] + np.arange(length)[None, :]            # [B, L] each query's slot
    j = np.arange(sources)[None, None, :]
    ends = (p.start + p.real)[:, None, None]                      # the row's real keys end here
    visible = (j <= q[..., None]) & (j < ends)
    if window is not None:
        visible &= q[..., None] - j < window
    padding = np.arange(length)[None, :] >= p.real[:, None]      # [B, L] padding queries
    visible |= padding[..., None] & (j == q[..., None])
    if visible.all():
        return None
    values = np.where(visible, np.float32(0.0), np.float32(-np.inf)).astype(np.float32)
    return Tensor.from_numpy(np.ascontiguousarray(values[:, None, None]), dtype=float32, device=device)
