"""Exceptions of tgrad, derived at import from libtgrad's status registry.

Every non-ok registry entry becomes a class named after its stable snake_case name
(shape_mismatch -> ShapeMismatchError) deriving from TgradError and from the builtin exception of
its category (value -> ValueError, index -> IndexError, file -> LookupError and FileNotFoundError,
...). So ``except ValueError`` and
``except tgrad.errors.ShapeMismatchError`` both work. `_check` is the one place a status becomes an
exception; the message is the C library's per-thread detail, else the registry message.
"""

from __future__ import annotations

from typing import Any

from ._ffi import _string, lib

__all__ = ["TgradError", "by_code", "by_status"]

_CATEGORY_BASES: dict[str, tuple[type[Exception], ...]] = {
    "value": (ValueError,),
    "type": (TypeError,),
    "index": (IndexError,),
    "memory": (MemoryError,),
    "runtime": (RuntimeError,),
    "lookup": (LookupError,),
    # A missing file: `except FileNotFoundError` (and OSError) catch it as they catch open()'s.
    "file": (LookupError, FileNotFoundError),
}


class TgradError(Exception):
    """Base of every tgrad error.

    Attributes: ``code`` (stable snake_case registry name), ``status`` (numeric status code),
    ``detail`` (the one-line detail the library or binding gave for this failure).
    """

    code: str = "unknown_status"
    status: int = -1
    message: str = "unknown status"

    def __init__(self, detail: str | None = None) -> None:
        self.detail: str = detail if detail else ""
        super().__init__(self.detail or self.message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.detail,))


def _class_name(code: str) -> str:
    return "".join(part.capitalize() for part in code.split("_")) + "Error"


def _derive() -> tuple[dict[str, type[TgradError]], dict[int, type[TgradError]]]:
    named: dict[str, type[TgradError]] = {}
    numbered: dict[int, type[TgradError]] = {}
    for status in range(int(lib.tgrad_status_count())):
        code = _string(lib.tgrad_status_name(status))
        category = _string(lib.tgrad_status_category(status))
        if status == lib.TGRAD_OK:
            continue
        builtins = _CATEGORY_BASES.get(category, (RuntimeError,))
        name = _class_name(code)
        cls = type(
            name,
            (TgradError, *builtins),
            {
                "__module__": __name__,
                "__qualname__": name,
                "__doc__": _string(lib.tgrad_status_message(status)),
                "code": code,
                "status": status,
                "message": _string(lib.tgrad_status_message(status)),
                "category": category,
            },
        )
        named[code] = cls
        numbered[status] = cls
    return named, numbered


#: Exception class for each registry name ("shape_mismatch" -> ShapeMismatchError).
by_code: dict[str, type[TgradError]]
#: Exception class for each numeric status.
by_status: dict[int, type[TgradError]]
by_code, by_status = _derive()
globals().update({cls.__name__: cls for cls in by_code.values()})
__all__ += [cls.__name__ for cls in by_code.values()]


def __getattr__(name: str) -> type[TgradError]:
    # Only reached for names the registry did not define; typed so static checkers accept the
    # derived classes (errors.ShapeMismatchError) as exception types.
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check(status: int) -> None:
    """Return for TGRAD_OK; else raise the registry's exception with this thread's detail."""
    if status == 0:
        return
    detail = _string(lib.tgrad_last_error())
    cls = by_status.get(int(status))
    if cls is not None:
        raise cls(detail)
    err = TgradError(detail or f"unknown status {int(status)}")
    err.status = int(status)
    raise err
