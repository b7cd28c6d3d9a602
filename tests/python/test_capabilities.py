"""The capability table and the backend list, read from libtgrad; docs/capabilities.md is
generated from the same table and must equal what `python -m tgrad capabilities --markdown`
prints now (regenerate it with that command when the C table changes)."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

import tgrad
from tgrad import __main__ as cli
from tgrad import errors
from tgrad._ffi import ffi, lib
from tgrad.introspect import capabilities_markdown

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "capabilities.md"


def test_rows_are_four_nonempty_strings() -> None:
    rows = tgrad.capabilities()
    assert len(rows) >= 10
    for row in rows:
        assert isinstance(row, tgrad.Capability)
        assert all(isinstance(v, str) and v for v in row), row
    assert len({(r.backend, r.capability) for r in rows}) == len(rows), "one row per pair"


def test_every_backend_has_capability_rows() -> None:
    with_rows = {r.backend for r in tgrad.capabilities()}
    assert {b.name for b in tgrad.backends()} <= with_rows


def test_cpu_promises_bit_exact_matmul() -> None:
    cpu = {r.capability: r.value for r in tgrad.capabilities() if r.backend == "cpu"}
    assert cpu["matmul bf16 -> bf16"] == "bit-exact"


def test_backends_list_cpu_built_and_available() -> None:
    rows = tgrad.backends()
    names = [b.name for b in rows]
    assert names[0] == "cpu" and len(set(names)) == len(names)
    assert {"cpu", "metal", "opencl", "cuda"} <= set(names)
    cpu = rows[0]
    assert cpu.built and cpu.available and cpu.device
    for b in rows:
        assert isinstance(b, tgrad.Backend) and b.device, b
        assert b.built or not b.available, f"{b.name}: available but not built"


@pytest.mark.skipif(sys.platform == "darwin", reason="Metal may be built on macOS")
def test_metal_is_not_built_off_macos() -> None:
    metal = next(b for b in tgrad.backends() if b.name == "metal")
    assert (metal.built, metal.available) == (False, False)
    assert metal.device == "not built on this platform"


def test_the_c_table_ends_with_index_out_of_range() -> None:
    out = [ffi.new("const char **") for _ in range(4)]
    n = len(tgrad.capabilities())
    assert lib.tgrad_capability(n, *out) == errors.IndexOutOfRangeError.status
    assert lib.tgrad_capability(-1, *out) == errors.IndexOutOfRangeError.status
    assert lib.tgrad_capability(0, ffi.NULL, *out[1:]) == errors.InvalidArgumentError.status


def test_capabilities_doc_equals_the_generated_table() -> None:
    assert DOC.read_text() == capabilities_markdown(), (
        "docs/capabilities.md is stale: python -m tgrad capabilities --markdown > docs/capabilities.md")


def test_doc_table_has_a_row_per_capability() -> None:
    table = [line for line in DOC.read_text().splitlines() if line.startswith("| ") and "`" in line]
    assert len(table) == len(tgrad.capabilities())


def test_cli_prints_markdown_json_and_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["capabilities", "--markdown"]) == 0
    assert capsys.readouterr().out == capabilities_markdown()
    assert cli.main(["capabilities", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [tuple(r[k] for k in tgrad.Capability._fields) for r in data["capabilities"]] == \
        [tuple(r) for r in tgrad.capabilities()]
    assert [r["name"] for r in data["backends"]] == [b.name for b in tgrad.backends()]
    assert cli.main(["capabilities"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].split() == ["backend", "capability", "value", "note"]
    assert len(text.splitlines()) == len(tgrad.capabilities()) + 1
