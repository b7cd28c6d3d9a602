"""tgrad.models against transformers' own models: small random Llama, Mistral and Qwen2 made with a
fixed seed, saved with save_pretrained in bf16, loaded by tgrad.

- Closer to the true value than torch: the mean absolute error of tgrad's bf16 logits against
  transformers' float64 forward of the same weights (the truth, to within float64) is at most
  that of transformers' own bf16 forward (its default attention, sdpa). The max errors are
  reported, not asserted (docs/models.md has both).
- Greedy decoding of 8 tokens gives transformers' float64 greedy tokens.

`python tests/python/test_models_interop.py` prints the table of docs/models.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tgrad
import tgrad.models

pytestmark = pytest.mark.interop
torch = pytest.importorskip("torch", reason="torch is not installed (nox -s interop installs it)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed (nox -s interop installs it)")

SIZES = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "vocab_size": 128, "intermediate_size": 128, "initializer_range": 0.1, "bos_token_id": None,
         "eos_token_id": None, "pad_token_id": None}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("Llama", {}),
    "mistral": ("Mistral", {"sliding_window": 8}),
    "qwen2": ("Qwen2", {}),
    "llama-tied": ("Llama", {"tie_word_embeddings": True}),
    "llama3-rope": ("Llama", {"rope_parameters": {"rope_theta": 500000.0, **LLAMA3}}),
}
LENGTH = 24


def _make(path: Path, name: str) -> Path:
    """A seeded random model of `name` saved in bf16 (norm weights and biases drawn too, so that
    every parameter matters)."""
    family, extra = CASES[name]
    cfg = getattr(transformers, f"{family}Config")(**SIZES, **extra)
    torch.manual_seed(sorted(CASES).index(name))
    model = getattr(transformers, f"{family}ForCausalLM")(cfg)
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if param_name.endswith("norm.weight"):
                param.normal_(1.0, 0.2)
            elif param_name.endswith("bias"):
                param.normal_(0.0, 0.2)
    model.to(torch.bfloat16).save_pretrained(path)
    return path


def _hf(path: Path, dtype: Any, attn: str = "sdpa") -> Any:
    family = CASES[path.name][0]
    cls = getattr(transformers, f"{family}ForCausalLM")
    return cls.from_pretrained(path, dtype=dtype, attn_implementation=attn).eval()


def _ids(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, SIZES["vocab_size"], (2, LENGTH))


def _logits(model: Any, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(ids)).logits.double().numpy()


def measure(path: Path) -> dict[str, tuple[float, float]]:
    """{peer: (mean, max) absolute error of its logits against transformers' float64 forward}."""
    ids = _ids()
    truth = _logits(_hf(path, torch.float64), ids)
    got = {
        "tgrad bf16": tgrad.models.from_pretrained(path)(ids).numpy().astype(np.float64),
        "torch bf16 (sdpa)": _logits(_hf(path, torch.bfloat16), ids),
        "torch bf16 (eager)": _logits(_hf(path, torch.bfloat16, "eager"), ids),
        "torch float32": _logits(_hf(path, torch.float32), ids),
    }
    return {peer: (float(np.abs(v - truth).mean()), float(np.abs(v - truth).max())) for peer, v in got.items()}


@pytest.fixture(scope="module", params=sorted(CASES))
def model_path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _make(tmp_path_factory.mktemp("hf") / request.param, request.param)


def test_tgrad_bf16_logits_are_at_least_as_close_to_float64_as_torch_bf16(model_path: Path) -> None:
    errors = measure(model_path)
    ours, theirs = errors["tgrad bf16"][0], errors["torch bf16 (sdpa)"][0]
    assert ours <= theirs, errors
    assert ours <= errors["torch bf16 (eager)"][0], errors


def test_greedy_tokens_are_transformers_float64_greedy_tokens(model_path: Path) -> None:
    prompt = _ids(2)[:, :8]
    with torch.no_grad():
        hf = _hf(model_path, torch.float64).generate(torch.from_numpy(prompt), max_new_tokens=8, do_sample=False,
                                                     min_new_tokens=8)[:, 8:].numpy()
    ours = tgrad.models.from_pretrained(model_path).generate(prompt, 8)
    agree = (ours == hf).cumprod(axis=1).sum(axis=1)
    assert np.array_equal(ours, hf), f"tokens agree for the first {agree.tolist()} steps:\n{ours}\n{hf}"


def test_tgrad_reads_the_config_transformers_wrote(model_path: Path) -> None:
    ours = tgrad.models.from_pretrained(model_path).config
    theirs = _hf(model_path, torch.float32).config
    head_dim = getattr(theirs, "head_dim", None) or theirs.hidden_size // theirs.num_attention_heads
    assert (ours.num_key_value_heads, ours.head_dim, ours.tie_word_embeddings) == (
        theirs.num_key_value_heads, head_dim, theirs.tie_word_embeddings)
    inv = tgrad.models.rope_inv_freq(ours)
    if inv is not None:  # transformers computes the scaled table in float32: within a few ulps
        hf_inv = _hf(model_path, torch.float32).model.rotary_emb.inv_freq.numpy()
        assert np.allclose(inv, hf_inv, rtol=1e-6, atol=0)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        print("| model | peer | mean abs error | max abs error |\n|---|---|---|---|")
        for case in sorted(CASES):
            for peer, (mean, worst) in measure(_make(Path(tmp) / case, case)).items():
                print(f"| {case} | {peer} | {mean:.3g} | {worst:.3g} |")


def _first_step_grads_torch(path: Path, ids: np.ndarray, dtype: Any) -> dict[str, np.ndarray]:
    model = _hf(path, dtype, attn="eager")
    model.train()
    logits = model(torch.from_numpy(ids[:, :-1])).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).to(dtype),
                                             torch.from_numpy(ids[:, 1:]).reshape(-1).long())
    loss.backward()
    return {n: p.grad.double().numpy() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", ["llama", "qwen2", "mistral"])
def test_first_training_step_gradients_against_transformers(tmp_path: Path, name: str) -> None:
    """Issue 36: one LM-loss backward of tgrad's model (bf16 forward and backward, float32
    gradients) against transformers' float64 autograd of the same weights. The stated bound: each
    parameter's gradient within 4% of its largest entry (bf16 activations; measured at most 2.4%),
    and the worst parameter no further than 1.5x transformers' own bf16 training gradients' worst
    (measured 0.7-1.1x: Llama 2.36% vs 2.22%, Qwen2 2.10% vs 2.18%, Mistral 2.03% vs 2.84%)."""
    path = _make(tmp_path / name, name)
    ids = _ids(3).astype(np.int32)
    truth = _first_step_grads_torch(path, ids, torch.float64)
    bf16 = _first_step_grads_torch(path, ids, torch.bfloat16)
    model = tgrad.models.from_pretrained(path)
    params = dict(model.named_parameters())
    for p in params.values():
        p.requires_grad_()
    logits = model(ids[:, :-1], logits_dtype=tgrad.float32)
    target = tgrad.tensor(ids[:, 1:].reshape(-1))
    loss = tgrad.nn.functional.cross_entropy(logits.reshape(-1, SIZES["vocab_size"]), target)
    loss.backward(grad_dtype=tgrad.float32)
    assert set(truth) <= set(params)
    worst, worst_bf16 = (0.0, ""), (0.0, "")
    for n, want in truth.items():
        scale = np.abs(want).max()
        worst = max(worst, (float(np.abs(params[n].grad.numpy().astype(np.float64) - want).max() / scale), n))
        worst_bf16 = max(worst_bf16, (float(np.abs(bf16[n] - want).max() / scale), n))
    assert worst[0] <= 0.04 and worst[0] <= 1.5 * worst_bf16[0], (worst, worst_bf16)
