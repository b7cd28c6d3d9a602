"""``python -m tgrad bench --generate``: a random Llama (issue 35's ~100 M shape by default:
hidden 1024, 8 layers, 16 heads, 4 KV heads, intermediate 2816, vocab 8192, bf16) decoded by
tgrad.models and by transformers' eager bf16 forward (torch) on the same threads, when
transformers is installed.

Each peer runs in its own child process (so that its peak resident memory, ru_maxrss, is its
own: VmHWM), `--gen-rounds` times, the peers alternating: load the directory, prefill a prompt of
`--gen-prompt` tokens (the best of 3 forwards), then greedy-decode `--gen-tokens` tokens with
the peer's KV cache (tgrad: generate; transformers: generate with min_new_tokens) and time the
decode as its total minus a prefill. Reported: prefill tokens/s and ms, decode tokens/s (the
median over rounds, with the range), and peak RSS. The random checkpoint is written once into a
temporary directory (or --gen-model DIR is used)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..orders import get_matmul_order

SHAPE = {"vocab_size": 8192, "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 8,
         "num_attention_heads": 16, "num_key_value_heads": 4}

_CHILD = r'''
import json, resource, sys, time
import numpy as np
peer, path, threads, prompt_len, new = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
order = sys.argv[6]
vocab = json.load(open(path + "/config.json"))["vocab_size"]
ids = (np.arange(prompt_len, dtype=np.int64)[None] * 7 + 3) % vocab
if peer == "tgrad":
    import tgrad, tgrad.models
    tgrad.set_num_threads(threads)
    tgrad.set_matmul_order(order)  # this thread makes every product of the prefill and the decode
    model = tgrad.models.from_pretrained(path)
    def prefill():
        model(ids, logits_dtype=tgrad.float32).realize()
    def decode():
        return model.generate(ids, new)
else:
    import torch, transformers
    torch.set_num_threads(threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, attn_implementation="eager")
    model.eval()
    tids = torch.from_numpy(ids)
    def prefill():
        with torch.no_grad():
            model(tids)
    def decode():
        with torch.no_grad():
            return model.generate(tids, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
decode()  # warm: the first call pays for allocation and dispatch set-up
times = []
for _ in range(3):
    t = time.perf_counter(); prefill(); times.append(time.perf_counter() - t)
pre = min(times)
t = time.perf_counter(); decode(); total = time.perf_counter() - t
# VmHWM: this process's own peak (ru_maxrss keeps the parent's peak across exec on Linux)
hwm = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")]
rss = int(hwm[0]) / 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
done = {"prefill_s": pre, "decode_s": max(total - pre, 1e-9), "rss_mb": rss}
if peer == "tgrad":  # the order, and the routes of the prefill's products (explain)
    done["matmul_order"] = tgrad.get_matmul_order()
    steps = model(ids, logits_dtype=tgrad.float32).explain(json=True)["steps"]
    done["routes"] = sorted({s["route"] for s in steps if s.get("op") == "matmul" and s.get("route")})
print(json.dumps(done))
'''


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--generate", action="store_true",
                        help="issue 35's model bench: prefill and decode tokens/s and peak RSS of a random Llama, "
                        "tgrad.models against transformers eager bf16 (tgrad.bench.generate)")
    parser.add_argument("--gen-model", type=Path, default=None, metavar="DIR",
                        help="--generate: a model directory to run instead of the random ~100 M Llama")
    parser.add_argument("--gen-prompt", type=int, default=64, metavar="L", help="--generate: prompt tokens (64)")
    parser.add_argument("--gen-tokens", type=int, default=32, metavar="N", help="--generate: decoded tokens (32)")
    parser.add_argument("--gen-rounds", type=int, default=3, metavar="R", help="--generate: rounds per peer (3)")


def write_model(path: Path, seed: int = 0, shape: dict[str, int] | None = None) -> Path:
    """A random Llama of `shape` (default SHAPE) as a bf16 checkpoint (weights N(0, 0.02), norm
    weights 1 + N(0, 0.02)); bench --train writes its cases' with it too."""
    import tgrad
    import tgrad.models
    import tgrad.safetensors

    doc = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **(shape or SHAPE), "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "max_position_embeddings": 4096, "tie_word_embeddings": False,
           "hidden_act": "silu", "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2}
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(doc))
    shapes = tgrad.models.expected_weights(tgrad.models.config_from_dict(doc))
    gen = tgrad.random.Generator(seed)
    tgrad.safetensors.save(path / "model.safetensors", {
        n: gen.randn(*s) * 0.02 + (1.0 if n.endswith("norm.weight") else 0.0) for n, s in shapes.items()})
    return path


def _child(peer: str, path: Path, threads: int, args: argparse.Namespace) -> dict[str, Any]:
    """One round of `peer` in a child process; tgrad's products take bench --order there."""
    order = getattr(args, "order", None) or get_matmul_order()
    out = subprocess.run([sys.executable, "-c", _CHILD, peer, str(path), str(threads), str(args.gen_prompt),
                          str(args.gen_tokens), order], capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"the {peer} child failed:\n{out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if peer == "tgrad" and result.get("matmul_order") != order:
        raise RuntimeError(f"the tgrad child ran the {result.get('matmul_order')} order, not {order}")
    return result


def run(args: argparse.Namespace) -> int:
    import importlib.util

    import tgrad

    threads = args.threads or tgrad.num_threads()
    peers = ["tgrad"]
    if not args.no_peers and importlib.util.find_spec("transformers") and importlib.util.find_spec("torch"):
        peers.append("transformers")
    with tempfile.TemporaryDirectory() as tmp:
        path = args.gen_model or write_model(Path(tmp) / "llama")
        runs: dict[str, list[dict[str, Any]]] = {p: [] for p in peers}
        for _ in range(max(1, args.gen_rounds)):
            for peer in peers:
                runs[peer].append(_child(peer, path, threads, args))
    print(f"model {path.name if args.gen_model else 'random Llama ' + json.dumps(SHAPE)}, {threads} threads, "
          f"prompt {args.gen_prompt}, {args.gen_tokens} new tokens, {args.gen_rounds} rounds (median [min, max]), "
          f"tgrad's matmul order {getattr(args, 'order', 'pairwise')}")
    print(f"{'peer':<14} {'prefill tok/s':>22} {'prefill ms':>10} {'decode tok/s':>22} {'peak RSS MB':>12}")
    routes = sorted({r for run in runs["tgrad"] for r in run.get("routes", [])})
    print(f"tgrad's prefill products: {', '.join(routes) or 'none'}")
    for peer, rs in runs.items():
        pre = np.array([args.gen_prompt / r["prefill_s"] for r in rs])
        dec = np.array([args.gen_tokens / r["decode_s"] for r in rs])
        ms = np.median([r["prefill_s"] * 1e3 for r in rs])
        rss = max(r["rss_mb"] for r in rs)
        print(f"{peer:<14} {np.median(pre):8.0f} [{pre.min():5.0f}, {pre.max():5.0f}] {ms:10.1f} "
              f"{np.median(dec):8.1f} [{dec.min():5.1f}, {dec.max():5.1f}] {rss:12.0f}")
    return 0
