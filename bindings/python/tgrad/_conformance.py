"""`tgrad.conformance` (the bit-exact oracle, the fills, the scorecards), imported by name.

The kit lives at the top of the repository (conformance/; bindings/python/tgrad/conformance links
to it) and is installed inside this package, with the committed scorecards. It is not part of the
typed API: importing it through `importlib` keeps `mypy --strict` on tgrad from following into it,
and the callers bind what they use to typed names. A missing kit raises `ModuleNotFoundError` (an
`ImportError`), exactly as a ``from tgrad.conformance... import`` would.
"""

from __future__ import annotations

import importlib
from typing import Any


def module(name: str) -> Any:
    """``tgrad.conformance.<name>`` (``oracle``, ``fills``, ``runner``), imported on first use."""
    return importlib.import_module(f"tgrad.conformance.{name}")
