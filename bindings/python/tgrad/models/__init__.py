"""tgrad.models: Hugging Face Llama-family checkpoints, run and decoded by tgrad.

    model = tgrad.models.from_pretrained("my-llama/")        # config.json + safetensors
    logits = model(np.array([[1, 2, 3]]))                    # [1, 3, vocab] bf16
    new = model.generate(np.array([[1, 2, 3]]), 32)          # [1, 32] token ids, greedy
    gpu = tgrad.models.from_pretrained("my-llama/", device="opencl")  # the same bytes on a GPU device

LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM; docs/models.md says what is supported,
where each value is rounded, and why decoding with the KV cache gives the bytes of a forward pass
over the whole prefix.
"""

from __future__ import annotations

from .config import ARCHITECTURES, ModelConfig, config_from_dict, read_config, rope_inv_freq
from .generate import choose, generate
from .llama import CausalLM, KVCache
from .loading import expected_weights, from_pretrained

__all__ = ["ARCHITECTURES", "CausalLM", "KVCache", "ModelConfig", "choose", "config_from_dict", "expected_weights", "from_pretrained",
           "generate", "read_config", "rope_inv_freq"]
