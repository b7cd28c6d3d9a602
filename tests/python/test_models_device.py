"""tgrad.models on a GPU device (issue 37): `from_pretrained(path, device="opencl")` moves each weight
to the device once, and the forward, its KV cache, ids, positions and masks live there; the
logits come back as CPU Tensors with the CPU's bytes.

- A device name tgrad does not know, or one this machine cannot use, is a typed error before the
  checkpoint is read (core tier, no device needed).
- PoCL (device="opencl"; slow tier: PoCL compiles each of the model's kernels once, seconds on
  a cold cache): bf16 and float32 logits bit-identical to the CPU's, greedy tokens and their
  logits through the KV cache, decode steps run as captured programs, a padded batch,
  Module.to("opencl") on a CPU-loaded model, a model with packed weights, and
  `python -m tgrad generate --device opencl`.
- The cuda backend by the same code path, against the fake driver and NVRTC (tests/c/fake_cuda.c;
  its launches do nothing, so only the placement and the absence of refusals are checked).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tgrad
import tgrad.models
import tgrad.nn
from tgrad import errors
from tgrad import render as R

from model_dirs import model_dir

IDS = np.random.default_rng(9).integers(0, 96, (2, 6))


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_dir(tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="module")
def pair(llama: Path) -> tuple[tgrad.models.CausalLM, tgrad.models.CausalLM]:
    """The CPU's model and the same checkpoint on OpenCL (the opencl_device fixture checks first)."""
    return tgrad.models.from_pretrained(llama), tgrad.models.from_pretrained(llama, device="opencl")


def _same(a: tgrad.Tensor | np.ndarray, b: tgrad.Tensor | np.ndarray) -> bool:
    x = a.numpy() if isinstance(a, tgrad.Tensor) else a
    y = b.numpy() if isinstance(b, tgrad.Tensor) else b
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


# ---- device names: before anything is read ---------------------------------------------------------
def test_an_unknown_device_is_refused_before_the_checkpoint_is_read(tmp_path: Path) -> None:
    missing = tmp_path / "no-model-here"  # reading it would raise FileMissingError
    with pytest.raises(errors.InvalidArgumentError, match="unknown device 'gpu'"):
        tgrad.models.from_pretrained(missing, device="gpu")
    with pytest.raises(errors.InvalidArgumentError, match="device"):
        tgrad.models.from_pretrained(missing, device=3)  # type: ignore[arg-type]


def test_an_unusable_device_is_refused_before_the_checkpoint_is_read(tmp_path: Path) -> None:
    unusable = [b.name for b in tgrad.backends() if b.name != "cpu" and not (b.built and b.available)]
    if not unusable:
        pytest.skip("every backend is usable here")
    with pytest.raises(errors.BackendUnavailableError):
        tgrad.models.from_pretrained(tmp_path / "no-model-here", device=unusable[0])


def test_a_cpu_model_says_where_it_runs(llama: Path) -> None:
    model = tgrad.models.from_pretrained(llama)
    assert model.device == "cpu" and model(IDS[:, :2]).device == "cpu"


def test_every_step_of_the_forward_renders_in_every_language() -> None:
    """The forward's steps as a device renders them (the cuda tier compiles the CUDA ones with nvcc,
    test_cuda_compile.py): every one renders in OpenCL C, CUDA and MSL, whose softmax, norm and rope
    kernels compute with kernels/gpu/softdouble.h (MSL has no double; test_gpu_softmax.py and its
    neighbours run them on the MSL emulator)."""
    from model_dirs import config, forward_steps, in_memory

    routes: set[str] = set()
    for y, step in forward_steps(in_memory(config())):
        for lang in ("opencl", "cuda", "msl"):
            k = R.render_tensor(y, None, lang, step=step)
            assert k.source
            routes.add(k.route)
    assert {"softmax", "norm", "rope"} <= routes


# ---- PoCL --------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_opencl_logits_are_the_cpu_bytes(pair: tuple[tgrad.models.CausalLM, tgrad.models.CausalLM],
                                         opencl_device: str) -> None:
    cpu, gpu = pair
    assert gpu.device == "opencl"
    assert all(t.device == "opencl" for t in [*gpu.parameters(), *gpu.buffers()])
    for dtype in (tgrad.bfloat16, tgrad.float32):
        want, got = cpu(IDS, logits_dtype=dtype), gpu(IDS, logits_dtype=dtype)
        assert got.device == "cpu" and got.dtype == dtype
        assert _same(got, want), f"{dtype}: the logits differ"


@pytest.mark.slow
def test_opencl_greedy_decoding_through_the_kv_cache_is_the_cpu_bytes(
        pair: tuple[tgrad.models.CausalLM, tgrad.models.CausalLM], opencl_device: str) -> None:
    cpu, gpu = pair
    want_tokens, want_logits = cpu.generate(IDS, 4, return_logits=True)
    got_tokens, got_logits = gpu.generate(IDS, 4, return_logits=True)
    assert _same(got_tokens, want_tokens) and _same(got_logits, want_logits)
    cache = gpu.new_cache()
    gpu(IDS[:, :4], cache=cache)
    assert all(k is not None and k.device == "opencl" for k in cache.keys)
    assert _same(gpu(IDS[:, 4:], cache=cache), cpu(IDS)[:, 4:])  # the cache's bytes: a full recompute's


@pytest.mark.slow
def test_opencl_decode_steps_run_as_programs_with_the_cpu_bytes(
        pair: tuple[tgrad.models.CausalLM, tgrad.models.CausalLM], opencl_device: str) -> None:
    """generate's steps on a device run as captured programs (tgrad.models.step), across a
    32-position boundary: the cache written at a start tensor on the device (slice_scatter_at's
    GPU kernel), the logits the CPU's bytes, the same kernels from one position to the next."""
    from tgrad.models.step import DecodeSteps

    cpu, gpu = pair
    want_tokens, want_logits = cpu.generate(IDS[:1], 30, return_logits=True)
    got_tokens, got_logits = gpu.generate(IDS[:1], 30, return_logits=True)
    assert _same(got_tokens, want_tokens) and _same(got_logits, want_logits)
    cache = gpu.new_cache(40)
    gpu(IDS[:1], cache=cache, logits_to_keep=1, logits_dtype=tgrad.float32)
    steps = DecodeSteps(gpu, cache)
    for i in range(29):  # positions 6 .. 34: captured at 6 (seen 32) and 32 (seen 40, the capacity)
        logits = steps(want_tokens[:, i:i + 1])  # the logits that chose token i + 1
        assert logits.device == "cpu" and _same(logits, want_logits[:, i + 1:i + 2])
    assert (steps.captures, steps.runs) == (2, 27)
    assert all(k.device == "opencl" for k in cache.keys)


@pytest.mark.slow
def test_a_packed_model_on_opencl_gives_the_cpu_bytes(llama: Path,
                                                      pair: tuple[tgrad.models.CausalLM, tgrad.models.CausalLM],
                                                      opencl_device: str) -> None:
    """Weights packed in panels (docs/models.md, "Packed weights") run through the batched routes."""
    cpu, _ = pair
    packed = tgrad.models.from_pretrained(llama, device="opencl", pack_weights=True)
    assert any(isinstance(m, tgrad.nn.PackedLinear) for m in packed.modules())
    assert all(t.device == "opencl" for t in packed.parameters())
    for dtype in (tgrad.bfloat16, tgrad.float32):
        assert _same(packed(IDS, logits_dtype=dtype), cpu(IDS, logits_dtype=dtype))
    want_tokens, want_logits = cpu.generate(IDS, 4, return_logits=True)
    got_tokens, got_logits = packed.generate(IDS, 4, return_logits=True)
    assert _same(got_tokens, want_tokens) and _same(got_logits, want_logits)


@pytest.mark.slow
def test_opencl_padded_batch_is_the_cpu_bytes(pair: tuple[tgrad.models.CausalLM, tgrad.models.CausalLM],
                                              opencl_device: str) -> None:
    cpu, gpu = pair
    mask = np.array([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]])
    assert _same(gpu(IDS, attention_mask=mask), cpu(IDS, attention_mask=mask))
    assert _same(gpu.generate(IDS, 3, attention_mask=mask), cpu.generate(IDS, 3, attention_mask=mask))


@pytest.mark.slow
def test_module_to_moves_a_loaded_model(llama: Path, pair: tuple[tgrad.models.CausalLM, tgrad.models.CausalLM],
                                        opencl_device: str) -> None:
    moved = tgrad.models.from_pretrained(llama, logits_dtype=tgrad.float32).to("opencl")
    assert moved.device == "opencl"
    assert _same(moved(IDS[:1]), pair[0](IDS[:1], logits_dtype=tgrad.float32))
    assert moved.to("cpu").device == "cpu"


# ---- CUDA by the same path (the fake driver) ----------------------------------------------------------
_CUDA_PROBE = r"""
import json, sys
import numpy as np
import tgrad.models
model = tgrad.models.from_pretrained(sys.argv[1], device="cuda")
logits = model(np.array([[1, 2, 3]]))
tokens = model.generate(np.array([[1, 2, 3]]), 2)
print(json.dumps({"device": model.device, "weights": sorted({p.device for p in model.parameters()}),
                  "logits": [logits.device, list(logits.shape)], "tokens": list(tokens.shape)}))
"""


@pytest.mark.skipif(sys.platform == "darwin", reason="the CUDA backend is not built on macOS")
def test_the_cuda_device_takes_the_same_path(llama: Path, fake_cuda: str) -> None:
    env = {**os.environ, "TGRAD_CUDA_DRIVER": fake_cuda, "TGRAD_NVRTC": fake_cuda}
    proc = subprocess.run([sys.executable, "-c", _CUDA_PROBE, str(llama)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"device": "cuda", "weights": ["cuda"], "logits": ["cpu", [1, 3, 96]], "tokens": [1, 2]}


@pytest.mark.slow
def test_the_cli_decodes_on_opencl(llama: Path, pair: tuple[tgrad.models.CausalLM, tgrad.models.CausalLM],
                                   opencl_device: str, capsys: pytest.CaptureFixture[str]) -> None:
    from tgrad.__main__ import main

    assert main(["generate", str(llama), "--ids", "1,2,3", "--max-new-tokens", "3", "--device", "opencl"]) == 0
    want = pair[0].generate(np.array([[1, 2, 3]]), 3)[0]
    assert capsys.readouterr().out == ",".join(map(str, want)) + "\n"
