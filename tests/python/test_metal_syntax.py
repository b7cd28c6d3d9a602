"""The Metal backend's Objective-C (libtgrad/src/backend/metal.m), checked without a Mac.

No Apple SDK exists here, so clang type-checks metal.m under ARC against the hand-written stub
headers of tests/metal_stub, which declare only the Foundation and Metal interfaces metal.m uses,
as Apple's headers spell them. That catches misspelt selectors and properties, wrong argument
types, missing bridged casts and unguarded deprecated calls; it does not prove metal.m compiles
against the real SDK, links, or runs (docs/metal.md). Skipped when clang is absent: CI needs
clang installed (Debian: `apt-get install clang`) for these tests to run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
METAL_M = ROOT / "libtgrad" / "src" / "backend" / "metal.m"
BACKEND_H = ROOT / "libtgrad" / "src" / "backend.h"
CLANG = shutil.which("clang")

needs_clang = pytest.mark.skipif(CLANG is None, reason="clang is not installed (CI: apt-get install clang)")


def _syntax_check(path: Path) -> subprocess.CompletedProcess[str]:
    """clang -fsyntax-only with the flags meson gives metal.m (ARC, the library's warnings as errors),
    plus a runtime that supports ARC: a Linux target's default (GNU) runtime does not."""
    assert CLANG is not None
    cmd = [CLANG, "-fsyntax-only", "-x", "objective-c", "-fobjc-arc", "-fobjc-runtime=macosx-11.0",
           "-Wall", "-Wextra", "-Werror", "-DTGRAD_BUILDING", "-DTGRAD_HAVE_METAL", "-fvisibility=hidden",
           "-I", str(ROOT / "tests" / "metal_stub"), "-I", str(ROOT / "libtgrad" / "include"),
           "-I", str(ROOT / "libtgrad" / "src"), str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _mutant(tmp_path: Path, old: str, new: str) -> Path:
    text = METAL_M.read_text()
    assert old in text, f"metal.m no longer contains {old!r}: update this negative test"
    path = tmp_path / "metal.m"
    path.write_text(text.replace(old, new, 1))
    return path


@needs_clang
def test_metal_m_type_checks_under_arc_against_the_stub_headers() -> None:
    result = _syntax_check(METAL_M)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


@needs_clang
@pytest.mark.parametrize(
    ("old", "new", "diagnostic"),
    [
        ("setComputePipelineState:", "setComputePipeline:", "no known instance method"),
        ("(__bridge_retained void *)pipeline", "(void *)pipeline", "requires a bridged cast"),
        ("MTLSizeMake(grid[0], grid[1], grid[2])", "grid", "incompatible type 'MTLSize'"),
        ("command_buffer.status", "command_buffer.state", "property 'state' not found"),
        ("error:&error];\n        if (library", "error:error];\n        if (library", "disallowed with ARC"),
        ('#pragma clang diagnostic ignored "-Wdeprecated-declarations"', "", "'fastMathEnabled' is deprecated"),
    ],
    ids=["misspelt-selector", "unbridged-cast", "wrong-argument-type", "unknown-property",
         "error-out-parameter", "deprecated-fast-math-unguarded"],
)
def test_the_stub_check_catches_a_broken_metal_m(tmp_path: Path, old: str, new: str, diagnostic: str) -> None:
    result = _syntax_check(_mutant(tmp_path, old, new))
    assert result.returncode != 0
    assert diagnostic in result.stderr, result.stderr


def test_metal_m_fills_every_slot_of_the_backend_interface() -> None:
    """A slot left out of the designated initializer would be NULL and crash device.c at run time."""
    header = BACKEND_H.read_text()
    struct = header[header.index("typedef struct tg_backend {"):header.index("} tg_backend;")]
    slots = re.findall(r"\(\*(\w+)\)\(", struct) + re.findall(r"^\s*(?:const char \*|int32_t )(\w+);", struct, re.M)
    assert {"init", "launch", "has_matrix_route", "name", "lang"} <= set(slots)
    source = METAL_M.read_text()
    for slot in slots:
        assert re.search(rf"^\s*\.{slot} = ", source, re.M), f"metal.m does not set .{slot}"
    assert re.search(r"^const tg_backend \*const tg_backend_metal = &metal_backend;$", source, re.M)


def test_metal_m_compiles_fast_math_off_and_requests_msl_2_3() -> None:
    source = METAL_M.read_text()
    assert "options.fastMathEnabled = NO;" in source
    assert "options.mathMode = MTLMathModeSafe;" in source
    assert "options.languageVersion = MTLLanguageVersion2_3;" in source
    assert "use_exact_math(options);" in source


def test_meson_builds_metal_only_on_macos() -> None:
    build = (ROOT / "libtgrad" / "meson.build").read_text()
    branch = build[build.index("if host_machine.system() == 'darwin'"):]
    branch = branch[:branch.index("endif")]
    for line in ("add_languages('objc', native : false, required : true)", "files('src/backend/metal.m')",
                 "dependency('appleframeworks'", "-DTGRAD_HAVE_METAL"):
        assert line in branch
    assert build.count("src/backend/metal.m") == 1  # nowhere outside the macOS branch
    assert "objc_args : c_args + ['-fobjc-arc']" in build


def test_tc_launches_refuse_a_simd_width_other_than_32_before_encoding() -> None:
    """The tc kernels spread 8x8 simdgroup matrices over 32 lanes (issue 21's audit): metal_launch
    compares the pipeline's threadExecutionWidth with 32 for them and refuses, typed, before it
    encodes anything. Only the text is checked here: nothing runs metal.m without a Mac."""
    source = METAL_M.read_text()
    launch = source[source.index("static tgrad_status metal_launch("):]
    launch = launch[:launch.index("\n}\n")]
    check = launch.index("pipeline.threadExecutionWidth")
    assert check < launch.index("computeCommandEncoder")
    refusal = launch[check:launch.index("@autoreleasepool")]
    assert "needs_simd_width_32(launch) && simd_width != TC_SIMD_WIDTH" in refusal
    assert "TGRAD_ERR_ROUTE_NOT_ELIGIBLE" in refusal
    assert "enum { TC_SIMD_WIDTH = 32 };" in source


def test_the_tc_prefix_metal_m_checks_is_the_one_the_renderer_names_tc_kernels() -> None:
    import numpy as np

    import tgrad
    from tgrad import render as R

    prefix = re.search(r'static const char TC_KERNEL_PREFIX\[\] = "(\w+)";', METAL_M.read_text())
    assert prefix is not None
    with tgrad.Tensor.from_numpy(np.ones((16, 16), np.float32)) as a:
        names = {route: R.render_matmul(a, a, route).name for route in ("naive", "tiled", "tc")}
    assert names["tc"].startswith(prefix.group(1))
    assert not names["naive"].startswith(prefix.group(1)) and not names["tiled"].startswith(prefix.group(1))
