"""Decode steps through captured programs: the Python that builds a step's graph runs once per 32
steps instead of once per step (docs/models.md, "Decode steps as programs").

A step's graph differs from the last one's only in its data, if its shapes do not depend on the
cache length: the new keys and values are written at a slot given as an int32 tensor
(tgrad.slice_scatter with a Tensor start), the rope positions are that tensor, and attention reads
the cache's first `seen` positions, the written length rounded up to a multiple of 32 (at most the
capacity), with an additive mask of -inf past the written length. So `tgrad.capture` keeps the
first step's graph, with the ids, the position, the masks and the cache buffers as its inputs, and
the next steps `run` it, until `seen` changes (every 32 positions), when the next step is built
again and captured.

The bytes are the step built op by op, over exactly the written positions: a masked position's
score is -inf, so its softmax weight is +0 (correctly rounded: the others' are unchanged), and its
product with the never-written value slot (+0) is +0, the product the block32 order pads its last
block with; rounding up to a multiple of 32 adds no block. tests/python/test_models_step.py checks
logits and tokens both ways.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import errors
from ..dtypes import float32, int32
from ..program import Program, capture
from ..tensor import Tensor
from .llama import KVCache, StepInputs, _additive, _visible

if TYPE_CHECKING:
    from .llama import CausalLM

__all__ = ["DecodeSteps", "ALIGN"]

#: attention reads the cache's positions up to the next multiple of this (the block32 order's block)
ALIGN = 32


class DecodeSteps:
    """One new token per row per call, appended to `cache` (model.forward(ids, cache,
    logits_to_keep=1, logits_dtype=float32)'s bytes), through a captured program where it can:
    rows of one length, the cache preallocated past the step (else the step is built as usual),
    on the CPU or a GPU device (the logits come back to the CPU either way)."""

    def __init__(self, model: CausalLM, cache: KVCache, programs: bool = True) -> None:
        """programs=False: every step built op by op (the same bytes)."""
        self.model, self.cache = model, cache
        self.program: Program | None = None
        self.seen = 0
        # off, or the graph cannot be captured (weights recording gradients): build each step
        self.refused = not programs
        self.captures = self.runs = 0  # steps built and captured; steps made by the program
        self.windows = list(dict.fromkeys(layer.window for layer in model.model.layers))
        self.device = model.device  # a generate's model stays where it is

    def _usable(self) -> bool:
        c = self.cache
        return (not self.refused and c.lengths is None and c.length + 1 <= c.capacity
                and all(t is not None and t.shape[2] == c.capacity for t in c.keys + c.values))

    def __call__(self, ids: np.ndarray) -> Tensor:
        """The float32 logits [B, 1, vocab] of ids [B, 1] (integers in the vocabulary)."""
        c, model = self.cache, self.model
        if not self._usable():
            return model.forward(ids, c, logits_to_keep=1, logits_dtype=float32)
        length = c.length
        seen = min(-(-(length + 1) // ALIGN) * ALIGN, c.capacity)
        device = self.device
        at = Tensor.from_numpy(np.array([length], np.int32), dtype=int32, device=device)  # the slot, the rope position
        masks = {w: _additive(_visible(1, length, w, seen), device) for w in self.windows}  # [1, seen] each
        tokens = Tensor.from_numpy(np.ascontiguousarray(ids, np.int32), dtype=int32, device=device)
        inputs: list[Tensor] = [tokens, at, *masks.values(), *c.keys, *c.values]  # type: ignore[list-item]
        if self.program is not None and self.seen == seen:
            outs = self.program.run(inputs)
            self.runs += 1
            del inputs  # the old cache buffers' last references: the writes take their storage
            layers = len(c.keys)
            c.keys, c.values = list(outs[1:1 + layers]), list(outs[1 + layers:])
            c.length += 1
            return self._on_cpu(outs[0])
        c.step = StepInputs(at, seen, masks)
        try:
            logits = model.forward(tokens, c, logits_to_keep=1, logits_dtype=float32)
        finally:
            c.step = None
        try:
            self.program = capture([logits, *c.keys, *c.values], inputs)  # type: ignore[list-item]
            self.seen, self.captures = seen, self.captures + 1
        except errors.InvalidArgumentError:
            self.program, self.refused = None, True
        return self._on_cpu(logits)

    def _on_cpu(self, logits: Tensor) -> Tensor:
        """The logits as the forward returns them: a CPU Tensor (a device's step realized and
        copied; its graph was captured pending, before that)."""
        return logits if logits.device == "cpu" else logits.to("cpu")
