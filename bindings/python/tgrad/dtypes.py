"""Element types: ``tgrad.bfloat16``, ``tgrad.float32``, ``tgrad.int32``, ``tgrad.bool``.

A ``DType`` names one of libtgrad's frozen dtype codes (tgrad.h, ``TGRAD_DTYPE_*``); it compares
equal to itself, to its name ("bfloat16") and to the matching numpy dtype, so code that compared
``x.dtype == "bfloat16"`` keeps working. Promotion of mixed operands follows torch (bfloat16 with
float32 gives float32; a Python number takes the tensor's dtype); the elementwise ops, reductions
and casts take float32, the reductions and casts int32 too (docs/numerics.md). ``tgrad.bool`` (one
byte, 0 or 1) is what comparisons give and where takes (tgrad.compare); it is ``tgrad.dtypes.bool_``
too, as numpy names it (``bool`` is reached through the module's ``__getattr__``, so the builtin
is not shadowed here).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from . import _bf16, errors
from ._ffi import lib

__all__ = ["DType", "bfloat16", "float32", "int32", "bool_", "as_dtype"]


class DType:
    """One tensor element type: its name, libtgrad code and size in bytes."""

    __slots__ = ("name", "code", "itemsize")

    def __init__(self, name: str, code: int, itemsize: int) -> None:
        self.name, self.code, self.itemsize = name, code, itemsize

    @property
    def numpy(self) -> np.dtype[Any]:
        """The numpy dtype numpy() returns for it (ml_dtypes.bfloat16 for bfloat16)."""
        return _bf16.dtype() if self.code == bfloat16.code else np.dtype(self.name)

    @property
    def is_floating_point(self) -> bool:
        return self.code not in (int(lib.TGRAD_DTYPE_I32), int(lib.TGRAD_DTYPE_BOOL))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DType):
            return self.code == other.code
        if isinstance(other, str):
            return other in (self.name, _ALIASES_OF.get(self.name, ""))
        try:
            return as_dtype(other, "==") is self
        except errors.TgradError:
            return False

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"tgrad.{self.name}"

    def __str__(self) -> str:
        return self.name


bfloat16 = DType("bfloat16", int(lib.TGRAD_DTYPE_BF16), 2)
float32 = DType("float32", int(lib.TGRAD_DTYPE_F32), 4)
int32 = DType("int32", int(lib.TGRAD_DTYPE_I32), 4)
bool_ = DType("bool", int(lib.TGRAD_DTYPE_BOOL), 1)
_BY_CODE = {d.code: d for d in (bfloat16, float32, int32, bool_)}
_BY_NAME = {"bfloat16": bfloat16, "bf16": bfloat16, "float32": float32, "float": float32, "f32": float32,
            "int32": int32, "i32": int32, "bool": bool_}


def __getattr__(name: str) -> Any:
    """``tgrad.dtypes.bool`` (torch's name) without shadowing the builtin in this module."""
    if name == "bool":
        return bool_
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
_ALIASES_OF = {"bfloat16": "bf16"}


def is_dtype_like(value: Any) -> bool:
    """Whether `value` names a dtype (rather than, say, a device name)."""
    if isinstance(value, DType):
        return True
    if isinstance(value, str) and value.lower() in _BY_NAME:
        return True
    if value is None or isinstance(value, (int, float)):
        return False
    try:
        np.dtype(value)
    except (TypeError, ValueError):
        return False
    return True


def from_code(code: int) -> DType:
    """The DType of a libtgrad dtype code."""
    try:
        return _BY_CODE[code]
    except KeyError:
        raise errors.InternalError(f"libtgrad reported dtype code {code}, which this binding does not know") from None


def as_dtype(dtype: Any, what: str) -> DType:
    """A DType from a DType, a name ("float32"), a numpy dtype or type, or torch-style names;
    DtypeUnsupportedError for anything else."""
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str) and dtype.lower() in _BY_NAME:
        return _BY_NAME[dtype.lower()]
    try:
        dt: np.dtype[Any] = np.dtype(dtype)
    except (TypeError, ValueError):
        raise errors.DtypeUnsupportedError(
            f"{what}: dtype {dtype!r} is not a tgrad dtype (tgrad.bfloat16, tgrad.float32, tgrad.int32, tgrad.bool)") from None
    if _bf16.is_bf16(dt):
        return bfloat16
    if dt == np.float32:
        return float32
    if dt == np.int32:
        return int32
    if dt == np.bool_:
        return bool_
    raise errors.DtypeUnsupportedError(
        f"{what}: dtype {dt} is not a tgrad dtype (tgrad.bfloat16, tgrad.float32, tgrad.int32, tgrad.bool)")


def host_array(array: npt.NDArray[Any], dtype: DType, what: str) -> tuple[npt.NDArray[Any], int]:
    """The contiguous host array and its libtgrad source dtype code for a tensor of `dtype`:
    float sources for bfloat16 and float32 (rounded once in libtgrad where wider), integer
    sources for int32 (values outside int32 refused here, before anything is allocated)."""
    dt = array.dtype
    if dtype is bool_:  # numpy's bool, or any real data as x != 0 (NaN is true), as numpy's astype
        if dt.kind not in "biuf" and not _bf16.is_bf16(dt):
            raise errors.DtypeUnsupportedError(f"{what}: dtype {dt} is not supported for a bool tensor")
        return np.ascontiguousarray(array if dt.kind == "b" else array != 0, dtype=np.bool_), int(lib.TGRAD_DTYPE_BOOL)
    if dtype is int32:
        if dt.kind not in "iub":
            raise errors.DtypeUnsupportedError(
                f"{what}: an int32 tensor needs integer data, got {dt} (cast a float tensor with .to(tgrad.int32))")
        if array.size and dt.itemsize * 8 > 32 - (dt.kind == "u"):
            lo, hi = int(array.min()), int(array.max())
            if lo < -(1 << 31) or hi >= 1 << 31:
                raise errors.InvalidArgumentError(f"{what}: values {lo}..{hi} do not fit int32")
        return np.ascontiguousarray(array, dtype=np.int32), int(lib.TGRAD_DTYPE_I32)
    if _bf16.is_bf16(dt):
        return np.ascontiguousarray(array).view(np.uint16), int(lib.TGRAD_DTYPE_BF16)
    if dt.kind == "f" and dt.itemsize <= 4:
        return np.ascontiguousarray(array, dtype=np.float32), int(lib.TGRAD_DTYPE_F32)  # float16: exact
    if dt.kind == "f" and dt.itemsize == 8:
        return np.ascontiguousarray(array, dtype=np.float64), int(lib.TGRAD_DTYPE_F64)
    if dt.kind in "iu" and dtype is float32:
        raise errors.DtypeUnsupportedError(
            f"{what}: {dt} data for a float32 tensor: make an int32 tensor and cast it (.to(tgrad.float32))")
    raise errors.DtypeUnsupportedError(f"{what}: dtype {dt} is not supported for a {dtype.name} tensor")
