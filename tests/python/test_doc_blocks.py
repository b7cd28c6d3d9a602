"""Every ```python block of README.md and docs/*.md runs as written, alone, in a fresh directory
(issue 33): a block that stops running fails here. A block is self-contained: it imports what it
uses and makes the files it reads (in a temporary directory).

Each block runs in this process (a child Python per block would cost 1-2 s each), with a fresh
globals dict and a fresh working directory. A block that needs a heavy peer (torchlens, dask) is
marked `interop` and runs in `nox -s interop`; a block for a GPU backend runs where that backend
is available and is skipped, naming it, where it is not (Metal off macOS; OpenCL and CUDA through
the `opencl_device` and `cuda_device` fixtures, so TGRAD_REQUIRE_OPENCL/CUDA=1 fail the skip). A doctest-style block
(``>>>`` lines) runs its input lines; its output lines show one machine's output and are not
compared."""

from __future__ import annotations

import pathlib
import re
from typing import Any

import pytest

import tgrad

ROOT = pathlib.Path(__file__).resolve().parents[2]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
#: What a block needs, by what its text names: (pattern, marker or backend).
HEAVY = {r"\btorchlens\b": "interop", r"\btgrad\.dask\b": "interop"}
DEVICES = ("metal", "opencl", "cuda")


def source(block: str) -> str:
    """The code of a block: as written, or the input lines of a doctest-style one."""
    lines = block.splitlines()
    if not any(line.startswith(">>> ") for line in lines):
        return block
    return "\n".join(line[4:] for line in lines if line.startswith((">>> ", "... ")))


def blocks() -> list[Any]:
    found = []
    for path in FILES:
        text = path.read_text()
        for match in BLOCK.finditer(text):
            line = text[: match.start()].count("\n") + 1
            code = source(match.group(1))
            marks = [getattr(pytest.mark, mark) for pattern, mark in HEAVY.items() if re.search(pattern, code)]
            device = next((d for d in DEVICES if f'device="{d}"' in code or f'.to("{d}")' in code), None)
            found.append(pytest.param(code, device, id=f"{path.relative_to(ROOT)}:{line}", marks=marks))
    return found


def test_the_docs_have_python_blocks() -> None:
    assert len(blocks()) >= 15


@pytest.mark.parametrize(("code", "device"), blocks())
def test_a_documentation_block_runs_alone(code: str, device: str | None, tmp_path: pathlib.Path,
                                         monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    if device in ("opencl", "cuda"):  # skipped where unavailable, failed under TGRAD_REQUIRE_<DEVICE>=1
        request.getfixturevalue(f"{device}_device")
    elif device is not None:
        row = {b.name: b for b in tgrad.backends()}[device]
        if not row.available:
            pytest.skip(f"{device}: {row.device} (macOS only)")
    for pattern, module in ((r"\btorchlens\b", "torchlens"), (r"\btgrad\.dask\b", "dask")):
        if re.search(pattern, code):  # an interop block where its peer is absent (nox -s sanitize):
            pytest.importorskip(module)  # skipped, as every interop test is (a failure under nox -s interop)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "__doc_block__"}
    try:
        exec(compile(code, "<doc block>", "exec"), namespace)  # noqa: S102 - the docs' own code
    finally:
        namespace.clear()
        if re.search(r"\btorchlens\b", code):  # a block that activated tgrad's provider: undo it,
            from torchlens.backends.registry import unregister_backend_spec  # or the next activation

            unregister_backend_spec("tgrad")  # in this worker (test_torchlens) is refused
