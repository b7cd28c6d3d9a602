"""``python -m tgrad generate MODEL_DIR (--ids 1,2,3 | --prompt "text") [--max-new-tokens 32]``:
decode from a Hugging Face Llama-family directory (tgrad.models).

With --ids the new token ids are printed, comma-separated. Several --ids (or --prompt) decode
as one batch, left-padded with an attention_mask, one line each (each the tokens of that prompt
alone, docs/models.md). With --prompt the directory's
tokenizer.json encodes the prompt and decodes the new tokens (the `tokenizers` package, an
optional extra: pip install 'tgrad[models]'), and the text is printed. Sampling options are
generate's (docs/models.md). Decoding stops at the config's eos_token_id unless --ignore-eos.
Exit status: 0 done, 1 the model could not be loaded (the typed error is printed),
2 bad command-line input (no tokenizer.json for --prompt, a token id past the vocabulary, a
sampling option out of range, a --device tgrad does not know).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

from .. import errors

__all__ = ["add_arguments", "main"]


def _ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of token ids") from None
    if not ids:
        raise argparse.ArgumentTypeError("no token ids given")
    return ids


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", type=Path, metavar="MODEL_DIR", help="a directory with config.json and safetensors")
    prompt = parser.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--ids", type=_ids, action="append",
                        help="the prompt as comma-separated token ids, e.g. 1,2,3 (repeat for a batch)")
    prompt.add_argument("--prompt", action="append",
                        help="the prompt as text (needs MODEL_DIR/tokenizer.json and the tokenizers package; "
                             "repeat for a batch)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="tokens to generate (default 32)")
    parser.add_argument("--do-sample", action="store_true", help="sample instead of greedy decoding")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1)")
    parser.add_argument("--top-k", type=int, default=None, help="sample among the k most likely tokens")
    parser.add_argument("--top-p", type=float, default=None, help="sample from the smallest set of probability >= p")
    parser.add_argument("--seed", type=int, default=None, help="seed of tgrad's counter-based generator")
    parser.add_argument("--convert", action="store_true", help="round float32/float16 weights to bf16 as they load")
    parser.add_argument("--ignore-eos", action="store_true", help="do not stop at the config's eos_token_id")
    parser.add_argument("--device", default="cpu",
                        help="where the model runs: cpu (default), opencl, cuda or metal (docs/models.md); the "
                             "tokens are the CPU's")
    parser.add_argument("--no-pack", action="store_true",
                        help="keep the weights as [out, in] (on the CPU they are packed in 32-column panels by "
                             "default: the same tokens, faster decoding; docs/models.md)")
    parser.add_argument("--order", choices=["pairwise", "block32"], default=None,
                        help="the products' accumulation order (docs/numerics.md; block32 runs on AMX where the "
                             "CPU has it; default: this thread's, pairwise)")
    parser.set_defaults(func=main)


def _tokenizer(model_dir: Path) -> Any:
    """The directory's tokenizer, or a message saying why there is none."""
    file = model_dir / "tokenizer.json"
    if not file.is_file():
        return f"--prompt needs {file}, which does not exist (give token ids with --ids)"
    try:
        tokenizers = importlib.import_module("tokenizers")  # an optional extra: no stubs needed
    except ImportError:
        return "--prompt needs the tokenizers package: pip install 'tgrad[models]' (or give token ids with --ids)"
    return tokenizers.Tokenizer.from_file(str(file))


def main(args: argparse.Namespace) -> int:
    import numpy as np

    from . import from_pretrained

    tokenizer = None
    if args.prompt is not None:
        tokenizer = _tokenizer(args.model)
        if isinstance(tokenizer, str):
            print(f"tgrad generate: {tokenizer}", file=sys.stderr)
            return 2
        prompts = [tokenizer.encode(text).ids for text in args.prompt]
        if not all(prompts):
            print("tgrad generate: a prompt encodes to no tokens", file=sys.stderr)
            return 2
    else:
        prompts = args.ids
    width = max(len(p) for p in prompts)
    ids = np.zeros((len(prompts), width), np.int64)  # left padding with token 0, masked out
    mask = np.zeros_like(ids)
    for row, p in enumerate(prompts):
        ids[row, width - len(p):], mask[row, width - len(p):] = p, 1
    try:
        model = from_pretrained(args.model, convert=args.convert, device=args.device,
                                pack_weights=args.device == "cpu" and not args.no_pack)
    except errors.TgradError as exc:
        print(f"tgrad generate: {exc.code}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, errors.InvalidArgumentError) else 1  # an unknown --device
    eos = None if args.ignore_eos else list(model.config.eos_token_id) or None
    from ..orders import get_matmul_order, matmul_order

    try:
        with matmul_order(args.order or get_matmul_order()):  # every product of the generation
            new = model.generate(ids, args.max_new_tokens, do_sample=args.do_sample,
                                 temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                                 eos_token_id=eos, attention_mask=mask)
    except (errors.InvalidArgumentError, errors.IndexOutOfRangeError) as exc:  # an option or a token id
        print(f"tgrad generate: {exc.code}: {exc}", file=sys.stderr)
        return 2
    for row in new:
        tokens = [int(t) for t in row]
        stop = next((i for i, t in enumerate(tokens) if eos and t in eos), None)
        tokens = tokens if stop is None else tokens[:stop + 1]  # a row that finished first repeats its eos
        print(tokenizer.decode(tokens) if tokenizer is not None else ",".join(map(str, tokens)))
    return 0
