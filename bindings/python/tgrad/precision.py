"""The matmul precision policy (docs/numerics.md, "Precision policy"; docs/kernels.md, "Numerics of tc").

- ``"exact"`` (the default): every product gives the bytes of its documented order
  (``tgrad.matmul_order``) on every device. GPU matmuls take the tiled route; forcing
  ``set_device_route("tc")`` raises RouteNotEligibleError, naming this policy, when the product is
  read.
- ``"bounded"``: routes on matrix hardware whose accumulation order is not documented are allowed
  too: GPU matmuls take tc where the device and shape allow (Metal simdgroup 8x8 matrices, CUDA
  ``mma.sync`` on sm_80+), each held to its error bound (docs/kernels.md;
  ``tgrad.conformance.oracle.tc_bound``) and deterministic run to run. The CPU has no bounded
  route: its products are exact under either policy.

The policy is process-wide, like ``set_device_route`` and ``torch.set_float32_matmul_precision``,
and read when a realization is planned: ``Tensor.route`` and ``tgrad.explain`` (which shows it on
every GPU matmul step) follow the policy in force when asked, and a product realized before keeps
its bytes. The ``matmul_precision`` context manager restores the previous policy on exit; being
process-wide, it is not meant for threads that realize GPU products under different policies at
once. Rendering (``tgrad.render``) generates tc on request under either policy: it runs nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from . import errors
from ._ffi import lib
from .errors import _check

PRECISIONS = ("exact", "bounded")


def precision_code(precision: str, where: str = "matmul_precision") -> int:
    """The C ABI's TGRAD_MATMUL_PRECISION_* for a name (InvalidArgumentError for another)."""
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise errors.InvalidArgumentError(f"{where}: precision must be one of {PRECISIONS}, got {precision!r}")
    return int(lib.TGRAD_MATMUL_PRECISION_BOUNDED if precision == "bounded" else lib.TGRAD_MATMUL_PRECISION_EXACT)


def get_matmul_precision() -> str:
    """The policy in force: "exact" or "bounded"."""
    code = int(lib.tgrad_matmul_precision())
    return "bounded" if code == lib.TGRAD_MATMUL_PRECISION_BOUNDED else "exact"


def set_matmul_precision(precision: str) -> None:
    """Set the policy, process-wide, from the next realization planned on: "exact" (GPU matmuls
    give the documented order's bytes) or "bounded" (GPU matmuls may take tc, within its error
    bound). Another value raises InvalidArgumentError and changes nothing."""
    _check(lib.tgrad_set_matmul_precision(precision_code(precision, "set_matmul_precision")))


@contextlib.contextmanager
def matmul_precision(precision: str) -> Iterator[None]:
    """Products realized (or explained) inside the block follow ``precision``; the previous policy
    is restored on exit, an exception included. A bad name raises InvalidArgumentError before the
    block runs."""
    code = precision_code(precision)
    before = int(lib.tgrad_matmul_precision())
    _check(lib.tgrad_set_matmul_precision(code))
    try:
        yield
    finally:
        _check(lib.tgrad_set_matmul_precision(before))
