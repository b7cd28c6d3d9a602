"""Optimizers (torch.optim's names): `SGD`, `AdamW`, and their arithmetic as functions of
explicit gradients in `tgrad.optim.functional` (docs/nn.md, "Optimizers"; docs/numerics.md)."""

from . import functional
from .optimizer import SGD, AdamW, Optimizer

__all__ = ["AdamW", "Optimizer", "SGD", "functional"]
