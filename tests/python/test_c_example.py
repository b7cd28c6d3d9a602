"""A C program outside the library's build compiles against the pip-installed copy of libtgrad
through pkg-config, runs, and multiplies through views correctly."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

import tgrad

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "c" / "matmul.c"


def test_c_example_builds_with_pkg_config_and_runs(tmp_path: pathlib.Path) -> None:
    if not os.path.isdir(tgrad.pkgconfig_dir()):
        pytest.skip("runs against the pip-installed package (nox -s tests), not a source tree")
    pkg_config = shutil.which("pkg-config") or shutil.which("pkgconf")
    assert pkg_config, "pkg-config is needed (nox installs the pkgconf wheel)"
    env = dict(os.environ, PKG_CONFIG_PATH=str(tgrad.pkgconfig_dir()))
    flags = subprocess.run([pkg_config, "--cflags", "--libs", "tgrad"], env=env, check=True,
                           capture_output=True, text=True).stdout.split()
    exe = tmp_path / "matmul"
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, str(EXAMPLE), *flags, "-o", str(exe)], check=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert run.returncode == 0, run.stderr
    assert ", 0 wrong, checksum -7.0, live tensors 0" in run.stdout
