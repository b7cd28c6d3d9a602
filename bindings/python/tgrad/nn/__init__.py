"""tgrad.nn: layers as torch.nn writes them, and tgrad.nn.functional (torch.nn.functional's names).

    import tgrad.nn as nn
    import tgrad.nn.functional as F

    class MLP(nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.up, self.down = nn.Linear(d, h), nn.Linear(h, d)
        def forward(self, x):
            return self.down(F.gelu(self.up(x)))

    mlp = MLP(768, 3072)
    mlp.load_checkpoint("model.safetensors", "model.layers.0.mlp")

docs/nn.md tells the torch-port story and what each layer computes.
"""

from __future__ import annotations

from . import functional
from .activation import GELU, Dropout, Identity, ReLU, SiLU, Sigmoid, Tanh
from .containers import ModuleList, Sequential
from .embedding import Embedding
from .linear import Linear
from .module import IncompatibleKeys, Module
from .normalization import LayerNorm, RMSNorm
from .packed import PackedLinear

__all__ = [
    "Dropout", "Embedding", "GELU", "Identity", "IncompatibleKeys", "LayerNorm", "Linear", "Module",
    "ModuleList", "PackedLinear", "RMSNorm", "ReLU", "Sequential", "SiLU", "Sigmoid", "Tanh", "functional",
]

# hgoptim: gradient clipping (torch.nn.utils)
from . import utils  # noqa: E402

__all__ += ["utils"]
