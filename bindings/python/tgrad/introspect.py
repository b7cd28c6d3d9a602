"""Seeing the runtime: explain plans, the capability table and the backends, from libtgrad.

- ``tgrad.explain(t)`` / ``t.explain()``: what realizing ``t`` runs (or ran), one line per kernel;
  ``json=True`` gives the same plan as a dict.
- ``tgrad.capabilities()``: the C capability table, one `Capability` row per (backend, capability).
- ``tgrad.backends()``: each backend libtgrad knows, whether it is built and available, and its
  device (or why it is not available).

``python -m tgrad capabilities [--markdown | --json]`` prints the table; docs/capabilities.md is
exactly ``python -m tgrad capabilities --markdown`` (tests/python/test_capabilities.py keeps it so).
"""

from __future__ import annotations

import argparse
import json
from typing import Any, NamedTuple

from ._ffi import _string, ffi, lib
from .errors import _check
from .tensor import Tensor

__all__ = ["Backend", "Capability", "backends", "capabilities", "capabilities_markdown", "explain"]


class Capability(NamedTuple):
    backend: str
    capability: str
    value: str
    note: str


class Backend(NamedTuple):
    name: str
    built: bool
    available: bool
    device: str


def explain(tensor: Tensor, *, json: bool = False) -> Any:
    """The plan of realizing `tensor` (text, or a dict with json=True); see Tensor.explain."""
    if not isinstance(tensor, Tensor):
        from . import errors

        raise errors.InvalidArgumentError(f"explain: expected a Tensor, got {type(tensor).__name__}")
    return tensor.explain(json=json)


def _rows(fill: Any, *out_types: str) -> list[list[Any]]:
    """Call an indexed C table until index_out_of_range; each row's out-parameters as cdata."""
    rows: list[list[Any]] = []
    end = int(lib.TGRAD_ERR_INDEX_OUT_OF_RANGE)
    while True:
        outs = [ffi.new(t) for t in out_types]
        status = fill(len(rows), *outs)
        if status == end:
            return rows
        _check(status)
        rows.append([o[0] for o in outs])


def capabilities() -> list[Capability]:
    """The capability table of libtgrad (tgrad_capability), in the C table's order."""
    rows = _rows(lib.tgrad_capability, "const char **", "const char **", "const char **",
                 "const char **")
    return [Capability(*(_string(p) for p in row)) for row in rows]


def backends() -> list[Backend]:
    """The backends libtgrad knows (tgrad_backend): name, built, available, device or reason."""
    rows = _rows(lib.tgrad_backend, "const char **", "int32_t *", "int32_t *", "const char **")
    return [Backend(_string(n), bool(b), bool(a), _string(d)) for n, b, a, d in rows]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def capabilities_markdown() -> str:
    """docs/capabilities.md: the capability table as generated Markdown (the same on every machine:
    the table is static; which backends this machine has is `backends()` and the doctor's job)."""
    lines = [
        "# Capabilities",
        "",
        "<!-- Generated from libtgrad's capability table (tgrad_capability) by",
        "     `python -m tgrad capabilities --markdown > docs/capabilities.md`. Do not edit by hand:",
        "     tests/python/test_capabilities.py regenerates it and fails when it differs. -->",
        "",
        "What each backend does with each kind of work: routes and their numerics, element types,",
        "how each view kind reaches a kernel (composed into its loads, materialized by a copy, or",
        "refused), and which refusals apply. Values are short words (`bit-exact`, `composed`,",
        "`materialized`, `refused`, `yes`, `no`, `not built`); the note says why. The same rows are",
        "`tgrad.capabilities()` in Python and `tgrad_capability()` in C; `python -m tgrad doctor`",
        "prints them for the library it loads.",
        "",
        "| backend | capability | value | note |",
        "|---|---|---|---|",
    ]
    lines += [f"| {_cell(r.backend)} | `{_cell(r.capability)}` | {_cell(r.value)} | {_cell(r.note)} |"
              for r in capabilities()]
    return "\n".join(lines) + "\n"


# ---- command line ---------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--markdown", action="store_true",
                      help="print docs/capabilities.md (the generated Markdown page)")
    form.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    if args.markdown:
        print(capabilities_markdown(), end="")
        return 0
    rows = capabilities()
    if args.json:
        print(json.dumps({"capabilities": [r._asdict() for r in rows],
                          "backends": [b._asdict() for b in backends()]}, indent=2, sort_keys=True))
        return 0
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(Capability._fields[:3])]
    header = Capability._fields
    print("  ".join(h.ljust(w) for h, w in zip(header[:3], widths)) + "  " + header[3])
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r[:3], widths)) + "  " + r.note)
    return 0
