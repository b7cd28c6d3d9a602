"""The batched-product roster of the GPU routes (tests/python/test_gpu_batched.py, and the cuda
tier's compile roster in test_cuda_compile.py): torch.matmul's batch rule through views, each case
built the same way on any device from seeded numpy operands.

A case is (name, a's base shape, b's base shape, the view each operand is read through). The
views cover what the batch strides of a kernel must express: several batch axes, broadcasting
(a missing batch axis, extent-1 axes on either side, an expanded stride-0 operand), batch axes
permuted, sliced with a step and reversed, transposed matrices, 1-D operands promoted, K across
the tiles and odd, and empty batches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np

import tgrad


@dataclass(frozen=True)
class BatchedCase:
    name: str
    a_shape: tuple[int, ...]
    b_shape: tuple[int, ...]
    a_view: Callable[[tgrad.Tensor], tgrad.Tensor] = lambda t: t
    b_view: Callable[[tgrad.Tensor], tgrad.Tensor] = lambda t: t
    core: bool = True  # in the core tier's PoCL run (else the slow tier's)

    @property
    def id(self) -> str:
        return self.name


def _mT(t: tgrad.Tensor) -> tgrad.Tensor:
    return t.mT


CASES = [
    BatchedCase("plain", (3, 5, 7), (3, 7, 9)),
    BatchedCase("two_batch_axes", (2, 3, 17, 33), (2, 3, 33, 20)),
    BatchedCase("broadcast_right", (4, 12, 40), (40, 24)),
    BatchedCase("broadcast_left", (9, 16), (5, 16, 11)),
    BatchedCase("broadcast_ones", (2, 1, 6, 19), (1, 3, 19, 10)),
    BatchedCase("transposed", (3, 21, 13), (3, 30, 21), _mT, _mT),
    BatchedCase("expanded", (1, 8, 35), (35, 4, 12), lambda t: t.expand(4, 8, 35), lambda t: t.permute(1, 0, 2)),
    BatchedCase("sliced", (6, 10, 33), (3, 33, 26), lambda t: t[::2], lambda t: t[:, :, ::2]),
    BatchedCase("reversed", (4, 9, 14), (4, 14, 7), lambda t: t[::-1], lambda t: t[::-1, ::-1]),
    BatchedCase("vector_left", (24,), (3, 24, 16)),
    BatchedCase("vector_right", (2, 3, 5, 31), (31,)),
    BatchedCase("long_k", (2, 40, 1057), (2, 1057, 70), core=False),
    BatchedCase("many_small", (64, 3, 5), (64, 5, 4), core=False),
    BatchedCase("four_axes", (2, 1, 2, 3, 6, 9), (3, 2, 1, 9, 5), core=False),
    BatchedCase("k_zero", (3, 4, 0), (3, 0, 5)),
    BatchedCase("empty_batch", (0, 4, 6), (6, 5)),
]


def operand_bits(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """bf16 values with random exponents and signs (the additions round, so the order shows)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-6, 7, shape))
    return x.astype(ml_dtypes.bfloat16)


def operands(case: BatchedCase, device: str = "cpu") -> tuple[tgrad.Tensor, tgrad.Tensor, list[tgrad.Tensor]]:
    """(a, b, the base tensors to release) of the case on `device`."""
    seed = sum(map(ord, case.name))
    bases = [tgrad.Tensor.from_numpy(operand_bits(case.a_shape, seed), device=device),
             tgrad.Tensor.from_numpy(operand_bits(case.b_shape, seed + 1), device=device)]
    return case.a_view(bases[0]), case.b_view(bases[1]), bases
