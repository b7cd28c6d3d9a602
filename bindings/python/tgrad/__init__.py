"""tgrad: bf16 matrix multiply and elementwise ops on a small C runtime (libtgrad), bound with cffi.

>>> import numpy as np, tgrad
>>> a = tgrad.Tensor.from_numpy(np.ones((2, 3), np.float32))
>>> (a @ a.T).numpy(np.float32)
array([[3., 3.],
       [3., 3.]], dtype=float32)
>>> (2 * a - 1).relu().numpy(np.float32)
array([[1., 1., 1.],
       [1., 1., 1.]], dtype=float32)
"""

from __future__ import annotations

from . import errors
from ._ffi import _string, ffi, include_dir, lib, library_path, pkgconfig_dir
from .errors import TgradError, _check
from .tensor import Tensor, matmul, typed
from .orders import get_matmul_order, matmul_order, matmul_order_kernel, set_matmul_order
from .precision import get_matmul_precision, matmul_precision, set_matmul_precision
from . import ops
from .ops import (abs, add, div, exp, fusion_enabled, gelu, maximum, minimum, mul, neg, relu, rsqrt,
                  set_fusion, sigmoid, silu, square, sub, tanh)
from .introspect import Backend, Capability, backends, capabilities, explain
from .trace import Trace, trace
from . import safetensors
from . import nn
from ._dlpack import from_dlpack as _from_dlpack
from .dtypes import DType, bfloat16, float32, int32
from . import reductions
from . import shape_ops
from .shape_ops import cat, chunk, concatenate, flatten, split, squeeze, stack, take, unsqueeze
from .shape_ops import slice_scatter  # hmodel (issue 35)
from .program import Program, capture  # a pending graph made again over new inputs
from . import creation, random
from .creation import (arange, empty, empty_like, eye, full, full_like, linspace, ones, ones_like, tensor, zeros,
                       zeros_like)
from .random import Generator, manual_seed, normal, rand, rand_like, randint, randn, randn_like

# comparisons, where, logic (tgrad.compare); tgrad.bool through __getattr__ below
from . import compare
from .compare import (eq, ge, gt, le, logical_and, logical_not, logical_or, logical_xor, lt, masked_fill, ne,
                      where)
from .dtypes import bool_
from . import norms  # hnorm: correctly rounded rms_norm, layer_norm
from . import autograd  # hgcore: gradients
from .autograd import enable_grad, grad, is_grad_enabled, no_grad, set_grad_enabled, value_and_grad
from .norms import layer_norm, rms_norm, rope, rope_backward

__all__ = [
    "autograd", "enable_grad", "grad", "is_grad_enabled", "no_grad", "set_grad_enabled", "value_and_grad",
    "Generator",
    "arange",
    "creation",
    "empty",
    "empty_like",
    "eye",
    "full",
    "full_like",
    "linspace",
    "manual_seed",
    "normal",
    "ones",
    "ones_like",
    "rand",
    "rand_like",
    "randint",
    "randn",
    "randn_like",
    "random",
    "tensor",
    "zeros",
    "zeros_like",
    "all",
    "any",
    "bool_",
    "compare",
    "eq",
    "ge",
    "gt",
    "le",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "lt",
    "masked_fill",
    "ne",
    "where",
    "Backend",
    "DType",
    "argmax",
    "argmin",
    "bfloat16",
    "float32",
    "int32",
    "layer_norm",
    "norms",
    "rms_norm",
    "rope",
    "max",
    "mean",
    "min",
    "reductions",
    "sum",
    "softmax",
    "log_softmax",
    "logsumexp",
    "softmax_backward",  # hgsoft: the row kinds' derivative ops
    "log_softmax_backward",
    "rope_backward",
    "rms_norm_backward",  # hnorm: the norms' input gradients (issue 36)
    "layer_norm_backward",
    "elementwise_more",
    "clamp",
    "clip",
    "cos",
    "log",
    "log1p",
    "pow",
    "sin",
    "sqrt",
    # --- hgew: the derivative ops (tgrad.derivatives) ---
    "derivatives",
    "gelu_backward",
    "gelu_tanh_backward",
    "relu_backward",
    "rsqrt_backward",
    "sigmoid_backward",
    "silu_backward",
    "sqrt_backward",
    "tanh_backward",
    "Capability",
    "Tensor",
    "TgradError",
    "Trace",
    "__version__",
    "abs",
    "add",
    "backends",
    "cached_bytes",
    "cat",
    "chunk",
    "concatenate",
    "capabilities",
    "cpu_isa",
    "cpu_isa_forced",
    "cpu_isa_reason",
    "cpu_isas",
    "cpu_peak_gflops",
    "cpu_scratch_bytes",
    "cpu_stream_isa",
    "div",
    "errors",
    "exp",
    "explain",
    "flatten",
    "from_dlpack",
    "fusion_enabled",
    "get_matmul_order",
    "get_matmul_precision",
    "gelu",
    "include_dir",
    "library_path",
    "live_buffers",
    "live_bytes",
    "live_tensors",
    "matmul",
    "matmul_order",
    "matmul_order_kernel",
    "matmul_precision",
    "maximum",
    "memory_limit",
    "minimum",
    "mul",
    "neg",
    "nn",
    "num_threads",
    "ops",
    "pkgconfig_dir",
    "release_cached",
    "relu",
    "rsqrt",
    "safetensors",
    "set_cpu_isa",
    "set_device_route",
    "set_fusion",
    "set_matmul_order",
    "set_matmul_precision",
    "set_memory_limit",
    "set_num_threads",
    "shape_ops",
    "Program",
    "capture",
    "sigmoid",
    "slice_scatter",
    "silu",
    "split",
    "square",
    "squeeze",
    "stack",
    "sub",
    "take",
    "tanh",
    "trace",
    "typed",
    "unsqueeze",
    "version",
]

#: The package's version: that of the C header this binding was written against (the loaded library,
#: `version()`, may be newer). One number with meson.build's project version, which pyproject.toml
#: takes through meson-python (tests/python/test_packaging.py keeps them equal).
__version__ = f"{lib.TGRAD_VERSION_MAJOR}.{lib.TGRAD_VERSION_MINOR}.{lib.TGRAD_VERSION_PATCH}"


def version() -> str:
    """Version string of the loaded libtgrad."""
    return _string(lib.tgrad_version_string())


def set_num_threads(n: int) -> None:
    """Worker threads for CPU kernels (n >= 1). Results do not depend on it."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise errors.InvalidArgumentError(f"set_num_threads: expected an int, got {type(n).__name__}")
    if not -(1 << 31) <= n <= (1 << 31) - 1:
        raise errors.InvalidArgumentError(f"set_num_threads: n must be >= 1, got {n}")
    _check(lib.tgrad_set_num_threads(n))


def set_memory_limit(nbytes: int | None) -> None:
    """The most bytes one tensor may hold: making a tensor over it (from numpy, a product, an
    elementwise op or broadcast, a materializing reshape, a copy to a device) raises
    OutOfMemoryError at once, before anything is allocated. None (or 0) restores the default, the
    machine's physical memory; TGRAD_MEMORY_LIMIT=<bytes> sets it at start-up. Existing tensors
    are unaffected. A negative or non-int value raises InvalidArgumentError."""
    if nbytes is None:
        nbytes = 0
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        raise errors.InvalidArgumentError(f"set_memory_limit: expected an int or None, got {type(nbytes).__name__}")
    if not 0 <= nbytes <= (1 << 63) - 1:
        raise errors.InvalidArgumentError(
            f"set_memory_limit: {nbytes} bytes is outside 0 .. 2**63-1 (None or 0 restores the default)")
    _check(lib.tgrad_set_memory_limit(nbytes))


def memory_limit() -> int:
    """The memory limit in force, in bytes (see set_memory_limit)."""
    return int(lib.tgrad_memory_limit())


def num_threads() -> int:
    """Worker threads CPU kernels use."""
    return int(lib.tgrad_num_threads())


def live_tensors() -> int:
    """Tensor handles alive in the process (for leak checks)."""
    return int(lib.tgrad_live_tensors())


def live_buffers() -> int:
    """Buffers alive in the process (for leak checks)."""
    return int(lib.tgrad_live_buffers())


def live_bytes() -> int:
    """Bytes held by live buffers."""
    return int(lib.tgrad_live_bytes())


def cpu_isa() -> str:
    """Name of the CPU kernel variant packed products (route gemm) use ("avx512bf16", "avx512f",
    "avx2", "portable", ...). Automatically the most capable variant this CPU runs, unless another
    one's core instruction does at least sqrt(2) times its flops per cycle here: a rule, so every
    process on this machine picks the same (cpu_isa_reason says which part of it applied)."""
    return _string(lib.tgrad_cpu_isa())


def cpu_stream_isa() -> str:
    """Name of the CPU kernel variant one-row and few-row products (routes rowvec, skinny) use:
    the most capable variant this CPU runs, or the forced one. It differs from cpu_isa() where
    the automatic choice took a faster packed kernel from another variant (fp32 FMA on Intel Xeons
    with AVX512-BF16: avx512f for packed products, avx512bf16 for streaming ones)."""
    return _string(lib.tgrad_cpu_stream_isa())


def cpu_isa_reason() -> str:
    """Why cpu_isa() and cpu_stream_isa() are what they are, in one line: forced, the rule's table
    entry for this CPU (CPUID vendor and family), or a measurement for a CPU the table does not
    know (docs/performance.md, "Which variant")."""
    return _string(lib.tgrad_cpu_isa_reason())


def cpu_isa_forced() -> bool:
    """True while TGRAD_CPU_ISA or set_cpu_isa forces one variant, False under the automatic
    choice."""
    return bool(lib.tgrad_cpu_isa_forced())


def _cpu_isa_setting() -> str:
    """What set_cpu_isa takes to restore the present choice: the forced name, or "auto"."""
    return cpu_isa() if cpu_isa_forced() else "auto"


def set_cpu_isa(name: str) -> None:
    """Force one CPU kernel variant by name, for every route ("auto" returns to the automatic
    choice; see cpu_isa and cpu_stream_isa).

    Every variant produces the same bytes. Unknown names raise InvalidArgumentError; a variant
    this CPU cannot run raises BackendUnavailableError.
    """
    if not isinstance(name, str):
        raise errors.InvalidArgumentError(f"set_cpu_isa: expected a str, got {type(name).__name__}")
    _check(lib.tgrad_set_cpu_isa(name.encode()))


_DEVICE_ROUTES = {"auto": 0, "naive": lib.TGRAD_ROUTE_NAIVE, "tiled": lib.TGRAD_ROUTE_TILED, "tc": lib.TGRAD_ROUTE_TC}


def set_device_route(route: str) -> None:
    """The kernel route GPU matmuls take, process-wide: "auto" (naive for products of at most 4
    rows, else tiled; under set_matmul_precision("bounded"), tc where the device and shape allow),
    or force "naive",
    "tiled" or "tc". A forced route a problem cannot take raises RouteNotEligibleError when the
    result is read, and so does a forced tc under the default precision, "exact". naive and
    tiled give the same bytes (the documented order's); tc stays within its error bound
    (docs/kernels.md)."""
    if not isinstance(route, str) or route not in _DEVICE_ROUTES:
        raise errors.InvalidArgumentError(
            f"set_device_route: expected one of {', '.join(map(repr, _DEVICE_ROUTES))}, got {route!r}")
    _check(lib.tgrad_set_device_route(_DEVICE_ROUTES[route]))


def cpu_isas() -> dict[str, bool]:
    """Every CPU kernel variant built in, most capable first, mapped to whether this CPU can run it."""
    variants: dict[str, bool] = {}
    available = ffi.new("int32_t *")
    index = 0
    while True:
        name = lib.tgrad_cpu_isa_name(index, available)
        if name == ffi.NULL:
            return variants
        variants[_string(name)] = bool(available[0])
        index += 1


def cpu_peak_gflops(threads: int = 0) -> float:
    """Measured peak GFLOP/s of the packed products' CPU variant (cpu_isa()): its core
    instruction (vdpbf16ps, FMA) run on `threads` threads (0: the pool's count) for about 60 ms.
    The bench's "% of the best probe" is judged against this, not an assumed clock; its paired
    "% of peak" times the same instruction stream beside each matmul instead
    (tgrad_cpu_peak_run). Meaningful only on an otherwise idle machine."""
    out = ffi.new("double *")
    _check(lib.tgrad_cpu_peak_gflops(int(threads), out))
    return float(out[0])


def cpu_scratch_bytes() -> int:
    """Bytes the CPU kernels hold for packing and accumulator tiles, all threads together: each
    thread's buffers grow to the largest block it has worked on and are reused (bounded, never in
    proportion to M*N*K; docs/performance.md)."""
    return int(lib.tgrad_cpu_scratch_bytes())


def cached_bytes() -> int:
    """Bytes of freed large tensor blocks kept for reuse (cap: TGRAD_CACHE_BYTES)."""
    return int(lib.tgrad_cached_bytes())


def release_cached() -> None:
    """Return every cached block to the operating system."""
    lib.tgrad_release_cached()


def from_dlpack(x: object) -> Tensor:
    """A Tensor over `x`'s memory without a copy when it is bf16 on the CPU (a torch bf16 tensor,
    any `__dlpack__` producer, or an ml_dtypes.bfloat16 numpy array), else float16/32/64 data
    rounded to bf16 (a copy). The producer's memory is held until the last tgrad tensor viewing it
    is released; it must not be changed meanwhile.

    Every field of the producer's capsule is checked before it is used: another device raises
    DeviceMismatchError, another dtype or lanes DtypeUnsupportedError, a bad ndim, shape, data
    pointer or alignment InvalidArgumentError, shapes, strides or offsets past 64 bits
    SizeOverflowError, a DLPack major version other than 1 VersionMismatchError, a failing
    producer InvalidArgumentError; a refused capsule is left to the producer to free. See
    docs/interop.md."""
    out: Tensor = _from_dlpack(x)
    return out


# Last, so that the builtins they shadow in this module's namespace are not used above.
from .reductions import argmax, argmin, max, mean, min, sum  # noqa: E402
from .compare import all, any  # noqa: E402  (last: they shadow the builtins, as max and sum do)
from .softmax import log_softmax, logsumexp, softmax  # noqa: E402  (tgrad.softmax, the module, is shadowed)
from .softmax_backward import log_softmax_backward, softmax_backward  # noqa: E402  (hgsoft; module shadowed)
from .norm_backward import layer_norm_backward, rms_norm_backward  # noqa: E402  (hnorm)
from . import elementwise_more  # noqa: E402
from .elementwise_more import clamp, clip, cos, log, log1p, pow, sin, sqrt  # noqa: E402  (pow shadows the builtin)
from . import derivatives  # noqa: E402  (hgew)
from .derivatives import (  # noqa: E402
    gelu_backward, gelu_tanh_backward, relu_backward, rsqrt_backward, sigmoid_backward, silu_backward, sqrt_backward,
    tanh_backward)

# hgoptim: optimizers (tgrad.optim: SGD, AdamW; docs/nn.md)
from . import optim  # noqa: E402

# hmodel: Hugging Face Llama-family models (docs/models.md), so that `import tgrad` is enough for
# the README's `tgrad.models.from_pretrained(...)` (about 3 ms more at import)
from . import models  # noqa: E402

__all__ += ["models", "optim"]


def __getattr__(name: str) -> object:
    """``tgrad.bool`` (torch's name for the bool dtype, tgrad.dtypes.bool_) without shadowing the
    builtin inside this package."""
    if name == "bool":
        return bool_
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
