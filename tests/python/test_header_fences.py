"""tgrad.h fences what is not frozen (the tgrad_debug_* calls; struct tgrad_launch with the
tgrad_render_* calls) in EXPERIMENTAL blocks: declared by default, hidden by -DTGRAD_STABLE_ONLY,
shown again by -DTGRAD_EXPERIMENTAL_API. Every other declaration stays visible either way."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from test_cdef import HEADER, c_compiler, parse_declarations, preprocess

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "tests" / "c" / "test_stable_only.c"
EXPERIMENTAL_PREFIXES = ("tgrad_debug_", "tgrad_render_")


def functions(tmp: Path, *defines: str) -> set[str]:
    source = "".join(f"#define {d}\n" for d in defines) + '#include "tgrad.h"\n'
    return set(parse_declarations(preprocess(source, tmp)).functions)


def test_stable_only_hides_exactly_the_experimental_calls(tmp_path: Path) -> None:
    everything = functions(tmp_path)
    stable = functions(tmp_path, "TGRAD_STABLE_ONLY")
    experimental = {f for f in everything if f.startswith(EXPERIMENTAL_PREFIXES)}
    assert len(experimental) >= 8, sorted(experimental)  # the parse found the fenced blocks
    assert everything - stable == experimental
    assert stable <= everything
    assert functions(tmp_path, "TGRAD_STABLE_ONLY", "TGRAD_EXPERIMENTAL_API") == everything


def test_the_fences_say_experimental() -> None:
    text = HEADER.read_text()
    assert text.count("EXPERIMENTAL: not part of the stable ABI; may change in any release") == 2
    fenced = text.split("#if defined(TGRAD_EXPERIMENTAL_API)")[1:]
    assert len(fenced) == 2
    assert "struct tgrad_launch {" in fenced[1].split("#endif")[0]


def compile_probe(tmp: Path, *defines: str) -> subprocess.CompletedProcess[str]:
    cmd = [*c_compiler().split(), "-fsyntax-only", "-std=c11", "-I", str(HEADER.parent),
           *(f"-D{d}" for d in defines), str(PROBE)]
    return subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tmp)


def test_c_program_compiles_against_the_stable_api_only(tmp_path: Path) -> None:
    # meson builds and runs the same program (tests/c: stable-only); here it is shown to bite.
    result = compile_probe(tmp_path, "TGRAD_STABLE_ONLY")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("defines", [(), ("TGRAD_STABLE_ONLY", "TGRAD_EXPERIMENTAL_API")], ids=["default", "opted-in"])
def test_probe_fails_where_the_experimental_api_is_visible(tmp_path: Path, defines: tuple[str, ...]) -> None:
    result = compile_probe(tmp_path, *defines)
    assert result.returncode != 0
    for name in ("TGRAD_STABLE_ONLY", "tgrad_render_matmul", "tgrad_debug_elementwise", "tgrad_launch"):
        assert name in result.stderr, result.stderr
