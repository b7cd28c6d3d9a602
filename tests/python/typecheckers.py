"""Run mypy --strict and pyright (strict) over a directory of programs and read back their errors
as {(file name, line): {error codes}}: shared by the typed-shapes corpus and the stub tests."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import tgrad

#: Where `import tgrad` resolves from: the checkers are pointed there (the source tree under
#: PYTHONPATH, or site-packages where it is installed).
TGRAD_ROOT = str(Path(tgrad.__file__).resolve().parents[1])
_MYPY_LINE = re.compile(r"^(?P<file>[^:\s]+\.pyi?):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$")


def _env() -> dict[str, str]:
    # The checkers only read sources: no libtgrad, no sanitizer preloads.
    return {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MYPYPATH")}


def mypy_errors(directory: Path) -> dict[tuple[str, int], set[str]]:
    env = _env()
    if "-packages" not in TGRAD_ROOT:
        env["MYPYPATH"] = TGRAD_ROOT
    run = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull,
                          "--follow-imports=silent", "--hide-error-context", "--no-pretty", "."],
                         cwd=directory, env=env, capture_output=True, text=True, timeout=600)
    found: dict[tuple[str, int], set[str]] = {}
    for line in run.stdout.splitlines():
        if (m := _MYPY_LINE.match(line)) is not None:
            found.setdefault((Path(m["file"]).name, int(m["line"])), set()).add(m["code"])
    assert run.returncode in (0, 1), f"mypy failed to run:\n{run.stdout}{run.stderr}"
    return found


def pyright_command() -> list[str]:
    """pyright's checker from the `typecheck` extra: basedpyright, a wheel on PyPI that carries
    pyright's checker and a node to run it (pip's `pyright` package instead downloads the checker
    from npm at first use, which a machine that reaches only PyPI cannot). With the
    typeCheckingMode the config names ("strict") it applies pyright's rules; a plain `pyright`
    on PATH is used where basedpyright is absent."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    exe = shutil.which("basedpyright", path=path) or shutil.which("pyright", path=path)
    assert exe is not None, "pyright is not installed: pip install 'tgrad[typecheck]' (basedpyright)"
    return [exe]


def pyright_errors(directory: Path) -> dict[tuple[str, int], set[str]]:
    config = {"typeCheckingMode": "strict", "pythonVersion": "3.11", "include": ["."],
              "extraPaths": [] if "-packages" in TGRAD_ROOT else [TGRAD_ROOT]}
    (directory / "pyrightconfig.json").write_text(json.dumps(config))
    run = subprocess.run([*pyright_command(), "--outputjson", "--pythonpath", sys.executable], cwd=directory,
                         env=_env(), capture_output=True, text=True, timeout=600)
    try:
        report = json.loads(run.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"pyright failed to run:\n{run.stdout}{run.stderr}") from None
    found: dict[tuple[str, int], set[str]] = {}
    for diag in report["generalDiagnostics"]:
        if diag["severity"] == "error":
            key = (Path(diag["file"]).name, diag["range"]["start"]["line"] + 1)
            found.setdefault(key, set()).add(diag.get("rule", "error"))
    return found
