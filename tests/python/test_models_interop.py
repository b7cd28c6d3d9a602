"""tgrad.models against transformers' own models: small random Llama, Mistral and Qwen2 made with a
fixed seed, saved with save_pretrained in bf16, loaded by tgrad.

- Closer to the true value than torch: the mean absolute error of tgrad's bf16 logits against
  transformers' float64 forward of the same weights (the truth, to within float64) is at most
  that of transformers' own bf16 forward (its default attention, sdpa). The max errors are
  reported, not asserted (docs/models.md has both).
- Greedy decoding of 8 tokens gives transformers' float64 greedy tokens.
- A left-padded batch with its attention_mask (prompts of 5, 11 and 16 tokens) against
  transformers' forward of the same batch (position_ids from the mask, as its generate computes
  them) and its generate. tgrad's rows are byte for byte its prompts alone (test_models_padding.py),
  so this checks that both read the mask the same way: logits at the real positions within 10% of
  the largest float64 logit (a wrong position or a visible padding key is off by 75-100%), the mean
  error within 10% of torch bf16's (32 positions: too few for the 4-15% margin above to show every
  time), and every row's first greedy token transformers float64's. Where the later greedy tokens
  of transformers float64 and bf16 part from tgrad's is reported, not asserted
  (`python tests/python/test_models_interop.py`).

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


def _padded(seed: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """A left-padded batch (prompts of 5, 11 and 16 tokens; padding: token 0) and its mask."""
    rng = np.random.default_rng(seed)
    ids, mask = np.zeros((3, 16), np.int64), np.zeros((3, 16), np.int64)
    for r, n in enumerate([5, 11, 16]):
        ids[r, 16 - n:] = rng.integers(0, SIZES["vocab_size"], n)
        mask[r, 16 - n:] = 1
    return ids, mask


def _padded_logits(model: Any, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    positions = np.where(mask == 1, np.cumsum(mask, axis=1) - 1, 1)  # what transformers' generate passes
    with torch.no_grad():
        return model(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                     position_ids=torch.from_numpy(positions)).logits.double().numpy()


def measure_padded(path: Path) -> dict[str, tuple[float, float]]:
    """measure, at the real positions of the left-padded batch (and "truth": the largest
    float64 logit, as its mean and max)."""
    ids, mask = _padded()
    real = mask == 1
    truth = _padded_logits(_hf(path, torch.float64), ids, mask)[real]
    got = {
        "tgrad bf16": tgrad.models.from_pretrained(path)(ids, attention_mask=mask).numpy().astype(np.float64)[real],
        "torch bf16 (sdpa)": _padded_logits(_hf(path, torch.bfloat16), ids, mask)[real],
        "torch bf16 (eager)": _padded_logits(_hf(path, torch.bfloat16, "eager"), ids, mask)[real],
    }
    out = {peer: (float(np.abs(v - truth).mean()), float(np.abs(v - truth).max())) for peer, v in got.items()}
    return {**out, "truth": (float(np.abs(truth).max()), float(np.abs(truth).max()))}


def greedy_padded(path: Path, new: int) -> dict[str, np.ndarray]:
    """The greedy tokens of the left-padded batch: tgrad's, transformers' float64 and bf16."""
    ids, mask = _padded()
    out = {"tgrad bf16": tgrad.models.from_pretrained(path).generate(ids, new, attention_mask=mask)}
    for peer, dtype in (("torch float64", torch.float64), ("torch bf16", torch.bfloat16)):
        with torch.no_grad():
            out[peer] = _hf(path, dtype).generate(
                torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), max_new_tokens=new,
                min_new_tokens=new, do_sample=False, pad_token_id=0)[:, ids.shape[1]:].numpy()
    return out


def test_a_left_padded_batch_reads_the_mask_as_transformers_does(model_path: Path) -> None:
    errors = measure_padded(model_path)
    assert errors["tgrad bf16"][1] <= 0.1 * errors["truth"][1], errors
    assert errors["tgrad bf16"][0] <= 1.1 * errors["torch bf16 (sdpa)"][0], errors


def test_greedy_tokens_of_a_left_padded_batch_start_as_transformers_float64(model_path: Path) -> None:
    got = greedy_padded(model_path, 8)
    ids, mask = _padded()
    model = tgrad.models.from_pretrained(model_path)
    for r in range(len(ids)):
        assert np.array_equal(got["tgrad bf16"][r], model.generate(ids[r:r + 1, mask[r] == 1], 8)[0]), r
    assert np.array_equal(got["tgrad bf16"][:, 0], got["torch float64"][:, 0]), got


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        print("| model | peer | mean abs error | max abs error |\n|---|---|---|---|")
        for case in sorted(CASES):
            for peer, (mean, worst) in measure(_make(Path(tmp) / case, case)).items():
                print(f"| {case} | {peer} | {mean:.3g} | {worst:.3g} |")
        print("\nleft-padded batch, real positions:\n| model | peer | mean abs error | max abs error |\n|---|---|---|---|")
        for case in sorted(CASES):
            path = Path(tmp) / case
            for peer, (mean, worst) in measure_padded(path).items():
                if peer != "truth":
                    print(f"| {case} | {peer} | {mean:.3g} | {worst:.3g} |")
        print("\ngreedy 32 tokens of the left-padded batch: steps each row agrees with tgrad (of 32)")
        print("| model | torch float64 | torch bf16 |\n|---|---|---|")
        for case in sorted(CASES):
            tokens = greedy_padded(Path(tmp) / case, 32)
            same = {p: (tokens[p] == tokens["tgrad bf16"]).cumprod(axis=1).sum(axis=1).tolist() for p in tokens}
            print(f"| {case} | {same['torch float64']} | {same['torch bf16']} |")


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
