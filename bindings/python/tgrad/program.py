"""Programs: a pending graph captured once and made again over new inputs in one call.

    y = f(x, w)                                  # lazy: nothing computed yet
    prog = tgrad.capture([y], inputs=[x])        # the graph behind y, x its input slot
    y.numpy()                                    # realized as usual
    (y2,) = prog.run([x2])                       # f's graph over x2, without calling f
    y2.numpy()                                   # the bytes f(x2, w) gives

``capture`` keeps every pending node behind the outputs as data (its kind, parameters, dtype and
views; libtgrad's ``tgrad_program_capture``): each node input is an earlier node, one of
``inputs`` (by buffer, read through whatever view the node read it), or a constant (any other
computed tensor, such as a weight: the program holds it). ``run`` makes the same nodes over new
inputs, each with the captured input's view of a buffer of the same size, dtype and device
(ShapeMismatchError, DtypeUnsupportedError, DeviceMismatchError otherwise), and returns new lazy
tensors: realizing them schedules, fuses and rounds exactly as the graph the calls would have made.
It saves the Python that builds a graph op by op (a decode step of tgrad.models: docs/models.md).
Refused when captured (InvalidArgumentError): a node recording gradients, a node drawing random
numbers (a rerun would draw the same ones: make them an input), two inputs sharing a buffer.
Capture before anything realizes the outputs: a computed tensor is a constant, whatever it was
computed from (``Tensor.to`` and ``numpy`` realize; tgrad.models.step keeps a device's logits
pending for this).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import errors
from ._ffi import ffi, lib
from .errors import _check
from .tensor import Tensor

__all__ = ["Program", "capture"]


def _handles(tensors: Sequence[Tensor], what: str) -> Any:
    items = list(tensors)
    for t in items:
        if not isinstance(t, Tensor):
            raise errors.InvalidArgumentError(f"capture: {what} must be Tensors, got {type(t).__name__}")
    return ffi.new("tgrad_tensor_t[]", [t._h for t in items] or [0]), len(items)


class Program:
    """A captured graph (``tgrad.capture``): ``run(inputs)`` makes it again over new inputs."""

    __slots__ = ("_ptr", "nodes", "inputs", "constants", "outputs", "_shapes")

    def __init__(self, ptr: Any, shapes: Sequence[tuple[int, ...]]) -> None:
        self._ptr = ffi.gc(ptr, lib.tgrad_program_release)
        self._shapes = list(shapes)  # each output's, as libtgrad gave it for the captured tensor
        counts = ffi.new("int32_t[4]")
        _check(lib.tgrad_program_info(ptr, counts, counts + 1, counts + 2, counts + 3))
        self.nodes, self.inputs, self.constants, self.outputs = (int(c) for c in counts)

    def run(self, inputs: Sequence[Tensor]) -> list[Tensor]:
        """New lazy tensors: the captured outputs' graph over `inputs` (one per captured input)."""
        handles, n = _handles(inputs, "inputs")
        out = ffi.new("tgrad_tensor_t[]", max(self.outputs, 1))
        _check(lib.tgrad_program_run(self._ptr, n, handles, self.outputs, out))
        return [Tensor._wrap(int(out[i]), self._shapes[i]) for i in range(self.outputs)]

    def __repr__(self) -> str:
        return (f"Program({self.nodes} nodes, {self.inputs} inputs, {self.constants} constants, "
                f"{self.outputs} outputs)")


def capture(outputs: Sequence[Tensor], inputs: Sequence[Tensor] = ()) -> Program:
    """The pending graph behind `outputs`, with `inputs` as its slots (module docstring). The
    outputs stay pending; nothing is computed or changed."""
    out_handles, nout = _handles(outputs, "outputs")
    in_handles, nin = _handles(inputs, "inputs")
    ptr = ffi.new("tgrad_program **")
    _check(lib.tgrad_program_capture(nout, out_handles, nin, in_handles, ptr))
    # a run's output i has captured output i's view (tgrad.h): its shape, read from libtgrad once
    return Program(ptr[0], [tuple(t.shape) for t in outputs])
