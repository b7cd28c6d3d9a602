"""The shapes the bench runs: the default suite, ``MxKxN`` parsing, and what a shape's size decides
(bytes moved, memory bound or not, which peers and checks fit)."""

from __future__ import annotations

import argparse
import math
import re
from typing import Iterable

#: Above this many multiply-adds the byte check is skipped unless --check-all. The oracle is
#: O(M*N*K) in numpy: about 0.3 s at 1024^3 and 2 s at 2048^3 = 2^33 on this project's 2-core
#: machine, 9 s at 4096^3 and 75 s at 8192^3.
ORACLE_LIMIT_MACS = 1 << 33
#: ml_dtypes' bfloat16 matmul is an elementwise loop (~0.5 GFLOP/s): only small shapes.
ML_DTYPES_LIMIT_MACS = 1 << 21
#: tinygrad's CPU matmul ran at ~5 GFLOP/s at 1024^3 (docs/performance.md): nothing bigger.
TINYGRAD_LIMIT_MACS = 1 << 30
#: tgrad's whole Python call (readback included) is timed up to this size...
CALL_LIMIT_MACS = 1 << 30
#: ...and shown in the "whole call" table up to this one (64^3 and 127x255x511 are the targets).
CALL_TABLE_LIMIT_MACS = 1 << 24

Shape = tuple[int, int, int]

#: The default suite: issue 3's targets, then Tgrad's sentinels (docs/performance.md).
DEFAULT_SUITE: list[tuple[Shape, str]] = [
    ((64, 64, 64), "target: whole call under 10 us; sentinel"),
    ((127, 255, 511), "target: odd sizes, whole call"),
    ((1024, 1024, 1024), "target: >= 90% of peak; sentinel"),
    ((2048, 2048, 2048), "target: >= 90% of peak; sentinel"),
    ((4096, 4096, 4096), "target: >= 90% of peak; sentinel"),
    ((1, 4096, 4096), "target: vector x matrix, memory bound"),
    ((4096, 4096, 1), "target: matrix x vector, memory bound"),
    ((16, 4096, 4096), "target: skinny, memory bound"),
    ((4096, 64, 4096), "target: small K"),
    ((4096, 1024, 1024), "sentinel: tall"),
    ((2048, 1024, 1024), "sentinel: tall"),
    ((1024, 1024, 8192), "sentinel: wide"),
    ((1024, 1024, 4096), "sentinel: wide"),
    ((1024, 1024, 2048), "sentinel: wide"),
    ((4, 4, 4), "sentinel: below tile"),
    ((8, 8, 4), "sentinel: below tile"),
    ((4, 32, 4), "sentinel: below tile"),
    ((6, 32, 6), "sentinel: below tile"),
    ((4, 4, 32), "sentinel: below tile"),
]
#: Added by --full (minutes each on 2 cores).
FULL_ONLY: list[tuple[Shape, str]] = [
    ((8192, 8192, 8192), "sentinel (--full)"),
    ((8192, 1024, 1024), "sentinel: tall (--full)"),
]

_SHAPE_RE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*[xX]\s*(\d+)\s*$")


def parse_shape(text: str) -> Shape:
    """'MxKxN' -> (M, K, N), non-negative integers; argparse turns the error into exit 2."""
    match = _SHAPE_RE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(
            f"invalid shape {text!r}: expected MxKxN with three non-negative integers, e.g. 64x64x64"
        )
    return tuple(int(g) for g in match.groups())  # type: ignore[return-value]


def parse_shape_list(text: str) -> list[Shape]:
    """'64x64x64,1x4096x4096' -> [(64, 64, 64), (1, 4096, 4096)]; every item must be a shape."""
    return [parse_shape(item) for item in text.split(",")]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def suite(full: bool = False) -> list[tuple[Shape, str]]:
    """The default suite, plus the --full shapes when asked."""
    return DEFAULT_SUITE + (FULL_ONLY if full else [])


def _shape_str(shape: Iterable[int]) -> str:
    return "x".join(str(int(d)) for d in shape)


def _bytes_moved(m: int, k: int, n: int) -> int:
    """bf16 bytes of both operands read once and the output written once."""
    return 2 * (m * k + k * n + m * n)


def is_memory_bound(m: int, k: int, n: int) -> bool:
    """Matrix-vector-like shapes (a side of 16 or less) big enough for memory to be the limit."""
    return min(m, n) <= 16 and _bytes_moved(m, k, n) >= (1 << 20)
