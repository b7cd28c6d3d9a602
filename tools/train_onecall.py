"""Training steps before and after the one-call optimizer step, paired in one process:
`python tools/train_onecall.py [THREADS] [STEPS] [CASES]` (CASES: indices into
tgrad.bench.train.CASES, e.g. 01; default all three).

For each case three peers train a fresh model each (the bench's step: forward, cross-entropy,
backward, AdamW, realized): tgrad with `tgrad.optim.functional.ONE_CALL = False` (one lazy node of
the optimizer kind per output, a cast per gradient and per bf16 parameter, each realized alone:
the path before tgrad_optim_step_many), tgrad with the one call (the default), and torch eager
(bench --train's peer, when torch is installed). Their steps alternate, one each per round, so that
a neighbour's load falls on all of them; the script prints each peer's median step, the median
of the paired ratios, and the time of the optimizer step alone in each tgrad peer. It also checks
that the two tgrad peers' loss trajectories and final parameters are the same bytes."""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import tgrad
from tgrad.bench import train as T
from tgrad.optim import functional as OF

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
chosen = [int(c) for c in sys.argv[3]] if len(sys.argv) > 3 else [0, 1, 2]
tgrad.set_num_threads(threads)
torch: Any = None
if importlib.util.find_spec("torch"):
    import torch

    torch.set_num_threads(threads)

OPT: dict[bool, list[float]] = {}
_step = tgrad.optim.AdamW.step


def timed_step(self: Any, closure: Any = None) -> Any:
    t0 = time.perf_counter()
    try:
        return _step(self, closure)
    finally:
        OPT.setdefault(OF.ONE_CALL, []).append(time.perf_counter() - t0)


tgrad.optim.AdamW.step = timed_step  # type: ignore[method-assign]


def with_mode(one_call: bool, step: Any) -> Any:
    def run() -> Any:
        OF.ONE_CALL = one_call
        try:
            return step()
        finally:
            OF.ONE_CALL = True
    return run


tmp = Path(tempfile.mkdtemp())
for ci in chosen:
    case = T.CASES[ci]
    path = T.write_checkpoint(tmp / f"llama{ci}", case, 0) if case.llama else None
    peers = {"nodes": with_mode(False, T.tgrad_step(case, path, 0)),
             "one call": with_mode(True, T.tgrad_step(case, path, 0))}
    if torch is not None:
        tstep = T.torch_step(torch, case, path, 0)
        if tstep is not None:
            peers["torch"] = tstep
    losses: dict[str, list[bytes]] = {k: [] for k in peers}
    times: dict[str, list[float]] = {k: [] for k in peers}
    for r in range(steps + 2):
        order = list(peers) if r % 2 == 0 else list(peers)[::-1]
        for name in order:
            t0 = time.perf_counter()
            loss = peers[name]()
            if name != "torch":
                losses[name].append(np.float32(loss.numpy(np.float32)).tobytes())
            dt = time.perf_counter() - t0
            if r >= 2:
                times[name].append(dt)
        if r == 1:
            OPT.clear()
    same = losses["nodes"] == losses["one call"]
    med = {k: float(np.median(v)) for k, v in times.items()}
    ratio = float(np.median(np.array(times["nodes"]) / np.array(times["one call"])))
    line = (f"{case.label} ({threads} thread(s), {steps} steps): nodes {1 / med['nodes']:.1f} steps/s, "
            f"one call {1 / med['one call']:.1f} steps/s, nodes/one-call time {ratio:.2f}; AdamW step "
            f"{np.median(OPT[False]) * 1e3:.2f} ms -> {np.median(OPT[True]) * 1e3:.2f} ms")
    if "torch" in med:
        line += (f"; torch {1 / med['torch']:.1f} steps/s, torch/tgrad time: nodes "
                 f"{np.median(np.array(times['torch']) / np.array(times['nodes'])):.2f}, one call "
                 f"{np.median(np.array(times['torch']) / np.array(times['one call'])):.2f}")
    print(line + f"; same loss bytes: {'yes' if same else 'NO'}", flush=True)
    if not same:
        sys.exit(1)
