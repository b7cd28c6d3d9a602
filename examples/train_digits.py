"""Train a small MLP on scikit-learn's handwritten digits with tgrad: forward, backward and AdamW
all in libtgrad, in bf16 with float32 master weights, gradients and optimizer state.

    pip install "tgrad[examples]"     # scikit-learn (the digits ship with it: no download),
                                      # matplotlib (the loss curve), tqdm (the progress bar)
    python examples/train_digits.py [--epochs 30] [--threads N] [--plot digits_loss.png | --no-plot]

The split, the initial weights and the batch order come from fixed seeds, and every op's bytes are
defined by the docs (docs/autograd.md), so the loss trajectory is bit-identical across runs,
thread counts and CPU variants; `--trajectory FILE` writes it (float32 bits, one line an epoch).
It prints the loss per epoch (a progress bar over the batches on a terminal, with tqdm) and
draws the loss curve (matplotlib); the last line is `test accuracy: 0.XXXX` (0.9861 with the defaults).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

import tgrad
import tgrad.nn.functional as F
from tgrad import nn


def load_digits(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The 1,797 8x8 digits, scaled to [0, 1], split 80/20 by a fixed permutation."""
    try:
        from sklearn.datasets import load_digits as sk_load
    except ImportError:
        sys.exit('train_digits: scikit-learn is needed for the data: pip install "tgrad[examples]"')
    data = sk_load()
    x = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = len(x) // 5
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


class MLP(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 10))

    def forward(self, x: Any) -> Any:
        return self.net(x)


def progress(total: int, enabled: bool) -> Any:
    """tqdm when installed and wanted, else nothing."""
    if not enabled:
        return None
    try:
        from tqdm import tqdm  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:
        return None
    return tqdm(total=total, file=sys.stderr, unit="batch", leave=False, dynamic_ncols=True)


def accuracy(model: MLP, x: np.ndarray, y: np.ndarray) -> float:
    with tgrad.no_grad():
        logits = model(tgrad.tensor(x, dtype=tgrad.bfloat16)).float().numpy()
    return float((logits.argmax(axis=1) == y).mean())


def train(epochs: int, batch: int, hidden: int, lr: float, seed: int, bar: bool) -> tuple[list[float], float]:
    x_train, y_train, x_test, y_test = load_digits(seed)
    tgrad.manual_seed(seed)
    model = MLP(hidden)  # bf16 parameters (tgrad.nn's default), float32 master copies in AdamW
    opt = tgrad.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    order_rng = np.random.default_rng(seed + 1)
    steps = (len(x_train) + batch - 1) // batch
    losses: list[float] = []
    for epoch in range(epochs):
        order = order_rng.permutation(len(x_train))
        shown = progress(steps, bar)
        total = 0.0
        for i in range(steps):
            idx = order[i * batch:(i + 1) * batch]
            xb = tgrad.tensor(x_train[idx], dtype=tgrad.bfloat16)
            yb = tgrad.tensor(y_train[idx], dtype=tgrad.int32)
            opt.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            total += float(loss) * len(idx)
            if shown is not None:
                shown.update(1)
        if shown is not None:
            shown.close()
        losses.append(float(np.float32(total / len(x_train))))
        print(f"epoch {epoch + 1:3d}  loss {losses[-1]:.4f}", flush=True)
    return losses, accuracy(model, x_test, y_test)


def plot(losses: list[float], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("train_digits: matplotlib is not installed: no plot", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot(range(1, len(losses) + 1), losses, marker="o")
    ax.set_xlabel("epoch")
    ax.set_ylabel("mean training loss")
    ax.set_yscale("log")
    fig.tight_layout()
    fig.savefig(path)
    print(f"loss curve: {path}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: the library's)")
    ap.add_argument("--plot", default="digits_loss.png", help="the loss curve's image (when matplotlib is installed)")
    ap.add_argument("--no-plot", action="store_true", help="draw no loss curve")
    ap.add_argument("--trajectory", default=None, help="write each epoch's loss as float32 bits")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    if args.epochs < 1 or args.batch < 1 or args.hidden < 1:
        ap.error("--epochs, --batch and --hidden must be positive")
    if args.threads is not None:
        tgrad.set_num_threads(args.threads)
    losses, acc = train(args.epochs, args.batch, args.hidden, args.lr, args.seed,
                        bar=not args.no_progress and sys.stderr.isatty())
    if args.trajectory:
        with open(args.trajectory, "w") as f:
            for v in losses:
                f.write(f"{np.float32(v).view(np.uint32):08x}\n")
    if not args.no_plot:
        plot(losses, args.plot)
    print(f"test accuracy: {acc:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
