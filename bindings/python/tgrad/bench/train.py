"""``python -m tgrad bench --train``: issue 36's training bench, steps per second of tgrad against
torch eager on the same threads, for

- the digits MLP of examples/train_digits.py: 64-128-128-10, batch 64;
- a 2-layer, 256-wide MLP: 256-256-256-10, batch 256;
- a small random Llama (tgrad.models / transformers' LlamaForCausalLM from one bf16 checkpoint):
  hidden 256, 4 layers, 4 heads, 2 kv heads, intermediate 688, vocab 2048, one sequence of L=128,
  the LM loss (next token, cross entropy over the vocabulary).

A step is forward + cross-entropy loss + backward + AdamW (lr 1e-3, weight decay 0.01), realized.
tgrad: bf16 parameters with float32 AdamW master weights and state (tgrad.optim.AdamW), the
forward and backward in bf16, the loss float32; the step ends with the new parameters realized
(AdamW realizes them) and the loss realized. torch: float32 parameters and AdamW (torch's
default, foreach), the forward under ``torch.autocast("cpu", dtype=torch.bfloat16)``, the loss
in float32, as mixed-precision training on a CPU runs; the Llama with transformers' default
attention (sdpa). The data are synthetic (seeded random inputs and classes, random token ids),
the same batch each step, the same values in both peers (bf16-rounded inputs).

The two peers' steps run interleaved (bench.timing's balanced rounds, `--train-steps` timed steps
each after two warm-up rounds), and the ratio is the median of the paired ratios torch/tgrad with
a bootstrap 95% interval (bench.stats): above 1, tgrad trains faster.

Once per case each peer also trains a fresh model (same seed) for 3 steps, twice, and compares
the two loss trajectories' float32 bits: "identical: yes" when the runs agree bit for bit. The
run fails (status 1) when tgrad's do not."""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .op_cases import threads_and_torch, write_report
from .shapes import _positive_int
from .stats import bootstrap_ratio, verdict
from .timing import _interleaved, _Timed, warm_up

LR, WEIGHT_DECAY = 1e-3, 0.01
TRAJECTORY_STEPS = 3


@dataclass(frozen=True)
class Case:
    """An MLP (`sizes`: the layer widths, input first, classes last) at `batch`, or, `llama` set,
    a random Llama of that config at one sequence of `length` tokens."""
    label: str
    sizes: tuple[int, ...] = ()
    batch: int = 0
    llama: tuple[tuple[str, int], ...] = ()
    length: int = 0


def _llama(vocab: int, hidden: int, inter: int, layers: int, heads: int, kv: int) -> tuple[tuple[str, int], ...]:
    return (("vocab_size", vocab), ("hidden_size", hidden), ("intermediate_size", inter),
            ("num_hidden_layers", layers), ("num_attention_heads", heads), ("num_key_value_heads", kv))


CASES = [Case("digits MLP 64-128-128-10, batch 64", sizes=(64, 128, 128, 10), batch=64),
         Case("MLP 256-256-256-10, batch 256", sizes=(256, 256, 256, 10), batch=256),
         Case("Llama 4 layers, hidden 256, vocab 2048, L=128", llama=_llama(2048, 256, 688, 4, 4, 2), length=128)]

#: --train-tiny: the same three kinds at a few elements (the tests' configuration).
TINY = [Case("tiny MLP 8-16-16-4, batch 4", sizes=(8, 16, 16, 4), batch=4),
        Case("tiny MLP 16-16-16-4, batch 8", sizes=(16, 16, 16, 4), batch=8),
        Case("tiny Llama 1 layer, hidden 32, vocab 96, L=8", llama=_llama(96, 32, 48, 1, 4, 2), length=8)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--train", action="store_true",
                        help="issue 36's training bench: steps/s of the digits MLP, a 256-wide MLP and a small "
                        "Llama (forward, loss, backward, AdamW) against torch eager (tgrad.bench.train)")
    parser.add_argument("--train-steps", type=_positive_int, default=20, metavar="N",
                        help="--train: timed steps per peer and case (20)")
    parser.add_argument("--train-tiny", action="store_true",
                        help="--train: tiny shapes (a smoke run; the tests use it)")


def write_checkpoint(path: Path, case: Case, seed: int) -> Path:
    """The case's random Llama as a bf16 checkpoint (bench --generate's writer)."""
    from .generate import write_model

    return write_model(path, seed, dict(case.llama))


def _data(case: Case, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets): bf16-valued float32 features and int32 classes, or int32 token ids and
    the next tokens."""
    import ml_dtypes

    rng = np.random.default_rng(seed)
    if case.llama:
        ids = rng.integers(0, dict(case.llama)["vocab_size"], size=case.length + 1).astype(np.int32)
        return ids[None, :-1], ids[1:]
    x = rng.standard_normal((case.batch, case.sizes[0]), dtype=np.float32).astype(ml_dtypes.bfloat16)
    return x.astype(np.float32), rng.integers(0, case.sizes[-1], size=case.batch).astype(np.int32)


def tgrad_step(case: Case, path: Path | None, seed: int) -> Callable[[], Any]:
    """A fresh model and AdamW; the returned call runs one training step and returns the loss."""
    import tgrad
    import tgrad.nn.functional as F
    from tgrad import nn

    x_host, y_host = _data(case, seed)
    model: Any
    x: Any
    if case.llama:
        import tgrad.models

        assert path is not None
        model = tgrad.models.from_pretrained(path)
        for p in model.parameters():
            p.requires_grad_()
        x = x_host
        vocab = dict(case.llama)["vocab_size"]

        def forward() -> Any:
            return model(x, logits_dtype=tgrad.float32).reshape(case.length, vocab)
    else:
        tgrad.manual_seed(seed)
        layers: list[Any] = []
        for i, (a, b) in enumerate(zip(case.sizes, case.sizes[1:])):
            layers += [nn.Linear(a, b)] + ([nn.ReLU()] if i < len(case.sizes) - 2 else [])
        model = nn.Sequential(*layers)
        x = tgrad.tensor(x_host, dtype=tgrad.bfloat16)

        def forward() -> Any:
            return model(x)
    y = tgrad.tensor(y_host, dtype=tgrad.int32)
    opt = tgrad.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)

    def step() -> Any:
        opt.zero_grad()
        loss = F.cross_entropy(forward(), y)
        loss.backward()
        opt.step()  # realizes the new parameters (and the float32 masters and moments)
        return loss.realize()
    return step


def torch_step(torch: Any, case: Case, path: Path | None, seed: int) -> Callable[[], Any] | None:
    """torch's step (float32 parameters and AdamW, bf16 autocast), or None for a Llama without
    transformers."""
    x_host, y_host = _data(case, seed)
    torch.manual_seed(seed)
    model: Any
    if case.llama:
        if importlib.util.find_spec("transformers") is None:
            return None
        transformers = importlib.import_module("transformers")
        transformers.utils.logging.disable_progress_bar()
        model = transformers.LlamaForCausalLM.from_pretrained(str(path), dtype=torch.float32)
        vocab = dict(case.llama)["vocab_size"]
        x = torch.from_numpy(x_host.astype(np.int64))

        def forward() -> Any:
            return model(x).logits.reshape(case.length, vocab)
    else:
        layers: list[Any] = []
        for i, (a, b) in enumerate(zip(case.sizes, case.sizes[1:])):
            layers += [torch.nn.Linear(a, b)] + ([torch.nn.ReLU()] if i < len(case.sizes) - 2 else [])
        model = torch.nn.Sequential(*layers)
        x = torch.from_numpy(x_host)

        def forward() -> Any:
            return model(x)
    model.train()
    y = torch.from_numpy(y_host.astype(np.int64))
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    cross_entropy = torch.nn.functional.cross_entropy

    def step() -> Any:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = forward()
        loss = cross_entropy(logits.float(), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def _bits(loss: Any) -> str:
    value = loss.numpy(np.float32) if hasattr(loss, "realize") else loss.float().numpy()
    return f"{np.float32(value).view(np.uint32):08x}"


def trajectory(make: Callable[[], Callable[[], Any] | None]) -> list[str] | None:
    step = make()
    return None if step is None else [_bits(step()) for _ in range(TRAJECTORY_STEPS)]


def run_case(case: Case, torch: Any, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    path = write_checkpoint(tmp / f"llama{case.length}", case, args.seed) if case.llama else None
    res: dict[str, Any] = {"case": case.label, "steps": args.train_steps}
    makers: dict[str, Callable[[], Callable[[], Any] | None]] = {"tgrad": lambda: tgrad_step(case, path, args.seed)}
    if torch is not None:
        makers["torch"] = lambda: torch_step(torch, case, path, args.seed)
    for name, make in makers.items():
        first, second = trajectory(make), trajectory(make)
        res[f"{name}_trajectory"] = first
        res[f"{name}_identical"] = None if first is None else first == second
    regions = [_Timed(name, step) for name, make in makers.items() if (step := make()) is not None]
    warm_up(regions)
    _interleaved(regions, args.train_steps, balanced=True)
    samples = {t.name: np.array(t.samples) for t in regions}
    res["median_s"] = {name: float(np.median(s)) for name, s in samples.items()}
    if torch is not None and "torch" in samples:
        ratio, lo, hi = bootstrap_ratio(samples["torch"], samples["tgrad"])
        res["torch"] = {"ratio": ratio, "lo": lo, "hi": hi, "verdict": verdict(lo, hi), "version": torch.__version__}
    return res


def _yes(flag: bool | None) -> str:
    return "absent" if flag is None else ("yes" if flag else "no")


def format_table(results: list[dict[str, Any]], threads: int, order: str = "block32") -> str:
    lines = [f"| case ({threads} threads, {order} order) | tgrad steps/s | torch steps/s | torch/tgrad time [95% interval] | verdict "
             f"| tgrad identical | torch identical |", "|---|---:|---:|---|---|---|---|"]
    for r in results:
        t = r.get("torch")
        median = r["median_s"]
        theirs = "-" if "torch" not in median else f"{1 / median['torch']:.1f}"
        ratio = "-" if t is None else f"{t['ratio']:.2f} [{t['lo']:.2f}, {t['hi']:.2f}]"
        lines.append(f"| {r['case']} | {1 / median['tgrad']:.1f} | {theirs} | {ratio} | "
                     f"{'-' if t is None else t['verdict']} | {_yes(r['tgrad_identical'])} | "
                     f"{_yes(r.get('torch_identical'))} |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    import tgrad

    torch = threads_and_torch(args)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in TINY if args.train_tiny else CASES:
            res = run_case(case, torch, args, Path(tmp))
            results.append(res)
            print(f"{case.label}: tgrad loss trajectory over {TRAJECTORY_STEPS} steps "
                  f"{' '.join(res['tgrad_trajectory'])}, run to run identical: {_yes(res['tgrad_identical'])}; "
                  f"torch identical: {_yes(res.get('torch_identical'))}", flush=True)
    print(format_table(results, tgrad.num_threads(), tgrad.get_matmul_order()), flush=True)
    write_report(args, {"torch": None if torch is None else torch.__version__,
                        "transformers": _version("transformers"), "results": results}, "bench-train.json")
    return 0 if all(r["tgrad_identical"] for r in results) else 1


def _version(name: str) -> str | None:
    if importlib.util.find_spec(name) is None:
        return None
    from importlib.metadata import version

    return version(name)
