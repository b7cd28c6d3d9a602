"""What numpy can build: checked by every reader of external bytes (safetensors files,
Trace.from_json documents, DLPack capsules) before it calls numpy with a shape it read, so that a
shape numpy refuses (``[2**62, 0]`` of 2-byte elements, 70 axes, an extent past 2**63) becomes the
reader's typed tgrad error instead of numpy's raw ValueError.

numpy's rules (numpy 2.x; 1.x allows 32 axes): at most MAX_DIMS axes; every extent a non-negative
integer below 2**63; the product of the non-zero extents times the element size at most
2**63 - 1 (numpy checks that product even when an extent is 0, so ``[2**62, 0]`` of uint16 is
"too big" although it holds nothing). Pure arithmetic: no numpy call.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["MAX_DIMS", "problem"]

#: Axes a numpy array may have (NPY_MAXDIMS).
MAX_DIMS = 64 if int(np.__version__.split(".")[0]) >= 2 else 32
_INTP_MAX = (1 << 63) - 1


def problem(shape: Sequence[object], itemsize: int) -> str | None:
    """Why numpy cannot build an array of `shape` with `itemsize`-byte elements, or None when it
    can (allocating it may still fail for want of memory: that is OutOfMemoryError)."""
    if len(shape) > MAX_DIMS:
        return f"{len(shape)} axes (numpy holds at most {MAX_DIMS})"
    product = itemsize
    for extent in shape:
        if isinstance(extent, bool) or not isinstance(extent, int) or extent < 0:
            return f"extent {extent!r} is not a non-negative integer"
        if extent > _INTP_MAX:
            return f"extent {extent} does not fit numpy's 64-bit sizes"
        if extent:
            product *= extent
            if product > _INTP_MAX:
                return f"shape {list(shape)} of {itemsize}-byte elements is over numpy's 2**63 - 1 bytes"
    return None
