"""The MSL and CUDA emulators (tests/msl_emu, tests/cuda_emu) for the GPU route tests: one
Emulator per language, or a skip where no C++ compiler can build their kernels."""

from __future__ import annotations

from typing import Any

import pytest


def emulator(lang: str) -> Any:
    """The emulator of `lang` ("msl" or "cuda")."""
    if lang == "msl":
        from msl_emu.driver import Emulator, find_cxx
    else:
        from cuda_emu.driver import Emulator, find_cxx
    if find_cxx() is None:
        pytest.skip("no C++ compiler for the emulators")
    return Emulator()


@pytest.fixture(scope="module")
def msl() -> Any:
    """The MSL emulator, one per test module (import it into a test module as a fixture)."""
    return emulator("msl")
