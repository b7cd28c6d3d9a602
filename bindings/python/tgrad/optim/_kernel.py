"""The optimizer step kind (libtgrad's ``tgrad_optim_step``, kind 16): one lazy node per output
state tensor, each computing torch's float32 update element by element in C (fmaf for the fused
steps, every other op one float32 operation). tgrad.optim.functional uses it unless
``functional.USE_KERNEL`` is False (then the composition of library ops runs: the reference the
tests compare the kernel's bytes against)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._ffi import ffi, lib
from ..errors import _check
from ..tensor import Tensor

SGD = int(lib.TGRAD_OPTIM_SGD)
ADAMW = int(lib.TGRAD_OPTIM_ADAMW)
MAXIMIZE = int(lib.TGRAD_OPTIM_MAXIMIZE)
DECAY = int(lib.TGRAD_OPTIM_DECAY)
MOMENTUM = int(lib.TGRAD_OPTIM_MOMENTUM)
NESTEROV = int(lib.TGRAD_OPTIM_NESTEROV)
AMSGRAD = int(lib.TGRAD_OPTIM_AMSGRAD)
NSCALARS = int(lib.TGRAD_OPTIM_NSCALARS)


def step(algo: int, which: int, flags: int, inputs: Sequence[Tensor], scalars: Sequence[float]) -> Tensor:
    """Output `which` (0 the parameter, 1.. the states) of one step; scalars rounded to float32."""
    vals = [float(np.float32(v)) for v in scalars] + [0.0] * (NSCALARS - len(scalars))
    hs = ffi.new("tgrad_tensor_t[]", [t._h for t in inputs])
    sc = ffi.new("float[]", vals)
    out = ffi.new("tgrad_tensor_t *")
    _check(lib.tgrad_optim_step(algo, which, flags, len(inputs), hs, sc, out))
    return Tensor._wrap(int(out[0]), None)
