"""Conformance runner: a roster run on one backend, summed up as an attested scorecard.

``run(backend, roster)`` executes every case of a roster (conformance.rosters) on a backend and
compares the output bits with ``conformance.oracle.matmul_bits``; a backend that runs graphs of ops
(``cpu``, ``msl-emu``, ``cuda-emu``, ``opencl``, ``cuda``) also runs the roster's graph cases (conformance.graphs: elementwise ops, broadcasting
views, fused chains, MLP blocks), each with fusion on and off, against the same program run on
the oracles (conformance.reference). It returns a scorecard dict:

- ``suite``: name, version (SUITE_VERSION), roster, oracle, what a pass means on this backend;
- ``backend``;
- ``environment``: python, numpy, platform, CPU variant, threads, library version: shown, never
  compared, and left out of the attestation (they differ between machines);
- ``cases``: one ``{"id", "family", "outcome", "detail"}`` per case, outcome pass, fail or skip;
- ``funnel``: requested, executed (= passed + failed), passed, failed, skipped;
- ``min_executed``: below this many executed cases no claim is made (MIN_EXECUTED_FRACTION of
  the requested cases, rounded up), so skips count against the claim;
- ``claim``: "bit-exact on N of R requested cases" when nothing failed and enough ran, else
  "no claim: <why>"; ``claim_made`` says which;
- ``attestation``: SHA-256 over the canonical JSON (sorted keys, separators ``(",", ":")``,
  UTF-8) of everything but ``environment`` and ``attestation``.

Backends: ``cpu`` (libtgrad; each case runs on every CPU variant this machine runs and passes only
if every one is bit-exact; a graph case runs on each variant with fusion on and with fusion off,
and passes only if both give the oracle's bytes, the same bytes, and fusion on fused something
where the case says there is something to fuse), ``msl-emu`` (libtgrad's generated MSL, naive and tiled routes, compiled
against the emulator of tests/msl_emu and run on the CPU; every case is skipped with the reason when
the emulator or a C++ compiler is missing), ``cuda-emu`` (the same with libtgrad's generated CUDA
C++, on the CUDA emulator of tests/cuda_emu: the MSL emulator's runtime and checks), ``opencl``
(libtgrad on device="opencl", naive and
tiled routes, through the OpenCL driver: PoCL in CI; every case skipped with backend_unavailable
and the reason where no OpenCL device is usable), ``cuda`` (libtgrad on device="cuda" through its
CUDA backend, as opencl; where no CUDA device is usable the command line refuses it, exit 1 with
the reason: REFUSE_UNAVAILABLE) and ``metal`` (every case skipped with
backend_unavailable until libtgrad dispatches to it). A skip is never a pass. The graph cases run
on every backend but ``metal``: on the GPU backends every step is a rendered kernel (a
matmul with its fused epilogue, or an elementwise chain), once per matmul route and with fusion on
and off.

``check(fresh, committed)`` lists the differences that matter (case outcomes, the funnel, the
suite); ``write(card, path)`` writes pretty, sorted JSON with a trailing newline. Command line:
``python -m conformance`` (conformance/__main__.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .graphs import PROGRAMS, GraphCase, build_graph_operands, graph_roster, reference_bits
from .oracle import bf16_bits_to_f32, matmul_bits, tc_bound
from .rosters import Case, build_operands, roster

__all__ = [
    "BACKENDS", "MIN_EXECUTED_FRACTION", "SCORECARD_DIR", "SUITE_VERSION", "attest", "canonical",
    "check", "load", "run", "scorecard_path", "verify", "write",
]

SUITE_VERSION = "1"
BACKENDS = ("cpu", "msl-emu", "cuda-emu", "opencl", "cuda", "metal")
#: Backends a run refuses where unavailable (the command line exits 1 with the reason) instead of
#: giving a scorecard of skips: a GPU's, asked for by name.
REFUSE_UNAVAILABLE = ("cuda",)
MIN_EXECUTED_FRACTION = 0.9
SCORECARD_DIR = Path(__file__).resolve().parent / "scorecards"
#: The MSL emulator's driver, in a source checkout (override: TGRAD_MSL_EMU_DIR or emu_dir=).
DEFAULT_EMU_DIR = Path(__file__).resolve().parents[1] / "tests" / "msl_emu"
#: The CUDA emulator's driver (override: TGRAD_CUDA_EMU_DIR or emu_dir=).
DEFAULT_CUDA_EMU_DIR = DEFAULT_EMU_DIR.parent / "cuda_emu"
#: What a pass means, per backend (part of the attested suite record).
PASS_MEANS = {
    "cpu": "output bits equal the oracle's on every CPU variant this machine runs; a graph case's "
           "also with fusion on and with fusion off, the two identical",
    "msl-emu": "output bits of the naive and tiled routes, generated MSL run on the emulator, "
               "equal the oracle's; a graph case's too, each step's kernel (fused ops included) run "
               "on the emulator, with fusion on and with fusion off, the two identical",
    "cuda-emu": "output bits of the naive and tiled routes, generated CUDA C++ run on the emulator "
                "(tests/cuda_emu), equal the oracle's, and the tc route's, where it renders, run with the "
                "emulator's tensor-core model (mma=\"truncate\"), are within CUDA's tc error bound "
                "(conformance.oracle.tc_bound, lang cuda) on the finite fills normal, smallint and "
                "ties; a graph case's too (naive and tiled), each step's kernel (fused "
                "ops included) run on the emulator, with fusion on and with fusion off, the two identical",
    "cuda": "output bits of the naive and tiled routes, run by libtgrad's CUDA backend on "
            "device=\"cuda\", equal the oracle's; a graph case's too, with fusion on and with fusion "
            "off, the two identical",
    "opencl": "output bits of the naive and tiled routes, generated OpenCL C built and run by the "
              "OpenCL driver on device=\"opencl\", equal the oracle's; a graph case's too, with "
              "fusion on and with fusion off, the two identical",
    "metal": "output bits equal the oracle's",
}

#: The oracles each backend's cases are judged by (part of the attested suite record).
_GRAPH_ORACLE = ("conformance.oracle.matmul_bits; graph cases: conformance.reference (matmul_bits and "
                 "conformance.elementwise.elementwise_bits, op by op)")
ORACLES = {name: _GRAPH_ORACLE for name in ("cpu", "msl-emu", "cuda-emu", "opencl", "cuda")}
DEFAULT_ORACLE = "conformance.oracle.matmul_bits"

Outcome = tuple[str, str]  # (outcome, detail)
AnyCase = Case | GraphCase


# ---- canonical JSON and the attestation -----------------------------------------------------------
def canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def attest(card: dict[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of the card without environment and attestation."""
    body = {k: v for k, v in card.items() if k not in ("environment", "attestation")}
    return hashlib.sha256(canonical(body)).hexdigest()


def verify(card: dict[str, Any]) -> bool:
    """True when the card's attestation digest matches its content."""
    stored = card.get("attestation", {})
    return stored.get("algorithm") == "sha256" and stored.get("digest") == attest(card)


# ---- backends -------------------------------------------------------------------------------------
def _operands(case: Case) -> tuple[np.ndarray, np.ndarray, Any, Any, Any]:
    a_base, b_base, apply_view = build_operands(case)
    a_bits = np.asarray(apply_view(a_base, "a")).view(np.uint16)
    b_bits = np.asarray(apply_view(b_base, "b")).view(np.uint16)
    return a_bits, b_bits, a_base, b_base, apply_view


def _first_difference(got: np.ndarray, want: np.ndarray) -> str:
    if got.shape != want.shape:
        return f"shape {got.shape}, want {want.shape}"
    bad = np.argwhere(got != want)
    i = tuple(int(v) for v in bad[0])
    return (f"{len(bad)} of {want.size} outputs differ; first C{list(i)}: got 0x{int(got[i]):04x}, "
            f"want 0x{int(want[i]):04x}")


# ---- graph cases, on any backend ----------------------------------------------------------------
def _fused_and_unfused(tgrad: Any, label: str, run_program: Callable[[], tuple[np.ndarray, list[str]]],
                       want: np.ndarray, fuses: bool) -> list[str]:
    """The program run with fusion on and off (run_program: (result bits, the fused kernels
    explain shows)): both must give the oracle's bytes, the same bytes, and fusion on must fuse
    something where the case says there is something to fuse. The failures, labelled."""
    failures, got = [], {}
    for fusion in (True, False):
        where = f"{label}, fusion {'on' if fusion else 'off'}"
        tgrad.set_fusion(fusion)
        try:
            got[fusion], fused = run_program()
        except tgrad.TgradError as exc:
            failures.append(f"{where}: {exc.code}: {str(exc)[:300]}")
            continue
        if got[fusion].shape != want.shape or not np.array_equal(got[fusion], want):
            failures.append(f"{where}: {_first_difference(got[fusion], want)}")
        if fusion and fuses and not fused:
            failures.append(f"{where}: explain shows no fused op (nothing to compare unfused with)")
        if not fusion and fused:
            failures.append(f"{where}: explain shows fused kernels {fused}")
    if len(got) == 2 and not (got[True].shape == got[False].shape and np.array_equal(got[True], got[False])):
        failures.append(f"{label}: fused and unfused bytes differ: {_first_difference(got[True], got[False])}")
    return failures


def _build_program(tgrad: Any, case: GraphCase, tensors: list[Any], apply_view: Any) -> Any:
    """The case's program over the operands, lazy. The operands' views are released before it is
    realized, so only the result holds a handle (an intermediate a handle holds is stored, not
    fused)."""
    operands = [apply_view(t, i) for i, t in enumerate(tensors)]
    out = PROGRAMS[case.program](tgrad, *operands)
    for t in operands:
        if all(t is not base for base in tensors):
            t.release()
    return out


def _fused_kernels(out: Any) -> list[str]:
    return [s["kernel"] for s in out.explain(json=True)["steps"] if s.get("fused")]


def _run_program(tgrad: Any, case: GraphCase, tensors: list[Any], apply_view: Any) -> tuple[np.ndarray, list[str]]:
    """(result bits, the fused kernels explain shows), realized by libtgrad on the tensors' device."""
    out = _build_program(tgrad, case, tensors, apply_view)
    try:
        fused = _fused_kernels(out)
        return np.array(out.numpy().view(np.uint16)), fused
    finally:
        out.release()


def _run_graph(tgrad: Any, case: GraphCase, device: str, per_route: Callable[[str], Any],
               routes: tuple[str, ...], run_program: Callable[..., tuple[np.ndarray, list[str]]],
               matmul_settings: bool = True) -> Outcome:
    """A graph case under each of a backend's settings (a GPU's matmul routes, the CPU's variants;
    per_route(setting) applies one, per_route("") restores the default): the program, fused and
    unfused, against the oracles'. With matmul_settings (GPU routes), a program without a matmul
    runs under the first setting only: its steps take the elementwise route whatever is forced."""
    want = reference_bits(case)
    bases, apply_view = build_graph_operands(case)
    tensors = [tgrad.Tensor.from_numpy(b, device=device) for b in bases]
    saved_fusion = tgrad.fusion_enabled()
    failures: list[str] = []
    try:
        if matmul_settings:
            probe = _build_program(tgrad, case, tensors, apply_view)
            if all(s["op"] != "matmul" for s in probe.explain(json=True)["steps"]):
                routes = routes[:1]  # no matmul: the routes differ in nothing this program runs
            probe.release()
        for route in routes:
            per_route(route)
            failures += _fused_and_unfused(
                tgrad, route, lambda: run_program(tgrad, case, tensors, apply_view, bases, route), want, case.fuses)
    finally:
        per_route("")
        tgrad.set_fusion(saved_fusion)
        for t in tensors:
            t.release()
    if failures and all("route_not_eligible" in f and "has no kernel spelling" in f for f in failures):
        # an op the GPU prelude cannot spell (none in the rosters since pow, 2026-12-06) is refused
        # on the device, by design and typed: not covered there, and said so
        return "skip", f"an op has no GPU kernel spelling (refused with RouteNotEligibleError): {failures[0][:200]}"
    if failures:
        return "fail", "; ".join(failures)
    return "pass", ""



class _Cpu:
    """libtgrad's CPU matmul; a case passes when every runnable CPU variant is bit-exact."""

    runs_graphs = True

    def __init__(self) -> None:
        import tgrad

        self.tgrad = tgrad
        self.variants = [name for name, ok in tgrad.cpu_isas().items() if ok]
        self.unavailable = ""

    def run_case(self, case: Case) -> Outcome:
        tgrad = self.tgrad
        a_bits, b_bits, a_base, b_base, apply_view = _operands(case)
        want = matmul_bits(a_bits, b_bits)
        failures = []
        saved = tgrad._cpu_isa_setting()
        with tgrad.Tensor.from_numpy(a_base) as a0, tgrad.Tensor.from_numpy(b_base) as b0:
            a, b = apply_view(a0, "a"), apply_view(b0, "b")
            try:
                for isa in self.variants:
                    tgrad.set_cpu_isa(isa)
                    try:
                        with a @ b as c:
                            got = c.numpy().view(np.uint16)
                    except tgrad.TgradError as exc:
                        failures.append(f"{isa}: {exc.code}: {exc}")
                        continue
                    if got.shape != want.shape or not np.array_equal(got, want):
                        failures.append(f"{isa}: {_first_difference(got, want)}")
            finally:
                tgrad.set_cpu_isa(saved)
                a.release()
                b.release()
        if failures:
            return "fail", "; ".join(failures)
        return "pass", ""

    def run_graph_case(self, case: GraphCase) -> Outcome:
        """The case's program on every variant, fused and unfused, against the oracles'."""
        saved = self.tgrad._cpu_isa_setting()

        def use(isa: str) -> None:
            self.tgrad.set_cpu_isa(isa or saved)

        def run(tgrad: Any, case: GraphCase, tensors: list[Any], apply_view: Any, *_: Any) -> tuple[np.ndarray, list[str]]:
            return _run_program(tgrad, case, tensors, apply_view)

        # every variant, a program without a matmul too: the variants' elementwise loops differ
        return _run_graph(self.tgrad, case, "cpu", use, tuple(self.variants), run, matmul_settings=False)

    def environment(self) -> dict[str, Any]:
        tgrad = self.tgrad
        return {"cpu_isa": tgrad.cpu_isa(), "cpu_isas_run": self.variants,
                "threads": tgrad.num_threads(), "library_version": tgrad.version()}


class _MslEmu:
    """libtgrad's generated MSL (naive and tiled routes) compiled against the emulator. A graph
    case runs the schedule libtgrad would run, step by step: each step's kernel rendered
    (tgrad.render.render_tensor, fused ops included) and run on the emulator, its buffers bound
    as the launch names them (an op's table: the CPU's results over all 65,536 inputs)."""

    ROUTES = ("naive", "tiled")
    #: Routes held to the tc error bound instead of the oracle's bits: run where they render (a
    #: route_not_eligible leaves them out) and on finite fills only (the bound is about rounding).
    BOUNDED_ROUTES: tuple[str, ...] = ()
    BOUNDED_FILLS = ("normal", "smallint", "ties")
    MMA = "fma"  # the emulator's model of the matrix hardware's summation (driver.MMA_ORDERS)
    runs_graphs = True
    NAME, LANG, DIR_VARIABLE, DEFAULT_DIR = "msl-emu", "msl", "TGRAD_MSL_EMU_DIR", DEFAULT_EMU_DIR

    def __init__(self, emu_dir: Path | None) -> None:
        self.emu = None
        self.unavailable = ""
        self.compiler = ""
        name = self.NAME
        directory = Path(emu_dir or os.environ.get(self.DIR_VARIABLE) or self.DEFAULT_DIR)
        driver_file = directory / "driver.py"
        if not driver_file.is_file():
            self.unavailable = f"{name}: no emulator driver at {driver_file} (a source checkout has it)"
            return
        try:
            import tgrad
            from tgrad import render

            driver = _load_driver(driver_file, f"_conformance_{name.replace('-', '_')}_driver")
            if driver.find_cxx() is None:
                self.unavailable = f"{name}: no C++ compiler (g++, c++, clang++) for the emulator"
                return
            self.emu = driver.Emulator()
            self.compiler = str(self.emu.cxx)
        except Exception as exc:  # the emulator could not start: every case is skipped, with why
            self.unavailable = f"{name}: the emulator could not start: {type(exc).__name__}: {exc}"
            return
        self.tgrad, self.render = tgrad, render

    def _render(self, case: Case) -> dict[str, Any] | str:
        """The case's kernels by route, or why rendering failed."""
        tgrad, render = self.tgrad, self.render
        a_base, b_base, apply_view = build_operands(case)
        with tgrad.Tensor.from_numpy(a_base) as a0, tgrad.Tensor.from_numpy(b_base) as b0:
            a, b = apply_view(a0, "a"), apply_view(b0, "b")
            try:
                kernels = {route: render.render_matmul(a, b, route, self.LANG) for route in self.ROUTES}
                for route in self.BOUNDED_ROUTES if case.fill in self.BOUNDED_FILLS else ():
                    with contextlib.suppress(tgrad.errors.RouteNotEligibleError):
                        kernels[route] = render.render_matmul(a, b, route, self.LANG)
                return kernels
            except tgrad.TgradError as exc:
                return f"render: {exc.code}: {exc}"
            finally:
                a.release()
                b.release()

    def prepare(self, cases: list[Case]) -> None:
        """Compile every kernel up front, in parallel (a cached one costs nothing)."""
        assert self.emu is not None
        sources = [k.source for c in cases if isinstance(ks := self._render(c), dict)
                   for k in ks.values() if 0 not in k.grid]
        try:
            self.emu.compile_many(sources)
        except Exception:  # noqa: S110 - a kernel that fails to compile fails its case below
            pass

    def run_case(self, case: Case) -> Outcome:
        emu = self.emu
        assert emu is not None
        a_bits, b_bits, a_base, b_base, _ = _operands(case)
        want = matmul_bits(a_bits, b_bits)
        a_buf = np.ascontiguousarray(a_base).view(np.uint16).ravel()
        b_buf = np.ascontiguousarray(b_base).view(np.uint16).ravel()
        kernels = self._render(case)
        if isinstance(kernels, str):
            return "fail", kernels
        failures = []
        for route, k in kernels.items():
            out = np.full(case.m * case.n, 0xFFFF, np.uint16)  # unwritten outputs show as NaN
            try:
                if 0 not in k.grid:
                    compiled = emu.compile(k.source)
                    bufs = [a_buf[: k.buffer_elements[0]], b_buf[: k.buffer_elements[1]], out]
                    out = emu.run(compiled, k.grid, k.threadgroup, bufs, [True, True, False], mma=self.MMA)[2]
            except Exception as exc:  # compile error or a failed emulator check: this case fails
                failures.append(f"{route}: {type(exc).__name__}: {str(exc)[:300]}")
                continue
            got = out.reshape(case.m, case.n)
            if route in self.BOUNDED_ROUTES:
                outside = _outside_tc_bound(got, a_bits, b_bits, self.LANG)
                if outside:
                    failures.append(f"{route}: {outside}")
            elif not np.array_equal(got, want):
                failures.append(f"{route}: {_first_difference(got, want)}")
        if failures:
            return "fail", "; ".join(failures)
        return "pass", ""

    def run_graph_case(self, case: GraphCase) -> Outcome:
        return _run_graph(self.tgrad, case, "cpu", lambda route: None, self.ROUTES, self._emulate)

    def _table(self, op: str) -> np.ndarray:
        """The table a kernel binds for op (a unary op's results over every bf16 bit pattern, or a
        derivative op's table of f'(x)), as the launcher uploads it."""
        tables = self.__dict__.setdefault("_tables", {})
        if op not in tables:
            tables[op] = self.render.device_table(op)
        table: np.ndarray = tables[op]
        return table

    def _emulate(self, tgrad: Any, case: GraphCase, tensors: list[Any], apply_view: Any,
                 bases: list[np.ndarray], route: str) -> tuple[np.ndarray, list[str]]:
        """The program's schedule run on the emulator: (result bits, the fused kernels)."""
        assert self.emu is not None
        memory = {t.buffer_id: np.ascontiguousarray(b).view(np.uint16).ravel() for t, b in zip(tensors, bases)}
        with _constants_into(memory):
            out = _build_program(tgrad, case, tensors, apply_view)
        try:
            fused = _fused_kernels(out)
            nsteps = len(out.explain(json=True)["steps"])
            kernels = [self.render.render_tensor(out, route, self.LANG, step=i) for i in range(nsteps)]
            self.emu.compile_many([k.source for k in kernels if 0 not in k.grid])
            steps = out.explain(json=True)["steps"]
            for k, step in zip(kernels, steps):
                self._run_step(k, memory, step)
            last = kernels[-1]
            result = memory[last.buffer_ids[last.buffer_names.index("dst" if last.route == "copy" else "c")]]
            return np.array(result.reshape(out.shape)), fused
        finally:
            out.release()

    def _run_step(self, k: Any, memory: dict[int, np.ndarray], step: dict[str, Any]) -> None:
        """One kernel: its inputs from memory (tables from the CPU), its output into memory; the
        elements a binary64 kernel flags (pow) recomputed by the CPU, as the device executor does."""
        assert self.emu is not None
        tables = k.tables()
        out_at = k.buffer_names.index("dst" if k.route == "copy" else "c")
        flags_at = k.buffer_names.index("f") if "f" in k.buffer_names else -1
        bufs = []
        for i, (name, bid, n) in enumerate(zip(k.buffer_names, k.buffer_ids, k.buffer_elements)):
            if i == out_at:
                bufs.append(np.full(n, 0xFFFF, np.uint16))  # unwritten outputs show as NaN
            elif i == flags_at:
                bufs.append(np.full(n, 0xFFFFFFFF, np.uint32))  # every flag written by the kernel
            else:
                bufs.append(self._table(tables[name]) if bid == 0 else memory[bid][:n])
        if 0 not in k.grid:
            ran = self.emu.run(self.emu.compile(k.source), k.grid, k.threadgroup, bufs,
                               [i not in (out_at, flags_at) for i in range(len(bufs))])
            bufs[out_at] = ran[out_at]
            if flags_at >= 0:
                bufs[out_at] = _rerun_flagged(step, memory, np.array(bufs[out_at]), np.asarray(ran[flags_at]))
        memory[k.buffer_ids[out_at]] = bufs[out_at]

    def environment(self) -> dict[str, Any]:
        import tgrad

        return {"cpu_isa": tgrad.cpu_isa(), "threads": tgrad.num_threads(),
                "library_version": tgrad.version(), "cxx": self.compiler}


def _rerun_flagged(step: dict[str, Any], memory: dict[int, np.ndarray], out: np.ndarray,
                   flags: np.ndarray) -> np.ndarray:
    """A bf16 elementwise step's flagged elements (its op alone, operands through the views explain
    gives) computed by the CPU's loops (tgrad_debug_elementwise), as tg_ew_on_host does."""
    from tgrad import ops
    from tgrad._ffi import ffi, lib

    at = np.flatnonzero(flags[: out.size])
    if not at.size:
        return out
    shape = step["output"]["shape"]
    coords = np.unravel_index(at, shape)
    vals = []
    for operand in step["inputs"][:2]:
        where = operand["offset"] + sum(c * s for c, s in zip(coords, operand["strides"]))
        vals.append(np.ascontiguousarray(memory[operand["buffer"]][where]).astype(np.uint16))
    got = np.empty(at.size, np.uint16)
    second = ffi.from_buffer("uint16_t[]", vals[1]) if len(vals) == 2 else ffi.NULL
    status = lib.tgrad_debug_elementwise(ops.REGISTRY[step["op"]].code, ffi.from_buffer("uint16_t[]", vals[0]), second,
                                         ffi.from_buffer("uint16_t[]", got), at.size)
    assert status == 0, step["op"]
    out[at] = got
    return out


@contextlib.contextmanager
def _constants_into(memory: dict[int, np.ndarray]) -> Iterator[None]:
    """While a program is built, record the bits of every number it turns into a 0-d tensor (its
    buffer is realized inside libtgrad, out of the emulator's sight) by buffer id. The harness
    wraps tgrad.ops' private constant maker: test tooling, not a tgrad API."""
    from tgrad import ops

    original = ops._constant

    def record(value: object, name: str, device: str = "cpu") -> Any:
        t = original(value, name, device)
        memory[t.buffer_id] = np.array(t.numpy().view(np.uint16)).ravel()
        return t

    ops._constant = record
    try:
        yield
    finally:
        ops._constant = original


def _outside_tc_bound(got_bits: np.ndarray, a_bits: np.ndarray, b_bits: np.ndarray, lang: str) -> str:
    """Why outputs of the tc route break its error bound in `lang` (docs/kernels.md), or "" when
    none does: every output in the bound's domain must be within it (so finite)."""
    s, allowed, in_domain = tc_bound(a_bits, b_bits, lang)
    got = bf16_bits_to_f32(got_bits).astype(np.float64)
    bad = in_domain & ~(np.abs(got - s) <= allowed)  # NaN fails the comparison
    if not bad.any():
        return ""
    i = tuple(int(v) for v in np.argwhere(bad)[0])
    return (f"{int(bad.sum())} of {int(in_domain.sum())} outputs in the bound's domain break the tc error "
            f"bound; first C{list(i)}: got {got[i]!r}, exact {s[i]!r}, allowed error {allowed[i]!r}")


class _CudaEmu(_MslEmu):
    """libtgrad's generated CUDA C++ (naive and tiled routes bit-exact, tc within its bound where
    it renders; graph steps) compiled against the CUDA emulator of tests/cuda_emu (the MSL
    emulator's runtime and checks) and run on the CPU."""

    BOUNDED_ROUTES = ("tc",)
    MMA = "truncate"  # tensor cores align and truncate (docs/kernels.md); naive and tiled use no mma

    NAME, LANG, DIR_VARIABLE, DEFAULT_DIR = "cuda-emu", "cuda", "TGRAD_CUDA_EMU_DIR", DEFAULT_CUDA_EMU_DIR


def _load_driver(path: Path, name: str = "_conformance_msl_emu_driver") -> Any:
    import importlib.util

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look the module up while the class body runs
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


class _OpenCL:
    """libtgrad on device="opencl" (or, as _Cuda, "cuda"): operands uploaded, views applied on the
    device, each case run with the naive and the tiled route forced; it passes only if both are
    bit-exact."""

    ROUTES = ("naive", "tiled")
    runs_graphs = True
    DEVICE = "opencl"

    def __init__(self) -> None:
        self.unavailable = ""
        name = self.DEVICE
        try:
            import tgrad
            from tgrad._ffi import lib
        except ImportError as exc:
            self.unavailable = f"backend_unavailable: tgrad is not importable ({exc})"
            return
        row = next((b for b in tgrad.backends() if b.name == name), None)
        if row is None:
            self.unavailable = f"backend_unavailable: libtgrad has no {name} backend"
            return
        if not row.built or not row.available:
            self.unavailable = f"backend_unavailable: {name}: {row.device}"
            return
        self.tgrad, self.lib, self.device = tgrad, lib, row.device
        self.codes = {"naive": int(lib.TGRAD_ROUTE_NAIVE), "tiled": int(lib.TGRAD_ROUTE_TILED)}

    def run_case(self, case: Case) -> Outcome:
        tgrad, lib = self.tgrad, self.lib
        a_bits, b_bits, a_base, b_base, apply_view = _operands(case)
        want = matmul_bits(a_bits, b_bits)
        failures = []
        with tgrad.Tensor.from_numpy(a_base, device=self.DEVICE) as a0, \
                tgrad.Tensor.from_numpy(b_base, device=self.DEVICE) as b0:
            a, b = apply_view(a0, "a"), apply_view(b0, "b")
            try:
                for route in self.ROUTES:
                    # The device route is process-wide; tgrad has no Python setter for it yet.
                    if lib.tgrad_set_device_route(self.codes[route]) != 0:
                        failures.append(f"{route}: cannot force the route")
                        continue
                    try:
                        with a @ b as c:
                            got = c.numpy().view(np.uint16)
                            taken = c.route
                    except tgrad.TgradError as exc:
                        failures.append(f"{route}: {exc.code}: {str(exc)[:300]}")
                        continue
                    if taken != f"{self.DEVICE}.{route}":
                        failures.append(f"{route}: ran as {taken}")
                    elif got.shape != want.shape or not np.array_equal(got, want):
                        failures.append(f"{route}: {_first_difference(got, want)}")
            finally:
                lib.tgrad_set_device_route(0)
                a.release()
                b.release()
        if failures:
            return "fail", "; ".join(failures)
        return "pass", ""

    def run_graph_case(self, case: GraphCase) -> Outcome:
        """The program on the device with each route forced for its matmuls (elementwise steps
        take the elementwise route), fused and unfused."""
        def force(route: str) -> None:
            self.lib.tgrad_set_device_route(self.codes[route] if route else 0)

        def run(tgrad: Any, case: GraphCase, tensors: list[Any], apply_view: Any, *_: Any) -> tuple[np.ndarray, list[str]]:
            return _run_program(tgrad, case, tensors, apply_view)

        return _run_graph(self.tgrad, case, self.DEVICE, force, self.ROUTES, run)

    def environment(self) -> dict[str, Any]:
        if self.unavailable:
            return {}
        return {"device": self.device, "cpu_isa": self.tgrad.cpu_isa(),
                "library_version": self.tgrad.version()}


class _Cuda(_OpenCL):
    """libtgrad on device="cuda", through its CUDA backend, as _OpenCL runs device="opencl"."""

    DEVICE = "cuda"


class _Unavailable:
    """A backend libtgrad does not dispatch to here: every case is skipped with the reason."""

    def __init__(self, name: str) -> None:
        try:
            import tgrad

            rows = {b.name: b for b in tgrad.backends()}
        except ImportError as exc:
            self.unavailable = f"backend_unavailable: tgrad is not importable ({exc})"
            return
        row = rows.get(name)
        if row is None:
            self.unavailable = f"backend_unavailable: libtgrad has no {name} backend"
        elif not row.built or not row.available:
            self.unavailable = f"backend_unavailable: {name}: {row.device}"
        else:
            self.unavailable = (f"backend_unavailable: {name} is available ({row.device}), but "
                                "libtgrad does not dispatch matmul to it yet")

    def run_case(self, case: Case) -> Outcome:  # pragma: no cover - never called
        raise AssertionError("unavailable backend")

    def environment(self) -> dict[str, Any]:
        return {}


def _backend(name: str, emu_dir: Path | None) -> Any:
    if name == "cpu":
        return _Cpu()
    if name == "msl-emu":
        return _MslEmu(emu_dir)
    if name == "cuda-emu":
        return _CudaEmu(emu_dir)
    if name == "opencl":
        return _OpenCL()
    if name == "cuda":
        return _Cuda()
    if name == "metal":
        return _Unavailable(name)
    raise ValueError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")


# ---- the run --------------------------------------------------------------------------------------
def run(backend: str, roster_name: str = "ci", *, emu_dir: Path | str | None = None,
        cases: Iterable[AnyCase] | None = None,
        progress: Callable[[int, int, AnyCase, Outcome], None] | None = None) -> dict[str, Any]:
    """Run a roster (or the given cases) on a backend and return its attested scorecard."""
    impl = _backend(backend, Path(emu_dir) if emu_dir else None)
    runs_graphs = getattr(impl, "runs_graphs", False)
    selected: list[AnyCase] = list(cases) if cases is not None else [
        *roster(roster_name), *(graph_roster(roster_name) if runs_graphs else [])]
    if not impl.unavailable and hasattr(impl, "prepare"):
        impl.prepare([c for c in selected if isinstance(c, Case)])
    results = []
    for i, case in enumerate(selected):
        if impl.unavailable:
            outcome: Outcome = ("skip", impl.unavailable)
        elif isinstance(case, GraphCase):
            outcome = (impl.run_graph_case(case) if runs_graphs else
                       ("skip", f"{backend} runs matmul cases only, not graphs of ops"))
        else:
            outcome = impl.run_case(case)
        results.append({"id": case.id, "family": case.family, "outcome": outcome[0],
                        "detail": outcome[1]})
        if progress is not None:
            progress(i, len(selected), case, outcome)
    environment = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "machine": platform.machine(),
    }
    environment.update(impl.environment())
    return scorecard(backend, roster_name, results, environment)


def scorecard(backend: str, roster_name: str, results: list[dict[str, str]],
              environment: dict[str, Any]) -> dict[str, Any]:
    """Assemble and attest a scorecard from per-case results."""
    count = {o: sum(1 for r in results if r["outcome"] == o) for o in ("pass", "fail", "skip")}
    requested = len(results)
    funnel = {"requested": requested, "executed": count["pass"] + count["fail"],
              "passed": count["pass"], "failed": count["fail"], "skipped": count["skip"]}
    min_executed = max(1, math.ceil(MIN_EXECUTED_FRACTION * requested))
    if funnel["failed"]:
        claim = f"no claim: {funnel['failed']} of {funnel['executed']} executed cases failed"
    elif funnel["executed"] < min_executed:
        claim = (f"no claim: {funnel['executed']} of {requested} requested cases executed, below "
                 f"the minimum of {min_executed}")
    else:
        claim = f"bit-exact on {funnel['passed']} of {requested} requested cases"
        if funnel["skipped"]:
            claim += f" ({funnel['skipped']} skipped, not covered)"
    card: dict[str, Any] = {
        "suite": {"name": "tgrad-conformance", "version": SUITE_VERSION, "roster": roster_name,
                  "oracle": ORACLES.get(backend, DEFAULT_ORACLE), "pass_means": PASS_MEANS[backend]},
        "backend": backend,
        "environment": environment,
        "cases": results,
        "funnel": funnel,
        "min_executed": min_executed,
        "claim": claim,
        "claim_made": not claim.startswith("no claim"),
    }
    card["attestation"] = {
        "algorithm": "sha256",
        "over": "canonical JSON (sorted keys, separators ',' ':', UTF-8) of every field but "
                "environment and attestation",
        "digest": attest(card),
    }
    return card


# ---- files ----------------------------------------------------------------------------------------
def scorecard_path(backend: str, directory: Path | str | None = None) -> Path:
    return Path(directory or SCORECARD_DIR) / f"{backend}.json"


def write(card: dict[str, Any], path: Path | str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(card, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def load(path: Path | str) -> dict[str, Any]:
    return dict(json.loads(Path(path).read_text()))


def check(fresh: dict[str, Any], committed: dict[str, Any]) -> list[str]:
    """Differences between a fresh scorecard and the committed one that CI fails on: the suite
    (version, roster, backend), cases added or removed, any case outcome, the funnel. Details,
    the environment and the attestation are not compared (they may differ between machines)."""
    diffs: list[str] = []
    for key in ("version", "roster"):
        old, new = committed.get("suite", {}).get(key), fresh.get("suite", {}).get(key)
        if old != new:
            diffs.append(f"suite {key}: committed {old!r}, now {new!r}")
    if committed.get("backend") != fresh.get("backend"):
        diffs.append(f"backend: committed {committed.get('backend')!r}, now {fresh.get('backend')!r}")
    old_cases = {c["id"]: c for c in committed.get("cases", [])}
    new_cases = {c["id"]: c for c in fresh.get("cases", [])}
    for case_id in sorted(old_cases.keys() - new_cases.keys()):
        diffs.append(f"case {case_id}: in the committed scorecard, not run now")
    for case_id in sorted(new_cases.keys() - old_cases.keys()):
        diffs.append(f"case {case_id}: run now ({new_cases[case_id]['outcome']}), not in the "
                     "committed scorecard")
    for case_id in [c["id"] for c in fresh.get("cases", []) if c["id"] in old_cases]:
        old, new = old_cases[case_id], new_cases[case_id]
        if old["outcome"] != new["outcome"]:
            detail = f": {new['detail']}" if new.get("detail") else ""
            diffs.append(f"case {case_id}: committed {old['outcome']}, now {new['outcome']}{detail}")
    old_funnel, new_funnel = committed.get("funnel", {}), fresh.get("funnel", {})
    for key in sorted(set(old_funnel) | set(new_funnel)):
        if old_funnel.get(key) != new_funnel.get(key):
            diffs.append(f"funnel {key}: committed {old_funnel.get(key)}, now {new_funnel.get(key)}")
    return diffs
