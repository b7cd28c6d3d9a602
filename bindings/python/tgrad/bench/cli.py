"""``python -m tgrad bench``'s command line and its run: the options, the shapes to run, then
limits, each shape checked and timed, and the reports written (stdout, bench.md, bench.json,
bench.png)."""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import sys
from pathlib import Path
from typing import Any

from .contend import competing
from .limits import measure_limits, refresh_limits
from ..orders import ORDERS
from .lines import closing_lines, format_shape
from .machine import (DISTURBED, OPENBLAS_TUNING_VARS, SPIN_ENV, _cpu_sample, _maybe_reexec,
                      _others_load, _wait_for_quiet_machine, environment)
from .measure import run_shape
from .peers import ONE_THREAD, _set_peer_threads
from .plot import write_plot
from .progress import _Progress
from .record import DOC_BEGIN, DOC_END, _report_head, doc_has_section, method, save_report
from .report import format_markdown
from .shapes import (ORACLE_LIMIT_MACS, Shape, _positive_float, _positive_int, _shape_str,
                     parse_shape_list, suite)
from .timing import AUTO_BUDGET_S, AUTO_MAX_REPEAT, AUTO_MIN_REPEAT


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", action="append", type=parse_shape_list, default=None,
                        metavar="MxKxN[,MxKxN...]",
                        help="matmul shapes, a [M,K] @ [K,N]; repeatable and comma-separated "
                        "(default: the default suite, see --list)")
    parser.add_argument("--full", action="store_true",
                        help="add the slow shapes (8192^3, 8192x1024x1024) to the default suite")
    parser.add_argument("--list", action="store_true",
                        help="print the shapes that would run, and exit")
    parser.add_argument("--dtype", default="bf16", choices=["bf16"],
                        help="element type (only bf16 exists)")
    parser.add_argument("--repeat", type=_positive_int, default=None, metavar="N",
                        help=f"timed repetitions per shape (default: about --budget seconds of "
                        f"measurement, {AUTO_MIN_REPEAT}..{AUTO_MAX_REPEAT})")
    parser.add_argument("--budget", type=_positive_float, default=AUTO_BUDGET_S, metavar="S",
                        help=f"seconds of measurement per shape without --repeat "
                        f"(default {AUTO_BUDGET_S:g})")
    parser.add_argument("--threads", type=_positive_int, default=None, metavar="T",
                        help="threads for tgrad and the peers (default: tgrad's default)")
    parser.add_argument("--out", default="bench-out", metavar="DIR",
                        help="directory for bench.md, bench.json and bench.png (default bench-out)")
    parser.add_argument("--json", default=None, metavar="PATH",
                        help="also write the JSON report to PATH")
    parser.add_argument("--doc", default=None, metavar="PATH",
                        help=f"also put the report into the markdown file PATH, between its "
                        f"'{DOC_BEGIN}' and '{DOC_END}' lines (docs/performance.md)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the input fill (default 0)")
    parser.add_argument("--check-all", action="store_true",
                        help=f"compare bytes with the oracle at every size (default: only up to "
                        f"M*K*N = 2^{int(math.log2(ORACLE_LIMIT_MACS))})")
    parser.add_argument("--no-peers", action="store_true", help="time tgrad only")
    parser.add_argument("--order", default=None, choices=ORDERS,
                        help="the accumulation order of tgrad's products in every mode (matmul "
                        "shapes, --graph, --batched, --transformer, --generate, --train, --device cuda; the "
                        "byte checks use the oracle in the same order): block32 (AMX's TDPBF16PS order, on AMX where "
                        "the CPU has it; the library's default) or pairwise (0.1's); default: the calling thread's "
                        "(tgrad.get_matmul_order, docs/numerics.md)")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="S",
                        help="before each shape, wait up to S seconds for other processes to "
                        f"use under {DISTURBED * 100:.0f}%% of the CPUs (default 0: do not wait)")
    parser.add_argument("--no-reexec", action="store_true",
                        help="do not re-execute the bench with the peers' idle spinning shortened "
                        f"({', '.join(f'{k}={v}' for k, v in SPIN_ENV.items())}, where unset)")
    parser.add_argument("--cold", type=_milliseconds, default=None, metavar="MS",
                        help="cold calls: sleep MS milliseconds before each timed call, outside "
                        "the clock, with no untimed call before it (default: warm, back to back)")
    parser.add_argument("--contend", type=_niceness, nargs="?", const=0, default=None,
                        metavar="NICE",
                        help="a competitor process spins on the last usable CPU at niceness NICE "
                        "(0..19, default 0) for the whole timed run")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar on stderr (default: only when stderr is a terminal)")
    from . import graph

    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="cuda: tgrad's CUDA backend against torch's CUDA bf16 matmul, paired "
                             "(tgrad/bench/cuda.py); refuses where either is unavailable")
    graph.add_arguments(parser)  # --graph: MLP blocks instead of matmul shapes
    from . import reduce as _reduce

    _reduce.add_arguments(parser)  # --reduce: reductions against torch and the read bandwidth
    from . import batched as _batched

    _batched.add_arguments(parser)  # --batched: a batched matmul against the 2-D one and torch
    from . import norms as _norms

    _norms.add_arguments(parser)  # --norms: rms_norm and layer_norm against torch
    from . import transformer as _transformer

    _transformer.add_arguments(parser)  # --transformer: issue 34's table against torch
    from . import generate as _generate

    _generate.add_arguments(parser)  # --generate: issue 35's model prefill/decode against transformers
    from . import train as _train

    _train.add_arguments(parser)  # --train: issue 36's training steps/s against torch
    parser.set_defaults(func=run)


def _milliseconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected milliseconds >= 0, got {text!r}")
    return value


def _niceness(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 19:
        raise argparse.ArgumentTypeError(f"expected a niceness 0..19, got {text!r}")
    return value


def _condition_error(args: argparse.Namespace) -> str | None:
    """Options that cannot go together with --cold or --contend, or None."""
    cold, contend = args.cold is not None, args.contend is not None
    if (cold or contend) and (getattr(args, "graph", False) or getattr(args, "graph_shapes", None)):
        return "--cold and --contend time matmul shapes, not --graph"
    if contend and args.wait_quiet > 0:
        return "--contend loads the machine on purpose: --wait-quiet would wait for nothing"
    if contend and not hasattr(os, "sched_setaffinity"):
        return "--contend needs os.sched_setaffinity (Linux)"
    return None


def _cold_condition(cold_ms: float) -> str:
    return (f"cold: the process slept {cold_ms:g} ms before each timed call (outside the clock, "
            f"no untimed call before it)")


def _shapes(args: argparse.Namespace) -> list[tuple[Shape, str]]:
    if args.shape:
        return [(s, "") for group in args.shape for s in group]
    return suite(args.full)


def _set_up(args: argparse.Namespace) -> tuple[int, dict[str, str], dict[str, Any]]:
    """tgrad's and the peers' threads, and the environment as the JSON records it."""
    import tgrad

    if args.threads is not None:
        tgrad.set_num_threads(args.threads)
    threads = tgrad.num_threads()
    for var in OPENBLAS_TUNING_VARS:
        if var in os.environ:
            print(f"note: {var}={os.environ[var]} is set; numpy's OpenBLAS follows it "
                  f"(`nox -s bench` unsets it)", file=sys.stderr)
    peer_threads = {} if args.no_peers else _set_peer_threads(threads)
    if threads > 1:
        peer_threads[ONE_THREAD] = "1"
    return threads, peer_threads, environment()  # after the thread limits: it reports them


def _limits(args: argparse.Namespace, threads: int) -> dict[str, Any]:
    waited = _wait_for_quiet_machine(args.wait_quiet)
    before = _cpu_sample()
    limits = measure_limits(threads)
    limits["waited_for_quiet_s"] = waited
    limits["load"] = _others_load(before, _cpu_sample())
    return limits


def _run_shapes(args: argparse.Namespace, shapes: list[tuple[Shape, str]], threads: int,
                limits: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """Each shape checked and timed, its lines printed as it ends; (results, any failed)."""
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    progress = _Progress(len(shapes), bool(show))
    results = []
    failed = False
    try:
        for i, (shape, _note) in enumerate(shapes):
            progress.start(_shape_str(shape))
            waited = _wait_for_quiet_machine(args.wait_quiet)
            refresh_limits(limits, threads)
            res = run_shape(shape, repeat=args.repeat, seed=args.seed, check_all=args.check_all,
                            peers=not args.no_peers, threads=threads, budget_s=args.budget,
                            tick=progress.tick,
                            cold_s=None if args.cold is None else args.cold / 1e3)
            res["waited_for_quiet_s"] = waited
            results.append(res)
            progress.advance()
            progress.write(("\n" if i else "") + "\n".join(format_shape(res, limits)))
            failed |= (res["byte_match"] is False) or not res["pipeline_ok"]
    finally:
        progress.close()
    return results, failed


def _after_run(env: dict[str, Any], cpu_start: Any) -> None:
    """What the environment record learns at the end: load, peak memory, tgrad's scratch."""
    import tgrad

    env["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    env["others_load"] = _others_load(cpu_start, _cpu_sample())
    try:
        import resource

        env["process_peak_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except ImportError:  # not on this OS
        env["process_peak_rss_kib"] = None
    # the packing buffers and accumulator tiles tgrad holds after every shape ran (they only grow
    # to the largest block each thread worked on: this is the run's most)
    env["tgrad_cpu_scratch_bytes"] = tgrad.cpu_scratch_bytes()


def _write(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """bench.json (and --json), bench.md (and --doc), bench.png; then the closing block."""
    out_dir = Path(args.out)
    save_report(out_dir, "bench", report, format_markdown(report), args.json, args.doc)
    plot = write_plot(report, out_dir / "bench.png")
    print()
    print("\n".join(closing_lines(report, out_dir, plot, args.json, args.doc)), flush=True)


def run(args: argparse.Namespace) -> int:
    """The bench with every product of this thread in --order (the modes make their products on
    it; bench --generate passes the order to its tgrad child), the thread's order restored after."""
    import tgrad

    error = _condition_error(args)
    if error is not None:
        print(f"python -m tgrad bench: error: {error}", file=sys.stderr)
        return 2
    if getattr(args, "order", None) is None:
        args.order = tgrad.get_matmul_order()
    with tgrad.matmul_order(args.order):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    if getattr(args, "graph", False) or getattr(args, "graph_shapes", None):
        from . import graph

        return graph.run(args)
    if getattr(args, "reduce", False):
        from . import reduce as _reduce

        return _reduce.run(args)
    if getattr(args, "batched", False):
        from . import batched as _batched

        return _batched.run(args)
    if getattr(args, "norms", False):
        from . import norms as _norms

        return _norms.run(args)
    if getattr(args, "transformer", False):
        from . import transformer as _transformer

        return _transformer.run(args)
    if getattr(args, "generate", False) or getattr(args, "gen_model", None) is not None:
        from . import generate as _generate

        return _generate.run(args)
    if getattr(args, "train", False):
        from . import train as _train

        return _train.run(args)
    if args.device == "cuda":
        from . import cuda

        return cuda.run(args)
    shapes = _shapes(args)
    if args.doc is not None and not doc_has_section(args.doc):  # before minutes of measurement
        print(f"python -m tgrad bench: error: --doc {args.doc}: needs a '{DOC_BEGIN}' line "
              f"and a '{DOC_END}' line", file=sys.stderr)
        return 2
    if args.list:
        for shape, note in shapes:
            print(f"{_shape_str(shape):<16} {note}".rstrip())
        return 0
    _maybe_reexec(args)
    threads, peer_threads, env = _set_up(args)
    limits = _limits(args, threads)
    started = _dt.datetime.now(_dt.timezone.utc)
    conditions = [] if args.cold is None else [_cold_condition(args.cold)]
    with competing(args.contend) as competitor:  # from before the first warm-up to the end
        if competitor is not None:
            conditions.append(competitor.condition())
        cpu_start = _cpu_sample()
        results, failed = _run_shapes(args, shapes, threads, limits)
        refresh_limits(limits, threads, peak=False, stream=True)
        _after_run(env, cpu_start)
    report = {**_report_head("tgrad-bench/2", started, threads, peer_threads, env),
              "limits": limits, "method": method(), "results": results}
    if conditions:  # the default run (quiet machine, warm calls) has no condition line
        report["condition"] = "; ".join(conditions)
    _write(args, report)
    return 1 if failed else 0
