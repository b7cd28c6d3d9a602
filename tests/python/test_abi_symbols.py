"""The exported symbol list is part of the ABI: it is committed (libtgrad/exported_symbols.txt) and
compared with the library. Adding a function means adding its line here in the same change;
removing or changing one is a major-version change (README, ABI policy)."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import tgrad

LIST = pathlib.Path(__file__).resolve().parents[2] / "libtgrad" / "exported_symbols.txt"


def exported_symbols(library: str) -> list[str]:
    nm = shutil.which("nm")
    assert nm, "nm (binutils) is needed to read the library's dynamic symbols"
    out = subprocess.run([nm, "-D", "--defined-only", library], check=True, capture_output=True, text=True).stdout
    return sorted(line.split()[-1] for line in out.splitlines() if line.split()[-2] in ("T", "D", "B", "R"))


def test_exported_symbols_equal_the_committed_list() -> None:
    committed = [line.strip() for line in LIST.read_text().splitlines() if line.strip() and not line.startswith("#")]
    actual = exported_symbols(tgrad.library_path())
    assert actual == sorted(committed), (
        f"added: {sorted(set(actual) - set(committed))}, removed: {sorted(set(committed) - set(actual))}"
    )


def test_only_tgrad_symbols_are_exported() -> None:
    assert all(name.startswith("tgrad_") for name in exported_symbols(tgrad.library_path()))
