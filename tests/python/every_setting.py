"""The sweep every op's "same bytes everywhere" test runs: each runnable CPU variant, 1-3 threads,
fusion on and off, against the bytes of the settings the test started with; the settings are
restored afterwards, whatever happens (conftest's keeps_the_cpu_variant checks that).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import tgrad


def assert_same_bytes_everywhere(run: Callable[[], Any], threads: tuple[int, ...] = (1, 2, 3)) -> None:
    """run() (bytes, or a list of them) gives the same result on every variant, thread count and
    fusion setting as it gives now."""
    isa, before, fusion = tgrad._cpu_isa_setting(), tgrad.num_threads(), tgrad.fusion_enabled()
    try:
        want = run()
        for variant, ok in tgrad.cpu_isas().items():
            if not ok:
                continue
            tgrad.set_cpu_isa(variant)
            for n, fused in itertools.product(threads, (True, False)):
                tgrad.set_num_threads(n)
                tgrad.set_fusion(fused)
                assert run() == want, (variant, n, fused)
    finally:
        tgrad.set_cpu_isa(isa)
        tgrad.set_num_threads(before)
        tgrad.set_fusion(fusion)
