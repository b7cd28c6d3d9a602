"""Kernel generation: the GPU kernels libtgrad renders, as text, with their launch geometry.

``render_matmul(a, b, route="tiled", lang="msl")`` returns a `Kernel`: the source libtgrad
generates for ``a @ b`` by one of its routes (``naive``, ``tiled``, ``tc``; see docs/kernels.md),
with the operands' views baked in, and how to launch it. ``render_copy(src)`` renders the
bit-preserving copy that materializes a view. Rendering reads only shapes and views, so the
operands may be lazy. The same problem always renders the same bytes (``source_hash`` is FNV-1a 64
of the text, the key of a compiled-kernel cache).

Command line: ``python -m tgrad render --shape MxKxN [--route tc|tiled|naive|copy] [--lang msl]
[--transpose-a] [--transpose-b]`` prints the source and its launch geometry.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ._ffi import _string, ffi, lib
from .errors import _check
from .tensor import Tensor

__all__ = ["Kernel", "langs", "render_copy", "render_matmul", "route_check", "routes"]


def _names(fn: Callable[[int], Any], count: int) -> dict[str, int]:
    """{name: code} for the codes 1..count that `fn` (a cffi ``const char *(int)``) names."""
    out: dict[str, int] = {}
    for code in range(1, count + 1):
        ptr = fn(code)
        if ptr != ffi.NULL:
            out[_string(ptr)] = code
    return out


_ROUTES = _names(lib.tgrad_route_name, int(lib.TGRAD_ROUTE_COUNT))
_LANGS = _names(lib.tgrad_lang_name, int(lib.TGRAD_LANG_COUNT))


def routes() -> list[str]:
    """Route names by code: naive, tiled, tc, copy."""
    return list(_ROUTES)


def langs() -> list[str]:
    """Kernel language names: msl, opencl."""
    return list(_LANGS)


def _code(table: dict[str, int], name: str, what: str) -> int:
    from . import errors

    try:
        return table[name]
    except (KeyError, TypeError):
        raise errors.InvalidArgumentError(f"unknown {what} {name!r}; known: {', '.join(table)}") from None


@dataclass(frozen=True)
class Kernel:
    """A rendered kernel and how to launch it (see tgrad.h, struct tgrad_launch)."""

    source: str
    route: str
    lang: str
    name: str
    grid: tuple[int, int, int]
    threadgroup: tuple[int, int, int]
    threadgroup_memory: int
    buffer_elements: tuple[int, ...]
    source_hash: int

    def describe(self) -> str:
        """The launch geometry as comment lines of the kernel's language."""
        buffers = ("a", "b", "c") if self.route != "copy" else ("src", "dst")
        lines = [
            f"kernel: {self.name} (route {self.route}, language {self.lang})",
            "grid: {} x {} x {} threadgroups".format(*self.grid),
            "threadgroup: {} x {} x {} threads".format(*self.threadgroup),
            f"threadgroup memory: {self.threadgroup_memory} bytes",
            "buffers: " + ", ".join(f"{n} >= {e} elements" for n, e in zip(buffers, self.buffer_elements)),
            f"source hash: 0x{self.source_hash:016x}",
        ]
        return "".join(f"// {line}\n" for line in lines)


def _kernel(route: str, lang: str, call: Callable[..., int], *args: Any) -> Kernel:
    length = ffi.new("size_t *")
    launch = ffi.new("struct tgrad_launch *")
    _check(call(*args, ffi.NULL, 0, length, launch))
    size = int(length[0]) + 1
    dst = ffi.new("char[]", size)
    _check(call(*args, dst, size, length, launch))
    return Kernel(
        source=ffi.string(dst, int(length[0])).decode("ascii"),
        route=route,
        lang=lang,
        name=ffi.string(launch.kernel_name).decode("ascii"),
        grid=tuple(int(v) for v in launch.grid),  # type: ignore[arg-type]
        threadgroup=tuple(int(v) for v in launch.threadgroup),  # type: ignore[arg-type]
        threadgroup_memory=int(launch.threadgroup_memory),
        buffer_elements=tuple(int(launch.buffer_elements[i]) for i in range(int(launch.buffer_count))),
        source_hash=int(launch.source_hash),
    )


def _tensor(x: object, what: str) -> Tensor:
    from . import errors

    if not isinstance(x, Tensor):
        raise errors.InvalidArgumentError(f"{what}: expected a Tensor, got {type(x).__name__}")
    return x


def render_matmul(a: Tensor, b: Tensor, route: str = "tiled", lang: str = "msl") -> Kernel:
    """The kernel computing ``a @ b`` by `route` in `lang`; raises RouteNotEligibleError when the
    route cannot run it (e.g. tc below 8 in a dimension, tc in OpenCL)."""
    a, b = _tensor(a, "render_matmul"), _tensor(b, "render_matmul")
    code, lcode = _code(_ROUTES, route, "route"), _code(_LANGS, lang, "language")
    return _kernel(route, lang, lib.tgrad_render_matmul, code, lcode, a._h, b._h)


def render_copy(src: Tensor, lang: str = "msl") -> Kernel:
    """The kernel copying src's view, bit for bit, into a compact row-major buffer."""
    src = _tensor(src, "render_copy")
    return _kernel("copy", lang, lib.tgrad_render_copy, _code(_LANGS, lang, "language"), src._h)


def route_check(route: str, a: Tensor, b: Tensor | None = None, lang: str = "msl") -> None:
    """Raise (RouteNotEligibleError with the reason, or the operand errors of matmul) unless
    `route` in `lang` can run ``a @ b`` (route "copy": materialize a; leave b None)."""
    a = _tensor(a, "route_check")
    handle = 0 if b is None else _tensor(b, "route_check")._h
    _check(lib.tgrad_route_check(_code(_ROUTES, route, "route"), _code(_LANGS, lang, "language"), a._h, handle))


# ---- command line -------------------------------------------------------------------------------
def _placeholder(rows: int, cols: int) -> Tensor:
    """A lazy [rows, cols] row-major tensor that is never computed: rendering reads only views, so
    the CLI renders kernels for any size without allocating its operands."""
    return Tensor.from_numpy(np.zeros((rows, 1), np.float32)) @ Tensor.from_numpy(np.zeros((1, cols), np.float32))


def _shape(text: str) -> tuple[int, int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected MxKxN (e.g. 1024x1024x1024), got {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", type=_shape, required=True, metavar="MxKxN",
                        help="C[M, N] = A[M, K] @ B[K, N]; the copy route copies A's view")
    parser.add_argument("--route", choices=routes(), default="tiled", help="kernel route (default: tiled)")
    parser.add_argument("--lang", choices=langs(), default="msl", help="kernel language (default: msl)")
    parser.add_argument("--transpose-a", action="store_true", help="A is the transpose of a [K, M] tensor")
    parser.add_argument("--transpose-b", action="store_true", help="B is the transpose of an [N, K] tensor")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from . import errors

    m, k, n = args.shape
    a = _placeholder(k, m).T if args.transpose_a else _placeholder(m, k)
    b = _placeholder(n, k).T if args.transpose_b else _placeholder(k, n)
    try:
        kernel = render_copy(a, args.lang) if args.route == "copy" else render_matmul(a, b, args.route, args.lang)
    except errors.TgradError as exc:
        print(f"python -m tgrad render: {exc.code}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ValueError) else 1  # the shape, route or language asked for
    sys.stdout.write(kernel.source)
    sys.stdout.write("\n" + kernel.describe())
    return 0
