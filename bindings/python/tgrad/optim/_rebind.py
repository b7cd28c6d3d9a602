"""Give a Tensor object a new value in place, from its users' view: `rebind(p, new)` makes the
Python object `p` hold `new`'s (realized) handle, so every reference to `p` (a module's
parameter, an optimizer's param_groups) sees the new values. Tensors stay immutable: `p`'s old
handle goes to `new`'s object and is released with it; views and graphs made from `p` before
keep the old values."""

from __future__ import annotations

from .. import errors
from .._ffi import ffi, lib
from ..errors import _check
from ..tensor import Tensor


def check_same(p: Tensor, new: Tensor, user: str) -> None:
    if new.shape != p.shape or new.dtype is not p.dtype:
        raise errors.ShapeMismatchError(
            f"{user}: the new value is {new.dtype}{list(new.shape)}, the tensor {p.dtype}{list(p.shape)}")


def _requires_grad(t: Tensor) -> bool:
    on = ffi.new("int32_t *")
    _check(lib.tgrad_tensor_requires_grad(t._h, on))
    return bool(on[0])


def swap(p: Tensor, new: Tensor) -> None:
    """p's object holds new's (realized) handle and new's the old one. A parameter that required a
    gradient still does, as a leaf: its new value is marked, and (made under no_grad, as
    Optimizer.step makes it) carries no history of the update."""
    on = _requires_grad(p)
    shape = new.shape
    p._handle, new._handle = new._handle, p._handle
    p._shape = shape
    if on and not _requires_grad(p):
        _check(lib.tgrad_tensor_set_requires_grad(p._h, 1))


def rebind_all(pairs: list[tuple[Tensor, Tensor]], user: str) -> None:
    """Realize every new value first (an error leaves every tensor unchanged), then swap handles."""
    for p, new in pairs:
        check_same(p, new, user)
    for _, new in pairs:
        new.realize()
    for p, new in pairs:
        swap(p, new)
