"""The package as installed (or as imported: the source tree under PYTHONPATH) is clean under
`mypy --strict` (issue 6). mypy comes with the `test` extra."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tgrad

pytestmark = pytest.mark.typecheck


def test_package_is_clean_under_mypy_strict(tmp_path: Path) -> None:
    package = Path(tgrad.__file__).resolve().parent
    assert (package / "py.typed").is_file(), f"{package} does not ship py.typed"
    # mypy is given a copy of the package's sources, checked from the copy's directory: a path
    # inside site-packages would make mypy take site-packages for a source root (where mypy's own
    # modules then "shadow" themselves), and a fresh directory has no config file or source tree
    # nearby to change what is checked. Third-party imports still resolve in site-packages.
    src = tmp_path / "src"
    shutil.copytree(package, src / "tgrad",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.so.*", "*.dylib", "*.dll", "conformance"))
    # mypy only reads the sources: it needs no libtgrad and no sanitizer preloads.
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MYPYPATH")}
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), "tgrad"],
        cwd=src, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"mypy --strict {package}:\n{result.stdout}{result.stderr}"
    assert "Success: no issues found" in result.stdout


def test_package_is_clean_under_pyright(tmp_path: Path) -> None:
    from typecheckers import pyright_command

    package = Path(tgrad.__file__).resolve().parent
    src = tmp_path / "src"
    shutil.copytree(package, src / "tgrad",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.so.*", "*.dylib", "*.dll", "conformance"))
    # pyright's default rules ("standard"), stated: basedpyright would otherwise apply its own
    # stricter default; the corpus (test_typecheck_corpus.py) holds users' programs to "strict"
    (src / "pyrightconfig.json").write_text('{"typeCheckingMode": "standard", "pythonVersion": "3.11"}')
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    result = subprocess.run([*pyright_command(), "--pythonpath", sys.executable, "tgrad"],
                            cwd=src, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"pyright {package}:\n{result.stdout}{result.stderr}"
    assert "0 errors" in result.stdout
