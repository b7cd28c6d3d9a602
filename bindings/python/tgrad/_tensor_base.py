"""Tensor's base class: the hot path of every product (docs/performance.md, "The call path").

What a Tensor is at run time (a libtgrad handle, its shape once known, a weak-reference slot) and
the few calls a small product spends its time in outside libtgrad: ``a @ b``, ``realize()``,
``numpy()`` with the default dtype, and releasing the handle when the object dies. Two
implementations of one behaviour:

- ``tgrad._native.TensorBase`` (C, bindings/python/native/tensor_base.c): built by meson beside
  libtgrad when the package is installed; it calls the library cffi loaded (through function
  addresses `bind` hands it) and sends every uncommon case to the Python methods below.
- `PythonTensorBase` (here): the same in Python over cffi; used where the C module is not built
  (the source tree on PYTHONPATH) or with ``TGRAD_NATIVE=0``.

TGRAD_NATIVE: unset, the C base when it is built, else Python; ``0``, Python; ``1``, the C base or
ImportError. `implementation()` says which one this process uses (``tgrad doctor`` reports it).
tests/python/test_native.py runs the same calls through both and compares bytes and errors.
"""

from __future__ import annotations

import importlib
import os
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from . import _bf16, errors
from ._ffi import ffi, lib
from .errors import _check

if TYPE_CHECKING:
    import contextvars

__all__ = ["TensorBase", "PythonTensorBase", "bind", "implementation"]


class _Bound:
    """What bind() set: the result class of a product and the tgrad.trace recorder variable."""

    tensor: type[Any] | None = None
    recorder: contextvars.ContextVar[Any] | None = None


_bound = _Bound()


def _out_slot() -> Any:
    """This thread's tgrad_tensor_t out-parameter for a product (cffi releases the GIL during a C
    call, so threads cannot share one; allocating one per call cost a third of a microsecond)."""
    slot = _OUT.slot = ffi.new("tgrad_tensor_t *")
    return slot


_OUT = threading.local()


class PythonTensorBase:
    """The hot path in Python (see the module's docstring); the C base behaves the same."""

    __slots__ = ("_handle", "_shape", "_grad", "__weakref__")  # _grad: Tensor.grad (tgrad.autograd)
    _handle: int
    _shape: tuple[int, ...] | None  # read once from libtgrad: a tensor's shape never changes

    def __del__(self, _release: Any = lib.tgrad_tensor_release) -> None:
        # _release is bound at definition so it survives module teardown at interpreter exit.
        handle = getattr(self, "_handle", 0)
        if handle and _release is not None:
            self._handle = 0
            try:
                _release(handle)
            except Exception:  # pragma: no cover - interpreter shutdown
                pass

    def __matmul__(self, other: Any) -> Any:
        """self @ other with torch.matmul's rules ([..., M, K] @ [..., K, N], batch axes broadcast,
        1-D operands promoted), lazily; shapes are checked now."""
        tensor: Any = _bound.tensor
        if tensor is None or not isinstance(other, tensor):  # Python then tries other.__rmatmul__
            return NotImplemented
        # Written flat: at 64^3 the Python around the C call is most of the time.
        ha, hb = self._handle, other._handle
        if not (ha and hb):
            ha, hb = self._h, other._h  # type: ignore[attr-defined]  # raises for the released one
        out = getattr(_OUT, "slot", None) or _out_slot()
        status = lib.tgrad_matmul(ha, hb, out)
        if status:
            _check(status)
        c = tensor.__new__(tensor)
        c._handle = out[0]
        sa, sb = self._shape, other._shape  # libtgrad checked the shapes; other ranks: read when asked
        c._shape = (sa[0], sb[1]) if sa is not None and sb is not None and len(sa) == len(sb) == 2 else None
        recorder = _bound.recorder.get() if _bound.recorder is not None else None
        if recorder is not None:
            recorder.report("matmul", c, (self, other), {})
        return c

    def realize(self) -> Any:
        """Compute a lazy tensor now (no-op when realized); returns self."""
        status = lib.tgrad_tensor_realize(self._handle or self._h)  # type: ignore[attr-defined]
        if status:
            _check(status)
        return self

    def numpy(self, dtype: npt.DTypeLike | None = None) -> npt.NDArray[Any]:
        """A new numpy array of the values: ml_dtypes.bfloat16 by default, or float32 (exact)."""
        if dtype is None:  # the hot path: bf16 bits read straight into the bfloat16 array
            try:
                return self._bits(_bf16.dtype())  # type: ignore[attr-defined, no-any-return]
            except errors.DtypeUnsupportedError:  # a float32 or int32 tensor: its own dtype
                return self._numpy_as(None)  # type: ignore[attr-defined, no-any-return]
        return self._numpy_as(dtype)  # type: ignore[attr-defined, no-any-return]


def _native_module() -> Any:
    """tgrad._native, the C TensorBase (imported by name: the package's module __getattr__ would
    make a checker read `from . import _native` as an object)."""
    return importlib.import_module(f"{__package__}._native")


def _load() -> tuple[type[Any], str]:
    wanted = os.environ.get("TGRAD_NATIVE", "")
    if wanted not in ("", "0", "1"):
        raise ImportError(f"tgrad: TGRAD_NATIVE={wanted!r}: use 0 (Python), 1 (C) or leave it unset")
    if wanted == "0":
        return PythonTensorBase, "python"
    try:
        native = _native_module()  # built by meson; absent in the source tree
    except ImportError as exc:
        if wanted == "1":
            raise ImportError(f"tgrad: TGRAD_NATIVE=1 but tgrad._native is not available: {exc}") from exc
        return PythonTensorBase, "python"
    return native.TensorBase, "native"


if TYPE_CHECKING:
    class TensorBase:
        """What checkers see: the attributes (tgrad.Tensor declares the typed methods)."""

        _handle: int
        _shape: tuple[int, ...] | None

    _implementation = "python"
else:
    TensorBase, _implementation = _load()


def implementation() -> str:
    """Which TensorBase this process uses: "native" (C) or "python"."""
    return _implementation


def bind(tensor: type[Any], recorder: contextvars.ContextVar[Any]) -> None:
    """Name the class a product makes (tgrad.Tensor) and the tgrad.trace recorder; for the C base,
    hand it the library's functions and the Python objects its slow paths call."""
    _bound.tensor, _bound.recorder = tensor, recorder
    if _implementation == "native":
        addresses = tuple(int(ffi.cast("uintptr_t", fn)) for fn in (
            lib.tgrad_matmul, lib.tgrad_tensor_read_bf16, lib.tgrad_tensor_realize, lib.tgrad_tensor_release))
        _native_module().bind(tensor, PythonTensorBase, lib, addresses, _check, np.empty, _bf16.dtype, recorder.get)
