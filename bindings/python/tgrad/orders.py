"""The accumulation order of products (docs/numerics.md, "The block32 order").

Two documented, exact orders; each gives the same bytes on every CPU, thread count and fusion
setting:

- ``"block32"`` (the default since 0.2): AMX's TDPBF16PS's, per block of 32 k two fp32 chains
  (even k, odd k) from +0, then ``acc + (even + odd)``. It runs on AMX where the CPU has it (about
  8x the vector rate), else on the CPU variant's own block32 kernel (vdpbf16ps, FMA or portable:
  the same bytes), and on the GPU devices' naive and tiled routes;
- ``"pairwise"`` (the default until 0.1): vdpbf16ps's, per k-pair the odd product then the even
  one. ``tgrad.set_matmul_order("pairwise")`` gives 0.1's bytes.

The order is recorded in each product when it is made (lazily realized products keep theirs), and
a product's gradients are computed in its order. The setting is per thread, as torch's autocast.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from . import errors
from ._ffi import _string, ffi, lib
from .errors import _check

#: The orders by name, with tgrad.h's TGRAD_MATMUL_ORDER_* codes.
CODES = {"pairwise": int(lib.TGRAD_MATMUL_ORDER_PAIRWISE), "block32": int(lib.TGRAD_MATMUL_ORDER_BLOCK32)}
ORDERS = tuple(CODES)


def order_code(order: str, where: str = "matmul_order") -> int:
    """The C ABI's TGRAD_MATMUL_ORDER_* for a name (InvalidArgumentError for another)."""
    if not isinstance(order, str) or order not in CODES:
        raise errors.InvalidArgumentError(f"{where}: order must be one of {ORDERS}, got {order!r}")
    return CODES[order]


def get_matmul_order() -> str:
    """The order of the products this thread makes now."""
    code = int(lib.tgrad_matmul_order())
    return next(name for name, c in CODES.items() if c == code)


def set_matmul_order(order: str) -> None:
    """Set the order of the products this thread makes from now on ("pairwise" or "block32")."""
    _check(lib.tgrad_set_matmul_order(order_code(order, "set_matmul_order")))


@contextlib.contextmanager
def matmul_order(order: str) -> Iterator[None]:
    """Products made inside the block (on this thread) use ``order``; the previous one after."""
    code = order_code(order)
    before = int(lib.tgrad_matmul_order())
    _check(lib.tgrad_set_matmul_order(code))
    try:
        yield
    finally:
        _check(lib.tgrad_set_matmul_order(before))


def matmul_order_kernel(order: str | None = None) -> str:
    """The CPU kernel variant that packed products of ``order`` (None: this thread's) take now:
    "amx", "avx512bf16_block32", "avx512f_block32" or "portable_block32" for block32, the packed
    variant (tgrad.cpu_isa()) for pairwise."""
    code = int(lib.tgrad_matmul_order()) if order is None else order_code(order, "matmul_order_kernel")
    name = lib.tgrad_matmul_order_kernel(code)
    assert name != ffi.NULL  # code is a valid order
    return _string(name)


def amx_unavailable() -> str | None:
    """Why the AMX kernel does not run here (the CPU, the OS's tile state, arch_prctl's refusal,
    a build without it), or None when it does (block32 products then take it)."""
    from .errors import TgradError

    try:
        _check(lib.tgrad_cpu_amx_check())
    except TgradError as exc:
        return str(exc)
    return None
