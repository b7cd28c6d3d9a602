"""``python -m tgrad.conformance --backend cpu|msl-emu|cuda-emu|opencl|cuda|metal [--roster ci|full] [--write] [--check]``

Runs a roster on a backend and prints its scorecard's funnel and claim (see conformance.runner).
From any directory once tgrad is installed (the kit and the committed scorecards ship inside the
tgrad package); in the source tree, ``python -m conformance`` from the repository's root is the same.
``--write`` writes conformance/scorecards/<backend>.json; ``--check`` regenerates it and exits 1
when a case outcome or the funnel differs from the committed file, printing the differences
(environment fields are shown, never compared). ``--require`` exits 1 when the backend could not
execute any case (by default an unavailable backend gives a scorecard of skips and exit 0, but a
backend in runner.REFUSE_UNAVAILABLE, ``cuda``, is refused where unavailable: exit 1 with the reason,
nothing written or checked).
Exit status: 0 success, 1 a failed case, a difference, or an unmet --require; 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import runner
from .rosters import roster_names


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__ or 'tgrad.conformance'}",  # as it was run
        description="Run a conformance roster on a backend and write or check its scorecard.")
    parser.add_argument("--backend", required=True, choices=runner.BACKENDS)
    parser.add_argument("--roster", default="ci", choices=roster_names(),
                        help="case roster (default: ci, under a minute on two cores)")
    parser.add_argument("--write", action="store_true",
                        help="write the scorecard to SCORECARDS/<backend>.json")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when an outcome or the funnel differs from the committed file")
    parser.add_argument("--require", action="store_true",
                        help="exit 1 when the backend executed no case (unavailable)")
    parser.add_argument("--scorecards", type=Path, default=runner.SCORECARD_DIR, metavar="DIR",
                        help=f"directory of the scorecards (default: {runner.SCORECARD_DIR})")
    parser.add_argument("--emu-dir", type=Path, default=None, metavar="DIR",
                        help="directory of the emulator's driver.py (default: tests/msl_emu or "
                             "tests/cuda_emu of the source checkout, or $TGRAD_MSL_EMU_DIR or "
                             "$TGRAD_CUDA_EMU_DIR)")
    parser.add_argument("--json", action="store_true", help="print the whole scorecard as JSON")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every case's outcome")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def progress(i: int, total: int, case, outcome) -> None:
        if args.verbose or outcome[0] == "fail":
            detail = f"  {outcome[1]}" if outcome[1] else ""
            print(f"[{i + 1}/{total}] {outcome[0]:4} {case.id}{detail}", file=sys.stderr)

    card = runner.run(args.backend, args.roster, emu_dir=args.emu_dir, progress=progress)
    if args.backend in runner.REFUSE_UNAVAILABLE and card["funnel"]["executed"] == 0:
        reasons = sorted({c["detail"] for c in card["cases"] if c["outcome"] == "skip"})
        print(f"backend {args.backend} refused: {'; '.join(reasons) or 'no case to run'}", file=sys.stderr)
        return 1
    path = runner.scorecard_path(args.backend, args.scorecards)
    status = 0
    if args.json:
        print(json.dumps(card, indent=2, sort_keys=True))
    else:
        funnel = card["funnel"]
        print(f"backend {card['backend']}, roster {card['suite']['roster']}: "
              + ", ".join(f"{k} {funnel[k]}" for k in ("requested", "executed", "passed", "failed",
                                                         "skipped")))
        skips = sorted({c["detail"] for c in card["cases"] if c["outcome"] == "skip"})
        for reason in skips[:5]:
            print(f"skipped: {reason}")
        print(f"claim: {card['claim']} (minimum executed: {card['min_executed']})")
        print(f"attestation: sha256 {card['attestation']['digest']}")
        print("environment (shown, not compared): "
              + ", ".join(f"{k}={v}" for k, v in sorted(card["environment"].items())))
    if card["funnel"]["failed"]:
        status = 1
    if args.require and card["funnel"]["executed"] == 0:
        print(f"--require: backend {args.backend} executed no case", file=sys.stderr)
        status = 1
    if args.check:
        if not path.is_file():
            print(f"check: no committed scorecard at {path}", file=sys.stderr)
            status = 1
        else:
            diffs = runner.check(card, runner.load(path))
            if diffs:
                print(f"check: {len(diffs)} difference(s) from {path}:", file=sys.stderr)
                for line in diffs:
                    print(f"  {line}", file=sys.stderr)
                status = 1
            else:
                print(f"check: outcomes and funnel equal {path}")
    if args.write:
        runner.write(card, path)
        print(f"wrote {path}")
    return status


if __name__ == "__main__":
    sys.exit(main())
