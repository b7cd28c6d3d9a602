"""docs/architecture.md, the map of the code, names only files and directories that exist: a moved
or renamed file fails here until the map follows it."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
# Tables name files relative to the directory of their section ("`plan.c`" under libtgrad/src/cpu/).
BASES = ["", "libtgrad/src/", "libtgrad/src/cpu/", "libtgrad/src/gen/", "libtgrad/src/ops/", "kernels/cpu/",
         "bindings/python/tgrad/", "kernels/", "libtgrad/include/", "tests/python/"]


def named_paths(text: str) -> set[str]:
    """Backticked words that look like a path: a file with an extension, or a name ending in /."""
    words = set(re.findall(r"`([\w./-]+)`", text))
    return {w for w in words if "<" not in w and (w.endswith("/") or re.search(r"\.(c|h|m|py|md|txt|build|json)$", w))}


def exists(path: str) -> bool:
    return any((ROOT / base / path).exists() for base in BASES)


def test_every_path_in_the_map_exists() -> None:
    paths = named_paths(DOC.read_text())
    assert len(paths) >= 60, sorted(paths)  # the pattern still finds the map's paths
    assert sorted(p for p in paths if not exists(p)) == []


def test_a_missing_path_is_caught() -> None:
    assert named_paths("see `libtgrad/src/nowhere.c` and `kernels/`") == {"libtgrad/src/nowhere.c", "kernels/"}
    assert not exists("libtgrad/src/nowhere.c")
