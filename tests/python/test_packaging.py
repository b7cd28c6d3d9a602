"""Packaging (issue 24): one version everywhere, the metadata a package index shows, the wheel's tag
and layout (cp3X-abi3-<platform>: cffi in ABI mode, and one CPython extension on the stable ABI,
tgrad._native, Tensor's hot path), the conformance kit
inside the tgrad namespace, and the documented commands run from any directory against the
installed layout. The tests that build a wheel or start child interpreters are marked slow."""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import tgrad
from tgrad import __main__ as cli

ROOT = Path(__file__).resolve().parents[2]
HEADER = ROOT / "libtgrad" / "include" / "tgrad.h"
WHEEL_TAG = re.compile(r"^Tag: cp3\d+-abi3-(?P<platform>\S+)$", re.M)
#: The one compiled module in the wheel (the stable ABI's suffix; Linux and macOS).
NATIVE = "tgrad/_native.abi3.so"


def _meson_version() -> str:
    found = re.search(r"project\(\s*'tgrad'.*?version\s*:\s*'([^']+)'", (ROOT / "meson.build").read_text(), re.S)
    assert found, "meson.build: no project version"
    return found.group(1)


def _header_versions() -> tuple[str, str]:
    """(MAJOR.MINOR.PATCH from the three macros, TGRAD_VERSION_STRING)."""
    text = HEADER.read_text()
    parts = [re.search(rf"#define TGRAD_VERSION_{name} (\d+)", text) for name in ("MAJOR", "MINOR", "PATCH")]
    string = re.search(r'#define TGRAD_VERSION_STRING "([^"]+)"', text)
    assert all(parts) and string
    return ".".join(p.group(1) for p in parts if p), string.group(1)


def _pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _installed() -> importlib.metadata.Distribution | None:
    """The distribution that installed the tgrad this process imported; None for a source tree
    (where another, stale installation must not be mistaken for it)."""
    try:
        dist = importlib.metadata.distribution("tgrad")
    except importlib.metadata.PackageNotFoundError:
        return None
    init = Path(str(dist.locate_file("tgrad/__init__.py")))
    return dist if init.exists() and init.resolve() == Path(tgrad.__file__).resolve() else None


# ---- one version ---------------------------------------------------------------------------------
def test_one_version_in_meson_the_header_pyproject_and_the_package() -> None:
    version = _meson_version()
    assert _header_versions() == (version, version)
    project = _pyproject()["project"]
    assert "version" not in project and "version" in project["dynamic"], \
        "pyproject.toml takes the version from meson.build (dynamic), it does not repeat it"
    assert tgrad.__version__ == version
    dist = _installed()
    if dist is not None:
        assert dist.version == version


def test_version_flag_prints_the_package_and_the_library(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out == f"tgrad {tgrad.__version__} (libtgrad {tgrad.version()} at {tgrad.library_path()})\n"


# ---- what an index shows -------------------------------------------------------------------------
def test_pyproject_has_the_metadata_an_index_shows() -> None:
    project = _pyproject()["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]  # PEP 639
    license_text = (ROOT / "LICENSE").read_text()
    assert license_text.startswith("MIT License") and "Copyright (c) the tgrad authors" in license_text
    assert project["authors"] == [{"name": "the tgrad authors"}]
    assert (ROOT / project["readme"]).is_file() and project["keywords"]
    classifiers = project["classifiers"]
    assert not [c for c in classifiers if c.startswith("License ::")], "PEP 639: the license is the expression"
    assert "Typing :: Typed" in classifiers and "Programming Language :: Python :: 3 :: Only" in classifiers
    dist = _installed()
    if dist is not None:
        assert dist.metadata["License-Expression"] == "MIT"
        assert dist.metadata["Author"] == "the tgrad authors"


# ---- the README's set-up -------------------------------------------------------------------------
def test_readme_first_command_installs_the_extras_the_full_report_needs() -> None:
    readme = (ROOT / "README.md").read_text()
    first = next(line.strip() for line in readme.splitlines() if line.startswith("    pip install"))
    assert first.startswith('pip install ".[bench]" && python -m tgrad bench'), first
    extras = _pyproject()["project"]["optional-dependencies"]
    bench = {re.split(r"[<>=\[ ]", req)[0] for req in extras["bench"]}
    assert {"matplotlib", "tqdm", "threadpoolctl"} <= bench
    documented = set(re.findall(r"^\| `([a-z]+)` \| ", readme, re.M))
    assert set(extras) <= documented, f"README's extras table misses {set(extras) - documented}"


def test_readme_builds_c_examples_that_exist() -> None:
    sources = re.findall(r"\bcc (\S+\.c)\b", (ROOT / "README.md").read_text())
    assert sources and all((ROOT / source).is_file() for source in sources), sources


# ---- the wheel's layout, as installed ------------------------------------------------------------
def test_installed_package_is_tagged_abi3_platform_with_the_c_hot_path() -> None:
    dist = _installed()
    if dist is None:
        pytest.skip("checks the pip-installed package (nox); test_built_wheel_* checks a fresh wheel")
    tag = WHEEL_TAG.search(dist.read_text("WHEEL") or "")
    assert tag and tag.group("platform") != "any", dist.read_text("WHEEL")
    files = {str(f) for f in dist.files or ()}
    assert ".tgrad.mesonpy.libs/libtgrad.so" in files or sys.platform != "linux", sorted(files)[:20]
    assert not [f for f in files if f.startswith("conformance/")], "no top-level `conformance` package"
    assert NATIVE in files, sorted(f for f in files if f.startswith("tgrad/_"))
    from tgrad import _tensor_base

    assert _tensor_base.implementation() == ("python" if os.environ.get("TGRAD_NATIVE") == "0" else "native")


def test_the_conformance_kit_and_its_scorecards_ship_inside_tgrad() -> None:
    from tgrad import doctor
    from tgrad.conformance import runner

    scorecards = importlib.resources.files("tgrad.conformance") / "scorecards"
    assert (scorecards / "cpu.json").is_file()
    assert Path(str(scorecards)).resolve() == runner.SCORECARD_DIR
    assert doctor._scorecard_dir(None) == runner.SCORECARD_DIR


@pytest.mark.skipif(sys.platform != "linux", reason="the copy is named libtgrad.so")
def test_library_where_the_wheel_puts_it_is_found_without_tgrad_lib(tmp_path: Path) -> None:
    site = tmp_path / "site"
    shutil.copytree(Path(tgrad.__file__).parent, site / "tgrad",
                    ignore=shutil.ignore_patterns("__pycache__", "libtgrad*", "conformance"))
    libs = site / ".tgrad.mesonpy.libs"
    libs.mkdir()
    shutil.copy(os.path.realpath(tgrad.library_path()), libs / "libtgrad.so")
    env = {k: v for k, v in os.environ.items() if k not in ("TGRAD_LIB", "PYTHONPATH")}
    result = subprocess.run([sys.executable, "-c", "import tgrad; print(tgrad.library_path())"],
                            env=dict(env, PYTHONPATH=str(site)), capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(libs / "libtgrad.so")


# ---- a fresh wheel, installed, used from another directory (slow: builds libtgrad) ---------------
@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "PYTHONPATH")}
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(out)],
                           env=env, capture_output=True, text=True, timeout=900, check=False)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (found,) = out.glob("tgrad-*.whl")
    return found


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed into a directory of its own (its dependencies come from this venv)."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    return target


@pytest.mark.slow
def test_built_wheel_is_abi3_platform_with_its_license_and_one_top_level_package(wheel: Path) -> None:
    assert re.fullmatch(r"tgrad-[^-]+-cp3\d+-abi3-(?!any)[^-]+\.whl", wheel.name), wheel.name
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/WHEEL"))
        assert WHEEL_TAG.search(whl.read(f"{info}/WHEEL").decode())
        metadata = whl.read(f"{info}/METADATA").decode()
        assert f"{info}/licenses/LICENSE" in names
    assert "\nLicense-Expression: MIT\n" in metadata and f"\nVersion: {_meson_version()}\n" in metadata
    tops = {n.split("/")[0] for n in names} | {n.split("/")[2] for n in names if "/purelib/" in n}
    assert "conformance" not in tops, "the kit ships as tgrad.conformance, not a top-level package"
    compiled = [n for n in names if re.search(r"\.cpython-|\.abi3\.|\.pyd$", n)]
    assert compiled == [NATIVE] or sys.platform not in ("linux", "darwin"), compiled
    assert [n for n in names if n.endswith("/scorecards/cpu.json")], "the committed scorecards ship"


def _run_elsewhere(installed: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TGRAD_LIB", "PYTHONPATH", "LD_PRELOAD")}
    env["PYTHONPATH"] = str(installed)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600, check=False)


@pytest.mark.slow
def test_documented_commands_run_from_any_directory_against_the_installed_wheel(
        installed: Path, tmp_path: Path) -> None:
    version = _run_elsewhere(installed, tmp_path, "-m", "tgrad", "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith(f"tgrad {_meson_version()} (libtgrad {_meson_version()} at {installed}")

    check = _run_elsewhere(installed, tmp_path, "-m", "tgrad.conformance", "--backend", "cpu", "--check")
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]
    assert f"equal {installed / 'tgrad' / 'conformance' / 'scorecards' / 'cpu.json'}" in check.stdout

    doctor = _run_elsewhere(installed, tmp_path, "-m", "tgrad", "doctor", "--no-peak", "--json")
    report = json.loads(doctor.stdout)
    cards = {c["name"]: c["state"] for c in report["checks"] if c["name"].startswith("scorecard")}
    assert cards.get("scorecard cpu") == "PASS", report["checks"]

    hot = _run_elsewhere(installed, tmp_path, "-c",
                         "import tgrad._tensor_base as b, tgrad; print(b.implementation(), tgrad.Tensor.__base__)")
    assert hot.stdout.split()[:2] == ["native", "<class"] and "_native.TensorBase" in hot.stdout, \
        hot.stdout + hot.stderr

    old = _run_elsewhere(installed, tmp_path, "-c", "import conformance")
    assert old.returncode != 0 and "No module named 'conformance'" in old.stderr


def test_import_tgrad_leaves_ml_dtypes_for_first_use() -> None:
    # ml_dtypes 0.7 spends about a second of CPU importing; `import tgrad` (the CLI's doctor,
    # explain and render, to_bytes users) must not pay it. The first bfloat16 array imports it.
    code = ("import sys, numpy as np, tgrad\n"
            "assert 'ml_dtypes' not in sys.modules, 'import tgrad imported ml_dtypes'\n"
            "t = tgrad.Tensor.from_numpy(np.ones((2, 3), np.float32))\n"
            "assert t.to_bytes() == b'\\x80?' * 6 and 'ml_dtypes' not in sys.modules\n"
            "assert t.numpy(np.float32).sum() == 6 and 'ml_dtypes' not in sys.modules\n"
            "assert str(t.numpy().dtype) == 'bfloat16' and 'ml_dtypes' in sys.modules\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSTARTUP"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
