"""``python -m tgrad bench --generate``: a random Llama (issue 35's ~100 M shape by default:
hidden 1024, 8 layers, 16 heads, 4 KV heads, intermediate 2816, vocab 8192, bf16) decoded by
tgrad.models and by its peers on the same threads, where they are installed: transformers' eager
bf16 forward (torch), the same with torch.compile (transformers' recipe: a static KV cache and
the forward compiled per shape; the warm-up call pays for compiling; `--gen-no-compile` leaves it
out), and llama.cpp through llama-cpp-python on a bf16 GGUF of the same weights
(written by gguf_export with the `gguf` package).

Each peer runs in its own child process (so that its peak resident memory, ru_maxrss, is its
own: VmHWM), `--gen-rounds` times, the peers alternating: load the model, prefill a prompt of
`--gen-prompt` tokens (the best of 3 forwards, each computing the last position's logits alone,
as generate's own prefill and llama.cpp's eval do), then greedy-decode `--gen-tokens` tokens with
the peer's KV cache (tgrad: generate; transformers: generate with min_new_tokens; llama.cpp: eval
of the prompt, then of each chosen token) and time the decode as its total minus a prefill: the
`--gen-tokens` - 1 forwards after the prompt's (the first new token is the prompt forward's).
Reported: prefill tokens/s and ms, decode tokens/s (the median over rounds, with the range), the
weights' GB/s that decode rate means (all weights but the embedding table are read once a token)
against the machine's read rate over the same bytes (libtgrad's read probe), peak RSS, and where
each peer's greedy tokens and last-position logits differ from tgrad's. The random checkpoint is
written once into a temporary directory (or --gen-model DIR is used)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
order, gguf_path = sys.argv[6], sys.argv[7]
vocab = json.load(open(path + "/config.json"))["vocab_size"]
ids = (np.arange(prompt_len, dtype=np.int64)[None] * 7 + 3) % vocab
done = {}
if peer == "tgrad":
    import tgrad, tgrad.models
    tgrad.set_num_threads(threads)
    tgrad.set_matmul_order(order)  # this thread makes every product of the prefill and the decode
    model = tgrad.models.from_pretrained(path, pack_weights=True)  # as `python -m tgrad generate` runs it
    def last_logits():
        return model(ids, logits_dtype=tgrad.float32).numpy()[0, -1]
    def prefill():  # the last position's logits, as generate's prefill and llama.cpp's eval compute them
        model(ids, logits_to_keep=1, logits_dtype=tgrad.float32).realize()
    def decode():
        return [int(t) for t in np.asarray(model.generate(ids, new)).reshape(-1)[-new:]]
elif peer == "llama.cpp":
    import llama_cpp
    llm = llama_cpp.Llama(model_path=gguf_path, n_threads=threads, n_threads_batch=threads,
                          n_ctx=prompt_len + new + 16, n_batch=max(prompt_len, 32), verbose=False)
    lids = [int(i) for i in ids[0]]
    width = llm.n_vocab()
    def logits():  # the last evaluated position's (llama-cpp-python keeps no scores without logits_all)
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(width,)).copy()
    def last_logits():
        prefill()
        return logits()
    def prefill():
        llm.reset(); llm.eval(lids)
    def decode():  # greedy, as tgrad's and transformers' generate: new - 1 forwards after the prompt's
        prefill()
        out = [int(np.argmax(logits()))]
        while len(out) < new:
            llm.eval([out[-1]])
            out.append(int(np.argmax(logits())))
        return out
else:
    import torch, transformers
    torch.set_num_threads(threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, attn_implementation="eager")
    model.eval()
    if peer == "torch.compile":  # transformers' recipe: a static KV cache, the forward compiled once a shape
        model.generation_config.cache_implementation = "static"
        model.forward = torch.compile(model.forward, dynamic=False)
    tids = torch.from_numpy(ids)
    def last_logits():
        with torch.no_grad():
            return model(tids).logits[0, -1].float().numpy()
    def prefill():  # the last position's logits, as generate's prefill computes them
        with torch.no_grad():
            model(tids, logits_to_keep=1)
    def decode():
        with torch.no_grad():
            out = model.generate(tids, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
        return [int(t) for t in out[0, -new:]]
decode()  # warm: the first call pays for allocation and dispatch set-up (torch.compile: for compiling)
prefill()
times = []
for _ in range(3):
    t = time.perf_counter(); prefill(); times.append(time.perf_counter() - t)
pre = min(times)
t = time.perf_counter(); tokens = decode(); total = time.perf_counter() - t
# VmHWM: this process's own peak (ru_maxrss keeps the parent's peak across exec on Linux)
hwm = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")]
rss = int(hwm[0]) / 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
done.update({"prefill_s": pre, "decode_s": max(total - pre, 1e-9), "decode_raw_s": total - pre, "rss_mb": rss,
             "tokens": tokens, "last_logits": [float(v) for v in last_logits()]})
if peer == "tgrad":  # the order, the routes of the prefill's products (explain), the weights' read rate
    done["matmul_order"] = tgrad.get_matmul_order()
    steps = model(ids, logits_dtype=tgrad.float32).explain(json=True)["steps"]
    done["routes"] = sorted({s["route"] for s in steps if s.get("op") == "matmul" and s.get("route")})
    from tgrad._ffi import ffi, lib
    from tgrad.errors import _check
    parts = []  # every weight a decode step reads whole: all but the embedding table (one row a token)
    for name, w in model.named_parameters():
        if "embed_tokens" in name and not model.config.tie_word_embeddings:
            continue
        ptr = ffi.new("const uint16_t **")
        _check(lib.tgrad_tensor_data(w._h, ptr))
        parts.append((ptr[0], 2 * int(np.prod(w.shape))))
    best = float("inf")
    for _ in range(5):  # the machine's read rate over the same bytes: libtgrad's plain read probe
        t = time.perf_counter()
        for data, nbytes in parts:
            _check(lib.tgrad_cpu_read_run(data, nbytes, threads))
        best = min(best, time.perf_counter() - t)
    done["weight_bytes"] = sum(n for _, n in parts)
    done["read_gbps"] = done["weight_bytes"] / best / 1e9
print(json.dumps(done))
'''


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--generate", action="store_true",
                        help="issue 35's model bench: prefill and decode tokens/s and peak RSS of a random Llama, "
                        "tgrad.models against transformers eager bf16 (tgrad.bench.generate)")
    parser.add_argument("--model", "--gen-model", dest="gen_model", type=Path, default=None, metavar="DIR",
                        help="the model bench (--generate) on this Hugging Face model directory instead of the "
                        "random ~100 M Llama")
    parser.add_argument("--gen-prompt", type=int, default=64, metavar="L", help="--generate: prompt tokens (64)")
    parser.add_argument("--gen-tokens", type=int, default=32, metavar="N", help="--generate: decoded tokens (32)")
    parser.add_argument("--gen-rounds", type=int, default=3, metavar="R", help="--generate: rounds per peer (3)")
    parser.add_argument("--gen-no-compile", action="store_true",
                        help="--generate: leave out the torch.compile peer (it compiles for about a minute a round)")


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


def _child(peer: str, path: Path, threads: int, args: argparse.Namespace, gguf_path: str = "") -> dict[str, Any]:
    """One round of `peer` in a child process; tgrad's products take bench --order there."""
    order = getattr(args, "order", None) or get_matmul_order()
    out = subprocess.run([sys.executable, "-c", _CHILD, peer, str(path), str(threads), str(args.gen_prompt),
                          str(args.gen_tokens), order, gguf_path], capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"the {peer} child failed:\n{out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if peer == "tgrad" and result.get("matmul_order") != order:
        raise RuntimeError(f"the tgrad child ran the {result.get('matmul_order')} order, not {order}")
    return result


def _peers(args: argparse.Namespace) -> list[str]:
    import importlib.util

    peers = ["tgrad"]
    if args.no_peers:
        return peers
    if importlib.util.find_spec("transformers") and importlib.util.find_spec("torch"):
        peers.append("transformers")
        if not getattr(args, "gen_no_compile", False):
            if shutil.which("g++") or shutil.which("c++"):  # inductor's CPU code needs a C++ compiler
                peers.append("torch.compile")
            else:
                print("torch.compile peer skipped: no C++ compiler for inductor")
    if importlib.util.find_spec("llama_cpp") and importlib.util.find_spec("gguf"):
        peers.append("llama.cpp")
    return peers


def _llama_cpp_file(path: Path, tmp: str, peers: list[str]) -> str:
    """The bf16 GGUF of `path` for the llama.cpp peer ("" and the peer dropped, with the reason,
    when the writer cannot express the model)."""
    if "llama.cpp" not in peers:
        return ""
    from .gguf_export import write_gguf

    try:
        return str(write_gguf(path, Path(tmp) / "model-bf16.gguf"))
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
        print(f"llama.cpp peer skipped: {type(exc).__name__}: {exc}")
        peers.remove("llama.cpp")
        return ""


def _agreement(runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Each peer's greedy tokens and last-position float32 logits against tgrad's (first round)."""
    ours = runs["tgrad"][0]
    lines = []
    for peer, rs in runs.items():
        if peer == "tgrad":
            continue
        theirs = rs[0]
        a, b = ours["tokens"], theirs["tokens"]
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
        la, lb = np.array(ours["last_logits"]), np.array(theirs["last_logits"])
        scale = max(float(np.abs(la).max()), 1e-30)
        diverge = "all equal" if first is None else f"first differs at token {first}"
        lines.append(f"{peer} against tgrad: greedy tokens {diverge} (of {len(a)}); prompt's last logits "
                     f"max |diff| {float(np.abs(la - lb).max()):.3g} (largest |logit| {scale:.3g})")
    return lines


def run(args: argparse.Namespace) -> int:
    import tgrad
    import tgrad.models

    if args.gen_model is not None:  # a wrong directory is the typed error, before any child starts
        try:
            tgrad.models.read_config(args.gen_model)
        except tgrad.errors.TgradError as exc:
            print(f"python -m tgrad bench: error: --model: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2
    threads = args.threads or tgrad.num_threads()
    peers = _peers(args)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.gen_model or write_model(Path(tmp) / "llama")
        gguf_path = _llama_cpp_file(path, tmp, peers)
        runs: dict[str, list[dict[str, Any]]] = {p: [] for p in peers}
        for _ in range(max(1, args.gen_rounds)):
            for peer in peers:
                runs[peer].append(_child(peer, path, threads, args, gguf_path))
    print(f"model {path.name if args.gen_model else 'random Llama ' + json.dumps(SHAPE)}, {threads} threads, "
          f"prompt {args.gen_prompt}, {args.gen_tokens} new tokens, {args.gen_rounds} rounds (median [min, max]), "
          f"tgrad's matmul order {getattr(args, 'order', 'pairwise')}")
    ours = runs["tgrad"]
    weight_gb = ours[0]["weight_bytes"] / 1e9
    read = max(r["read_gbps"] for r in ours)
    print(f"weights read per decoded token: {weight_gb * 1e3:.0f} MB; the machine reads them at {read:.1f} GB/s "
          f"(libtgrad's read probe over the same weights, {threads} threads, best of the rounds)")
    routes = sorted({r for run in ours for r in run.get("routes", [])})
    print(f"tgrad's prefill products: {', '.join(routes) or 'none'}")
    print("of read: the median decode against the best read; paired: the median of each round's decode against "
          "the read probe of the same round (tgrad's child, run just before the peers' children of that round)")
    print(f"{'peer':<14} {'prefill tok/s':>22} {'prefill ms':>10} {'decode tok/s':>22} {'weights GB/s':>12} "
          f"{'of read':>8} {'paired':>7} {'peak RSS MB':>12}")
    steps = _decode_steps(args)
    for peer, rs in runs.items():
        pre = np.array([args.gen_prompt / r["prefill_s"] for r in rs])
        dec = np.array([steps / r["decode_s"] for r in rs])
        ms = np.median([r["prefill_s"] * 1e3 for r in rs])
        rss = max(r["rss_mb"] for r in rs)
        gbps = np.median(dec) * weight_gb
        paired = float(np.median([d * weight_gb / r["read_gbps"] for d, r in zip(dec, ours)]))
        print(f"{peer:<14} {np.median(pre):8.0f} [{pre.min():5.0f}, {pre.max():5.0f}] {ms:10.1f} "
              f"{np.median(dec):8.1f} [{dec.min():5.1f}, {dec.max():5.1f}] {gbps:12.3g} {gbps / read:8.0%} "
              f"{paired:7.0%} {rss:12.0f}")
    short = sorted(peer for peer, rs in runs.items() if any(r.get("decode_raw_s", 1.0) <= 0 for r in rs))
    if short:  # generate's total was within a prefill's spread: the difference means nothing
        print(f"warning: {', '.join(short)}: a round's decode took no longer than its prefill's spread, so its "
              "decode tokens/s is not a measurement; use more --gen-tokens")
    for line in _agreement(runs):
        print(line)
    out_dir = Path(getattr(args, "out", "bench-out"))
    print(_save(out_dir, runs, args, threads, weight_gb, read))
    return 0


def _decode_steps(args: argparse.Namespace) -> int:
    """The forwards decode_s times: the first new token comes from the prompt's forward (prefill_s),
    each later one from a forward of its own."""
    return max(int(args.gen_tokens) - 1, 1)


def _save(out_dir: Path, runs: dict[str, list[dict[str, Any]]], args: argparse.Namespace, threads: int,
          weight_gb: float, read: float) -> str:
    """generate.json (every round of every peer, logits left out) and generate.png (decode and
    prefill tokens/s per peer, each round a dot; needs matplotlib)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    slim = {p: [{k: v for k, v in r.items() if k != "last_logits"} for r in rs] for p, rs in runs.items()}
    (out_dir / "generate.json").write_text(json.dumps({
        "threads": threads, "prompt": args.gen_prompt, "new_tokens": args.gen_tokens, "weight_gb": weight_gb,
        "read_gbps": read, "runs": slim}, indent=1))
    try:
        import matplotlib  # type: ignore[import-not-found, unused-ignore]  # typed where installed

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]
    except Exception as exc:  # noqa: BLE001 - the plot is optional
        return f"wrote {out_dir / 'generate.json'}; no plot ({type(exc).__name__}: {exc})"
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, (what, count, key) in zip(axes, (("decode", _decode_steps(args), "decode_s"),
                                              (f"prefill of {args.gen_prompt}", args.gen_prompt, "prefill_s"))):
        for i, (peer, rs) in enumerate(runs.items()):
            rates = [count / r[key] for r in rs]
            ax.bar(i, float(np.median(rates)), color=f"C{i}", alpha=0.7)
            ax.plot([i] * len(rates), rates, "k.", markersize=4)
        ax.set_xticks(range(len(runs)), list(runs))
        ax.set_ylabel("tokens/s")
        ax.set_title(f"{what}, {threads} threads")
    if read:
        axes[0].axhline(read / weight_gb, color="gray", linestyle=":", label=f"read roof ({read:.0f} GB/s)")
        axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "generate.png", dpi=110)
    plt.close(fig)
    return f"wrote {out_dir / 'generate.json'} and {out_dir / 'generate.png'}"
