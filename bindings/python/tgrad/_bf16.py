"""numpy's bfloat16 dtype (ml_dtypes.bfloat16), imported on first use.

ml_dtypes 0.7 spends about a second of CPU in its import (0.5 took a fifth of that), so
`import tgrad` does not import it: the CLI's `doctor`, `explain` and `render`, C-like use through
`to_bytes`, and any program that never builds or reads a bfloat16 numpy array never pay for it.
An array can only have this dtype once ml_dtypes is imported, so `is_bf16` asks sys.modules first
and imports nothing."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

_dtype: np.dtype[Any] | None = None


def dtype() -> np.dtype[Any]:
    """ml_dtypes.bfloat16 as a numpy dtype (importing ml_dtypes the first time)."""
    global _dtype
    if _dtype is None:
        import ml_dtypes  # noqa: PLC0415  (deliberately lazy: see the module's docstring)

        _dtype = np.dtype(ml_dtypes.bfloat16)
    return _dtype


def is_bf16(dt: Any) -> bool:
    """Is numpy dtype `dt` bfloat16? (False without importing ml_dtypes when nothing has.)"""
    return "ml_dtypes" in sys.modules and dt == dtype()
