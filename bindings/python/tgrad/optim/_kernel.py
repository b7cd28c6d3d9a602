"""The optimizer step kind (libtgrad's ``tgrad_optim_step``, kind 16): one lazy node per output
state tensor, each computing torch's float32 update element by element in C (fmaf for the fused
steps, every other op one float32 operation). tgrad.optim.functional uses it unless
``functional.USE_KERNEL`` is False (then the composition of library ops runs: the reference the
tests compare the kernel's bytes against)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import dtypes as _dtypes
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


def step_many(algo: int, flags: int, inputs: Sequence[Sequence[Tensor]], scalars: Sequence[Sequence[float]],
              bf16_param: bool) -> list[list[Tensor]]:
    """Every output of one step over several tensors in one C call (``tgrad_optim_step_many``),
    realized: per tensor [new parameter, new states..., (new parameter in bfloat16)]. Each tensor
    has the same number of inputs; its scalars are rounded to float32."""
    n, ninputs = len(inputs), len(inputs[0])
    rows = np.zeros((n, NSCALARS), np.float32)  # each scalar rounded once to float32
    for i, sc in enumerate(scalars):
        rows[i, :len(sc)] = sc
    hs = ffi.new("tgrad_tensor_t[]", [t._h for ins in inputs for t in ins])
    sc_c = ffi.from_buffer("float[]", rows)
    nstate = (1 if flags & MOMENTUM else 0) if algo == SGD else (3 if flags & AMSGRAD else 2)
    nout = 1 + nstate + int(bf16_param)
    out = ffi.new("tgrad_tensor_t[]", n * nout)
    _check(lib.tgrad_optim_step_many(algo, flags, n, ninputs, hs, sc_c, int(bf16_param), out))
    wrap = Tensor._wrap
    f32, bf16 = _dtypes.float32, _dtypes.bfloat16
    res = [[wrap(int(out[i * nout + o]), ins[0]._shape) for o in range(nout)] for i, ins in enumerate(inputs)]
    for row in res:  # the dtypes the call documents (tgrad.h): float32, the last bfloat16 with bf16_param
        for o, t in enumerate(row):
            t._dtc = (t._handle, bf16 if bf16_param and o == nout - 1 else f32)
    return res
