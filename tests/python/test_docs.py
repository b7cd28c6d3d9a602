"""The docs' tables are derived from the C sources: these tests keep them equal."""

from __future__ import annotations

import pathlib
import re

import tgrad
from tgrad._ffi import ffi, lib

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"


def _registry_rows() -> list[tuple[str, str, str, str, str]]:
    rows = []
    for code in range(lib.tgrad_status_count()):
        name = ffi.string(lib.tgrad_status_name(code)).decode()
        category = ffi.string(lib.tgrad_status_category(code)).decode()
        message = ffi.string(lib.tgrad_status_message(code)).decode()
        cls = "—" if code == 0 else tgrad.errors.by_code[name].__name__
        rows.append((str(code), name, category, cls, message))
    return rows


def _doc_rows() -> list[tuple[str, ...]]:
    text = (DOCS / "errors.md").read_text()
    rows = []
    for line in text.splitlines():
        m = re.match(r"^\| (\d+) \| `([a-z_]+)` \| (\w+) \| `?([^`|]+?)`? \| (.+) \|$", line)
        if m:
            rows.append(m.groups())
    return rows


def test_errors_doc_table_equals_the_registry() -> None:
    assert _doc_rows() == _registry_rows()
