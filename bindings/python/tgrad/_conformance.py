"""The `conformance` package (the bit-exact oracle, the fills, the scorecards), imported by name.

`conformance` is installed next to tgrad (and importable from the source tree's root) but is not
part of the typed `tgrad` package: importing it through `importlib` keeps `mypy --strict` on tgrad
from following into it, and the callers bind what they use to typed names. A missing package raises
`ModuleNotFoundError` (an `ImportError`), exactly as a ``from conformance... import`` would.
"""

from __future__ import annotations

import importlib
from typing import Any


def module(name: str) -> Any:
    """``conformance.<name>`` (``oracle``, ``fills``, ``runner``), imported on first use."""
    return importlib.import_module(f"conformance.{name}")
