"""torch.nn.utils' gradient clipping: `clip_grad_norm_` and `clip_grad_value_`, over functional
cores that take explicit gradients (`grad_norm`, `clip_grads_by_norm`, `clip_grads_by_value`).

The arithmetic (docs/numerics.md, "Gradient clipping"), library ops only, in float32:
- total norm, norm_type 2: every gradient element's square made exact as three float32 terms
  (``x = hi + lo`` by Veltkamp's split: ``hi*hi``, ``2*hi*lo``, ``lo*lo``), all of them summed
  at once by the correctly rounded sum (so ``RN(sum of x^2)``, one rounding), then ``sqrt``
  (rounded once): within 1 ulp of the exact norm (|x| < 2**115 and squares not subnormal).
  norm_type 1: the correctly rounded sum of |x|; inf: max |x| (exact); another p > 0:
  ``RN(sum(RN(|x|**p))) ** (1/p)`` (each pow correctly rounded);
- the scale (torch's order): ``coef = min(RN(max_norm / RN(total + 1e-6)), 1)``, each grad
  ``RN(g * coef)`` (a bfloat16 grad: in float32, then rounded to bfloat16, as torch's ``mul_``).
clip_grad_value_: ``clamp(g, -clip_value, clip_value)`` (exact).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from .. import errors
from ..tensor import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grads_by_norm", "clip_grads_by_value", "grad_norm"]


def _tgrad() -> Any:
    import tgrad

    return tgrad


def _grads(grads: Sequence[Any], user: str) -> list[Tensor]:
    tg = _tgrad()
    out = list(grads)
    for i, g in enumerate(out):
        if not isinstance(g, Tensor):
            raise errors.InvalidArgumentError(f"{user}: grad {i} must be a tgrad.Tensor, got {type(g).__name__}")
        if g.dtype not in (tg.bfloat16, tg.float32):
            raise errors.DtypeUnsupportedError(f"{user}: grad {i} is {g.dtype}; expected bfloat16 or float32")
    return out


def _norm_type(norm_type: Any, user: str) -> float:
    if isinstance(norm_type, bool) or not isinstance(norm_type, (int, float)) or math.isnan(norm_type) \
            or norm_type <= 0:
        raise errors.InvalidArgumentError(f"{user}: norm_type must be a number > 0 (or inf), got {norm_type!r}")
    return float(norm_type)


def _exact_squares(x: Tensor) -> list[Tensor]:
    """Three float32 tensors whose exact sum is x*x (x = hi + lo, 12 significant bits each)."""
    from ..optim._arith import _split

    hi, lo = _split(x)
    return [(hi * hi).reshape(-1), ((hi * lo) * 2.0).reshape(-1), (lo * lo).reshape(-1)]


def grad_norm(grads: Sequence[Tensor], norm_type: float = 2.0) -> Tensor:
    """The norm of all gradients together, a float32 0-d tensor (module's docstring); 0 for
    no gradients. NaN or inf in a gradient gives NaN or inf."""
    tg = _tgrad()
    from ..optim._arith import _SPLIT_LIMIT, as_f32

    user = "grad_norm"
    gs = [as_f32(g) for g in _grads(grads, user)]
    p = _norm_type(norm_type, user)
    gs = [g for g in gs if g.size]
    if not gs:
        result: Tensor = tg.zeros(dtype=tg.float32)
        return result
    if p == math.inf:
        result = tg.cat([g.abs().reshape(-1) for g in gs]).max()
        return result
    if p == 1.0:
        result = tg.cat([g.abs().reshape(-1) for g in gs]).sum()
        return result
    if p == 2.0:
        terms = [t for g in gs for t in _exact_squares(g)]
        exact = tg.sqrt(tg.cat(terms).sum())
        flat = tg.cat([g.reshape(-1) for g in gs])
        big = tg.logical_not((flat.abs() < _SPLIT_LIMIT).all())  # inf, NaN or a split past float32
        result = tg.where(big, tg.sqrt((flat * flat).sum()), exact)
        return result
    result = tg.pow(tg.cat([tg.pow(g.abs(), p).reshape(-1) for g in gs]).sum(), 1.0 / p)
    return result


def clip_grads_by_norm(grads: Sequence[Tensor], max_norm: float, norm_type: float = 2.0) -> tuple[list[Tensor], Tensor]:
    """(the gradients scaled by min(max_norm / (total norm + 1e-6), 1), the total norm)."""
    tg = _tgrad()
    from ..optim._arith import as_f32, f32

    user = "clip_grad_norm_"
    gs = _grads(grads, user)
    if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float)) or math.isnan(max_norm):
        raise errors.InvalidArgumentError(f"{user}: max_norm must be a number, got {max_norm!r}")
    total = grad_norm(gs, norm_type)
    coef = tg.minimum(float(max_norm) / (total + f32(1e-6)), 1.0)
    return [(as_f32(g) * coef).to(g.dtype) for g in gs], total


def clip_grads_by_value(grads: Sequence[Tensor], clip_value: float) -> list[Tensor]:
    """Each gradient clamped to [-clip_value, clip_value] (exact)."""
    tg = _tgrad()
    user = "clip_grad_value_"
    gs = _grads(grads, user)
    if isinstance(clip_value, bool) or not isinstance(clip_value, (int, float)) or math.isnan(clip_value):
        raise errors.InvalidArgumentError(f"{user}: clip_value must be a number, got {clip_value!r}")
    v = float(clip_value)
    return [tg.clamp(g, -v, v) for g in gs]


def _with_grads(parameters: Iterable[Tensor] | Tensor, user: str) -> list[Tensor]:
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    for i, p in enumerate(params):
        if not isinstance(p, Tensor):
            raise errors.InvalidArgumentError(f"{user}: parameter {i} must be a tgrad.Tensor, got {type(p).__name__}")
    return [p for p in params if getattr(p, "grad", None) is not None]


def clip_grad_norm_(parameters: Iterable[Tensor] | Tensor, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach: Any = None) -> Tensor:
    """torch.nn.utils.clip_grad_norm_: scale every parameter's ``.grad`` in place (the same
    grad object holds the scaled values) so that their total norm is at most max_norm; returns
    the total norm before clipping (float32 0-d). error_if_nonfinite=True raises
    InvalidArgumentError for a NaN or infinite norm, changing nothing."""
    from ..optim._rebind import rebind_all

    user = "clip_grad_norm_"
    params = _with_grads(parameters, user)
    grads = [g for p in params if (g := p.grad) is not None]  # _with_grads kept those with one
    clipped, total = clip_grads_by_norm(grads, max_norm, norm_type)
    if error_if_nonfinite and not math.isfinite(float(total)):
        raise errors.InvalidArgumentError(
            f"{user}: the total norm of order {norm_type} is {float(total)}; error_if_nonfinite=True")
    rebind_all(list(zip(grads, clipped)), user)
    return total


def clip_grad_value_(parameters: Iterable[Tensor] | Tensor, clip_value: float, foreach: Any = None) -> None:
    """torch.nn.utils.clip_grad_value_: every parameter's ``.grad`` clamped in place to
    [-clip_value, clip_value]."""
    from ..optim._rebind import rebind_all

    user = "clip_grad_value_"
    params = _with_grads(parameters, user)
    grads = [g for p in params if (g := p.grad) is not None]  # _with_grads kept those with one
    rebind_all(list(zip(grads, clip_grads_by_value(grads, clip_value))), user)
