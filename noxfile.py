"""Sessions: `nox -s tests` (C ABI tests + the Python suite against the pip-installed package),
`nox -s bench` (the benchmark suite with live peers)."""

from __future__ import annotations

import pathlib
import shutil

import nox

nox.options.sessions = ["tests"]

ROOT = pathlib.Path(__file__).parent


@nox.session
def tests(session: nox.Session) -> None:
    """C tests (meson test) then pytest against the package as `pip install .` builds it."""
    session.install("meson>=1.1", "ninja")
    build = pathlib.Path(session.create_tmp()) / "build-c"
    shutil.rmtree(build, ignore_errors=True)
    session.run("meson", "setup", str(build), "--buildtype=debugoptimized")
    session.run("meson", "test", "-C", str(build), "--print-errorlogs")
    session.install(".[test]", "pkgconf")
    # Run from tests/ so that the source tree cannot shadow the installed packages.
    session.chdir(ROOT / "tests")
    session.run("pytest", "-q", "python", *session.posargs, env={"TGRAD_LIB": ""})


@nox.session
def bench(session: nox.Session) -> None:
    """The benchmark suite; torch (CPU, 2.13.0) is installed as a peer when it is obtainable."""
    session.install(".", "tqdm", "matplotlib")
    try:
        session.install("torch==2.13.0", silent=True)
    except nox.command.CommandFailed:
        session.log("torch not installable here: it is left out of the peers")
    session.chdir(ROOT)
    session.run("python", "-m", "tgrad", "bench", *session.posargs)
