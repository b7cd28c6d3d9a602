"""Functions of tgrad modules that a build may not have yet, imported when first called.

tgrad.nn.functional and the layers forward to ops that live in their own modules
(tgrad.softmax, tgrad.norms, tgrad.shape_ops, tgrad.random, ...). Each is looked up at call time,
so tgrad.nn imports and works for everything else in a build without one, and a call that needs a
missing one raises AttributeError naming what it needs.
"""

from __future__ import annotations

import importlib
from typing import Any


def has(module: str) -> bool:
    """True when tgrad.<module> can be imported."""
    try:
        importlib.import_module(f"tgrad.{module}")
    except ModuleNotFoundError as exc:
        if exc.name != f"tgrad.{module}":
            raise
        return False
    return True


def borrowed(module: str, name: str, user: str) -> Any:
    """The attribute `name` of the module tgrad.<module>, for `user` (named in the error)."""
    full = f"tgrad.{module}"
    if not has(module):
        raise AttributeError(f"{user} needs {full}.{name}, and this build of tgrad has no {full}")
    found = getattr(importlib.import_module(full), name, None)
    if found is None:
        raise AttributeError(f"{user} needs {full}.{name}, which this build of tgrad does not have")
    return found
