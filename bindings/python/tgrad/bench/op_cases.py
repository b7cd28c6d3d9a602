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


def run_cases(args: argparse.Namespace, cases: Sequence[Any], run_case: Callable[..., dict[str, Any]],
              format_case: Callable[[dict[str, Any]], str], report_name: str) -> int:
    """Each case at the asked thread count (torch at the same), printed; the results in
    <out>/<report_name>."""
    import tgrad

    if args.threads is not None:
        tgrad.set_num_threads(args.threads)
    torch = _torch() if not args.no_peers else None
    if torch is not None:
        torch.set_num_threads(tgrad.num_threads())
    results = []
    for case in cases:
        res = run_case(case, budget_s=args.budget, seed=args.seed, peers=not args.no_peers)
        results.append(res)
        print(format_case(res), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"threads": tgrad.num_threads(), "cpu_isa": tgrad.cpu_isa(), "results": results}
    (out / report_name).write_text(json.dumps(report, indent=1))
    print(f"threads {tgrad.num_threads()}; wrote {out / report_name}", file=sys.stderr)
    return 0 if all(r["correct"] for r in results) else 1
