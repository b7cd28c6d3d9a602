"""The op registry (TGRAD_OP_LIST in tgrad.h) through the C ABI: frozen codes, names, arities."""

from __future__ import annotations

import re
from pathlib import Path

from tgrad._ffi import ffi, lib

HEADER = Path(__file__).resolve().parents[2] / "libtgrad" / "include" / "tgrad.h"

# Frozen: written by hand on purpose, so a renumbering or a rename fails here.
FROZEN = {
    1: ("relu", 1), 2: ("gelu", 1), 3: ("gelu_tanh", 1), 4: ("silu", 1), 5: ("sigmoid", 1),
    6: ("tanh", 1), 7: ("exp", 1), 8: ("neg", 1), 9: ("abs", 1), 10: ("square", 1), 11: ("rsqrt", 1),
    12: ("add", 2), 13: ("sub", 2), 14: ("mul", 2), 15: ("div", 2), 16: ("maximum", 2),
    17: ("minimum", 2),
}


def registry() -> dict[int, tuple[str, int]]:
    return {op: (ffi.string(lib.tgrad_op_name(op)).decode(), int(lib.tgrad_op_arity(op)))
            for op in range(1, lib.tgrad_op_count() + 1)}


def test_frozen_codes_keep_their_names_and_arities() -> None:
    entries = registry()
    for op, expected in FROZEN.items():
        assert entries[op] == expected, f"op {op} was renamed or renumbered"


def test_the_library_answers_what_the_header_lists() -> None:
    body = HEADER.read_text().split("#define TGRAD_OP_LIST(X)", 1)[1].split("\n\n", 1)[0]
    listed = {int(code): (name, int(arity))
              for code, name, arity in re.findall(r"X\((\d+), \w+, (\w+), (\d)\)", body)}
    assert len(listed) == lib.tgrad_op_count() >= len(FROZEN)
    assert registry() == listed


def test_codes_outside_the_registry_name_no_op() -> None:
    for op in (0, -1, lib.tgrad_op_count() + 1, 2**31 - 1):
        assert ffi.string(lib.tgrad_op_name(op)) == b"unknown_op"
        assert lib.tgrad_op_arity(op) == 0
    assert lib.TGRAD_OP_NONE == 0


def test_numerics_doc_table_lists_every_op() -> None:
    text = (HEADER.parents[2] / "docs" / "numerics.md").read_text()
    section = text.split("## Elementwise ops", 1)[1].split("\n## ", 1)[0]
    rows = {int(code): (name, int(arity))
            for code, name, arity in re.findall(r"^\| (\d+) \| `(\w+)` \| (\d) \|", section, re.M)}
    assert rows == registry()
