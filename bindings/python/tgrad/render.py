"""Kernel generation: the GPU kernels libtgrad renders, as text, with their launch geometry.

``render_matmul(a, b, route="tiled", lang="msl")`` returns a `Kernel`: the source libtgrad
generates for ``a @ b`` by one of its routes (``naive``, ``tiled``, ``tc``; see docs/kernels.md),
with the operands' views baked in, and how to launch it. ``render_copy(src)`` renders the
bit-preserving copy that materializes a view. Rendering reads only shapes and views, so the
operands may be lazy. The same problem always renders the same bytes (``source_hash`` is FNV-1a 64
of the text, the key of a compiled-kernel cache).

``render_tensor(t)`` renders the kernel that computes a pending tensor as the scheduler groups
it: a matmul with the elementwise ops fused into it (its epilogue), or a standalone elementwise
chain.

Command line: ``python -m tgrad render --shape MxKxN [--route tc|tiled|naive|copy|elementwise]
[--lang msl] [--transpose-a] [--transpose-b] [--epilogue add,gelu]`` prints the source and its
launch geometry.
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

__all__ = ["Kernel", "device_table", "langs", "render_copy", "render_matmul", "render_tensor", "route_check", "routes"]


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


def _route_of(name: str) -> str:
    """The route of a kernel named tgrad_<route>_... (the longest route name that fits: scatter_add,
    optim_step)."""
    fits = [r for r in _ROUTES if name.startswith(f"tgrad_{r}_")]
    return max(fits, key=len) if fits else name.split("_")[1]


def routes() -> list[str]:
    """Route names by code: naive, tiled, tc, copy."""
    return list(_ROUTES)


def langs() -> list[str]:
    """Kernel language names: msl, opencl, cuda."""
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
    buffer_names: tuple[str, ...] = ()
    buffer_ids: tuple[int, ...] = ()

    def tables(self) -> dict[str, str]:
        """{buffer name: op} for the tables the launcher binds (buffer id 0): a unary op's results
        (``v = t1[v]; // gelu``) or a derivative op's table of f'(x) (``// silu_backward: g f'(x),
        f'(x) from t0``); `device_table` gives their contents."""
        unary = re.findall(r"v = (\w*t\d+)\[v\]; // (\w+)", self.source)
        grad = [(t, op) for op, t in re.findall(r"// (\w+): g f'\(x\), f'\(x\) from (\w*t\d+)", self.source)]
        return dict(unary + grad)

    def describe(self) -> str:
        """The launch geometry as comment lines of the kernel's language."""
        buffers = self.buffer_names or (("a", "b", "c") if self.route != "copy" else ("src", "dst"))
        lines = [
            f"kernel: {self.name} (route {self.route}, language {self.lang})",
            "grid: {} x {} x {} threadgroups".format(*self.grid),
            "threadgroup: {} x {} x {} threads".format(*self.threadgroup),
            f"threadgroup memory: {self.threadgroup_memory} bytes",
            "buffers: " + ", ".join(f"{n} >= {e} elements" for n, e in zip(buffers, self.buffer_elements)),
            f"source hash: 0x{self.source_hash:016x}",
        ]
        return "".join(f"// {line}\n" for line in lines)


def _kernel(route: str | None, lang: str, call: Callable[..., int], *args: Any) -> Kernel:
    length = ffi.new("size_t *")
    launch = ffi.new("struct tgrad_launch *")
    launch.size = ffi.sizeof("struct tgrad_launch")  # the struct may grow: the library checks it
    _check(call(*args, ffi.NULL, 0, length, launch))
    size = int(length[0]) + 1
    dst = ffi.new("char[]", size)
    _check(call(*args, dst, size, length, launch))
    name = ffi.string(launch.kernel_name).decode("ascii")
    count = int(launch.buffer_count)
    return Kernel(
        source=ffi.string(dst, int(length[0])).decode("ascii"),
        route=route if route is not None else _route_of(name),
        lang=lang,
        name=ffi.string(launch.kernel_name).decode("ascii"),
        grid=tuple(int(v) for v in launch.grid),  # type: ignore[arg-type]
        threadgroup=tuple(int(v) for v in launch.threadgroup),  # type: ignore[arg-type]
        threadgroup_memory=int(launch.threadgroup_memory),
        buffer_elements=tuple(int(launch.buffer_elements[i]) for i in range(int(launch.buffer_count))),
        source_hash=int(launch.source_hash),
        buffer_names=tuple(ffi.string(launch.buffer_names[i]).decode("ascii") for i in range(count)),
        buffer_ids=tuple(int(launch.buffer_ids[i]) for i in range(count)),
    )


def device_table(op: str) -> np.ndarray:
    """The table a kernel binds for op, as the launcher uploads it (uint16): a unary op's 65,536
    results, or gelu_backward's, gelu_tanh_backward's or silu_backward's table of f'(x), 8 values
    per x (kernels/gpu/elementwise.h). For the emulators, which bind buffers themselves."""
    from .ops import REGISTRY

    count = 65536 * (8 if op in ("gelu_backward", "gelu_tanh_backward", "silu_backward") else 1)
    out = np.empty(count, np.uint16)
    _check(lib.tgrad_debug_device_table(REGISTRY[op].code, ffi.cast("uint16_t *", out.ctypes.data), count))
    return out


def _tensor(x: object, what: str) -> Tensor:
    from . import errors

    if not isinstance(x, Tensor):
        raise errors.InvalidArgumentError(f"{what}: expected a Tensor, got {type(x).__name__}")
    return x


def render_matmul(a: Tensor, b: Tensor, route: str = "tiled", lang: str = "msl") -> Kernel:
    """The kernel computing ``a @ b`` by `route` in `lang`, in this thread's matmul order
    (tgrad.matmul_order); raises RouteNotEligibleError when the route cannot run it (e.g. tc below
    8 in a dimension, tc in OpenCL, tc in the block32 order)."""
    a, b = _tensor(a, "render_matmul"), _tensor(b, "render_matmul")
    code, lcode = _code(_ROUTES, route, "route"), _code(_LANGS, lang, "language")
    return _kernel(route, lang, lib.tgrad_render_matmul, code, lcode, a._h, b._h)


def render_copy(src: Tensor, lang: str = "msl") -> Kernel:
    """The kernel copying src's view, bit for bit, into a compact row-major buffer."""
    src = _tensor(src, "render_copy")
    return _kernel("copy", lang, lib.tgrad_render_copy, _code(_LANGS, lang, "language"), src._h)


def render_tensor(t: Tensor, route: str | None = None, lang: str = "msl", step: int = -1) -> Kernel:
    """A kernel of the schedule that realizing pending tensor `t` runs now (the steps `explain`
    prints): `t`'s own by default, else step `step`. Its base op (a matmul by `route`, default the
    device's choice or tiled; an elementwise chain; a copy) comes with the elementwise ops fused
    into it as its epilogue; `route` applies to matmul steps. ``Kernel.buffer_ids`` names the tensor
    buffer behind each binding (0: an op's table). A realized tensor raises InvalidArgumentError:
    there is nothing to compute."""
    t = _tensor(t, "render_tensor")
    code = 0 if route is None else _code(_ROUTES, route, "route")
    lcode = _code(_LANGS, lang, "language")
    if isinstance(step, bool) or not isinstance(step, int):
        from . import errors

        raise errors.InvalidArgumentError(f"render_tensor: step must be an int, got {type(step).__name__}")
    return _kernel(None, lang, lib.tgrad_render_tensor, code, lcode, t._h, step)


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
                        help="C[M, N] = A[M, K] @ B[K, N]; the copy route copies A's view, the reduce "
                             "route sums A over its last axis, the cast route casts A to float32, the "
                             "gather route takes A's rows in reverse, the concat route joins A and B.T")
    parser.add_argument("--route", choices=routes(), default="tiled", help="kernel route (default: tiled)")
    parser.add_argument("--lang", choices=langs(), default="msl", help="kernel language (default: msl)")
    parser.add_argument("--transpose-a", action="store_true", help="A is the transpose of a [K, M] tensor")
    parser.add_argument("--transpose-b", action="store_true", help="B is the transpose of an [N, K] tensor")
    parser.add_argument("--epilogue", type=_ops, default=[], metavar="OP[,OP...]",
                        help="elementwise ops fused after the product, in order (e.g. add,gelu; a binary "
                             "op's other operand is a bias row of N values); --route elementwise renders "
                             "them alone over an [M, N] operand")
    parser.set_defaults(func=main)


def _ops(text: str) -> list[str]:
    from .ops import REGISTRY

    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in REGISTRY]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown op(s) {', '.join(unknown) or text!r}; known: {', '.join(REGISTRY)}")
    return names


def _chain(x: Tensor, ops: list[str], n: int) -> Tensor:
    """x, then each op of the chain; a binary op's other operand is a bias row of n values."""
    from .ops import REGISTRY, apply

    for name in ops:
        x = apply(name, x, _placeholder(1, n).reshape(n)) if REGISTRY[name].arity == 2 else apply(name, x)
    return x


def main(args: argparse.Namespace) -> int:
    from . import errors

    m, k, n = args.shape
    a = _placeholder(k, m).T if args.transpose_a else _placeholder(m, k)
    b = _placeholder(n, k).T if args.transpose_b else _placeholder(k, n)
    try:
        if args.route in ("reduce", "cast"):
            from .reductions import cast, sum as sum_

            kernel = render_tensor(sum_(a, axis=-1) if args.route == "reduce" else cast(a, "float32"), lang=args.lang)
        elif args.route in ("gather", "concat"):
            from .shape_ops import cat, take

            kernel = render_tensor(take(a, list(range(m - 1, -1, -1)), axis=0) if args.route == "gather"
                                   else cat([a, b.T], dim=0), lang=args.lang)
        elif args.route == "elementwise":
            x = _placeholder(m, n)  # held here, so the chain is not fused into the product making it
            kernel = render_tensor(_chain(x, args.epilogue or ["relu"], n), lang=args.lang)
        elif args.epilogue and args.route != "copy":
            kernel = render_tensor(_chain(a @ b, args.epilogue, n), args.route, args.lang)
        else:
            kernel = render_copy(a, args.lang) if args.route == "copy" else render_matmul(a, b, args.route, args.lang)
    except errors.TgradError as exc:
        print(f"python -m tgrad render: {exc.code}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ValueError) else 1  # the shape, route or language asked for
    sys.stdout.write(kernel.source)
    sys.stdout.write("\n" + kernel.describe())
    return 0
