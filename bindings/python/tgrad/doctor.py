"""``python -m tgrad doctor [--json]``: what this installation of tgrad is and whether it is sound.

Checks, each PASS, WARN, FAIL or SKIP (exit status 1 when any FAILs):

- ``library``: the loaded libtgrad's version (tgrad_version) against the header version this
  binding was written for (TGRAD_VERSION_NUMBER): FAIL when tgrad_check_version refuses it;
- ``backend <name>``: each backend (tgrad_backend): PASS built and available (with its device),
  WARN built but not available, SKIP not built (e.g. "metal: not built on this platform");
- ``cpu isa``: the CPU variant in use and the ones this CPU runs: WARN when a better one is
  runnable than the one chosen (TGRAD_CPU_ISA or set_cpu_isa picked it);
- ``threads``: worker threads against the cores this process may use: WARN when oversubscribed;
- ``peak``: the measured peak of the variant in use (tgrad.cpu_peak_gflops, about 60 ms; SKIP with
  --no-peak): FAIL when it cannot be measured;
- ``capabilities``: the capability table (tgrad_capability), printed row by row;
- ``scorecard <backend>``: each committed conformance scorecard (conformance/scorecards/*.json,
  installed as tgrad/conformance/scorecards/): FAIL when its attestation does not match its
  content, WARN when it records failed cases, SKIP when it makes no claim, else PASS; SKIP when
  tgrad.conformance or the files are missing.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import _conformance
from ._ffi import _string, lib, library_path

__all__ = ["Check", "Report", "collect", "main"]

STATES = ("PASS", "WARN", "FAIL", "SKIP")


@dataclass(frozen=True)
class Check:
    name: str
    state: str
    detail: str


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, state: str, detail: str) -> None:
        assert state in STATES, state
        self.checks.append(Check(name, state, detail))

    @property
    def failed(self) -> bool:
        return any(c.state == "FAIL" for c in self.checks)

    def summary(self) -> dict[str, int]:
        return {s: sum(1 for c in self.checks if c.state == s) for s in STATES}

    def to_dict(self) -> dict[str, Any]:
        return {"checks": [asdict(c) for c in self.checks], "summary": self.summary(),
                "ok": not self.failed, **self.facts}


def _version_text(number: int) -> str:
    return f"{number // 10000}.{number // 100 % 100}.{number % 100}"


def _check_library(report: Report) -> None:
    header = int(lib.TGRAD_VERSION_NUMBER)
    have = int(lib.tgrad_version())
    text = _string(lib.tgrad_version_string())
    report.facts["library"] = {"path": library_path(), "version": text, "version_number": have,
                               "header_version_number": header}
    status = int(lib.tgrad_check_version(header))
    detail = (f"libtgrad {text} (version number {have}) at {library_path()}; binding written for "
              f"header {_version_text(header)} ({header})")
    if status != 0:
        report.add("library", "FAIL", detail + ": " + (_string(lib.tgrad_last_error()) or
                                                       _string(lib.tgrad_status_name(status))))
    elif have != header:
        report.add("library", "PASS", detail + " (the library is newer, compatible)")
    else:
        report.add("library", "PASS", detail)


def _check_binding(report: Report) -> None:
    from . import _tensor_base

    used = _tensor_base.implementation()
    report.facts["tensor_base"] = used
    if used == "native":
        report.add("binding", "PASS", "Tensor's hot path (@, realize, numpy, release) in C: tgrad._native")
    elif os.environ.get("TGRAD_NATIVE") == "0":
        report.add("binding", "PASS", "Tensor's hot path in Python, as TGRAD_NATIVE=0 asks")
    else:
        report.add("binding", "WARN", "Tensor's hot path in Python: tgrad._native is not built here (a "
                   "source tree, or no Python headers at install); each small product pays ~2 us more")


def _check_backends(report: Report) -> None:
    from . import backends

    rows = backends()
    report.facts["backends"] = [b._asdict() for b in rows]
    for b in rows:
        if not b.built:
            report.add(f"backend {b.name}", "SKIP", f"{b.name}: {b.device}")
        elif not b.available:
            report.add(f"backend {b.name}", "WARN", f"{b.name}: built, not available: {b.device}")
        else:
            report.add(f"backend {b.name}", "PASS", f"{b.name}: {b.device}")


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _check_cpu(report: Report, peak: bool) -> None:
    from . import cpu_isa, cpu_isa_forced, cpu_isa_reason, cpu_isas, cpu_peak_gflops, cpu_stream_isa, errors, \
        num_threads

    chosen, stream, forced, variants = cpu_isa(), cpu_stream_isa(), cpu_isa_forced(), cpu_isas()
    reason = cpu_isa_reason()
    runnable = [name for name, ok in variants.items() if ok]
    threads, cores = num_threads(), _usable_cores()
    report.facts["cpu"] = {"isa": chosen, "stream_isa": stream, "isa_forced": forced, "isa_reason": reason,
                           "isas": variants, "threads": threads, "cores": cores}
    others = ", ".join(f"{n}{'' if ok else ' (not on this CPU)'}" for n, ok in variants.items())
    if forced and runnable and chosen != runnable[0]:
        report.add("cpu isa", "WARN", f"{chosen} in use, but {runnable[0]} runs here (variants: "
                                      f"{others}); TGRAD_CPU_ISA or set_cpu_isa chose it")
    elif chosen != stream:
        report.add("cpu isa", "PASS", f"{chosen} for packed products, {stream} for one-row and few-row "
                                      f"products ({reason}; variants: {others})")
    else:
        report.add("cpu isa", "PASS", f"{chosen} in use ({reason}; variants: {others})")
    from .orders import amx_unavailable, get_matmul_order, matmul_order_kernel

    block32, no_amx = matmul_order_kernel("block32"), amx_unavailable()
    report.facts["cpu"]["matmul_order"] = {"order": get_matmul_order(), "block32_kernel": block32,
                                           "amx": no_amx or "available"}
    kinds = {"amx": "AMX tiles", "avx512bf16_block32": "AVX512-BF16's vdpbf16ps", "avx512f_block32": "AVX-512F FMAs",
             "avx2_block32": "AVX2 FMAs", "neon_block32": "NEON FMAs"}
    report.add("matmul order", "PASS",
               f"{get_matmul_order()} (this thread); block32 products run on {block32} "
               f"({kinds.get(block32, 'the portable reference')}"
               + (f"; no AMX: {no_amx}" if no_amx else "") + "): tgrad.matmul_order('block32') (docs/numerics.md)")
    if threads > cores:
        report.add("threads", "WARN", f"{threads} worker threads on {cores} usable cores "
                                      "(oversubscribed: TGRAD_NUM_THREADS?)")
    else:
        report.add("threads", "PASS", f"{threads} worker threads, {cores} usable cores")
    if not peak:
        report.add("peak", "SKIP", "not measured (--no-peak)")
        return
    try:
        gflops = cpu_peak_gflops()
    except errors.TgradError as exc:
        report.add("peak", "FAIL", f"could not measure: {exc.code}: {exc}")
        return
    report.facts["cpu"]["peak_gflops"] = gflops
    if gflops > 0:
        report.add("peak", "PASS", f"{gflops:.1f} GFLOP/s measured ({chosen}, {threads} threads; "
                                   "meaningful on an idle machine)")
    else:
        report.add("peak", "FAIL", f"measured {gflops} GFLOP/s")


def _check_capabilities(report: Report) -> None:
    from . import capabilities, errors

    try:
        rows = capabilities()
    except errors.TgradError as exc:
        report.add("capabilities", "FAIL", f"{exc.code}: {exc}")
        return
    report.facts["capabilities"] = [r._asdict() for r in rows]
    backends = sorted({r.backend for r in rows})
    state = "PASS" if rows else "FAIL"
    report.add("capabilities", state, f"{len(rows)} rows for {', '.join(backends) or 'no backend'}")


def _scorecard_dir(directory: Path | None) -> Path | None:
    if directory is not None:
        return directory
    try:
        runner = _conformance.module("runner")
    except ImportError:
        return None
    scorecards: Path = runner.SCORECARD_DIR
    return scorecards


def _check_scorecards(report: Report, directory: Path | None) -> None:
    try:
        runner = _conformance.module("runner")
    except ImportError as exc:
        report.add("scorecards", "SKIP", f"tgrad.conformance is not importable ({exc})")
        return
    directory = _scorecard_dir(directory)
    files = sorted(directory.glob("*.json")) if directory and directory.is_dir() else []
    if not files:
        report.add("scorecards", "SKIP", f"no scorecards in {directory} (tgrad ships them in "
                                         "tgrad/conformance/scorecards; --scorecards DIR)")
        return
    rows = []
    for path in files:
        name = f"scorecard {path.stem}"
        try:
            card = runner.load(path)
            funnel, digest = card["funnel"], card["attestation"]["digest"]
            backend, claim = card["backend"], card["claim"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            report.add(name, "FAIL", f"{path}: unreadable scorecard: {type(exc).__name__}: {exc}")
            continue
        row = {"backend": backend, "passed": funnel["passed"], "executed": funnel["executed"],
               "requested": funnel["requested"], "claim": claim, "attestation": digest[:12],
               "attested": runner.verify(card), "path": str(path),
               "library_version": card.get("environment", {}).get("library_version", "")}
        rows.append(row)
        detail = (f"{backend}: {funnel['passed']}/{funnel['executed']} passed of "
                  f"{funnel['requested']}; {claim}; sha256 {digest[:12]}")
        if not row["attested"]:
            report.add(name, "FAIL", detail + ": the attestation does not match the content")
        elif funnel["failed"]:
            report.add(name, "WARN", detail)
        elif not card.get("claim_made"):
            report.add(name, "SKIP", detail)
        else:
            report.add(name, "PASS", detail)
    report.facts["scorecards"] = rows


def collect(*, peak: bool = True, scorecards: Path | None = None) -> Report:
    """Run every check; nothing is printed."""
    report = Report()
    _check_library(report)
    _check_binding(report)
    _check_backends(report)
    _check_cpu(report, peak)
    _check_capabilities(report)
    _check_scorecards(report, scorecards)
    return report


def render_text(report: Report) -> str:
    lib_facts = report.facts.get("library", {})
    lines = [f"tgrad doctor: libtgrad {lib_facts.get('version', '?')} at {lib_facts.get('path', '?')}"]
    width = max(len(c.name) for c in report.checks)
    lines += [f"{c.state:4}  {c.name:{width}}  {c.detail}" for c in report.checks]
    caps = report.facts.get("capabilities", [])
    if caps:
        lines.append("")
        lines.append("capabilities:")
        w = [max(len(r[k]) for r in caps) for k in ("backend", "capability", "value")]
        lines += [f"  {r['backend']:{w[0]}}  {r['capability']:{w[1]}}  {r['value']:{w[2]}}  {r['note']}"
                  for r in caps]
    cards = report.facts.get("scorecards", [])
    if cards:
        lines.append("")
        lines.append("scorecards:")
        lines += [f"  {r['backend']:8}  {r['passed']}/{r['executed']} passed of {r['requested']}  "
                  f"{r['claim']}  sha256 {r['attestation']}" for r in cards]
    summary = report.summary()
    lines.append("")
    lines.append("summary: " + ", ".join(f"{n} {s}" for s, n in summary.items()))
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--no-peak", action="store_true",
                        help="do not measure the CPU peak (saves about 60 ms of full load)")
    parser.add_argument("--scorecards", type=Path, default=None, metavar="DIR",
                        help="directory of conformance scorecards (default: the committed ones, "
                             "installed in tgrad/conformance/scorecards/)")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    report = collect(peak=not args.no_peak, scorecards=args.scorecards)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        print(render_text(report), end="")
    return 1 if report.failed else 0
