"""``F.cross_entropy`` and ``F.mse_loss`` (torch's signatures and semantics), computed in float32.

Each loss is a composition of tgrad ops, each correctly rounded to float32 (docs/numerics.md,
"Losses"); Python only composes them and checks arguments (reading the target's values once to
refuse an out-of-range class, as torch does). So the bytes are those of the documented
composition, the same on every thread count, CPU variant and fusion setting:

cross_entropy, class-index targets (int32), class axis 1 (0 for an unbatched [C] input):
  1. ``logp = log_softmax(input, dim=class, dtype=float32)``: the exact value rounded once;
  2. ``nll = sum(where(target == c and target != ignore_index, -logp, 0), dim=class)``: an exact
     pick of ``-logp[target]`` (a correctly rounded sum of one value and zeros), +0 where ignored;
  3. with ``weight``: ``w_t = sum(where(same mask, weight, 0))`` (exact) and ``nll = nll * w_t``
     (one rounding, torch's ``-w * logp``);
  4. reduction "mean": ``sum(nll) / sum(w_t)`` (without weight: ``/ count of non-ignored``),
     "sum": ``sum(nll)``, "none": ``nll``; each sum correctly rounded, the quotient rounded once;
  5. label_smoothing = e > 0: ``smooth = sum(where(valid, -logp [* weight], 0), dim=class)``
     (the product rounded, the sum correctly rounded), reduced as in 4, then
     ``nll * (1 - e) + smooth * (e / C)`` (the two scalars rounded once to float32 from double,
     each product and the sum rounded once), torch's formula.
mse_loss: ``d = float32(input) - float32(target)``, ``d * d``, then mean or sum (correctly
rounded) or none: every per-element value equals torch's float32 bytes.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from .. import errors
from ..tensor import Tensor

__all__ = ["cross_entropy", "mse_loss"]

_REDUCTIONS = ("none", "mean", "sum")


def _tgrad() -> Any:
    import tgrad

    return tgrad


def _tensor(value: Any, what: str, user: str) -> Tensor:
    if not isinstance(value, Tensor):
        raise errors.InvalidArgumentError(f"{user}: {what} must be a tgrad.Tensor, got {type(value).__name__}")
    return value


def _reduction(reduction: Any, user: str) -> str:
    if not isinstance(reduction, str) or reduction not in _REDUCTIONS:
        raise errors.InvalidArgumentError(f"{user}: reduction must be one of 'none', 'mean', 'sum'; got {reduction!r}")
    return reduction


def _float(x: Tensor, what: str, user: str) -> Tensor:
    tg = _tgrad()
    if x.dtype not in (tg.bfloat16, tg.float32):
        raise errors.DtypeUnsupportedError(f"{user}: {what} is {x.dtype}; expected bfloat16 or float32")
    return x if x.dtype is tg.float32 else x.to(tg.float32)  # bf16 -> float32 is exact


def _shape_text(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: Any = None,  # noqa: A002
                  ignore_index: int = -100, reduce: Any = None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """torch.nn.functional.cross_entropy for class-index targets: input [N, C] or [N, C, d1, ...]
    (or [C]), logits in bfloat16 or float32; target int32 [N] or [N, d1, ...] (or 0-d), each a
    class in 0 .. C-1 or ignore_index; weight: a float [C] or None. A float32 result (0-d, or the
    target's shape for reduction="none"), composed as the module's docstring says.

    Refused with nothing computed: a target not int32 (DtypeUnsupportedError; class
    probabilities are not supported), of the wrong shape (ShapeMismatchError), holding a class
    outside 0 .. C-1 that is not ignore_index (IndexOutOfRangeError: this reads the target);
    a weight not [C]; label_smoothing outside [0, 1]; an unknown reduction; the deprecated
    size_average/reduce (InvalidArgumentError)."""
    tg = _tgrad()
    user = "cross_entropy"
    if size_average is not None or reduce is not None:
        raise errors.InvalidArgumentError(f"{user}: size_average and reduce are deprecated in torch; use reduction=")
    x = _tensor(input, "input", user)
    t = _tensor(target, "target", user)
    red = _reduction(reduction, user)
    if isinstance(ignore_index, bool):
        raise errors.InvalidArgumentError(f"{user}: ignore_index must be an int, got bool")
    try:
        ignore = operator.index(ignore_index)
    except TypeError:
        raise errors.InvalidArgumentError(f"{user}: ignore_index must be an int, got {type(ignore_index).__name__}") \
            from None
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)) \
            or not 0.0 <= float(label_smoothing) <= 1.0:
        raise errors.InvalidArgumentError(f"{user}: label_smoothing must be a number in [0, 1], got {label_smoothing!r}")
    eps = float(label_smoothing)
    xf = _float(x, "input", user)
    if x.ndim == 0:
        raise errors.RankMismatchError(f"{user}: input is 0-d; expected [C], [N, C] or [N, C, d1, ...]")
    cls = 0 if x.ndim == 1 else 1
    classes = x.shape[cls]
    want = x.shape[:cls] + x.shape[cls + 1:]
    if t.dtype is not tg.int32:
        raise errors.DtypeUnsupportedError(
            f"{user}: target is {t.dtype}; expected int32 class indices (class probabilities are not supported)")
    if t.shape != want:
        raise errors.ShapeMismatchError(
            f"{user}: target is {_shape_text(t.shape)}, expected {_shape_text(want)} for input {_shape_text(x.shape)}")
    if classes == 0:
        raise errors.ShapeMismatchError(f"{user}: input has no classes (extent 0 on the class axis)")
    w = None
    if weight is not None:
        w = _float(_tensor(weight, "weight", user), "weight", user)
        if w.shape != (classes,):
            raise errors.ShapeMismatchError(f"{user}: weight is {_shape_text(w.shape)}, expected [{classes}]")
    values = np.asarray(t.numpy())
    bad = values[(values != ignore) & ((values < 0) | (values >= classes))]
    if bad.size:
        raise errors.IndexOutOfRangeError(
            f"{user}: target {int(bad.flat[0])} is out of bounds for {classes} classes (and is not ignore_index {ignore})")

    trailing = (1,) * (x.ndim - cls - 1)
    class_ids = tg.arange(classes, dtype=tg.int32, device=x.device).reshape(classes, *trailing)
    valid = t != ignore
    hit = tg.logical_and(tg.eq(t.unsqueeze(cls), class_ids), valid.unsqueeze(cls))
    neg_logp = -tg.log_softmax(xf, dim=cls, dtype=tg.float32)
    nll = tg.where(hit, neg_logp, 0.0).sum(axis=cls)
    w_b = None if w is None else w.reshape(classes, *trailing)
    if w_b is not None:
        w_t = tg.where(hit, w_b, 0.0).sum(axis=cls)
        nll = nll * w_t
        total = w_t.sum()
    else:
        total = tg.where(valid, tg.ones(1, dtype=tg.float32, device=x.device), 0.0).sum()  # 1.0 per valid target
    loss = _reduce(nll, total, red)
    if eps > 0:
        smooth_terms = neg_logp if w_b is None else neg_logp * w_b
        smooth = tg.where(valid.unsqueeze(cls), smooth_terms, 0.0).sum(axis=cls)
        loss = loss * (1.0 - eps) + _reduce(smooth, total, red) * (eps / classes)
    return loss


def _reduce(per_element: Tensor, total: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return per_element
    s = per_element.sum()
    return s / total if reduction == "mean" else s


def mse_loss(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None,  # noqa: A002
             reduction: str = "mean", weight: Any = None) -> Tensor:
    """torch.nn.functional.mse_loss: (input - target)^2 in float32, then its correctly rounded
    mean ("mean"), sum ("sum") or each element ("none"). input and target: bfloat16 or float32
    tensors of the same shape (ShapeMismatchError otherwise; torch's broadcasting with a warning
    is not copied)."""
    user = "mse_loss"
    if size_average is not None or reduce is not None:
        raise errors.InvalidArgumentError(f"{user}: size_average and reduce are deprecated in torch; use reduction=")
    if weight is not None:
        raise errors.InvalidArgumentError(f"{user}: weight is not supported")
    x = _float(_tensor(input, "input", user), "input", user)
    y = _float(_tensor(target, "target", user), "target", user)
    red = _reduction(reduction, user)
    if x.shape != y.shape:
        raise errors.ShapeMismatchError(
            f"{user}: input is {_shape_text(x.shape)} and target {_shape_text(y.shape)}; they must be equal")
    d = x - y
    sq = d * d
    if red == "none":
        return sq
    return sq.mean() if red == "mean" else sq.sum()
