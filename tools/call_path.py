"""Time the Python call path of small products (docs/performance.md, "The call path").

    TGRAD_NATIVE=0 python tools/call_path.py   # Tensor's hot path through cffi (the Python twin)
    TGRAD_NATIVE=1 python tools/call_path.py   # through tgrad._native

Best of 7 x 20,000 calls each, in microseconds; run the two alternately a few times (a VM's
minute-to-minute drift is larger than one run's spread)."""

from __future__ import annotations

import timeit

import numpy as np

import tgrad
from tgrad import _tensor_base


def main() -> None:
    rng = np.random.default_rng(0)

    def tensor(*shape: int) -> tgrad.Tensor:
        return tgrad.Tensor.from_numpy(rng.standard_normal(shape).astype(np.float32))

    names = {"a": tensor(64, 64), "b": tensor(64, 64), "s": tensor(4, 4), "t": tensor(4, 4)}
    calls = {"(a @ b).numpy() 64^3": "(a @ b).numpy()", "a @ b, released (lazy) 64^3": "a @ b",
             "(a @ b).realize() 4x4x4": "(s @ t).realize()", "(a @ b).numpy() 4x4x4": "(s @ t).numpy()"}
    print(f"tensor base: {_tensor_base.implementation()}")
    for label, stmt in calls.items():
        best = min(timeit.repeat(stmt, globals=names, number=20000, repeat=7)) / 20000
        print(f"{label:32s} {best * 1e6:6.2f} us")


if __name__ == "__main__":
    main()
