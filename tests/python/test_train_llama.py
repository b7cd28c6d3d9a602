"""A tgrad.models Llama trains (issue 36): an optimizer step changes what the model computes (its
cached transposed weight views follow the new values), and a few hundred AdamW steps on a
synthetic copy task (the second half of each sequence repeats the first) drive the loss from
chance (ln 93 = 4.5) to near zero."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tgrad
import tgrad.models
import tgrad.nn.functional as F
from model_dirs import config, weights, write

HALF = 6


def _model(tmp_path: Path) -> tuple[dict, tgrad.models.CausalLM]:
    doc = config("llama", num_hidden_layers=2)
    m = tgrad.models.from_pretrained(write(tmp_path / "llama", doc, weights(doc, 0, scale=0.1)))
    for p in m.parameters():
        p.requires_grad_()
    return doc, m


def _copy_loss(m: tgrad.models.CausalLM, vocab: int, rng: np.random.Generator) -> tgrad.Tensor:
    seq = rng.integers(3, vocab, size=(8, HALF)).astype(np.int32)
    ids = np.concatenate([seq, seq], axis=1)
    target = ids[:, 1:].copy()
    target[:, : HALF - 1] = -100  # only the repeated half is scored
    logits = m(ids[:, :-1], logits_dtype=tgrad.float32)
    return F.cross_entropy(logits.reshape(-1, vocab), tgrad.tensor(target.reshape(-1)), ignore_index=-100)


def test_an_optimizer_step_changes_the_models_output(tmp_path: Path) -> None:
    doc, m = _model(tmp_path)
    ids = np.array([[1, 5, 7, 3]], np.int32)
    before = m(ids, logits_dtype=tgrad.float32).numpy()
    opt = tgrad.optim.SGD(m.parameters(), lr=0.5)
    _copy_loss(m, doc["vocab_size"], np.random.default_rng(0)).backward()
    opt.step()
    after = m(ids, logits_dtype=tgrad.float32).numpy()
    assert not np.array_equal(before, after)
    with tgrad.no_grad():  # and the step's values are what a freshly built model computes
        fresh = tgrad.models.from_pretrained(write(tmp_path / "stepped", doc, {
            name: p.numpy().astype(np.float32) for name, p in m.named_parameters()}))
        assert np.array_equal(fresh(ids, logits_dtype=tgrad.float32).numpy(), after)


@pytest.mark.slow
def test_a_llama_learns_a_copy_task(tmp_path: Path) -> None:
    doc, m = _model(tmp_path)
    opt = tgrad.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.0)
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(300):
        opt.zero_grad()
        loss = _copy_loss(m, doc["vocab_size"], rng)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    first, last = float(np.mean(losses[:10])), float(np.mean(losses[-10:]))
    assert first > 4.0 and last < 0.5, (first, last)  # measured: 4.66 -> 0.13 after 300 steps
