"""A tiny transformer LM for the gradient tests: Embedding -> Block (tests/python/
test_transformer_block.py: RMSNorm, attention via F.scaled_dot_product_attention with rope, SiLU
MLP) -> RMSNorm -> logits -> log_softmax loss; its loss in float64 numpy from a weight dict."""

from __future__ import annotations

import numpy as np

import tgrad
import tgrad.nn as nn
from test_transformer_block import Block, _reference

D, HEADS, KV, HIDDEN, VOCAB = 16, 4, 2, 24, 11  # 4 and 2 heads: the block reference's
IDS = np.array([[3, 1, 4, 1, 5, 9, 2]], np.int32)
POS = np.arange(IDS.shape[1] - 1, dtype=np.int32)


class LM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.block = Block(D, HEADS, KV, HIDDEN)
        self.norm = nn.RMSNorm(D, eps=1e-6)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, ids: np.ndarray) -> tgrad.Tensor:
        n = ids.shape[1] - 1
        x = self.embed(tgrad.tensor(ids[:, :-1], dtype=tgrad.int32))
        logits = self.head(self.norm(self.block(x, POS)))
        lp = tgrad.log_softmax(logits.float(), dim=-1)
        pick = np.zeros(lp.shape, np.float32)
        pick[0, np.arange(n), ids[0, 1:]] = -1.0 / n
        return (lp * tgrad.tensor(pick)).sum()


def make() -> LM:
    tgrad.manual_seed(11)
    return LM()


class _Param:
    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def numpy(self) -> np.ndarray:
        return self.a


class _Weights:
    def __init__(self, w: dict[str, np.ndarray]) -> None:
        self.w = w

    def named_parameters(self):
        return ((name, _Param(a)) for name, a in self.w.items())


def loss64(w: dict[str, np.ndarray]) -> float:
    """The LM's loss in float64, nothing rounded (w: name -> float64 array)."""
    x = w["embed.weight"][IDS[:, :-1]]
    sub = {k[len("block."):]: v for k, v in w.items() if k.startswith("block.")}
    h = _block64(sub, x)
    h = h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + 1e-6) * w["norm.weight"]
    logits = h @ w["head.weight"].T
    z = logits - logits.max(-1, keepdims=True)
    lp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return float(-lp[0, np.arange(IDS.shape[1] - 1), IDS[0, 1:]].mean())


def _block64(w: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    return _reference(_Weights(w), x, POS)  # type: ignore[arg-type]
