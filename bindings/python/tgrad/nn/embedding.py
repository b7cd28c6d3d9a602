"""Embedding: a table of vectors looked up by integer index, as torch.nn.Embedding."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .. import errors, safetensors
from ..tensor import Tensor, _as_int
from . import functional as F
from ._borrow import borrowed
from .module import Module, open_checkpoint, shape_text

__all__ = ["Embedding"]


def _count(value: Any, what: str) -> int:
    count = _as_int(value, f"Embedding: {what}")
    if count < 0:
        raise errors.InvalidArgumentError(f"Embedding: {what} must be >= 0, got {count}")
    return count


class Embedding(Module):
    """weight [num_embeddings, embedding_dim]; embedding(ids) is F.embedding(ids, weight):
    [*ids.shape, embedding_dim]."""

    num_embeddings: int
    embedding_dim: int
    padding_idx: int | None
    weight: Tensor

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, *,
                 weight: Tensor | None = None) -> None:
        """A table over `weight` [num_embeddings, embedding_dim] (ShapeMismatchError for another
        shape); without it, drawn as torch does: N(0, 1) from tgrad.random, the padding_idx row
        zero (a build without tgrad.random raises InvalidArgumentError)."""
        super().__init__()
        self.num_embeddings = _count(num_embeddings, "num_embeddings")
        self.embedding_dim = _count(embedding_dim, "embedding_dim")
        if padding_idx is not None:
            padding_idx = _as_int(padding_idx, "Embedding: padding_idx")
            if not -self.num_embeddings <= padding_idx < self.num_embeddings:
                raise errors.IndexOutOfRangeError(
                    f"Embedding: padding_idx {padding_idx} is outside the {self.num_embeddings} embeddings")
            padding_idx %= self.num_embeddings
        self.padding_idx = padding_idx
        shape = (self.num_embeddings, self.embedding_dim)
        if weight is None:
            drawn: Tensor = borrowed("random", "randn")(shape)
            weight = drawn
            if padding_idx is not None:
                bits = drawn.numpy().view(np.uint16)
                bits[padding_idx] = 0  # torch zeroes the padding row
                weight = Tensor.from_bf16_bits(bits)
            weight.requires_grad_()  # drawn here: a leaf requiring a gradient, as torch's Parameter
        if not isinstance(weight, Tensor):
            raise errors.InvalidArgumentError(f"Embedding: weight must be a tgrad.Tensor, got {type(weight).__name__}")
        if weight.shape != shape:
            raise errors.ShapeMismatchError(
                f"Embedding({self.num_embeddings}, {self.embedding_dim}): weight is {shape_text(weight.shape)}, "
                f"expected {shape_text(shape)}")
        self.weight = weight

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True, padding_idx: int | None = None) -> Embedding:
        """The table `embeddings` [num_embeddings, embedding_dim] itself (freeze changes nothing:
        tgrad has no training)."""
        if not isinstance(embeddings, Tensor):
            raise errors.InvalidArgumentError(
                f"Embedding.from_pretrained: expected a tgrad.Tensor, got {type(embeddings).__name__}")
        if embeddings.ndim != 2:
            raise errors.ShapeMismatchError(
                f"Embedding.from_pretrained: embeddings is {shape_text(embeddings.shape)}, expected 2-D")
        num, dim = embeddings.shape
        return cls(num, dim, padding_idx=padding_idx, weight=embeddings)

    @classmethod
    def from_checkpoint(cls, checkpoint: safetensors.Checkpoint | str | os.PathLike[str], prefix: str,
                        padding_idx: int | None = None) -> Embedding:
        """The table `<prefix>.weight` of a safetensors checkpoint (2-D, checked against the schema
        before it is read; TensorNotFoundError when absent)."""
        ckpt = open_checkpoint(checkpoint, "Embedding.from_checkpoint")
        if not isinstance(prefix, str):
            raise errors.InvalidArgumentError(f"Embedding.from_checkpoint: prefix must be a str, got {type(prefix).__name__}")
        name = f"{prefix}.weight"
        if name not in ckpt:
            raise errors.TensorNotFoundError(f"{ckpt.path}: no tensor named {name!r}")
        if len(ckpt.schema[name].shape) != 2:
            raise errors.ShapeMismatchError(
                f"{ckpt.path}: tensor {name!r} is {shape_text(ckpt.schema[name].shape)}, expected 2-D "
                "[num_embeddings, embedding_dim]")
        return cls.from_pretrained(ckpt.load([name])[name], padding_idx=padding_idx)

    def forward(self, ids: Tensor) -> Tensor:
        return F.embedding(ids, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"
