"""A Llama-style transformer block written the torch way (tgrad.nn, tgrad.nn.functional): it runs,
its bytes do not depend on fusion or the thread count, and it computes the block (a float64 numpy
reference of the same mathematics agrees to within bf16's rounding of the intermediates).
"""

from __future__ import annotations

import numpy as np
import pytest

import tgrad
import tgrad.nn as nn
import tgrad.nn.functional as F


class Attention(nn.Module):
    def __init__(self, d: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, d // heads
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(self, x: tgrad.Tensor, positions: np.ndarray) -> tgrad.Tensor:
        b, length, _ = x.shape
        q = self.q_proj(x).reshape(b, length, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).reshape(b, length, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).reshape(b, length, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = tgrad.rope(q, positions), tgrad.rope(k, positions)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, length, -1))


class Block(nn.Module):
    def __init__(self, d: int, heads: int, kv_heads: int, hidden: int) -> None:
        super().__init__()
        self.input_layernorm = nn.RMSNorm(d, eps=1e-6)
        self.post_attention_layernorm = nn.RMSNorm(d, eps=1e-6)
        self.self_attn = Attention(d, heads, kv_heads)
        self.gate_proj, self.up_proj = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)

    def forward(self, x: tgrad.Tensor, positions: np.ndarray) -> tgrad.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), positions)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


def _block_and_input() -> tuple[Block, tgrad.Tensor, np.ndarray]:
    tgrad.manual_seed(7)
    block = Block(64, heads=4, kv_heads=2, hidden=96)
    return block, tgrad.randn(2, 12, 64), np.arange(12, dtype=np.int32)


def _reference(block: Block, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The block's mathematics in float64 (no intermediate rounding)."""
    w = {name: p.numpy().astype(np.float64) for name, p in block.named_parameters()}

    def rms(v: np.ndarray, g: np.ndarray) -> np.ndarray:
        return v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + 1e-6) * g

    def rope(t: np.ndarray) -> np.ndarray:  # rotate-half, base 10000
        half = t.shape[-1] // 2
        inv = 10000.0 ** (-np.arange(half) * 2.0 / t.shape[-1])
        ang = positions[:, None] * inv[None, :]
        cos, sin = np.cos(ang), np.sin(ang)
        a, b = t[..., :half], t[..., half:]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)

    b, length, d = x.shape
    heads, kv, hd = 4, 2, d // 4
    h = rms(x, w["input_layernorm.weight"])
    q = (h @ w["self_attn.q_proj.weight"].T).reshape(b, length, heads, hd).transpose(0, 2, 1, 3)
    k = (h @ w["self_attn.k_proj.weight"].T).reshape(b, length, kv, hd).transpose(0, 2, 1, 3)
    v = (h @ w["self_attn.v_proj.weight"].T).reshape(b, length, kv, hd).transpose(0, 2, 1, 3)
    q, k = rope(q), rope(k)
    k, v = np.repeat(k, heads // kv, axis=1), np.repeat(v, heads // kv, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd)
    s = np.where(np.tril(np.ones((length, length), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    y = (p @ v).transpose(0, 2, 1, 3).reshape(b, length, d)
    x = x + y @ w["self_attn.o_proj.weight"].T
    h = rms(x, w["post_attention_layernorm.weight"])
    g, u = h @ w["gate_proj.weight"].T, h @ w["up_proj.weight"].T
    return x + (g / (1 + np.exp(-g)) * u) @ w["down_proj.weight"].T


def test_the_block_computes_its_mathematics() -> None:
    block, x, positions = _block_and_input()
    got = block(x, positions).numpy().astype(np.float64)
    want = _reference(block, x.numpy().astype(np.float64), positions)
    assert got.shape == (2, 12, 64)
    # bf16 rounds every intermediate (2^-9 relative each): the whole block stays within a few
    # percent of the unrounded mathematics.
    assert np.max(np.abs(got - want)) <= 0.05 * (1 + np.max(np.abs(want)))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_blocks_bytes_do_not_depend_on_fusion_or_threads(threads: int) -> None:
    block, x, positions = _block_and_input()
    want = block(x, positions).to_bytes()
    before = tgrad.num_threads()
    try:
        tgrad.set_num_threads(threads)
        for fused in (True, False):
            tgrad.set_fusion(fused)
            assert block(x, positions).to_bytes() == want
    finally:
        tgrad.set_fusion(True)
        tgrad.set_num_threads(before)
