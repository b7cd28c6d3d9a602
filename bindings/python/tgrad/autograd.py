"""Gradients (docs/autograd.md): JAX/MLX-style `grad` and `value_and_grad` over functions of
Tensors or pytrees of them, and torch-style `requires_grad_()`, `.grad`, `backward()`, `no_grad()`
on top. The graph walk and every rule are libtgrad's (tgrad_grad); this module only marks leaves,
flattens pytrees and hands handles over.

>>> import numpy as np, tgrad
>>> x = tgrad.tensor(np.array([1.0, 2.0, 3.0], np.float32), dtype=tgrad.float32)
>>> tgrad.grad(lambda t: (t * t).sum())(x).numpy().tolist()
[2.0, 4.0, 6.0]
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from . import dtypes as _dtypes
from ._ffi import ffi, lib
from .errors import _check

__all__ = ["grad", "value_and_grad", "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled"]


# ---- no_grad ----------------------------------------------------------------------------------
class set_grad_enabled:
    """Turn history recording on or off on this thread (libtgrad's thread-local switch): called,
    it sets the mode now; as a context manager or decorator it restores the earlier one after."""

    def __init__(self, mode: bool) -> None:
        self.mode = bool(mode)
        self.prev = is_grad_enabled()
        _check(lib.tgrad_set_grad_enabled(int(self.mode)))

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        _check(lib.tgrad_set_grad_enabled(int(self.prev)))

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        mode = self.mode
        _check(lib.tgrad_set_grad_enabled(int(self.prev)))  # a decorator changes nothing now

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)

        return wrapper


class _Switch:
    mode = False

    def __enter__(self) -> None:
        self.prev = is_grad_enabled()
        _check(lib.tgrad_set_grad_enabled(int(self.mode)))

    def __exit__(self, *exc: Any) -> None:
        _check(lib.tgrad_set_grad_enabled(int(self.prev)))

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_Switch):
    """Record no history inside (a context manager or a decorator), as torch.no_grad: results
    made there are constants, and nothing they read is kept for a backward pass."""

    mode = False


class enable_grad(_Switch):
    """Record history inside, even within no_grad (torch.enable_grad)."""

    mode = True


def is_grad_enabled() -> bool:
    return bool(lib.tgrad_grad_enabled())


# ---- the C call -------------------------------------------------------------------------------
def _tensor_cls() -> Any:
    from .tensor import Tensor

    return Tensor


def _dtype_code(grad_dtype: Any) -> int:
    if grad_dtype is None:
        return 0
    return int(_dtypes.as_dtype(grad_dtype, "grad_dtype").code)


def grads_of(outputs: list[Any], seeds: list[Any] | None, inputs: list[Any], grad_dtype: Any = None) -> list[Any]:
    """tgrad_grad over Tensors: one gradient per input (None where no path links it)."""
    Tensor = _tensor_cls()
    outs = ffi.new("tgrad_tensor_t[]", [t._h for t in outputs])
    sds = ffi.NULL if seeds is None else ffi.new("tgrad_tensor_t[]", [t._h for t in seeds])
    ins = ffi.new("tgrad_tensor_t[]", [t._h for t in inputs])
    res = ffi.new("tgrad_tensor_t[]", len(inputs))
    _check(lib.tgrad_grad(len(outputs), outs, sds, len(inputs), ins, _dtype_code(grad_dtype), res))
    return [Tensor._adopt(int(h)) if h else None for h in res]


# ---- leaves marked for backward() --------------------------------------------------------------
_LEAVES: dict[int, weakref.ref[Any]] = {}  # insertion ordered: backward's inputs, in a fixed order


def _register(t: Any) -> None:
    key = id(t)

    def forget(_ref: weakref.ref[Any], key: int = key) -> None:
        _LEAVES.pop(key, None)

    _LEAVES[key] = weakref.ref(t, forget)


def live_leaves() -> list[Any]:
    return [t for r in list(_LEAVES.values()) if (t := r()) is not None and t._handle and t.requires_grad]


def backward(output: Any, gradient: Any = None, grad_dtype: Any = None) -> None:
    """Tensor.backward: d output / d leaf for every live tensor marked with requires_grad_(),
    added to its .grad (set when None), realized."""
    if not output.requires_grad:
        from . import errors

        raise errors.InvalidArgumentError(
            "backward: this tensor does not require a gradient (nothing it was made from was marked with "
            "requires_grad_(), or it was made under no_grad())")
    leaves = live_leaves()
    if not leaves:
        return
    grads = grads_of([output], None if gradient is None else [gradient], leaves, grad_dtype)
    for leaf, g in zip(leaves, grads):
        if g is None:
            continue
        with no_grad():
            prev = leaf.grad
            new = g if prev is None else prev + g
        leaf.grad = new.realize()


# ---- pytrees ----------------------------------------------------------------------------------
def _flatten(tree: Any, leaves: list[Any]) -> Callable[[Iterator[Any]], Any]:
    """Append tree's Tensor leaves to `leaves`; return a function rebuilding the tree from an
    iterator of replacements. A module is its parameters (a dict by name, as MLX)."""
    Tensor = _tensor_cls()
    if isinstance(tree, Tensor):
        leaves.append(tree)
        return lambda it: next(it)
    from .nn import Module

    if isinstance(tree, Module):
        tree = dict(tree.named_parameters())
    if isinstance(tree, dict):
        parts = {k: _flatten(v, leaves) for k, v in tree.items()}
        return lambda it: {k: p(it) for k, p in parts.items()}
    if isinstance(tree, (list, tuple)):
        items = [_flatten(v, leaves) for v in tree]
        kind = type(tree)
        if kind is list or kind is tuple:
            return lambda it: kind(p(it) for p in items)
        return lambda it: kind(*(p(it) for p in items))  # a namedtuple
    return lambda it: None  # not differentiable: None in the gradient's tree


def value_and_grad(fn: Callable[..., Any], argnums: int | tuple[int, ...] = 0, has_aux: bool = False,
                   grad_dtype: Any = None) -> Callable[..., Any]:
    """A function returning (fn(*args), gradient of fn's one-element result with respect to the
    arguments argnums): each gradient has its argument's structure (Tensors, dicts, lists,
    tuples; an nn.Module gives a dict of its parameters' gradients by name), zeros where fn does
    not depend on a leaf. has_aux: fn returns (value, aux), and the result is ((value, aux),
    grads). grad_dtype: the gradients' dtype (docs/autograd.md); None: each leaf's own."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        leaves: list[Any] = []
        builders = []
        for n in nums:
            if not -len(args) <= n < len(args):
                raise IndexError(f"value_and_grad: argnums {n} but the function got {len(args)} arguments")
            builders.append(_flatten(args[n], leaves))
        before = [leaf.requires_grad for leaf in leaves]
        try:
            for leaf in leaves:
                lib.tgrad_tensor_set_requires_grad(leaf._h, 1)
            with enable_grad():
                out = fn(*args, **kwargs)
        finally:
            for leaf, flag in zip(leaves, before):
                lib.tgrad_tensor_set_requires_grad(leaf._h, int(flag))
        value, aux = (out[0], out[1]) if has_aux else (out, None)
        if not isinstance(value, _tensor_cls()):
            raise TypeError(f"value_and_grad: the function returned {type(value).__name__}, not a Tensor")
        grads = grads_of([value], None, leaves, grad_dtype) if leaves else []
        from .creation import zeros

        filled = [g if g is not None else zeros(*leaf.shape, dtype=grad_dtype or leaf.dtype)
                  for leaf, g in zip(leaves, grads)]
        it = iter(filled)
        trees = [b(it) for b in builders]
        g_out = trees[0] if isinstance(argnums, int) else tuple(trees)
        return ((value, aux) if has_aux else value), g_out

    return wrapper


def grad(fn: Callable[..., Any], argnums: int | tuple[int, ...] = 0, has_aux: bool = False,
         grad_dtype: Any = None) -> Callable[..., Any]:
    """The gradient part of value_and_grad (with has_aux: (grads, aux))."""
    vg = value_and_grad(fn, argnums, has_aux, grad_dtype)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        value, g = vg(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return wrapper
