"""Gradients against torch float32 autograd (interop tier): the transformer-block LM of
autograd_block.py, its weights (bf16 values) copied into the same model written in torch, float32
throughout there; tgrad computes bf16 activations with float32 gradients (grad_dtype=float32)."""

from __future__ import annotations

import numpy as np
import pytest

import tgrad

pytestmark = pytest.mark.interop
torch = pytest.importorskip("torch", reason="torch is not installed (nox -s interop installs it)")


def _torch_loss(w: dict, ids: np.ndarray, heads: int, kv: int):
    F = torch.nn.functional

    def rms(v, g):
        return v * torch.rsqrt((v * v).mean(-1, keepdim=True) + 1e-6) * g

    def rope(t, pos):
        half = t.shape[-1] // 2
        inv = 10000.0 ** (-torch.arange(half, dtype=torch.float64) * 2.0 / t.shape[-1])
        ang = (torch.tensor(pos, dtype=torch.float64)[:, None] * inv[None, :]).float()
        cos, sin = ang.cos(), ang.sin()
        a, b = t[..., :half], t[..., half:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

    inp, tgt = torch.tensor(ids[:, :-1], dtype=torch.long), torch.tensor(ids[:, 1:], dtype=torch.long)
    b, length = inp.shape
    pos = np.arange(length)
    x = w["embed.weight"][inp]
    h = rms(x, w["block.input_layernorm.weight"])
    d = x.shape[-1]
    hd = d // heads
    q = (h @ w["block.self_attn.q_proj.weight"].T).reshape(b, length, heads, hd).transpose(1, 2)
    k = (h @ w["block.self_attn.k_proj.weight"].T).reshape(b, length, kv, hd).transpose(1, 2)
    v = (h @ w["block.self_attn.v_proj.weight"].T).reshape(b, length, kv, hd).transpose(1, 2)
    q, k = rope(q, pos), rope(k, pos)
    k, v = k.repeat_interleave(heads // kv, 1), v.repeat_interleave(heads // kv, 1)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + y.transpose(1, 2).reshape(b, length, d) @ w["block.self_attn.o_proj.weight"].T
    h = rms(x, w["block.post_attention_layernorm.weight"])
    x = x + (F.silu(h @ w["block.gate_proj.weight"].T) * (h @ w["block.up_proj.weight"].T)) @ w["block.down_proj.weight"].T
    logits = rms(x, w["norm.weight"]) @ w["head.weight"].T
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))


def test_block_lm_gradients_match_torch_float32() -> None:
    from autograd_block import HEADS, IDS, KV, make

    lm = make()
    grads = tgrad.grad(lambda ps: lm(IDS), grad_dtype=tgrad.float32)(lm)
    w = {k: torch.tensor(p.numpy(np.float32), requires_grad=True) for k, p in lm.named_parameters()}
    _torch_loss(w, IDS, HEADS, KV).backward()
    for name, g in grads.items():
        got, want = g.numpy(np.float32).astype(np.float64), w[name].grad.numpy().astype(np.float64)
        # tgrad rounds every activation to bf16 (2^-9 relative each); torch keeps float32: the
        # gradients agree within 2% of each tensor's largest entry (measured: at most 0.95%)
        assert np.max(np.abs(got - want)) <= 0.02 * np.max(np.abs(want)) + 1e-6, name
