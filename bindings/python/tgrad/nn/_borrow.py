"""Functions of other tgrad modules that tgrad.nn forwards to (tgrad.softmax, tgrad.norms,
tgrad.shape_ops, tgrad.random), imported when first called: those modules import tgrad.tensor,
and tgrad imports tgrad.nn, so a top-level import here would be circular.
"""

from __future__ import annotations

import importlib
from typing import Any


_FOUND: dict[tuple[str, str], Any] = {}


def borrowed(module: str, name: str) -> Any:
    """The attribute `name` of the module tgrad.<module> (looked up once: a layer's forward calls
    this every time it runs)."""
    key = (module, name)
    hit = _FOUND.get(key)
    if hit is None:
        hit = _FOUND[key] = getattr(importlib.import_module(f"tgrad.{module}"), name)
    return hit
