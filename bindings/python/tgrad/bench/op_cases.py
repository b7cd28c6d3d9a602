"""What the op benches (--reduce, --norms, --batched) share: the run over a bench's cases (each timed against torch by the bench's own run_case, printed by its own
format_case) and the JSON report; exit status 1 when a case's bytes were wrong."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .peers import _torch


def torch_suffix(res: dict[str, Any]) -> str:
    """A case line's torch part (empty where torch was not timed): its median and torch/tgrad."""
    if "torch" not in res:
        return ""
    t = res["torch"]
    return (f"; torch bf16 {res['median_s']['torch'] * 1e3:.3f} ms, torch/tgrad {t['ratio']:.2f} "
            f"[{t['lo']:.2f}, {t['hi']:.2f}] {t['verdict']}")


def threads_and_torch(args: argparse.Namespace) -> Any:
    """tgrad at the asked thread count, and torch (None without it or with --no-peers) at the same."""
    import tgrad

    if args.threads is not None:
        tgrad.set_num_threads(args.threads)
    torch = _torch() if not args.no_peers else None
    if torch is not None:
        torch.set_num_threads(tgrad.num_threads())
    return torch


def write_report(args: argparse.Namespace, report: dict[str, Any], name: str) -> None:
    """The run's JSON report in <out>/<name>, with the thread count, variant and matmul order it ran at."""
    import tgrad

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps({"threads": tgrad.num_threads(), "cpu_isa": tgrad.cpu_isa(),
                                        "matmul_order": tgrad.get_matmul_order(), **report}, indent=1))
    print(f"threads {tgrad.num_threads()}, matmul order {tgrad.get_matmul_order()}; wrote {out / name}",
          file=sys.stderr)


def run_cases(args: argparse.Namespace, cases: Sequence[Any], run_case: Callable[..., dict[str, Any]],
              format_case: Callable[[dict[str, Any]], str], report_name: str) -> int:
    """Each case at the asked thread count (torch at the same), printed; the results in
    <out>/<report_name>."""
    threads_and_torch(args)
    results = []
    for case in cases:
        res = run_case(case, budget_s=args.budget, seed=args.seed, peers=not args.no_peers)
        results.append(res)
        print(format_case(res), flush=True)
    write_report(args, {"results": results}, report_name)
    return 0 if all(r["correct"] for r in results) else 1
